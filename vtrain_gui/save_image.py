"""Save a picture of a widget the way every vtrain save is made (:mod:`core.util.atomic`)."""

from __future__ import annotations

import errno
from pathlib import Path

from PySide6 import QtGui

from core.util.atomic import atomic_target

__all__ = ["save_pixmap"]


def save_pixmap(pixmap: QtGui.QPixmap, path: str | Path) -> None:
    """Write ``pixmap`` to ``path`` atomically, in the format its suffix names (PNG when it
    names none Qt knows): an existing file keeps its mode, a symbolic link stays a link
    (:func:`core.util.atomic.atomic_target`).

    Raises
    ------
    OSError
        Naming ``path``: the folder cannot be written, the disk is full, the path is not a
        regular file, or Qt cannot encode the image.
    """
    suffix = Path(path).suffix.lstrip(".").upper()
    fmt = suffix if suffix.encode() in {bytes(f).upper() for f in
                                        QtGui.QImageWriter.supportedImageFormats()} else "PNG"
    with atomic_target(path) as tmp:
        if not pixmap.save(str(tmp), fmt):
            raise OSError(errno.EIO, "cannot write the image", str(path))
