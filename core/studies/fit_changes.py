"""What to change so that a plan that does not fit in memory (or is tight) fits.

The question a planner asks after an out-of-memory verdict: which setting would make this
plan fit, and what does it cost in time. :func:`fit_changes` answers it by trying the levers a
Megatron-Core user reaches for, one at a time, then two and three at a time while fewer give
nothing that fits outside the margin (and, once a level has a plan that fits, one change more
on that level's tight plans: those that then fit are kept where faster than every plan that
fits with fewer changes), on the session's model,
precision, global batch and GPU kind (held fixed):

* the distributed optimizer and ZeRO-2/3 (``zero_stage`` 1-3, ``--use-distributed-optimizer``,
  FSDP);
* activation recomputation: ``selective`` (``--recompute-activations``), then ``full``
  (``--recompute-granularity full``) of every layer;
* a smaller micro-batch (``micro_batch_size``: half, and 1);
* sequence parallelism where ``t > 1`` (``--sequence-parallel``);
* moving GPUs from data parallelism to tensor (within a node), pipeline or context
  parallelism, by any factor that divides d (the same GPU count), or a larger expert-parallel
  size;
* with more GPUs: twice the pipeline or tensor parallel size at the same data-parallel size
  (tried only when nothing at the same GPU count fits; the rows' ``num_gpus`` say so).

Each candidate is checked by the plan rules (:func:`core.plan.rules.validate`), by the graph
size ``vtrain simulate`` holds (:func:`core.sim.simulate.graph_too_large`) and, when
Megatron-LM runs the session's plan, by Megatron-LM's own start-up checks
(:func:`core.io.megatron.export.megatron_refusal`): a plan any of them refuses is never
proposed. Its memory comes from the same model and verdict as the report
(:func:`core.sim.simulate.stage_memory`, :func:`core.sim.simulate.memory_verdict`,
:func:`core.sim.report.memory_verdict`), and each one that fits is timed by the sweep's solver
(:func:`core.studies.sweep.batch.solve_batch`: the same iteration time as ``vtrain simulate``).
It is a neighbourhood of the plan, not a search: ``vtrain sweep`` finds the best plan.

When nothing at the session's GPU count fits (within the levers), :func:`fewest_gpus` says how
many GPUs of the same kind it takes: the session's count times 1, 2, 4, ... (up to
:data:`FEWEST_GPUS_MAX_FACTOR` times, at most :data:`FEWEST_GPUS_MAX`) until a plan the levers
reach fits, then the counts between that one and half of it in whole hosts
(:func:`fewest_gpus_step`), each count's plans with the model states sharded as far as the
levers and the session's framework allow and the fewest activations (memory only, nothing
timed), and a lower bound from the model states alone (:func:`state_lower_bound_gpus`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from core import schedules as pipeline_schedules
from core.model.counts import num_parameters
from core.model.fp8 import fp8_gathers_params
from core.model.memory import bytes_per_parameter, nccl_buffer_bytes, process_terms_of
from core.plan.cluster import gpus_per_host
from core.plan.rules import validate
from core.plan.parallel import ParallelPlan, plan_key
from core.plan.session import Session
from core.sim.op_times import num_chunks
from core.sim.report import memory_verdict as report_verdict, memory_verdict_text
from core.sim.simulate import graph_too_large, memory_verdict, session_profile, stage_memory
from core.io.megatron.export import megatron_refusal
from core.studies.sweep.batch import solve_batch
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.splits import (SPLIT_FLAG_FIELDS, pipeline_splits, split_flag_options,
                                      split_flags_for, uneven_split_flags)

__all__ = ["FitChange", "FitChanges", "FewestGpus", "fit_changes", "fewest_gpus",
           "state_lower_bound_gpus", "LEVERS"]

#: Recomputation modes from least to most memory saved (and time spent).
_RECOMPUTE_ORDER = ("none", "selective_op", "selective", "full")


@dataclass(frozen=True)
class FitChange:
    """One changed plan and its figures.

    Attributes
    ----------
    changes : tuple of (field, old value, new value)
        The plan fields that differ from the session's plan, in :class:`ParallelPlan`'s order.
    plan : ParallelPlan
    verdict : str
        ``"fits"``, ``"tight"`` or ``"does not fit"`` (:func:`core.sim.report.memory_verdict`).
    max_memory_per_gpu_bytes : float
        The largest stage's modelled need per GPU, bytes (the whole process).
    iteration_time_s : float
        Simulated iteration time, seconds (every row fits or is tight, and is timed).
    num_gpus : int
    levers : int
        How many of the levers (:data:`LEVERS`, :data:`MORE_GPU_LEVERS`) were applied: 1 to
        :data:`MAX_LEVERS` (a lever may change several fields: twice the pipeline size and half
        the data-parallel).
    """

    changes: tuple[tuple[str, Any, Any], ...]
    plan: ParallelPlan
    verdict: str
    max_memory_per_gpu_bytes: float
    iteration_time_s: float
    num_gpus: int
    levers: int = 1

    @property
    def text(self) -> str:
        """The changes as ``field old -> new`` joined by ``", "``."""
        return ", ".join(f"{f} {_value(a)} -> {_value(b)}" for f, a, b in self.changes)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: changes, plan text, verdict, need (bytes and GiB), time, GPUs."""
        return {"changes": [{"field": f, "from": a, "to": b} for f, a, b in self.changes],
                "text": self.text, "plan": self.plan.label(), "verdict": self.verdict,
                "max_memory_per_gpu_bytes": self.max_memory_per_gpu_bytes,
                "max_memory_per_gpu_gib": self.max_memory_per_gpu_bytes / 2**30,
                "iteration_time_s": self.iteration_time_s, "num_gpus": self.num_gpus,
                "levers": self.levers}


#: The plan fields :meth:`FewestGpus.as_dict` gives apart (what :func:`fewest_gpus` sets).
_FEWEST_GPUS_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel",
                       "data_parallel", "expert_parallel", "micro_batch_size", "recompute",
                       "zero_stage")


@dataclass(frozen=True)
class FewestGpus:
    """The fewest GPUs of the session's kind at which its model fits (:func:`fewest_gpus`).

    Attributes
    ----------
    num_gpus : int or None
        The fewest GPU count tried at which a plan fits; None when none up to
        :attr:`max_gpus` does (:attr:`reason` says why).
    plan : ParallelPlan or None
        A plan that fits there (:func:`fewest_gpus` says which; None with ``num_gpus``).
    verdict : str or None
        Its verdict, ``"fits"`` or ``"tight"`` (:func:`core.sim.report.memory_verdict`).
    max_memory_per_gpu_bytes : float or None
        Its largest stage's modelled need per GPU, bytes (the whole process).
    capacity_bytes : float
        The GPU's memory, bytes.
    session_gpus : int
        The session plan's GPU count (the counts tried are it times 1, 2, 4, ..., then those
        in between, see ``step_gpus``).
    max_gpus : int
        The most GPUs tried (the cap: :data:`FEWEST_GPUS_MAX_FACTOR` times ``session_gpus``,
        at most :data:`FEWEST_GPUS_MAX`).
    lower_bound_gpus : int or None
        :func:`state_lower_bound_gpus`: no fewer GPUs can hold the model states with the
        process's fixed terms; None when those terms alone exceed the GPU's memory.
    tried : int
        Valid plans whose memory was computed.
    reason : str
        Why nothing fits up to ``max_gpus`` ("" when a count fits).
    verdict_text : str
        The plan's verdict with its figures, the report's words
        (:func:`core.sim.report.memory_verdict_text`: ``"fits: 63.7 of 80.0 GiB"``); "" with
        ``num_gpus`` None.
    below_gpus : int or None
        The largest count tried below ``num_gpus``, at which no plan fits (None when
        ``num_gpus`` is the session's own count or None).
    step_gpus : int
        The step of the counts tried between the doubled count that fits and half of it
        (:func:`fewest_gpus_step`; 0 when none were tried there).
    """

    num_gpus: int | None
    plan: ParallelPlan | None
    verdict: str | None
    max_memory_per_gpu_bytes: float | None
    capacity_bytes: float
    session_gpus: int
    max_gpus: int
    lower_bound_gpus: int | None
    tried: int
    reason: str = ""
    verdict_text: str = ""
    below_gpus: int | None = None
    step_gpus: int = 0

    @property
    def text(self) -> str:
        """One line: the count, the plan and its memory, or why nothing fits up to the cap."""
        bound = ("" if self.lower_bound_gpus is None else
                 f"; the model states alone need at least {self.lower_bound_gpus:,} GPUs")
        if self.num_gpus is None:
            return self.reason
        before = (f"; {self.below_gpus:,} do not" if self.below_gpus is not None else
                  " (the plan's own GPU count, with more changes combined)"
                  if self.num_gpus == self.session_gpus else "")
        return (f"{self.num_gpus:,} GPUs (this plan has {self.session_gpus:,}) with "
                f"{self.plan.label()}, {self.verdict_text}{before}{bound}")

    @property
    def counts_text(self) -> str:
        """Which GPU counts were tried, in words: ``"the plan's 8 times 1, 2, 4, ... up to
        128, then every 8 in between"``."""
        top = self.max_gpus if self.num_gpus is None else self.num_gpus
        doubled = f"the plan's {self.session_gpus:,} times 1, 2, 4, ... up to {top:,}"
        if self.step_gpus:
            return f"{doubled}, then every {self.step_gpus:,} in between"
        return doubled

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the count, the plan (text and sizes), its verdict and need (bytes and
        GiB), the cap, the lower bound, the plans sized and the reason; the plan's fields are
        null when nothing fits up to the cap."""
        pl, need = self.plan, self.max_memory_per_gpu_bytes
        sizes = {f: getattr(pl, f) if pl is not None else None for f in _FEWEST_GPUS_FIELDS}
        return {"num_gpus": self.num_gpus, "plan": pl.label() if pl is not None else None,
                **sizes, "verdict": self.verdict, "max_memory_per_gpu_bytes": need,
                "max_memory_per_gpu_gib": need / 2**30 if need is not None else None,
                "capacity_bytes": self.capacity_bytes, "session_gpus": self.session_gpus,
                "max_gpus": self.max_gpus, "lower_bound_gpus": self.lower_bound_gpus,
                "tried": self.tried, "reason": self.reason, "verdict_text": self.verdict_text,
                "below_gpus": self.below_gpus, "step_gpus": self.step_gpus,
                "counts_tried": self.counts_text, "text": self.text}


@dataclass(frozen=True)
class FitChanges:
    """What :func:`fit_changes` found.

    Attributes
    ----------
    verdict : str
        The session plan's own verdict.
    iteration_time_s : float
        The session plan's iteration time, seconds (by the same solver as the rows).
    rows : list of FitChange
        The changed plans that fit (``"fits"`` first, then ``"tight"``), at the session's GPU
        count first, each group by iteration time; only the fewest changes that fit (one
        when any single change fits, else two, else three).
    tried : int
        Valid changed plans whose memory was computed.
    held : str
        What was held fixed.
    fewest_gpus : FewestGpus or None
        How many GPUs it takes (:func:`fewest_gpus`), looked for only when no changed plan
        at the session's GPU count fits (None otherwise).
    """

    verdict: str
    iteration_time_s: float
    rows: list[FitChange]
    tried: int
    held: str
    fewest_gpus: FewestGpus | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``fewest_gpus`` null when it was not looked for)."""
        return {"verdict": self.verdict, "iteration_time_s": self.iteration_time_s,
                "tried": self.tried, "held": self.held,
                "changes": [r.as_dict() for r in self.rows],
                "fewest_gpus": (self.fewest_gpus.as_dict() if self.fewest_gpus is not None
                                else None)}


def _value(v: Any) -> str:
    return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


Lever = Callable[[ParallelPlan, Session], list[ParallelPlan]]


def _factors(pl: ParallelPlan) -> list[int]:
    """2, 4, 8, ...: the factors by which a parallel size can grow at the data-parallel
    size's expense (those that divide ``d``)."""
    out, f = [], 2
    while pl.data_parallel % f == 0:
        out.append(f)
        f *= 2
    return out


def _zero(z: int) -> Lever:
    return lambda pl, s: [dataclasses.replace(pl, zero_stage=z)] if pl.zero_stage < z else []


def _recompute(mode: str) -> Lever:
    def f(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
        cur = pl.recompute if pl.recompute in _RECOMPUTE_ORDER else "none"
        whole = mode == "full" and pl.recompute == "full" and pl.recompute_num_layers is not None
        if _RECOMPUTE_ORDER.index(cur) >= _RECOMPUTE_ORDER.index(mode) and not whole:
            return []
        return [dataclasses.replace(pl, recompute=mode, recompute_num_layers=None,
                                    recompute_modules=None)]
    return f


def _micro_batch(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    """Half the micro-batch, and 1."""
    sizes = dict.fromkeys(b for b in (pl.micro_batch_size // 2, 1) if 1 <= b < pl.micro_batch_size)
    return [dataclasses.replace(pl, micro_batch_size=b) for b in sizes]


def _sequence_parallel(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    if pl.tensor_parallel < 2 or pl.sequence_parallel:
        return []
    return [dataclasses.replace(pl, sequence_parallel=True)]


def _split(pl: ParallelPlan, s: Session) -> ParallelPlan:
    """``pl`` (a new pipeline size) split over its stages as a Megatron-Core user would: with
    the embedding / loss slot flags where its layers alone do not split, or the session's
    flags off where only the layers do (:func:`core.studies.sweep.splits.split_flags_for`),
    else without interleaving with uneven first and last stages and the flags off
    (:func:`core.studies.sweep.splits.pipeline_splits`, the first of them); the session's own
    first / last stages belong to its own pipeline size."""
    options = split_flag_options(s.plan)
    interleaved = num_chunks(pl) > 1 and pipeline_schedules.get(pl.schedule).uses_virtual_stages
    flags = split_flags_for(s.model.num_layers, options, pl.pipeline_parallel * num_chunks(pl),
                            interleaved)
    new = dataclasses.replace(pl, first_stage_layers=None, last_stage_layers=None,
                              **dict(zip(SPLIT_FLAG_FIELDS, flags[0])))
    if num_chunks(new) == 1:
        even = dataclasses.replace(s, plan=dataclasses.replace(
            s.plan, first_stage_layers=None, last_stage_layers=None))
        splits = pipeline_splits(even, [new.pipeline_parallel]).get(new.pipeline_parallel)
        if splits:
            new = dataclasses.replace(new, first_stage_layers=splits[0][0],
                                      last_stage_layers=splits[0][1],
                                      **dict(zip(SPLIT_FLAG_FIELDS, uneven_split_flags(options))))
    return new


def _tensor(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    """t times 2, 4, ... from d, within a node (across nodes it is valid and slow)."""
    return [dataclasses.replace(pl, tensor_parallel=f * pl.tensor_parallel,
                                data_parallel=pl.data_parallel // f, sequence_parallel=True)
            for f in _factors(pl) if f * pl.tensor_parallel <= s.cluster.gpus_per_node]


def _pipeline(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    """p times 2, 4, ... from d."""
    return [_split(dataclasses.replace(pl, pipeline_parallel=f * pl.pipeline_parallel,
                                       data_parallel=pl.data_parallel // f), s)
            for f in _factors(pl)]


def _context(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    """cp times 2, 4, ... from d."""
    return [dataclasses.replace(pl, context_parallel=f * pl.context_parallel,
                                data_parallel=pl.data_parallel // f) for f in _factors(pl)]


def _expert(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    """ep times 2, 4, ... (carved out of d*cp, as Megatron-Core does: the GPU count stays)."""
    if not s.model.num_experts:
        return []
    out, f = [], 2
    while f * pl.expert_parallel <= s.model.num_experts:
        out.append(dataclasses.replace(pl, expert_parallel=f * pl.expert_parallel))
        f *= 2
    return out


def _more_pipeline(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    return [_split(dataclasses.replace(pl, pipeline_parallel=2 * pl.pipeline_parallel), s)]


def _more_tensor(pl: ParallelPlan, s: Session) -> list[ParallelPlan]:
    if 2 * pl.tensor_parallel > s.cluster.gpus_per_node:
        return []
    return [dataclasses.replace(pl, tensor_parallel=2 * pl.tensor_parallel,
                                sequence_parallel=True)]


#: The levers at the session's GPU count, in the order a Megatron-Core user tries them; each
#: gives its changed plans (a parallel size by every factor that divides d is one lever).
LEVERS: tuple[Lever, ...] = (
    _zero(1), _zero(2), _zero(3), _recompute("selective"), _recompute("full"), _micro_batch,
    _sequence_parallel, _tensor, _pipeline, _context, _expert)
#: The levers that add GPUs (tried when none of :data:`LEVERS`, up to :data:`MAX_LEVERS`
#: combined, fits).
MORE_GPU_LEVERS: tuple[Lever, ...] = (_more_pipeline, _more_tensor)

#: Most levers combined (each level is tried only when the one before has nothing that fits).
MAX_LEVERS = 3
#: Most changed plans timed (those that fit outside the margin first, then by fewest levers
#: and least memory).
MAX_TIMED = 40
#: Plans of one level (the least memory first) that the next level grows from.
BEAM = 24

_HELD = ("the model, precision, global batch, GPU kind and every other plan field; "
         "more GPUs only when nothing at the plan's GPU count fits")


def _changes(a: ParallelPlan, b: ParallelPlan) -> tuple[tuple[str, Any, Any], ...]:
    return tuple((f.name, getattr(a, f.name), getattr(b, f.name))
                 for f in dataclasses.fields(ParallelPlan)
                 if getattr(a, f.name) != getattr(b, f.name))


def _verdict_fn(session: Session, store, cancel: Any
                ) -> Callable[[ParallelPlan], tuple[str, float]]:
    """``verdict_of(plan)``: ``(verdict, need)`` of ``plan`` on ``session``'s model and GPU, the
    report's (:func:`core.sim.simulate.stage_memory`, :func:`core.sim.simulate.memory_verdict`,
    :func:`core.sim.report.memory_verdict`; need in bytes per GPU, the largest stage's whole
    process), checking ``cancel`` first."""
    capacity = float(store.memory_bytes)
    margin = float(session.cluster.memory_reserve_fraction)

    def verdict_of(pl: ParallelPlan) -> tuple[str, float]:
        check_cancelled(cancel)
        memory = stage_memory(dataclasses.replace(session, plan=pl), store)
        need, fits, _ = memory_verdict(memory, capacity)
        return report_verdict(need, capacity, margin, fits), need
    return verdict_of


# --------------------------------------------------------------------------- fewest GPUs

#: The most times the session's GPU count :func:`fewest_gpus` tries (1, 2, 4, ... times).
FEWEST_GPUS_MAX_FACTOR = 64
#: The most GPUs :func:`fewest_gpus` tries.
FEWEST_GPUS_MAX = 2**17
#: The most counts :func:`fewest_gpus` tries between the doubled count that fits and half of it.
FEWEST_GPUS_BETWEEN = 16


def fewest_gpus_step(cluster, low: int, high: int) -> int:
    """The step of the GPU counts :func:`fewest_gpus` tries between ``low`` (no plan fits)
    and ``high`` (one does): whole hosts (:func:`core.plan.cluster.gpus_per_host`: 8 on an HGX
    node, 4 on a GB200 compute tray) once ``low`` is a host or more, else single GPUs, times
    the least whole number that keeps them at most :data:`FEWEST_GPUS_BETWEEN` (2,048 to
    4,096 H100s: every 128)."""
    unit = gpus_per_host(cluster) if low >= gpus_per_host(cluster) else 1
    return unit * max(1, math.ceil((high - low) / unit / FEWEST_GPUS_BETWEEN))


def state_lower_bound_gpus(session: Session, capacity_bytes: float) -> int | None:
    """The fewest GPUs that can hold ``session``'s model states with the process's fixed terms.

    Every parameter's weights, gradients and optimizer state are held at least once over the
    ``N`` GPUs (:func:`core.model.memory.bytes_per_parameter` without ZeRO: ``e + g +
    optimizer`` bytes, 18 for bf16 with fp32 gradients; the weights left out with
    ``fp8_param_gather``, whose compute weights are FP8), so the largest GPU holds at least
    :func:`core.model.counts.num_parameters` times that over ``N``; on top every GPU holds the
    process's fixed terms (:func:`core.model.memory.process_terms_of`: the GEMM workspaces, the
    CUDA context and, with ``N > 1``, at least one NCCL communicator's buffers,
    :func:`core.model.memory.nccl_buffer_bytes`). The result is the least ``N`` with
    ``states / N + fixed <= capacity_bytes`` (the fit leaves the allocator's reserve out:
    :func:`core.sim.simulate.memory_verdict`). Activations, ZeRO-3's gathered layers, FP8
    copies and the stages' imbalance are left out: no plan on fewer GPUs fits, and a plan on
    this many need not.

    Returns
    -------
    int or None
        The bound (1 or more); None when the fixed terms alone exceed ``capacity_bytes``.
    """
    plan = session.plan
    w, g, o = bytes_per_parameter(dataclasses.replace(plan, zero_stage=0))
    if fp8_gathers_params(plan):
        w = 0.0
    states = num_parameters(session.model) * (w + g + o)

    def fixed(one_communicator: bool) -> float:
        # the fewest communicators a plan of N > 1 GPUs opens: one (a data-parallel group)
        nccl = nccl_buffer_bytes(dataclasses.replace(
            plan, tensor_parallel=1, pipeline_parallel=1, context_parallel=1, expert_parallel=1,
            data_parallel=2)) if one_communicator else 0.0
        terms = process_terms_of(np.zeros(1), nccl)
        return float(terms["workspace"][0] + terms["cuda_context"][0] + terms["nccl_buffers"][0])

    if states + fixed(False) <= capacity_bytes:
        return 1
    room = capacity_bytes - fixed(True)
    if room <= 0:
        return None
    return max(2, math.ceil(states / room))


def _fewest_gpus_candidates(session: Session, t: int, p: int, cp: int, d: int, megatron: bool
                      ) -> list[ParallelPlan]:
    """The session's plans with sizes ``t, p, cp, d`` as the levers set them (a new pipeline
    size split by :func:`_split`; sequence parallelism where ``t > 1``), full recomputation of
    every layer and micro-batch 1: for each expert-parallel size (the session's times 1, 2, 4,
    ... up to the experts), the one with the highest ZeRO stage (3 down to 0, whatever the
    session's: ZeRO-3 may be refused with pipelining where ZeRO-1 is not) that passes the plan
    rules (and Megatron-LM's checks with ``megatron``); a larger micro-batch only where
    simulate would not hold the graph at 1. Empty when none passes. Which needs the least
    memory is the caller's to size: more experts per GPU with full sharding can beat a larger
    ep with ZeRO-1."""
    base = session.plan
    pl = dataclasses.replace(base, tensor_parallel=t, pipeline_parallel=p, context_parallel=cp,
                             data_parallel=d, sequence_parallel=base.sequence_parallel or t > 1,
                             recompute="full", recompute_num_layers=None, recompute_modules=None)
    if p != base.pipeline_parallel:
        pl = _split(pl, session)
    eps = [base.expert_parallel]
    if session.model.num_experts:
        while 2 * eps[-1] <= session.model.num_experts:
            eps.append(2 * eps[-1])
    sizes = [1]
    while 2 * sizes[-1] <= base.micro_batch_size:
        sizes.append(2 * sizes[-1])
    out = []
    for ep in reversed(eps):
        found = None
        for zero in range(3, -1, -1):
            for b in sizes:
                new = dataclasses.replace(pl, expert_parallel=ep, zero_stage=zero,
                                          micro_batch_size=b)
                changed = dataclasses.replace(session, plan=new)
                if validate(changed, sections=("plan",), model_checked=True):
                    break  # a larger micro-batch passes no better
                if graph_too_large(session.model, new):
                    continue
                if megatron and megatron_refusal(changed) is not None:
                    break
                found = new
                break
            if found is not None:
                out.append(found)
                break
    return out


def _fewest_gpus_plans(session: Session, num_gpus: int, megatron: bool, cancel: Any
                       ) -> list[ParallelPlan]:
    """The plans of ``num_gpus`` GPUs :func:`fewest_gpus` sizes: ``t`` and ``cp`` the
    session's times 1, 2, 4, ... (as the levers move them; ``t`` up to a node), ``p`` every
    size from the session's up to the layers that divides what ``t`` leaves (p=6 on 48 GPUs
    with t=8), ``d`` the rest (:func:`_fewest_gpus_candidates` each); ``cancel`` checked
    before each."""
    base = session.plan
    node = max(session.cluster.gpus_per_node, base.tensor_parallel)
    most_p = max(base.pipeline_parallel, session.model.num_layers)
    out, seen = [], set()
    t = base.tensor_parallel
    while t <= node and num_gpus % t == 0:
        for p in range(base.pipeline_parallel, min(most_p, num_gpus // t) + 1):
            if (num_gpus // t) % p:
                continue
            cp = base.context_parallel
            while num_gpus % (t * p * cp) == 0:
                check_cancelled(cancel)
                for pl in _fewest_gpus_candidates(session, t, p, cp, num_gpus // (t * p * cp),
                                            megatron):
                    if plan_key(pl) not in seen:
                        seen.add(plan_key(pl))
                        out.append(pl)
                cp *= 2
        t *= 2
    return out


def fewest_gpus(session: Session, store=None, *, cancel: Any = None,
                want: tuple[str, ...] = ("fits", "tight")) -> FewestGpus:
    """The fewest GPUs of ``session``'s kind at which its model fits, with a plan that does.

    The counts tried are the session's GPU count times 1, 2, 4, ... up to
    :data:`FEWEST_GPUS_MAX_FACTOR` times (at most :data:`FEWEST_GPUS_MAX`) until one fits,
    then those between it and half of it in steps of :func:`fewest_gpus_step` (whole hosts),
    those below :func:`state_lower_bound_gpus` skipped (they cannot hold the model states). At
    each count every plan the levers reach is sized (:func:`_fewest_gpus_plans`): the tensor
    and context parallel sizes the session's times a power of 2 (``t`` up to a node), every
    pipeline parallel size from the session's that divides the count, the data-parallel size
    the rest, each with the least activations (full recomputation of every layer, micro-batch 1,
    sequence parallelism) and the model states sharded as far as the session's framework
    allows (ZeRO-3 / FSDP where the plan rules and, for a plan Megatron-LM runs, Megatron-LM
    take it, else the distributed optimizer over ``d`` with the weights split by ``t*p``; each
    expert-parallel size) (:func:`_fewest_gpus_candidates`). Memory only (the report's
    model and verdict), nothing timed; held: the model, precision, global batch, GPU kind and
    every other plan field.

    Parameters
    ----------
    session : Session
        A valid session.
    store : ProfileStore, optional
        Its profile (:func:`core.sim.simulate.session_profile` when None): the GPU's memory.
    cancel : threading.Event or callable returning bool, optional
        Checked before each plan is built and sized.
    want : tuple of str
        The verdicts that count as fitting: ``("fits", "tight")``, or ``("fits",)`` for a plan
        that is tight already (outside the margin).

    Returns
    -------
    FewestGpus
        The first count with a plan whose verdict is in ``want`` and, of those there, one that
        fits outside the margin first, then the one with the largest data-parallel size (the
        least model parallelism), then the least memory per GPU; ``num_gpus`` None with the
        reason when no count up to the cap has one.

    Raises
    ------
    core.studies.sweep.cancel.SweepCancelled
        ``cancel`` was set.
    """
    store = store if store is not None else session_profile(session)
    capacity = float(store.memory_bytes)
    verdict_of = _verdict_fn(session, store, cancel)
    first = session.plan.num_gpus
    most = max(first, min(FEWEST_GPUS_MAX_FACTOR * first, FEWEST_GPUS_MAX))
    bound = state_lower_bound_gpus(session, capacity)
    megatron = megatron_refusal(session) is None
    tried = 0

    def best_at(n: int) -> tuple[str, float, ParallelPlan] | None:
        nonlocal tried
        plans = _fewest_gpus_plans(session, n, megatron, cancel)
        tried += len(plans)
        ok = [(v, need, pl) for v, need, pl in ((*verdict_of(pl), pl) for pl in plans)
              if v in want]
        # fits before tight, then the most data parallelism (the least model parallelism,
        # usually the fastest), then the least memory
        return min(ok, key=lambda r: (r[0] != "fits", -r[2].data_parallel, r[1]), default=None)

    n, found = first, None
    while bound is not None and n <= most and found is None:
        found = best_at(n) if n >= bound else None
        n = n if found is not None else 2 * n
    if found is not None:
        below, step = (n // 2 if n > first else None), 0
        if below is not None:
            # the counts between, in whole hosts (those below the bound cannot hold the states)
            step = fewest_gpus_step(session.cluster, below, n)
            between = range(below + step, n, step)
            step = step if between else 0
            for m in between:
                at = best_at(m) if m >= bound else None
                if at is not None:
                    n, found = m, at
                    break
                below = m
        v, need, pl = found
        text = memory_verdict_text(need, capacity,
                                   float(session.cluster.memory_reserve_fraction), True)
        return FewestGpus(n, pl, v, need, capacity, first, most, bound, tried,
                          verdict_text=text, below_gpus=below, step_gpus=step)
    gpus = f"{most:,} GPUs of {session.cluster.gpu} ({most // first:,} times this plan's {first:,})"
    if bound is None:
        reason = (f"nothing fits on any number of {session.cluster.gpu}: the process's fixed "
                  "terms alone (CUDA context, GEMM workspaces, NCCL buffers) exceed its "
                  f"{capacity / 2**30:.1f} GiB")
    elif bound > most:
        reason = (f"nothing fits on up to {gpus}: the model states alone need at least "
                  f"{bound:,} GPUs")
    else:
        how = "outside the margin" if want == ("fits",) else "in memory"
        reason = (f"nothing fits {how} on up to {gpus} with the model states sharded as far "
                  f"as the levers allow and the least activations ({tried:,} plans sized); "
                  f"the model states alone need at least {bound:,} GPUs")
    return FewestGpus(None, None, None, None, capacity, first, most, bound, tried, reason)


def fit_changes(session: Session, store=None, *, max_rows: int = 8,
                cancel: Any = None) -> FitChanges:
    """The plans the fewest changes away from ``session``'s (at most :data:`MAX_LEVERS`) that
    fit in memory, timed.

    Parameters
    ----------
    session : Session
        A valid session (:func:`core.plan.rules.check` passed).
    store : ProfileStore, optional
        Its profile (:func:`core.sim.simulate.session_profile` when None).
    max_rows : int
        Most rows kept (the fastest).
    cancel : threading.Event or callable returning bool, optional
        Checked before each plan's memory or time (the window's newer request sets it).

    Returns
    -------
    FitChanges
        Empty ``rows`` when nothing within three changes (or with twice the GPUs) fits; a
        plan that fits outside the margin already gets no rows (nothing to change). When no
        changed plan at the session's GPU count fits, ``fewest_gpus`` says how many GPUs it
        takes (:func:`fewest_gpus`, the same ``cancel``).

    Raises
    ------
    core.studies.sweep.cancel.SweepCancelled
        ``cancel`` was set.
    """
    store = store if store is not None else session_profile(session)
    base = session.plan
    cache: dict = {}
    verdict_of = _verdict_fn(session, store, cancel)

    def time_of(pl: ParallelPlan) -> float:
        check_cancelled(cancel)
        key = (pl.pipeline_parallel, pl.num_microbatches, pl.schedule, num_chunks(pl))
        t, _, _, _ = solve_batch(session.model, session.cluster, session.cost, key, [pl], store,
                                 cache, fits=[True])
        return float(t[0])

    own, _ = verdict_of(base)
    base_time = time_of(base)
    if own == "fits":
        return FitChanges(own, base_time, [], 0, _HELD)
    megatron = megatron_refusal(session) is None  # then only plans Megatron-LM runs too
    seen = {plan_key(base)}
    tried = 0
    want = ("fits",) if own == "tight" else ("fits", "tight")

    def candidates(plans: list[ParallelPlan], levers) -> list[ParallelPlan]:
        out = []
        for pl in plans:
            for lever in levers:
                for new in lever(pl, session):
                    key = plan_key(new)
                    if key in seen:
                        continue
                    seen.add(key)
                    changed = dataclasses.replace(session, plan=new)
                    if (validate(changed, sections=("plan",), model_checked=True)
                            or graph_too_large(session.model, new)):
                        continue
                    if megatron and megatron_refusal(changed) is not None:
                        continue
                    out.append(new)
        return out

    def verdicts(plans: list[ParallelPlan]) -> list[tuple[str, float, ParallelPlan]]:
        nonlocal tried
        tried += len(plans)
        return [(*verdict_of(pl), pl) for pl in plans]

    found: list[tuple[str, float, ParallelPlan, int]] = []
    level = [base]
    closer = 0  # the level of the one-more-change plans, 0: none
    for levers in range(1, MAX_LEVERS + 1):
        rows = verdicts(candidates(level, LEVERS))
        found += [(v, need, pl, levers) for v, need, pl in rows if v in want]
        if any(r[0] == "fits" for r in found) or not rows:
            if levers < MAX_LEVERS and rows:
                # one change more from this level's tight plans, which are nearly there and
                # often faster than its plans that fit (recomputation off and micro-batch 1
                # tight; with selective recomputation too, it fits at a fraction of full
                # recomputation's cost): only what then fits outside the margin is kept
                near = [pl for v, _, pl in rows if v == "tight"][:BEAM]
                found += [(v, need, pl, levers + 1)
                          for v, need, pl in verdicts(candidates(near, LEVERS)) if v == "fits"]
                closer = levers + 1
            break
        # the next level grows from this one's plans that need the least memory (a beam)
        level = [pl for _, _, pl in sorted(rows, key=lambda r: r[1])[:BEAM]]
    fewest = None
    if not found:  # how many GPUs it takes, then twice the pipeline or tensor size
        fewest = fewest_gpus(session, store, cancel=cancel, want=want)
        rows = verdicts(candidates([base], MORE_GPU_LEVERS))
        found = [(v, need, pl, 1) for v, need, pl in rows if v in want]
    found.sort(key=lambda r: (r[0] != "fits", r[3], r[1]))  # what is timed, if not all
    # the one-more-change plans keep a quarter of the timing (the least memory first)
    more = [r for r in found if closer and r[3] == closer][:MAX_TIMED // 4]
    timed = [r for r in found if not (closer and r[3] == closer)][:MAX_TIMED - len(more)] + more
    out = [FitChange(_changes(base, pl), pl, v, need, time_of(pl), pl.num_gpus, levers)
           for v, need, pl, levers in timed]
    if closer:  # a change more only where it beats every plan that fits with fewer
        best = min((r.iteration_time_s for r in out if r.levers < closer and r.verdict == "fits"),
                   default=math.inf)
        out = [r for r in out if r.levers < closer or r.iteration_time_s < best]
    out.sort(key=lambda r: (r.num_gpus != base.num_gpus, r.verdict != "fits",
                            r.iteration_time_s))
    held = _HELD + ("; only plans Megatron-LM runs, as it runs this one" if megatron else "")
    return FitChanges(own, base_time, out[:max_rows], tried, held, fewest)
