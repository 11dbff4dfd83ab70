"""`spark-pg eval --scenarios`: the advisor on tool-call scenarios over a noisy insight pool.

A scenario folder holds ``insights.yaml`` (memories in the ingest format; ``metadata.noise`` labels noise,
``metadata.dup_group`` near-duplicates: both are labels, stripped before loading) and ``scenarios.yaml``
(tool calls with the keys of the memories that truly help). Each run loads the pool and the cold-start pack
into a fresh scratch database and asks every scenario through :class:`~spark_pg.advisor.Advisor`, and through
a keyword-matching baseline (the predecessor's approach: an OR keyword query over the raw tool call).

Metrics per system, over the scenarios (and per category and split):
- ``precision@5``: relevant items among those delivered (at most 5); a scenario whose right answer is no
  advice scores 1 when nothing is delivered and 0 otherwise; one with relevant items and nothing delivered
  scores 0.
- ``noise_rate``: delivered items labelled noise, over all items delivered.
- ``recall@5``: relevant items delivered, over the relevant items (scenarios with some).
- ``advise_ms``: p50 / p95 of the whole call, query embedding included.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tqdm import tqdm

from spark_pg import report_meta, schema, scratch
from spark_pg.advisor import MAX_TOOL_NAME, Advisor, AdvisorOptions
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.db import connect, database_url
from spark_pg.embedding import Embedder, load_embedder
from spark_pg.errors import InputError
from spark_pg.eval.chart_text import literal
from spark_pg.eval.harness import check_params
from spark_pg.ingest import ingest
from spark_pg.records import MemoryIn, read_file
from spark_pg.rowfiles import read_text_file, string_problem, text_problem, yaml_rows

TENANT = "scenarios"
LABELS = ("noise", "dup_group")
SCENARIO_FILE_MAX_BYTES = 16 << 20  # scenarios.yaml is read whole
KEYWORD_BASELINE = """
SELECT key FROM spark.memories
WHERE tenant = %(tenant)s AND tsv @@ spark._or_tsquery(%(text)s)
ORDER BY ts_rank(tsv, spark._or_tsquery(%(text)s)) DESC, key
LIMIT 5
"""


@dataclass(frozen=True)
class Scenario:
    id: str
    category: str
    split: str
    tool_name: str
    tool_input: Any
    task_context: str
    relevant: frozenset[str]


@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    delivered: tuple[str, ...]
    ms: float


def default_folder() -> Path:
    return Path(str(resources.files("spark_pg") / "data" / "scenarios"))


def load_scenarios(folder: Path) -> list[Scenario]:
    path = folder / "scenarios.yaml"

    def fail(line: int, message: str) -> InputError:
        return InputError(f"{path} line {line}: {message}" if line else f"{path}: {message}")

    # the guarded reader: a FIFO or a device is refused, not read forever
    text = read_text_file(path, fail, SCENARIO_FILE_MAX_BYTES)
    # the loader of every hand-written file: no aliases, bounded nesting and integers, no repeated keys
    found = yaml_rows(text, fail, "needs a 'scenarios' list", "scenarios", other_keys=True)
    items = [item for _, item in found]
    if not items:
        raise InputError(f"{path}: needs a non-empty 'scenarios' list")
    out = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            raise InputError(f"{path}: scenario {i}: must be a mapping, not {type(raw).__name__}")
        # a field of another type was taken as its str(): tool_name null as "None", category [1] as "[1]"
        problem = _field_problem(raw) or _label_problem(raw, seen)
        if problem:  # each of these was taken silently and scored a scenario that could not be right
            raise InputError(f"{path}: scenario {i}: {problem}")
        out.append(
            Scenario(
                id=raw["id"],
                category=raw["category"],
                split=raw.get("split", "tune"),
                tool_name=raw["tool_name"],
                tool_input=raw.get("tool_input"),
                task_context=raw.get("task_context") or "",
                relevant=frozenset(raw.get("relevant") or ()),
            )
        )
        seen[out[-1].id] = i
    return out


# a scenario's required text fields, each a non-empty string of at most this many characters
REQUIRED_TEXT = {"id": 200, "category": 64, "tool_name": MAX_TOOL_NAME}


def _field_problem(raw: Mapping[str, Any]) -> str | None:
    """What is wrong with a scenario's id, category, tool_name (each a non-empty string) or task_context (a
    string, which may be empty or left out), or None."""
    for name, max_len in REQUIRED_TEXT.items():
        if name not in raw:
            return f"field {name!r} is required"
        problem = text_problem(raw[name], max_len)
        if problem:
            return f"field {name!r} {problem}"
    context = raw.get("task_context")
    if context is not None:
        problem = f"must be a string, not {type(context).__name__}" if not isinstance(context, str) else None
        problem = problem or string_problem(context)
        if problem:
            return f"field 'task_context' {problem}"
    return None


SPLITS = ("tune", "holdout")


def _label_problem(raw: Mapping[str, Any], seen: Mapping[str, int]) -> str | None:
    """What is wrong with a scenario's id, split or relevance labels, or None."""
    if "id" in raw and str(raw["id"]) in seen:  # the later one replaced the earlier in the results
        return f"id {raw['id']!r} is also scenario {seen[str(raw['id'])]}"
    if raw.get("split", "tune") not in SPLITS:  # in neither --split
        return f"split must be one of {', '.join(SPLITS)}, got {raw.get('split')!r}"
    relevant = raw.get("relevant")
    if relevant is not None and (
        not isinstance(relevant, list) or not all(isinstance(k, str) and k for k in relevant)
    ):  # a string was read as its characters
        return f"relevant must be a list of memory keys, got {relevant!r}"
    return None


def check_labels(scenarios: Sequence[Scenario], keys: frozenset[str], folder: Path) -> None:
    """Every relevant key must be a memory of the pool: one that is not can never be delivered."""
    for scenario in scenarios:
        unknown = sorted(scenario.relevant - keys)
        if unknown:
            raise InputError(
                f"{folder / 'scenarios.yaml'}: scenario {scenario.id!r}: relevant key {unknown[0]!r} is "
                "not a memory of insights.yaml"
            )


def _score(outcomes: Sequence[Outcome], noise: frozenset[str]) -> dict[str, Any]:
    precisions, recalls, delivered, noisy = [], [], 0, 0
    for o in outcomes:
        hits = sum(1 for key in o.delivered if key in o.scenario.relevant)
        if o.delivered:
            precisions.append(hits / len(o.delivered))
        else:
            precisions.append(0.0 if o.scenario.relevant else 1.0)
        if o.scenario.relevant:
            recalls.append(hits / len(o.scenario.relevant))
        delivered += len(o.delivered)
        noisy += sum(1 for key in o.delivered if key in noise)
    ms = [o.ms for o in outcomes]
    return {
        "precision@5": round(float(np.mean(precisions)), 4) if precisions else None,
        "noise_rate": round(noisy / delivered, 4) if delivered else 0.0,
        "recall@5": round(float(np.mean(recalls)), 4) if recalls else None,
        "delivered": delivered,
        "advise_ms": {
            "p50": round(float(np.percentile(ms, 50)), 2) if ms else None,
            "p95": round(float(np.percentile(ms, 95)), 2) if ms else None,
        },
    }


def summarize_system(outcomes: Sequence[Outcome], noise: frozenset[str]) -> dict[str, Any]:
    result = _score(outcomes, noise)
    for group in ("category", "split"):
        values = sorted({getattr(o.scenario, group) for o in outcomes})
        result[f"by_{group}"] = {
            v: _score([o for o in outcomes if getattr(o.scenario, group) == v], noise) for v in values
        }
    result["scenarios"] = {
        o.scenario.id: {"delivered": list(o.delivered), "relevant": sorted(o.scenario.relevant)}
        for o in outcomes
    }
    return result


def unlabelled(records: list[MemoryIn]) -> list[MemoryIn]:
    """``records`` without the evaluation's labels in their metadata (:data:`LABELS`): never stored."""
    return [
        replace(r, metadata={k: v for k, v in (r.metadata or {}).items() if k not in LABELS}) for r in records
    ]


def _load_pool(url: str, records: list[MemoryIn], embedder: Embedder, settings: Settings) -> frozenset[str]:
    noise = frozenset(r.key for r in records if (r.metadata or {}).get("noise"))
    clean = unlabelled(records)
    with connect(url) as conn:
        ingest(conn, clean, embedder, batch_size=settings.get_int("embedding.batch_size"))
        conn.commit()
    with SparkClient(settings, url=url) as client:
        client.load_seed_pack()
    return noise


def _ask(
    name: str,
    scenarios: Sequence[Scenario],
    call: Callable[[Scenario], list[str]],
    progress: bool,
) -> list[Outcome]:
    out = []
    for s in tqdm(scenarios, desc=name, unit="call", disable=not progress):
        t0 = time.perf_counter()
        delivered = call(s)
        out.append(Outcome(s, tuple(delivered[:5]), (time.perf_counter() - t0) * 1000))
    return out


def database_name(folder: Path, model: str) -> str:
    """The scratch database of an evaluation of ``folder``'s scenarios with ``model`` (one at a time)."""
    digest = hashlib.sha256(f"{folder.resolve()}:{model}".encode()).hexdigest()[:12]
    return f"spark_scen_{digest}"


def evaluate_scenarios(
    settings: Settings,
    folder: Path | None = None,
    *,
    server_url: str | None = None,
    embedder: Embedder | None = None,
    options: AdvisorOptions | None = None,
    split: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the advisor and the keyword baseline on every scenario (of ``split``, if given); the result object
    of ``--json``. ``options``: the advisor's (default: the product defaults)."""
    started = report_meta.run_info()
    folder = folder or default_folder()
    every = load_scenarios(folder)
    pool = read_file(folder / "insights.yaml", TENANT)
    check_labels(every, frozenset(r.key for r in pool), folder)
    scenarios = [s for s in every if split is None or s.split == split]
    if not scenarios:
        raise InputError(f"no scenarios{f' in split {split!r}' if split else ''} in {folder}")
    embedder = embedder or load_embedder(settings)
    server = server_url or database_url(settings)
    name = database_name(folder, embedder.spec.name)
    with scratch.claimed(server, name) as mine:
        if not mine:  # dropping its database would end that run (a killed run's copy is claimed by no one)
            raise InputError(
                f"another `eval --scenarios` of {folder} with {embedder.spec.name} is running (it holds "
                f"{name}): wait for it to finish"
            )
        result = _evaluate(
            settings, scenarios, folder, pool, split, embedder, server, name, options, progress
        )
    return result | {"machine": report_meta.machine(), "run": started}


def _evaluate(
    settings: Settings,
    scenarios: list[Scenario],
    folder: Path,
    pool: list[MemoryIn],
    split: str | None,
    embedder: Embedder,
    server: str,
    name: str,
    options: AdvisorOptions | None,
    progress: bool,
) -> dict[str, Any]:
    scratch.drop(server, name)
    url = scratch.create(server, name)
    try:
        schema.install(url)
        if options is not None and options.params:  # as --dataset does: exit 2 naming the key, before loading
            check_params(url, options.params)
        noise = _load_pool(url, pool, embedder, settings)
        with connect(url) as conn:

            def advise(s: Scenario) -> list[str]:
                # each scenario a session of its own, as the independent call it is: in one session the
                # advice an earlier scenario was shown would come back as a repeat, which the hook leaves out
                advisor = Advisor(conn, embedder, TENANT, session_id=f"eval-{s.id}", options=options)
                return [a.key for a in advisor.advise(s.tool_name, s.tool_input, s.task_context)]

            def keyword(s: Scenario) -> list[str]:
                text = f"{s.tool_name} {yaml.safe_dump(s.tool_input)} {s.task_context}"[:5000]
                with conn.transaction():
                    rows = conn.execute(KEYWORD_BASELINE, {"tenant": TENANT, "text": text}).fetchall()
                return [r[0] for r in rows]

            for s in scenarios[:3]:  # warm the model, plans and caches of both systems
                advise(s)
                keyword(s)
            runs = {"advisor": _ask("advisor", scenarios, advise, progress)}
            runs["keyword"] = _ask("keyword", scenarios, keyword, progress)
    finally:
        scratch.drop(server, name)
    return {
        "scenarios": len(scenarios),
        "split": split or "all",
        "folder": str(folder),
        "model": embedder.spec.name,
        "params": dict(options.params) if options is not None else {},  # the advisor's spark.retrieve params
        "systems": {sys_name: summarize_system(out, noise) for sys_name, out in runs.items()},
    }


def _cell(value: float | None) -> str:
    """A metric to 3 places, or '-' where there is none (no scenario of the split has relevant items): it was
    printed 0.000, as if the advisor had missed them all."""
    return "-" if value is None else f"{value:.3f}"


def _with_params(text: str, result: Mapping[str, Any]) -> str:
    """``text`` followed by the advisor's spark.retrieve params, if any were given (``--params``)."""
    params = result.get("params")
    return text + (f"; spark.retrieve params {json.dumps(params, sort_keys=True)}" if params else "")


def format_scenarios(result: Mapping[str, Any]) -> str:
    lines = [_with_params(f"{result['scenarios']} scenarios ({result['model']})", result), ""]
    lines.append(f"{'system':<10} {'P@5':>6} {'noise':>6} {'R@5':>6} {'p50 ms':>7} {'p95 ms':>7}")
    for sys_name, s in result["systems"].items():
        lines.append(
            f"{sys_name:<10} {s['precision@5']:>6.3f} {s['noise_rate']:>6.3f} {_cell(s['recall@5']):>6} "
            f"{s['advise_ms']['p50']:>7.1f} {s['advise_ms']['p95']:>7.1f}"
        )
    lines.append("")
    cats = sorted(next(iter(result["systems"].values()))["by_category"])
    lines.append(f"{'P@5 by category':<16} " + " ".join(f"{c[:12]:>12}" for c in cats))
    for sys_name, s in result["systems"].items():
        lines.append(
            f"{sys_name:<16} " + " ".join(f"{s['by_category'][c]['precision@5']:>12.3f}" for c in cats)
        )
    return "\n".join(lines)


def plot_title(result: Mapping[str, Any]) -> str:
    return _with_params(f"advisor scenarios ({result['scenarios']}): precision@5 by category", result)


def plot_scenarios(result: Mapping[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(result["systems"])
    cats = sorted(result["systems"][systems[0]]["by_category"])
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(systems)
    for i, sys_name in enumerate(systems):
        values = [result["systems"][sys_name]["by_category"][c]["precision@5"] for c in cats]
        ax.bar(np.arange(len(cats)) + i * width, values, width, label=literal(sys_name))
    ticks = np.arange(len(cats)) + width * (len(systems) - 1) / 2
    ax.set_xticks(ticks, [literal(c) for c in cats], rotation=20)
    ax.set_ylabel("precision@5")
    ax.set_ylim(0, 1.05)
    ax.axhline(0.85, color="grey", linestyle=":", label="bar 0.85")
    ax.legend()
    ax.set_title(literal(plot_title(result)), wrap=True)
    fig.tight_layout(rect=(0, report_meta.add_footer(fig, result), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
