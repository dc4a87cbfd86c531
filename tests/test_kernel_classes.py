"""Kernel classes with their own efficiencies (core.model.ops.kernel_class): grouped expert
GEMMs and FlashAttention each time at the dense curve times their own relative efficiency, the
defaults leave every analytic time as it was, the shared fit recovers a grouped-GEMM efficiency
and `vtrain profile show` names a fitted parameter that ended at a bound of its fit."""

from __future__ import annotations

import numpy as np
import pytest

from core.accuracy.calibrate import apply_fit, fit, param_bounds
from core.accuracy.shared_fit import (KERNEL_CLASS_PARAMS, SHARED_BOUNDS, SHARED_FIXED,
                                      analytic_bases, parameters_at_bound, shared_fit_kwargs,
                                      supported_params)
from core.cli import main
from core.model.base import Kernel
from core.model.ops import (DEFAULT_OP_MODEL, KERNEL_DENSE_GEMM, KERNEL_FLASH, KERNEL_GROUPED_GEMM,
                            KERNEL_MEMORY, analytic_op_time, kernel_arrays, kernel_class,
                            kernel_times)
from core.sim.op_times import op_key
from core.sim.simulate import simulate
from core.store.profiles_gen import generate_store
from tests.test_calibrate_shared import TRUTH, _moe_session, _runs, _session

PEAK, BW = 1e15, 3e12
P = {**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.7, "gemm_half_size": 200.0,
     "kernel_overhead_s": 0.0}


def _one(kernel: Kernel, **params: float) -> float:
    ks = [kernel]
    return float(kernel_times(*kernel_arrays(ks), PEAK, BW, {**P, **params}, None,
                              kernel_class(ks))[0])


def test_kernel_classes_by_name():
    ks = [Kernel("experts_fc1", 1.0, 1.0, 8, 8, 8, 4), Kernel("experts_fc2_wgrad", 1.0, 1.0, 8, 8, 8),
          Kernel("flash_attn", 1.0, 1.0, 8, 8, 8), Kernel("flash_attn_bwd", 1.0, 1.0, 8, 8, 8),
          Kernel("fc1", 1.0, 1.0, 8, 8, 8), Kernel("shared_fc1", 1.0, 1.0, 8, 8, 8),
          Kernel("bias_swiglu", 0.0, 1.0)]
    assert kernel_class(ks).tolist() == [KERNEL_GROUPED_GEMM] * 2 + [KERNEL_FLASH] * 2 + [
        KERNEL_DENSE_GEMM] * 2 + [KERNEL_MEMORY]


@pytest.mark.parametrize("name,param", [("experts_fc1", "grouped_gemm_efficiency"),
                                        ("flash_attn", "flash_attention_efficiency")])
def test_a_class_runs_at_the_dense_curve_times_its_own_efficiency(name, param):
    """Compute-bound: time = flops / (peak * eff_max * x / (x + half) * eff_class), x the
    geometric mean of M, N, K (per expert GEMM: the roll-off takes the per-expert rows)."""
    m, n, k, batch = 512, 4096, 2048, 8
    flops = 2.0 * m * n * k * batch
    kern = Kernel(name, flops, 1.0, m, n, k, batch)
    x = (m * n * k) ** (1 / 3)
    curve = 0.7 * x / (x + 200.0)
    assert _one(kern, **{param: 0.6}) == pytest.approx(flops / (PEAK * curve * 0.6), rel=1e-12)
    assert _one(kern) == pytest.approx(flops / (PEAK * curve), rel=1e-12)
    # a dense GEMM of the same shape ignores the class's efficiency
    dense = Kernel("fc1", flops, 1.0, m, n, k, batch)
    assert _one(dense, **{param: 0.6}) == _one(dense)
    # memory-bound: the efficiency does not reach a kernel whose bytes set its time
    heavy = Kernel(name, 1.0, 1e9, m, n, k, batch)
    assert _one(heavy, **{param: 0.6}) == pytest.approx(1e9 / (BW * P["memory_efficiency"]))


def test_defaults_leave_analytic_op_times_bit_identical():
    """Stores without the new parameters (every analytic store) time each op exactly as the
    dense curve did: relative efficiency 1."""
    store = generate_store("H100-SXM5-80GB")
    s = _moe_session("H100-SXM5-80GB", 8, 8)
    key = op_key(s)
    without = {k: v for k, v in store.op_model.items()
               if k not in ("grouped_gemm_efficiency", "flash_attention_efficiency")}
    for op in ("experts_fwd", "experts_bwd", "attention_fwd", "attention_bwd", "mlp_fwd"):
        try:
            store.op_model = without
            a = analytic_op_time(op, key, store)
            store.op_model = {**without, "grouped_gemm_efficiency": 1.0,
                              "flash_attention_efficiency": 1.0}
            b = analytic_op_time(op, key, store)
        except KeyError:  # an op whose key needs columns this key lacks
            continue
        assert a == b and a > 0, op
    t1 = simulate(s, apply_fit(store, without)).report.iteration_time_s
    t2 = simulate(s, apply_fit(store, {**without, "grouped_gemm_efficiency": 1.0,
                                       "flash_attention_efficiency": 1.0})).report.iteration_time_s
    t3 = simulate(s, apply_fit(store, {**without, "grouped_gemm_efficiency": 0.5})).report.iteration_time_s
    assert t1 == t2 < t3


def test_grouped_gemm_efficiency_is_supported_only_beside_dense_runs_and_recovered():
    """MoE runs beside dense ones pin the grouped expert GEMMs' efficiency apart from the dense
    curve's; the shared fit recovers it (within 3 %) with the others."""
    truth = {**TRUTH, "grouped_gemm_efficiency": 0.55}
    moe = [_moe_session(g, ep, d, h) for g, ep, d, h in (
        ("H100-SXM5-80GB", 8, 8, 2048), ("H100-SXM5-80GB", 4, 8, 4096),
        ("B200-180GB", 8, 16, 2048), ("B200-180GB", 4, 8, 4096))]
    dense = _runs()[0][:6]
    base = analytic_bases()
    assert "grouped_gemm_efficiency" not in supported_params(moe, kernel_classes=True)
    assert "grouped_gemm_efficiency" not in supported_params(dense, kernel_classes=True)
    sessions = moe + dense
    # off by default (the shipped stores' fit, docs/accuracy.md): only when asked
    assert not set(KERNEL_CLASS_PARAMS) & set(shared_fit_kwargs(base, sessions)["params"])
    kw = shared_fit_kwargs(base, sessions, kernel_classes=True)
    assert "grouped_gemm_efficiency" in kw["params"]
    assert "flash_attention_efficiency" not in kw["params"]  # one sequence length
    # the truth has the host time per op call the shared fit takes (SHARED_FIXED)
    measured = np.array([simulate(x, apply_fit(base(x), {**base(x).op_model, **SHARED_FIXED,
                                                         **truth}))
                         .report.iteration_time_s for x in sessions])
    res = fit(sessions, measured, base, **{**kw, "prior": 0.0})
    for name, value in truth.items():
        assert res.op_model[name] == pytest.approx(value, rel=0.03), name


def test_flash_efficiency_is_supported_with_two_sequence_lengths():
    one = [_session("H100-SXM5-80GB", 1, 8, 2, 1024)]
    two = one + [_session("H100-SXM5-80GB", 1, 8, 2, 1024)]
    two[1].model.seq_length = 8192
    assert "flash_attention_efficiency" not in supported_params(one, kernel_classes=True)
    assert "flash_attention_efficiency" in supported_params(two, kernel_classes=True)
    assert "flash_attention_efficiency" not in supported_params(two)


def test_bounds_of_the_class_efficiencies():
    assert param_bounds("grouped_gemm_efficiency") == (0.3, 1.2)
    assert param_bounds("flash_attention_efficiency") == (0.3, 1.2)
    assert param_bounds("gemm_efficiency_max", SHARED_BOUNDS) == (0.65, 1.0)


def test_profile_show_names_a_parameter_at_its_bound(tmp_path, capsys):
    store = generate_store("H100-SXM5-80GB")
    store = apply_fit(store, {**store.op_model, "gemm_efficiency_max": 0.65,
                              "grouped_gemm_efficiency": 0.8})
    store.provenance = {
        "method": "calibrated", "parameters": dict(store.op_model),
        "fitted_parameters": ["gemm_efficiency_max", "grouped_gemm_efficiency", "memory_efficiency"],
        "parameter_bounds": {"gemm_efficiency_max": {"low": 0.65, "high": 1.0},
                             "grouped_gemm_efficiency": {"low": 0.3, "high": 1.2},
                             "memory_efficiency": {"low": 0.4, "high": 1.0}}}
    at = parameters_at_bound(store.provenance)
    assert at == ["gemm_efficiency_max = 0.65 (lower bound 0.65)"]
    path = tmp_path / "s.h5"
    store.save(path)
    capsys.readouterr()
    assert main(["profile", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "at a bound of its fit" in out and "gemm_efficiency_max = 0.65" in out
    assert out.count("at a bound of its fit") == 1
    # a store without bounds in its provenance (written before they were kept): no line
    assert parameters_at_bound({"parameters": {"gemm_efficiency_max": 0.65},
                                "fitted_parameters": ["gemm_efficiency_max"]}) == []


def test_fp32_plans_are_timed_at_the_fp32_peak_never_bf16():
    """An fp32 plan's GEMMs run at the store's ``fp32`` peak (PyTorch's default: TF32 matmuls
    off); the BF16 or TF32 peaks never reach them, and a store without an fp32 peak refuses
    the plan by name (TF32 matmuls are ``plan.tf32``'s, off here: tests/test_tf32.py)."""
    store = generate_store("H100-SXM5-80GB")
    s = _session("H100-SXM5-80GB", 1, 1, 1, 1024)
    s.plan.precision = "fp32"
    key = op_key(s)
    t = analytic_op_time("mlp_fwd", key, store)
    store.peak_flops = {**store.peak_flops, "bf16": 1e18, "tf32": 1e18}
    assert analytic_op_time("mlp_fwd", key, store) == t
    store.peak_flops = {**store.peak_flops, "fp32": store.peak_flops["fp32"] / 2}
    assert analytic_op_time("mlp_fwd", key, store) > 1.5 * t
    store.peak_flops = {k: v for k, v in store.peak_flops.items() if k != "fp32"}
    with pytest.raises(KeyError, match="fp32"):
        analytic_op_time("mlp_fwd", key, store)


@pytest.mark.parametrize("argv", [
    ["validate", "runs.csv", "--kernel-classes"],  # no --cross-validate: nothing is fitted
    ["validate", "runs.csv", "--cross-validate", "5", "--profile", "x.h5", "--kernel-classes"],
    ["calibrate", "runs.csv", "--profile", "x.h5", "--out", "y.h5", "--kernel-classes"],
])
def test_kernel_classes_option_without_a_shared_fit_is_refused(argv, tmp_path, monkeypatch, capsys):
    """``--kernel-classes`` acts on the shared fit only: elsewhere it would be ignored, so it
    is refused by name (exit 2) before any file is read."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs.csv").write_text("")
    assert main(argv) == 2
    assert "--kernel-classes" in capsys.readouterr().err


def test_the_shipped_a100_store_names_its_overheads_at_zero():
    """The A100 store (fitted on all of FIT_PARAMS, bounds recorded by scripts/store_fit_bounds.py):
    its per-kernel, per-launch, per-iteration and per-collective overheads ended at their lower
    bound, 0; the efficiencies did not."""
    from core.store.profile_store import ProfileStore
    from tests.conftest import ROOT
    store = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    at = [line.split(" = ")[0] for line in parameters_at_bound(store.provenance)]
    assert at == ["kernel_overhead_s", "kernel_launch_s", "iteration_overhead_s",
                  "collective_overhead_s"]
