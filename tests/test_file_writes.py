"""spark_pg.file_writes.replace_file: the new file takes the old one's place with its permissions and, where
the process may give a file away (root), its owner. Root replacing the embedded server's postgresql.auto.conf
(owned by the server's own user) once left a file that user could not read: the server started with its
defaults instead of the shared_buffers written there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_pg.file_writes import replace_file

NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_replaced_file_keeps_its_owner_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "settings.conf"
    path.write_text("old\n", encoding="utf-8")
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o600)
    replace_file(path, "new\n")
    info = path.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (NOBODY, NOBODY, 0o600)
    assert path.read_text(encoding="utf-8") == "new\n"


def test_a_new_file_is_the_writers_and_mode_wins(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    replace_file(path, "{}", mode=0o640)
    info = path.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o640)
    path.chmod(0o600)
    replace_file(path, "[]")  # no mode: the old file's
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left
