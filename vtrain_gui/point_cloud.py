"""A layer of many equal points drawn by one item: :class:`PointCloudItem`.

pyqtgraph's ``ScatterPlotItem.setData`` builds per-point structures in Python
(about 2 ms per thousand points); the Explore tab's sweeps have up to ~100,000
plans, so its large layers are this item instead: ``setData`` only stores numpy
columns and their extents; a paint maps the points to pixels in numpy and
draws one pre-rendered symbol at each with a single
``QPainter.drawPixmapFragments`` (``drawPoints`` with a wide round pen was
tried: Qt strokes each point, several hundred ms for 85,000). Bounds come from
the numpy extents; hover and click find the nearest point in numpy within a few
pixels. Used by
:class:`vtrain_gui.sweep_plot.SweepPlot`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui
from PySide6.QtCore import Qt, Signal

__all__ = ["PointCloudItem", "Spot"]

#: Dtype of :attr:`PointCloudItem.data`: plot coordinates and the point's payload.
_DTYPE = np.dtype([("x", np.float64), ("y", np.float64), ("data", np.int64)])


class Spot:
    """One point of a :class:`PointCloudItem`, with the part of pyqtgraph's ``SpotItem``
    API that callers use: :meth:`pos`, :meth:`data`, :meth:`index`."""

    __slots__ = ("_x", "_y", "_data", "_index")

    def __init__(self, x: float, y: float, data: int, index: int) -> None:
        self._x, self._y, self._data, self._index = x, y, data, index

    def pos(self) -> QtCore.QPointF:
        return QtCore.QPointF(self._x, self._y)

    def data(self) -> int:
        return self._data

    def index(self) -> int:
        return self._index


class PointCloudItem(pg.GraphicsObject):
    """Round points of one size, fill and outline; ``setData(x=, y=, data=)`` like a
    ``ScatterPlotItem`` (``data``: one integer per point, e.g. a plan index).

    Signals
    -------
    sigClicked(item, [Spot], event)
        A left click within ``pick_px`` pixels of a point: the nearest one.
    """

    sigClicked = Signal(object, object, object)

    def __init__(self, size: float, brush: Any, pen: Any = None,
                 tip: Callable[..., str] | None = None, pick_px: float = 4.0) -> None:
        super().__init__()
        # what a legend sample and tests read, as on a ScatterPlotItem
        self.opts = {"symbol": "o", "size": float(size), "pen": pg.mkPen(pen),
                     "brush": pg.mkBrush(brush), "antialias": False}
        self.data = np.empty(0, _DTYPE)
        self._tip = tip
        self._pick_px = float(pick_px)
        self._sprite: QtGui.QPixmap | None = None
        self._sprite_dpr = 0.0
        self._fragments = pg.Qt.internals.PrimitiveArray(QtGui.QPainter.PixmapFragment, 10)
        self._extent: tuple[float, float, float, float] | None = None  # xmin, xmax, ymin, ymax
        self._bounds: QtCore.QRectF | None = None
        self._tip_shown = False
        self.setAcceptHoverEvents(tip is not None)

    def _symbol(self, dpr: float) -> QtGui.QPixmap:
        """The point rendered once (antialiased, at the screen's pixel ratio), reused by every
        paint until the pixel ratio changes."""
        if self._sprite is None or self._sprite_dpr != dpr:
            image = pg.graphicsItems.ScatterPlotItem.renderSymbol(
                self.opts["symbol"], self.opts["size"], self.opts["pen"], self.opts["brush"], dpr=dpr)
            self._sprite = QtGui.QPixmap.fromImage(image)
            self._sprite.setDevicePixelRatio(dpr)
            self._sprite_dpr = dpr
        return self._sprite

    # ------------------------------------------------------------------ data
    def setData(self, x: Any = (), y: Any = (), data: Any = ()) -> None:  # noqa: N802 - pyqtgraph API
        """Replace the points: coordinates ``x``, ``y`` (finite) and integer ``data``."""
        x = np.asarray(x, np.float64).ravel()
        y = np.asarray(y, np.float64).ravel()
        d = np.asarray(data, np.int64).ravel()
        if not (x.size == y.size == d.size):
            raise ValueError(f"x, y and data differ in length: {x.size}, {y.size}, {d.size}")
        arr = np.empty(x.size, _DTYPE)
        arr["x"], arr["y"], arr["data"] = x, y, d
        self.prepareGeometryChange()
        self.data = arr
        self._extent = ((float(x.min()), float(x.max()), float(y.min()), float(y.max()))
                        if x.size else None)
        self._bounds = None
        self.informViewBoundsChanged()
        self.update()

    def clear(self) -> None:
        self.setData()

    def points(self) -> list[Spot]:
        """Every point as a :class:`Spot` (for tests and small layers: one object each)."""
        a = self.data
        return [Spot(float(a["x"][i]), float(a["y"][i]), int(a["data"][i]), i)
                for i in range(a.size)]

    # ------------------------------------------------------------------ lookup
    def nearest(self, pos: QtCore.QPointF, max_px: float | None = None) -> int | None:
        """Row of :attr:`data` of the point nearest ``pos`` (item coordinates) within
        ``max_px`` pixels (default ``pick_px`` plus the point's radius), or None."""
        a = self.data
        if a.size == 0:
            return None
        t = self.deviceTransform_()  # item -> device pixels (affine)
        if t is None:
            return None
        ex, ey = a["x"] - pos.x(), a["y"] - pos.y()
        dx = t.m11() * ex + t.m21() * ey  # pixels
        dy = t.m12() * ex + t.m22() * ey
        d2 = dx * dx + dy * dy
        i = int(np.argmin(d2))
        limit = self._pick_px + self.opts["size"] / 2.0 if max_px is None else max_px
        return i if d2[i] <= limit * limit else None

    def spot_at(self, pos: QtCore.QPointF) -> Spot | None:
        i = self.nearest(pos)
        if i is None:
            return None
        a = self.data
        return Spot(float(a["x"][i]), float(a["y"][i]), int(a["data"][i]), i)

    def tip_at(self, pos: QtCore.QPointF) -> str:
        """The tooltip for a hover at ``pos`` ("" away from every point)."""
        spot = self.spot_at(pos)
        if spot is None or self._tip is None:
            return ""
        return self._tip(x=spot.pos().x(), y=spot.pos().y(), data=spot.data())

    # ------------------------------------------------------------------ events
    def hoverEvent(self, ev: Any) -> None:  # noqa: N802 - pyqtgraph API
        vb = self.getViewBox()
        if vb is None or self._tip is None:
            return
        spot = None if ev.isExit() else self.spot_at(ev.pos())
        if spot is not None:
            ev.acceptClicks(Qt.MouseButton.LeftButton)
            vb.setToolTip(self._tip(x=spot.pos().x(), y=spot.pos().y(), data=spot.data()))
            self._tip_shown = True
        elif self._tip_shown:
            vb.setToolTip("")
            self._tip_shown = False

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802 - pyqtgraph API
        if ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        spot = self.spot_at(ev.pos())
        if spot is None:
            ev.ignore()
            return
        ev.accept()
        self.sigClicked.emit(self, [spot], ev)

    # ------------------------------------------------------------------ geometry and paint
    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: Any = None) -> tuple:  # noqa: N802,N803
        if self._extent is None:
            return (None, None)
        return self._extent[0:2] if ax == 0 else self._extent[2:4]

    def pixelPadding(self) -> float:  # noqa: N802 - pyqtgraph API
        return self.opts["size"] / 2.0

    def viewTransformChanged(self) -> None:  # noqa: N802 - pyqtgraph API
        # the padding of the bounds is in pixels: it changes with the zoom
        self.prepareGeometryChange()
        self._bounds = None

    def boundingRect(self) -> QtCore.QRectF:  # noqa: N802 - Qt API
        if self._extent is None:
            return QtCore.QRectF()
        if self._bounds is None:
            x0, x1, y0, y1 = self._extent
            pw, ph = 0.0, 0.0
            pad = self.opts["size"] / 2.0 + 1.0  # pixels
            t = self.deviceTransform_()
            if t is not None and t.m11() and t.m22():
                pw, ph = pad / abs(t.m11()), pad / abs(t.m22())
            self._bounds = QtCore.QRectF(x0 - pw, y0 - ph, (x1 - x0) + 2 * pw, (y1 - y0) + 2 * ph)
        return self._bounds

    def paint(self, p: QtGui.QPainter, option: Any = None, widget: Any = None) -> None:
        a = self.data
        if a.size == 0:
            return
        dpr = widget.devicePixelRatioF() if widget is not None else p.device().devicePixelRatioF()
        sprite = self._symbol(dpr)
        # points to device pixels with the painter's transform (numpy), those in view only
        t = p.transform()
        x = t.m11() * a["x"] + t.m21() * a["y"] + t.m31()
        y = t.m12() * a["x"] + t.m22() * a["y"] + t.m32()
        device = p.device()
        r = self.opts["size"]
        keep = (x > -r) & (y > -r) & (x < device.width() / dpr + r) & (y < device.height() / dpr + r)
        n = int(np.count_nonzero(keep))
        if n == 0:
            return
        self._fragments.resize(n)
        frags = self._fragments.ndarray()  # (n, 10): x, y, sx, sy, sw, sh, scale x, y, rotation, opacity
        frags[:, 0] = x[keep]
        frags[:, 1] = y[keep]
        frags[:, 2:6] = (0.0, 0.0, sprite.width(), sprite.height())
        frags[:, 6:10] = (1.0 / dpr, 1.0 / dpr, 0.0, 1.0)
        p.save()
        p.resetTransform()
        p.drawPixmapFragments(*self._fragments.drawargs(), sprite)
        p.restore()
