"""Where and when a measurement was made: the "machine" and "run" objects of every measuring command's JSON
(bench, eval, soak, faults) and the one-line footer of their plots."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FOOTER_POINTS = 7  # the footer's font size
CPU_CHARS = 60  # a longer CPU model name is cut: the footer stays on one line of a 6-inch chart


def machine() -> dict[str, Any]:
    """What a figure was measured on: cores, CPU model, memory, architecture, Python."""
    cpu = memory = None
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), None)
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (OSError, ValueError):
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": memory,
        "arch": platform.machine(),
        "python": platform.python_version(),
    }


def run_info() -> dict[str, Any]:
    """When and how a report was made: the start time (UTC), the command line, the spark_pg version and,
    in a git checkout, the commit."""
    from spark_pg import __version__

    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        commit = found.stdout.strip() if found.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["spark-pg", *sys.argv[1:]]),
        "version": __version__,
        "commit": commit,
    }


def footer_text(result: Mapping[str, Any]) -> str | None:
    """``2026-11-24 13:05 UTC, commit 1a2b3c4, 8 cores, AMD EPYC 7B13`` from ``result``'s "run" and
    "machine"; None when the report has no run time (an old report, or one edited by hand)."""
    run, host = result.get("run"), result.get("machine")
    if not isinstance(run, Mapping) or not isinstance(run.get("at"), str):
        return None
    try:
        at = datetime.fromisoformat(run["at"]).astimezone(UTC)
    except ValueError:
        return None
    parts = [at.strftime("%Y-%m-%d %H:%M UTC")]
    commit = run.get("commit")
    if isinstance(commit, str) and commit:
        parts.append(f"commit {commit}")
    if isinstance(host, Mapping):
        cores, cpu = host.get("cores"), host.get("cpu")
        if isinstance(cores, int):
            parts.append(f"{cores} cores")
        if isinstance(cpu, str) and cpu:
            parts.append(cpu if len(cpu) <= CPU_CHARS else cpu[: CPU_CHARS - 3] + "...")
    return ", ".join(parts)


def add_footer(fig: Figure, result: Mapping[str, Any]) -> float:
    """Write :func:`footer_text` in small grey type along the bottom of ``fig``; returns the share of the
    figure's height it takes (0.0 when there is no footer), for ``fig.tight_layout(rect=(0, that, 1, 1))``."""
    text = footer_text(result)
    if text is None:
        return 0.0
    from spark_pg.eval.chart_text import literal

    fig.text(
        0.01,
        0.005,
        literal(text),
        fontsize=FOOTER_POINTS,
        color="grey",
        ha="left",
        va="bottom",
    )
    return float(FOOTER_POINTS * 1.8 / 72 / fig.get_figheight())
