"""The ``dense`` family: decoders as Megatron-LM / Megatron-Core build them.

GPT at the defaults of the model's family fields (learned positions, LayerNorm, GeLU MLP,
biases, tied word embedding, full multi-head attention, unfused attention); Llama-style models
with them set (grouped-query attention, SwiGLU, RMSNorm, RoPE, no biases, untied output layer,
FlashAttention); mixture-of-experts layers (:mod:`core.model.moe`), multi-head latent
attention (:mod:`core.model.mla`), multi-token prediction (:mod:`core.model.mtp`), sliding
windows and attention sinks (GPT-OSS). The formulas are the dense layer's
(:mod:`core.model.layer`).
"""

from __future__ import annotations

from typing import Any, Mapping

from core.model.base import Kernel
from core.model.keys import MOE_OPS, MTP_OPS
from core.model.layer import (dense_activation_bytes_per_layer, dense_edge_parameters,
                              dense_forward_flops_per_token, dense_layer_parameters,
                              dense_op_kernels)
from core.model.mlp import is_gated
from core.model.moe import moe_ffn, moe_op_kernels
from core.model.mtp import mtp_layers, mtp_op_kernels
from core.model.spec import (AttentionSpec, LayerSpec, MlpSpec, ModelFamily, NormSpec,
                             register_family)
from core.plan.model_config import ModelConfig

__all__ = ["DENSE", "dense_layer_spec", "dense_family_op_kernels"]


def dense_layer_spec(model: ModelConfig) -> LayerSpec:
    """The layer spec of a dense-family model, from its fields (Megatron-Core
    ``get_gpt_layer_with_transformer_engine_spec`` / ``get_gpt_layer_local_spec``: pre-norms
    only)."""
    mla = getattr(model, "multi_latent_attention", False) is True
    a, g = model.num_attention_heads, model.query_groups
    attention = AttentionSpec(
        kind="mla" if mla else ("gqa" if g < a else "mha"), heads=a, groups=g,
        head_dim=model.head_dim, window=int(model.window_size or 0),
        window_skip_freq=int(model.window_attn_skip_freq or 0), qk_norm=bool(model.qk_layernorm),
        flash=model.attention_kernel == "flash")
    mlp = MlpSpec(activation=model.activation, gated=is_gated(model.activation), ffn=model.ffn,
                  experts=int(model.num_experts or 0),
                  top_k=int(model.moe_top_k) if model.is_moe else 0,
                  shared=int(model.num_shared_experts) if model.is_moe else 0)
    if model.is_moe:
        mlp = MlpSpec(mlp.activation, mlp.gated, moe_ffn(model), mlp.experts, mlp.top_k, mlp.shared)
    return LayerSpec(family="dense", attention=attention, mlp=mlp,
                     norm=NormSpec(kind=model.normalization), mtp_layers=mtp_layers(model))


def dense_family_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of a dense-family op: the MoE ops' (:func:`moe_op_kernels`),
    the MTP ops' (:func:`mtp_op_kernels`), else the dense layer's, embedding's, output layer's
    and optimizer step's (:func:`dense_op_kernels`)."""
    if op in MOE_OPS:
        return moe_op_kernels(op, key)
    if op in MTP_OPS:
        return mtp_op_kernels(op, key)
    return dense_op_kernels(op, key)


#: The dense family.
DENSE = register_family(ModelFamily(
    "dense", dense_layer_spec, dense_family_op_kernels, dense_layer_parameters,
    dense_edge_parameters, dense_forward_flops_per_token, dense_activation_bytes_per_layer))
