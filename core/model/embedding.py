"""Embedding scale component: the word embedding's output multiplied by ``sqrt(h)`` (Gemma:
``GemmaModel`` scales ``inputs_embeds`` by ``hidden_size**0.5``), one elementwise kernel over
the ``(b, s, h)`` embedding in each pass. A layer spec says whether a model scales
(:attr:`core.model.spec.LayerSpec.embedding_scale`); the scale has no parameters.
"""

from __future__ import annotations

from core.model.base import Kernel
from core.model.tokens import OpShape

__all__ = ["embedding_scale_kernels"]


def embedding_scale_kernels(op: str, kernels: list[Kernel], sh: OpShape) -> list[Kernel]:
    """``kernels`` of the embedding (``embedding_fwd``, ``embedding_bwd``) with the scale: a
    multiply over the ``(b s, h)`` embedding (one FLOP per element, read and write) after the
    lookup (backward: before the embedding's gradient). Other ops: ``kernels`` unchanged."""
    if op not in ("embedding_fwd", "embedding_bwd"):
        return kernels
    name = "embedding_scale" + ("_bwd" if op == "embedding_bwd" else "")
    kernels.insert(1, Kernel(name, float(sh.T * sh.h), 2.0 * sh.act))
    return kernels
