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

from .comm import CommModel
from .config import Session, padded_vocab_size
from .graph_types import KINDS, OPS, ExecutionGraph
from .ops import DTYPE_BYTES, OPTIMIZER_OP, analytic_op_time

__all__ = ["StageProgram", "schedule_order", "build_pipeline_graph", "build_graph",
           "params_per_gpu", "OpTimes", "StageTimes", "stage_times", "DETAILS"]

K = {name: i for i, name in enumerate(KINDS)}
OP = {name: i for i, name in enumerate(OPS)}
COMPUTE, COMM = 0, 1


@dataclass
class StageProgram:
    """The work of one pipeline stage.

    ``fwd`` and ``bwd`` are templates: arrays of the tasks of one micro-batch's
    forward (resp. backward, including recomputation) in program order.

    Attributes
    ----------
    fwd_kind, bwd_kind : int array, shape (nF,), (nB,)
        Indices into :data:`core.graph_types.KINDS`.
    fwd_stream, bwd_stream : int array
        0 compute, 1 comm.
    fwd_s, bwd_s : float array
        Durations, seconds.
    fwd_layer, bwd_layer : int array
        Global layer index or -1.
    send_fwd_s, send_bwd_s : float
        Pipeline transfer of one micro-batch's activation to the next stage
        (resp. its gradient to the previous stage), seconds.
    dp_comm_s, optimizer_s : float
        Data-parallel gradient all-reduce (skipped when None) and optimizer step.
    fwd_op, bwd_op : int array, optional
        Index into :data:`core.graph_types.OPS` per template task (-1 unknown).
    """

    fwd_kind: np.ndarray
    fwd_stream: np.ndarray
    fwd_s: np.ndarray
    fwd_layer: np.ndarray
    bwd_kind: np.ndarray
    bwd_stream: np.ndarray
    bwd_s: np.ndarray
    bwd_layer: np.ndarray
    send_fwd_s: float = 0.0
    send_bwd_s: float = 0.0
    dp_comm_s: float | None = None
    optimizer_s: float | None = None
    fwd_op: np.ndarray | None = None
    bwd_op: np.ndarray | None = None

    @classmethod
    def from_tasks(cls, fwd: list[tuple], bwd: list[tuple], **kw: float | None) -> "StageProgram":
        """Build from lists of ``(kind, stream, duration_s, layer[, op])`` tuples."""
        f = np.array([tuple(x) + (-1,) * (5 - len(x)) for x in fwd], dtype=float).reshape(-1, 5)
        b = np.array([tuple(x) + (-1,) * (5 - len(x)) for x in bwd], dtype=float).reshape(-1, 5)
        return cls(f[:, 0].astype(np.int8), f[:, 1].astype(np.int8), f[:, 2], f[:, 3].astype(np.int32),
                   b[:, 0].astype(np.int8), b[:, 1].astype(np.int8), b[:, 2], b[:, 3].astype(np.int32),
                   fwd_op=f[:, 4].astype(np.int16), bwd_op=b[:, 4].astype(np.int16), **kw)


def schedule_order(schedule: str, num_stages: int, num_microbatches: int, stage: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Program order of one stage: ``(is_backward, microbatch)``, each shape (2m,).

    1F1B (PipeDream-flush, Narayanan et al. 2021 Sec. 2.2): ``min(p-i-1, m)``
    warm-up forwards on stage ``i``, then alternating one forward and one
    backward, then the remaining backwards. GPipe (Huang et al. 2019): all
    forwards, then all backwards.

    Raises
    ------
    ValueError
        Unknown schedule.
    """
    p, m = num_stages, num_microbatches
    if schedule == "gpipe":
        is_bwd = np.repeat([False, True], m)
        mb = np.concatenate([np.arange(m), np.arange(m)])
        return is_bwd, mb
    if schedule != "1f1b":
        raise ValueError(f"schedule={schedule!r} is not one of 1f1b, gpipe")
    w = min(p - stage - 1, m)
    steady = m - w
    is_bwd = np.concatenate([np.zeros(w, bool), np.tile([False, True], steady), np.ones(w, bool)])
    mb = np.concatenate([np.arange(w), np.stack([np.arange(w, m), np.arange(steady)], 1).ravel(),
                         np.arange(steady, m)])
    return is_bwd, mb


def build_pipeline_graph(programs: list[StageProgram], num_microbatches: int, schedule: str
                         ) -> ExecutionGraph:
    """Arrays of one iteration from per-stage programs.

    Parameters
    ----------
    programs : list of StageProgram, length p
    num_microbatches : int
        m >= 1.
    schedule : {"1f1b", "gpipe"}

    Returns
    -------
    ExecutionGraph
        With ``p*(m*(nF+nB)) + 2*m*(p-1) + (dp, optimizer tasks)`` tasks.
    """
    p, m = len(programs), num_microbatches
    cols: dict[str, list[np.ndarray]] = {k: [] for k in
                                         ("dur", "kind", "stream", "stage", "mb", "layer", "op")}
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    stage_end: list[int] = []
    first_f = np.zeros((p, m), np.int64)
    last_f = np.zeros((p, m), np.int64)
    first_b = np.zeros((p, m), np.int64)
    last_b = np.zeros((p, m), np.int64)
    base = 0
    for i, pr in enumerate(programs):
        is_bwd, mb = schedule_order(schedule, p, m, i)
        nF, nB = len(pr.fwd_s), len(pr.bwd_s)
        lens = np.where(is_bwd, nB, nF)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        total = int(lens.sum())
        op = np.repeat(np.arange(2 * m), lens)
        pos = np.arange(total) - starts[op]
        bw = is_bwd[op]
        pf, pb = np.minimum(pos, nF - 1), np.minimum(pos, nB - 1)
        cols["dur"].append(np.where(bw, pr.bwd_s[pb], pr.fwd_s[pf]))
        cols["kind"].append(np.where(bw, pr.bwd_kind[pb], pr.fwd_kind[pf]))
        cols["stream"].append(np.where(bw, pr.bwd_stream[pb], pr.fwd_stream[pf]))
        cols["layer"].append(np.where(bw, pr.bwd_layer[pb], pr.fwd_layer[pf]))
        f_op = pr.fwd_op if pr.fwd_op is not None else np.full(nF, -1)
        b_op = pr.bwd_op if pr.bwd_op is not None else np.full(nB, -1)
        cols["op"].append(np.where(bw, b_op[pb], f_op[pf]))
        cols["mb"].append(mb[op])
        first = base + starts
        last = first + lens - 1
        first_f[i, mb[~is_bwd]], last_f[i, mb[~is_bwd]] = first[~is_bwd], last[~is_bwd]
        first_b[i, mb[is_bwd]], last_b[i, mb[is_bwd]] = first[is_bwd], last[is_bwd]
        tail = [(K["dp_comm"], COMM, pr.dp_comm_s, OP["dp_all_reduce"]),
                (K["optimizer"], COMPUTE, pr.optimizer_s, OP["optimizer_step"])]
        tail = [x for x in tail if x[2] is not None]
        if tail:
            cols["op"].append(np.array([x[3] for x in tail]))
            cols["dur"].append(np.array([x[2] for x in tail], float))
            cols["kind"].append(np.array([x[0] for x in tail]))
            cols["stream"].append(np.array([x[1] for x in tail]))
            cols["layer"].append(np.full(len(tail), -1))
            cols["mb"].append(np.full(len(tail), -1))
        n_stage = total + len(tail)
        cols["stage"].append(np.full(n_stage, i))
        stage_end.append(base + n_stage)
        chain = np.arange(base, base + n_stage - 1)  # program order on the stage
        src.append(chain)
        dst.append(chain + 1)
        base += n_stage
    # Pipeline transfers: forward activations i -> i+1, gradients i+1 -> i.
    for i in range(p - 1):
        for send_s, s_from, s_to, stage_of_task, op_id in (
                (programs[i].send_fwd_s, last_f[i], first_f[i + 1], i, OP["p2p_fwd"]),
                (programs[i + 1].send_bwd_s, last_b[i + 1], first_b[i], i + 1, OP["p2p_bwd"])):
            ids = base + np.arange(m)
            cols["dur"].append(np.full(m, float(send_s)))
            cols["kind"].append(np.full(m, K["pp_p2p"]))
            cols["stream"].append(np.full(m, COMM))
            cols["stage"].append(np.full(m, stage_of_task))
            cols["mb"].append(np.arange(m))
            cols["layer"].append(np.full(m, -1))
            cols["op"].append(np.full(m, op_id))
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


def _stage_tasks(session: Session, stage: int, times: dict[str, float], allreduce_s: float | None
                 ) -> tuple[list[tuple[int, int, float, int]], list[tuple[int, int, float, int]]]:
    """Per-op forward and backward templates of one stage: ``(kind, stream, duration_s, layer)``.

    See :func:`build_graph` for the order of the tasks.
    """
    m, pl = session.model, session.plan
    p = pl.pipeline_parallel
    layers_per_stage = m.num_layers // p
    fwd: list[tuple[int, int, float, int]] = []
    bwd: list[tuple[int, int, float, int]] = []

    def block(out: list, kind: int, op: str, layer: int, allreduce: bool = True) -> None:
        # 5-tuples: the op index lets calibration and the timeline tell tasks apart
        out.append((kind, COMPUTE, times[op], layer, OP[op]))
        if allreduce_s is not None and allreduce:
            out.append((K["tp_comm"], COMM, allreduce_s, layer, OP["tp_all_reduce"]))

    layers = range(stage * layers_per_stage, (stage + 1) * layers_per_stage)
    if stage == 0:
        block(fwd, K["embedding"], "embedding_fwd", -1)   # vocab-parallel embedding all-reduce
    for layer in layers:
        block(fwd, K["forward"], "attention_fwd", layer)
        block(fwd, K["forward"], "mlp_fwd", layer)
    if stage == p - 1:
        block(fwd, K["output"], "output_fwd", -1, allreduce=False)
        block(bwd, K["output"], "output_bwd", -1)
    for layer in reversed(layers):
        if pl.recompute == "full":
            block(bwd, K["recompute"], "attention_fwd", layer)
            block(bwd, K["recompute"], "mlp_fwd", layer)
        block(bwd, K["backward"], "mlp_bwd", layer)
        block(bwd, K["backward"], "attention_bwd", layer)
    if stage == 0:
        block(bwd, K["embedding"], "embedding_bwd", -1, allreduce=False)
    return fwd, bwd


@dataclass
class StageTimes:
    """Per-stage durations of one plan at micro-batch granularity (the coarse graph's inputs).

    Each stage's compute stream is one chain and its tensor-parallel
    all-reduces block it, so the per-op tasks of one micro-batch's forward
    (resp. backward with recomputation) on a stage run back to back; their
    sum is the duration of the merged task.

    Attributes
    ----------
    fwd_s, bwd_s : float64 array, shape (p,)
        Forward (resp. backward incl. recomputation) of one micro-batch on each
        stage, tensor-parallel all-reduces included, seconds: the sum in
        program order of the per-op template of :func:`build_graph`.
    send_fwd_s, send_bwd_s : float64 array, shape (p,)
        Pipeline transfer of one micro-batch from stage ``i`` to ``i+1``
        (resp. ``i-1``), seconds; 0 for the last (resp. first) stage.
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
    send_fwd_s: np.ndarray
    send_bwd_s: np.ndarray
    dp_comm_s: np.ndarray
    optimizer_s: np.ndarray
    has_dp_comm: bool
    op_times_s: dict[str, float] = field(default_factory=dict)
    tp_all_reduce_s: float | None = None
    warnings: list[str] = field(default_factory=list)

    def programs(self) -> list[StageProgram]:
        """One :class:`StageProgram` per stage with one forward and one backward task each."""
        return [StageProgram.from_tasks(
            [(K["forward"], COMPUTE, float(self.fwd_s[i]), -1)],
            [(K["backward"], COMPUTE, float(self.bwd_s[i]), -1)],
            send_fwd_s=float(self.send_fwd_s[i]), send_bwd_s=float(self.send_bwd_s[i]),
            dp_comm_s=float(self.dp_comm_s[i]) if self.has_dp_comm else None,
            optimizer_s=float(self.optimizer_s[i]),
        ) for i in range(len(self.fwd_s))]


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
    fwd_s, bwd_s = np.empty(p), np.empty(p)
    reps = _representatives(p)
    for i in reps:
        def sums(sink: list[str], i: int = i) -> tuple[float, float]:
            fwd, bwd = _stage_tasks(session, i, times, ar)
            return sum(x[2] for x in fwd), sum(x[2] for x in bwd)
        fwd_s[i], bwd_s[i] = _memo(cache, ("stage", env, t, pl.micro_batch_size, pl.recompute, p, i),
                                   warnings, sums)
    if p > 2:
        fwd_s[1:-1], bwd_s[1:-1] = fwd_s[1], bwd_s[1]
    p2p_bytes = act_bytes / t
    share = [comm.stages_share_node(i) for i in range(p - 1)]
    hop = np.empty(max(p - 1, 0))
    for flag in set(share):
        i = share.index(flag)
        hop[np.array(share) == flag] = _memo(cache, ("p2p", env, flag, p2p_bytes), warnings,
                                             _comm_call(comm, "p2p", i, p2p_bytes))
    send_fwd, send_bwd = np.zeros(p), np.zeros(p)
    send_fwd[:-1], send_bwd[1:] = hop, hop
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
    return StageTimes(fwd_s, bwd_s, send_fwd, send_bwd, dp_s, opt_s, d > 1, dict(times), ar,
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
    all-reduce, then the optimizer step.

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
    programs = []
    for i in range(pl.pipeline_parallel):
        fwd, bwd = _stage_tasks(session, i, st.op_times_s, st.tp_all_reduce_s)
        programs.append(StageProgram.from_tasks(
            fwd, bwd, send_fwd_s=float(st.send_fwd_s[i]), send_bwd_s=float(st.send_bwd_s[i]),
            dp_comm_s=float(st.dp_comm_s[i]) if st.has_dp_comm else None,
            optimizer_s=float(st.optimizer_s[i])))
    graph = build_pipeline_graph(programs, pl.num_microbatches, pl.schedule)
    return graph, st.warnings
