"""Execution graph of one training iteration (one data-parallel replica) as arrays.

Two layers:

* :func:`build_pipeline_graph` turns per-stage task templates (the tasks of one
  micro-batch's forward and backward on that stage) and a pipeline schedule
  into arrays. It is generic and is what the closed-form tests drive.
* :func:`build_graph` makes those templates for a session from the profile
  store (op times) and the communication model.

Dependencies: the compute stream of a stage runs its tasks in program order
(one chain, including the tensor-parallel all-reduces, which block it, and the
data-parallel all-reduce before the optimizer step). A pipeline transfer
depends on the producing stage's last task of that micro-batch and gates the
consuming stage's first task; the send is blocking, as in Megatron-LM
(``torch.cuda.synchronize`` after the batched send/recv) and DeepSpeed's
pipeline engine (synchronous NCCL send), so the sender's next task also waits
for the transfer to end. Replicas are
symmetric, so one replica is simulated and the data-parallel all-reduce enters
as a timed task.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import schedules
from .comm import CommModel
from .config import Session, padded_vocab_size
from .graph_types import KINDS, OPS, ExecutionGraph
from .ops import DTYPE_BYTES, OPTIMIZER_OP, analytic_op_time

__all__ = ["TaskTemplate", "StageProgram", "schedule_order", "build_pipeline_graph", "build_graph",
           "params_per_gpu", "OpTimes", "StageTimes", "stage_times", "DETAILS"]

K = {name: i for i, name in enumerate(KINDS)}
OP = {name: i for i, name in enumerate(OPS)}
COMPUTE, COMM = 0, 1


@dataclass
class TaskTemplate:
    """The tasks of one work item (one phase of one micro-batch on one chunk) in program order.

    Attributes
    ----------
    kind, stream : int8 arrays, shape (k,)
        Index into :data:`core.graph_types.KINDS`; 0 compute, 1 comm.
    duration_s : float64 array, shape (k,)
    layer : int32 array, shape (k,)
        Global layer index or -1.
    op : int16 array, shape (k,)
        Index into :data:`core.graph_types.OPS` (-1 unknown).
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


def build_pipeline_graph(programs: list[StageProgram], num_microbatches: int, schedule: str
                         ) -> ExecutionGraph:
    """Arrays of one iteration from per-stage programs, in the order the schedule gives.

    Each stage's tasks form one chain in the program order of
    :func:`core.schedules.work_order`; then its data-parallel all-reduce and
    optimizer step. Virtual stage ``k = c*p + i`` (chunk ``c`` of stage ``i``)
    sends each micro-batch's activation to virtual stage ``k+1`` and its
    input gradient (B item) to ``k-1``. A transfer depends on the sending
    item's last task and gates the receiving item's first task; sends are
    blocking, so the sender's next task waits for the transfer too.

    Parameters
    ----------
    programs : list of StageProgram, length p
        All with the same number of chunks v; with ``wgrad`` templates when the
        schedule splits the backward.
    num_microbatches : int
        m >= 1.
    schedule : str
        A name registered in :mod:`core.schedules`.

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
    v = programs[0].num_chunks
    if any(pr.num_chunks != v for pr in programs):
        raise ValueError("all stages need the same number of chunks")
    if v > 1 and not sched.uses_virtual_stages:
        raise ValueError(f"schedule {schedule!r} runs one chunk per stage, the programs have {v}")
    if sched.splits_backward and any(pr.wgrad is None for pr in programs):
        raise ValueError(f"schedule {schedule!r} splits the backward: every stage needs wgrad templates")
    names = ("dur", "kind", "stream", "stage", "mb", "layer", "op", "chunk", "phase")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in names}
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    stage_end: list[int] = []
    # first / last task of (stage, phase, chunk, micro-batch)
    first = np.full((p, 3, v, m), -1, np.int64)
    last = np.full((p, 3, v, m), -1, np.int64)
    base = 0
    for i, pr in enumerate(programs):
        order = schedules.work_order(schedule, p, m, i, v)
        temps = list(pr.fwd) + list(pr.bwd) + (list(pr.wgrad) if sched.splits_backward else [])
        tlen = np.array([len(t.duration_s) for t in temps], np.int64)
        toff = np.concatenate([[0], np.cumsum(tlen)[:-1]])
        flat = {k: np.concatenate([getattr(t, k) for t in temps])
                for k in ("duration_s", "kind", "stream", "layer", "op")}
        tid = order.phase.astype(np.int64) * v + order.chunk
        lens = tlen[tid]
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        total = int(lens.sum())
        item = np.repeat(np.arange(len(order)), lens)
        at = toff[tid][item] + np.arange(total) - starts[item]
        cols["dur"].append(flat["duration_s"][at])
        cols["kind"].append(flat["kind"][at])
        cols["stream"].append(flat["stream"][at])
        cols["layer"].append(flat["layer"][at])
        cols["op"].append(flat["op"][at])
        cols["mb"].append(order.microbatch[item])
        cols["chunk"].append(order.chunk[item])
        cols["phase"].append(order.phase[item])
        nonempty = lens > 0
        ph, ch, mb = order.phase[nonempty], order.chunk[nonempty], order.microbatch[nonempty]
        first[i, ph, ch, mb] = base + starts[nonempty]
        last[i, ph, ch, mb] = base + starts[nonempty] + lens[nonempty] - 1
        tail = [(K["dp_comm"], COMM, pr.dp_comm_s, OP["dp_all_reduce"]),
                (K["optimizer"], COMPUTE, pr.optimizer_s, OP["optimizer_step"])]
        tail = [x for x in tail if x[2] is not None]
        if tail:
            cols["op"].append(np.array([x[3] for x in tail]))
            cols["dur"].append(np.array([x[2] for x in tail], float))
            cols["kind"].append(np.array([x[0] for x in tail]))
            cols["stream"].append(np.array([x[1] for x in tail]))
            for k in ("layer", "mb", "chunk", "phase"):
                cols[k].append(np.full(len(tail), -1))
        n_stage = total + len(tail)
        cols["stage"].append(np.full(n_stage, i))
        stage_end.append(base + n_stage)
        chain = np.arange(base, base + n_stage - 1)  # program order on the stage
        src.append(chain)
        dst.append(chain + 1)
        base += n_stage
    if (first[:, :2] < 0).any():
        raise ValueError("a forward or backward template is empty: every item needs a task")
    # Pipeline transfers between virtual stages k and k+1 (k = c*p + i on stage i, chunk c).
    F, B = schedules.PHASE_F, schedules.PHASE_B
    for k in range(p * v - 1):
        lo, hi = (k % p, k // p), ((k + 1) % p, (k + 1) // p)
        for send_s, s_from, s_to, stage_of_task, chunk_of_task, phase, op_id in (
                (programs[lo[0]].send_fwd_s, last[lo[0], F, lo[1]], first[hi[0], F, hi[1]],
                 lo[0], lo[1], F, OP["p2p_fwd"]),
                (programs[hi[0]].send_bwd_s, last[hi[0], B, hi[1]], first[lo[0], B, lo[1]],
                 hi[0], hi[1], B, OP["p2p_bwd"])):
            ids = base + np.arange(m)
            cols["dur"].append(np.full(m, float(send_s)))
            cols["kind"].append(np.full(m, K["pp_p2p"]))
            cols["stream"].append(np.full(m, COMM))
            cols["stage"].append(np.full(m, stage_of_task))
            cols["mb"].append(np.arange(m))
            cols["layer"].append(np.full(m, -1))
            cols["op"].append(np.full(m, op_id))
            cols["chunk"].append(np.full(m, chunk_of_task))
            cols["phase"].append(np.full(m, phase))
            src += [s_from, ids]
            dst += [ids, s_to]
            nxt = s_from + 1  # blocking send: the sender's next task waits for the transfer
            ok = nxt < stage_end[stage_of_task]
            src.append(ids[ok])
            dst.append(nxt[ok])
            base += m
    return ExecutionGraph(
        duration_s=np.concatenate(cols["dur"]).astype(np.float64),
        kind=np.concatenate(cols["kind"]).astype(np.int8),
        stream=np.concatenate(cols["stream"]).astype(np.int8),
        stage=np.concatenate(cols["stage"]).astype(np.int32),
        microbatch=np.concatenate(cols["mb"]).astype(np.int32),
        layer=np.concatenate(cols["layer"]).astype(np.int32),
        src=np.concatenate(src).astype(np.int64),
        dst=np.concatenate(dst).astype(np.int64),
        num_stages=p,
        op=np.concatenate(cols["op"]).astype(np.int16),
        chunk=np.concatenate(cols["chunk"]).astype(np.int16),
        phase=np.concatenate(cols["phase"]).astype(np.int8),
    )


# --------------------------------------------------------------------------- from a session

def params_per_gpu(session: Session) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage, shape (p,).

    Per layer (Megatron-LM tensor parallelism): ``(4h^2 + 2hf + 3h + f)/t``
    sharded weights and biases plus ``h`` (projection bias) ``+ h`` (fc2 bias)
    ``+ 4h`` (layer norms) replicated. Stage 0 adds the vocabulary-parallel
    embedding ``V'h/t`` and position embedding ``s*h``; the last stage adds the
    final layer norm ``2h`` and, when ``p > 1``, its copy of the word
    embedding used by the output layer ``V'h/t``.
    """
    m, pl = session.model, session.plan
    h, f, t, p = m.hidden_size, m.ffn, pl.tensor_parallel, pl.pipeline_parallel
    V = padded_vocab_size(m.vocab_size, t)
    per_layer = (4 * h * h + 2 * h * f + 3 * h + f) / t + 6 * h
    n = np.full(p, per_layer * (m.num_layers // p))
    n[0] += V * h / t + m.seq_length * h
    n[-1] += 2 * h + (V * h / t if p > 1 else 0)
    return n


@dataclass
class OpTimes:
    """Op times of one plan (seconds) and the notes their lookups produced."""

    times: dict[str, float]
    warnings: list[str] = field(default_factory=list)


def lookup_op_times(session: Session, store) -> OpTimes:
    """Times of every op for the session's shapes, from the store's tables or its analytic model.

    A shape missing from a measured store falls back to the analytic model
    and adds a warning; an analytic or calibrated store's model is its source
    of truth (its tables are that model tabulated).
    """
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    key = dict(b=pl.micro_batch_size, s=m.seq_length, h=m.hidden_size, a=m.num_attention_heads,
               f=m.ffn, t=t, V=padded_vocab_size(m.vocab_size, t), dtype=pl.precision)
    method = str(store.provenance.get("method", "analytic"))
    out = OpTimes({})
    for op in ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd", "embedding_fwd",
               "embedding_bwd", "output_fwd", "output_bwd"):
        lk = store.op_time(op, key)
        if lk is not None:
            out.times[op] = lk.time_s
            if lk.extrapolated and method == "measured":
                out.warnings.append(f"{op}: b={key['b']} outside the profiled micro-batch sizes "
                                    f"(extrapolated)")
        else:
            out.times[op] = analytic_op_time(op, key, store)
            if method == "measured":
                out.warnings.append(f"{op}: shape not in the {method} profile; analytic model used")
    return out


def optimizer_time(store, num_params: float, dtype: str) -> float:
    """Seconds for the optimizer step over ``num_params`` parameters on one GPU."""
    key = {"n": int(num_params), "dtype": dtype}
    lk = store.op_time(OPTIMIZER_OP, key)
    return lk.time_s if lk is not None else analytic_op_time(OPTIMIZER_OP, key, store)


#: Granularity of :func:`build_graph`: one task per op (``"op"``) or per stage and micro-batch.
DETAILS = ("op", "microbatch")


def virtual_stage_layers(session: Session) -> np.ndarray:
    """Layer boundaries of the ``p*v`` virtual stages: int64 array, shape (p*v + 1,).

    Virtual stage ``k`` (chunk ``k // p`` of stage ``k % p``) holds layers
    ``bounds[k]`` to ``bounds[k+1] - 1``; ``v`` is ``plan.virtual_pipeline_stages``
    under the interleaved schedule and 1 otherwise. Layers are split evenly
    (:func:`core.config.validate` requires ``L`` divisible by ``p*v``).
    """
    pl = session.plan
    v = num_chunks(pl)
    n = pl.pipeline_parallel * v
    return np.arange(n + 1, dtype=np.int64) * (session.model.num_layers // n)


def num_chunks(plan) -> int:
    """Virtual chunks per stage: ``plan.virtual_pipeline_stages`` when the schedule uses them, else 1."""
    if schedules.get(plan.schedule).uses_virtual_stages:
        return int(getattr(plan, "virtual_pipeline_stages", None) or 1)
    return 1


#: Share of each backward op's time that is weight gradient (W), by op; see
#: :func:`weight_gradient_share`.
_W_OPS = ("attention_bwd", "mlp_bwd", "output_bwd", "embedding_bwd")


def weight_gradient_share(op: str, session: Session) -> float:
    """Share of a backward op's time that is its weight gradient (W), by FLOPs.

    Each weight GEMM's backward is two GEMMs of its forward's size, the input
    gradient (B) and the weight gradient (W) (Qi et al. 2024, Sec. 2). Per
    micro-batch on one GPU: attention's weight GEMMs (QKV and projection)
    take ``8bsh^2/t`` FLOPs forward and its core (``QK^T``, ``AV``) ``4bs^2h/t``,
    whose backward is all input gradient, so W is ``8h / (16h + 8s)``
    of the attention backward; the MLP and the output layer are one half; the
    embedding's backward is all weight gradient. Element-wise work is
    neglected (counted with B).
    """
    if op == "attention_bwd":
        h, s = session.model.hidden_size, session.model.seq_length
        return 8 * h / (16 * h + 8 * s)
    if op in ("mlp_bwd", "output_bwd"):
        return 0.5
    if op == "embedding_bwd":
        return 1.0
    return 0.0


def _chunk_tasks(session: Session, stage: int, chunk: int, times: dict[str, float],
                 allreduce_s: float | None
                 ) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Per-op templates of one chunk of one stage: forward, backward (B) and weight gradient (W).

    Tuples ``(kind, stream, duration_s, layer, op)``; see :func:`build_graph` for
    the order. W is empty unless the schedule splits the backward; then each
    backward op gives :func:`weight_gradient_share` of its time to a W task.
    """
    pl = session.plan
    p = pl.pipeline_parallel
    v = num_chunks(pl)
    split = schedules.get(pl.schedule).splits_backward
    k = chunk * p + stage  # virtual stage
    bounds = virtual_stage_layers(session)
    fwd: list[tuple] = []
    bwd: list[tuple] = []
    wgd: list[tuple] = []

    def block(out: list, kind: int, op: str, layer: int, allreduce: bool = True) -> None:
        # 5-tuples: the op index lets calibration and the timeline tell tasks apart
        dur = times[op]
        if split and out is bwd and op in _W_OPS:
            share = weight_gradient_share(op, session)
            wgd.append((K["wgrad"], COMPUTE, dur * share, layer, OP[op]))
            dur *= 1 - share
        if dur > 0 or not (split and op == "embedding_bwd"):
            out.append((kind, COMPUTE, dur, layer, OP[op]))
        if allreduce_s is not None and allreduce:
            out.append((K["tp_comm"], COMM, allreduce_s, layer, OP["tp_all_reduce"]))

    layers = range(int(bounds[k]), int(bounds[k + 1]))
    first, last = k == 0, k == p * v - 1
    if first:
        block(fwd, K["embedding"], "embedding_fwd", -1)   # vocab-parallel embedding all-reduce
    for layer in layers:
        block(fwd, K["forward"], "attention_fwd", layer)
        block(fwd, K["forward"], "mlp_fwd", layer)
    if last:
        block(fwd, K["output"], "output_fwd", -1, allreduce=False)
        block(bwd, K["output"], "output_bwd", -1)
    for layer in reversed(layers):
        if pl.recompute == "full":
            block(bwd, K["recompute"], "attention_fwd", layer)
            block(bwd, K["recompute"], "mlp_fwd", layer)
        block(bwd, K["backward"], "mlp_bwd", layer)
        block(bwd, K["backward"], "attention_bwd", layer)
    if first:
        block(bwd, K["embedding"], "embedding_bwd", -1, allreduce=False)
    return fwd, bwd, wgd


def _stage_tasks(session: Session, stage: int, times: dict[str, float], allreduce_s: float | None
                 ) -> tuple[list[list[tuple]], list[list[tuple]], list[list[tuple]]]:
    """Templates of every chunk of a stage: ``(fwd, bwd, wgrad)``, each a list over chunks."""
    parts = [_chunk_tasks(session, stage, c, times, allreduce_s) for c in range(num_chunks(session.plan))]
    return [x[0] for x in parts], [x[1] for x in parts], [x[2] for x in parts]


@dataclass
class StageTimes:
    """Per-stage durations of one plan at work-item granularity (the coarse graph's inputs).

    Each stage's compute stream is one chain and its tensor-parallel
    all-reduces block it, so the per-op tasks of one work item run back to
    back; their sum is the duration of the merged task.

    Attributes
    ----------
    fwd_s, bwd_s, wgrad_s : float64 array, shape (p, v)
        Forward, backward (with recomputation; the input-gradient part B when
        the schedule splits the backward) and weight-gradient part W (0 when
        not split) of one micro-batch on each stage and virtual chunk,
        tensor-parallel all-reduces included, seconds: the sums in program
        order of the per-op templates of :func:`build_graph`.
    send_fwd_s, send_bwd_s : float64 array, shape (p,)
        Pipeline transfer of one micro-batch from stage ``i`` to ``(i+1) mod p``
        (resp. ``(i-1) mod p``), seconds; the wrap-around hops (last to first
        and back) are 0 unless the plan has virtual chunks.
    dp_comm_s : float64 array, shape (p,)
        Data-parallel gradient all-reduce of each stage, seconds (0 when ``d == 1``).
    optimizer_s : float64 array, shape (p,)
        Optimizer step of each stage, seconds.
    has_dp_comm : bool
        Whether the graph has data-parallel all-reduce tasks (``d > 1``).
    op_times_s : dict[str, float]
        Time of each op of one micro-batch (the per-op templates' durations).
    tp_all_reduce_s : float or None
        One tensor-parallel all-reduce of a ``(b, s, h)`` activation; None when ``t == 1``.
    warnings : list of str
        Lookups that extrapolated or fell back to the analytic model.
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    wgrad_s: np.ndarray
    send_fwd_s: np.ndarray
    send_bwd_s: np.ndarray
    dp_comm_s: np.ndarray
    optimizer_s: np.ndarray
    has_dp_comm: bool
    op_times_s: dict[str, float] = field(default_factory=dict)
    tp_all_reduce_s: float | None = None
    warnings: list[str] = field(default_factory=list)

    def programs(self) -> list[StageProgram]:
        """One :class:`StageProgram` per stage with one task per work item (F, B and W per chunk)."""
        p, v = self.fwd_s.shape
        split = bool(np.any(self.wgrad_s > 0))
        return [StageProgram.from_chunks(
            [[(K["forward"], COMPUTE, float(self.fwd_s[i, c]), -1)] for c in range(v)],
            [[(K["backward"], COMPUTE, float(self.bwd_s[i, c]), -1)] for c in range(v)],
            [[(K["wgrad"], COMPUTE, float(self.wgrad_s[i, c]), -1)] for c in range(v)] if split else None,
            send_fwd_s=float(self.send_fwd_s[i]), send_bwd_s=float(self.send_bwd_s[i]),
            dp_comm_s=float(self.dp_comm_s[i]) if self.has_dp_comm else None,
            optimizer_s=float(self.optimizer_s[i]),
        ) for i in range(p)]


def _memo(cache: dict | None, key: tuple, warnings: list[str], fn) -> float:
    """``fn(sink)`` memoized in ``cache`` under ``key``; the warnings it produced are replayed on hits."""
    if cache is None:
        return fn(warnings)
    hit = cache.get(key)
    if hit is None:
        sink: list[str] = []
        hit = cache[key] = (fn(sink), tuple(sink))
    warnings.extend(hit[1])
    return hit[0]


def _comm_call(comm: CommModel, method: str, *args: float):
    """A function ``sink -> seconds`` calling ``comm.method(*args)`` and moving its warnings to ``sink``."""
    def run(sink: list[str]) -> float:
        n = len(comm.warnings)
        value = getattr(comm, method)(*args)
        sink.extend(comm.warnings[n:])
        del comm.warnings[n:]
        return value
    return run


def _representatives(p: int) -> list[int]:
    """Stages whose per-op templates differ: first, one middle stage, last."""
    return sorted({0, min(1, p - 1), p - 1})


def stage_times(session: Session, store, cache: dict | None = None) -> StageTimes:
    """Durations of each stage's work at micro-batch granularity (see :class:`StageTimes`).

    The values are those of the per-op graph of :func:`build_graph` (same
    lookups, same communication model); per-op durations are summed in
    program order.

    Parameters
    ----------
    session : Session
        A valid session (see :func:`core.config.validate`).
    store : ProfileStore
    cache : dict, optional
        Memo of op lookups and communication times shared between calls; keys
        include the store's identity, the model and the cluster, so one dict can
        serve any sessions. Plan sweeps pass one to reuse lookups across plans.

    Raises
    ------
    KeyError
        The profile lacks the dtype or collectives the plan needs.
    """
    m, pl, cl = session.model, session.plan, session.cluster
    t, p, d = pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel
    e = DTYPE_BYTES[pl.precision]
    warnings: list[str] = []  # communication lookups
    env = (id(store), m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn, m.seq_length,
           m.vocab_size, cl.gpus_per_node, cl.intra_node_bandwidth_gbytes_per_s,
           cl.inter_node_bandwidth_gbits_per_s, pl.precision)
    if cache is None:
        ops = lookup_op_times(session, store)
    else:
        key = ("ops", env, t, pl.micro_batch_size)
        if key not in cache:
            cache[key] = lookup_op_times(session, store)
        ops = cache[key]
    times = ops.times
    comm = CommModel(store, pl, cl)
    act_bytes = pl.micro_batch_size * m.seq_length * m.hidden_size * e
    ar = (_memo(cache, ("tp", env, t, act_bytes), warnings, _comm_call(comm, "tp_all_reduce", act_bytes))
          if t > 1 else None)
    v = num_chunks(pl)
    fwd_s, bwd_s, w_s = np.empty((p, v)), np.empty((p, v)), np.zeros((p, v))
    reps = _representatives(p)
    for i in reps:
        def sums(sink: list[str], i: int = i) -> tuple[np.ndarray, ...]:
            fwd, bwd, wgd = _stage_tasks(session, i, times, ar)
            return tuple(np.array([sum(x[2] for x in chunk) for chunk in part]) for part in (fwd, bwd, wgd))
        fwd_s[i], bwd_s[i], w_s[i] = _memo(
            cache, ("stage", env, t, pl.micro_batch_size, pl.recompute,
                    schedules.get(pl.schedule).splits_backward, v, p, i),
            warnings, sums)
    if p > 2:
        fwd_s[1:-1], bwd_s[1:-1], w_s[1:-1] = fwd_s[1], bwd_s[1], w_s[1]
    p2p_bytes = act_bytes / t
    # hop i -> i+1 for i < p-1, and the wrap-around hop p-1 -> 0 when chunks wrap
    links = list(range(p - 1)) + ([p - 1] if v > 1 else [])
    share = [comm.stages_share_node(i, (i + 1) % p) for i in links]
    hop = np.zeros(p)
    for flag in set(share):
        i = links[share.index(flag)]
        hop[[j for j, f in zip(links, share) if f == flag]] = _memo(
            cache, ("p2p", env, flag, p2p_bytes), warnings,
            _comm_call(comm, "p2p", i, p2p_bytes, (i + 1) % p))
    send_fwd = hop.copy()                 # i -> i+1 (mod p)
    send_bwd = np.roll(hop, 1)            # i -> i-1 (mod p): the hop between i-1 and i
    n_params = params_per_gpu(session)
    dp_s, opt_s = np.zeros(p), np.empty(p)
    for i in reps:
        if d > 1:
            nbytes = n_params[i] * e
            dp_s[i] = _memo(cache, ("dp", env, t, d, nbytes), warnings,
                            _comm_call(comm, "dp_all_reduce", nbytes))
        opt_s[i] = _memo(cache, ("opt", env, n_params[i]), warnings,
                         lambda sink, n=n_params[i]: optimizer_time(store, n, pl.precision))
    if p > 2:
        dp_s[1:-1], opt_s[1:-1] = dp_s[1], opt_s[1]
    return StageTimes(fwd_s, bwd_s, w_s, send_fwd, send_bwd, dp_s, opt_s, d > 1, dict(times), ar,
                      ops.warnings + sorted(set(warnings)))


def build_graph(session: Session, store, detail: str = "op", cache: dict | None = None
                ) -> tuple[ExecutionGraph, list[str]]:
    """Execution graph of one iteration of Megatron-style GPT training.

    Per stage and micro-batch: embedding (first stage), per layer attention
    and MLP with a tensor-parallel all-reduce after each (forward) or before
    each (backward, the input gradient of the column-parallel GEMM), the
    output layer with cross-entropy (last stage), and under full activation
    recomputation a recomputed forward of each layer right before its
    backward. Pipeline transfers carry ``b*s*h/t`` elements per GPU
    (Megatron's scatter-gather optimisation; the all-gather after it is not
    modelled). After the last backward, the data-parallel gradient
    all-reduce, then the optimizer step. The stage's work items run in the
    order of the plan's schedule (:mod:`core.schedules`): with the
    interleaved schedule each stage holds ``v`` chunks of ``L/(p*v)``
    layers (:func:`virtual_stage_layers`); with a schedule that splits the
    backward (ZB-H1) each backward op gives its weight-gradient share
    (:func:`weight_gradient_share`) to a separate W task.

    Parameters
    ----------
    session : Session
    store : ProfileStore
    detail : {"op", "microbatch"}
        ``"op"``: one task per op and all-reduce (what the timeline draws).
        ``"microbatch"``: each stage's forward (resp. backward with
        recomputation) of one micro-batch merged into one ``forward`` (resp.
        ``backward``) task of summed duration, ``layer = -1``. The merged
        tasks are chains with one entry (the first task) and one exit (the last
        task), so every remaining task (pipeline transfers, data-parallel
        all-reduce, optimizer step) and the iteration time keep their start
        and end times (up to float rounding of the sums); the graph is about
        ``L/p * 4`` times smaller. The compute/communication split per stage
        is lost.
    cache : dict, optional
        Memo of lookups shared between calls (see :func:`stage_times`).

    Returns
    -------
    graph : ExecutionGraph
    warnings : list of str
        Lookups that extrapolated or fell back to the analytic model.

    Raises
    ------
    KeyError
        The profile lacks the dtype or collectives the plan needs.
    ValueError
        Unknown ``detail``.
    """
    if detail not in DETAILS:
        raise ValueError(f"detail={detail!r} is not one of {', '.join(DETAILS)}")
    pl = session.plan
    st = stage_times(session, store, cache)
    if detail == "microbatch":
        return build_pipeline_graph(st.programs(), pl.num_microbatches, pl.schedule), st.warnings
    split = schedules.get(pl.schedule).splits_backward
    programs = []
    for i in range(pl.pipeline_parallel):
        fwd, bwd, wgd = _stage_tasks(session, i, st.op_times_s, st.tp_all_reduce_s)
        programs.append(StageProgram.from_chunks(
            fwd, bwd, wgd if split else None,
            send_fwd_s=float(st.send_fwd_s[i]), send_bwd_s=float(st.send_bwd_s[i]),
            dp_comm_s=float(st.dp_comm_s[i]) if st.has_dp_comm else None,
            optimizer_s=float(st.optimizer_s[i])))
    graph = build_pipeline_graph(programs, pl.num_microbatches, pl.schedule)
    return graph, st.warnings
