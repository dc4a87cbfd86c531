"""MLP component: dense (GeLU, squared ReLU) or gated (SwiGLU, GeGLU) MLP; its parameters.
"""

from __future__ import annotations

from core.plan.config import ModelConfig

__all__ = ["GATED_ACTIVATIONS", "is_gated", "mlp_parameters"]


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
