"""Transformer Engine's placeholder weight gradients: a buffer per weight shape, kept.

With the weight-gradient GEMMs accumulating into the fp32 ``main_grad``
(:func:`core.plan.parallel.wgrad_accumulation` ``"fused"``), a linear layer's backward
still has to hand autograd a weight gradient, so that Megatron-Core's data-parallel hook
runs on the main thread. Transformer Engine returns a placeholder for it:
``transformer_engine.pytorch.module.base.get_dummy_wgrad(shape, dtype)``, an empty tensor
of the weight's shape and dtype, created the first time a shape is asked for and kept in
the module's ``_dummy_wgrads`` dictionary for the rest of the process ("reuse of single
dummy wgrad buffer across different layers/microbatches"). ``Linear``,
``LayerNormLinear`` and ``GroupedLinear`` call it in their backward when
``fuse_wgrad_accumulation`` is on and the weight has ``grad_added_to_main_grad`` (set by
Megatron-Core's ``DistributedDataParallel``), and Megatron-Core's own
``ColumnParallelLinear`` (the output layer) calls it too whenever Transformer Engine is
installed (``megatron/core/tensor_parallel/layers.py``,
``LinearWithGradAccumulationAndAsyncCommunication.backward``, Megatron-Core 0.16.1).
Read in Transformer Engine 2.3, 2.5, 2.7 and 2.11; 1.13 and 2.1 allocate a fresh
placeholder per call instead (freed by the hook at once: a transient of one weight,
less than the buffers counted here).

So after the first backward a GPU holds one buffer, in the weights' dtype, per distinct
weight shape among its stage's linear layers: ``torch.cuda.max_memory_allocated`` counts
them. :func:`dummy_wgrad_bytes` gives their sum per stage.

Without the fusion (``"separate"``) each weight gradient is a real tensor in the weights'
dtype (Megatron-Core's ``grad_output.t().matmul(total_input)``, TE's wgrad GEMM output) until
the data-parallel hook adds it to ``main_grad`` and drops it (``param.main_grad.add_(
param.grad.data); param.grad = None``, Megatron-Core ``DistributedDataParallel``'s backward
hook): a transient of one weight at a time. :func:`weight_gradient_buffer_bytes` counts the
largest of the stage's (the output layer's on the loss stage) at the peak, the backward's
first ops running while the activations are all held: a bound that can exceed the
transient at the true peak by the difference between the largest and the first weights.
"""

from __future__ import annotations

import numpy as np

from core.model.base import DTYPE_BYTES
from core.model.counts import stage_layers_with_mtp, stage_moe_layer_counts
from core.model.layout import loss_stage
from core.model.mla import mla_dims
from core.model.mlp import is_gated
from core.model.moe import expert_tensor_parallel, moe_ffn
from core.model.mtp import mtp_layers
from core.plan.model_config import ModelConfig, padded_vocab_size
from core.plan.parallel import ParallelPlan, tensor_dtype, wgrad_accumulation

__all__ = ["attention_weight_shapes", "mlp_weight_shapes", "stage_weight_shapes",
           "dummy_wgrad_bytes", "separate_wgrad_bytes", "weight_gradient_buffer_bytes"]

Shape = tuple[int, int]


def attention_weight_shapes(model: ModelConfig, t: int) -> set[Shape]:
    """Weight shapes ``(out, in)`` per rank of a layer's attention linear layers.

    Megatron-Core with the Transformer Engine spec: ``linear_qkv`` ``((a + 2g) kv / t, h)``
    (column-parallel, Q, K and V fused) and ``linear_proj`` ``(h, a kv / t)``
    (row-parallel). Multi-head latent attention (:func:`core.model.mla.mla_attention_parameters`):
    the replicated down projections ``(q_l, h)`` and ``(kv_l + d_pe, h)``, the up projections
    ``(a (d_qk + d_pe) / t, q_l)`` (``(…, h)`` without query compression) and
    ``(a (d_qk + d_v) / t, kv_l)``, the projection ``(h, a d_v / t)``.
    """
    h, a = model.hidden_size, model.num_attention_heads
    if getattr(model, "multi_latent_attention", False) is True:
        ql, kvl, qk, pe, dv = mla_dims(model)
        out = {(kvl + pe, h), (a * (qk + dv) // t, kvl), (h, a * dv // t)}
        out |= {(ql, h), (a * (qk + pe) // t, ql)} if ql else {(a * (qk + pe) // t, h)}
        return out
    kv, g = model.head_dim, model.query_groups
    return {((a + 2 * g) * kv // t, h), (h, a * kv // t)}


def mlp_weight_shapes(model: ModelConfig, f: int, t: int) -> set[Shape]:
    """Weight shapes ``(out, in)`` per rank of an MLP of width ``f`` split over ``t`` ranks:
    ``linear_fc1`` ``(f / t, h)`` (``2f`` gated, gate and up fused) and ``linear_fc2``
    ``(h, f / t)``."""
    h = model.hidden_size
    fc1 = 2 * f if is_gated(model.activation) else f
    return {(fc1 // t, h), (h, f // t)}


def stage_weight_shapes(model: ModelConfig, plan: ParallelPlan) -> list[set[Shape]]:
    """The distinct linear-layer weight shapes of one GPU of each pipeline stage, a list of
    ``p`` sets of ``(out, in)``: the attention's (:func:`attention_weight_shapes`); a dense
    layer's MLP (:func:`mlp_weight_shapes`, ``ffn_hidden_size`` over ``t``); an MoE layer's
    shared experts (``num_shared_experts * moe_ffn`` over ``t``) and routed experts (one
    expert's MLP over ``etp``: every local expert has that shape; the router's gate is a
    plain parameter, not a linear layer); on the loss stage the output layer
    ``(V' / t, h)`` (``V'`` padded for ``t``; tied or not, its backward runs on the weight
    it uses) and each MTP layer's ``eh_proj`` ``(h / t, 2h)``."""
    t = plan.tensor_parallel
    layers = stage_layers_with_mtp(model, plan)
    moe = stage_moe_layer_counts(model, plan)
    attention = attention_weight_shapes(model, t)
    dense = mlp_weight_shapes(model, model.ffn, t)
    moe_shapes: set[Shape] = set()
    if model.is_moe:
        moe_shapes = mlp_weight_shapes(model, moe_ffn(model), expert_tensor_parallel(plan))
        if model.num_shared_experts:
            moe_shapes |= mlp_weight_shapes(model, model.num_shared_experts * moe_ffn(model), t)
    out: list[set[Shape]] = []
    for i in range(plan.pipeline_parallel):
        shapes: set[Shape] = set()
        if layers[i] > 0:
            shapes |= attention
        if layers[i] > moe[i]:
            shapes |= dense
        if moe[i] > 0:
            shapes |= moe_shapes
        out.append(shapes)
    h = model.hidden_size
    last = loss_stage(plan)
    V = padded_vocab_size(model.vocab_size, t, divisible_by=model.make_vocab_size_divisible_by)
    out[last].add((V // t, h))
    if mtp_layers(model):
        out[last].add((h // t, 2 * h))
    return out


def dummy_wgrad_bytes(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Bytes of Transformer Engine's placeholder weight gradients on one GPU of each stage,
    float64 (p,) (module doc): the sum over :func:`stage_weight_shapes` of ``rows * cols``
    times the weights' bytes (:func:`core.plan.parallel.tensor_dtype`; BF16 under FP8).
    Zero unless the weight gradients accumulate fused into ``main_grad``
    (:func:`core.plan.parallel.wgrad_accumulation` ``"fused"``: ZeRO 0-2 with
    ``gradient_accumulation_fusion``)."""
    p = plan.pipeline_parallel
    if wgrad_accumulation(plan) != "fused":
        return np.zeros(p)
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    return np.array([float(e * sum(r * c for r, c in shapes))
                     for shapes in stage_weight_shapes(model, plan)])


def separate_wgrad_bytes(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Bytes of the largest weight gradient of one GPU of each stage, float64 (p,), when the
    weight gradients are tensors of their own (:func:`core.plan.parallel.wgrad_accumulation`
    ``"separate"``; module doc): ``rows * cols`` of its largest :func:`stage_weight_shapes`
    times the weights' bytes. Zero otherwise."""
    p = plan.pipeline_parallel
    if wgrad_accumulation(plan) != "separate":
        return np.zeros(p)
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    return np.array([float(e * max((r * c for r, c in shapes), default=0))
                     for shapes in stage_weight_shapes(model, plan)])


def weight_gradient_buffer_bytes(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """The weight-gradient tensors of one GPU of each stage beyond the gradient buffer, bytes,
    float64 (p,): :func:`dummy_wgrad_bytes` with fused accumulation,
    :func:`separate_wgrad_bytes` without; none under ZeRO-3 (its unsharded gradients are
    counted as such)."""
    return dummy_wgrad_bytes(model, plan) + separate_wgrad_bytes(model, plan)
