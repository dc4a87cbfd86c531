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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from core.plan.rules import validate
from core.plan.parallel import ParallelPlan, plan_key
from core.plan.session import Session
from core.sim.op_times import num_chunks
from core.sim.report import memory_verdict as report_verdict
from core.sim.simulate import graph_too_large, memory_verdict, session_profile, stage_memory
from core.io.megatron.export import megatron_refusal
from core.studies.sweep.batch import solve_batch
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.space import (SPLIT_FLAG_FIELDS, pipeline_splits, split_flag_options,
                                     split_flags_for, uneven_split_flags)

__all__ = ["FitChange", "FitChanges", "fit_changes", "LEVERS"]

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
    """

    verdict: str
    iteration_time_s: float
    rows: list[FitChange]
    tried: int
    held: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"verdict": self.verdict, "iteration_time_s": self.iteration_time_s,
                "tried": self.tried, "held": self.held,
                "changes": [r.as_dict() for r in self.rows]}


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
    flags off where only the layers do (:func:`core.studies.sweep.space.split_flags_for`),
    else without interleaving with uneven first and last stages and the flags off
    (:func:`core.studies.sweep.space.pipeline_splits`, the first of them); the session's own
    first / last stages belong to its own pipeline size."""
    options = split_flag_options(s.plan)
    flags = split_flags_for(s.model.num_layers, options, pl.pipeline_parallel * num_chunks(pl))
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
        plan that fits outside the margin already gets no rows (nothing to change).

    Raises
    ------
    core.studies.sweep.cancel.SweepCancelled
        ``cancel`` was set.
    """
    store = store if store is not None else session_profile(session)
    capacity = float(store.memory_bytes)
    margin = float(session.cluster.memory_reserve_fraction)
    base = session.plan
    cache: dict = {}

    def verdict_of(pl: ParallelPlan) -> tuple[str, float]:
        check_cancelled(cancel)
        memory = stage_memory(dataclasses.replace(session, plan=pl), store)
        need, fits, _ = memory_verdict(memory, capacity)
        return report_verdict(need, capacity, margin, fits), need

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
    if not found:
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
    return FitChanges(own, base_time, out[:max_rows], tried, held)
