"""Attention head size of its own (``model.kv_channels``, Megatron's --kv-channels; issue 11).

Qwen3's small dense models and Qwen3-30B-A3B have heads wider than ``h/a``: Q is ``a*kv`` wide,
K and V ``g*kv`` each, the output projection's input ``a*kv``. Parameter counts are checked
against the published ones (the Hugging Face model cards), the configs written from the
published config.json values.
"""

from __future__ import annotations

import dataclasses

import pytest

from core.model import model_math as mm
from core.accuracy.calibrate import shape_key
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.rules import check, validate
from core.plan.session import Session
from core.sim.op_times import lookup_op_times, op_key
from core.io.hf_import import session_from_hf_config
from core.model.ops import analytic_op_time, op_kernels, table_covers
from core.store.profile_store import ProfileStore
from tests.conftest import ROOT

QWEN3 = {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
         "eos_token_id": 151645, "hidden_act": "silu", "initializer_range": 0.02,
         "max_position_embeddings": 40960, "model_type": "qwen3", "rms_norm_eps": 1e-06,
         "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
         "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
         "use_sliding_window": False, "vocab_size": 151936, "architectures": ["Qwen3ForCausalLM"]}
# Qwen/Qwen3-0.6B: 16 heads of 128 on h = 1024; Qwen/Qwen3-4B: 32 heads of 128 on h = 2560
QWEN3_06B = {**QWEN3, "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072,
             "max_window_layers": 28, "num_attention_heads": 16, "num_hidden_layers": 28,
             "num_key_value_heads": 8, "tie_word_embeddings": True}
QWEN3_4B = {**QWEN3, "head_dim": 128, "hidden_size": 2560, "intermediate_size": 9728,
            "max_window_layers": 36, "num_attention_heads": 32, "num_hidden_layers": 36,
            "num_key_value_heads": 8, "tie_word_embeddings": True}


def _by_hand(L, h, a, g, kv, f, V, tied):
    """Parameters written matrix by matrix: q, k, v, o, gate/up/down, two RMSNorms and the
    per-head q/k RMSNorms of each layer; embedding (and output layer when untied), final norm."""
    layer = h * a * kv + 2 * h * g * kv + a * kv * h + 3 * h * f + 2 * h + 2 * kv
    return L * layer + V * h * (1 if tied else 2) + h, L * layer


@pytest.mark.parametrize("cfg,shape,published,non_embedding", [
    (QWEN3_06B, (28, 1024, 16, 8, 128, 3072, 151936, True), 0.6e9, 0.44e9),  # Qwen/Qwen3-0.6B
    (QWEN3_4B, (36, 2560, 32, 8, 128, 9728, 151936, True), 4.0e9, 3.6e9),    # Qwen/Qwen3-4B
])
def test_qwen3_parameter_counts_with_wide_heads(cfg, shape, published, non_embedding):
    imp = session_from_hf_config(cfg)
    m = imp.session.model
    assert m.kv_channels == 128 and m.head_dim == 128
    assert m.kv_channels * m.num_attention_heads != m.hidden_size
    n = mm.num_parameters(m)
    total, layers = _by_hand(*shape)
    assert n == total
    # the model cards round to the last digit they print
    digit = 0.05e9 if published >= 1e9 or published == 0.6e9 else 0.005e9
    assert abs(n - published) < digit
    assert abs(layers - non_embedding) < (0.005e9 if non_embedding < 1e9 else 0.05e9)
    # head_dim = h/a (Qwen3-8B) leaves kv_channels empty: the same model as without it
    assert n != mm.num_parameters(dataclasses.replace(m, kv_channels=None))


def test_qwen3_8b_head_dim_equal_to_h_over_a():
    cfg = {**QWEN3, "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288,
           "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
           "tie_word_embeddings": False, "max_window_layers": 36}
    m = session_from_hf_config(cfg).session.model
    assert m.kv_channels is None
    assert mm.num_parameters(m) == 8_190_735_360  # Qwen/Qwen3-8B: 8.19 B
    assert mm.num_parameters(dataclasses.replace(m, kv_channels=128)) == 8_190_735_360


def _model(kv=None, **kw) -> ModelConfig:
    base = dict(name="wide heads", num_layers=4, hidden_size=2048, num_attention_heads=32,
                ffn_hidden_size=768 * 8, seq_length=4096, vocab_size=151936, num_query_groups=4,
                activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                tied_embeddings=False, add_bias_linear=False, qk_layernorm=True,
                attention_kernel="flash", kv_channels=kv)
    return ModelConfig(**{**base, **kw})


def _key(m: ModelConfig, t: int, b: int = 1) -> dict:
    """The op key the graph gives ``m`` at tensor-parallel size ``t`` and micro-batch ``b``."""
    return op_key(Session(model=m, plan=ParallelPlan(tensor_parallel=t, pipeline_parallel=1,
                                                     data_parallel=1, micro_batch_size=b,
                                                     global_batch_size=b)))


@pytest.mark.parametrize("t", [1, 2, 4])
@pytest.mark.parametrize("attn", ["flash", "unfused"])
def test_qkv_and_projection_gemm_shapes_closed_form(t, attn):
    """Q a*kv, K and V g*kv: QKV GEMM (b s, (a + 2g) kv / t, h); projection (b s, h, a kv / t)."""
    m = _model(128, attention_kernel=attn)
    h, a, g, kv, s, b = 2048, 32, 4, 128, 4096, 2
    key = _key(m, t, b)
    assert key["kv"] == 128
    fwd = {k.name: k for k in op_kernels("attention_fwd", key)}
    assert (fwd["qkv"].m, fwd["qkv"].n, fwd["qkv"].k) == (b * s, (a + 2 * g) * kv // t, h)
    assert (fwd["proj"].m, fwd["proj"].n, fwd["proj"].k) == (b * s, h, a * kv // t)
    if attn == "flash":
        core = fwd["flash_attn"]
        assert (core.k, core.batch) == (kv, b * a // t)
        assert core.flops == 0.5 * 4 * b * (a // t) * s * s * kv  # causal half
        assert core.bytes == 2 * b * s * kv * (2 * a + 2 * g) // t  # Q, K, V in, O out
    else:
        assert (fwd["attn_scores"].k, fwd["attn_values"].n) == (kv, kv)
        # read g/t and write a/t heads of K and V, 2 bytes each
        assert fwd["kv_expand"].bytes == 2 * b * s * 2 * (a + g) // t * kv
    # QK-norm and RoPE read and write Q and K of kv channels per head
    assert fwd["qk_rmsnorm"].bytes == fwd["rope"].bytes == 2 * b * s * (a + g) // t * kv * 2
    bwd = {k.name: k for k in op_kernels("attention_bwd", key)}
    assert (bwd["proj_dgrad"].n, bwd["proj_wgrad"].m) == (a * kv // t, a * kv // t)
    assert (bwd["qkv_wgrad"].m, bwd["qkv_dgrad"].k) == ((a + 2 * g) * kv // t,) * 2
    # gradient accumulation fusion (the default): the wgrad GEMMs add into the main gradients
    assert key["wacc"] == "fused" and "wgrad_accumulate" not in bwd
    bwd = {k.name: k for k in op_kernels("attention_bwd", {**key, "wacc": "separate"})}
    assert bwd["wgrad_accumulate"].bytes == 6 * (h * (a + 2 * g) * kv // t + h * a * kv // t)


def test_kv_channels_equal_to_h_over_a_is_the_default_model():
    wide, plain = _model(2048 // 32), _model(None)
    for t in (1, 2):
        for op in ("attention_fwd", "attention_bwd", "attention_core_fwd"):
            assert op_kernels(op, _key(wide, t)) == op_kernels(op, _key(plain, t))
    assert mm.num_parameters(wide) == mm.num_parameters(plain)


def test_forward_flops_and_activation_memory_use_the_head_size():
    m = _model(128)
    h, a, g, kv, f, s = 2048, 32, 4, 128, 6144, 4096
    layer, core, _ = mm.FAMILIES["dense"].forward_flops_per_token(m, 1)
    assert core == 4 * s * a * kv
    assert layer == 2 * h * (a + 2 * g) * kv + 2 * a * kv * h + 6 * h * f + 4 * s * a * kv
    sharded, replicated = mm.FAMILIES["dense"].layer_parameters(m)
    assert sharded == h * (a + 2 * g) * kv + a * kv * h + 3 * h * f
    assert replicated == 2 * h + 2 * kv
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=1,
                      global_batch_size=1, recompute="none")
    sbh = s * h
    # FlashAttention, QK-norm: Q, K, V, the projection input and the norms' inputs are a kv and
    # g kv wide, (4 + 4g/a + 2 + 2g/a) a kv / h in units of sbh; SwiGLU 6f/h
    attn = (4 + 4 * g / a + 2 + 2 * g / a) * a * kv / h
    assert mm.activation_bytes_per_layer(m, pl) == pytest.approx(
        sbh * (10 + (attn + 6 * f / h) / 2))
    # twice as wide heads keep 2x those attention terms: KV activation memory grows with kv
    narrow = mm.activation_bytes_per_layer(_model(64), pl)
    assert mm.activation_bytes_per_layer(m, pl) - narrow == pytest.approx(sbh * attn / 2 / 2)


def test_validation_accepts_kv_channels_and_h_not_divisible_by_a():
    # GPT-OSS's attention shape: h 2880, 64 heads of 64 (not h/a = 45), 8 KV heads
    m = _model(64, hidden_size=2880, num_attention_heads=64, num_query_groups=8,
               ffn_hidden_size=2880)
    s = Session(model=m, plan=ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                           global_batch_size=8))
    assert validate(s) == []
    assert mm.FAMILIES["dense"].layer_parameters(m)[0] == (
        2880 * (64 + 16) * 64 + 64 * 64 * 2880 + 3 * 2880 * 2880)
    # Megatron asks h divisible by a only when it derives the head size (no --kv-channels)
    s.model = dataclasses.replace(m, hidden_size=2100)
    assert validate(s) == []
    s.model = dataclasses.replace(m, hidden_size=2100, kv_channels=None)
    errs = validate(s)
    assert [e.field for e in errs] == ["model.hidden_size"]
    assert "not divisible by num_attention_heads=64" in errs[0].message
    assert "kv_channels" in errs[0].message


def test_op_key_and_stores_keep_the_head_size_apart():
    """Tables without the kv column hold h/a heads: a wider-head shape never takes their time."""
    wide, plain = _model(128), _model(None)
    assert op_key(Session(model=plain))["kv"] == 2048 // 32
    cols = ("b", "s", "h", "a", "t", "dtype", "g", "norm", "pos", "attn", "qkn")
    assert table_covers("attention_fwd", _key(plain, 1), cols)
    assert not table_covers("attention_fwd", _key(wide, 1), cols)
    assert table_covers("attention_fwd", _key(wide, 1), (*cols, "kv"))
    base = ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5")
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch_size=1)
    t_wide = lookup_op_times(Session(model=wide, plan=pl), base).times["attention_fwd"]
    t_plain = lookup_op_times(Session(model=plain, plan=pl), base).times["attention_fwd"]
    assert t_wide == pytest.approx(analytic_op_time("attention_fwd", _key(wide, 1), base))
    assert t_wide > t_plain  # 4x the attention width
    # the calibration's correction key tells them apart too
    assert shape_key(Session(model=wide, plan=pl)) != shape_key(Session(model=plain, plan=pl))


def test_wide_heads_simulate_end_to_end():
    from core.sim.simulate import simulate
    m = session_from_hf_config(QWEN3_4B, seq_length=4096).session.model
    s = Session(model=m, plan=ParallelPlan(tensor_parallel=4, pipeline_parallel=2,
                                           data_parallel=1, global_batch_size=8,
                                           recompute="selective"))
    s.cluster.gpu = "H100-SXM5-80GB"
    rep = simulate(check(s)).report
    assert rep.num_parameters == mm.num_parameters(m, 4)
    flops = mm.model_flops_per_iteration(m, s.plan)
    layer, _, out = mm.FAMILIES["dense"].forward_flops_per_token(m, 4)
    assert flops == 8 * 4096 * 3 * (36 * layer + out)
    assert rep.model_flops_per_iteration == flops  # MFU counts the wide heads' FLOPs


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_fp8_projection_input_is_a_kv_wide(mode):
    """FP8 with delayed scaling keeps the projection's input (a kv wide) as its FP8 copy: the
    change from BF16 scales with a kv / h like the other attention terms (Transformer Engine's
    saved FP8 inputs). With the other recipes the projection keeps its BF16 input (no change)."""
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                      global_batch_size=1, recompute=mode, precision="bf16")
    fp8 = dataclasses.replace(pl, precision="fp8", fp8_recipe="delayed")
    tw = dataclasses.replace(pl, precision="fp8", fp8_recipe="tensorwise")
    s_, h_, f_ = 4096, 2048, 6144
    for m in (_model(128), _model(None)):
        change = (mm.activation_bytes_per_layer(m, tw) - mm.activation_bytes_per_layer(m, pl))
        assert change / (s_ * h_) == pytest.approx(-2 - f_ / h_)
    s, h, f = 4096, 2048, 6144

    def fp8_change(m):
        return (mm.activation_bytes_per_layer(m, fp8) - mm.activation_bytes_per_layer(m, pl)) / (s * h)

    wide, plain = _model(128), _model(None)  # a kv = 4096 = 2h, and h
    proj = 1 if mode == "none" else -1  # FlashAttention keeps its output in BF16 without recompute
    assert fp8_change(plain) == pytest.approx(-2 - f / h + proj)
    assert fp8_change(wide) == pytest.approx(-2 - f / h + proj * 2)
