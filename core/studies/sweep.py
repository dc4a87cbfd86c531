"""Design-space explorer: every valid parallel plan, simulated in batch, with cost and Pareto front.

This module repeats the first case study of vTrain (Bang et al., MICRO 2024):
for one model, one global batch size and a GPU budget, enumerate every valid
plan (t, p, d, b, schedule, recomputation), predict each plan's iteration
time, and turn it into days, GPU-hours and dollars for a token budget. The
time-versus-cost Pareto front then shows which plans are worth considering.

Validity has one source of truth, :func:`core.plan.config.validate`. Plans that do
not fit in GPU memory are kept and marked with the reason.

Speed
-----
The per-plan iteration time equals :func:`core.sim.simulate.simulate`'s (relative
difference below 1e-9; tests check it), but it is computed without building
per-op graphs:

* :func:`core.sim.stages.stage_times` gives each stage's forward and backward time
  of one micro-batch (the per-op chain merged, exact because the compute
  stream is one chain with one entry and one exit per micro-batch), transfer,
  data-parallel all-reduce and optimizer times. Op lookups and communication
  times are memoized across plans.
* Plans with the same pipeline structure (p, m, schedule) are solved together
  by :func:`pipeline_iteration_times`: stage end times are a max-plus
  recurrence, solved per stage with a running maximum over that stage's
  program (vectorized over the stage's 2m operations and over plans) and
  Gauss-Seidel sweeps across stages until nothing changes.

Front-end API (CLI ``vtrain sweep`` and the GUI's Explore tab)
---------------------------------------------------------------
Everything below is Qt-free and safe to call from a worker thread; it touches
no global state except read-only caches::

    import threading
    from core.studies.sweep import SweepSpace, run_sweep, SweepCancelled

    space = SweepSpace(max_gpus=3360)              # or num_gpus=3360 / (1024, 2048)
    cancel = threading.Event()                     # GUI: cancel.set() from the Cancel button

    def on_progress(done: int, total: int) -> None:  # called on the worker thread
        ...                                          # emit a queued signal; never touch widgets

    try:
        result = run_sweep(session, space, deadline_days=90.0,
                           progress=on_progress, cancel=cancel)
    except SweepCancelled:
        ...                                        # the sweep stopped; no result
    except ConfigError as exc:                     # invalid model/cost/space: exc.errors lists
        ...                                        # FieldError(field, message), fields "sweep.*"

* Scatter: ``result.training_days`` (x), ``result.cost_usd`` (y), one point per
  plan; grey where ``~result.fits_in_memory``; the front is
  ``result.pareto_indices()`` (feasible plans only, sorted by days).
* Table: ``result.rows()`` (list of dicts, keys :data:`COLUMNS`) or the numpy
  columns (attributes of :class:`SweepResult`, shape ``(num_plans,)`` each).
* Filters: ``result.select(num_gpus=..., fits_only=True, deadline_days=...)``
  returns a boolean mask; ``result.cheapest_within(deadline_days)`` an index.
* Load a point into the editor: ``result.session_for(i)`` (a new
  :class:`~core.plan.config.Session` with that plan and the sweep's model, cluster
  and cost); simulate it as usual to show its timeline.
* Export: ``result.write_csv(path)``; ``result.to_dict()`` is the CLI's JSON.
* Save the settings: ``space.to_dict()`` / ``SweepSpace.from_dict(d)`` (plain JSON).
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import io
import math
import operator
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from core.model import model_math
from core import schedules as pipeline_schedules
from core.plan.config import (BOUNDS, PLAN_FIELDS, RECOMPUTE_CHOICES, RECOMPUTE_MODES, SCHEDULES,
                     SWEEP_SCHEDULES, ZERO_STAGES, ConfigError, FieldError, ParallelPlan, Session, check_value,
                     expand_pipeline_layout, pipeline_layout_text, pipeline_split_slots,
                     ep_overlap_errors, plan_key, probe_plan, validate,
                     capped_recompute_layers)
from core.sim.costing import costing, mfu_peak_flops
from core.sim.fastpath import pipeline_iteration_times
from core.sim.op_times import num_chunks
from core.sim.stages import stage_times
from core.sim.graph import build_graph
from core.sim.simulate import memory_verdict_arrays, session_profile, small_nvlink_domain_note
from core.sim.solver import solve
from core.store.interval import DEFAULT_COVERAGE, interval_factors, interval_for, layer_parameters

__all__ = ["SweepSpace", "SweepResult", "SweepCancelled", "COLUMNS", "PLAN_COLUMNS", "enumerate_plans",
           "run_sweep", "solve_batch", "pipeline_iteration_times", "pareto_front", "DEFAULT_MICRO_BATCH_SIZES"]

#: Micro-batch sizes tried when the space does not name them.
DEFAULT_MICRO_BATCH_SIZES = (1, 2, 4, 8)
#: The plan's columns: every field of :class:`~core.plan.config.ParallelPlan`, in its order.
PLAN_COLUMNS = PLAN_FIELDS
#: Columns of :meth:`SweepResult.rows` and :meth:`SweepResult.write_csv`, in order.
COLUMNS = PLAN_COLUMNS + (
    "num_microbatches", "num_gpus", "iteration_time_s", "interval_low_s", "interval_high_s",
    "in_calibration_range", "tokens_per_s", "mfu", "hfu", "training_days", "gpu_hours",
    "cost_usd", "max_memory_per_gpu_bytes", "fits_in_memory", "on_pareto_front", "reason")

ProgressFn = Callable[[int, int], None]
#: Key in a lookup memo of the stage times of the last (p, m) solved (see :func:`solve_batch`).
_SHARED_STAGE_TIMES = ("sweep", "stage times of one (p, m)")
_SCHEDULE_FIELD = PLAN_FIELDS.index("schedule")
#: Plans are solved in batches of at most this many (stage, op, plan) elements.
_MAX_BATCH_ELEMENTS = 2_000_000
#: Sweeps whose batch solver has at least this many (stage, item, plan) elements in all use
#: its compiled pass (:mod:`core.sim.fastpath_kernel`, when Numba is installed): about 45 ns per
#: element saved against Numba's import and cache load, about 0.3 s per process.
COMPILED_MIN_SWEEP_ELEMENTS = 20_000_000


class SweepCancelled(Exception):
    """The sweep was cancelled through its ``cancel`` argument; no result is returned."""


# --------------------------------------------------------------------------- the space

@dataclass
class SweepSpace:
    """Which plans a sweep tries. Construction validates nothing; see :meth:`errors`.

    The global batch size B, the precision and the model come from the
    session; the GPU budget and candidate sizes from here. Give exactly one
    budget: ``num_gpus`` (exact counts), ``max_gpus``, or only a bound on the
    data-parallel size (``data_parallel`` / ``max_data_parallel``, no GPU bound).

    Attributes
    ----------
    num_gpus : int or sequence of int, optional
        Exact world sizes ``t*p*d`` allowed.
    max_gpus : int, optional
        Largest world size allowed.
    tensor_parallel : sequence of int, optional
        Candidate t. Default: divisors of ``cluster.gpus_per_node`` (within a node),
        plus multiples of it when ``tensor_parallel_across_nodes``.
    tensor_parallel_across_nodes : bool
        Also try t = k * gpus_per_node (k >= 2), which ``validate`` allows and the
        communication model prices as a hierarchical all-reduce. Default False.
    pipeline_parallel : sequence of int, optional
        Candidate p. Default: divisors of the layer count L (of the layer slots ``L + 1`` or
        ``L + 2`` when the session's plan counts the embedding / loss in the pipeline split,
        Megatron-Core's ``account_for_embedding/loss_in_pipeline_split``; the sweep keeps the
        session's setting of those two flags and does not try them both ways). With a custom
        pipeline layout (``plan.pipeline_model_parallel_layout``, n virtual stages) every plan
        keeps the layout, so only p*v = n is tried: p a divisor of n (of those given), v = n/p
        under the interleaved schedule (when among ``virtual_pipeline_stages``, if given) and
        p = n under the others; the sweep never drops the layout nor makes one up.
    data_parallel : sequence of int, optional
        Candidate d. Default: every d the budget allows.
    max_data_parallel : int, optional
        Largest d.
    micro_batch_sizes : sequence of int
        Candidate b (sequences). Default :data:`DEFAULT_MICRO_BATCH_SIZES`.
    schedules : sequence of str
        Pipeline schedules from :data:`core.plan.config.SCHEDULES`. Default:
        :data:`core.plan.config.SWEEP_SCHEDULES`, all but ZB-V (tried only when asked).
    virtual_pipeline_stages : sequence of int, optional
        Candidate v (>= 2) for the interleaved schedule. Default: every v from 2
        to 8 for which ``L`` divides by ``p*v``.
    recompute : sequence of str
        Recomputation modes from :data:`core.plan.config.RECOMPUTE_CHOICES`. Default: Megatron's
        three (:data:`core.plan.config.RECOMPUTE_MODES`); torchtitan's per-op ``selective_op`` when
        asked.
    sequence_parallel : sequence of bool, optional
        Sequence parallelism off / on. Default (None): on wherever t > 1 (and the sequence
        divides by t), off at t = 1 -- what Megatron-Core users run (``--sequence-parallel``
        with tensor parallelism: the same communication volume as the all-reduces it
        replaces, less activation memory and LayerNorm work, Korthikanti et al. 2022), so
        the default does not also try it off (that would double the space for plans that
        are not faster); ``(False, True)`` tries both.
    zero_stages : sequence of int, optional
        ZeRO stages from :data:`core.plan.config.ZERO_STAGES`. Default (None): all four, 0, 1
        (Megatron's distributed optimizer), 2 and 3 (Megatron-FSDP), each where valid.
    context_parallel : sequence of int, optional
        Candidate context-parallel sizes cp (world size ``t*p*cp*d``). Default (None): the
        powers of two that split the sequence into ``2*cp`` chunks (Megatron-Core's rule)
        up to the budget's GPUs, each where the other rules allow it.
    tp_comm_overlap : sequence of bool, optional
        The tensor-parallel communication overlap (``--tp-comm-overlap``) off / on, on only
        where a plan allows it (sequence parallelism, 1 < t <= a node). Default (None): on
        where allowed (held, not swept).
    dp_overlap : sequence of bool, optional
        The data-parallel overlaps (``--overlap-grad-reduce``, and ``--overlap-param-gather``
        where the optimizer is sharded, ZeRO >= 1) off / on. Default (None): on (held, not
        swept).
    hold_session_values : bool
        Those of the five above left None are held at the session plan's values instead of
        the defaults (sequence parallelism, ZeRO stage, context-parallel size, TP overlap,
        data-parallel overlaps): a sweep of the session's own choices only. Default False.
    expert_parallel : sequence of int, optional
        Candidate expert-parallel sizes ep (inside the ``t*cp*d`` ranks, no extra GPUs). Default:
        for a mixture-of-experts model the divisors of ``num_experts``; for a dense model 1 (a
        dense model's sweep does not grow). The expert tensor-parallel size is the session's.
    overlap_moe_expert_parallel_comm : sequence of bool, optional
        The expert all-to-all overlap off / on (Megatron-Core's combined 1F1B), on only for the
        plans that allow it (:func:`core.plan.config.ep_overlap_errors`; the others are tried
        without). Default: the session plan's setting where allowed. ``delay_wgrad_compute``
        is the session's on the plans that overlap.

    Every other plan field (overlap, gradient dtype, uneven first and last
    stages, recomputed layers under full recomputation) is the session plan's.
    """

    num_gpus: int | Sequence[int] | None = None
    max_gpus: int | None = None
    tensor_parallel: Sequence[int] | None = None
    tensor_parallel_across_nodes: bool = False
    pipeline_parallel: Sequence[int] | None = None
    data_parallel: Sequence[int] | None = None
    max_data_parallel: int | None = None
    micro_batch_sizes: Sequence[int] = DEFAULT_MICRO_BATCH_SIZES
    schedules: Sequence[str] = SWEEP_SCHEDULES
    recompute: Sequence[str] = RECOMPUTE_MODES
    virtual_pipeline_stages: Sequence[int] | None = None
    sequence_parallel: Sequence[bool] | None = None
    zero_stages: Sequence[int] | None = None
    context_parallel: Sequence[int] | None = None
    expert_parallel: Sequence[int] | None = None
    overlap_moe_expert_parallel_comm: Sequence[bool] | None = None
    tp_comm_overlap: Sequence[bool] | None = None
    dp_overlap: Sequence[bool] | None = None
    hold_session_values: bool = False

    def swept_fields(self) -> tuple[str, ...]:
        """Plan fields this space chooses; every other plan field is the session plan's."""
        out = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size",
               "schedule", "virtual_pipeline_stages", "recompute", "recompute_num_layers",
               "recompute_modules", "first_stage_layers", "last_stage_layers", "context_parallel",
               "expert_parallel")
        hold = self.hold_session_values
        if not hold or self.sequence_parallel is not None or self.tp_comm_overlap is not None:
            out += ("sequence_parallel", "tp_comm_overlap")
        if not hold or self.zero_stages is not None:
            out += ("zero_stage",)
        if not hold or self.dp_overlap is not None:
            out += ("overlap_grad_reduce", "overlap_param_gather")
        if self.overlap_moe_expert_parallel_comm is not None:
            out += ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
        return out

    def excludes(self, plan: ParallelPlan) -> str | None:
        """Why ``plan`` is outside this space, in words (the first of its GPU count and its
        swept sizes that the space does not allow), or None when none of them rules it out
        (it may still break a configuration rule or not be enumerated for another reason)."""
        n, counts = plan.num_gpus, self.gpu_counts()
        if counts is not None and n not in counts:
            return f"it uses {n:,} GPUs and the sweep {', '.join(f'{c:,}' for c in counts)}"
        if self.max_gpus is not None and n > self.max_gpus:
            return f"it uses {n:,} GPUs, more than the sweep's {self.max_gpus:,}"
        if self.max_data_parallel is not None and plan.data_parallel > self.max_data_parallel:
            return (f"its data-parallel size {plan.data_parallel} is above the sweep's "
                    f"{self.max_data_parallel}")
        for name, values, value in (
                ("tensor-parallel size", self.tensor_parallel, plan.tensor_parallel),
                ("pipeline-parallel size", self.pipeline_parallel, plan.pipeline_parallel),
                ("data-parallel size", self.data_parallel, plan.data_parallel),
                ("micro-batch size", self.micro_batch_sizes, plan.micro_batch_size),
                ("schedule", self.schedules, plan.schedule),
                ("recomputation", self.recompute, plan.recompute),
                ("context-parallel size", self.context_parallel, plan.context_parallel),
                ("expert-parallel size", self.expert_parallel, plan.expert_parallel),
                ("ZeRO stage", self.zero_stages, plan.zero_stage)):
            if values is not None and value not in tuple(values):
                return (f"its {name} {value} is not among the sweep's "
                        f"{', '.join(str(v) for v in values)}")
        return None

    def gpu_counts(self) -> tuple[int, ...] | None:
        """``num_gpus`` as a sorted tuple, or None when unset."""
        if self.num_gpus is None:
            return None
        if isinstance(self.num_gpus, (int, np.integer)) and not isinstance(self.num_gpus, bool):
            return (int(self.num_gpus),)
        return tuple(sorted(set(self.num_gpus)))

    def errors(self) -> list[FieldError]:
        """Every rule the space breaks, fields named ``sweep.<attribute>`` (empty when valid)."""
        errs: list[FieldError] = []

        top = int(BOUNDS["parallel"].hi)

        def pos_int(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 < v <= top

        def ints(name: str, values: Any, allow_none: bool = True) -> None:
            if values is None:
                if not allow_none:
                    errs.append(FieldError(f"sweep.{name}", "must be given"))
                return
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                values = [values]
            values = list(values)
            if not values:
                errs.append(FieldError(f"sweep.{name}", "must name at least one value"))
            bad = [v for v in values if not pos_int(v)]
            if bad:
                errs.append(FieldError(f"sweep.{name}", f"{bad[0]!r} is not a positive integer "
                                       f"up to {top:,}"))

        ints("num_gpus", self.num_gpus)
        for name in ("max_gpus", "max_data_parallel"):
            v = getattr(self, name)
            if v is not None and not pos_int(v):
                errs.append(FieldError(f"sweep.{name}", f"{name}={v!r} must be a positive integer "
                                       f"up to {top:,}"))
        if not isinstance(self.hold_session_values, bool):
            errs.append(FieldError("sweep.hold_session_values",
                                   f"{self.hold_session_values!r} must be true or false"))
        if not isinstance(self.tensor_parallel_across_nodes, bool):
            errs.append(FieldError("sweep.tensor_parallel_across_nodes",
                                   f"{self.tensor_parallel_across_nodes!r} must be true or false"))
        for name in ("tensor_parallel", "pipeline_parallel", "data_parallel", "virtual_pipeline_stages",
                     "expert_parallel"):
            ints(name, getattr(self, name))
        ints("micro_batch_sizes", self.micro_batch_sizes, allow_none=False)
        ints("context_parallel", self.context_parallel)
        for name, choices in (("schedules", SCHEDULES), ("recompute", RECOMPUTE_CHOICES)):
            values = getattr(self, name)
            values = [values] if isinstance(values, str) else list(values or [])
            if not values:
                errs.append(FieldError(f"sweep.{name}", "must name at least one value"))
            for v in values:
                if v not in choices:
                    errs.append(FieldError(f"sweep.{name}", f"{v!r} is not one of {', '.join(choices)}"))
        for name, kinds, choices in (("sequence_parallel", (bool, np.bool_), (False, True)),
                                     ("overlap_moe_expert_parallel_comm", (bool, np.bool_),
                                      (False, True)),
                                     ("tp_comm_overlap", (bool, np.bool_), (False, True)),
                                     ("dp_overlap", (bool, np.bool_), (False, True)),
                                     ("zero_stages", (int, np.integer), ZERO_STAGES)):
            values = getattr(self, name)
            if values is None:
                continue
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            if not values:
                errs.append(FieldError(f"sweep.{name}", "must name at least one value"))
            for v in values:
                ok = isinstance(v, kinds) and (name != "zero_stages" or not isinstance(v, bool))
                if not ok or v not in choices:
                    errs.append(FieldError(f"sweep.{name}", f"{v!r} is not one of "
                                           f"{', '.join(str(c).lower() for c in choices)}"))
        if self.num_gpus is not None and self.max_gpus is not None:
            errs.append(FieldError("sweep.num_gpus", "give either num_gpus (exact) or max_gpus, not both"))
        if (self.num_gpus is None and self.max_gpus is None and self.data_parallel is None
                and self.max_data_parallel is None):
            errs.append(FieldError("sweep.max_gpus", "no GPU budget: give num_gpus, max_gpus, "
                                   "data_parallel or max_data_parallel"))
        return errs

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (sequences as lists)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, (list, tuple, range)):
                v = list(v)
            elif isinstance(v, np.integer):
                v = int(v)
            out[name] = v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SweepSpace":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ConfigError
            Not a dict, or an unknown key.
        """
        if not isinstance(data, dict):
            raise ConfigError([FieldError("sweep", "must be a JSON object")])
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError([FieldError(f"sweep.{k}", "unknown field") for k in unknown])
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**kw)


def _divisors(n: int) -> list[int]:
    """Divisors of ``n`` in increasing order (O(sqrt n))."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


MAX_PIPELINE_STEPS = 10_000_000
#: Pipeline steps (:func:`sweep_work`) one core simulates per second, roughly (the MT-NLG
#: study, 9,000 plans and about 6e7 steps, took about half a minute before the compiled
#: solver; 3e8 about two minutes): the time estimate of a large sweep.
STEPS_PER_S = 2.5e6
#: Sweeps whose plans that fit need more work than this (about two minutes on one core) say
#: so before they start, with a time estimate (``run_sweep``'s ``notice``, the result's
#: warnings); nothing refuses them unless ``max_work`` (``--max-work``) is given.
LARGE_SWEEP_WORK = 300_000_000


def _as_list(values: Any) -> list:
    if isinstance(values, str) or not isinstance(values, Iterable):
        return [values]
    return list(values)


def one_stage_schedule(schedules: Sequence[str]) -> str:
    """The schedule a sweep keeps for single-stage plans (p = 1), where all schedules run the
    same order: Megatron's 1F1B (:func:`core.schedules.megatron_schedule`) when among
    ``schedules``, else the first."""
    megatron = pipeline_schedules.megatron_schedule(None)
    return megatron if megatron in schedules else schedules[0]


# the plan fields enumerate_plans sets on each candidate (the others keep the base plan's)
_SWEPT_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                 "data_parallel", "micro_batch_size", "schedule", "virtual_pipeline_stages",
                 "recompute", "sequence_parallel", "zero_stage", "recompute_num_layers",
                 "tp_comm_overlap", "recompute_modules", "first_stage_layers",
                 "last_stage_layers", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
                 "overlap_grad_reduce", "overlap_param_gather")
#: Those whose values enumerate_plans checks per plan (the overlap flags it sets are bools)
_CHECKED_SWEPT_FIELDS = _SWEPT_FIELDS[:-4]


def _cp_candidates(session: Session, space: SweepSpace) -> list[int]:
    """The context-parallel sizes a sweep of ``space`` tries: the given ones, or the powers of
    two ``cp`` with ``seq_length`` divisible by ``2*cp`` (Megatron-Core's causal split) up to
    the budget's largest GPU count (1 alone when the budget bounds no GPU count)."""
    if space.context_parallel is not None:
        return sorted(set(_as_list(space.context_parallel)))
    if space.hold_session_values:
        return [session.plan.context_parallel]
    counts = space.gpu_counts()
    most = max(counts) if counts else space.max_gpus
    s = session.model.seq_length
    out, cp = [1], 2
    while most is not None and cp <= most and s % (2 * cp) == 0:
        # the model's own rules (the attention kernel, sliding windows ...), the other sizes
        # at 1: a size they refuse is in no plan
        probe = Session(session.model, probe_plan(session.plan, context_parallel=cp,
                                                  sequence_parallel=False),
                        session.cluster, session.cost)
        if not any(e.field == "plan.context_parallel" for e in validate(probe)):
            out.append(cp)
        cp *= 2
    return out


def enumerate_plans(session: Session, space: SweepSpace) -> list[ParallelPlan]:
    """Every valid plan of ``space`` for the session's model, batch size, precision and cluster.

    A plan is emitted iff :func:`core.plan.config.validate` accepts the session with
    that plan and it is within the budget. Candidates that certainly break a
    rule (``B % (d*b) != 0``, the schedule's own rules of
    :func:`core.schedules.schedule_errors`) are pruned before validation, and
    candidates are validated with ``sections=("plan",)`` (the model, cluster and
    cost are checked once, first).

    Parameters
    ----------
    session : Session
        Supplies the model, cluster, cost inputs and the plan fields the space does
        not sweep (``global_batch_size``, ``precision``, overlap ...).
    space : SweepSpace

    Returns
    -------
    list of ParallelPlan
        Ordered by t, p, cp, d, ep, b, schedule, recompute, sequence parallel, ZeRO stage (the orders
        of their candidate lists).

    Raises
    ------
    ConfigError
        The space breaks a rule (:meth:`SweepSpace.errors`) or the session breaks
        a rule not about the plan (model, cluster, cost).
    """
    errs = [e for e in validate(session) if not e.field.startswith("plan.")] + space.errors()
    layout = pipeline_layout_text(session.plan)
    if layout is not None:  # kept in every plan: a layout that cannot parse fits none
        try:
            expand_pipeline_layout(layout)
        except ValueError as exc:
            errs.append(FieldError("plan.pipeline_model_parallel_layout", f"{layout!r} {exc}"))
    if errs:
        raise ConfigError(errs)
    m, cl, base = session.model, session.cluster, session.plan
    B = base.global_batch_size
    ts, ps = _tp_pp_candidates(session, space)
    layout_n = _layout_stages(base)
    bs = sorted(set(_as_list(space.micro_batch_sizes)))
    scheds = list(dict.fromkeys(_as_list(space.schedules)))
    rcs = list(dict.fromkeys(_as_list(space.recompute)))
    # sequence parallelism: the space's values, or Megatron-Core's choice (on with t > 1)
    hold = space.hold_session_values
    sps = (list(dict.fromkeys(bool(v) for v in _as_list(space.sequence_parallel)))
           if space.sequence_parallel is not None else [base.sequence_parallel] if hold else None)
    zs = (list(dict.fromkeys(int(v) for v in _as_list(space.zero_stages)))
          if space.zero_stages is not None else [base.zero_stage] if hold else list(ZERO_STAGES))
    tpos = (list(dict.fromkeys(bool(v) for v in _as_list(space.tp_comm_overlap)))
            if space.tp_comm_overlap is not None else [bool(base.tp_comm_overlap)] if hold
            else [True])
    dpos = (list(dict.fromkeys(bool(v) for v in _as_list(space.dp_overlap)))
            if space.dp_overlap is not None else [None] if hold else [True])
    mla = bool(getattr(m, "multi_latent_attention", False))
    # the expert all-to-all overlap: the space's values, or the base's (on where allowed)
    ovs = (list(dict.fromkeys(bool(v) for v in _as_list(space.overlap_moe_expert_parallel_comm)))
           if space.overlap_moe_expert_parallel_comm is not None
           else [base.overlap_moe_expert_parallel_comm is True])
    if not m.is_moe:
        if space.overlap_moe_expert_parallel_comm is not None and True in ovs:
            raise ConfigError([FieldError(
                "sweep.overlap_moe_expert_parallel_comm", "on needs a mixture-of-experts model "
                "(model.num_experts): a dense model has no expert all-to-alls")])
        ovs = [False]
    if base.delay_wgrad_compute is True and True not in ovs:  # what validate says of the file
        raise ConfigError([FieldError("plan.delay_wgrad_compute", "delay_wgrad_compute needs "
                                      "overlap_moe_expert_parallel_comm (Megatron-Core: it must "
                                      "be enabled when enabling delay_wgrad_compute)")])
    cps = _cp_candidates(session, space)
    eps = (sorted(set(_as_list(space.expert_parallel))) if space.expert_parallel is not None
           else _divisors(m.num_experts) if m.is_moe else [1])
    vs = (sorted(set(_as_list(space.virtual_pipeline_stages)))
          if space.virtual_pipeline_stages is not None else list(range(2, 9)))
    counts = space.gpu_counts()
    d_allowed = set(_as_list(space.data_parallel)) if space.data_parallel is not None else None
    d_divisors = _divisors(B)  # d must divide B (d*b divides B)
    plans: list[ParallelPlan] = []
    extra_slots = pipeline_split_slots(m.num_layers, base) - m.num_layers  # embedding, loss
    # validate(sections=("plan",)) checks each plan field alone (check_value) and then the
    # cross-field rules. The fields the loop below does not set keep the base plan's values:
    # check them once; check the swept fields' values once each (memoized by name, type and
    # value); run validate's cross-field rules (sections=()) only on plans whose fields pass,
    # which is what validate(sections=("plan",)) returns for them.
    plan_fields = {f.name: f for f in dataclasses.fields(base)}
    fixed_ok = not any(check_value(n, f, getattr(base, n)) for n, f in plan_fields.items()
                       if n not in _SWEPT_FIELDS)
    field_ok: dict[tuple, bool] = {}

    def fields_ok(plan: ParallelPlan) -> bool:
        for n in _CHECKED_SWEPT_FIELDS:
            value = getattr(plan, n)
            k = (n, type(value), value)
            ok = field_ok.get(k)
            if ok is None:
                ok = field_ok[k] = check_value(n, plan_fields[n], value) is None
            if not ok:
                return False
        return True

    if not fixed_ok:  # every candidate breaks a rule of a field the sweep does not set
        return plans
    delay = base.delay_wgrad_compute is True
    for t in ts:
        for p, cp in ((p, cp) for p in ps for cp in cps):
            tp = t * p * cp  # GPUs of one data-parallel replica
            if counts is not None:
                ds = sorted({n // tp for n in counts if n % tp == 0})
            elif space.max_gpus is not None:
                ds = [d for d in d_divisors if d * tp <= space.max_gpus]
            else:
                ds = list(d_divisors)
            ds = [d for d in ds if B % d == 0
                  and (d_allowed is None or d in d_allowed)
                  and (space.max_data_parallel is None or d <= space.max_data_parallel)]
            # sequence parallelism without tensor parallelism and ZeRO without data parallelism
            # change nothing (Megatron turns sequence parallelism off at t = 1): one plan each
            if sps is None:  # Megatron-Core's choice: on with t > 1 (where s divides by t)
                sps_t = [t > 1 and m.seq_length % t == 0]
            else:
                sps_t = sps[:1] if t == 1 else sps
            # one stage has no pipeline: every schedule runs Megatron's no-pipelining order, so
            # keep one of them (1F1B when swept)
            scheds_p = scheds if p > 1 else [one_stage_schedule(scheds)]
            for d, ep in ((d, ep) for d in ds for ep in eps):
                zs_d = zs[:1] if d == 1 else zs
                for b in bs:
                    if B % (d * b):  # validate's rule B % (d*b) == 0, before building plans
                        continue
                    for sched in scheds_p:
                        virtual = pipeline_schedules.get(sched).uses_virtual_stages
                        if layout_n is None:
                            vs_p = vs if virtual else [None]
                        elif virtual:  # the layout's v = n/p, when it is one of those asked
                            vs_p = [layout_n // p] if (
                                layout_n // p >= 2 and (space.virtual_pipeline_stages is None
                                                        or layout_n // p in vs)) else []
                        else:
                            vs_p = [None] if p == layout_n else []
                        for v in vs_p:
                            # the schedule's own rules (part of validate), before building plans
                            if pipeline_schedules.schedule_errors(
                                    sched, p, B // (d * b), v,
                                    m.num_layers if layout_n is None else None, extra_slots):
                                continue
                            yield_interpreter()
                            for rc in rcs:
                                for sp, z, tpo, og, op in _overlap_choices(
                                        sps_t, zs_d, tpos, dpos, t, d * cp,
                                        1 < t <= cl.gpus_per_node and not mla,
                                        (base.overlap_grad_reduce, base.overlap_param_gather)):
                                    plan = dataclasses.replace(
                                        base, tensor_parallel=t, pipeline_parallel=p,
                                        context_parallel=cp, expert_parallel=ep,
                                        data_parallel=d, micro_batch_size=b, schedule=sched,
                                        virtual_pipeline_stages=v, recompute=rc,
                                        sequence_parallel=sp, zero_stage=z,
                                        recompute_num_layers=(base.recompute_num_layers
                                                              if rc == "full" else None),
                                        # the base's uneven first / last stages at its own p
                                        first_stage_layers=(base.first_stage_layers if p ==
                                                            base.pipeline_parallel else None),
                                        last_stage_layers=(base.last_stage_layers if p ==
                                                           base.pipeline_parallel else None),
                                        # the base's recomputed modules under selective
                                        recompute_modules=(base.recompute_modules
                                                           if rc == "selective" else None),
                                        # the base's TP overlap where the plan allows it
                                        # (Megatron: only with sequence parallelism)
                                        tp_comm_overlap=tpo, overlap_grad_reduce=og,
                                        overlap_param_gather=op)
                                    if plan.recompute_num_layers is not None:
                                        plan = capped_recompute_layers(plan, m.num_layers)
                                    # the expert all-to-all overlap off, and on where
                                    # the plan allows it (expert parallelism, its rules)
                                    for ov in ovs:
                                        cand = plan
                                        if (ov != plan.overlap_moe_expert_parallel_comm
                                                or (delay and ov)
                                                != plan.delay_wgrad_compute):
                                            cand = dataclasses.replace(
                                                plan, overlap_moe_expert_parallel_comm=ov,
                                                delay_wgrad_compute=delay and ov)
                                        if ov and ep_overlap_errors(m, cand):
                                            if False in ovs:
                                                continue  # tried without already
                                            cand = dataclasses.replace(
                                                cand, overlap_moe_expert_parallel_comm=False,
                                                delay_wgrad_compute=False)
                                        # model, cluster and cost were checked above
                                        if fields_ok(cand) and not validate(
                                                Session(m, cand, cl, session.cost),
                                                sections=(), model_checked=True):
                                            plans.append(cand)
    return plans


def _overlap_choices(sps: list[bool], zs: list[int], tpos: list[bool], dpos: list,
                     t: int, dp_ranks: int, tp_overlap_allowed: bool,
                     base_overlaps: tuple[bool, bool] = (False, False)) -> list[tuple]:
    """``(sequence_parallel, zero_stage, tp_comm_overlap, overlap_grad_reduce,
    overlap_param_gather)`` of the plans of one (t, d*cp): each overlap asked on only where
    Megatron supports it (the TP overlap with sequence parallelism inside a node; the
    gradient-reduce overlap with a data-parallel group, the parameter-gather overlap with a
    sharded optimizer too), each distinct combination once."""
    out = {}
    for sp in sps:
        for z in zs:
            for tpo in tpos:
                for dpo in dpos:
                    if dpo is None:  # the session's flags, as they are
                        og, op = base_overlaps
                    else:
                        og = dpo and dp_ranks > 1
                        op = bool(og and z >= 1)
                    out[(sp, z, bool(tpo and sp and tp_overlap_allowed), og, op)] = None
    return list(out)


def _in_budget(space: SweepSpace, plan: ParallelPlan) -> bool:
    """Whether ``plan``'s GPU count and data-parallel size are within ``space``'s budget."""
    counts = space.gpu_counts()
    return ((counts is None or plan.num_gpus in counts)
            and (space.max_gpus is None or plan.num_gpus <= space.max_gpus)
            and (space.max_data_parallel is None or plan.data_parallel <= space.max_data_parallel))


def _index_of_plan(plans: list[ParallelPlan], plan: ParallelPlan) -> int | None:
    """Row of ``plan`` in ``plans`` (every field equal), or None."""
    key = plan_key(plan)
    return next((i for i, pl in enumerate(plans) if plan_key(pl) == key), None)


#: For each plan field a sweep chooses: the :class:`SweepSpace` attribute that names its values
#: (None: derived from other choices) and what the default tries.
_DIMENSION_DEFAULTS = {
    "tensor_parallel": ("tensor_parallel", "the divisors of the GPUs per node"),
    "pipeline_parallel": ("pipeline_parallel", "the divisors of the layer count"),
    "data_parallel": ("data_parallel", "every d the budget and the global batch allow"),
    "micro_batch_size": ("micro_batch_sizes", "1, 2, 4 and 8 where the batch divides"),
    "schedule": ("schedules", "every schedule the model allows"),
    "virtual_pipeline_stages": ("virtual_pipeline_stages",
                                "2 to 8 with the interleaved schedule, where p*v divides the "
                                "layers"),
    "recompute": ("recompute", "none, selective and full"),
    "context_parallel": ("context_parallel", "the powers of two that split the sequence in 2*cp "
                                             "chunks, up to the budget"),
    "expert_parallel": ("expert_parallel", "the divisors of the expert count (1 for a dense "
                                           "model)"),
    "sequence_parallel": ("sequence_parallel",
                          "on wherever t > 1, off at t = 1: what Megatron-Core users run (the "
                          "same communication volume as the all-reduces it replaces, less "
                          "activation memory); --sequence-parallel n,y tries it off too"),
    "zero_stage": ("zero_stages", "0, 1, 2 and 3 where valid (one stage at d = 1)"),
    "tp_comm_overlap": ("tp_comm_overlap", "on where Megatron supports it (sequence parallel, "
                                           "1 < t <= a node)"),
    "overlap_grad_reduce": ("dp_overlap", "on with data parallelism"),
    "overlap_param_gather": ("dp_overlap", "on with a sharded optimizer (ZeRO >= 1)"),
    "overlap_moe_expert_parallel_comm": ("overlap_moe_expert_parallel_comm",
                                         "the session's, where a plan allows it"),
    "recompute_num_layers": (None, "the session's under full recomputation"),
    "recompute_modules": (None, "the session's under selective recomputation"),
    "first_stage_layers": (None, "the session's at its own p"),
    "last_stage_layers": (None, "the session's at its own p"),
    "delay_wgrad_compute": (None, "the session's with the expert all-to-all overlap"),
}


def sweep_dimensions(session: Session, space: SweepSpace, plans: list[ParallelPlan]
                     ) -> list[dict[str, Any]]:
    """What a sweep chose and what it held, one dict per plan field (in
    :data:`core.plan.config.PLAN_FIELDS`' order): ``field``; ``swept``, True when its plans take
    more than one value; ``values``, the values they take (sorted; JSON-able); ``why``, where
    the values come from (the options given, or what the default tries), or why the field
    is held (the session's value, a field the sweep does not choose; or the only value valid
    or given). The command line prints them, ``--json`` has them as ``dimensions`` and the
    Explore tab can read :attr:`SweepResult.dimensions`."""
    out = []
    columns = (list(zip(*map(operator.attrgetter(*PLAN_FIELDS), plans))) if plans
               else [(getattr(session.plan, name),) for name in PLAN_FIELDS])
    for name, column in zip(PLAN_FIELDS, columns):
        seen = list(dict.fromkeys(column))
        values = sorted(seen, key=lambda v: (v is None, str(type(v)), v if v is not None else 0))
        attr, default = _DIMENSION_DEFAULTS.get(name, (None, None))
        if default is None:
            why = "the session's value (the sweep does not choose it)"
        elif attr is not None and getattr(space, attr, None) is not None and (
                name not in ("data_parallel",) or space.data_parallel is not None):
            why = "the values given"
        else:
            why = f"default: {default}"
        if len(values) == 1 and default is not None:
            why = f"the only valid value; {why}"
        out.append({"field": name, "swept": len(values) > 1, "values": values, "why": why})
    return out


def _layout_stages(plan: ParallelPlan) -> int | None:
    """Virtual stages of ``plan``'s custom pipeline layout (``pipeline_model_parallel_layout``),
    None without one (or when it does not parse: validation names that)."""
    text = pipeline_layout_text(plan)
    if text is None:
        return None
    try:
        return len(expand_pipeline_layout(text))
    except ValueError:
        return None


def _tp_pp_candidates(session: Session, space: SweepSpace) -> tuple[list[int], list[int]]:
    """The tensor- and pipeline-parallel sizes a sweep of ``space`` tries: the given ones, or
    t the divisors of the node's GPUs (and multiples of it up to the heads with
    ``tensor_parallel_across_nodes``), p the even splits of the layer slots (and the base's
    own p when its first / last stages are uneven); a custom pipeline layout of ``n``
    virtual stages keeps the p that divide ``n``."""
    m, base, g = session.model, session.plan, session.cluster.gpus_per_node
    if space.tensor_parallel is not None:
        ts = sorted(set(_as_list(space.tensor_parallel)))
    else:
        ts = _divisors(g)
        if space.tensor_parallel_across_nodes:
            ts += [k * g for k in range(2, m.num_attention_heads // g + 1)]
    uneven = base.first_stage_layers is not None or base.last_stage_layers is not None
    ps = (sorted(set(_as_list(space.pipeline_parallel))) if space.pipeline_parallel is not None
          else sorted(set(_divisors(pipeline_split_slots(m.num_layers, base)))
                      | ({base.pipeline_parallel} if uneven else set())))
    layout_n = _layout_stages(base)
    if layout_n is not None:
        ps = [p for p in (ps if space.pipeline_parallel is not None else _divisors(layout_n))
              if layout_n % p == 0]
    return ts, ps


def _gpu_count_errors(session: Session, space: SweepSpace) -> list[FieldError]:
    """Each exact GPU count of ``space`` that no product t*p*cp*d of the sizes tried makes,
    with d a divisor of the global batch (a count like 100 for a 48-layer model and a batch of
    256)."""
    if space.num_gpus is None:
        return []
    ts, ps = _tp_pp_candidates(session, space)
    cps = _cp_candidates(session, space)
    B = session.plan.global_batch_size
    made = {t * p * cp * d for t in ts for p in ps for cp in cps for d in _divisors(B)}
    return [FieldError(f"--gpus {n}", f"no t*p*cp*d makes {n} GPUs with t in "
                       f"{{{', '.join(map(str, ts))}}}, p in {{{', '.join(map(str, ps))}}}, cp in "
                       f"{{{', '.join(map(str, cps))}}} and d a divisor of the global batch {B}")
            for n in space.gpu_counts() if n not in made]


def no_plan_errors(session: Session, space: SweepSpace) -> list[FieldError]:
    """Why a sweep of ``space`` found no plan, as :class:`core.plan.config.FieldError` s (the command
    line's and the Explore tab's message): the budget, then the rules each value given for t, p,
    b or cp breaks on its own (the others at 1), and each virtual-stage count v no
    pipeline-parallel size tried can hold."""
    return ([FieldError("sweep", f"no valid plan for {session.model.name} with global batch "
                                 f"{session.plan.global_batch_size} in this budget "
                                 f"({budget_text(space)})")] + _why_no_plan(session, space))


def _why_no_plan(session: Session, space: SweepSpace) -> list[FieldError]:
    """The rules each value given for t, p, b, cp or ep breaks on its own (the others at 1,
    :func:`value_errors`), and each virtual-stage count v no pipeline-parallel size tried can
    hold."""
    out = []
    n = _layout_stages(session.plan)
    if n is not None:
        # the layout's own rules first (its layer count, its symbols' order ...)
        own = [e for e in validate(session) if e.field == "plan.pipeline_model_parallel_layout"]
        out += own
    if n is not None and not own:
        out.append(FieldError("sweep", f"the session's pipeline_model_parallel_layout has {n} "
                              f"virtual stages: only plans with pipeline_parallel*"
                              f"virtual_pipeline_stages = {n} are tried (p one of "
                              f"{', '.join(map(str, _divisors(n)))}; v = {n}/p under the "
                              f"interleaved schedule, p = {n} under the others)"))
    values = value_errors(session, space, skip_pipeline=n is not None)
    # a GPU count no product of the sizes makes, when no size given is wrong on its own (a
    # wrong size makes the count unreachable too: its own rule says more)
    out += values or _gpu_count_errors(session, space)
    # the virtual-stage counts the user gave (the default 2..8 are tried quietly)
    if (any(pipeline_schedules.get(s).uses_virtual_stages for s in _as_list(space.schedules)
            if s in pipeline_schedules.names()) and n is None
            and space.virtual_pipeline_stages is not None):
        L = pipeline_split_slots(session.model.num_layers, session.plan)  # + embedding, loss slots
        what = (f"num_layers={L}" if L == session.model.num_layers else
                f"num_layers + embedding + loss = {L} layer slots")
        ps = [p for p in (space.pipeline_parallel or range(2, L + 1)) if p >= 2 and L % p == 0]
        for v in space.virtual_pipeline_stages:
            if not any(L % (p * v) == 0 for p in ps):
                out.append(FieldError(f"--virtual-pipeline-stages {v}", (
                    f"the interleaved schedule needs {what} divisible by "
                    f"pipeline_parallel*virtual_pipeline_stages; no pipeline-parallel size tried "
                    f"({', '.join(map(str, ps)) or 'none >= 2'}) gives that with v={v}")))
    return out


#: The sweep options whose values :func:`value_errors` probes: option, SweepSpace attribute,
#: plan field.
_PROBED = (("--tensor-parallel", "tensor_parallel", "tensor_parallel"),
           ("--pipeline-parallel", "pipeline_parallel", "pipeline_parallel"),
           ("--micro-batch-sizes", "micro_batch_sizes", "micro_batch_size"),
           ("--context-parallel", "context_parallel", "context_parallel"),
           ("--expert-parallel", "expert_parallel", "expert_parallel"))


def _value_groups(session: Session, space: SweepSpace, values: dict[str, set] | None = None,
                  skip_pipeline: bool = False) -> dict[tuple[str, str], list]:
    """``{(option, message): [values]}``: the rules each value given for t, p, b, cp or ep
    breaks on its own (see :func:`value_errors`)."""
    grouped: dict[tuple[str, str], list] = {}
    counts = space.gpu_counts()
    most = max(counts) if counts else space.max_gpus  # the budget's largest world size
    for option, attr, name in _PROBED:
        if skip_pipeline and name == "pipeline_parallel":
            continue
        given = getattr(space, attr) or ()
        if values is not None:
            given = [v for v in given if v in values.get(option, ())]
        for v in given:
            if most is not None and isinstance(v, int) and v > most and name != \
                    "micro_batch_size":
                grouped.setdefault((option, f"more GPUs than the budget allows (at most "
                                            f"{most:,})"), []).append(v)
                continue
            probe = session.copy()
            # an expert-parallel group lives inside the data-parallel ranks: probe ep with
            # d = ep (and a batch of one micro-batch per rank) so only ep's own rules speak
            room = (dict(data_parallel=v, global_batch_size=v)
                    if name == "expert_parallel" and isinstance(v, int) and v > 0 else {})
            probe.plan = probe_plan(session.plan, **{**room, name: v})
            for e in validate(probe):
                grouped.setdefault((option, e.message), []).append(v)
    return grouped


def value_errors(session: Session, space: SweepSpace, values: dict[str, set] | None = None,
                 skip_pipeline: bool = False) -> list[FieldError]:
    """The rules each value given for t, p, b, cp or ep breaks on its own (the other sizes at
    1, :func:`core.plan.config.probe_plan`; the session's model), one
    :class:`core.plan.config.FieldError` per option and message, the values that break it named
    together (``--micro-batch-sizes 1, 2, 4``); a value above the budget's GPUs is named so.
    ``values`` restricts the probe to some values per option (``{"--expert-parallel": {3}}``);
    ``skip_pipeline`` leaves p out (a custom pipeline layout decides it)."""
    return [FieldError(f"{option} {', '.join(map(str, vs))}", message)
            for (option, message), vs in
            _value_groups(session, space, values, skip_pipeline).items()]


def unused_values(session: Session, space: SweepSpace, result: "SweepResult"
                  ) -> list[FieldError]:
    """Values given for t, p, b, cp or ep that no valid plan of ``result`` uses, each with the
    rule it breaks on its own (:func:`value_errors`), or, when it breaks none alone, that no
    combination with the other sizes in this budget is valid; and the exact GPU counts no
    valid plan has; empty when every given value appears. The command line and the Explore
    tab print them under the results, so that a value is never dropped without a word."""
    out: list[FieldError] = []
    counts = space.gpu_counts()
    if counts and len(counts) > 1:  # exact counts no valid plan has
        used = set(np.asarray(result.num_gpus).tolist())
        why = {e.field: e.message for e in _gpu_count_errors(session, space)}
        out += [FieldError(f"--gpus {n}", why.get(f"--gpus {n}", "no valid plan has this many "
                                                  "GPUs (no combination with the sizes tried "
                                                  "passes the configuration rules)"))
                for n in counts if n not in used]
    unused: dict[str, set] = {}
    for option, attr, name in _PROBED:
        given = getattr(space, attr)
        if not given or name not in result.plan_columns:
            continue
        seen = set(np.asarray(result.plan_columns[name]).tolist())
        missing = {v for v in given if v not in seen}
        if missing:
            unused[option] = missing
    if not unused:
        return out
    groups = _value_groups(session, space, unused)
    out += [FieldError(f"{option} {', '.join(map(str, vs))}", message)
            for (option, message), vs in groups.items()]
    named = {(option, v) for (option, _), vs in groups.items() for v in vs}
    for option, vs in unused.items():
        rest = sorted(v for v in vs if (option, v) not in named)
        if rest:
            out.append(FieldError(f"{option} {', '.join(map(str, rest))}",
                                  "in no valid plan of this budget (no combination with the "
                                  "other sizes tried passes the configuration rules)"))
    return out


def budget_text(space: SweepSpace) -> str:
    """The GPU budget of ``space`` in words ('exactly 8 GPUs; d <= 4')."""
    parts = []
    if space.num_gpus is not None:
        parts.append(f"exactly {', '.join(map(str, space.gpu_counts()))} GPUs")
    if space.max_gpus is not None:
        parts.append(f"at most {space.max_gpus:,} GPUs")
    if space.max_data_parallel is not None:
        parts.append(f"d <= {space.max_data_parallel}")
    return "; ".join(parts)



# --------------------------------------------------------------------------- batch solver

# --------------------------------------------------------------------------- Pareto

def pareto_front(days: np.ndarray, cost: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Plans not dominated in (days, cost), both minimized.

    Plan ``j`` dominates ``i`` when ``days[j] <= days[i]`` and ``cost[j] <=
    cost[i]`` with at least one strict. Plans with identical (days, cost) do not
    dominate each other, so both are on the front.

    Parameters
    ----------
    days, cost : float array, shape (n,)
    mask : bool array, shape (n,), optional
        Plans taking part (e.g. those that fit in memory); others are never on the front.

    Returns
    -------
    bool array, shape (n,)
    """
    days = np.asarray(days, np.float64)
    cost = np.asarray(cost, np.float64)
    cand = np.flatnonzero(np.ones(days.shape, bool) if mask is None else np.asarray(mask, bool))
    out = np.zeros(days.shape, bool)
    order = cand[np.lexsort((cost[cand], days[cand]))]
    best_cost = math.inf
    last: tuple[float, float] | None = None
    for i in order.tolist():
        key = (days[i], cost[i])
        if cost[i] < best_cost:
            out[i] = True
            best_cost = cost[i]
            last = key
        elif key == last:  # exact duplicate of a front point
            out[i] = True
    return out


# --------------------------------------------------------------------------- result

@dataclass
class SweepResult:
    """All plans of a sweep as columns (numpy arrays of shape (num_plans,)) plus the summary.

    Attributes
    ----------
    session : Session
        The sweep's input (model, cluster, cost inputs, B, precision).
    space : SweepSpace
    plans : list of ParallelPlan
        The plan of each row.
    plan_columns : dict of str to array
        One column per plan field (:data:`PLAN_COLUMNS`), also readable as an
        attribute (``result.tensor_parallel``): int64 for integers, bool, str
        arrays; object arrays for fields that may be None.
    num_microbatches, num_gpus : int64 arrays
    iteration_time_s : float64 array
        Predicted iteration time, seconds (equals ``simulate(session_for(i))``).
    tokens_per_s, mfu, hfu : float64 arrays
        Throughput (tokens/s), model and hardware FLOPs utilization (0..1).
    training_days, gpu_hours, cost_usd : float64 arrays
        For ``session.cost.training_tokens`` tokens at ``session.cost.price_per_gpu_hour_usd``.
    max_memory_per_gpu_bytes : float64 array
        Largest per-GPU memory over the stages, bytes.
    fits_in_memory : bool array
    reason : list of str
        Why a plan does not fit ("" when it fits).
    pareto : bool array
        On the (days, cost) Pareto front of the plans that fit.
    fastest, cheapest : int or None
        Indices among plans that fit (ties: the cheaper, resp. faster, then the first).
    deadline_days : float or None
    cheapest_within_deadline : int or None
        Cheapest plan that fits and trains within ``deadline_days``.
    wall_s : float
        Wall time of the sweep, seconds.
    warnings : list of str
        Distinct lookup warnings of the plans that fit in memory.
    profile : dict
        Device name and provenance of the profile store used.
    interval_low_s, interval_high_s : float64 arrays
        Error band of the iteration time at nominal coverage ``interval_coverage``
        (:mod:`core.store.interval`), seconds; NaN where there is none.
    in_calibration_range : bool array
        Plans whose GPU count and model size lie within the profile's calibration runs.
    interval_coverage : float
    interval_note : str
        Why no plan has a band, or "" when the bands exist.
    pruned : bool array
        Plans that fit in memory but were not simulated: their lower bound shows they change
        no answer of the sweep (branch and bound, :func:`run_sweep`); no figures (NaN).
    lower_bound_s : float64 array
        The iteration-time lower bound of each plan that fits, seconds (NaN for the others,
        and for every plan of a sweep without pruning).
    dimensions : list of dict
        What the sweep chose and what it held (:func:`sweep_dimensions`): one dict per plan
        field with ``field``, ``swept`` (bool), ``values`` (those of the plans) and ``why``.
    """

    session: Session
    space: SweepSpace
    plans: list[ParallelPlan]
    plan_columns: dict[str, np.ndarray]
    num_microbatches: np.ndarray
    num_gpus: np.ndarray
    iteration_time_s: np.ndarray
    tokens_per_s: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    training_days: np.ndarray
    gpu_hours: np.ndarray
    cost_usd: np.ndarray
    max_memory_per_gpu_bytes: np.ndarray
    fits_in_memory: np.ndarray
    reason: list[str]
    pareto: np.ndarray
    fastest: int | None
    cheapest: int | None
    deadline_days: float | None
    cheapest_within_deadline: int | None
    wall_s: float
    warnings: list[str] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    interval_low_s: np.ndarray | None = None
    interval_high_s: np.ndarray | None = None
    in_calibration_range: np.ndarray | None = None
    interval_coverage: float = 0.9
    interval_note: str = ""
    pruned: np.ndarray | None = None
    lower_bound_s: np.ndarray | None = None
    dimensions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = int(np.asarray(self.iteration_time_s).shape[0])
        if self.pruned is None:
            self.pruned = np.zeros(n, bool)
        if self.lower_bound_s is None:
            self.lower_bound_s = np.full(n, np.nan)
        if self.interval_low_s is None:
            self.interval_low_s = np.full(n, np.nan)
        if self.interval_high_s is None:
            self.interval_high_s = np.full(n, np.nan)
        if self.in_calibration_range is None:
            self.in_calibration_range = np.zeros(n, bool)

    def __getattr__(self, name: str) -> np.ndarray:
        # the plan's columns by field name: result.tensor_parallel, result.schedule, ...
        columns = self.__dict__.get("plan_columns")
        if columns is not None and name in columns:
            return columns[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def num_plans(self) -> int:
        """Number of valid plans (fitting or not)."""
        return int(self.iteration_time_s.shape[0])

    @property
    def num_feasible(self) -> int:
        """Number of plans that fit in GPU memory."""
        return int(np.count_nonzero(self.fits_in_memory))

    def plan(self, i: int) -> ParallelPlan:
        """The parallel plan of row ``i`` (a copy)."""
        return dataclasses.replace(self.plans[i])

    def session_for(self, i: int) -> Session:
        """A new session: the sweep's model, cluster and cost with the plan of row ``i``."""
        s = self.session.copy()
        s.plan = self.plan(i)
        return s

    def index_of(self, plan: ParallelPlan) -> int | None:
        """Row of ``plan`` (every field equal; at ``t = 1`` sequence parallelism and the TP
        overlap, which change nothing there, need not be), or None when not in the sweep."""
        index = self.__dict__.get("_index")
        if index is None:
            index = self.__dict__["_index"] = {plan_key(pl): i for i, pl in enumerate(self.plans)}
        i = index.get(plan_key(plan))
        if i is None and plan.tensor_parallel == 1 and (plan.sequence_parallel
                                                         or plan.tp_comm_overlap):
            for sp, ov in ((False, False), (True, False), (False, True), (True, True)):
                i = index.get(plan_key(dataclasses.replace(plan, sequence_parallel=sp,
                                                           tp_comm_overlap=ov)))
                if i is not None:
                    break
        return i

    def pareto_indices(self) -> np.ndarray:
        """Rows on the Pareto front sorted by training days (then cost); int64 (k,)."""
        idx = np.flatnonzero(self.pareto)
        return idx[np.lexsort((self.cost_usd[idx], self.training_days[idx]))]

    def dominated_by(self, i: int) -> np.ndarray:
        """Rows of plans that fit and dominate row ``i`` in (days, cost); int64 (k,)."""
        d, c = self.training_days, self.cost_usd
        dom = self.fits_in_memory & (d <= d[i]) & (c <= c[i]) & ((d < d[i]) | (c < c[i]))
        return np.flatnonzero(dom)

    def select(self, num_gpus: int | Sequence[int] | None = None, max_gpus: int | None = None,
               fits_only: bool = False, deadline_days: float | None = None,
               max_cost_usd: float | None = None) -> np.ndarray:
        """Boolean mask (num_plans,) of the rows passing every given filter."""
        mask = np.ones(self.num_plans, bool)
        if num_gpus is not None:
            mask &= np.isin(self.num_gpus, _as_list(num_gpus))
        if max_gpus is not None:
            mask &= self.num_gpus <= max_gpus
        if fits_only:
            mask &= self.fits_in_memory
        if deadline_days is not None:
            mask &= self.training_days <= deadline_days
        if max_cost_usd is not None:
            mask &= self.cost_usd <= max_cost_usd
        return mask

    def cheapest_within(self, deadline_days: float) -> int | None:
        """Cheapest plan that fits and trains within ``deadline_days`` (ties: faster, then first)."""
        return _best(self.cost_usd, self.training_days, self.select(fits_only=True,
                                                                     deadline_days=deadline_days))

    def plan_row(self, i: int) -> dict[str, Any]:
        """Row ``i`` without the figures of the session's token budget (``training_days``,
        ``gpu_hours``, ``cost_usd``), for studies that train for another budget."""
        return {k: v for k, v in self.row(i).items()
                if k not in ("training_days", "gpu_hours", "cost_usd")}

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a JSON-able dict with the keys :data:`COLUMNS`."""
        out: dict[str, Any] = {}
        for c in COLUMNS:
            if c == "on_pareto_front":
                out[c] = bool(self.pareto[i])
            elif c == "reason":
                out[c] = self.reason[i]
            else:
                v = getattr(self, c)[i]
                v = v.item() if isinstance(v, np.generic) else v
                # no figures (a plan too large to simulate) or no error band: null, never NaN
                out[c] = None if isinstance(v, float) and not math.isfinite(v) else v
        return out

    def rows(self, indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts (all, or ``indices`` in that order)."""
        return [self.row(i) for i in (range(self.num_plans) if indices is None else indices)]

    def to_dict(self, include_all: bool = False) -> dict[str, Any]:
        """The summary document ``vtrain sweep --json`` prints.

        Keys: ``num_plans``, ``num_feasible``, ``wall_s``, ``fastest``,
        ``cheapest``, ``deadline_days``, ``cheapest_within_deadline`` (plan
        dicts or None), ``pareto`` (plan dicts sorted by days), ``training_tokens``,
        ``price_per_gpu_hour_usd``, ``profile``, ``warnings``, ``interval_coverage`` and
        ``interval_note`` (the error bands' nominal coverage, and why there are none),
        ``num_pruned`` (plans that fit but were not simulated), ``dimensions``
        (:attr:`dimensions`: what was swept and what held, and why), ``best_by``
        (:meth:`best_by`), ``config`` (the
        session's own plan: ``in_sweep``, and when in it ``plan``,
        ``on_pareto_front``, ``num_dominating`` and ``cheapest_dominating``, a
        plan dict or None; when not, ``why_not``, :meth:`SweepSpace.excludes`' words or
        None); with ``include_all``, ``plans`` (every row).
        """
        pick = (lambda i: None if i is None else self.row(i))
        own = self.index_of(self.session.plan)
        config: dict[str, Any] = {"in_sweep": own is not None}
        if own is None:
            config["why_not"] = self.space.excludes(self.session.plan)
        if own is not None:
            dom = self.dominated_by(own) if self.fits_in_memory[own] else np.empty(0, np.int64)
            config.update(plan=self.row(own), on_pareto_front=bool(self.pareto[own]),
                          num_dominating=int(dom.size),
                          cheapest_dominating=pick(int(dom[np.argmin(self.cost_usd[dom])])
                                                   if dom.size else None))
        doc = {
            "num_plans": self.num_plans, "num_feasible": self.num_feasible, "wall_s": self.wall_s,
            "fastest": pick(self.fastest), "cheapest": pick(self.cheapest),
            "deadline_days": self.deadline_days,
            "cheapest_within_deadline": pick(self.cheapest_within_deadline),
            "pareto": self.rows(self.pareto_indices().tolist()),
            "training_tokens": self.session.cost.training_tokens,
            "price_per_gpu_hour_usd": self.session.cost.price_per_gpu_hour_usd,
            "profile": self.profile, "warnings": self.warnings, "config": config,
            "interval_coverage": self.interval_coverage, "interval_note": self.interval_note,
            "num_pruned": int(np.count_nonzero(self.pruned)),
            "dimensions": self.dimensions, "best_by": self.best_by(),
        }
        if include_all:
            doc["plans"] = self.rows()
        return doc

    def best_by(self) -> dict[str, list[dict[str, Any]]]:
        """The fastest plan that fits for each value of each swept dimension of
        :data:`BEST_BY_FIELDS`, and for each GPU count (``num_gpus``) when the space names
        several exact counts:
        ``{field: [{"value": v, "plan": row dict}, ...]}`` (values
        sorted; a value whose plans none fits has ``"plan": None``). Exact under pruning: a
        plan is pruned only when a plan of each of its values is already faster than it."""
        out: dict[str, list[dict[str, Any]]] = {}
        swept = {d["field"] for d in self.dimensions if d["swept"]} if self.dimensions else None
        counts = list(self.space.gpu_counts() or ())
        if len(counts) > 1:
            out["num_gpus"] = [{"value": n, "plan": (lambda i: None if i is None else self.row(i))(
                _best(self.training_days, self.cost_usd, self.fits_in_memory & (self.num_gpus == n)))}
                for n in counts]
        for name in BEST_BY_FIELDS:
            if swept is not None and name not in swept:
                continue
            col = [getattr(pl, name) for pl in self.plans]
            if len(set(map(repr, col))) < 2:
                continue
            rows = []
            for value in sorted(set(col), key=lambda v: (v is None, repr(type(v)), v if v is not
                                                         None else 0)):
                mask = self.fits_in_memory & np.array([c == value for c in col], bool)
                i = _best(self.training_days, self.cost_usd, mask)
                rows.append({"value": value, "plan": None if i is None else self.row(i)})
            out[name] = rows
        return out

    def csv_text(self) -> str:
        """All rows as CSV text with a header row of :data:`COLUMNS`."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in self.rows():
            w.writerow(["" if v is None else repr(v) if isinstance(v, float) else v
                        for v in r.values()])
        return buf.getvalue()

    def write_csv(self, path: str | Path) -> None:
        """Write :meth:`csv_text` to ``path`` atomically. Raises ``OSError`` when not writable."""
        from core.io.session import atomic_write_text
        atomic_write_text(path, self.csv_text())


def _plan_columns(plans: list[ParallelPlan]) -> dict[str, np.ndarray]:
    """One array per plan field: int64, bool or str when every value is one, object otherwise."""
    out = {}
    get = operator.attrgetter(*PLAN_COLUMNS)
    columns = list(zip(*map(get, plans))) if plans else [()] * len(PLAN_COLUMNS)
    for name, values in zip(PLAN_COLUMNS, columns):
        values = list(values)
        kinds = set(map(type, values))
        if kinds == {bool}:
            out[name] = np.array(values, bool)
        elif kinds == {int}:
            out[name] = np.array(values, np.int64)
        elif kinds == {str}:
            out[name] = np.array(values, dtype=f"<U{max(map(len, values))}")
        else:
            out[name] = np.array(values, dtype=object)
    return out


def _plan_figures(plans: list[ParallelPlan], model, store, cluster, num_gpus: np.ndarray,
                  coverage: float) -> tuple:
    """What a sweep's result needs of its plans alone: ``(plan columns (:func:`_plan_columns`),
    model FLOPs, hardware FLOPs (float64 (n,) each), error-band factors low, high (float64
    (n,)), in calibration range (bool (n,)), the note when the store has no bands)``."""
    plan_columns = _plan_columns(plans)
    # the FLOPs do not depend on d or b (B is the session's): one evaluation per other fields
    flops_memo: dict[tuple, tuple[float, float]] = {}
    others = operator.itemgetter(*[i for i, f in enumerate(PLAN_FIELDS)
                                   if f not in ("data_parallel", "micro_batch_size")])

    def plan_flops(pl: ParallelPlan) -> tuple[float, float]:
        k = others(plan_key(pl))
        got = flops_memo.get(k)
        if got is None:
            got = flops_memo[k] = (model_math.model_flops_per_iteration(model, pl),
                                   model_math.hardware_flops_per_iteration(model, pl))
        return got

    both = np.array([plan_flops(pl) for pl in plans], dtype=float).reshape(-1, 2)
    flops, hw_flops = both[:, 0], both[:, 1]
    residuals = getattr(store, "residuals", None)
    low_f, high_f, in_range = interval_factors(residuals, num_gpus, cluster.gpus_per_node,
                                               layer_parameters(model), coverage)
    no_band = "" if residuals is not None else interval_for(
        None, 1.0, 1, 1, 1.0, coverage, store_name=f"the {store.device_name} profile store "
        f"({store.provenance.get('method', 'unknown method')})").note
    return plan_columns, flops, hw_flops, low_f, high_f, in_range, no_band


def _best(primary: np.ndarray, secondary: np.ndarray, mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    if not idx.size:
        return None
    return int(idx[np.lexsort((idx, secondary[idx], primary[idx]))[0]])


# --------------------------------------------------------------------------- driver

#: Sweeps of fewer plans than this run in the calling process whatever ``workers`` says.
_PARALLEL_MIN_PLANS = 2000


def _check_workers(workers: Any) -> int:
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ConfigError([FieldError("sweep.workers", f"workers={workers!r} must be a positive "
                                      "integer")])
    return int(workers)


def solve_batch(model, cluster, cost, key: tuple[int, int, str, int], plans: list[ParallelPlan],
                store, lookup_cache: dict, compiled: bool | None = None,
                known: dict | None = None
                ) -> tuple[np.ndarray, np.ndarray, list[str], dict[str, list[int]]]:
    """Iteration time and memory of a batch of plans of one pipeline structure.

    Parameters
    ----------
    model, cluster, cost : the session's parts
    key : (p, m, schedule, v)
        The plans' pipeline size, micro-batches, schedule and chunks per stage.
    plans : list of ParallelPlan, length n
    store : ProfileStore
    lookup_cache : dict
        Memo of op and communication lookups (:func:`core.sim.stages.stage_times`), shared
        between batches of one process.
    compiled : bool, optional
        Passed to :func:`pipeline_iteration_times` (the compiled pass or the numpy
        sweeps; the same times bit for bit).
    known : dict, optional
        Stage times already computed (:func:`_stage_times_key` -> StageTimes; the
        sweep's bounds computed them), used instead of computing them again.

    Returns
    -------
    (iteration_time_s float64 (n,), max_memory_per_gpu_bytes float64 (n,), reasons
    (list of n str, "" when the plan fits), warnings of the plans that fit (dict: warning ->
    the batch positions of the plans it concerns))
    """
    p, m, schedule, v = key
    sched = pipeline_schedules.get(schedule)
    capacity = float(store.memory_bytes)
    reserve = float(cluster.memory_reserve_fraction)
    n = len(plans)
    per_chunk = np.empty((5, p, v, n))
    per_stage = np.empty((4, p, n))
    max_mem = np.zeros(n)
    reason = [""] * n
    warnings: dict[str, list[int]] = {}
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    # Stage times read the schedule only through its stage_times_kind (core.sim.stages.stage_times;
    # tests/test_sweep_speed.py checks it): plans that differ only in a schedule of the same
    # kind (1F1B and GPipe) share them. Batches come sorted
    # by (p, m, schedule, v), so those of one (p, m) follow each other: keep theirs only.
    kept = lookup_cache.get(_SHARED_STAGE_TIMES)
    if kept is None or kept[0] != (p, m):
        kept = lookup_cache[_SHARED_STAGE_TIMES] = ((p, m), {})
    shared = kept[1]
    kind = sched.stage_times_kind
    for j, pl in enumerate(plans):
        yield_interpreter()
        skey = _stage_times_key(pl, kind)
        st = shared.get(skey)
        if st is None and known is not None:
            st = known.get(skey)
        if st is None:
            st = shared[skey] = stage_times(Session(model, pl, cluster, cost), store, lookup_cache)
        per_chunk[:, :, :, j] = (st.fwd_s, st.bwd_s, st.wgrad_s, st.ready_s, st.chunk_tail_s)
        per_stage[:, :, j] = (st.send_fwd_s, st.send_bwd_s, st.dp_comm_s, st.optimizer_s)
        # same rule and message as core.sim.simulate
        max_mem[j], fits, reason[j] = memory_verdict_arrays(
            model_math.stage_memory_arrays(model, pl, fp8_tn), capacity, reserve)
        if fits:
            for w in st.warnings:
                warnings.setdefault(w, []).append(j)
    if sched.fast_path:
        ready = per_chunk[3] if per_chunk[3].any() else None
        tails = per_chunk[4] if np.isfinite(per_chunk[4]).any() else None
        iteration = pipeline_iteration_times(
            schedule, m, per_chunk[0], per_chunk[1], *per_stage,
            wgrad_s=per_chunk[2] if sched.splits_backward else None,
            ready_s=ready, chunk_tail_s=tails, compiled=compiled)
    else:  # the general solver on the coarse graph
        iteration = np.empty(n)
        for j, pl in enumerate(plans):
            g, _ = build_graph(Session(model, pl, cluster, cost), store,
                               detail="microbatch", cache=lookup_cache)
            iteration[j] = solve(g).iteration_time_s
    return iteration, max_mem, reason, warnings


def _stage_times_key(pl: ParallelPlan, kind: tuple) -> tuple:
    """The key of a plan's stage times: every field but the schedule, and what stage times read
    of the schedule (:attr:`core.schedules.PipelineSchedule.stage_times_kind`)."""
    fields = plan_key(pl)
    return (kind, fields[:_SCHEDULE_FIELD] + fields[_SCHEDULE_FIELD + 1:])


def _bound_plan(pl: ParallelPlan, model) -> ParallelPlan:
    """The plan whose compute-stream times bound ``pl``'s from below, shared by many plans:
    ``pl`` without the data-parallel side (ZeRO 0, no data-parallel overlaps; d = 1 for a
    dense model, whose work items do not depend on d), which only adds communication to the
    work items and a tail after them."""
    d = 1 if not model.is_moe else pl.data_parallel
    if (pl.zero_stage == 0 and not pl.overlap_grad_reduce and not pl.overlap_param_gather
            and pl.data_parallel == d and not pl.fp8_param_gather):
        return pl
    return dataclasses.replace(pl, zero_stage=0, overlap_grad_reduce=False,
                               overlap_param_gather=False, data_parallel=d,
                               fp8_param_gather=False)


def iteration_lower_bound_s(st, num_microbatches: int, busy_only: bool = False) -> float:
    """A lower bound of the iteration time the batch solver gives a plan with stage times
    ``st`` (:class:`core.sim.stages.StageTimes`, shapes (p, v) and (p,)) and m micro-batches,
    seconds: its compute plus the schedule's least bubble (branch and bound's bound).

    Each stage runs its items one after another (:func:`pipeline_iteration_times`). Stage
    ``i``'s first item is a forward, which waits for micro-batch 0's forward of chunk 0 on
    every stage before it (``sum_{r<i} F[r, 0]``); the stage then works ``m * sum_c (F + B +
    W)[i, c]`` (transfers only add), and its tail ``dp_comm_s + optimizer_s`` follows. Its
    last input-gradient item B comes after all its forwards and backwards (each forward's B
    follows it), and that micro-batch's B then runs on every stage before it, chunk 0's
    ``sum_{r<i} B[r, 0]`` at least, before stage 0's tail. So

        T >= max_i max(sum_{r<i} F[r,0] + m sum_c (F+B+W)[i,c] + dp[i] + opt[i],
                       sum_{r<i} F[r,0] + m sum_c (F+B)[i,c] + sum_{r<i} B[r,0] + dp[0] + opt[0]).

    For 1F1B this is the busiest stage's compute plus the (p - 1)(F + B) bubble of Narayanan
    et al. 2021; for ZB-H1 it stays below the (p - 1)(F + B - W) bubble plus the W left after
    the last B (Qi et al. 2024); for the interleaved schedule below the (p - 1)/v bubble. The
    tests check it against the solver on every plan of several spaces.

    ``busy_only`` bounds every plan that differs from ``st``'s only on the data-parallel
    side (:func:`_bound_plan`): the compute stream's own time of each item (``busy_*_s``)
    and no tail.
    """
    F, Bw, W = st.fwd_s, st.bwd_s, st.wgrad_s                 # (p, v) each
    if busy_only and st.busy_fwd_s is not None:
        F, Bw, W = st.busy_fwd_s, st.busy_bwd_s, st.busy_wgrad_s
    m = float(num_microbatches)
    before_f = np.concatenate(([0.0], np.cumsum(F[:-1, 0])))  # (p,)
    before_b = np.concatenate(([0.0], np.cumsum(Bw[:-1, 0])))
    tail = (np.zeros(F.shape[0]) if busy_only
            else st.dp_comm_s + st.optimizer_s)               # (p,)
    busy = before_f + m * (F + Bw + W).sum(axis=1) + tail
    chain = before_f + m * (F + Bw).sum(axis=1) + before_b + tail[0]
    return float(max(busy.max(), chain.max()))


def _is_cancelled(cancel: Any) -> bool:
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


def plan_label(pl: ParallelPlan) -> str:
    """Short name of a plan in messages (:meth:`ParallelPlan.label`), e.g.
    ``t=8 p=2 d=4 b=1 1f1b recompute=full``."""
    return pl.label()


def plans_note(plans: list[ParallelPlan], shown: int = 3) -> str:
    """``"; in 5 plans: t=8 p=2 ..., ... and 2 more"``: which plans a sweep warning concerns."""
    n = len(plans)
    labels = [plan_label(pl) for pl in plans[:shown]]  # only those shown: a warning can concern
    more = f" and {n - shown} more" if n > shown else ""  # thousands of plans
    return f"; in {n} plan{'s' if n != 1 else ''}: {', '.join(labels)}{more}"


def run_sweep(session: Session, space: SweepSpace, *, store=None, deadline_days: float | None = None,
              progress: ProgressFn | None = None, cancel: Any = None, workers: int = 1,
              dask: str | None = None, coverage: float = DEFAULT_COVERAGE, prune: bool = True,
              max_work: int | None = None, notice: Callable[[str], None] | None = None
              ) -> SweepResult:
    """Enumerate, simulate and cost every valid plan of ``space``.

    Plans that do not fit in memory (closed form, :func:`core.model.model_math.stage_memory_arrays`)
    are never simulated. With ``prune`` (default), the plans that fit are simulated in rounds
    by increasing lower bound (:func:`iteration_lower_bound_s`) and a plan whose bound shows
    that it can change neither the (days, cost) front, nor the fastest, cheapest or deadline
    plan, nor the best plan of any value of :data:`BEST_BY_FIELDS` or of any of the space's
    exact GPU counts is not simulated (branch
    and bound; exact: these answers equal an exhaustive sweep's, the tests check it); its row
    has no figures, ``pruned`` True and its bound in ``lower_bound_s``.

    Parameters
    ----------
    session : Session
        Model, cluster, cost inputs (token budget, price per GPU-hour), global
        batch size and precision; its plan's t, p, d, b, schedule and recompute
        are not used.
    space : SweepSpace
        Budget and candidate sizes.
    store : ProfileStore, optional
        Default: the store :func:`core.sim.simulate.profile_path` names for the session.
    deadline_days : float, optional
        Also find the cheapest plan within this many days (> 0).
    progress : callable ``(done, total) -> None``, optional
        Called with ``(0, total)`` first, then after each batch of plans with the
        number of plans finished (``total`` = number of valid plans), from the
        calling thread. Must not raise.
    cancel : threading.Event or callable returning bool, optional
        Checked between batches (each a few ms to ~0.1 s of work; with ``workers`` or
        ``dask``, every 0.1 s while chunks run: the chunks not started are dropped);
        when set, :class:`SweepCancelled` is raised.
    workers : int
        Processes to solve the batches on (1: this process; default). The batches are
        grouped in chunks, solved by this thread and a pool of ``workers - 1`` processes
        (:mod:`core.studies.sweep_parallel`; each worker opens the profile store itself) and put
        back in order: the result is the serial one, bit for bit. Sweeps of fewer than ``_PARALLEL_MIN_PLANS`` plans
        run here (starting processes would cost more).
    dask : str, optional
        Send the chunks to a Dask distributed scheduler at this address
        (``tcp://host:8786``), or ``"local"`` for a ``LocalCluster`` of ``workers``
        processes; the profile store travels with the chunks. Needs ``dask[distributed]``
        (the ``dask`` extra). Same result as serial.
    coverage : float
        Nominal coverage of the error bands, in (0, 1) (:mod:`core.store.interval`).
    prune : bool
        Branch and bound (default); False simulates every plan, those that do not fit in
        memory too (the oracle, and figures for every point of a scatter).
    max_work : int, optional
        Refuse (``ConfigError``, field ``sweep.max_work``) when the plans that fit need more
        than this many pipeline steps (:func:`sweep_work`); default None, no limit.
    notice : callable ``(str) -> None``, optional
        Told, before the simulation starts, when the sweep is large (more than
        :data:`LARGE_SWEEP_WORK` steps), with a time estimate (also in the result's warnings).

    Returns
    -------
    SweepResult

    Raises
    ------
    ConfigError
        Invalid space, model, cluster or cost inputs, or ``deadline_days <= 0``.
    ProfileStoreError
        The profile store cannot be opened.
    KeyError
        The profile lacks data a plan needs (dtype peak, collectives).
    SweepCancelled
        ``cancel`` was set.
    ConfigError
        ``workers`` is not a positive integer, or ``dask`` names no reachable scheduler
        or dask is not installed (field ``sweep.dask``).
    """
    t0 = time.perf_counter()
    if deadline_days is not None and not (isinstance(deadline_days, (int, float))
                                          and math.isfinite(deadline_days) and deadline_days > 0):
        raise ConfigError([FieldError("sweep.deadline_days", f"deadline_days={deadline_days!r} "
                                      "must be a positive number")])
    workers = _check_workers(workers)
    if max_work is not None and (isinstance(max_work, bool) or not isinstance(
            max_work, (int, np.integer)) or max_work < 1):
        raise ConfigError([FieldError("sweep.max_work", f"max_work={max_work!r} must be a "
                                      "positive integer (pipeline steps)")])
    if dask is not None and not (isinstance(dask, str) and dask.strip()):
        raise ConfigError([FieldError("sweep.dask", f"dask={dask!r} must be a scheduler address "
                                      "(tcp://host:8786) or 'local'")])
    with gc_paused():  # before the pool forks: its processes start with it paused too
        early = _early_pool(session, space, workers, dask)
        try:
            return _run_sweep(session, space, store, deadline_days, progress, cancel, workers,
                              dask, coverage, t0, early, prune, max_work, notice)
        finally:
            if early is not None:
                early.shutdown(wait=False, cancel_futures=True)


_GC_LOCK = threading.Lock()
_GC_PAUSES = 0         # sweeps (threads) running in gc_paused
_GC_WAS_ENABLED = True


#: A sweep on a thread other than the main one hands the interpreter to the other threads
#: this often, seconds (:func:`yield_interpreter`).
YIELD_EVERY_S = 0.02
_YIELD = threading.local()


def yield_interpreter() -> None:
    """On a thread other than the main one (the window's sweep worker), sleep 0.5 ms once every
    :data:`YIELD_EVERY_S` of work, so that the other threads (the GUI thread) take the
    interpreter lock. Without it they can wait for it for up to 0.7 s: the sweep's loops make
    many short numpy calls, each of which releases the lock and takes it back at once, and
    CPython's ``take_gil`` asks a holder to drop the lock only after a waiter's timed wait
    sees no switch in between, which these releases always are. The cost: 0.5 ms per 20 ms
    (2.5 %), none on the main thread (the command line)."""
    if threading.current_thread() is threading.main_thread():
        return
    now = time.perf_counter()
    last = getattr(_YIELD, "last", None)
    if last is None:
        _YIELD.last = now
    elif now - last >= YIELD_EVERY_S:
        time.sleep(0.0005)
        _YIELD.last = time.perf_counter()


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector off while the block runs, then as it was.

    A sweep allocates hundreds of thousands of objects that hold no reference cycles (plans,
    keys, small arrays: the MT-NLG example leaves about 800 objects in cycles in all), and the
    collector's passes over the growing heap find nothing: about 0.25 s of its 3.5 s on one
    core. Reference counting frees everything else as usual; what is in cycles is collected
    when the collector runs again. Nested and concurrent uses (threads) count: the collector
    is restored when the last one ends.
    """
    global _GC_PAUSES, _GC_WAS_ENABLED
    with _GC_LOCK:
        if _GC_PAUSES == 0:
            _GC_WAS_ENABLED = gc.isenabled()
            gc.disable()
        _GC_PAUSES += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSES -= 1
            if _GC_PAUSES == 0 and _GC_WAS_ENABLED:
                gc.enable()


#: Candidates (t x p x d x b x schedule x recompute, before validation) from which a sweep on
#: several processes starts its worker processes before it enumerates the plans, so that they
#: import the compiled batch solver meanwhile (the MT-NLG and GPT-3 examples: about 47,000;
#: a one-node sweep: about 14,000, about 1,000 plans).
_EARLY_POOL_CANDIDATES = 30_000


def _early_pool(session: Session, space: SweepSpace, workers: int, dask: str | None):
    """A process pool of ``workers - 1`` processes started now, warming up with the compiled
    batch solver (:func:`core.studies.sweep_parallel.start_pool`), when the sweep will run on several
    local processes and is large (its candidate count, a cheap upper bound on its plans, is
    at least :data:`_EARLY_POOL_CANDIDATES`); else None."""
    if dask is not None or workers < 2 or space.errors():
        return None
    try:
        m, B = session.model, session.plan.global_batch_size
        ts = (space.tensor_parallel if space.tensor_parallel is not None
              else _divisors(session.cluster.gpus_per_node))
        ps = (space.pipeline_parallel if space.pipeline_parallel is not None
              else _divisors(m.num_layers))
        candidates = (len(_as_list(ts)) * len(_as_list(ps)) * len(_divisors(B))
                      * len(_as_list(space.micro_batch_sizes)) * len(_as_list(space.schedules))
                      * len(_as_list(space.recompute)))
    except (TypeError, ValueError, AttributeError):  # an invalid session: enumeration says why
        return None
    if candidates < _EARLY_POOL_CANDIDATES:
        return None
    from core.sim import fastpath_kernel
    from core.studies import sweep_parallel
    if fastpath_kernel.loaded():  # this process has it: it takes the heavy batches itself
        return None
    return sweep_parallel.start_pool(workers - 1, compiled=True)


def sweep_work(plans: list[ParallelPlan], num_layers: int) -> int:
    """Work of simulating ``plans``, in pipeline steps: the sum over plans of ``p * m * v``
    (the batch solver's arrays) plus ``10 * L / p`` (the per-layer lookups of each plan's
    stage times, about ten steps' time each); plans above :data:`MAX_PIPELINE_STEPS` count 0
    (they are listed without figures)."""
    return sum(pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl)
               + 10 * num_layers // pl.pipeline_parallel for pl in plans
               if pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl) <= MAX_PIPELINE_STEPS)


def work_seconds(work: float) -> float:
    """Rough wall time of ``work`` pipeline steps on one core, seconds
    (:data:`STEPS_PER_S`)."""
    return work / STEPS_PER_S


def _duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:,.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:,.0f} minutes"
    return f"{seconds / 3600:,.1f} hours"


def _memory_verdicts(plans: list[ParallelPlan], model, store, reserve: float
                     ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Closed-form memory of every plan (:func:`core.model.model_math.stage_memory_arrays`, the
    rule and message of :func:`core.sim.simulate.memory_verdict_arrays`): largest bytes per GPU
    float64 (n,), fits bool (n,), reasons ("" when it fits). No graph is built."""
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    capacity = float(store.memory_bytes)
    n = len(plans)
    mem, fits, why = np.zeros(n), np.zeros(n, bool), [""] * n
    # activations do not depend on the data-parallel side (ZeRO, its overlaps): shared
    act_key = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                    if f not in model_math.ACTIVATION_FREE_PLAN_FIELDS))
    acts: dict[tuple, np.ndarray] = {}
    for i, pl in enumerate(plans):
        yield_interpreter()
        k = act_key(plan_key(pl))
        a = acts.get(k)
        if a is None:
            parts = model_math.stage_memory_arrays(model, pl, fp8_tn)
            acts[k] = parts[3]
        else:  # the plan's own weights, gradients and optimizer state, and process terms
            parts = model_math.StageMemoryArrays.of(
                pl, *model_math.stage_state_bytes(model, pl, fp8_tn), a)
        mem[i], fits[i], why[i] = memory_verdict_arrays(parts, capacity, reserve)
    return mem, fits, why


def _group_batches(plans: list[ParallelPlan], rows: Iterable[int]
                   ) -> list[tuple[tuple[int, int, str, int], list[int]]]:
    """``rows`` of ``plans`` in batches of one pipeline structure (p, m, schedule, v), sorted by
    it, each small enough for the batch solver's arrays (about 16 MB)."""
    groups: dict[tuple[int, int, str, int], list[int]] = defaultdict(list)
    for i in rows:
        pl = plans[i]
        groups[(pl.pipeline_parallel, pl.num_microbatches, pl.schedule, num_chunks(pl))].append(i)
    batches = []
    for key, group in sorted(groups.items()):
        p, m, _, v = key
        step = max(1, _MAX_BATCH_ELEMENTS // (p * 3 * m * v))
        batches += [(key, group[start:start + step]) for start in range(0, len(group), step)]
    return batches


#: The plan fields :attr:`SweepResult.best_by` answers for, in the table's order.
BEST_BY_FIELDS = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size",
                  "context_parallel", "expert_parallel", "schedule", "virtual_pipeline_stages",
                  "recompute", "sequence_parallel", "zero_stage")
#: Plans simulated in the first round of branch and bound; each round doubles, up to the last.
_FIRST_ROUND = 32
_MAX_ROUND = 4096


def _prunable(lb_days: np.ndarray, lb_cost: np.ndarray, lb_time: np.ndarray, rows: np.ndarray,
              days: np.ndarray, cost: np.ndarray, time_s: np.ndarray, done: np.ndarray,
              codes: list[np.ndarray]) -> np.ndarray:
    """Which of ``rows`` (int (k,)) cannot change the result (bool (k,)): a plan simulated and
    fitting (``done``) is faster than its bound and no more expensive, or no slower and
    cheaper (so the plan is strictly dominated, off the front, neither fastest, cheapest nor
    cheapest within a deadline), and for every dimension of :data:`BEST_BY_FIELDS`, a plan
    with the same value (``codes``, int (n,) each) is already faster than its bound (so it
    is no dimension value's best either). Exact: the bounds never exceed the figures."""
    if not done.any() or not rows.size:
        return np.zeros(rows.size, bool)
    idx = np.flatnonzero(done)
    order = idx[np.argsort(days[idx], kind="stable")]
    d_sorted, c_prefix = days[order], np.minimum.accumulate(cost[order])
    le = np.searchsorted(d_sorted, lb_days[rows], side="right")    # plans with days <= bound
    lt = np.searchsorted(d_sorted, lb_days[rows], side="left")     # days < bound
    best_le = np.where(le > 0, c_prefix[np.maximum(le - 1, 0)], np.inf)
    best_lt = np.where(lt > 0, c_prefix[np.maximum(lt - 1, 0)], np.inf)
    out = (best_le < lb_cost[rows]) | (best_lt <= lb_cost[rows])
    for code in codes:
        fastest = np.full(int(code.max()) + 1, np.inf)
        np.minimum.at(fastest, code[idx], time_s[idx])
        out &= fastest[code[rows]] < lb_time[rows]
    return out


def _run_sweep(session, space, store, deadline_days, progress, cancel, workers, dask, coverage,
               t0, early, prune=True, max_work=None, notice=None) -> SweepResult:
    """:func:`run_sweep` after its checks (``early``: a started process pool, or None)."""
    plans = enumerate_plans(session, space)
    dimensions = sweep_dimensions(session, space, plans)
    # the session's own plan is always simulated: added when the space's values leave it out
    # (a setting the default holds, such as sequence parallelism off) but it is valid and in
    # the budget
    if (plans and _index_of_plan(plans, session.plan) is None
            and space.excludes(session.plan) is None
            and _in_budget(space, session.plan) and not validate(session)):
        plans.append(dataclasses.replace(session.plan))
    session = session.copy()  # the result keeps the inputs it was computed from
    if store is None:
        store = session_profile(session)
    n = len(plans)
    model, cluster, cost = session.model, session.cluster, session.cost
    num_mb = np.array([pl.num_microbatches for pl in plans], np.int64)
    num_gpus = np.array([pl.num_gpus for pl in plans], np.int64)
    iteration = np.full(n, math.nan)
    capacity = float(store.memory_bytes)
    reserve = float(cluster.memory_reserve_fraction)
    # 1. memory in closed form: plans that do not fit are never simulated
    max_mem, mem_fits, reason = _memory_verdicts(plans, model, store, reserve)
    steps = np.array([pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl) for pl in plans],
                     np.int64).reshape(-1)
    too_large = steps > MAX_PIPELINE_STEPS
    for i in np.flatnonzero(too_large & mem_fits).tolist():
        pl = plans[i]
        reason[i] = (f"too large to simulate: pipeline_parallel*num_microbatches"
                     f"*virtual_pipeline_stages={pl.pipeline_parallel}*{pl.num_microbatches}"
                     f"*{num_chunks(pl)}={int(steps[i]):,} is more than {MAX_PIPELINE_STEPS:,}")
    candidates = np.flatnonzero(mem_fits & ~too_large)
    work = sweep_work([plans[i] for i in candidates.tolist()], model.num_layers)
    estimate = (f"the {candidates.size:,} plans that fit in memory need up to {work:,} pipeline "
                f"steps to simulate, about {_duration_text(work_seconds(work))} on one core"
                + (" before pruning" if prune else ""))
    if max_work is not None and work > max_work:
        raise ConfigError([FieldError("sweep.max_work", f"{estimate}, more than the limit of "
                                      f"{max_work:,} (raise it, or narrow the space)")])
    sweep_notes = [f"large sweep: {estimate}"] if work > LARGE_SWEEP_WORK else []
    if sweep_notes and notice is not None:
        notice(sweep_notes[0])
    own = _index_of_plan(plans, session.plan)
    warned: dict[str, list[int]] = {}  # warning -> the plans (that fit) it concerns
    done_n = 0
    if progress is not None:
        progress(0, n)
    lookup_cache: dict = {}
    known: dict = {}

    def take(idx: list[int], out: tuple) -> None:
        nonlocal done_n
        it, _, _, warn = out
        iteration[idx] = it
        for w, local in warn.items():  # batch positions -> plan rows
            warned.setdefault(w, []).extend(idx[j] for j in local)
        done_n += len(idx)
        if progress is not None:
            progress(done_n, n)

    prepared: list[tuple] = []

    def prepare() -> None:
        if not prepared:
            prepared.append(_plan_figures(plans, model, store, cluster, num_gpus, coverage))

    # the compiled fast path pays for Numba's import (~0.3 s per process) on large sweeps only
    elements = 3 * int(steps[candidates].sum()) if candidates.size else 0
    compiled = True if elements >= COMPILED_MIN_SWEEP_ELEMENTS else None

    def solve(batches: list) -> None:
        if not batches:
            return
        n_rows = sum(len(idx) for _, idx in batches)
        if dask is not None or (workers > 1 and len(batches) > 1 and n_rows >= _PARALLEL_MIN_PLANS):
            from core.studies import sweep_parallel

            def take_chunk(chunk: list, outs: list) -> None:
                for (_, idx), out in zip(chunk, outs):
                    take(idx, out)

            if dask is not None:
                sweep_parallel.run_on_dask(batches, plans, store, model, cluster, cost,
                                           workers=workers, address=dask, cancel=cancel,
                                           on_result=take_chunk, compiled=compiled,
                                           after_submit=prepare)
            else:  # this thread solves chunks too: a pool of workers - 1 processes
                sweep_parallel.run_on_pool(
                    batches, plans, store, model, cluster, cost, workers=workers, cancel=cancel,
                    on_result=take_chunk, compiled=compiled,
                    local=lambda jobs, how: [solve_batch(model, cluster, cost, key, pls, store,
                                                         lookup_cache, how, known)
                                             for key, pls in jobs],
                    pool=early if compiled else None, after_submit=prepare)
            return
        for key, idx in batches:
            if _is_cancelled(cancel):
                raise SweepCancelled("sweep cancelled")
            take(idx, solve_batch(model, cluster, cost, key, [plans[i] for i in idx], store,
                                  lookup_cache, compiled, known))

    pruned = np.zeros(n, bool)
    lower = np.full(n, math.nan)
    if not prune:  # the oracle: every plan simulated, those that do not fit too
        solve(_group_batches(plans, np.flatnonzero(~too_large).tolist()))
    else:
        # 2. a lower bound of each plan that fits (its stage times: no graph), then branch
        # and bound: simulate in rounds by increasing bound, and drop the plans whose bound
        # shows they cannot change the front, the best plans or any dimension's best
        bound_times: dict = {}
        for i in candidates.tolist():
            if _is_cancelled(cancel):
                raise SweepCancelled("sweep cancelled")
            pl = plans[i]
            sched = pipeline_schedules.get(pl.schedule)
            kind = sched.stage_times_kind
            base = _bound_plan(pl, model)
            bkey = _stage_times_key(base, kind)
            st = bound_times.get(bkey)
            if st is None:
                st = bound_times[bkey] = stage_times(Session(model, base, cluster, cost), store,
                                                     lookup_cache)
                if base is pl:  # the plan's own stage times: the solver uses them too
                    known[bkey] = st
            lower[i] = iteration_lower_bound_s(st, pl.num_microbatches, busy_only=True)
        prepare()
        flops, hw_flops = prepared[0][1], prepared[0][2]
        tokens = session.plan.global_batch_size * model.seq_length
        peak = mfu_peak_flops(store, session.plan.precision)

        def figures_of(times: np.ndarray):
            return costing(times, tokens_per_iteration=tokens, model_flops=flops,
                           hardware_flops=hw_flops, num_gpus=num_gpus, peak_flops_per_gpu=peak,
                           training_tokens=cost.training_tokens,
                           price_per_gpu_hour_usd=cost.price_per_gpu_hour_usd)

        lb = figures_of(np.where(np.isfinite(lower), lower, 1.0))
        codes = []
        if len(space.gpu_counts() or ()) > 1:  # several exact GPU counts: the best of each too
            codes.append(np.unique(num_gpus, return_inverse=True)[1].reshape(-1))
        for name in BEST_BY_FIELDS:
            _, code = np.unique(np.array([repr(getattr(pl, name)) for pl in plans]),
                                return_inverse=True)
            codes.append(code.reshape(-1))
        order = candidates[np.argsort(lower[candidates], kind="stable")]
        if own is not None and mem_fits[own] and not too_large[own]:  # always simulated
            order = np.concatenate(([own], order[order != own]))
        pending = np.ones(order.size, bool)
        size, start = _FIRST_ROUND, 0
        while start < order.size:
            chosen = []
            while start < order.size and len(chosen) < size:
                if pending[start]:
                    chosen.append(int(order[start]))
                    pending[start] = False
                start += 1
            solve(_group_batches(plans, chosen))
            size = min(2 * size, _MAX_ROUND)
            rest = np.flatnonzero(pending)
            if not rest.size:
                break
            done = np.isfinite(iteration)
            fig = figures_of(np.where(done, iteration, np.inf))
            drop = _prunable(lb.training_days, lb.cost_usd, lower, order[rest],
                             fig.training_days, fig.cost_usd, iteration, done, codes)
            pending[rest[drop]] = False
            pruned[order[rest[drop]]] = True
            done_n += int(drop.sum())
            if progress is not None and drop.any():
                progress(done_n, n)
        for i in np.flatnonzero(pruned).tolist():
            reason[i] = (f"not simulated: its lower bound {lower[i]:.3f} s per iteration shows "
                         "it cannot reach the Pareto front nor be the best plan of any of its "
                         "values")
    if progress is not None and done_n < n:  # the plans that do not fit, never simulated
        progress(n, n)
    prepare()
    plan_columns, flops, hw_flops, low_f, high_f, in_range, no_band = prepared[0]
    # Cost, as core.sim.simulate computes it.
    figures = costing(iteration, tokens_per_iteration=session.plan.global_batch_size * model.seq_length,
                      model_flops=flops, hardware_flops=hw_flops, num_gpus=num_gpus,
                      peak_flops_per_gpu=mfu_peak_flops(store, session.plan.precision),
                      training_tokens=cost.training_tokens,
                      price_per_gpu_hour_usd=cost.price_per_gpu_hour_usd)
    fits = (max_mem <= capacity * (1 - reserve)) & np.isfinite(iteration)
    days, cost_usd = figures.training_days, figures.cost_usd
    pareto = pareto_front(days, cost_usd, fits)
    result = SweepResult(
        session=session, space=space, plans=plans, plan_columns=plan_columns,
        num_microbatches=num_mb, num_gpus=num_gpus,
        iteration_time_s=iteration, tokens_per_s=figures.tokens_per_s, mfu=figures.mfu,
        hfu=figures.hfu, training_days=days, gpu_hours=figures.gpu_hours, cost_usd=cost_usd,
        max_memory_per_gpu_bytes=max_mem, fits_in_memory=fits, reason=reason, pareto=pareto,
        fastest=_best(days, cost_usd, fits), cheapest=_best(cost_usd, days, fits),
        deadline_days=deadline_days, cheapest_within_deadline=None, wall_s=0.0,
        warnings=sweep_notes + sorted(w + plans_note([plans[i] for i in sorted(idx)])
                                      for w, idx in warned.items())
        + [w for w in [small_nvlink_domain_note(session.cluster, int(num_gpus.max(initial=0)))]
           if w],
        profile={"device": store.device_name, "path": str(store.path) if store.path else "",
                 **{k: v for k, v in store.provenance.items() if isinstance(v, (str, int, float))}},
        interval_low_s=iteration * low_f, interval_high_s=iteration * high_f,
        in_calibration_range=in_range, interval_coverage=coverage, interval_note=no_band,
        pruned=pruned, lower_bound_s=lower,
    )
    result.dimensions = dimensions
    if deadline_days is not None:
        result.cheapest_within_deadline = result.cheapest_within(deadline_days)
    result.wall_s = time.perf_counter() - t0
    return result
