"""Atomic file replacement: write a temporary file beside the target, then rename it over.

Temporary files are named ``.<target name>.<pid>.<8 random characters>.tmp``. A save that is killed
(``kill -9``, a power cut) leaves its temporary file behind; the next save in the same
folder removes such orphans: those whose process no longer runs (or, where that cannot
be told, that are older than :data:`ORPHAN_AGE_S`). A temporary file of a save still in
progress (this process's or another running one's) is never touched.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_target", "remove_orphans", "ORPHAN_AGE_S"]

#: Age after which a temporary file whose owner cannot be checked counts as orphaned, seconds.
ORPHAN_AGE_S = 3600.0
#: ``.<name>.<pid>.<8 random characters of tempfile>.tmp``: no other program's files
_TMP = re.compile(r"^\..+\.(\d+)\.[a-z0-9_]{8}\.tmp$")
_live: set[str] = set()  # temporary files of saves in progress in this process
_live_lock = threading.Lock()


def _running(pid: int) -> bool | None:
    """Whether process ``pid`` runs (None where that cannot be told)."""
    if os.name != "posix":
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    except OSError:
        return None
    return True


def remove_orphans(folder: str | Path) -> list[Path]:
    """Remove the temporary files that interrupted saves left in ``folder``; return them.

    Only names of the form ``.<name>.<pid>.<random>.tmp`` are considered; a file is removed
    when its process no longer runs (where that cannot be checked: when it is older than
    :data:`ORPHAN_AGE_S`) and it is not a save in progress in this process. Errors
    (a folder that cannot be listed, a file that cannot be removed) are ignored.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        m = _TMP.match(entry.name)
        if not m:
            continue
        with _live_lock:
            if entry.path in _live:
                continue
        pid = int(m.group(1))
        alive = True if pid == os.getpid() else _running(pid)
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            old = now - entry.stat(follow_symlinks=False).st_mtime > ORPHAN_AGE_S
            if alive is False or (alive is None and old) or (pid == os.getpid()):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` (the file the caller asked for), not a temporary file."""
    new = type(exc)(exc.errno, exc.strerror or str(exc), str(path)) if exc.errno else \
        OSError(errno.EIO, str(exc), str(path))
    return new


@contextmanager
def atomic_target(path: str | Path, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder; on success rename it to ``path``.

    On any error the temporary file is removed and the previous file at ``path`` is
    left as it was. Orphans of earlier interrupted saves in the folder are removed first
    (:func:`remove_orphans`). Raises ``OSError`` naming ``path`` (never the temporary
    file) if the folder is not writable, the disk is full, ``path`` is a directory, or it
    exists and is not a regular file (a device such as ``/dev/null``, a pipe, a socket: the
    rename would replace it).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if path.exists() and not path.is_file():
        raise OSError(errno.EINVAL, "not a regular file: saving there would replace it",
                      str(path))
    remove_orphans(path.parent if str(path.parent) else ".")
    with _live_lock:  # registered before any other thread's remove_orphans can see it
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                       dir=path.parent)
        except OSError as exc:  # name the file the caller asked for, not the temporary one
            raise _named(exc, path) from None
        _live.add(tmp)
    os.close(fd)
    try:
        os.chmod(tmp, mode)
        try:
            yield Path(tmp)
        except OSError as exc:
            if exc.filename in (None, tmp):
                raise _named(exc, path) from None
            raise
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if exc.filename not in (None, tmp):
                raise
            raise _named(exc, path) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        with _live_lock:
            _live.discard(tmp)
