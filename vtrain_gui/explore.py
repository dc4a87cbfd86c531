"""The Explore tab: sweep every parallel plan, plot training days against dollars, pick one.

A view over :mod:`core.studies.sweep` (the paper's first case study): the settings
form builds a :class:`core.studies.sweep.SweepSpace` for the session's model, global
batch size, cluster and cost; :class:`~vtrain_gui.workers.SweepRunner` runs
:func:`core.studies.sweep.run_sweep` off the GUI thread; the result is drawn as a
scatter of training days (x) against cost (y), one point per plan, with the
plans that do not fit in memory greyed, the Pareto front as a line and the
fastest, cheapest and cheapest-within-deadline plans marked; the same rows are
in a sortable table. Picking a point or a row emits :attr:`ExploreTab.plan_selected`
(the main window loads that plan into the editor and simulates it; its
timeline comes back to :meth:`ExploreTab.show_simulation`).

Filters (GPU count, fits in memory, deadline) are numpy masks from
:meth:`core.studies.sweep.SweepResult.select`; the front and the marked plans are
those of the plans shown (:meth:`core.studies.sweep.SweepResult.front_of` and ``best_of``
over the mask: the sweep's own rules, ties on days and dollars going to the least memory per
GPU), so the plot and the table always agree. "fits outside the margin only" in the settings
is ``vtrain sweep --no-tight``: the sweep leaves the tight plans out, and the summary says how
many, as the command line does under its front.

The settings form, the table, the plot and the preview of the editor's plan are views of
their own (:mod:`vtrain_gui.sweep_settings`, :mod:`vtrain_gui.sweep_table`,
:mod:`vtrain_gui.sweep_plot`, :mod:`vtrain_gui.plan_preview`); this module composes them
into the tab.
"""

from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.cli.common import tight_front_text
from core.plan.fields import ConfigError
from core.plan.session import Session
from core.sim.simulate import SimulationResult
from core.sim.report import tight_reason
from core.util.text import format_params
from core.studies.sweep import (SweepResult, restore_sweep,
                                saved_sweep, stale_reasons)

from .gpu_choice_view import GpuChoicePanel
from .flow_layout import FlowLayout
from .formatting import (ERROR_STYLE, short_text, format_count, format_day_count, format_gpus,
                         format_number_short, format_usd)
from .empty_state import EmptyStack
from .int_spin import INT64_MAX, IntSpinBox
from .save_image import save_pixmap
from .sweep_plot import CHEAPEST_COLOR, DEADLINE_COLOR, FASTEST_COLOR, SweepPlot, plan_text
from .plan_preview import PlanPreview
from .sweep_header import PHASE_TEXT, dimensions_html, no_points_html, same_inputs, stale_text
from .sweep_settings import SweepSettingsPanel
from .sweep_table import SweepTableModel, SweepTableView
from .workers import SweepRunner
from .wrapped_label import CappedTextBox

__all__ = ["ExploreTab", "best_index"]

#: Progress bar text before any sweep (not "0 / 1 plans", which reads as a result).
_NO_SWEEP_FORMAT = "no sweep run yet"
#: Lines of what a sweep swept and held shown over the plot; the rest scrolls.
DIMENSION_LINES = 3
#: Lines of the summary over the plot (counts, marked plans, warnings) in view; the rest scrolls.
#: (6 and 4 lines, with the preview under the plot, made the window at least 717 pixels tall
#: at 1,024 wide: more than the ~700 a 1,366 x 768 laptop leaves under its title and task bars.)
SUMMARY_LINES = 5
#: Most characters of the first warning the status under a finished sweep shows (whole on
#: hover); the large sweep's note took five lines there.
STATUS_WARNING_CHARS = 60
_EMPTY_TEXT = ("<p style='font-size:13pt'><b>No sweep yet</b></p>"
               "<p>Set the plans to try on the left (empty fields: every plan the GPU budget "
               "allows) and press <b>Run sweep</b> (Ctrl+R).</p>"
               "<p>Each plan is simulated and drawn here as training days against cost, with "
               "the Pareto front, the fastest and the cheapest plan; the table below lists them. "
               "Click a plan to load it into the editor.</p>")
_RUNNING_TEXT = ("<p style='font-size:13pt'><b>Sweeping…</b></p>"
                 "<p>The plans appear here when the sweep finishes.</p>")


def best_index(primary: np.ndarray, secondary: np.ndarray, mask: np.ndarray) -> int | None:
    """Index minimizing ``primary`` among ``mask`` (ties: smaller ``secondary``, then first).

    The tie rule of :attr:`core.studies.sweep.SweepResult.fastest` and ``cheapest``,
    applied to the plans a filter shows.
    """
    idx = np.flatnonzero(mask)
    if not idx.size:
        return None
    return int(idx[np.lexsort((idx, secondary[idx], primary[idx]))[0]])


class ExploreTab(QtWidgets.QWidget):
    """Sweep settings and Run/Cancel on the left; filters, scatter, table and a timeline right.

    The main window feeds it the edited session (:meth:`set_session`, the
    source of model, batch size, cluster and cost) and the editor's latest
    simulation (:meth:`show_simulation`), and loads the plans it reports.

    Signals
    -------
    plan_selected(int)
        The user picked plan ``i`` of :attr:`result` (point, row or link).
    open_in_plan_requested()
        The user asked to see the picked plan in the Plan tab (double click, button).
    pin_requested()
        The user asked to pin the plan in the editor (the picked one) for the Compare tab.
    settings_changed()
        The sweep settings changed (they are saved with the session).
    sweep_finished(object)
        A :class:`core.studies.sweep.SweepResult` is now shown.
    sweep_failed(str)
        The sweep raised; the message is shown too.
    sweep_cancelled()
        The sweep was cancelled; the previous result (if any) stays.
    """

    plan_selected = Signal(int)
    open_in_plan_requested = Signal()
    pin_requested = Signal()
    settings_changed = Signal()
    sweep_finished = Signal(object)
    sweep_failed = Signal(str)
    sweep_cancelled = Signal()

    _GPU_FILTERS = ("all GPU counts", "exactly", "at most")

    def __init__(self, sweep_fn: Callable[..., Any] | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = Session()
        self._run_inputs: tuple | None = None  # (session, space) of the latest run
        self._result: SweepResult | None = None
        self._fewest: tuple[Any, Session] | None = None  # set_fewest_gpus's
        self._saved_doc: dict | None = None  # the saved form of the result shown
        self._selected: int | None = None
        self._shown_mask = np.empty(0, bool)
        self._front = np.empty(0, bool)
        self._marks: dict[str, int | None] = {}
        self._current: int | None = None  # the editor's plan in the sweep
        self._abandoned_run: int | None = None
        self._syncing = False
        self._export_dir = str(Path.home())

        self._build_runner(sweep_fn)
        left = self._build_sweep_box()
        filters = self._build_filters()
        self._build_summary()
        self.plot = SweepPlot()
        self.plot.point_clicked.connect(self._on_plot_point_click)
        self.table_model = SweepTableModel(self)
        self.table = SweepTableView(self.table_model)
        self.table.selectionModel().currentRowChanged.connect(self._on_table_current_row_change)
        self.table.doubleClicked.connect(self._on_table_double_click)
        self.plan_preview = PlanPreview()
        self.preview = self.plan_preview.timeline
        self.open_button = self.plan_preview.open_button
        self.pin_button = self.plan_preview.pin_button
        self.open_button.clicked.connect(self._on_open_click)
        self.pin_button.clicked.connect(self.pin_requested)
        self._lay_out(left, filters, self._build_plans_and_preview())
        self._update_source()

    # ------------------------------------------------------------------ building the tab
    def _build_runner(self, sweep_fn: Callable[..., Any] | None) -> None:
        self.runner = SweepRunner(sweep_fn, parent=self)
        self.runner.started.connect(self._on_sweep_start)
        self.runner.progress.connect(self._on_sweep_progress)
        self.runner.phase_progress.connect(self._on_sweep_phase)
        self.runner.finished.connect(self._on_sweep_finish)
        self.runner.failed.connect(self._on_sweep_fail)
        self.runner.cancelled.connect(self._on_sweep_cancel)

    def _build_sweep_box(self) -> QtWidgets.QScrollArea:
        """The left column: where the sweep's inputs come from, its settings, Run/Cancel,
        progress, status and exports."""
        self._source = QtWidgets.QLabel()
        self._source.setObjectName("sweep.source")
        self._source.setWordWrap(True)
        self._source.setStyleSheet("color: #404040;")
        self.settings_panel = SweepSettingsPanel()
        self.settings_panel.changed.connect(self._on_settings_change)
        self.run_button = QtWidgets.QPushButton("Run sweep")
        self.run_button.setObjectName("sweep.run")
        self.run_button.setDefault(True)
        self.run_button.setToolTip("Simulate every valid plan of these settings (Ctrl+R)")
        self.run_button.setShortcut(QtGui.QKeySequence("Ctrl+R"))
        self.run_button.clicked.connect(self._on_run_click)
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setObjectName("sweep.cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self._on_cancel_click)
        self.progress_bar = QtWidgets.QProgressBar()
        self.progress_bar.setObjectName("sweep.progress")
        self.progress_bar.setFormat(_NO_SWEEP_FORMAT)
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.progress_bar.setTextVisible(True)
        self._status = QtWidgets.QLabel("Set the space and press Run.")
        self._status.setObjectName("sweep.status")
        self._status.setWordWrap(True)
        self._status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.export_csv_button = QtWidgets.QPushButton("Export CSV…")
        self.export_csv_button.setToolTip("Save every plan of the sweep as CSV")
        self.export_png_button = QtWidgets.QPushButton("Export PNG…")
        self.export_png_button.setToolTip("Save the plot as a PNG image")
        for b in (self.export_csv_button, self.export_png_button):
            b.setEnabled(False)
        self.export_csv_button.clicked.connect(self._on_export_csv_click)
        self.export_png_button.clicked.connect(self._on_export_png_click)
        settings_box = QtWidgets.QGroupBox("Sweep")
        box_layout = QtWidgets.QVBoxLayout(settings_box)
        box_layout.setContentsMargins(8, 6, 8, 8)
        box_layout.addWidget(self._source)
        box_layout.addSpacing(4)
        box_layout.addWidget(self.settings_panel)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.run_button, 1)
        buttons.addWidget(self.cancel_button)
        box_layout.addLayout(buttons)
        box_layout.addWidget(self.progress_bar)
        box_layout.addWidget(self._status)
        exports = QtWidgets.QHBoxLayout()
        exports.addWidget(self.export_csv_button)
        exports.addWidget(self.export_png_button)
        box_layout.addLayout(exports)
        left = QtWidgets.QWidget()
        left_layout = QtWidgets.QVBoxLayout(left)
        left_layout.setContentsMargins(6, 6, 6, 6)
        left_layout.addWidget(settings_box)
        left_layout.addStretch(1)
        left_scroll = QtWidgets.QScrollArea()
        left_scroll.setWidget(left)
        left_scroll.setWidgetResizable(True)
        left_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        left_scroll.setMinimumWidth(left.sizeHint().width() + 24)
        self._left_scroll = left_scroll
        return left_scroll

    def _build_filters(self) -> QtWidgets.QWidget:
        """The filter row over the plot: GPU count, fits in memory, deadline, log axes."""
        self.gpu_filter_mode = QtWidgets.QComboBox()
        self.gpu_filter_mode.setObjectName("filter.gpu_mode")
        self.gpu_filter_mode.addItems(list(self._GPU_FILTERS))
        self.gpu_filter = IntSpinBox()
        self.gpu_filter.setObjectName("filter.gpus")
        self.gpu_filter.setRange(1, INT64_MAX)
        self.gpu_filter.setGroupSeparatorShown(True)
        self.gpu_filter.setUnits(" GPU", " GPUs")
        self.gpu_filter.setEnabled(False)
        self.fits_only = QtWidgets.QCheckBox("fits in memory only")
        self.fits_only.setObjectName("filter.fits_only")
        self.fits_only.setToolTip("Hide the plans that do not fit in the GPU's memory; tight "
                                  "plans (inside the margin) stay, ringed: \"fits outside the "
                                  "margin only (--no-tight)\" on the left leaves them out of "
                                  "the sweep")
        self.within_deadline = QtWidgets.QCheckBox("within the deadline only")
        self.within_deadline.setObjectName("filter.within_deadline")
        self.within_deadline.setToolTip("Hide plans slower than the deadline set on the left")
        self.log_axes = QtWidgets.QCheckBox("log axes")
        self.log_axes.setObjectName("filter.log_axes")
        self.log_axes.setChecked(True)
        self.gpu_filter_mode.currentIndexChanged.connect(self._on_gpu_filter_mode_change)
        self.gpu_filter.valueChanged.connect(self._on_filter_change)
        self.fits_only.toggled.connect(self._on_filter_change)
        self.within_deadline.toggled.connect(self._on_filter_change)
        self.log_axes.toggled.connect(self._on_log_axes_toggle)
        self._filter_widgets = (self.gpu_filter_mode, self.gpu_filter, self.fits_only,
                                self.within_deadline, self.log_axes)
        # wraps onto a second row on a narrow window (in one row it made the window at least
        # 1,220 pixels wide, wider than a 1,024 x 768 screen)
        self.filter_bar = QtWidgets.QWidget()
        self.filter_bar.setObjectName("sweep.filters")
        filters = FlowLayout(self.filter_bar)
        filters.setContentsMargins(6, 4, 6, 0)
        gpus = QtWidgets.QWidget()  # "Show: [mode] [count]" wraps as one
        gpus_row = QtWidgets.QHBoxLayout(gpus)
        gpus_row.setContentsMargins(0, 0, 0, 0)
        gpus_row.addWidget(QtWidgets.QLabel("Show:"))
        gpus_row.addWidget(self.gpu_filter_mode)
        gpus_row.addWidget(self.gpu_filter)
        filters.addWidget(gpus)
        filters.addSpacing(8)
        filters.addWidget(self.fits_only)
        filters.addWidget(self.within_deadline)
        filters.addSpacing(8)
        filters.addWidget(self.log_axes)
        return self.filter_bar

    def _build_summary(self) -> None:
        """The stale-result warning and the summary line (fastest, cheapest...)."""
        self._stale = QtWidgets.QLabel(stale_text([]))
        self._stale.setObjectName("sweep.stale")
        self._stale.setWordWrap(True)
        self._stale.setStyleSheet("background: #FFF4CE; color: #5C4400; padding: 3px;")
        self._stale.setVisible(False)
        # the counts, the marked plans and the calibration warning: as tall as its lines up to
        # SUMMARY_LINES, the rest scrolls (unbounded, it took the height the plot needed, whose
        # time axis was cut off at 1,280 x 800 with three marked plans)
        self.summary_box = CappedTextBox(SUMMARY_LINES)
        self.summary_box.setObjectName("sweep.summary_box")
        self._summary = self.summary_box.label
        self._summary.setObjectName("sweep.summary")
        self._summary.setTextFormat(Qt.TextFormat.RichText)
        self._summary.linkActivated.connect(self._on_summary_link)
        self.summary_box.setText("No sweep yet.")
        # what the sweep swept and held: a long paragraph (every value of every field), in a
        # box of a few lines that scrolls; at 1,280 x 800 it took half the tab's height and
        # left two rows of the table in view
        self._dimensions = QtWidgets.QLabel()
        self._dimensions.setObjectName("sweep.dimensions")
        self._dimensions.setWordWrap(True)
        self._dimensions.setTextFormat(Qt.TextFormat.RichText)
        self._dimensions.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        small = self._dimensions.font()
        small.setPointSizeF(small.pointSizeF() * 0.85)
        self._dimensions.setFont(small)
        scroll = self.dimensions_box = QtWidgets.QScrollArea()
        scroll.setObjectName("sweep.dimensions_box")
        scroll.setWidget(self._dimensions)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMaximumHeight(DIMENSION_LINES * QtGui.QFontMetrics(small).lineSpacing() + 4)
        scroll.setVisible(False)

    def _build_plans_and_preview(self) -> QtWidgets.QSplitter:
        """Plot over table (or the empty-state text), over the preview of the editor's plan."""
        plans = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        # no plan with a point (none fits in memory, say): why, instead of empty axes
        self.plot_view = EmptyStack(self.plot, "")
        self.plot_view.set_empty(False)
        plans.addWidget(self.plot_view)
        plans.addWidget(self.table)
        plans.setChildrenCollapsible(True)
        plans.setStretchFactor(0, 4)
        plans.setStretchFactor(1, 3)
        plans.setSizes([420, 260])
        # no sweep: say what to do instead of showing empty axes and an empty table
        self.plans_view = EmptyStack(plans, _EMPTY_TEXT)
        splitter = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        # which GPUs to rent: a price sheet's kinds on one front (vtrain_gui/gpu_choice_view.py)
        self.gpu_choice = GpuChoicePanel()
        self.plans_tabs = QtWidgets.QTabWidget()
        self.plans_tabs.addTab(self.plans_view, "Plans")
        self.plans_tabs.addTab(self.gpu_choice, "GPU choice")
        splitter.addWidget(self.plans_tabs)
        splitter.addWidget(self.plan_preview)
        splitter.setChildrenCollapsible(True)
        splitter.setStretchFactor(0, 7)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([680, 230])
        self._splitter = splitter
        return splitter

    def _lay_out(self, left: QtWidgets.QWidget, filters: QtWidgets.QWidget,
                 splitter: QtWidgets.QSplitter) -> None:
        """Left column beside filters, summary and the plans."""
        right = QtWidgets.QWidget()
        right_layout = QtWidgets.QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(3)
        right_layout.addWidget(filters)
        summary_row = QtWidgets.QVBoxLayout()
        summary_row.setContentsMargins(6, 0, 6, 0)
        summary_row.addWidget(self._stale)
        summary_row.addWidget(self.summary_box)
        summary_row.addWidget(self.dimensions_box)
        right_layout.addLayout(summary_row)
        right_layout.addWidget(splitter, 1)

        main = QtWidgets.QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left)
        main.addWidget(right)
        main.setStretchFactor(0, 0)
        main.setStretchFactor(1, 1)
        main.setChildrenCollapsible(False)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(main)

    # ------------------------------------------------------------------ API: inputs
    @property
    def result(self) -> SweepResult | None:
        """The sweep shown, or None."""
        return self._result

    @property
    def selected_index(self) -> int | None:
        """Plan picked in the plot and table (row of :attr:`result`), or None."""
        return self._selected

    @property
    def status_text(self) -> str:
        """Text of the sweep status line."""
        return self._status.text()

    @property
    def summary_text(self) -> str:
        """Text of the summary above the plot (rich text), with what the sweep swept and held
        (the box under it) after a ``<br>``."""
        dims = self._dimensions.text()
        return self._summary.text() + (f"<br>{dims}" if dims else "")

    @property
    def is_stale(self) -> bool:
        """Whether the session's inputs changed since the sweep shown."""
        return not self._stale.isHidden()

    def set_session(self, session: Session) -> None:
        """The edited session changed: its model, batch size, cluster and cost feed the next sweep."""
        self._session = session.copy()
        self.gpu_choice.set_session(self._session)
        self._update_source()
        self.settings_panel.set_defaults_hint(self._session)
        self._update_stale()
        self._update_current()

    def reset(self, session: Session) -> None:
        """A new or opened session: stop any sweep, drop the result, show ``session.sweep``."""
        self._abandoned_run = self.runner.running_id  # its "cancelled" needs no message
        self.runner.cancel()
        self.set_result(None)
        self.settings_panel.reset(session)
        self.set_session(session)
        self.plan_preview.clear()
        self._status.setText("Set the space and press Run.")
        if isinstance(session.sweep, dict) and session.sweep.get("result") is not None:
            self._show_saved(session.sweep["result"])
        self._idle_progress()

    def settings(self) -> dict[str, Any] | None:
        """Sweep settings for ``Session.sweep`` (None: nothing to save), with the sweep shown
        in compact form under ``"result"`` (:func:`core.studies.sweep.saved_sweep`)."""
        out = self.settings_panel.settings()
        if out is None:
            return None
        out = {k: v for k, v in out.items() if k != "result"}
        if self._saved_doc is not None:
            out["result"] = copy.deepcopy(self._saved_doc)
        return out

    def _show_saved(self, doc: Any) -> None:
        """Show the sweep saved with the session (``Session.sweep["result"]``), or say why not."""
        try:
            result = restore_sweep(doc)
        except ConfigError as exc:
            self._set_status(f"The sweep saved with the session was not understood: "
                             f"{exc.errors[0]}", error=True)
            return
        self.set_result(result, saved_doc=doc)
        n = result.saved["num_plans"]
        self._set_status(f"The sweep saved with the session: {format_count(n)} plans, "
                         f"{format_count(result.num_plans)} shown (the Pareto front and the best "
                         f"plans); press Run to sweep again.")

    # ------------------------------------------------------------------ API: sweep
    def run(self) -> bool:
        """Start a sweep of the settings for the session; False (and messages) when invalid."""
        try:
            space = self.settings_panel.space()
        except ConfigError as exc:
            self.settings_panel.check()
            self._set_status(f"Cannot run: {exc.errors[0]}", error=True)
            return False
        if self.settings_panel.mark_used():
            self.settings_changed.emit()
        self._run_inputs = (self._session.copy(), space)  # for the reasons of an empty sweep
        self.runner.start(self._session, space, self.settings_panel.deadline_days(),
                          options=self.settings_panel.execution())
        return True

    def cancel(self) -> None:
        """Cancel the running sweep (the previous result stays)."""
        self.runner.cancel()

    def shutdown(self) -> bool:
        """Stop the sweep thread (window closing)."""
        return self.gpu_choice.shutdown() & self.runner.shutdown()

    def set_result(self, result: SweepResult | None, saved_doc: dict | None = None) -> None:
        """Show ``result`` (None clears); the selection is cleared. ``saved_doc``: the saved
        form it was read from (default: :func:`core.studies.sweep.saved_sweep` of it)."""
        self._result = result
        self._saved_doc = (saved_doc if saved_doc is not None or result is None
                           else saved_sweep(result))
        self._selected = None
        self.plot.set_result(result, redraw=False)  # drawn once, by _apply_filters below
        self.table_model.set_result(result)
        self.table.hide_constant_columns(result)  # plan fields equal in every plan
        self.table.size_columns_to(self.table_model)  # as wide as this sweep's values
        has = result is not None
        if has:
            gpus = self._session.plan.num_gpus if isinstance(self._session.plan.num_gpus, int) else 1
            with QtCore.QSignalBlocker(self.gpu_filter):
                self.gpu_filter.setValue(max(1, gpus))
        self._apply_filters(auto_range=True)
        self.export_csv_button.setEnabled(has)
        self.export_png_button.setEnabled(has)
        self.plans_view.set_empty(not has)
        for w in self._filter_widgets:
            w.setEnabled(has and (w is not self.gpu_filter or self.gpu_filter_mode.currentIndex() > 0))
        self._update_stale()
        self._update_current()

    # ------------------------------------------------------------------ API: selection, view
    def select_plan(self, index: int | None, *, emit: bool = True) -> None:
        """Pick plan ``index`` in plot and table; with ``emit``, report it (:attr:`plan_selected`)."""
        if self._result is None or index is None or not 0 <= index < self._result.num_plans:
            index = None
        self._selected = index
        self.plot.set_selected(index)
        self._sync_table_selection()
        if emit and index is not None:
            self.plan_selected.emit(index)

    def visible_mask(self) -> np.ndarray:
        """Bool (num_plans,): plans the filters show."""
        return self._shown_mask.copy()

    def front_mask(self) -> np.ndarray:
        """Bool (num_plans,): the Pareto front of the plans shown."""
        return self._front.copy()

    def marks(self) -> dict[str, int | None]:
        """Fastest, cheapest and cheapest-within-deadline plans among those shown."""
        return dict(self._marks)

    def show_simulation(self, result: SimulationResult) -> None:
        """Show the timeline of the editor's latest simulation under the table."""
        self.plan_preview.show_simulation(result)

    def export_csv(self, path: str | Path) -> bool:
        """Write every plan of the sweep to ``path`` (atomic); on error show a message."""
        if self._result is None:
            return False
        try:
            self._result.write_csv(path)
        except OSError as exc:
            QtWidgets.QMessageBox.critical(self, "Cannot export CSV", f"{path}: {exc.strerror or exc}")
            return False
        self._set_status(f"Exported {format_count(self._result.num_plans)} plans to {path}")
        return True

    def export_png(self, path: str | Path) -> bool:
        """Save the plot as a PNG image at ``path`` (atomic); on error show a message."""
        try:
            save_pixmap(self.plot.grab(), path)
        except OSError as exc:
            QtWidgets.QMessageBox.critical(self, "Cannot export PNG",
                                           f"{path}: {exc.strerror or exc}")
            return False
        self._set_status(f"Saved the plot to {path}")
        return True

    # ------------------------------------------------------------------ handlers: runner
    @Slot(int)
    def _on_sweep_start(self, run_id: int) -> None:
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress_bar.setFormat("%v / %m plans")
        self.progress_bar.setRange(0, 0)  # busy until the number of plans is known
        if self._result is None:
            self.plans_view.set_empty(True, _RUNNING_TEXT)
        self._set_status("Enumerating plans…")
        self._update_summary()

    @Slot(int, str, int, int)
    def _on_sweep_phase(self, run_id: int, phase: str, done: int, total: int) -> None:
        """The phases before the simulation (enumeration, memory, bounds): their progress."""
        if run_id != self.runner.latest_run_id or phase == "simulate":
            return
        text = PHASE_TEXT.get(phase, phase)
        self.progress_bar.setFormat(f"{text}: %p%")
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(done)
        self._set_status(f"{text}…")

    @Slot(int, int, int)
    def _on_sweep_progress(self, run_id: int, done: int, total: int) -> None:
        if run_id != self.runner.latest_run_id:
            return
        if done >= total:  # every plan simulated, pruned or not fitting: the result is built
            # (costs, the front, the best plans; on a million plans, minutes) and then drawn
            self.progress_bar.setRange(0, 0)  # busy: not finished until the result is shown
            self._set_status(f"Building the result of {format_count(total)} plans…")
            return
        self.progress_bar.setFormat(f"{done:,} / {total:,} plans")  # thousands separated
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(done)
        self._set_status(f"Simulating {format_count(total)} plans…")

    @Slot(int, object, float)
    def _on_sweep_finish(self, run_id: int, result: SweepResult, seconds: float) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self._sweep_ended()
        n = result.num_plans
        self.progress_bar.setFormat(f"{n:,} / {n:,} plans")
        self.progress_bar.setRange(0, max(n, 1))
        self.progress_bar.setValue(n)
        self.set_result(result)
        self.settings_changed.emit()  # the result is saved with the session
        rate = result.num_plans / seconds if seconds > 0 else 0.0
        num_fit = int(np.count_nonzero(result.fits_in_memory))
        text = (f"{format_count(result.num_plans)} plans ({format_count(num_fit)} fit in memory, "
                f"{format_count(result.num_feasible)} simulated) in {seconds:,.1f} s, "
                f"{format_count(rate)} plans/s")
        inputs = self._run_inputs
        if result.num_plans == 0 and inputs is not None:  # why, as the command line says it
            from core.studies.sweep import no_plan_errors
            reasons = no_plan_errors(*inputs)
            self._set_status("\n".join(str(e) for e in reasons[:4])
                             + (f"\n(+{len(reasons) - 4} more)" if len(reasons) > 4 else ""),
                             error=True)
            self.sweep_finished.emit(result)
            return
        tip = ""
        if result.warnings:
            # the first warning's start, whole with the others on hover: the large sweep's
            # five lines ran off the bottom of the column at 1,366 x 768
            from core.sim.comm import summarize_warnings
            folded = summarize_warnings(result.warnings)
            first = short_text(folded[0], STATUS_WARNING_CHARS)
            more = f"+{len(folded) - 1} more" if len(folded) > 1 else ""
            hover = ", ".join(x for x in (more, "hover" if first != folded[0] or more else "") if x)
            text += f"\n⚠ {first}" + (f" ({hover})" if hover else "")
            tip = "\n".join(f"⚠ {w}" for w in folded)
        if inputs is not None:  # values given that no valid plan uses, as the command line
            from core.studies.sweep import unused_values
            for e in unused_values(*inputs, result)[:3]:
                text += f"\nNot in any valid plan: {e}"
        self._set_status(text, tooltip=tip)
        # the outcome in view: at 1,366 x 768 the column ends below the window (once the
        # column is laid out again with the status's new lines)
        QtCore.QTimer.singleShot(0, self._reveal_status)
        self.sweep_finished.emit(result)

    @Slot(int, str)
    def _on_sweep_fail(self, run_id: int, message: str) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self._sweep_ended()
        self._idle_progress()
        self._set_status(f"Sweep failed: {message}", error=True)
        self.sweep_failed.emit(message)

    @Slot(int)
    def _on_sweep_cancel(self, run_id: int) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self._sweep_ended()
        if run_id == self._abandoned_run:
            self._idle_progress()
            return
        if self._result is None:
            self._idle_progress()
        kept = " (showing the previous sweep)" if self._result is not None else ""
        self._set_status(f"Sweep cancelled{kept}.")
        self.sweep_cancelled.emit()

    def _idle_progress(self) -> None:
        """The progress bar with no sweep running: the plans of the result shown, or none."""
        n = self._result.num_plans if self._result is not None else 0
        self.progress_bar.setFormat(f"{n:,} / {n:,} plans" if n else _NO_SWEEP_FORMAT)
        self.progress_bar.setRange(0, max(n, 1))
        self.progress_bar.setValue(n)
        self.plans_view.set_empty(self._result is None)

    def _sweep_ended(self) -> None:
        busy = self.runner.busy
        self.run_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)
        self._update_summary()

    # ------------------------------------------------------------------ handlers: widgets
    @Slot()
    def _on_run_click(self) -> None:
        self.run()

    @Slot()
    def _on_cancel_click(self) -> None:
        self.cancel()

    @Slot()
    def _on_settings_change(self) -> None:
        self._apply_filters()  # the deadline takes effect at once
        self.settings_changed.emit()

    @Slot(int)
    def _on_gpu_filter_mode_change(self, index: int) -> None:
        self.gpu_filter.setEnabled(index > 0 and self._result is not None)
        self._apply_filters(auto_range=True)

    @Slot()
    def _on_filter_change(self) -> None:
        self._apply_filters(auto_range=True)

    @Slot(bool)
    def _on_log_axes_toggle(self, checked: bool) -> None:
        self.plot.set_log_axes(checked)

    @Slot(int, bool)
    def _on_plot_point_click(self, index: int, double: bool) -> None:
        self.select_plan(index)
        if double:
            self.open_in_plan_requested.emit()

    @Slot(QtCore.QModelIndex, QtCore.QModelIndex)
    def _on_table_current_row_change(self, current: QtCore.QModelIndex,
                                     previous: QtCore.QModelIndex) -> None:
        if self._syncing or not current.isValid():
            return
        index = self.table_model.result_index(current.row())
        if index != self._selected:
            self.select_plan(index)

    @Slot(QtCore.QModelIndex)
    def _on_table_double_click(self, index: QtCore.QModelIndex) -> None:
        if index.isValid():
            plan = self.table_model.result_index(index.row())
            if plan != self._selected:
                self.select_plan(plan)
            self.open_in_plan_requested.emit()

    @Slot(str)
    def _on_summary_link(self, link: str) -> None:
        if link.startswith("plan:"):
            self.select_plan(int(link[5:]))

    @Slot()
    def _on_open_click(self) -> None:
        self.open_in_plan_requested.emit()

    @Slot()
    def _on_export_csv_click(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(
            self, "Export plans as CSV", str(Path(self._export_dir) / "sweep.csv"),
            "CSV files (*.csv);;All files (*)")
        if path:
            path = path if Path(path).suffix else path + ".csv"
            self._export_dir = str(Path(path).parent)
            self.export_csv(path)

    @Slot()
    def _on_export_png_click(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(
            self, "Export plot as PNG", str(Path(self._export_dir) / "sweep.png"),
            "PNG images (*.png);;All files (*)")
        if path:
            path = path if Path(path).suffix else path + ".png"
            self._export_dir = str(Path(path).parent)
            self.export_png(path)

    # ------------------------------------------------------------------ internals
    def _reveal_status(self) -> None:
        """Scroll the settings column to the status under the progress bar and the export
        buttons under it (at 1,366 x 768 the column ends below the window), the status as
        tall as its wrapped lines need."""
        status = self._status
        status.setMinimumHeight(status.heightForWidth(status.width()) if status.width() > 0 else 0)
        # the settings laid out at their height first (they are squeezed to the view's until
        # the scroll area takes the column's new size: the status looked in view, and was not)
        for _ in range(3):
            QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.LayoutRequest)
        self._left_scroll.ensureWidgetVisible(self.export_csv_button, 0, 6)  # under it
        self._left_scroll.ensureWidgetVisible(status, 0, 6)

    def _set_status(self, text: str, error: bool = False, tooltip: str = "") -> None:
        """The lines under the progress bar (``tooltip``: on hover)."""
        self._status.setText(text)
        self._status.setToolTip(tooltip)
        self._status.setStyleSheet(ERROR_STYLE if error else "")

    def _apply_filters(self, auto_range: bool = False) -> None:
        r = self._result
        if r is None:
            self._shown_mask = np.empty(0, bool)
            self._front = np.empty(0, bool)
            self._marks = {}
            self._update_summary()
            self.plot.set_view(self._shown_mask, self._front, {}, None)
            self._update_plot_empty()
            return
        deadline = self.settings_panel.deadline_days()
        self.within_deadline.setEnabled(deadline is not None)
        mode = self.gpu_filter_mode.currentIndex()
        gpus = self.gpu_filter.value()
        shown = r.select(num_gpus=gpus if mode == 1 else None, max_gpus=gpus if mode == 2 else None,
                         fits_only=self.fits_only.isChecked(),
                         deadline_days=deadline if self.within_deadline.isChecked() else None)
        # the rules of the sweep's own front and picks (vtrain sweep's), over the plans shown:
        # of plans tied on days and dollars, the one needing the least memory per GPU
        front = r.front_of(shown)
        marks = {"fastest": r.best_of("days", shown), "cheapest": r.best_of("cost", shown),
                 "deadline": (r.best_of("cost", shown & (r.training_days <= deadline))
                              if deadline is not None else None)}
        self._shown_mask, self._front, self._marks = shown, front, marks
        self.plot.set_view(shown, front, marks, deadline, auto_range=auto_range)
        self._update_plot_empty()
        self.table_model.set_mask(shown, front)
        self._sync_table_selection()
        self._update_summary()

    def set_fewest_gpus(self, fewest: Any, session: Session) -> None:
        """The fewest GPUs at which ``session``'s model fits
        (:class:`core.studies.fit_changes.FewestGpus`, or None): named by the plot when no plan
        of a sweep of that session fits."""
        self._fewest = (fewest, session.copy()) if fewest is not None else None
        self._update_plot_empty()

    def _update_plot_empty(self) -> None:
        """The plot, or why it has no point (no plan fits in memory ...) and what to try."""
        r = self._result
        if r is None:
            self.plot_view.set_empty(False)
            return
        fewest = None
        if self._fewest is not None and same_inputs(r.session, self._fewest[1], r.space):
            fewest = self._fewest[0]
        text = no_points_html(r, self._shown_mask, fewest)
        self.plot_view.set_empty(text is not None, text)

    def _update_summary(self) -> None:
        r = self._result
        running = self.runner.busy
        if r is None:
            self._dimensions.setText("")
            self.dimensions_box.setVisible(False)
            self.summary_box.setText("<b>Sweep running…</b> the plans appear when it finishes."
                                  if running else
                                  "No sweep yet: set the space on the left and press Run.")
            return
        deadline = self.settings_panel.deadline_days()
        shown = int(np.count_nonzero(self._shown_mask))
        # plans that fit: those simulated, those pruned (they fit, but cannot win) and those
        # too large to simulate
        fit = int(np.count_nonzero(self._shown_mask & r.fits_in_memory))
        simulated = int(np.count_nonzero(self._shown_mask & r.feasible))
        n_front = int(self._front.sum())
        parts = [f"<b>{format_count(shown)}</b> of {format_count(r.num_plans)} plans shown "
                 f"({format_count(fit)} fit in memory, {format_count(simulated)} simulated), "
                 f"{format_count(n_front)} on the Pareto front"]
        # one line per plan marked: a plan that is the fastest and the cheapest (and the
        # cheapest within the deadline) is named once, its marks together (three identical
        # two-line entries took the height the plot's axis needed at 1,280 x 800)
        marked: dict[int, list[str]] = {}
        for name, label, color in (
                ("fastest", "fastest", FASTEST_COLOR), ("cheapest", "cheapest", CHEAPEST_COLOR),
                ("deadline", f"cheapest within {format_number_short(deadline or 0)} days",
                 DEADLINE_COLOR)):
            i = self._marks.get(name)
            if i is None or (name == "deadline" and deadline is None):
                continue
            marked.setdefault(i, []).append(f'<span style="color:{color}">■</span> '
                                            f'<a href="plan:{i}">{label}</a>')
        for i, names in marked.items():
            parts.append(f"{', '.join(names)}: "
                         f"{format_day_count(r.training_days[i])} days, {format_usd(r.cost_usd[i])} "
                         f"({plan_text(r, i)}, {format_gpus(r.num_gpus[i])})")
        if deadline is not None and self._marks.get("deadline") is None:
            parts.append(f"no plan that fits trains within {format_number_short(deadline)} days")
        i = self._current
        if i is not None and self._shown_mask[i]:
            if not r.fits_in_memory[i]:
                where = "does not fit in memory"
            elif not r.feasible[i]:  # fits, no figures: too large to simulate, or pruned
                where = html.escape(r.reason[i])
            elif self._front[i]:
                where = "on the Pareto front"
            else:
                k = int(np.count_nonzero(self._shown_mask[r.dominated_by(i)]))
                where = (f"dominated by {format_count(k)} plan{'s' if k != 1 else ''} shown"
                         if k else "off the front: a plan shown has the same days and cost "
                         "with less memory per GPU")
            if r.fits_in_memory[i] and r.memory_verdict[i] == "tight":
                where += (" (tight in memory: "
                          + tight_reason(float(r.max_memory_per_gpu_bytes[i]),
                                         r.memory_capacity_bytes,
                                         r.session.cluster.memory_reserve_fraction) + ")")
            # a plan the sweep did not simulate (it does not fit, say) has no figures: no
            # "– days, –" (the Plan tab has its figures)
            figures = (f"{format_day_count(r.training_days[i])} days, {format_usd(r.cost_usd[i])} "
                       if np.isfinite(r.training_days[i]) and np.isfinite(r.cost_usd[i]) else "")
            parts.append(f'◇ <a href="plan:{i}">plan in the editor</a>: '
                         f"{figures}({plan_text(r, i)}, {format_gpus(r.num_gpus[i])})"
                         f" — {where}")
        # as vtrain sweep prints it under its front: its tight plans, or those left out (after
        # the marked plans, which stay in view when the summary scrolls)
        tight = tight_front_text(
            int(np.count_nonzero(self._front & (np.asarray(r.memory_verdict) == "tight"))),
            n_front, r.num_tight_left_out if r.no_tight else None)
        if tight:
            parts.append(html.escape(tight) if r.no_tight else
                         f'<span style="color:#B26A00">{html.escape(tight)}</span>')
        # the calibration warning after the marked plans: in a summary of more lines than
        # its box shows, the plans a planner picks stay in view and the warning scrolls
        n_out = int(getattr(r, "num_outside_calibration", 0) or 0)
        departures = getattr(r, "calibration_departures", None)
        if n_out and departures is not None and any(departures):
            # as vtrain sweep says it: the ⚠ plans' bands are of unknown coverage
            named = sorted({departures[i] for i in np.flatnonzero(self._front).tolist()
                            if departures[i]})
            pruned = "simulated " if simulated < fit else ""
            parts.append(f'<span style="color:#B26A00">⚠ {format_count(n_out)} {pruned}plans '
                         "that fit leave what the profile was calibrated on (error band of unknown "
                         "coverage)" + (f"; on the front: {html.escape(' | '.join(named))}"
                                        if named else "") + "</span>")
        if running:
            parts[0] = "<b>A new sweep is running</b>; the previous one: " + parts[0]
        dims = dimensions_html(r.dimensions, r.session.plan)  # what the sweep swept and held, and why
        self.summary_box.setText(" · ".join(parts[:1]) + "<br>" + "<br>".join(parts[1:]))
        self._dimensions.setText(dims)
        self.dimensions_box.setVisible(bool(dims))

    def _sync_table_selection(self) -> None:
        """Select the row of the picked plan without reporting it again."""
        self._syncing = True
        try:
            sel = self.table.selectionModel()
            row = self.table_model.row_of(self._selected) if self._selected is not None else -1
            if row < 0:
                sel.clearSelection()
                sel.setCurrentIndex(QtCore.QModelIndex(),
                                    QtCore.QItemSelectionModel.SelectionFlag.NoUpdate)
                return
            index = self.table_model.index(row, 0)
            sel.setCurrentIndex(index, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect
                                | QtCore.QItemSelectionModel.SelectionFlag.Rows)
            self.table.scrollTo(index, QtWidgets.QAbstractItemView.ScrollHint.EnsureVisible)
        finally:
            self._syncing = False

    def _update_source(self) -> None:
        s = self._session
        try:
            tokens = format_params(s.cost.training_tokens)
            self._source.setText(
                f"From the Plan tab: <b>{html.escape(str(s.model.name))}</b>, global batch "
                f"B = {format_count(s.plan.global_batch_size)}, {s.plan.precision}; "
                f"{html.escape(str(s.cluster.gpu))}, {s.cluster.gpus_per_node} per node; {tokens} tokens at "
                f"${s.cost.price_per_gpu_hour_usd:,.2f}/GPU-hour.")
        except (TypeError, ValueError):
            self._source.setText("From the Plan tab: (invalid inputs)")

    def _update_stale(self) -> None:
        stale = self._result is not None and not same_inputs(self._result.session, self._session,
                                                              self._result.space)
        if stale and self._saved_doc is not None:  # which session fields changed
            self._stale.setText(stale_text(stale_reasons(self._saved_doc, self._session)))
        self._stale.setVisible(stale)

    def _update_current(self) -> None:
        r = self._result
        index = None
        if r is not None and same_inputs(r.session, self._session, r.space):
            index = r.index_of(self._session.plan)
        self._current = index
        self.plot.set_current(index)
        self._update_summary()
