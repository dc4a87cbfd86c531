"""Sliding-window attention as Megatron-Core models it (``--window-size``,
``--window-attn-skip-freq``): which layers are windowed, the band's FlashAttention FLOPs in closed
form, windowed layers' own attention ops in the graph (exact per layer, never an average), and
the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.model import model_math as mm
from core.plan.cluster import ClusterConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.graph import build_graph
from core.sim.op_times import lookup_op_times, weight_gradient_share
from core.sim.graph_types import KINDS, OPS
from core.store.profile_store import ProfileStore
from core.sim.simulate import simulate

PEAK, BW, EFF_MEM, OVERHEAD, G_MAX, G_HALF = 1e15, 2e12, 0.75, 4e-6, 0.8, 160.0


def store() -> ProfileStore:
    return ProfileStore("round-gpu", {"bf16": PEAK, "fp16": PEAK, "fp32": PEAK / 2}, 80e9, BW,
                        {"method": "analytic"}, {"collective_overhead_s": 1e-5})


def model(window=None, skip=None, layers=4) -> ModelConfig:
    """A small GPT-OSS-like dense model (GQA, SwiGLU, RMSNorm, RoPE, FlashAttention)."""
    return ModelConfig("tiny SWA", layers, 1024, 16, 2816, 4096, 32000, num_query_groups=4,
                       activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                       tied_embeddings=False, add_bias_linear=False, attention_kernel="flash",
                       window_size=window, window_attn_skip_freq=skip)


def session(m: ModelConfig, **kw) -> Session:
    base = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                global_batch_size=2, recompute="none")
    return Session(m, ParallelPlan(**{**base, **kw}),
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8,
                                 intra_node_bandwidth_gbytes_per_s=400.0))


def test_window_layers_follow_megatron_skip_frequency():
    assert not mm.window_layer_mask(model()).any()
    assert mm.window_layer_mask(model(128)).all()
    # GPT-OSS: N = 2, layer numbers 1, 3, ... windowed, 2, 4, ... full
    assert mm.window_layer_mask(model(128, 2)).tolist() == [True, False, True, False]
    assert mm.window_layer_mask(model(128, 3, layers=6)).tolist() == [True, True, False] * 2


def test_band_pairs_closed_form():
    s = 4096
    assert mm.attended_pairs(s) == s * s / 2
    assert mm.attended_pairs(s, 128) == s * 128 - 128 * 128 / 2
    # the causal triangle less the triangle beyond the window, and full at w >= s
    assert mm.attended_pairs(s, 1000) == s * s / 2 - (s - 1000) ** 2 / 2
    assert mm.attended_pairs(s, s) == mm.attended_pairs(s, 10 * s) == s * s / 2


def test_windowed_flash_kernel_flops():
    key = dict(b=1, s=4096, h=1024, a=16, g=4, kv=64, t=2, dtype="bf16", attn="flash",
               norm="rmsnorm", pos="rope")
    full = {k.name: k for k in mm.op_kernels("attention_fwd", key)}
    swa = {k.name: k for k in mm.op_kernels("attention_swa_fwd", {**key, "w": 128})}
    heads, dh, s, w = 8, 64, 4096, 128
    assert full["flash_attn"].flops == 4 * heads * dh * s * s / 2
    assert swa["flash_attn"].flops == 4 * heads * dh * (s * w - w * w / 2)
    bwd = {k.name: k for k in mm.op_kernels("attention_swa_bwd", {**key, "w": 128})}
    assert bwd["flash_attn_bwd"].flops == 2.5 * swa["flash_attn"].flops
    # every other kernel is the same (the window changes only the core's FLOPs)
    assert {n: (k.flops, k.bytes) for n, k in full.items() if not n.startswith("flash")} == \
        {n: (k.flops, k.bytes) for n, k in swa.items() if not n.startswith("flash")}
    assert swa["flash_attn"].bytes == full["flash_attn"].bytes
    with pytest.raises(KeyError, match="needs a window"):
        mm.op_kernels("attention_swa_fwd", key)


def test_graph_gives_each_layer_its_own_attention_op():
    st = store()
    s = session(model(128, 2))
    times = lookup_op_times(s, st).times
    g = build_graph(s, st)[0]
    fwd = g.kind == KINDS.index("forward")
    for op, layers in (("attention_swa_fwd", {0, 2}), ("attention_fwd", {1, 3})):
        sel = fwd & (g.op == OPS.index(op))
        assert set(g.layer[sel].tolist()) == layers
        assert g.duration_s[sel] == pytest.approx(times[op], rel=1e-15)
    # the windowed op differs from the full one by exactly the core's kernels: forward time
    # saved = closed-form FlashAttention time of the full minus the band (compute-bound here)
    heads, dh, sq, w, b = 8, 64, 4096, 128, 1
    x_full = (sq * sq * dh) ** (1 / 3)
    f_full = 4 * heads * dh * sq * sq / 2
    f_swa = 4 * heads * dh * (sq * w - w * w / 2)
    io = 2 * b * sq * dh * (2 * heads + 2 * 2)

    def flash(flops):
        eff = G_MAX * x_full / (x_full + G_HALF)
        return max(flops / (PEAK * eff), io / (BW * EFF_MEM)) + OVERHEAD
    assert times["attention_fwd"] - times["attention_swa_fwd"] == pytest.approx(
        flash(f_full) - flash(f_swa), rel=1e-9)
    # backward likewise, with both layers' backward ops present
    bwd = g.kind == KINDS.index("backward")
    assert set(g.layer[bwd & (g.op == OPS.index("attention_swa_bwd"))].tolist()) == {0, 2}
    assert set(g.layer[bwd & (g.op == OPS.index("attention_bwd"))].tolist()) == {1, 3}


def test_all_windowed_is_faster_by_the_sum_of_layer_savings():
    st = store()
    full, half, every = (session(model(*a)) for a in ((None,), (128, 2), (128,)))
    t_full, t_half, t_all = (simulate(x, st).report.iteration_time_s for x in (full, half, every))
    # one stage, serial: each windowed layer saves the same time; half the layers, half of it
    assert t_full > t_half > t_all
    assert t_full - t_half == pytest.approx((t_full - t_all) / 2, rel=1e-9)


def test_selective_recompute_of_a_windowed_core_and_zero_bubble_split():
    st = store()
    s = session(model(128, 2), recompute="selective", schedule="zb-h1")
    g = build_graph(s, st)[0]
    times = lookup_op_times(s, st).times
    rec = g.kind == KINDS.index("recompute")
    assert set(g.layer[rec & (g.op == OPS.index("attention_core_swa_fwd"))].tolist()) == {0, 2}
    assert set(g.layer[rec & (g.op == OPS.index("attention_core_fwd"))].tolist()) == {1, 3}
    assert times["attention_core_swa_fwd"] < times["attention_core_fwd"]
    # the split backward's W share: the core's s replaced by 2 * band / s
    h, sq, w = 1024, 4096, 128
    se = 2 * (sq * w - w * w / 2) / sq
    assert weight_gradient_share("attention_swa_bwd", s) == pytest.approx(8 * h / (16 * h + 8 * se))
    wg = g.kind == KINDS.index("wgrad")
    assert set(g.layer[wg & (g.op == OPS.index("attention_swa_bwd"))].tolist()) == {0, 2}


@pytest.mark.parametrize("m, plan, field, words", [
    (dataclasses.replace(model(128), attention_kernel="unfused"), {}, "model.window_size",
     "needs attention_kernel = flash"),
    (model(None, 2), {}, "model.window_attn_skip_freq", "needs a window_size"),
    (model(0), {}, "model.window_size", "at least 1"),
    (model(128), dict(context_parallel=2), "plan.context_parallel", "sliding-window attention"),
])
def test_refusals(m, plan, field, words):
    errs = {e.field: e.message for e in validate(session(m, **plan))}
    assert field in errs and words in errs[field]


def test_full_model_unchanged_by_the_window_fields():
    st = store()
    a = build_graph(session(model()), st)[0]
    b = build_graph(session(model(10 ** 6)), st)[0]  # a window longer than the sequence
    assert np.allclose(a.duration_s, b.duration_s, rtol=0, atol=0)


def test_megatron_window_arguments_round_trip(tmp_path):
    from core.io.megatron.arguments import MegatronArgsError
    from core.io.megatron.to_session import import_file
    from core.io.megatron.export import export_script
    s = session(model(128, 2))
    script = export_script(s)
    assert "--window-size '(128,0)' \\\n    --window-attn-skip-freq 2 \\" in script
    path = tmp_path / "run.sh"
    path.write_text(script)
    back = import_file(path, name=s.model.name).session
    assert (back.model.window_size, back.model.window_attn_skip_freq) == (128, 2)
    # Megatron's other spellings; a non-causal window is refused by name
    for text, w in (("'(4096, 0)'", 4096), ("4096,0", 4096)):
        path.write_text(script.replace("'(128,0)'", text))
        assert import_file(path, name=s.model.name).session.model.window_size == w
    path.write_text(script.replace("'(128,0)'", "'(128,128)'"))
    with pytest.raises(MegatronArgsError, match="to the right"):
        import_file(path, name=s.model.name)


@pytest.mark.parametrize("moe", [False, True])
def test_sweep_times_windowed_interleaved_plans_as_simulate(moe):
    """With 2 layers per chunk and every third layer full, the stages hold their windowed
    layers at different places: no stage stands for another (core.sim.stages._middle_stages_alike),
    and the sweep's fast path gives simulate's time."""
    import dataclasses

    from core.io.session import load_any
    from core.sim.simulate import simulate
    from core.studies.sweep import SweepSpace, run_sweep
    from tests.conftest import ROOT

    s = load_any(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json")
    kw = dict(attention_kernel="flash", window_size=512, window_attn_skip_freq=3)
    if moe:
        kw.update(num_experts=8, moe_layer_frequency=2, moe_first_dense_layers=1)
    pl = dataclasses.replace(s.plan, tensor_parallel=2, pipeline_parallel=4, data_parallel=1,
                             micro_batch_size=2, schedule="interleaved", recompute="none",
                             virtual_pipeline_stages=3, sequence_parallel=True)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, **kw), plan=pl)
    space = SweepSpace(hold_session_values=True, num_gpus=8, tensor_parallel=[2], pipeline_parallel=[4], data_parallel=[1],
                       micro_batch_sizes=[2], schedules=["interleaved"], recompute=["none"],
                       virtual_pipeline_stages=[3], sequence_parallel=[True], expert_parallel=[1])
    res = run_sweep(s, space)
    assert res.num_plans == 1
    assert float(res.iteration_time_s[0]) == pytest.approx(
        simulate(s).report.iteration_time_s, rel=1e-12)
