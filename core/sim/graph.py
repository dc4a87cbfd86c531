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

import copy
import dataclasses
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from core.model import model_math
from core import schedules
from core.sim.comm import CommModel
from core.plan.config import (PLAN_FIELDS, ModelConfig, Session, fp8_recipe, grad_dtype, padded_vocab_size,
                     pipeline_layout_text, plan_key, tensor_dtype, virtual_stage_layer_counts,
                     zero_shard_size)
from core.sim.graph_types import KINDS, OPS, ExecutionGraph
from core.model.model_math import FP8_WEIGHT_CAST_OP
from core.model.ops import (DERIVED_OPS, DTYPE_BYTES, EDGE_OPS, LAYER_OPS, OPTIMIZER_OP, analytic_op_time,
                  table_covers)
from core.model.model_math import (MODULE_OPS, MOE_DERIVED_OPS, MOE_OPS, SELECTIVE_OP_GEMMS,
                         SELECTIVE_OP_OPS, SWA_OPS, TP_OVERLAP_GEMMS, TP_OVERLAP_OPS,
                         expert_data_parallel,
                         expert_tensor_parallel, moe_ffn)
from core.plan.config import recompute_modules

__all__ = ["TaskTemplate", "StageProgram", "schedule_order", "build_pipeline_graph", "build_graph",
           "params_per_gpu", "optimizer_params", "op_key", "OpTimes", "StageTimes", "stage_times",
           "DETAILS", "num_chunks", "chunk_virtual_stages", "virtual_stage_layers", "weight_gradient_share",
           "fp8_weight_cast_time", "moe_comm_bytes"]

K = {name: i for i, name in enumerate(KINDS)}
OP = {name: i for i, name in enumerate(OPS)}
COMPUTE, COMM, CP_RING, EP = 0, 1, 2, 3  # streams (core.sim.graph_types.STREAMS)


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


def build_pipeline_graph(programs: list[StageProgram], num_microbatches: int, schedule: str
                         ) -> ExecutionGraph:
    """Arrays of one iteration from per-stage programs, in the order the schedule gives.

    Each stage's tasks form one chain in the program order of
    :func:`core.schedules.work_order`; then its data-parallel all-reduce and
    optimizer step. Virtual stage ``k`` (chunk ``c`` of stage ``i`` as the schedule
    places it, :meth:`core.schedules.PipelineSchedule.placement`: ``k = c*p + i``, or ZB-V's
    V shape) sends each micro-batch's activation to virtual stage ``k+1`` and its
    input gradient (B item) to ``k-1`` (a transfer between two chunks of one stage takes
    no time). A transfer depends on the sending
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
    if v != sched.chunks(v):
        raise ValueError(f"schedule {schedule!r} runs {sched.chunks(v)} chunk(s) per stage, the "
                         f"programs have {v}")
    if sched.splits_backward and any(pr.wgrad is None for pr in programs):
        raise ValueError(f"schedule {schedule!r} splits the backward: every stage needs wgrad templates")
    # Every stage's templates (then its data-parallel and optimizer tail as one more template)
    # in one flat table; the stages' work items (then one tail item each) in program order.
    # A task is a row of the flat table: one gather per column builds the whole iteration.
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
    tlen_a = np.array(tlen, np.int64)
    toff = np.cumsum(tlen_a) - tlen_a
    G = np.concatenate(g_items)
    MB, CH, PH = np.concatenate(mb_items), np.concatenate(ch_items), np.concatenate(ph_items)
    ST, TAIL = np.concatenate(st_items), np.concatenate(is_tail)
    lens = tlen_a[G]
    ends = np.cumsum(lens)
    starts = ends - lens
    total = int(ends[-1]) if ends.size else 0
    stage_end = ends[TAIL]  # (p,): one past each stage's last task (its tail item's end)
    # first / last task of (stage, phase, chunk, micro-batch)
    first = np.full((p, 3, v, m), -1, np.int64)
    last = np.full((p, 3, v, m), -1, np.int64)
    work = ~TAIL & (lens > 0)
    first[ST[work], PH[work], CH[work], MB[work]] = starts[work]
    last[ST[work], PH[work], CH[work], MB[work]] = ends[work] - 1
    if (first[:, :2] < 0).any():
        raise ValueError("a forward or backward template is empty: every item needs a task")
    # Pipeline transfers between virtual stages k and k+1 (placed by the schedule: k = c*p + i
    # on stage i, chunk c, or ZB-V's V shape): for each k the forward one (activation,
    # k -> k+1), then the backward one (gradient).
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
    ids = total + np.arange(H * m).reshape(H, m)
    nxt = s_from + 1  # blocking send: the sender's next task waits for the transfer
    ok = nxt < stage_end[sender][:, None]
    keep = np.stack([np.ones((H, m), bool), np.ones((H, m), bool), ok], 1)   # (H, 3, m)
    op_h = np.where(phase_h == F, OP["p2p_fwd"], OP["p2p_bwd"])
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

    # program order on each stage: every task but a stage's last precedes the next one
    not_last = np.ones(total, bool)
    not_last[stage_end[stage_end > 0] - 1] = False
    chain = np.flatnonzero(not_last)
    e_src = np.concatenate([chain, np.stack([s_from, ids, ids], 1)[keep]])
    e_dst = np.concatenate([chain + 1, np.stack([ids, s_to, nxt], 1)[keep]])
    return ExecutionGraph(
        duration_s=column("duration_s", np.float64, np.repeat(send_s, m)),
        kind=column("kind", np.int8, K["pp_p2p"]),
        stream=column("stream", np.int8, COMM),
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


# --------------------------------------------------------------------------- from a session

def params_per_gpu(session: Session) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage before ZeRO sharding, shape (p,)
    (:func:`core.model.model_math.params_per_gpu`)."""
    return model_math.params_per_gpu(session.model, session.plan)


def optimizer_params(session: Session) -> np.ndarray:
    """Parameters the optimizer of one GPU of each stage updates, shape (p,): all it holds, or
    its ``1/(d*cp)`` shard from ZeRO stage 1 on (Megatron's distributed optimizer shards over
    the data-parallel group with the context-parallel ranks; with hybrid sharding over a
    shard group's ``size*cp``, :func:`core.plan.config.zero_shard_size`; the routed experts'
    parameters over the expert-data-parallel group instead)."""
    n = params_per_gpu(session)
    if session.plan.zero_stage < 1:
        return n
    experts = model_math.expert_params_per_gpu(session.model, session.plan)
    return (n - experts) / zero_shard_size(session.plan) + experts / expert_data_parallel(session.plan)


@dataclass
class OpTimes:
    """Op times of one plan (seconds) and the notes their lookups produced."""

    times: dict[str, float]
    warnings: list[str] = field(default_factory=list)


def op_key(session: Session) -> dict:
    """Key of the session's ops: the profile store's key columns (:data:`core.model.ops.OP_KEYS`) plus
    ``sp`` (sequence parallelism, which changes the LayerNorm and dropout kernels) and, with
    ``precision="fp8"``, ``fp8``, the scaling recipe (:func:`core.plan.config.fp8_recipe`); ``dtype``
    is the precision, so FP8 and BF16 op times never share a cache entry or a table row.

    ``s`` is the tokens of one rank's share of a sequence, ``seq_length / cp`` under context
    parallelism (every token-wise op runs on them); ``cp`` tells the attention ops that their
    core attends to the whole sequence in a ring of ``cp`` steps."""
    m, pl = session.model, session.plan
    t, cp = pl.tensor_parallel, pl.context_parallel
    key = dict(b=pl.micro_batch_size, s=m.seq_length // cp, cp=cp, h=m.hidden_size,
               a=m.num_attention_heads,
               f=m.ffn, t=t, V=padded_vocab_size(m.vocab_size, t), dtype=pl.precision,
               g=m.query_groups, act=model_math.activation_key(m.activation), norm=m.normalization,
               cpa=model_math.cp_a2a_size(pl), cpg=int(model_math.cp_all_gather(pl)),
               pos=m.position_embedding, attn=m.attention_kernel, qkn=int(m.qk_layernorm),
               kv=m.head_dim, sp=bool(pl.sequence_parallel and t > 1), **model_math.mla_key(m),
               ce=model_math.cross_entropy_fusion(pl),
               **({"fp8": fp8_recipe(pl)} if pl.precision == "fp8" else {}))
    if m.is_moe:  # the MoE ops' columns (core.model.model_math.MOE_KEY)
        key.update(E=m.num_experts, topk=m.moe_top_k, fe=moe_ffn(m), ep=pl.expert_parallel,
                   etp=expert_tensor_parallel(pl), ns=m.num_shared_experts,
                   imb=float(pl.moe_imbalance_factor))
    return key


#: Ops every plan looks up (the derived ones are parts of a tabulated op; those of MoE layers
#: only for MoE models; those of a recomputed module only when the plan recomputes it).
_LOOKUP_OPS = (LAYER_OPS + EDGE_OPS + tuple(op for op in DERIVED_OPS if op not in MOE_DERIVED_OPS)
               + model_math.MTP_OPS)
#: Derived ops only the plans that recompute their module need (core.model.model_math.MODULE_OPS).
_MODULE_ONLY_OPS = frozenset(op for mod, ops in MODULE_OPS.items() if mod != "core_attn" for op in ops)


def lookup_op_times(session: Session, store) -> OpTimes:
    """Times of every op for the session's shapes, from the store's tables or its analytic model.

    A shape missing from a measured store falls back to the analytic model
    and adds a warning; an analytic or calibrated store's model is its source
    of truth (its tables are that model tabulated).

    Tables hold ops without sequence parallelism, and no table holds a part
    of an op (:data:`core.model.ops.DERIVED_OPS`, e.g. the attention core that
    selective recomputation runs again). A table that lacks a family column
    (:data:`core.model.ops.OP_KEYS`: query groups, activation, normalization,
    position embedding, attention kernel; stores written before them) holds
    GPT ops and times only GPT shapes. Such a variant takes the tabulated
    op's time scaled by the ratio of their analytic times, so a measured or
    calibrated op time carries over to the kernels it shares with its variant.
    Tables hold no FP8 ops either (no recipe column): an FP8 op takes its BF16
    row's time scaled the same way (FP8 GEMMs and quantization kernels against
    BF16 GEMMs, :func:`core.model.model_math.op_kernels`); nor context-parallel attention
    (no ``cp`` column): it takes the row of the attention op on the rank's ``s/cp``
    tokens without the ring, scaled by the ratio of their analytic times (the core's
    ``cp`` causal steps against one).
    MoE models add :data:`core.model.model_math.MOE_OPS`; a measured or calibrated store without
    their tables times them with its analytic model and one warning says so.
    """
    key = op_key(session)
    # tables hold 16-bit ops without sequence parallelism; an FP8 op scales its BF16 row
    table_key = {c: v for c, v in key.items() if c != "fp8"}
    table_key["dtype"] = tensor_dtype(str(key["dtype"]))
    # nor ring attention (no cp column): a context-parallel attention op scales the row of the
    # same op without context parallelism on the rank's s/cp tokens
    table_key["cp"] = table_key["cpa"] = 1
    table_key["cpg"] = 0
    plain = {**table_key, "sp": False}
    method = str(store.provenance.get("method", "analytic"))
    out = OpTimes({})
    tables = set(store.op_names())
    moe_ops = (MOE_OPS + MOE_DERIVED_OPS) if session.model.is_moe else ()
    window = int(getattr(session.model, "window_size", None) or 0)
    swa_used = bool(model_math.window_layer_mask(session.model).any())
    needed = {op for mod in recompute_modules(session.plan) for op in MODULE_OPS.get(mod, ())}
    if moe_ops and method != "analytic" and not set(moe_ops) <= tables:
        out.warnings.append(f"MoE ops (router, token permutation, experts, shared experts) are "
                            f"not in the {method} profile of {store.device_name}: the store's "
                            "analytic model (its fitted parameters, no measured or per-shape "
                            "times) times them")
    for op in _LOOKUP_OPS + moe_ops:
        if op == "attention_core_bwd" and key["cp"] == 1:
            continue  # only the context-parallel ring splits the attention backward
        if op in _MODULE_ONLY_OPS and op not in needed:
            continue  # a part of an op that only a recomputed module runs
        if op in SELECTIVE_OP_OPS and session.plan.recompute != "selective_op":
            continue  # what only per-op selective checkpointing runs again
        if op in SELECTIVE_OP_GEMMS and not (session.plan.recompute == "selective_op"
                                             and _tp_overlap(session.plan)):
            continue  # the recomputed GEMMs that overlapped recomputed all-gathers hide
        if op in SWA_OPS and not swa_used:
            continue  # no layer with a sliding window
        if op in TP_OVERLAP_OPS and not _tp_overlap(session.plan):
            continue  # the GEMMs that overlapped tensor-parallel collectives hide
        if op in model_math.MTP_OPS and not model_math.mtp_layers(session.model):
            continue  # no multi-token prediction
        base = DERIVED_OPS.get(op, op)
        # a windowed layer's op: the window in its key; tables hold full attention (no window
        # column): it scales the full op's row by the ratio of their analytic times
        op_key_ = {**key, "w": window} if op in SWA_OPS else key
        # a table without a family column holds GPT ops only (core.model.model_math.table_covers)
        covered = base in tables and table_covers(base, table_key, store.op_table(base)[0])
        lk = store.op_time(base, table_key) if covered else None
        if lk is not None:
            out.times[op] = lk.time_s
            if op != base or key["sp"] or key != table_key:
                out.times[op] *= (analytic_op_time(op, op_key_, store)
                                  / analytic_op_time(base, plain, store))
            if lk.extrapolated and method == "measured" and op == base:
                out.warnings.append(f"{op}: b={key['b']} outside the profiled micro-batch sizes "
                                    f"(extrapolated)")
        else:
            out.times[op] = analytic_op_time(op, op_key_, store)
            if method == "measured" and op == base and op not in moe_ops:
                out.warnings.append(f"{op}: shape not in the {method} profile; analytic model used")
    return out


def optimizer_time(store, num_params: float, dtype: str) -> float:
    """Seconds for the optimizer step over ``num_params`` parameters on one GPU (``dtype`` the
    training precision; FP8 training steps BF16 weights, :func:`core.plan.config.tensor_dtype`);
    0 for a GPU without parameters (a stage a custom pipeline layout leaves empty)."""
    if num_params <= 0:
        return 0.0
    key = {"n": int(num_params), "dtype": tensor_dtype(dtype)}
    lk = store.op_time(OPTIMIZER_OP, key)
    return lk.time_s if lk is not None else analytic_op_time(OPTIMIZER_OP, key, store)


def fp8_weight_cast_time(store, num_weights: float, recipe: str) -> float:
    """Seconds to quantize ``num_weights`` BF16 weights of the linear layers to FP8 on one GPU,
    once per iteration (:data:`core.model.model_math.FP8_WEIGHT_CAST_OP`,
    :func:`core.model.model_math.fp8_cast_kernels`); the analytic model of ``store``."""
    if num_weights <= 0:
        return 0.0
    return analytic_op_time(FP8_WEIGHT_CAST_OP, {"n": int(num_weights), "dtype": "fp8",
                                                 "fp8": recipe}, store)


#: Granularity of :func:`build_graph`: one task per op (``"op"``) or per stage and micro-batch.
DETAILS = ("op", "microbatch")


def virtual_stage_layers(session: Session) -> np.ndarray:
    """Layer boundaries of the ``p*v`` virtual stages: int64 array, shape (p*v + 1,).

    Virtual stage ``k`` (chunk ``k // p`` of stage ``k % p``, or as the schedule places it:
    :func:`chunk_virtual_stages`) holds layers ``bounds[k]`` to ``bounds[k+1] - 1``; ``v`` is
    :func:`num_chunks`. The counts are
    :func:`core.plan.config.virtual_stage_layer_counts`: without interleaving the stages of
    :func:`core.plan.config.stage_layer_counts` (uneven first and last stages included), with it
    an even split of ``L`` over ``p*v``; with the embedding / loss counted in the split
    (Megatron-Core ``account_for_embedding/loss_in_pipeline_split``) the first / last
    virtual stage one layer fewer; with a custom pipeline layout
    (``plan.pipeline_model_parallel_layout``) its counts, an empty virtual stage included.
    Raises ValueError when the layers do not split.
    """
    counts = virtual_stage_layer_counts(session.model.num_layers, session.plan,
                                        num_chunks(session.plan))
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def num_chunks(plan) -> int:
    """Model chunks per stage (:meth:`core.schedules.PipelineSchedule.chunks`):
    ``plan.virtual_pipeline_stages`` when the schedule uses them, 2 under ZB-V, else 1."""
    return schedules.get(plan.schedule).chunks(getattr(plan, "virtual_pipeline_stages", None))


def chunk_virtual_stages(plan) -> np.ndarray:
    """Virtual stage of chunk ``c`` of stage ``i``, int64 array (p, v) (the schedule's placement,
    :meth:`core.schedules.PipelineSchedule.virtual_stages`: ``c*p + i``, or ZB-V's V shape)."""
    return schedules.get(plan.schedule).virtual_stages(plan.pipeline_parallel, num_chunks(plan))


#: Backward ops a split backward (ZB-H1) divides into B and W; see :func:`weight_gradient_share`.
_W_OPS = ("attention_bwd", "mlp_bwd", "output_bwd", "embedding_bwd", "router_bwd", "experts_bwd",
          "shared_experts_bwd", "attention_swa_bwd", "mtp_proj_bwd")


def weight_gradient_share(op: str, session: Session, fp8_speedup: float = 1.0) -> float:
    """Share of a backward op's time that is its weight gradient (W), by FLOPs.

    Each weight GEMM's backward is two GEMMs of its forward's size, the input
    gradient (B) and the weight gradient (W) (Qi et al. 2024, Sec. 2). Per
    micro-batch on one GPU: attention's weight GEMMs (QKV and projection)
    take ``8bsh^2/t`` FLOPs forward and its core (``QK^T``, ``AV``) ``4bs^2h/t``,
    whose backward is all input gradient, so W is ``8h / (16h + 8s)``
    of the attention backward; the MLP and the output layer are one half; the
    embedding's backward is all weight gradient. Element-wise work is
    neglected (counted with B). The MoE GEMM ops (router, experts, shared experts) are
    one half, as the MLP. Multi-head latent attention: its linear layers' forward FLOPs
    ``F_lin`` over ``2 F_lin + 2 F_core`` (:func:`core.model.model_math.mla_forward_flops_per_token`;
    GPT's ``8h^2`` and ``4sh`` give the ratio above). With FP8 the weight GEMMs run ``fp8_speedup``
    times faster than the BF16 core (the FP8 peak over BF16's): their FLOPs
    count ``1/fp8_speedup``, ``(8h/r) / (16h/r + 8s)``.
    """
    if op == "attention_bwd" and session.model.multi_latent_attention is True:
        # MLA: its linear layers' and core's FLOPs (core.model.model_math.mla_forward_flops_per_token)
        linear, core = model_math.mla_forward_flops_per_token(session.model)
        r = fp8_speedup
        return linear / r / (2 * linear / r + 2 * core)
    if op in ("attention_bwd", "attention_swa_bwd"):
        h, s = session.model.hidden_size, session.model.seq_length
        if op == "attention_swa_bwd":  # the core over the band: s -> 2 * band area / s
            s = 2 * model_math.attended_pairs(s, int(session.model.window_size or 0)) / s
        r = fp8_speedup
        return 8 * h / r / (16 * h / r + 8 * s)  # the full s also under context parallelism (s/cp
        # tokens attend to s: the core's share per rank is the same)
    if op in ("mlp_bwd", "output_bwd", "router_bwd", "experts_bwd", "shared_experts_bwd",
              "mtp_proj_bwd"):
        return 0.5
    if op == "embedding_bwd":
        return 1.0
    return 0.0


def _tp_overlap(plan) -> bool:
    """Whether the plan overlaps its tensor-parallel collectives with GEMMs
    (``plan.tp_comm_overlap`` with sequence parallelism and ``t > 1``)."""
    return bool(plan.tp_comm_overlap and plan.sequence_parallel and plan.tensor_parallel > 1)


#: The layer ops whose sequence-parallel collectives ``tp_comm_overlap`` overlaps with a GEMM,
#: and the op whose GEMMs they are (a windowed layer's linear layers are the full layer's).
_TP_OVERLAP_BLOCKS = {"attention_fwd": "attention_fwd", "attention_swa_fwd": "attention_fwd",
                      "attention_bwd": "attention_bwd", "attention_swa_bwd": "attention_bwd",
                      "mlp_fwd": "mlp_fwd", "mlp_bwd": "mlp_bwd"}
#: Sources of the overlapped collectives: exposed (``tp_{kind}@{op}``) and hidden parts.
_TP_OVERLAP_SOURCES = tuple(f"tp_{kind}@{op}{part}" for op in _TP_OVERLAP_BLOCKS
                            for kind in ("all_gather", "reduce_scatter") for part in ("", ":hidden"))
#: Per-op selective checkpointing with tensor parallelism: the all-gather each recomputed op
#: runs again, by recomputed op, and the recomputed GEMM its output feeds
#: (:data:`core.model.model_math.SELECTIVE_OP_GEMMS`), which ``tp_comm_overlap`` pipelines it with.
_SAC_GATHERS = {src: gemm for gemm, (src, _) in SELECTIVE_OP_GEMMS.items()}
_SAC_GATHER_SOURCES = tuple(f"tp_all_gather@{op}{part}" for op in _SAC_GATHERS
                            for part in ("", ":hidden"))


def tp_overlap_split(comm_s: float, gemm_s: float, t: int) -> tuple[float, float]:
    """Exposed and hidden seconds of a tensor-parallel collective overlapped with a GEMM,
    ``(exposed, hidden)`` with ``exposed + hidden = comm_s``.

    Transformer Engine's userbuffers (Megatron-Core ``--tp-comm-overlap``; Wang et al.,
    "Overlap communication with dependent computation via decomposition", ASPLOS 2023) split
    the collective and the GEMM into ``t`` chunks and pipeline them (ring exchange), so the
    pair takes ``max(c, g) + min(c, g)/t``: the longer of the two, plus one chunk of the
    shorter that cannot overlap (the pipeline's fill or drain). The GEMM's time is unchanged
    (the copies' contention for SMs and memory bandwidth is not modelled), so the collective
    exposes ``max(c - g, 0) + min(c, g)/t``.
    """
    exposed = max(comm_s - gemm_s, 0.0) + min(comm_s, gemm_s) / t
    return exposed, comm_s - exposed


#: What a template task's duration is (:func:`_source_values` gives the seconds): an op of
#: :func:`lookup_op_times`, a tensor-parallel collective of one activation, or a data-parallel
#: collective of one bucket (a layer's, an MoE layer's, or the first or last stage's other
#: parameters), or the input- (B) and weight-gradient (W) parts of a backward op that a split
#: backward divides, or an MoE layer's expert all-to-all and expert tensor-parallel collectives.
#: Context parallelism adds the attention ops' parts outside the ring core (``:pre``) and the
#: ring's K/V exchange per attention op, split into its part hidden under the core's steps
#: and its exposed part (:func:`_cp_ring_times`).
_SOURCES = (*_LOOKUP_OPS, "tp_all_reduce", "tp_reduce_scatter", "tp_all_gather",
            "tp_mla_all_reduce", "tp_mla_reduce_scatter", "tp_mla_all_gather",
            "tp_mtp_fwd", "tp_mtp_bwd",
            *(f"{b}_{k}" for b in ("layer", "first", "last", "moe", "mtp")
              for k in ("ag", "rs", "ar")),
            *(f"{op}:{part}" for op in _W_OPS for part in ("B", "W")),
            "attention_fwd:pre", "attention_bwd:pre", "attention_bwd:B:pre",
            *(f"cp_{ph}_{part}" for ph in ("fwd", "bwd") for part in ("hidden", "exposed")),
            *MOE_OPS, "ep_all_to_all", "ep_all_to_all@fwd", "ep_all_to_all@bwd",
            "etp_all_gather", "etp_reduce_scatter", *MOE_DERIVED_OPS,
            *_TP_OVERLAP_SOURCES, *_SAC_GATHER_SOURCES, "pass_through")
_SRC = {name: i for i, name in enumerate(_SOURCES)}


class _Unit:
    """Tasks of one piece of a template (a layer's forward, the embedding ...), built once and
    repeated for every layer it applies to. Indices are local to the unit; see :class:`_Template`."""

    def __init__(self) -> None:
        self.tasks: list[tuple[int, int, int, int]] = []   # kind, stream, source, op
        self.side: list[tuple[int, int, int, int, int]] = []  # kind, source, op, after, before
        self.last: list[tuple[int, int, int, int]] = []       # kind, source, op, after
        self.start: list[tuple[int, int, int, int]] = []      # kind, source, op, before

    def add(self, kind: int, stream: int, source: str, op: str) -> int:
        self.tasks.append((kind, stream, _SRC[source], OP[op]))
        return len(self.tasks) - 1


@dataclass
class _Template:
    """The tasks of one micro-batch's forward or backward on one stage, as arrays.

    ``src`` (and ``side_src`` ...) name each task's duration in :data:`_SOURCES`;
    :meth:`timed` fills ``dur`` (and ``side_dur`` ...) from a plan's values. The
    untimed templates depend only on a :class:`_Structure` and are shared.

    ``kind, stream, dur, layer, op`` (shape (n,)): tasks in program order on the
    compute stream (blocking collectives included). Side tasks overlap them on the
    communication stream, ``side_*`` (shape (k,)): each starts after template task
    ``side_after`` (-1: when the op starts) and after the previous side task of the
    same collective (one chain per kind, ``side_op``); template task
    ``side_before`` waits for it (-1: the op ends when it ends). ``last_*``: side
    tasks that run only in the stage's final backward and that only the iteration's
    tail waits for (the data-parallel gradient buckets of ``--overlap-grad-reduce``).
    ``start_*``: side tasks that start with the iteration, before template task
    ``start_before`` of the stage's first forward (``--overlap-param-gather``).
    """

    kind: np.ndarray
    stream: np.ndarray
    src: np.ndarray
    layer: np.ndarray
    op: np.ndarray
    side_kind: np.ndarray
    side_src: np.ndarray
    side_layer: np.ndarray
    side_op: np.ndarray
    side_after: np.ndarray
    side_before: np.ndarray
    last_kind: np.ndarray
    last_src: np.ndarray
    last_layer: np.ndarray
    last_op: np.ndarray
    last_after: np.ndarray
    start_kind: np.ndarray
    start_src: np.ndarray
    start_layer: np.ndarray
    start_op: np.ndarray
    start_before: np.ndarray
    dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    side_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    last_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    start_dur: np.ndarray = field(default_factory=lambda: np.empty(0))

    def timed(self, values: np.ndarray) -> "_Template":
        """A copy with the durations of ``values`` (seconds per :data:`_SOURCES` entry)."""
        out = copy.copy(self)  # the untimed arrays shared (read only), as dataclasses.replace does
        out.dur, out.side_dur = values[self.src], values[self.side_src]
        out.last_dur, out.start_dur = values[self.last_src], values[self.start_src]
        return out

    @property
    def counts(self) -> np.ndarray:
        """How often each source occurs among the compute-stream tasks, shape (len(_SOURCES),)."""
        c = self.__dict__.get("_counts")
        if c is None:
            c = self.__dict__["_counts"] = np.bincount(self.src, minlength=len(_SOURCES)).astype(float)
        return c

    @property
    def has_side(self) -> bool:
        """Whether any side task (of any of the three sorts) exists."""
        h = self.__dict__.get("_has_side")
        if h is None:
            h = self.__dict__["_has_side"] = bool(self.side_src.size or self.last_src.size
                                                  or self.start_src.size)
        return h

    @classmethod
    def assemble(cls, parts: list[tuple[_Unit, list[int] | range]]) -> "_Template":
        """Concatenate units, each repeated once per layer of its list (-1: not a layer's)."""
        cols: dict[str, list[np.ndarray]] = {}

        def put(name: str, values) -> None:
            cols.setdefault(name, []).append(np.asarray(values))

        base = 0
        for unit, layers in parts:
            layers = np.asarray(list(layers), np.int64)
            k, n = layers.size, len(unit.tasks)
            if k == 0:
                continue
            t = np.array(unit.tasks, np.int64).reshape(-1, 4)
            put("kind", np.tile(t[:, 0], k))
            put("stream", np.tile(t[:, 1], k))
            put("src", np.tile(t[:, 2], k))
            put("op", np.tile(t[:, 3], k))
            put("layer", np.repeat(layers, n))
            offset = base + np.arange(k) * n  # (k,): index of each repetition's first task
            for name, rows, width in (("side", unit.side, 5), ("last", unit.last, 4),
                                      ("start", unit.start, 4)):
                if not rows:
                    continue
                r = np.array(rows, np.int64).reshape(-1, width)
                m = r.shape[0]
                put(f"{name}_kind", np.tile(r[:, 0], k))
                put(f"{name}_src", np.tile(r[:, 1], k))
                put(f"{name}_op", np.tile(r[:, 2], k))
                put(f"{name}_layer", np.repeat(layers, m))
                reps = np.repeat(offset, m)
                for j, col in ((3, "after" if name != "start" else "before"), (4, "before")):
                    if j >= width:
                        continue
                    local = np.tile(r[:, j], k)
                    put(f"{name}_{col}", np.where(local >= 0, reps + local, -1))
            base += k * n

        def arr(name: str, dtype) -> np.ndarray:
            parts_ = cols.get(name)
            return np.concatenate(parts_).astype(dtype) if parts_ else np.empty(0, dtype)

        return cls(arr("kind", np.int8), arr("stream", np.int8), arr("src", np.int64),
                   arr("layer", np.int32), arr("op", np.int16),
                   arr("side_kind", np.int8), arr("side_src", np.int64), arr("side_layer", np.int32),
                   arr("side_op", np.int16), arr("side_after", np.int64), arr("side_before", np.int64),
                   arr("last_kind", np.int8), arr("last_src", np.int64), arr("last_layer", np.int32),
                   arr("last_op", np.int16), arr("last_after", np.int64),
                   arr("start_kind", np.int8), arr("start_src", np.int64),
                   arr("start_layer", np.int32), arr("start_op", np.int16),
                   arr("start_before", np.int64))


@dataclass
class _DataParallel:
    """Data-parallel communication of one stage (seconds per collective, see :func:`_stage_tasks`).

    ``layer_ag``, ``layer_rs``: one layer's parameter all-gather and gradient
    reduce-scatter (ZeRO 2/3 per micro-batch, or the buckets of
    ``--overlap-grad-reduce`` / ``--overlap-param-gather``); ``first_*``, ``last_*``: the
    same for the first (embedding) and last (output) stage's other parameters;
    ``layer_ar``, ``first_ar``, ``last_ar``: bucketed all-reduces (ZeRO 0 with
    overlap); ``moe_*``: an MoE layer's bucket (its routed experts' parameters over the
    expert-data-parallel group, the rest over ``d``); ``mtp_*``: the last stage's
    multi-token prediction parameters besides the MTP layers' transformer layers
    (:func:`core.model.model_math.mtp_edge_parameters`, taken out of ``last_*``).
    """

    layer_ag: float = 0.0
    layer_rs: float = 0.0
    layer_ar: float = 0.0
    first_ag: float = 0.0
    first_rs: float = 0.0
    first_ar: float = 0.0
    last_ag: float = 0.0
    last_rs: float = 0.0
    last_ar: float = 0.0
    moe_ag: float = 0.0
    moe_rs: float = 0.0
    moe_ar: float = 0.0
    mtp_ag: float = 0.0
    mtp_rs: float = 0.0
    mtp_ar: float = 0.0


@dataclass(frozen=True)
class _Structure:
    """Everything that shapes the templates of one virtual stage (not their durations): the
    cache key of :func:`_stage_templates`, which reads nothing else.

    ``vstage``: the virtual stage ``k = c*p + i`` (chunk ``c`` of stage ``i``; the stage
    itself without interleaving) of ``num_vstages = p*v``; ``layers``: its global layer
    indices ``(first, stop)``; ``recomputed``: how many of its first layers full
    recomputation recomputes; ``split``: the backward is split into B and W (ZB-H1);
    ``tp``, ``dp``: whether ``t > 1`` (tensor-parallel collectives), ``d*cp > 1``; ``sp``:
    sequence parallelism with ``t > 1``; ``buckets``: whether data-parallel buckets enter
    the templates (ZeRO 2/3, or overlapped reduction or gather); ``cp``: context
    parallelism (``cp > 1``: ring attention). MoE models:
    ``moe_layers`` the chunk's MoE layers (global indices; empty for dense models), ``ep``
    whether ``ep > 1`` (expert all-to-alls), ``etp_mode`` how the experts' tensor
    parallelism communicates (``"none"`` with ``etp = 1``; ``"gather"``: the dispatched tokens
    all-gathered over the ``etp`` ranks before the experts and their output reduce-scattered
    after; ``"all_reduce"``: without sequence parallelism, every rank holds all tokens and the
    experts' output is all-reduced over ``t`` as a dense MLP's), ``shared`` shared experts.
    ``selective``: selective recomputation runs the attention core again (``core_attn``);
    ``modules``: the modules it recomputes (:func:`core.plan.config.recompute_modules`).
    ``window_layers``: the chunk's layers with sliding-window attention (global indices;
    :func:`core.model.model_math.window_layer_mask`), whose attention ops are ``attention_swa_*``.
    ``mla``: multi-head latent attention, whose attention ops' input-side tensor-parallel
    collectives move the latents (``tp_mla_*``, :func:`core.model.model_math.mla_tp_latent_width`).
    ``mtp``: the multi-token prediction layers the (last) virtual stage runs after its layers
    (0 elsewhere); ``mtp_moe``: theirs is an MoE layer (:func:`core.model.model_math.mtp_layer_is_moe`);
    ``mtp_recompute``: full recomputation, under which each MTP layer's transformer layer is
    recomputed (Megatron-Core's ``MultiTokenPredictionLayer`` checkpoints it).
    ``norms``: whether the input norm and a dense layer's pre-MLP norm are modules of their
    own (:func:`core.model.model_math.norms_separate`), which ``layernorm`` recomputation runs again.
    ``ep_overlap``: ``overlap_moe_expert_parallel_comm`` with ``ep > 1``: the forward's and the
    backward's expert all-to-alls take their own sources (``ep_all_to_all@fwd``, ``@bwd``),
    timed at their exposed parts (:func:`ep_overlap_exposed`).
    """

    vstage: int
    num_vstages: int
    layers: tuple[int, int]
    recomputed: int
    selective: bool
    split: bool
    tp: bool
    sp: bool
    dp: bool
    zero_stage: int
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    cp: bool = False
    moe_layers: tuple[int, ...] = ()
    ep: bool = False
    etp_mode: str = "none"
    shared: bool = False
    modules: tuple[str, ...] = ()
    window_layers: tuple[int, ...] = ()
    tp_overlap: bool = False
    selective_op: bool = False
    mla: bool = False
    mtp: int = 0
    mtp_moe: bool = False
    mtp_recompute: bool = False
    ep_overlap: bool = False
    norms: tuple[bool, bool] = (True, True)

    @property
    def buckets(self) -> bool:
        return self.dp and (self.zero_stage >= 2 or self.overlap_grad_reduce or self.overlap_param_gather)


def _structure(session: Session, stage: int, chunk: int = 0,
               bounds: np.ndarray | None = None) -> _Structure:
    """The :class:`_Structure` of chunk ``chunk`` of ``stage`` of ``session``'s plan
    (``bounds``: :func:`virtual_stage_layers` of the session, when the caller has it)."""
    pl = session.plan
    p, v = pl.pipeline_parallel, num_chunks(pl)
    k = int(chunk_virtual_stages(pl)[stage, chunk])
    if bounds is None:
        bounds = virtual_stage_layers(session)
    first, stop = int(bounds[k]), int(bounds[k + 1])
    t = pl.tensor_parallel > 1
    moe: dict = {}
    m = session.model
    if m.is_moe:
        mask = model_math.moe_layer_mask(m)
        sp = bool(pl.sequence_parallel and t)
        etp = expert_tensor_parallel(pl)
        moe = dict(moe_layers=tuple(int(x) for x in np.flatnonzero(mask[first:stop]) + first),
                   ep=pl.expert_parallel > 1,
                   etp_mode="none" if etp == 1 else ("all_reduce" if t and not sp else "gather"),
                   shared=m.num_shared_experts > 0,
                   ep_overlap=model_math.ep_overlap_on(pl))
    return _Structure(k, p * v, (first, stop),
                      model_math.recomputed_in_chunk(pl, stop - first),
                      "core_attn" in recompute_modules(pl),
                      schedules.get(pl.schedule).splits_backward,
                      t, bool(pl.sequence_parallel and t), _reduces_gradients(session),
                      pl.zero_stage, bool(pl.overlap_grad_reduce), bool(pl.overlap_param_gather),
                      pl.context_parallel > 1, modules=recompute_modules(pl),
                      window_layers=_window_layers(m.num_layers,
                                                   bool(getattr(m, "window_size", None)),
                                                   getattr(m, "window_attn_skip_freq", None),
                                                   first, stop),
                      tp_overlap=_tp_overlap(pl), selective_op=pl.recompute == "selective_op",
                      mla=m.multi_latent_attention is True,
                      mtp=model_math.mtp_layers(m) if k == p * v - 1 else 0,
                      mtp_moe=model_math.mtp_layer_is_moe(m),
                      mtp_recompute=pl.recompute == "full",
                      norms=model_math.norms_separate(m), **moe)


@lru_cache(maxsize=4096)
def _window_layers(num_layers: int, windowed: bool, skip_freq: int | None, first: int,
                   stop: int) -> tuple[int, ...]:
    """Global indices of the sliding-window layers among ``first..stop-1``
    (:func:`core.model.model_math.window_layer_mask`, memoized by every model field it reads:
    ``num_layers``, whether ``window_size`` is set, ``window_attn_skip_freq``)."""
    model = SimpleNamespace(num_layers=num_layers, window_size=windowed,
                            window_attn_skip_freq=skip_freq)
    return tuple(int(x) for x in np.flatnonzero(
        model_math.window_layer_mask(model)[first:stop]) + first)


def _reduces_gradients(session: Session) -> bool:
    """Whether gradients are reduced across GPUs: ``d*cp > 1``, or an MoE model whose routed
    experts have ``edp > 1`` replicas (with ``d*cp = 1`` and ``t > etp*ep``)."""
    pl = session.plan
    return pl.dp_cp_size > 1 or (session.model.is_moe and expert_data_parallel(pl) > 1)


@lru_cache(maxsize=4096)
def _stage_templates(st: _Structure) -> tuple[_Template, _Template, _Template]:
    """Untimed forward, backward (B when split) and weight-gradient (W; empty unless split)
    templates of one micro-batch on a virtual stage (see :func:`build_graph`;
    :meth:`_Template.timed` gives them durations)."""
    sp, zero = st.sp, (st.zero_stage if st.dp else 0)
    wunit: _Unit | None = None  # where the current backward unit's W tasks go

    def comm(out: _Unit, kind: str) -> None:
        # an MLA attention's latent collectives (source tp_mla_*) are tp_* collectives
        out.add(K["tp_comm"], COMM, "tp_" + kind, "tp_" + kind.removeprefix("mla_"))

    def ring(out: _Unit, kind: int, phase: str, pre: str | None) -> None:
        """Context parallelism: an attention op as its part outside the ring (``pre``, when
        given), the ring's core steps and the exposed part of their K/V exchange, which blocks
        compute; the hidden part of the exchange runs on the "CP exchange" stream beside the core
        (:func:`_cp_ring_times`)."""
        if pre is not None:
            out.add(kind, COMPUTE, pre, "attention_fwd" if phase == "fwd" else "attention_bwd")
        out.side.append((K["cp_p2p"], _SRC[f"cp_{phase}_hidden"], OP["cp_send_recv"],
                         len(out.tasks) - 1, -1))
        out.add(kind, COMPUTE, f"attention_core_{phase}", f"attention_core_{phase}")
        out.add(K["cp_p2p"], CP_RING, f"cp_{phase}_exposed", "cp_send_recv")

    def compute(out: _Unit, kind: int, source: str, op: str) -> None:
        if st.cp and op in ("attention_fwd", "attention_bwd"):
            ring(out, kind, "fwd" if op == "attention_fwd" else "bwd", source + ":pre")
        else:
            out.add(kind, COMPUTE, source, op)

    def block(out: _Unit, kind: int, op: str, before: bool, after: bool) -> None:
        """The op with the tensor-parallel collectives around it: with sequence parallelism an
        all-gather before (``before``) and a reduce-scatter after (``after``); without, an
        all-reduce after (``after``). A split backward gives the op's W part to ``wunit``."""
        # MLA (Megatron-Core MLASelfAttention): the forward gathers the latents, not the
        # input; the backward reduces the latents' gradients (core.model.model_math.mla_tp_latent_width;
        # validation refuses MLA with tp_comm_overlap)
        latent = "mla_" if st.mla and op in ("attention_fwd", "attention_bwd") else ""
        if st.tp_overlap and op in _TP_OVERLAP_BLOCKS:
            # --tp-comm-overlap: what the GEMMs do not hide blocks; the hidden parts run beside
            # the op (tp_overlap_split), drawn from its start
            ag = out.add(K["tp_comm"], COMM, f"tp_all_gather@{op}", "tp_all_gather")
            for coll in ("all_gather", "reduce_scatter"):
                out.side.append((K["tp_comm"], _SRC[f"tp_{coll}@{op}:hidden"], OP["tp_" + coll],
                                 ag, -1))
        elif st.tp and sp and before:
            comm(out, ("" if op == "attention_bwd" else latent) + "all_gather")
        if st.split and wunit is not None and op in _W_OPS:
            wunit.add(K["wgrad"], COMPUTE, op + ":W", op)
            if op != "embedding_bwd":  # all weight gradient: no B task
                compute(out, kind, op + ":B", op)
        else:
            compute(out, kind, op, op)
        if st.tp_overlap and op in _TP_OVERLAP_BLOCKS:
            out.add(K["tp_comm"], COMM, f"tp_reduce_scatter@{op}", "tp_reduce_scatter")
        elif st.tp and after:
            comm(out, ("" if op == "attention_fwd" else latent)
                 + ("reduce_scatter" if sp else "all_reduce"))

    def gather(out: _Unit, bucket: str) -> None:
        """ZeRO-3: the parameters are all-gathered before they are used (Rajbhandari et al.
        2020, Sec. 5.3), blocking or prefetched on the communication stream."""
        if zero < 3:
            return
        if st.overlap_param_gather:
            out.side.append((K["dp_comm"], _SRC[bucket + "_ag"], OP["dp_all_gather"], -1,
                             len(out.tasks)))
        else:
            out.add(K["dp_comm"], COMM, bucket + "_ag", "dp_all_gather")

    def reduce(out: _Unit, bucket: str) -> None:
        """Gradients of what just ran backward (its W part when split): ZeRO 2/3 reduce-scatter
        them every micro-batch (sharded gradients cannot accumulate locally), blocking or
        overlapped; ZeRO 0/1 with --overlap-grad-reduce reduce them bucket by bucket in the
        chunk's last backward only."""
        if zero >= 2:
            if st.overlap_grad_reduce:
                out.side.append((K["dp_comm"], _SRC[bucket + "_rs"], OP["dp_reduce_scatter"],
                                 len(out.tasks) - 1, -1))
            else:
                out.add(K["dp_comm"], COMM, bucket + "_rs", "dp_reduce_scatter")
        elif st.dp and st.overlap_grad_reduce:
            src, op = (("_rs", "dp_reduce_scatter") if zero == 1 else ("_ar", "dp_all_reduce"))
            out.last.append((K["dp_comm"], _SRC[bucket + src], OP[op], len(out.tasks) - 1))

    def prefetch(out: _Unit, bucket: str) -> None:
        """ZeRO 1/2 with --overlap-param-gather: the updated parameters of this bucket are
        all-gathered from the iteration's start, under the first forward."""
        if st.dp and zero in (1, 2) and st.overlap_param_gather:
            out.start.append((K["dp_comm"], _SRC[bucket + "_ag"], OP["dp_all_gather"],
                              len(out.tasks)))

    layers = list(range(*st.layers))
    first, last = st.vstage == 0, st.vstage == st.num_vstages - 1
    fwd_parts: list[tuple[_Unit, list[int]]] = []
    bwd_parts: list[tuple[_Unit, list[int]]] = []
    w_parts: list[tuple[_Unit, list[int]]] = []

    def backward_unit(layer_list: list[int], build, bucket: str | None = None,
                      reduces: bool = True) -> None:
        """One backward unit (and its W unit when split), repeated over ``layer_list``;
        ``reduces``: its gradients complete a bucket (``bucket``)."""
        nonlocal wunit
        u, w = _Unit(), _Unit()
        wunit = w if st.split else None
        build(u)
        # the gradients are complete after the W part when split, after the backward otherwise
        reducer = w if st.split else u
        if bucket is None:
            bucket = "layer" if layer_list[0] >= 0 else ("last" if build is out_bwd else "first")
        if reducer.tasks and reduces:
            reduce(reducer, bucket)
        bwd_parts.append((u, layer_list))
        if st.split:
            w_parts.append((w, layer_list))
        wunit = None

    if first:
        u = _Unit()
        prefetch(u, "first")
        gather(u, "first")
        # vocab-parallel embedding: all-reduce (reduce-scatter into the sequence-parallel region)
        block(u, K["embedding"], "embedding_fwd", before=False, after=True)
        fwd_parts.append((u, [-1]))
    moe_set = set(st.moe_layers)

    swa_set = set(st.window_layers)

    def runs(layer_list: list[int]) -> list[tuple[bool, bool, list[int]]]:
        """``layer_list`` cut into runs of layers alike (dense or MoE, windowed attention or
        not), in order."""
        out: list[tuple[bool, bool, list[int]]] = []
        for x in layer_list:
            is_moe, swa = x in moe_set, x in swa_set
            if out and out[-1][:2] == (is_moe, swa):
                out[-1][2].append(x)
            else:
                out.append((is_moe, swa, [x]))
        return out

    def a2a(out: _Unit, op: str, phase: str) -> None:
        out.add(K["ep_all_to_all"], EP, f"ep_all_to_all@{phase}" if st.ep_overlap
                else "ep_all_to_all", op)

    mods = set(st.modules)

    def moe_fwd(u: _Unit, kind: int, module: bool = False) -> None:
        """An MoE layer's MLP half (Megatron-Core MoELayer, all-to-all dispatcher): router,
        permutation, dispatch all-to-all over ep, all-gather over etp, the experts,
        reduce-scatter over etp, combine all-to-all, un-permutation, shared experts.
        ``module``: the ``MoELayer`` module alone (what ``--recompute-modules moe`` runs
        again): the router and un-permutation without the pre-MLP norm and residual add."""
        router, unpermute = (("router_gate_fwd", "moe_unpermute_core_fwd") if module
                             else ("router_fwd", "moe_unpermute_fwd"))
        u.add(kind, COMPUTE, router, router)
        u.add(kind, COMPUTE, "moe_permute_fwd", "moe_permute_fwd")
        if st.ep:
            a2a(u, "ep_dispatch", "fwd")
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_all_gather", "etp_all_gather")
        u.add(kind, COMPUTE, "experts_fwd", "experts_fwd")
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_reduce_scatter", "etp_reduce_scatter")
        if st.ep:
            a2a(u, "ep_combine", "fwd")
        u.add(kind, COMPUTE, unpermute, unpermute)
        if st.etp_mode == "all_reduce":
            comm(u, "all_reduce")
        if st.shared:
            block(u, kind, "shared_experts_fwd", True, True)

    def moe_bwd(u: _Unit) -> None:
        """The backward of :func:`moe_fwd`, in reverse (the all-to-alls again, four per layer
        and micro-batch in all). Selective recomputation of ``shared_experts`` runs the shared
        experts' forward (with its tensor-parallel collectives) before their backward, of
        ``moe_act`` the experts' activation before their backward."""
        if st.shared:
            if "shared_experts" in mods and "moe" not in mods:
                block(u, K["recompute"], "shared_experts_fwd", True, True)
            block(u, K["backward"], "shared_experts_bwd", True, True)
        u.add(K["backward"], COMPUTE, "moe_unpermute_bwd", "moe_unpermute_bwd")
        if st.ep:
            a2a(u, "ep_combine", "bwd")
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_all_gather", "etp_all_gather")
        if "moe_act" in mods and "moe" not in mods:
            u.add(K["recompute"], COMPUTE, "experts_act_fwd", "experts_act_fwd")
        block(u, K["backward"], "experts_bwd", False, False)
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_reduce_scatter", "etp_reduce_scatter")
        if st.ep:
            a2a(u, "ep_dispatch", "bwd")
        u.add(K["backward"], COMPUTE, "moe_permute_bwd", "moe_permute_bwd")
        if st.etp_mode == "all_reduce":
            comm(u, "all_reduce")
        block(u, K["backward"], "router_bwd", False, False)

    def layer_fwd(is_moe: bool, swa: bool) -> _Unit:
        u = _Unit()
        bucket = "moe" if is_moe else "layer"
        prefetch(u, bucket)
        gather(u, bucket)
        block(u, K["forward"], "attention_swa_fwd" if swa else "attention_fwd", True, True)
        if is_moe:
            moe_fwd(u, K["forward"])
        else:
            block(u, K["forward"], "mlp_fwd", True, True)
        return u

    for is_moe, swa, run in runs(layers):
        fwd_parts.append((layer_fwd(is_moe, swa), run))

    # multi-token prediction (Megatron-Core MultiTokenPredictionBlock on the last stage): each
    # MTP layer embeds the tokens shifted once more, projects them with the previous hidden
    # state (eh_proj and its tensor-parallel collectives, tp_mtp_*) and runs its transformer
    # layer; then the output layer and loss run once per prediction (1 + N)
    mtp_list = [st.layers[1] + j for j in range(st.mtp)]  # global indices after the decoder's

    def mtp_comm(u: _Unit, phase: str) -> None:
        if st.tp:
            op = "tp_all_gather" if phase == "fwd" or sp else "tp_all_reduce"
            u.add(K["tp_comm"], COMM, f"tp_mtp_{phase}", op)

    for j, x in enumerate(mtp_list):
        u = _Unit()
        if j == 0:
            prefetch(u, "mtp")
            gather(u, "mtp")
        block(u, K["embedding"], "embedding_fwd", before=False, after=True)
        u.add(K["forward"], COMPUTE, "mtp_proj_fwd", "mtp_proj_fwd")
        mtp_comm(u, "fwd")
        fwd_parts.append((u, [x]))
        fwd_parts.append((layer_fwd(st.mtp_moe, False), [x]))

    def out_bwd(u: _Unit) -> None:
        gather(u, "last")
        for _ in range(1 + st.mtp):
            block(u, K["output"], "output_bwd", before=False, after=True)

    if last:
        u = _Unit()
        prefetch(u, "last")
        gather(u, "last")
        for _ in range(1 + st.mtp):
            block(u, K["output"], "output_fwd", before=True, after=False)
        fwd_parts.append((u, [-1]))
        backward_unit([-1], out_bwd)

    def layer_backward(u: _Unit, with_recompute: bool, is_moe: bool, swa: bool) -> None:
        """One layer's backward (its recomputed forward first under full recomputation or the
        selective modules), with its bucket's ZeRO-3 gather."""
        attn = "attention_swa" if swa else "attention"  # a windowed layer's ops
        gather(u, "moe" if is_moe else "layer")
        if st.selective_op:  # torchtitan's per-op checkpointing: the block's forward
            # ops it did not save run again when its backward starts; with tensor parallelism
            # the all-gathers before the column-parallel linears too (not in the save list;
            # the reduce-scatters are), on the TP lane as in the forward, pipelined with the
            # recomputed GEMM they feed under tp_comm_overlap (torchtitan's async TP)
            for op in _SAC_GATHERS:
                if st.tp_overlap:
                    ag = u.add(K["tp_comm"], COMM, f"tp_all_gather@{op}", "tp_all_gather")
                    u.side.append((K["tp_comm"], _SRC[f"tp_all_gather@{op}:hidden"],
                                   OP["tp_all_gather"], ag, -1))
                elif st.tp and sp:
                    comm(u, "all_gather")
                u.add(K["recompute"], COMPUTE, op, op)
        if with_recompute:
            block(u, K["recompute"], attn + "_fwd", True, True)
            if is_moe:
                moe_fwd(u, K["recompute"])
            else:
                block(u, K["recompute"], "mlp_fwd", True, True)
        # selective recomputation by module (Megatron-Core --recompute-modules): the
        # checkpointed module runs again when the backward reaches its output
        if is_moe and "moe" in mods:
            moe_fwd(u, K["recompute"], module=True)
        elif not is_moe and "mlp" in mods:
            if not st.norms[1]:  # the pre-MLP norm fused into fc1 runs with it
                u.add(K["recompute"], COMPUTE, "layernorm_fwd", "layernorm_fwd")
            block(u, K["recompute"], "mlp_core_fwd", True, True)
        # only the norms that are modules of their own (model_math.norms_separate)
        if "layernorm" in mods and (is_moe or st.norms[1]):  # the pre-MLP norm's output
            u.add(K["recompute"], COMPUTE, "layernorm_fwd", "layernorm_fwd")
        if is_moe:
            moe_bwd(u)
        else:
            block(u, K["backward"], "mlp_bwd", True, True)
        if "layernorm" in mods and st.norms[0]:  # the input norm's output, QKV's input
            u.add(K["recompute"], COMPUTE, "layernorm_fwd", "layernorm_fwd")
        if "mla_up_proj" in mods:  # MLA's Q, K, V rebuilt from the kept latents
            u.add(K["recompute"], COMPUTE, "mla_up_proj_fwd", "mla_up_proj_fwd")
        if st.selective and st.cp:  # the core recomputed runs its ring again
            ring(u, K["recompute"], "fwd", None)
        elif st.selective:
            core = "attention_core_swa_fwd" if swa else "attention_core_fwd"
            u.add(K["recompute"], COMPUTE, core, core)
        block(u, K["backward"], attn + "_bwd", True, True)

    # the MTP layers' backward first (they ran last): the transformer layer (recomputed under
    # full recomputation: Megatron-Core's MTP layer checkpoints it), then eh_proj, its
    # collectives and the shifted tokens' embedding; the "mtp" bucket completes with the first
    for j in reversed(range(st.mtp)):
        x = mtp_list[j]

        def mtp_layer_bwd(u: _Unit) -> None:
            layer_backward(u, st.mtp_recompute, st.mtp_moe, False)

        backward_unit([x], mtp_layer_bwd, "moe" if st.mtp_moe else "layer")

        def mtp_pre_bwd(u: _Unit, j: int = j) -> None:
            if j == st.mtp - 1:
                gather(u, "mtp")
            mtp_comm(u, "bwd")
            block(u, K["backward"], "mtp_proj_bwd", before=False, after=False)
            block(u, K["embedding"], "embedding_bwd", before=True, after=False)

        backward_unit([x], mtp_pre_bwd, "mtp", reduces=j == 0)

    for with_recompute in (False, True):
        # reversed layer order; Megatron's block method recomputes the chunk's first layers
        chosen = layers[st.recomputed:] if not with_recompute else layers[:st.recomputed]
        if not chosen:
            continue

        for is_moe, swa, run in runs(chosen[::-1]):
            def layer_bwd(u: _Unit, with_recompute: bool = with_recompute,
                          is_moe: bool = is_moe, swa: bool = swa) -> None:
                layer_backward(u, with_recompute, is_moe, swa)

            backward_unit(run, layer_bwd, "moe" if is_moe else "layer")
    if first:
        def emb_bwd(u: _Unit) -> None:
            # the embedding's backward scatters gradients: it needs no weights (no ZeRO-3 gather)
            block(u, K["embedding"], "embedding_bwd", before=True, after=False)

        backward_unit([-1], emb_bwd)
    if not layers and not first and not last and not st.mtp:
        # a virtual stage without layers (a custom pipeline layout may leave one empty, as
        # Megatron-Core allows): it receives and sends each micro-batch on, in no time
        for kind, parts in ((K["forward"], fwd_parts), (K["backward"], bwd_parts)):
            u = _Unit()
            u.add(kind, COMPUTE, "pass_through", "pass_through")
            parts.append((u, [-1]))
    return (_Template.assemble(fwd_parts), _Template.assemble(bwd_parts),
            _Template.assemble(w_parts))


def _source_values(times: dict[str, float], tp: dict[str, float] | None,
                   dp: _DataParallel | None, session: Session,
                   moe: dict[str, float] | None = None, fp8_speedup: float = 1.0) -> np.ndarray:
    """Seconds of every :data:`_SOURCES` entry for one stage of a plan (0 where it has none);
    ``moe``: the MoE layers' communication by source name (``ep_all_to_all``,
    ``etp_all_gather``, ``etp_reduce_scatter``); ``fp8_speedup`` see
    :func:`weight_gradient_share`."""
    v = np.zeros(len(_SOURCES))
    for name, sec in times.items():
        if name in _SRC:
            v[_SRC[name]] = sec
    for op in _W_OPS:
        if op not in times:  # the MoE ops of a dense model
            continue
        share = weight_gradient_share(op, session, fp8_speedup)
        v[_SRC[op + ":W"]] = times[op] * share
        v[_SRC[op + ":B"]] = times[op] * (1 - share)
    if "attention_core_bwd" in times:  # context parallelism: the attention ops outside the ring
        v[_SRC["attention_fwd:pre"]] = times["attention_fwd"] - times["attention_core_fwd"]
        v[_SRC["attention_bwd:pre"]] = times["attention_bwd"] - times["attention_core_bwd"]
        v[_SRC["attention_bwd:B:pre"]] = max(v[_SRC["attention_bwd:B"]]
                                             - times["attention_core_bwd"], 0.0)
    for name, sec in (moe or {}).items():
        v[_SRC[name]] = sec
    if moe:  # the whole all-to-all until ep_overlap_exposed times the overlapped ones
        v[_SRC["ep_all_to_all@fwd"]] = v[_SRC["ep_all_to_all@bwd"]] = moe["ep_all_to_all"]
    for kind, sec in (tp or {}).items():
        v[_SRC["tp_" + kind]] = sec
    if tp and _tp_overlap(session.plan):
        for op, base in _TP_OVERLAP_BLOCKS.items():
            for kind in ("all_gather", "reduce_scatter"):
                exposed, hidden = tp_overlap_split(
                    tp[kind], times[TP_OVERLAP_GEMMS[base, kind]], session.plan.tensor_parallel)
                v[_SRC[f"tp_{kind}@{op}"]], v[_SRC[f"tp_{kind}@{op}:hidden"]] = exposed, hidden
        for op, gemm in _SAC_GATHERS.items():  # per-op checkpointing's recomputed all-gathers
            if gemm in times:
                exposed, hidden = tp_overlap_split(tp["all_gather"], times[gemm],
                                                   session.plan.tensor_parallel)
                v[_SRC[f"tp_all_gather@{op}"]], v[_SRC[f"tp_all_gather@{op}:hidden"]] = (
                    exposed, hidden)
    if dp is not None:
        for f in dataclasses.fields(dp):
            v[_SRC[f.name]] = getattr(dp, f.name)
    return v


def _stage_tasks(session: Session, stage: int, times: dict[str, float], tp: dict[str, float] | None,
                 dp: _DataParallel | None = None, moe: dict[str, float] | None = None,
                 fp8_speedup: float = 1.0
                 ) -> tuple[list[_Template], list[_Template], list[_Template]]:
    """Timed forward, backward and weight-gradient templates of every chunk of ``stage``.

    ``tp``: one tensor-parallel collective of a ``(b, s, h)`` activation by kind
    (``all_reduce``, ``reduce_scatter``, ``all_gather``), None when ``t == 1``.
    ``dp``: the stage's data-parallel collectives, None when ``d == 1``. ``moe``: the MoE
    layers' communication (:attr:`StageTimes.moe_comm_s`).
    """
    values = _source_values(times, tp, dp, session, moe, fp8_speedup)
    structs = [_structure(session, stage, c) for c in range(num_chunks(session.plan))]
    values = ep_overlap_exposed(values, structs, session, stage)
    out: tuple[list, list, list] = ([], [], [])
    for st in structs:
        for part, tmpl in zip(out, _stage_templates(st)):
            part.append(tmpl.timed(values))
    return out


def _chain(dur: np.ndarray, ready: np.ndarray, code: np.ndarray) -> np.ndarray:
    """End times of tasks run one after another per ``code`` (in list order), each no earlier
    than its ``ready`` time: ``end[j] = max(end[prev], ready[j]) + dur[j]``, vectorized as a
    running maximum over prefix sums (from time 0)."""
    out = np.empty(dur.size)
    for c in np.unique(code):
        idx = np.flatnonzero(code == c)
        D = np.cumsum(dur[idx])
        out[idx] = D + np.maximum.accumulate(np.maximum(ready[idx] - (D - dur[idx]), 0.0))
    return out


def _template_times(tmpl: _Template, start_at: float | None = None
                    ) -> tuple[np.ndarray, np.ndarray, float]:
    """End times (from the op's start) of a template's tasks and side tasks, and its span.

    The span is when the op ends: its last task and its side tasks that end the
    op (``side_before`` -1) have ended. With ``start_at`` the op starts at time 0
    with the iteration and its ``start`` side tasks run one after another from
    ``start_at`` (the all-gathers of earlier chunks before). Side tasks that
    start with the op (``side_after`` -1) wait for nothing else; the others end the
    op (the two sorts the builder makes: prefetched all-gathers, and reductions
    after a layer's backward).
    """
    dur = tmpl.dur
    S = np.cumsum(dur)
    with_start = start_at is not None and tmpl.start_dur.size > 0
    if not tmpl.side_dur.size and not with_start:
        return S, np.empty(0), float(S[-1]) if S.size else 0.0
    free = tmpl.side_after < 0
    if np.any(free & (tmpl.side_before < 0)) or np.any(~free & (tmpl.side_before >= 0)):
        raise AssertionError("side task neither prefetched nor ending the op")
    # prefetched side tasks (and the iteration-start ones) do not depend on the compute chain
    f_dur, f_op, f_before = tmpl.side_dur[free], tmpl.side_op[free], tmpl.side_before[free]
    f_ready = np.zeros(f_dur.size)
    if with_start:
        f_dur = np.concatenate([tmpl.start_dur, f_dur])
        f_op = np.concatenate([tmpl.start_op, f_op])
        f_before = np.concatenate([tmpl.start_before, f_before])
        f_ready = np.concatenate([np.full(tmpl.start_dur.size, float(start_at)), f_ready])
    f_end = _chain(f_dur, f_ready, f_op)
    wait = np.zeros(dur.size)
    np.maximum.at(wait, f_before, f_end)
    end = S + np.maximum.accumulate(np.maximum(wait - (S - dur), 0.0))
    side_end = np.empty(tmpl.side_dur.size)
    side_end[free] = f_end[f_end.size - int(free.sum()):]
    dep = ~free
    side_end[dep] = _chain(tmpl.side_dur[dep], end[tmpl.side_after[dep]], tmpl.side_op[dep])
    span = max(float(end[-1]) if end.size else 0.0,
               float(side_end[dep].max()) if dep.any() else 0.0)
    return end, side_end, span


def _tail_overrun(tmpl: _Template) -> float:
    """How long after the item's end its ``last`` side tasks end (negative when earlier): the
    iteration's tail waits for them."""
    end, _, span = _template_times(tmpl)
    finish = _chain(tmpl.last_dur, end[tmpl.last_after], tmpl.last_op)
    return float(finish.max()) - span


@dataclass
class StageTimes:
    """Per-stage durations of one plan at work-item granularity (the coarse graph's inputs).

    Each stage's compute stream is one chain and its tensor-parallel
    collectives block it, so the per-op tasks of one work item run back to
    back; with the communication that overlaps them (ZeRO-3 prefetch, ZeRO-2/3
    gradient reduce-scatter), the item ends when both have ended. That span is
    the duration of the merged task.

    Attributes
    ----------
    fwd_s, bwd_s, wgrad_s : float64 array, shape (p, v)
        Forward, backward (with recomputation; the input-gradient part B when
        the schedule splits the backward) and weight-gradient part W (0 when
        not split) of one micro-batch on each stage and virtual chunk, seconds:
        the spans of the per-op templates of :func:`build_graph`.
    send_fwd_s, send_bwd_s : float64 array, shape (p,)
        Pipeline transfer of one micro-batch from stage ``i`` to ``(i+1) mod p``
        (resp. ``(i-1) mod p``), seconds; the wrap-around hops (last to first
        and back) are 0 unless the plan has virtual chunks.
    dp_comm_s : float64 array, shape (p,)
        Data-parallel communication of each stage's tail, seconds (0 when ``d == 1``):
        the gradient all-reduce (ZeRO 0) or reduce-scatter (ZeRO 1) after the last
        work item (``dp_reduce_s``; 0 when overlapped or per micro-batch), plus the
        parameter all-gather after the optimizer step (``after_optimizer_s``; ZeRO 1/2
        without ``overlap_param_gather``).
    optimizer_s : float64 array, shape (p,)
        Optimizer step of each stage over its (sharded) parameters, seconds.
    has_dp_comm : bool
        Whether the graph has a data-parallel tail task (``d > 1``).
    ready_s : float64 array, shape (p, v)
        With ``overlap_param_gather`` (ZeRO 1/2): the first forward of each stage and
        chunk cannot start before this (its parameters are all-gathered from the
        iteration's start, one chunk after another); zeros otherwise.
    chunk_tail_s : float64 array, shape (p, v)
        With ``overlap_grad_reduce`` (ZeRO 0/1): the stage's tail also waits until
        this long after the compute of the chunk's last weight-gradient item ends
        (its gradient buckets, reduced under it); ``-inf`` otherwise.
    op_times_s : dict[str, float]
        Time of each op of one micro-batch (the per-op templates' durations).
    tp_comm_s : dict[str, float] or None
        One tensor-parallel collective of a ``(b, s, h)`` activation by kind; None when ``t == 1``.
    dp : list of _DataParallel or None
        Per stage: one bucket's collective times (None when no bucket enters the templates).
    moe_comm_s : dict[str, float] or None
        MoE models: one expert all-to-all (``ep_all_to_all``) and expert tensor-parallel
        all-gather and reduce-scatter (``etp_all_gather``, ``etp_reduce_scatter``) of one
        MoE layer and micro-batch, seconds; None for dense models.
    warnings : list of str
        Lookups that extrapolated or fell back to the analytic model.
    fp8_speedup : float
        FP8 training: the GPU's FP8 GEMM peak over its BF16 peak (the weight-gradient share of
        a split backward, :func:`weight_gradient_share`); 1 otherwise.
    busy_fwd_s, busy_bwd_s, busy_wgrad_s : float64 array, shape (p, v), or None
        The compute stream's own time in each work item (its tasks' durations, blocking
        collectives included): the span when the overlapped communication beside it (ZeRO-3
        prefetch, bucketed reduce-scatters, hidden CP/TP parts) is never waited for. The
        report splits idle time with them (:func:`core.sim.simulate.schedule_times_without_transfers`).
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    wgrad_s: np.ndarray
    send_fwd_s: np.ndarray
    send_bwd_s: np.ndarray
    dp_comm_s: np.ndarray
    optimizer_s: np.ndarray
    has_dp_comm: bool
    ready_s: np.ndarray
    chunk_tail_s: np.ndarray
    dp_reduce_s: np.ndarray
    after_optimizer_s: np.ndarray
    op_times_s: dict[str, float] = field(default_factory=dict)
    tp_comm_s: dict[str, float] | None = None
    dp: list[_DataParallel | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    moe_comm_s: dict[str, float] | None = None
    fp8_speedup: float = 1.0
    busy_fwd_s: np.ndarray | None = None
    busy_bwd_s: np.ndarray | None = None
    busy_wgrad_s: np.ndarray | None = None

    @property
    def tp_all_reduce_s(self) -> float | None:
        """One tensor-parallel all-reduce of a ``(b, s, h)`` activation; None when ``t == 1``."""
        return None if self.tp_comm_s is None else self.tp_comm_s["all_reduce"]

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


def _cp_ring_times(cp: int, core_fwd_s: float, core_bwd_s: float, block_s: float,
                   double_s: float) -> dict[str, float]:
    """The context-parallel ring of one attention op, forward and backward: its exchange's part
    hidden under the core's steps and its exposed part, seconds (the :data:`_SOURCES` entries
    ``cp_{fwd,bwd}_{hidden,exposed}``).

    Transformer Engine's ring attention (``AttnFuncWithCPAndKVP2P``, Megatron-Core's
    ``--context-parallel-size``) runs the core in ``cp`` equal steps (:mod:`core.model.model_math`:
    each a causal ``s/cp x s/cp`` problem), ``c = core/cp`` each, and starts each step's
    transfer with the step, so the next step waits for it: a step takes ``max(c, x)``
    for a transfer of ``x`` seconds, of which ``min(c, x)`` is hidden and ``max(0, x - c)``
    exposed. Forward: ``cp - 1`` transfers of one K/V block (``block_s``) under the first
    ``cp - 1`` steps. Backward: ``cp`` transfers under the ``cp`` steps: K/V in the first,
    K/V with the running dK/dV (two blocks, ``double_s``) in the next ``cp - 2``, dK/dV in
    the last (the owner needs it before the attention backward ends).
    """
    c_f, c_b = core_fwd_s / cp, core_bwd_s / cp
    bwd = np.array([block_s] + [double_s] * (cp - 2) + [block_s])
    return {"cp_fwd_hidden": (cp - 1) * min(block_s, c_f),
            "cp_fwd_exposed": (cp - 1) * max(block_s - c_f, 0.0),
            "cp_bwd_hidden": float(np.minimum(bwd, c_b).sum()),
            "cp_bwd_exposed": float(np.maximum(bwd - c_b, 0.0).sum())}


def _cp_allgather_times(cp: int, core_fwd_s: float, core_bwd_s: float, gather_s: float,
                        block_s: float) -> dict[str, float]:
    """:func:`_cp_ring_times` for ``plan.cp_comm_type = "allgather"``: PyTorch's
    ``context_parallel`` with its default all-gather rotation (torchtitan;
    ``torch.distributed.tensor.experimental._attention``, ``_AllGatherRotater``), seconds.

    The core runs in the same ``cp`` steps of ``c = core/cp`` each. Forward: the K/V
    all-gather of the whole sequence (``gather_s``) starts with the first step and the second
    step waits for it: ``min(gather, c)`` hidden, the rest exposed. Backward: K/V are
    all-gathered again under the first step, and the K/V gradients are passed around the ring
    (PyTorch's ``alltoall`` rotation, one block, ``block_s``) after each step: the first
    ``cp - 1`` under the next step, the last one waited for after the loop (exposed).
    """
    c_f, c_b = core_fwd_s / cp, core_bwd_s / cp
    bwd = np.array([gather_s] + [block_s] * (cp - 1))
    return {"cp_fwd_hidden": min(gather_s, c_f),
            "cp_fwd_exposed": max(gather_s - c_f, 0.0),
            "cp_bwd_hidden": float(np.minimum(bwd, c_b).sum()),
            "cp_bwd_exposed": float(np.maximum(bwd - c_b, 0.0).sum()) + block_s}


def _data_parallel(session: Session, stage: int, comm_call, edp_call=None) -> _DataParallel:
    """Collective times of one stage's data-parallel buckets (one bucket per layer, one for the
    first or last stage's other parameters; Megatron's buckets hold about 40M parameters,
    ``--ddp-bucket-size``, i.e. about one layer of a large model per tensor-parallel rank).
    Gradients move in :func:`core.plan.config.grad_dtype`, parameters in the training precision
    (the FP8 linear weights in 1 byte with ``fp8_param_gather``,
    :func:`core.model.model_math.param_gather_bytes`).
    An MoE layer's bucket: its routed experts' parameters over the expert-data-parallel group
    (``edp_call``), the rest over ``d`` (``comm_call``)."""
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    g = DTYPE_BYTES[grad_dtype(pl)]
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]  # FP8 training gathers BF16 weights
    fam = model_math.family_of(m)
    sharded, replicated = fam.layer_parameters(m)
    layer = sharded / t + replicated
    p_edge, loss_stage = model_math.edge_stages(pl), model_math.loss_stage(pl)
    first_n, last_n = model_math.edge_params_per_gpu(m, t, p_edge)
    first = first_n if stage == 0 else 0.0
    mtp = model_math.mtp_edge_parameters(m, t, p_edge) if stage == loss_stage else 0.0
    last = last_n - mtp if stage == loss_stage else 0.0
    out = _DataParallel()
    # FP8 parameter all-gather: the layer's linear weights in 1 byte (the edges stay BF16)
    fp8_lin = (model_math.fp8_linear_params_per_layer(m, t)
               if model_math.fp8_gathers_params(pl) else 0.0)
    for name, n in (("layer", layer), ("first", first), ("last", last), ("mtp", mtp)):
        if n <= 0:
            continue
        setattr(out, f"{name}_ag", comm_call("all_gather", model_math.param_gather_bytes(
            pl, n, fp8_lin if name == "layer" else 0.0)))
        setattr(out, f"{name}_rs", comm_call("reduce_scatter", n * g))
        setattr(out, f"{name}_ar", comm_call("all_reduce", n * g))
    if m.is_moe and edp_call is not None:
        moe = model_math.moe_layer_parameters(m)
        rest = moe.sharded / t + moe.replicated
        experts = moe.experts / (pl.expert_parallel * expert_tensor_parallel(pl))
        for kind, short, nb in (("all_gather", "ag", e), ("reduce_scatter", "rs", g),
                                ("all_reduce", "ar", g)):
            setattr(out, f"moe_{short}", comm_call(kind, rest * nb) + edp_call(kind, experts * nb))
    return out


_MODEL_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(ModelConfig)))
_D_FIELD = PLAN_FIELDS.index("data_parallel")


def _layout_key(session: Session, cache: dict | None = None) -> tuple:
    """Cache key of :func:`_stage_layout`: every model field, every plan field but the
    data-parallel size ``d``, and what ``d`` changes in the templates' structure (whether
    gradients are reduced across GPUs, :func:`_reduces_gradients`). The model's fields are
    read once per model object and ``cache`` (which keeps the object: a cache's sessions
    must not change their model in place)."""
    m, pl = session.model, session.plan
    hit = cache.get(("model", id(m))) if cache is not None else None
    if hit is None or hit[0] is not m:
        hit = (m, _MODEL_FIELD_VALUES(m))
        if cache is not None:
            cache[("model", id(m))] = hit
    fields = plan_key(pl)
    return (hit[1], fields[:_D_FIELD] + fields[_D_FIELD + 1:], _reduces_gradients(session))


def _stage_layout(session: Session, cache: dict | None) -> SimpleNamespace:
    """What :func:`stage_times` needs of the session that does not depend on ``d`` beyond
    :func:`_layout_key` (memoized in ``cache`` under that key: a sweep's plans that differ only in
    ``d`` share it).

    Attributes: ``key`` (:func:`_layout_key`), ``op_key`` (:func:`op_key`) and ``op_key_items``
    (its sorted items), ``v`` (:func:`num_chunks`), ``alike`` (:func:`_middle_stages_alike`),
    ``reps`` (the stages whose templates are evaluated: :func:`_representatives` when the
    middle stages are alike, else all), ``structs`` (dict: each of those stages -> the
    :class:`_Structure` of each chunk), ``params`` (:func:`params_per_gpu`, (p,)) and
    ``experts`` (:func:`core.model.model_math.expert_params_per_gpu`, (p,)); the arrays read-only.
    """
    key = _layout_key(session, cache)
    hit = cache.get(("layout", key)) if cache is not None else None
    if hit is not None:
        return hit
    pl = session.plan
    p, v = pl.pipeline_parallel, num_chunks(pl)
    alike = _middle_stages_alike(session)
    reps = _representatives(p) if alike else list(range(p))
    bounds = virtual_stage_layers(session)
    okey = op_key(session)
    params = params_per_gpu(session)
    experts = model_math.expert_params_per_gpu(session.model, pl)
    for a in (params, experts):
        a.setflags(write=False)
    out = SimpleNamespace(key=key, op_key=okey, op_key_items=tuple(sorted(okey.items())), v=v,
                          alike=alike, reps=reps, params=params, experts=experts,
                          structs={i: [_structure(session, i, c, bounds) for c in range(v)]
                                   for i in reps})
    if cache is not None:
        cache[("layout", key)] = out
    return out


def _span_structure(st: _Structure) -> _Structure:
    """``st`` with what changes no span of its templates normalized, so that virtual stages alike
    share one :func:`_stage_templates` entry: its layers numbered from 0 (the MoE and windowed
    layers shifted with them) and its virtual stage reduced to whether it is the first and
    the last (the embedding and the output layer). The templates differ from ``st``'s only in
    their ``layer`` column, which no duration or span reads."""
    first, stop = st.layers
    is_first, is_last = st.vstage == 0, st.vstage == st.num_vstages - 1
    vstage, num = ((0, 1) if is_first and is_last else (0, 2) if is_first else (1, 2) if is_last
                   else (1, 3))
    if (vstage, num, first) == (st.vstage, st.num_vstages, 0):
        return st
    return dataclasses.replace(st, vstage=vstage, num_vstages=num, layers=(0, stop - first),
                               moe_layers=tuple(x - first for x in st.moe_layers),
                               window_layers=tuple(x - first for x in st.window_layers))


@lru_cache(maxsize=4096)
def _span_templates(st: _Structure) -> tuple[_Template, _Template, _Template]:
    """:func:`_stage_templates` of :func:`_span_structure` of ``st`` (cached: a sweep's layouts
    hold about ten times fewer distinct structures than they have, and normalizing one costs
    a ``dataclasses.replace``)."""
    return _stage_templates(_span_structure(st))


def _stage_spans(session: Session, store, layout: SimpleNamespace, times: dict[str, float],
                 ring: dict[str, float] | None, tp: dict[str, float] | None, dps: list,
                 moe_comm: dict[str, float] | None, fp8_speedup: float, cache: dict | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The work items' spans of every stage and chunk: ``fwd_s``, ``bwd_s``, ``wgrad_s``,
    ``ready_s``, ``chunk_tail_s`` of :class:`StageTimes` and the compute stream's busy time
    of each item, ``busy_fwd_s``, ``busy_bwd_s``, ``busy_wgrad_s`` (the span without waiting
    for overlapped communication), float64 (p, v) each (new arrays).

    The per-op templates of ``layout.structs`` timed with the stage's
    :func:`_source_values` of ``times`` (the op times of ``layout.op_key`` in ``store``,
    with the context-parallel ring's times ``ring`` when ``cp > 1``); memoized in ``cache``
    under the layout (the object: ``cache`` holds it) and every value the durations are made
    of that ``d`` can change (the ring, tensor-parallel, data-parallel and MoE collectives), so
    plans that differ only in ``d`` where ``d`` changes none of them share the result.
    """
    p, v = session.plan.pipeline_parallel, layout.v
    mkey = None
    if cache is not None:
        mkey = ("spans", id(store), id(layout), tuple(ring.items()) if ring else None,
                tuple(tp.items()) if tp else None, tuple(moe_comm.items()) if moe_comm else None,
                tuple(None if dps[i] is None else tuple(vars(dps[i]).values()) for i in layout.reps),
                fp8_speedup,
                # the paired share reads m, which d changes (the layout holds every other field)
                tuple(model_math.ep_overlap_paired_share(session.plan, i) for i in layout.reps)
                if model_math.ep_overlap_on(session.plan) else None)
        hit = cache.get(mkey)
        if hit is not None:
            return tuple(a.copy() for a in hit)
    fwd_s, bwd_s, w_s = np.empty((p, v)), np.empty((p, v)), np.zeros((p, v))
    fwd_b, bwd_b, w_b = np.empty((p, v)), np.empty((p, v)), np.zeros((p, v))
    ready, over = np.zeros((p, v)), np.full((p, v), -np.inf)
    for i, structs in layout.structs.items():
        values = ep_overlap_exposed(
            _source_values(times, tp, dps[i], session, moe_comm, fp8_speedup), structs, session, i)
        offset = 0.0  # the all-gathers of --overlap-param-gather run one chunk after another
        for c, struct in enumerate(structs):
            fwd, bwd, wgd = _span_templates(struct)
            for tmpl, out, busy in ((fwd, fwd_s, fwd_b), (bwd, bwd_s, bwd_b), (wgd, w_s, w_b)):
                # the compute stream's own time (blocking collectives included): the span
                # when nothing beside it is waited for
                busy[i, c] = tmpl.counts @ values
                if tmpl.has_side:
                    out[i, c] = _template_times(tmpl.timed(values))[2]
                else:  # one chain: the span is the sum of the durations
                    out[i, c] = busy[i, c]
            if fwd.start_src.size:
                timed = fwd.timed(values)
                ready[i, c] = _template_times(timed, start_at=offset)[2] - fwd_s[i, c]
                offset += float(timed.start_dur.sum())
            grads = wgd if struct.split else bwd
            if grads.last_src.size:
                over[i, c] = _tail_overrun(grads.timed(values))
    if p > 2 and layout.alike:
        for a in (fwd_s, bwd_s, w_s, ready, over, fwd_b, bwd_b, w_b):
            a[1:-1] = a[1]
    out = (fwd_s, bwd_s, w_s, ready, over, fwd_b, bwd_b, w_b)
    if mkey is not None:
        cache[mkey] = tuple(a.copy() for a in out)
    return out


def stage_times(session: Session, store, cache: dict | None = None) -> StageTimes:
    """Durations of each stage's work at work-item granularity (see :class:`StageTimes`).

    The values are those of the per-op graph of :func:`build_graph` (same
    lookups, same communication model, same templates).

    Parameters
    ----------
    session : Session
        A valid session (see :func:`core.plan.config.validate`).
    store : ProfileStore
    cache : dict, optional
        Memo of op lookups and communication times shared between calls; keys
        hold everything a value depends on (the store's identity, the op key,
        the cluster and the plan's t and d for communication), so one dict can
        serve any sessions. Plan sweeps pass one to reuse lookups across plans.

    Raises
    ------
    KeyError
        The profile lacks the dtype or collectives the plan needs.
    """
    m, pl, cl = session.model, session.plan, session.cluster
    # gradients reduce and the optimizer shards over the data-parallel ranks with the
    # context-parallel ones (Megatron-Core), d*cp in all (d without context parallelism)
    t, p, d, cp = pl.tensor_parallel, pl.pipeline_parallel, pl.dp_cp_size, pl.context_parallel
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]  # activations between layers: BF16 with FP8
    warnings: list[str] = []  # communication lookups
    layout = _stage_layout(session, cache)
    key = layout.op_key
    # the derived ops looked up also follow the recomputed modules, the TP overlap, per-op
    # selective checkpointing and multi-token prediction (its ops only with MTP layers)
    okey = ("ops", id(store), layout.op_key_items, recompute_modules(pl), _tp_overlap(pl),
            pl.recompute == "selective_op", model_math.mtp_layers(m) > 0)
    if cache is None:
        ops = lookup_op_times(session, store)
    else:
        if okey not in cache:
            cache[okey] = lookup_op_times(session, store)
        ops = cache[okey]
    times = ops.times
    comm = CommModel(store, pl, cl)
    # CommModel reads the store, the cluster and the plan's t, cp and d (rank placement)
    # (and the shard group of hybrid sharding, which data-parallel collectives span)
    ckey = (id(store), tuple(getattr(cl, f.name) for f in dataclasses.fields(cl)), t, d, cp,
            *((pl.data_parallel_shard_size,) if pl.data_parallel_shard_size else ()))
    ring = None
    if cp > 1:
        blk = model_math.cp_kv_block_bytes(m, pl)
        def exchange(method: str, n: float) -> float:  # the all-to-all's group: cp_a2a_size
            return _memo(cache, (method, ckey, p, n, model_math.cp_a2a_size(pl)), warnings,
                         _comm_call(comm, method, n))
        core = (times["attention_core_fwd"], times["attention_core_bwd"])
        cpa = model_math.cp_a2a_size(pl)
        if getattr(pl, "cp_comm_type", "p2p") == "allgather":  # PyTorch's context_parallel
            ring = _cp_allgather_times(cp, *core, exchange("cp_all_gather", cp * blk),
                                       exchange("cp_send_recv", blk))
        elif model_math.cp_all_gather(pl):  # Megatron-Core's / TE's: nothing overlapped
            gather = exchange("cp_all_gather", cp * blk)
            ring = {"cp_fwd_hidden": 0.0, "cp_fwd_exposed": gather, "cp_bwd_hidden": 0.0,
                    "cp_bwd_exposed": gather + exchange("cp_reduce_scatter", cp * blk)}
        elif cp // cpa > 1:  # the ring (between the all-to-all groups of a2a+p2p)
            ring = _cp_ring_times(cp // cpa, *core, *(exchange("cp_send_recv", n)
                                                       for n in (blk, 2 * blk)))
        else:
            ring = dict.fromkeys(("cp_fwd_hidden", "cp_fwd_exposed", "cp_bwd_hidden",
                                  "cp_bwd_exposed"), 0.0)
        if cpa > 1:  # the all-to-alls before and after the core: not overlapped
            a2a = sum(exchange("cp_all_to_all", n) for n in model_math.cp_a2a_bytes(m, pl))
            ring["cp_fwd_exposed"] += a2a
            ring["cp_bwd_exposed"] += a2a
        times = {**times, **ring}
    moe = m.is_moe
    reduces = _reduces_gradients(session)
    # the expert groups' placement also reads ep and etp
    ekey = ckey + ((pl.expert_parallel, expert_tensor_parallel(pl)) if moe else ())

    def tp_call(kind: str, nbytes: float) -> float:
        return _memo(cache, ("tp", ckey, kind, nbytes), warnings,
                     _comm_call(comm, "tp_collective", kind, nbytes))

    def dp_call(kind: str, nbytes: float) -> float:
        return _memo(cache, ("dp", ckey, kind, nbytes), warnings,
                     _comm_call(comm, "dp_collective", kind, nbytes))

    def edp_call(kind: str, nbytes: float) -> float:
        return _memo(cache, ("edp", ekey, kind, nbytes), warnings,
                     _comm_call(comm, "edp_collective", kind, nbytes))

    act_bytes = pl.micro_batch_size * (m.seq_length // cp) * m.hidden_size * e
    tp = None
    if t > 1:
        kinds = ("reduce_scatter", "all_gather", "all_reduce") if key["sp"] else ("all_reduce",)
        tp = {k: tp_call(k, act_bytes) for k in kinds}
        if m.multi_latent_attention is True:  # MLA's latent collectives (mla_tp_latent_width)
            latent_bytes = act_bytes / m.hidden_size * model_math.mla_tp_latent_width(m)
            tp.update({"mla_" + k: tp_call(k, latent_bytes) for k in kinds})
        if model_math.mtp_layers(m):  # eh_proj's collectives (mtp_tp_collectives)
            per_el = act_bytes / m.hidden_size
            for phase, colls in zip(("mtp_fwd", "mtp_bwd"),
                                    model_math.mtp_tp_collectives(m, bool(key["sp"]))):
                tp[phase] = sum(tp_call(k, per_el * n) for k, n in colls)
    moe_comm = _moe_comm(session, comm, cache, ekey, warnings) if moe else None
    recipe = fp8_recipe(pl)
    fp8_speedup = 1.0
    if recipe is not None:  # the FP8 GEMMs' peak over BF16's (KeyError without them, named)
        fp8_speedup = (float(store.peak_flops[model_math.fp8_gemm_dtype(recipe)])
                       / float(store.peak_flops[tensor_dtype(pl.precision)]))
    v, reps, alike = layout.v, layout.reps, layout.alike
    dps: list[_DataParallel | None] = [None] * p
    for i, structs in layout.structs.items():
        dps[i] = _data_parallel(session, i, dp_call, edp_call) if structs[0].buckets else None
    if p > 2 and alike:
        dps[1:-1] = [dps[1]] * (p - 2)
    fwd_s, bwd_s, w_s, ready, over, fwd_b, bwd_b, w_b = _stage_spans(
        session, store, layout, times, ring, tp, dps, moe_comm, fp8_speedup, cache)
    p2p_bytes = act_bytes / t
    # hop i -> i+1 for i < p-1, and the wrap-around hop p-1 -> 0 when chunks wrap
    links = list(range(p - 1)) + ([p - 1] if v > 1 else [])
    skey = ("share", ckey, p, v > 1)  # rank placement: the cluster, t, d and p
    share = cache.get(skey) if cache is not None else None
    if share is None:
        share = [comm.stages_share_node(i, (i + 1) % p) for i in links]
        if cache is not None:
            cache[skey] = share
    hop = np.zeros(p)
    for flag in set(share):
        i = links[share.index(flag)]
        hop[[j for j, f in zip(links, share) if f == flag]] = _memo(
            cache, ("p2p", ckey, flag, p2p_bytes), warnings,
            _comm_call(comm, "p2p", i, p2p_bytes, (i + 1) % p))
    send_fwd = hop.copy()                 # i -> i+1 (mod p)
    send_bwd = np.concatenate([hop[-1:], hop[:-1]])  # i -> i-1 (mod p): the hop between i-1 and i
    experts = layout.experts  # model_math.expert_params_per_gpu: reduced over edp, not d
    n_params = layout.params - experts  # params_per_gpu(session) but the routed experts
    # as optimizer_params: 1/(d*cp) of the rest, 1/edp of the experts from ZeRO 1 on
    shards = (n_params / zero_shard_size(pl) + (experts / expert_data_parallel(pl) if moe else 0.0)
              if pl.zero_stage >= 1 else n_params + experts)
    # the all-gathered parameters' bytes (FP8 linear weights in 1 byte with fp8_param_gather)
    gather_bytes = (model_math.param_gather_bytes(pl, n_params, model_math.fp8_weights_per_gpu(m, pl))
                    if model_math.fp8_gathers_params(pl) else n_params * e)
    z = pl.zero_stage
    g = DTYPE_BYTES[grad_dtype(pl)]
    reduce_s, opt_s, after_opt = np.zeros(p), np.empty(p), np.zeros(p)
    fp8_w = model_math.fp8_weights_per_gpu(m, pl) if recipe is not None else None

    def both(kind: str, i: int, nbytes: float) -> float:
        """``kind`` over d*cp of the stage's parameters but the routed experts', and over edp of
        the experts' (two collectives one after the other)."""
        dense = gather_bytes[i] if kind == "all_gather" else n_params[i] * nbytes
        x = dp_call(kind, dense) if pl.dp_cp_size > 1 else 0.0
        return x + (edp_call(kind, experts[i] * nbytes) if experts[i] else 0.0)

    for i in reps:
        if reduces:
            if not pl.overlap_grad_reduce and z <= 1:  # one reduction after the last backward
                reduce_s[i] = both("reduce_scatter" if z == 1 else "all_reduce", i, g)
            if z in (1, 2) and not pl.overlap_param_gather:  # updated shards gathered after the step
                after_opt[i] = both("all_gather", i, e)
        opt_s[i] = _memo(cache, ("opt", id(store), pl.precision, shards[i]), warnings,
                         lambda sink, n=shards[i]: optimizer_time(store, n, pl.precision))
        if recipe is not None:  # TE re-quantizes the updated weights once per iteration
            opt_s[i] += _memo(cache, ("fp8_weights", id(store), recipe, fp8_w[i]), warnings,
                              lambda sink, n=fp8_w[i]: fp8_weight_cast_time(store, n, recipe))
    if p > 2 and alike:
        for a in (reduce_s, opt_s, after_opt):
            a[1:-1] = a[1]
    return StageTimes(fwd_s, bwd_s, w_s, send_fwd, send_bwd, reduce_s + after_opt, opt_s, reduces,
                      ready, over, reduce_s, after_opt, dict(times), tp, dps,
                      ops.warnings + sorted(set(warnings)), moe_comm, fp8_speedup,
                      fwd_b, bwd_b, w_b)


def _middle_stages_alike(session: Session) -> bool:
    """Whether the middle pipeline stages (1 to p-2) have the same work: always for models
    whose layers are all alike; for MoE models, models with sliding-window layers and under a
    custom pipeline layout (``plan.pipeline_model_parallel_layout``: its stages' layer counts
    may differ), when each stage holds as many layers in each chunk, its MoE and windowed
    layers at the same places (a pattern of ``moe_layer_frequency``, ``moe_first_dense_layers``
    or ``window_attn_skip_freq`` can differ between stages)."""
    m, pl = session.model, session.plan
    p = pl.pipeline_parallel
    if p > 3 and model_math.ep_overlap_on(pl):  # each stage's paired share differs (warm-up)
        return False
    windowed = model_math.window_layer_mask(m)
    if p <= 3 or (not m.is_moe and windowed.all() == windowed.any()
                  and pipeline_layout_text(pl) is None):  # a custom layout: compare the counts
        return True
    bounds = virtual_stage_layers(session)
    # each layer's kind: 2 * windowed + MoE
    mask = 2 * windowed.astype(np.int64) + (model_math.moe_layer_mask(m) if m.is_moe else 0)
    place = chunk_virtual_stages(pl).tolist()

    def pattern(i: int) -> tuple:
        return tuple(tuple(mask[bounds[k]:bounds[k + 1]].tolist()) for k in place[i])

    first = pattern(1)
    return all(pattern(i) == first for i in range(2, p - 1))


def ep_overlap_pair(f: tuple[float, float, float, float], b: tuple[float, float, float, float],
                    wgrad: float = 0.0) -> tuple[float, float, float]:
    """One MoE layer's forward and another's backward run together under Megatron-Core's
    combined 1F1B (``--overlap-moe-expert-parallel-comm``): their span and the exposed seconds
    of the forward's and of the backward's all-to-alls, ``(span, exposed_fwd, exposed_bwd)``.

    ``f = (a, d, m, c)``: the forward's computation before its dispatch (attention, router,
    permutation), its dispatch all-to-all, its experts (with what runs between the two
    all-to-alls), its combine all-to-all. ``b = (c, m, d, a)``: the backward's combine
    all-to-all, its experts' backward, its dispatch all-to-all, its computation after the
    dispatch (permutation, router and attention backward). Seconds each.

    Megatron-Core 0.19 ``TransformerLayerSchedulePlan.run`` issues, on two streams::

        comm: combine_bwd  | dispatch_fwd -> dispatch_bwd | combine_fwd
        comp: pre_fwd      | mlp_bwd      -> mlp_fwd      | pre_bwd

    each node waiting for its own pass's previous node, so the pair takes four steps of the
    longer of a computation and an all-to-all:
    ``max(a_f, c_b) + max(m_b, d_f) + max(m_f, d_b) + max(a_b, c_f)``. The forward's
    all-to-alls are exposed by ``max(d_f - m_b, 0) + max(c_f - a_b, 0)``, the backward's by
    ``max(c_b - a_f, 0) + max(d_b - m_f, 0)``; the span is both computations plus both
    exposures. The streams' contention for SMs and memory bandwidth is not modelled.

    ``wgrad``: with ``--delay-wgrad-compute`` the part of ``m_b`` that is the experts' weight
    gradient, which runs after ``mlp_bwd`` (``mlp.backward_dw``) while the dispatch all-to-all
    that needs only the input gradient runs beside it: with ``x = max(a_f, c_b)``,
    ``e1 = x + m_b - wgrad``, ``e2 = x + d_f``, the forward's dispatch exposes
    ``max(e2 - e1 - wgrad, 0)``, the backward's ``max(max(e1, e2) + d_b - max(e1 + wgrad, e2)
    - m_f, 0)`` (0 and the formula above when ``wgrad`` is 0).
    """
    af, df, mf, cf = f
    cb, mb, db, ab = b
    x = max(af, cb)
    e1, e2 = x + mb - wgrad, x + df
    ef = max(e2 - e1 - wgrad, 0.0) + max(cf - ab, 0.0)
    eb = max(cb - af, 0.0) + max(max(e1, e2) + db - max(e1 + wgrad, e2) - mf, 0.0)
    return af + mf + mb + ab + ef + eb, ef, eb


def _layer_segments(tmpl: _Template, layers: tuple[int, ...], src: int
                    ) -> list[tuple[float, float, float, float, float]]:
    """Per layer of ``layers`` with two tasks of source ``src`` among the timed template's
    compute-stream tasks: the seconds before the first, of the first, between, of the second,
    after (the layer's own tasks only)."""
    out = []
    for x in layers:
        idx = np.flatnonzero(tmpl.layer == x)
        dur, hit = tmpl.dur[idx], np.flatnonzero(tmpl.src[idx] == src)
        if hit.size != 2:
            continue
        i, j = int(hit[0]), int(hit[1])
        out.append((float(dur[:i].sum()), float(dur[i]), float(dur[i + 1:j].sum()),
                    float(dur[j]), float(dur[j + 1:].sum())))
    return out


def _delayed_wgrad_s(session: Session, values: np.ndarray) -> float:
    """The routed experts' weight gradient of one MoE layer's backward (the ``experts_bwd:W``
    source, :func:`weight_gradient_share`) under ``delay_wgrad_compute``; 0 without it."""
    if getattr(session.plan, "delay_wgrad_compute", False) is not True:
        return 0.0
    return float(values[_SRC["experts_bwd:W"]])


def ep_overlap_exposed(values: np.ndarray, structs: list[_Structure], session: Session,
                       stage: int) -> np.ndarray:
    """``values`` (:func:`_source_values` of stage ``stage``, whose chunks' structures are
    ``structs``) with the overlapped expert all-to-alls
    (``ep_all_to_all@fwd``, ``@bwd``) set to their mean exposed seconds under
    ``overlap_moe_expert_parallel_comm`` (unchanged without it).

    Every MoE layer of the stage's chunks ``structs``: its forward is paired with its own
    backward (layers alike: Megatron pairs the forward's layer ``i`` with the backward's layer
    ``n-1-i`` of another micro-batch) by :func:`ep_overlap_pair`, read from the timed
    templates (tensor-parallel and expert tensor-parallel collectives count with the
    computation they sit in; shared experts and the un-permutation with the computation beside
    them). Each of a pass's two all-to-alls is timed at half the pass's mean exposure.

    Only the stage's paired forwards and backwards hide anything
    (:func:`core.model.model_math.ep_overlap_paired_share`); the others expose their all-to-alls
    whole, so each all-to-all is timed at ``paired * exposed + (1 - paired) * whole`` (the mean
    over the stage's items: the items' durations, not their places in the schedule, are what the
    pipeline graph takes). With ``delay_wgrad_compute`` the experts' weight gradient of a
    layer's backward is deferred (:func:`ep_overlap_pair`'s ``wgrad``).
    """
    if not structs or not structs[0].ep_overlap:
        return values
    paired = model_math.ep_overlap_paired_share(session.plan, stage)
    wgrad_s = _delayed_wgrad_s(session, values)
    src_f, src_b = _SRC["ep_all_to_all@fwd"], _SRC["ep_all_to_all@bwd"]
    ef, eb = [], []
    for st in structs:
        if not st.moe_layers:
            continue
        fwd, bwd, _ = _span_templates(st)
        layers = _span_structure(st).moe_layers
        for fs, bs in zip(_layer_segments(fwd.timed(values), layers, src_f),
                          _layer_segments(bwd.timed(values), layers, src_b)):
            a, d, mid, c, post = fs
            pre, cb, midb, db, postb = bs
            _, x, y = ep_overlap_pair((a + post, d, mid, c), (cb, pre + midb, db, postb),
                                      wgrad_s)
            ef.append(x)
            eb.append(y)
    if not ef:
        return values
    out = values.copy()
    for src, exposed in ((src_f, ef), (src_b, eb)):
        out[src] = paired * float(np.mean(exposed)) / 2 + (1.0 - paired) * values[src]
    return out


def moe_comm_bytes(session: Session) -> dict[str, float]:
    """Bytes per GPU of one MoE layer's communication per micro-batch, by source.

    ``ep_all_to_all``: the send buffer of one dispatch (or combine) all-to-all, the rank's
    ``T_in`` tokens (``b s/(cp t)`` with sequence parallelism, ``b s/cp`` without) times ``k`` copies
    times ``h`` elements, times ``moe_imbalance_factor`` (the busiest rank); ``(ep-1)/ep``
    of it leaves the rank (:meth:`core.sim.comm.CommModel.all_to_all`). ``etp_all_gather``,
    ``etp_reduce_scatter``: the whole buffer of the expert tensor-parallel group, ``etp``
    times the received tokens' (nccl-tests convention).
    """
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]  # tokens are dispatched in BF16 under FP8 too
    sp = bool(pl.sequence_parallel and t > 1)
    T_in = pl.micro_batch_size * (m.seq_length // pl.context_parallel) / (t if sp else 1)
    a2a = T_in * m.moe_top_k * m.hidden_size * e * float(pl.moe_imbalance_factor)
    etp = expert_tensor_parallel(pl)
    return {"ep_all_to_all": a2a, "etp_all_gather": etp * a2a, "etp_reduce_scatter": etp * a2a}


def _moe_comm(session: Session, comm: CommModel, cache: dict | None, ekey: tuple,
              warnings: list[str]) -> dict[str, float]:
    """Seconds of one MoE layer's expert all-to-all and expert tensor-parallel collectives per
    micro-batch (:func:`moe_comm_bytes`); 0 for a group of one."""
    nbytes = moe_comm_bytes(session)
    m = session.model
    # DeepEP / HybridEP (flex): one copy per other node holding one of the token's experts
    remote = comm.ep_remote_copies(m.num_experts, m.moe_top_k, m.moe_router_num_groups,
                                   m.moe_router_group_topk)
    dispatcher = getattr(session.plan, "moe_token_dispatcher_type", "alltoall")
    out = {"ep_all_to_all": _memo(cache, ("ep_a2a", ekey, dispatcher, nbytes["ep_all_to_all"],
                                          remote),
                                  warnings,
                                  _comm_call(comm, "ep_all_to_all", nbytes["ep_all_to_all"],
                                             remote, m.moe_top_k))}
    for kind in ("all_gather", "reduce_scatter"):
        name = "etp_" + kind
        out[name] = _memo(cache, ("etp", ekey, kind, nbytes[name]), warnings,
                          _comm_call(comm, "etp_collective", kind, nbytes[name]))
    return out


def _stage_items(graph: ExecutionGraph, stage: int) -> list[tuple[int, int, int, int, int]]:
    """``(phase, chunk, micro-batch, first task, last task)`` of each work item of ``stage`` in
    program order: the runs of equal (phase, chunk, micro-batch) along the stage's chain."""
    idx = np.flatnonzero((graph.stage == stage) & (graph.kind != K["pp_p2p"])
                         & (graph.microbatch >= 0))
    keys = np.stack([graph.phase[idx], graph.chunk[idx], graph.microbatch[idx]], axis=1)
    cut = np.flatnonzero(np.any(keys[1:] != keys[:-1], axis=1)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [idx.size]]) - 1
    return [(int(keys[a, 0]), int(keys[a, 1]), int(keys[a, 2]), int(idx[a]), int(idx[e]))
            for a, e in zip(starts, ends)]


def _attach_side_tasks(graph: ExecutionGraph, templates: list[dict[tuple[int, int], _Template]],
                       after_optimizer_s: np.ndarray | None = None, num_microbatches: int = 1,
                       chain_start: bool = True) -> ExecutionGraph:
    """``graph`` with the communication that overlaps computation (see :class:`_Template`) and the
    parameter all-gather after each stage's optimizer step (``after_optimizer_s``, 0: none).

    ``templates[i][(phase, chunk)]`` is the template of stage ``i``'s work items of that phase
    and chunk. Every added task runs on its stage's communication stream (one chain per
    collective kind within an item). A side task that starts with its item depends on what
    the item's first task depends on; one that ends its item gates every successor of the
    item's last task (the next item and the pipeline send), so the merged tasks of
    :meth:`StageTimes.programs` keep the same times. The ``start`` tasks of each chunk gate
    its first forward (micro-batch 0), chained across chunks when ``chain_start``; the
    ``last`` tasks follow the chunk's last weight-gradient item (micro-batch m-1) and gate
    the stage's tail.
    """
    p = graph.num_stages
    need = any(t.has_side for stage in templates for t in stage.values())
    if after_optimizer_s is not None and np.any(after_optimizer_s > 0):
        need = True
    if not need:
        return graph
    src, dst = graph.src, graph.dst
    by_dst = np.argsort(dst, kind="stable")
    by_src = np.argsort(src, kind="stable")
    sorted_dst, sorted_src = dst[by_dst], src[by_src]
    joins: dict[int, list[int]] = {}  # task -> side tasks that end the item before it (added here)

    def preds(x: int) -> np.ndarray:
        lo, hi = np.searchsorted(sorted_dst, [x, x + 1])
        return np.concatenate([src[by_dst[lo:hi]], np.array(joins.get(x, []), np.int64)])

    def succs(x: int) -> np.ndarray:
        lo, hi = np.searchsorted(sorted_src, [x, x + 1])
        return dst[by_src[lo:hi]]

    n0 = graph.num_tasks
    cols = ("dur", "stage", "mb", "layer", "op", "chunk", "phase", "overlapped", "kind")
    new: dict[str, list] = {k: [] for k in cols}
    e_src: list[np.ndarray] = []
    e_dst: list[np.ndarray] = []

    def task(values: tuple) -> int:
        for k, v in zip(cols, values):
            new[k].append(v)
        return n0 + len(new["dur"]) - 1

    def edges(a, b) -> None:
        a, b = np.atleast_1d(np.asarray(a, np.int64)), np.atleast_1d(np.asarray(b, np.int64))
        a, b = np.broadcast_arrays(a, b)
        e_src.append(a.ravel())
        e_dst.append(b.ravel())

    grad_phase = {t_phase for stage in templates for (t_phase, _), t in stage.items() if t.last_src.size}
    side_plan: dict[int, tuple] = {}  # template id -> its side tasks' masks and chain pairs

    def plan_of(tmpl: _Template) -> tuple:
        """What every item of ``tmpl`` repeats: the side tasks that start after a template
        task (``after >= 0``), the chain pairs (each side task after the previous one of its
        collective) and the side tasks that end the item (``before < 0``)."""
        got = side_plan.get(id(tmpl))
        if got is None:
            ops = tmpl.side_op
            chain_prev, chain_next = [], []
            last_of: dict[int, int] = {}
            for j, op in enumerate(ops.tolist()):
                if op in last_of:
                    chain_prev.append(last_of[op])
                    chain_next.append(j)
                last_of[op] = j
            dep = tmpl.side_after >= 0
            ends = tmpl.side_before < 0
            got = side_plan[id(tmpl)] = (
                dep, np.flatnonzero(~dep), np.array(chain_prev, np.int64),
                np.array(chain_next, np.int64), ends, np.flatnonzero(ends))
        return got

    for i in range(p):
        tmpls = templates[i]
        tail = np.flatnonzero((graph.stage == i) & (graph.microbatch < 0) & (graph.kind != K["pp_p2p"]))
        items = _stage_items(graph, i) if any(t.has_side for t in tmpls.values()) else []
        start_prev: dict[int, int] = {}
        for phase, chunk, mb, first, last in items:
            tmpl = tmpls[(phase, chunk)]
            k = tmpl.side_dur.size
            if k:
                # the item's side tasks, vectorized over the template's k side tasks
                dep, free, c_prev, c_next, ends, end_idx = plan_of(tmpl)
                x = n0 + len(new["dur"]) + np.arange(k, dtype=np.int64)
                for name, values in (("dur", tmpl.side_dur), ("layer", tmpl.side_layer),
                                     ("op", tmpl.side_op), ("kind", tmpl.side_kind)):
                    new[name].extend(values.tolist())
                for name, value in (("stage", i), ("mb", mb), ("chunk", chunk),
                                    ("phase", phase), ("overlapped", True)):
                    new[name].extend([value] * k)
                if dep.any():
                    edges(first + tmpl.side_after[dep], x[dep])
                if free.size:
                    pr = preds(first)
                    edges(np.repeat(pr, free.size), np.tile(x[free], pr.size))
                if c_prev.size:
                    edges(x[c_prev], x[c_next])
                if end_idx.size < k:
                    edges(x[~ends], first + tmpl.side_before[~ends])
                if end_idx.size:
                    ys = succs(last)
                    edges(np.repeat(x[end_idx], ys.size), np.tile(ys, end_idx.size))
                    for y in ys.tolist():
                        joins.setdefault(y, []).extend(x[end_idx].tolist())
            if phase == schedules.PHASE_F and mb == 0 and tmpl.start_dur.size:
                if not chain_start:
                    start_prev = {}
                for dur, layer, op, before in zip(tmpl.start_dur.tolist(), tmpl.start_layer.tolist(),
                                                  tmpl.start_op.tolist(), tmpl.start_before.tolist()):
                    x = task((dur, i, -1, layer, op, chunk, -1, True, K["dp_comm"]))
                    if op in start_prev:
                        edges(start_prev[op], x)
                    start_prev[op] = x
                    edges(x, first + before)
            if (phase in grad_phase and mb == num_microbatches - 1 and tmpl.last_dur.size
                    and tail.size):
                prev = {}
                for dur, layer, op, after in zip(tmpl.last_dur.tolist(), tmpl.last_layer.tolist(),
                                                 tmpl.last_op.tolist(), tmpl.last_after.tolist()):
                    x = task((dur, i, mb, layer, op, chunk, phase, True, K["dp_comm"]))
                    edges(first + after, x)
                    if op in prev:
                        edges(prev[op], x)
                    prev[op] = x
                    edges(x, tail[0])
        if after_optimizer_s is not None and after_optimizer_s[i] > 0 and tail.size:
            x = task((float(after_optimizer_s[i]), i, -1, -1, OP["dp_all_gather"], -1, -1, False,
                      K["dp_comm"]))
            edges(tail[-1], x)
    k = len(new["dur"])
    if not k:
        return graph

    def col(name: str, dtype) -> np.ndarray:
        return np.array(new[name], dtype)

    kinds = col("kind", np.int8)
    return ExecutionGraph(
        duration_s=np.concatenate([graph.duration_s, col("dur", np.float64)]),
        kind=np.concatenate([graph.kind, kinds]),
        stream=np.concatenate([graph.stream, np.where(kinds == K["cp_p2p"], CP_RING, COMM
                                                      ).astype(np.int8)]),
        stage=np.concatenate([graph.stage, col("stage", np.int32)]),
        microbatch=np.concatenate([graph.microbatch, col("mb", np.int32)]),
        layer=np.concatenate([graph.layer, col("layer", np.int32)]),
        src=np.concatenate([src] + e_src).astype(np.int64),
        dst=np.concatenate([dst] + e_dst).astype(np.int64),
        num_stages=p,
        op=np.concatenate([graph.op, col("op", np.int16)]),
        chunk=np.concatenate([graph.chunk, col("chunk", np.int16)]),
        phase=np.concatenate([graph.phase, col("phase", np.int8)]),
        overlapped=np.concatenate([np.zeros(n0, bool), col("overlapped", bool)]),
        chunk_stages=graph.chunk_stages,
    )


def build_graph(session: Session, store, detail: str = "op", cache: dict | None = None,
                times: StageTimes | None = None) -> tuple[ExecutionGraph, list[str]]:
    """Execution graph of one iteration of Megatron-style GPT training.

    Per stage and micro-batch: embedding (first stage), per layer attention
    and MLP, the output layer with cross-entropy (last stage). Tensor
    parallelism adds an all-reduce after each op in the forward and before it
    in the backward (the input gradient of the column-parallel GEMM); with
    sequence parallelism an all-gather before and a reduce-scatter after each
    instead (Korthikanti et al. 2022). Full recomputation runs a layer's
    forward again right before its backward (the stage's first
    ``recompute_num_layers`` layers when set, Megatron's block method);
    selective recomputation runs the attention core again before the attention
    backward. Pipeline transfers carry ``b*s*h/t`` elements per GPU
    (Megatron's scatter-gather optimisation; the all-gather after it is not
    modelled).

    Data parallelism (one bucket per layer; :func:`_stage_tasks`): ZeRO 0
    all-reduces the gradients and ZeRO 1 (Megatron's distributed optimizer)
    reduce-scatters them after the last backward, or bucket by bucket under
    the final backward with ``overlap_grad_reduce`` (tasks on the
    communication stream, each after its layer's backward; the optimizer
    waits for the last). ZeRO 2 and 3 reduce-scatter every micro-batch's
    gradients (blocking, or overlapped within that backward), and ZeRO 3
    all-gathers each layer's parameters before its forward and its backward
    (blocking, or prefetched on the communication stream with
    ``overlap_param_gather``). The optimizer steps over the stage's
    parameters, ``1/d`` of them from ZeRO 1 on; ZeRO 1 and 2 then all-gather
    the updated parameters, after the step or, with ``overlap_param_gather``,
    from the start of the (next) iteration under the first forward.

    Parameters
    ----------
    session : Session
    store : ProfileStore
    detail : {"op", "microbatch"}
        ``"op"``: one task per op and collective (what the timeline draws).
        ``"microbatch"``: each stage's forward (resp. backward with
        recomputation) of one micro-batch merged into one ``forward`` (resp.
        ``backward``) task of the span of its tasks, ``layer = -1``; the
        data-parallel tail of each stage merged into one task. The merged
        tasks have one entry and one exit, so every remaining task (pipeline
        transfers, optimizer step) and the iteration time keep their start and
        end times (up to float rounding); the graph is about ``L/p * 4`` times
        smaller. The compute/communication split per stage is lost.
    cache : dict, optional
        Memo of lookups shared between calls (see :func:`stage_times`).
    times : StageTimes, optional
        ``stage_times(session, store, cache)`` when the caller already has it.

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
    st = times if times is not None else stage_times(session, store, cache)
    p, m, v = pl.pipeline_parallel, pl.num_microbatches, num_chunks(pl)
    split = schedules.get(pl.schedule).splits_backward
    F, B, W = schedules.PHASE_F, schedules.PHASE_B, schedules.PHASE_W
    if detail == "microbatch":
        graph = build_pipeline_graph(st.programs(), m, pl.schedule)
        # the parameter all-gathers and gradient buckets that overlap work items, as the time
        # they add beyond them
        templates = []
        for i in range(p):
            tmpls: dict[tuple[int, int], _Template] = {}
            for c in range(v):
                for phase in (F, B, W):
                    u = _Unit()
                    u.tasks.append((0, COMPUTE, 0, -1))
                    if phase == F and st.ready_s[i, c] > 0:
                        u.start.append((K["dp_comm"], 0, OP["dp_all_gather"], 0))
                    grads = W if split else B
                    if phase == grads and st.chunk_tail_s[i, c] > 0:
                        u.last.append((K["dp_comm"], 0, OP["dp_all_reduce"], 0))
                    t = _Template.assemble([(u, [-1])])
                    tmpls[(phase, c)] = dataclasses.replace(
                        t, start_dur=np.array([st.ready_s[i, c]])[:t.start_src.size],
                        last_dur=np.array([st.chunk_tail_s[i, c]])[:t.last_src.size])
            templates.append(tmpls)
        return (_attach_side_tasks(graph, templates, num_microbatches=m, chain_start=False),
                st.warnings)
    reduce_after = _reduces_gradients(session) and pl.zero_stage <= 1 and not pl.overlap_grad_reduce
    programs, templates = [], []
    for i in range(p):
        fwds, bwds, wgds = _stage_tasks(session, i, st.op_times_s, st.tp_comm_s, st.dp[i],
                                        st.moe_comm_s, st.fp8_speedup)
        templates.append({**{(F, c): t for c, t in enumerate(fwds)},
                          **{(B, c): t for c, t in enumerate(bwds)},
                          **{(W, c): t for c, t in enumerate(wgds)}})

        def task_template(t: _Template) -> TaskTemplate:
            return TaskTemplate(t.kind, t.stream, t.dur, t.layer, t.op)

        programs.append(StageProgram(
            [task_template(t) for t in fwds], [task_template(t) for t in bwds],
            [task_template(t) for t in wgds] if split else None,
            send_fwd_s=float(st.send_fwd_s[i]), send_bwd_s=float(st.send_bwd_s[i]),
            dp_comm_s=float(st.dp_reduce_s[i]) if reduce_after else None,
            optimizer_s=float(st.optimizer_s[i])))
    graph = build_pipeline_graph(programs, m, pl.schedule)
    return (_attach_side_tasks(graph, templates, st.after_optimizer_s, num_microbatches=m),
            st.warnings)
