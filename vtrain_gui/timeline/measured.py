"""A measured iteration's lanes drawn under the simulated one, on the same time axis.

:class:`MeasuredItem` draws a :class:`core.accuracy.trace_compare.MeasuredLanes` (one row per
rank's thread or stream, ordered by stage) below the simulated rows, coloured by operation
class (:data:`CLASS_COLORS`), and finds the event under the mouse. :func:`phase_of` reads the
phase and micro-batch of an event from its ``record_function`` range (``"forward mb0"``), and
:func:`matched_span` finds the simulated work of that stage, phase and micro-batch: what hover
highlights. The reading of traces is core's (:mod:`core.io.kineto`); nothing is parsed here.
"""

from __future__ import annotations

import re

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui

from core.sim.graph_types import KINDS, ExecutionGraph, Schedule

from .layout import BAR_HEIGHT, BAR_TOP

__all__ = ["MeasuredItem", "CLASS_COLORS", "LANE_COLOR", "class_color", "phase_of", "matched_span"]

#: Colour of each operation class of resources/trace_classes.json (others: grey): the optimizer
#: and send/recv as the simulated kinds that run them, the rest apart from the kinds' colours.
CLASS_COLORS = {
    "gemm": "#2F4B7C", "attention": "#A05195", "norm_elementwise": "#43AA8B",
    "optimizer": "#E45756", "all_reduce": "#54A24B", "all_gather": "#88D27A",
    "reduce_scatter": "#2E7D32", "send_recv": "#EECA3B", "all_to_all": "#6A3D9A",
    "other": "#BAB0AC",
}
#: Background of a measured lane (the simulated lanes' are grey-blue).
LANE_COLOR = "#F3EEE4"
#: A phase and micro-batch in a range's name: ``forward mb0``, ``bwd_microbatch_3``, ...
_PHASE = re.compile(r"\b(forward|fwd|backward|bwd)\b\D*?(\d+)", re.IGNORECASE)


def class_color(name: str) -> QtGui.QColor:
    """Colour of operation class ``name`` (grey for a class a custom table adds)."""
    return QtGui.QColor(CLASS_COLORS.get(name, "#9E9E9E"))


def phase_of(range_name: str) -> tuple[str, int] | None:
    """``("forward" | "backward", micro-batch)`` named by a ``record_function`` range, or None."""
    m = _PHASE.search(range_name or "")
    if m is None:
        return None
    phase = "forward" if m.group(1).lower() in ("forward", "fwd") else "backward"
    return phase, int(m.group(2))


def matched_span(graph: ExecutionGraph, schedule: Schedule, stage: int, phase: str,
                 microbatch: int) -> tuple[float, float] | None:
    """Start and end (seconds) of the simulated ``phase`` tasks of ``microbatch`` on ``stage``
    (all chunks), or None where the simulation has none."""
    sel = ((graph.stage == stage) & (graph.microbatch == microbatch)
           & (graph.kind == KINDS.index(phase)))
    if not sel.any():
        return None
    return float(schedule.start_s[sel].min()), float(schedule.end_s[sel].max())


class MeasuredItem(pg.GraphicsObject):
    """The measured lanes from row :attr:`first_row` on (one row per lane), bars by class."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes = None
        self.first_row = 0
        self._rects: dict[int, list[QtCore.QRectF]] = {}
        self._order = np.zeros(0, np.int64)
        self._bounds = np.zeros(1, np.int64)
        self._end_s = 0.0
        self._highlight: QtCore.QRectF | None = None

    def set_lanes(self, lanes, first_row: int) -> None:
        """Show ``lanes`` (a ``MeasuredLanes``, or None to clear) from row ``first_row`` on."""
        self.prepareGeometryChange()
        self.lanes, self.first_row = lanes, first_row
        self._rects = {}
        self._highlight = None
        if lanes is None or not lanes.lane.size:
            self._order = np.zeros(0, np.int64)
            self._bounds = np.zeros(1, np.int64)
            self._end_s = 0.0
            self.update()
            return
        self._order = np.lexsort((lanes.start_s, lanes.lane))
        self._bounds = np.searchsorted(lanes.lane[self._order], np.arange(len(lanes.lane_names) + 1))
        self._end_s = float((lanes.start_s + lanes.duration_s).max())
        for i in range(lanes.lane.size):
            y = first_row + int(lanes.lane[i]) + BAR_TOP
            self._rects.setdefault(int(lanes.cls[i]), []).append(
                QtCore.QRectF(float(lanes.start_s[i]), y, float(lanes.duration_s[i]), BAR_HEIGHT))
        self.update()

    @property
    def num_rows(self) -> int:
        """Lanes drawn."""
        return 0 if self.lanes is None else len(self.lanes.lane_names)

    @property
    def end_s(self) -> float:
        """End of the last measured event, seconds from the iteration's start."""
        return self._end_s

    def event_at(self, x_s: float, y_row: float, tolerance_s: float = 0.0) -> int:
        """Index of the measured event at time ``x_s`` in row coordinate ``y_row``, or -1 (the
        innermost: the latest starting one that covers ``x_s``)."""
        if self.lanes is None or not (np.isfinite(x_s) and np.isfinite(y_row)):
            return -1
        r = int(np.floor(y_row)) - self.first_row
        inside_bar = BAR_TOP - 0.05 <= y_row - np.floor(y_row) <= BAR_TOP + BAR_HEIGHT + 0.05
        if not 0 <= r < self.num_rows or not inside_bar:
            return -1
        idx = self._order[self._bounds[r]:self._bounds[r + 1]]
        start = self.lanes.start_s[idx]
        end = start + self.lanes.duration_s[idx]
        hit = np.flatnonzero((start <= x_s + tolerance_s) & (end >= x_s - tolerance_s))
        return int(idx[hit[-1]]) if hit.size else -1

    def describe(self, i: int) -> str:
        """One line on measured event ``i``: class, name, lane, range, start and duration."""
        from ..formatting import format_duration
        L = self.lanes
        parts = [f"measured {L.classes[int(L.cls[i])]}", L.names[i], L.lane_names[int(L.lane[i])]]
        if L.ranges[i]:
            parts.append(f"in {L.ranges[i]!r}")
        parts.append(f"start {format_duration(float(L.start_s[i]))}")
        parts.append(f"duration {format_duration(float(L.duration_s[i]))}")
        return " · ".join(parts)

    def set_highlight(self, rect: QtCore.QRectF | None) -> None:
        """Outline ``rect`` (view coordinates), or nothing."""
        self._highlight = rect
        self.update()

    def boundingRect(self) -> QtCore.QRectF:  # noqa: N802 - Qt API
        return QtCore.QRectF(0.0, float(self.first_row), max(self._end_s, 1e-12),
                             float(max(self.num_rows, 1)))

    def paint(self, painter: QtGui.QPainter, option, widget=None) -> None:  # noqa: D102
        if self.lanes is None:
            return
        painter.setPen(QtCore.Qt.PenStyle.NoPen)
        lane_brush = QtGui.QBrush(QtGui.QColor(LANE_COLOR))
        for r in range(self.num_rows):  # the measured lanes' background tells them apart
            painter.fillRect(QtCore.QRectF(0.0, self.first_row + r, self._end_s, 1.0), lane_brush)
        for cls, rects in self._rects.items():
            painter.setBrush(QtGui.QBrush(class_color(self.lanes.classes[cls])))
            painter.drawRects(rects)
        if self._highlight is not None:
            pen = QtGui.QPen(QtGui.QColor("#000000"))
            pen.setCosmetic(True)
            pen.setWidthF(2.0)
            painter.setPen(pen)
            painter.setBrush(QtCore.Qt.BrushStyle.NoBrush)
            painter.drawRect(self._highlight)
