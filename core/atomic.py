"""Atomic file replacement: write a temporary file beside the target, then rename it over."""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_target"]


@contextmanager
def atomic_target(path: str | Path, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder; on success rename it to ``path``.

    On any error the temporary file is removed and the previous file at
    ``path`` is left as it was. Raises ``OSError`` (naming ``path``) if the
    folder is not writable or ``path`` is a directory.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file the caller asked for, not the temporary one
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    os.close(fd)
    try:
        os.chmod(tmp, mode)
        yield Path(tmp)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if exc.filename != tmp:
                raise
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None  # name the target
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
