"""GLM-4.5 and GLM-4.5-Air (``Glm4MoeForCausalLM``, transformers' ``modeling_glm4_moe.py``):
QKV biases and QK-norm as the config's switches, 1 shared + n routed experts of
``moe_intermediate_size``, dense first layers, one multi-token prediction layer.

GLM45_AIR is the ``config.json`` of zai-org/GLM-4.5-Air as given in the task that added the
architecture. GLM45 is GLM-4.5's as we remember the published one (zai-org/GLM-4.5): the sizes
below, ``use_qk_norm`` true and ``routed_scaling_factor`` 2.5 (a constant, ignored either way);
the other fields as the Air's. The parameter counts are checked against the model cards' rounded
totals (355 B total / 32 B active, 106 B / 12 B), not to a digit: see
test_parameter_counts_near_the_model_cards.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from core.io.hf_import import session_from_hf_config
from core.io.session import load_any, load_session, save_session
from core.model import model_math as mm
from core.plan.fields import ConfigError
from tests.conftest import ROOT

GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "partial_rotary_factor": 0.5,
    "initializer_range": 0.02, "intermediate_size": 10944, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 1408, "norm_topk_prob": True,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
    "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8,
    "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_cache": True, "use_qk_norm": False, "vocab_size": 151552}
GLM45 = {**GLM45_AIR, "hidden_size": 5120, "num_hidden_layers": 92, "intermediate_size": 12288,
         "moe_intermediate_size": 1536, "n_routed_experts": 160, "first_k_dense_replace": 3,
         "use_qk_norm": True, "routed_scaling_factor": 2.5}

# the fields a published config sets: (L, h, a, g, kv, f, E, k, F, first dense, QK-norm)
SHAPES = {"air": (46, 4096, 96, 8, 128, 10944, 128, 8, 1408, 1, False),
          "full": (92, 5120, 96, 8, 128, 12288, 160, 8, 1536, 3, True)}
CONFIGS = {"air": GLM45_AIR, "full": GLM45}


def _model(cfg, **kw):
    return session_from_hf_config(cfg, seq_length=4096, **kw).session.model


@pytest.mark.parametrize("which", ["air", "full"])
def test_import_fields(which):
    imp = session_from_hf_config(CONFIGS[which], seq_length=4096)
    m = imp.session.model
    L, h, a, g, kv, f, E, k, F, first, qkn = SHAPES[which]
    assert imp.architecture == "Glm4MoeForCausalLM"
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
            m.kv_channels, m.ffn_hidden_size, m.vocab_size, m.seq_length) == (
        L, h, a, g, kv, f, 151552, 4096)
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts,
            m.moe_first_dense_layers, m.moe_layer_frequency) == (E, k, F, 1, first, 1)
    # q/k/v_proj biased (o_proj not: add_bias_linear stays off), QK-norm as the config says
    assert (m.add_qkv_bias, m.add_bias_linear, m.qk_layernorm) == (True, False, qkn)
    assert (m.activation, m.normalization, m.position_embedding, m.tied_embeddings) == (
        "swiglu", "rmsnorm", "rope", False)
    assert m.mtp_num_layers == 1 and not m.multi_latent_attention
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (None, None)  # n_group 1
    # every field is used or listed: the router's bias, partial RoPE, the constants
    assert {"partial_rotary_factor", "routed_scaling_factor", "n_group", "topk_group",
            "norm_topk_prob"} <= set(imp.ignored)
    # only the file's own fields are listed (the router's bias is a weight, not a field)
    assert set(imp.ignored) <= set(CONFIGS[which])
    # the default plan: t=8 divides the heads, groups, MLP and experts
    assert imp.session.plan.tensor_parallel == 8


def _hand_count(which: str) -> tuple[int, int, int]:
    """(total without MTP, active without MTP and without the input embedding, MTP layer)."""
    L, h, a, g, kv, f, E, k, F, first, qkn = SHAPES[which]
    V = 151552
    attn = h * (a + 2 * g) * kv + (a + 2 * g) * kv + a * kv * h + 2 * kv * qkn  # QKV bias
    expert = 3 * h * F
    moe = attn + (E + 1) * expert + E * h + 2 * h          # routed + shared, router, 2 norms
    dense = attn + 3 * h * f + 2 * h
    total = first * dense + (L - first) * moe + 2 * V * h + h  # untied, final norm
    active = total - (L - first) * (E - k) * expert - V * h
    mtp = moe + 2 * h * h + 3 * h                           # eh_proj, enorm, hnorm, final norm
    return total, active, mtp


@pytest.mark.parametrize("which,total_b,active_b", [("air", 106, 12), ("full", 355, 32)])
def test_parameter_counts_near_the_model_cards(which, total_b, active_b):
    """The main model (without the MTP layer) against the model cards' rounded figures.

    Totals within 1 %: the cards print three digits and do not say whether the MTP layer is in
    them; GLM-4.5-Air's main model is 106.85 B ("106B"), GLM-4.5's 352.80 B, 0.6 % under
    "355B" (356.79 B with the MTP layer, 0.5 % over). Active within half a unit of the printed
    digit: the cards' active counts match the non-embedding ones (no input embedding and no
    output layer: 12.18 B, 32.08 B); the simulator's num_active_parameters keeps the output
    layer (a GEMM), 12.80 B and 32.86 B."""
    m = _model(CONFIGS[which])
    main = dataclasses.replace(m, mtp_num_layers=0)
    total, active, mtp = _hand_count(which)
    h, V = m.hidden_size, m.vocab_size
    assert mm.num_parameters(main) == total
    assert mm.num_active_parameters(main) == active
    assert mm.num_parameters(m) == total + mtp  # one MTP layer (an MoE layer: the last's kind)
    assert abs(total - total_b * 1e9) < 0.01 * total_b * 1e9
    assert abs(active - V * h - active_b * 1e9) < 0.5e9


def test_switches_follow_the_config():
    """attention_bias and use_qk_norm are the config's (Glm4MoeConfig: false when absent); a
    value that is not a boolean is refused by name."""
    base = _model(GLM45_AIR)
    no_bias = _model({**GLM45_AIR, "attention_bias": False})
    absent = _model({k: v for k, v in GLM45_AIR.items() if k not in ("attention_bias",
                                                                     "use_qk_norm")})
    assert not no_bias.add_qkv_bias and absent == no_bias
    L, a, g, kv = 46, 96, 8, 128
    assert mm.num_parameters(base) - mm.num_parameters(no_bias) == (L + 1) * (a + 2 * g) * kv
    assert _model({**GLM45_AIR, "use_qk_norm": True}).qk_layernorm
    for key in ("attention_bias", "use_qk_norm"):
        with pytest.raises(ConfigError) as err:
            _model({**GLM45_AIR, key: "yes"})
        assert err.value.errors[0].field == f"config.json: {key}"


@pytest.mark.parametrize("change,field", [
    ({"moe_layer_freq": 2}, "moe_layer_freq"),         # not read by Glm4Moe: every layer MoE
    ({"n_shared_experts": None}, "n_shared_experts"),  # a count the config must give
    ({"first_k_dense_replace": -1}, "first_k_dense_replace"),
    ({"q_lora_rank": 1536}, "q_lora_rank"),            # no latent attention in GLM
    ({"num_nextn_predict_layers": 1.5}, "num_nextn_predict_layers"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"moe_router_type": "x"}, "moe_router_type"),     # unknown to the importer
    ({"n_group": 8, "topk_group": None}, "topk_group"),  # groups without how many are picked
])
def test_refusals_name_the_field(change, field):
    cfg = {k: v for k, v in {**GLM45_AIR, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        _model(cfg)
    assert err.value.errors[0].field == f"config.json: {field}"


def test_cli_refuses_by_file_and_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GLM45_AIR, "moe_layer_freq": 2}))
    out = tmp_path / "never.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "config.json: moe_layer_freq" in r.stderr and "first_k_dense_replace" in r.stderr
    assert not out.exists()


def test_cli_import_round_trip_and_simulation_on_64_h100(tmp_path):
    """Import GLM-4.5-Air, read the written session back (and write it again), and simulate it on
    64 H100 with a plan that fits: t=2, p=4 (46 layers + embedding + loss = 48 slots), d=8,
    ep=8, the distributed optimizer, selective recomputation."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GLM45_AIR))
    out = tmp_path / "glm.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out), "--seq-length", "4096"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "109.23 B parameters" in r.stdout + r.stderr  # with the MTP layer
    first = load_any(out)
    assert first.model == _model(GLM45_AIR, name=tmp_path.name)
    again = tmp_path / "again.json"
    save_session(first, again)
    assert load_session(again) == first and again.read_text() == out.read_text()
    plan = {"cluster.gpu": "H100-SXM5-80GB", "plan.tensor_parallel": 2,
            "plan.pipeline_parallel": 4, "plan.data_parallel": 8, "plan.expert_parallel": 8,
            "plan.expert_tensor_parallel": 1, "plan.sequence_parallel": "true",
            "plan.zero_stage": 1, "plan.global_batch_size": 512, "plan.recompute": "selective",
            "plan.account_for_embedding_in_pipeline_split": "true",
            "plan.account_for_loss_in_pipeline_split": "true"}
    sets = [x for k, v in plan.items() for x in ("--set", f"{k}={v}")]
    r = subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(out), "--json", *sets],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["num_gpus"] == 64 and report["fits_in_memory"]
    assert report["num_parameters"] == mm.num_parameters(first.model)
    assert report["iteration_time_s"] > 0 and 0 < report["mfu"] < 1 and report["ep_comm_s"] > 0


def test_group_limited_routing_is_read_as_deepseek_v3s():
    """Glm4MoeTopkRouter picks the experts in topk_group of n_group groups, as DeepSeek-V3's
    router: more than one group sets the model's router groups (the flex dispatcher's remote
    copies depend on them); the published configs' one group is the top-k over all experts."""
    m = _model({**GLM45_AIR, "n_group": 8, "topk_group": 4})
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)
    assert (_model(GLM45_AIR).moe_router_num_groups, _model(GLM45_AIR).moe_router_group_topk) \
        == (None, None)
