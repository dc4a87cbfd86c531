"""Soft-capping component: ``c tanh(x / c)`` on the attention scores and on the output layer's
logits (Gemma 2: ``attn_logit_softcapping`` 50, ``final_logit_softcapping`` 30; Gemma Team
2024, arXiv:2408.00118, Sec. 2), its kernels and the activation memory its backward keeps.
A layer spec says whether a model caps (:attr:`core.model.spec.AttentionSpec.logit_softcap`,
:attr:`core.model.spec.LayerSpec.final_logit_softcap`); the cap's value changes no work.
"""

from __future__ import annotations

import dataclasses

from core.model.base import Kernel
from core.model.tokens import OpShape

__all__ = ["SOFTCAP_FLOPS", "softcapped_attention_kernels", "final_logit_softcap_kernels",
           "softcapped_scores_bytes", "final_logit_softcap_bytes"]

#: FLOPs per element of soft-capping ``c tanh(x / c)``: forward divide, tanh, multiply (3);
#: backward ``g (1 - (y/c)^2)``: divide, square, subtract, multiply (4).
SOFTCAP_FLOPS = (3, 4)


def softcapped_attention_kernels(kernels: list[Kernel], e: int) -> list[Kernel]:
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


def final_logit_softcap_kernels(op: str, kernels: list[Kernel], sh: OpShape, V: int
                                ) -> list[Kernel]:
    """``kernels`` of the output layer (``output_fwd``, ``output_bwd``) with the soft-capped
    logits: an elementwise kernel over the rank's ``(b s, V/t)`` logits after the logits GEMM
    (read, write) and, in the backward, one before the logits' input-gradient GEMM (read the
    gradient and the capped logits, write). ``V`` is the padded vocabulary."""
    cells = float(sh.T * (V // sh.t))
    f_fwd, f_bwd = SOFTCAP_FLOPS
    if op == "output_fwd":
        kernels.insert(2, Kernel("final_logit_softcap", f_fwd * cells, 2.0 * sh.e * cells))
    elif op == "output_bwd":
        at = next(i for i, k in enumerate(kernels) if k.name == "logits_dgrad")
        kernels.insert(at, Kernel("final_logit_softcap_bwd", f_bwd * cells, 3.0 * sh.e * cells))
    return kernels


def softcapped_scores_bytes(b: int, s: int, heads_per_rank: int) -> float:
    """Bytes (16-bit) of the capped scores the unfused attention's cap keeps for its backward in
    one layer, ``2 b s^2 a/t``."""
    return 2.0 * b * s * s * heads_per_rank


def final_logit_softcap_bytes(tokens: int, V: int, t: int, e: int) -> float:
    """Bytes the capped output logits keep for the backward per micro-batch whose loss awaits
    it: the ``tanh``'s output over the rank's ``(b s, V/t)`` logits in the logits' dtype (``e``
    bytes each). The cap is ``logits / c``, ``tanh``, ``* c`` (``transformers``
    ``Gemma2ForCausalLM.forward``); the scalings keep nothing, ``tanh`` keeps its output (its
    gradient is ``1 - y^2``, PyTorch's ``tanh_backward`` reads the result), and the loss's fp32
    copy of the capped logits is the uncapped model's (:func:`core.model.memory.stage_memory_arrays`)."""
    return tokens * V / t * e
