"""The Explore tab's settings form: the candidate plans of a sweep and a deadline.

Builds a :class:`core.studies.sweep.SweepSpace` for the session's model, global batch
size, cluster and cost (empty fields mean the core's defaults); the settings
travel in ``Session.sweep``. Used by :class:`vtrain_gui.explore.ExploreTab`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
from typing import Any

import numpy as np
from PySide6 import QtWidgets
from PySide6.QtCore import Signal, Slot

from core.cli.common import NO_TIGHT_HELP
from core.plan.fields import ConfigError, FieldError
from core.plan.layout import pipeline_split_slots
from core.plan.parallel import RECOMPUTE_CHOICES, SCHEDULES, ZERO_STAGES, ParallelPlan
from core.plan.session import Session
from core.sim.labels import KIND_NAMES
from core.studies.sweep import SweepSpace
from core.studies.sweep.splits import pipeline_splits, slots_split, split_flag_options
from core.studies.sweep.space import RECOMPUTE_ALL_LAYERS

from .formatting import ERROR_STYLE
from .int_spin import INT64_MAX, IntSpinBox

__all__ = ["SweepSettingsPanel"]

#: The SweepSpace fields the form edits; the others (data_parallel, virtual_pipeline_stages,
#: moe_token_dispatcher_type, cp_comm_type, cross_entropy_fusion, the overlaps, holding the
#: session's values) keep what the session file says.
_FORM_FIELDS = frozenset({
    "num_gpus", "max_gpus", "max_data_parallel", "tensor_parallel",
    "tensor_parallel_across_nodes", "pipeline_parallel", "micro_batch_sizes", "expert_parallel",
    "context_parallel", "schedules", "recompute", "recompute_num_layers", "sequence_parallel",
    "zero_stages", "overlap_moe_expert_parallel_comm"})

#: Largest number whose divisors are listed as a hint (trial division up to its square root,
#: 65,536 steps at most, so the form never waits on a huge field value).
_DIVISORS_LIMIT = 2**32


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


def _parse_recompute_layers(text: str) -> tuple[int | str, ...] | None:
    """``'all, 2'`` -> ``("all", 2)`` (:attr:`SweepSpace.recompute_num_layers`); None when
    empty (the default); raises ``ValueError`` naming the bad item (the space's own
    :meth:`~SweepSpace.errors` bound the counts)."""
    out: list[int | str] = []
    for item in re.split(r"[,;\s]+", text.strip()):
        if not item:
            continue
        if item.lower() == RECOMPUTE_ALL_LAYERS:
            out.append(RECOMPUTE_ALL_LAYERS)
        elif item.isdigit() and item.isascii():
            out.append(int(item))
        else:
            raise ValueError(f"{item!r} is neither {RECOMPUTE_ALL_LAYERS} nor a whole number")
    return tuple(dict.fromkeys(out)) or None


def _join(values: Any) -> str:
    if values is None:
        return ""
    if isinstance(values, (int, np.integer)):
        return str(int(values))
    return ", ".join(str(int(v)) for v in values)


def _divisors(n: Any) -> list[int]:
    """Divisors of ``n`` in increasing order; empty when ``n`` is not a positive integer or is
    above :data:`_DIVISORS_LIMIT` (the hint is then given in words). O(sqrt(n)) steps."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= _DIVISORS_LIMIT:
        return []
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


def _uneven_sizes(session: Session) -> tuple[list[int], list[int]]:
    """The pipeline sizes the default sweep tries with uneven first / last stages (the powers of
    two from 4 that split the layers unevenly, :func:`core.studies.sweep.splits.pipeline_splits`)
    and, where the session sets an embedding / loss slot flag, those the layers alone divide
    (their plans turn the flags off: :func:`core.studies.sweep.space.tp_pp_candidates`); none
    where the session's fields do not say (an edit in progress)."""
    L = session.model.num_layers
    if isinstance(L, bool) or not isinstance(L, int) or not 0 < L <= _DIVISORS_LIMIT:
        return [], []
    powers = [1 << k for k in range(2, L.bit_length())]
    try:
        uneven = sorted(pipeline_splits(session, powers))
        flagged = pipeline_split_slots(L, session.plan) != L
    except (TypeError, ValueError, AttributeError):
        return [], []
    return uneven, [p for p in powers if flagged and L % p == 0]


def _check_box_row(form: QtWidgets.QFormLayout, label: str, names, prefix: str,
                   per_line: int | None = None) -> dict[str, QtWidgets.QCheckBox]:
    """A form row of one check box per name (object names ``prefix.name``), at most
    ``per_line`` to a line (all on one without); returns them by name.

    The lines keep the panel narrow: the five schedules on one line made the Explore tab's
    left column about 480 px wide, and at 1,366 x 768 the plan table beside it cut its
    memory column off (new-user trial)."""
    boxes: dict[str, QtWidgets.QCheckBox] = {}
    row = QtWidgets.QGridLayout()
    row.setContentsMargins(0, 0, 0, 0)
    row.setVerticalSpacing(2)
    for k, name in enumerate(names):
        box = boxes[name] = QtWidgets.QCheckBox(name)
        box.setObjectName(f"{prefix}.{name}")
        row.addWidget(box, k // (per_line or len(names)), k % (per_line or len(names)))
    row.setColumnStretch(per_line or len(names), 1)
    form.addRow(label, row)
    return boxes


def _defaulted_box_row(form: QtWidgets.QFormLayout, label: str, names, prefix: str,
                       default_tip: str) -> tuple[QtWidgets.QCheckBox, dict[str, QtWidgets.QCheckBox]]:
    """A form row of a "default" check box (object name ``prefix.default``, tooltip
    ``default_tip``: what the default sweeps) and one check box per name (``prefix.name``),
    which are used only when "default" is unticked; returns ("default", the boxes by name)."""
    boxes = _check_box_row(form, label, ("default", *names), prefix)
    default = boxes.pop("default")
    default.setToolTip(default_tip)
    return default, boxes


class SweepSettingsPanel(QtWidgets.QWidget):
    """Form for a :class:`core.studies.sweep.SweepSpace` and a deadline.

    Empty candidate fields mean the core's defaults (shown as placeholders for
    the current session). The settings travel in ``Session.sweep`` as
    ``{"space": SweepSpace.to_dict(), "deadline_days": float | None, "workers": int | None,
    "dask": str | None, "no_tight": bool}`` (``workers`` and ``dask``, where the sweep runs, are
    optional: files without them run on every core of this computer; ``no_tight``, written
    only when true, is ``vtrain sweep --no-tight``: files without it keep the tight plans);
    space fields this form does
    not show (``data_parallel``) are kept as loaded, and so is ``"result"`` (the last sweep,
    which :class:`vtrain_gui.explore.ExploreTab` reads and writes). Sequence parallelism,
    ZeRO stages and the expert all-to-all overlap have a "default" box: ticked, the space
    leaves them None (the command line's default); empty b and cp fields are None too.

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

        self._add_size_rows(form)
        self._add_choice_rows(form)
        self._add_run_rows(form)
        self._connect_edits()
        self.reset(Session())

    # ------------------------------------------------------------------ building the form
    def _add_size_rows(self, form: QtWidgets.QFormLayout) -> None:
        """The GPU budget and the sizes to try: d limit, t, p, ep (MoE), b, cp."""
        self.budget_mode = QtWidgets.QComboBox()
        self.budget_mode.setObjectName("sweep.budget_mode")
        self.budget_mode.addItems([self.AT_MOST, self.EXACTLY])
        self.budget_mode.setToolTip("At most N GPUs (every world size t·p·cp·d ≤ N), or exactly the "
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

        self.max_data_parallel = IntSpinBox()
        self.max_data_parallel.setObjectName("sweep.max_data_parallel")
        self.max_data_parallel.setRange(0, INT64_MAX)
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

        # mixture-of-experts models only (hidden for dense ones, whose sweep has ep = 1)
        self.expert_parallel = QtWidgets.QLineEdit()
        self.expert_parallel.setObjectName("sweep.expert_parallel")
        self.expert_parallel.setToolTip("Expert-parallel sizes ep to try (inside the t·cp·d "
                                         "ranks); empty: the divisors of the number of experts")
        form.addRow("Expert parallel ep", self.expert_parallel)
        self._ep_label = form.labelForField(self.expert_parallel)

        self.micro_batch_sizes = QtWidgets.QLineEdit()
        self.micro_batch_sizes.setObjectName("sweep.micro_batch_sizes")
        self.micro_batch_sizes.setToolTip("Micro-batch sizes b to try (sequences); empty: every "
                                          "divisor of the global batch B while the "
                                          "smallest-memory plan of that b fits in memory")
        self.micro_batch_sizes.setPlaceholderText("divisors of B up to what memory allows")
        form.addRow("Micro-batch sizes b", self.micro_batch_sizes)

        self.context_parallel = QtWidgets.QLineEdit()
        self.context_parallel.setObjectName("sweep.context_parallel")
        self.context_parallel.setToolTip("Context-parallel sizes cp to try (attention over cp "
                                         "ranks; world size t·p·cp·d); empty: the powers of "
                                         "two that split the sequence in 2·cp chunks, up to the "
                                         "budget. With cp > 1 the ring (p2p) and all-to-all "
                                         "(a2a, where the heads divide by cp) exchanges are "
                                         "both tried (vtrain sweep --cp-comm-types)")
        self.context_parallel.setPlaceholderText("powers of two up to the budget")
        form.addRow("Context parallel cp", self.context_parallel)

    def _add_choice_rows(self, form: QtWidgets.QFormLayout) -> None:
        """A check box per value to try: schedules, recomputation, sequence parallel, ZeRO
        stages, expert all-to-all overlap (MoE)."""
        # a few to a line: the schedules and the modes on one made the panel ~480 px wide
        self.schedule_boxes = _check_box_row(form, "Schedules", SCHEDULES, "sweep.schedules", 3)
        self.recompute_boxes = _check_box_row(form, "Recomputation", RECOMPUTE_CHOICES,
                                              "sweep.recompute", 2)
        self.recompute_num_layers = QtWidgets.QLineEdit()
        self.recompute_num_layers.setObjectName("sweep.recompute_num_layers")
        self.recompute_num_layers.setToolTip(
            "Under full recomputation, the layers recomputed per model chunk to try "
            "(Megatron-LM's --recompute-method block --recompute-num-layers N): all (every "
            "layer) and / or counts; a chunk of N layers or fewer recomputes them all. Empty: "
            "every layer, and the fewest per chunk that fit. “all” alone: what DeepSpeed, "
            "Hugging Face Trainer and torchtitan run (vtrain sweep --recompute-num-layers)")
        self.recompute_num_layers.setPlaceholderText("all, and the fewest that fit")
        form.addRow("Recomputed layers", self.recompute_num_layers)
        # "default": the command line's default (vtrain sweep without the option)
        self.sp_default, self.sp_boxes = _defaulted_box_row(
            form, "Sequence parallel", ("off", "on"), "sweep.sequence_parallel",
            "Default: on wherever t > 1, off at t = 1, as Megatron-Core users run it (untick to "
            "choose off and/or on)")
        self.zero_default, self.zero_boxes = _defaulted_box_row(
            form, "ZeRO stages", [str(z) for z in ZERO_STAGES], "sweep.zero_stages",
            "Default: 0, 1, 2 and 3 where valid (untick to choose)")
        # mixture-of-experts models only, as the expert-parallel sizes
        self.ep_overlap_default, self.ep_overlap_boxes = _defaulted_box_row(
            form, f"Overlap {KIND_NAMES['ep_all_to_all']}", ("off", "on"), "sweep.overlap_moe_expert_parallel_comm",
            "Default: off and on, on where a plan allows it; with expert parallelism the "
            "alltoall and flex dispatchers too (untick to choose)")
        self._defaults = ((self.sp_default, self.sp_boxes), (self.zero_default, self.zero_boxes),
                          (self.ep_overlap_default, self.ep_overlap_boxes))
        for box in self.ep_overlap_boxes.values():
            box.setToolTip(f"Sweep the {KIND_NAMES['ep_all_to_all']} overlap (Megatron-Core's "
                           "combined 1F1B) "
                           "off and/or on; on only where a plan allows it (ep > 1, the "
                           "interleaved schedule with p > 1, no full recomputation)")
        label_item = form.itemAt(form.rowCount() - 1, QtWidgets.QFormLayout.ItemRole.LabelRole)
        self._ep_overlap_label = label_item.widget() if label_item is not None else None
        for box in self.sp_boxes.values():
            box.setToolTip("Sweep sequence parallelism off and/or on (Korthikanti et al. 2022)")
        for box in self.zero_boxes.values():
            box.setToolTip("ZeRO stages to sweep: 0 replicated, 1 distributed optimizer, 2 sharded "
                           "gradients, 3 sharded parameters (FSDP)")
        self._plan = ParallelPlan()  # the session's plan: its values are the defaults of the rows above

    def _add_run_rows(self, form: QtWidgets.QFormLayout) -> None:
        """The deadline, where the sweep runs (workers, Dask) and the error line."""
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

        # vtrain sweep --no-tight: the plans inside the memory margin left out, unsimulated
        self.no_tight = QtWidgets.QCheckBox("fits outside the margin only (--no-tight)")
        self.no_tight.setObjectName("sweep.no_tight")
        self.no_tight.setToolTip(NO_TIGHT_HELP[0].upper() + NO_TIGHT_HELP[1:]
                                 + ". Takes effect at the next Run.")
        form.addRow(self.no_tight)  # both columns, as on the Studies tab: wider than a field

        cores = os.cpu_count() or 1
        self.workers = IntSpinBox()
        self.workers.setObjectName("sweep.workers")
        self.workers.setRange(0, 4096)
        self.workers.setSpecialValueText(f"all cores ({cores})")
        self.workers.setToolTip("Processes the sweep runs on (1: the GUI's own process; with a "
                                "Dask address “local”, the size of the local Dask cluster). "
                                "The result is the same whatever the count.")
        form.addRow("Workers", self.workers)
        self.dask = QtWidgets.QLineEdit()
        self.dask.setObjectName("sweep.dask")
        self.dask.setPlaceholderText("none: this computer")
        self.dask.setToolTip("Dask scheduler to send the plans to, e.g. tcp://host:8786, or "
                             "“local” for a local Dask cluster (needs dask[distributed]; see "
                             "docs/sweep_parallel.md)")
        form.addRow("Dask scheduler", self.dask)

        self.error_label = QtWidgets.QLabel()
        self.error_label.setObjectName("sweep.errors")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(ERROR_STYLE)
        self.error_label.setVisible(False)
        form.addRow(self.error_label)

    def _connect_edits(self) -> None:
        for w in (self.gpus, self.tensor_parallel, self.pipeline_parallel, self.micro_batch_sizes,
                  self.context_parallel, self.dask, self.expert_parallel,
                  self.recompute_num_layers):
            w.textEdited.connect(self._on_text_edit)
        self.budget_mode.currentIndexChanged.connect(self._on_budget_mode_change)
        self.max_data_parallel.valueChanged.connect(self._on_value_change)
        self.deadline.valueChanged.connect(self._on_value_change)
        self.workers.valueChanged.connect(self._on_value_change)
        for box in (self.across_nodes, self.no_tight, *self.schedule_boxes.values(), *self.recompute_boxes.values(),
                    *self.sp_boxes.values(), *self.zero_boxes.values(),
                    *self.ep_overlap_boxes.values(), self.sp_default, self.zero_default,
                    self.ep_overlap_default):
            box.toggled.connect(self._on_box_toggle)

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
            except (ConfigError, TypeError, ValueError, OverflowError) as exc:
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
        slots = pipeline_split_slots(L, session.plan)  # + the embedding / loss layer slots
        name = f"L={L}" if slots == L else f"L+{slots - L}={slots}"
        # and the sizes the sweep reaches by setting the layer-slot flags where the layers
        # need them (core.studies.sweep.splits.split_flags_for): L+1 / L+2 slots
        more = [e for e, _ in split_flag_options(session.plan) if e > 0]
        if more and isinstance(slots, int):
            name += "".join(f", +{e}" for e in more)
        ds = sorted({p for e in (0, *more) if isinstance(slots, int)
                     for p in _divisors(slots + e) if slots_split(slots + e, p, e)})
        # and the powers of two the layers split over unevenly, with Megatron-style first /
        # last stages (core.studies.sweep.space.tp_pp_candidates: DeepSeek-V3's 61 on 4, 8, 16)
        # and, with the session's slot flags, the powers of two only the layers divide (the
        # flags off there)
        uneven, off = _uneven_sizes(session) if ds else ([], [])
        uneven = [p for p in uneven if p not in ds]
        off = [p for p in off if p not in ds]
        extra = (" + uneven" if uneven else "") + (" + flags off" if off else "")
        # the field is narrow: the placeholder names the rule, the tooltip lists the sizes
        self.pipeline_parallel.setPlaceholderText(
            f"divisors of {name}{extra} ({len(ds) + len(uneven) + len(off)} sizes)"
            if ds else "divisors of the layer count")
        self.pipeline_parallel.setToolTip(
            "Pipeline-parallel sizes p to try, comma-separated; empty: "
            + (f"the divisors of {name}: {_join(ds)}" if ds else "the divisors of the layer count")
            + (f"; and {_join(off)} with the embedding / loss slot flags off (L={L} splits "
               "evenly there)" if off else "")
            + (f"; and {_join(uneven)} with uneven first / last stages (ceil(L/p) layers on "
               "each middle stage, the rest on the first and last: Megatron-Core's "
               "--decoder-first/last-pipeline-num-layers; the slot flags off)" if uneven
               else ""))
        E = session.model.num_experts
        es = _divisors(E) if session.model.is_moe and isinstance(E, int) and E > 0 else []
        self.expert_parallel.setPlaceholderText(f"divisors of E={E}: {_join(es)}" if es else "")
        self._moe = bool(es)
        for w in (self.expert_parallel, self._ep_label, self._ep_overlap_label,
                  self.ep_overlap_default, *self.ep_overlap_boxes.values()):
            if w is not None:
                w.setVisible(bool(es))
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
        kw["micro_batch_sizes"] = tuple(b) if b else None  # None: up to what memory allows
        ep = ints(self.expert_parallel, "expert_parallel")
        kw["expert_parallel"] = tuple(ep) if ep else None
        c = ints(self.context_parallel, "context_parallel")
        kw["context_parallel"] = tuple(c) if c else None
        kw["schedules"] = tuple(n for n, box in self.schedule_boxes.items() if box.isChecked())
        kw["recompute"] = tuple(n for n, box in self.recompute_boxes.items() if box.isChecked())
        try:
            kw["recompute_num_layers"] = _parse_recompute_layers(self.recompute_num_layers.text())
        except ValueError as exc:
            errors.append(FieldError("sweep.recompute_num_layers", str(exc)))
            kw["recompute_num_layers"] = None
        kw.update(self._defaulted_values())
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

    def execution(self) -> dict[str, Any]:
        """Where and how the sweep runs: ``{"workers": int >= 1, "dask": str | None}`` for
        :func:`core.studies.sweep.run_sweep` (workers 0 in the form: every core), and
        ``"no_tight": True`` when "fits outside the margin only" is ticked (``--no-tight``)."""
        dask = self.dask.text().strip() or None
        out: dict[str, Any] = {"workers": self.workers.value() or (os.cpu_count() or 1),
                               "dask": dask}
        if self.no_tight.isChecked():
            out["no_tight"] = True
        return out

    def _execution_settings(self) -> dict[str, Any]:
        # only what differs from the default (every core here): files stay as they were
        out: dict[str, Any] = {}
        if self.workers.value():
            out["workers"] = self.workers.value()
        if self.dask.text().strip():
            out["dask"] = self.dask.text().strip()
        if self.no_tight.isChecked():  # absent: tight plans kept (files saved before it)
            out["no_tight"] = True
        return out

    def settings(self) -> dict[str, Any] | None:
        """``{"space": ..., "deadline_days": ...}`` for ``Session.sweep``.

        None while the form shows untouched defaults (nothing to save); the
        loaded dict itself while unedited (exact round trip); the last valid
        settings while an edit is invalid.
        """
        if not self._touched:
            return None if self._loaded is None else copy.deepcopy(self._loaded)
        try:
            return {"space": self.space().to_dict(), "deadline_days": self.deadline_days(),
                    **self._execution_settings()}
        except ConfigError:
            return copy.deepcopy(self._last_valid)

    def mark_used(self) -> bool:
        """The settings were used (a sweep ran): save them from now on. Returns whether that is new."""
        new = not self._touched and self._loaded is None
        self._touched = True
        return new

    # ------------------------------------------------------------------ internals
    def _defaulted_values(self) -> dict[str, Any]:
        """Sequence parallelism, ZeRO stages and the expert all-to-all overlap as the space's
        values: None where "default" is ticked (the command line's default), else the values
        ticked. A dense model's sweep has no expert overlap (its row is hidden): None."""
        moe = getattr(self, "_moe", False)
        return {
            "sequence_parallel": None if self.sp_default.isChecked() else tuple(
                n == "on" for n, box in self.sp_boxes.items() if box.isChecked()),
            "zero_stages": None if self.zero_default.isChecked() else tuple(
                int(n) for n, box in self.zero_boxes.items() if box.isChecked()),
            "overlap_moe_expert_parallel_comm": None if (
                not moe or self.ep_overlap_default.isChecked()) else tuple(
                n == "on" for n, box in self.ep_overlap_boxes.items() if box.isChecked())}

    def _enable_defaulted(self) -> None:
        """The value boxes of a row are used only when its "default" is unticked."""
        for default, boxes in self._defaults:
            for box in boxes.values():
                box.setEnabled(not default.isChecked())

    def _show(self, settings: dict[str, Any]) -> None:
        if not isinstance(settings, dict):
            raise ConfigError([FieldError("sweep", "must be a JSON object")])
        # "result": the sweep saved with the session (the Explore tab reads it)
        unknown = sorted(set(settings) - {"space", "deadline_days", "workers", "dask", "no_tight",
                                          "result"})
        if unknown:
            raise ConfigError([FieldError(f"sweep.{k}", "unknown field") for k in unknown])
        space = SweepSpace.from_dict(settings.get("space") or {})
        deadline = settings.get("deadline_days")
        if deadline is not None and (isinstance(deadline, bool)
                                     or not isinstance(deadline, (int, float))):
            raise ConfigError([FieldError("sweep.deadline_days", "must be a number or null")])
        if deadline is not None and not 0 <= deadline <= self.deadline.maximum():
            raise ConfigError([FieldError("sweep.deadline_days",
                                          f"must be from 0 to {self.deadline.maximum():,.0f} days")])
        workers = settings.get("workers")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or not 1 <= workers <= self.workers.maximum()):
            raise ConfigError([FieldError("sweep.workers", f"must be null (every core) or a whole "
                                          f"number from 1 to {self.workers.maximum()}")])
        dask = settings.get("dask")
        if dask is not None and not isinstance(dask, str):
            raise ConfigError([FieldError("sweep.dask", "must be null or a scheduler address")])
        no_tight = settings.get("no_tight", False)
        if not isinstance(no_tight, bool):
            raise ConfigError([FieldError("sweep.no_tight", "must be true or false")])
        self._updating = True
        try:
            # the space's fields the form has no control for keep the file's values
            self._extra = {f.name: getattr(space, f.name) for f in dataclasses.fields(space)
                           if f.name not in _FORM_FIELDS
                           and getattr(space, f.name) != f.default}
            exact = space.num_gpus is not None
            self.budget_mode.setCurrentText(self.EXACTLY if exact else self.AT_MOST)
            self.gpus.setText(_join(space.num_gpus if exact else space.max_gpus))
            max_d = int(space.max_data_parallel or 0)
            if not 0 <= max_d <= self.max_data_parallel.maximum():
                raise ValueError(f"max_data_parallel={max_d:,} is outside 0 to "
                                 f"{self.max_data_parallel.maximum():,}")
            self.max_data_parallel.setValue(max_d)
            self.tensor_parallel.setText(_join(space.tensor_parallel))
            self.across_nodes.setChecked(bool(space.tensor_parallel_across_nodes))
            self.pipeline_parallel.setText(_join(space.pipeline_parallel))
            self.expert_parallel.setText(_join(space.expert_parallel))
            self.micro_batch_sizes.setText(_join(space.micro_batch_sizes))
            self.context_parallel.setText(_join(space.context_parallel))
            rnl = space.recompute_num_layers
            self.recompute_num_layers.setText("" if rnl is None else ", ".join(
                str(v) for v in ([rnl] if isinstance(rnl, (str, int)) else rnl)))
            scheds = [space.schedules] if isinstance(space.schedules, str) else list(space.schedules)
            for name, box in self.schedule_boxes.items():
                box.setChecked(name in scheds)
            rcs = [space.recompute] if isinstance(space.recompute, str) else list(space.recompute)
            for name, box in self.recompute_boxes.items():
                box.setChecked(name in rcs)
            # unset: "default" ticked (the command line's default), the boxes showing it
            self.sp_default.setChecked(space.sequence_parallel is None)
            sps = (list(space.sequence_parallel) if space.sequence_parallel is not None
                   else [True])
            for name, box in self.sp_boxes.items():
                box.setChecked((name == "on") in sps)
            self.zero_default.setChecked(space.zero_stages is None)
            zs = (list(space.zero_stages) if space.zero_stages is not None
                  else list(ZERO_STAGES))
            for name, box in self.zero_boxes.items():
                box.setChecked(int(name) in zs)
            self.ep_overlap_default.setChecked(space.overlap_moe_expert_parallel_comm is None)
            ovs = (list(space.overlap_moe_expert_parallel_comm)
                   if space.overlap_moe_expert_parallel_comm is not None
                   else [False, True])
            for name, box in self.ep_overlap_boxes.items():
                box.setChecked((name == "on") in ovs)
            self._enable_defaulted()
            self.deadline.setValue(float(deadline or 0.0))
            self.workers.setValue(int(workers or 0))
            self.dask.setText(dask or "")
            self.no_tight.setChecked(no_tight)
        finally:
            self._updating = False

    def _show_defaults(self, session: Session) -> None:
        # the command line's default space: the plan's GPU count as the budget (an invalid
        # plan gets a data-parallel bound instead), every other field its default
        self._show({"space": SweepSpace.default_for(session).to_dict(), "deadline_days": None})

    def check(self) -> list[FieldError]:
        """Show the rules the settings break under the form; return them."""
        try:
            self._last_valid = {"space": self.space().to_dict(),
                                "deadline_days": self.deadline_days(), **self._execution_settings()}
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
        self._enable_defaulted()
        self._edited()
