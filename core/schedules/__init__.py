"""Pipeline schedules: one entry per schedule, registered by name.

A schedule says, for each pipeline stage, the order in which that stage runs
its work items. A work item is one phase of one micro-batch on one virtual
chunk of the stage's layers:

* ``F``: the forward of the chunk for the micro-batch;
* ``B``: its backward -- the whole backward for schedules that do not split
  it, the input-gradient part only for those that do (zero-bubble);
* ``W``: the weight-gradient part of the backward (split schedules only).

With ``v`` virtual chunks (interleaved 1F1B), stage ``i`` holds the chunks
``c = 0..v-1`` whose layers form virtual stage ``c*p + i``; the activation
of virtual stage ``k`` goes to virtual stage ``k+1`` (stage ``(i+1) % p``).

Everything that needs a schedule's order reads it here: the graph builder
(:func:`core.sim.graph.build_pipeline_graph`), the sweep's batch solver
(:func:`core.sim.fastpath.pipeline_iteration_times`) and the memory model
(:func:`in_flight_microbatches`). A new schedule is one new class with
:func:`register`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["PHASE_F", "PHASE_B", "PHASE_W", "PHASES", "WorkOrder", "PipelineSchedule",
           "register", "get", "names", "work_order", "work_orders", "in_flight_microbatches",
           "in_flight_all", "schedule_errors"]

PHASE_F, PHASE_B, PHASE_W = 0, 1, 2
#: Phase names, indexed by the phase codes above.
PHASES = ("F", "B", "W")


@dataclass(frozen=True)
class WorkOrder:
    """The program order of one pipeline stage.

    Attributes
    ----------
    phase : int8 array, shape (k,)
        :data:`PHASE_F`, :data:`PHASE_B` or :data:`PHASE_W` per work item.
    microbatch : int32 array, shape (k,)
        Micro-batch 0..m-1 of each item.
    chunk : int32 array, shape (k,)
        Virtual chunk 0..v-1 of each item (0 without interleaving).
    """

    phase: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray

    def __len__(self) -> int:
        return int(self.phase.shape[0])


class PipelineSchedule:
    """Base of the registered schedules.

    Attributes
    ----------
    name : str
        The value of ``plan.schedule``.
    title : str
        The name users know it by, for labels.
    splits_backward : bool
        Whether the backward is split into B (input gradient) and W (weight
        gradient) items.
    uses_virtual_stages : bool
        Whether ``plan.virtual_pipeline_stages`` (v >= 2) applies.
    fast_path : bool
        Whether :func:`core.sim.fastpath.pipeline_iteration_times` may solve it; the
        sweep falls back to the general graph solver otherwise.
    """

    name = ""
    title = ""
    splits_backward = False
    uses_virtual_stages = False
    fast_path = True

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        """Program order of ``stage`` (0..p-1) for ``m`` micro-batches and ``v`` chunks."""
        raise NotImplementedError

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every stage's :meth:`order` at once: ``phase``, ``microbatch``, ``chunk``, int64
        arrays of shape (p, K). This default stacks :meth:`order` stage by stage (ValueError
        when the stages' programs differ in length); schedules override it with one numpy
        pass over all stages (equal arrays; tests compare them)."""
        per = [self.order(p, m, i, v) for i in range(p)]
        if any(len(o) != len(per[0]) for o in per):
            raise ValueError(f"{self.name}: stages have programs of different lengths")
        return tuple(np.stack([getattr(o, a) for o in per]).astype(np.int64)
                     for a in ("phase", "microbatch", "chunk"))

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        """Bubble share of the iteration with uniform stages and free communication, or None
        when it depends on more than p, m and v."""
        return (p - 1) / (m + p - 1)

    def errors(self, p: int, m: int, v: int | None, num_layers: int, extra_slots: int = 0
               ) -> list[tuple[str, str]]:
        """Rules the plan breaks for this schedule: ``(field, message)`` pairs. ``extra_slots``:
        the layer slots of the embedding and the loss when they count in the pipeline split
        (:func:`core.plan.layout.pipeline_split_slots`), 0 to 2. ``num_layers`` None: a custom
        pipeline layout places the layers (``plan.pipeline_model_parallel_layout``), so no
        divisibility rule applies."""
        if v not in (None, 1):
            return [("plan.virtual_pipeline_stages",
                     f"virtual_pipeline_stages={v} needs schedule 'interleaved'; "
                     f"{self.name} has one chunk per stage (leave it empty)")]
        return []


_REGISTRY: dict[str, PipelineSchedule] = {}


def register(cls: type[PipelineSchedule]) -> type[PipelineSchedule]:
    """Class decorator: add a schedule to the registry under ``cls.name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> PipelineSchedule:
    """The schedule registered as ``name``.

    Raises
    ------
    ValueError
        No schedule of that name.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"schedule={name!r} is not one of {', '.join(_REGISTRY)}") from None


def names() -> tuple[str, ...]:
    """Registered schedule names in registration order."""
    return tuple(_REGISTRY)


def _order(phases, mbs, chunks=None) -> WorkOrder:
    phase = np.asarray(phases, np.int8)
    mb = np.asarray(mbs, np.int32)
    chunk = np.zeros_like(mb) if chunks is None else np.asarray(chunks, np.int32)
    for a in (phase, mb, chunk):
        a.setflags(write=False)
    return WorkOrder(phase, mb, chunk)


@register
class GPipe(PipelineSchedule):
    """GPipe (Huang et al. 2019): all forwards, then all backwards.

    With one stage there is no pipeline: Megatron runs each micro-batch's
    forward and backward in turn (``forward_backward_no_pipelining``), so one
    micro-batch is in flight, as with 1F1B.
    """

    name, title = "gpipe", "GPipe"

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        if p == 1:  # no pipeline: Megatron's forward_backward_no_pipelining, one micro-batch at a time
            return OneFOneB().order(p, m, stage, v)
        return _order(np.repeat([PHASE_F, PHASE_B], m), np.concatenate([np.arange(m)] * 2))

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if p == 1:
            return OneFOneB().orders(p, m, v)
        phase = np.broadcast_to(np.repeat(np.array([PHASE_F, PHASE_B], np.int64), m), (p, 2 * m))
        mb = np.broadcast_to(np.tile(np.arange(m, dtype=np.int64), 2), (p, 2 * m))
        return phase.copy(), mb.copy(), np.zeros((p, 2 * m), np.int64)


def _one_f_one_b_all(warm: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """1F1B's order of every stage at once over ``total`` forward items: ``is_backward`` and the
    forward-order index of each of the ``2*total`` items, int64 (p, 2*total), stage ``i``
    with ``warm[i]`` warm-up forwards (as :func:`_one_f_one_b` and :meth:`Interleaved.order`:
    the warm-up forwards, then forward ``warm + j`` and backward ``j`` in turn, then the
    remaining backwards)."""
    w = np.asarray(warm, np.int64)[:, None]                # (p, 1)
    k = np.arange(2 * total, dtype=np.int64)[None, :]      # (1, K)
    steady_end = 2 * total - w                             # first item of the cool-down
    j, odd = (k - w) // 2, (k - w) % 2
    in_steady = (k >= w) & (k < steady_end)
    is_bwd = (k >= steady_end) | (in_steady & (odd == 1))
    idx = np.where(k < w, k, np.where(k >= steady_end, k - total,
                                      np.where(odd == 1, j, w + j)))
    return is_bwd, idx


def _one_f_one_b(p: int, m: int, stage: int) -> tuple[int, np.ndarray, np.ndarray]:
    """1F1B order as ``(warm-up count, is_backward, micro-batch)``."""
    w = min(p - stage - 1, m)
    steady = m - w
    is_bwd = np.concatenate([np.zeros(w, bool), np.tile([False, True], steady), np.ones(w, bool)])
    mb = np.concatenate([np.arange(w), np.stack([np.arange(w, m), np.arange(steady)], 1).ravel(),
                         np.arange(steady, m)])
    return w, is_bwd, mb


@register
class OneFOneB(PipelineSchedule):
    """1F1B, PipeDream-flush (Narayanan et al. 2021, Sec. 2.2).

    Stage ``i`` runs ``min(p-i-1, m)`` warm-up forwards, then one forward and
    one backward in turn, then the remaining backwards; at most ``p-i``
    micro-batches are in flight.
    """

    name, title = "1f1b", "1F1B"

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        _, is_bwd, mb = _one_f_one_b(p, m, stage)
        return _order(np.where(is_bwd, PHASE_B, PHASE_F), mb)

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        is_bwd, mb = _one_f_one_b_all(np.minimum(p - np.arange(p) - 1, m), m)
        return np.where(is_bwd, PHASE_B, PHASE_F), mb, np.zeros_like(mb)


@register
class Interleaved(PipelineSchedule):
    """Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2), in Megatron-Core's order.

    Each stage holds ``v`` chunks of ``L/(p*v)`` layers. Megatron-Core's
    ``forward_backward_pipelining_with_interleaving``: ``m*v`` forward and
    ``m*v`` backward items; warm-up ``(p-i-1)*2 + (v-1)*p`` forwards on stage
    ``i``, capped at ``m*v`` (Megatron-Core ``schedules.get_pp_rank_microbatches``, with
    ``microbatch_group_size_per_vp_stage`` at its default ``p``; the older rule that ran every
    forward first when ``m == p`` is gone from Megatron-Core), then one forward and one backward in
    turn, then the remaining backwards. Item ``k`` in forward order runs chunk
    ``(k mod p*v) // p`` on micro-batch ``(k // (p*v))*p + k mod p``; backward
    items run the chunks in reverse. Megatron requires ``m`` to be a multiple
    of ``p`` for this order. Ideal bubble: ``(p-1)/(v*m)`` of the ideal time.
    """

    name, title = "interleaved", "Interleaved 1F1B"
    uses_virtual_stages = True

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        # bubble (p-1)/(v*m) of the ideal time, i.e. this share of the iteration
        return (p - 1) / (v * m + p - 1)

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        total = m * v
        warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
        k = np.arange(total)
        group, within = k // (p * v), k % (p * v)
        mb = group * p + k % p
        f_chunk = within // p
        b_chunk = v - 1 - f_chunk
        remaining = total - warm
        is_bwd = np.concatenate([np.zeros(warm, bool), np.tile([False, True], remaining),
                                 np.ones(warm, bool)])
        idx = np.concatenate([np.arange(warm),
                              np.stack([np.arange(warm, total), np.arange(remaining)], 1).ravel(),
                              np.arange(remaining, total)])
        return _order(np.where(is_bwd, PHASE_B, PHASE_F), mb[idx],
                      np.where(is_bwd, b_chunk[idx], f_chunk[idx]))

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        total = m * v
        stage = np.arange(p, dtype=np.int64)
        warm = np.minimum((p - stage - 1) * 2 + (v - 1) * p, total)
        k = np.arange(total, dtype=np.int64)
        group, within = k // (p * v), k % (p * v)
        mb = group * p + k % p
        f_chunk = within // p
        b_chunk = v - 1 - f_chunk
        is_bwd, idx = _one_f_one_b_all(warm, total)
        return (np.where(is_bwd, PHASE_B, PHASE_F), mb[idx],
                np.where(is_bwd, b_chunk[idx], f_chunk[idx]))

    def errors(self, p: int, m: int, v: int | None, num_layers: int, extra_slots: int = 0
               ) -> list[tuple[str, str]]:
        errs = []
        if v is None or v < 2:
            return [("plan.virtual_pipeline_stages",
                     f"schedule 'interleaved' needs virtual_pipeline_stages >= 2, got {v!r}")]
        if p < 2:
            errs.append(("plan.pipeline_parallel",
                         "schedule 'interleaved' needs pipeline_parallel_size >= 2"))
        if num_layers is None:  # a custom pipeline layout places the layers
            pass
        elif extra_slots and (num_layers + extra_slots) % (p * v):
            errs.append(("plan.virtual_pipeline_stages",
                         f"num_layers={num_layers} + embedding + loss = {num_layers + extra_slots} "
                         f"layer slots are not divisible by pipeline_parallel_size*"
                         f"virtual_pipeline_stages={p}*{v}={p * v} (Megatron-Core: with "
                         "account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_"
                         "split, (num_layers + embedding + loss) % (p * v) == 0)"))
        elif not extra_slots and num_layers is not None and num_layers % (p * v):
            errs.append(("plan.virtual_pipeline_stages",
                         f"num_layers={num_layers} is not divisible by pipeline_parallel_size*"
                         f"virtual_pipeline_stages={p}*{v}={p * v} (Megatron: layers per "
                         "virtual stage must be whole)"))
        if m % p:
            errs.append(("plan.global_batch_size",
                         f"the interleaved schedule needs the number of micro-batches "
                         f"m=global_batch_size/(data_parallel*micro_batch_size)={m} to be a "
                         f"multiple of pipeline_parallel_size={p} (Megatron's rule)"))
        return errs


@register
class ZeroBubbleH1(PipelineSchedule):
    """ZB-H1 zero-bubble schedule (Qi et al., ICLR 2024, Sec. 3.1).

    The backward is split into B (input gradient, on the critical path
    between stages) and W (weight gradient, free to move). F and B follow
    1F1B; stage ``i`` defers each W by ``i`` micro-batches (the W of
    micro-batch ``j`` runs after the B of micro-batch ``j+i``), which fills
    the cool-down bubble while keeping at most ``p`` micro-batches in flight
    on any stage -- the peak of 1F1B (stage 0). With uniform stages and free
    communication the bubble is ``(p-1)(T_F + T_B - T_W)`` against 1F1B's
    ``(p-1)(T_F + T_B + T_W)``.
    """

    name, title = "zb-h1", "ZB-H1"
    splits_backward = True

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        return None  # depends on T_W / (T_F + T_B)

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        # 1F1B's F and B; the B of micro-batch j >= stage is followed by the W of j - stage
        # (the running W count then equals j - stage, so "j - next_w >= stage" holds exactly
        # there); the W not placed so far close the program.
        _, is_bwd, mb = _one_f_one_b(p, m, stage)
        ins = is_bwd & (mb >= stage)
        copies = 1 + ins.astype(np.int64)
        idx = np.repeat(np.arange(is_bwd.shape[0]), copies)
        phase = np.where(is_bwd, PHASE_B, PHASE_F)[idx]
        mbs = mb[idx]
        is_w = np.zeros(idx.shape[0], bool)
        is_w[(np.cumsum(copies) - 1)[ins]] = True  # the second copy of each B followed by a W
        phase[is_w] = PHASE_W
        mbs[is_w] -= stage
        placed = int(ins.sum())
        return _order(np.concatenate([phase, np.full(m - placed, PHASE_W)]),
                      np.concatenate([mbs, np.arange(placed, m)]))

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # :meth:`order` for every stage at once: each item of 1F1B at its place after the
        # W inserted before it, each inserted W right after its B, the W left over at the end
        stage = np.arange(p, dtype=np.int64)[:, None]
        is_bwd, mb = _one_f_one_b_all(np.minimum(p - stage[:, 0] - 1, m), m)
        ins = is_bwd & (mb >= stage)
        pos = np.cumsum(1 + ins, axis=1) - (1 + ins)  # each 1F1B item's place in its row
        K = 3 * m
        phase = np.full((p, K), PHASE_W, np.int64)
        mbs = np.broadcast_to(np.arange(K, dtype=np.int64) - 2 * m, (p, K)).copy()  # the tail
        rows = np.broadcast_to(stage, pos.shape)
        phase[rows, pos] = np.where(is_bwd, PHASE_B, PHASE_F)
        mbs[rows, pos] = mb
        mbs[rows[ins], pos[ins] + 1] = (mb - stage)[ins]
        return phase, mbs, np.zeros((p, K), np.int64)

    def _order_loop(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        """The rule of :meth:`order` item by item (the reference the tests compare with)."""
        _, is_bwd, mb = _one_f_one_b(p, m, stage)
        phases, mbs = [], []
        next_w = 0
        for bwd, j in zip(is_bwd.tolist(), mb.tolist()):
            phases.append(PHASE_B if bwd else PHASE_F)
            mbs.append(j)
            if bwd and j - next_w >= stage:
                phases.append(PHASE_W)
                mbs.append(next_w)
                next_w += 1
        phases += [PHASE_W] * (m - next_w)
        mbs += list(range(next_w, m))
        return _order(phases, mbs)


@lru_cache(maxsize=256)
def work_order(schedule: str, p: int, m: int, stage: int, v: int = 1) -> WorkOrder:
    """Program order of one stage (cached; the arrays are read-only).

    Parameters
    ----------
    schedule : str
        A registered name (:func:`names`).
    p, m : int
        Pipeline-parallel size and number of micro-batches (>= 1).
    stage : int
        0..p-1.
    v : int
        Virtual chunks per stage (1 unless the schedule uses them).

    Raises
    ------
    ValueError
        Unknown schedule.
    """
    sched = get(schedule)
    return sched.order(p, m, stage, v if sched.uses_virtual_stages else 1)


@lru_cache(maxsize=64)
def work_orders(schedule: str, p: int, m: int, v: int = 1
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Program order of every stage at once (:meth:`PipelineSchedule.orders`): ``phase``,
    ``microbatch``, ``chunk``, int64 arrays of shape (p, K), row ``i`` equal to
    :func:`work_order` of stage ``i`` (cached; read-only). Raises ValueError for an unknown
    schedule."""
    sched = get(schedule)
    out = sched.orders(p, m, v if sched.uses_virtual_stages else 1)
    for a in out:
        a.setflags(write=False)
    return out


@lru_cache(maxsize=1024)
def in_flight_all(schedule: str, p: int, m: int, v: int = 1,
                  chunk_layers: tuple[tuple[int, ...], ...] | None = None) -> tuple[float, ...]:
    """:func:`in_flight_microbatches` of every stage (``chunk_layers``: each stage's chunks'
    layers, or None), from :func:`work_orders` in one pass; the same floats."""
    phase, _, chunk = work_orders(schedule, p, m, v)
    sched = get(schedule)
    release = PHASE_W if sched.splits_backward else PHASE_B
    step = np.where(phase == PHASE_F, 1, np.where(phase == release, -1, 0))
    vv = v if sched.uses_virtual_stages else 1
    out = [float(x) / vv for x in np.cumsum(step, axis=1).max(axis=1).tolist()]
    if vv > 1 and chunk_layers is not None:
        for i, layers in enumerate(chunk_layers):
            if len(set(layers)) > 1 and sum(layers):
                weights = np.asarray(layers, np.int64)[chunk[i]]
                out[i] = float(np.cumsum(step[i] * weights).max()) / float(sum(layers))
    return tuple(out)


@lru_cache(maxsize=1024)
def loss_in_flight(schedule: str, p: int, m: int, v: int = 1) -> int:
    """Peak micro-batches whose loss the last stage has computed and not yet back-propagated:
    the running count of the last stage's forwards of the model's last chunk (chunk ``v - 1``
    of stage ``p - 1``) minus their backwards (B: the loss's gradient is the first step of the
    input-gradient pass, also when the weight gradients are split off), maximised over the
    stage's program. 1F1B, interleaved 1F1B and ZB-H1: 1 (each loss's backward follows its
    forward); GPipe: ``m`` when ``p > 1`` (all forwards run before the first backward).
    Each such micro-batch keeps its cross entropy's saved softmax
    (:func:`core.model.memory.stage_memory_arrays`)."""
    phase, _, chunk = work_orders(schedule, p, m, v)
    vv = v if get(schedule).uses_virtual_stages else 1
    last = chunk[-1] == vv - 1
    step = np.where(last & (phase[-1] == PHASE_F), 1, np.where(last & (phase[-1] == PHASE_B), -1, 0))
    return int(np.cumsum(step).max())


@lru_cache(maxsize=65536)
def in_flight_microbatches(schedule: str, p: int, m: int, stage: int, v: int = 1,
                           chunk_layers: tuple[int, ...] | None = None) -> float:
    """Peak activations a stage holds, in units of one micro-batch through all its layers.

    The running count of items whose forward has run and whose activations
    are not yet freed (by B, or by W when the backward is split), maximised
    over the stage's program, divided by ``v`` since each chunk holds ``1/v``
    of the stage's layers. 1F1B: ``min(p-i, m)``; GPipe: ``m``; interleaved
    (Megatron-Core): ``(warm-up + 1)/v``, Narayanan et al. 2021 Sec. 2.2.2.
    ``chunk_layers`` (length ``v``, the layers of each of the stage's chunks) weighs each
    item by its chunk's layers when the chunks differ (the embedding / loss counted in the
    pipeline split): the peak of layers held over the stage's layers.
    """
    order = work_order(schedule, p, m, stage, v)
    release = PHASE_W if get(schedule).splits_backward else PHASE_B
    step = np.where(order.phase == PHASE_F, 1, np.where(order.phase == release, -1, 0))
    vv = v if get(schedule).uses_virtual_stages else 1
    if vv > 1 and chunk_layers is not None and len(set(chunk_layers)) > 1 and sum(chunk_layers):
        weights = np.asarray(chunk_layers, np.int64)[order.chunk]
        return float(np.cumsum(step * weights).max()) / float(sum(chunk_layers))
    return float(np.cumsum(step).max()) / vv


def schedule_errors(schedule: str, p: int, m: int, v: int | None, num_layers: int,
                    extra_slots: int = 0) -> list[tuple[str, str]]:
    """``(field, message)`` for each rule of ``schedule`` the plan breaks (unknown name included);
    ``extra_slots`` as in :meth:`PipelineSchedule.errors`."""
    try:
        sched = get(schedule)
    except ValueError as exc:
        return [("plan.schedule", str(exc))]
    return sched.errors(p, m, v, num_layers, extra_slots)


@lru_cache(maxsize=4096)
def combined_1f1b_paired_share(schedule: str, p: int, m: int, v: int, stage: int) -> float:
    """Share of stage ``stage``'s ``m*v`` forwards (and as many backwards) that Megatron-Core's
    combined 1F1B (``--overlap-moe-expert-parallel-comm``) runs beside an item of the other
    pass, in [0, 1).

    The forwards before the stage's first backward in :func:`work_order` run alone, as many
    backwards in the cool-down. With pipelining these are the schedule's warm-up and its first
    steady-state forward, which the overlap turns into one more warm-up forward (Megatron-Core
    0.19 ``schedules.get_pp_rank_microbatches``: "one extra micro-batch forward step before the
    1f1b stages"); without pipelining the first forward (and the last backward): ``(m-1)/m``.
    With interleaving stage ``i`` runs ``2(p-1-i) + (v-1)p + 1`` forwards alone, so a plan of
    few micro-batches pairs few or none."""
    order = work_order(schedule, p, m, stage, v)
    backward = np.flatnonzero(order.phase == PHASE_B)
    n = m * v
    alone = min(int(backward[0]) if backward.size else n, n)
    return (n - alone) / n
