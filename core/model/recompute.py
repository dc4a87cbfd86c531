"""Activation recomputation: which layers a plan recomputes, and torchtitan's per-op selective
checkpointing (``recompute = selective_op``): the matmuls it recomputes, their FLOPs and the
activations it keeps.
"""

from __future__ import annotations


import numpy as np

from core.model.base import DTYPE_BYTES
from core.model.layout import chunk_layout
from core.model.mlp import is_gated
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, tensor_dtype

__all__ = [
    "SELECTIVE_OP_SAVED", "mtp_layers_recomputed", "recomputed_in_chunk", "recomputed_layers",
    "selective_op_activation_bytes", "selective_op_flops_per_token", "selective_op_linears",
]


def selective_op_linears(gated: bool) -> tuple[tuple[str, bool], ...]:
    """The matmuls of one transformer block's forward in the order torchtitan runs them, each
    with whether per-op selective activation checkpointing recomputes it (``True``) or saves
    its output (``False``).

    Order (torchtitan ``models/llama3/model.py`` ``Attention.forward``: ``xq, xk, xv =
    self.wq(x), self.wk(x), self.wv(x)``, SDPA, ``self.wo``; ``FeedForward.forward``:
    ``self.w2(F.silu(self.w1(x)) * self.w3(x))``): ``q, k, v, o, w1, w3, w2`` with a gated
    (SwiGLU) MLP, ``q, k, v, o, w1, w2`` with a plain one (fc1, fc2). Policy (torchtitan
    ``infra/parallelize.py`` ``_apply_ac_to_transformer_block``, ``mode = "op"``; from 2025 in
    ``torchtitan/distributed/activation_checkpoint.py``): a per-block counter counts the
    ``aten.mm`` calls and the output of every other one is saved, the 1st, 3rd, 5th ...
    (``to_save = func in _save_list and not (func == aten.mm and mm_count % 2 == 0)``), so
    ``k``, ``o`` and ``w3`` (``w2`` with a plain MLP) are recomputed and ``q``, ``v``,
    ``w1`` (and ``w2`` gated) saved. The counter restarts in every block (each block is
    checkpointed on its own). FP8 linears (torchao ``Float8Linear``) still dispatch
    ``aten.mm`` on float8 tensor subclasses, which the checkpoint's dispatch mode sees
    before the subclass turns it into ``_scaled_mm``: assumed counted the same way.
    """
    order = ("q", "k", "v", "o", "w1", "w3", "w2") if gated else ("q", "k", "v", "o", "w1", "w2")
    return tuple((name, i % 2 == 1) for i, name in enumerate(order))


#: Kernels of the attention and MLP ops whose outputs per-op checkpointing saves besides the
#: matmuls: the fused attention (SDPA's flash / efficient / cuDNN kernels are in torchtitan's
#: save list; with context parallelism the ring's output corrections belong to it).
SELECTIVE_OP_SAVED = ("flash_attn", "cp_out_correction")


def selective_op_activation_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Activation bytes one dense layer keeps per micro-batch under per-op selective
    checkpointing (``recompute="selective_op"``): the block's input (the checkpoint's input,
    ``s b h``) and the outputs of the saved ops (:func:`selective_op_linears`): ``q`` (``a kv``
    per token), ``v`` (``g kv``), the attention output (``a kv``) and its fp32 log-sum-exp
    (``a`` floats per token), ``w1`` (``f``) and, with a gated MLP, ``w2`` (``h``); in the
    tensor dtype (BF16 under FP8: a float8 matmul's output is BF16); ``s/cp`` tokens.

    With tensor parallelism (``t > 1``, sequence-parallel as torchtitan's plan always is) each
    rank keeps its shards: the block's input is sequence-sharded (``h/t`` per token), the
    column-parallel outputs (``q``, ``v``, ``w1``), the attention output and the log-sum-exp
    are ``1/t`` wide; a row-parallel matmul's output is the full ``h`` wide partial sum that
    its reduce-scatter then reduces (``w2``, gated: ``h`` per token on every rank), and the
    outputs of the two reduce-scatters (after ``o`` and ``w2``), which the save list holds,
    add ``2 h/t``. The all-gathered inputs of the linears are not kept (the all-gathers are
    not in the save list: the recomputation gathers them again, :func:`core.sim.graph.build_graph`).
    The policy's cache keeps every saved op's output until the recomputation replays it
    (eager ``torch.utils.checkpoint`` with a selective-checkpoint context), whether or not
    the backward reads it."""
    s = model.seq_length // plan.context_parallel
    b, h, a, t = (plan.micro_batch_size, model.hidden_size, model.num_attention_heads,
                  plan.tensor_parallel)
    kv, g, f = model.head_dim, model.query_groups, model.ffn
    # column-parallel outputs (split over t) and row-parallel ones (partial sums, h wide)
    width = {"q": a * kv, "k": g * kv, "v": g * kv, "w1": f, "w3": f}
    full = {"o": h, "w2": h}
    saved = [n for n, again in selective_op_linears(is_gated(model.activation)) if not again]
    cols = sum(width.get(n, 0) for n in saved)
    rows = sum(full.get(n, 0) for n in saved)
    scattered = 2 * h if t > 1 else 0  # the reduce-scatters' outputs
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    return float(s * b * (e * ((h + cols + a * kv + scattered) / t + rows) + 4 * a / t))


def selective_op_flops_per_token(model: ModelConfig) -> float:
    """FLOPs per token and layer of the matmuls per-op selective checkpointing recomputes
    (:func:`selective_op_linears`): ``2 * in * out`` of each recomputed linear, ``k``
    ``(h, g kv)``, ``o`` ``(a kv, h)``, ``w3`` ``(h, f)`` or ``w2`` ``(f, h)``."""
    h, a, kv, g, f = (model.hidden_size, model.num_attention_heads, model.head_dim,
                      model.query_groups, model.ffn)
    dims = {"q": (h, a * kv), "k": (h, g * kv), "v": (h, g * kv), "o": (a * kv, h),
            "w1": (h, f), "w3": (h, f), "w2": (f, h)}
    return float(sum(2 * dims[n][0] * dims[n][1]
                     for n, again in selective_op_linears(is_gated(model.activation)) if again))


def recomputed_in_chunk(plan: ParallelPlan, layers: int) -> int:
    """Layers of a model chunk of ``layers`` layers whose forward full recomputation runs again:
    0 without full recomputation; with Megatron's block method the chunk's first
    ``min(recompute_num_layers, layers)``; every layer when ``recompute_num_layers`` is unset."""
    if plan.recompute != "full":
        return 0
    n = plan.recompute_num_layers
    return layers if n is None else min(n, layers)


def mtp_layers_recomputed(plan: ParallelPlan) -> bool:
    """Whether full recomputation checkpoints the multi-token prediction layers' transformer
    layers too (their input kept, their forward run again in the backward).

    Megatron-Core (0.16.1, ``transformer/multi_token_prediction.py``,
    ``MultiTokenPredictionLayer.forward`` and ``_checkpointed_forward``): under
    ``recompute_granularity == "full"`` the MTP layer checkpoints its projection and transformer
    layer with ``--recompute-method uniform`` (which it asserts is by 1 layer), while with
    ``--recompute-method block`` it warns "recompute_method == 'block' is not supported for MTP
    yet. Skipping recompute." and runs them plainly, keeping their activations. A plan's
    ``recompute_num_layers`` is the block method's count (``--recompute-method block
    --recompute-num-layers``, :mod:`core.io.megatron.from_session`); unset, every layer is
    recomputed (``uniform`` by 1): so True only with ``recompute = "full"`` and no
    ``recompute_num_layers``."""
    return plan.recompute == "full" and plan.recompute_num_layers is None


def recomputed_layers(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Layers of each stage whose forward full recomputation runs again, shape (p,):
    :func:`recomputed_in_chunk` of each of the stage's model chunks (Megatron applies
    ``--recompute-num-layers`` per chunk; chunks of :func:`stage_chunk_layers`)."""
    lengths = chunk_layout(model, plan)[1]  # (p, v); recomputed_in_chunk of each, vectorized
    if plan.recompute != "full":
        return np.zeros(len(lengths), np.int64)
    n = plan.recompute_num_layers
    return (lengths if n is None else np.minimum(lengths, n)).sum(axis=1)
