"""Hugging Face import of the families people train (issue: "Hugging Face families refused"):
Phi-3/3.5/4, OLMo 2, Qwen2.5 (small and tied), Qwen3-Coder, Nemotron with ``kv_channels``,
transformers-5 configs (``rope_parameters``); Llama 4 and Nemotron-H refused by the field that
has what the simulator does not model (Gemma 2/3, imported, in tests/test_gemma.py).

The configs are written from the published ``config.json`` of each checkpoint (the shape
fields exactly; a few fields that change nothing left out), each with the parameter counts its
model card or paper publishes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.model import model_math as mm
from core.plan.fields import ConfigError
from core.io.hf_import import IGNORED, REFUSED, USED, session_from_hf_config

ROOT = Path(__file__).resolve().parents[1]

# microsoft/Phi-3-mini-4k-instruct; Phi-3 technical report (arXiv 2404.14219): "3.8B parameters"
PHI3_MINI_4K = {
    "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0,
    "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.2",
    "use_cache": True, "vocab_size": 32064}
# microsoft/Phi-3.5-mini-instruct: the Phi-3-mini shape, 128k context by LongRoPE from 4096
# (model card: "3.8B parameters")
PHI35_MINI = {**PHI3_MINI_4K, "_name_or_path": "Phi-3.5-mini-instruct",
              "max_position_embeddings": 131072, "sliding_window": 262144,
              "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48,
                               "short_factor": [1.0] * 48}}
# microsoft/Phi-3-medium-4k-instruct (Phi-3 technical report: "14B parameters")
PHI3_MEDIUM = {**PHI3_MINI_4K, "_name_or_path": "Phi-3-medium-4k-instruct", "hidden_size": 5120,
               "intermediate_size": 17920, "num_attention_heads": 40, "num_hidden_layers": 40,
               "num_key_value_heads": 10}
# microsoft/phi-4 (Phi-4 technical report, arXiv 2412.08905: "a 14-billion parameter language
# model"; the Phi3 architecture with a 100,352-token vocabulary)
PHI4 = {**PHI3_MINI_4K, "_name_or_path": "phi-4", "bos_token_id": 100257, "eos_token_id": 100265,
        "pad_token_id": 100349, "hidden_size": 5120, "intermediate_size": 17920,
        "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 10,
        "max_position_embeddings": 16384, "original_max_position_embeddings": 16384,
        "rope_theta": 250000, "sliding_window": None, "vocab_size": 100352,
        "transformers_version": "4.47.0"}
# allenai/OLMo-2-1124-7B (OLMo 2 paper, arXiv 2501.00656; Hub: 7.3B parameters)
OLMO2_7B = {
    "_name_or_path": "OLMo-2-1124-7B", "architectures": ["Olmo2ForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "olmo2", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
    "torch_dtype": "float32", "transformers_version": "4.47.0.dev0", "use_cache": True,
    "vocab_size": 100352}
# allenai/OLMo-2-1124-13B (Hub: 13.7B parameters)
OLMO2_13B = {**OLMO2_7B, "_name_or_path": "OLMo-2-1124-13B", "hidden_size": 5120,
             "intermediate_size": 13824, "num_attention_heads": 40, "num_hidden_layers": 40,
             "num_key_value_heads": 40}
# Qwen/Qwen2.5-0.5B (model card: "Number of Parameters: 0.49B; Number of Paramaters
# (Non-Embedding): 0.36B"; tied embeddings)
QWEN25_05B = {
    "_name_or_path": "Qwen2.5-0.5B", "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
    "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False,
    "use_mrope": False, "vocab_size": 151936}
# Qwen/Qwen2.5-7B (model card: 7.61B, non-embedding 6.53B; untied)
QWEN25_7B = {**QWEN25_05B, "_name_or_path": "Qwen2.5-7B", "hidden_size": 3584,
             "intermediate_size": 18944, "max_position_embeddings": 131072,
             "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28,
             "num_key_value_heads": 4, "sliding_window": 131072, "tie_word_embeddings": False,
             "vocab_size": 152064}
# Qwen/Qwen3-Coder-480B-A35B-Instruct (model card: "480B parameters with 35B active")
QWEN3_CODER_480B = {
    "_name_or_path": "Qwen3-Coder-480B-A35B-Instruct", "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0, "decoder_sparse_step": 1,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 6144,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 262144,
    "max_window_layers": 62, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 2560, "norm_topk_prob": True, "num_attention_heads": 96,
    "num_experts": 160, "num_experts_per_tok": 8, "num_hidden_layers": 62,
    "num_key_value_heads": 8, "output_router_logits": False, "qkv_bias": False,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000000,
    "router_aux_loss_coef": 0.0, "shared_expert_intermediate_size": 0, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_qk_norm": True, "use_sliding_window": False, "vocab_size": 151936}
# nvidia/Minitron-8B-Base (NemotronForCausalLM; pruned from Nemotron-4 15B: 48 heads of 128
# channels on h = 4096, so the head size is given; "kv_channels" as NeMo's export writes it)
MINITRON_8B = {
    "architectures": ["NemotronForCausalLM"], "bos_token_id": 2, "eos_token_id": 3,
    "hidden_act": "relu2", "hidden_size": 4096, "initializer_range": 0.0134,
    "intermediate_size": 16384, "kv_channels": 128, "max_position_embeddings": 4096,
    "model_type": "nemotron", "norm_eps": 1e-05, "num_attention_heads": 48,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "partial_rotary_factor": 0.5,
    "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.32.0.dev0", "use_cache": True, "vocab_size": 256000}
# meta-llama/Llama-3.1-8B as transformers 5 saves it: rope_parameters instead of rope_theta and
# rope_scaling, dtype instead of torch_dtype (the shape of Llama 3 8B)
LLAMA31_8B_TF5 = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "transformers_version": "5.0.0", "use_cache": True,
    "vocab_size": 128256}
# google/gemma-2-9b (Gemma2ForCausalLM), google/gemma-3-1b-pt (Gemma3ForCausalLM),
# meta-llama/Llama-4-Scout-17B-16E (Llama4ForConditionalGeneration), nvidia/Nemotron-H-8B-Base-8K
GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
             "final_logit_softcapping": 30.0, "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584,
             "intermediate_size": 14336, "num_attention_heads": 16, "num_hidden_layers": 42,
             "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "sliding_window": 4096,
             "vocab_size": 256000, "max_position_embeddings": 8192}
GEMMA3_1B = {"architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": None,
             "final_logit_softcapping": None, "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
             "intermediate_size": 6912, "num_attention_heads": 4, "num_hidden_layers": 26,
             "num_key_value_heads": 1, "sliding_window": 512, "sliding_window_pattern": 6,
             "vocab_size": 262144, "max_position_embeddings": 32768}
LLAMA4_SCOUT = {"architectures": ["Llama4ForConditionalGeneration"],
                "text_config": {"model_type": "llama4_text", "attention_chunk_size": 8192,
                                "hidden_size": 5120,
                                "num_local_experts": 16, "interleave_moe_layer_step": 1}}
NEMOTRON_H_8B = {"architectures": ["NemotronHForCausalLM"], "hidden_size": 4096,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
                                            "M-M-", "num_hidden_layers": 52}


def _import(cfg, **kw):
    return session_from_hf_config(cfg, "config.json", **kw)


# --------------------------------------------------------------------------- supported families

@pytest.mark.parametrize("cfg,total,published_b,digits", [
    # Phi-3's 32,064-token vocabulary is padded to 32,128 as Megatron pads it (a multiple of
    # 128): 2 * 64 * h more than the checkpoint's 3,821,079,552 and 13,960,238,080
    (PHI3_MINI_4K, 3_821_472_768, 3.8, 1),
    (PHI35_MINI, 3_821_472_768, 3.8, 1),
    (PHI3_MEDIUM, 13_960_893_440, 14.0, 1),
    (PHI4, 14_659_507_200, 15.0, 0),     # "14-billion" (truncated); 14.66 B
    (OLMO2_7B, 7_298_363_392, 7.3, 1),   # per-head QK-norm weights: 253,952 fewer than OLMo's
    (OLMO2_13B, 13_715_799_040, 13.7, 1),
    (QWEN25_05B, 494_032_768, 0.49, 2),
    (QWEN25_7B, 7_615_616_512, 7.62, 2),  # the card rounds 7.6156 B down: "7.61B"
])
def test_dense_families_match_their_published_sizes(cfg, total, published_b, digits):
    """Total parameters by the model math, to the published figure's last digit."""
    imp = _import(cfg)
    n = mm.num_parameters(imp.session.model)
    assert n == total
    assert round(n / 1e9, digits) == published_b


def test_phi3_is_llama_with_fused_projections_and_a_window():
    """Phi-3's fused qkv_proj and gate_up_proj are a layout: the model is Llama's (SwiGLU,
    RMSNorm, RoPE, no biases); Phi-3-mini-4k's sliding_window 2047 windows every layer at its
    4,096 tokens (transformers passes it to every layer); Phi-3.5's 262,144 is longer than the
    sequence: inactive, listed."""
    m = _import(PHI3_MINI_4K).session.model
    assert (m.activation, m.normalization, m.add_bias_linear, m.qk_layernorm) == \
        ("swiglu", "rmsnorm", False, False)
    assert (m.window_size, m.window_attn_skip_freq) == (2047, None)
    imp = _import(PHI35_MINI, seq_length=4096)
    assert imp.session.model.window_size is None and "sliding_window" in imp.ignored
    assert {"embd_pdrop", "resid_pdrop", "rope_scaling"} <= set(imp.ignored)
    # the 128k context was extended from original_max_position_embeddings 4096: said so
    assert any("4,096" in n for n in _import(PHI35_MINI).notes)


def test_olmo2_qk_norm_is_qk_layernorm_and_the_approximation_is_listed():
    imp = _import(OLMO2_7B)
    m = imp.session.model
    assert m.qk_layernorm and m.num_query_groups is None and not m.tied_embeddings
    # what the per-head norm approximates is listed, not silent
    assert "q_norm, k_norm" in imp.ignored
    # by hand: OLMo's whole-projection norms have a*d + g*d weights per layer, ours 2d
    L, h = 32, 4096
    assert mm.num_parameters(m) + L * (2 * h - 2 * 128) == 7_298_617_344


def test_qwen25_small_is_tied_and_its_switched_off_fields_are_listed():
    imp = _import(QWEN25_05B)
    m = imp.session.model
    assert m.tied_embeddings and m.add_qkv_bias and m.window_size is None
    assert {"use_mrope", "use_sliding_window", "max_window_layers"} <= set(imp.ignored)
    # the card's non-embedding count: 0.36 B
    assert round((mm.num_parameters(m) - 151936 * 896) / 1e9, 2) == 0.36
    with pytest.raises(ConfigError) as err:
        _import({**QWEN25_05B, "use_sliding_window": True})
    assert err.value.errors[0].field == "config.json: use_sliding_window"


def test_qwen3_coder_480b_total_and_active():
    """480 B total, 35 B active (the card): active without the input embedding, the published
    convention for it, with the embedding-inclusive count beside it."""
    m = _import(QWEN3_CODER_480B).session.model
    assert m.qk_layernorm and not m.add_qkv_bias and (m.num_experts, m.moe_top_k) == (160, 8)
    total, active = mm.num_parameters(m), mm.num_active_parameters(m)
    with_embedding = mm.num_active_parameters_with_embedding(m)
    assert round(total / 1e9) == 480 and round(active / 1e9) == 35
    assert with_embedding - active == 151936 * 6144


@pytest.mark.parametrize("key,value", [("qkv_bias", True), ("use_qk_norm", False)])
def test_qwen3_coder_fields_that_disagree_with_the_architecture_are_refused(key, value):
    with pytest.raises(ConfigError) as err:
        _import({**QWEN3_CODER_480B, key: value})
    assert err.value.errors[0].field == f"config.json: {key}"


def test_qwen2_qkv_bias_agrees():
    assert _import({**QWEN25_05B, "qkv_bias": True}).session.model.add_qkv_bias
    with pytest.raises(ConfigError):
        _import({**QWEN25_05B, "qkv_bias": False})


def test_nemotron_kv_channels_is_the_head_size():
    m = _import(MINITRON_8B).session.model
    assert (m.kv_channels, m.activation, m.normalization) == (128, "squared_relu", "layernorm")
    # head_dim and kv_channels together must agree
    assert _import({**MINITRON_8B, "head_dim": 128}).session.model.kv_channels == 128
    with pytest.raises(ConfigError) as err:
        _import({**MINITRON_8B, "head_dim": 64})
    assert err.value.errors[0].field == "config.json: kv_channels"
    # without either, 4096 / 48 heads is no head size: refused naming hidden_size
    no_head = {k: v for k, v in MINITRON_8B.items() if k != "kv_channels"}
    with pytest.raises(ConfigError) as err:
        _import(no_head)
    assert err.value.errors[0].field == "config.json: hidden_size"


def test_transformers5_rope_parameters_change_nothing():
    """A transformers-5 config (rope_parameters, dtype) imports as the same model as the
    transformers-4 one, with the pre-training length note read from rope_parameters."""
    from core.plan.presets import MODEL_PRESETS
    imp = _import(LLAMA31_8B_TF5, seq_length=8192)
    preset = MODEL_PRESETS["Llama 3 8B"]
    assert imp.session.model == type(preset)(**{**preset.__dict__, "name": imp.session.model.name})
    assert "rope_parameters" in imp.ignored
    notes = _import(LLAMA31_8B_TF5).notes
    assert any("rope_parameters.original_max_position_embeddings" in n for n in notes)


# --------------------------------------------------------------------------- refused by name

@pytest.mark.parametrize("cfg,field", [
    # multimodal: refused by its structure, the nested text model's refusal in the message
    # (tests/test_hf_multimodal.py)
    (LLAMA4_SCOUT, "text_config"),
    (NEMOTRON_H_8B, "hybrid_override_pattern"),
])
def test_families_waiting_for_the_layer_spec_are_refused_by_field(cfg, field):
    with pytest.raises(ConfigError) as err:
        _import(cfg)
    assert [e.field for e in err.value.errors] == [f"config.json: {field}"]
    assert cfg["architectures"][0] in str(err.value)


@pytest.mark.parametrize("key,value", [("attn_logit_softcapping", 50.0),
                                       ("final_logit_softcapping", 30.0),
                                       ("attention_chunk_size", 8192)])
def test_refused_fields_on_a_supported_architecture(key, value):
    """A field of the REFUSED table that is switched on is refused by name; switched off
    (null / false) it is accepted and listed."""
    with pytest.raises(ConfigError) as err:
        _import({**OLMO2_7B, key: value})
    assert err.value.errors[0].field == f"config.json: {key}"
    off = REFUSED[key][1][0] if REFUSED[key][1] else None
    assert key in _import({**OLMO2_7B, key: off}).ignored


def test_the_field_tables_do_not_overlap():
    assert not (set(USED) & set(IGNORED)) and not (set(USED) & set(REFUSED))
    assert not (set(IGNORED) & set(REFUSED))


def test_cli_imports_phi4(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PHI4))
    out = tmp_path / "phi4.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert out.exists() and "14.66 B parameters" in r.stdout
    path.write_text(json.dumps(NEMOTRON_H_8B))
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(tmp_path / "never.json")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "hybrid_override_pattern" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "never.json").exists()
    # every model folder holds a config.json: the message names the path given
    assert f"{path}: hybrid_override_pattern" in r.stderr


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 10**12), ("hidden_size", 10**12),
                                       ("max_position_embeddings", 2**40)])
def test_sizes_beyond_the_bounds_are_refused_by_field(key, value):
    # 10^12 layers ran out of memory building per-layer lists before any check ("out of
    # memory: the inputs are too large", naming no field); the Megatron import refuses it by
    # the session's bound (at most 10,000 layers), so does this one
    with pytest.raises(ConfigError) as err:
        session_from_hf_config({**PHI3_MINI_4K, key: value}, "config.json")
    e = err.value.errors[0]
    assert e.field.endswith(key) and "at most" in e.message


def test_cli_refuses_a_trillion_layers_by_field(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**PHI3_MINI_4K, "num_hidden_layers": 10**12}))
    out = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(cfg), "--out",
                          str(tmp_path / "s.json")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert "num_hidden_layers" in out.stderr and "out of memory" not in out.stderr


# microsoft/Phi-4-mini-instruct config.json (model card: "3.8B parameters"; tied embeddings, a
# 200,064-token vocabulary, GQA 24/8, RoPE on 0.75 of each head); its keys full_attn_mod,
# interpolate_factor and lm_head_bias were refused as unknown
PHI4_MINI = {
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999, "full_attn_mod": 1,
    "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "interpolate_factor": 1, "lm_head_bias": False,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "pad_token_id": 199999,
    "partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.0] * 48, "short_factor": [1.0] * 48, "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.45.0", "use_cache": True,
    "vocab_size": 200064}


def test_phi4_mini_imports_and_its_own_keys_are_refused_when_on():
    """Phi-4-mini: by hand, the tied 200,064 x 3072 embedding (a multiple of 128: not padded)
    and per layer Q and O 3072 x 3072, K and V 3072 x 1024, SwiGLU 3 x 3072 x 8192, two RMSNorms;
    the final norm: 3.84 B, the card's 3.8B. Its keys that transformers' Phi3 code does not read
    are accepted at the published values only, named otherwise."""
    imp = _import(PHI4_MINI, seq_length=4096)
    m = imp.session.model
    layer = 2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072
    assert mm.num_parameters(m) == 200064 * 3072 + 32 * layer + 3072 == 3_836_021_760
    assert (m.tied_embeddings, m.num_query_groups, m.window_size) == (True, 8, None)
    assert {"full_attn_mod", "interpolate_factor", "lm_head_bias"} <= set(imp.ignored)
    for bad in ({"full_attn_mod": 2}, {"interpolate_factor": 4}, {"lm_head_bias": True}):
        with pytest.raises(ConfigError) as err:
            _import({**PHI4_MINI, **bad})
        assert err.value.errors[0].field == f"config.json: {next(iter(bad))}"
