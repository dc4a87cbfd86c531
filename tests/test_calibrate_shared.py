"""The shared fit of several GPU kinds (core.accuracy.shared_fit: analytic_bases, shared_fit_kwargs,
shared_stores; core.accuracy.calibrate.cross_validate_files; ``vtrain calibrate --out-dir``) on synthetic runs whose
true parameters are known: the fit must recover them and predict held-out runs exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.accuracy.calibrate import (apply_fit, cross_validate, fit, linearize, predict_linearized,
                                     shared_fit_params)
from core.accuracy.shared_fit import (SHARED_FIXED, analytic_bases, shared_fit_kwargs, shared_stores,
                                      supported_params, use_shared_fit)
from core.plan.parallel import PRECISIONS, ParallelPlan
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.session import Session
from core.sim.simulate import simulate

#: The truth the synthetic runs are simulated with (fractions of each GPU's peaks).
TRUTH = {"gemm_efficiency_max": 0.70, "memory_efficiency": 0.55, "inter_node_efficiency": 0.45}


def _session(gpu: str, t: int, d: int, b: int, h: int = 1024, layers: int = 4) -> Session:
    model = ModelConfig(f"llama h={h}", layers, h, 16, 4 * h, 2048, 32000, num_query_groups=8,
                        activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                        tied_embeddings=False, add_bias_linear=False, attention_kernel="flash")
    plan = ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=d, micro_batch_size=b,
                        global_batch_size=b * d * 2, recompute="none", precision="bf16")
    gpn = 72 if gpu == "GB200-NVL72" else 8
    return Session(model, plan, ClusterConfig(gpu=gpu, gpus_per_node=min(gpn, 8),
                                              inter_node_bandwidth_gbits_per_s=400.0 * 8),
                   CostConfig())


def _runs():
    """Runs on two GPU kinds: compute-bound, memory-heavy (small h) and network-bound (d across
    nodes), so each parameter shows."""
    plans = [("H100-SXM5-80GB", 1, 8, 4, 2048), ("H100-SXM5-80GB", 2, 16, 1, 1024),
             ("H100-SXM5-80GB", 4, 2, 2, 2048), ("H100-SXM5-80GB", 1, 32, 1, 512),
             ("B200-180GB", 1, 8, 4, 2048), ("B200-180GB", 2, 16, 1, 1024),
             ("B200-180GB", 8, 1, 8, 2048), ("B200-180GB", 1, 32, 2, 512),
             ("H100-SXM5-80GB", 8, 4, 2, 4096), ("B200-180GB", 4, 8, 1, 4096)]
    sessions = [_session(g, t, d, b, h) for g, t, d, b, h in plans]
    base = analytic_bases()
    truth_stores = {}
    measured = []
    for s in sessions:
        b = base(s)
        if id(b) not in truth_stores:
            truth_stores[id(b)] = apply_fit(b, {**b.op_model, **SHARED_FIXED, **TRUTH})
        measured.append(simulate(s, truth_stores[id(b)]).report.iteration_time_s)
    return sessions, np.array(measured), base


def test_shared_fit_parameters_are_the_data_sheet_fractions_and_no_shape_factors():
    assert {"gemm_efficiency_max", "memory_efficiency", "inter_node_efficiency"} <= set(
        shared_fit_params())
    sessions, _, base = _runs()
    kw = shared_fit_kwargs(base, sessions)
    assert kw["corrections"] is False and set(kw["params"]) == set(TRUTH)
    # the parameters not fitted stay at the spec's values (resources/gpu_specs)
    assert kw["start"]["gemm_half_size"] == 224.0 and kw["start"]["kernel_overhead_s"] == 4e-6
    assert use_shared_fit(sessions) and not use_shared_fit([_session("A100-SXM4-80GB", 1, 8, 1)])
    # what the runs cannot pin down stays at the spec's value
    one_node = [s for s in sessions if s.plan.num_gpus <= s.cluster.gpus_per_node]
    assert "inter_node_efficiency" not in supported_params(one_node)
    fp16 = [dataclasses.replace(s, plan=dataclasses.replace(s.plan, precision="fp16")) for s in one_node]
    assert "gemm_efficiency_max" in supported_params(fp16)
    if "fp8" in PRECISIONS:
        fp8 = [dataclasses.replace(s, plan=dataclasses.replace(s.plan, precision="fp8")) for s in one_node]
        assert "gemm_efficiency_max" not in supported_params(fp8)


def test_linearized_time_equals_the_simulated_one():
    sessions, _, base = _runs()
    for s in sessions[:3]:
        b = base(s)
        p = {**b.op_model, **TRUTH}
        row = linearize(s, b, p)
        sim = simulate(s, apply_fit(b, p)).report.iteration_time_s
        assert predict_linearized([row], p)[0] == pytest.approx(sim, rel=1e-5)


def test_shared_fit_recovers_the_true_parameters_and_cross_validates_exactly():
    sessions, measured, base = _runs()
    kw = {**shared_fit_kwargs(base, sessions), "prior": 0.0}  # the runs alone
    res = fit(sessions, measured, base, **kw)
    for name, value in TRUTH.items():
        assert res.op_model[name] == pytest.approx(value, rel=0.02), name
    assert res.corrections == {} and res.train_metrics["mape_percent"] < 0.5
    pred, met = cross_validate(sessions, measured, base, folds=5, **kw)
    assert met["n"] == len(sessions) and met["mape_percent"] < 0.5
    # one store per kind, the shared parameters on each kind's own peaks
    stores = shared_stores(res, ["H100-SXM5-80GB", "B200-180GB", "H200-SXM-141GB"], base,
                           ["synthetic.csv"], {"all rows": met},
                           {"H100-SXM5-80GB": 5, "B200-180GB": 5}, {}, None)
    h200 = stores["H200-SXM-141GB"]
    assert h200.provenance["method"] == "calibrated" and h200.provenance["rows_of_this_kind"] == 0
    assert "no run of H200-SXM-141GB" in h200.provenance["note"]
    assert h200.peak_flops["bf16"] == 989e12 and stores["B200-180GB"].peak_flops["bf16"] == 2250e12
    for store in stores.values():
        assert store.op_model["gemm_efficiency_max"] == res.op_model["gemm_efficiency_max"]
        # the host time per op call is the A100 fit's, carried into every store, not fitted
        assert store.op_model["op_overhead_s"] == SHARED_FIXED["op_overhead_s"]
    s = sessions[0]
    assert simulate(s, stores[s.cluster.gpu]).report.iteration_time_s == pytest.approx(
        measured[0], rel=0.01)


def test_generic_form_predicts_what_the_simulator_does(monkeypatch):
    """Where the kernel form does not reproduce the simulator's op times (an op model that
    composes them otherwise: FP8, MoE ...), compute is evaluated through the simulator's own
    lookups; forced here on a plan the kernel form handles, both agree with the simulator."""
    import core.accuracy.linearize as lin
    sessions, _, base = _runs()
    s = sessions[1]  # t=2, d=16: across two nodes
    b = base(s)
    start = {**b.op_model, "inter_node_efficiency": 0.8}
    moved = {**b.op_model, **TRUTH}
    kernel_row = linearize(s, b, start)
    assert kernel_row.generic is None
    monkeypatch.setattr(lin, "_kernel_form_agrees", lambda *a: False)
    generic_row = linearize(s, b, start)
    assert generic_row.generic is not None
    sim = simulate(s, apply_fit(b, moved)).report.iteration_time_s
    for row in (kernel_row, generic_row):
        assert predict_linearized([row], moved)[0] == pytest.approx(sim, rel=1e-3)


def test_calibrate_out_dir_writes_one_store_per_kind_from_a_csv(tmp_path, capsys):
    """Synthetic runs written as session-column rows (core.accuracy.measured.session_columns), then
    ``vtrain calibrate CSV --out-dir``: one calibrated store per kind, the truth recovered."""
    import csv
    import json

    from core.cli import main
    from core.store.profile_store import ProfileStore
    from core.accuracy.measured import session_columns
    sessions, measured, _ = _runs()
    rows = []
    for s, y in zip(sessions, measured):
        rows.append({**session_columns(s), "source": "synthetic",
                     "measured_iteration_time_s": repr(float(y))})
    path = tmp_path / "synthetic.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "stores"
    assert main(["calibrate", str(path), "--out-dir", str(out), "--folds", "2", "--gpus", "H200",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["stores"]) == ["B200-180GB.h5", "H100-SXM5-80GB.h5", "H200-SXM-141GB.h5"]
    assert doc["rows_by_kind"] == {"B200-180GB": 5, "H100-SXM5-80GB": 5}
    # the shared prior (a tenth of a run) pulls a little: more since the host time per op call
    # (SHARED_FIXED) sets the time of these small runs' short ops, which then tell the GEMM and
    # HBM efficiencies nothing (0.659 and 0.619 for 0.70 and 0.55; without the prior, exact)
    for name, value in TRUTH.items():
        assert doc["parameters"][name] == pytest.approx(value, rel=0.15)
    assert doc["cross_validation"]["all rows"]["mape_percent"] < 2.0
    h100 = ProfileStore.open(out / "H100-SXM5-80GB.h5")
    p = h100.provenance
    assert p["method"] == "calibrated" and p["rows_of_this_kind"] == 5 and p["num_shape_factors"] == 0
    assert p["cross_validation_this_kind"]["n"] == 5 and p["base_provenance"]["method"] == "analytic"
    assert h100.residuals is not None and len(h100.residuals) == 10
    # a plan on the calibrated store predicts its run
    assert simulate(sessions[0], h100).report.iteration_time_s == pytest.approx(measured[0], rel=0.01)
    # bad combinations are refused by name, exit status 2
    assert main(["calibrate", str(path), "--out-dir", str(out), "--profile", "x.h5"]) == 2
    assert main(["calibrate", str(path), "--out-dir", str(out), "--gpus", "H100-96GB"]) == 2
    assert "H100-96GB: no shipped GPU kind" in capsys.readouterr().err
    # a kind without a data sheet needs runs of its own: its store is never the reference peaks
    assert main(["calibrate", str(path), "--out-dir", str(out), "--gpus",
                 "H100-96GB-HBM2e-500W"]) == 2
    assert "H100-96GB-HBM2e-500W has no data sheet of its own" in capsys.readouterr().err
    assert not (out / "H100-96GB-HBM2e-500W.h5").exists()
    assert main(["calibrate", str(path), "--gpus", "H200"]) == 2


def test_fp8_gemm_efficiency_is_recovered_beside_the_bf16_one():
    """BF16 and FP8 runs together pin both GEMM efficiencies; FP8 runs alone leave the BF16 one
    at the spec's value (core.accuracy.shared_fit.supported_params)."""
    truth = {**TRUTH, "fp8_gemm_efficiency": 0.8}
    plans = [("H100-SXM5-80GB", 1, 8, 4, 2048), ("B200-180GB", 2, 16, 1, 1024),
             ("H100-SXM5-80GB", 4, 2, 2, 2048), ("B200-180GB", 1, 32, 2, 512),
             ("H100-SXM5-80GB", 8, 4, 2, 4096), ("B200-180GB", 4, 8, 1, 4096)]
    sessions = []
    for g, t, d, b, h in plans:
        for precision in ("bf16", "fp8"):
            s = _session(g, t, d, b, h)
            s.plan.precision = precision
            s.plan.fp8_recipe = "tensorwise" if precision == "fp8" else None
            sessions.append(s)
    base = analytic_bases()
    measured = np.array([simulate(s, apply_fit(base(s), {**base(s).op_model, **SHARED_FIXED, **truth}))
                         .report.iteration_time_s for s in sessions])
    kw = {**shared_fit_kwargs(base, sessions), "prior": 0.0}
    assert "fp8_gemm_efficiency" in kw["params"] and "gemm_efficiency_max" in kw["params"]
    res = fit(sessions, measured, base, **kw)
    for name, value in truth.items():
        assert res.op_model[name] == pytest.approx(value, rel=0.03), name
    only_fp8 = [s for s in sessions if s.plan.precision == "fp8"]
    assert "gemm_efficiency_max" not in supported_params(only_fp8)


def _moe_session(gpu: str, ep: int, d: int, h: int = 1024) -> Session:
    s = _session(gpu, 1, d, 1, h)
    s.model.num_experts, s.model.moe_top_k, s.model.moe_ffn_hidden_size = 16, 2, h
    s.plan.expert_parallel = ep
    return s


def _linearized_follows_and_fit_recovers(sessions, s, base, kw, truth) -> None:
    """``s``'s linearized time equals the simulator's when each parameter of ``truth`` moves
    alone, and the shared fit (``kw``, no prior) recovers ``truth`` from the sessions' times
    simulated under it (within 3 %)."""
    b = base(s)
    row = linearize(s, b, {**b.op_model})
    for name, value in truth.items():
        moved = {**b.op_model, name: value}
        assert predict_linearized([row], moved)[0] == pytest.approx(
            simulate(s, apply_fit(b, moved)).report.iteration_time_s, rel=1e-5), name
    measured = np.array([simulate(x, apply_fit(base(x), {**base(x).op_model, **SHARED_FIXED, **truth}))
                         .report.iteration_time_s for x in sessions])
    res = fit(sessions, measured, base, **{**kw, "prior": 0.0})
    for name, value in truth.items():
        assert res.op_model[name] == pytest.approx(value, rel=0.03), name


def test_moe_runs_linearize_exactly_and_pin_the_all_to_all_efficiency():
    """Expert-parallel runs (token dispatch and combine as all-to-all, within and across nodes):
    the linearized time follows the simulator when the parameters move, and the shared fit
    recovers the all-to-all efficiency beside the others."""
    truth = {**TRUTH, "all_to_all_efficiency": 0.6}
    sessions = [_moe_session(g, ep, d, h) for g, ep, d, h in (
        ("H100-SXM5-80GB", 8, 8, 1024), ("H100-SXM5-80GB", 16, 16, 1024),
        ("B200-180GB", 8, 16, 2048), ("B200-180GB", 16, 32, 1024), ("H100-SXM5-80GB", 4, 8, 2048))]
    sessions += _runs()[0][:5]
    base = analytic_bases()
    kw = shared_fit_kwargs(base, sessions)
    assert "all_to_all_efficiency" in kw["params"]
    # each term exact (across nodes the all-to-all divides by both efficiencies: re-linearized
    # each round)
    _linearized_follows_and_fit_recovers(sessions, sessions[1], base, kw, truth)


def test_flex_runs_pin_their_own_all_to_all_efficiency():
    """Runs that dispatch with DeepEP / HybridEP (the flex dispatcher) beside runs with
    Megatron's NCCL alltoall: the shared fit has an efficiency for each (supported only by runs
    of that dispatcher), the linearized time follows the simulator when either moves, and the
    fit recovers both."""
    truth = {**TRUTH, "all_to_all_efficiency": 0.6, "flex_all_to_all_efficiency": 0.9}
    plain = [_moe_session(g, ep, d, h) for g, ep, d, h in (
        ("H100-SXM5-80GB", 8, 8, 1024), ("H100-SXM5-80GB", 16, 16, 1024),
        ("B200-180GB", 16, 32, 1024))]
    flex = [_moe_session(g, ep, d, h) for g, ep, d, h in (
        ("H100-SXM5-80GB", 16, 16, 2048), ("B200-180GB", 16, 32, 2048),
        ("H100-SXM5-80GB", 8, 16, 1024))]
    for s in flex:
        s.plan.moe_token_dispatcher_type = "flex"
    base = analytic_bases()
    assert "flex_all_to_all_efficiency" not in shared_fit_kwargs(base, plain)["params"]
    assert "all_to_all_efficiency" not in shared_fit_kwargs(base, flex)["params"]
    # runs of the alltoall dispatcher alone: the unpinned flex efficiency follows the fitted
    # NCCL one (a store then times flex as it did before the split), not the default 1
    only = plain + _runs()[0][:3]
    kw0 = shared_fit_kwargs(base, only)
    y = np.array([simulate(x, apply_fit(base(x), {**base(x).op_model, **SHARED_FIXED, **truth}))
                  .report.iteration_time_s for x in only])
    res0 = fit(only, y, base, **{**kw0, "prior": 0.0})
    assert res0.op_model["all_to_all_efficiency"] == pytest.approx(0.6, rel=0.03)
    assert res0.op_model["flex_all_to_all_efficiency"] == res0.op_model["all_to_all_efficiency"]
    sessions = plain + flex + _runs()[0][:5]
    kw = shared_fit_kwargs(base, sessions)
    assert {"all_to_all_efficiency", "flex_all_to_all_efficiency"} <= set(kw["params"])
    _linearized_follows_and_fit_recovers(sessions, flex[1], base, kw, truth)


def test_the_prior_keeps_what_the_runs_do_not_decide_at_the_spec_value():
    """One node only: the network efficiency moves no run. Without a prior nothing holds it;
    with the shared prior it stays at the spec's value while the others are fitted."""
    sessions, measured, base = _runs()
    one = [i for i, s in enumerate(sessions) if s.plan.num_gpus <= s.cluster.gpus_per_node]
    kw = shared_fit_kwargs(base, [sessions[i] for i in one])
    assert kw["prior"] > 0 and "inter_node_efficiency" not in kw["params"]
    params = kw["params"] + ["inter_node_efficiency"]
    res = fit([sessions[i] for i in one], measured[one], base, **{**kw, "params": params})
    assert res.op_model["inter_node_efficiency"] == pytest.approx(kw["start"]["inter_node_efficiency"])
    assert res.op_model["gemm_efficiency_max"] == pytest.approx(TRUTH["gemm_efficiency_max"], rel=0.1)


@pytest.mark.parametrize("extra", [
    dict(window_size=128, window_attn_skip_freq=2),  # sliding-window layers (GPT-OSS's pattern)
    dict(window_size=256),
])
def test_linearized_form_times_windowed_layers_as_the_simulator(extra):
    """The kernel form of a plan with sliding-window layers gives the iteration time the
    simulator gives (their attention ops carry the window, as core.sim.op_times.lookup_op_times)."""
    s = _session("H100-SXM5-80GB", 2, 2, 1)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, **extra))
    b = analytic_bases()(s)
    row = linearize(s, b, dict(b.op_model))
    assert row.generic is None  # the kernel form agreed with the lookups
    (pred,) = predict_linearized([row], dict(b.op_model))
    assert pred == pytest.approx(simulate(s, b).report.iteration_time_s, rel=1e-5)


def test_the_shared_fit_keeps_the_gemm_and_hbm_efficiencies_within_what_hardware_does():
    """Runs simulated with an HBM efficiency of 0.25 and a GEMM efficiency of 0.5 (below what any
    modern GPU does): the runs alone recover them without the shared bounds, and the shared fit
    stops at its bounds (core.accuracy.shared_fit.SHARED_BOUNDS: 0.4 and 0.65)."""
    from core.accuracy.shared_fit import SHARED_BOUNDS
    low = {"gemm_efficiency_max": 0.5, "memory_efficiency": 0.25, "inter_node_efficiency": 0.45}
    sessions, _, base = _runs()
    measured = []
    for s in sessions:
        b = base(s)
        measured.append(simulate(s, apply_fit(b, {**b.op_model, **SHARED_FIXED, **low})).report.iteration_time_s)
    kw = {**shared_fit_kwargs(base, sessions), "prior": 0.0}
    assert kw["bounds"] == SHARED_BOUNDS == {"memory_efficiency": (0.4, 1.0),
                                             "gemm_efficiency_max": (0.65, 1.0)}
    free = fit(sessions, np.array(measured), base, **{**kw, "bounds": None})
    assert free.op_model["memory_efficiency"] == pytest.approx(0.25, rel=0.02)
    assert free.op_model["gemm_efficiency_max"] == pytest.approx(0.5, rel=0.02)
    bounded = fit(sessions, np.array(measured), base, **kw)
    assert bounded.op_model["memory_efficiency"] == pytest.approx(0.4)
    assert bounded.op_model["gemm_efficiency_max"] == pytest.approx(0.65)


def test_peak_fraction_is_recovered_for_the_kind_without_a_data_sheet_and_stays_1_elsewhere():
    """Runs on the SXM5 H100 and on the 500 W H100 (whose spec holds the SXM5's peaks and says
    peak_fraction_fitted) simulated with the 500 W part sustaining 0.7 of them: the fit finds
    0.7 for that kind only; the SXM5 store keeps 1 and its runs are untouched by it."""
    from core.accuracy.calibrate import store_op_model
    from core.store.gpu_spec import fits_peak_fraction
    from core.model.ops import kernel_times
    capped = "H100-96GB-HBM2e-500W"
    plans = [(g, t, d, b, h) for g in ("H100-SXM5-80GB", capped)
             for t, d, b, h in ((1, 8, 4, 2048), (2, 16, 1, 1024), (4, 2, 2, 2048),
                                (1, 32, 1, 512), (8, 4, 2, 4096))]
    sessions = [_session(g, t, d, b, h) for g, t, d, b, h in plans]
    base = analytic_bases()
    truth = {**TRUTH, "peak_fraction": 0.7}
    measured = np.array([simulate(s, apply_fit(base(s), {**base(s).op_model, **SHARED_FIXED, **truth}))
                         .report.iteration_time_s for s in sessions])
    assert fits_peak_fraction(base(sessions[-1])) and not fits_peak_fraction(base(sessions[0]))
    assert store_op_model(base(sessions[0]), truth)["peak_fraction"] == 1.0
    kw = {**shared_fit_kwargs(base, sessions), "prior": 0.0}
    assert "peak_fraction" in kw["params"]
    assert "peak_fraction" not in supported_params(sessions[:5])  # no run of the capped kind
    assert "peak_fraction" not in supported_params(sessions[5:])  # no data-sheet run beside
    res = fit(sessions, measured, base, **kw)
    assert res.op_model["peak_fraction"] == pytest.approx(0.7, rel=0.02)
    assert res.op_model["gemm_efficiency_max"] == pytest.approx(TRUTH["gemm_efficiency_max"],
                                                                rel=0.02)
    stores = shared_stores(res, ["H100-SXM5-80GB", capped], base, ["synthetic.csv"], {}, {}, {},
                           None, kw["params"])
    assert stores["H100-SXM5-80GB"].op_model["peak_fraction"] == 1.0
    assert "peak_fraction" not in stores["H100-SXM5-80GB"].provenance["fitted_parameters"]
    assert stores[capped].op_model["peak_fraction"] == pytest.approx(0.7, rel=0.02)
    assert "peak_fraction" in stores[capped].provenance["fitted_parameters"]
    # a compute-bound GEMM takes 1/peak_fraction as long (core.model.ops.kernel_times, closed form)
    one = dict(kernel_overhead_s=0.0, gemm_half_size=0.0, gemm_efficiency_max=0.8)
    args = (np.array([1e15]), np.array([1.0]), np.array([8192.0]), np.array([True]), 1e15, 1e12)
    t1 = kernel_times(*args, {**one, "peak_fraction": 1.0})[0]
    assert t1 == pytest.approx(1 / 0.8)
    assert kernel_times(*args, {**one, "peak_fraction": 0.5})[0] == pytest.approx(2 * t1)


@pytest.mark.parametrize("cp_comm_type", ["p2p", "allgather"])
def test_linearized_time_equals_the_simulated_one_with_context_parallelism(cp_comm_type):
    """With context parallelism the graph runs each attention op as its part outside the ring
    and the ring's core steps: the kernel form counts the core once (it counted it twice,
    8-12 % above the simulator on the published cp = 2 rows)."""
    model = dataclasses.replace(_session("H100-SXM5-80GB", 2, 1, 1).model, seq_length=65536)
    for gpu, t, cp in (("H100-SXM5-80GB", 2, 4), ("B200-180GB", 1, 2), ("H100-SXM5-80GB", 8, 2)):
        s = _session(gpu, t, 1, 1)
        s = dataclasses.replace(s, model=model, plan=dataclasses.replace(
            s.plan, context_parallel=cp, cp_comm_type=cp_comm_type, sequence_parallel=t > 1,
            global_batch_size=2))
        b = analytic_bases()(s)
        p = {**b.op_model, **TRUTH}
        row = linearize(s, b, p)
        assert row.generic is None  # the kernel form holds
        sim = simulate(s, apply_fit(b, p)).report.iteration_time_s
        assert predict_linearized([row], p)[0] == pytest.approx(sim, rel=1e-6)
