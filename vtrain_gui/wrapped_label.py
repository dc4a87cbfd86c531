"""A word-wrapped label whose row is as tall as its text at the width the row gives it."""

from __future__ import annotations

import math

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

__all__ = ["WrappedLabel", "CappedTextBox", "label_document"]


def label_document(label: QtWidgets.QLabel) -> QtGui.QTextDocument | None:
    """The text document ``label`` lays its rich text out in (its font, no margins), or None
    when its text is plain (``Qt.TextFormat.AutoText`` decides as QLabel does:
    ``Qt.mightBeRichText``)."""
    text, form = label.text(), label.textFormat()
    if not (form == Qt.TextFormat.RichText
            or (form == Qt.TextFormat.AutoText and QtGui.Qt.mightBeRichText(text))):
        return None
    doc = QtGui.QTextDocument()
    doc.setDefaultFont(label.font())
    doc.setDocumentMargin(0)
    doc.setHtml(text)
    return doc


class WrappedLabel(QtWidgets.QLabel):
    """A word-wrapped label that asks for the height its text takes at its own width.

    Layouts reserve a wrapped label's height for the width of its size hint (QFormLayout), or
    ignore height-for-width altogether (QSplitter); a label narrower than that showed its
    text cut off at the top and bottom: several error messages under one editor field, the
    Explore preview's three-line title over a timeline left without room for its bars. On
    each resize and each new text the label sets its minimum height to what its text needs
    at its width, and the layout makes the row that tall.
    """

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        super().setText(text)
        self._claim_height()

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._claim_height()

    def text_height(self, width: int, max_lines: int | None = None) -> int:
        """Pixels the text takes wrapped at ``width`` (QLabel's own heightForWidth counts the
        minimum height set here, so it cannot measure); with ``max_lines``, the pixels its
        first ``max_lines`` lines take (a line as tall as its tallest character: the
        timeline legend's 14 pt colour squares make its lines taller than the font's)."""
        margins = self.contentsMargins()
        pad = 2 * self.margin()
        inner = max(1, width - margins.left() - margins.right() - pad)
        text = self.text()
        doc = label_document(self)
        if doc is not None:
            doc.setTextWidth(inner)
            height = math.ceil(doc.size().height())
            if max_lines is not None:
                height = min(height, _lines_bottom(doc, max_lines))
        else:
            height = self.fontMetrics().boundingRect(
                QtCore.QRect(0, 0, inner, 1 << 24),
                int(self.alignment()) | int(Qt.TextFlag.TextWordWrap), text).height()
            if max_lines is not None:
                height = min(height, max_lines * self.fontMetrics().lineSpacing())
        return height + margins.top() + margins.bottom() + pad

    def _claim_height(self) -> None:
        if self.width() <= 0:
            return
        needed = self.text_height(self.width()) if self.text() else 0
        if needed != self.minimumHeight():
            self.setMinimumHeight(needed)


def _lines_bottom(doc: QtGui.QTextDocument, lines: int) -> int:
    """Pixels from the top of ``doc`` (laid out) to the bottom of its line ``lines`` (the
    whole document when it has fewer lines)."""
    doc.documentLayout()  # lays the document out
    block, seen, bottom = doc.begin(), 0, 0.0
    while block.isValid() and seen < lines:
        text_layout = block.layout()
        for i in range(min(text_layout.lineCount(), lines - seen)):
            line = text_layout.lineAt(i)
            bottom = text_layout.position().y() + line.y() + line.height()
            seen += 1
        block = block.next()
    return math.ceil(bottom) if seen == lines else math.ceil(doc.size().height())


class CappedTextBox(QtWidgets.QScrollArea):
    """A :class:`WrappedLabel` in a frameless scroll area as tall as its text, up to
    ``max_lines`` of its lines; a longer text scrolls (vertically only).

    A word-wrapped label in a box layout takes every line its text needs, whatever the
    widgets under it need: the Explore summary (the counts, a calibration warning and three
    marked plans of two lines each) took the height of the splitter under it, which then
    squeezed the plot below its minimum height, and the plot's time axis and its title were
    cut off at 1,280 x 800. With the box the height over the splitter has a bound.

    Attributes
    ----------
    label : WrappedLabel
        The text (set it with :meth:`setText`, which fits the box to it).
    """

    def __init__(self, max_lines: int, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = WrappedLabel()
        self.label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self._max_lines = int(max_lines)
        self.setWidget(self.label)
        self.setWidgetResizable(True)
        self.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred,
                           QtWidgets.QSizePolicy.Policy.Fixed)
        self._fit()

    @property
    def max_lines(self) -> int:
        """The most lines of its text the box shows at once."""
        return self._max_lines

    @property
    def max_height(self) -> int:
        """The most pixels the box takes at its width: its text's first ``max_lines`` lines
        (each as tall as its tallest character)."""
        width = max(self.width() - 2 * self.frameWidth(), 1)
        return self.label.text_height(width, self._max_lines) + 2 * self.frameWidth()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        """Show ``text`` and fit the box's height to it (at most :attr:`max_height`)."""
        self.label.setText(text)
        self._fit()

    def text(self) -> str:
        """The label's text."""
        return self.label.text()

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self._fit()

    def _fit(self) -> None:
        width = max(self.width() - 2 * self.frameWidth(), 1)
        needed = self.label.text_height(width, self._max_lines) if self.label.text() else 0
        height = needed + 2 * self.frameWidth()
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(height)
