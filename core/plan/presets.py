"""Model families and presets: the field values of the GPT and Llama families
(:data:`GPT_FAMILY`, :data:`LLAMA_FAMILY`) and the published models the editor and the CLI
offer (:data:`MODEL_PRESETS`), each with its source.

A new preset or model family goes here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.plan.model_config import GPT_SHAPE_FIELDS, ModelConfig, model_from_fields

__all__ = ["GPT_FAMILY", "LLAMA_FAMILY", "MODEL_PRESETS", "preset_name", "unknown_preset"]


#: Megatron-LM's GPT values of every model field but the shape (:data:`GPT_SHAPE_FIELDS`): what
#: a reader of a format that describes GPT models only (the vTrain authors' JSON and CSVs, job
#: traces' shapes, a first-release session) gives the fields that format cannot express.
GPT_FAMILY: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                              if f.name not in GPT_SHAPE_FIELDS}


#: Llama's values of every model field but the shape, query groups and head size (Touvron et
#: al. 2023; Meta Llama 3 model card; the ``transformers`` Llama code, which Mistral, Mixtral,
#: Qwen2/3 and DeepSeek descend from): SwiGLU, RMSNorm, RoPE, no linear biases, untied output
#: layer, FlashAttention, no QK-norm, no dropout (Megatron-Bridge's Llama, Qwen and DeepSeek
#: bridges set ``hidden_dropout`` and ``attention_dropout`` 0); no experts, latent attention, window or sinks (their
#: sizes inert, Megatron's defaults). The presets and ``vtrain import hf`` start from it and
#: state what a model changes, so no field takes GPT's default.
LLAMA_FAMILY: dict[str, Any] = {
    "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope",
    "tied_embeddings": False, "add_bias_linear": False, "add_qkv_bias": False,
    "add_proj_bias": False, "add_mlp_bias": False, "add_output_bias": False,
    "qk_layernorm": False, "attention_kernel": "flash", "num_experts": None, "moe_top_k": 2,
    "moe_ffn_hidden_size": None, "num_shared_experts": 0, "moe_layer_frequency": 1,
    "moe_first_dense_layers": 0, "moe_router_num_groups": None, "moe_router_group_topk": None,
    "multi_latent_attention": False, "q_lora_rank": None, "kv_lora_rank": 512, "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "mtp_num_layers": 0, "window_size": None,
    "window_attn_skip_freq": None, "softmax_type": "vanilla", "activation_func_clamp_value": None,
    "glu_linear_offset": 0.0, "hidden_dropout": 0.0, "attention_dropout": 0.0}


def _shape(name: str, layers: int, hidden: int, heads: int, ffn: int | None, seq: int,
           vocab: int) -> dict[str, Any]:
    return dict(zip(GPT_SHAPE_FIELDS, (name, layers, hidden, heads, ffn, seq, vocab)))


def _gpt(name: str, layers: int, hidden: int, heads: int, seq: int, vocab: int) -> ModelConfig:
    """A GPT model of Megatron-LM (:data:`GPT_FAMILY`; the MLP 4h)."""
    return model_from_fields({**_shape(name, layers, hidden, heads, None, seq, vocab),
                              **GPT_FAMILY})


def _llama(name: str, layers: int, hidden: int, heads: int, groups: int, ffn: int, seq: int,
           vocab: int, **family: Any) -> ModelConfig:
    """A Llama-family model (:data:`LLAMA_FAMILY`) with ``groups`` query groups (GQA);
    ``family`` sets further model fields (experts, head size, QK-norm)."""
    return model_from_fields({**_shape(name, layers, hidden, heads, ffn, seq, vocab),
                              "num_query_groups": groups, "kv_channels": None, **LLAMA_FAMILY,
                              **family})


def _gpt_oss(name: str, layers: int, experts: int) -> ModelConfig:
    """A GPT-OSS model (OpenAI 2025; Megatron-Bridge's ``GPTOSSProvider``): Llama-style
    (GQA, RMSNorm, RoPE with YaRN scaling, untied, FlashAttention) with heads of 64 channels,
    biases in every linear layer, attention sinks (``softmax_type`` learnable), a 128-token
    sliding window alternating with full attention (``--window-attn-skip-freq 2``), a gated MLP
    clamped at 7 with linear offset 1, and ``experts`` experts of 2880, top-4, in every layer."""
    return _llama(name, layers, 2880, 64, 8, 2880, 4096, 201088, add_bias_linear=True,
                  kv_channels=64, num_experts=experts, moe_top_k=4, moe_ffn_hidden_size=2880,
                  window_size=128, window_attn_skip_freq=2, softmax_type="learnable",
                  activation_func_clamp_value=7.0, glu_linear_offset=1.0)


#: Published model shapes. Sources: GPT-3 (Brown et al. 2020, Table 2.1),
#: MT-NLG (Smith et al. 2022, Sec. 3.1), Megatron-LM 1T scaling table
#: (Narayanan et al. 2021, Table 1); Llama 2 (Touvron et al. 2023, Table 1 and the Hugging
#: Face configs meta-llama/Llama-2-7b-hf, -70b-hf), Llama 3 and 3.1 (the Hugging Face configs
#: meta-llama/Meta-Llama-3-8B, -70B, Llama-3.1-8B, -70B, -405B; Dubey et al. 2024, "The Llama 3
#: Herd of Models", Table 3: 8B, 70B and 405B of 32/80/126 layers, h 4096/8192/16384, FFN
#: 14336/28672/53248, 32/64/128 heads, 8 KV heads; pre-trained at 8,192 tokens, Sec. 3.4.1
#: (after a first 252M tokens at 4,096), the length these presets train at, then extended to
#: 128K, Sec. 3.4.2. Llama 3.1 8B and 70B have Llama 3's shapes: their configs differ in
#: RoPE's frequency scaling for the 128K context, rope_scaling "llama3", and
#: max_position_embeddings 131072, which change the angles, not the work); Mixtral 8x7B
#: (the Hugging Face config mistralai/Mixtral-8x7B-v0.1; Jiang et al. 2024, "Mixtral of Experts",
#: Sec. 2: 8 experts, top-2, pre-trained at a 32k context; 46.7 B parameters, 12.9 B active);
#: Qwen3-30B-A3B (the Hugging Face config Qwen/Qwen3-30B-A3B: 48 layers, h 2048, 32 heads of
#: 128 channels, 4 KV heads, QK-norm, 128 experts of 768, top-8, untied, vocabulary 151936;
#: Qwen3 Technical Report, Yang et al. 2025, Sec. 3: pre-trained at 4,096 tokens in its
#: general stages; 30.5 B parameters, 3.3 B active); Qwen3-235B-A22B (the Hugging Face config
#: Qwen/Qwen3-235B-A22B: 94 layers, h 4096, 64 heads of 128 channels, 4 KV heads, QK-norm,
#: 128 experts of 1536, top-8, untied, vocabulary 151936; the same report: 235 B parameters,
#: 22 B active; as Megatron-Bridge's qwen3_235b_a22b recipes, at 4,096 tokens); GPT-OSS 120B and 20B (the Hugging Face
#: configs openai/gpt-oss-120b and -20b: 36 / 24 layers, h 2880, 64 heads of 64 channels, 8 KV
#: heads, 128 / 32 experts of 2880, top-4, every layer MoE, untied, vocabulary 201088; a
#: 128-token sliding window on every other layer starting with the first, attention sinks,
#: biases in attention, router and experts, the gated MLP clamped at 7 with a linear offset of
#: 1; pre-trained at initial_context_length 4096, as Megatron-Bridge's GPT-OSS recipes; OpenAI's
#: gpt-oss model card, Table 1: 116.83 B parameters, 5.13 B active; 20.91 B, 3.61 B);
#: DeepSeek-V3 (the Hugging Face config
#: deepseek-ai/DeepSeek-V3: 61 layers, h 7168, 128 heads, multi-head latent attention with
#: q_lora 1536, kv_lora 512, heads of 128 + 64 rotary channels and values of 128, first 3
#: layers dense with ffn 18432, then 256 routed experts of 2048 and 1 shared, top-8, untied,
#: vocabulary 129280; DeepSeek-V3 Technical Report, 2024, Sec. 4.2: pre-trained at 4K tokens
#: with one multi-token prediction layer, "MTP depth D = 1"; 671 B parameters, 37 B active,
#: without the MTP module: 682.6 B with it, its embedding and output head shared).
MODEL_PRESETS: dict[str, ModelConfig] = {
    p.name: p
    for p in (
        _gpt("GPT-3 1.3B", 24, 2048, 16, 2048, 50257),
        _gpt("GPT-3 2.7B", 32, 2560, 32, 2048, 50257),
        _gpt("GPT-3 6.7B", 32, 4096, 32, 2048, 50257),
        _gpt("GPT-3 13B", 40, 5120, 40, 2048, 50257),
        _gpt("GPT-3 175B", 96, 12288, 96, 2048, 50257),
        _gpt("MT-NLG 530B", 105, 20480, 128, 2048, 50257),
        _gpt("Megatron 1T", 128, 25600, 160, 2048, 51200),
        _llama("Llama 2 7B", 32, 4096, 32, 32, 11008, 4096, 32000),
        _llama("Llama 2 70B", 80, 8192, 64, 8, 28672, 4096, 32000),
        _llama("Llama 3 8B", 32, 4096, 32, 8, 14336, 8192, 128256),
        _llama("Llama 3 70B", 80, 8192, 64, 8, 28672, 8192, 128256),
        _llama("Llama 3.1 8B", 32, 4096, 32, 8, 14336, 8192, 128256),
        _llama("Llama 3.1 70B", 80, 8192, 64, 8, 28672, 8192, 128256),
        _llama("Llama 3.1 405B", 126, 16384, 128, 8, 53248, 8192, 128256),
        _llama("Mixtral 8x7B", 32, 4096, 32, 8, 14336, 32768, 32000, num_experts=8, moe_top_k=2),
        _llama("Qwen3-30B-A3B", 48, 2048, 32, 4, 6144, 4096, 151936, kv_channels=128,
               qk_layernorm=True, num_experts=128, moe_top_k=8, moe_ffn_hidden_size=768),
        _llama("Qwen3-235B-A22B", 94, 4096, 64, 4, 12288, 4096, 151936, kv_channels=128,
               qk_layernorm=True, num_experts=128, moe_top_k=8, moe_ffn_hidden_size=1536),
        _llama("DeepSeek-V3", 61, 7168, 128, 128, 18432, 4096, 129280, multi_latent_attention=True,
               q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
               v_head_dim=128, qk_layernorm=True, num_experts=256, moe_top_k=8,
               moe_ffn_hidden_size=2048, num_shared_experts=1, moe_first_dense_layers=3,
               mtp_num_layers=1, moe_router_num_groups=8, moe_router_group_topk=4),
        *(_gpt_oss(name, layers, experts) for name, layers, experts in (
            ("GPT-OSS 120B", 36, 128), ("GPT-OSS 20B", 24, 32))),
    )
}


def preset_name(text: str) -> str | None:
    """The key of :data:`MODEL_PRESETS` that ``text`` names, case, spacing and hyphens ignored
    (``"llama 3  8b"`` is ``"Llama 3 8B"``, ``"qwen3 30b a3b"`` is ``"Qwen3-30B-A3B"``; no two
    presets differ in these alone), or None."""
    return {_key(n): n for n in MODEL_PRESETS}.get(_key(text))


def _key(text: str) -> str:
    """``text`` lower-cased, hyphens as spaces, runs of spaces as one."""
    return " ".join(text.replace("-", " ").split()).lower()


def unknown_preset(text: object) -> str:
    """The message refusing ``text`` as a preset name: the closest preset names first where
    some are close (:func:`difflib.get_close_matches`, case and spacing ignored; ``"Llama 3.2
    70B"`` is closest to ``"Llama 3.1 70B"``), then every preset."""
    import difflib
    names = {_key(n): n for n in MODEL_PRESETS}
    close = (difflib.get_close_matches(_key(text), list(names), n=2, cutoff=0.8)
             if isinstance(text, str) else [])
    hint = (" (closest: " + ", ".join(repr(names[c]) for c in close) + ")") if close else ""
    return f"{text!r} is not a preset{hint}; the presets are " + ", ".join(MODEL_PRESETS)
