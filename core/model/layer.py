"""The dense decoder layer built from its components (attention or MLA, MLP, norms): its kernels
by op, parameters, forward FLOPs and activation bytes, and the embedding and output layer.
These are the ``dense`` family's formulas (:mod:`core.model.families.dense`); other families
add to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.model.attention import mha_attention_kernels, norms_separate_of
from core.model.context_parallel import cp_core_output_kept_twice
from core.model.base import ADAM_BYTES_PER_PARAM, DTYPE_BYTES, Kernel, gemm, mem, wgrad_accumulate
from core.model.fp8 import FP8_WEIGHT_CAST_OP, fp8_cast_kernels, fp8_saves_fp8_inputs
from core.model.keys import with_family_defaults
from core.model.mla import (mla_activation_terms, mla_attention_parameters,
                            mla_forward_flops_per_token, mla_op_kernels)
from core.model.mlp import is_gated, mlp_kernels, mlp_parameters, mlp_saved_per_f
from core.model.recompute import selective_op_activation_bytes
from core.model.tokens import OpShape, op_shape
from core.plan.parallel import (FP8_DEFAULT_RECIPE, ParallelPlan, fp8_recipe, recompute_modules,
                                tensor_dtype, tp_saves_gathered_input)
from core.plan.model_config import ModelConfig, padded_vocab_size

__all__ = [
    "attention_forward_flops_per_token", "attention_parameters",
    "dense_activation_bytes_per_layer", "dense_edge_parameters",
    "dense_forward_flops_per_token", "dense_layer_parameters", "dense_op_kernels", "edge_kernels"]


def dense_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of a dense decoder op (see :func:`op_kernels`).

    GPT (Megatron-LM) at the family columns' defaults. The head size is ``kv``
    (Megatron's ``--kv-channels``; ``h/a`` by default): the QKV GEMM has
    ``(a + 2g) kv`` columns (Megatron-Core's fused ``linear_qkv``: Q ``a kv``
    wide, K and V ``g kv`` each), the projection's input is ``a kv`` wide and
    the attention core works on heads of ``kv`` channels. Grouped-query attention
    (``g < a``) shrinks K and V and, on the unfused path, expands K and V to ``a`` heads
    before the core (``repeat_interleave``); RoPE adds a rotary kernel on Q and K
    (read and write); a SwiGLU MLP's fc1 is ``2f`` wide (gate and up fused) and
    its activation reads ``2f`` and writes ``f`` per token; RMSNorm kernels move
    the same bytes as LayerNorm's; QK-norm adds a norm kernel over Q and K (read
    and write; backward twice that, as the layer norms). FlashAttention is one kernel per pass
    (Dao 2023): causal, so half of the ``s x s`` products are computed
    (FlashAttention-2 paper's FLOP count for causal masks; a sliding window of ``w`` tokens,
    key entry ``w``, computes the band, :func:`attended_pairs`); the forward reads Q,
    K, V and writes the output, the backward (five GEMMs against the forward's
    two: 2.5x its FLOPs) reads Q, K, V, the output and its gradient and writes
    the gradients of Q, K and V.

    Softmax type (``model.softmax_type``; not a key column): off-by-one and learnable
    (attention sinks, GPT-OSS) add one logit per query row to the softmax's denominator, inside
    the same kernel (Transformer Engine's fused attention with ``softmax_type``, TE >= 2.8, and
    Megatron-Core's unfused ``FusedScaleMaskSoftmax`` with ``softmax_offset``): one more
    exponential per row against the row's ``s/2`` (causal) or ``w`` (windowed) ones and no GEMM
    FLOPs; the backward's sink gradient is one more product per row (FlashAttention's
    ``rowsum(dO * O)`` is already computed) reduced over the rows to ``a`` numbers. Negligible,
    so these kernels are timed as the vanilla ones: the profile store has no sink variant of the
    FlashAttention op, and a layer with sinks takes ``flash_attn``'s time (a named assumption,
    not a measurement of TE's sink kernel). The sinks' ``a`` parameters are counted
    (:func:`attention_parameters`).

    Gated MLP with a clamp and a linear offset (``activation_func_clamp_value``,
    ``glu_linear_offset``; GPT-OSS's ``quick_geglu``, ``x sigmoid(1.702 x)`` gate): the offset
    is element-wise in the fused activation kernel (Megatron-Core's
    ``weighted_bias_quick_geglu_impl``), the same bytes as ``bias_swiglu``, which times it; the
    clamp runs eagerly before it (the ``glc`` key column, :func:`core.model.mlp.glu_clamp_kernels`).

    FP8 (``dtype="fp8"``, the recipe in ``key["fp8"]``, default tensorwise, and
    ``key["fp8_tn"]``, :func:`fp8_tn_only`, default true): as Megatron-Core with Transformer
    Engine, the linear layers' GEMMs (QKV, projection, fc1, fc2 and their dgrad and wgrad)
    run in FP8 at the GPU's FP8 peak (:func:`fp8_gemm_dtype`), reading 1-byte inputs and
    writing BF16; each one's input (forward) and output gradient (backward) is quantized by
    :func:`fp8_cast_kernels`. The attention core (FlashAttention or unfused) stays BF16 (TE's
    ``DotProductAttention`` runs FP8 only with ``fp8_dpa``, off by default), and so do the norms,
    the activation, the embedding and the output layer (Megatron-Core builds the word embedding
    and the output layer outside TE: its ``ColumnParallelLinear`` ignores FP8; with
    ``--first-last-layers-bf16``, off by default, the first and last transformer layers would
    stay BF16 too, not modelled). The tensors between kernels are BF16.

    All-to-all context parallelism (key ``cpa`` > 1, the all-to-all group's size:
    ``cp`` for Megatron-Core's ``--cp-comm-type a2a``, DeepSpeed-Ulysses in TE's
    ``AttnFuncWithCPAndKVAll2All``; ``plan.cp_a2a_size`` for ``a2a+p2p``): Q, K and V go from a
    sequence split to a head split, so the core runs on ``cpa * s`` tokens for ``1/cpa`` of the
    rank's heads and K/V heads, in a ring of ``cp/cpa`` steps as below (one kernel per pass for
    a2a), the same FLOPs as the ring's; TE copies Q, K, V and O (backward dO, dQ, dK, dV) into
    the exchange's layout, one read and one write of each. The exchanges themselves are
    communication (:func:`cp_a2a_bytes`, timed by the graph).

    Context parallelism (``cp`` > 1; Megatron-Core's ring attention in Transformer Engine,
    ``AttnFuncWithCPAndKVP2P``): ``s`` is the rank's ``s_full/cp`` tokens (every token-wise
    kernel runs on them) and the sequence is split into ``2*cp`` chunks, the rank holding
    chunks ``r`` and ``2cp-1-r`` (causal load balance). The core runs in ``cp`` steps, one
    per K/V block passing around the ring: the diagonal step is causal attention over the
    rank's own ``s`` tokens, every other step attends half of the queries to all of the
    block's keys or all queries to half of them, the same FLOPs; so each step is one
    FlashAttention kernel of a causal ``s x s`` problem, and the rank computes ``1/cp``
    of the causal attention over the whole sequence. Each step after the first merges its
    partial output into the running one with the softmax statistics (read both, write
    one); in the backward each step's partial gradients of Q, K and V are accumulated
    (read both, write one). FlashAttention only: the unfused path has no ring attention.
    """
    key = with_family_defaults(key)
    fp8 = str(key["dtype"]) == "fp8"
    recipe = str(key.get("fp8") or FP8_DEFAULT_RECIPE)
    tn = bool(key.get("fp8_tn", True))
    dtype = tensor_dtype(str(key["dtype"]))
    if op == "optimizer_step":
        return [mem("adam", ADAM_BYTES_PER_PARAM[dtype] * float(key["n"]))]
    if op == FP8_WEIGHT_CAST_OP:
        return fp8_cast_kernels("weights", float(key["n"]), recipe, tn, weight=True) if fp8 else []
    if op in ("attention_fwd", "attention_bwd", "attention_core_fwd", "attention_core_bwd"):
        if int(key.get("kvlr", 0) or 0):
            return mla_op_kernels(op, key)
        return mha_attention_kernels(op, op_shape(key))
    if op in ("mlp_fwd", "mlp_bwd"):
        return mlp_kernels(op, op_shape(key))
    return edge_kernels(op, op_shape(key))


def edge_kernels(op: str, sh: OpShape) -> list[Kernel]:
    """Kernels of one rank's embedding and output-layer ops (``embedding_fwd``,
    ``embedding_bwd``, ``output_fwd``, ``output_bwd``; see :func:`dense_op_kernels`)."""
    key, h, t, e, T = sh.key, sh.h, sh.t, sh.e, sh.T
    act, tok, norm, acc = sh.act, sh.tok, sh.norm, sh.acc
    V = int(key["V"])
    cells = T * (V // t)  # logits of this rank: (b*s, V/t)
    to_fp32 = 4 + e if e < 4 else 0  # bytes per logit of the .float() copy (none in fp32)
    if op == "embedding_fwd":
        if key.get("pos") == "rope":  # no position table: dropout only (read, write, mask)
            return [mem("embedding_lookup", 2 * act), mem("embedding_dropout", 2.5 * tok)]
        return [mem("embedding_lookup", 2 * act), mem("position_add_dropout", 3.5 * tok)]
    if op == "embedding_bwd":
        # dense (V/t, h) gradient: zero-filled, rows scattered in, accumulated into the buffer
        return [mem("dropout_bwd", 2 * tok), mem("embedding_grad_zero", e * V * h // t),
                mem("embedding_grad_scatter_add", 3 * act),
                *wgrad_accumulate(sh.plain_acc * V * h // t)]
    fusion = str(key.get("ce") or "unfused")
    if op == "output_fwd":
        if fusion == "te":
            # Transformer Engine's parallel_cross_entropy: one pass for each row's max and
            # sum of exponentials, one that reads the logits again and writes the loss's
            # gradient in their place (the gradient is computed in the forward)
            ce = [mem("ce_te_stats", e * cells), mem("ce_te_loss_grad", 2 * e * cells)]
        elif fusion == "native":
            # Megatron-Core's fused_vocab_parallel_cross_entropy (jit-fused): the fp32 copy
            # with the max, the in-place subtract and exp with the sum, the in-place divide
            ce = [mem("ce_fp32_max", (e + 4 if to_fp32 else 4) * cells),
                  mem("ce_sub_exp_sum", 8 * cells), mem("ce_softmax_div", 8 * cells)]
        else:
            # Megatron's vocab-parallel cross-entropy on fp32 logits, one kernel per step:
            # .float() copy, max, subtract max, exp, sum, divide (softmax kept for backward).
            ce = ([mem("logits_to_fp32", to_fp32 * cells)] if to_fp32 else []) + [
                mem("ce_max", 4 * cells), mem("ce_sub_max", 8 * cells), mem("ce_exp", 8 * cells),
                mem("ce_sum", 4 * cells), mem("ce_softmax_div", 8 * cells)]
        return [
            mem(f"final_{norm}", 2 * tok),
            gemm("logits", T, V // t, h, e),                   # (b*s, h) x (h, V/t)
            *ce,
        ]
    # output_bwd: softmax minus one-hot, scaled by the loss gradient in place, then the copy
    # back to the half-precision logits' gradient (Transformer Engine: the forward's
    # half-precision gradient scaled in place)
    if fusion == "te":
        ce_bwd = [mem("ce_te_grad_scale", 2 * e * cells)]
    else:
        ce_bwd = [mem("ce_grad_scale", 8 * cells)] + (
            [mem("ce_grad_to_half", to_fp32 * cells)] if to_fp32 else [])
    return [
        *ce_bwd,
        gemm("logits_dgrad", T, h, V // t, e), gemm("logits_wgrad", V // t, h, T, e),
        *wgrad_accumulate(acc * V * h // t),  # Megatron-Core's ColumnParallelLinear
        mem(f"final_{norm}_bwd", 4 * tok),
    ]


def dense_layer_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of one layer.

    Megatron-LM tensor parallelism (Shoeybi et al. 2019): QKV and fc1
    column-parallel (weights and biases sharded), projection and fc2
    row-parallel (their biases replicated), the two norms replicated. With head
    size ``kv`` (``--kv-channels``, default ``h/a``): QKV is ``h (a + 2g) kv``
    (grouped-query attention: K and V have ``g`` heads; ``3h^2`` without it and
    at ``kv = h/a``), projection ``a kv h`` (``h^2``), fc1 ``h f`` (``2 h f``
    gated: SwiGLU has three ffn matrices), fc2 ``f h``; biases with
    ``add_bias_linear`` (QKV's also with ``add_qkv_bias``, the projection's with
    ``add_proj_bias``, fc1's and fc2's with ``add_mlp_bias``); LayerNorm ``2h``,
    RMSNorm ``h`` (no bias); QK-norm one norm over a head for the queries and
    one for the keys (``2 kv`` with RMSNorm). GPT: ``4h^2 + 2hf + 3h + f`` and
    ``6h``. Qwen3-8B (36 layers, h 4096, 32 heads of 128, 8 groups, f 12288,
    vocabulary 151936, untied, QK-norm): 8,190,735,360 in all (8.19 B, the
    Hugging Face model card).
    """
    attn_sharded, attn_replicated = attention_parameters(model)
    mlp_sharded, mlp_replicated = mlp_parameters(model, model.ffn)
    return attn_sharded + mlp_sharded, attn_replicated + mlp_replicated


def attention_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of a layer's attention half: QKV, projection,
    their column-parallel biases, the projection's replicated bias, the input norm and QK-norm
    (see :func:`dense_layer_parameters`); with ``softmax_type`` learnable the ``a`` attention
    sinks (Megatron-Core's ``softmax_offset``, one logit per head, sharded with the heads over
    ``t``; off-by-one's zero logit is a buffer, no parameter). Multi-head latent attention:
    :func:`mla_attention_parameters`."""
    if getattr(model, "multi_latent_attention", False) is True:
        return mla_attention_parameters(model)
    h, a, g = model.hidden_size, model.num_attention_heads, model.query_groups
    kv = model.head_dim
    qkv = (a + 2 * g) * kv
    bias = model.add_bias_linear
    sharded = h * qkv + a * kv * h + (qkv if bias or model.add_qkv_bias else 0)
    if getattr(model, "softmax_type", "vanilla") == "learnable":
        sharded += a  # attention sinks: one logit per head, split with the heads over t
    norm = 2 * h if model.normalization == "layernorm" else h
    qk_norm = 2 * norm // h * kv if model.qk_layernorm else 0  # over one head, shared
    return sharded, norm + (h if proj_bias(model) else 0) + qk_norm


def proj_bias(model: ModelConfig) -> bool:
    """Whether the attention's output projection has a bias: ``add_bias_linear`` (Megatron-Core's
    ``linear_proj``) or ``add_proj_bias`` (Hugging Face's ``attention_bias`` on ``o_proj``
    without the MLP's biases: Llama, Phi-3.5-MoE)."""
    return bool(model.add_bias_linear or getattr(model, "add_proj_bias", False))


def dense_edge_parameters(model: ModelConfig, t: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((sharded, replicated) of the first stage, (sharded, replicated) of the last)`` outside
    the layers: the vocab-parallel word embedding ``V'h`` and, with learned positions, the
    ``s*h`` table first (RoPE has none); the final norm (``2h`` LayerNorm, ``h`` RMSNorm) last,
    with an untied output layer its own ``V'h`` too and with ``add_output_bias`` its bias ``V'``
    (a tied one shares the embedding: with
    ``p > 1`` the last stage holds a copy, see :func:`edge_params_per_gpu`). ``V'`` is padded
    for ``t``."""
    h = model.hidden_size
    V = padded_vocab_size(model.vocab_size, t, divisible_by=model.make_vocab_size_divisible_by)
    positions = model.seq_length * h if model.position_embedding == "learned" else 0.0
    norm = 2 * h if model.normalization == "layernorm" else h
    output = 0.0 if model.tied_embeddings else V * h
    if getattr(model, "add_output_bias", False):  # lm_head's bias, vocab-parallel like its weight
        output += V
    return (V * h, positions), (output, norm)


def dense_forward_flops_per_token(model: ModelConfig, t: int) -> tuple[float, float, float]:
    """``(per layer, attention core per layer, output layer)`` forward FLOPs per token.

    Every GEMM at 2 FLOPs per multiply-add, with head size ``kv`` (``h/a`` by
    default): QKV ``2h(a + 2g)kv`` (``6h^2`` without GQA), projection ``2 a kv h``
    (``2h^2``), MLP ``4hf`` (``6hf`` gated), scores and values ``4 s a kv``
    (``4sh``) over the full ``s x s`` (the attention core, what selective
    recomputation redoes; Megatron counts it unmasked); output layer ``2hV'``
    with the padded vocabulary. GPT: ``8h^2 + 4hf + 4sh`` (Narayanan et al.
    2021, Eq. 3; Megatron counts the padded ``V``).
    """
    h = model.hidden_size
    V = padded_vocab_size(model.vocab_size, t, divisible_by=model.make_vocab_size_divisible_by)
    linear, core = attention_forward_flops_per_token(model)
    mlp = (6 if is_gated(model.activation) else 4) * h * model.ffn
    return linear + mlp + core, core, 2 * h * V


def attention_forward_flops_per_token(model: ModelConfig) -> tuple[float, float]:
    """``(linear layers, core)`` forward FLOPs per token of one layer's attention.

    Multi-head or grouped-query attention with head size ``kv``: QKV ``2h(a + 2g)kv`` and
    projection ``2 a kv h``; core ``4 s a kv`` (scores and values over the full ``s x s``,
    Megatron's unmasked count). Multi-head latent attention: :func:`mla_forward_flops_per_token`.
    """
    if getattr(model, "multi_latent_attention", False) is True:
        return mla_forward_flops_per_token(model)
    h, s, a, g = model.hidden_size, model.seq_length, model.num_attention_heads, model.query_groups
    kv = model.head_dim
    return 2 * h * (a + 2 * g) * kv + 2 * a * kv * h, 4 * s * a * kv


def dense_activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str,
                                      mlp: float | None = None) -> float:
    """Activation bytes one layer keeps for its backward, per micro-batch, on one GPU.

    Computed in steps that adjust the terms in turn, each reading the ones before it: the
    16-bit terms (:func:`_layer_terms`), FP8's copies (:func:`_fp8_terms`), the recomputed
    modules (:func:`_recomputed_terms`), then Table 2's row for ``mode``.

    ``mlp`` replaces the MLP's term (``4f/h``, ``6f/h`` gated; see below) for an MoE layer,
    whose dense MLP is its shared experts' (:func:`moe_activation_bytes_per_layer`).

    Korthikanti et al. 2022, Table 2 (16-bit activations; scaled by ``e/2`` for fp32):

    ========================  ===================================  ==========================
    mode                      tensor parallel                      + sequence parallel
    ========================  ===================================  ==========================
    ``none``                  ``sbh (10 + 24/t + 5as/(ht))``       ``sbh/t (34 + 5as/h)``
    ``selective``             ``sbh (10 + 24/t)``                  ``34 sbh/t``
    ``full`` (checkpointed)   ``2 sbh`` (the layer's input)        ``2 sbh/t``
    ========================  ===================================  ==========================

    The ``24`` is Q, K, V and the projection's input (``8``) plus the MLP's
    fc1 output and fc2 input (``4f/h``, ``16`` at ``f = 4h``); written for any
    ``f`` here. Family changes: with grouped-query attention and FlashAttention
    K and V keep ``g`` heads (``4 + 4g/a`` for Q, K, V and the projection
    input; the unfused path keeps K and V expanded to ``a`` heads); a SwiGLU
    MLP keeps its ``2f`` wide fc1 output and the ``f`` wide product (``6f/h``);
    Dropout (Megatron-LM ``--hidden-dropout``, ``--attention-dropout``, 0.1 by default): at
    probability 0 PyTorch's dropout returns its input and keeps no mask
    (``torch.nn.functional.dropout``; Megatron-Core's bias-dropout-add calls it,
    ``fusions/fused_bias_dropout.py``), so ``hidden_dropout`` 0 drops the two masks of the
    ``10`` (``8``) and ``attention_dropout`` 0 the unfused core's mask and dropout output
    (``5as/h -> 2as/h``). Megatron-Bridge sets both to 0 for its Llama, Qwen, DeepSeek and
    GPT-OSS models. The kernels' times are unchanged (the fused bias-add runs either way).
    FlashAttention keeps no ``s x s`` tensor (no ``5as/h`` term; it recomputes
    the scores in the backward). RMSNorm keeps its input as LayerNorm does;
    RoPE keeps nothing (a rotation's gradient needs no input); QK-norm keeps
    its inputs, Q and K (``2 + 2g/a``). A head size ``kv`` other than ``h/a``
    (``--kv-channels``) scales these Q, K, V and projection-input terms by
    ``a kv / h`` (they are ``a kv`` and ``g kv`` wide, not ``h`` and ``g h/a``);
    the ``s x s`` terms do not depend on it.

    FP8 (Transformer Engine saves a linear layer's input for its wgrad as the FP8 copy the
    forward quantized, 1 byte per element; TE ``Linear`` / ``LayerNormLinear``): QKV's and
    fc1's inputs ``2 -> 1`` each (the ``10`` becomes ``8``), fc2's input ``2f/h -> f/h``, the
    projection's input ``2 -> 1`` except with FlashAttention and no recomputation, whose
    kernel keeps that tensor (its output) in BF16 anyway: ``+1`` for the FP8 copy. The rest
    (norm inputs, Q, K, V, activation inputs, masks, the checkpointed layer input) stays BF16.
    In an MoE layer the router keeps the second norm's output in BF16 (its gate is not a TE
    module): only QKV's input saves (``10 -> 9``), and the shared experts' FP8 copy of that
    tensor adds it back (``10``); their fc2 input is ``mlp/(4 or 6)`` of ``mlp``.
    torchao's float8 (``plan.fp8_impl`` torchao, torchtitan;
    :func:`core.model.fp8.fp8_saves_fp8_inputs`): its ``matmul_with_hp_or_float8_args`` saves
    each linear's input as it arrives, so without tensor parallelism the terms are BF16's
    (QKV's and fc1's inputs 2 bytes, the ``10``; fc2's ``2f/h``) and the FP8 rules above
    do not apply; with ``t > 1`` torchtitan's float8 tensor parallelism hands every linear a
    float8 input, counted as above with the projection's as under delayed scaling (its FP8
    copy saved, ``+1`` beside FlashAttention's BF16 output).
    Tensor parallelism that saves the gathered input (``plan.tp_saved_input`` gathered,
    torchtitan; :func:`tp_saves_gathered_input`): with sequence parallelism the column-parallel
    linears keep their all-gathered input, all ``s`` tokens on every rank (torchtitan 0.2.0
    ``models/llama3/infra/parallelize.py`` ``apply_tp``: ``PrepareModuleInput`` with
    ``desired_input_layouts=Replicate()`` before ``attention`` and ``feed_forward``, then
    ``ColwiseParallel`` ``wq``/``wk``/``wv`` and ``w1``/``w3``, whose ``F.linear`` on the
    replicated DTensor saves it; the three projections and the two MLP inputs share one
    tensor each), where Megatron-Core keeps the ``s/t`` shard and gathers it again in the
    backward: QKV's and fc1's inputs (``2`` each of the ``10``; 1 byte under FP8 with float8
    inputs) count ``sbh`` rather than ``sbh/t``, i.e. ``sbh/t (34 + 4(t - 1) + 5as/h)``
    for GPT. The norms' inputs stay sharded (``SequenceParallel``), the norms' output shards
    are not kept (``RMSNorm`` saves its input), and the row-parallel ``wo``/``w2`` inputs and
    the attention core's Q, K, V and output are ``1/t`` of the heads or of ``f`` as in
    Megatron-Core. Full recomputation keeps the block's sequence-sharded input either way.
    Context parallelism: every term with ``s -> s/cp``
    (each rank keeps its own tokens' activations; ring attention needs FlashAttention, so
    no ``s x s`` term; the exchange's K/V buffers are transient, one layer's at a time:
    :func:`cp_exchange_buffer_bytes`, added by :func:`stage_memory_arrays`); with the
    all-to-all exchange (``cp_comm_type`` a2a) the core's output twice, ``+2 a kv / h``
    (``+2 a d_v / h`` with multi-head latent attention; :func:`_core_output_kept_twice`).

    Selective recomputation by module (Megatron-Core ``--recompute-modules``,
    :func:`core.plan.parallel.recompute_modules`): ``core_attn`` drops the ``5as/h`` term (the
    table's ``selective`` row); without it the unfused core keeps that term as with ``none``;
    ``layernorm`` drops the outputs of the norms that are modules of their own
    (:func:`norms_separate`; ``CheckpointWithoutOutput`` discards them and the backward runs
    the norms again), ``2`` each of the ``10``: both on the unfused (local spec) path; on the
    flash (Transformer Engine spec) path the pre-MLP norm of an MoE layer and the input norm
    with MLA only, so a dense GQA layer keeps both. ``mlp`` checkpoints the dense MLP on its
    input and drops its fc1 and activation outputs (``4f/h``, ``6f/h`` gated); on the flash
    path that input is the residual (kept anyway: the fused norm's input), so fc1's fused norm
    output (``2``) goes too, while the local spec's checkpoint keeps the norm output; in an
    MoE layer ``moe`` and ``shared_experts`` drop the shared experts' share
    (the routed part in :func:`moe_activation_bytes_per_layer`). Under FP8 each drops what the
    tensor costs there (the linears that read a recomputed output save their original input,
    Megatron-Core ``set_save_original_input``, freed with it; a checkpointed module's FP8
    copies are not kept): ``layernorm`` the pre-MLP norm's ``2`` (the router's BF16) plus the
    shared experts' FP8 copy, the MLA input norm's two FP8 copies; ``mlp`` fc1's FP8 copy,
    fc1's output and fc2's FP8 input.
    """
    if mode == "selective_op":  # torchtitan's per-op checkpointing: what its policy saves
        return selective_op_activation_bytes(model, plan)
    s, b, h, a = model.seq_length, plan.micro_batch_size, model.hidden_size, model.num_attention_heads
    s //= plan.context_parallel  # the rank's tokens (context parallelism, Megatron-Core)
    t = plan.tensor_parallel
    scale = DTYPE_BYTES[tensor_dtype(plan.precision)] / 2
    sbh = s * b * h
    flash = model.attention_kernel == "flash"
    mods = recompute_modules(plan) if mode == "selective" else ()
    terms = _layer_terms(model, plan, mods, mlp)
    if fp8_saves_fp8_inputs(plan):
        _fp8_terms(terms, model, plan, mode, mods)
    _recomputed_terms(terms, model, plan, mods)
    if mode != "full" and tp_saves_gathered_input(plan):
        # QKV's and fc1's inputs (the norms' outputs) kept whole on every rank, not their s/t
        # shards: norm_in + norm_mlp over all s tokens (t times the shard), in their dtype
        terms.base += (terms.norm_in + terms.norm_mlp) * (t - 1)
    if mode == "full":
        out = 2 * sbh / t if plan.sequence_parallel else 2 * sbh
    elif mode in ("none", "selective"):
        # the unfused core keeps its s x s tensors unless selective recomputation redoes it
        # (softmax output, dropout mask and output: 5; without attention dropout the softmax
        # output alone, 2: PyTorch's dropout returns its input at p = 0)
        kept = not flash and (mode == "none" or "core_attn" not in mods)
        ss = (5 if model.attention_dropout > 0 else 2) * a * s / h if kept else 0.0
        base, split = terms.base, terms.split
        out = sbh / t * (base + split + ss) if plan.sequence_parallel else sbh * (
            base + (split + ss) / t)
    else:
        raise ValueError(f"recompute mode {mode!r} is not one of none, selective, full")
    return out * scale


@dataclass(slots=True)
class _LayerTerms:
    """The terms of :func:`dense_activation_bytes_per_layer`, in 16-bit bytes per token over
    ``h`` (``sbh`` multiples), as its steps adjust them in turn.

    ``base`` is the part every rank keeps whole (Korthikanti et al. 2022 Table 2's ``10``: the
    norms' inputs and outputs, the two dropout masks, 1 byte per element each, which a model
    with ``hidden_dropout`` 0 does not keep: ``8``), ``split`` the part tensor parallelism splits
    (the ``24``: Q, K, V, the projection's input, the MLP's); ``norm_in`` and ``norm_mlp`` what
    the two norms' outputs (QKV's and fc1's inputs) cost, ``mlp_kept`` the MLP's term that
    ``mlp`` recomputation drops, ``shared_copy`` the shared experts' FP8 copy of their input
    (0 or 1). ``mla``, ``moe`` (an MoE layer: ``mlp`` given), ``per_f`` (6 gated, 8 gated unfused, 4 plain:
    :func:`core.model.mlp.mlp_saved_per_f`),
    ``mlp`` (the MLP's term) and ``proj_width`` (the projection's input width) describe the
    layer."""

    base: float
    split: float
    mla: bool
    moe: bool
    per_f: int
    mlp: float
    proj_width: int
    norm_in: float = 2.0
    norm_mlp: float = 2.0
    mlp_kept: float = 0.0
    shared_copy: int = 0


def _layer_terms(model: ModelConfig, plan: ParallelPlan, mods: tuple[str, ...],
                 mlp: float | None) -> _LayerTerms:
    """The 16-bit terms of one layer before FP8 and recomputation (see
    :func:`dense_activation_bytes_per_layer`): the ``10`` (plus MLA's latents,
    :func:`mla_activation_terms`) and the ``24`` written for the family (grouped-query heads,
    QK-norm, head size ``kv``, a gated MLP; ``mlp`` replaces the MLP's term in an MoE layer)."""
    h, a = model.hidden_size, model.num_attention_heads
    flash = model.attention_kernel == "flash"
    mla = getattr(model, "multi_latent_attention", False) is True
    base = 10.0
    if model.hidden_dropout == 0:  # no mask after attention and MLP (1 each)
        base -= 2.0
    if mla:  # multi-head latent attention: its heads and latents (mla_activation_terms)
        attn, latent = mla_activation_terms(model, plan, mods)
        if _core_output_kept_twice(plan, mods):  # TE's a2a keeps its head-split output too
            attn += 2 * a * model.v_head_dim / h  # (a d_v wide, as the projection's input)
        base += latent
        proj_width = a * model.v_head_dim  # the projection's input: a heads of v_head_dim
    else:
        attn = 4 + 4 * model.query_groups / a if flash else 8
        if flash and _core_output_kept_twice(plan, mods):
            attn += 2  # the core's head-split output beside the projection's input
        if model.qk_layernorm:  # the norms keep their inputs, Q and K before the norm
            attn += 2 + 2 * model.query_groups / a
        attn *= a * model.head_dim / h  # heads of kv_channels: Q, K, V a kv and g kv wide
        proj_width = a * model.head_dim  # the projection's input is a kv wide
    per_f = mlp_saved_per_f(model)
    moe = mlp is not None
    if mlp is None:
        mlp = per_f * model.ffn / h
    split = attn + mlp  # 24 for GPT
    # what the two norms' outputs cost here (QKV's and fc1's inputs), and the MLP's term
    return _LayerTerms(base=base, split=split, mla=mla, moe=moe, per_f=per_f, mlp=mlp,
                       proj_width=proj_width, mlp_kept=mlp)


def _core_output_kept_twice(plan: ParallelPlan, mods: tuple[str, ...]) -> bool:
    """Whether the layer keeps a second copy of the attention core's output, ``a kv`` wide
    (:func:`core.model.context_parallel.cp_core_output_kept_twice`: Transformer Engine's
    all-to-all context parallelism saves its output in the head-split layout while the
    projection keeps the one all-to-all'd back): not when ``core_attn`` is recomputed (the
    checkpoint keeps Q, K and V only) nor under FP8 with delayed scaling, whose projection
    keeps its FP8 copy (counted by :func:`_fp8_terms`) and frees the BF16 input."""
    if not cp_core_output_kept_twice(plan) or "core_attn" in mods:
        return False
    return not (plan.precision == "fp8" and fp8_recipe(plan) == "delayed")


def _fp8_terms(terms: _LayerTerms, model: ModelConfig, plan: ParallelPlan, mode: str,
               mods: tuple[str, ...]) -> None:
    """Adjust ``terms`` in place for FP8 training (``plan.precision == "fp8"``): Transformer
    Engine keeps the linear layers' inputs as their FP8 copies (1 byte, not 2; see
    :func:`dense_activation_bytes_per_layer`), the router's BF16 input and the shared experts'
    copy in an MoE layer, the projection's input by recipe."""
    flash = model.attention_kernel == "flash"
    # QKV's input (the first norm's output) 2 -> 1 (MLA: two TE linears read it, two FP8
    # copies: 2 -> 2); fc1's (the second's) 2 -> 1, but in an MoE layer the router keeps
    # that tensor in BF16 (its gate is a plain BF16 linear), so the shared experts' FP8 copy
    # adds 1 (and without shared experts nothing changes). With a recipe other than delayed
    # scaling Megatron-Core has the shared experts' fc1 save its original input instead
    # (shared_experts.py: set_save_original_input unless they are recomputed): no copy
    delayed = fp8_recipe(plan) == "delayed"
    # torchtitan's float8 tensor parallelism (plan.fp8_impl torchao, t > 1) casts the
    # projection's input to float8 before the matmul, which saves that copy: as delayed's
    torchao = getattr(plan, "fp8_impl", "transformer_engine") == "torchao"
    qkv_in = 0 if terms.mla else 1
    terms.shared_copy = shared_copy = 1 if (terms.moe and terms.mlp and delayed) else 0
    if not terms.moe:
        terms.base -= qkv_in + 1  # QKV's and fc1's inputs
        terms.norm_mlp = 1.0
    else:
        terms.base -= qkv_in - shared_copy  # QKV's input; the shared experts' FP8 copy
        terms.norm_mlp = 2.0 + shared_copy
    terms.norm_in = 2.0 - qkv_in
    mlp_in = terms.mlp / terms.per_f  # fc2's input, f wide: 2f/h -> f/h
    terms.mlp_kept = terms.mlp - mlp_in
    # the projection's input: 2 -> 1; FlashAttention not recomputed keeps its output (the
    # same tensor) in BF16 for its own backward, so the FP8 copy adds 1. With a recipe other
    # than delayed scaling the projection saves its original BF16 input (attention.py:
    # set_save_original_input): 2, as in BF16
    if not (delayed or torchao):
        proj = 0
    else:
        proj = 1 if (flash and (mode == "none" or "core_attn" not in mods)) else -1
    terms.split += proj * terms.proj_width / model.hidden_size - mlp_in


def _recomputed_terms(terms: _LayerTerms, model: ModelConfig, plan: ParallelPlan,
                      mods: tuple[str, ...]) -> None:
    """Adjust ``terms`` in place for selective recomputation by module (``mods``, Megatron-Core
    ``--recompute-modules``; see :func:`dense_activation_bytes_per_layer`): ``layernorm`` drops
    the separate norms' outputs, MLA's FP8 query copy and ``mla_up_proj``'s gathered rotary key,
    ``mlp`` (dense) or ``moe`` / ``shared_experts`` (the shared experts) drop the MLP's share.
    Runs after :func:`_fp8_terms`, whose costs it reads."""
    fp8 = plan.precision == "fp8"
    mla, moe, shared_copy = terms.mla, terms.moe, terms.shared_copy
    t, h = plan.tensor_parallel, model.hidden_size
    # Megatron-Core's TE layer spec (the flash attention path) fuses the input norm into QKV
    # (TELayerNormColumnParallelLinear) except with MLA, and the pre-MLP norm into fc1 except in
    # MoE layers (the router reads it); ``layernorm`` recomputes the separate norms only
    # (transformer_layer.py: not IdentityOp); the local spec (the unfused path) has both
    # separate. Their outputs are then not kept: under FP8 the linears that read them save
    # their original BF16 input instead of an FP8 copy (set_save_original_input), freed with it.
    in_separate, mlp_separate = norms_separate_of(model.attention_kernel == "flash", mla)
    shared_recomputed = moe and bool(mods) and ("moe" in mods or "shared_experts" in mods)
    if "layernorm" in mods:  # (the shared experts' copy once: dropped below when recomputed)
        terms.base -= (terms.norm_in if in_separate else 0.0) + (
            terms.norm_mlp - (shared_copy if (fp8 and shared_recomputed) else 0.0)
            if (moe or mlp_separate) else 0.0)
    if mla and fp8 and not model.q_lora_rank:
        # without query compression (q_lora_rank empty) the query projection reads the input
        # norm's output inside the up projections' checkpoint (Megatron-Core
        # multi_latent_attention.py: q_compressed is the hidden states): only the key/value
        # down projection saves its original input under layernorm recomputation, so the query
        # projection's FP8 copy stays (1 of the 2); mla_up_proj keeps the BF16 hidden states
        # (2) as the checkpoint's input instead of that FP8 copy (1); with both, the norm's
        # output is discarded and the query projection runs inside the checkpoint: nothing kept
        if ("layernorm" in mods and in_separate) != ("mla_up_proj" in mods):
            terms.base += 1.0
    if mla and "mla_up_proj" in mods and plan.sequence_parallel and t > 1:
        # the checkpoint keeps the rotary key gathered to the whole sequence (Megatron-Core
        # gathers k_pos_emb before it): 2 pe per token on every rank, not on s/t tokens
        terms.base += 2 * model.qk_pos_emb_head_dim * (t - 1) / h
    if "mlp" in mods and not moe:  # the dense MLP under a checkpoint of its input
        if not mlp_separate:  # the residual (kept anyway): fc1's fused norm output is not kept
            terms.base -= terms.norm_mlp
        terms.split -= terms.mlp_kept  # nor fc1's and the activation's outputs
    elif shared_recomputed:
        terms.split -= terms.mlp_kept  # the shared experts' fc1 and activation outputs
        if fp8:
            terms.base -= shared_copy  # and their FP8 copy of their input (the router keeps the BF16)
