"""The evaluation harness: metrics by hand, dataset validation, and one end-to-end run on a tiny dataset."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_pg import scratch
from spark_pg.config import Settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, model_dir_for
from spark_pg.errors import IngestError, InputError
from spark_pg.eval import cli as eval_cli
from spark_pg.eval.dataset import MAX_NAME, DatasetError, Memory, load_dataset
from spark_pg.eval.harness import EvalRun, evaluate, scratch_name, summarize
from spark_pg.eval.metrics import hit_at, mean_scores, ndcg_at, recall_at, score_query
from spark_pg.eval.report import PLOT_FILE, REPORT_FILE, format_text, write_report
from spark_pg.eval.systems import SYSTEMS, System, or_words
from spark_pg.scratch import drop as drop_scratch

# ---------------------------------------------------------------------------------------------- metrics


def test_recall_counts_the_relevant_ids_in_the_top_k() -> None:
    assert recall_at(["a", "b", "c"], {"a", "c", "z"}, 2) == pytest.approx(1 / 3)
    assert recall_at(["a", "b", "c"], {"a", "c", "z"}, 3) == pytest.approx(2 / 3)
    assert recall_at([], {"a"}, 10) == 0.0


def test_hit_is_one_when_any_relevant_id_is_in_the_top_k() -> None:
    assert hit_at(["x", "y"], {"y"}, 1) == 0.0
    assert hit_at(["x", "y"], {"y"}, 2) == 1.0


def test_ndcg_by_hand() -> None:
    # relevant at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3)
    assert ndcg_at(["x", "a", "y", "b"], {"a", "b"}, 10) == pytest.approx(0.6509209298)
    # one relevant id at rank 2
    assert ndcg_at(["x", "a"], {"a"}, 10) == pytest.approx(1 / math.log2(3))
    # ideal DCG is over min(|relevant|, k): 3 relevant, k=2, found at ranks 2-3 (rank 3 cut off)
    assert ndcg_at(["x", "a", "b"], {"a", "b", "c"}, 2) == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    )
    # more relevant ids than k, the top k all relevant: perfect
    relevant = {f"r{i}" for i in range(12)}
    assert ndcg_at(sorted(relevant), relevant, 10) == pytest.approx(1.0)
    assert ndcg_at(["a"], {"a"}, 10) == 1.0
    assert ndcg_at(["x"], {"a"}, 10) == 0.0


def test_a_repeated_id_counts_once_at_its_first_rank() -> None:
    assert recall_at(["a", "a", "b"], {"b"}, 2) == 1.0
    assert ndcg_at(["a", "a", "a"], {"a", "b"}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_metric_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="relevant"):
        recall_at(["a"], set(), 10)
    with pytest.raises(ValueError, match="k must"):
        hit_at(["a"], {"a"}, 0)


def test_score_query_and_means() -> None:
    scores = score_query(["x", "a", "y", "b"], {"a", "b"})
    assert scores == pytest.approx(
        {"recall@5": 1.0, "recall@10": 1.0, "hit@10": 1.0, "ndcg@10": 0.6509209298}
    )
    assert mean_scores([]) is None
    assert mean_scores([{"m": 1.0}, {"m": 0.0}]) == {"m": 0.5}


def test_or_words_drops_punctuation() -> None:
    assert (
        or_words("What's Caroline's plan, for 2023?") == "What or s or Caroline or s or plan or for or 2023"
    )
    assert or_words("?!") == ""


def test_stored_text_carries_speaker_and_image() -> None:
    assert Memory("1", "c", "hi").stored_text == "hi"
    assert Memory("1", "c", "hi", speaker="Ann").stored_text == "Ann: hi"
    assert (
        Memory("1", "c", "look", speaker="Ann", image_caption="a cat").stored_text
        == "Ann: look [shared image: a cat]"
    )


# ---------------------------------------------------------------------------------------------- dataset


def _memory(i: str, conv: str, speaker: str, text: str, day: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "conversation_id": conv,
        "speaker": speaker,
        "text": text,
        "timestamp": f"2024-01-{day:02d}T10:00:00",
        **extra,
    }


def _query(
    i: str, conv: str, text: str, category: int, relevant: list[str], answer: str | None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": i,
        "conversation_id": conv,
        "text": text,
        "category": category,
        "relevant_ids": relevant,
        "answer": answer,
        "as_of": "2024-01-31T00:00:00",
        **extra,
    }


def tiny_dataset(folder: Path, tag: str) -> tuple[str, str]:
    """Two conversations, 12 turns, 6 questions (one without an answer). ``tag`` makes the content unique."""
    a, b = f"conv-a-{tag}", f"conv-b-{tag}"
    memories = [
        _memory(f"{a}:1", a, "Alice", "Hi Bob, how was your week?", 1),
        _memory(f"{a}:2", a, "Bob", "Busy! I started training for the Lisbon marathon in April.", 1),
        _memory(f"{a}:3", a, "Alice", "I finally found a xylophone at the flea market on Sunday.", 2),
        _memory(f"{a}:4", a, "Bob", "Nice. My sister adopted a grey kitten called Pepper.", 3),
        _memory(
            f"{a}:5", a, "Alice", "Look at my garden!", 4, image_caption="a photo of red tulips in a garden"
        ),
        _memory(f"{a}:6", a, "Bob", "I quit my job at the bakery to study astronomy.", 20),
        _memory(f"{b}:1", b, "Carol", "Dan, I bought a xylophone at the flea market too.", 1),
        _memory(f"{b}:2", b, "Dan", "Cool. I am learning to bake sourdough bread.", 2),
        _memory(f"{b}:3", b, "Carol", "My brother runs the Lisbon marathon every year.", 3),
        _memory(f"{b}:4", b, "Dan", "We adopted a kitten named Pepper last month.", 4),
        _memory(f"{b}:5", b, "Carol", "I visited the observatory to look at Saturn.", 5),
        _memory(f"{b}:6", b, "Dan", "My tulips did not survive the frost.", 6),
    ]
    queries = [
        _query(f"{a}:q0", a, "What did Alice find at the flea market?", 1, [f"{a}:3"], "a xylophone"),
        _query(f"{a}:q1", a, "Which marathon is Bob training for?", 2, [f"{a}:2"], "Lisbon"),
        _query(f"{a}:q2", a, "What flowers grow in Alice's garden?", 4, [f"{a}:5"], "tulips"),
        _query(
            f"{a}:q3",
            a,
            "What is the name of Bob's sister's kitten?",
            4,
            [f"{a}:4"],
            "Pepper",
            as_of="2024-01-10T00:00:00",
        ),
        _query(f"{b}:q0", b, "What bread is Dan learning to bake?", 1, [f"{b}:2"], "sourdough"),
        _query(f"{b}:q1", b, "Which planet did Dan look at?", 5, [f"{b}:5"], None),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in memories))
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    return a, b


def test_tiny_dataset_loads(tmp_path: Path) -> None:
    tiny_dataset(tmp_path, "x")
    dataset = load_dataset(tmp_path)
    assert len(dataset.memories) == 12 and len(dataset.queries) == 6
    assert dataset.conversations == ["conv-a-x", "conv-b-x"]
    assert [q.answered for q in dataset.queries].count(False) == 1
    assert dataset.queries[0].category == "1"
    assert (
        dataset.memories[4].stored_text
        == "Alice: Look at my garden! [shared image: a photo of red tulips in a garden]"
    )
    assert dataset.memories[0].timestamp is not None and dataset.memories[0].timestamp.tzinfo is not None
    record = dataset.records()[0]
    assert (record.tenant, record.key, record.kind) == ("conv-a-x", "conv-a-x:1", "episode")


def _rewrite(path: Path, line: int, change: dict[str, Any], drop: str | None = None) -> None:
    rows = path.read_text().splitlines()
    row = json.loads(rows[line - 1])
    row.update(change)
    if drop:
        del row[drop]
    rows[line - 1] = json.dumps(row)
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize(
    ("file", "line", "change", "drop", "field", "message"),
    [
        ("memories.jsonl", 3, {}, "text", "text", "is required"),
        ("memories.jsonl", 2, {"conversation_id": 7}, None, "conversation_id", "must be a string"),
        ("memories.jsonl", 4, {"timestamp": "last Tuesday"}, None, "timestamp", "ISO 8601"),
        ("memories.jsonl", 5, {"id": "conv-a-x:1"}, None, "id", "already appears on line 1"),
        ("memories.jsonl", 1, {"conversation_id": "_system"}, None, "conversation_id", "reserved"),
        ("queries.jsonl", 2, {"relevant_ids": []}, None, "relevant_ids", "non-empty list"),
        ("queries.jsonl", 3, {"relevant_ids": ["nope"]}, None, "relevant_ids", "is not an id"),
        (
            "queries.jsonl",
            4,
            {"relevant_ids": ["conv-b-x:1"]},
            None,
            "relevant_ids",
            "belongs to conversation",
        ),
        ("queries.jsonl", 5, {}, "answer", "answer", "is required"),
        ("queries.jsonl", 6, {"category": True}, None, "category", "integer or a non-empty string"),
        ("queries.jsonl", 1, {"as_of": 20240101}, None, "as_of", "ISO 8601"),
        # spark.retrieve takes 10,000 characters: was a refusal mid-run that dropped spark from the report
        ("queries.jsonl", 2, {"text": "why " * 2_501}, None, "text", "10000"),
        # what ingest refuses: a text, a speaker or a caption that shows nothing passed, to be refused by
        # ingest once the scratch database was made (without the line)
        ("memories.jsonl", 2, {"text": "\u200b\u200b"}, None, "text", "only white space and invisible"),
        ("memories.jsonl", 3, {"speaker": "\u200b\u2060"}, None, "speaker", "invisible characters"),
        ("memories.jsonl", 5, {"image_caption": "\ufeff "}, None, "image_caption", "invisible characters"),
        # the row as stored, checked by ingest's own validate_row: a time ingest refuses (0001-01-01 is in
        # 1 BC in some time zones) passed here
        (
            "memories.jsonl",
            4,
            {"timestamp": "0001-01-01T00:00:00"},
            None,
            "timestamp",
            "as stored, '0001-01-01T00:00:00+00:00' is not between 0001-01-02 and 9999-12-30 (UTC)",
        ),
    ],
)
def test_a_malformed_row_names_file_line_and_field(
    tmp_path: Path, file: str, line: int, change: dict[str, Any], drop: str | None, field: str, message: str
) -> None:
    tiny_dataset(tmp_path, "x")
    _rewrite(tmp_path / file, line, change, drop)
    with pytest.raises(InputError) as caught:
        load_dataset(tmp_path)
    error = caught.value
    assert isinstance(error, DatasetError)
    assert (Path(error.source).name, error.line, error.field) == (file, line, field)
    assert f"{file} line {line}, field {field!r}" in str(error) and message in str(error)


def test_a_memory_of_invisible_characters_is_refused_before_any_database(
    tmp_path: Path, model_settings: Settings, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's case: a turn of two zero-width spaces passed the dataset's checks; ingest refused it after
    CREATE DATABASE (an empty spark_eval_ database left), as `records[1].text must not be empty`, exit 2,
    with neither file nor line."""
    folder = tmp_path / "ds"
    folder.mkdir()
    rows = [
        {"id": "m1", "conversation_id": "c1", "text": "We met at the flea market."},
        {"id": "m2", "conversation_id": "c1", "text": "\u200b\u200b"},
    ]
    (folder / "memories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    query = _query("q1", "c1", "Where did we meet?", 1, ["m1"], "the flea market")
    (folder / "queries.jsonl").write_text(json.dumps(query) + "\n")
    said = r"memories\.jsonl line 2, field 'text': must not be empty"
    with pytest.raises(DatasetError, match=said):  # not a DatabaseError: no server was asked
        evaluate(folder, model_settings, server_url="postgresql://nowhere/none", embedder=embedder)
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", "postgresql://nowhere/none")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert eval_cli.main(["--dataset", str(folder), "--report", str(tmp_path / "out")]) == 2
    assert re.search(said, err.getvalue()), err.getvalue()
    assert not (tmp_path / "out").exists()


def test_bad_json_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a folder"):
        load_dataset(tmp_path / "absent")
    tiny_dataset(tmp_path, "x")
    with (tmp_path / "queries.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(DatasetError, match=r"queries\.jsonl line 7: is not valid JSON"):
        load_dataset(tmp_path)
    (tmp_path / "memories.jsonl").unlink()
    with pytest.raises(DatasetError, match=r"memories\.jsonl: does not exist"):
        load_dataset(tmp_path)


def test_line_separators_inside_a_json_string_are_text(tmp_path: Path) -> None:
    """JSONL was split with str.splitlines(), which also breaks on U+2028, U+2029 and U+0085, which JSON
    allows raw inside strings (json.dumps(..., ensure_ascii=False) writes them so): the row was refused."""
    tiny_dataset(tmp_path, "x")
    path = tmp_path / "memories.jsonl"
    rows = [json.loads(line) for line in path.read_text().split("\n") if line]
    rows[1]["text"] = "one\u2028two\u2029three\x85four"

    def write() -> None:
        path.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\r\n" for r in rows))

    write()
    dataset = load_dataset(tmp_path)
    assert len(dataset.memories) == 12 and dataset.memories[1].text == "one\u2028two\u2029three\x85four"
    del rows[2]["text"]  # the lines after it keep their numbers
    write()
    with pytest.raises(DatasetError, match=r"memories\.jsonl line 3, field 'text': is required"):
        load_dataset(tmp_path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": ' + "1" * 5000 + "}", r"line 7: has an integer over \d+ digits"),
        ("[" * 10_000 + "]" * 10_000, "line 7: nests too deeply"),
        ('{"id": "q", "conversation_id": "c", "text": "x\\ud800y"}', "line 7, field 'text': contains a lone"),
        ('{"id": "q\\udcff", "conversation_id": "c", "text": "x"}', "line 7, field 'id': contains a lone"),
    ],
)
def test_rows_python_or_postgresql_cannot_take_name_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    """json.loads raised ValueError (an integer over 4,300 digits) or RecursionError (deep nesting), and a
    lone surrogate passed the text check, to raise UnicodeEncodeError when the scratch load hashed it."""
    tiny_dataset(tmp_path, "x")
    with (tmp_path / "queries.jsonl").open("a") as f:
        f.write(line + "\n")
    with pytest.raises(DatasetError, match=r"queries\.jsonl " + message):
        load_dataset(tmp_path)
    with (tmp_path / "memories.jsonl").open("a") as f:
        f.write(line + "\n")
    with pytest.raises(DatasetError, match=r"memories\.jsonl " + message.replace("line 7", "line 13")):
        load_dataset(tmp_path)


def test_a_lone_surrogate_in_a_category_is_refused(tmp_path: Path) -> None:
    tiny_dataset(tmp_path, "x")
    _rewrite(tmp_path / "queries.jsonl", 2, {"category": "x\ud800"})
    with pytest.raises(DatasetError, match=r"queries\.jsonl line 2, field 'category': contains a lone"):
        load_dataset(tmp_path)


def test_a_folder_name_too_long_for_the_source_is_refused_before_the_database(
    tmp_path: Path, model_settings: Settings, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder name is stored as each memory's source, eval:<name>, at most 128 characters: a longer one
    was refused by ingest after CREATE DATABASE and the schema install (an empty scratch database left)."""
    fits = tmp_path / ("d" * MAX_NAME)
    tiny_dataset(fits, "x")
    assert len(load_dataset(fits).records()[0].source) == 128
    long = tmp_path / ("d" * (MAX_NAME + 1))
    tiny_dataset(long, "x")
    with pytest.raises(DatasetError, match=f"the folder name is {MAX_NAME + 1} characters; the limit is 123"):
        load_dataset(long)
    with pytest.raises(DatasetError, match="the folder name"):  # not a DatabaseError: no server was asked
        evaluate(long, model_settings, server_url="postgresql://nowhere/none", embedder=embedder)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert eval_cli.main(["--dataset", str(long)]) == 2
    assert "the folder name is 124 characters" in err.getvalue()
    assert list(work.iterdir()) == []  # refused before the report folder is made


def test_a_changed_derived_value_gives_another_scratch_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hash covered tenant, key, text, time, kind and source, not what ingest derives from the text:
    after a change to the actionability scorer, a run reused the database loaded with the old scores
    (recall under {"min_actionability": 0.3} unchanged; with --fresh, 0)."""
    import spark_pg.ingest
    import spark_pg.records

    tiny_dataset(tmp_path, "x")
    before = scratch_name(load_dataset(tmp_path), "model-a")
    monkeypatch.setattr(spark_pg.ingest, "actionability", lambda text: SimpleNamespace(score=0.0))
    assert scratch_name(load_dataset(tmp_path), "model-a") != before
    monkeypatch.undo()
    assert scratch_name(load_dataset(tmp_path), "model-a") == before
    monkeypatch.setattr(spark_pg.records, "classify_domain", lambda text, **_: "data")  # the action domain
    assert scratch_name(load_dataset(tmp_path), "model-a") != before


def test_scratch_name_depends_on_content_and_model(tmp_path: Path) -> None:
    tiny_dataset(tmp_path / "one", "x")
    tiny_dataset(tmp_path / "two", "y")
    one, two = load_dataset(tmp_path / "one"), load_dataset(tmp_path / "two")
    name = scratch_name(one, "model-a")
    assert name.startswith("spark_eval_") and len(name) <= 63
    assert name == scratch_name(load_dataset(tmp_path / "one"), "model-a")
    assert name != scratch_name(one, "model-b") and name != scratch_name(two, "model-a")


# ---------------------------------------------------------------------------------------------- end to end


@dataclass
class EndToEnd:
    result: dict[str, Any]  # the CLI's --json output
    stderr: str
    code: int
    report: Path
    rerun: EvalRun  # a second, in-process run on the reused scratch database (plus an absent system)
    conversations: tuple[str, str]


GHOST = System("ghost", "a system whose SQL function is not installed", "SELECT 1, 'x'", "spark.no_such_fn")


@pytest.fixture(scope="module")
def e2e(
    server_url: str, model_settings: Settings, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EndToEnd]:
    root = tmp_path_factory.mktemp("eval")
    folder = root / "tiny"
    conversations = tiny_dataset(
        folder, uuid.uuid4().hex[:8]
    )  # unique content: a scratch database of its own
    name = scratch_name(load_dataset(folder), embedder.spec.name)
    config = root / "config.yaml"
    config.write_text("embedding:\n  model_dir: " + str(model_dir_for(model_settings)) + "\n")
    out, err = io.StringIO(), io.StringIO()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SPARK_PG_DATABASE_URL", server_url)
            mp.setenv("SPARK_PG_CONFIG", str(config))
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = eval_cli.main(["--dataset", str(folder), "--json", "--report", str(root / "report")])
        rerun = evaluate(
            folder, model_settings, server_url=server_url, embedder=embedder, systems=(*SYSTEMS, GHOST)
        )
        lines = out.getvalue().splitlines()
        assert len(lines) == 1, out.getvalue()  # stdout holds exactly one JSON object
        yield EndToEnd(json.loads(lines[0]), err.getvalue(), code, root / "report", rerun, conversations)
    finally:
        drop_scratch(server_url, name)


METRIC_KEYS = {"recall@5", "recall@10", "hit@10", "ndcg@10"}


def test_json_has_the_contract_shape(e2e: EndToEnd) -> None:
    result = e2e.result
    assert e2e.code == 0, e2e.stderr
    assert (result["dataset"], result["k"], result["queries"]) == ("tiny", 10, 6)
    assert set(result["systems"]) == {"spark", "vector", "keyword", "rrf"}
    assert result["counts"] == {
        "answered": 5,
        "no_answer": 1,
        "by_category": {"1": 2, "2": 1, "4": 2, "5": 1},
    }
    assert (result["queries_total"], result["limit"], result["partial"]) == (6, None, False)
    for name, s in result["systems"].items():
        assert s["status"] == "ok", (
            name,
            s,
        )  # spark too: every run installs the schema, spark.retrieve in it
        assert set(s["overall"]) == METRIC_KEYS and set(s["no_answer"]) == METRIC_KEYS
        assert set(s["by_category"]) == {"1", "2", "4", "5"}
        assert set(s["latency_ms"]) == {"embed_p50", "embed_p95", "retrieve_p50", "retrieve_p95"}
        for scores in [s["overall"], s["no_answer"], *s["by_category"].values()]:
            assert set(scores) == METRIC_KEYS
            assert all(0.0 <= v <= 1.0 for v in scores.values()), (name, scores)
        assert all(v is not None and v >= 0 for v in s["latency_ms"].values())


def test_report_is_written(e2e: EndToEnd) -> None:
    page = (e2e.report / REPORT_FILE).read_text()
    assert "recall@10 by category" in page and "data:image/png;base64," in page
    assert (e2e.report / PLOT_FILE).read_bytes().startswith(b"\x89PNG")
    assert str(e2e.report / REPORT_FILE) in e2e.stderr
    assert json.loads((e2e.report / "result.json").read_text()) == e2e.result  # what --json printed
    text = format_text(e2e.result)
    assert "keyword" in text and "query embedding" in text


def test_the_result_is_written_before_the_report_is_drawn(
    e2e: EndToEnd, server_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """result.json was written after the HTML and the chart: a chart that could not be drawn (a `$...$` in a
    name, read as mathtext) lost the whole run's result."""
    import spark_pg.eval.report

    def broken(result: Any, path: Path) -> Path:
        raise RuntimeError("the chart cannot be drawn")

    monkeypatch.setattr(spark_pg.eval.report, "plot_recall", broken)
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", server_url)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(e2e.report.parent / "config.yaml"))
    report = tmp_path / "report"
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(RuntimeError, match="cannot be drawn"):
        eval_cli.main(["--dataset", str(e2e.report.parent / "tiny"), "--report", str(report), "--limit", "2"])
    result = json.loads((report / "result.json").read_text())
    assert (result["queries"], result["report"]) == (2, str(report / REPORT_FILE))
    assert result["systems"]["keyword"]["status"] == "ok"


def _made_up_result(
    dataset: str, categories: list[str], conversations: list[str] | None, systems: tuple[str, ...] = ("rrf",)
) -> dict[str, Any]:
    """A result as summarize() shapes it, with made-up figures: for the report alone, no database."""
    scores = {"recall@5": 0.5, "recall@10": 0.6, "hit@10": 0.7, "ndcg@10": 0.4}
    latency = {"embed_p50": 1.0, "embed_p95": 2.0, "retrieve_p50": 1.0, "retrieve_p95": 2.0}
    system = {
        "status": "ok",
        "description": "made up",
        "overall": scores,
        "no_answer": None,
        "by_category": dict.fromkeys(categories, scores),
        "latency_ms": latency,
    }
    return {
        "dataset": dataset,
        "k": 10,
        "queries": 4,
        "queries_total": 1982 if conversations else 4,
        "limit": None,
        "conversations_asked": conversations,
        "partial": conversations is not None,
        "counts": {"answered": 4, "no_answer": 0, "by_category": dict.fromkeys(categories, 1)},
        "metrics": ["recall@5", "recall@10", "hit@10", "ndcg@10"],
        "retrieved_per_query": 10,
        "memories": 12,
        "conversations": 2,
        "model": "m",
        "database": "spark_eval_0",
        "database_reused": True,
        "load_seconds": 0.1,
        "date": "2026-11-24T00:00:00+00:00",
        "params": {},
        "systems": dict.fromkeys(systems, system),
    }


def test_a_dollar_in_a_name_or_a_category_is_drawn_as_written(tmp_path: Path) -> None:
    """matplotlib read `$...$` as math: an unknown symbol in the dataset folder's name, a category or a
    conversation id raised ValueError when the chart was saved, after the whole run (exit 1)."""
    names = ["$\\nosuch$", "costs $5 and $6", "a\\$b$"]
    result = _made_up_result("$\\alpha$ data $\\nosuch$", names, ["$\\nosuch$-conv"], ("rrf", "$\\x$"))
    page = write_report(result, tmp_path)
    assert (tmp_path / PLOT_FILE).read_bytes().startswith(b"\x89PNG")
    assert "costs $5 and $6" in page.read_text()  # the HTML has the names as they are


def test_the_charts_title_stays_on_the_image_with_many_conversations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The title names every conversation of --conversations on one line: with several, it ran off both
    sides of the image."""
    from spark_pg.eval.report import plot_recall
    from tests.test_report_meta import saved_figures

    saved = saved_figures(monkeypatch)
    conversations = [f"conv-{n}" for n in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50)]
    plot_recall(_made_up_result("locomo", ["1", "2", "3", "4", "5"], conversations), tmp_path / "chart.png")
    (fig,) = saved
    title = fig.axes[0].title
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert title.get_text().endswith("conv-50)")
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1, (box, fig.bbox)


def test_a_k_beyond_the_fixed_metrics_is_reported_everywhere(
    e2e: EndToEnd, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    run = evaluate(e2e.report.parent / "tiny", model_settings, server_url=server_url, embedder=embedder, k=15)
    result = summarize(run)
    assert result["metrics"][-1] == "recall@15" and "recall@15" in result["systems"]["keyword"]["overall"]
    assert "recall@15" in format_text(result)  # the text table, not only the JSON


def test_the_second_run_reuses_the_scratch_database(e2e: EndToEnd) -> None:
    assert e2e.result["database_reused"] is False
    assert e2e.rerun.scratch.reused is True
    assert e2e.rerun.scratch.name == e2e.result["database"]


def test_keyword_finds_the_exact_word_match_first(e2e: EndToEnd) -> None:
    a, b = e2e.conversations
    keyword = next(r for r in e2e.rerun.systems if r.system.name == "keyword")
    assert keyword.ranked[f"{a}:q0"][0] == f"{a}:3"  # flea market (+ Alice), not conv-b's flea market turn
    assert keyword.ranked[f"{b}:q0"][0] == f"{b}:2"  # sourdough bread


def test_no_query_returns_another_conversations_memory(e2e: EndToEnd) -> None:
    by_query = {q.id: q.conversation_id for q in e2e.rerun.queries}
    ran = [r for r in e2e.rerun.systems if r.status == "ok"]
    assert {r.system.name for r in ran} >= {"vector", "keyword", "rrf"}
    for r in ran:
        assert set(r.ranked) == set(by_query)
        for query_id, keys in r.ranked.items():
            assert keys or r.system.name == "spark", (r.system.name, query_id)  # spark's gates may drop all
            assert all(key.startswith(by_query[query_id] + ":") for key in keys), (
                r.system.name,
                query_id,
                keys,
            )


def test_baselines_answer_as_of_the_question_time(e2e: EndToEnd) -> None:
    a, _ = e2e.conversations
    for r in e2e.rerun.systems:
        if r.system.name in ("vector", "keyword", "rrf"):
            # as of 2024-01-10: the turn of 2024-01-20 did not exist yet
            assert f"{a}:6" not in r.ranked[f"{a}:q3"]
            if r.system.name == "vector":
                assert len(r.ranked[f"{a}:q3"]) == 5  # every earlier turn of the conversation


def test_questions_without_an_answer_are_left_out_of_overall(e2e: EndToEnd) -> None:
    result = summarize(e2e.rerun)
    queries = e2e.rerun.queries
    for r in e2e.rerun.systems:
        if r.status != "ok":
            continue
        scores = {q.id: score_query(r.ranked[q.id], q.relevant_ids) for q in queries}
        answered = mean_scores(scores[q.id] for q in queries if q.answered)
        unanswered = mean_scores(scores[q.id] for q in queries if not q.answered)
        assert answered is not None and unanswered is not None
        s = result["systems"][r.system.name]
        assert s["overall"] == pytest.approx({m: round(v, 4) for m, v in answered.items()})
        assert s["no_answer"] == pytest.approx({m: round(v, 4) for m, v in unanswered.items()})
        assert s["by_category"]["5"] == s["no_answer"]


BUGGY = System(
    "buggy",
    "a statement with a type bug: text = integer, 42883 like a missing function",
    "SELECT m.id, m.key FROM spark.memories m WHERE m.tenant = %(tenant)s AND m.key = 1 LIMIT %(k)s",
)


def test_a_statement_raising_42883_mid_run_is_an_error_not_absent(
    e2e: EndToEnd, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    """Every question caught UndefinedFunction (42883) and reported the system absent, exit 0: an operator
    that does not exist in a statement was hidden as a system not installed."""
    folder = e2e.report.parent / "tiny"
    run = evaluate(
        folder, model_settings, server_url=server_url, embedder=embedder, limit=2, systems=(SYSTEMS[1], BUGGY)
    )
    systems = summarize(run)["systems"]
    assert systems["vector"]["status"] == "ok"
    assert systems["buggy"]["status"] == "error", systems["buggy"]
    assert (
        "[42883]" in systems["buggy"]["message"] and "operator does not exist" in systems["buggy"]["message"]
    )


def test_a_limited_run_says_so_in_the_json_the_text_and_the_html(
    e2e: EndToEnd, server_url: str, model_settings: Settings, embedder: Embedder, tmp_path: Path
) -> None:
    """result.json said only "queries": 3, and the report read as a full run's (whose default folder it
    replaces)."""
    folder = e2e.report.parent / "tiny"
    run = evaluate(
        folder, model_settings, server_url=server_url, embedder=embedder, limit=3, systems=SYSTEMS[1:2]
    )
    result = summarize(run)
    assert (result["queries"], result["queries_total"], result["limit"], result["partial"]) == (3, 6, 3, True)
    assert format_text(result).startswith(
        "tiny: first 3 of 6 questions (--limit 3; 3 with an answer, 0 without)"
    )
    page = write_report(result, tmp_path / "report")
    assert "<h1>spark_pg retrieval evaluation: tiny (first 3 of 6 questions)</h1>" in page.read_text()
    whole = summarize(
        evaluate(
            folder, model_settings, server_url=server_url, embedder=embedder, limit=6, systems=SYSTEMS[1:2]
        )
    )
    assert (whole["queries"], whole["limit"], whole["partial"]) == (6, 6, False)  # the limit covered them all
    assert format_text(whole).startswith("tiny: 6 questions (5 with an answer, 1 without)")


def test_conversations_pick_the_questions_asked_and_the_report_names_them(
    e2e: EndToEnd, server_url: str, model_settings: Settings, embedder: Embedder, tmp_path: Path
) -> None:
    """--conversations asks only their questions (how the defaults' held-out check is reproduced) and says
    so; an id the dataset does not have is refused before anything runs, naming it."""
    folder = e2e.report.parent / "tiny"
    a, b = e2e.conversations
    expected = [q.id for q in load_dataset(folder).queries if q.conversation_id == b]
    assert 0 < len(expected) < 6
    run = evaluate(
        folder,
        model_settings,
        server_url=server_url,
        embedder=embedder,
        conversations=[b],
        systems=SYSTEMS[1:2],
    )
    assert [q.id for q in run.queries] == expected
    assert set(run.systems[0].ranked) == set(expected)
    result = summarize(run)
    assert (result["queries"], result["partial"], result["conversations_asked"]) == (len(expected), True, [b])
    part = f"{len(expected)} of 6 questions: conversations {b}"
    assert format_text(result).startswith(f"tiny: {part} (")
    assert (
        f"<h1>spark_pg retrieval evaluation: tiny ({part})</h1>" in write_report(result, tmp_path).read_text()
    )
    both = summarize(
        evaluate(
            folder,
            model_settings,
            server_url=server_url,
            embedder=embedder,
            conversations=[b, a, b],
            limit=2,
            systems=SYSTEMS[1:2],
        )
    )
    assert (both["queries"], both["partial"], both["conversations_asked"]) == (2, True, [a, b])
    assert format_text(both).startswith(f"tiny: first 2 of 6 questions: conversations {a}, {b} (--limit 2; ")
    for bad, named in ((["conv-zz"], "'conv-zz' is not a conversation of tiny"), ([], "none given")):
        with pytest.raises(InputError, match=named):
            evaluate(folder, model_settings, server_url=server_url, embedder=embedder, conversations=bad)


def test_a_system_whose_function_is_missing_is_reported_absent(e2e: EndToEnd) -> None:
    ghost = summarize(e2e.rerun)["systems"]["ghost"]
    assert ghost["status"] == "absent" and "spark.no_such_fn" in ghost["message"]
    assert "overall" not in ghost


def test_params_reach_spark_retrieve_and_the_report(
    e2e: EndToEnd, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    folder = e2e.report.parent / "tiny"
    spark = next(r for r in e2e.rerun.systems if r.system.name == "spark")
    assert spark.status == "ok", spark.message  # the scratch database always gets the current schema
    assert any(spark.ranked.values())  # with the defaults, spark.retrieve answers some question
    # no fused score reaches 10: every candidate is dropped by the decision gate
    strict = evaluate(
        folder,
        model_settings,
        server_url=server_url,
        embedder=embedder,
        systems=SYSTEMS[:1],
        params={"min_fusion_score": 10},
    )
    assert strict.systems[0].status == "ok"
    assert not any(strict.systems[0].ranked.values())
    result = summarize(strict)
    assert result["params"] == {"min_fusion_score": 10}
    assert 'spark.retrieve params {"min_fusion_score": 10}' in format_text(result)
    assert summarize(e2e.rerun)["params"] == {}


def test_bad_params_are_refused_before_any_question(
    e2e: EndToEnd, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    def run(params: dict[str, Any]) -> EvalRun:
        folder = e2e.report.parent / "tiny"
        return evaluate(folder, model_settings, server_url=server_url, embedder=embedder, params=params)

    with pytest.raises(InputError, match="as_of"):
        run({"as_of": "2024-01-01"})
    with pytest.raises(InputError, match="pool_semantic"):
        run({"pool_semantic": -1})
    with pytest.raises(InputError, match="no_such_param"):
        run({"no_such_param": 1})


def test_cli_params_must_be_a_json_object() -> None:
    with pytest.raises(InputError, match="not valid JSON"):
        eval_cli._params("{pool_semantic: 1}")
    with pytest.raises(InputError, match="JSON object"):
        eval_cli._params("[1, 2]")
    for hostile in ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"a": ' + "9" * 5000 + "}"):
        with pytest.raises(InputError, match="too deeply nested or holds too large an integer"):
            eval_cli._params(hostile)
    assert eval_cli._params(None) == {} and eval_cli._params('{"k": 1}') == {"k": 1}


def test_a_missing_dataset_is_refused_before_a_report_folder_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert eval_cli.main(["--dataset", str(tmp_path / "absent")]) == 2
    assert "is not a folder holding memories.jsonl and queries.jsonl" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no reports/eval-absent left behind


def test_the_cli_passes_params_and_refuses_bad_ones_with_exit_2(
    e2e: EndToEnd, server_url: str, model_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = e2e.report.parent / "tiny"
    config = e2e.report.parent / "config.yaml"
    monkeypatch.setenv("SPARK_PG_DATABASE_URL", server_url)
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    for params, code, said in (
        ('{"pool_semantic": -1}', 2, "pool_semantic"),
        ('{"as_of": "2024-01-01"}', 2, "as_of"),
        ("[1]", 2, "JSON object"),
        ('{"min_fusion_score": 10}', 0, ""),
        ('{"pool_semantic": 1e400}', 2, "--params.pool_semantic must be a finite number"),  # was 22P02
    ):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            got = eval_cli.main(
                [
                    "--dataset",
                    str(folder),
                    "--json",
                    "--params",
                    params,
                    "--report",
                    str(e2e.report.parent / "report-params"),
                ]
            )
        assert got == code, (params, err.getvalue())
        assert said in err.getvalue()
        if code == 0:
            result = json.loads(out.getvalue())
            assert result["params"] == {"min_fusion_score": 10}
            assert result["systems"]["spark"]["overall"]["hit@10"] == 0  # every answer dropped by the gate
    # --fresh with a mistyped param is refused before the loaded database is dropped (was: dropped first)
    name = scratch_name(load_dataset(folder), model_settings.get_str("embedding.model"))
    assert scratch.exists(server_url, name)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err := io.StringIO()):
        code = eval_cli.main(["--dataset", str(folder), "--fresh", "--params", '{"pool_semantc": 20}'])
    assert code == 2 and "pool_semantc" in err.getvalue()
    with connect(scratch.with_dbname(server_url, name)) as c:  # still loaded (was: dropped, made anew empty)
        assert c.execute("SELECT count(*) > 0 FROM spark.memories").fetchone() == (True,)


def test_baseline_ties_break_on_the_key_not_on_the_load_order(server_url: str) -> None:
    """Many short turns share a ts_rank_cd; ties broke on the id, i.e. on the order the loader inserted
    in, so the same data loaded in another order scored differently (LoCoMo keyword recall@10 0.567 or
    0.575). The key belongs to the data."""
    from datetime import UTC, datetime

    from spark_pg.eval.systems import KEYWORD_SQL
    from spark_pg.ingest import ingest
    from spark_pg.records import MemoryIn
    from tests.conftest import temp_database

    with temp_database(server_url, install=True) as url, connect(url) as c:
        for key in ("t:3", "t:1", "t:2"):  # ids in another order than the keys
            ingest(c, [MemoryIn(tenant="t", key=key, text="We met at the flea market.")], None)
        args = {"tenant": "t", "as_of": datetime.now(UTC), "words": or_words("flea market"), "k": 3}
        ranked = [r[1] for r in c.execute(KEYWORD_SQL, args).fetchall()]
        ids = [r[0] for r in c.execute("SELECT key FROM spark.memories ORDER BY id").fetchall()]
    assert ids == ["t:3", "t:1", "t:2"] and ranked == ["t:1", "t:2", "t:3"]


@pytest.mark.parametrize("failure", [IngestError("m.jsonl", 3, "text", "refused"), KeyboardInterrupt()])
def test_a_load_that_fails_drops_the_scratch_database_it_made(
    tmp_path: Path,
    server_url: str,
    model_settings: Settings,
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
    failure: BaseException,
) -> None:
    """A load that failed (a row ingest refused, a database error, Ctrl-C) left the scratch database behind,
    empty or half loaded and unrecorded: named after content that, once fixed, hashes to another name, it
    was never reused nor dropped. So did params that spark.retrieve refuses, checked once it was made."""
    import spark_pg.eval.harness

    tiny_dataset(tmp_path, uuid.uuid4().hex[:8])
    name = scratch_name(load_dataset(tmp_path), embedder.spec.name)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise failure

    try:
        with monkeypatch.context() as mp:
            mp.setattr(spark_pg.eval.harness, "ingest", refuse)
            with pytest.raises(type(failure)):
                evaluate(tmp_path, model_settings, server_url=server_url, embedder=embedder)
        assert not scratch.exists(server_url, name)
        with pytest.raises(InputError, match="no_such_param"):
            bad = {"no_such_param": 1}
            evaluate(tmp_path, model_settings, server_url=server_url, embedder=embedder, params=bad)
        assert not scratch.exists(server_url, name)
    finally:
        drop_scratch(server_url, name)


def test_a_fresh_run_does_not_drop_the_database_under_a_running_one(
    tmp_path: Path, server_url: str, model_settings: Settings, embedder: Embedder
) -> None:
    """`eval --dataset X --fresh` dropped the scratch database WITH (FORCE) under a run of X in progress:
    every system of that run was reported failed (57P01)."""
    tiny_dataset(tmp_path, uuid.uuid4().hex[:8])
    name = scratch_name(load_dataset(tmp_path), embedder.spec.name)
    url = scratch.create(server_url, name)
    try:
        with scratch.claimed(server_url, name) as first, connect(url):  # the running one
            assert first
            with pytest.raises(InputError, match=r"another `eval --dataset` .* is running"):
                evaluate(tmp_path, model_settings, server_url=server_url, embedder=embedder, fresh=True)
            assert scratch.exists(server_url, name)
    finally:
        drop_scratch(server_url, name)


# ------------------------------------------------------------------------------------------ when and where


def test_the_result_says_when_and_where_it_ran(e2e: EndToEnd) -> None:
    """The JSON (printed and result.json), the HTML and the chart name the run's start, its command and
    commit and the machine, as bench's do (spark_pg.report_meta)."""
    from spark_pg.report_meta import footer_text

    for result in (e2e.result, json.loads((e2e.report / "result.json").read_text()), summarize(e2e.rerun)):
        machine, run = result["machine"], result["run"]
        assert set(machine) == {"cores", "cpu", "memory_gib", "arch", "python"} and machine["cores"] >= 1
        assert set(run) == {"at", "command", "version", "commit"}
        assert run["at"].endswith("+00:00") and run["at"] <= result["date"]  # the start, the date the end
    assert f"Started {footer_text(e2e.result)}." in (e2e.report / REPORT_FILE).read_text()


def test_the_chart_and_the_page_name_the_run_and_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_report_meta import FOOTER, MEASURED, assert_footer, footers, saved_figures

    saved = saved_figures(monkeypatch)
    result = _made_up_result("locomo", ["1", "2"], None) | MEASURED
    page = write_report(result, tmp_path / "new").read_text()
    assert f"Started {FOOTER}." in page
    old = write_report(_made_up_result("locomo", ["1", "2"], None), tmp_path / "old").read_text()
    assert "Started" not in old  # a result of before the run was recorded: no line, no failure
    (fig, old_fig) = saved
    assert_footer(fig, FOOTER)
    assert footers(old_fig) == []
