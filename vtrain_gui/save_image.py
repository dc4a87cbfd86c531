"""Save a picture of a widget the way every vtrain save is made (:mod:`core.util.atomic`)."""

from __future__ import annotations

import errno
from pathlib import Path

from PySide6 import QtGui

from core.util.atomic import atomic_target

__all__ = ["save_pixmap", "image_format"]


def save_pixmap(pixmap: QtGui.QPixmap, path: str | Path) -> None:
    """Write ``pixmap`` to ``path`` atomically, in the format its suffix names (PNG for a name
    without a suffix): an existing file keeps its mode, a symbolic link stays a link
    (:func:`core.util.atomic.atomic_target`). A suffix that names no format Qt writes
    (``.svg``, ``.txt``) is refused: a PNG was written under it, a file its name misdescribes.

    Raises
    ------
    OSError
        Naming ``path``: the suffix names no format Qt writes (``EINVAL``, with the formats it
        does), the folder cannot be written, the disk is full, the path is not a regular file,
        or Qt cannot encode the image.
    """
    try:
        fmt = image_format(path)
    except ValueError as exc:
        raise OSError(errno.EINVAL, str(exc), str(path)) from None
    with atomic_target(path) as tmp:
        if not pixmap.save(str(tmp), fmt):
            raise OSError(errno.EIO, "cannot write the image", str(path))


def image_format(path: str | Path) -> str:
    """The Qt image format (``"PNG"``, ``"JPG"`` ...) a picture saved to ``path`` is written in:
    the one its suffix names, or PNG for a name without a suffix.

    Raises
    ------
    ValueError
        The suffix names no format Qt writes here (``.svg``, ``.txt``), with those it does."""
    suffix = Path(path).suffix.lstrip(".").upper()
    formats = sorted({bytes(f).decode().upper() for f in QtGui.QImageWriter.supportedImageFormats()})
    if suffix and suffix not in formats:
        raise ValueError(f"'.{suffix.lower()}' is not an image format this program writes; give "
                         f"one of {', '.join('.' + f.lower() for f in formats)}")
    return suffix or "PNG"
