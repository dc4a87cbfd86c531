"""States of a view besides showing data: empty (say what to do, instead of empty axes that look
like data) and stale (veiled, while it shows results of an earlier input)."""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

__all__ = ["EmptyStack", "StaleVeil", "warning_banner", "under_banner"]


#: The look of a warning banner over results (pale yellow, dark brown text): the Plan,
#: Explore and Studies tabs' stale banners and Compare's beyond-the-plan note.
_BANNER_STYLE = "background: #FFF4CE; color: #5C4400; padding: {pad}px; border: 1px solid #E6C86E;"


def warning_banner(object_name: str, padding: int = 4, extra_style: str = "") -> QtWidgets.QLabel:
    """A hidden, word-wrapped warning label named ``object_name`` in the banner look
    (:data:`_BANNER_STYLE` with ``padding`` px and ``extra_style`` appended); the caller sets
    its text and shows it."""
    label = QtWidgets.QLabel()
    label.setObjectName(object_name)
    label.setWordWrap(True)
    label.setStyleSheet(_BANNER_STYLE.format(pad=padding) + (" " + extra_style if extra_style
                                                             else ""))
    label.setVisible(False)
    return label


def under_banner(banner: QtWidgets.QWidget, content: QtWidgets.QWidget,
                 spacing: int = 2) -> QtWidgets.QWidget:
    """A widget holding ``banner`` (or a title) over ``content``, which takes the height; no
    margins, ``spacing`` px between."""
    out = QtWidgets.QWidget()
    col = QtWidgets.QVBoxLayout(out)
    col.setContentsMargins(0, 0, 0, 0)
    col.setSpacing(spacing)
    col.addWidget(banner)
    col.addWidget(content, 1)
    return out


class EmptyStack(QtWidgets.QStackedWidget):
    """``content`` when there is something to show, else a centred message (the empty state).

    Starts empty. The message names what is missing and what to do, e.g.
    "No sweep yet. Set the plans to try on the left and press Run sweep".
    """

    def __init__(self, content: QtWidgets.QWidget, message: str,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QtWidgets.QLabel(message)
        self._label.setObjectName("empty_state")
        self._label.setWordWrap(True)
        self._label.setTextFormat(Qt.TextFormat.RichText)
        self._label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._label.setStyleSheet("color: #505050; font-size: 11pt; padding: 24px;")
        page = QtWidgets.QWidget()
        page.setObjectName("empty_page")
        page.setStyleSheet("#empty_page { background: #FAFAFA; border: 1px dashed #C8CCD2; }")
        row = QtWidgets.QHBoxLayout()  # the text in the middle 60 %, wrapped to its width
        row.addStretch(1)
        row.addWidget(self._label, 3)
        row.addStretch(1)
        text = QtWidgets.QWidget()
        text.setObjectName("empty_text")
        text.setStyleSheet("#empty_text { background: transparent; }")
        lay = QtWidgets.QVBoxLayout(text)
        lay.addStretch(1)
        lay.addLayout(row)
        lay.addStretch(2)
        # a message taller than the page scrolls instead of being cut (the Explore tab's "No
        # plan fits in GPU memory" lost its last lines, the plan that fits, at 1,280 x 800)
        self._scroll = QtWidgets.QScrollArea()
        self._scroll.setObjectName("empty_scroll")
        self._scroll.setWidgetResizable(True)
        self._scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self._scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._scroll.setStyleSheet("#empty_scroll { background: transparent; }")
        self._scroll.viewport().setAutoFillBackground(False)
        self._scroll.setWidget(text)
        outer = QtWidgets.QVBoxLayout(page)
        outer.setContentsMargins(1, 1, 1, 1)  # inside the dashed border
        outer.addWidget(self._scroll)
        self.addWidget(page)
        self.addWidget(content)
        self._message = message
        self.set_empty(True)

    @property
    def is_empty(self) -> bool:
        """Whether the message is shown instead of the content."""
        return self.currentIndex() == 0

    @property
    def message_text(self) -> str:
        """The text of the empty state (rich text)."""
        return self._label.text()

    def set_empty(self, empty: bool, message: str | None = None) -> None:
        """Show the message (``message``, or the one given at construction) or the content."""
        self._label.setText(message if message is not None else self._message)
        self.setCurrentIndex(0 if empty else 1)


class StaleVeil(QtWidgets.QWidget):
    """A translucent white layer over ``target`` that marks what it shows as out of date.

    It follows the target's size, lets the mouse through (hovering and
    zooming still work) and draws nothing else; the target's own drawing is
    untouched. Hidden until :meth:`set_stale`.
    """

    def __init__(self, target: QtWidgets.QWidget, alpha: int = 175) -> None:
        super().__init__(target)
        self._brush = QtGui.QBrush(QtGui.QColor(255, 255, 255, alpha))
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setObjectName("stale_veil")
        target.installEventFilter(self)
        self.setGeometry(target.rect())
        self.hide()

    def set_stale(self, stale: bool) -> None:
        """Veil (True) or unveil the target."""
        if stale:
            self.setGeometry(self.parentWidget().rect())
            self.raise_()
        self.setVisible(bool(stale))

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:  # noqa: N802
        if watched is self.parentWidget() and event.type() == QtCore.QEvent.Type.Resize:
            self.setGeometry(self.parentWidget().rect())
        return False

    def paintEvent(self, event: QtGui.QPaintEvent) -> None:  # noqa: N802 - Qt API
        painter = QtGui.QPainter(self)
        painter.fillRect(self.rect(), self._brush)
        painter.end()
