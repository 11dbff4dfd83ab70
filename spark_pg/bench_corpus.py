"""Benchmark corpus vectors: real embeddings, and for corpora past ``real`` texts, vectors derived from them.

Embedding a million texts takes about an hour on 2 cores, so for latency runs past ``real`` texts (default
100,000) only the first ``real`` texts are embedded with the configured model (cached on disk, the same
cache file as ``spark-pg bench`` at that size); every later text i takes the real vector of a source text
that shares its template, plus Gaussian noise, renormalised to unit length:

* source: a real-embedded text with the same (action, object, context, reason); if none, the same (action,
  object, context); else the same (object, context), which every corpus of 100,000 covers (then the same
  object, then any, for small ``real``). Among several candidates a seeded random draw picks the source.
* noise: independent N(0, sigma^2) per component with sigma = sqrt((1 / c^2 - 1) / dim), which puts the
  derived vector at cosine about c from its source; c is the median cosine measured between real
  embeddings of texts that share the full template (they differ only in the note number), so a derived text
  sits as close to its source as a real one would.

Texts and vectors therefore agree (a query's keyword and vector pools find the same memories), and the
quality reference of :func:`spark_pg.bench_retrieve.quality` stays meaningful; quality claims are made on real
data elsewhere (LoCoMo, the advisor scenarios).
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from spark_pg import synthetic
from spark_pg.embedding import Embedder
from spark_pg.errors import InputError

REAL_DEFAULT = 100_000
Template = tuple[str, str, str, str]
# a derived text's source: the most alike real text, by these keys in turn
LEVELS: dict[str, Callable[[Template], tuple[str, ...]]] = {
    "same_template": lambda t: t,
    "same_action_object_context": lambda t: t[:3],
    "same_object_context": lambda t: t[1:3],
    "same_object": lambda t: t[1:2],
    "any": lambda t: (),
}


@dataclass(frozen=True)
class Derivation:
    """How the vectors past ``real`` were made (all zeros / empty when every vector is real)."""

    real: int
    derived: int
    template_cosine: float
    sigma: float
    sources: dict[str, int]  # how many derived vectors took their source at each level of likeness

    def as_json(self) -> dict[str, Any]:
        return {
            "real_vectors": self.real,
            "derived_vectors": self.derived,
            "median_cosine_same_template": round(self.template_cosine, 4),
            "noise_sigma": round(self.sigma, 6),
            "sources": self.sources,
            "method": "all vectors real"
            if not self.derived
            else "the unit vector of a seeded random real-embedded text at the most specific level of "
            "'sources' (same template, else same action/object/context, same object/context, same object, "
            "any) + N(0, sigma^2) per component, renormalised; sigma from the median cosine of 2,000 sampled "
            "pairs of real texts sharing a template (coarser keys when fewer than 100 such groups) "
            "(spark_pg/bench_corpus.py)",
        }


def embed_cached(
    embedder: Embedder, texts: list[str], cache: Path, label: str, progress: bool, *, queries: bool = False
) -> np.ndarray:
    """Embed ``texts`` once, as documents or (``queries``) as the product embeds a query (the model's query
    prefix: a BGE query embedded as a document is a vector retrieval never sees); later runs load the .npy
    file."""
    mode = f"\nquery:{embedder.spec.query_prefix}" if queries else ""  # a mode of its own, a file of its own
    digest = hashlib.sha256(("\n".join(texts) + embedder.spec.name + mode).encode()).hexdigest()[:16]
    path = cache / f"{label}-{len(texts)}-{digest}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    out = np.zeros((len(texts), embedder.spec.dim), dtype=np.float32)
    step = 512
    with tqdm(total=len(texts), desc=f"embed {label}", unit="text", disable=not progress) as bar:
        for start in range(0, len(texts), step):
            batch = texts[start : start + step]
            if queries:
                out[start : start + len(batch)] = np.stack([embedder.embed_query(t) for t in batch])
            else:
                out[start : start + len(batch)] = np.stack(embedder.embed_documents(batch, batch_size=32))
            bar.update(len(batch))
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, out)
    tmp.replace(path)
    return out


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: np.ndarray = rows / np.maximum(norms, 1e-12)
    return out


def template_cosine(
    real: np.ndarray, keys: list[tuple[str, str, str, str]], seed: int, pairs: int = 2000
) -> float:
    """Median cosine between real vectors of texts sharing the full template (sampled pairs); with fewer than
    100 such groups (small ``real``), texts sharing (action, object, context), then (object, context)."""
    multi: list[list[int]] = []
    for width in (4, 3, 2):
        groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[key[:width] if width > 2 else key[1:3]].append(i)
        multi = [g for g in groups.values() if len(g) > 1]
        if len(multi) >= 100:
            break
    if not multi:
        raise InputError("no two real texts share an object and context: embed more real texts (--real)")
    rng = random.Random(seed)
    unit = _unit(real)
    sims = []
    for _ in range(pairs):
        a, b = rng.sample(rng.choice(multi), 2)
        sims.append(float(unit[a] @ unit[b]))
    return float(np.median(sims))


def derive(
    real: np.ndarray, templates: list[tuple[str, str, str, str]], seed: int, progress: bool
) -> tuple[np.ndarray, Derivation]:
    """Vectors for every template: the first ``len(real)`` are ``real``, the rest derived (module doc)."""
    n_real, dim = real.shape
    if len(templates) <= n_real:
        return real[: len(templates)], Derivation(len(templates), 0, 0.0, 0.0, {})
    tables: dict[str, dict[tuple[str, ...], list[int]]] = {level: defaultdict(list) for level in LEVELS}
    for i, template in enumerate(templates[:n_real]):
        for level, table in tables.items():
            table[LEVELS[level](template)].append(i)
    cosine = template_cosine(real, templates[:n_real], seed)
    sigma = float(np.sqrt(max(1.0 / cosine**2 - 1.0, 0.0) / dim))
    rng = random.Random(seed)
    counts = dict.fromkeys(LEVELS, 0)
    sources = np.empty(len(templates) - n_real, dtype=np.int64)
    for j, template in enumerate(templates[n_real:]):
        for level, table in tables.items():
            candidates = table.get(LEVELS[level](template))
            if candidates:  # the last level (any text) always has some
                sources[j] = candidates[rng.randrange(len(candidates))]
                counts[level] += 1
                break
    out = np.empty((len(templates), dim), dtype=np.float32)
    out[:n_real] = real
    noise = np.random.default_rng(seed)
    unit = _unit(real)
    step = 50_000
    with tqdm(total=len(sources), desc="derive vectors", unit="vec", disable=not progress) as bar:
        for start in range(0, len(sources), step):
            block = sources[start : start + step]
            rows = unit[block] + noise.normal(0.0, sigma, size=(len(block), dim)).astype(np.float32)
            out[n_real + start : n_real + start + len(block)] = _unit(rows)
            bar.update(len(block))
    return out, Derivation(n_real, len(sources), cosine, sigma, {k: v for k, v in counts.items() if v})


def corpus_vectors(
    embedder: Embedder, n: int, seed: int, cache: Path, real: int, progress: bool
) -> tuple[list[str], np.ndarray, Derivation]:
    """The corpus texts of :func:`spark_pg.synthetic.texts` and their vectors (real up to ``real``)."""
    if real < 1:
        raise InputError(f"real must be at least 1, got {real}")
    texts = synthetic.texts(n, seed)
    head = embed_cached(embedder, texts[:real], cache, "corpus", progress)
    vectors, how = derive(head, synthetic.templates(n, seed), seed, progress)
    return texts, vectors, how
