"""The ``dense`` family: decoders as Megatron-LM / Megatron-Core build them.

GPT at the defaults of the model's family fields (learned positions, LayerNorm, GeLU MLP,
biases, tied word embedding, full multi-head attention, unfused attention); Llama-style models
with them set (grouped-query attention, SwiGLU, RMSNorm, RoPE, no biases, untied output layer,
FlashAttention); mixture-of-experts layers (:mod:`core.model.moe`), multi-head latent
attention (:mod:`core.model.mla`), multi-token prediction (:mod:`core.model.mtp`), sliding
windows and attention sinks (GPT-OSS). Megatron-Core's GPT layer with no component of its own
(:class:`core.model.spec.ModelFamily`'s defaults); its formulas are the dense layer's
(:mod:`core.model.layer`).
"""

from __future__ import annotations

from core.model.spec import ModelFamily, register_family

__all__ = ["DENSE"]

#: The dense family.
DENSE = register_family(ModelFamily("dense"))
