"""Where and when a figure was measured (spark_pg.report_meta): the "machine" and "run" objects of the
measuring commands' JSON and the one-line footer of their plots; bench's two plots here, the others beside
their commands' tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spark_pg import bench_retrieve, bench_scale, report_meta

# a report's "machine" and "run", as report_meta makes them
MEASURED: dict[str, Any] = {
    "machine": {
        "cores": 8,
        "cpu": "AMD EPYC 7B13",
        "memory_gib": 31.3,
        "arch": "x86_64",
        "python": "3.11.9",
    },
    "run": {
        "at": "2026-11-24T13:05:09+00:00",
        "command": "spark-pg bench",
        "version": "0.1.0",
        "commit": "1a2b3c4",
    },
}
FOOTER = "2026-11-24 13:05 UTC, commit 1a2b3c4, 8 cores, AMD EPYC 7B13"


def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure saved from now on (saved as before), to read its texts."""
    saved: list[Figure] = []
    save = Figure.savefig

    def keep(fig: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(fig)
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def footers(fig: Figure) -> list[str]:
    """The figure-level texts (titles and labels belong to the axes)."""
    return [t.get_text() for t in fig.texts]


def assert_footer(fig: Figure, expected: str) -> None:
    """One grey line, ``expected``, on the image and below every axes (tick labels and x label included)."""
    assert footers(fig) == [expected]
    (text,) = fig.texts
    assert text.get_color() == "grey" and text.get_fontsize() <= 8
    renderer = FigureCanvasAgg(fig).get_renderer()  # pyplot's figures lose their canvas when closed
    box = text.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0, (box, fig.bbox)
    for ax in fig.axes:
        assert box.y1 <= ax.get_tightbbox(renderer).y0, (box, ax.get_tightbbox(renderer))


def test_bench_uses_the_shared_machine_and_run() -> None:
    """One pair of functions for every command's report: bench_scale and bench_rls still call them through
    bench_retrieve."""
    assert bench_retrieve.machine is report_meta.machine and bench_retrieve.run_info is report_meta.run_info
    machine, run = report_meta.machine(), report_meta.run_info()
    assert set(machine) == {"cores", "cpu", "memory_gib", "arch", "python"} and machine["cores"] >= 1
    assert set(run) == {"at", "command", "version", "commit"} and run["at"].endswith("+00:00")
    assert run["command"].startswith("spark-pg")


def test_the_footer_names_the_date_the_commit_and_the_machine() -> None:
    assert report_meta.footer_text(MEASURED) == FOOTER
    # no commit (not a git checkout), no CPU model (no /proc/cpuinfo): left out, not "None"
    bare = {"run": MEASURED["run"] | {"commit": None}, "machine": MEASURED["machine"] | {"cpu": None}}
    assert report_meta.footer_text(bare) == "2026-11-24 13:05 UTC, 8 cores"
    # another offset is shown in UTC
    shifted = MEASURED | {"run": MEASURED["run"] | {"at": "2026-11-25T01:05:09+12:00"}}
    assert report_meta.footer_text(shifted) == FOOTER
    long_cpu = MEASURED | {"machine": MEASURED["machine"] | {"cpu": "X" * 200}}
    text = report_meta.footer_text(long_cpu)
    assert text is not None and text.endswith("...") and len(text) < len(FOOTER) + report_meta.CPU_CHARS


@pytest.mark.parametrize(
    "result",
    [
        {},  # a report of before the run and machine were recorded
        {"machine": MEASURED["machine"]},
        {"run": None, "machine": None},
        {"run": {"at": 12}},
        {"run": {"at": "yesterday"}},
        {"run": "2026-11-24"},
    ],
)
def test_a_report_without_a_run_time_gets_no_footer(result: dict[str, Any]) -> None:
    assert report_meta.footer_text(result) is None
    fig = Figure()
    assert report_meta.add_footer(fig, result) == 0.0 and fig.texts == []


def test_a_dollar_in_the_cpu_name_is_drawn_as_written(tmp_path: Path) -> None:
    fig = Figure()
    fig.add_subplot().plot([1, 2])
    odd = MEASURED | {"machine": MEASURED["machine"] | {"cpu": "$\\nosuch$ CPU"}}
    assert report_meta.add_footer(fig, odd) > 0
    fig.savefig(tmp_path / "x.png")  # an unknown symbol between two $ raised ValueError here


def _bench_result(baseline: bool) -> dict[str, Any]:
    """A result as bench_retrieve.run shapes it (the parts plot() reads), with made-up figures."""
    timings = [1.0 + i / 100 for i in range(200)]
    stats = {"p50": 2.0, "p95": 2.9, "p99": 3.0}
    result: dict[str, Any] = {"memories": 2000, "tenants": 10, "k": 10, "timings_ms": timings}
    result["retrieve_ms"] = stats
    if baseline:
        result["baseline"] = {
            "baseline_ms": stats,
            "ratio": {"p50": 1.5, "p95": 1.6, "p99": 1.7},
            "per_query": {"baseline_ms": [t * 1.5 for t in timings], "tenant_memories": [100] * 200},
        }
    return result


@pytest.mark.parametrize("baseline", [False, True])
def test_the_bench_plot_has_the_footer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, baseline: bool
) -> None:
    saved = saved_figures(monkeypatch)
    bench_retrieve.plot(_bench_result(baseline) | MEASURED, tmp_path / "with.png")
    bench_retrieve.plot(_bench_result(baseline), tmp_path / "old.png")  # an old result: no footer
    (fig, old) = saved
    assert_footer(fig, FOOTER)
    assert footers(old) == []
    assert (tmp_path / "with.png").read_bytes().startswith(b"\x89PNG")


def test_the_bench_scale_plot_has_the_footer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def row(memories: int) -> dict[str, Any]:
        ms = {"p50": 2.0, "p95": 3.0, "p99": 4.0}
        concurrent = {"clients": 4, "latency_ms": ms, "calls_per_s": 900.0}
        return {"memories": memories, "single_client_ms": ms, "concurrent": concurrent, "baseline_ms": ms}

    report = {"sizes": [row(10_000), row(100_000)], "k": 10}
    saved = saved_figures(monkeypatch)
    bench_scale.plot(report | MEASURED, tmp_path / "scale.png")
    bench_scale.plot(report, tmp_path / "old.png")
    (fig, old) = saved
    assert_footer(fig, FOOTER)
    assert footers(old) == []
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC, .*", footers(fig)[0])
