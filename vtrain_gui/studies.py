"""The Studies tab: the vTrain paper's compute-optimal model study and its shared-cluster
scheduler study, over the session's cluster.

Both run on a worker thread (a :class:`~vtrain_gui.workers.SweepRunner` with the study
in place of the sweep, so Cancel and progress work the same way) and show only what
:mod:`core.studies.optimal` and :mod:`core.studies.scheduler` compute; ``vtrain optimal`` and
``vtrain schedule`` print the same numbers.
"""

from __future__ import annotations

from typing import Any, Callable

import html
import json

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.cli.common import NO_TIGHT_OPTIMAL_HELP, NO_TIGHT_OPTIMAL_NOTE
from core.plan.session import Session
from core.studies.optimal import MAX_DAYS, MAX_SPREAD
from core.util.text import short_repr, shown_name

from .sweep_header import dimensions_html
from .study_panel import (AXIS_TEXT, SIDE_WIDTH, GpuHoursSpinBox, PercentSpinBox, StudyPanel,
                          cancel_check, dark_axes, fill_table, gpu_spin, study_table)
from .study_schedule import DEFAULT_TRACE, SchedulePanel

#: the scheduler study (vtrain_gui.study_schedule) and the shared form and widgets
#: (vtrain_gui.study_panel) are re-exported where the tab was one module
__all__ = ["StudiesTab", "OptimalPanel", "SchedulePanel", "DEFAULT_TRACE", "OPTIMAL_COLUMNS",
           "OPTIMAL_HEADERS", "SIDE_WIDTH", "PercentSpinBox", "budget_days", "run_optimal_study"]

_BEST = "#2E7D32"
_POINT = "#1565C0"
#: The compute-optimal table's columns (their keys; the headers: :data:`OPTIMAL_HEADERS`).
OPTIMAL_COLUMNS = ("params", "L", "h", "heads", "t p d b", "SP", "ZeRO", "cp", "schedule",
                   "recompute", "MFU", "GiB", "tokens", "tokens/param", "loss", "note")
#: Each column's header, short as ``vtrain optimal``'s table heads it (16 columns beside the
#: form in a 1,024-pixel window), and its tooltip: the full name, units and Megatron-LM name.
OPTIMAL_HEADERS = {
    "params": ("params", "Parameters N of the candidate model"),
    "L": ("L", "Transformer layers (--num-layers)"),
    "h": ("h", "Hidden size (--hidden-size)"),
    "heads": ("a", "Attention heads (--num-attention-heads)"),
    "t p d b": ("t p d b", "The fastest plan's tensor-, pipeline- and data-parallel sizes and "
                           "micro-batch size (--tensor-model-parallel-size, "
                           "--pipeline-model-parallel-size, data parallel, --micro-batch-size)"),
    "SP": ("SP", "Sequence parallelism (--sequence-parallel)"),
    "ZeRO": ("ZeRO", "ZeRO stage (0: nothing sharded; 1: the optimizer state, Megatron's "
                     "distributed optimizer; 2: and the gradients; 3: and the weights, FSDP)"),
    "cp": ("cp", "Context-parallel size (--context-parallel-size)"),
    "schedule": ("sched", "Pipeline schedule"),
    "recompute": ("recomp", "Activation recomputation (--recompute-granularity)"),
    "MFU": ("MFU", "Model FLOPs utilization of the fastest plan, attention and output layer "
                   "counted (Megatron-LM's definition); ⚠: outside what the profile was "
                   "calibrated on"),
    "GiB": ("GiB", "Memory per GPU in GiB (~ = tight: inside the margin of the GPU's memory, "
                   "or over it only with the allocator's cache)"),
    "tokens": ("tokens", "Tokens the plan trains in the budget's days"),
    "tokens/param": ("D/N", "Tokens per parameter, D / N (Chinchilla's rule: about 20)"),
    "loss": ("loss", "Chinchilla's fitted loss (nats/token; Besiroglu et al. 2024)"),
    "note": ("note", "The lowest-loss candidate, the rule's size, why no plan fits, or a loss "
                     "outside the data of Chinchilla's fit (70M-16B parameters on 5B-500B "
                     "tokens, Hoffmann et al. 2022): extrapolated, or above ln V"),
}


def budget_days(settings: dict) -> float:
    """The wall-clock days of the compute-optimal form's budget: ``settings["days"]``, or with
    ``settings["budget"] == "gpu_hours"`` the days that ``num_gpus`` GPUs take to spend
    ``settings["gpu_hours"]`` GPU-hours (:func:`core.studies.optimal.days_for_gpu_hours`, what
    ``vtrain optimal --gpu-hours`` studies).

    Raises
    ------
    ConfigError
        The GPU-hours' days out of the study's range, in the command line's words (named
        ``--gpu-hours``)."""
    if settings.get("budget") == "gpu_hours":
        from core.studies.optimal import days_for_gpu_hours
        return days_for_gpu_hours(settings["num_gpus"], settings["gpu_hours"])
    return settings["days"]


def run_optimal_study(session: Session, settings: dict, _unused: Any,
                      progress: Callable[[int, int], None], cancel: Any) -> Any:
    """Worker-thread body of the compute-optimal study (``settings``: :meth:`OptimalPanel.settings`;
    its budget's days: :func:`budget_days`)."""
    from core.studies.optimal import compute_optimal

    def on_progress(done: int, total: int, _name: str) -> None:
        cancel_check(cancel)
        progress(done, total)
    budget_given = None  # as vtrain optimal --gpu-hours: a refusal names the GPU-hours given
    if settings.get("budget") == "gpu_hours":
        budget_given = ("--gpu-hours", f"{float(settings['gpu_hours']):g} GPU-hours")
    return compute_optimal(session, settings["num_gpus"], budget_days(settings),
                           assumed_mfu=settings["assumed_mfu"],
                           num_candidates=settings["num_candidates"], spread=settings["spread"],
                           progress=on_progress, cancel=cancel,
                           no_tight=bool(settings.get("no_tight", False)),
                           budget_given=budget_given)


class OptimalPanel(StudyPanel):
    """Which model trains to the lowest loss on N GPUs in D days (:func:`core.studies.optimal.compute_optimal`)."""

    _empty_text = ("<p style='font-size:13pt'><b>No study yet</b></p>"
                   "<p>Set the GPU budget and the days (or GPU-hours) on the left and press "
                   "<b>Run</b>.</p>"
                   "<p>Model sizes around the Chinchilla-optimal one are each trained with "
                   "their fastest plan on the Plan tab's cluster; their table and loss curve "
                   "appear here.</p>")

    def __init__(self, session_fn: Callable[[], Session], parent: QtWidgets.QWidget | None = None,
                 study_fn: Callable[..., Any] | None = None) -> None:
        super().__init__(session_fn, study_fn or run_optimal_study, parent)
        self._progress_noun = "sweeping the plans of candidate"
        self.gpus = gpu_spin()
        self.days = QtWidgets.QDoubleSpinBox()
        self.days.setRange(0.01, float(MAX_DAYS))
        self.days.setValue(30.0)
        self.days.setSuffix(" days")
        self.days.setToolTip("Wall-clock days of the budget (vtrain optimal --days)")
        # vtrain optimal --gpu-hours: a budget of GPU-hours instead of days, the days
        # H / (GPUs x 24) (core.studies.optimal.days_for_gpu_hours)
        self.gpu_hours = GpuHoursSpinBox()
        self.gpu_hours.setObjectName("optimal.gpu_hours")
        # any finite number, as the command line: the core's refusals say what is wrong
        self.gpu_hours.setValue(1024 * 30 * 24.0)  # the default GPUs for the default days
        self.gpu_hours.setToolTip("A budget of GPU-hours instead of days (vtrain optimal "
                                  "--gpu-hours): the days H / (GPUs x 24)")
        self.by_days = QtWidgets.QRadioButton()
        self.by_days.setObjectName("optimal.by_days")
        self.by_days.setToolTip("The budget in wall-clock days (vtrain optimal --days)")
        self.by_gpu_hours = QtWidgets.QRadioButton()
        self.by_gpu_hours.setObjectName("optimal.by_gpu_hours")
        self.by_gpu_hours.setToolTip("The budget in GPU-hours (vtrain optimal --gpu-hours)")
        self.by_days.setChecked(True)
        self._budget_group = QtWidgets.QButtonGroup(self)
        for button in (self.by_days, self.by_gpu_hours):
            self._budget_group.addButton(button)
        # typing in a field makes it the budget, as the command line's option given does
        self.days.valueChanged.connect(lambda *_: self.by_days.setChecked(True))
        self.gpu_hours.valueChanged.connect(lambda *_: self.by_gpu_hours.setChecked(True))
        #: the days a GPU-hour budget is, or why it cannot be studied (in the CLI's words)
        self.budget_note = QtWidgets.QLabel("")
        self.budget_note.setObjectName("optimal.budget_note")
        self.budget_note.setWordWrap(True)
        self.mfu = PercentSpinBox()
        self.mfu.setRange(0.01, 1.0)
        self.mfu.setSingleStep(0.05)
        self.mfu.setValue(0.40)
        self.mfu.setToolTip("MFU the Chinchilla rule's FLOP budget assumes")
        self.candidates = QtWidgets.QSpinBox()
        self.candidates.setRange(2, 25)
        self.candidates.setValue(9)
        self.spread = QtWidgets.QDoubleSpinBox()
        self.spread.setRange(1.5, MAX_SPREAD)
        self.spread.setValue(8.0)
        self.spread.setSuffix(" ×")  # a ratio: "8.00" alone read as a size
        self.spread.setToolTip("Largest over smallest candidate size")
        # vtrain optimal --no-tight: each candidate's plans inside the memory margin left out
        self.no_tight = QtWidgets.QCheckBox("fits outside the margin only (--no-tight)")
        self.no_tight.setObjectName("optimal.no_tight")
        self.no_tight.setToolTip(NO_TIGHT_OPTIMAL_HELP[0].upper() + NO_TIGHT_OPTIMAL_HELP[1:]
                                 + ".")
        self.form.addRow("Budget", self.gpus)
        for label, button, field in (("for", self.by_days, self.days),
                                     ("or", self.by_gpu_hours, self.gpu_hours)):
            row = QtWidgets.QHBoxLayout()
            row.addWidget(button)
            row.addWidget(field, 1)
            # a spin box's least width is its preferred one: as narrow as its text instead
            field.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding,
                                QtWidgets.QSizePolicy.Policy.Fixed)
            self.form.addRow(label, row)
        self.form.addRow("", self.budget_note)
        for label, w in (("Assumed MFU", self.mfu), ("Candidates", self.candidates),
                         ("Size spread", self.spread)):
            self.form.addRow(label, w)
        self.form.addRow(self.no_tight)  # both columns: its text is wider than a field
        self._watch(self.gpus, self.days, self.gpu_hours, self.by_gpu_hours, self.mfu,
                    self.candidates, self.spread, self.no_tight)
        for w in (self.gpus, self.gpu_hours, self.by_gpu_hours):
            getattr(w, "toggled" if w is self.by_gpu_hours else "valueChanged").connect(
                lambda *_: self._show_budget())
        self._show_budget()
        hint = QtWidgets.QLabel("Cluster, global batch, precision and price come from the "
                                "Plan tab; the candidates are shaped like its model (family, "
                                "head size, query groups, MLP ratio, sequence length; only L "
                                "and h change; a mixture-of-experts or latent-attention model "
                                "is refused: the loss law is fitted on dense models). Each "
                                "model's plans are those the Explore tab sweeps by default (t, "
                                "p, d, b, schedule, recomputation, sequence parallelism, ZeRO "
                                "stage, cp, the overlaps); ⚠ marks a plan outside what the "
                                "profile was calibrated on.")
        hint.setWordWrap(True)
        hint.setStyleSheet("color: #616161;")
        self.form.addRow(hint)
        self.summary = QtWidgets.QLabel("Run to size candidate models around the Chinchilla-"
                                        "optimal size and train each with its fastest plan.")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = study_table([OPTIMAL_HEADERS[k][0] for k in OPTIMAL_COLUMNS], frozen=True)
        for k, key in enumerate(OPTIMAL_COLUMNS):
            self.table.horizontalHeaderItem(k).setToolTip(OPTIMAL_HEADERS[key][1])
        # 16 columns beside the form at 1,024 pixels: each as wide as its values, rows one
        # line high, the note (a reason can be a sentence) cut with "…" and whole in its
        # tooltip; what does not fit scrolls sideways by pixels under the model sizes
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.table.setHorizontalScrollMode(QtWidgets.QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Interactive)
        # the note takes what the other columns leave, but never less than its marks
        # (:meth:`_stretch_note`): Qt's stretched last section shrank to the rest, and at
        # 1,024 px the 1.3B example's best row read "lowe…"
        header.setStretchLastSection(False)
        header.setHighlightSections(False)
        self._note_least = 0
        self.table.viewport().installEventFilter(self)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setLabel("bottom", "parameters (billions)", color=AXIS_TEXT)
        self.plot.setLabel("left", "Chinchilla loss (nats/token)", color=AXIS_TEXT)
        dark_axes(self.plot)
        for side in ("bottom", "left"):
            self.plot.getAxis(side).enableAutoSIPrefix(False)
        self.plot.getAxis("left").setWidth(70)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self._points = pg.ScatterPlotItem(size=9, brush=pg.mkBrush(_POINT), pen=pg.mkPen("w"))
        self._line = pg.PlotDataItem(pen=pg.mkPen(_POINT, width=1.5), connect="finite")
        self._best = pg.ScatterPlotItem(size=18, symbol="star", brush=pg.mkBrush(_BEST),
                                        pen=pg.mkPen("#1B5E20"))
        self._rule = pg.InfiniteLine(angle=90, movable=False,
                                     pen=pg.mkPen("#7A5C00", width=1.5, style=Qt.PenStyle.DashLine),
                                     label="Chinchilla N_opt",
                                     labelOpts={"position": 0.9, "color": "#7A5C00"})
        self._rule.setVisible(False)
        for item in (self._line, self._points, self._best, self._rule):
            self.plot.addItem(item)
        # the summary takes what the table's rows leave of their pane and scrolls in it (its
        # swept / held lines and warnings wrap to a dozen beside the form at 1,024 pixels):
        # the table keeps its rows (:meth:`_fit_summary`)
        self.summary_area = QtWidgets.QScrollArea()
        self.summary_area.setObjectName("optimal.summary_area")
        self.summary_area.setWidgetResizable(True)
        self.summary_area.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.summary_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.summary_area.setWidget(self.summary)
        self.summary_area.viewport().setAutoFillBackground(False)  # the pane's, as before
        self.summary.setAutoFillBackground(False)
        right = self._layout([self.summary_area, self.table], [self.plot])
        right.setSizes([400, 400])
        self.summary_area.parentWidget().installEventFilter(self)  # its pane: resized
        self._fit_summary()

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:  # noqa: N802
        if event.type() == QtCore.QEvent.Type.Resize:
            if watched is self.table.viewport():
                self._stretch_note()
            elif watched is self.summary_area.parentWidget():
                self._fit_summary()
        return super().eventFilter(watched, event)

    def _stretch_note(self) -> None:
        """The note column as wide as what the other columns leave of the table, and at least
        as its marks (``_note_least``: the table scrolls sideways for the rest)."""
        t = self.table
        note = OPTIMAL_COLUMNS.index("note")
        if t.columnCount() <= note:
            return
        rest = t.viewport().width() - sum(t.columnWidth(c) for c in range(t.columnCount())
                                          if c != note)
        t.setColumnWidth(note, max(self._note_least, rest))

    def _fit_summary(self) -> None:
        """Make the summary as high as its text, or as what the table's header and rows leave
        of their pane when that is less (3 lines at least); it scrolls for the rest."""
        lines = self.fontMetrics().lineSpacing()
        t = self.table
        rows = (t.horizontalHeader().sizeHint().height() + t.verticalHeader().length()
                + t.horizontalScrollBar().sizeHint().height() + 2 * t.frameWidth())
        room = self.summary_area.parentWidget().height() - rows - 6
        width = self.summary_area.viewport().width()
        text = self.summary.heightForWidth(width) if width > 0 else -1
        if text < 0:
            text = self.summary.sizeHint().height()
        self.summary_area.setFixedHeight(max(min(text + 2, room), min(text + 2, 3 * lines + 4)))

    def _note_width(self) -> int:
        """The note column's widest: its longest mark in bold, with a cell's padding (a
        longer note, why no plan fits, is cut there; the last column stretches)."""
        bold = QtGui.QFont(self.table.font())
        bold.setBold(True)
        return QtGui.QFontMetrics(bold).horizontalAdvance("lowest loss, rule's size") + 12

    def _fields(self) -> dict[str, QtWidgets.QWidget]:
        return {"num_gpus": self.gpus, "days": self.days, "gpu_hours": self.gpu_hours,
                "assumed_mfu": self.mfu, "num_candidates": self.candidates,
                "spread": self.spread, "no_tight": self.no_tight}

    #: the budgets the form offers: ``settings()["budget"]``
    BUDGETS = ("days", "gpu_hours")

    def apply_settings(self, settings: Any) -> list[str]:
        """:meth:`StudyPanel.apply_settings`, and ``budget`` (one of :attr:`BUDGETS`: which
        field is the budget; settings saved before it read as days, the defaults applied
        first)."""
        if not isinstance(settings, dict) or "budget" not in settings:
            ignored = super().apply_settings(settings)
        else:
            rest = dict(settings)
            budget = rest.pop("budget")
            ignored = super().apply_settings(rest)
            if budget in self.BUDGETS:
                for button in (self.by_days, self.by_gpu_hours):  # shown, not an edit
                    button.blockSignals(True)
                (self.by_gpu_hours if budget == "gpu_hours" else self.by_days).setChecked(True)
                for button in (self.by_days, self.by_gpu_hours):
                    button.blockSignals(False)
            else:
                ignored.append("budget")
                self.unused_rules["budget"] = (f"{short_repr(budget)} must be one of "
                                               f"{', '.join(self.BUDGETS)}")
                ignored.sort(key=list(settings).index)  # in the file's order
        self._show_budget()
        return ignored

    def check_settings(self, settings: dict) -> None:
        """Raise ConfigError when the budget's GPU-hours cannot be studied: what ``vtrain optimal
        --gpu-hours`` refuses, in its words (:func:`budget_days`)."""
        budget_days(settings)

    @Slot()
    def _show_budget(self) -> None:
        """Under the budget: the days a GPU-hour budget is (``vtrain optimal --gpu-hours``'
        header), or why it cannot be studied (red, as the command line refuses it)."""
        from core.cli.optimal import days_text
        from core.plan.fields import ConfigError
        settings = self.settings()
        if settings["budget"] != "gpu_hours":
            self.budget_note.setText("")
            self.budget_note.setVisible(False)
            return
        try:
            days = budget_days(settings)
        except ConfigError as exc:
            self.budget_note.setText("; ".join(str(e) for e in exc.errors))
            self.budget_note.setStyleSheet("color: #C62828;")
        else:
            from core.util.text import days_phrase
            self.budget_note.setText(f"= {days_phrase(days_text(days))} on "
                                     f"{settings['num_gpus']:,} GPUs")
            self.budget_note.setStyleSheet("color: #616161;")
        self.budget_note.setVisible(True)

    def study_inputs(self, session: Session) -> dict:
        """:func:`core.studies.optimal.study_inputs`."""
        from core.studies.optimal import study_inputs
        return study_inputs(session)

    def check_session(self, session: Session) -> None:
        """Raise ConfigError when the session's model cannot be the candidates' template (a
        mixture-of-experts or latent-attention model:
        :func:`core.studies.optimal.check_template`) or its cluster, batch or sequence cannot
        run the study."""
        from core.plan.rules import check_all_but_the_plan
        from core.studies.optimal import check_template, shape_like
        check_template(session.model)
        check_all_but_the_plan(session, shape_like(session.model, 1e9))

    def clear_result(self) -> None:
        """Empty the table, the summary and the plot."""
        self.result = None
        self.result_session = None
        self.result_settings = None
        self.results_view.set_empty(True)
        self.set_session(self._session_fn())  # no result: nothing stale
        self.table.setRowCount(0)
        self.summary.setText("")
        self._fit_summary()
        for item in (self._points, self._line, self._best):
            item.setData([], [])
        self._rule.setVisible(False)

    def settings(self) -> dict:
        """The form as :func:`core.studies.optimal.compute_optimal` keywords, with the budget:
        ``budget`` ``"days"`` (``days``) or ``"gpu_hours"`` (``gpu_hours``: the days are
        :func:`budget_days`); settings saved before ``no_tight`` or ``budget`` read as unticked
        and days (the defaults are applied first)."""
        return {"num_gpus": self.gpus.value(), "days": self.days.value(),
                "budget": "gpu_hours" if self.by_gpu_hours.isChecked() else "days",
                "gpu_hours": self.gpu_hours.value(),
                "assumed_mfu": self.mfu.value(), "num_candidates": self.candidates.value(),
                "spread": self.spread.value(), "no_tight": self.no_tight.isChecked()}

    def show_result(self, result: Any) -> None:
        """Fill the table, the summary and the loss plot from an OptimalResult."""
        from core.studies.optimal import format_params as fp
        from core.studies.optimal import candidate_fit_note  # "loss extrapolated", above ln V
        rows = []
        for k, c in enumerate(result.candidates):
            m = c.model
            mark = ", ".join(x for x, on in (("lowest loss", k == result.best),
                                             ("rule's size", k == result.rule_index)) if on)
            if c.plan is None:
                rows.append([fp(c.n_params), str(m.num_layers), str(m.hidden_size),
                             str(m.num_attention_heads), *["–"] * (len(OPTIMAL_COLUMNS) - 5),
                             c.reason + (f" ({mark})" if mark else "")])
                continue
            p = c.plan
            # ⚠ as the Explore table's band: a plan outside what the profile was calibrated on
            outside = " ⚠" if c.within_calibration is False else ""
            rows.append([fp(c.n_params), str(m.num_layers), str(m.hidden_size),
                         str(m.num_attention_heads),
                         f"{p['tensor_parallel']} {p['pipeline_parallel']} {p['data_parallel']} "
                         f"{p['micro_batch_size']}", "yes" if p["sequence_parallel"] else "no",
                         str(p["zero_stage"]), str(p["context_parallel"]), p["schedule"],
                         p["recompute"], f"{c.mfu:.1%}{outside}",
                         f"{p['max_memory_per_gpu_bytes'] / 2 ** 30:.1f}"
                         + (" ~" if p["memory_verdict"] == "tight" else ""), fp(c.tokens),
                         f"{c.tokens_per_parameter:.3g}", f"{c.loss:.4f}",
                         ", ".join(x for x in (mark, candidate_fit_note(c)) if x)])
        fill_table(self.table, rows, bold={result.best} if result.best is not None else set(),
              left={OPTIMAL_COLUMNS.index(n) for n in ("schedule", "recompute", "note")})
        note = OPTIMAL_COLUMNS.index("note")
        for k in range(len(rows)):  # a reason no plan fits is a sentence: cut, whole here
            item = self.table.item(k, note)
            if item.text():
                item.setToolTip(item.text())
        self._note_least = min(self.table.columnWidth(note), self._note_width())
        self._stretch_note()
        mfu = OPTIMAL_COLUMNS.index("MFU")
        for k, c in enumerate(result.candidates):  # the ⚠'s why, as the Explore band's tooltip
            if c.plan is not None and c.within_calibration is False:
                self.table.item(k, mfu).setToolTip(
                    "⚠ outside the calibration runs' features: " + c.calibration_departures
                    if c.calibration_departures else
                    "⚠ outside the calibration range (GPU count or model size beyond the "
                    "calibrated runs)")
        gib = OPTIMAL_COLUMNS.index("GiB")
        for k, c in enumerate(result.candidates):  # a tight plan's why, as the sweep's "~"
            if c.plan is not None and c.plan["memory_verdict"] == "tight":
                self.table.item(k, gib).setToolTip(
                    "~ tight: inside the margin of the GPU's memory, or over it only with the "
                    "allocator's cache")
        # the inputs it ran with (the Plan tab may hold others since: the banner says so)
        session = self.result_session or self._session_fn()
        price = session.cost.price_per_gpu_hour_usd
        cost = result.num_gpus * result.days * 24 * price
        shown = f"{result.days:g}"
        ran = self.result_settings or {}
        if ran.get("budget") == "gpu_hours":  # as vtrain optimal --gpu-hours' header
            from core.cli.optimal import days_text
            shown = f"{days_text(ran['gpu_hours'])} GPU-hours, {days_text(result.days)}"
        from core.util.text import days_phrase  # "1 day", "1.5 days": as vtrain optimal's header
        text = (f"<b>{result.num_gpus:,} x {html.escape(str(session.cluster.gpu))} for "
                f"{days_phrase(shown)}</b> (${cost:,.{0 if cost >= 100 else 2}f} at "
                f"${price:,.2f}/GPU-hour). "
                f"Chinchilla rule at an assumed MFU of {result.assumed_mfu:.0%}: "
                f"C = {result.budget_flops:.3g} FLOPs → N_opt {fp(result.rule_params)} "
                f"parameters on {fp(result.rule_tokens)} tokens.")
        if getattr(result, "template", None):  # which model the candidates' shapes follow
            from core.studies.optimal import template_text
            text += " Candidates " + html.escape(template_text(result.template), quote=False) + "."
        if result.rule_index is None:
            text += " (No candidate shape is within a factor of 2 of N_opt.)"
        from core.studies.optimal import left_out_note
        left = left_out_note(result)  # sizes that are no row of their own, as vtrain optimal's
        if left:
            text += " " + html.escape(left, quote=False)
        from core.studies.optimal import fit_range_note
        fit = fit_range_note(result)  # the loss fit's data, as vtrain optimal's footer
        if fit:
            text += " " + html.escape(fit, quote=False)
        if result.best is None:
            from core.studies.optimal import no_plan_explanation
            text += " " + no_plan_explanation(result, session.plan.global_batch_size)
        else:
            b = result.candidates[result.best]
            text += (f" <b>Lowest loss: {fp(b.n_params)} parameters</b> (L={b.model.num_layers}, "
                     f"h={b.model.hidden_size}) on {fp(b.tokens)} tokens at {b.mfu:.1%} MFU, "
                     f"loss {b.loss:.4f}")
            if b.loss_above_ln_vocab:  # then every candidate's is: the ranking says nothing
                from core.studies.optimal import ln_vocab
                text += (f", above ln V = {ln_vocab(b.model.vocab_size):.2f}: the fit says "
                         "nothing here")
            elif b.outside_fit:
                text += " (extrapolated)"
            r = result.candidates[result.rule_index] if result.rule_index is not None else None
            if r is not None and r is not b and r.plan is not None:
                text += f" (the rule's size: {r.loss:.4f})"
            text += "."
        if getattr(result, "no_tight", False):  # as vtrain optimal prints it under its table
            text += f"<br>{html.escape(NO_TIGHT_OPTIMAL_NOTE, quote=False)}"
        dims = dimensions_html(result.dimensions, session.plan)  # what the sweeps swept and held
        if dims:
            text += f"<br><small>{dims}</small>"
        if result.warnings:
            from core.sim.comm import summarize_warnings
            text += f"<br><span style='color:#7A5C00'>⚠ {summarize_warnings(result.warnings)[0]}</span>"
        self.summary.setText(text)
        x = np.array([c.n_params for c in result.candidates], float) / 1e9
        y = np.array([c.loss for c in result.candidates], float)  # NaN where no plan fits
        ok = np.isfinite(y)
        self._points.setData(x[ok], y[ok])
        self._line.setData(x, y)
        if result.best is not None:
            b = result.candidates[result.best]
            self._best.setData([b.n_params / 1e9], [b.loss])
        else:
            self._best.setData([], [])
        self._rule.setPos(result.rule_params / 1e9)
        self._rule.setVisible(bool(ok.any()))
        self.plot.enableAutoRange()
        self._fit_summary()


class StudiesTab(QtWidgets.QTabWidget):
    """The compute-optimal model study and the shared-cluster study, as two inner tabs.

    Their settings are saved with the session (``Session.studies``).
    """

    #: a study setting was edited
    settings_changed = Signal()

    def __init__(self, session_fn: Callable[[], Session],
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.optimal = OptimalPanel(session_fn)
        self.schedule = SchedulePanel(session_fn)
        self.addTab(self.optimal, "Compute-optimal model")
        self.addTab(self.schedule, "Shared cluster")
        self.setTabToolTip(0, "Which model trains to the lowest loss on N GPUs in D days")
        self.setTabToolTip(1, "A job trace on a shared cluster under GPU-allocation policies")
        self._defaults = self.current_settings()
        self._loaded: dict | None = None
        self._touched = False
        self.unused_settings: dict[str, str] = {}  # (:meth:`reset`)
        for panel in (self.optimal, self.schedule):
            panel.settings_changed.connect(self._on_edit)
            panel.run_button.clicked.connect(self._on_run)

    def set_session(self, session: Session) -> None:
        """The Plan tab's session changed: each study's result is marked stale when a field it
        reads changed since it ran (:meth:`StudyPanel.set_session`)."""
        self.optimal.set_session(session)
        self.schedule.set_session(session)

    def current_settings(self) -> dict:
        """``{"optimal": {...}, "schedule": {...}}`` as the forms show them."""
        return {"optimal": self.optimal.settings(), "schedule": self.schedule.settings()}

    def settings(self) -> dict | None:
        """What ``Session.studies`` should hold: None while the forms show untouched defaults,
        the loaded dict while unedited (an exact round trip), else :meth:`current_settings`."""
        if not self._touched:
            return None if self._loaded is None else json.loads(json.dumps(self._loaded))
        return self.current_settings()

    @Slot()
    def _on_edit(self) -> None:
        self._touched = True
        self.settings_changed.emit()

    @Slot()
    def _on_run(self) -> None:
        self._touched = True  # the settings were used: save them from now on

    def reset(self, session: Session) -> list[str]:
        """Show ``session.studies`` (defaults for what it lacks), a running study stopped and
        dropped (:meth:`StudyPanel.abandon_run`); returns the settings it had that could not
        be used (wrong type or out of range), as ``panel.key``; :attr:`unused_settings` has
        each with its rule (``{"studies.optimal.num_gpus": "-5 must be a whole number from 1
        to ..."}``)."""
        self._loaded = json.loads(json.dumps(session.studies)) if session.studies is not None else None
        self._touched = False
        studies = session.studies if isinstance(session.studies, dict) else {}
        ignored = [] if session.studies is None or isinstance(session.studies, dict) else ["studies"]
        #: the settings of the file not used, by path (``studies.optimal.num_gpus``), each with
        #: the rule it breaks
        self.unused_settings: dict[str, str] = (
            {} if not ignored else {"studies": f"{short_repr(session.studies)} must be a JSON "
                                               "object"})
        for name, panel in (("optimal", self.optimal), ("schedule", self.schedule)):
            panel.abandon_run()  # a study of the previous session
            panel.apply_settings(self._defaults[name])
            bad = panel.apply_settings(studies.get(name))
            panel.clear_result()
            panel._set_status("Settings from the file not used (the form shows its own): "
                              + "; ".join(rule if k == "(not a JSON object)" else
                                          f"{shown_name(k, 24)}: {rule}"
                                          for k, rule in panel.unused_rules.items())
                              if bad else "", False, error=bool(bad))
            ignored += [f"{name}.{k}" for k in bad]
            self.unused_settings.update(
                (f"studies.{name}" if k == "(not a JSON object)" else
                 f"studies.{name}.{shown_name(k)}", rule) for k, rule in panel.unused_rules.items())
        if ignored:  # the forms no longer show the file's settings: save what they show
            self._touched = True
        return ignored

    def shutdown(self) -> bool:
        """Stop both studies' worker threads (window closing)."""
        a = self.optimal.shutdown()
        return self.schedule.shutdown() and a
