"""The verdicts of `spark-pg faults`: each scenario's checks, counts, times and notes, and the report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from spark_pg import report_meta

Say = Callable[[str], None]


def quiet(message: str) -> None:
    pass


@dataclass(frozen=True)
class Check:
    what: str
    actual: Any
    expected: Any
    ok: bool

    def as_json(self) -> dict[str, Any]:
        return {"what": self.what, "actual": self.actual, "expected": self.expected, "ok": self.ok}


@dataclass
class Scenario:
    """One scenario's verdict: the counts checked, the times measured (seconds), what happened."""

    name: str
    title: str
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def equal(self, what: str, actual: Any, expected: Any) -> bool:
        same = bool(actual == expected)
        self.checks.append(Check(what, actual, expected, same))
        return same

    def that(self, what: str, ok: bool, actual: Any = None) -> bool:
        """A check that is not an equality (a range, a text found): ``what`` says what was expected."""
        self.checks.append(Check(what, actual, "yes", bool(ok)))
        return bool(ok)

    def check(self, name: str) -> Check:
        """The check whose ``what`` starts with ``name`` (for tests)."""
        for c in self.checks:
            if c.what.startswith(name):
                return c
        raise KeyError(name)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "checks": [c.as_json() for c in self.checks],
            "counts": self.counts,
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "notes": self.notes,
            "error": self.error,
        }


@contextmanager
def scenario(name: str, title: str, say: Say) -> Iterator[Scenario]:
    """The verdict of the scenario run in the ``with`` block: an exception there becomes its ``error``."""
    result = Scenario(name, title)
    started = time.perf_counter()
    say(f"{name}. {title}")
    verdict = None
    try:
        yield result
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
        say(f"{name}: stopped by {result.error}")
    except BaseException:  # Ctrl-C: neither a pass nor a fail; the run stops
        result.error, verdict = "interrupted", "INTERRUPTED"
        raise
    finally:
        result.seconds = time.perf_counter() - started
        verdict = verdict or ("PASS" if result.ok else "FAIL")
        say(f"{name}: {verdict} ({result.seconds:.1f} s)")


@dataclass
class FaultReport:
    scenarios: list[Scenario] = field(default_factory=list)
    setup_s: float = 0.0
    seconds: float = 0.0
    server: str = ""
    # what it ran on; when it started (the report is made first), by which command and code
    machine: dict[str, Any] = field(default_factory=report_meta.machine)
    run: dict[str, Any] = field(default_factory=report_meta.run_info)

    @property
    def ok(self) -> bool:
        return bool(self.scenarios) and all(s.ok for s in self.scenarios)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "setup_s": round(self.setup_s, 2),
            "server": self.server,
            "cores": os.cpu_count(),
            "scenarios": [s.as_json() for s in self.scenarios],
            "machine": self.machine,
            "run": self.run,
        }


def format_report(report: FaultReport) -> str:
    out = [f"spark-pg faults: {report.server}; setup {report.setup_s:.1f} s, total {report.seconds:.0f} s"]
    for s in report.scenarios:
        out.append(f"\n[{'PASS' if s.ok else 'FAIL'}] {s.name}. {s.title} ({s.seconds:.1f} s)")
        for c in s.checks:
            expected = "" if c.expected == "yes" else f" (expected {c.expected})"
            out.append(f"  {'ok ' if c.ok else 'BAD'}  {c.what}: {c.actual}{expected}")
        if s.counts:
            out.append("  counts: " + ", ".join(f"{k} {v}" for k, v in s.counts.items()))
        if s.timings:
            out.append("  times: " + ", ".join(f"{k} {_duration(v)}" for k, v in s.timings.items()))
        out.extend(f"  note: {n}" for n in s.notes)
        if s.error:
            out.append(f"  error: {s.error}")
    out.append(f"\n{'OK: every scenario passed' if report.ok else 'FAILED'}")
    return "\n".join(out)


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
