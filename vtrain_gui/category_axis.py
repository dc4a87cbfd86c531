"""A bottom axis of named bars (one category at each integer x) whose labels never overlap.

pyqtgraph draws every tick label it is given, centred on its tick, whatever the room: at
1,280 px the Compare tab's waterfall ran "overlap wait" into "imbalance", and the memory
chart's sixteen stages ran "9101112". :class:`CategoryAxis` fits its labels to the width of
one bar slot each time it is drawn (so after every resize):

- ``fit="wrap"`` (names): a label too wide for its slot breaks onto two lines at a space or
  a hyphen, one long word that does not fit even with its neighbours' room inside it with a
  hyphen, and a line still too wide is elided with "…"; the full name is the tooltip of the
  slot under the mouse.
- ``fit="thin"`` (numbers such as stage indices): every k-th label is shown, k the smallest
  that leaves room between the widest labels.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import pyqtgraph as pg
from PySide6 import QtCore, QtGui

__all__ = ["CategoryAxis", "fit_labels", "LABEL_GAP_PX"]

#: Free pixels kept between two neighbouring labels.
LABEL_GAP_PX = 6
_BREAKS = (" ", "-")


def _two_lines(text: str, width: Callable[[str], float], room: float) -> tuple[str, str] | None:
    """``text`` on two lines, broken where the wider line is the narrowest: at a space, or
    after a hyphen when no break at a space fits ``room`` pixels; None when there is nowhere
    to break."""
    def best_of(marks: tuple[str, ...]):
        best = None
        for i, ch in enumerate(text):
            if ch not in marks or i in (0, len(text) - 1):
                continue
            first = text[:i] if ch == " " else text[:i + 1]
            second = text[i + 1:]
            wide = max(width(first), width(second))
            if best is None or wide < best[0]:
                best = (wide, first, second)
        return best

    best = best_of((" ",))
    if best is None or best[0] > room:
        best = best_of(_BREAKS) or best
    return None if best is None else (best[1], best[2])


def fit_labels(labels: Sequence[str], slot_px: float, width: Callable[[str], float],
               elide: Callable[[str, float], str], fit: str = "wrap",
               gap_px: float = LABEL_GAP_PX) -> list[str]:
    """The labels as drawn in slots ``slot_px`` wide (pixels per category), centred on their
    slots: no two closer than ``gap_px``.

    Parameters
    ----------
    labels
        One label per category.
    slot_px
        Width of one category on screen, pixels.
    width
        Pixel width of a line of text (a font's ``horizontalAdvance``).
    elide
        ``elide(text, pixels)``: ``text`` cut to fit ``pixels`` with "…".
    fit
        ``"wrap"``: a label wider than its slot breaks onto two lines (``"\\n"``) at a space
        (else after a hyphen); a label still too wide keeps the room its neighbours leave
        free, and a line wider than that is elided. ``"thin"``: every k-th label is kept
        (the others are ``""``), k the smallest for which the widest label fits.
    gap_px
        Free pixels kept between neighbouring labels.
    """
    room = max(slot_px - gap_px, 1.0)
    if fit == "thin":
        widest = max((width(t) for t in labels), default=0.0)
        step = max(1, math.ceil((widest + gap_px) / max(slot_px, 1e-9)))
        return [t if i % step == 0 else "" for i, t in enumerate(labels)]
    lines: list[tuple[str, ...]] = []
    for text in labels:
        two = None if width(text) <= room else _two_lines(text, width, room)
        lines.append(two if two is not None and max(map(width, two)) < width(text) else (text,))
    widths = [max(map(width, ls)) for ls in lines]
    # a label over its slot may take what its neighbours leave (a neighbour over its slot
    # too counts as the slot's width: each then keeps its own slot)
    fits = [min(w, room) for w in widths]
    out = []
    for i, (ls, w) in enumerate(zip(lines, widths)):
        left = fits[i - 1] if i > 0 else room
        right = fits[i + 1] if i + 1 < len(fits) else room
        allowed = min(2 * room - left, 2 * room - right) if w > room else w
        if len(ls) == 1 and w > allowed:  # one long word: broken inside, else elided
            ls = _hyphenated(ls[0], width, allowed) or ls
        out.append("\n".join(line if width(line) <= allowed else elide(line, allowed)
                              for line in ls))
    return out


def _hyphenated(word: str, width: Callable[[str], float], room: float) -> tuple[str, str] | None:
    """One word too wide for ``room`` pixels on two lines, broken inside it with a hyphen
    (at least four letters on each line; the break where the wider line is narrowest), when
    both lines then fit; None for text with a space or no such break ("recomputation" under
    a 1,280 px waterfall's bar was cut to "recomputat…")."""
    if " " in word:
        return None
    cuts = [(max(width(word[:i] + "-"), width(word[i:])), word[:i] + "-", word[i:])
            for i in range(4, len(word) - 3)]
    best = min(cuts, default=None)
    return None if best is None or best[0] > room else (best[1], best[2])


class CategoryAxis(pg.AxisItem):
    """A bottom axis with one named category at each x = 0, 1, ... (see the module doc).

    Call :meth:`set_categories` with the labels (and the text shown on hover of each).
    """

    def __init__(self, fit: str = "wrap", **kwargs) -> None:
        super().__init__("bottom", **kwargs)
        # the first and last labels may reach a little past the axis's ends (pyqtgraph drops
        # a label that does not fit inside the axis: the last stage went unnamed)
        self.setStyle(hideOverlappingLabels=12)
        self._fit = fit
        self._labels: list[str] = []
        self._tips: list[str] = []
        self._drawn: list[tuple[str, QtCore.QRectF]] = []

    def set_categories(self, labels: Sequence[str], tooltips: Sequence[str] | None = None) -> None:
        """Name the categories at x = 0 .. len(labels) - 1; ``tooltips``: the text shown on
        hover of each (default: the label itself)."""
        self._labels = [str(t) for t in labels]
        self._tips = [str(t) for t in tooltips] if tooltips is not None else list(self._labels)
        self.setTicks([[(float(i), t) for i, t in enumerate(self._labels)], []])

    def tooltips(self) -> list[str]:
        """The text shown on hover of each category, in order."""
        return list(self._tips)

    def label_rects(self) -> list[tuple[str, QtCore.QRectF]]:
        """(text, rectangle in the axis's coordinates) of each label drawn last, the
        rectangle the text's full extent (every line), for tests."""
        return list(self._drawn)

    def _slot_px(self) -> float:
        view = self.linkedView()
        if view is None:
            return 0.0
        x0, x1 = view.viewRange()[0]
        return self.width() / (x1 - x0) if x1 > x0 else 0.0

    def generateDrawSpecs(self, p: QtGui.QPainter):  # noqa: N802 - pyqtgraph API
        font = self.style["tickFont"] or p.font()
        metrics = QtGui.QFontMetricsF(font)
        slot = self._slot_px()
        if self._labels and slot > 0:
            def elide(text: str, px: float) -> str:
                return metrics.elidedText(text, QtCore.Qt.TextElideMode.ElideRight, px)
            shown = fit_labels(self._labels, slot, metrics.horizontalAdvance, elide, self._fit)
            # straight into pyqtgraph's explicit ticks: setTicks would ask for another paint
            self._tickLevels = [[(float(i), t) for i, t in enumerate(shown) if t], []]
        specs = super().generateDrawSpecs(p)
        if specs is None:
            return specs
        axis_spec, tick_specs, text_specs = specs
        # pyqtgraph sizes each rectangle from one line, 0.8 of its height: the true extent,
        # every line, so the axis grows to show a wrapped label whole
        flags = int(QtCore.Qt.AlignmentFlag.AlignCenter)
        fixed, tallest = [], 0.0
        for rect, text_flags, text in text_specs:
            br = metrics.boundingRect(QtCore.QRectF(0, 0, 10_000, 10_000), flags, text)
            real = QtCore.QRectF(rect.center().x() - br.width() / 2, rect.top(),
                                 br.width(), br.height())
            fixed.append((real, text_flags, text))
            tallest = max(tallest, br.height())
        self._drawn = [(text, rect) for rect, _, text in fixed]
        if tallest:
            self._updateMaxTextSize(int(math.ceil(tallest)))
        return axis_spec, tick_specs, fixed

    def hoverEvent(self, event) -> None:  # noqa: N802 - pyqtgraph API
        view = self.linkedView()
        if event.isExit() or view is None or not self._tips:
            self.setToolTip("")
            return
        i = round(view.mapSceneToView(event.scenePos()).x())
        self.setToolTip(self._tips[i] if 0 <= i < len(self._tips) else "")
