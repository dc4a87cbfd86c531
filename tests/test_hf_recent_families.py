"""Hugging Face import of the 2024-2026 families (task: break the importer with their
config.json files): the ones it models import with their published parameter counts, the ones
it does not are refused naming the config key that carries what is not modelled (Qwen3-Next's
Gated DeltaNet layers, DeepSeek-V3.2's sparse attention, SmolLM3's RoPE-less layers, Falcon-H1's
and the other Mamba hybrids' state-space layers), also when the file is relabelled as an
architecture we read. ``layer_types`` is read only where transformers' modelling code reads it
(Gemma 2 and 3, GPT-OSS); elsewhere it must agree with what the architecture's code does.

The configs are written from the published ``config.json`` of each checkpoint (the shape fields
exactly; a few keys that change nothing left out). Counts: the model cards (Qwen3: "Number of
Parameters" and "(Non-Embedding)"; Mixtral 8x22B: Mistral AI's announcement, "141B parameters,
39B active") and the Hub's safetensors totals (Llama 3.2, Mistral 7B, Mistral-Nemo).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.io.hf_import import REFUSED_ARCHITECTURES, session_from_hf_config
from core.model import model_math as mm
from core.plan.fields import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# Qwen/Qwen3-8B config.json (transformers 4.51)
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
# Qwen/Qwen3-0.6B, -4B (tied), -14B, -32B: the same keys, other shapes
QWEN3_06B = {**QWEN3_8B, "hidden_size": 1024, "intermediate_size": 3072, "max_window_layers": 28,
             "num_attention_heads": 16, "num_hidden_layers": 28, "tie_word_embeddings": True}
QWEN3_4B = {**QWEN3_8B, "hidden_size": 2560, "intermediate_size": 9728,
            "tie_word_embeddings": True}
QWEN3_14B = {**QWEN3_8B, "hidden_size": 5120, "intermediate_size": 17408,
             "num_attention_heads": 40, "num_hidden_layers": 40, "max_window_layers": 40}
QWEN3_32B = {**QWEN3_8B, "hidden_size": 5120, "intermediate_size": 25600,
             "num_attention_heads": 64, "num_hidden_layers": 64, "max_window_layers": 64}
# Qwen/Qwen3-235B-A22B config.json
QWEN3_235B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 94,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 1536,
    "norm_topk_prob": True, "num_attention_heads": 64, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4,
    "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
# meta-llama/Llama-3.2-1B config.json (tied embeddings, heads of 64)
LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256}
LLAMA32_3B = {**LLAMA32_1B, "head_dim": 128, "hidden_size": 3072, "num_attention_heads": 24,
              "num_hidden_layers": 28}
# mistralai/Mistral-7B-v0.1 (a 4,096-token window on every layer), Mistral-Nemo-Base-2407
# (no window, heads of 128 on h = 5120), Mixtral-8x22B-v0.1
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": True, "vocab_size": 32000}
MISTRAL_NEMO = {**MISTRAL_7B, "attention_dropout": 0.0, "head_dim": 128, "hidden_size": 5120,
                "max_position_embeddings": 1024000, "num_hidden_layers": 40,
                "rope_theta": 1000000.0, "sliding_window": None, "vocab_size": 131072}
MIXTRAL_8X22B = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 6144, "initializer_range": 0.02,
    "intermediate_size": 16384, "max_position_embeddings": 65536, "model_type": "mixtral",
    "num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 56,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0", "use_cache": True, "vocab_size": 32768}

# Qwen/Qwen3-Next-80B-A3B-Instruct config.json: Gated DeltaNet on three layers of four
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
    "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
    "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": True,
    "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
    "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
# deepseek-ai/DeepSeek-V3.2-Exp config.json: DeepSeek-V3's keys plus the indexer's
DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048, "initializer_range": 0.02,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v32", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "transformers_version": "4.44.2", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 129280}
# HuggingFaceTB/SmolLM3-3B config.json: RoPE off on every fourth layer (no_rope_layers 0)
SMOLLM3 = {
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": None, "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 65536,
    "max_window_layers": 28, "mlp_bias": False, "model_type": "smollm3",
    "no_rope_layer_interval": 4, "no_rope_layers": [1, 1, 1, 0] * 9,
    "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
    "pad_token_id": 128004, "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 5000000.0, "sliding_window": None, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.54.0.dev0", "use_cache": False,
    "use_sliding_window": False, "vocab_size": 128256}
# tiiuae/Falcon-H1 and the other state-space families (the keys that name their mixers)
FALCON_H1 = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1",
             "hidden_size": 3072, "mamba_d_state": 256, "mamba_n_heads": 24,
             "num_hidden_layers": 32}
JAMBA = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "attn_layer_period": 8,
         "expert_layer_period": 2, "num_hidden_layers": 32}
MAMBA2 = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "state_size": 128}
# meta-llama/Llama-4-Scout-17B-16E: the text config as a file of its own, then relabelled
LLAMA4_TEXT = {
    "architectures": ["Llama4ForCausalLM"], "attention_bias": False, "attention_chunk_size": 8192,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 1,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "max_position_embeddings": 10485760, "model_type": "llama4_text", "no_rope_layers": [],
    "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
    "num_key_value_heads": 8, "num_local_experts": 16, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "use_qk_norm": True,
    "vocab_size": 202048}


def _import(cfg, **kw):
    return session_from_hf_config(cfg, "config.json", **kw)


def _refused(cfg):
    with pytest.raises(ConfigError) as err:
        _import(cfg)
    assert len(err.value.errors) == 1
    return err.value.errors[0]


# --------------------------------------------------------------------------- modelled families

@pytest.mark.parametrize("cfg,total,card_total,card_non_embedding", [
    (QWEN3_06B, 596_049_920, 0.6, 0.44),    # Qwen/Qwen3-0.6B: "0.6B", "0.44B" (tied)
    (QWEN3_4B, 4_022_468_096, 4.0, 3.6),    # Qwen/Qwen3-4B: "4.0B", "3.6B" (tied)
    (QWEN3_14B, 14_768_307_200, 14.8, 13.2),  # Qwen/Qwen3-14B: "14.8B", "13.2B"
    (QWEN3_32B, 32_762_123_264, 32.8, 31.2),  # Qwen/Qwen3-32B: "32.8B", "31.2B"
])
def test_qwen3_dense_matches_its_model_cards(cfg, total, card_total, card_non_embedding):
    """Qwen3's QK-norm and heads of head_dim 128 (not h/a: 0.6B has 16 x 128 on h = 1024);
    the cards' non-embedding count leaves out the embedding and, untied, the output layer."""
    m = _import(cfg).session.model
    assert m.qk_layernorm and not m.add_qkv_bias and m.kv_channels in (None, 128)
    n = mm.num_parameters(m)
    assert n == total
    embeddings = (1 if m.tied_embeddings else 2) * 151936 * cfg["hidden_size"]
    digits = 2 if card_total < 1 else 1
    assert round(n / 1e9, digits) == card_total
    assert round((n - embeddings) / 1e9, digits) == card_non_embedding


def test_qwen3_235b_a22b_total_and_active():
    """Qwen/Qwen3-235B-A22B's card: 235B total, 22B activated, 234B non-embedding; 128 experts of
    1,536, 8 per token, QK-norm, no shared expert, every layer MoE."""
    imp = _import(QWEN3_235B)
    m = imp.session.model
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts) == \
        (128, 8, 1536, 0)
    assert m.qk_layernorm and m.moe_first_dense_layers == 0 and m.moe_layer_frequency == 1
    total = mm.num_parameters(m)
    assert total == 235_093_634_560
    assert round(mm.num_active_parameters_with_embedding(m) / 1e9) == 22
    assert round((total - 2 * 151936 * 4096) / 1e9) == 234
    assert "norm_topk_prob" in imp.ignored


@pytest.mark.parametrize("cfg,total", [
    (LLAMA32_1B, 1_235_814_400),    # Hub: 1.24B params (tied embeddings)
    (LLAMA32_3B, 3_212_749_824),    # Hub: 3.21B params
    (MISTRAL_7B, 7_241_732_096),    # Hub: 7.24B params
    (MISTRAL_NEMO, 12_247_782_400),  # Hub: 12.2B params (heads of 128 on h = 5120)
])
def test_llama_and_mistral_shapes_match_the_hub(cfg, total):
    assert mm.num_parameters(_import(cfg).session.model) == total


def test_mistral_window_set_and_null():
    """Mistral 7B v0.1's sliding_window 4096 windows every layer (transformers passes it to
    each layer's attention); Nemo's null has none; a Mistral file without the key takes
    MistralConfig's 4096 (noted)."""
    assert _import(MISTRAL_7B).session.model.window_size == 4096
    assert _import(MISTRAL_NEMO).session.model.window_size is None
    absent = {k: v for k, v in MISTRAL_NEMO.items() if k != "sliding_window"}
    imp = _import(absent)
    assert imp.session.model.window_size == 4096
    assert any("sliding_window" in n and "4096" in n for n in imp.notes)


def test_mixtral_8x22b_total_and_active():
    """Mistral AI's announcement: 141B parameters, 39B active (the input embedding counted, as
    for its "12.9B" of Mixtral 8x7B)."""
    m = _import(MIXTRAL_8X22B).session.model
    assert mm.num_parameters(m) == 140_630_071_296
    assert round(mm.num_active_parameters_with_embedding(m) / 1e9) == 39


# --------------------------------------------------------------------------- refused by name

@pytest.mark.parametrize("cfg,field,words", [
    (QWEN3_NEXT, "full_attention_interval", "Gated DeltaNet"),
    (DEEPSEEK_V32, "index_topk", "DeepSeek Sparse Attention"),
    (SMOLLM3, "no_rope_layers", "without rotary embeddings"),
    (FALCON_H1, "mamba_d_state", "Mamba-2 mixer beside the attention"),
    (JAMBA, "attn_layer_period", "Mamba layers"),
    (MAMBA2, "state_size", "no attention"),
])
def test_recent_families_are_refused_by_the_key_that_has_what_is_not_modelled(cfg, field,
                                                                              words):
    """Before, each was refused only as an architecture "not supported", naming no feature."""
    e = _refused(cfg)
    assert e.field == f"config.json: {field}"
    assert cfg["architectures"][0] in e.message and words in e.message
    assert REFUSED_ARCHITECTURES[cfg["architectures"][0]][0] == field


@pytest.mark.parametrize("cfg,field", [
    # relabelled as the architecture whose keys they share: the extra keys are not known
    ({**QWEN3_NEXT, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"},
     "full_attention_interval"),
    ({**DEEPSEEK_V32, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"},
     "index_head_dim"),
    ({**SMOLLM3, "architectures": ["LlamaForCausalLM"], "model_type": "llama"},
     "no_rope_layer_interval"),
    ({**LLAMA4_TEXT, "architectures": ["LlamaForCausalLM"], "model_type": "llama"},
     "num_local_experts"),
    # relabelled but model_type kept: transformers would build the other class
    ({**QWEN3_NEXT, "architectures": ["Qwen3MoeForCausalLM"]}, "full_attention_interval"),
    ({**DEEPSEEK_V32, "architectures": ["DeepseekV3ForCausalLM"]}, "index_head_dim"),
])
def test_relabelled_files_are_refused_not_read_as_the_label(cfg, field):
    assert _refused(cfg).field == f"config.json: {field}"


def test_llama4_text_config_is_refused_for_its_chunked_attention():
    e = _refused(LLAMA4_TEXT)
    assert e.field == "config.json: attention_chunk_size"
    assert "RoPE-less layers" in e.message and "interleave_moe_layer_step" in e.message


def test_cli_refuses_qwen3_next_by_its_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_NEXT))
    out = tmp_path / "never.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not out.exists()
    assert f"{path}: full_attention_interval" in r.stderr and "Gated DeltaNet" in r.stderr


# --------------------------------------------------------------------------- layer_types

def test_layer_types_naming_another_mixer_is_refused_for_it():
    """Qwen3-Next's layer_types (transformers 4.57 writes linear_attention / full_attention)
    on an architecture we read: named, not a generic 'must list ...'."""
    types = (["linear_attention"] * 3 + ["full_attention"]) * 9
    e = _refused({**QWEN3_8B, "layer_types": types})
    assert e.field == "config.json: layer_types"
    assert "'linear_attention' (layer 0)" in e.message and "linear attention" in e.message


@pytest.mark.parametrize("cfg,rule", [
    # Llama's attention has no window: layer_types cannot add one (it windowed those layers)
    ({**LLAMA32_1B, "sliding_window": 4096,
      "layer_types": ["sliding_attention", "full_attention"] * 8},
     "its modelling code has no sliding window"),
    # OLMo 3's pattern relabelled as OLMo 2, whose code has no window
    ({**LLAMA32_1B, "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
      "head_dim": None, "sliding_window": 4096,
      "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 4},
     "its modelling code has no sliding window"),
    # Qwen3Config nulls sliding_window unless use_sliding_window: every layer is full
    ({**QWEN3_8B, "sliding_window": 4096, "layer_types": ["sliding_attention"] * 36},
     "use_sliding_window is false"),
    # Mistral windows every layer whatever layer_types says
    ({**MISTRAL_7B, "layer_types": ["sliding_attention", "full_attention"] * 16},
     "windows every layer"),
])
def test_layer_types_where_the_code_does_not_read_it_must_agree(cfg, rule):
    e = _refused(cfg)
    assert e.field == "config.json: layer_types"
    assert f"{cfg['architectures'][0]} does not read layer_types" in e.message
    assert rule in e.message


def test_layer_types_that_agree_are_accepted():
    """transformers 4.56+ writes layer_types for Qwen3 (all full without use_sliding_window);
    a Mistral file listing every layer sliding is its own rule: both import unchanged."""
    qwen = _import({**QWEN3_8B, "layer_types": ["full_attention"] * 36}).session.model
    assert qwen == _import(QWEN3_8B).session.model
    mistral = _import({**MISTRAL_7B, "layer_types": ["sliding_attention"] * 32}).session.model
    assert (mistral.window_size, mistral.window_attn_skip_freq) == (4096, None)


def test_an_unread_window_says_why():
    """Llama's code has no sliding window: the note says so (it said "use_sliding_window is
    false", Qwen's switch, which Llama does not have)."""
    note = _import({**LLAMA32_1B, "sliding_window": 4096}).ignored["sliding_window"]
    assert note == "inactive (LlamaForCausalLM: its modelling code has no sliding window)"
    note = _import({**QWEN3_8B, "sliding_window": 4096}).ignored["sliding_window"]
    assert "use_sliding_window is false" in note
