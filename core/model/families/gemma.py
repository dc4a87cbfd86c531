"""The ``gemma2`` and ``gemma3`` families: Gemma 2 and Gemma 3's decoder layer.

Sources: the Gemma 2 report (Gemma Team 2024, arXiv:2408.00118, Sec. 2 and Table 1) and the
Gemma 3 report (arXiv:2503.19786, Sec. 2), and the ``transformers`` modelling code
(``Gemma2DecoderLayer``, ``Gemma3DecoderLayer``, ``Gemma2Attention``). A Gemma layer is the
dense family's (:mod:`core.model.families.dense`) with:

* a GeGLU MLP (``model.activation`` geglu: gate and up projections, a tanh-approximated GeLU
  gate; SwiGLU's GEMMs, timed by the same fused kernel bytes, :func:`core.model.keys.activation_key`);
* RMSNorm before and after both attention and MLP (``input_layernorm``,
  ``post_attention_layernorm``, ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``):
  two more norms per layer, ``h`` parameters each, a norm kernel in each sublayer's forward and
  backward, and each keeps its input for the backward;
* sliding-window layers alternating with global ones (``model.window_size`` and
  ``window_attn_skip_freq``: 2 for Gemma 2, one global of 6 for Gemma 3);
* the embedding's output scaled by ``sqrt(h)`` (one elementwise kernel each pass);
* Gemma 2 only: soft-capping ``c tanh(x / c)`` of the attention scores (``c`` = 50) and of
  the output logits (``c`` = 30); Gemma 3 drops it for QK-norm (``model.qk_layernorm``).

Parameters, model FLOPs (GEMMs only, as Megatron counts) and the attention layers are the dense
family's; the extra norms add ``2h`` parameters per layer. The elementwise kernels count their
FLOPs (:data:`SOFTCAP_FLOPS`, :data:`NORM_FLOPS`); their time is their bytes (memory-bound).
Mixture of experts, latent attention and multi-token prediction are not Gemma's: refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from core.model.base import DTYPE_BYTES, Kernel
from core.model.families.dense import dense_family_op_kernels, dense_layer_spec
from core.model.layer import (dense_activation_bytes_per_layer, dense_edge_parameters,
                              dense_forward_flops_per_token, dense_layer_parameters)
from core.model.keys import FAMILY_KEY, with_family_defaults
from core.model.spec import LayerSpec, ModelFamily, NormSpec, register_family
from core.model.tokens import op_shape
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, recompute_modules, tensor_dtype

__all__ = ["SOFTCAP_FLOPS", "NORM_FLOPS", "GEMMA_FAMILIES", "gemma_layer_spec",
           "gemma_op_kernels", "gemma_layer_parameters", "gemma_activation_bytes_per_layer"]

#: FLOPs per element of soft-capping ``c tanh(x / c)``: forward divide, tanh, multiply (3);
#: backward ``g (1 - (y/c)^2)``: divide, square, subtract, multiply (4).
SOFTCAP_FLOPS = (3, 4)
#: FLOPs per element of an RMSNorm ``x / rms(x) * (1 + w)``: forward square, sum, scale and
#: weight (4); backward twice that (8).
NORM_FLOPS = (4, 8)
#: Gemma families and whether they soft-cap (Gemma 2 does, Gemma 3 does not).
GEMMA_FAMILIES = {"gemma2": True, "gemma3": False}


def _check(model: ModelConfig) -> None:
    if model.is_moe or getattr(model, "multi_latent_attention", False) is True \
            or int(model.mtp_num_layers or 0):
        raise ValueError(f"model family {model.family!r} with experts, latent attention or "
                         "multi-token prediction is not modelled (Gemma has none)")


def gemma_layer_spec(model: ModelConfig) -> LayerSpec:
    """The dense layer spec (:func:`core.model.families.dense.dense_layer_spec`) with post-norms
    after attention and MLP, the embedding scaled and, for ``gemma2``, soft-capped attention
    scores and output logits.

    Raises
    ------
    ValueError
        Experts, latent attention or multi-token prediction.
    """
    _check(model)
    spec = dense_layer_spec(model)
    cap = GEMMA_FAMILIES[model.family]
    return dataclasses.replace(
        spec, family=model.family,
        attention=dataclasses.replace(spec.attention, logit_softcap=cap),
        norm=NormSpec(spec.norm.kind, post_attention=True, post_mlp=True),
        embedding_scale=True, final_logit_softcap=cap)


def gemma_layer_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of one layer: the dense layer's
    (:func:`core.model.layer.dense_layer_parameters`) and the two post-norms, replicated
    (``h`` each with RMSNorm). Gemma 2 9B (42 layers, h 3584, 16 heads of 256, 8 groups,
    f 14336, vocabulary 256000, tied): 9,241,705,984 in all."""
    spec = gemma_layer_spec(model)
    sharded, replicated = dense_layer_parameters(model)
    h = model.hidden_size
    norm = 2 * h if spec.norm.kind == "layernorm" else h
    return sharded, replicated + (spec.norm.per_layer - 2) * norm


def _softcapped(kernels: list[Kernel], e: int, backward: bool) -> list[Kernel]:
    """The attention core's kernels with soft-capped scores: FlashAttention applies the cap
    inside its kernel (FlashAttention-2's ``softcap``: more FLOPs, no more bytes; its FLOPs are
    ``4 dh`` per score forward, ``10 dh`` backward), the unfused path adds an elementwise kernel
    over the ``(b a/t, s, s)`` scores after the scores GEMM (read, write) and one in the backward
    after the softmax's (read the gradient and the capped scores, write)."""
    fwd, bwd = SOFTCAP_FLOPS
    out = []
    for k in kernels:
        if k.name == "flash_attn":
            k = dataclasses.replace(k, flops=k.flops + fwd * k.flops / (4 * k.k))
        elif k.name == "flash_attn_bwd":
            k = dataclasses.replace(k, flops=k.flops + bwd * k.flops / (10 * k.k))
        out.append(k)
        scores = float(k.m * k.n * k.batch)
        if k.name == "attn_scores":
            out.append(Kernel("attn_softcap", fwd * scores, 2.0 * e * scores))
        elif k.name == "attn_values_dgrad_p":
            out.append(Kernel("attn_softcap_bwd", bwd * scores, 3.0 * e * scores))
    return out


def _norm(name: str, elements: float, e: int, backward: bool) -> Kernel:
    """A norm kernel over ``elements``: forward read and write, backward read the input and the
    gradient, write the gradient and the weight's partial sums (the dense norms' bytes)."""
    return Kernel(name, NORM_FLOPS[backward] * elements, (4.0 if backward else 2.0) * e * elements)


def gemma_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of a Gemma op: the dense family's
    (:func:`core.model.families.dense.dense_family_op_kernels`) with the post-attention norm
    after the projection and the post-MLP norm after fc2 (before the residual add; backward in
    reverse), the scaled embedding (a multiply over the ``(b, s, h)`` embedding each pass) and,
    for ``gemma2`` (the key's :data:`core.model.keys.FAMILY_KEY`), the soft-capped attention
    scores (:func:`_softcapped`) and output logits (an elementwise kernel over the rank's
    ``(b s, V/t)`` logits after the logits GEMM; backward before its input-gradient GEMM)."""
    kernels = dense_family_op_kernels(op, key)
    full = with_family_defaults(key)
    if op == "optimizer_step" or "b" not in full:
        return kernels
    sh = op_shape(full)
    cap = GEMMA_FAMILIES[str(key.get(FAMILY_KEY) or "gemma2")]
    bwd = op.endswith("_bwd")
    if op.startswith("attention_") and cap:
        kernels = _softcapped(kernels, sh.e, bwd)
    rows = sh.tok / sh.e  # the elements a norm runs on (the rank's s/t tokens with sp)
    if op in ("attention_fwd", "mlp_fwd"):
        name = "post_attn_" if op == "attention_fwd" else "post_mlp_"
        at = len(kernels) if op == "attention_fwd" else len(kernels) - 1  # before the residual add
        kernels.insert(at, _norm(name + sh.norm, rows, sh.e, False))
    elif op in ("attention_bwd", "mlp_bwd"):
        name = "post_attn_" if op == "attention_bwd" else "post_mlp_"
        kernels.insert(1, _norm(name + sh.norm + "_bwd", rows, sh.e, True))
    elif op in ("embedding_fwd", "embedding_bwd"):
        scale = Kernel("embedding_scale" + ("_bwd" if bwd else ""), float(sh.T * sh.h), 2.0 * sh.act)
        kernels.insert(1, scale)
    elif op in ("output_fwd", "output_bwd") and cap:
        cells = float(sh.T * (int(full["V"]) // sh.t))
        f_fwd, f_bwd = SOFTCAP_FLOPS
        if op == "output_fwd":
            kernels.insert(2, Kernel("final_logit_softcap", f_fwd * cells, 2.0 * sh.e * cells))
        else:
            at = next(i for i, k in enumerate(kernels) if k.name == "logits_dgrad")
            kernels.insert(at, Kernel("final_logit_softcap_bwd", f_bwd * cells, 3.0 * sh.e * cells))
    return kernels


def gemma_activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str) -> float:
    """Activation bytes one layer keeps per micro-batch on one GPU: the dense layer's
    (:func:`core.model.layer.dense_activation_bytes_per_layer`) and, without full
    recomputation, the two post-norms' inputs (``2 sbh`` each in 16 bits, ``/t`` under sequence
    parallelism, as the pre-norms' in Korthikanti et al. 2022, Table 2) and, for ``gemma2`` on
    the unfused attention path without ``core_attn`` recomputation, the soft-capped scores the
    cap's backward reads (``2 b s^2 a/t``). Torchtitan's per-op checkpointing recomputes the
    norms (none kept)."""
    _check(model)
    out = dense_activation_bytes_per_layer(model, plan, mode)
    if mode not in ("none", "selective"):
        return out
    s, b, h, t = (model.seq_length // plan.context_parallel, plan.micro_batch_size,
                  model.hidden_size, plan.tensor_parallel)
    scale = DTYPE_BYTES[tensor_dtype(plan.precision)] / 2
    norms = 2 * 2 * s * b * h / (t if plan.sequence_parallel else 1)
    mods = recompute_modules(plan) if mode == "selective" else ()
    scores = 0.0
    if GEMMA_FAMILIES[model.family] and model.attention_kernel != "flash" \
            and (mode == "none" or "core_attn" not in mods):
        scores = 2.0 * b * s * s * (model.num_attention_heads // t)
    return out + (norms + scores) * scale


#: The Gemma families.
GEMMA2, GEMMA3 = (register_family(ModelFamily(
    name, gemma_layer_spec, gemma_op_kernels, gemma_layer_parameters, dense_edge_parameters,
    dense_forward_flops_per_token, gemma_activation_bytes_per_layer)) for name in GEMMA_FAMILIES)
