"""`spark-pg eval --scenarios`: the metrics' definitions, and one small end-to-end run (contract shape)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from spark_pg import scratch
from spark_pg.advisor import AdvisorOptions
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, model_dir_for
from spark_pg.errors import InputError
from spark_pg.eval import cli as eval_cli
from spark_pg.eval.scenarios import (
    Outcome,
    Scenario,
    _score,
    database_name,
    evaluate_scenarios,
    format_scenarios,
    load_scenarios,
    plot_title,
)


def scenario(relevant: set[str]) -> Scenario:
    return Scenario("s", "code_editing", "tune", "Edit", {}, "", frozenset(relevant))


def test_precision_counts_what_was_delivered_and_rewards_silence_only_when_right() -> None:
    noise = frozenset({"n1"})
    outcomes = [
        Outcome(scenario({"a", "b"}), ("a", "x"), 1.0),  # 1 of 2 delivered: 0.5
        Outcome(scenario(set()), (), 2.0),  # no advice wanted, none given: 1
        Outcome(scenario(set()), ("n1",), 3.0),  # no advice wanted, noise given: 0
        Outcome(scenario({"a"}), (), 4.0),  # advice wanted, none given: 0
    ]
    scores = _score(outcomes, noise)
    assert scores["precision@5"] == pytest.approx((0.5 + 1 + 0 + 0) / 4)
    assert scores["noise_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert scores["recall@5"] == pytest.approx((0.5 + 0) / 2)
    assert scores["advise_ms"]["p50"] == pytest.approx(2.5)


def write_small_set(folder: Path) -> None:
    (folder / "insights.yaml").write_text(
        """memories:
  - {key: ins:jwt, category: security, text: "Verify JWT signatures on the server before trusting any claim."}
  - {key: ins:alembic, category: database, text: "Write an Alembic revision for every schema change."}
  - {key: "noise:rt", category: social, source: x_social, text: "RT @dev: JWT is great (eng: 3 likes)",
     metadata: {noise: retweet}}
"""
    )
    (folder / "scenarios.yaml").write_text(
        """scenarios:
  - {id: auth, category: code_editing, split: tune, tool_name: Edit,
     tool_input: {file_path: /src/auth/tokens.py, old_string: a, new_string: b},
     task_context: check the token signature, relevant: [ins:jwt]}
  - {id: readme, category: reads, split: holdout, tool_name: Read, tool_input: {file_path: /README.md},
     task_context: "", relevant: []}
"""
    )


def test_a_small_scenario_set_runs_end_to_end(
    tmp_path: Path, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    write_small_set(tmp_path)
    assert [s.id for s in load_scenarios(tmp_path)] == ["auth", "readme"]
    # a loose adaptive cutoff: this checks the harness end to end, not the tuned defaults (docs/results.md)
    options = AdvisorOptions(adaptive_ratio=0.5)
    result = evaluate_scenarios(
        model_settings, tmp_path, server_url=server_url, embedder=embedder, options=options
    )
    assert result["scenarios"] == 2 and set(result["systems"]) == {"advisor", "keyword"}
    advisor = result["systems"]["advisor"]
    assert {"precision@5", "noise_rate", "advise_ms"} <= set(advisor)
    assert set(advisor["advise_ms"]) == {"p50", "p95"}
    assert advisor["scenarios"]["readme"]["delivered"] == []
    assert "ins:jwt" in advisor["scenarios"]["auth"]["delivered"]
    assert "noise:rt" not in advisor["scenarios"]["auth"]["delivered"]
    assert 0 <= advisor["precision@5"] <= 1 and set(advisor["by_split"]) == {"tune", "holdout"}


def test_the_params_given_are_recorded_in_the_result_the_text_and_the_chart(
    tmp_path: Path, server_url: str, model_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eval --scenarios --params` left them out of result.json, the table and the chart's title (the
    --dataset run records them): two results could not be told apart."""
    write_small_set(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", server_url)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    report = tmp_path / "report"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = eval_cli.main(
            [
                "--scenarios",
                str(tmp_path),
                "--params",
                '{"pool_semantic": 20}',
                "--report",
                str(report),
                "--json",
            ]
        )
    assert code == 0
    result = json.loads((report / "result.json").read_text())
    assert result["params"] == {"pool_semantic": 20}
    assert json.loads(out.getvalue())["params"] == {"pool_semantic": 20}
    said = 'spark.retrieve params {"pool_semantic": 20}'
    assert said in format_scenarios(result).splitlines()[0]
    assert said in plot_title(result)
    assert "params" not in format_scenarios(result | {"params": {}})


def test_bad_params_are_refused_by_name_before_the_pool_is_loaded(
    tmp_path: Path, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    write_small_set(tmp_path)
    options = AdvisorOptions(params={"pool_semantic": -5})
    with pytest.raises(InputError, match=r"params\.pool_semantic must be"):  # was a database error, exit 1
        evaluate_scenarios(
            model_settings, tmp_path, server_url=server_url, embedder=embedder, options=options
        )
    assert not scratch.exists(server_url, database_name(tmp_path, embedder.spec.name))


def test_a_second_run_of_the_same_scenarios_does_not_end_the_first(
    tmp_path: Path, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    write_small_set(tmp_path)
    name = database_name(tmp_path, embedder.spec.name)
    url = scratch.create(server_url, name)
    try:
        # the first run holds its claim from before it (re)creates the database until it drops it
        with scratch.claimed(server_url, name) as first, connect(url):
            assert first
            with pytest.raises(InputError, match=r"another `eval --scenarios` .* is running"):
                evaluate_scenarios(model_settings, tmp_path, server_url=server_url, embedder=embedder)
            assert scratch.exists(server_url, name)  # not dropped under it
    finally:
        scratch.drop(server_url, name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scenarios:\n  - &a {id: x}\n  - *a\n", "line 3: is not valid YAML: uses an alias (*a)"),  # no bombs
        ("scenarios:\n  - {id: x, id: y}\n", "repeats the key 'id'"),
        ("scenarios:\n  - id: " + "[" * 200 + "]" * 200 + "\n", "nests deeper than 100 levels"),
        ("scenarios:\n  - id: 0x" + "f" * 5000 + "\n", "has an integer over 4300 digits"),
        ("scenarios:\n  - just a string\n", "scenario 0: must be a mapping, not str"),
        ("other: 1\n", "needs a 'scenarios' list"),
        ("version: 2\nscenarios: []\n", "needs a non-empty 'scenarios' list"),  # other top-level keys: fine
    ],
)
def test_a_bad_scenarios_file_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "scenarios.yaml").write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        load_scenarios(tmp_path)
    (tmp_path / "scenarios.yaml").write_bytes(b"scenarios:\n  - {id: \xff}\n")
    with pytest.raises(InputError, match="is not UTF-8 text"):
        load_scenarios(tmp_path)


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ("{id: a, category: c, tool_name: Bash, relevant: ins:jwt}", "relevant must be a list of memory"),
        ("{id: a, category: c, tool_name: Bash, split: hold-out}", "split must be one of tune, holdout"),
        ("{id: a, category: c, tool_name: Bash}\n  - {id: a, category: d, tool_name: X}", "id 'a' is also"),
        ("{category: c, tool_name: Bash}", "scenario 0: field 'id' is required"),
        # each was taken as its str(), exit 0: tool_name "None", category "[1, 2]", task_context "[1]"
        ("{id: a, category: c, tool_name: null}", "scenario 0: field 'tool_name' must be a string, not None"),
        ("{id: a, category: [1, 2], tool_name: Bash}", "scenario 0: field 'category' must be a string, not"),
        ("{id: a, category: c, tool_name: Bash, task_context: [1]}", "field 'task_context' must be a str"),
        ("{id: 7, category: c, tool_name: Bash}", "scenario 0: field 'id' must be a string, not int"),
        ("{id: a, category: ' ', tool_name: Bash}", "scenario 0: field 'category' must not be empty"),
        ("{id: a, category: c}", "scenario 0: field 'tool_name' is required"),
    ],
)
def test_a_scenario_that_could_never_be_scored_right_is_refused(
    tmp_path: Path, scenario: str, message: str
) -> None:
    """A relevant string became a set of its characters, a misspelt split fell in neither --split, a repeated
    id replaced the other in the results: each was taken silently."""
    write_small_set(tmp_path)
    (tmp_path / "scenarios.yaml").write_text(f"scenarios:\n  - {scenario}\n")
    with pytest.raises(InputError, match=message):
        load_scenarios(tmp_path)


def test_a_malformed_field_is_exit_2_from_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_small_set(tmp_path)
    (tmp_path / "scenarios.yaml").write_text("scenarios:\n  - {id: a, category: c, tool_name: null}\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", "postgresql://nowhere/none")
    assert eval_cli.main(["--scenarios", str(tmp_path), "--report", str(tmp_path / "out")]) == 2
    assert "scenario 0: field 'tool_name' must be a string, not NoneType" in capsys.readouterr().err


def test_a_dollar_in_a_category_is_drawn_and_the_result_written(
    tmp_path: Path, server_url: str, model_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """matplotlib read `$...$` in a category as math: `$\\x$` raised ValueError when the chart was saved,
    after the whole run (exit 1), and result.json, written after the chart, was lost with it."""
    write_small_set(tmp_path)
    scenarios = (tmp_path / "scenarios.yaml").read_text()
    (tmp_path / "scenarios.yaml").write_text(scenarios.replace("category: reads", "category: '$\\nosuch$'"))
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n")
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", server_url)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    report = tmp_path / "report"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert eval_cli.main(["--scenarios", str(tmp_path), "--report", str(report)]) == 0
    result = json.loads((report / "result.json").read_text())
    assert set(result["systems"]["advisor"]["by_category"]) == {"code_editing", "$\\nosuch$"}
    assert (report / "precision-by-category.png").read_bytes().startswith(b"\x89PNG")


def test_a_relevant_key_that_is_no_memory_is_refused_before_anything_runs(
    tmp_path: Path, model_settings: Settings, embedder: Embedder
) -> None:
    write_small_set(tmp_path)
    (tmp_path / "scenarios.yaml").write_text(
        "scenarios:\n  - {id: a, category: c, tool_name: Bash, relevant: [ins:jwt, ins:does-not-exist]}\n"
    )
    with pytest.raises(InputError, match=r"key 'ins:does-not-exist' is not a memory of insights\.yaml"):
        evaluate_scenarios(
            model_settings, tmp_path, server_url="postgresql://nowhere/none", embedder=embedder
        )


def test_a_recall_with_no_relevant_items_prints_as_a_dash_not_zero() -> None:
    """The holdout's reads-only split has no relevant items: its recall@5 is None, printed 0.000."""
    from spark_pg.eval.scenarios import format_scenarios

    system = {"precision@5": 1.0, "noise_rate": 0.0, "recall@5": None, "advise_ms": {"p50": 0.4, "p95": 0.5}}
    text = format_scenarios(
        {"scenarios": 1, "model": "m", "systems": {"advisor": system | {"by_category": {}}}}
    )
    assert "advisor     1.000  0.000      -" in text


def test_sigterm_ends_a_scenario_eval_as_ctrl_c_does(
    cli_env: str, server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Embedder
) -> None:
    """Was (audit Z): SIGTERM (timeout, CI) ended `eval` at once and left its scratch database; Ctrl-C
    dropped it."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from spark_pg.eval.scenarios import default_folder

    folder = tmp_path / "scenarios"
    shutil.copytree(default_folder(), folder)  # a database name of this test's own
    name = database_name(folder, embedder.spec.name)
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", server_url)  # the eval makes its own database there
    run = subprocess.Popen(
        [str(Path(sys.executable).parent / "spark-pg"), "eval", "--scenarios", str(folder)],
        env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not scratch.exists(server_url, name) and run.poll() is None:
            assert time.monotonic() < deadline, "the eval made no database"
            time.sleep(0.1)
        time.sleep(1)  # loading its memories by now (the whole run takes over ten seconds)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=60)
        left = scratch.exists(server_url, name)
    finally:
        if run.poll() is None:
            run.kill()
        scratch.drop(server_url, name)
    assert run.returncode == 130, err
    assert b"spark-pg: interrupted" in err and b"Traceback" not in err
    assert not left, "the scratch database was left"


def test_the_result_says_when_and_where_it_ran(
    tmp_path: Path,
    server_url: str,
    model_settings: Settings,
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The result has "machine" and "run" (its start) beside the figures, as bench's report has; a stand-in
    does the run (the whole run is test_a_small_scenario_set_runs_end_to_end)."""
    from datetime import UTC, datetime
    from typing import Any

    import spark_pg.eval.scenarios as scenarios

    write_small_set(tmp_path)
    ran: list[str] = []

    def figures(*args: Any) -> dict[str, Any]:
        ran.append(datetime.now(UTC).isoformat(timespec="seconds"))
        return {"scenarios": 2, "systems": {}}

    monkeypatch.setattr(scenarios, "_evaluate", figures)
    result = evaluate_scenarios(model_settings, tmp_path, server_url=server_url, embedder=embedder)
    assert result["scenarios"] == 2 and set(result) == {"scenarios", "systems", "machine", "run"}
    assert set(result["machine"]) == {"cores", "cpu", "memory_gib", "arch", "python"}
    assert set(result["run"]) == {"at", "command", "version", "commit"} and result["run"]["at"] <= ran[0]


def test_the_chart_names_the_run_and_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typing import Any

    from spark_pg.eval.scenarios import plot_scenarios
    from tests.test_report_meta import FOOTER, MEASURED, assert_footer, footers, saved_figures

    scores = {"precision@5": 0.8}
    system = {"by_category": {"code_editing": scores, "reads": scores}}
    result: dict[str, Any] = {"scenarios": 2, "params": {}, "systems": {"advisor": system, "keyword": system}}
    saved = saved_figures(monkeypatch)
    plot_scenarios(result | MEASURED, tmp_path / "new.png")
    plot_scenarios(result, tmp_path / "old.png")  # a result of before the run was recorded: no footer
    (fig, old) = saved
    assert_footer(fig, FOOTER)
    assert footers(old) == []
