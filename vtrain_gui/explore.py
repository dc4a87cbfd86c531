"""The Explore tab: sweep every parallel plan, plot training days against dollars, pick one.

A view over :mod:`core.sweep` (the paper's first case study): the settings
form builds a :class:`core.sweep.SweepSpace` for the session's model, global
batch size, cluster and cost; :class:`~vtrain_gui.workers.SweepRunner` runs
:func:`core.sweep.run_sweep` off the GUI thread; the result is drawn as a
scatter of training days (x) against cost (y), one point per plan, with the
plans that do not fit in memory greyed, the Pareto front as a line and the
fastest, cheapest and cheapest-within-deadline plans marked; the same rows are
in a sortable table. Picking a point or a row emits :attr:`ExploreTab.plan_selected`
(the main window loads that plan into the editor and simulates it; its
timeline comes back to :meth:`ExploreTab.show_simulation`).

Filters (GPU count, fits in memory, deadline) are numpy masks from
:meth:`core.sweep.SweepResult.select`; the front and the marked plans are
those of the plans shown (:func:`core.sweep.pareto_front` over the mask), so
the plot and the table always agree.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import math
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.config import (PLAN_FIELDS, RECOMPUTE_MODES, SCHEDULES, ZERO_STAGES, ConfigError,
                         FieldError, ParallelPlan, Session, plan_field_title)
from core.simulate import SimulationResult
from core.sweep import SweepResult, SweepSpace, pareto_front

from .formatting import (format_bytes, format_count, format_duration, format_fraction,
                         format_number_short, format_usd, format_usd_short)
from .timeline import TimelineWidget
from .workers import SweepRunner

__all__ = ["ExploreTab", "SweepSettingsPanel", "SweepTableModel", "SweepPlot", "TABLE_COLUMNS",
           "best_index"]

_INT_MAX = 2**31 - 1
_ERROR_STYLE = "color: #C62828;"
#: Colours of the scatter (feasible plans use the timeline's forward blue).
_FEASIBLE = "#4C78A8"
_INFEASIBLE = (150, 150, 150, 80)
_FRONT = "#D62728"
_FASTEST = "#2CA02C"
_CHEAPEST = "#9467BD"
_DEADLINE = "#F2B701"


def best_index(primary: np.ndarray, secondary: np.ndarray, mask: np.ndarray) -> int | None:
    """Index minimizing ``primary`` among ``mask`` (ties: smaller ``secondary``, then first).

    The tie rule of :attr:`core.sweep.SweepResult.fastest` and ``cheapest``,
    applied to the plans a filter shows.
    """
    idx = np.flatnonzero(mask)
    if not idx.size:
        return None
    return int(idx[np.lexsort((idx, secondary[idx], primary[idx]))[0]])


def _parse_ints(text: str) -> list[int]:
    """``'1, 2 4'`` -> ``[1, 2, 4]``; raises ``ValueError`` naming the bad item."""
    out = []
    for item in re.split(r"[,;\s]+", text.strip()):
        if not item:
            continue
        clean = item.replace("_", "")
        if not clean.isdigit():
            raise ValueError(f"{item!r} is not a whole number")
        out.append(int(clean))
    return out


def _join(values: Any) -> str:
    if values is None:
        return ""
    if isinstance(values, (int, np.integer)):
        return str(int(values))
    return ", ".join(str(int(v)) for v in values)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0] if isinstance(n, int) and n > 0 else []


def _plan_text(result: SweepResult, i: int) -> str:
    return result.plans[i].label()


def _same_inputs(a: Session, b: Session, space: SweepSpace | None = None) -> bool:
    """Whether a sweep of ``a`` is also a sweep of ``b``: model, cluster, cost and every plan
    field the sweep does not choose (B, precision, overlap ...) equal."""
    swept = set((space or SweepSpace()).swept_fields())
    return (dataclasses.asdict(a.model) == dataclasses.asdict(b.model)
            and dataclasses.asdict(a.cluster) == dataclasses.asdict(b.cluster)
            and dataclasses.asdict(a.cost) == dataclasses.asdict(b.cost)
            and all(getattr(a.plan, f) == getattr(b.plan, f) for f in PLAN_FIELDS if f not in swept))


# --------------------------------------------------------------------------- settings

def _check_box_row(form: QtWidgets.QFormLayout, label: str, names, prefix: str
                   ) -> dict[str, QtWidgets.QCheckBox]:
    """A form row of one check box per name (object names ``prefix.name``); returns them by name."""
    boxes: dict[str, QtWidgets.QCheckBox] = {}
    row = QtWidgets.QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    for name in names:
        box = boxes[name] = QtWidgets.QCheckBox(name)
        box.setObjectName(f"{prefix}.{name}")
        row.addWidget(box)
    row.addStretch(1)
    form.addRow(label, row)
    return boxes


class SweepSettingsPanel(QtWidgets.QWidget):
    """Form for a :class:`core.sweep.SweepSpace` and a deadline.

    Empty candidate fields mean the core's defaults (shown as placeholders for
    the current session). The settings travel in ``Session.sweep`` as
    ``{"space": SweepSpace.to_dict(), "deadline_days": float | None}``; space
    fields this form does not show (``data_parallel``) are kept as loaded.

    Signals
    -------
    changed()
        After every user edit.
    """

    changed = Signal()

    AT_MOST, EXACTLY = "at most", "exactly"

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._updating = False
        self._loaded: dict[str, Any] | None = None  # settings as loaded, until the first edit
        self._touched = False
        self._extra: dict[str, Any] = {}  # space fields the form does not show
        self._last_valid: dict[str, Any] | None = None  # settings() while an edit is invalid

        form = QtWidgets.QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setVerticalSpacing(5)

        self.budget_mode = QtWidgets.QComboBox()
        self.budget_mode.setObjectName("sweep.budget_mode")
        self.budget_mode.addItems([self.AT_MOST, self.EXACTLY])
        self.budget_mode.setToolTip("At most N GPUs (every world size t·p·d ≤ N), or exactly the "
                                    "GPU counts listed")
        self.gpus = QtWidgets.QLineEdit()
        self.gpus.setObjectName("sweep.gpus")
        self.gpus.setToolTip("GPU budget: one number (at most), or a list such as "
                             "“1024, 2048, 3360” (exactly)")
        budget = QtWidgets.QHBoxLayout()
        budget.setContentsMargins(0, 0, 0, 0)
        budget.addWidget(self.budget_mode)
        budget.addWidget(self.gpus, 1)
        form.addRow("GPUs", budget)

        self.max_data_parallel = QtWidgets.QSpinBox()
        self.max_data_parallel.setObjectName("sweep.max_data_parallel")
        self.max_data_parallel.setRange(0, _INT_MAX)
        self.max_data_parallel.setSpecialValueText("no limit")
        self.max_data_parallel.setGroupSeparatorShown(True)
        self.max_data_parallel.setToolTip("Largest data-parallel size d tried")
        form.addRow("Max data parallel d", self.max_data_parallel)

        self.tensor_parallel = QtWidgets.QLineEdit()
        self.tensor_parallel.setObjectName("sweep.tensor_parallel")
        self.tensor_parallel.setToolTip("Tensor-parallel sizes t to try; empty: the divisors of "
                                        "the GPUs per node")
        form.addRow("Tensor parallel t", self.tensor_parallel)
        self.across_nodes = QtWidgets.QCheckBox("also across nodes")
        self.across_nodes.setObjectName("sweep.tensor_parallel_across_nodes")
        self.across_nodes.setToolTip("With an empty t list, also try t = k × GPUs per node, "
                                     "spanning whole nodes (hierarchical all-reduce; slow)")
        form.addRow("", self.across_nodes)

        self.pipeline_parallel = QtWidgets.QLineEdit()
        self.pipeline_parallel.setObjectName("sweep.pipeline_parallel")
        self.pipeline_parallel.setToolTip("Pipeline-parallel sizes p to try; empty: the divisors "
                                          "of the layer count L")
        form.addRow("Pipeline parallel p", self.pipeline_parallel)

        self.micro_batch_sizes = QtWidgets.QLineEdit()
        self.micro_batch_sizes.setObjectName("sweep.micro_batch_sizes")
        self.micro_batch_sizes.setToolTip("Micro-batch sizes b to try (sequences)")
        form.addRow("Micro-batch sizes b", self.micro_batch_sizes)

        self.schedule_boxes = _check_box_row(form, "Schedules", SCHEDULES, "sweep.schedules")
        self.recompute_boxes = _check_box_row(form, "Recompute", RECOMPUTE_MODES, "sweep.recompute")
        self.sp_boxes = _check_box_row(form, "Sequence parallel", ("off", "on"),
                                       "sweep.sequence_parallel")
        self.zero_boxes = _check_box_row(form, "ZeRO stages", [str(z) for z in ZERO_STAGES],
                                         "sweep.zero_stages")
        for box in self.sp_boxes.values():
            box.setToolTip("Sweep sequence parallelism off and/or on (Korthikanti et al. 2022)")
        for box in self.zero_boxes.values():
            box.setToolTip("ZeRO stages to sweep: 0 replicated, 1 distributed optimizer, 2 sharded "
                           "gradients, 3 sharded parameters (FSDP)")
        self._plan = ParallelPlan()  # the session's plan: its values are the defaults of the rows above

        self.deadline = QtWidgets.QDoubleSpinBox()
        self.deadline.setObjectName("sweep.deadline_days")
        self.deadline.setRange(0.0, 1e6)
        self.deadline.setDecimals(1)
        self.deadline.setSuffix(" days")
        self.deadline.setSpecialValueText("none")
        self.deadline.setGroupSeparatorShown(True)
        self.deadline.setToolTip("Mark the cheapest plan that trains within this many days "
                                 "(takes effect at once, no new sweep needed)")
        form.addRow("Deadline", self.deadline)

        self.error_label = QtWidgets.QLabel()
        self.error_label.setObjectName("sweep.errors")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(_ERROR_STYLE)
        self.error_label.setVisible(False)
        form.addRow(self.error_label)

        for w in (self.gpus, self.tensor_parallel, self.pipeline_parallel, self.micro_batch_sizes):
            w.textEdited.connect(self._on_text_edit)
        self.budget_mode.currentIndexChanged.connect(self._on_budget_mode_change)
        self.max_data_parallel.valueChanged.connect(self._on_value_change)
        self.deadline.valueChanged.connect(self._on_value_change)
        for box in (self.across_nodes, *self.schedule_boxes.values(), *self.recompute_boxes.values(),
                    *self.sp_boxes.values(), *self.zero_boxes.values()):
            box.toggled.connect(self._on_box_toggle)
        self.reset(Session())

    # ------------------------------------------------------------------ API
    def reset(self, session: Session) -> None:
        """Show ``session.sweep``, or defaults for the session (at most its plan's GPUs)."""
        self._plan = session.plan
        self.set_defaults_hint(session)
        settings = session.sweep
        if settings is not None:
            try:
                self._show(settings)
                self._loaded = copy.deepcopy(settings)
                self._touched = False
                self.check()
                return
            except (ConfigError, TypeError, ValueError) as exc:
                # a hand-edited file: say why, show the defaults
                self._show_defaults(session)
                self._touched = False
                self._loaded = None
                self.error_label.setText(f"The sweep settings in the file were not understood "
                                         f"({exc}); showing the defaults.")
                self.error_label.setVisible(True)
                return
        self._show_defaults(session)
        self._loaded = None
        self._touched = False
        self.check()

    def set_defaults_hint(self, session: Session) -> None:
        """Show the core's default candidates for ``session`` as placeholders."""
        g = session.cluster.gpus_per_node
        self.tensor_parallel.setPlaceholderText(f"divisors of {g}: {_join(_divisors(g))}"
                                                if _divisors(g) else "divisors of the GPUs per node")
        L = session.model.num_layers
        ds = _divisors(L)
        # the field is narrow: the placeholder names the rule, the tooltip lists the sizes
        self.pipeline_parallel.setPlaceholderText(f"divisors of L={L} ({len(ds)} sizes)" if ds
                                                  else "divisors of the layer count")
        self.pipeline_parallel.setToolTip(
            "Pipeline-parallel sizes p to try, comma-separated; empty: "
            + (f"the divisors of L={L}: {_join(ds)}" if ds else "the divisors of the layer count"))
        self.gpus.setPlaceholderText("no limit (set a max data parallel)"
                                     if self.budget_mode.currentText() == self.AT_MOST
                                     else "e.g. 1024, 2048")

    def space(self) -> SweepSpace:
        """The space as edited. Raises :class:`ConfigError` (fields ``sweep.*``) when invalid."""
        errors: list[FieldError] = []

        def ints(widget: QtWidgets.QLineEdit, field: str) -> list[int] | None:
            try:
                values = _parse_ints(widget.text())
            except ValueError as exc:
                errors.append(FieldError(f"sweep.{field}", str(exc)))
                return None
            return values or None

        gpus = ints(self.gpus, "num_gpus")
        kw: dict[str, Any] = dict(self._extra)
        if self.budget_mode.currentText() == self.EXACTLY:
            kw["num_gpus"] = tuple(gpus) if gpus else None
            if not gpus and not errors:
                errors.append(FieldError("sweep.num_gpus", "list at least one GPU count"))
        elif gpus:
            if len(gpus) > 1:
                errors.append(FieldError("sweep.max_gpus", "give one number (or choose “exactly”)"))
            kw["max_gpus"] = gpus[0]
        if self.max_data_parallel.value() > 0:
            kw["max_data_parallel"] = self.max_data_parallel.value()
        t = ints(self.tensor_parallel, "tensor_parallel")
        kw["tensor_parallel"] = tuple(t) if t else None
        kw["tensor_parallel_across_nodes"] = self.across_nodes.isChecked()
        p = ints(self.pipeline_parallel, "pipeline_parallel")
        kw["pipeline_parallel"] = tuple(p) if p else None
        b = ints(self.micro_batch_sizes, "micro_batch_sizes")
        kw["micro_batch_sizes"] = tuple(b) if b else ()
        kw["schedules"] = tuple(n for n, box in self.schedule_boxes.items() if box.isChecked())
        kw["recompute"] = tuple(n for n, box in self.recompute_boxes.items() if box.isChecked())
        kw["sequence_parallel"] = tuple(n == "on" for n, box in self.sp_boxes.items() if box.isChecked())
        kw["zero_stages"] = tuple(int(n) for n, box in self.zero_boxes.items() if box.isChecked())
        space = SweepSpace(**kw)
        errors += [e for e in space.errors() if e.field not in {x.field for x in errors}]
        if errors:
            raise ConfigError(errors)
        return space

    def errors(self) -> list[FieldError]:
        """The rules the settings break (empty when valid)."""
        try:
            self.space()
        except ConfigError as exc:
            return list(exc.errors)
        return []

    def deadline_days(self) -> float | None:
        """The deadline in days, or None."""
        v = self.deadline.value()
        return float(v) if v > 0 else None

    def settings(self) -> dict[str, Any] | None:
        """``{"space": ..., "deadline_days": ...}`` for ``Session.sweep``.

        None while the form shows untouched defaults (nothing to save); the
        loaded dict itself while unedited (exact round trip); the last valid
        settings while an edit is invalid.
        """
        if not self._touched:
            return None if self._loaded is None else copy.deepcopy(self._loaded)
        try:
            return {"space": self.space().to_dict(), "deadline_days": self.deadline_days()}
        except ConfigError:
            return copy.deepcopy(self._last_valid)

    def mark_used(self) -> bool:
        """The settings were used (a sweep ran): save them from now on. Returns whether that is new."""
        new = not self._touched and self._loaded is None
        self._touched = True
        return new

    # ------------------------------------------------------------------ internals
    def _show(self, settings: dict[str, Any]) -> None:
        if not isinstance(settings, dict):
            raise ConfigError([FieldError("sweep", "must be a JSON object")])
        unknown = sorted(set(settings) - {"space", "deadline_days"})
        if unknown:
            raise ConfigError([FieldError(f"sweep.{k}", "unknown field") for k in unknown])
        space = SweepSpace.from_dict(settings.get("space") or {})
        deadline = settings.get("deadline_days")
        if deadline is not None and not isinstance(deadline, (int, float)):
            raise ConfigError([FieldError("sweep.deadline_days", "must be a number or null")])
        self._updating = True
        try:
            self._extra = {"data_parallel": space.data_parallel} if space.data_parallel else {}
            exact = space.num_gpus is not None
            self.budget_mode.setCurrentText(self.EXACTLY if exact else self.AT_MOST)
            self.gpus.setText(_join(space.num_gpus if exact else space.max_gpus))
            self.max_data_parallel.setValue(int(space.max_data_parallel or 0))
            self.tensor_parallel.setText(_join(space.tensor_parallel))
            self.across_nodes.setChecked(bool(space.tensor_parallel_across_nodes))
            self.pipeline_parallel.setText(_join(space.pipeline_parallel))
            self.micro_batch_sizes.setText(_join(space.micro_batch_sizes))
            scheds = [space.schedules] if isinstance(space.schedules, str) else list(space.schedules)
            for name, box in self.schedule_boxes.items():
                box.setChecked(name in scheds)
            rcs = [space.recompute] if isinstance(space.recompute, str) else list(space.recompute)
            for name, box in self.recompute_boxes.items():
                box.setChecked(name in rcs)
            # unset (older files, defaults): the session plan's own value
            sps = (list(space.sequence_parallel) if space.sequence_parallel is not None
                   else [bool(self._plan.sequence_parallel)])
            for name, box in self.sp_boxes.items():
                box.setChecked((name == "on") in sps)
            zs = (list(space.zero_stages) if space.zero_stages is not None
                  else [self._plan.zero_stage])
            for name, box in self.zero_boxes.items():
                box.setChecked(int(name) in zs)
            self.deadline.setValue(float(deadline or 0.0))
        finally:
            self._updating = False

    def _show_defaults(self, session: Session) -> None:
        try:
            gpus = session.plan.num_gpus
        except TypeError:
            gpus = 0
        budget = gpus if isinstance(gpus, int) and gpus > 0 else None
        # the plan's GPU count as the budget; an invalid plan gets a data-parallel bound instead
        self._show({"space": SweepSpace(max_gpus=budget,
                                        max_data_parallel=None if budget else 64).to_dict(),
                    "deadline_days": None})

    def check(self) -> list[FieldError]:
        """Show the rules the settings break under the form; return them."""
        try:
            self._last_valid = {"space": self.space().to_dict(),
                                "deadline_days": self.deadline_days()}
            errors: list[FieldError] = []
        except ConfigError as exc:
            errors = list(exc.errors)
        self.error_label.setText("\n".join(f"• {e.message}" if e.field == "sweep" else
                                           f"• {e.field.removeprefix('sweep.')}: {e.message}"
                                           for e in errors))
        self.error_label.setVisible(bool(errors))
        return errors

    def _edited(self) -> None:
        if self._updating:
            return
        self._touched = True
        self.check()
        self.changed.emit()

    @Slot(str)
    def _on_text_edit(self, text: str) -> None:
        self._edited()

    @Slot(int)
    def _on_budget_mode_change(self, index: int) -> None:
        self.gpus.setPlaceholderText("no limit (set a max data parallel)"
                                     if self.budget_mode.currentText() == self.AT_MOST
                                     else "e.g. 1024, 2048")
        self._edited()

    @Slot()
    def _on_value_change(self) -> None:
        self._edited()

    @Slot(bool)
    def _on_box_toggle(self, checked: bool) -> None:
        self._edited()


# --------------------------------------------------------------------------- table

@dataclasses.dataclass(frozen=True)
class _Column:
    header: str
    attr: str
    tip: str
    fmt: Callable[[Any], str]
    right: bool = True


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


def _plan_value_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return _yes_no(value)
    return str(value)


def _plan_columns() -> tuple[_Column, ...]:
    """One column per plan field a sweep can vary (not B or the precision), from the field's
    metadata, with m after b."""
    out = []
    for f in dataclasses.fields(ParallelPlan):
        if f.metadata.get("label") == "never":
            continue
        right = str(f.type).startswith("int")
        out.append(_Column(plan_field_title(f.name), f.name, f.metadata.get("help", ""),
                           _plan_value_text, right))
        if f.name == "micro_batch_size":
            out.append(_Column("m", "num_microbatches", "Micro-batches per iteration m = B/(d·b)",
                               format_count))
    return tuple(out)


#: Columns of the plan table: header, :class:`SweepResult` attribute, tooltip, formatter.
#: The plan's columns come from its fields; :meth:`ExploreTab.set_result` hides those that
#: are the same for every plan (beyond t, p, d, b, schedule and recompute).
TABLE_COLUMNS = _plan_columns() + (
    _Column("GPUs", "num_gpus", "World size t·p·d", format_count),
    _Column("iteration", "iteration_time_s", "Predicted time of one iteration", format_duration),
    _Column("days", "training_days", "Training time for the token budget (days)",
            lambda v: format_count(v, 1)),
    _Column("cost", "cost_usd", "Cost of training on the token budget (USD)", format_usd),
    _Column("MFU", "mfu", "Model FLOPs utilization", format_fraction),
    _Column("memory/GPU", "max_memory_per_gpu_bytes", "Largest memory per GPU over the stages",
            format_bytes),
    _Column("fits", "fits_in_memory", "Fits in GPU memory", _yes_no, False),
    _Column("front", "front", "On the time-versus-cost Pareto front of the plans shown", _yes_no,
            False),
    _Column("reason", "reason", "Why the plan does not fit in GPU memory", str, False),
)
_COLUMN_INDEX = {c.attr: i for i, c in enumerate(TABLE_COLUMNS)}


class SweepTableModel(QtCore.QAbstractTableModel):
    """The plans of a :class:`SweepResult` as table rows, straight from its numpy columns.

    Row ``r`` shows plan ``rows[r]``: the plans a mask lets through, in sort
    order. Sorting is a stable numpy argsort of the previous order, so an
    earlier sort breaks ties (sort by days, then by fits: fitting plans by
    days first). A new result starts in the order "on the front, fits in
    memory, training days". No per-cell objects are made; ``data`` formats on
    demand and ``Qt.UserRole`` gives the raw value.
    """

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._result: SweepResult | None = None
        self._perm = np.empty(0, np.int64)  # every plan, in sort order
        self._mask = np.empty(0, bool)  # plans shown
        self._rows = np.empty(0, np.int64)  # plans shown, in table order
        self._row_of = np.empty(0, np.int64)  # table row of each plan, -1 when hidden
        self._front = np.empty(0, bool)
        self._codes: dict[int, np.ndarray] = {}  # per column: sort keys of every plan
        self._sort_column = _COLUMN_INDEX["front"]
        self._sort_order = Qt.SortOrder.DescendingOrder
        self._grey = QtGui.QBrush(QtGui.QColor("#8A8F96"))
        self._bold = QtGui.QFont()
        self._bold.setBold(True)

    # ------------------------------------------------------------------ API
    @property
    def result(self) -> SweepResult | None:
        """The sweep shown."""
        return self._result

    def set_result(self, result: SweepResult | None, mask: np.ndarray | None = None,
                   front: np.ndarray | None = None) -> None:
        """Show ``result`` (rows where ``mask``; ``front`` marks the Pareto column)."""
        self.beginResetModel()
        self._result = result
        self._codes = {}
        n = result.num_plans if result is not None else 0
        self._mask = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
        self._front = np.zeros(n, bool) if front is None else np.asarray(front, bool)
        if result is not None:
            self._perm = np.lexsort((np.arange(n), result.training_days, ~result.fits_in_memory,
                                     ~self._front))
            self._sort_perm()
        else:
            self._perm = np.empty(0, np.int64)
        self._rows_from_perm()
        self.endResetModel()

    def set_mask(self, mask: np.ndarray, front: np.ndarray) -> None:
        """Show only the plans where ``mask`` (bool, num_plans); ``front`` for the Pareto column."""
        self.beginResetModel()
        self._mask = np.asarray(mask, bool)
        self._front = np.asarray(front, bool)
        if self._result is not None and TABLE_COLUMNS[self._sort_column].attr == "front":
            self._sort_perm()  # the front depends on the filters
        self._rows_from_perm()
        self.endResetModel()

    def result_index(self, row: int) -> int:
        """Plan (row of the :class:`SweepResult`) shown in table row ``row``."""
        return int(self._rows[row])

    def row_of(self, index: int) -> int:
        """Table row of plan ``index``, or -1 when filtered out."""
        if self._result is None or not 0 <= index < self._row_of.size:
            return -1
        return int(self._row_of[index])

    def shown(self) -> np.ndarray:
        """Plans shown, in table order; int64 (k,)."""
        return self._rows.copy()

    @property
    def sort_column(self) -> int:
        """Column the rows are sorted by."""
        return self._sort_column

    # ------------------------------------------------------------------ Qt model
    def rowCount(self, parent: QtCore.QModelIndex = QtCore.QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else int(self._rows.size)

    def columnCount(self, parent: QtCore.QModelIndex = QtCore.QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(TABLE_COLUMNS)

    def data(self, index: QtCore.QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or self._result is None:
            return None
        i = int(self._rows[index.row()])
        col = TABLE_COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.fmt(self._value(i, col.attr))
        if role == Qt.ItemDataRole.UserRole:
            v = self._value(i, col.attr)
            return v.item() if isinstance(v, np.generic) else v
        if role == Qt.ItemDataRole.TextAlignmentRole:
            h = Qt.AlignmentFlag.AlignRight if col.right else Qt.AlignmentFlag.AlignLeft
            return int(h | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole:
            return None if self._result.fits_in_memory[i] else self._grey
        if role == Qt.ItemDataRole.FontRole:
            return self._bold if self._front[i] else None
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._result.reason[i] or None
        return None

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(TABLE_COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return TABLE_COLUMNS[section].header
        if role == Qt.ItemDataRole.ToolTipRole:
            return TABLE_COLUMNS[section].tip
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort the rows by ``column`` (stable; the selection follows its plans)."""
        self._sort_column, self._sort_order = int(column), order
        if self._result is None:
            return
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        plans = [int(self._rows[ix.row()]) for ix in old]
        self._sort_perm()
        self._rows_from_perm()
        new = [self.index(int(self._row_of[i]), ix.column()) for i, ix in zip(plans, old)]
        self.changePersistentIndexList(old, new)
        self.layoutChanged.emit()

    # ------------------------------------------------------------------ internals
    def _value(self, i: int, attr: str) -> Any:
        if attr == "front":
            return bool(self._front[i])
        if attr == "reason":
            return self._result.reason[i]
        return getattr(self._result, attr)[i]

    def _sort_codes(self, column: int) -> np.ndarray:
        attr = TABLE_COLUMNS[column].attr
        if attr == "front":  # depends on the filters: not cached
            return self._front.astype(np.int64)
        codes = self._codes.get(column)
        if codes is None:
            values = (np.asarray(self._result.reason) if attr == "reason"
                      else getattr(self._result, attr))
            if values.dtype == object:  # a plan field that may be None: None sorts first
                values = np.array(["" if v is None else f"{v:020d}" if isinstance(v, int) else f"~{v}"
                                   for v in values.tolist()])
            codes = self._codes[column] = np.unique(values, return_inverse=True)[1].ravel()
        return codes

    def _sort_perm(self) -> None:
        keys = self._sort_codes(self._sort_column)[self._perm]
        if self._sort_order == Qt.SortOrder.DescendingOrder:
            keys = -keys
        self._perm = self._perm[np.argsort(keys, kind="stable")]

    def _rows_from_perm(self) -> None:
        n = self._result.num_plans if self._result is not None else 0
        self._rows = self._perm[self._mask[self._perm]] if n else np.empty(0, np.int64)
        self._row_of = np.full(n, -1, np.int64)
        self._row_of[self._rows] = np.arange(self._rows.size)


# --------------------------------------------------------------------------- plot

#: Labelled mantissas of log-axis ticks, densest first, with the smallest gap between
#: neighbours in decades: a set is used when that gap is wide enough for a label.
_LOG_LABEL_SETS = (((1, 2, 3, 4, 5, 6, 7, 8, 9), math.log10(9 / 8)),
                   ((1, 2, 3, 4, 5), math.log10(5 / 4)),
                   ((1, 2, 3, 5), math.log10(3 / 2)),
                   ((1, 2, 5), math.log10(2)),
                   ((1,), 1.0))


class _ValueAxis(pg.AxisItem):
    """An axis whose tick labels come from ``formatter(value)``, in linear or log mode.

    In log mode every minor tick (2..9 × 10^k) is drawn but only as many are
    labelled as fit: 1, 2, 5 × 10^k on a normal plot, fewer or more by zoom.
    """

    def __init__(self, orientation: str, formatter: Callable[[float], str]) -> None:
        super().__init__(orientation)
        self._formatter = formatter

    def _labelled_mantissas(self) -> tuple[int, ...]:
        lo, hi = self.range
        span = abs(float(hi) - float(lo)) or 1.0
        horizontal = self.orientation in ("bottom", "top")
        length = self.width() if horizontal else self.height()
        per_decade = length / span  # pixels
        label_px = 60.0 if horizontal else 22.0
        for mantissas, gap in _LOG_LABEL_SETS:
            if per_decade * gap >= label_px:
                return mantissas
        return (1,)

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph API
        if not self.logMode:
            return [self._formatter(float(v) * scale) for v in values]
        keep = self._labelled_mantissas()
        out = []
        for v in values:
            v = float(v)
            mantissa = 10.0 ** (v - math.floor(v + 1e-9))
            near = round(mantissa)
            labelled = abs(mantissa - near) < 1e-6 * near and (near in keep or near == 10)
            out.append(self._formatter(10.0 ** v) if labelled else "")
        return out


class SweepPlot(pg.PlotWidget):
    """Scatter of training days (x) against cost in USD (y), one point per plan shown.

    Signals
    -------
    point_clicked(int, bool)
        Plan index under a click, and whether it was a double click.
    """

    point_clicked = Signal(int, bool)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent, background="w",
                         axisItems={"bottom": _ValueAxis("bottom", format_number_short),
                                    "left": _ValueAxis("left", format_usd_short)})
        self._result: SweepResult | None = None
        self._log = True
        self._shown = np.empty(0, np.int64)
        self._front_idx = np.empty(0, np.int64)
        self._marks: dict[str, int | None] = {}
        self._selected: int | None = None
        self._current: int | None = None
        self._deadline: float | None = None

        item = self.getPlotItem()
        item.setMenuEnabled(False)
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen("#404040"))
            axis.setTextPen(pg.mkPen("#202020"))
        item.setLabel("bottom", "training time (days)")
        item.setLabel("left", "cost (USD)")
        item.showGrid(x=True, y=True, alpha=0.18)
        item.setLogMode(x=True, y=True)  # the items get log10 coordinates from _tx

        def scatter(z: float, interactive: bool = True, **kw: Any) -> pg.ScatterPlotItem:
            s = pg.ScatterPlotItem(hoverable=interactive, tip=self._tip if interactive else None, **kw)
            s.setZValue(z)
            if interactive:
                s.sigClicked.connect(self._on_points_click)
            else:  # rings drawn over other points must not take their clicks
                s.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
                s.setAcceptHoverEvents(False)
            item.addItem(s)
            return s

        self._infeasible = scatter(0, size=5, pen=None, brush=pg.mkBrush(*_INFEASIBLE), symbol="o")
        self._feasible = scatter(1, size=7, pen=pg.mkPen(QtGui.QColor(_FEASIBLE).darker(140), width=0.6),
                                 brush=pg.mkBrush(QtGui.QColor(_FEASIBLE)), symbol="o")
        self._front_line = pg.PlotCurveItem(pen=pg.mkPen(_FRONT, width=2))
        self._front_line.setZValue(2)
        item.addItem(self._front_line)
        self._front_points = scatter(3, size=9, pen=pg.mkPen("w", width=1),
                                     brush=pg.mkBrush(_FRONT), symbol="o")
        self._mark_items = {
            "fastest": scatter(4, size=17, symbol="t1", brush=pg.mkBrush(_FASTEST),
                               pen=pg.mkPen("#1B5E20", width=1.2)),
            "cheapest": scatter(4, size=15, symbol="s", brush=pg.mkBrush(_CHEAPEST),
                                pen=pg.mkPen("#4A2C6B", width=1.2)),
            "deadline": scatter(4, size=21, symbol="star", brush=pg.mkBrush(_DEADLINE),
                                pen=pg.mkPen("#7A5C00", width=1.2)),
        }
        self._current_item = scatter(5, False, size=17, symbol="d", brush=pg.mkBrush(None),
                                     pen=pg.mkPen("#000000", width=2))
        self._selected_item = scatter(6, False, size=24, symbol="o", brush=pg.mkBrush(None),
                                      pen=pg.mkPen("#000000", width=2.5))
        self._deadline_line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen(_DEADLINE, width=2, style=Qt.PenStyle.DashLine),
            label="deadline", labelOpts={"position": 0.96, "color": "#7A5C00",
                                         "fill": pg.mkBrush(255, 255, 255, 220)})
        self._deadline_line.setVisible(False)
        item.addItem(self._deadline_line, ignoreBounds=True)

        # translucent, so points behind it stay visible (and it can be dragged aside)
        legend = self._legend = item.addLegend(offset=(-8, 8), labelTextColor="#202020",
                                               brush=pg.mkBrush(255, 255, 255, 170),
                                               pen=pg.mkPen("#B0B4BA"))
        front_sample = pg.PlotDataItem(pen=pg.mkPen(_FRONT, width=2), symbol="o", symbolSize=8,
                                       symbolBrush=pg.mkBrush(_FRONT), symbolPen=pg.mkPen("w"))
        self._legend_samples = [front_sample]  # keep alive; not in the plot
        self._legend_deadline: bool | None = None
        self._fill_legend(with_deadline=False)
        self.setMinimumHeight(220)

    def _fill_legend(self, with_deadline: bool) -> None:
        """Legend entries; "cheapest within deadline" only while a deadline is set."""
        if with_deadline == self._legend_deadline:
            return
        legend = self._legend
        legend.clear()
        legend.addItem(self._feasible, "fits in memory")
        legend.addItem(self._infeasible, "does not fit")
        legend.addItem(self._legend_samples[0], "Pareto front")
        legend.addItem(self._mark_items["fastest"], "fastest")
        legend.addItem(self._mark_items["cheapest"], "cheapest")
        if with_deadline:
            legend.addItem(self._mark_items["deadline"], "cheapest within deadline")
        legend.addItem(self._current_item, "plan in the editor")
        self._legend_deadline = with_deadline

    def legend_labels(self) -> list[str]:
        """Texts of the legend entries, top to bottom."""
        return [label.text for _, label in self._legend.items]

    # ------------------------------------------------------------------ API
    @property
    def log_axes(self) -> bool:
        """Whether both axes are logarithmic."""
        return self._log

    def set_log_axes(self, log: bool) -> None:
        """Logarithmic (default) or linear axes."""
        self._log = bool(log)
        self.getPlotItem().setLogMode(x=self._log, y=self._log)
        self._redraw(auto_range=True)

    def set_result(self, result: SweepResult | None) -> None:
        """Plot ``result`` (every plan, until :meth:`set_view` filters)."""
        self._result = result
        n = result.num_plans if result is not None else 0
        self._shown = np.arange(n)
        self._front_idx = np.empty(0, np.int64)
        self._marks = {}
        self._selected = self._current = None
        self._redraw(auto_range=True)

    def set_view(self, shown: np.ndarray, front: np.ndarray, marks: dict[str, int | None],
                 deadline_days: float | None, auto_range: bool = False) -> None:
        """Show plans ``shown`` (bool mask), ``front`` (bool mask) as the front line, and marks."""
        self._shown = np.flatnonzero(shown)
        idx = np.flatnonzero(front)
        if self._result is not None and idx.size:
            r = self._result
            idx = idx[np.lexsort((r.cost_usd[idx], r.training_days[idx]))]
        self._front_idx = idx
        self._marks = dict(marks)
        self._deadline = deadline_days
        self._fill_legend(with_deadline=deadline_days is not None)
        self._redraw(auto_range=auto_range)

    def set_selected(self, index: int | None) -> None:
        """Ring plan ``index`` (None: no ring)."""
        self._selected = index
        self._set_one(self._selected_item, index)

    def set_current(self, index: int | None) -> None:
        """Mark plan ``index`` as the plan in the editor (None: no mark)."""
        self._current = index
        self._set_one(self._current_item, index)

    def points_xy(self, index: int) -> tuple[float, float]:
        """Scene-independent plot coordinates of plan ``index`` (log10 in log mode)."""
        r = self._result
        return float(self._tx(r.training_days[index])), float(self._tx(r.cost_usd[index]))

    def scatter_items(self) -> dict[str, pg.ScatterPlotItem]:
        """The scatter items by role (``feasible``, ``infeasible``, ``front``, marks...)."""
        return {"feasible": self._feasible, "infeasible": self._infeasible,
                "front": self._front_points, "current": self._current_item,
                "selected": self._selected_item, **self._mark_items}

    def front_line_xy(self) -> tuple[np.ndarray, np.ndarray]:
        """Vertices of the front line (plot coordinates)."""
        x, y = self._front_line.getData()
        return (np.asarray(x if x is not None else []), np.asarray(y if y is not None else []))

    # ------------------------------------------------------------------ internals
    def _tx(self, values: Any) -> Any:
        if not self._log:
            return values
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log10(values)

    def _xy(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r = self._result
        x = self._tx(r.training_days[idx])
        y = self._tx(r.cost_usd[idx])
        ok = np.isfinite(x) & np.isfinite(y)
        return x[ok], y[ok], idx[ok]

    def _set_points(self, item: pg.ScatterPlotItem, idx: np.ndarray) -> None:
        if self._result is None or idx.size == 0:
            item.setData(x=[], y=[], data=[])
            return
        x, y, idx = self._xy(np.asarray(idx, np.int64))
        item.setData(x=x, y=y, data=idx)

    def _set_one(self, item: pg.ScatterPlotItem, index: int | None) -> None:
        shown = (index is not None and self._result is not None
                 and 0 <= index < self._result.num_plans
                 and bool(np.isin(index, self._shown)))
        self._set_points(item, np.array([index] if shown else [], np.int64))

    def _redraw(self, auto_range: bool = False) -> None:
        r = self._result
        if r is None:
            for it in self.scatter_items().values():
                it.setData(x=[], y=[], data=[])
            self._front_line.setData(x=[], y=[])
            self._deadline_line.setVisible(False)
            return
        fits = r.fits_in_memory[self._shown]
        self._set_points(self._infeasible, self._shown[~fits])
        self._set_points(self._feasible, self._shown[fits])
        self._set_points(self._front_points, self._front_idx)
        fx, fy, _ = self._xy(self._front_idx)
        self._front_line.setData(x=fx, y=fy)
        for name, it in self._mark_items.items():
            i = self._marks.get(name)
            self._set_points(it, np.array([] if i is None else [i], np.int64))
        self._set_one(self._selected_item, self._selected)
        self._set_one(self._current_item, self._current)
        d = self._deadline
        if d is not None and d > 0:
            self._deadline_line.setValue(float(self._tx(d)))
            self._deadline_line.setVisible(True)
            self._deadline_line.label.setFormat(f"deadline {format_number_short(d)} days")
        else:
            self._deadline_line.setVisible(False)
        if auto_range:
            self._auto_range()

    def _auto_range(self) -> None:
        r = self._result
        idx = self._shown if self._shown.size else np.arange(r.num_plans if r is not None else 0)
        if r is None or not idx.size:
            return
        x, y, _ = self._xy(idx)
        if not x.size:
            return
        vb = self.getPlotItem().getViewBox()
        vb.setRange(xRange=(float(x.min()), float(x.max())), yRange=(float(y.min()), float(y.max())),
                    padding=0.06)

    def _tip(self, x: float, y: float, data: Any) -> str:
        r = self._result
        if r is None or data is None:
            return ""
        i = int(data)
        lines = [_plan_text(r, i),
                 f"{format_count(int(r.num_gpus[i]))} GPUs · {format_count(r.training_days[i], 1)} days"
                 f" · {format_usd(r.cost_usd[i])}",
                 f"iteration {format_duration(r.iteration_time_s[i])} · MFU {format_fraction(r.mfu[i])}"
                 f" · {format_bytes(r.max_memory_per_gpu_bytes[i])} per GPU"]
        if r.reason[i]:
            lines.append(r.reason[i])
        return "\n".join(lines)

    @Slot(object, object, object)
    def _on_points_click(self, item: Any, points: Any, event: Any) -> None:
        if points is None or len(points) == 0:
            return
        data = points[0].data()
        if data is None:
            return
        double = bool(event is not None and hasattr(event, "double") and event.double())
        self.point_clicked.emit(int(data), double)


# --------------------------------------------------------------------------- the tab

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
    settings_changed()
        The sweep settings changed (they are saved with the session).
    sweep_finished(object)
        A :class:`core.sweep.SweepResult` is now shown.
    sweep_failed(str)
        The sweep raised; the message is shown too.
    sweep_cancelled()
        The sweep was cancelled; the previous result (if any) stays.
    """

    plan_selected = Signal(int)
    open_in_plan_requested = Signal()
    settings_changed = Signal()
    sweep_finished = Signal(object)
    sweep_failed = Signal(str)
    sweep_cancelled = Signal()

    _GPU_FILTERS = ("all GPU counts", "exactly", "at most")

    def __init__(self, sweep_fn: Callable[..., Any] | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = Session()
        self._result: SweepResult | None = None
        self._selected: int | None = None
        self._shown_mask = np.empty(0, bool)
        self._front = np.empty(0, bool)
        self._marks: dict[str, int | None] = {}
        self._current: int | None = None  # the editor's plan in the sweep
        self._abandoned_run: int | None = None
        self._syncing = False
        self._export_dir = str(Path.home())

        self.runner = SweepRunner(sweep_fn, parent=self)
        self.runner.started.connect(self._on_sweep_start)
        self.runner.progress.connect(self._on_sweep_progress)
        self.runner.finished.connect(self._on_sweep_finish)
        self.runner.failed.connect(self._on_sweep_fail)
        self.runner.cancelled.connect(self._on_sweep_cancel)

        # ---- left: settings, run, progress
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
        self.progress_bar.setFormat("%v / %m plans")
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

        # ---- right: filters, summary, plot, table, timeline of the editor's plan
        self.gpu_filter_mode = QtWidgets.QComboBox()
        self.gpu_filter_mode.setObjectName("filter.gpu_mode")
        self.gpu_filter_mode.addItems(list(self._GPU_FILTERS))
        self.gpu_filter = QtWidgets.QSpinBox()
        self.gpu_filter.setObjectName("filter.gpus")
        self.gpu_filter.setRange(1, _INT_MAX)
        self.gpu_filter.setGroupSeparatorShown(True)
        self.gpu_filter.setSuffix(" GPUs")
        self.gpu_filter.setEnabled(False)
        self.fits_only = QtWidgets.QCheckBox("fits in memory only")
        self.fits_only.setObjectName("filter.fits_only")
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
        self.export_csv_button.clicked.connect(self._on_export_csv_click)
        self.export_png_button.clicked.connect(self._on_export_png_click)
        filters = QtWidgets.QHBoxLayout()
        filters.setContentsMargins(6, 4, 6, 0)
        filters.addWidget(QtWidgets.QLabel("Show:"))
        filters.addWidget(self.gpu_filter_mode)
        filters.addWidget(self.gpu_filter)
        filters.addSpacing(8)
        filters.addWidget(self.fits_only)
        filters.addWidget(self.within_deadline)
        filters.addSpacing(8)
        filters.addWidget(self.log_axes)
        filters.addStretch(1)

        self._stale = QtWidgets.QLabel(
            "The model, cluster, cost, batch size or precision changed since this sweep: "
            "press Run to update it. Picking a plan loads the swept inputs.")
        self._stale.setObjectName("sweep.stale")
        self._stale.setWordWrap(True)
        self._stale.setStyleSheet("background: #FFF4CE; color: #5C4400; padding: 3px;")
        self._stale.setVisible(False)
        self._summary = QtWidgets.QLabel("No sweep yet.")
        self._summary.setObjectName("sweep.summary")
        self._summary.setWordWrap(True)
        self._summary.setTextFormat(Qt.TextFormat.RichText)
        self._summary.linkActivated.connect(self._on_summary_link)

        self.plot = SweepPlot()
        self.plot.point_clicked.connect(self._on_plot_point_click)

        self.table_model = SweepTableModel(self)
        self.table = QtWidgets.QTableView()
        self.table.setObjectName("sweep.table")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(_COLUMN_INDEX["front"], Qt.SortOrder.DescendingOrder)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setHighlightSections(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.selectionModel().currentRowChanged.connect(self._on_table_current_row_change)
        self.table.doubleClicked.connect(self._on_table_double_click)
        self._size_columns()

        self.preview = TimelineWidget()
        self._preview_title = QtWidgets.QLabel("Timeline of the plan in the editor: none yet")
        self._preview_title.setObjectName("sweep.preview_title")
        self._preview_title.setWordWrap(True)
        self.open_button = QtWidgets.QPushButton("Open in Plan tab")
        self.open_button.setToolTip("Show the plan with the editor, full timeline and cost panel "
                                    "(or double-click a point or row)")
        self.open_button.clicked.connect(self._on_open_click)
        preview_box = QtWidgets.QWidget()
        preview_layout = QtWidgets.QVBoxLayout(preview_box)
        preview_layout.setContentsMargins(0, 2, 0, 0)
        preview_layout.setSpacing(0)
        head = QtWidgets.QHBoxLayout()
        head.setContentsMargins(6, 0, 6, 0)
        head.addWidget(self._preview_title, 1)
        head.addWidget(self.open_button)
        preview_layout.addLayout(head)
        preview_layout.addWidget(self.preview, 1)

        splitter = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.plot)
        splitter.addWidget(self.table)
        splitter.addWidget(preview_box)
        splitter.setChildrenCollapsible(True)
        splitter.setStretchFactor(0, 4)
        splitter.setStretchFactor(1, 3)
        splitter.setStretchFactor(2, 2)
        splitter.setSizes([420, 260, 230])
        self._splitter = splitter

        right = QtWidgets.QWidget()
        right_layout = QtWidgets.QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(3)
        right_layout.addLayout(filters)
        summary_row = QtWidgets.QVBoxLayout()
        summary_row.setContentsMargins(6, 0, 6, 0)
        summary_row.addWidget(self._stale)
        summary_row.addWidget(self._summary)
        right_layout.addLayout(summary_row)
        right_layout.addWidget(splitter, 1)

        main = QtWidgets.QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left_scroll)
        main.addWidget(right)
        main.setStretchFactor(0, 0)
        main.setStretchFactor(1, 1)
        main.setChildrenCollapsible(False)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(main)
        self._update_source()

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
        """Text of the summary above the plot (rich text)."""
        return self._summary.text()

    @property
    def is_stale(self) -> bool:
        """Whether the session's inputs changed since the sweep shown."""
        return not self._stale.isHidden()

    def set_session(self, session: Session) -> None:
        """The edited session changed: its model, batch size, cluster and cost feed the next sweep."""
        self._session = session.copy()
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
        self.preview.clear()
        self._preview_title.setText("Timeline of the plan in the editor: none yet")
        self._status.setText("Set the space and press Run.")
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)

    def settings(self) -> dict[str, Any] | None:
        """Sweep settings for ``Session.sweep`` (None: nothing to save)."""
        return self.settings_panel.settings()

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
        self.runner.start(self._session, space, self.settings_panel.deadline_days())
        return True

    def cancel(self) -> None:
        """Cancel the running sweep (the previous result stays)."""
        self.runner.cancel()

    def shutdown(self) -> bool:
        """Stop the sweep thread (window closing)."""
        return self.runner.shutdown()

    def set_result(self, result: SweepResult | None) -> None:
        """Show ``result`` (None clears); the selection is cleared."""
        self._result = result
        self._selected = None
        self.plot.set_result(result)
        self.table_model.set_result(result)
        for i, col in enumerate(TABLE_COLUMNS):  # plan fields equal in every plan: hidden
            field = ParallelPlan.__dataclass_fields__.get(col.attr)
            hide = (field is not None and field.metadata.get("label") != "always"
                    and result is not None
                    and len({repr(v) for v in result.plan_columns[col.attr].tolist()}) <= 1)
            self.table.setColumnHidden(i, hide)
        has = result is not None
        if has:
            gpus = self._session.plan.num_gpus if isinstance(self._session.plan.num_gpus, int) else 1
            with QtCore.QSignalBlocker(self.gpu_filter):
                self.gpu_filter.setValue(max(1, gpus))
        self._apply_filters(auto_range=True)
        self.export_csv_button.setEnabled(has)
        self.export_png_button.setEnabled(has)
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
        self.preview.set_data(result.graph, result.schedule)
        pl, rep = result.session.plan, result.report
        self._preview_title.setText(
            f"<b>Timeline of the plan in the editor</b>: {html.escape(pl.label())}"
            f" — iteration {format_duration(rep.iteration_time_s)}, "
            f"{format_count(rep.training_days, 1)} days, {format_usd(rep.cost_usd)}, "
            f"MFU {format_fraction(rep.mfu)}")

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
        pixmap = self.plot.grab()
        out = QtCore.QSaveFile(str(path))
        ok = out.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
        if ok:
            ok = pixmap.save(out, "PNG")
            ok = out.commit() if ok else (out.cancelWriting() or False)
        if not ok:
            QtWidgets.QMessageBox.critical(self, "Cannot export PNG",
                                           f"{path}: {out.errorString() or 'cannot write the image'}")
            return False
        self._set_status(f"Saved the plot to {path}")
        return True

    # ------------------------------------------------------------------ handlers: runner
    @Slot(int)
    def _on_sweep_start(self, run_id: int) -> None:
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress_bar.setRange(0, 0)  # busy until the number of plans is known
        self._set_status("Enumerating plans…")

    @Slot(int, int, int)
    def _on_sweep_progress(self, run_id: int, done: int, total: int) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(done)
        self._set_status(f"Simulating {format_count(total)} plans…")

    @Slot(int, object, float)
    def _on_sweep_finish(self, run_id: int, result: SweepResult, seconds: float) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self._sweep_ended()
        self.progress_bar.setRange(0, max(result.num_plans, 1))
        self.progress_bar.setValue(result.num_plans)
        self.set_result(result)
        rate = result.num_plans / seconds if seconds > 0 else 0.0
        text = (f"{format_count(result.num_plans)} plans ({format_count(result.num_feasible)} fit in "
                f"memory) in {seconds:,.1f} s, {format_count(rate)} plans/s")
        if result.warnings:
            from core.comm import summarize_warnings
            folded = summarize_warnings(result.warnings)
            more = f" (+{len(folded) - 1} more)" if len(folded) > 1 else ""
            text += f"\n⚠ {folded[0]}{more}"
        self._set_status(text)
        self.sweep_finished.emit(result)

    @Slot(int, str)
    def _on_sweep_fail(self, run_id: int, message: str) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self._sweep_ended()
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self._set_status(f"Sweep failed: {message}", error=True)
        self.sweep_failed.emit(message)

    @Slot(int)
    def _on_sweep_cancel(self, run_id: int) -> None:
        if run_id != self.runner.latest_run_id:
            return
        self._sweep_ended()
        if run_id == self._abandoned_run:
            self.progress_bar.setRange(0, 1)
            self.progress_bar.setValue(0)
            return
        kept = " (showing the previous sweep)" if self._result is not None else ""
        self._set_status(f"Sweep cancelled{kept}.")
        self.sweep_cancelled.emit()

    def _sweep_ended(self) -> None:
        busy = self.runner.busy
        self.run_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)

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
        self.gpu_filter.setEnabled(index > 0)
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
    def _set_status(self, text: str, error: bool = False) -> None:
        self._status.setText(text)
        self._status.setStyleSheet(_ERROR_STYLE if error else "")

    def _apply_filters(self, auto_range: bool = False) -> None:
        r = self._result
        if r is None:
            self._shown_mask = np.empty(0, bool)
            self._front = np.empty(0, bool)
            self._marks = {}
            self._update_summary()
            self.plot.set_view(self._shown_mask, self._front, {}, None)
            return
        deadline = self.settings_panel.deadline_days()
        self.within_deadline.setEnabled(deadline is not None)
        mode = self.gpu_filter_mode.currentIndex()
        gpus = self.gpu_filter.value()
        shown = r.select(num_gpus=gpus if mode == 1 else None, max_gpus=gpus if mode == 2 else None,
                         fits_only=self.fits_only.isChecked(),
                         deadline_days=deadline if self.within_deadline.isChecked() else None)
        feasible = shown & r.fits_in_memory
        front = pareto_front(r.training_days, r.cost_usd, feasible)
        marks = {"fastest": best_index(r.training_days, r.cost_usd, feasible),
                 "cheapest": best_index(r.cost_usd, r.training_days, feasible),
                 "deadline": (best_index(r.cost_usd, r.training_days,
                                         feasible & (r.training_days <= deadline))
                              if deadline is not None else None)}
        self._shown_mask, self._front, self._marks = shown, front, marks
        self.plot.set_view(shown, front, marks, deadline, auto_range=auto_range)
        self.table_model.set_mask(shown, front)
        self._sync_table_selection()
        self._update_summary()

    def _update_summary(self) -> None:
        r = self._result
        if r is None:
            self._summary.setText("No sweep yet: set the space on the left and press Run.")
            return
        deadline = self.settings_panel.deadline_days()
        shown = int(np.count_nonzero(self._shown_mask))
        fit = int(np.count_nonzero(self._shown_mask & r.fits_in_memory))
        parts = [f"<b>{format_count(shown)}</b> of {format_count(r.num_plans)} plans shown "
                 f"({format_count(fit)} fit in memory), {format_count(int(self._front.sum()))} on "
                 f"the Pareto front"]

        def link(name: str, label: str, color: str) -> None:
            i = self._marks.get(name)
            if i is None:
                return
            parts.append(f'<span style="color:{color}">■</span> <a href="plan:{i}">{label}</a>: '
                         f"{format_count(r.training_days[i], 1)} days, {format_usd(r.cost_usd[i])} "
                         f"({_plan_text(r, i)}, {format_count(int(r.num_gpus[i]))} GPUs)")

        link("fastest", "fastest", _FASTEST)
        link("cheapest", "cheapest", _CHEAPEST)
        if deadline is not None:
            if self._marks.get("deadline") is None:
                parts.append(f"no plan that fits trains within {format_number_short(deadline)} days")
            else:
                link("deadline", f"cheapest within {format_number_short(deadline)} days", _DEADLINE)
        i = self._current
        if i is not None and self._shown_mask[i]:
            if not r.fits_in_memory[i]:
                where = "does not fit in memory"
            elif self._front[i]:
                where = "on the Pareto front"
            else:
                k = int(np.count_nonzero(self._shown_mask[r.dominated_by(i)]))
                where = f"dominated by {format_count(k)} plan{'s' if k != 1 else ''} shown"
            parts.append(f'◇ <a href="plan:{i}">plan in the editor</a>: '
                         f"{format_count(r.training_days[i], 1)} days, {format_usd(r.cost_usd[i])} "
                         f"({_plan_text(r, i)}, {format_count(int(r.num_gpus[i]))} GPUs) — {where}")
        self._summary.setText(" · ".join(parts[:1]) + "<br>" + "<br>".join(parts[1:]))

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
            tokens = format_count(s.cost.training_tokens / 1e9, 0)
            self._source.setText(
                f"From the Plan tab: <b>{s.model.name}</b>, global batch "
                f"B = {format_count(s.plan.global_batch_size)}, {s.plan.precision}; "
                f"{s.cluster.gpu}, {s.cluster.gpus_per_node} per node; {tokens} billion tokens at "
                f"${s.cost.price_per_gpu_hour_usd:,.2f}/GPU-hour.")
        except (TypeError, ValueError):
            self._source.setText("From the Plan tab: (invalid inputs)")

    def _update_stale(self) -> None:
        stale = self._result is not None and not _same_inputs(self._result.session, self._session,
                                                              self._result.space)
        self._stale.setVisible(stale)

    def _update_current(self) -> None:
        r = self._result
        index = None
        if r is not None and _same_inputs(r.session, self._session, r.space):
            index = r.index_of(self._session.plan)
        self._current = index
        self.plot.set_current(index)
        self._update_summary()

    def _size_columns(self) -> None:
        fm = self.table.fontMetrics()
        samples = {"t": "888", "p": "888", "d": "8888", "b": "88", "m": "88,888", "schedule": "schedule",
                   "recompute": "recompute", "GPUs": "88,888", "iteration": "888.888 ms",
                   "days": "88,888.8", "cost": "$888,888,888", "MFU": "88.8 %",
                   "memory/GPU": "8,888.8 GiB", "fits": "fits", "front": "front"}
        for i, col in enumerate(TABLE_COLUMNS):
            if col.header in samples:
                w = max(fm.horizontalAdvance(samples[col.header]), fm.horizontalAdvance(col.header))
                self.table.setColumnWidth(i, w + 26)
