"""torchtitan's model flavours (``[model] name`` and ``flavor``) as vtrain models.

Sources: torchtitan 0.3.0 (PyPI wheel ``torchtitan-0.3.0-py3-none-any.whl``, the current
release), ``torchtitan/models/<model>/__init__.py``: the tables ``llama3_configs``,
``qwen3_configs``, ``deepseekv3_configs``, ``gptoss_configs`` and ``kimi_k2_5_configs``
(folder ``kimi_k2_7``, ``ModelSpec.name`` "kimi_k2_5"), each flavour a function that builds the
model's layer configs; torchtitan 0.2.2 for the flavours it names that 0.3.0 dropped (llama2 is
older still). A flavour whose shape is a preset's maps to the preset
(:data:`core.plan.presets.MODEL_PRESETS`, its own sources); the others are built here from the
flavour function's arguments. The vocabulary is the flavour's ``vocab_size`` (the tokenizer's,
unpadded); the sequence length is the job's (``training.seq_len``), so the one written here
(2048, torchtitan's default ``seq_len``) is a placeholder.

What torchtitan's modules hold, read against vtrain's fields: ``make_gqa_config`` (QKV and
output projections without bias, ``head_dim`` default ``dim // n_heads``), Qwen3's ``qk_norm``
(RMSNorm over one head, for queries and keys: ``qk_layernorm``), ``compute_ffn_hidden_dim``
(:func:`ffn_hidden_dim`), ``enable_weight_tying`` (``tied_embeddings``), DeepSeek's
``make_mla_attention_config`` (``q_lora_rank`` 0: one ``wq``, no ``q_norm``; ``kv_norm``
always: vtrain's MLA ``qk_layernorm`` normalizes the latents it has), ``build_mla_moe_layers``
(the first ``n_dense_layers`` dense with ``dense_hidden_dim``, then MoE layers with
``num_shared_experts`` shared experts as one MLP of ``moe_hidden_dim * num_shared_experts``),
``make_router_config`` (a gate without bias; the load-balancing ``expert_bias_E`` is a
buffer). The router's score function (softmax or sigmoid), ``route_norm`` and ``route_scale``
change no parameter or GEMM: the simulator times the router's element-wise pass the same way
for both.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.plan.model_config import GPT_SHAPE_FIELDS, ModelConfig, model_from_fields
from core.plan.presets import LLAMA_FAMILY, MODEL_PRESETS

__all__ = ["FLAVOURS", "REFUSED_MODELS", "REFUSED_FLAVOURS", "FLAVOUR_NOTES", "ffn_hidden_dim"]

_SEQ = 2048  # a placeholder: the importer sets the job's training.seq_len


def ffn_hidden_dim(dim: int, multiple_of: int = 1, ffn_dim_multiplier: float | None = None) -> int:
    """The SwiGLU hidden size of a Llama-style flavour as torchtitan computes it
    (``torchtitan/models/common/feed_forward.py`` ``compute_ffn_hidden_dim``; 0.2.2's
    ``FeedForward.__init__`` the same): ``int(2 * 4 * dim / 3)``, times
    ``ffn_dim_multiplier`` (truncated to an int), rounded up to a multiple of ``multiple_of``.
    Llama 3 8B (4096, 1024, 1.3): 14336."""
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _llama(name: str, layers: int, dim: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           **fields: Any) -> ModelConfig:
    """A Llama-family model (:data:`LLAMA_FAMILY`) of torchtitan's shape; ``fields`` sets
    further model fields (head size, tied embeddings, QK-norm, experts, MLA)."""
    shape = dict(zip(GPT_SHAPE_FIELDS, (name, layers, dim, heads, ffn, _SEQ, vocab)))
    return model_from_fields({**shape, "num_query_groups": kv_heads, "kv_channels": None,
                              **LLAMA_FAMILY, **fields})


def _llama3(name: str, layers: int, dim: int, heads: int, kv_heads: int | None,
            multiple_of: int, multiplier: float | None, vocab: int, tied: bool) -> ModelConfig:
    """``llama3/__init__.py``: ``_build_llama3_layers`` with ``compute_ffn_hidden_dim``; no
    ``n_kv_heads``: multi-head attention."""
    return _llama(name, layers, dim, heads, kv_heads or heads,
                  ffn_hidden_dim(dim, multiple_of, multiplier), vocab, tied_embeddings=tied)


def _qwen3(name: str, layers: int, dim: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           tied: bool, **moe: Any) -> ModelConfig:
    """``qwen3/__init__.py``: heads of ``head_dim`` 128 (every flavour), QK-norm;
    ``_build_qwen3_moe_layers`` (``moe``): every layer MoE, no shared experts."""
    return _llama(name, layers, dim, heads, kv_heads, ffn, vocab, kv_channels=128,
                  qk_layernorm=True, tied_embeddings=tied, **moe)


def _mla(name: str, layers: int, dim: int, heads: int, q_lora: int, dense_ffn: int,
         moe_ffn: int, experts: int, shared: int, top_k: int, dense_layers: int, vocab: int,
         groups: int | None = None, group_topk: int | None = None) -> ModelConfig:
    """``deepseek_v3/__init__.py`` ``build_mla_moe_layers`` (``kimi_k2_7`` builds with it too):
    MLA with ``kv_lora_rank`` 512, heads of 128 + 64 rotary channels and values of 128 (every
    flavour), ``q_lora_rank`` 0 meaning no query latent; untied; no multi-token prediction
    (``num_mtp_layers`` 0, ``model_registry``'s default)."""
    return _llama(name, layers, dim, heads, heads, dense_ffn, vocab,
                  multi_latent_attention=True, q_lora_rank=q_lora or None, kv_lora_rank=512,
                  qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128, qk_layernorm=True,
                  num_experts=experts, moe_top_k=top_k, moe_ffn_hidden_size=moe_ffn,
                  num_shared_experts=shared, moe_first_dense_layers=dense_layers,
                  moe_router_num_groups=groups, moe_router_group_topk=group_topk)


def _preset(preset: str, **changes: Any) -> ModelConfig:
    return dataclasses.replace(MODEL_PRESETS[preset], **changes)


#: ``(model name, flavor)`` -> the model torchtitan builds (source per group below).
FLAVOURS: dict[tuple[str, str], ModelConfig] = {
    # torchtitan 0.3.0 llama3/__init__.py llama3_configs: _debugmodel (no n_kv_heads,
    # multiple_of 256), _1b (multiple_of 1024, x1.5, tied), _3b (1024, x1.0, tied), _8b
    # (1024, x1.3), _70b (4096, x1.3), _405b (4096, x1.2); the last three are the presets'
    # shapes (their FFN 14336, 28672, 53248 by compute_ffn_hidden_dim)
    ("llama3", "debugmodel"): _llama3("Llama 3 debugmodel", 6, 256, 16, None, 256, None,
                                      2048, False),
    ("llama3", "1B"): _llama3("Llama 3.2 1B", 16, 2048, 32, 8, 1024, 1.5, 128256, True),
    ("llama3", "3B"): _llama3("Llama 3.2 3B", 28, 3072, 24, 8, 1024, 1.0, 128256, True),
    ("llama3", "8B"): MODEL_PRESETS["Llama 3 8B"],
    ("llama3", "70B"): MODEL_PRESETS["Llama 3 70B"],
    ("llama3", "405B"): MODEL_PRESETS["Llama 3.1 405B"],
    # torchtitan before 0.2 (models/llama2): the Llama 2 presets
    ("llama2", "7B"): MODEL_PRESETS["Llama 2 7B"],
    ("llama2", "70B"): MODEL_PRESETS["Llama 2 70B"],
    # torchtitan 0.3.0 qwen3/__init__.py qwen3_configs: dense _debugmodel (and
    # _debugmodel_non_fused_qkv, the same shape with separate wq and wkv: the simulator times
    # one fused QKV GEMM, as for torchtitan 0.2's separate wq, wk, wv), _0_6b ... _32b;
    # MoE _debugmodel_moe, _30b_a3b (the preset), _235b_a22b (0.3.0 gives MoE flavours no
    # dense hidden size: the FFN here is 0.2.2's hidden_dim, unused with every layer MoE)
    ("qwen3", "debugmodel"): _qwen3("Qwen3 debugmodel", 8, 256, 16, 8, 3072, 2048, True),
    ("qwen3", "debugmodel_non_fused_qkv"): _qwen3("Qwen3 debugmodel", 8, 256, 16, 8, 3072,
                                                  2048, True),
    ("qwen3", "0.6B"): _qwen3("Qwen3-0.6B", 28, 1024, 16, 8, 3072, 151936, True),
    ("qwen3", "1.7B"): _qwen3("Qwen3-1.7B", 28, 2048, 16, 8, 6144, 151936, True),
    ("qwen3", "4B"): _qwen3("Qwen3-4B", 36, 2560, 32, 8, 9728, 151936, True),
    ("qwen3", "8B"): _qwen3("Qwen3-8B", 36, 4096, 32, 8, 12288, 151936, False),
    ("qwen3", "14B"): _qwen3("Qwen3-14B", 40, 5120, 40, 8, 17408, 151936, False),
    ("qwen3", "32B"): _qwen3("Qwen3-32B", 64, 5120, 64, 8, 25600, 151936, False),
    ("qwen3", "debugmodel_moe"): _qwen3("Qwen3 debugmodel_moe", 8, 256, 16, 8, 3072, 2048,
                                        False, num_experts=64, moe_top_k=8,
                                        moe_ffn_hidden_size=768),
    ("qwen3", "30B-A3B"): MODEL_PRESETS["Qwen3-30B-A3B"],
    ("qwen3", "235B-A22B"): _qwen3("Qwen3-235B-A22B", 94, 4096, 64, 4, 12288, 151936, False,
                                   num_experts=128, moe_top_k=8, moe_ffn_hidden_size=1536),
    # torchtitan 0.3.0 deepseek_v3/__init__.py deepseekv3_configs: _debugmodel, _16b
    # (DeepSeek-V2-Lite's shape), _236b (DeepSeek-V2's: node-limited routing 8 groups, 3 per
    # token), _671b (the DeepSeek-V3 preset without its MTP layer)
    ("deepseek_v3", "debugmodel"): _mla("DeepSeek-V3 debugmodel", 6, 256, 16, 0, 1024, 256, 8,
                                        2, 3, 1, 2048),
    ("deepseek_v3", "16B"): _mla("DeepSeek-V2-Lite 16B", 27, 2048, 16, 0, 10944, 1408, 64, 2,
                                 6, 1, 102400),
    ("deepseek_v3", "236B"): _mla("DeepSeek-V2 236B", 60, 5120, 128, 1536, 12288, 1536, 160,
                                  2, 6, 1, 102400, groups=8, group_topk=3),
    ("deepseek_v3", "671B"): _preset("DeepSeek-V3", mtp_num_layers=0),
    # torchtitan 0.3.0 gpt_oss/__init__.py gptoss_configs: _debugmodel (dim 256, 4 layers, 8
    # experts; the attention's 64 heads of 64, 8 KV heads and the experts' 2880 as in 20b),
    # _20b, _120b (the presets)
    ("gpt_oss", "debugmodel"): _preset("GPT-OSS 20B", name="GPT-OSS debugmodel", num_layers=4,
                                       hidden_size=256, num_experts=8, vocab_size=2048),
    ("gpt_oss", "20b"): MODEL_PRESETS["GPT-OSS 20B"],
    ("gpt_oss", "120b"): MODEL_PRESETS["GPT-OSS 120B"],
    # torchtitan 0.3.0 kimi_k2_7/__init__.py kimi_k2_5_configs: _moonlight_16b_a3b, the
    # text-only flavour (_moonlight_16b_a3b_config with no vision encoder; sigmoid router)
    ("kimi_k2_5", "moonlight-16B-A3B"): _mla("Moonlight-16B-A3B", 27, 2048, 16, 0, 11264, 1408,
                                             64, 2, 6, 1, 163840),
}

#: Models torchtitan has that are refused by name, with what they would change.
REFUSED_MODELS: dict[str, str] = {
    "llama4": "chunked attention on three layers of four and MoE layers interleaved with dense "
              "ones (see the Hugging Face import's Llama 4 refusal)",
    "flux": "a diffusion transformer, not a decoder LLM",
    # torchtitan 0.3.0 qwen3_5/__init__.py: _build layers with full_attention_interval 4
    "qwen3_5": "Gated DeltaNet linear-attention layers (three of four; GatedDeltaNet) beside "
               "gated full attention, and a vision encoder",
    # torchtitan 0.3.0 muse_glimmer/__init__.py _build_muse_glimmer_attention
    "muse_glimmer": "an attention output gate (o_gate: a further (dim, n_heads * head_dim) "
                    "projection), layers without RoPE (iRoPE) and norms after attention and "
                    "the MLP",
}

#: Flavours refused by name (the model's other flavours import), with what they would change.
REFUSED_FLAVOURS: dict[tuple[str, str], str] = {
    # torchtitan 0.3.0 kimi_k2_7/__init__.py kimi_k2_5_configs
    **{("kimi_k2_5", f): "a vision encoder (MoonViT) feeding the decoder" for f in (
        "debugmodel", "Kimi-VL-A3B", "Kimi-K2.5")},
    # torchtitan 0.2.2 llama3_args, deepseekv3_args: attn_type flex or varlen with
    # attn_mask_type block_causal
    **{k: "attention within each document (attn_mask_type block_causal, FlexAttention or "
          "varlen FlashAttention): the simulator times causal attention over the whole "
          "sequence" for k in (
              ("llama3", "debugmodel_flex_attn"), ("llama3", "debugmodel_varlen_attn"),
              ("llama3", "8B_flex"), ("llama3", "8B_varlen"),
              ("deepseek_v3", "debugmodel_flex_attn"))},
}

_BLOCK_CAUSAL = ("torchtitan 0.2.x builds this flavour with FlexAttention and a block-causal "
                 "(per-document) mask; the simulator times causal attention over the whole "
                 "sequence")
#: Notes for flavours whose torchtitan build differs from the model imported or from the preset
#: it maps to (torchtitan 0.2.2 deepseekv3_args: attn_type flex, attn_mask_type block_causal;
#: 0.3.0 leaves the attention to the job).
FLAVOUR_NOTES: dict[tuple[str, str], tuple[str, ...]] = {
    ("deepseek_v3", "16B"): (_BLOCK_CAUSAL,),
    ("deepseek_v3", "236B"): (_BLOCK_CAUSAL,),
    ("deepseek_v3", "671B"): ("torchtitan's DeepSeek-V3 trains without multi-token prediction "
                              "(num_mtp_layers 0): the preset's MTP layer is left out",
                              _BLOCK_CAUSAL),
}
