"""The ``gemma2`` and ``gemma3`` families: Gemma 2 and Gemma 3's decoder layer.

Sources: the Gemma 2 report (Gemma Team 2024, arXiv:2408.00118, Sec. 2 and Table 1) and the
Gemma 3 report (arXiv:2503.19786, Sec. 2), and the ``transformers`` modelling code
(``Gemma2DecoderLayer``, ``Gemma3DecoderLayer``, ``Gemma2Attention``). A Gemma layer is
Megatron-Core's GPT layer with:

* RMSNorm before and after both attention and MLP (``input_layernorm``,
  ``post_attention_layernorm``, ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``):
  the two post-norms (:mod:`core.model.norms`);
* the embedding's output scaled by ``sqrt(h)`` (:mod:`core.model.embedding`);
* Gemma 2 only: soft-capping ``c tanh(x / c)`` of the attention scores (``c`` = 50) and of
  the output logits (``c`` = 30) (:mod:`core.model.softcap`); Gemma 3 drops it for QK-norm
  (``model.qk_layernorm``).

The rest is the model's fields, as the Hugging Face import sets them: a GeGLU MLP
(``model.activation`` geglu, :mod:`core.model.mlp`), sliding-window layers alternating with
global ones (``model.window_size`` and ``window_attn_skip_freq``: 2 for Gemma 2, one global
of 6 for Gemma 3). Mixture of experts, latent attention and multi-token prediction are not
Gemma's: refused.
"""

from __future__ import annotations

from core.model.spec import ModelFamily, register_family

__all__ = ["GEMMA2", "GEMMA3"]

#: Gemma 2: post-norms, scaled embedding, soft-capped attention scores and output logits.
GEMMA2 = register_family(ModelFamily(
    "gemma2", post_attention_norm=True, post_mlp_norm=True, attention_softcap=True,
    final_logit_softcap=True, embedding_scale=True, dense_only=True))
#: Gemma 3: Gemma 2's layer without soft-capping.
GEMMA3 = register_family(ModelFamily(
    "gemma3", post_attention_norm=True, post_mlp_norm=True, embedding_scale=True,
    dense_only=True))
