"""The Explore tab's GPU choice: load a price sheet, sweep each GPU kind, plot the combined front.

:class:`GpuChoicePanel` holds a "Load price sheet…" button, a status line and a plot of expected
days (with failures) against expected dollars: every plan that fits, one colour per GPU kind
(faint), the combined front over the kinds (bold, joined by a line), a legend of the kinds and
each kind's own front (medium points, a thin line of its colour; the view opens on
the fronts), a hover text naming each point's kind, GPUs, plan, goodput and band. The sweeps run on the one
background runner (:mod:`vtrain_gui.background`); the work is
:func:`core.studies.gpu_choice.choose_gpus`; "fits outside the margin only (--no-tight)" beside
the button is its ``no_tight`` (``vtrain sweep --gpus-from ... --no-tight``), and the status line
ends with the line the command line prints under its table (the front's tight plans, or those
left out). Used by :class:`vtrain_gui.explore.ExploreTab`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.cli.common import NO_TIGHT_HELP, tight_front_text
from core.plan.session import Session
from core.studies.gpu_choice import GpuChoice

from .background import BackgroundRunner, JobCancelled
from .empty_state import EmptyStack
from .formatting import (format_count, format_day_count, format_fraction, format_number_short,
                         format_usd, format_usd_short)
from .sweep_plot import ValueAxis

__all__ = ["GpuChoicePanel", "KIND_COLORS", "NO_CHOICE_TEXT", "NO_POINTS_TEXT", "point_text"]

#: One colour per price-sheet row, in order (Tableau 10).
KIND_COLORS = ("#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#76B7B2", "#EDC948", "#B07AA1",
               "#FF9DA7", "#9C755F", "#BAB0AC")


#: The chart's empty state before a price sheet is loaded (rich text).
NO_CHOICE_TEXT = ("<p style='font-size:13pt'><b>No price sheet yet</b></p>"
                  "<p>Press <b>Load price sheet…</b>: each GPU kind of the sheet is swept with "
                  "this model, and its plans appear here by expected training days and dollars, "
                  "failures and checkpoints included.</p>")
#: The chart's empty state when the sheet's kinds gave no plan to plot (rich text).
NO_POINTS_TEXT = ("<p style='font-size:13pt'><b>No plan to plot</b></p>"
                  "<p>None of the price sheet's GPU kinds gave a plan with days and dollars.</p>")


def point_text(choice: GpuChoice, k: int) -> str:
    """The hover text of point ``k``: kind, GPUs, plan, expected days and dollars with their
    band, goodput and MFU."""
    p = choice.point(k)
    band = ""
    if p["expected_days_low"] is not None and p["expected_days_high"] is not None:
        band = (f"\nband: {format_day_count(p['expected_days_low'])}–"
                f"{format_day_count(p['expected_days_high'])} days, "
                f"{format_usd(p['expected_cost_usd_low'])}–{format_usd(p['expected_cost_usd_high'])}")
    return (f"{p['gpu']} × {format_count(p['num_gpus'])}\n{p['plan']}\n"
            f"{format_day_count(p['expected_days'])} days expected · "
            f"{format_usd(p['expected_cost_usd'])} · goodput {format_fraction(p['goodput'])} · "
            f"MFU {format_fraction(p['mfu'])}{band}")


class GpuChoicePanel(QtWidgets.QWidget):
    """Price sheet in, combined front of expected days and dollars out (module doc).

    Signals
    -------
    choice_finished(object)
        A :class:`core.studies.gpu_choice.GpuChoice` is now shown.
    """

    choice_finished = Signal(object)

    def __init__(self, choose: Callable[..., GpuChoice] | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._choose = choose
        self._session = Session()
        self._choice: GpuChoice | None = None
        self._sheet_path: str | None = None
        self._choice_labels: list[str] = []
        self.load_button = QtWidgets.QPushButton("Load price sheet…")
        self.load_button.setObjectName("gpu_choice.load")
        self.load_button.setToolTip("A CSV of GPU kinds, prices per GPU-hour and GPUs available "
                                    "(docs/gpu_choice.md); each kind is swept with this model")
        self.load_button.clicked.connect(self._on_load_click)
        # vtrain sweep --gpus-from --no-tight: each kind's tight plans left out, unsimulated
        self.no_tight = QtWidgets.QCheckBox("fits outside the margin only (--no-tight)")
        self.no_tight.setObjectName("gpu_choice.no_tight")
        self.no_tight.setToolTip(NO_TIGHT_HELP[0].upper() + NO_TIGHT_HELP[1:]
                                 + ". Takes effect at the next Load price sheet….")
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QtWidgets.QLabel("Load a price sheet to compare GPU kinds by expected days "
                                       "and dollars (failures and checkpoints included).")
        self.status.setObjectName("gpu_choice.status")
        self.status.setWordWrap(True)
        self.plot = pg.PlotWidget(background="w", axisItems={
            "bottom": ValueAxis("bottom", format_number_short),
            "left": ValueAxis("left", format_usd_short)})
        item = self.plot.getPlotItem()
        item.setMenuEnabled(False)
        item.setLabel("bottom", "expected training time with failures (days)")
        item.setLabel("left", "expected cost (USD)")
        item.showGrid(x=True, y=True, alpha=0.18)
        item.setLogMode(x=True, y=True)
        for name in ("left", "bottom"):
            item.getAxis(name).enableAutoSIPrefix(False)
            item.getAxis(name).setPen(pg.mkPen("#404040"))
            item.getAxis(name).setTextPen(pg.mkPen("#202020"))
        self._legend = item.addLegend(offset=(-8, 8), labelTextColor="#202020",
                                      brush=pg.mkBrush(255, 255, 255, 190), pen=pg.mkPen("#B0B4BA"))
        self._front_line = pg.PlotCurveItem(pen=pg.mkPen("#202020", width=1.5,
                                                         style=Qt.PenStyle.DashLine))
        self._front_line.setZValue(2)
        item.addItem(self._front_line)
        self._items: list[pg.ScatterPlotItem] = []
        self._row_lines: list[pg.PlotCurveItem] = []
        row = QtWidgets.QHBoxLayout()
        row.addWidget(self.load_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.no_tight)
        row.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(row)
        # the status on a line of its own: beside the buttons and the box it made the window
        # wider than a 1,024 x 768 screen
        layout.addWidget(self.status)
        # no sheet loaded: say what the chart would show, not empty axes with made-up ticks
        self.plot_view = EmptyStack(self.plot, NO_CHOICE_TEXT)
        layout.addWidget(self.plot_view, 1)
        self.runner = BackgroundRunner("gpu choice", cancel_running=True, parent=self)
        self.runner.progress.connect(self._on_progress)
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)

    # ------------------------------------------------------------------ API
    @property
    def choice(self) -> GpuChoice | None:
        """The GPU choice shown, or None."""
        return self._choice

    def set_session(self, session: Session) -> None:
        """The model, batch size, tokens and reliability the next run sweeps."""
        self._session = session

    def legend_labels(self) -> list[str]:
        """The legend's texts, in order."""
        return [label.text for _, label in self._legend.items]

    def scatter_items(self) -> list[pg.ScatterPlotItem]:
        """One scatter per price-sheet row (its plans that fit), in row order."""
        return list(self._items)

    def load(self, path: str | Path) -> bool:
        """Read the price sheet at ``path`` and start its sweeps; False (status says why) when
        the sheet is refused."""
        from core.io.price_sheet import read_price_sheet
        from core.plan.fields import ConfigError
        try:
            sheet = read_price_sheet(path)
        except ConfigError as exc:
            self.status.setText(f"Price sheet refused: {exc}")
            return False
        self._sheet_path = str(path)
        self._choice_labels = list(sheet.labels)
        session = self._session.copy()
        choose = self._choose
        if choose is None:
            from core.studies.gpu_choice import choose_gpus as choose
        more = {"no_tight": True} if self.no_tight.isChecked() else {}

        def job(report: Callable[[Any], None], cancel) -> GpuChoice:
            from core.studies.sweep import SweepCancelled
            try:
                return choose(session, sheet, cancel=cancel,
                              progress=lambda r, d, t: report((r, d, t)), **more)
            except SweepCancelled:
                raise JobCancelled() from None

        self.status.setText(f"Sweeping {len(sheet.rows)} GPU kinds of {Path(path).name}…")
        self.cancel_button.setEnabled(True)
        self.runner.submit(job)
        return True

    def cancel(self) -> None:
        """Stop the sweeps; the previous front stays."""
        self.runner.cancel()

    def shutdown(self) -> bool:
        """Stop the runner (the window closes)."""
        return self.runner.shutdown()

    def set_choice(self, choice: GpuChoice | None) -> None:
        """Show ``choice``: a scatter per kind, the front bold and joined, a legend."""
        self._choice = choice
        item = self.plot.getPlotItem()
        for s in [*self._items, *self._row_lines]:
            item.removeItem(s)
        self._items, self._row_lines = [], []
        self._legend.clear()
        if choice is None or choice.num_points == 0:
            self._front_line.setData([], [])
            self.plot_view.set_empty(True, NO_CHOICE_TEXT if choice is None else NO_POINTS_TEXT)
            return
        self.plot_view.set_empty(False)
        x = np.log10(choice.expected_days)
        y = np.log10(choice.expected_cost_usd)
        on_front = np.zeros(choice.num_points, bool)
        on_front[choice.front] = True
        own_front = np.zeros(choice.num_points, bool)  # each kind's own front: medium, a thin line
        for r, label in enumerate(choice.sheet.labels):
            color = KIND_COLORS[r % len(KIND_COLORS)]
            mine = choice.row_front(r)
            own_front[mine] = True
            line = pg.PlotCurveItem(x=x[mine], y=y[mine], pen=pg.mkPen(color, width=1.2))
            line.setZValue(1)
            item.addItem(line)
            self._row_lines.append(line)
            ks = np.flatnonzero((choice.row == r) & np.isfinite(x))
            brushes = [pg.mkBrush(color) if on_front[k] or own_front[k]
                       else pg.mkBrush(pg.mkColor(color).lighter(150)) for k in ks]
            sizes = [12 if on_front[k] else 8 if own_front[k] else 5 for k in ks]
            pens = [pg.mkPen("#202020", width=1.2) if on_front[k] else
                    pg.mkPen(pg.mkColor(color).darker(150), width=0.8) if own_front[k]
                    else pg.mkPen(None) for k in ks]
            s = pg.ScatterPlotItem(x=x[ks], y=y[ks], data=ks, brush=brushes, size=sizes, pen=pens,
                                   hoverable=True, tip=self._tip)
            s.setZValue(3)
            item.addItem(s)
            self._items.append(s)
            sample = pg.ScatterPlotItem(symbol="o", size=10, brush=pg.mkBrush(color),
                                        pen=pg.mkPen("#202020"))
            self._legend.addItem(sample, f"{label}  ${choice.sheet.rows[r].price_per_gpu_hour_usd:,.2f}/GPU-h")
        self._legend_samples = [s for s, _ in self._legend.items]
        self._legend.addItem(self._front_line, "combined front")
        self._front_line.setData(x[choice.front], y[choice.front])
        # show the kinds' fronts (every plan stays, a zoom out away)
        fronts = np.concatenate([choice.row_front(r) for r in range(len(choice.sheet.rows))])
        fx, fy = x[fronts], y[fronts]
        if fx.size:
            pad_x = max(float(fx.max() - fx.min()) * 0.08, 0.05)
            span_y = max(float(fy.max() - fy.min()), 0.1)
            self.plot.getPlotItem().getViewBox().setRange(  # room above for the legend
                xRange=(float(fx.min()) - pad_x, float(fx.max()) + pad_x),
                yRange=(float(fy.min()) - 0.15 * span_y, float(fy.max()) + 0.6 * span_y),
                padding=0)
        self.status.setText(self._summary(choice))

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _summary(choice: GpuChoice) -> str:
        parts = []
        for name, k in (("fewest days", choice.best_by_days),
                        ("fewest dollars", choice.best_by_dollars)):
            if k is not None:
                p = choice.point(k)
                parts.append(f"{name}: {format_count(p['num_gpus'])} {p['gpu']}, "
                             f"{format_day_count(p['expected_days'])} days, "
                             f"{format_usd_short(p['expected_cost_usd'])}")
        text = "; ".join(parts) or choice.no_point_reason()
        tight = tight_front_text(choice.num_tight_on_front, int(choice.front.size),
                                 choice.num_tight_left_out if choice.no_tight else None)
        if tight and choice.num_points:  # as the command line says it under its table
            text += f". {tight}"
        if choice.undecided:  # as the command line says it
            text += (f" ({format_count(choice.undecided)} plans pruned by their sweep could still "
                     "reach this front; vtrain sweep --gpus-from ... --exhaustive simulates them)")
        return text

    def _tip(self, x: float, y: float, data: Any) -> str:
        if self._choice is None or data is None or (isinstance(data, float) and math.isnan(data)):
            return ""
        return point_text(self._choice, int(data))

    @Slot()
    def _on_load_click(self) -> None:
        start = str(Path(self._sheet_path).parent) if self._sheet_path else str(Path.home())
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Load price sheet", start,
                                                        "Price sheets (*.csv);;All files (*)")
        if path:
            self.load(path)

    @Slot(int, object)
    def _on_progress(self, run_id: int, payload: Any) -> None:
        r, done, total = payload
        label = self._choice_labels[r] if r < len(self._choice_labels) else f"row {r + 1}"
        self.status.setText(f"Sweeping {label}: {done:,} of {total:,} plans…")

    @Slot(int, object, float)
    def _on_finished(self, run_id: int, choice: GpuChoice, seconds: float) -> None:
        self.cancel_button.setEnabled(False)
        self.set_choice(choice)
        self.choice_finished.emit(choice)

    @Slot(int, str)
    def _on_failed(self, run_id: int, message: str) -> None:
        self.cancel_button.setEnabled(False)
        self.status.setText(f"GPU choice failed: {message}")

    @Slot(int, object)
    def _on_cancelled(self, run_id: int, partial: Any) -> None:
        self.cancel_button.setEnabled(False)
        self.status.setText("Cancelled; the previous front stays.")
