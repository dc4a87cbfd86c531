"""The pipeline graph: per-stage task templates and a schedule turned into arrays.

What belongs here: :class:`TaskTemplate`, :class:`StageProgram` and
:func:`build_pipeline_graph` (generic: what the closed-form tests drive; the schedule's order
and placement come from :mod:`core.schedules`), and the stream / kind / op codes the graph
modules share (``K``, ``OP``, ``COMPUTE``...). Dependencies: a stage's compute stream runs its
tasks in program order; a pipeline transfer depends on the producing item's last task and
gates the consuming item's first task; the send is blocking, as in Megatron-LM
(``torch.cuda.synchronize`` after the batched send/recv) and DeepSpeed's pipeline engine, so
the sender's next task also waits for the transfer to end, unless the send is overlapped
(the steady state of Megatron-LM's interleaved schedule with ``overlap_p2p_comm``,
:func:`core.plan.parallel.p2p_overlapped`,
:meth:`core.schedules.PipelineSchedule.async_sends`): then only the stage's tail
(data-parallel gradient reduction, optimizer step) waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core import schedules
from core.sim.graph_types import KINDS, OPS, ExecutionGraph

__all__ = ["StageProgram", "TaskTemplate", "build_pipeline_graph", "schedule_order"]


K = {name: i for i, name in enumerate(KINDS)}
OP = {name: i for i, name in enumerate(OPS)}
COMPUTE, COMM, CP_RING, EP, PP = 0, 1, 2, 3, 4  # streams (core.sim.graph_types.STREAMS)


@dataclass
class TaskTemplate:
    """The tasks of one work item (one phase of one micro-batch on one chunk) in program order.

    Attributes
    ----------
    kind, stream : int8 arrays, shape (k,)
        Index into :data:`core.sim.graph_types.KINDS`; 0 compute, 1 comm.
    duration_s : float64 array, shape (k,)
    layer : int32 array, shape (k,)
        Global layer index or -1.
    op : int16 array, shape (k,)
        Index into :data:`core.sim.graph_types.OPS` (-1 unknown).
    """

    kind: np.ndarray
    stream: np.ndarray
    duration_s: np.ndarray
    layer: np.ndarray
    op: np.ndarray

    @classmethod
    def from_tasks(cls, tasks: list[tuple]) -> "TaskTemplate":
        """From ``(kind, stream, duration_s, layer[, op])`` tuples (an empty list is allowed)."""
        a = np.array([tuple(x) + (-1,) * (5 - len(x)) for x in tasks], dtype=float).reshape(-1, 5)
        return cls(a[:, 0].astype(np.int8), a[:, 1].astype(np.int8), a[:, 2].astype(np.float64),
                   a[:, 3].astype(np.int32), a[:, 4].astype(np.int16))

    @property
    def total_s(self) -> float:
        """Sum of the durations (the item's length on a chain), seconds."""
        return float(self.duration_s.sum())


@dataclass
class StageProgram:
    """The work of one pipeline stage: a task template per (phase, virtual chunk).

    Attributes
    ----------
    fwd, bwd : list of TaskTemplate, length v
        Forward (resp. backward, including recomputation; for schedules that
        split the backward, its input-gradient part B) of one micro-batch on
        each of the stage's v chunks.
    wgrad : list of TaskTemplate, length v, or None
        Weight-gradient part W of the backward, for schedules that split it.
    send_fwd_s, send_bwd_s : float
        Pipeline transfer of one micro-batch's activation to the next stage
        ``(i+1) mod p`` (resp. its gradient to the previous stage ``(i-1) mod p``),
        seconds. The wrap-around hops (last to first stage and back) are used
        only by interleaved schedules.
    dp_comm_s, optimizer_s : float or None
        Data-parallel gradient all-reduce (skipped when None) and optimizer step.
    """

    fwd: list[TaskTemplate]
    bwd: list[TaskTemplate]
    wgrad: list[TaskTemplate] | None = None
    send_fwd_s: float = 0.0
    send_bwd_s: float = 0.0
    dp_comm_s: float | None = None
    optimizer_s: float | None = None

    @classmethod
    def from_tasks(cls, fwd: list[tuple], bwd: list[tuple], wgrad: list[tuple] | None = None,
                   **kw: float | None) -> "StageProgram":
        """One chunk, from lists of ``(kind, stream, duration_s, layer[, op])`` tuples."""
        return cls([TaskTemplate.from_tasks(fwd)], [TaskTemplate.from_tasks(bwd)],
                   None if wgrad is None else [TaskTemplate.from_tasks(wgrad)], **kw)

    @classmethod
    def from_chunks(cls, fwd: list[list[tuple]], bwd: list[list[tuple]],
                    wgrad: list[list[tuple]] | None = None, **kw: float | None) -> "StageProgram":
        """``v`` chunks, each a list of task tuples as in :meth:`from_tasks`."""
        return cls([TaskTemplate.from_tasks(x) for x in fwd], [TaskTemplate.from_tasks(x) for x in bwd],
                   None if wgrad is None else [TaskTemplate.from_tasks(x) for x in wgrad], **kw)

    @property
    def num_chunks(self) -> int:
        """Virtual chunks v of the stage."""
        return len(self.fwd)


def schedule_order(schedule: str, num_stages: int, num_microbatches: int, stage: int,
                   virtual_stages: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Program order of one stage as ``(is_backward, microbatch)`` (W items count as backward).

    A thin view of :func:`core.schedules.work_order`, which also gives each
    item's phase and chunk.

    Raises
    ------
    ValueError
        Unknown schedule.
    """
    order = schedules.work_order(schedule, num_stages, num_microbatches, stage, virtual_stages)
    return order.phase != schedules.PHASE_F, order.microbatch


def build_pipeline_graph(programs: list[StageProgram], num_microbatches: int, schedule: str,
                         overlap_p2p: bool = False) -> ExecutionGraph:
    """Arrays of one iteration from per-stage programs, in the order the schedule gives.

    Each stage's tasks form one chain in the program order of
    :func:`core.schedules.work_order`; then its data-parallel all-reduce and
    optimizer step. Virtual stage ``k`` (chunk ``c`` of stage ``i`` as the schedule
    places it, :meth:`core.schedules.PipelineSchedule.placement`: ``k = c*p + i``, or ZB-V's
    V shape) sends each micro-batch's activation to virtual stage ``k+1`` and its
    input gradient (B item) to ``k-1`` (a transfer between two chunks of one stage takes
    no time). A transfer depends on the sending
    item's last task and gates the receiving item's first task; sends are
    blocking, so the sender's next task waits for the transfer too, unless ``overlap_p2p``
    makes the item's send asynchronous.

    Parameters
    ----------
    programs : list of StageProgram, length p
        All with the same number of chunks v; with ``wgrad`` templates when the
        schedule splits the backward.
    num_microbatches : int
        m >= 1.
    schedule : str
        A name registered in :mod:`core.schedules`.
    overlap_p2p : bool
        The sends of the items :meth:`core.schedules.PipelineSchedule.async_sends` names (the
        interleaved schedule's steady state) run beside the sender's compute (Megatron-Core
        with ``overlap_p2p_comm``: ``_communicate(wait_on_reqs=False)``, the receive waited
        for just before the item that needs it): such a transfer gates only the receiving
        item and, when it follows the stage's last item, the stage's tail. A send waiting for
        the previous send of its kind (``send_prev_wait_handle.wait()``) and the receiver's
        posting of its receive are not modelled: they matter only when a transfer outlasts
        the compute between two sends.

    Returns
    -------
    ExecutionGraph
        With ``chunk`` and ``phase`` columns.

    Raises
    ------
    ValueError
        Unknown schedule, or programs that do not fit it (chunk count, W templates).
    """
    p, m = len(programs), num_microbatches
    sched = schedules.get(schedule)
    v = _check_programs(programs, sched, schedule)
    flat, tlen_a, G, MB, CH, PH, ST, TAIL = _program_table(programs, schedule, m, v)
    toff = np.cumsum(tlen_a) - tlen_a
    lens = tlen_a[G]
    ends = np.cumsum(lens)
    starts = ends - lens
    total = int(ends[-1]) if ends.size else 0
    stage_end = ends[TAIL]  # (p,): one past each stage's last task (its tail item's end)
    first, last = _item_bounds(starts, ends, lens, (ST, PH, CH, MB), TAIL, (p, 3, v, m))
    H, sender, sender_c, phase_h, send_s, s_from, s_to = _transfers(programs, sched, m, v, first, last)
    asyn = None
    if overlap_p2p and (steady := sched.async_sends(p, m, v)) is not None:
        phase_o, mb_o, chunk_o = schedules.work_orders(schedule, p, m, v)
        by_item = np.zeros((p, 3, v, m), bool)
        by_item[np.arange(p)[:, None], phase_o, chunk_o, mb_o] = steady
        asyn = by_item[sender, phase_h, sender_c]                           # (H, m)
    e_src, e_dst = _edges(total, stage_end, sender, s_from, s_to,
                          None if asyn is None else (starts[TAIL], asyn))
    op_h = np.where(phase_h == schedules.PHASE_F, OP["p2p_fwd"], OP["p2p_bwd"])
    # the columns: the stages' tasks (rows of the flat table), then the transfers
    n = total + H * m
    at = np.repeat(toff[G] - starts, lens)
    at += np.arange(total)

    def column(name: str, dtype, p2p) -> np.ndarray:
        out = np.empty(n, dtype)
        np.take(np.concatenate(flat[name]).astype(dtype), at, out=out[:total])
        out[total:] = p2p
        return out

    def per_item(values: np.ndarray, dtype, p2p) -> np.ndarray:
        out = np.empty(n, dtype)
        out[:total] = np.repeat(values.astype(dtype), lens)
        out[total:] = p2p
        return out

    return ExecutionGraph(
        duration_s=column("duration_s", np.float64, np.repeat(send_s, m)),
        kind=column("kind", np.int8, K["pp_p2p"]),
        stream=column("stream", np.int8, PP),
        stage=per_item(ST, np.int32, np.repeat(sender, m)),
        microbatch=per_item(MB, np.int32, np.tile(np.arange(m), H)),
        layer=column("layer", np.int32, -1),
        src=e_src.astype(np.int64, copy=False),
        dst=e_dst.astype(np.int64, copy=False),
        num_stages=p,
        op=column("op", np.int16, np.repeat(op_h, m)),
        chunk=per_item(CH, np.int16, np.repeat(sender_c, m)),
        phase=per_item(PH, np.int8, np.repeat(phase_h, m)),
        chunk_stages=sched.virtual_stages(p, v),
    )


def _check_programs(programs: list[StageProgram], sched, schedule: str) -> int:
    """The programs' number of chunks ``v``, after checking that they fit ``sched`` (the
    schedule named ``schedule``). Raises ValueError as :func:`build_pipeline_graph` says."""
    v = programs[0].num_chunks
    if any(pr.num_chunks != v for pr in programs):
        raise ValueError("all stages need the same number of chunks")
    if v != sched.chunks(v):
        raise ValueError(f"schedule {schedule!r} runs {sched.chunks(v)} chunk(s) per stage, the "
                         f"programs have {v}")
    if sched.splits_backward and any(pr.wgrad is None for pr in programs):
        raise ValueError(f"schedule {schedule!r} splits the backward: every stage needs wgrad templates")
    return v


def _item_bounds(starts: np.ndarray, ends: np.ndarray, lens: np.ndarray, where: tuple,
                 tail: np.ndarray, shape: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """First and last task of each (stage, phase, chunk, micro-batch), shape ``shape`` =
    (p, 3, v, m), -1 where none: from the items' task ranges ``starts..ends-1`` (``lens``
    tasks) and their ``where`` = (stage, phase, chunk, micro-batch) arrays, the tail items
    (``tail``) and empty items left out. Raises ValueError when a forward or backward item
    has no task."""
    first = np.full(shape, -1, np.int64)
    last = np.full(shape, -1, np.int64)
    work = ~tail & (lens > 0)
    idx = tuple(a[work] for a in where)
    first[idx] = starts[work]
    last[idx] = ends[work] - 1
    if (first[:, :2] < 0).any():
        raise ValueError("a forward or backward template is empty: every item needs a task")
    return first, last


def _edges(total: int, stage_end: np.ndarray, sender: np.ndarray, s_from: np.ndarray,
           s_to: np.ndarray, overlapped: tuple[np.ndarray, np.ndarray] | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Edges ``(src, dst)`` of the iteration: each stage's tasks in program order (every task
    but a stage's last, ``stage_end - 1``, precedes the next one), and per transfer (task
    ``total + h*m + mb``, shape (H, m) as ``s_from``) the sending item's last task before it,
    the receiving item's first task after it, and (a blocking send) the sender's next task
    after it unless the sender has none. With ``overlapped`` = (``tail_start``, int (p,),
    each stage's first tail task; ``asyn``, bool (H, m), the asynchronous transfers) an
    asynchronous transfer's next task waits only when it is the tail's first."""
    H, m = s_from.shape
    ids = total + np.arange(H * m).reshape(H, m)
    nxt = s_from + 1  # blocking send: the sender's next task waits for the transfer
    ok = nxt < stage_end[sender][:, None]
    if overlapped is not None:
        tail_start, asyn = overlapped
        ok &= ~asyn | (nxt == tail_start[sender][:, None])
    keep = np.stack([np.ones((H, m), bool), np.ones((H, m), bool), ok], 1)   # (H, 3, m)
    not_last = np.ones(total, bool)
    not_last[stage_end[stage_end > 0] - 1] = False
    chain = np.flatnonzero(not_last)
    e_src = np.concatenate([chain, np.stack([s_from, ids, ids], 1)[keep]])
    e_dst = np.concatenate([chain + 1, np.stack([ids, s_to, nxt], 1)[keep]])
    return e_src, e_dst


def _program_table(programs: list[StageProgram], schedule: str, m: int, v: int):
    """Every stage's templates (then its data-parallel and optimizer tail as one more template)
    in one flat table, and the stages' work items (then one tail item each) in program order.
    A task is a row of the flat table: one gather per column builds the whole iteration.

    Returns ``flat`` (column name -> list of per-template arrays), ``tlen`` (int64 tasks per
    template) and per item (all stages, in order) its template ``G``, micro-batch ``MB``,
    chunk ``CH``, phase ``PH`` (-1 for the tail item), stage ``ST`` and whether it is the tail
    ``TAIL``."""
    p = len(programs)
    sched = schedules.get(schedule)
    flat: dict[str, list[np.ndarray]] = {k: [] for k in ("duration_s", "kind", "stream", "layer", "op")}
    tlen: list[int] = []
    g_items, mb_items, ch_items, ph_items, st_items, is_tail = [], [], [], [], [], []
    minus1 = np.full(1, -1, np.int64)
    for i, pr in enumerate(programs):
        order = schedules.work_order(schedule, p, m, i, v)
        temps = list(pr.fwd) + list(pr.bwd) + (list(pr.wgrad) if sched.splits_backward else [])
        first_t = len(tlen)
        for t in temps:
            tlen.append(len(t.duration_s))
            for k in flat:
                flat[k].append(getattr(t, k))
        tail = [(K["dp_comm"], COMM, pr.dp_comm_s, OP["dp_all_reduce"]),
                (K["optimizer"], COMPUTE, pr.optimizer_s, OP["optimizer_step"])]
        tail = [x for x in tail if x[2] is not None]
        tlen.append(len(tail))
        flat["duration_s"].append(np.array([x[2] for x in tail], float))
        flat["kind"].append(np.array([x[0] for x in tail], np.int64))
        flat["stream"].append(np.array([x[1] for x in tail], np.int64))
        flat["layer"].append(np.full(len(tail), -1, np.int64))
        flat["op"].append(np.array([x[3] for x in tail], np.int64))
        n_items = len(order) + 1
        g_items.append(np.append(first_t + order.phase.astype(np.int64) * v + order.chunk, first_t + len(temps)))
        mb_items.append(np.concatenate([order.microbatch, minus1]))
        ch_items.append(np.concatenate([order.chunk, minus1]))
        ph_items.append(np.concatenate([order.phase, minus1]))
        st_items.append(np.full(n_items, i, np.int64))
        is_tail.append(np.arange(n_items) == n_items - 1)
    return (flat, np.array(tlen, np.int64), np.concatenate(g_items), np.concatenate(mb_items),
            np.concatenate(ch_items), np.concatenate(ph_items), np.concatenate(st_items),
            np.concatenate(is_tail))


def _transfers(programs: list[StageProgram], sched, m: int, v: int, first: np.ndarray,
               last: np.ndarray):
    """Pipeline transfers between virtual stages k and k+1 (placed by the schedule: k = c*p + i
    on stage i, chunk c, or ZB-V's V shape): for each k the forward one (activation,
    k -> k+1), then the backward one (gradient).

    ``first`` / ``last``: the first / last task of each (stage, phase, chunk, micro-batch),
    shape (p, 3, v, m). Returns the number of transfers per micro-batch ``H``, per transfer its
    sending stage and chunk, phase and seconds (shape (H,)), and the sending item's last task
    and the receiving item's first task (shape (H, m))."""
    p = len(programs)
    F, B = schedules.PHASE_F, schedules.PHASE_B
    kk = np.arange(p * v - 1)
    stage_of, chunk_of = sched.placement(p, v)
    lo_s, lo_c, hi_s, hi_c = stage_of[:-1], chunk_of[:-1], stage_of[1:], chunk_of[1:]
    H = kk.size * 2
    sender = np.stack([lo_s, hi_s], 1).ravel()           # (H,): the stage that sends
    sender_c = np.stack([lo_c, hi_c], 1).ravel()
    receiver = np.stack([hi_s, lo_s], 1).ravel()
    receiver_c = np.stack([hi_c, lo_c], 1).ravel()
    phase_h = np.tile([F, B], kk.size)
    send_s = np.array([_send_time(programs[a], ph == F, a, b, p)
                       for a, b, ph in zip(sender.tolist(), receiver.tolist(), phase_h.tolist())],
                      float)
    s_from = last[sender, phase_h, sender_c]               # (H, m)
    s_to = first[receiver, phase_h, receiver_c]            # (H, m)
    return H, sender, sender_c, phase_h, send_s, s_from, s_to


def _send_time(program: StageProgram, forward: bool, sender: int, receiver: int, p: int) -> float:
    """Seconds of one pipeline transfer from stage ``sender`` to ``receiver``: the stage's
    ``send_fwd_s`` (the hop to stage ``sender+1 mod p``) for an activation and ``send_bwd_s``
    (the hop to ``sender-1 mod p``) for a gradient, each the other hop when the schedule's
    placement sends the other way (ZB-V's chunk 1), and 0 between two chunks of one stage."""
    if sender == receiver:
        return 0.0
    if forward:
        return float(program.send_fwd_s if receiver == (sender + 1) % p else program.send_bwd_s)
    return float(program.send_bwd_s if receiver == (sender - 1) % p else program.send_fwd_s)
