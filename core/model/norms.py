"""Norm placement component: the norms after a sublayer (post-norms, Gemma 2/3's
``post_attention_layernorm`` and ``post_feedforward_layernorm``), their parameters, kernels and
activation memory. The pre-norms (before attention and MLP, every layer) are the dense layer's
(:mod:`core.model.layer`); where a layer's norms sit is its :class:`core.model.spec.NormSpec`.
"""

from __future__ import annotations

from core.model.base import Kernel
from core.model.tokens import OpShape

__all__ = ["NORM_FLOPS", "post_norm_parameters", "post_norm_kernels", "post_norm_activation_bytes"]

#: FLOPs per element of an RMSNorm ``x / rms(x) * (1 + w)``: forward square, sum, scale and
#: weight (4); backward twice that (8).
NORM_FLOPS = (4, 8)


def post_norm_parameters(kind: str, post_norms: int, h: int) -> int:
    """Parameters of a layer's ``post_norms`` post-norms of kind ``kind`` (``2h`` a LayerNorm,
    ``h`` an RMSNorm), replicated over the tensor-parallel group."""
    norm = 2 * h if kind == "layernorm" else h
    return post_norms * norm


def _norm(name: str, elements: float, e: int, backward: bool) -> Kernel:
    """A norm kernel over ``elements``: forward read and write, backward read the input and the
    gradient, write the gradient and the weight's partial sums (the dense norms' bytes)."""
    return Kernel(name, NORM_FLOPS[backward] * elements, (4.0 if backward else 2.0) * e * elements)


def post_norm_kernels(op: str, kernels: list[Kernel], sh: OpShape, post_attention: bool,
                      post_mlp: bool) -> list[Kernel]:
    """``kernels`` of ``op`` with its sublayer's post-norm: after the attention's projection
    (``attention_fwd``: at the end) and before the MLP's residual add (``mlp_fwd``); in the
    backward (``attention_bwd``, ``mlp_bwd``) right after the residual add's backward. The norm
    runs on the rank's tokens (``s/t`` under sequence parallelism, ``sh.tok / sh.e``
    elements); its kernel is named after the norm kind (``post_attn_rmsnorm``). Other ops and
    a sublayer without a post-norm: ``kernels`` unchanged."""
    sub = op.split("_")[0]
    if op not in ("attention_fwd", "mlp_fwd", "attention_bwd", "mlp_bwd") \
            or not (post_attention if sub == "attention" else post_mlp):
        return kernels
    rows = sh.tok / sh.e  # the elements a norm runs on (the rank's s/t tokens with sp)
    name = "post_attn_" if sub == "attention" else "post_mlp_"
    if op.endswith("_fwd"):
        at = len(kernels) if op == "attention_fwd" else len(kernels) - 1  # before the residual add
        kernels.insert(at, _norm(name + sh.norm, rows, sh.e, False))
    else:
        kernels.insert(1, _norm(name + sh.norm + "_bwd", rows, sh.e, True))
    return kernels


def post_norm_activation_bytes(post_norms: int, s: int, b: int, h: int, t: int, sp: bool) -> float:
    """Elements (in 16-bit bytes) the post-norms keep for their backward in one layer: each its
    input, ``2 sbh`` bytes, ``/t`` under sequence parallelism (as the pre-norms', Korthikanti et
    al. 2022, Table 2)."""
    return post_norms * 2 * s * b * h / (t if sp else 1)
