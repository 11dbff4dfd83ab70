"""Writing a file whole or not at all: revalue exports, which people apply later, and bench reports."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from spark_pg.errors import InputError


def replace_file(path: Path, body: str, *, mode: int | None = None) -> None:
    """Write ``body`` (UTF-8) to ``path`` whole or not at all: into a new file beside it, flushed to disk,
    then renamed over it. A write that fails part way (a full disk, a file size limit) leaves the file that
    was there as it was and no truncated one (that revalue --from-file would apply); the new file is removed.
    ``path`` must be a regular file or not exist yet (a symbolic link is followed: the file it names is
    replaced); a replaced file keeps its permissions (and its owner, where the process may give it away), a
    new one gets the umask's, unless ``mode`` is given: then the file gets that mode either way. Failures are
    InputError "<path>: cannot be written: <reason>"."""
    target = Path(os.path.realpath(path))

    def failed(reason: str | None) -> InputError:
        return InputError(f"{path}: cannot be written: {reason}")

    try:
        old: os.stat_result | None = target.stat()
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise failed(exc.strerror) from None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise failed("not a regular file")
    keep = mode if mode is not None or old is None else stat.S_IMODE(old.st_mode)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    except OSError as exc:
        raise failed(exc.strerror) from None
    try:
        with os.fdopen(fd, "wb") as out:
            if keep is not None:
                os.fchmod(out.fileno(), keep)
            if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                # root replacing another user's file (the embedded server's postgresql.auto.conf): that user
                # must still own it; anyone else cannot give a file away, and the new one is theirs
                with contextlib.suppress(PermissionError):
                    os.fchown(out.fileno(), old.st_uid, old.st_gid)
            out.write(body.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(exc, OSError):
            raise failed(exc.strerror) from None
        raise
