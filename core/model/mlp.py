"""MLP component: dense (GeLU, squared ReLU) or gated (SwiGLU, GeGLU) MLP; its parameters.
"""

from __future__ import annotations

from core.model.base import Kernel, mem
from core.model.tokens import OpShape
from core.plan.model_config import ModelConfig

__all__ = ["GATED_ACTIVATIONS", "is_gated", "mlp_parameters", "mlp_kernels"]


#: Gated MLP activations (three ffn matrices; fc1 is ``2f`` wide, gate and up fused):
#: SwiGLU (Shazeer 2020; Llama) and GeGLU (tanh-approximated GeLU gate; Gemma).
GATED_ACTIVATIONS = ("swiglu", "geglu")


def is_gated(activation: str) -> bool:
    """Whether the MLP of ``activation`` is gated (:data:`GATED_ACTIVATIONS`)."""
    return activation in GATED_ACTIVATIONS


def mlp_parameters(model: ModelConfig, f: int) -> tuple[float, float]:
    """``(sharded over its tensor-parallel group, replicated)`` parameters of one MLP of hidden
    size ``f`` with the model's activation (fc1 ``h f``, ``2 h f`` gated; fc2 ``f h``; fc1's
    bias sharded, fc2's replicated with ``add_bias_linear``) and, for the layer's dense MLP, its
    pre-MLP norm (``2h`` LayerNorm, ``h`` RMSNorm) in the replicated part."""
    h = model.hidden_size
    fc1 = 2 * f if is_gated(model.activation) else f
    bias = model.add_bias_linear
    norm = 2 * h if model.normalization == "layernorm" else h
    return h * fc1 + f * h + (fc1 if bias else 0), norm + (h if bias else 0)


def mlp_kernels(op: str, sh: OpShape) -> list[Kernel]:
    """Kernels of one rank's dense MLP op (``mlp_fwd``, ``mlp_bwd``): the residual add of the
    attention, the pre-MLP norm, fc1 (``2f/t`` wide gated: gate and up fused, Megatron-Core), the
    activation (a gated one reads ``2f`` and writes ``f`` per token), fc2, the residual add (see
    :func:`core.model.layer.dense_op_kernels`)."""
    key, h, t, e, T = sh.key, sh.h, sh.t, sh.e, sh.T
    tok, norm, acc, linear, cast = sh.tok, sh.norm, sh.acc, sh.linear, sh.cast
    f = int(key["f"])
    gated = key.get("act") == "swiglu"
    fc1 = (2 if gated else 1) * f // t  # gate and up projections fused (Megatron-Core)
    inner = T * (f // t) * e
    if op == "mlp_fwd":
        return [
            mem("bias_dropout_add", 3.5 * tok),
            mem(norm, 2 * tok),
            *cast("fc1_input", T * h, True),
            linear("fc1", T, fc1, h),                         # (b*s, h) x (h, f/t or 2f/t)
            mem("bias_swiglu", 3 * inner) if gated else mem("bias_gelu", 2 * inner),
            *cast("fc2_input", T * (f // t)),
            linear("fc2", T, h, f // t),                      # (b*s, f/t) x (f/t, h)
            mem("bias_dropout_add", 3.5 * tok),
        ]
    return [
        mem("bias_dropout_add_bwd", 2 * tok),
        *cast("fc2_grad", T * h, True),
        linear("fc2_dgrad", T, f // t, h), linear("fc2_wgrad", f // t, h, T),
        mem("bias_swiglu_bwd", 5 * inner) if gated else mem("bias_gelu_bwd", 3 * inner),
        *cast("fc1_grad", T * fc1),
        linear("fc1_dgrad", T, h, fc1), linear("fc1_wgrad", fc1, h, T),
        mem("wgrad_accumulate", acc * (h * fc1 + h * f // t)),
        mem(f"{norm}_bwd", 4 * tok),
        mem("bias_dropout_add_bwd", 2 * tok),
    ]
