"""One policy for the linear biases of Hugging Face configs (core/io/hf_biases.py BIAS_SWITCHES):
a bias the modelling code puts on q/k/v/o_proj (``attention_bias``), on the MLP's projections
(``mlp_bias``) or on lm_head (Phi-3.5-MoE's ``lm_head_bias``) is modelled exactly -- one
parameter per output channel of the biased linear, counted with the weights -- and one the
model fields cannot give is refused by name with the same wording.

Closed forms from transformers 5.25.0's modeling_llama.py / modeling_nemotron.py:
q_proj a*d, k_proj and v_proj g*d each, o_proj h outputs (``bias=config.attention_bias``);
gate_proj and up_proj f, down_proj h (``bias=config.mlp_bias``; Nemotron: up_proj f, down_proj h).
"""

from __future__ import annotations

import dataclasses

import pytest

from core.io.hf_import import session_from_hf_config
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.model import model_math as mm
from core.model.memory import fp8_linear_params_per_layer
from core.plan.fields import ConfigError
from core.plan.model_rules import model_feature_errors
from tests.test_llama import LLAMA3_8B, MISTRAL_7B_V01
from tests.test_mla import V3_CONFIG
from tests.test_squared_relu import NEMOTRON_HF

L, H, A, G, D, F = 32, 4096, 32, 8, 128, 14336  # Llama 3 8B


def _model(cfg):
    return session_from_hf_config(cfg, "config.json").session.model


def _session(cfg):
    return session_from_hf_config(cfg, "config.json").session


def test_llama_attention_bias_adds_q_k_v_o_biases():
    plain, biased = _model(LLAMA3_8B), _model({**LLAMA3_8B, "attention_bias": True})
    assert (biased.add_qkv_bias, biased.add_proj_bias, biased.add_mlp_bias,
            biased.add_bias_linear) == (True, True, False, False)
    per_layer = A * D + 2 * G * D + H  # 4,096 + 2,048 + 4,096 = 10,240
    assert mm.num_parameters(biased) - mm.num_parameters(plain) == L * per_layer == 327_680


def test_llama_mlp_bias_adds_gate_up_down_biases():
    plain, biased = _model(LLAMA3_8B), _model({**LLAMA3_8B, "mlp_bias": True})
    assert (biased.add_mlp_bias, biased.add_qkv_bias, biased.add_proj_bias) == (True, False, False)
    assert mm.num_parameters(biased) - mm.num_parameters(plain) == L * (2 * F + H) == 1_048_576


def test_llama_both_switches_are_add_bias_linear_and_export_to_megatron():
    """All of Q, K, V, O and the MLP's biases are Megatron-Core's linear biases: the session
    says add_bias_linear, which Megatron-LM runs (no --disable-bias-linear)."""
    both = {**LLAMA3_8B, "attention_bias": True, "mlp_bias": True}
    s = _session(both)
    m = s.model
    assert (m.add_bias_linear, m.add_qkv_bias, m.add_proj_bias, m.add_mlp_bias) == \
        (True, False, False, False)
    assert mm.num_parameters(m) - mm.num_parameters(_model(LLAMA3_8B)) == \
        L * (A * D + 2 * G * D + H + 2 * F + H) == 1_376_256
    words = export_arguments(s)
    assert "--disable-bias-linear" not in words and "--add-qkv-bias" not in words


@pytest.mark.parametrize("key,field", [("attention_bias", "add_proj_bias"),
                                       ("mlp_bias", "add_mlp_bias")])
def test_megatron_export_refuses_a_bias_it_cannot_express(key, field):
    s = _session({**LLAMA3_8B, key: True})
    with pytest.raises(MegatronArgsError) as err:
        export_arguments(s)
    assert f"model.{field} true" in str(err.value)


def test_nemotron_mlp_bias_is_up_and_down_biases():
    """Nemotron's MLP is not gated: up_proj f and down_proj h biases."""
    plain, biased = _model(NEMOTRON_HF), _model({**NEMOTRON_HF, "mlp_bias": True})
    f, h, layers = NEMOTRON_HF["intermediate_size"], NEMOTRON_HF["hidden_size"], \
        NEMOTRON_HF["num_hidden_layers"]
    assert mm.num_parameters(biased) - mm.num_parameters(plain) == layers * (f + h)


def test_biases_stay_out_of_the_fp8_weights():
    """FP8 casts the GEMM weights, not the biases (Transformer Engine keeps them BF16)."""
    plain, biased = _model(LLAMA3_8B), _model({**LLAMA3_8B, "attention_bias": True,
                                                "mlp_bias": False})
    assert fp8_linear_params_per_layer(biased, 1) == fp8_linear_params_per_layer(plain, 1)


@pytest.mark.parametrize("cfg,key,words", [
    # Mistral's projections are built with bias=False whatever the config says
    ({**MISTRAL_7B_V01, "attention_bias": True}, "attention_bias",
     "True: this bias is not modelled for MistralForCausalLM (MistralForCausalLM's modelling "
     "code does not read it"),
    ({**MISTRAL_7B_V01, "mlp_bias": True}, "mlp_bias",
     "True: this bias is not modelled for MistralForCausalLM"),
    # DeepSeek-V3 reads attention_bias on MLA's down projections, which have no bias field
    ({**V3_CONFIG, "attention_bias": True}, "attention_bias",
     "True: this bias is not modelled for DeepseekV3ForCausalLM (DeepseekV3ForCausalLM's "
     "modelling code reads it on q_a_proj, kv_a_proj_with_mqa and o_proj"),
    ({**LLAMA3_8B, "attention_bias": "yes"}, "attention_bias", "must be true or false"),
])
def test_a_bias_the_fields_cannot_give_is_refused_by_name(cfg, key, words):
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "config.json")
    e = err.value.errors[0]
    assert e.field == f"config.json: {key}" and words in e.message, e.message


def test_mlp_bias_with_experts_is_refused_by_the_model_rules():
    m = dataclasses.replace(_model(LLAMA3_8B), add_mlp_bias=True, num_experts=8, moe_top_k=2)
    errs = [e for e in model_feature_errors(m) if e.field == "model.add_mlp_bias"]
    assert len(errs) == 1 and "not modelled" in errs[0].message


@pytest.mark.parametrize("name", ["QWEN3_8B", "OLMO2_7B", "GEMMA2_9B"])
def test_attention_bias_is_q_k_v_o_in_every_family_that_reads_it(name):
    """Qwen3, OLMo 2 and Gemma 2 build q/k/v/o_proj with bias=config.attention_bias (transformers
    5.25.0): a*d + 2*g*d + h more per layer (Gemma's family counts through the same layer)."""
    import tests.test_hf_families as fam
    import tests.test_llama as llama
    cfg = getattr(fam, name, None) or getattr(llama, name)
    plain, biased = _model(cfg), _model({**cfg, "attention_bias": True})
    a, g = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    h = cfg["hidden_size"]
    d = cfg.get("head_dim") or h // a
    assert mm.num_parameters(biased) - mm.num_parameters(plain) == \
        cfg["num_hidden_layers"] * (a * d + 2 * g * d + h)


def _bias_outcome(cfg):
    """(add_qkv_bias, add_proj_bias, add_mlp_bias, add_output_bias) or the refusal's message."""
    try:
        m = _model(cfg)
    except ConfigError as err:
        return err.errors[0].message
    return (m.add_qkv_bias, m.add_proj_bias, m.add_mlp_bias, m.add_output_bias)


def test_every_bias_switch_reads_true_false_and_null_alike_and_refuses_the_rest():
    """One reading of a bias switch whatever the architecture (core/io/hf_biases.py
    bias_switch): null is no bias (torch's nn.Linear(bias=None) adds none), as absent and
    false are; a string or a number is refused as not true or false. Was: Llama refused null
    ("None must be true or false") where Mistral and DeepSeek-V3 took it as off; Mistral and
    DeepSeek-V3 took 0 as off and called "false" (torch: a bias) "not modelled for" the
    architecture; Phi-3.5-MoE's lm_head_bias refused null."""
    from tests.test_hf_olmo3_phimoe_mistral3 import PHI35_MOE as PHIMOE
    off = (False, False, False, False)
    cases = [(LLAMA3_8B, "attention_bias"), (LLAMA3_8B, "mlp_bias"),
             (MISTRAL_7B_V01, "attention_bias"), (MISTRAL_7B_V01, "mlp_bias"),
             (V3_CONFIG, "attention_bias"), (PHIMOE, "lm_head_bias")]
    for base, key in cases:
        absent = {k: v for k, v in base.items() if k != key}
        name = base.get("architectures")
        want = _bias_outcome({**base, key: False})
        assert isinstance(want, tuple) and want == (off if base is not PHIMOE else
                                                    (True, True, False, False)), (name, key)
        assert _bias_outcome(absent) == _bias_outcome({**base, key: None}) == want, (name, key)
        for bad in ("true", "false", 0, 1, [True]):
            msg = _bias_outcome({**base, key: bad})
            assert isinstance(msg, str) and msg.endswith(
                "must be true or false (null: no bias)"), (name, key, bad, msg)
    # what a switch on gives, for the switched architectures (closed forms above)
    assert _bias_outcome({**LLAMA3_8B, "attention_bias": True}) == (True, True, False, False)
    assert _bias_outcome({**PHIMOE, "lm_head_bias": True})[3] is True


def test_the_bias_switches_are_greyed_under_add_bias_linear():
    """With model.add_bias_linear every linear has its bias (Megatron-Core: bias=add_bias_linear
    or add_qkv_bias): add_qkv_bias, add_proj_bias and add_mlp_bias add no parameter then
    (GPT-3 1.3B: 0 more), so they are inactive (greyed in the editor, left out of the curated
    runs' assumptions); without it each adds its biases (Llama 3 8B's attention_bias above)."""
    from core.plan.presets import MODEL_PRESETS
    from core.plan.rules import inactive_fields
    from core.plan.session import Session
    gpt3 = MODEL_PRESETS["GPT-3 1.3B"]
    llama = MODEL_PRESETS["Llama 3 8B"]
    assert gpt3.add_bias_linear and not llama.add_bias_linear
    names = ("add_qkv_bias", "add_proj_bias", "add_mlp_bias")
    for name in names:
        on = dataclasses.replace(gpt3, **{name: True})
        assert mm.num_parameters(on) == mm.num_parameters(gpt3)
    idle = inactive_fields(Session(model=gpt3))
    assert all(idle[f"model.{n}"].startswith("needs linear biases off (model.add_bias_linear false")
               for n in names)
    assert not {f"model.{n}" for n in names} & set(inactive_fields(Session(model=llama)))
    assert "model.add_output_bias" not in idle  # Megatron's output layer has none either way
