"""Attention component: multi-head / grouped-query attention with an optional sliding window
(parameters, forward FLOPs, the window's attended pairs and which layers are windowed), and
where the norms around it are separate modules (Megatron-Core layer specs).
"""

from __future__ import annotations


import numpy as np

from core.plan.config import ModelConfig

__all__ = [
    "attended_pairs", "causal_core_fraction", "norms_separate", "norms_separate_of",
    "window_layer_mask",
]


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


# --------------------------------------------------------------------------- multi-head latent attention

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
