"""GPT-OSS (gpt-oss-120b, gpt-oss-20b): attention sinks (``model.softmax_type`` learnable), the
128-token sliding window on every other layer, the clamped SwiGLU with a linear offset, biases in
attention, router and experts.

The configs are the published ``config.json`` files of openai/gpt-oss-120b and openai/gpt-oss-20b
(Hugging Face), written out below; the parameter counts are OpenAI's gpt-oss model card, Table 1
(116.83 B total and 5.13 B active; 20.91 B and 3.61 B).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from core.model import kernels, model_math as mm
from core.model.kernels import op_kernels
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.op_times import lookup_op_times
from core.io.hf_import import session_from_hf_config
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.store.profile_store import ProfileStore
from core.io.session import load_any
from tests.conftest import ROOT
from tests.test_llama import MISTRAL_7B_V01

# openai/gpt-oss-120b config.json
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                       "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"],
                            "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0",
    "use_cache": True, "vocab_size": 201088}
# openai/gpt-oss-20b config.json: 24 layers, 32 experts, the rest as the 120b's
GPT_OSS_20B = {**GPT_OSS_120B, "num_hidden_layers": 24, "num_local_experts": 32,
               "layer_types": ["sliding_attention", "full_attention"] * 12}


def _model(cfg, **kw):
    return session_from_hf_config(cfg, seq_length=4096, **kw).session.model


# --------------------------------------------------------------------------- import, parameters

def test_a_config_without_layer_types_takes_transformers_default_pattern():
    """Transformers' GptOssConfig fills layer_types with sliding, full, sliding ... when the
    config has none: the same model as the published config, not full attention everywhere."""
    cfg = {k: v for k, v in GPT_OSS_120B.items() if k != "layer_types"}
    m = session_from_hf_config(cfg, seq_length=4096).session.model
    assert (m.window_size, m.window_attn_skip_freq) == (128, 2)
    assert mm.window_layer_mask(m).tolist() == [t == "sliding_attention"
                                                for t in GPT_OSS_120B["layer_types"]]


def test_import_fields_of_gpt_oss_120b():
    imp = session_from_hf_config(GPT_OSS_120B, seq_length=4096)
    m = imp.session.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups, m.kv_channels,
            m.ffn_hidden_size, m.vocab_size, m.tied_embeddings) == (
        36, 2880, 64, 8, 64, 2880, 201088, False)
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts,
            m.moe_layer_frequency, m.moe_first_dense_layers) == (128, 4, 2880, 0, 1, 0)
    assert (m.window_size, m.window_attn_skip_freq, m.softmax_type) == (128, 2, "learnable")
    assert (m.activation, m.activation_func_clamp_value, m.glu_linear_offset,
            m.add_bias_linear) == ("swiglu", 7.0, 1.0, True)
    # layer_types' sliding, full, sliding ... is Megatron-Core's skip frequency 2
    assert mm.window_layer_mask(m).tolist() == [t == "sliding_attention"
                                                for t in GPT_OSS_120B["layer_types"]]
    # what does not change the cost is listed with why: the checkpoint's MXFP4 storage, YaRN
    assert "mxfp4" in imp.ignored["quantization_config"]
    assert "1.702" in imp.ignored["hidden_act"] and "rope_scaling" in imp.ignored
    assert "initial_context_length" in imp.ignored
    assert validate(imp.session) == []
    assert session_from_hf_config(GPT_OSS_120B).session.model.seq_length == 131072


def _hand_count(L: int, E: int) -> tuple[int, int, int]:
    """(total, active, input embedding) of GPT-OSS by hand from the modelling code's modules:
    q/k/v/o with biases, one sink per head, the router with its bias, E experts with
    gate_up_proj (h x 2f) and down_proj (f x h) and their biases, two RMSNorms; embedding and
    untied unembedding, the final norm."""
    h, a, g, d, f, V, k = 2880, 64, 8, 64, 2880, 201088, 4
    attention = h * a * d + a * d + 2 * (h * g * d + g * d) + a * d * h + h + a
    expert = h * 2 * f + 2 * f + f * h + h
    router = h * E + E
    layer = attention + router + E * expert + 2 * h
    total = L * layer + 2 * V * h + h
    active = total - L * (E - k) * expert
    return total, active, V * h


@pytest.mark.parametrize("cfg,layers,experts,total_b,active_b", [
    (GPT_OSS_120B, 36, 128, 116.83, 5.13),
    (GPT_OSS_20B, 24, 32, 20.91, 3.61),
])
def test_parameter_counts_match_the_model_card(cfg, layers, experts, total_b, active_b):
    """Totals to the model card's last digit. Active: OpenAI counts the unembedding but not the
    input embedding (a table lookup, no FLOPs; Table 1 lists 'Embed + Unembed' apart and
    5.13 B = 4.55 B of layers + 0.58 B unembedding): num_active_parameters, the same count;
    num_active_parameters_with_embedding counts both (Mistral's 12.9 B for Mixtral does)."""
    m = _model(cfg)
    total, active, embedding = _hand_count(layers, experts)
    assert mm.num_parameters(m) == total
    assert mm.num_active_parameters_with_embedding(m) == active
    assert mm.num_active_parameters(m) == active - embedding
    assert round(total / 1e9, 2) == total_b
    assert round(mm.num_active_parameters(m) / 1e9, 2) == active_b
    # the sinks (a per layer) and the router bias (E per layer) are in the count
    vanilla = dataclasses.replace(m, softmax_type="vanilla")
    assert mm.num_parameters(m) - mm.num_parameters(vanilla) == layers * 64
    no_bias = dataclasses.replace(m, add_bias_linear=False)
    biases = layers * (64 * 64 + 2 * 8 * 64 + 2880 + experts + experts * (2 * 2880 + 2880))
    assert mm.num_parameters(m) - mm.num_parameters(no_bias) == biases


def test_presets_are_the_published_configs():
    for preset, cfg in (("GPT-OSS 120B", GPT_OSS_120B), ("GPT-OSS 20B", GPT_OSS_20B)):
        assert MODEL_PRESETS[preset] == dataclasses.replace(_model(cfg), name=preset)


def test_the_sinks_are_split_over_tensor_parallel_ranks():
    """Megatron-Core's softmax_offset has one entry per head of the rank (sharded with them)."""
    m = MODEL_PRESETS["GPT-OSS 120B"]
    sharded, _ = mm.attention_parameters(m)
    plain, _ = mm.attention_parameters(dataclasses.replace(m, softmax_type="vanilla"))
    assert sharded - plain == 64
    off_by_one, _ = mm.attention_parameters(dataclasses.replace(m, softmax_type="off-by-one"))
    assert off_by_one == plain  # a zero logit: a buffer, no parameter


@pytest.mark.parametrize("change,field,words", [
    ({"attention_bias": False}, "attention_bias", "not modelled"),
    ({"experts_per_token": 2}, "experts_per_token", "disagrees with num_experts_per_tok=4"),
    ({"quantization_config": {"quant_method": "fp8"}}, "quantization_config", "not modelled"),
    ({"swiglu_limit": -1}, "swiglu_limit", "positive number"),
    ({"layer_types": ["sliding_attention", "full_attention", "full_attention"] * 12},
     "layer_types", "every N-th layer full"),
    ({"layer_types": ["full_attention", "sliding_attention"] * 18}, "layer_types",
     "every N-th layer full"),
    ({"layer_types": ["sliding_attention"] * 3}, "layer_types", "each of the 36 layers"),
    ({"sliding_window": None}, "sliding_window", "positive integer"),
    ({"moe_intermediate_size": 1024}, "moe_intermediate_size", "not a field of"),
])
def test_refusals_name_the_field(change, field, words):
    with pytest.raises(ConfigError) as err:
        session_from_hf_config({**GPT_OSS_120B, **change}, "config.json")
    assert err.value.errors[0].field == f"config.json: {field}"
    assert words in str(err.value)


def test_layer_patterns_megatron_can_give():
    # every third layer full: --window-attn-skip-freq 3; every layer windowed: no skip frequency
    m = _model({**GPT_OSS_120B, "layer_types": ["sliding_attention", "sliding_attention",
                                                "full_attention"] * 12})
    assert (m.window_size, m.window_attn_skip_freq) == (128, 3)
    m = _model({**GPT_OSS_120B, "layer_types": ["sliding_attention"] * 35 + ["full_attention"]})
    assert (m.window_size, m.window_attn_skip_freq) == (128, 36)  # only the last layer full
    m = _model({**GPT_OSS_120B, "layer_types": ["sliding_attention"] * 36})
    assert (m.window_size, m.window_attn_skip_freq) == (128, None)
    m = _model({**GPT_OSS_120B, "layer_types": ["full_attention"] * 36})
    assert (m.window_size, m.window_attn_skip_freq) == (None, None)
    # Mistral 7B v0.1: a 4096-token window on every layer, when the sequence is longer
    m = session_from_hf_config(MISTRAL_7B_V01, seq_length=8192).session.model
    assert (m.window_size, m.window_attn_skip_freq) == (4096, None)


def test_cli_import_prints_the_published_total(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_120B))
    out = tmp_path / "gpt-oss.json"
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                        str(out), "--seq-length", "4096"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "116.83 B parameters" in r.stdout + r.stderr
    assert load_any(out).model == _model(GPT_OSS_120B, name=tmp_path.name)


# --------------------------------------------------------------------------- rules

def _session(model, **plan) -> Session:
    base = dict(tensor_parallel=1, pipeline_parallel=4, data_parallel=16, micro_batch_size=1,
                global_batch_size=1280, recompute="selective", recompute_modules="layernorm,moe_act",
                expert_parallel=8, zero_stage=1, overlap_grad_reduce=True,
                overlap_param_gather=True)
    base.update(plan)
    return Session(model, ParallelPlan(**base),
                   ClusterConfig("H100-SXM5-80GB", 8, inter_node_bandwidth_gbits_per_s=3200.0),
                   CostConfig())


def _errors(session) -> dict[str, str]:
    return {e.field: e.message for e in validate(session)}


def test_field_rules():
    m = MODEL_PRESETS["GPT-OSS 120B"]
    assert _errors(_session(m)) == {}
    gelu = dataclasses.replace(m, activation="gelu")
    errs = _errors(_session(gelu))
    assert "needs a gated MLP" in errs["model.activation_func_clamp_value"]
    assert "needs a gated MLP" in errs["model.glu_linear_offset"]
    assert "not one of vanilla, off-by-one, learnable" in _errors(
        _session(dataclasses.replace(m, softmax_type="sinks")))["model.softmax_type"]
    assert "must be zero or more" in _errors(_session(dataclasses.replace(
        m, activation_func_clamp_value=-7.0)))["model.activation_func_clamp_value"]
    # ring attention with a softmax offset is not modelled (refused by name)
    no_window = dataclasses.replace(m, window_size=None, window_attn_skip_freq=None)
    errs = _errors(_session(no_window, context_parallel=2, data_parallel=8))
    assert "softmax_type='learnable' is not modelled" in errs["plan.context_parallel"]


def _analytic_store() -> ProfileStore:
    return ProfileStore("round-gpu", {"bf16": 1e15, "fp16": 1e15, "fp32": 5e14}, 80e9, 2e12,
                        {"method": "analytic"}, {"collective_overhead_s": 1e-5})


def test_sinks_and_offset_time_as_their_plain_kernels():
    """The named assumption: a layer with sinks takes FlashAttention's time and the offset gate
    SwiGLU's (no key column, the same kernels); activations are unchanged too."""
    m = MODEL_PRESETS["GPT-OSS 120B"]
    plain = dataclasses.replace(m, softmax_type="vanilla", glu_linear_offset=0.0)
    a, b = _session(m), _session(plain)
    assert lookup_op_times(a, _analytic_store()).times == lookup_op_times(b, _analytic_store()).times
    assert mm.activation_bytes_per_layer(m, a.plan) == mm.activation_bytes_per_layer(plain, b.plan)


def _kernel_bytes(op: str, key: dict, prefix: str) -> tuple[float, int]:
    ks = [k for k in op_kernels(op, key) if k.name.startswith(prefix)]
    return sum(k.bytes for k in ks), len(ks)


def test_clamp_and_expert_bias_kernels_are_megatron_cores_eager_ops():
    """Megatron-Core 0.16.1 clamps the gated MLP's fc1 output in PyTorch before the fused
    activation (chunk, two clamps, cat: 4 x the fc1 output's bytes forward, 3.5 x backward) and
    adds the routed experts' fc2 bias per expert in fp32 (TEGroupedMLP._apply_bias: 6F + 2C
    forward, 8F + 2C backward, F the fp32 and C the bf16 bytes of the fc2 output)."""
    m = MODEL_PRESETS["GPT-OSS 120B"]
    s = _session(m)
    key = kernels.op_key(m, s.plan)
    assert key["glc"] == 1 and key["eb"] == 1
    b, seq, k, fe, h, local = 1, 4096, 4, 2880, 2880, 128 // 8
    R = b * seq * k                      # the rank's routed rows under balanced routing
    fc1_out = R * 2 * fe * 2             # bf16 bytes of the experts' fc1 output
    assert _kernel_bytes("experts_fwd", key, "glu_clamp") == (4 * fc1_out, 3)
    assert _kernel_bytes("experts_bwd", key, "glu_clamp") == (3.5 * fc1_out, 3)
    assert _kernel_bytes("experts_act_fwd", key, "glu_clamp") == (4 * fc1_out, 3)
    F, C = 4 * R * h, 2 * R * h
    fwd, n_fwd = _kernel_bytes("experts_fwd", key, "expert_bias")
    bwd, n_bwd = _kernel_bytes("experts_bwd", key, "expert_bias")
    assert fwd == pytest.approx(6 * F + 2 * C, rel=1e-12) and n_fwd == 2 * local + 2
    assert bwd == pytest.approx(8 * F + 2 * C, rel=1e-12) and n_bwd == 3 * local + 1
    # without the clamp and without biases: neither, and the rest of the kernels unchanged
    plain = dataclasses.replace(m, activation_func_clamp_value=None, add_bias_linear=False)
    pkey = kernels.op_key(plain, s.plan)
    assert pkey["glc"] == 0 and pkey["eb"] == 0
    for op in ("experts_fwd", "experts_bwd"):
        names = [x.name for x in op_kernels(op, key)
                 if not x.name.startswith(("glu_clamp", "expert_bias"))]
        assert names == [x.name for x in op_kernels(op, pkey)]
    # the dense MLP clamps the same way (mlp_fwd / mlp_bwd), on its b s x 2f/t fc1 output
    dense_fc1 = b * seq * 2 * m.ffn * 2
    assert _kernel_bytes("mlp_fwd", key, "glu_clamp") == (4 * dense_fc1, 3)
    assert _kernel_bytes("mlp_bwd", key, "glu_clamp") == (3.5 * dense_fc1, 3)
    # an analytic store times the clamped layer longer, by the clamp kernels' time alone
    st = _analytic_store()
    t_clamp = lookup_op_times(s, st).times
    t_plain = lookup_op_times(_session(dataclasses.replace(
        m, activation_func_clamp_value=None)), st).times
    assert t_clamp["experts_fwd"] > t_plain["experts_fwd"]
    assert t_clamp["attention_fwd"] == t_plain["attention_fwd"]


def test_clamp_keeps_its_copy_of_the_fc1_output_unless_moe_act_is_recomputed():
    """The clamps save the fc1 output and the fused activation its clamped copy: 4 f_e bytes
    more per routed row (bf16); recomputing moe_act keeps only the fc1 output."""
    from core.model.moe import moe_activation_bytes_per_layer
    m = MODEL_PRESETS["GPT-OSS 120B"]
    plain = dataclasses.replace(m, activation_func_clamp_value=None)
    R = 1 * 4096 * 4
    for mods, extra in ((("layernorm",), R * 4 * 2880), (("layernorm", "moe_act"), 0)):
        s = _session(m, recompute="selective", recompute_modules=",".join(mods))
        sp = _session(plain, recompute="selective", recompute_modules=",".join(mods))
        assert (moe_activation_bytes_per_layer(m, s.plan, "selective")
                - moe_activation_bytes_per_layer(plain, sp.plan, "selective")) == extra


def test_simulation_runs_with_gpt_oss():
    from core.sim.simulate import simulate
    r = simulate(_session(MODEL_PRESETS["GPT-OSS 120B"])).report
    assert r.num_parameters == 116_829_156_672
    assert r.iteration_time_s > 0 and 0 < r.mfu < 1 and r.ep_comm_s > 0


# --------------------------------------------------------------------------- Megatron arguments

def test_megatron_round_trip_of_gpt_oss():
    s = _session(MODEL_PRESETS["GPT-OSS 120B"])
    args = export_arguments(s)
    text = " ".join(args)
    for piece in ("--softmax-type learnable", "--quick-geglu", "--activation-func-clamp-value 7.0",
                  "--glu-linear-offset 1.0", "--window-size (128,0)", "--window-attn-skip-freq 2",
                  "--kv-channels 64", "--num-experts 128 --moe-router-topk 4"):
        assert piece in text, piece
    assert "--swiglu" not in args and "--disable-bias-linear" not in args
    back = session_from_launch(read_launch(text, "gpt-oss.sh"), num_gpus=64, gpus_per_node=8,
                               gpu="H100-SXM5-80GB", name="GPT-OSS 120B")
    assert back.session.model == s.model
    assert back.session.plan == s.plan
    assert list(back.ignored) == ["--quick-geglu"]  # its gate timed as SwiGLU's


def test_megatron_bridge_style_launch():
    """The arguments of Megatron-Bridge's GPTOSSProvider as a Megatron-LM launch: yarn RoPE
    is RoPE (listed), a plain SwiGLU without clamp exports --swiglu again."""
    launch = ("--num-layers 24 --hidden-size 2880 --num-attention-heads 64 --kv-channels 64 "
              "--group-query-attention --num-query-groups 8 --ffn-hidden-size 2880 "
              "--seq-length 4096 --vocab-size 201088 --micro-batch-size 1 --quick-geglu "
              "--activation-func-clamp-value 7 --glu-linear-offset 1 --softmax-type learnable "
              "--position-embedding-type yarn --normalization RMSNorm "
              "--untie-embeddings-and-output-weights --window-size 128,0 "
              "--window-attn-skip-freq 2 --num-experts 32 --moe-router-topk 4 "
              "--moe-grouped-gemm --attention-backend flash --bf16")
    r = session_from_launch(read_launch(launch, "x"), num_gpus=8)
    m = r.session.model
    # the launch leaves the dropout at Megatron-LM's 0.1 (the preset, as Bridge, trains without)
    assert m == dataclasses.replace(MODEL_PRESETS["GPT-OSS 20B"], name="x", moe_ffn_hidden_size=None,
                                    hidden_dropout=0.1, attention_dropout=0.1)
    assert set(r.ignored) == {"--quick-geglu", "--position-embedding-type"}
    plain = dataclasses.replace(m, activation_func_clamp_value=None, glu_linear_offset=0.0)
    assert "--swiglu" in export_arguments(dataclasses.replace(r.session, model=plain))
    with pytest.raises(Exception, match="finite number"):
        session_from_launch(read_launch(launch.replace("--glu-linear-offset 1",
                                                       "--glu-linear-offset x"), "x"), num_gpus=8)


# --------------------------------------------------------------------------- published runs

PUBLISHED = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"


@pytest.fixture(scope="module")
def published():
    if not PUBLISHED.exists():
        pytest.skip(f"shared data not present: {PUBLISHED}")
    from core.accuracy.measured import read_measurements
    return read_measurements(PUBLISHED)


def test_gpt_oss_rows_map_to_the_gpt_oss_model(published):
    """Rows 3, 12 and 21 (GPT-OSS-120B on H100, B200, GB200) of the published sessions: the
    notes' window, sinks and head size and the label's clamped, biased SwiGLU gave the preset's
    model; all three
    recompute layernorm and moe_act (rows 3 and 12: the notes; row 21: its Megatron-Bridge perf
    recipe, gpt_oss_120b_pretrain_64gpu_gb200_bf16_config)."""
    preset = MODEL_PRESETS["GPT-OSS 120B"]
    for row, modules in ((3, "layernorm,moe_act"), (12, "layernorm,moe_act"),
                         (21, "layernorm,moe_act")):
        m = published[row - 1]
        assert m.skip_reason == "", (row, m.skip_reason)
        # the published sessions predate the dropout fields: Megatron-LM's 0.1
        assert m.session.model == dataclasses.replace(preset, name="GPT-OSS-120B",
                                                      hidden_dropout=0.1, attention_dropout=0.1)
        names = {a.split(":")[0] for a in m.assumptions}
        assert {"window-from-notes", "attention-sinks-learnable", "clamped-swiglu",
                "biased-from-activation", "kv-channels-from-notes", "llama-family"} <= names
        pl = m.session.plan
        assert (pl.recompute, pl.recompute_modules) == ("selective", modules)
        assert "megatron-recompute-default" not in names
