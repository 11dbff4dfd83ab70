"""The Makefile's fresh-machine path, run on a copy with stand-ins for Python: nothing is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")

# stands in for the system Python: `-m venv [--clear] DIR` makes DIR/bin/python a working venv's python
BASE = """#!/bin/bash
echo "base $*" >> "$LOG"
if [ "$1 $2" = "-m venv" ]; then
    dir="${@: -1}"
    [ "$3" = "--clear" ] && rm -rf "$dir"
    mkdir -p "$dir/bin" && cp "$GOOD" "$dir/bin/python"
fi
"""
# a working venv's python: every command succeeds (pip installs nothing)
GOOD = """#!/bin/bash
echo "venv $*" >> "$LOG"
"""
# half-made venvs: ensurepip failed (no pip), or made by a Python older than the project's
NO_PIP = """#!/bin/bash
echo "broken $*" >> "$LOG"
if [ "$1 $2" = "-m pip" ]; then echo "No module named pip" >&2; exit 1; fi
"""
OLD_PYTHON = """#!/bin/bash
echo "broken $*" >> "$LOG"
if [ "$1" = "-c" ]; then exit 1; fi
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LOG": str(project / "log"),
        "GOOD": str(project.parent / "good"),
        "MAKEFLAGS": "",
    }
    return subprocess.run(
        ["make", "--no-print-directory", *args, f"PYTHON={project.parent / 'base'}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the Makefile and pyproject.toml (the stamp's prerequisite), with the stand-ins beside it."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(ROOT / "Makefile", folder / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    _script(tmp_path / "base", BASE)
    _script(tmp_path / "good", GOOD)
    return folder


@pytest.mark.parametrize("half_made", [NO_PIP, OLD_PYTHON], ids=["no-pip", "old-python"])
def test_a_half_made_venv_is_made_again_then_left_alone(project: Path, half_made: str) -> None:
    """`test -x .venv/bin/python` took a venv whose ensurepip had failed (or one of another Python) as done:
    every later make failed with "No module named pip" until .venv was removed by hand."""
    (project / ".venv" / "bin").mkdir(parents=True)
    _script(project / ".venv" / "bin" / "python", half_made)
    first = _make(project, "install")
    assert first.returncode == 0, first.stderr
    log = (project / "log").read_text()
    assert "base -m venv --clear .venv" in log
    assert "venv -m pip install --quiet --disable-pip-version-check -e .[test]" in log
    assert (project / ".venv" / ".installed").exists()
    (project / "log").unlink()
    second = _make(project, "install")  # quick: nothing to do, nothing run
    assert second.returncode == 0, second.stderr
    assert not (project / "log").exists()


def test_a_working_venv_is_not_made_again(project: Path) -> None:
    assert _make(project, "install").returncode == 0
    (project / ".venv" / ".installed").unlink()  # as after an edit of pyproject.toml
    (project / "log").unlink()
    again = _make(project, "install")
    assert again.returncode == 0, again.stderr
    log = (project / "log").read_text()
    assert "base" not in log and "venv -m pip install" in log  # reinstalled in place, the venv kept


def test_clean_removes_every_cache_and_help_names_every_target(project: Path) -> None:
    caches = [".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"]
    for name in caches:
        (project / name).mkdir()
    done = _make(project, "clean")
    assert done.returncode == 0, done.stderr
    assert [name for name in caches if (project / name).exists()] == []
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    shown = _make(project, "help").stdout
    assert [t for t in phony.group(1).split() if f"make {t} " not in shown and t != "help"] == []
