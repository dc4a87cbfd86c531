"""How data-parallel gradients are communicated, as calibration features (residual table
version 5: ``zero_stage``, ``overlap_grad_reduce``, ``overlap_param_gather``;
core/store/calibration_range.py ``features_of``).

The trial: GPT-3 13B on 64 A100 at t=1 p=1 d=64 b=1 with ZeRO-2 and both data-parallel
overlaps got the A100 store's in-range band with no caution, though none of its runs used
ZeRO-2 (gradients reduce-scattered after every micro-batch, core/sim/template_builder.py
``reduce``) or overlapped data-parallel communication (all ZeRO 0, no overlap). Checked here:
the features as the simulator times them, the departures and their texts, the band (the hull
with the feature-transfer residuals), ``vtrain simulate``'s JSON and text, and the sweep's rows
against each plan's own interval.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from core.cli import main
from core.io.session import load_any, save_session
from core.store.calibration_range import feature_departures, features_of
from core.store.interval import normal_prediction_bounds, session_interval
from core.store.profile_store import ProfileStore
from core.store.residuals import ResidualTable
from tests.conftest import EXAMPLES, ROOT
from tests.test_calibration_range import BASE, _table

A100 = ROOT / "profiles" / "A100-SXM4-80GB.h5"


def _trial():
    """The trial's session: GPT-3 13B (40 layers, h=5120, 40 heads, s=2048) on 64 A100, t=1 p=1
    d=64 b=1 B=512, full recompute, bf16, ZeRO-2 with overlap_grad_reduce and
    overlap_param_gather."""
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    model = dataclasses.replace(s.model, name="GPT-3 13B", num_layers=40, hidden_size=5120,
                                num_attention_heads=40, seq_length=2048, attention_kernel="unfused")
    plan = dataclasses.replace(s.plan, tensor_parallel=1, pipeline_parallel=1, data_parallel=64,
                               micro_batch_size=1, global_batch_size=512, recompute="full",
                               precision="bf16", sequence_parallel=False, zero_stage=2,
                               overlap_grad_reduce=True, overlap_param_gather=True,
                               virtual_pipeline_stages=None)
    return dataclasses.replace(s, model=model, plan=plan)


def test_the_features_say_what_the_simulator_times():
    """ZeRO 0/1 reduce once per iteration, 2/3 after every micro-batch; the overlaps as set
    where gradients are reduced (param gather from ZeRO 1 on); all off / 0-1 at d=1."""
    s = _trial()

    def f(**kw):
        x = features_of(s.model, s.cluster, dataclasses.replace(s.plan, **kw))
        return x["zero_stage"], x["overlap_grad_reduce"], x["overlap_param_gather"], x["fsdp"]

    assert f() == ("2/3", "on", "on", "off")
    assert f(zero_stage=3) == ("2/3", "on", "on", "on")  # ZeRO-3's weights: fsdp
    assert f(zero_stage=1) == ("0/1", "on", "on", "off")
    assert f(zero_stage=1, overlap_grad_reduce=False, overlap_param_gather=False) == (
        "0/1", "off", "off", "off")
    # ZeRO 0 has no parameter all-gather to overlap
    assert f(zero_stage=0, overlap_param_gather=True) == ("0/1", "on", "off", "off")
    # d = 1 (and cp = 1, dense): nothing is reduced across GPUs, so nothing of it is timed
    assert f(data_parallel=1, tensor_parallel=8, sequence_parallel=True) == (
        "0/1", "off", "off", "off")
    # d = 1 with cp = 2: the gradients are reduced over d*cp = 2
    assert f(data_parallel=1, context_parallel=2, tensor_parallel=4,
             sequence_parallel=True) == ("2/3", "on", "on", "off")


def test_the_departures_name_what_no_calibration_run_did():
    t = _table([(0.0, {})] * 2)  # every run ZeRO 0/1 without overlap
    plan = {**BASE, "zero_stage": "2/3", "overlap_grad_reduce": "on", "overlap_param_gather": "on"}
    out = feature_departures(t, plan)
    assert [(d.feature, d.value, d.calibrated) for d in out] == [
        ("zero_stage", "2/3", ("0/1",)), ("overlap_grad_reduce", "on", ("off",)),
        ("overlap_param_gather", "on", ("off",))]
    assert [d.text for d in out] == [
        "ZeRO stage 2/3: no calibration run reduce-scattered its gradients after every "
        "micro-batch (ZeRO 2/3)",
        "overlap_grad_reduce on: no calibration run overlapped its data-parallel gradient "
        "reduction with the backward",
        "overlap_param_gather on: no calibration run overlapped its data-parallel parameter "
        "all-gather with compute"]
    # a store of ZeRO-2/3 runs, all overlapped: the other values depart, said as such
    on = _table([(0.0, {"zero_stage": "2/3", "overlap_grad_reduce": "on",
                        "overlap_param_gather": "on"})] * 2)
    assert [d.text for d in feature_departures(on, dict(BASE))] == [
        "ZeRO stage 0/1: no calibration run accumulated its gradients and reduced them once per "
        "iteration (ZeRO 0/1)",
        "overlap_grad_reduce off: every calibration run overlapped its data-parallel gradient "
        "reduction with the backward",
        "overlap_param_gather off: every calibration run overlapped its data-parallel parameter "
        "all-gather with compute"]
    assert feature_departures(t.concat(on), plan) == ()  # runs with both: none departs
    with pytest.raises(ValueError, match="'zero_stage': unknown value"):
        dataclasses.replace(t, zero_stage=np.array(["2"] * 2))
    with pytest.raises(ValueError, match="need the first"):  # the fourth group needs the third
        ResidualTable(**{c: getattr(t, c) for c in t.columns if c != "model_flops_per_gpu"})


def test_the_shipped_stores_hold_the_runs_data_parallel_communication():
    """The A100 store's calibration runs: all ZeRO 0 without overlap (0/1, off, off); its
    feature-transfer rows (the published modern runs): 18 ZeRO-1 and 12 ZeRO-3, all overlapped,
    as the H100 store's calibration runs."""
    a100 = ProfileStore.open(A100).residuals
    cv = a100.set == "cross_validated"
    assert {(z, g, p) for z, g, p in zip(a100.zero_stage[cv].tolist(),
                                         a100.overlap_grad_reduce[cv].tolist(),
                                         a100.overlap_param_gather[cv].tolist())} == {
        ("0/1", "off", "off")}
    ft = a100.set == "feature_transfer"
    assert sorted(a100.zero_stage[ft].tolist()) == ["0/1"] * 18 + ["2/3"] * 12
    assert set(a100.overlap_grad_reduce[ft].tolist()) == {"on"}
    h100 = ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5").residuals
    for c in ("zero_stage", "overlap_grad_reduce", "overlap_param_gather", "fsdp"):
        assert getattr(h100, c).tolist() == getattr(a100, c)[ft].tolist(), c


def test_the_trial_departs_on_the_a100_store_and_a_zero_1_plan_without_overlap_does_not(
        tmp_path, capsys):
    """The trial's band is the hull of the in-range band (the zero-1 no-overlap plan's, with no
    departure) and the feature-transfer band of the six transfer runs like it (dense, ep 1,
    bf16/fp16, cp 1: their normal-theory band); simulate's JSON says within_calibration false
    beside in_calibration_range true, and its text marks the iteration time with ⚠."""
    s = _trial()
    path = tmp_path / "trial.json"
    save_session(s, path)
    assert main(["simulate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    t = doc["iteration_time_s"]
    store = ProfileStore.open(A100)
    iv = session_interval(s, t, store)
    assert [d.feature for d in iv.departures] == ["zero_stage", "overlap_grad_reduce",
                                                  "overlap_param_gather"]
    assert iv.in_calibration_range and not iv.within_calibration
    assert iv.group == "multi_node+feature_transfer"
    plain = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, zero_stage=1, overlap_grad_reduce=False, overlap_param_gather=False))
    inside = session_interval(plain, t, store)
    assert inside.departures == () and inside.within_calibration
    assert inside.group == "multi_node" and inside.num_residuals == 65
    table = store.residuals
    like = ((table.set == "feature_transfer") & (table.family == "dense") & (table.ep == 1)
            & np.isin(table.precision, ["bf16", "fp16"]) & (table.cp == 1))
    assert int(like.sum()) == 6
    lo, hi = normal_prediction_bounds(table.log_residual[like], 0.9)
    assert (iv.low_factor, iv.high_factor) == (min(inside.low_factor, math.exp(lo)),
                                               max(inside.high_factor, math.exp(hi)))
    assert iv.high_factor / iv.low_factor > 1.3 * inside.high_factor / inside.low_factor
    j = doc["interval"]
    assert (j["in_calibration_range"], j["within_calibration"]) == (True, False)
    assert (j["low_factor"], j["high_factor"]) == (iv.low_factor, iv.high_factor)
    assert [d["feature"] for d in j["departures"]] == [d.feature for d in iv.departures]
    assert main(["simulate", str(path)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("Iteration time"))
    assert line.rstrip().endswith("⚠")
    assert "ZeRO stage 2/3: no calibration run reduce-scattered" in text.replace("\n", " ")
    # the zero-1 plan without overlap: within calibration, no mark
    save_session(plain, path)
    assert main(["simulate", str(path), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)["interval"]
    assert (j["in_calibration_range"], j["within_calibration"], j["departures"]) == (True, True, [])
    assert main(["simulate", str(path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Iteration time"))
    assert "⚠" not in line


def test_the_sweep_rows_agree_with_each_plans_own_interval():
    """A sweep on the A100 store over ZeRO 0-3 and the data-parallel overlaps off / on: every
    row's departures, band and within_calibration are its plan's own session_interval's (the
    sweep groups plans by the fields features_of reads: t, d and the overlaps among them)."""
    from core.studies.sweep import SweepSpace, run_sweep
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, attention_kernel="unfused"),
                            plan=dataclasses.replace(s.plan, recompute="full"))
    store = ProfileStore.open(A100)
    res = run_sweep(s, SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2), recompute=("full",),
                                  zero_stages=(0, 1, 2, 3), dp_overlap=(False, True)),
                    store=store, workers=1, prune=False)
    seen, checked = set(), 0
    for i, pl in enumerate(res.plans):
        t = float(res.iteration_time_s[i])
        if not math.isfinite(t):
            continue
        iv = session_interval(dataclasses.replace(s, plan=pl), t, store)
        assert res.calibration_departures[i] == iv.departure_text
        assert bool(res.within_calibration[i]) == iv.within_calibration
        assert (res.interval_low_s[i], res.interval_high_s[i]) == pytest.approx(
            (iv.low_s, iv.high_s), rel=1e-12)
        f = features_of(s.model, s.cluster, pl)
        seen.add((pl.data_parallel > 1, f["zero_stage"], f["overlap_grad_reduce"],
                  iv.within_calibration))
        checked += 1
    assert checked > 20
    # plans at d = 1 and d > 1, each ZeRO class, with and without overlap; only d > 1 departs
    assert {(True, "2/3", "on", False), (True, "0/1", "off", True), (True, "0/1", "on", False),
            (False, "0/1", "off", True)} <= seen
    assert {(z, g) for d1, z, g, _ in seen if not d1} == {("0/1", "off")}
