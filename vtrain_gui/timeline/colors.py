"""Colours of the timeline: one per task kind, lanes, and the kinds' premultiplied ARGB pixels."""

from __future__ import annotations

import numpy as np
from PySide6 import QtGui

from core.sim.graph_types import KINDS

from ..formatting import IDLE_COLOR, KIND_COLORS
from .layout import SHADES

__all__ = ["kind_color", "color_table", "blend", "LANE_COLORS"]

#: Backgrounds of the compute lanes and of the communication lanes (comm, PP send/recv, CP ...).
#: A compute lane's background is its idle time, in IDLE_COLOR, the colour of the legend's
#: "idle (pipeline bubble)" swatch and of the cost panel's pipeline bubble (the lanes were a
#: paler #EEF1F6 than that swatch); a communication lane's is time without a transfer.
LANE_COLORS = (QtGui.QColor(IDLE_COLOR), QtGui.QColor("#F7F7F7"))
#: Colours of kinds that :data:`vtrain_gui.formatting.KIND_COLORS` does not name yet.
_SPARE_COLORS = ("#8CD17D", "#B6992D", "#FF9D9A", "#79706E", "#D37295", "#499894")


def kind_color(kind: int) -> QtGui.QColor:
    """Colour of task kind ``kind`` (index into :data:`core.sim.graph_types.KINDS`); kinds without
    an entry in ``KIND_COLORS`` get a spare colour, so a new kind draws without a code change."""
    name = KINDS[kind]
    return QtGui.QColor(KIND_COLORS.get(name, _SPARE_COLORS[kind % len(_SPARE_COLORS)]))


def blend(color: QtGui.QColor, background: QtGui.QColor, alpha: float) -> str:
    """``color`` drawn at opacity ``alpha`` over ``background``, as ``#RRGGBB`` (legend swatches)."""
    mix = [round(c * alpha + b * (1.0 - alpha)) for c, b in
           zip(color.getRgb()[:3], background.getRgb()[:3])]
    return "#{:02X}{:02X}{:02X}".format(*mix)


def color_table() -> np.ndarray:
    """Premultiplied ARGB32 pixel of each kind at each opacity step: uint32 ``(len(KINDS), SHADES + 1)``
    (step 0 is transparent)."""
    table = np.zeros((len(KINDS), SHADES + 1), np.uint32)
    for k in range(len(KINDS)):
        c = kind_color(k)
        for step in range(1, SHADES + 1):
            a = step / SHADES
            argb = [round(255 * a), round(c.red() * a), round(c.green() * a), round(c.blue() * a)]
            table[k, step] = (argb[0] << 24) | (argb[1] << 16) | (argb[2] << 8) | argb[3]
    return table
