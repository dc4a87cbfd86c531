"""Per-session inputs of the graph: op times from the profile store, parameter counts, the
layer split over virtual stages and the split of a backward into input and weight gradients.

What belongs here: :func:`lookup_op_times` (and :func:`op_key`, :class:`OpTimes`), optimizer
and FP8 cast times, :func:`params_per_gpu` / :func:`optimizer_params`,
:func:`virtual_stage_layers` / :func:`num_chunks` / :func:`chunk_virtual_stages` (the
schedule's placement), :func:`weight_gradient_share` and the tensor-parallel overlap split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.model import kernels, model_math
from core import schedules
from core.plan.session import Session
from core.plan.parallel import tensor_dtype, tp_overlap_applies, zero_shard_size
from core.plan.layout import virtual_stage_layer_counts
from core.model.base import WGRAD_ACCUMULATION_KEY
from core.model.fp8 import FP8_WEIGHT_CAST_OP
from core.model.ops import (DERIVED_OPS, EDGE_OPS, LAYER_OPS, OPTIMIZER_OP, analytic_op_time,
                  table_covers)
from core.model.keys import (MODULE_OPS, MOE_DERIVED_OPS, MOE_OPS, SELECTIVE_OP_GEMMS,
                             SELECTIVE_OP_OPS, SWA_OPS, TP_OVERLAP_OPS)
from core.model.cuda_graphs import captured_ops, is_captured, uses_cuda_graphs
from core.model.memory import optimizer_step_traffic
from core.model.moe import expert_data_parallel
from core.model.tf32 import TF32_DTYPE, tf32_key
from core.sim.stage_comm import pinned
from core.plan.parallel import recompute_modules

__all__ = ["DETAILS", "OpTimes", "chunk_virtual_stages", "fp8_weight_cast_time", "lookup_op_times",
           "num_chunks", "op_key", "optimizer_params", "optimizer_time", "params_per_gpu",
           "tp_overlap_split", "virtual_stage_layers", "weight_gradient_share"]


def params_per_gpu(session: Session) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage before ZeRO sharding, shape (p,)
    (:func:`core.model.counts.params_per_gpu`)."""
    return model_math.params_per_gpu(session.model, session.plan)


def optimizer_params(session: Session) -> np.ndarray:
    """Parameters the optimizer of one GPU of each stage updates, shape (p,): all it holds, or
    its ``1/(d*cp)`` shard from ZeRO stage 1 on (Megatron's distributed optimizer shards over
    the data-parallel group with the context-parallel ranks; with hybrid sharding over a
    shard group's ``size*cp``, :func:`core.plan.parallel.zero_shard_size`; the routed experts'
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
    """Key of the session's ops: :func:`core.model.kernels.op_key` of its model and plan (the
    profile store's key columns plus ``sp``, ``cpa``, ``cpg`` and, with FP8, ``fp8``)."""
    return kernels.op_key(session.model, session.plan)


#: Ops every plan looks up (the derived ones are parts of a tabulated op; those of MoE layers
#: only for MoE models; those of a recomputed module only when the plan recomputes it).
LOOKUP_OPS = (LAYER_OPS + EDGE_OPS + tuple(op for op in DERIVED_OPS if op not in MOE_DERIVED_OPS)
               + model_math.MTP_OPS)
#: Derived ops only the plans that recompute their module need (core.model.keys.MODULE_OPS).
_MODULE_ONLY_OPS = frozenset(op for mod, ops in MODULE_OPS.items() if mod != "core_attn" for op in ops)


def lookup_op_times(session: Session, store, memo: dict | None = None) -> OpTimes:
    """Times of every op for the session's shapes, from the store's tables or its analytic model.

    ``memo`` (a dict, optional) keeps each analytic op time under the op, its key and the
    store's identity, for further calls with the same ``store`` (a sweep's plans look up many
    of the same ops under keys that differ elsewhere); the times are the same with it.

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
    BF16 GEMMs, :func:`core.model.kernels.op_kernels`); nor context-parallel attention
    (no ``cp`` column): it takes the row of the attention op on the rank's ``s/cp``
    tokens without the ring, scaled by the ratio of their analytic times (the core's
    ``cp`` causal steps against one); nor unfused MLP activations (``actf``: the rows are
    Megatron-Core's fused ``bias_swiglu`` / ``bias_gelu``): an unfused op takes the fused
    row's time scaled the same way (:func:`core.model.mlp.activation_kernels`).
    MoE models add :data:`core.model.keys.MOE_OPS`; a measured or calibrated store without
    their tables times them with its analytic model and one warning says so.

    TF32 matmuls (an fp32 plan with ``plan.tf32``; the key's ``tf32`` entry) read the rows
    whose ``dtype`` is ``"tf32"``, never the ``fp32`` ones (``vtrain profile run`` times fp32
    with TF32 off); an analytic or calibrated store's model times them at its ``tf32`` peak.

    Tables hold backward ops whose weight gradients are each added to the gradient buffer by a
    kernel of their own (no ``wacc`` column, :func:`core.plan.parallel.wgrad_accumulation`):
    a plan with gradient accumulation fusion (Megatron-Core's default) or FSDP takes the row
    scaled by the ratio of its analytic time to the row's.

    CUDA graphs (``plan.cuda_graph_impl``): an op they capture
    (:func:`core.model.cuda_graphs.captured_ops`) takes its device time alone, its row's time
    scaled by the ratio of its analytic device time to the row's analytic time (an analytic or
    calibrated store's row is ``max(device, host)``: the host time, ``op_overhead_s`` and
    ``kernel_launch_s`` per kernel, drops out).

    Raises
    ------
    KeyError
        A TF32 plan on a measured store that has no ``tf32`` row (named with the device), a
        plan with CUDA graphs on a measured store (its times hold the host time of the eager
        calls it timed, which cannot be told apart from the device time), or a peak FLOP/s the
        plan needs that the store lacks.
    """
    key = op_key(session)
    items_of: dict[int, tuple] = {}  # id(k) -> (k, its sorted items): one tuple per key dict

    def analytic(op: str, k: dict, host: bool = True) -> float:
        """:func:`analytic_op_time` of ``op`` under ``k`` on ``store``, kept in ``memo``. The
        ops of one key share its items' tuple in their memo keys, kept once in ``memo`` (a
        sweep's memo holds hundreds of thousands of them: one tuple of about 20 pairs each
        otherwise)."""
        if memo is None:
            return analytic_op_time(op, k, store, host)
        seen = items_of.get(id(k))
        if seen is None or seen[0] is not k:  # k kept alive in it: its id is not reused
            items = tuple(sorted(k.items()))
            seen = items_of[id(k)] = (k, memo.setdefault(("op key items", items), items))
        mkey = ("analytic op", pinned(memo, store), op, seen[1], host)
        hit = memo.get(mkey)
        if hit is None:
            hit = memo[mkey] = analytic_op_time(op, k, store, host)
        return hit

    # tables hold 16-bit ops without sequence parallelism; an FP8 op scales its BF16 row
    table_key = {c: v for c, v in key.items()
                 if c not in ("fp8", model_math.FAMILY_KEY, WGRAD_ACCUMULATION_KEY)}
    table_key["dtype"] = tensor_dtype(str(key["dtype"]))
    # nor ring attention (no cp column): a context-parallel attention op scales the row of the
    # same op without context parallelism on the rank's s/cp tokens
    table_key["cp"] = table_key["cpa"] = 1
    table_key["cpg"] = 0
    # nor unfused activations (no actf column; core.model.keys.activation_fusion): an MLP op
    # with Megatron-Core's unfused activation scales the fused op's row
    if "actf" in table_key:
        table_key["actf"] = "fused"
    plain = {**table_key, "sp": False}
    # the rows a lookup reads: TF32 ops the "tf32" rows (table_key keeps fp32 with the flag,
    # what the analytic model of such a row is)
    row_key = {**table_key, "dtype": TF32_DTYPE} if tf32_key(key) else table_key
    method = str(store.provenance.get("method", "analytic"))
    out = OpTimes({})
    tables = set(store.op_names())
    if tf32_key(key) and method == "measured" and not _has_tf32_rows(store):
        raise KeyError(f"the measured profile of {store.device_name} has no TF32 op times (no "
                       f"table row with dtype 'tf32'; its fp32 rows are timed with TF32 matmuls "
                       f"off), and plan.tf32 runs this fp32 plan's matmuls in TF32: use an "
                       f"analytic or calibrated profile of {store.device_name}, or set "
                       f"plan.tf32 false")
    if uses_cuda_graphs(session.plan) and method == "measured":
        raise KeyError(f"the measured profile of {store.device_name} times ops eagerly, host time "
                       f"included, and plan.cuda_graph_impl={session.plan.cuda_graph_impl!r} "
                       f"removes the host time of the ops it captures: their device time alone "
                       f"is not in the profile; use an analytic or calibrated profile of "
                       f"{store.device_name}, or set plan.cuda_graph_impl none")
    captured = captured_ops(session.plan)
    moe_ops = (MOE_OPS + MOE_DERIVED_OPS) if session.model.is_moe else ()
    window = int(getattr(session.model, "window_size", None) or 0)
    swa_used = bool(model_math.window_layer_mask(session.model).any())
    needed = {op for mod in recompute_modules(session.plan) for op in MODULE_OPS.get(mod, ())}
    # a calibrated store without per-shape factors times every op with its fitted analytic
    # model (the modern stores, fitted on MoE runs too): nothing sets the MoE ops apart there
    per_shape = method == "measured" or bool(store.provenance.get("num_shape_factors", 1))
    if moe_ops and method != "analytic" and per_shape and not set(moe_ops) <= tables:
        out.warnings.append(f"MoE ops (router, token permutation, experts, shared experts) are "
                            f"not in the {method} profile of {store.device_name}: the store's "
                            "analytic model (its fitted parameters, no measured or per-shape "
                            "times) times them")
    for op in LOOKUP_OPS + moe_ops:
        if op == "attention_core_bwd" and key["cp"] == 1:
            continue  # only the context-parallel ring splits the attention backward
        if op in _MODULE_ONLY_OPS and op not in needed:
            continue  # a part of an op that only a recomputed module runs
        if op in SELECTIVE_OP_OPS and session.plan.recompute != "selective_op":
            continue  # what only per-op selective checkpointing runs again
        if op in SELECTIVE_OP_GEMMS and not (session.plan.recompute == "selective_op"
                                             and tp_overlap_applies(session.plan)):
            continue  # the recomputed GEMMs that overlapped recomputed all-gathers hide
        if op in SWA_OPS and not swa_used:
            continue  # no layer with a sliding window
        if op in TP_OVERLAP_OPS and not tp_overlap_applies(session.plan):
            continue  # the GEMMs that overlapped tensor-parallel collectives hide
        if op in model_math.MTP_OPS and not model_math.mtp_layers(session.model):
            continue  # no multi-token prediction
        base = DERIVED_OPS.get(op, op)
        # a windowed layer's op: the window in its key; tables hold full attention (no window
        # column): it scales the full op's row by the ratio of their analytic times
        op_key_ = {**key, "w": window} if op in SWA_OPS else key
        # a table without a family column holds GPT ops only (core.model.keys.table_covers)
        covered = base in tables and table_covers(base, table_key, store.op_table(base)[0])
        lk = store.op_time(base, row_key) if covered else None
        host = not is_captured(op, captured)  # a captured op: its device time alone
        if lk is not None:
            out.times[op] = lk.time_s
            if op != base or key["sp"] or key != table_key or not host:
                out.times[op] *= analytic(op, op_key_, host) / analytic(base, plain)
            if lk.extrapolated and method == "measured" and op == base:
                out.warnings.append(f"{op}: b={key['b']} outside the profiled micro-batch sizes "
                                    f"(extrapolated)")
        else:
            out.times[op] = analytic(op, op_key_, host)
            if method == "measured" and op == base and op not in moe_ops:
                out.warnings.append(f"{op}: shape not in the {method} profile; analytic model used")
    return out


def _has_tf32_rows(store) -> bool:
    """Whether any op table of ``store`` holds a row of dtype ``"tf32"`` (TF32 matmuls)."""
    for op in store.op_names():
        dtypes = store.op_table(op)[0].get("dtype")
        if dtypes is not None and TF32_DTYPE in {str(d) for d in np.asarray(dtypes).ravel()}:
            return True
    return False


def optimizer_time(store, num_params: float, plan) -> float:
    """Seconds for the optimizer step over ``num_params`` parameters on one GPU of ``plan``
    (its training precision: FP8 training steps BF16 weights,
    :func:`core.plan.parallel.tensor_dtype`; under the precision-aware optimizer the step moves
    :func:`core.model.memory.optimizer_step_traffic` of the bytes, timed as that share of the
    parameters); 0 for a GPU without parameters (a stage a custom pipeline layout leaves
    empty)."""
    if num_params <= 0:
        return 0.0
    n = num_params * optimizer_step_traffic(plan)
    key = {"n": int(n), "dtype": tensor_dtype(plan.precision)}
    lk = store.op_time(OPTIMIZER_OP, key)
    return lk.time_s if lk is not None else analytic_op_time(OPTIMIZER_OP, key, store)


def fp8_weight_cast_time(store, num_weights: float, recipe: str) -> float:
    """Seconds to quantize ``num_weights`` BF16 weights of the linear layers to FP8 on one GPU,
    once per iteration (:data:`core.model.fp8.FP8_WEIGHT_CAST_OP`,
    :func:`core.model.fp8.fp8_cast_kernels`); the analytic model of ``store``."""
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
    :func:`core.plan.layout.virtual_stage_layer_counts`: without interleaving the stages of
    :func:`core.plan.layout.stage_layer_counts` (uneven first and last stages included), with it
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
W_OPS = ("attention_bwd", "mlp_bwd", "output_bwd", "embedding_bwd", "router_bwd", "experts_bwd",
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
    ``F_lin`` over ``2 F_lin + 2 F_core`` (:func:`core.model.mla.mla_forward_flops_per_token`;
    GPT's ``8h^2`` and ``4sh`` give the ratio above). With FP8 the weight GEMMs run ``fp8_speedup``
    times faster than the BF16 core (the FP8 peak over BF16's): their FLOPs
    count ``1/fp8_speedup``, ``(8h/r) / (16h/r + 8s)``.
    """
    if op == "attention_bwd" and session.model.multi_latent_attention is True:
        # MLA: its linear layers' and core's FLOPs (core.model.mla.mla_forward_flops_per_token)
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


#: The layer ops whose sequence-parallel collectives ``tp_comm_overlap`` overlaps with a GEMM,
#: and the op whose GEMMs they are (a windowed layer's linear layers are the full layer's).
TP_OVERLAP_BLOCKS = {"attention_fwd": "attention_fwd", "attention_swa_fwd": "attention_fwd",
                      "attention_bwd": "attention_bwd", "attention_swa_bwd": "attention_bwd",
                      "mlp_fwd": "mlp_fwd", "mlp_bwd": "mlp_bwd"}
#: Sources of the overlapped collectives: exposed (``tp_{kind}@{op}``) and hidden parts.
TP_OVERLAP_SOURCES = tuple(f"tp_{kind}@{op}{part}" for op in TP_OVERLAP_BLOCKS
                            for kind in ("all_gather", "reduce_scatter") for part in ("", ":hidden"))
#: Per-op selective checkpointing with tensor parallelism: the all-gather each recomputed op
#: runs again, by recomputed op, and the recomputed GEMM its output feeds
#: (:data:`core.model.keys.SELECTIVE_OP_GEMMS`), which ``tp_comm_overlap`` pipelines it with.
SAC_GATHERS = {src: gemm for gemm, (src, _) in SELECTIVE_OP_GEMMS.items()}
SAC_GATHER_SOURCES = tuple(f"tp_all_gather@{op}{part}" for op in SAC_GATHERS
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
