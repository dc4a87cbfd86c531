"""Hugging Face import of OLMo 3, Phi-3.5-MoE and Mistral 3 (before: each refused only as an
architecture "not supported").

* OLMo 3 (``Olmo3ForCausalLM``, transformers' ``models/olmo3``): OLMo 2's layer (post-norms, an
  RMSNorm over the whole Q and K projections) with a sliding window of ``sliding_window`` on the
  layers ``layer_types`` names, by default all but every 4th (``Olmo3Config``): the simulator
  models the window (``model.window_size``, ``window_attn_skip_freq`` 4), so it imports.
* Phi-3.5-MoE (``PhimoeForCausalLM``, ``models/phimoe``): Mixtral's experts (16 SwiGLU experts of
  ``intermediate_size``, top-2, a bias-free ``h x E`` gate) with ``nn.LayerNorm`` (weight and
  bias), biases on q/k/v/o_proj (``attention_bias``) and on ``lm_head`` (``lm_head_bias``) and the
  SparseMixer router, which always picks two experts. Every GEMM is modelled; the o_proj and
  lm_head biases (parameters, an add in a kernel that runs anyway, a column sum for the gradient)
  and SparseMixer's elementwise kernels are listed with the import.
* Mistral 3 (``Mistral3ForConditionalGeneration``: Mistral Small 3.1/3.2, Ministral 3): a Pixtral
  vision encoder and projector beside the language model: refused by ``vision_config`` (as Gemma
  3's multimodal model), the message saying how to import ``text_config`` alone.

Configs: the shape values of each transformers configuration class's defaults (transformers
5.25.0 wheel, the same in 4.57.1: ``Olmo3Config`` "Olmo3 7B style", checkpoint
allenai/Olmo-3-7B-Instruct; ``PhimoeConfig``, checkpoint microsoft/Phi-3.5-MoE-instruct;
``Mistral3Config``'s ``text_config`` defaults, checkpoint mistralai/Mistral-Small-3.1-24B-Instruct-
2503), with the Hub files' other keys (OLMo 3 7B's vocabulary of 100,278 and 65,536 positions
from 8,192 by YaRN; Phi-3.5-MoE's ``attention_bias``, ``lm_head_bias`` true, its remote-code
name ``PhiMoEForCausalLM``). Counts are closed forms over every weight of the modelling code,
checked against the published sizes (OLMo 3 7B: 7B; Phi-3.5-MoE: "16x3.8B ... 6.6B active
parameters", 41.9 B total; Mistral Small 3.1: 24B with its vision encoder).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.io.hf_import import REFUSED_ARCHITECTURES, session_from_hf_config
from core.model import model_math as mm
from core.model.attention import window_layer_mask
from core.plan.fields import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# allenai/Olmo-3-1025-7B config.json (transformers 4.57): Olmo3Config's shape defaults
OLMO3_7B = {
    "architectures": ["Olmo3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 11008,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8,
    "max_position_embeddings": 65536, "model_type": "olmo3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 100277,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"attention_factor": 1.2079441541679836, "beta_fast": 32, "beta_slow": 1,
                     "factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "yarn"},
    "rope_theta": 500000, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.57.0", "use_cache": True,
    "vocab_size": 100278}
# microsoft/Phi-3.5-MoE-instruct config.json: PhimoeConfig's shape defaults, the Hub's own
# class name (auto_map: its modeling_phimoe.PhiMoEForCausalLM) and biases
PHI35_MOE = {
    "architectures": ["PhiMoEForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_phimoe.PhiMoEConfig",
                 "AutoModelForCausalLM": "modeling_phimoe.PhiMoEForCausalLM"},
    "bos_token_id": 1, "eos_token_id": 32000, "hidden_act": "silu", "hidden_dropout": 0.0,
    "hidden_size": 4096, "initializer_range": 0.02, "input_jitter_noise": 0.01,
    "intermediate_size": 6400, "lm_head_bias": True, "max_position_embeddings": 131072,
    "model_type": "phimoe", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 16,
    "original_max_position_embeddings": 4096, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 64,
                                            "short_factor": [1.0] * 64, "long_mscale": 1.2432,
                                            "short_mscale": 1.2432,
                                            "original_max_position_embeddings": 4096},
    "rope_theta": 10000.0, "router_aux_loss_coef": 0.0, "router_jitter_noise": 0.01,
    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.3", "use_cache": True, "vocab_size": 32064}
# mistralai/Mistral-Small-3.1-24B-Instruct-2503: Mistral3Config's text_config and vision_config
# defaults (the text model a MistralConfig, the vision tower Pixtral's)
MISTRAL_SMALL_31_TEXT = {
    "attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
    "sliding_window": None, "use_cache": True, "vocab_size": 131072}
MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10,
    "model_type": "mistral3", "multimodal_projector_bias": False, "projector_hidden_act": "gelu",
    "spatial_merge_size": 2, "text_config": MISTRAL_SMALL_31_TEXT,
    "vision_config": {"head_dim": 64, "hidden_act": "gelu", "hidden_size": 1024,
                      "image_size": 1540, "intermediate_size": 4096, "model_type": "pixtral",
                      "num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14},
    "vision_feature_layer": -1}


def _import(cfg, **kw):
    return session_from_hf_config(cfg, "config.json", **kw)


def _refused(cfg):
    with pytest.raises(ConfigError) as err:
        _import(cfg)
    assert len(err.value.errors) == 1
    return err.value.errors[0]


def _padded(v: int) -> int:
    """The vocabulary as the model math pads it (a multiple of 128, Megatron's
    --make-vocab-size-divisible-by at t = 1)."""
    return -(-v // 128) * 128


def _cli(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "s.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out)], capture_output=True, text=True, cwd=ROOT)
    return r, path, out


# --------------------------------------------------------------------------- OLMo 3

def _olmo3_hf_parameters(L, h, a, g, d, f, V):
    """Every weight of transformers' Olmo3ForCausalLM (modeling_olmo3.py): per layer q/k/v/o_proj
    (no bias), q_norm over a*d and k_norm over g*d channels, gate/up/down_proj, the two post
    norms; embed_tokens, the final norm, an untied lm_head."""
    layer = h * a * d + 2 * h * g * d + a * d * h + a * d + g * d + 3 * h * f + 2 * h
    return L * layer + 2 * V * h + h


def test_olmo3_7b_imports_with_its_window_pattern_and_counts():
    imp = _import(OLMO3_7B)
    m = imp.session.model
    assert imp.architecture == "Olmo3ForCausalLM"
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
            m.ffn_hidden_size, m.vocab_size, m.seq_length) == \
        (32, 4096, 32, None, 11008, 100278, 65536)
    assert m.qk_layernorm and not m.tied_embeddings and m.activation == "swiglu"
    # three windowed layers of four, the 4th full: Megatron-Core's --window-attn-skip-freq 4
    assert (m.window_size, m.window_attn_skip_freq) == (4096, 4)
    assert list(window_layer_mask(m)) == [t == "sliding_attention" for t in OLMO3_7B["layer_types"]]
    hf = _olmo3_hf_parameters(32, 4096, 32, 32, 128, 11008, 100278)
    assert hf == 7_298_011_136 and round(hf / 1e9) == 7
    # the model math: per-head QK-norm weights (2d, not a*d + g*d) and the padded vocabulary
    per_head = 32 * (32 * 128 + 32 * 128 - 2 * 128)
    assert mm.num_parameters(m) == hf - per_head + 2 * 4096 * (_padded(100278) - 100278)
    assert "q_norm, k_norm" in imp.ignored and "OLMo 3" in imp.ignored["q_norm, k_norm"]
    assert any("8,192" in n for n in imp.notes)  # pre-trained at 8192, extended by YaRN


def test_olmo3_without_layer_types_windows_all_but_every_4th_layer():
    """Olmo3Config's default layer_types: sliding unless (i + 1) % 4 == 0."""
    cfg = {k: v for k, v in OLMO3_7B.items() if k != "layer_types"}
    m = _import(cfg).session.model
    assert (m.window_size, m.window_attn_skip_freq) == (4096, 4)
    # without sliding_window, Olmo3Config's default 4096, noted
    cfg.pop("sliding_window")
    imp = _import(cfg)
    assert imp.session.model.window_size == 4096
    assert "sliding_window: absent, Olmo3Config's default 4096" in imp.notes


def test_olmo3_window_not_shorter_than_the_sequence_changes_nothing():
    imp = _import(OLMO3_7B, seq_length=4096)
    assert imp.session.model.window_size is None
    assert imp.ignored["sliding_window"] == "4096: not shorter than the sequence length"
    # at 65,536 tokens the 24 windowed layers' attention core is the band of 4,096 + 1 keys per
    # query (W - W(W-1)/(2s) on average over s), the 8 full ones the causal half
    s, W = 65536, 4097
    band = (W - W * (W - 1) / (2 * s)) / s
    assert mm.causal_core_fraction(_import(OLMO3_7B).session.model) == \
        pytest.approx((8 * 0.5 + 24 * band) / 32, rel=1e-12)
    full = _import({**OLMO3_7B, "layer_types": ["full_attention"] * 32}).session.model
    assert full.window_size is None and mm.causal_core_fraction(full) == 0.5


def test_olmo3_as_transformers5_saves_it_keeps_the_pre_training_length_note():
    """transformers 5 writes OLMo 3's RoPE per layer type (Olmo3Config.convert_rope_params_to_dict:
    rope_scaling goes to rope_parameters.full_attention): the same model, the same note."""
    cfg = {k: v for k, v in OLMO3_7B.items() if k not in ("rope_scaling", "rope_theta",
                                                           "torch_dtype")}
    cfg.update(dtype="bfloat16", transformers_version="5.0.0", rope_parameters={
        "full_attention": {**OLMO3_7B["rope_scaling"], "rope_theta": 500000},
        "sliding_attention": {"rope_type": "default", "rope_theta": 500000}})
    imp = _import(cfg)
    assert imp.session.model == _import(OLMO3_7B).session.model
    assert any("rope_parameters.full_attention.original_max_position_embeddings" in n
               and "8,192" in n for n in imp.notes)


def test_olmo3_layer_types_megatron_cannot_give_are_refused_by_name():
    types = ["full_attention"] + ["sliding_attention"] * 31  # one full layer, the first
    e = _refused({**OLMO3_7B, "layer_types": types})
    assert e.field == "config.json: layer_types" and "--window-attn-skip-freq" in e.message


# --------------------------------------------------------------------------- Phi-3.5-MoE

def _phimoe_hf_parameters(L, h, a, g, d, f, E, V, bias):
    """Every weight of transformers' PhimoeForCausalLM (modeling_phimoe.py): per layer q/k/v/o_proj
    (with biases when attention_bias), E experts of gate_up_proj (2f x h) and down_proj (h x f),
    the router h x E (no bias), two nn.LayerNorm (weight and bias); embed_tokens, the final
    LayerNorm, an untied lm_head (with a bias when lm_head_bias)."""
    attn = h * a * d + 2 * h * g * d + a * d * h + (a * d + 2 * g * d + h if bias else 0)
    layer = attn + E * 3 * h * f + h * E + 2 * 2 * h
    return L * layer + 2 * V * h + (V if bias else 0) + 2 * h


def test_phi35_moe_imports_as_mixtral_layout_with_layernorm():
    imp = _import(PHI35_MOE)
    m = imp.session.model
    assert imp.architecture == "PhimoeForCausalLM"
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
            m.ffn_hidden_size, m.num_experts, m.moe_top_k, m.vocab_size) == \
        (32, 4096, 32, 8, 6400, 16, 2, 32064)
    assert m.moe_ffn_hidden_size in (None, 6400) and not m.num_shared_experts
    assert (m.normalization, m.add_qkv_bias, m.add_bias_linear, m.qk_layernorm) == \
        ("layernorm", True, False, False)
    assert (m.add_proj_bias, m.add_output_bias, m.add_mlp_bias) == (True, True, False)
    # PhimoeModel windows every layer by sliding_window: 131,072 is not shorter than the sequence
    assert m.window_size is None
    assert imp.ignored["sliding_window"] == "131072: not shorter than the sequence length"
    short = _import({**PHI35_MOE, "sliding_window": 2048}, seq_length=4096).session.model
    assert (short.window_size, short.window_attn_skip_freq) == (2048, None)
    hf = _phimoe_hf_parameters(32, 4096, 32, 8, 128, 6400, 16, 32064, bias=True)
    assert hf == 41_873_153_344 and round(hf / 1e9, 1) == 41.9
    # every weight and bias counted (o_proj's h per layer: model.add_proj_bias; lm_head's V:
    # model.add_output_bias); the vocabulary padded for the embedding, lm_head and its bias
    pad = (2 * 4096 + 1) * (_padded(32064) - 32064)
    assert mm.num_parameters(m) == hf + pad
    # active: two experts of sixteen ("6.6B active parameters"), without the input embedding
    active_hf = hf - 32 * 14 * 3 * 4096 * 6400
    assert round(active_hf / 1e9, 1) == 6.6
    assert mm.num_active_parameters(m) == active_hf + pad - _padded(32064) * 4096
    assert {"sparsemixer", "input_jitter_noise"} <= set(imp.ignored)
    assert not {"o_proj bias", "lm_head_bias"} & set(imp.ignored)  # modelled, not listed
    assert "LayerNorm" in imp.ignored["rms_norm_eps"]  # the eps of nn.LayerNorm here
    assert any("PhiMoEForCausalLM" in n and "PhimoeForCausalLM" in n for n in imp.notes)


def test_phimoe_with_the_class_defaults_has_no_biases():
    """PhimoeConfig's defaults (attention_bias, lm_head_bias false) under transformers' own
    class name: no QKV bias, nothing listed about biases, every weight counted."""
    cfg = {k: v for k, v in PHI35_MOE.items()
           if k not in ("attention_bias", "lm_head_bias", "auto_map")}
    imp = _import({**cfg, "architectures": ["PhimoeForCausalLM"]})
    m = imp.session.model
    assert not (m.add_qkv_bias or m.add_proj_bias or m.add_output_bias)
    assert not {"o_proj bias", "lm_head_bias"} & set(imp.ignored)
    hf = _phimoe_hf_parameters(32, 4096, 32, 8, 128, 6400, 16, 32064, bias=False)
    assert mm.num_parameters(m) == hf + 2 * 4096 * (_padded(32064) - 32064)


@pytest.mark.parametrize("key,value,words", [
    # SparseMixer picks two experts whatever the config says
    ("num_experts_per_tok", 4, "exactly 2 experts"),
    # Qwen-MoE's expert width is not Phimoe's (its experts are intermediate_size wide)
    ("moe_intermediate_size", 1024, "not a field of PhimoeForCausalLM"),
    ("lm_head_bias", "yes", "must be true or false"),
    ("attention_bias", 1, "must be true or false"),
    ("mlp_bias", True, "this bias is not modelled for PhimoeForCausalLM (PhimoeForCausalLM's "
     "modelling code does not read it"),
])
def test_phimoe_fields_it_does_not_model_are_refused_by_name(key, value, words):
    e = _refused({**PHI35_MOE, key: value})
    assert e.field == f"config.json: {key}" and words in e.message


def test_lm_head_bias_stays_refused_where_transformers_does_not_read_it():
    """Phi-4-mini's lm_head_bias (Phi3ForCausalLM, whose code has no output bias): refused when
    on, as before."""
    from tests.test_hf_families import PHI3_MINI_4K
    e = _refused({**PHI3_MINI_4K, "lm_head_bias": True})
    assert e.field == "config.json: lm_head_bias"


def test_cli_imports_phi35_moe(tmp_path):
    r, _, out = _cli(tmp_path, PHI35_MOE)
    assert r.returncode == 0, r.stderr
    assert out.exists() and json.loads(out.read_text())["model"]["num_experts"] == 16


# --------------------------------------------------------------------------- Mistral 3

def test_mistral3_is_refused_by_its_vision_config_and_says_how_to_plan_the_text_model():
    e = _refused(MISTRAL_SMALL_31)
    assert e.field == "config.json: vision_config"
    assert "Mistral3ForConditionalGeneration" in e.message and "text_config" in e.message
    assert "MistralForCausalLM" in e.message
    # by its structure, as every multimodal config (tests/test_hf_multimodal.py), not by name
    assert "Mistral3ForConditionalGeneration" not in REFUSED_ARCHITECTURES


def test_mistral3_text_config_alone_imports_as_mistral():
    """What the message says: text_config saved as its own config.json with architectures
    MistralForCausalLM is Mistral Small 3.1's language model (23.57 B of the 24 B; the rest is
    the vision encoder and projector)."""
    imp = _import({**MISTRAL_SMALL_31_TEXT, "architectures": ["MistralForCausalLM"]})
    m = imp.session.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
            m.kv_channels, m.ffn_hidden_size, m.window_size) == (40, 5120, 32, 8, 128, 32768, None)
    L, h, a, g, d, f, V = 40, 5120, 32, 8, 128, 32768, 131072
    hf = L * (2 * h * a * d + 2 * h * g * d + 3 * h * f + 2 * h) + 2 * V * h + h
    assert mm.num_parameters(m) == hf == 23_572_403_200
    assert "tie_word_embeddings: absent, MistralConfig's default false" in imp.notes


def test_cli_refuses_mistral3_by_field_with_exit_2(tmp_path):
    r, path, out = _cli(tmp_path, MISTRAL_SMALL_31)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not out.exists()
    assert f"{path}: vision_config" in r.stderr and "text_config" in r.stderr
