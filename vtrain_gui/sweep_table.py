"""The Explore tab's plan table: one row per plan of a sweep, sortable, filtered by a mask.

A :class:`QtCore.QAbstractTableModel` over a :class:`core.studies.sweep.SweepResult`
(no copy of its arrays) and the table view that shows it (:class:`SweepTableView`: columns
sized to their values, plan fields equal in every plan hidden). Used by
:class:`vtrain_gui.explore.ExploreTab`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

from core.plan.parallel import RECOMPUTE_MODES, SCHEDULES, ParallelPlan, plan_field_title
from core.sim.report import MEMORY_VERDICTS
from core.store.format import ProfileStoreError
from core.studies.sweep import SweepResult

from .formatting import (duration_formatter, format_bytes, format_count, format_day_count, format_duration,
                         format_fraction, format_usd)

__all__ = ["SweepTableModel", "SweepTableView", "TABLE_COLUMNS", "COLUMN_INDEX"]


@dataclasses.dataclass(frozen=True)
class _Column:
    header: str
    attr: str
    tip: str
    fmt: Callable[[Any], str]
    right: bool = True


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


def _band_unit(largest: float) -> tuple[float, str]:
    """The scale and unit of error bands whose largest bound is ``largest`` seconds."""
    return ((1.0, "s") if not largest < 1.0 else (1e3, "ms") if largest >= 1e-3 else (1e6, "µs"))


def _band_text(low: float, high: float, inside: bool,
               unit: tuple[float, str] | None = None) -> str:
    """``'4.87 – 5.12 s'`` (one unit: ``unit``, the column's scale and unit, else the high
    bound's), with ``' ⚠'`` outside the calibration range; ``'none'`` without a band."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "none"
    scale, unit_name = unit or _band_unit(high)
    lo, hi = low * scale, high * scale
    digits = 1 if hi >= 100 else 2
    return f"{lo:.{digits}f} – {hi:.{digits}f} {unit_name}" + ("" if inside else " ⚠")


#: The memory verdicts (:data:`core.sim.report.MEMORY_VERDICTS`) as the "fits" column answers:
#: "does not fit" under "fits" took the column 88 px, and at 1,366 x 768 the column read "fi"
#: at the view's edge.
_FITS_ANSWERS = dict(zip(MEMORY_VERDICTS, ("yes", "tight", "no")))


def _fits_text(verdict: Any) -> str:
    """A plan's memory verdict as the "fits" column answers it: yes, tight or no."""
    return _FITS_ANSWERS.get(str(verdict), str(verdict))


def _plan_value_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return _yes_no(value)
    return str(value)


def _plan_columns(always: bool) -> tuple[_Column, ...]:
    """One column per plan field a sweep can vary (not B or the precision), from the field's
    metadata, with m after b: those always shown (t, p, d, b, schedule, recompute) with
    ``always``, the others (hidden when equal in every plan) without."""
    out = []
    for f in dataclasses.fields(ParallelPlan):
        if f.metadata.get("label") == "never" or (f.metadata.get("label") == "always") != always:
            continue
        right = str(f.type).startswith("int")
        out.append(_Column(plan_field_title(f.name), f.name, f.metadata.get("help", ""),
                           _plan_value_text, right))
        if f.name == "micro_batch_size":
            out.append(_Column("m", "num_microbatches", "Micro-batches per iteration m = B/(d·b)",
                               format_count))
    return tuple(out)


#: Columns of the plan table: header, :class:`SweepResult` attribute, tooltip, formatter.
#: The plan's columns come from its fields; :meth:`vtrain_gui.explore.ExploreTab.set_result`
#: hides those that are the same for every plan (beyond t, p, d, b, schedule and recompute).
#: The iteration time, days, cost, memory, error band, fits and front come right after the
#: plan's main fields, before the fields a sweep may add (sp, ZeRO, overlaps, v, ...), so that
#: they stay on screen in a narrow window (a new-user trial found the iteration time and the
#: band's ⚠ off-screen, another the memory cut off at 1,366 x 768, where the plan's fields
#: through the band are whole: fits and front, also told by the rows' grey and bold, may need
#: the scroll bar there); the long ``reason`` is last (elided, whole in the row's tooltip).
_BAND_COLUMN = _Column(
    "error band", "iteration_band",
    "Error band of the iteration time at its nominal coverage (cross-validated residuals "
    "of the profile); ⚠ marks a plan outside the calibration range (GPU count or model "
    "size beyond the calibrated runs, or a feature such as recompute, micro-batch, "
    "sequence length, precision, cp or ep none of them had)", lambda v: _band_text(*v))
TABLE_COLUMNS = _plan_columns(always=True) + (
    _Column("GPUs", "num_gpus", "World size t·p·cp·d", format_count),
    _Column("iteration", "iteration_time_s", "Predicted time of one iteration", format_duration),
    _Column("days", "training_days", "Training time for the token budget (days)",
            format_day_count),
    _Column("cost", "cost_usd", "Cost of training on the token budget (USD)", format_usd),
    _Column("memory/GPU", "max_memory_per_gpu_bytes", "Largest memory per GPU over the stages",
            format_bytes),
    _BAND_COLUMN,
    _Column("fits", "memory_verdict", "Memory verdict of the largest stage against the GPU's "
            "memory: fits, tight (within the planner's margin, cluster.memory_reserve_fraction, "
            "of the capacity, or over it only with the allocator's cache: kept by the sweep) or "
            "does not fit (yes, tight, no)", _fits_text, False),
    _Column("front", "front", "On the time-versus-cost Pareto front of the plans shown", _yes_no,
            False),
) + _plan_columns(always=False) + (
    _Column("MFU", "mfu", "Model FLOPs utilization", format_fraction),
    _Column("reason", "reason", "Why the plan does not fit in GPU memory", str, False),
)
COLUMN_INDEX = {c.attr: i for i, c in enumerate(TABLE_COLUMNS)}


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
        self._feasible = np.empty(0, bool)  # plans that fit and have figures
        self._codes: dict[int, np.ndarray] = {}  # per column: sort keys of every plan
        # per column attribute: the formatter of a column whose unit follows the sweep
        self._formats: dict[str, Callable[[Any], str]] = {}
        self._sort_column = COLUMN_INDEX["front"]
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
        self._formats = self._column_formats(result)
        n = result.num_plans if result is not None else 0
        self._feasible = result.feasible if result is not None else np.zeros(0, bool)
        self._mask = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
        self._front = np.zeros(n, bool) if front is None else np.asarray(front, bool)
        if result is not None:
            self._perm = np.lexsort((np.arange(n), result.training_days, ~result.feasible,
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
            return self._formats.get(col.attr, col.fmt)(self._value(i, col.attr))
        if role == Qt.ItemDataRole.UserRole:
            v = self._value(i, col.attr)
            return v.item() if isinstance(v, np.generic) else v
        if role == Qt.ItemDataRole.TextAlignmentRole:
            h = Qt.AlignmentFlag.AlignRight if col.right else Qt.AlignmentFlag.AlignLeft
            return int(h | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole:
            return None if self._feasible[i] else self._grey  # no answer: no fit or figures
        if role == Qt.ItemDataRole.FontRole:
            return self._bold if self._front[i] else None
        if role == Qt.ItemDataRole.ToolTipRole:
            if col.attr == "iteration_band":
                return self._band_tip(i)
            return self._result.reason[i] or None
        return None

    def _band_tip(self, i: int) -> str:
        r = self._result
        if not math.isfinite(r.interval_low_s[i]):
            # why, as vtrain simulate says it of the plan ("none" alone told nothing)
            try:
                note = r.band_note(i)
            except ProfileStoreError as exc:  # the store moved since the sweep ran
                note = f"no error band; why cannot be told: {exc}"
            return note[0].upper() + note[1:] if note else None
        text = (f"{r.interval_coverage:.0%} of runs like this one measured within "
                f"{format_duration(r.interval_low_s[i])} – {format_duration(r.interval_high_s[i])}")
        if not r.in_calibration_range[i]:
            text += ("\n⚠ outside the calibration range (GPU count or model size beyond the "
                     "calibrated runs): the band is the hull of the in-range and scale-transfer "
                     "bands; its coverage this far out is not established")
        if r.calibration_departures[i]:
            text += "\n⚠ outside the calibration runs' features: " + r.calibration_departures[i]
        return text

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
    @staticmethod
    def _column_formats(result: SweepResult | None) -> dict[str, Callable[[Any], str]]:
        """The iteration time's and the error band's formatters, each column in one unit,
        that of its largest value over the sweep's plans: "658.47 ms" read above "1.259 s"."""
        if result is None or not result.num_plans:
            return {}

        def largest(values: np.ndarray) -> float:
            finite = np.asarray(values, float)[np.isfinite(values)]
            return float(finite.max()) if finite.size else 0.0
        unit = _band_unit(largest(result.interval_high_s))
        return {"iteration_time_s": duration_formatter(largest(result.iteration_time_s)),
                "iteration_band": lambda v: _band_text(*v, unit=unit)}

    def widest_texts(self) -> dict[str, list[str]]:
        """Per figure column (attribute), the texts among which its widest value is: those of
        its largest and smallest values (a wider number has more digits; under a day, under a
        GiB the text changes form) and the error band of the largest bounds, with ⚠ when a
        plan has it. Empty without a result (the columns keep :data:`COLUMN_SAMPLES`' widths)."""
        r = self._result
        if r is None or not r.num_plans:
            return {}

        def ends(values: np.ndarray) -> list[float]:
            finite = np.asarray(values, float)[np.isfinite(values)]
            return [float(finite.max()), float(finite.min())] if finite.size else []
        out: dict[str, list[str]] = {}
        for col in TABLE_COLUMNS:
            if col.attr in ("num_microbatches", "num_gpus", "iteration_time_s", "training_days",
                            "cost_usd", "max_memory_per_gpu_bytes"):
                fmt = self._formats.get(col.attr, col.fmt)
                out[col.attr] = [fmt(v) for v in ends(getattr(r, col.attr))] or ["–"]
        lo, hi = ends(r.interval_low_s), ends(r.interval_high_s)
        outside = not bool(np.all(r.within_calibration[np.isfinite(r.interval_low_s)]))
        out["iteration_band"] = ["none"] + ([self._formats["iteration_band"]((lo[0], hi[0], not outside))]
                                            if lo and hi else [])
        return out

    def _value(self, i: int, attr: str) -> Any:
        if attr == "front":
            return bool(self._front[i])
        if attr == "reason":
            return self._result.reason[i]
        if attr == "iteration_band":
            r = self._result
            return (float(r.interval_low_s[i]), float(r.interval_high_s[i]),
                    bool(r.within_calibration[i]))
        return getattr(self._result, attr)[i]

    def _sort_codes(self, column: int) -> np.ndarray:
        attr = TABLE_COLUMNS[column].attr
        if attr == "front":  # depends on the filters: not cached
            return self._front.astype(np.int64)
        codes = self._codes.get(column)
        if codes is None and attr == "memory_verdict":  # by safety: fits > tight > does not fit
            r = self._result
            codes = self._codes[column] = np.select(
                [~np.asarray(r.fits_in_memory, bool), r.memory_verdict == "tight"], [-1, 1],
                2).astype(np.int64)
        if codes is None:
            values = (np.asarray(self._result.reason) if attr == "reason"
                      else self._result.interval_high_s if attr == "iteration_band"
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


#: The widest value each figure column is sized for (:meth:`SweepTableView._size_columns`):
#: up to 888 t, p or b, 8,888 d, 88,888 micro-batches or GPUs, iterations up to 888.888 ms
#: (longer ones read "1.234 s"), a cost up to $888,888,888, memory up to 8,888.8 GiB.
COLUMN_SAMPLES = {"t": "888", "p": "888", "d": "8888", "b": "88", "m": "88,888",
                  "GPUs": "88,888", "iteration": "888.888 ms", "error band": "888.8 – 888.8 ms ⚠",
                  "days": "88,888.8", "cost": "$888,888,888", "MFU": "88.8 %",
                  "memory/GPU": "8,888.8 GiB", "fits": "tight", "front": "front"}
#: Pixels a cell's text needs beyond its own width (the style's margins, about 3 px a side,
#: and a little air), and a header's (its margins and the sort arrow, about 16 px).
CELL_PADDING, HEADER_PADDING = 10, 26


class SweepTableView(QtWidgets.QTableView):
    """The table of a sweep's plans: rows selected whole, sortable (Pareto front first),
    columns as wide as their header and a typical value."""

    def __init__(self, model: SweepTableModel, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sweep.table")
        self.setModel(model)
        self.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.setSortingEnabled(True)
        self.sortByColumn(COLUMN_INDEX["front"], Qt.SortOrder.DescendingOrder)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.horizontalHeader().setStretchLastSection(True)
        self.horizontalHeader().setHighlightSections(False)
        self.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self._size_columns()

    def hide_constant_columns(self, result: SweepResult | None) -> None:
        """Hide the plan fields equal in every plan of ``result`` (but those always shown)."""
        constant = result.constant_plan_fields() if result is not None else frozenset()
        for i, col in enumerate(TABLE_COLUMNS):
            field = ParallelPlan.__dataclass_fields__.get(col.attr)
            hide = (field is not None and field.metadata.get("label") != "always"
                    and col.attr in constant)
            self.setColumnHidden(i, hide)

    def size_columns_to(self, model: SweepTableModel) -> None:
        """The figure columns as wide as the widest value of the sweep ``model`` shows
        (:meth:`SweepTableModel.widest_texts`, in bold) or their header, not the widest any
        sweep could have: a sweep of a few dollars' plans needs no room for $888,888,888 (at
        1,366 x 768 the "fits" column read "fi" at the view's edge)."""
        self._size_columns()
        texts = model.widest_texts()
        if not texts:
            return
        bold = QtGui.QFont(self.font())
        bold.setBold(True)
        wide = QtGui.QFontMetrics(bold).horizontalAdvance
        head = self.horizontalHeader().fontMetrics().horizontalAdvance
        for i, col in enumerate(TABLE_COLUMNS):
            if col.attr in texts:
                self.setColumnWidth(i, max(max(wide(t) for t in texts[col.attr]) + CELL_PADDING,
                                           head(col.header) + HEADER_PADDING))

    def _size_columns(self) -> None:
        """Every column as wide as a typical value in bold (the Pareto front's rows are bold)
        plus a cell's padding, or its header plus the sort arrow, whichever is wider (the
        plan's other fields too: a near-empty ``v`` must not take 100 px); ``reason`` is last
        and takes what is left (elided, the whole text in the row's tooltip).

        Sized so that the plan's main fields and its figures through the error band, memory
        per GPU among them, stay on screen beside the settings column in a 1,366 x 768 window
        (a new-user trial found the memory column cut off there: each column had the sort
        arrow's room on top of its widest value); the schedules and recomputation modes a
        sweep tries by default are measured (not selective_op, rare and 20 px wider)."""
        bold = QtGui.QFont(self.font())
        bold.setBold(True)
        wide = QtGui.QFontMetrics(bold).horizontalAdvance
        head = self.horizontalHeader().fontMetrics().horizontalAdvance
        for i, col in enumerate(TABLE_COLUMNS):
            sample = COLUMN_SAMPLES.get(col.header, "888" if col.right else "yes")
            sample = {"schedule": max(SCHEDULES, key=wide),
                      "recompute": max(RECOMPUTE_MODES, key=wide)}.get(col.header, sample)
            self.setColumnWidth(i, max(wide(sample) + CELL_PADDING,
                                       head(col.header) + HEADER_PADDING))
