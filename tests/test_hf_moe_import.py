"""Mixture-of-experts Hugging Face configs into sessions (issue 11): Mixtral, Qwen2-MoE (Qwen1.5-MoE)
and Qwen3-MoE map to the MoE model fields; DeepSeek-V3 is refused naming what is not modelled
(GPT-OSS: tests/test_gpt_oss.py). The configs are written from the published config.json files of
the checkpoints named.

The import's fields are checked, not the simulation (the MoE model math is another module's).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.plan.fields import ConfigError
from core.io.hf_import import session_from_hf_config
from core.io.hf_moe import moe_layer_fields
from core.io.session import load_any
from tests.conftest import ROOT

from tests.test_llama import MIXTRAL_8X7B  # mistralai/Mixtral-8x7B-v0.1
# Qwen/Qwen1.5-MoE-A2.7B (Qwen2MoeForCausalLM): 60 experts of 1408, top-4, one shared expert of
# 5632 = 4 x 1408
QWEN15_MOE_A27B = {"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
                   "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
                   "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632,
                   "max_position_embeddings": 8192, "max_window_layers": 21,
                   "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24,
                   "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                   "sliding_window": 32768, "tie_word_embeddings": False,
                   "torch_dtype": "bfloat16", "transformers_version": "4.39.0.dev0",
                   "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
                   "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
                   "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4,
                   "num_experts": 60, "norm_topk_prob": False, "output_router_logits": False,
                   "router_aux_loss_coef": 0.001}
# Qwen/Qwen3-30B-A3B: 48 layers, h 2048, 32 heads of 128 (not h/a = 64), 4 KV heads, 128 experts
# of 768, top-8, QK-norm, untied
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
                 "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
                 "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
                 "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
                 "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
                 "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
                 "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
                 "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False,
                 "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
                 "router_aux_loss_coef": 0.001, "sliding_window": None,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                 "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
                 "vocab_size": 151936}


def _model(cfg, **kw):
    return session_from_hf_config(cfg, check_rules=False, **kw).session.model


def test_mixtral_fields():
    m = _model(MIXTRAL_8X7B)
    assert (m.num_experts, m.moe_top_k, m.ffn_hidden_size, m.moe_ffn_hidden_size) == (
        8, 2, 14336, None)  # experts intermediate_size wide: moe_ffn empty means ffn
    assert (m.num_shared_experts, m.moe_layer_frequency, m.moe_first_dense_layers) == (0, 1, 0)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
            m.vocab_size, m.kv_channels) == (32, 4096, 32, 8, 32000, None)
    assert (m.activation, m.normalization, m.position_embedding, m.tied_embeddings,
            m.add_bias_linear, m.attention_kernel) == ("swiglu", "rmsnorm", "rope", False, False,
                                                       "flash")
    assert m.is_moe and not m.multi_latent_attention


def test_qwen15_moe_fields_shared_experts():
    imp = session_from_hf_config(QWEN15_MOE_A27B, check_rules=False)
    m = imp.session.model
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.ffn_hidden_size) == (
        60, 4, 1408, 5632)
    assert m.num_shared_experts == 5632 // 1408 == 4
    assert m.add_qkv_bias and not m.qk_layernorm and m.num_query_groups is None
    assert "shared_expert_gate" in imp.ignored and "norm_topk_prob" in imp.ignored
    # a shared expert that is not a whole number of experts is refused by name
    with pytest.raises(ConfigError) as err:
        _model({**QWEN15_MOE_A27B, "shared_expert_intermediate_size": 5000})
    assert err.value.errors[0].field == "config.json: shared_expert_intermediate_size"
    assert "not a multiple of moe_intermediate_size=1408" in str(err.value)


def test_qwen3_30b_a3b_fields():
    imp = session_from_hf_config(QWEN3_30B_A3B, check_rules=False)
    m = imp.session.model
    assert imp.architecture == "Qwen3MoeForCausalLM"
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts) == (
        128, 8, 768, 0)
    assert (m.kv_channels, m.head_dim, m.num_query_groups, m.qk_layernorm) == (128, 128, 4, True)
    assert (m.num_layers, m.hidden_size, m.vocab_size, m.tied_embeddings) == (
        48, 2048, 151936, False)
    assert (m.moe_layer_frequency, m.moe_first_dense_layers) == (1, 0)
    assert "norm_topk_prob" in imp.ignored
    # the default plan divides the experts' MLP too (t=4: 4 KV heads)
    assert imp.session.plan.tensor_parallel == 4 and 768 % 4 == 0


@pytest.mark.parametrize("step,dense,fields", [
    (1, [], (0, 1)),
    (1, [0, 1, 2], (3, 1)),            # first dense layers (DeepSeek's first_k_dense_replace)
    (1, [0], (1, 1)),
])
def test_qwen_moe_layer_patterns(step, dense, fields):
    m = _model({**QWEN3_30B_A3B, "decoder_sparse_step": step, "mlp_only_layers": dense})
    assert (m.moe_first_dense_layers, m.moe_layer_frequency) == fields


@pytest.mark.parametrize("step,dense,field", [
    (2, [], "decoder_sparse_step"),    # HF puts experts on layers 1, 3, 5 ...: Megatron on 0, 2, 4
    (1, [5], "mlp_only_layers"),       # a dense layer in the middle
    (1, [0, 2], "mlp_only_layers"),
])
def test_qwen_moe_layer_patterns_that_do_not_fit_are_refused(step, dense, field):
    with pytest.raises(ConfigError) as err:
        _model({**QWEN3_30B_A3B, "decoder_sparse_step": step, "mlp_only_layers": dense})
    assert err.value.errors[0].field == f"config.json: {field}"
    assert "--moe-layer-freq" in str(err.value)


def test_moe_layer_fields_closed_form():
    """The session's rule: layer i has experts when i >= first dense and i % frequency == 0."""
    for L in (1, 2, 7, 12):
        for f in range(L):
            for k in range(1, L + 1):
                pattern = [i >= f and i % k == 0 for i in range(L)]
                if not any(pattern):
                    assert moe_layer_fields(pattern) is None
                    continue
                got = moe_layer_fields(pattern)
                assert got is not None
                assert [i >= got[0] and i % got[1] == 0 for i in range(L)] == pattern
                if f == 0:
                    assert got[0] == 0  # the integer form comes back as itself
    assert moe_layer_fields([0, 1, 0, 1]) is None
    assert moe_layer_fields([1, 1, 0, 1]) is None
    assert moe_layer_fields([0, 0, 0]) is None


@pytest.mark.parametrize("cfg,words", [
    ({**MIXTRAL_8X7B, "architectures": ["DbrxForCausalLM"]}, "not supported"),
])
def test_architectures_refused_by_name(cfg, words):
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "config.json")
    assert err.value.errors[0].field == "config.json: architectures"
    assert words in str(err.value)


def test_experts_in_a_dense_architecture_are_refused():
    cfg = {**MIXTRAL_8X7B, "architectures": ["MistralForCausalLM"]}
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg)
    assert err.value.errors[0].field == "config.json: num_local_experts"
    assert "dense architecture" in str(err.value)


def test_session_rules_on_an_moe_import():
    """With the rules checked, the same model as without; a rule the MoE model breaks is named
    by the config's own key."""
    imp = session_from_hf_config(QWEN3_30B_A3B)
    assert imp.session.model == _model(QWEN3_30B_A3B)
    with pytest.raises(ConfigError) as err:
        session_from_hf_config({**MIXTRAL_8X7B, "num_experts_per_tok": 9})
    assert err.value.errors[0].field == "config.json: num_experts_per_tok"
    assert "more than the 8 experts (num_local_experts)" in str(err.value)


@pytest.mark.parametrize("cfg,total,active,published", [
    (MIXTRAL_8X7B, 46_702_792_704, 12_879_925_248, (46.7e9, 12.9e9)),   # Mixtral paper, Sec. 2
    (QWEN15_MOE_A27B, 14_315_735_040, 2_689_124_352, (14.3e9, 2.7e9)),  # model card (+ L*h gate)
    (QWEN3_30B_A3B, 30_532_122_624, 3_353_032_704, (30.5e9, 3.3e9)),    # model card
])
def test_imported_moe_parameter_counts(cfg, total, active, published):
    """Total and active parameters of the imported models (the MoE model math) against the
    published ones, to their last printed digit."""
    from core.model import model_math as mm
    m = session_from_hf_config(cfg).session.model
    # the publishers of these three count the input embedding in "active"
    assert (mm.num_parameters(m), mm.num_active_parameters_with_embedding(m)) == (total, active)
    # within one unit of the last printed digit (the Qwen3 card truncates: 3.353 B as "3.3B")
    assert abs(total - published[0]) < 0.1e9 and abs(active - published[1]) < 0.1e9
    # Qwen3-30B-A3B by hand: attention with heads of 128 (not h/a = 64), 128 experts of 768,
    # the router, norms and QK-norms; untied embeddings
    if cfg is QWEN3_30B_A3B:
        h, a, g, kv, E, k, f, L, V = 2048, 32, 4, 128, 128, 8, 768, 48, 151936
        attn = h * (a + 2 * g) * kv + a * kv * h
        per_layer = attn + E * 3 * h * f + h * E + 2 * h + 2 * kv
        assert total == L * per_layer + 2 * V * h + h
        assert active == L * (per_layer - (E - k) * 3 * h * f) + 2 * V * h + h
        assert round((total - 2 * V * h) / 1e9, 1) == 29.9  # the card's non-embedding count


def test_cli_import_of_an_moe_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_30B_A3B))
    out = tmp_path / "qwen.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)
    assert (model["num_experts"], model["moe_top_k"], model["kv_channels"]) == (128, 8, 128)
    assert load_any(out).model == _model(QWEN3_30B_A3B, name=tmp_path.name)
    assert "30.53 B parameters" in r.stderr


def test_moe_presets_match_their_hf_configs():
    """The editor's Mixtral 8x7B and Qwen3-30B-A3B presets are the published configs (names and
    the pre-training context apart)."""
    from dataclasses import replace
    from core.plan.presets import MODEL_PRESETS
    for preset, cfg, s in (("Mixtral 8x7B", MIXTRAL_8X7B, 32768),
                           ("Qwen3-30B-A3B", QWEN3_30B_A3B, 4096)):
        assert MODEL_PRESETS[preset] == replace(_model(cfg, seq_length=s), name=preset)
    q = MODEL_PRESETS["Qwen3-30B-A3B"]
    assert (q.kv_channels, q.qk_layernorm, q.num_experts, q.moe_top_k, q.moe_ffn_hidden_size,
            q.tied_embeddings, q.vocab_size) == (128, True, 128, 8, 768, False, 151936)
