"""Where the window's sessions come from: the shipped examples and the recent-files list."""

from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

import core

__all__ = ["RecentFiles", "MAX_RECENT_FILES", "examples_dir", "is_shipped_example"]

MAX_RECENT_FILES = 8
_RECENT_KEY = "recentFiles"


def examples_dir() -> Path:
    """Folder of the shipped example sessions (``resources/examples``)."""
    return Path(core.__file__).resolve().parent.parent / "resources" / "examples"


def is_shipped_example(path: str | Path) -> bool:
    """Whether ``path`` is a file of :func:`examples_dir` (resolved: links and ``..`` too)."""
    try:
        return Path(path).resolve().is_relative_to(examples_dir())
    except (OSError, RuntimeError, ValueError):
        return False


class RecentFiles:
    """Recently opened or saved files, newest first, kept in ``settings`` (at most
    :data:`MAX_RECENT_FILES`, as resolved paths)."""

    #: Data of the menu entry that clears the list (:meth:`fill_menu`).
    CLEAR = "<clear recent files>"

    def __init__(self, settings: QtCore.QSettings) -> None:
        self._settings = settings

    def files(self) -> list[str]:
        """The paths, newest first."""
        value = self._settings.value(_RECENT_KEY, [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])][:MAX_RECENT_FILES]

    def add(self, path: str | Path) -> None:
        """Put ``path`` first (once)."""
        p = str(Path(path).resolve())
        files = [f for f in self.files() if f != p]
        self._settings.setValue(_RECENT_KEY, [p, *files][:MAX_RECENT_FILES])

    def remove(self, path: str | Path) -> None:
        """Drop ``path`` (a file that could not be opened)."""
        p = str(Path(path).resolve())
        self._settings.setValue(_RECENT_KEY, [f for f in self.files() if f != p])

    def clear(self) -> None:
        """Forget every file."""
        self._settings.setValue(_RECENT_KEY, [])

    def fill_menu(self, menu: QtWidgets.QMenu) -> None:
        """One action per file (its path as data), then "Clear list" (data :attr:`CLEAR`)."""
        menu.clear()
        files = self.files()
        for i, f in enumerate(files, 1):
            action = menu.addAction(f"&{i} {Path(f).name}")
            action.setData(f)
            action.setToolTip(f)
        if not files:
            menu.addAction("(none)").setEnabled(False)
        else:
            menu.addSeparator()
            menu.addAction("Clear list").setData(self.CLEAR)
