"""Atomic file replacement: write a temporary file beside the target, then rename it over.

Temporary files are named ``.<target name>.<pid>.<8 random characters>.tmp``. A save that is killed
(``kill -9``, a power cut) leaves its temporary file behind; the next save in the same
folder removes such orphans: those whose process no longer runs (or, where that cannot
be told, that are older than :data:`ORPHAN_AGE_S`). A temporary file of a save still in
progress (this process's or another running one's) is never touched.

A save keeps what the user set on the file it replaces: through a symbolic link it writes
the file the link names (the link stays a link), and an existing file keeps its permission
bits; a new file follows the umask (:func:`atomic_target`). Commands that read one file and
write another compare them with :func:`same_file` first, so an output never replaces an input.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_target", "check_save", "save_target", "same_file", "remove_orphans",
           "ORPHAN_AGE_S"]

#: Age after which a temporary file whose owner cannot be checked counts as orphaned, seconds.
ORPHAN_AGE_S = 3600.0
#: ``.<name>.<pid>.<8 random characters>.tmp``: no other program's files
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


def save_target(path: str | Path) -> Path:
    """The file a save to ``path`` replaces: ``path`` itself, or, where ``path`` is a symbolic
    link, the file its chain of links names (the link stays a link).

    Raises ``OSError`` naming ``path`` as given (never what a link resolves to) for a link
    that loops or names no file (a dangling link).
    """
    path = Path(path)
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            why = "a symbolic link that loops: give the file itself"
        else:
            why = "a symbolic link to no file: give the file itself"
        raise OSError(exc.errno or errno.ENOENT, why, str(path)) from None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file: through symbolic links and hard links where
    both exist (:func:`os.path.samefile`), else by their resolved paths."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        try:
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError):
            return False


#: Characters of the random part of a temporary file's name (what :data:`_TMP` matches).
_RANDOM_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def _create_temporary(target: Path, perms: int) -> str:
    """Create an empty temporary file beside ``target`` (``perms`` less the umask, as
    :func:`open` does) and return its path, registered as a save in progress."""
    folder = target.parent if str(target.parent) else Path(".")
    for _ in range(100):
        rand = "".join(secrets.choice(_RANDOM_CHARS) for _ in range(8))
        tmp = os.path.join(folder, f".{target.name}.{os.getpid()}.{rand}.tmp")
        with _live_lock:  # registered before any other thread's remove_orphans can see it
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0), perms)
            except FileExistsError:
                continue
            _live.add(tmp)
        os.close(fd)
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target))


def _copy_owner_and_mode(tmp: str, st: os.stat_result) -> None:
    """Give ``tmp`` the permission bits of the file it replaces (``st``) and, where this
    process may, its owner and group (best effort: a user may not give files away)."""
    if hasattr(os, "chown"):
        mine = os.stat(tmp)
        if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
            try:  # before chmod: chown clears the set-user-ID and set-group-ID bits
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                try:
                    os.chown(tmp, -1, st.st_gid)
                except OSError:
                    pass
    os.chmod(tmp, stat.S_IMODE(st.st_mode))


@contextmanager
def atomic_target(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside the file a save to ``path`` replaces; on success rename
    it onto that file.

    * The file replaced is ``path``, or where ``path`` is a symbolic link the file it names
      (:func:`save_target`): the temporary file is made in that file's folder and renamed
      onto it, so the link stays a link.
    * An existing file keeps its permission bits (a 0600 file stays 0600, a script stays
      executable) and, where this process may set them, its owner and group; a new file
      gets ``0666`` less the umask, as :func:`open` gives. (A file with several hard links
      is replaced under this name only: the other names keep the old contents.)
    * On any error the temporary file is removed and the previous file is left as it was.
      Orphans of earlier interrupted saves in the folder are removed first
      (:func:`remove_orphans`).

    Raises ``OSError`` naming ``path`` as given (never the temporary file nor what a link
    resolves to) if the folder is not writable, the disk is full, ``path`` is a directory,
    a link that loops or names no file, an existing file this process may not write, or
    something other than a regular file (a device such as ``/dev/null``, a pipe, a socket:
    the rename would replace it).
    """
    given = Path(path)
    target = save_target(given)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(given))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _named(exc, given) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file: saving there would replace it",
                      str(given))
    if st is not None and not os.access(target, os.W_OK):  # as open(path, "w") would
        raise PermissionError(errno.EACCES, "the file is not writable (it is kept as it is)",
                              str(given))
    remove_orphans(target.parent if str(target.parent) else ".")
    try:
        tmp = _create_temporary(target, 0o600 if st is not None else 0o666)
    except OSError as exc:  # name the file the caller asked for, not the temporary one
        raise _named(exc, given) from None
    try:
        if st is not None:
            _copy_owner_and_mode(tmp, st)
        try:
            yield Path(tmp)
        except OSError as exc:
            if exc.filename in (None, tmp):
                raise _named(exc, given) from None
            raise
        try:
            os.replace(tmp, target)
        except OSError as exc:
            if exc.filename not in (None, tmp):
                raise
            raise _named(exc, given) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        with _live_lock:
            _live.discard(tmp)


class _Trial(Exception):
    """Ends :func:`check_save`'s trial save before anything is written."""


def check_save(path: str | Path) -> None:
    """Raise, before any work, the ``OSError`` a save to ``path`` would raise before writing:
    a trial save that really creates the save's temporary file beside the file it replaces
    and removes it (:func:`atomic_target`, ended before anything is written and before any
    rename), so an existing file is left as it was and no file is made.

    ``os.access`` cannot tell this: it says yes to root wherever the permission bits would
    refuse another user, yet a file cannot be made in ``/proc`` or on a read-only file
    system, even by root.

    Raises
    ------
    OSError
        What :func:`atomic_target` raises, naming ``path`` as given: the folder does not take
        a new file (``/proc``, a read-only file system, a full disk, no permission), ``path``
        is a folder, a link that loops or names no file, an existing file this process may
        not write, or not a regular file.
    """
    try:
        with atomic_target(path):
            raise _Trial
    except _Trial:
        pass
