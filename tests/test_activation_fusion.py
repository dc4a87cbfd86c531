"""model.bias_activation_fusion: Megatron-Core's fused bias-and-activation kernel against its
unfused PyTorch path (--no-bias-swiglu-fusion, --no-bias-gelu-fusion; torchtitan without
compile): the saved activation bytes and the memory-bound kernels."""

from __future__ import annotations

import dataclasses

import pytest

from core.model.kernels import op_kernels, op_key
from core.model.layer import dense_activation_bytes_per_layer
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.rules import validate
from core.plan.session import Session

H, F, S, A = 1024, 2816, 2048, 8
#: a small Llama shape: SwiGLU, RMSNorm, RoPE, no biases, FlashAttention, no dropout
LLAMA = ModelConfig(name="small llama", num_layers=2, hidden_size=H, num_attention_heads=A,
                    ffn_hidden_size=F, seq_length=S, vocab_size=32000, activation="swiglu",
                    normalization="rmsnorm", position_embedding="rope", tied_embeddings=False,
                    add_bias_linear=False, attention_kernel="flash", hidden_dropout=0.0,
                    attention_dropout=0.0)
PLAN = ParallelPlan(micro_batch_size=1, tensor_parallel=1, pipeline_parallel=1,
                    precision="bf16", sequence_parallel=False)


def _unfused(m: ModelConfig) -> ModelConfig:
    return dataclasses.replace(m, bias_activation_fusion=False)


def test_closed_form_activation_bytes_fused_and_unfused():
    """Per layer, BF16, t = 1, no dropout, FlashAttention, MHA: sbh (8 + 8 + per_f f/h) with
    per_f 6 fused (fc1's 2f output and fc2's f input) and 8 unfused (fc1's 2f output kept by
    the chunk's views, silu's f output, fc2's f input)."""
    sbh = S * 1 * H
    fused = dense_activation_bytes_per_layer(LLAMA, PLAN, "none")
    unfused = dense_activation_bytes_per_layer(_unfused(LLAMA), PLAN, "none")
    assert fused == pytest.approx(sbh * (8 + 8) + S * 6 * F)
    assert unfused == pytest.approx(sbh * (8 + 8) + S * 8 * F)
    assert unfused - fused == pytest.approx(2 * S * F)  # silu's output, f BF16 per token


def test_gelu_keeps_the_same_bytes_fused_or_not():
    """GeLU saves its input either way (bias_gelu_impl or F.gelu), fc2 its input: 4f/h."""
    gpt = ModelConfig(name="gpt", num_layers=2, hidden_size=H, num_attention_heads=A,
                      seq_length=S, vocab_size=32000)
    assert dense_activation_bytes_per_layer(gpt, PLAN, "none") == pytest.approx(
        dense_activation_bytes_per_layer(_unfused(gpt), PLAN, "none"))
    # with biases the unfused path adds the bias first: a separate kernel, read and write f
    k_f, k_u = op_key(gpt, PLAN), op_key(_unfused(gpt), PLAN)
    assert (k_f["actf"], k_u["actf"]) == ("fused", "unfused_bias")
    fwd = {k.name: k.bytes for k in op_kernels("mlp_fwd", k_u, _unfused(gpt))}
    fused = {k.name: k.bytes for k in op_kernels("mlp_fwd", k_f, gpt)}
    assert fwd["gelu"] == fused["bias_gelu"] and fwd["bias_add"] == fused["bias_gelu"]
    # without biases a plain unfused activation is the fused one's single kernel: same key
    nobias = dataclasses.replace(gpt, add_bias_linear=False)
    assert op_key(_unfused(nobias), PLAN)["actf"] == "fused"


def test_unfused_swiglu_kernels_move_their_bytes():
    """Forward: silu (read and write f) and the product (read 2f, write f) instead of
    bias_swiglu's 3f; backward: two product gradients (3f each), silu's (3f) and the
    chunk's concatenation (4f) instead of bias_swiglu_bwd's 5f; per token, BF16."""
    inner = S * F * 2  # bytes of one f-wide BF16 activation (t = 1, b = 1)
    key = op_key(_unfused(LLAMA), PLAN)
    assert key["actf"] == "unfused"
    fwd = [(k.name, k.bytes) for k in op_kernels("mlp_fwd", key, _unfused(LLAMA))]
    bwd = [(k.name, k.bytes) for k in op_kernels("mlp_bwd", key, _unfused(LLAMA))]
    assert [x for x in fwd if x[0] in ("silu", "glu_mul", "bias_swiglu")] == [
        ("silu", 2 * inner), ("glu_mul", 3 * inner)]
    assert [x for x in bwd if x[0].endswith("_bwd") and x[0][:4] in ("glu_", "silu", "bias")
            and x[0] != "bias_dropout_add_bwd"] == [
        ("glu_mul_bwd", 3 * inner), ("glu_mul_bwd", 3 * inner), ("silu_bwd", 3 * inner),
        ("glu_chunk_bwd", 4 * inner)]
    fused = [(k.name, k.bytes) for k in op_kernels("mlp_fwd", op_key(LLAMA, PLAN), LLAMA)]
    assert ("bias_swiglu", 3 * inner) in fused


def test_unfused_with_a_clamp_or_experts_is_refused_by_name():
    base = Session()
    clamp = dataclasses.replace(_unfused(LLAMA), activation_func_clamp_value=7.0)
    errs = validate(dataclasses.replace(base, model=clamp, plan=PLAN))
    assert any(e.field == "model.bias_activation_fusion" and "clamp" in e.message for e in errs)
    moe = dataclasses.replace(_unfused(LLAMA), num_experts=8, moe_top_k=2)
    errs = validate(dataclasses.replace(base, model=moe, plan=PLAN))
    assert any(e.field == "model.bias_activation_fusion" and "experts" in e.message
               for e in errs)


def test_an_unfused_mlp_op_scales_the_stores_fused_row(tmp_path):
    """The profile store's MLP rows are Megatron-Core's fused activation (no actf column): an
    unfused op takes the fused row's time scaled by the ratio of their analytic times, as an
    FP8 op scales its BF16 row, not the analytic time alone."""
    import numpy as np

    from core.model.keys import OP_KEYS
    from core.sim.op_times import analytic_op_time, lookup_op_times
    from core.store.profile_store import ProfileStore
    from tests.conftest import ROOT
    base = ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5")
    store = ProfileStore("test-gpu", dict(base.peak_flops), base.memory_bytes,
                         base.memory_bandwidth_bytes_per_s, {"method": "measured"},
                         dict(base.op_model or {}))
    for name in base.collective_kinds():
        for n in base.collective_kinds()[name]:
            store.add_collective(name, n, *base.collective_curve(name, n))
    plan = dataclasses.replace(PLAN, micro_batch_size=16)  # device-bound, not host-bound
    key = op_key(LLAMA, plan)
    for op, t in (("mlp_fwd", 1.0), ("mlp_bwd", 2.0)):
        cols = {c: np.array([key[c]]) for c in OP_KEYS[op] if c != "actf"}
        store.add_op_table(op, cols, np.array([t]), axis="b")
    path = tmp_path / "fused.h5"
    store.save(path)
    store = ProfileStore.open(path)
    fused = lookup_op_times(Session(model=LLAMA, plan=plan), store).times
    unfused = lookup_op_times(Session(model=_unfused(LLAMA), plan=plan), store).times
    assert fused["mlp_fwd"] == 1.0  # the row (the backward's is scaled for wgrad fusion)
    ku = op_key(_unfused(LLAMA), plan)
    for op in ("mlp_fwd", "mlp_bwd"):
        ratio = analytic_op_time(op, ku, store) / analytic_op_time(op, key, store)
        assert ratio > 1.0  # the separate kernels move more bytes
        assert unfused[op] == pytest.approx(fused[op] * ratio, rel=1e-9)
