"""The trigger rules file, an eval dataset and a scenario set are read through the guarded reader
(rowfiles.read_text_file): a FIFO or a device is refused at once instead of blocking or being read forever,
an over-size file is refused by its size, and a byte order mark is dropped. Each of these three readers used
read_text before: `spark-pg triggers load --check` on a FIFO waited for a writer forever."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spark_pg.errors import InputError
from spark_pg.eval import dataset as dataset_module
from spark_pg.eval import scenarios as scenarios_module
from spark_pg.eval.dataset import DatasetError, load_dataset
from spark_pg.eval.scenarios import default_folder, load_scenarios
from spark_pg.triggers import TriggerRuleError, load_rules

RULES = """version: 1
rules:
  - name: deploys
    pattern: '\\mdeploy'
    surface: [k1]
"""


def _rules_at(path: Path) -> None:
    load_rules(path)


def _dataset_at(path: Path) -> None:
    """The dataset folder whose memories.jsonl is ``path``."""
    load_dataset(path.parent)


def _scenarios_at(path: Path) -> None:
    load_scenarios(path.parent)


READERS: dict[str, tuple[str, Callable[[Path], None], type[InputError]]] = {
    "trigger rules": ("rules.yaml", _rules_at, TriggerRuleError),
    "eval dataset": ("memories.jsonl", _dataset_at, DatasetError),
    "scenario set": ("scenarios.yaml", _scenarios_at, InputError),
}


@pytest.fixture(params=sorted(READERS))
def reader(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[Path, Callable[[Path], None], type[InputError]]:
    name, read, error = READERS[request.param]
    folder = tmp_path / "files"
    folder.mkdir()
    if name == "memories.jsonl":
        (folder / "queries.jsonl").write_text("", encoding="utf-8")
    return folder / name, read, error


@contextmanager
def _fails_after(seconds: int) -> Iterator[None]:
    """A read that blocks fails the test after ``seconds`` instead of hanging the suite (the alarm's handler
    raises inside the blocked open())."""

    def expired(signum: int, frame: object) -> None:
        raise AssertionError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_is_refused_without_waiting_for_a_writer(
    reader: tuple[Path, Callable[[Path], None], type[InputError]],
) -> None:
    path, read, error = reader
    os.mkfifo(path)  # nobody writes: a plain open() blocks until somebody does
    with _fails_after(20), pytest.raises(error, match="is not a regular file"):
        read(path)


def test_a_device_is_refused_without_reading_it(
    reader: tuple[Path, Callable[[Path], None], type[InputError]],
) -> None:
    path, read, error = reader
    path.symlink_to("/dev/zero")  # never ends: read_text filled the memory
    with pytest.raises(error, match="is not a regular file"):
        read(path)


def test_an_over_size_rules_file_is_refused_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_pg import triggers

    path = tmp_path / "rules.yaml"
    path.write_text(RULES + "#" * 200 + "\n", encoding="utf-8")
    monkeypatch.setattr(triggers, "RULES_FILE_MAX_BYTES", 100)
    with pytest.raises(TriggerRuleError, match=r"file: is [\d,]+ bytes; the limit is 100: split it"):
        load_rules(path)


def test_an_over_size_scenario_file_is_refused_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "set"
    shutil.copytree(default_folder(), folder)
    monkeypatch.setattr(scenarios_module, "SCENARIO_FILE_MAX_BYTES", 100)
    with pytest.raises(InputError, match=r"scenarios\.yaml: is [\d,]+ bytes; the limit is 100: split it$"):
        load_scenarios(folder)


def test_a_byte_order_mark_is_dropped_and_bad_utf8_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + RULES.encode())  # some Windows editors write one
    assert [rule.name for rule in load_rules(path)] == ["deploys"]
    path.write_bytes(RULES.encode() + b"# caf\xe9\n")
    with pytest.raises(TriggerRuleError, match=r"line 6: is not UTF-8 text"):
        load_rules(path)


def test_a_missing_dataset_file_still_says_it_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "queries.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"memories\.jsonl: does not exist$"):
        dataset_module.load_dataset(tmp_path)
