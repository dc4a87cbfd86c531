"""A layout that places its items in a row and wraps them onto further rows when the row is
too narrow (Qt's Flow Layout example, https://doc.qt.io/qt-6/qtwidgets-layouts-flowlayout-example.html)."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets
from PySide6.QtCore import Qt

__all__ = ["FlowLayout"]


class FlowLayout(QtWidgets.QLayout):
    """Items left to right, wrapped onto a new row where the next one does not fit.

    Its minimum width is that of its widest item, not the sum of all of them: the Explore
    tab's filter row (GPU count, three check boxes) made the window at least 1,220 pixels
    wide, wider than a 1,024 x 768 screen. Its height follows its width
    (:meth:`heightForWidth`): one row on a wide window, two or more on a narrow one.
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None, spacing: int = 6) -> None:
        super().__init__(parent)
        self._items: list[QtWidgets.QLayoutItem] = []
        self.setSpacing(spacing)

    def addItem(self, item: QtWidgets.QLayoutItem) -> None:  # noqa: N802 - Qt API
        self._items.append(item)

    def addSpacing(self, width: int) -> None:  # noqa: N802 - as QBoxLayout's
        """A fixed gap of ``width`` pixels before the next item (on the same row)."""
        self.addItem(QtWidgets.QSpacerItem(width, 0, QtWidgets.QSizePolicy.Policy.Fixed,
                                           QtWidgets.QSizePolicy.Policy.Minimum))

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QtWidgets.QLayoutItem | None:  # noqa: N802 - Qt API
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QtWidgets.QLayoutItem | None:  # noqa: N802 - Qt API
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802 - Qt API
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt API
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt API
        return self._place(QtCore.QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QtCore.QRect) -> None:  # noqa: N802 - Qt API
        """Place the items in ``rect``; the widget the layout belongs to claims the height
        they take at this width as its minimum height (a window's minimum size does not
        count height-for-width: its minimum height had one row where two were shown, and
        the widgets under the row were squeezed below their minimum)."""
        super().setGeometry(rect)
        height = self._place(rect, move=True)
        owner = self.parentWidget()
        if owner is not None and owner.layout() is self and owner.minimumHeight() != height:
            owner.setMinimumHeight(height)

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        """All items on one row."""
        m = self.contentsMargins()
        width = sum(i.sizeHint().width() for i in self._items)
        width += self.spacing() * max(0, len(self._items) - 1)
        height = max((i.sizeHint().height() for i in self._items), default=0)
        return QtCore.QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def minimumSize(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        """The widest item (each on a row of its own)."""
        m = self.contentsMargins()
        size = QtCore.QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        return size + QtCore.QSize(m.left() + m.right(), m.top() + m.bottom())

    def _place(self, rect: QtCore.QRect, move: bool) -> int:
        """Lay the items out in ``rect`` (with ``move``); returns the height they take."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, row_height = area.x(), area.y(), 0
        row: list[tuple[QtWidgets.QLayoutItem, int, QtCore.QSize]] = []

        def flush() -> None:
            for item, ix, hint in row:  # each centred in the row's height
                if move:
                    item.setGeometry(QtCore.QRect(QtCore.QPoint(ix, y + (row_height - hint.height()) // 2),
                                                  hint))

        for item in self._items:
            hint = item.sizeHint()
            if isinstance(item, QtWidgets.QSpacerItem) and x == area.x():
                continue  # no gap at the start of a row
            if x > area.x() and x + hint.width() > area.right() + 1:
                flush()
                row = []
                x = area.x()
                y += row_height + self.spacing()
                row_height = 0
                if isinstance(item, QtWidgets.QSpacerItem):
                    continue
            row.append((item, x, hint))
            x += hint.width() + self.spacing()
            row_height = max(row_height, hint.height())
        flush()
        return y + row_height - rect.y() + m.bottom()
