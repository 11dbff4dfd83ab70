"""`spark-pg bench --hooks` counts what went wrong: hooks that exit non-zero, and calls the server never
answered (a hook with --no-fallback prints nothing and exits 0 when no server listens, as when there is no
advice; the bench reported "errors 0" with every call unanswered)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_pg import bench_hooks
from spark_pg.config import load_settings
from spark_pg.embedding import Embedder
from spark_pg.eval.scenarios import default_folder, load_scenarios
from spark_pg.hooks.server import HookServerError
from tests.conftest import hook_server, temp_database

CALLS = 4


def _advisor_calls(calls: int) -> int:
    scenarios = load_scenarios(default_folder())
    return sum(
        bench_hooks.needs_advisor(bench_hooks.events(scenarios[i % len(scenarios)], i)[0])
        for i in range(calls)
    )


def test_hooks_that_reach_no_server_are_refused_not_reported_as_zero_errors(tmp_path: Path) -> None:
    """The audit's case: hooks pointed at a socket nobody listens on all print nothing and exit 0."""
    assert _advisor_calls(CALLS) > 0  # the scenarios' first calls include some the advisor answers
    cmd = [*bench_hooks.hook_command(), "hook", "{event}", "--socket", str(tmp_path / "no-server.sock")]
    cmd += ["--tenant", "bench-hooks-nobody", "--no-fallback", "--timeout", "5"]
    scenarios = load_scenarios(default_folder())
    with pytest.raises(HookServerError, match=r"answered none of the \d+ pre-tool-use calls"):
        bench_hooks._measure(cmd, scenarios, CALLS, 1, False, lambda: 0)


def test_a_hook_that_exits_non_zero_is_an_error_even_when_silent() -> None:
    """Only stderr counted: a hook killed, or exiting 1 with nothing said, was no error."""
    cmd = [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)", "{event}"]
    counts = iter([0, _advisor_calls(CALLS)])  # as if the server had answered every call that needs it
    scenarios = load_scenarios(default_folder())
    result = bench_hooks._measure(cmd, scenarios, CALLS, 2, False, lambda: next(counts))
    assert result["errors"] == 2 * CALLS  # pre-tool-use and post-tool-use
    assert result["first_error"] == "exit status 3, nothing on stderr"
    assert result["unanswered"] == 0 and result["advisor_calls"] == _advisor_calls(CALLS)


@pytest.mark.parametrize("same_database", [True, False])
def test_a_run_counts_the_calls_its_database_logged(
    cli_env: str,
    server_url: str,
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    same_database: bool,
) -> None:
    """End to end with --socket: a server on this run's database answers (and logs) every call that needs
    the advisor; one serving another database answers none here, and the run is refused."""
    settings = load_settings()  # cli_env: the test database
    # an empty tenant: the advisor logs its calls all the same, and embedding the 233 memories takes 10 s
    monkeypatch.setattr(bench_hooks, "_load_tenant", lambda settings, tenant: 0)
    socket = tmp_path / "s.sock"
    if same_database:
        with hook_server(cli_env, embedder, socket):
            report = bench_hooks.run(settings, CALLS, socket=socket, progress=False)
        assert report["errors"] == 0 and report["unanswered"] == 0
        assert report["advisor_calls"] == _advisor_calls(CALLS) > 0
        assert f"unanswered 0 of {report['advisor_calls']} calls" in bench_hooks.format_report(report)
        return
    with (
        temp_database(server_url, install=True) as other,
        hook_server(other, embedder, socket),
        pytest.raises(HookServerError, match="or it serves another database"),
    ):
        bench_hooks.run(settings, CALLS, socket=socket, progress=False)


def test_an_interrupt_while_the_server_starts_stops_it(
    cli_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was (audit Z): Ctrl-C while the bench waited for its `spark-pg serve` left that server running,
    re-parented to PID 1."""

    def interrupted(path: Path, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def remembered(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(bench_hooks.wire, "ping", interrupted)
    monkeypatch.setattr(bench_hooks.subprocess, "Popen", remembered)
    with pytest.raises(KeyboardInterrupt):
        bench_hooks._Server(None, tmp_path)
    assert len(started) == 1 and started[0].poll() is not None  # stopped and reaped
