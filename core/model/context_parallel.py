"""Context parallelism (Megatron-Core ``--context-parallel-size``): ring (p2p), all-gather and
all-to-all attention cores, the K/V blocks and exchanges they move, and their buffers.
"""

from __future__ import annotations


from core.model.base import DTYPE_BYTES, Kernel, mem
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, tensor_dtype

__all__ = [
    "cp_a2a_bytes", "cp_a2a_size", "cp_all_gather", "cp_all_gather_core",
    "cp_core_output_kept_twice", "cp_exchange_buffer_bytes", "cp_exchange_bytes",
    "cp_head_sizes", "cp_kv_block_bytes", "cp_output_bytes", "cp_query_bytes",
]


def cp_head_sizes(model: ModelConfig) -> tuple[int, int]:
    """``(d_qk, d_v)``: channels per head of the attention core's queries and keys, and of its
    values and output, the sizes context parallelism moves. Multi-head latent attention
    (Megatron-Core ``MLASelfAttention``): ``qk_head_dim + qk_pos_emb_head_dim`` and
    ``v_head_dim`` (DeepSeek-V3: 192 and 128), its K/V heads the query heads; every other model
    ``(kv_channels, kv_channels)`` (:attr:`ModelConfig.head_dim`). Transformer Engine 2.20's
    context-parallel functions take Q, K and V of their own sizes (``AttnFuncWithCPAndKVP2P``
    flattens K and V into one buffer, ``torch.cat((k.view(-1), v.view(-1)))``; the all-gather
    gathers K and V apart; the all-to-all moves each tensor apart; the output is
    ``q.shape[:-1] + v.shape[-1:]``)."""
    if getattr(model, "multi_latent_attention", False) is True:
        return (int(model.qk_head_dim) + int(model.qk_pos_emb_head_dim), int(model.v_head_dim))
    return model.head_dim, model.head_dim


def cp_all_gather_core(b: int, s: int, cp: int, heads: int, groups: int, dh: int, e: int,
                        step_flops: float, dv: int | None = None
                        ) -> tuple[list[Kernel], list[Kernel]]:
    """The attention core of Megatron-Core's all-gather context parallelism (``--cp-comm-type
    all_gather``; Transformer Engine's ``AttnFuncWithCPAndKVAllGather``, the Llama 3 paper's
    Sec. 3.3.2), forward and backward kernel lists for a rank of ``s`` tokens (``s_full/cp``,
    its two load-balanced chunks), ``heads`` / ``groups`` its query and K/V heads, ``dh`` the
    head size of Q and K, ``dv`` of V and the output (``dh`` when None; MLA's differ,
    :func:`cp_head_sizes`), ``e`` bytes per element, ``step_flops`` the FLOPs of one causal
    ``s x s`` FlashAttention pass (the ring's step).

    The all-gather (communication, timed by the graph) leaves the whole sequence's K and V on
    every rank; TE puts its ``2*cp`` chunks in sequence order (an index_select of each: one
    read and one write of the gathered K and V). Each of the rank's two chunks of ``s/2``
    queries then attends to the keys up to its own end in one FlashAttention kernel (the two on
    two streams; their outputs copied into the output, one read and one write of it): as many
    query-key pairs as the ring's ``cp`` causal steps, ``cp * step_flops`` in all, half per
    chunk on the rank average (chunk ``r`` and ``2cp-1-r`` attend ``r+1/2`` and ``2cp-r-1/2``
    chunks of keys). The backward gathers K and V again (TE keeps only the rank's own), runs
    the two chunks' backward kernels into a zeroed whole-sequence dK and dV (write, then
    read and write per chunk), and puts those back in chunk order (one read and one write)
    before their reduce-scatter (communication)."""
    dv = dh if dv is None else dv
    kv_all = e * b * cp * s * groups * (dh + dv)  # the gathered K and V
    o = e * b * s * heads * dv  # the rank's output
    half_q, mean_kv = s // 2, cp * s // 2  # a chunk's queries; the keys it attends to, on average
    io = float(e * b * (dh + dv) * (half_q * heads + mean_kv * groups))  # Q, O; K, V
    fwd = [mem("cp_ag_reorder", 2 * kv_all),
           *[Kernel("flash_attn", cp * step_flops / 2, io, half_q, mean_kv, dh, b * heads)] * 2,
           mem("cp_ag_out_copy", 2 * o)]
    bwd = [mem("cp_ag_reorder", 2 * kv_all), mem("cp_ag_grad_zero", kv_all),
           *[Kernel("flash_attn_bwd", 2.5 * cp * step_flops / 2, 2 * io, half_q, mean_kv, dh,
                    b * heads)] * 2,
           mem("cp_ag_grad_accumulate", 2 * kv_all), mem("cp_ag_grad_reorder", 2 * kv_all)]
    return fwd, bwd


def cp_kv_block_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes of one K/V block a context-parallel rank sends per ring step, per tensor-parallel
    rank: K and V of its ``s/cp`` tokens, ``b * s/cp * (g/t) * (d_qk + d_v)`` elements
    (:func:`cp_head_sizes`: ``2 kv_channels``; MLA ``qk + rope + v``, ``g = a``) in the
    tensors' dtype (:func:`core.plan.parallel.tensor_dtype`: BF16 under FP8, whose attention
    runs in BF16; Transformer Engine's ``AttnFuncWithCPAndKVP2P`` passes K and V together; tensor
    parallelism splits the K/V heads, each tensor-parallel rank exchanges its own). 0 without
    context parallelism."""
    cp = plan.context_parallel
    if cp <= 1:
        return 0.0
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]  # FP8 training keeps K and V in BF16
    g = model.query_groups // plan.tensor_parallel
    dqk, dv = cp_head_sizes(model)
    return float(plan.micro_batch_size * (model.seq_length // cp) * g * (dqk + dv) * e)


def cp_all_gather(plan: ParallelPlan) -> bool:
    """Whether the plan's context parallelism is Megatron-Core's all-gather exchange
    (``plan.cp_comm_type`` ``all_gather``, Transformer Engine's ``AttnFuncWithCPAndKVAllGather``)
    with ``cp`` > 1 (at cp = 1 the type has no effect)."""
    return plan.context_parallel > 1 and getattr(plan, "cp_comm_type", "p2p") == "all_gather"


def cp_a2a_size(plan: ParallelPlan) -> int:
    """Ranks of each all-to-all group of context parallelism: ``cp`` for ``cp_comm_type`` a2a,
    ``plan.cp_a2a_size`` for a2a+p2p, 1 for the ring and the all-gather (no all-to-all)."""
    kind = getattr(plan, "cp_comm_type", "p2p")
    if plan.context_parallel <= 1:
        return 1
    if kind == "a2a":
        return int(plan.context_parallel)
    if kind == "a2a+p2p":
        return int(getattr(plan, "cp_a2a_size", None) or 1)
    return 1


def cp_a2a_bytes(model: ModelConfig, plan: ParallelPlan) -> tuple[float, float]:
    """``(before, after)`` send buffers, bytes per GPU, of the all-to-alls of one attention
    forward under all-to-all context parallelism (:func:`cp_a2a_size` > 1; TE's
    ``flash_attn_a2a_communicate``): before the core Q, K and V of the rank's ``s/cp`` tokens,
    ``b * s/cp * ((a/t) d_qk + (g/t) (d_qk + d_v))`` elements; after it the output,
    ``b * s/cp * (a/t) * d_v`` (:func:`cp_head_sizes`; ``kv_channels`` each but MLA's); in the
    tensors' dtype (BF16 under FP8). The backward
    moves the same two buffers the other way round (dO before its core; dQ, dK, dV after).
    Each rank keeps ``1/cpa`` of each buffer (nccl-tests' all-to-all convention). (0, 0)
    without an all-to-all."""
    if cp_a2a_size(plan) <= 1:
        return 0.0, 0.0
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    t = plan.tensor_parallel
    tok = plan.micro_batch_size * (model.seq_length // plan.context_parallel) * e
    heads, groups = model.num_attention_heads // t, model.query_groups // t
    dqk, dv = cp_head_sizes(model)
    return float(tok * (heads * dqk + groups * (dqk + dv))), float(tok * heads * dv)


def cp_exchange_bytes(model: ModelConfig, plan: ParallelPlan) -> tuple[float, float]:
    """``(forward, backward)`` bytes one GPU sends around the context-parallel ring per layer
    and micro-batch: forward ``cp-1`` K/V blocks (:func:`cp_kv_block_bytes`); backward
    ``cp-1`` K/V blocks and ``cp-1`` blocks of their gradients dK/dV (Transformer Engine's
    backward sends K/V in its first ``cp-1`` steps and the accumulated dK/dV in its last
    ``cp-1``). (0, 0) without context parallelism."""
    blk = cp_kv_block_bytes(model, plan)
    n = plan.context_parallel - 1
    return n * blk, 2 * n * blk


def cp_query_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes of the rank's queries (and of their gradient dQ) per tensor-parallel rank:
    ``b * s/cp * (a/t) * d_qk`` elements (:func:`cp_head_sizes`: ``kv_channels``; MLA
    ``qk + rope``) in the tensors' dtype (BF16 under FP8,
    :func:`core.plan.parallel.tensor_dtype`). Under an all-to-all the core holds ``1/cpa`` of
    the heads for ``cpa`` times the tokens: the same count. 0 without context parallelism."""
    return _heads_bytes(model, plan, cp_head_sizes(model)[0])


def cp_output_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes of the attention core's output per tensor-parallel rank, ``b * s/cp * (a/t) *
    d_v`` elements (:func:`cp_head_sizes`: :func:`cp_query_bytes` but for MLA, whose output
    has ``v_head_dim`` channels per head). 0 without context parallelism."""
    return _heads_bytes(model, plan, cp_head_sizes(model)[1])


def _heads_bytes(model: ModelConfig, plan: ParallelPlan, d: int) -> float:
    """Bytes of ``b * s/cp * (a/t) * d`` elements in the tensors' dtype; 0 without cp."""
    cp = plan.context_parallel
    if cp <= 1:
        return 0.0
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    a = model.num_attention_heads // plan.tensor_parallel
    return float(plan.micro_batch_size * (model.seq_length // cp) * a * d * e)


def cp_core_output_kept_twice(plan: ParallelPlan) -> bool:
    """Whether each layer keeps the attention core's output twice under the plan's context
    parallelism: with ``cp_comm_type`` a2a (cp > 1) Transformer Engine's
    ``AttnFuncWithCPAndQKVOA2A.forward`` saves for its backward the output in the
    all-to-all's head-split layout (``out_part``, ``f16_tensors = (q_part, k_part, v_part,
    out_part)``) and returns a new tensor, the output all-to-all'd back to the sequence split
    (``flash_attn_a2a_communicate(out_, ...)``), which the output projection keeps as its input:
    two tensors of :func:`cp_output_bytes` where the ring (whose saved ``out`` is the tensor it
    returns) and the all-gather keep one (TE 2.11 and 2.20,
    ``pytorch/attention/dot_product_attention/context_parallel.py``).

    a2a+p2p is left out: TE 2.20's ``AttnFuncWithCPAndKVP2P`` saves the pre-all-to-all output
    too, but TE 2.11's saves the returned one (and runs the all-to-all again in its backward)."""
    return plan.context_parallel > 1 and getattr(plan, "cp_comm_type", "p2p") == "a2a"


def cp_exchange_buffer_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes of the context-parallel exchange's buffers that one GPU holds at once while one
    attention layer runs (transient: one layer at a time, freed after it; the backward's, the
    larger), beyond the dQ, dK and dV the attention kernel's backward writes without context
    parallelism (not counted by the model), per exchange (``plan.cp_comm_type``), with ``blk``
    the K/V block of :func:`cp_kv_block_bytes` and ``q`` the queries (dQ) of
    :func:`cp_query_bytes` (per-tensor head sizes, :func:`cp_head_sizes`)
    (Transformer Engine's ``pytorch/attention/dot_product_attention/context_parallel.py``,
    2.11 and 2.20):

    * ``p2p`` (``AttnFuncWithCPAndKVP2P.backward``): the two ring buffers of K/V and dK/dV
      (``p2p_comm_buffers``, two ``(2, *kv.shape)`` tensors: the K/V block and the dK/dV
      block sent and received, the returned dK/dV one of them), ``4 blk``, and a second dQ:
      ``dq_buffer`` accumulates while each step's kernel writes its own ``dq_``, ``q``;
    * ``allgather`` (PyTorch's): the gathered K/V of the whole sequence, ``cp blk``, and the
      dK/dV blocks passed around the ring, ``2 blk``;
    * ``all_gather`` (``AttnFuncWithCPAndKVAllGather.backward``): the gathered K/V put in
      sequence order (``k_ag``, ``v_ag``, ``cp blk``), the two chunks' dK/dV over the keys up
      to each chunk's end (``dk_per_step``, ``dv_per_step``, chunks ``r`` and ``2cp-1-r``:
      ``(cp + 1/2) blk``; both held until the backward returns), the whole sequence's dK/dV
      (``cp blk``) and, while they are put back in chunk order (``index_select``, one at a
      time), the reordered copy of one (``cp/2 blk``); and the chunks' dQ beside ``dq``
      (``q``); less the dK/dV of a kernel without context parallelism (``blk``):
      ``(7 cp/2 - 1/2) blk + q``;
    * ``a2a``: the all-to-all's send and receive buffers of Q, K and V (the larger of its two,
      :func:`cp_a2a_bytes`), twice that; ``a2a+p2p`` adds the ring's ``4 blk + q``.

    0 without context parallelism. Approximate: the softmax statistics (FP32, ``b a/t s/cp``)
    and the forward's per-step outputs are not counted (TE 2.20's forward holds two K/V
    blocks and two steps' outputs, TE 2.11's all ``cp`` of each, while the layer's MLP has
    not yet kept its activations)."""
    cp = plan.context_parallel
    if cp <= 1:
        return 0.0
    blk = cp_kv_block_bytes(model, plan)
    q = cp_query_bytes(model, plan)
    kind = getattr(plan, "cp_comm_type", "p2p")
    if kind == "allgather":
        return (cp + 2) * blk
    if kind == "all_gather":
        return (3.5 * cp - 0.5) * blk + q
    ring = 4 * blk + q if cp // cp_a2a_size(plan) > 1 else 0.0
    if cp_a2a_size(plan) > 1:
        return 2 * max(cp_a2a_bytes(model, plan)) + ring
    return ring
