"""Presenting a result (the dict of :func:`spark_pg.eval.harness.summarize`): a text table, an HTML report
and a PNG bar chart of recall@10 by category and system."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_pg.eval.chart_text import literal
from spark_pg.eval.metrics import METRICS
from spark_pg.file_writes import replace_file
from spark_pg.report_meta import add_footer, footer_text

REPORT_FILE = "report.html"
PLOT_FILE = "recall_by_category.png"


def _ok(result: Mapping[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in result["systems"].items() if s.get("status") == "ok"}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _metric(scores: Mapping[str, float] | None, name: str) -> float | None:
    return None if scores is None else scores.get(name)


def partial(result: Mapping[str, Any]) -> str | None:
    """Which questions were asked when ``--conversations`` or ``--limit`` left some out (``first N of M
    questions``, ``N of M questions: conversations a, b``), else None."""
    if not result.get("partial"):
        return None
    chosen = result.get("conversations_asked")
    first = "first " if result.get("limit") == result["queries"] else ""
    of = f"{first}{result['queries']:,} of {result['queries_total']:,} questions"
    return f"{of}: conversations {', '.join(chosen)}" if chosen else of


def headline(result: Mapping[str, Any]) -> str:
    counts = result["counts"]
    params = result.get("params")
    part = partial(result)
    limited = f"--limit {result['limit']}; " if result.get("limit") and part else ""
    asked = f"{part} ({limited}" if part else f"{result['queries']:,} questions ("
    return (
        f"{result['dataset']}: {asked}{counts['answered']:,} with an answer, "
        f"{counts['no_answer']:,} without), {result['memories']:,} memories in {result['conversations']} "
        f"conversations; {result['retrieved_per_query']} retrieved per question; model {result['model']}"
        + (f"; spark.retrieve params {json.dumps(params, sort_keys=True)}" if params else "")
    )


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _category_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    categories = list(result["counts"]["by_category"])
    header = [
        "recall@10",
        *[f"cat {c} (n={result['counts']['by_category'][c]})" for c in categories],
        "overall",
        "no answer",
    ]
    rows = []
    for name, s in _ok(result).items():
        rows.append(
            [
                name,
                *[_fmt(_metric(s["by_category"][c], "recall@10")) for c in categories],
                _fmt(_metric(s["overall"], "recall@10")),
                _fmt(_metric(s["no_answer"], "recall@10")),
            ]
        )
    return header, rows


def _overall_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    metrics = result.get("metrics") or list(METRICS)  # with --k, recall@k too
    header = [f"overall (n={result['counts']['answered']})", *metrics, "retrieve p50 ms", "retrieve p95 ms"]
    rows = []
    for name, s in _ok(result).items():
        latency = s["latency_ms"]
        rows.append(
            [
                name,
                *[_fmt(_metric(s["overall"], m)) for m in metrics],
                _fmt(latency["retrieve_p50"], 2),
                _fmt(latency["retrieve_p95"], 2),
            ]
        )
    return header, rows


def _embed_line(result: Mapping[str, Any]) -> str:
    for s in _ok(result).values():
        latency = s["latency_ms"]
        return (
            f"query embedding: p50 {_fmt(latency['embed_p50'], 2)} ms, p95 {_fmt(latency['embed_p95'], 2)} ms"
        )
    return "query embedding: no system ran"


def _skipped(result: Mapping[str, Any]) -> list[str]:
    return [
        f"{name}: {s['status']}: {s.get('message')}"
        for name, s in result["systems"].items()
        if s.get("status") != "ok"
    ]


def format_text(result: Mapping[str, Any]) -> str:
    """A readable summary: recall@10 by system and category, then the overall metrics and latency."""
    parts = [headline(result), "", _table(*_category_rows(result)), "", _table(*_overall_rows(result))]
    parts += ["", _embed_line(result)]
    skipped = _skipped(result)
    if skipped:
        parts += ["", *skipped]
    return "\n".join(parts)


def plot_recall(result: Mapping[str, Any], path: Path) -> Path:
    """Grouped bars: recall@10 per category (and overall), one bar per system. Written with Agg."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    systems = _ok(result)
    categories = list(result["counts"]["by_category"])
    groups = [*categories, "overall"]
    fig = Figure(figsize=(max(6.0, 1.3 * len(groups) + 2), 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(systems))
    for i, (name, s) in enumerate(systems.items()):
        values = [_metric(s["by_category"][c], "recall@10") for c in categories]
        values.append(_metric(s["overall"], "recall@10"))
        xs = [g + (i - (len(systems) - 1) / 2) * width for g in range(len(groups))]
        # a group with no answered question has no bar and says n/a: drawn as 0 it read as all missed
        ax.bar(xs, [0.0 if v is None else v for v in values], width, label=literal(name))
        for x, v in zip(xs, values, strict=True):
            if v is None:
                ax.text(x, 0.01, "n/a", ha="center", va="bottom", fontsize="x-small", rotation=90)
    ax.set_xticks(range(len(groups)), [literal(f"cat {g}") if g != "overall" else g for g in groups])
    ax.set_ylim(0, 1)
    ax.set_ylabel("recall@10")
    part = partial(result)
    title = f"{result['dataset']}: recall@10 by category" + (f" ({part})" if part else "")
    ax.set_title(literal(title), wrap=True)  # wrapped: the conversations of --conversations ran off the image
    ax.grid(axis="y", alpha=0.3)
    if systems:
        ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout(rect=(0, add_footer(fig, result), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _no_answer_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = [f"no answer (n={result['counts']['no_answer']})", *METRICS]
    rows = [[name, *[_fmt(_metric(s["no_answer"], m)) for m in METRICS]] for name, s in _ok(result).items()]
    return header, rows


def write_report(result: Mapping[str, Any], folder: Path) -> Path:
    """Write ``folder``/report.html (the PNG embedded) and ``folder``/recall_by_category.png."""
    folder.mkdir(parents=True, exist_ok=True)
    png = plot_recall(result, folder / PLOT_FILE)
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    skipped = "".join(f"<li>{html.escape(line)}</li>" for line in _skipped(result))
    part = partial(result)
    title = html.escape(result["dataset"] + (f" ({part})" if part else ""))
    measured = footer_text(result)  # None in a result of before the run and machine were recorded
    started = f"<br>Started {html.escape(measured)}." if measured else ""
    descriptions = "".join(
        f"<li><b>{html.escape(name)}</b>: {html.escape(str(s.get('description', '')))}</li>"
        for name, s in _ok(result).items()
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>spark_pg eval: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
</style></head><body>
<h1>spark_pg retrieval evaluation: {title}</h1>
<p>{html.escape(headline(result))}.<br>Run {html.escape(result["date"])} on scratch database
<code>{html.escape(result["database"])}</code>. Metrics are means over questions; "overall" covers the
questions with an answer, "no answer" the others.{started}</p>
<ul>{descriptions}</ul>
<h2>recall@10 by category</h2>
{_html_table(*_category_rows(result))}
<img src="data:image/png;base64,{image}" alt="recall@10 by category and system">
<h2>Overall</h2>
{_html_table(*_overall_rows(result))}
<p>{html.escape(_embed_line(result))} (once per question, shared by all systems).</p>
<h2>Questions without an answer</h2>
{_html_table(*_no_answer_rows(result))}
{f"<h2>Skipped</h2><ul>{skipped}</ul>" if skipped else ""}
</body></html>
"""
    path = folder / REPORT_FILE
    replace_file(path, page)  # whole or not at all
    return path
