"""Dense model families (issue 11): grouped-query attention, SwiGLU, RMSNorm, RoPE, untied
output layer, FlashAttention, QK-norm; Hugging Face config import.

Parameter counts are the published ones (the Hugging Face model cards' exact counts);
the configs below are written from the published config.json values.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT, case_file
from core.model import model_math as mm
from core.plan.fields import ConfigError
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import LLAMA_FAMILY, MODEL_PRESETS
from core.plan.rules import check, validate
from core.plan.session import Session
from core.sim.op_times import lookup_op_times
from core.io.hf_import import session_from_hf_config
from core.model.ops import OP_KEYS, analytic_op_time, op_kernels, table_covers
from core.store.profile_store import ProfileStore
from core.io.session import load_any, load_session, save_session

LLAMA = dict(attention_bias=False, attention_dropout=0.0, hidden_act="silu", initializer_range=0.02,
             model_type="llama", pretraining_tp=1, rms_norm_eps=1e-05, rope_scaling=None,
             tie_word_embeddings=False, torch_dtype="bfloat16", transformers_version="4.40.0",
             use_cache=True, bos_token_id=1, eos_token_id=2)
LLAMA2_7B = {**LLAMA, "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
             "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_theta": 10000.0,
             "vocab_size": 32000}
LLAMA3_8B = {**LLAMA, "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
             "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
             "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128001}
LLAMA3_70B = {**LLAMA3_8B, "hidden_size": 8192, "intermediate_size": 28672,
              "num_attention_heads": 64, "num_hidden_layers": 80}
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0,
                "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
                "initializer_range": 0.02, "intermediate_size": 14336,
                "max_position_embeddings": 32768, "model_type": "mixtral",
                "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
                "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02,
                "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
MISTRAL_7B_V01 = {**LLAMA, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                  "hidden_size": 4096, "intermediate_size": 14336,
                  "max_position_embeddings": 32768, "num_attention_heads": 32,
                  "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 10000.0,
                  "sliding_window": 4096, "vocab_size": 32000}
QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
            "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
            "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
            "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.37.2", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 152064}
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
            "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
            "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
            "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
            "vocab_size": 151936}


def _params(cfg: dict) -> int:
    return mm.num_parameters(session_from_hf_config(cfg).session.model)


# --------------------------------------------------------------------------- parameters

@pytest.mark.parametrize("cfg,exact,published", [
    (LLAMA2_7B, 6_738_415_616, 6.74e9),     # meta-llama/Llama-2-7b-hf
    (LLAMA3_8B, 8_030_261_248, 8.03e9),     # meta-llama/Meta-Llama-3-8B
    (LLAMA3_70B, 70_553_706_496, 70.6e9),   # meta-llama/Meta-Llama-3-70B
    (QWEN2_7B, 7_615_616_512, 7.62e9),      # Qwen/Qwen2-7B (QKV bias)
    (QWEN3_8B, 8_190_735_360, 8.19e9),      # Qwen/Qwen3-8B (QK-norm)
])
def test_parameter_counts_from_hf_configs(cfg, exact, published):
    n = _params(cfg)
    assert n == exact
    assert n == pytest.approx(published, rel=1e-3)


def test_presets_match_their_hf_configs():
    for preset, cfg in (("Llama 2 7B", LLAMA2_7B), ("Llama 3 8B", LLAMA3_8B),
                        ("Llama 3 70B", LLAMA3_70B)):
        assert mm.num_parameters(MODEL_PRESETS[preset]) == _params(cfg)
    assert mm.num_parameters(MODEL_PRESETS["Llama 3.1 405B"]) == 405_853_388_800
    m = MODEL_PRESETS["Llama 3 70B"]
    assert (m.attention_kernel, m.activation, m.normalization, m.position_embedding,
            m.tied_embeddings, m.query_groups, m.vocab_size) == (
        "flash", "swiglu", "rmsnorm", "rope", False, 8, 128256)


def test_layer_parameters_closed_form():
    """GQA's K/V projections 2*h*(h/a)*g, SwiGLU's 3*h*f, RMSNorm without bias, no biases."""
    m = MODEL_PRESETS["Llama 3 8B"]
    h, a, g, f = 4096, 32, 8, 14336
    sharded, replicated = mm.FAMILIES["dense"].layer_parameters(m)
    assert sharded == h * h + 2 * h * (h // a) * g + h * h + 3 * h * f
    assert replicated == 2 * h
    gpt = MODEL_PRESETS["GPT-3 6.7B"]
    assert mm.FAMILIES["dense"].layer_parameters(gpt) == (4 * h * h + 2 * h * 4 * h + 3 * h + 4 * h,
                                                          6 * h)
    # tied vs untied: the output matrix V'h once more; RoPE drops the s*h position table
    untied = dataclasses.replace(gpt, tied_embeddings=False)
    assert mm.num_parameters(untied) - mm.num_parameters(gpt) == 50304 * h
    rope = dataclasses.replace(gpt, position_embedding="rope")
    assert mm.num_parameters(gpt) - mm.num_parameters(rope) == 2048 * h


def test_untied_output_layer_on_the_last_stage():
    m = MODEL_PRESETS["Llama 3 8B"]
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=4, data_parallel=1,
                      global_batch_size=4)
    n = mm.params_per_gpu(m, pl)
    V, h = 128256, 4096
    assert n[-1] - n[1] == pytest.approx(V * h / 2 + h)        # output layer + final RMSNorm
    assert n[0] - n[1] == pytest.approx(V * h / 2)             # embedding only, no positions
    replicated = 32 * 2 * h + h  # RMSNorm weights, on every tensor-parallel rank
    assert n.sum() == pytest.approx((mm.num_parameters(m, 2) - replicated) / 2 + replicated)


# --------------------------------------------------------------------------- FLOPs

def _llama2_7b_from_case() -> Session:
    doc = json.loads(case_file("llama2_7b_shape.json").read_text())
    # the case's GPT shape with Llama's family stated in full (a session gives every model
    # field); Llama 2 7B has one query group per head
    doc["model"].update({**LLAMA_FAMILY, "num_query_groups": None, "kv_channels": None})
    from core.io.session import session_from_document
    return session_from_document(doc, "llama2_7b_shape.json")


def test_case_llama2_7b_shape_with_family_stated():
    s = _llama2_7b_from_case()
    check(s)
    assert round(mm.num_parameters(s.model) / 1e9, 2) == 6.74
    per_seq = mm.model_flops_per_iteration(s.model, s.plan) / s.plan.global_batch_size
    # 3 passes x s tokens x (L*(8h^2 + 6hf + 4sh) + 2hV): the GEMMs, 2 FLOPs per multiply-add
    h, f, L, sq, V = 4096, 11008, 32, 4096, 32000
    assert per_seq == 3 * sq * (L * (8 * h * h + 6 * h * f + 4 * sq * h) + 2 * h * V)
    assert per_seq == pytest.approx(189e12, rel=0.005)
    # the same shape as a GPT (the family not stated) is the other, smaller model
    gpt = dataclasses.replace(s.model, activation="gelu", normalization="layernorm",
                              position_embedding="learned", tied_embeddings=True,
                              add_bias_linear=True)
    assert mm.model_flops_per_iteration(gpt, s.plan) < 0.85 * per_seq


def test_gqa_flops_per_token():
    m = MODEL_PRESETS["Llama 3 70B"]
    layer, core, out = mm.FAMILIES["dense"].forward_flops_per_token(m, 1)
    h, a, g, f, s = 8192, 64, 8, 28672, 8192
    assert layer == 2 * h * (a + 2 * g) * (h // a) + 2 * h * h + 6 * h * f + 4 * s * h
    assert core == 4 * s * h and out == 2 * h * 128256


# --------------------------------------------------------------------------- kernels and memory

def _key(m: ModelConfig, t: int = 1, b: int = 1) -> dict:
    return dict(b=b, s=m.seq_length, h=m.hidden_size, a=m.num_attention_heads, f=m.ffn, t=t,
                V=128256, dtype="bf16", g=m.query_groups, act=m.activation, norm=m.normalization,
                pos=m.position_embedding, attn=m.attention_kernel, qkn=int(m.qk_layernorm))


def test_gqa_shrinks_the_qkv_gemm_and_kv_activations():
    m = MODEL_PRESETS["Llama 3 8B"]
    mha = dataclasses.replace(m, num_query_groups=None)
    for t in (1, 2, 8):
        qkv = {k.name: k for k in op_kernels("attention_fwd", _key(m, t))}["qkv"]
        assert (qkv.m, qkv.n, qkv.k) == (8192, (32 + 2 * 8) * 128 // t, 4096)
        qkv_mha = {k.name: k for k in op_kernels("attention_fwd", _key(mha, t))}["qkv"]
        assert qkv_mha.n == 3 * 4096 // t
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=1,
                      global_batch_size=1, recompute="none")
    sbh = 8192 * 1 * 4096
    gqa, full = (mm.activation_bytes_per_layer(x, pl) for x in (m, mha))
    # K and V keep g of a heads: 4 sbh (1 - g/a) / t less
    assert full - gqa == pytest.approx(4 * sbh * (1 - 8 / 32) / 2)
    # closed form: sbh (8 + (4 + 4g/a + 6f/h)/t) with FlashAttention (no 5as/h term) and no
    # dropout (Llama: the 10's two masks are not kept)
    assert gqa == pytest.approx(sbh * (8 + (4 + 4 * 8 / 32 + 6 * 14336 / 4096) / 2))


def test_flash_attention_drops_the_score_memory():
    gpt = MODEL_PRESETS["GPT-3 6.7B"]
    pl = ParallelPlan(tensor_parallel=4, pipeline_parallel=1, data_parallel=1,
                      global_batch_size=1, recompute="none")
    unfused = mm.activation_bytes_per_layer(gpt, pl)
    flash = mm.activation_bytes_per_layer(dataclasses.replace(gpt, attention_kernel="flash"), pl)
    s, h, a, t = 2048, 4096, 32, 4
    assert unfused == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert flash == pytest.approx(s * h * (10 + 24 / t))
    names = [k.name for k in op_kernels("attention_fwd", {**_key(gpt, t), "attn": "flash", "V": 50304})]
    assert "flash_attn" in names and "scale_mask_softmax" not in names


def test_swiglu_mlp_kernels():
    m = MODEL_PRESETS["Llama 3 8B"]
    k = {x.name: x for x in op_kernels("mlp_fwd", _key(m, 2))}
    assert (k["fc1"].n, k["fc2"].k) == (2 * 14336 // 2, 14336 // 2)
    assert "bias_swiglu" in k and "rmsnorm" in k and "layernorm" not in k
    # FLOPs of the GEMMs: 6hf per token
    gemm_flops = sum(x.flops for x in k.values() if x.is_gemm)
    assert gemm_flops * 2 == pytest.approx(6 * 4096 * 14336 * 8192)


def test_gpt_defaults_keep_the_gpt_kernels():
    """A key without the family columns is GPT's, kernel for kernel."""
    gpt = MODEL_PRESETS["GPT-3 175B"]
    old = dict(b=2, s=2048, h=12288, a=96, f=4 * 12288, t=8, V=51200, dtype="bf16")
    for op in OP_KEYS:
        if op == "optimizer_step" or op in mm.MOE_OPS:  # MoE ops: not GPT's (test_moe.py)
            continue
        assert op_kernels(op, old) == op_kernels(op, {**_key(gpt, 8, 2), "V": 51200})


def test_old_store_tables_time_gpt_shapes_only(tmp_path):
    """A table without the family columns (an existing store) is used for GPT, not for Llama."""
    base = ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5")
    store = ProfileStore("test-gpu", dict(base.peak_flops), base.memory_bytes,
                         base.memory_bandwidth_bytes_per_s, {"method": "measured"},
                         dict(base.op_model or {}))
    for name in base.collective_kinds():
        for n in base.collective_kinds()[name]:
            store.add_collective(name, n, *base.collective_curve(name, n))
    llama = MODEL_PRESETS["Llama 3 8B"]
    gpt = dataclasses.replace(llama, num_query_groups=None, activation="gelu",
                              normalization="layernorm", position_embedding="learned",
                              tied_embeddings=True, add_bias_linear=True, attention_kernel="unfused")
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch_size=1)
    old_cols = ("b", "s", "h", "a", "f", "t", "V", "dtype")
    for op in ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd", "embedding_fwd",
               "embedding_bwd", "output_fwd", "output_bwd"):
        key = {c: v for c, v in _key(gpt).items() if c in OP_KEYS[op] and c in old_cols}
        store.add_op_table(op, {c: np.array([v]) for c, v in key.items()}, np.array([1.0]), axis="b")
    path = tmp_path / "old.h5"
    store.save(path)
    store = ProfileStore.open(path)
    t_gpt = lookup_op_times(Session(model=gpt, plan=pl), store)
    assert t_gpt.times["mlp_fwd"] == 1.0 and not t_gpt.warnings
    t_llama = lookup_op_times(Session(model=llama, plan=pl), store)
    for op in ("attention_fwd", "mlp_fwd", "output_fwd", "embedding_fwd"):
        assert t_llama.times[op] == pytest.approx(analytic_op_time(op, _key(llama), store))
        assert any(w.startswith(op) for w in t_llama.warnings)
    cols = set(store.op_table("mlp_fwd")[0])
    assert table_covers("mlp_fwd", _key(gpt), cols)
    assert not table_covers("mlp_fwd", _key(llama), cols)


def test_llama_simulates_and_fits_where_gpt_does_not():
    """Flash and GQA memory in a whole simulation (H100, t=8, s=8192)."""
    from core.sim.simulate import simulate
    m = MODEL_PRESETS["Llama 3 8B"]
    pl = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                      global_batch_size=8, recompute="none")
    s = Session(model=m, plan=pl)
    s.cluster.gpu = "H100-SXM5-80GB"
    rep = simulate(check(s)).report
    assert rep.num_parameters == mm.num_parameters(m, 8)
    assert rep.iteration_time_s > 0 and 0 < rep.mfu < 1
    unfused = dataclasses.replace(s, model=dataclasses.replace(m, attention_kernel="unfused"))
    rep2 = simulate(unfused).report
    assert rep2.max_memory_per_gpu_bytes > rep.max_memory_per_gpu_bytes


# --------------------------------------------------------------------------- validation

def test_query_group_rules():
    s = Session(model=dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], num_query_groups=6),
                plan=ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                  global_batch_size=8))
    assert [e.field for e in validate(s)] == ["model.num_query_groups"]
    s.model.num_query_groups = 4
    assert [e.field for e in validate(s)] == ["plan.tensor_parallel"]
    assert "num_query_groups=4" in str(validate(s)[0])
    s.model.activation = "relu"
    assert "model.activation" in [e.field for e in validate(s)]


# --------------------------------------------------------------------------- Hugging Face import

def test_hf_import_round_trip(tmp_path):
    imp = session_from_hf_config(LLAMA3_8B)
    assert imp.architecture == "LlamaForCausalLM"
    assert "rope_theta" in imp.ignored and "rope_scaling" in imp.ignored
    path = tmp_path / "s.json"
    save_session(imp.session, path)
    back = load_session(path)
    assert back == imp.session
    assert dataclasses.asdict(back.model) == {**dataclasses.asdict(MODEL_PRESETS["Llama 3 8B"]),
                                              "name": back.model.name}


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT)


def test_cli_import_hf(tmp_path):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_8B))
    out = tmp_path / "llama.json"
    r = _cli("import", "hf", str(folder / "config.json"), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)
    assert model["name"] == "Meta-Llama-3-8B" and model["num_query_groups"] == 8
    s = load_any(out)
    assert dataclasses.asdict(s.model) == model
    # the model's folder, as from_pretrained takes it, reads its config.json
    r = _cli("import", "hf", str(folder), "--out", str(tmp_path / "f.json"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == model
    # a snapshot of the Hugging Face cache is named after its model, not its commit hash
    snap = tmp_path / "models--meta-llama--Meta-Llama-3-8B" / "snapshots" / "8cde5ca8380496c9"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA3_8B))
    r = _cli("import", "hf", str(snap), "--out", str(tmp_path / "snap.json"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "Meta-Llama-3-8B"
    # an empty folder is still refused by name
    (tmp_path / "empty").mkdir()
    r = _cli("import", "hf", str(tmp_path / "empty"), "--out", str(tmp_path / "e.json"))
    assert r.returncode == 2 and "empty" in r.stderr and "Traceback" not in r.stderr
    r = _cli("simulate", str(out), "--json")
    assert r.returncode == 0, r.stderr
    # the default plan has t=8: Megatron pads the vocabulary to a multiple of 128*8
    assert json.loads(r.stdout)["num_parameters"] == 8_030_261_248 + 2 * (129024 - 128256) * 4096


@pytest.mark.parametrize("cfg,field,words", [
    ({**LLAMA3_8B, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"},
     "num_experts", "missing"),
    ({**LLAMA3_8B, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"},
     "kv_lora_rank", "missing"),
    ({**LLAMA3_8B, "architectures": ["GPTNeoXForCausalLM"]}, "architectures", "not supported"),
    ({**MISTRAL_7B_V01, "sliding_window": 0}, "sliding_window", "must be a positive integer"),
    ({**QWEN2_7B, "use_sliding_window": True}, "use_sliding_window", "not modelled"),
    ({**LLAMA3_8B, "head_dim": 0}, "head_dim", "positive integer"),
    # Mistral's code builds its projections bias-free (Llama's attention_bias and mlp_bias are
    # modelled: tests/test_hf_biases.py)
    ({**MISTRAL_7B_V01, "attention_bias": True}, "attention_bias", "bias is not modelled"),
    ({**MISTRAL_7B_V01, "mlp_bias": True}, "mlp_bias", "bias is not modelled"),
    ({**LLAMA3_8B, "hidden_act": "gelu"}, "hidden_act", "SwiGLU"),
    ({**LLAMA3_8B, "quantization_config": {"quant_method": "fp8"}}, "quantization_config",
     "not modelled"),
    ({**LLAMA3_8B, "some_new_knob": 3}, "some_new_knob", "cannot tell"),
])
def test_hf_import_refuses_by_field(cfg, field, words):
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "config.json")
    assert err.value.errors[0].field == f"config.json: {field}"
    assert words in str(err.value)


def test_mistral_window_at_least_the_sequence_is_inactive():
    imp = session_from_hf_config(MISTRAL_7B_V01, seq_length=4096)
    assert "sliding_window" in imp.ignored
    assert mm.num_parameters(imp.session.model) == 7_241_732_096  # mistralai/Mistral-7B-v0.1


def test_cli_import_refuses_by_name_with_exit_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL_8X7B, "architectures": ["DeepseekV3ForCausalLM"],
                                "model_type": "deepseek_v3"}))
    out = tmp_path / "never.json"
    r = _cli("import", "hf", str(path), "--out", str(out))
    assert r.returncode == 2
    assert "config.json: kv_lora_rank: missing" in r.stderr  # DeepSeek's MLA field, by name
    assert "Traceback" not in r.stderr and not out.exists()


def test_import_notes_the_pre_training_length_of_an_extended_context():
    """Llama 3.1's config has max_position_embeddings 131072 and rope_scaling's
    original_max_position_embeddings 8192: the import keeps 131072 (asked for) and says so."""
    cfg = {**LLAMA3_8B, "max_position_embeddings": 131072,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
    from core.io.import_result import global_batch_note
    imp = session_from_hf_config(cfg)
    assert imp.session.model.seq_length == 131072
    batch = [global_batch_note(8)]  # every HF import's: a config.json has no batch
    assert imp.notes == ["seq_length 131,072 is max_position_embeddings, the extended context; "
                         "the model was pre-trained at 8,192 (rope_scaling.original_max_position_"
                         "embeddings): give --seq-length 8192 to plan pre-training"] + batch
    # the start's global batch is about a million tokens (core.io.start_plan): 8 of 131,072,
    # 128 of 8,192
    assert session_from_hf_config(cfg, seq_length=8192).notes == [global_batch_note(128)]
    # without a pre-training length the import still names the length it wrote
    from core.io.import_result import seq_length_note
    assert session_from_hf_config(LLAMA3_8B).notes == [
        seq_length_note(8192, "the config's max_position_embeddings"), global_batch_note(128)]


def test_flash_attention_backward_runs_at_its_share_of_the_forwards_efficiency():
    """FlashAttention's backward kernel sustains FLASH_BWD_RELATIVE_EFFICIENCY (0.8, Dao 2023;
    Shah et al. 2024) of the forward's FLOP/s: its peak is that share of the dtype's, every
    other kernel keeps the dtype's; so at long sequences, where both kernels are compute-bound,
    the backward core takes 2.5 / 0.8 times the forward core."""
    from core.model.kernels import op_kernels
    from core.model.ops import FLASH_BWD_RELATIVE_EFFICIENCY, analytic_op_time, kernel_peak_flops
    from core.store.profiles_gen import generate_store
    assert FLASH_BWD_RELATIVE_EFFICIENCY == 0.8
    store = generate_store("H100-SXM5-80GB")
    key = dict(b=1, s=65536, h=4096, a=32, f=14336, t=1, V=128256, dtype="bf16", g=8,
               act="swiglu", norm="rmsnorm", pos="rope", attn="flash", qkn=0, kv=128, cp=1)
    fwd, bwd = op_kernels("attention_core_fwd", key), op_kernels("attention_core_bwd", key)
    peak = float(store.peak_flops["bf16"])
    assert kernel_peak_flops(fwd, "bf16", store.peak_flops).tolist() == [peak] * len(fwd)
    assert kernel_peak_flops(bwd, "bf16", store.peak_flops).tolist() == [0.8 * peak] * len(bwd)
    ratio = (analytic_op_time("attention_core_bwd", key, store)
             / analytic_op_time("attention_core_fwd", key, store))
    assert ratio == pytest.approx(2.5 / 0.8, rel=1e-3)


def test_import_hf_help_names_every_architecture_the_importer_reads():
    """The help text is made from the importer's own lists (it used to omit Gemma 2 and 3)."""
    from core.io.hf_import import DENSE_ARCHITECTURES, MOE_ARCHITECTURES
    r = _cli("import", "hf", "--help")
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    for arch in (*DENSE_ARCHITECTURES, *MOE_ARCHITECTURES):
        assert arch in text, arch
