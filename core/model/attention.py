"""Attention component: multi-head / grouped-query attention with an optional sliding window
(parameters, forward FLOPs, the window's attended pairs and which layers are windowed), and
where the norms around it are separate modules (Megatron-Core layer specs).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from core.model.base import Kernel, gemm, mem, wgrad_accumulate
from core.model.context_parallel import cp_all_gather_core
from core.model.tokens import OpShape
from core.plan.model_config import ModelConfig

__all__ = [
    "attended_pairs", "causal_core_fraction", "norms_separate", "norms_separate_of",
    "window_layer_mask", "attention_core_kernels", "mha_attention_kernels"]


def attended_pairs(s: int, w: int = 0) -> float:
    """Query-key pairs a causal FlashAttention pass computes over ``s`` tokens, in the causal
    count's convention (the area under the mask: ``s^2/2`` for full causal attention,
    FlashAttention-2's FLOP count); with a sliding window of ``w`` tokens (``w > 0``, each
    query attends to the ``w`` tokens before it) the area of the band, ``s w - w^2/2`` for
    ``w <= s`` (exact for the banded causal mask in that convention: the causal triangle less
    the triangle of side ``s - w`` beyond the window), ``s^2/2`` for ``w >= s``."""
    if w <= 0 or w >= s:
        return 0.5 * s * s
    return s * w - 0.5 * w * w


def window_layer_mask(model: ModelConfig) -> np.ndarray:
    """Which layers use sliding-window attention, bool array shape (L,): every layer when the
    model has a ``window_size`` and no ``window_attn_skip_freq``; with ``N``, layer ``i``
    (0-based) unless ``(i + 1) % N == 0`` (Megatron-Core ``is_layer_window_attention`` on the
    1-based layer number; GPT-OSS, ``N = 2``: windowed, full, windowed ...); none without a
    window."""
    L = model.num_layers
    w = getattr(model, "window_size", None)
    if not w:
        return np.zeros(L, bool)
    n = getattr(model, "window_attn_skip_freq", None)
    if not n:
        return np.ones(L, bool)
    return (np.arange(1, L + 1) % n) != 0


def norms_separate(model: ModelConfig) -> tuple[bool, bool]:
    """Whether a layer's input norm and a dense layer's pre-MLP norm are modules of their own,
    ``(input, pre_mlp)`` (an MoE layer's pre-MLP norm always is: the router reads its output).

    Megatron-Core 0.19 ``gpt_layer_specs``: the Transformer Engine spec, which the FlashAttention
    path (``model.attention_kernel = "flash"``) stands for, fuses the input norm into QKV
    (``TELayerNormColumnParallelLinear``; separate with MLA, whose down projections read it) and
    the dense pre-MLP norm into fc1 (``IdentityOp``); the local spec, Megatron's old unfused
    path, keeps both separate. ``--recompute-modules layernorm`` recomputes only the separate
    ones (``TransformerLayer``: a norm that is not ``IdentityOp``)."""
    return norms_separate_of(model.attention_kernel == "flash",
                           getattr(model, "multi_latent_attention", False) is True)


def norms_separate_of(flash: bool, mla: bool) -> tuple[bool, bool]:
    """:func:`norms_separate` of the flash path and MLA flags (the activation formulas' own)."""
    return (not flash) or mla, not flash


def causal_core_fraction(model: ModelConfig) -> float:
    """Share of the full ``s x s`` attention core under the causal mask, averaged over the
    layers: ``1/2`` for causal attention; on a sliding-window layer the exact average causal
    context over ``s``, ``(W - W(W-1)/(2s)) / s`` with ``W = window_size + 1`` (the query and
    the ``w`` tokens before it), ``1/2`` when ``W >= s``. The same fractions as Megatron-Core
    0.19's ``num_floating_point_operations`` ("causal mask (only half of the mask is
    non-zero)") and Megatron-Bridge 0.6's ``flop_utils`` ("exact average causal SWA
    context"); the model FLOPs here keep Narayanan et al.'s Eq. 3 (fraction 1), the hardware
    FLOPs use this (:func:`hardware_flops_per_iteration`)."""
    s = model.seq_length
    windowed = window_layer_mask(model)
    n_swa = int(windowed.sum())
    if not n_swa:
        return 0.5
    W = int(model.window_size) + 1
    swa = (W - W * (W - 1) / (2 * s)) / s if W < s else 0.5
    return (0.5 * (model.num_layers - n_swa) + swa * n_swa) / model.num_layers


def attention_core_kernels(key: Mapping[str, Any], b: int, s: int, heads: int, groups: int,
                           dh: int, e: int, dv: int | None = None
                           ) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` kernels of one rank's attention core (scores, softmax, values)
    for ``heads`` query and ``groups`` K/V heads of ``dh`` channels over ``s`` tokens (``dv``
    the channels of V and the output when they differ: multi-head latent attention's
    ``v_head_dim`` beside Q's and K's ``qk + rope``; FlashAttention only): one
    FlashAttention kernel per pass (with the window, context-parallel ring, all-gather or
    all-to-all of the key), or Megatron's unfused batched GEMMs and softmax (see
    :func:`core.model.layer.dense_op_kernels`).

    Raises
    ------
    ValueError
        Context parallelism on the unfused path.
    """
    T = b * s
    kv_expand = T * 2 * (heads + groups) * dh * e  # read g/t, write a/t heads of K and V
    cp = int(key.get("cp", 1))
    if key.get("attn") == "flash":
        # the all-to-all exchanges (cpa > 1): the core runs on cpa times the tokens for
        # 1/cpa of the heads, in a ring of cp/cpa steps (one step for a2a)
        dv = dh if dv is None else dv  # V's and the output's channels (MLA: v_head_dim)
        cpa = int(key.get("cpa", 1) or 1)
        ring, sc, hc, gc = cp // cpa, s * cpa, heads // cpa, groups // cpa
        # scores over dh channels, values over dv: 2 (dh + dv) FLOPs per query-key pair
        causal = 2.0 * b * hc * (dh + dv) * attended_pairs(sc, int(key.get("w", 0) or 0))
        io_fwd = e * b * sc * (dh + dv) * (hc + gc)  # Q, K, V in, O out
        core = [Kernel("flash_attn", causal, float(io_fwd), sc, sc, dh, b * hc)]
        core_bwd = [Kernel("flash_attn_bwd", 2.5 * causal,
                           float(e * b * sc * (dh + dv) * (2 * hc + 2 * gc)), sc, sc, dh, b * hc)]
        if cp > 1 and int(key.get("cpg", 0) or 0):
            core, core_bwd = cp_all_gather_core(b, s, cp, heads, groups, dh, e, causal, dv)
        elif ring > 1:  # ring attention: cp steps, each a causal s x s problem (see above):
            # each later step corrects the output (dv) and the backward adds dQ, dK (dh), dV
            core = core * ring + [mem("cp_out_correction", 3 * e * T * heads * dv)] * (ring - 1)
            core_bwd = core_bwd * ring + [mem("cp_grad_accumulate", 3 * e * T * (
                heads * dh + groups * (dh + dv)))] * (ring - 1)
        if cpa > 1:  # TE's a2a copies Q, K, V and O (dO, dQ, dK, dV) into its exchanges'
            # layout: each read and written once
            core = [mem("cp_a2a_layout", 2.0 * io_fwd), *core]
            core_bwd = [*core_bwd, mem("cp_a2a_layout_bwd", 2.0 * io_fwd)]
    elif cp > 1:
        raise ValueError(f"context parallelism (cp={cp}) with attn={key.get('attn')!r} is not "
                         "modelled: ring attention runs in FlashAttention / TE fused attention")
    else:
        score = b * heads * s * s * e  # bytes of one (b, a/t, s, s) score tensor
        expand = [mem("kv_expand", kv_expand)] if groups < heads else []
        core = [
            *expand,
            gemm("attn_scores", s, s, dh, e, b * heads),       # (b*a/t, s, kv) x (kv, s)
            mem("scale_mask_softmax", 2 * score),
            mem("attn_dropout", 2.5 * score),
            gemm("attn_values", s, dh, s, e, b * heads),       # (b*a/t, s, s) x (s, kv)
        ]
        core_bwd = [
            gemm("attn_values_dgrad_p", s, s, dh, e, b * heads),
            gemm("attn_values_dgrad_v", s, dh, s, e, b * heads),
            mem("attn_dropout_bwd", 2.5 * score),
            mem("softmax_bwd", 3 * score),
            gemm("attn_scores_dgrad_q", s, dh, s, e, b * heads),
            gemm("attn_scores_dgrad_k", s, dh, s, e, b * heads),
            *([mem("kv_expand_bwd", kv_expand)] if groups < heads else []),
        ]
    return core, core_bwd


def mha_attention_kernels(op: str, sh: OpShape) -> list[Kernel]:
    """Kernels of one rank's multi-head / grouped-query attention op (``attention_fwd``,
    ``attention_bwd`` and the core's ``attention_core_fwd`` / ``attention_core_bwd``): the
    input norm, QKV, RoPE and QK-norm, the core (:func:`attention_core_kernels`), the
    projection (see :func:`core.model.layer.dense_op_kernels`)."""
    key, b, s, h, t, e, T = sh.key, sh.b, sh.s, sh.h, sh.t, sh.e, sh.T
    tok, norm, acc, linear, cast = sh.tok, sh.norm, sh.acc, sh.linear, sh.cast
    a, g = int(key["a"]), int(key["g"])
    heads, groups, dh = a // t, g // t, int(key["kv"])
    qkv = (a + 2 * g) * dh // t  # columns of this rank's QKV GEMM (3h/t without GQA)
    ctx = heads * dh  # this rank's attention output, the projection's input (h/t for GPT)
    rope = key.get("pos") == "rope"
    qk_bytes = 2 * T * (heads + groups) * dh * e  # read and write Q and K
    core, core_bwd = attention_core_kernels(key, b, s, heads, groups, dh, e)
    if op == "attention_core_fwd":  # what selective recomputation runs again
        return core
    if op == "attention_core_bwd":  # the ring's share of the backward (context parallelism)
        return core_bwd
    rotary = [mem("rope", qk_bytes)] if rope else []
    if int(key.get("qkn", 0)):  # a norm over each query and key head (read and write)
        rotary = [mem(f"qk_{norm}", qk_bytes), *rotary]
    if op == "attention_fwd":
        return [
            mem(norm, 2 * tok),
            *cast("qkv_input", T * h, True),
            linear("qkv", T, qkv, h),                          # (b*s, h) x (h, (a+2g)kv/t)
            *rotary,
            *core,
            *cast("proj_input", T * ctx),
            linear("proj", T, h, ctx),                        # (b*s, a kv/t) x (a kv/t, h)
        ]
    return [
        mem("bias_dropout_add_bwd", 2 * tok),
        *cast("proj_grad", T * h, True),
        linear("proj_dgrad", T, ctx, h), linear("proj_wgrad", ctx, h, T),
        *wgrad_accumulate(acc * (h * qkv + h * ctx)),
        *core_bwd,
        *([mem("rope_bwd", qk_bytes)] if rope else []),
        *([mem(f"qk_{norm}_bwd", 2 * qk_bytes)] if int(key.get("qkn", 0)) else []),
        *cast("qkv_grad", T * qkv),
        linear("qkv_dgrad", T, h, qkv), linear("qkv_wgrad", qkv, h, T),
        mem(f"{norm}_bwd", 4 * tok),
    ]
