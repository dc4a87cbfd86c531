"""Calibration range per feature and bands conditioned on the plan (core/store/calibration_range.py,
core/store/interval.py with the residual table's feature columns)."""

from __future__ import annotations

import dataclasses
import json
import math

import h5py
import numpy as np
import pytest

from core.cli import main
from core.io.session import load_any
from core.store.calibration_range import (CONDITIONS, MIN_LIKE_RUNS, condition_order,
                                          conditioned_rows, explained_spread, feature_departures,
                                          features_of, plan_features, unchecked_note)
from core.store.image import from_image, to_image
from core.store.interval import (conformal_bounds, cross_conformal, interval_factors, interval_for,
                                 interval_line, layer_parameters, min_residuals, normal_prediction_bounds,
                                 plan_departures,
                                 residual_table_from_cv, session_interval)
from core.store.profile_store import ProfileStore
from core.store.profiles_gen import generate_store
from core.store.residuals import FEATURE_COLUMNS, FEATURE_GROUPS, ResidualTable
from tests.conftest import EXAMPLES, ROOT

#: The features of every crafted calibration run unless a row says otherwise.
BASE = {"gpu": "A100-SXM4-80GB", "family": "dense", "precision": "bf16", "recompute": "full",
        "schedule": "1f1b", "micro_batch_size": 1, "seq_length": 2048, "cp": 1, "ep": 1,
        "attention_kernel": "unfused", "tp_comm_overlap": "off", "fsdp": "off",
        "zero_stage": "0/1", "overlap_grad_reduce": "off", "overlap_param_gather": "off"}


def _table(rows: list[tuple[float, dict]], num_gpus: int = 64) -> ResidualTable:
    """Cross-validated multi-node rows (``num_gpus`` GPUs, 8 per node, 1e10 parameters) with
    the given log residuals and features (``BASE`` updated by each row's dict), every column
    group (model FLOPs per GPU 1e15 per iteration: 5e14 FLOP/s at the 2 s predicted, a
    ceiling no A100 plan reaches)."""
    n = len(rows)
    feats = [{**BASE, **f} for _, f in rows]
    pred = np.full(n, 2.0)
    return ResidualTable(["cross_validated"] * n, ["x.csv"] * n, np.arange(1, n + 1),
                         [num_gpus] * n, [8] * n, [1e10] * n,
                         pred * np.exp([r for r, _ in rows]), pred,
                         **{c: [f[c] for f in feats] for c in FEATURE_COLUMNS},
                         model_flops_per_gpu=[1e15] * n)


def _strip(t: ResidualTable) -> ResidualTable:
    return ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS}, procedure=t.procedure)


def _crafted() -> ResidualTable:
    """42 runs: full recompute only, micro-batch 1-4, sequence 2048-8192, no cp; 22 bf16 runs
    (2 of them MoE with ep 8) and 20 dense fp8 runs whose residuals lie far from the others."""
    rows = []
    for i in range(42):
        f = {"micro_batch_size": 1 + i % 4, "seq_length": (2048, 4096, 8192)[i % 3]}
        if i >= 22:
            f.update(precision="fp8-tensorwise")
        if i in (0, 10):
            f.update(family="moe", ep=8)
        rows.append(((0.3 if i >= 22 else 0.0) + 0.001 * i, f))
    return _table(rows)


def test_the_range_check_names_each_feature_against_the_calibration_runs():
    t = _crafted()
    assert feature_departures(t, dict(BASE)) == ()
    cases = {"recompute": "none", "cp": 8, "micro_batch_size": 8, "seq_length": 131072,
             "precision": "fp8-mxfp8", "family": "mla", "schedule": "interleaved",
             "gpu": "H100-SXM5-80GB", "ep": 16, "attention_kernel": "flash",
             "tp_comm_overlap": "on", "fsdp": "on"}
    for name, value in cases.items():
        (d,) = feature_departures(t, {**BASE, name: value})
        assert (d.feature, d.value) == (name, value)
        assert d.calibrated == tuple(sorted(set(getattr(t, name).tolist())))
    # the calibrated values, as data
    (d,) = feature_departures(t, {**BASE, "recompute": "none"})
    assert d.to_dict() == {"feature": "recompute", "value": "none", "calibrated": ["full"]}
    (d,) = feature_departures(t, {**BASE, "cp": 8})
    assert d.calibrated == (1,) and "context parallelism" in d.text
    # bf16 and fp16 count as one precision (the same tensor-core path), in range and conditions
    assert feature_departures(t, {**BASE, "precision": "fp16"}) == ()
    assert interval_for(t, 1.0, 64, 8, 1e10, 0.9, features={**BASE, "precision": "fp16"}) == \
        interval_for(t, 1.0, 64, 8, 1e10, 0.9, features=dict(BASE))
    # inside a range feature's min..max is inside; several at once are all named
    assert feature_departures(t, {**BASE, "micro_batch_size": 3, "seq_length": 3000, "ep": 4}) == ()
    many = feature_departures(t, {**BASE, "recompute": "selective", "cp": 2, "seq_length": 512})
    assert [d.feature for d in many] == ["recompute", "seq_length", "cp"]
    # scale-transfer rows are no calibration runs of their own
    st = t.concat(dataclasses.replace(t.subset(np.arange(2)), set=np.array(["scale_transfer"] * 2),
                                      recompute=np.array(["none", "none"])))
    assert [d.feature for d in feature_departures(st, {**BASE, "recompute": "none"})] == ["recompute"]


def test_a_table_without_features_has_no_range_and_bands_as_before():
    t = _crafted()
    old = _strip(t)
    assert not old.has_features and old.row_features(0) is None
    assert feature_departures(old, dict(BASE)) == ()
    for feats in (None, dict(BASE), {**BASE, "recompute": "none", "cp": 8}):
        iv = interval_for(old, 10.0, 64, 8, 1e10, 0.9, features=feats)
        ref = interval_for(old, 10.0, 64, 8, 1e10, 0.9)
        # the same band; with plan features, the note says what was not compared
        assert iv == dataclasses.replace(ref, note=unchecked_note(old) if feats else "")
        assert iv.departures == () and iv.conditioned_on == ()
    lo, hi = conformal_bounds(np.sort(old.log_residual), 0.9)
    assert ref.low_factor == pytest.approx(np.exp(lo)) and ref.high_factor == pytest.approx(np.exp(hi))


def test_the_band_uses_the_narrower_group_when_enough_residuals_exist():
    t = _crafted()
    fp8 = {**BASE, "precision": "fp8-tensorwise"}
    iv = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features=fp8)
    # 20 dense fp8 runs (>= 19): the band is theirs alone
    sel = t.precision == "fp8-tensorwise"
    lo, hi = conformal_bounds(np.sort(t.log_residual[sel]), 0.9)
    assert iv.num_residuals == 20 and iv.low_factor == pytest.approx(np.exp(lo))
    assert iv.high_factor == pytest.approx(np.exp(hi))
    # the condition that explains the spread (precision: bf16 near 0, fp8 near +0.3) first
    assert iv.conditioned_on == condition_order(t, np.ones(len(t), bool))
    assert iv.conditioned_on[0] == "precision" and set(iv.conditioned_on) == set(CONDITIONS)
    assert iv.not_conditioned_on == () and iv.like_runs == 20
    assert iv.within_calibration and iv.note == unchecked_note(t) == ""
    # the bf16 plan gets the 20 dense bf16 runs' band, far narrower than the pooled one
    bf = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features=dict(BASE))
    pooled = interval_for(_strip(t), 10.0, 64, 8, 1e10, 0.9)
    assert bf.num_residuals == 20 and pooled.num_residuals == 42
    assert bf.high_factor / bf.low_factor < pooled.high_factor / pooled.low_factor
    assert 1.0 < bf.low_factor < bf.high_factor < np.exp(0.03)
    # the same through conditioned_rows directly, with the conformal minimum; a condition that
    # leaves too few is skipped and the next one tried (greedy, most important first)
    rows, used, dropped = conditioned_rows(t, np.ones(len(t), bool), fp8, min_residuals(0.9))
    assert rows.sum() == 20 and "precision" in used and dropped == ()
    rows, used, dropped = conditioned_rows(t, np.ones(len(t), bool), fp8, 21)
    assert rows.sum() == 40 and dropped == ("precision",) and "recompute" in used


def test_the_band_falls_back_to_wider_groups_and_says_so():
    t = _crafted()
    # no calibration run used cp: that condition is left out, and the plan departs
    iv = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features={**BASE, "cp": 4})
    assert "cp" in iv.not_conditioned_on and iv.available and not iv.within_calibration
    assert [d.feature for d in iv.departures] == ["cp"] and iv.in_calibration_range
    assert "context parallelism" in iv.note
    # a MoE plan: only 4 MoE runs, fewer than 19: the family and ep conditions fall back
    moe = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features={**BASE, "family": "moe", "ep": 8})
    assert {"family", "ep"} <= set(moe.not_conditioned_on) and moe.departures == ()
    assert moe.num_residuals >= min_residuals(0.9)
    # at 95 % (39 residuals at least) the 20 dense bf16 runs are too few for a band of their
    # own: their spread scales the 42 standardized residuals, narrower than the pooled band
    iv95 = interval_for(t, 10.0, 64, 8, 1e10, 0.95, features=dict(BASE))
    assert iv95.like_runs == 20 and iv95.num_residuals == 42 and "precision" in iv95.conditioned_on
    pooled = interval_for(_strip(t), 10.0, 64, 8, 1e10, 0.95)
    assert pooled.num_residuals == 42 and pooled.like_runs == 0
    assert iv95.high_factor / iv95.low_factor < pooled.high_factor / pooled.low_factor


#: Shape of the residuals of both families in :func:`_dense_and_moe` (12 runs each).
_U = np.array([1.0, -1.0, 0.5, -0.5] * 3)


def _dense_and_moe(a: float = 0.02, b: float = 0.3) -> ResidualTable:
    """24 multi-node runs on three GPU kinds, each kind with 4 dense runs (log residuals
    ``a * u``) and 4 MoE runs with ep 8 (``b * u``), ``u`` = :data:`_U`: the family drives the
    error, the GPU kind none (every kind holds the same residuals)."""
    rows = []
    for fam, scale in (("dense", a), ("moe", b)):
        for i, u in enumerate(_U):
            gpu = ("H100-SXM5-80GB", "B200-180GB", "GB200-NVL72")[i // 4]
            rows.append((scale * u, {"gpu": gpu, "family": fam, "ep": 1 if fam == "dense" else 8}))
    return _table(rows)


def test_the_rule_picks_dense_versus_moe_over_the_gpu_kind_and_narrows():
    t = _dense_and_moe()
    base = np.ones(len(t), bool)
    # what each condition explains, in closed form: splitting by family (or ep, the same split)
    # into the scales a and b; the GPU kind splits off nothing, the others have one value
    gain = explained_spread(t, base)
    ms_u = float(np.mean(_U ** 2))
    pooled = (0.02 ** 2 + 0.3 ** 2) / 2 * ms_u
    fam = 24 * np.log(pooled) - 12 * np.log(0.02 ** 2 * ms_u) - 12 * np.log(0.3 ** 2 * ms_u)
    assert gain["family"] == pytest.approx(fam) and gain["ep"] == pytest.approx(fam)
    assert gain["gpu"] == pytest.approx(0, abs=1e-9) and gain["precision"] == 0
    assert condition_order(t, base)[:2] == ("family", "ep")
    # a dense plan on the H100: the 12 dense runs (the 4 dense H100 runs are fewer than 6)
    plan = {**BASE, "gpu": "H100-SXM5-80GB"}
    iv = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features=plan)
    assert iv.conditioned_on[:2] == ("family", "ep") and iv.not_conditioned_on == ("gpu",)
    assert iv.like_runs == 12 and iv.num_residuals == 24 and MIN_LIKE_RUNS <= 12 < 19
    # the band in closed form: the normal-theory prediction interval of the 12 dense runs'
    # residuals a * u (mean 0, sample sd a * sd(u)): +- t(0.95, 11 dof) * sd * sqrt(1 + 1/12),
    # t(0.95, 11) = 1.7959 (Student's table)
    half = 1.795884818704 * 0.02 * float(np.std(_U, ddof=1)) * np.sqrt(1 + 1 / 12)
    assert np.log(iv.low_factor) == pytest.approx(-half)
    assert np.log(iv.high_factor) == pytest.approx(half)
    assert "a normal-theory band of 12 runs with the same family" in interval_line(iv)
    # a MoE plan gets the same interval scaled by b / a; the node class's band is far wider
    moe = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features={**plan, "family": "moe", "ep": 8})
    assert np.log(moe.high_factor) == pytest.approx(15 * np.log(iv.high_factor))
    assert np.log(moe.low_factor) == pytest.approx(15 * np.log(iv.low_factor))
    pooled_iv = interval_for(_strip(t), 10.0, 64, 8, 1e10, 0.9)
    assert (iv.high_factor - iv.low_factor) < 0.2 * (pooled_iv.high_factor - pooled_iv.low_factor)
    # in cross-validation at 80 % (each row's band from the other folds' 18 runs) the dense
    # rows' bands stay narrow and the MoE rows' wide
    lo_s, hi_s = cross_conformal(t, 0.8, folds=4)
    dense = t.family == "dense"
    assert np.isfinite(lo_s).all() and np.all(hi_s[dense] / lo_s[dense] < np.exp(0.1))
    assert np.all(hi_s[~dense] / lo_s[~dense] > np.exp(0.4))


def test_no_group_large_enough_falls_back_to_the_node_class_and_says_so():
    # 3 MoE runs among 24: too few for their own spread; the band is the node class's, and the
    # conditions left out are named (data, and the report's clause)
    rows = [(0.01 * ((i % 5) - 2), {}) for i in range(21)]
    rows += [(0.4, {"family": "moe", "ep": 8})] * 3
    t = _table(rows)
    iv = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features={**BASE, "family": "moe", "ep": 8})
    assert {"family", "ep"} <= set(iv.not_conditioned_on) and iv.like_runs == 24
    ref = conformal_bounds(np.sort(t.log_residual), 0.9)
    assert (np.log(iv.low_factor), np.log(iv.high_factor)) == pytest.approx(ref)
    assert "too few with the same" in interval_line(iv)
    # fewer runs in the node class than a 90 % band needs: no band, and the note says why
    small = t.subset(np.arange(12))
    iv = interval_for(small, 10.0, 64, 8, 1e10, 0.9, features=dict(BASE))
    assert not iv.available and "at least 19" in iv.note and iv.num_residuals == 12


def test_sweep_factors_and_departures_per_plan():
    t = _crafted()
    feats = [dict(BASE), {**BASE, "precision": "fp8-tensorwise"}, {**BASE, "recompute": "none"}]
    lo, hi, inside = interval_factors(t, np.array([64, 64, 64]), 8, 1e10, 0.9, features=feats)
    for i, f in enumerate(feats):
        iv = interval_for(t, 1.0, 64, 8, 1e10, 0.9, features=f)
        assert (lo[i], hi[i]) == (iv.low_factor, iv.high_factor)
    assert inside.all()
    d = plan_departures(t, feats)
    assert d[:2] == ["", ""] and d[2].startswith("recompute none")
    assert plan_departures(_strip(t), feats) == ["", "", ""]


def test_calibrate_writes_the_features_and_the_store_keeps_them(tmp_path):
    """residual_table_from_cv (what vtrain calibrate writes) takes each run's features from its
    session; the store round-trips them through HDF5 and its image; cross_conformal uses them."""
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    plans = [dataclasses.replace(s.plan, recompute=("full", "none")[i % 2],
                                 micro_batch_size=1 + i % 2) for i in range(24)]
    sessions = [dataclasses.replace(s, plan=p) for p in plans]
    measured = np.linspace(1.0, 2.0, 24)
    table = residual_table_from_cv(sessions, measured, measured * 1.01, "runs.csv",
                                   list(range(1, 25)))
    assert table.has_features
    assert table.recompute.tolist() == [p.recompute for p in plans]
    assert table.row_features(1) == plan_features(sessions[1])
    assert plan_features(sessions[0]) == features_of(s.model, s.cluster, plans[0])
    store = generate_store("A100-SXM4-80GB", date="2026-01-01")
    store.residuals = table
    path = tmp_path / "with_features.h5"
    store.save(path)
    with h5py.File(path) as f:
        assert int(f["residuals"].attrs["encoding-version"]) == 5 and "fsdp" in f["residuals"]
        assert f["residuals"]["zero_stage"].asstr()[()].tolist() == ["0/1"] * 24
        assert f["residuals"]["model_flops_per_gpu"].dtype == np.float64
    for back in (ProfileStore.open(path).residuals,
                 from_image(to_image(store), ProfileStore).residuals):
        for c in table.columns:
            np.testing.assert_array_equal(getattr(back, c), getattr(table, c))
    # without features: a version-1 group, as before
    store.residuals = _strip(table)
    store.save(tmp_path / "plain.h5")
    with h5py.File(tmp_path / "plain.h5") as f:
        assert int(f["residuals"].attrs["encoding-version"]) == 1 and "recompute" not in f["residuals"]
    assert not ProfileStore.open(tmp_path / "plain.h5").residuals.has_features
    lo, hi = cross_conformal(table, 0.5, folds=2)
    assert np.isfinite(lo).all() and np.all(lo <= table.measured_s) and np.all(table.measured_s <= hi)
    # a table of the first group only (stores written before the second): version 2
    first = _first_group(table)
    store.residuals = first
    store.save(tmp_path / "v2.h5")
    with h5py.File(tmp_path / "v2.h5") as f:
        assert int(f["residuals"].attrs["encoding-version"]) == 2 and "fsdp" not in f["residuals"]
    back = ProfileStore.open(tmp_path / "v2.h5").residuals
    assert back.feature_columns == FEATURE_GROUPS[0] and back.fsdp is None
    # half-given features are refused, per group, and the second group needs the first
    with pytest.raises(ValueError, match="all or none"):
        ResidualTable(**{c: getattr(table, c) for c in table.COLUMNS}, gpu=table.gpu)
    with pytest.raises(ValueError, match="all or none"):
        ResidualTable(**{c: getattr(first, c) for c in first.columns}, fsdp=table.fsdp)
    with pytest.raises(ValueError, match="need the first"):
        ResidualTable(**{c: getattr(table, c) for c in table.COLUMNS + FEATURE_GROUPS[1]})
    with pytest.raises(ValueError, match="unknown value"):
        ResidualTable(**{c: getattr(table, c) for c in table.columns if c != "fsdp"},
                      fsdp=["zero3"] * len(table))


def _first_group(t: ResidualTable) -> ResidualTable:
    """``t`` with only the first group of feature columns (a residual table of version 2)."""
    return ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS + FEATURE_GROUPS[0]},
                         procedure=t.procedure)


def test_the_second_feature_group_names_the_kernel_the_overlap_and_fsdp():
    """A plan with FlashAttention, TP overlap or FSDP against runs without them departs, one
    clause each; a table of the first group only (written before the second) compares none of
    the three, and concatenating it with a full table keeps the common columns."""
    t = _crafted()
    plan = {**BASE, "attention_kernel": "flash", "tp_comm_overlap": "on", "fsdp": "on"}
    out = feature_departures(t, plan)
    assert [(d.feature, d.value, d.calibrated) for d in out] == [
        ("attention_kernel", "flash", ("unfused",)), ("tp_comm_overlap", "on", ("off",)),
        ("fsdp", "on", ("off",))]
    assert [d.text for d in out] == [
        "attention flash: the store was calibrated on unfused only",
        "TP overlap on: no calibration run overlapped TP communication with its GEMMs",
        "FSDP on: no calibration run sharded its weights (ZeRO-3)"]
    assert feature_departures(_first_group(t), plan) == ()
    both = t.concat(_first_group(t))
    assert both.feature_columns == FEATURE_GROUPS[0] and len(both) == 2 * len(t)
    # runs with both values: neither departs; ZeRO 1 counts as "off" (features_of)
    mixed = _table([(0.0, {}), (0.0, {"tp_comm_overlap": "on", "fsdp": "on",
                                      "attention_kernel": "flash"})])
    assert feature_departures(mixed, plan) == ()
    # runs that all overlapped and sharded (a store calibrated on FSDP runs): a plan without
    # either departs, and the clause says what every run did
    on = _table([(0.0, {"tp_comm_overlap": "on", "fsdp": "on"})] * 2)
    out = feature_departures(on, dict(BASE))
    assert [(d.feature, d.value, d.calibrated) for d in out] == [
        ("tp_comm_overlap", "off", ("on",)), ("fsdp", "off", ("on",))]
    assert [d.text for d in out] == [
        "TP overlap off: every calibration run overlapped TP communication with its GEMMs",
        "FSDP off: every calibration run sharded its weights (ZeRO-3)"]
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    for zero, fsdp in ((0, "off"), (1, "off"), (2, "off"), (3, "on")):
        assert features_of(s.model, s.cluster, dataclasses.replace(s.plan, zero_stage=zero))[
            "fsdp"] == fsdp
    # what runs as the switch off does not depart: FSDP over one rank shards nothing, the TP
    # overlap needs t > 1 with sequence parallelism (the example is t=2 p=2 d=2)
    assert (s.plan.tensor_parallel, s.plan.data_parallel, s.plan.context_parallel) == (2, 2, 1)
    one = dataclasses.replace(s.plan, zero_stage=3, data_parallel=1)
    assert features_of(s.model, s.cluster, one)["fsdp"] == "off"
    tp2 = dataclasses.replace(s.plan, tp_comm_overlap=True, sequence_parallel=True)
    assert features_of(s.model, s.cluster, tp2)["tp_comm_overlap"] == "on"
    tp1 = dataclasses.replace(tp2, tensor_parallel=1, data_parallel=4)
    assert features_of(s.model, s.cluster, tp1)["tp_comm_overlap"] == "off"
    assert features_of(s.model, s.cluster, dataclasses.replace(
        tp2, sequence_parallel=False))["tp_comm_overlap"] == "off"


def test_the_shipped_stores_name_the_attention_kernel_and_tp_overlap_they_never_ran():
    """The A100 store's runs are unfused, without TP overlap or FSDP; the modern stores' runs are
    all FlashAttention, with and without TP overlap and FSDP."""
    from core.sim.simulate import open_profile, profile_path
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    a100 = open_profile(profile_path(s))
    assert a100.residuals.plan_feature_columns == FEATURE_COLUMNS
    assert a100.residuals.feature_columns == (FEATURE_GROUPS[0] + FEATURE_GROUPS[1] + (
        "model_flops_per_gpu", "zero_stage", "overlap_grad_reduce", "overlap_param_gather"))
    flash = dataclasses.replace(
        s, model=dataclasses.replace(s.model, attention_kernel="flash"),
        plan=dataclasses.replace(s.plan, precision="fp16", recompute="full", tp_comm_overlap=True,
                                 sequence_parallel=True))
    iv = session_interval(flash, 10.0, a100)  # 10 s: below the ceiling
    assert [(d.feature, d.value, d.calibrated) for d in iv.departures] == [
        ("attention_kernel", "flash", ("unfused",)), ("tp_comm_overlap", "on", ("off",))]
    assert not iv.within_calibration
    h100 = dataclasses.replace(flash, cluster=dataclasses.replace(s.cluster, gpu="H100-SXM5-80GB"),
                               plan=dataclasses.replace(flash.plan, precision="bf16", zero_stage=1,
                                                        overlap_grad_reduce=True,
                                                        overlap_param_gather=True),
                               model=dataclasses.replace(flash.model, seq_length=4096))
    store = open_profile(profile_path(h100))
    assert [d.feature for d in session_interval(h100, 10.0, store).departures] == []
    unfused = dataclasses.replace(h100, model=dataclasses.replace(h100.model,
                                                                  attention_kernel="unfused"))
    assert [(d.feature, d.value, d.calibrated) for d in
            session_interval(unfused, 10.0, store).departures] == [
        ("attention_kernel", "unfused", ("flash",))]
    # what docs/accuracy.md says of the runs: the A100 store's micro-batch 1-64 and sequence
    # 1,024-2,048, every run fp16 with full recompute; the modern table's six GPU kinds, with
    # and without TP overlap and FSDP
    cal = a100.residuals.subset(a100.residuals.set == "cross_validated")
    assert (cal.micro_batch_size.min(), cal.micro_batch_size.max()) == (1, 64)
    assert (cal.seq_length.min(), cal.seq_length.max()) == (1024, 2048)
    assert {*cal.precision.tolist(), *cal.recompute.tolist()} == {"fp16", "full"}
    modern = store.residuals
    assert sorted(set(modern.gpu.tolist())) == [
        "A100-SXM4-80GB", "B200-180GB", "GB200-NVL72", "H100-96GB-HBM2e-500W", "H100-SXM5-80GB",
        "H200-SXM-141GB"]
    assert len(modern) == 30 and set(modern.tp_comm_overlap.tolist()) == set(
        modern.fsdp.tolist()) == {"on", "off"}


def test_the_shipped_a100_store_names_features_its_runs_never_had(capsys):
    """The A100 store was calibrated on fp16, full-recompute, 1F1B runs: a bf16 plan and a plan
    without recomputation say so in the report, the JSON and the CLI table."""
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    from core.sim.simulate import open_profile, profile_path
    store = open_profile(profile_path(s))
    assert store.residuals.has_features
    none = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none",
                                                           precision="fp16"))
    # 10 s an iteration: 59 model TFLOP/s per GPU, below the A100 runs' ceiling (144)
    iv = session_interval(none, 10.0, store)
    assert [(d.feature, d.value, d.calibrated) for d in iv.departures] == [
        ("recompute", "none", ("full",))]
    # the band is the hull of the like runs' band and the feature-transfer residuals' band
    # (the store holds that set since 2026-12-05), and says its coverage is unknown
    assert iv.group == "single_node+feature_transfer"
    assert iv.note.endswith("the band is the hull of the in-range band and the feature-transfer "
                            "residuals' band (other runs, with features this store's "
                            "calibration runs lack, each predicted by a fit without it; 6 of "
                            "them like the plan by family, ep, precision, cp, a normal-theory "
                            "band); its coverage this far out is not established")
    # without that set: the like runs' band alone, saying its coverage for such a plan is unknown
    table = store.residuals
    own = table.subset(table.set != "feature_transfer")
    alone = interval_for(own, 1.0, none.plan.num_gpus, 8, layer_parameters(none.model),
                         features=plan_features(none))
    assert alone.group == "single_node" and alone.departures == iv.departures
    assert alone.note.endswith("the band is that of calibration runs without these features: "
                               "its coverage for a plan with them is not established")
    # the transfer runs like the plan: dense, no ep, bf16, no cp (6, a normal-theory band)
    like = ((table.set == "feature_transfer") & (table.family == "dense") & (table.ep == 1)
            & (table.precision == "bf16") & (table.cp == 1))
    assert int(like.sum()) == 6
    transfer = normal_prediction_bounds(table.log_residual[like], 0.9)
    assert (iv.low_factor, iv.high_factor) == (min(alone.low_factor, math.exp(transfer[0])),
                                               max(alone.high_factor, math.exp(transfer[1])))
    inside = session_interval(dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, recompute="full", precision="fp16")), 10.0, store)
    assert not inside.departures and "not established" not in inside.note
    path = EXAMPLES / "gpt3_1.3b_single_node.json"
    assert main(["simulate", str(path), "--json", "--set", "plan.recompute=none",
                 "--set", "plan.precision=fp16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["interval"]["departures"] == [
        {"feature": "recompute", "value": "none", "calibrated": ["full"]}]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_frozen_residual_table_fixtures_open(version, tmp_path):
    """A store of each released residual-table version (tests/data; version 2 written by the
    build before version 3: the fixture-gpu store's 20 residuals with the nine features, runs
    of micro-batch 1-4, bf16, full recompute; version 3 adds FlashAttention, TP overlap on
    every other row, no FSDP; version 4, written by the build before version 5, adds each
    run's model FLOPs per GPU, 100-119 TFLOP/s) opens, compares the features its version has
    (none of version 5's: a ZeRO-2 plan with both data-parallel overlaps does not depart, and
    the note names them as not checked), and is written back as the same version."""
    path = ROOT / "tests" / "data" / f"profile_store_residuals_v{version}.h5"
    with h5py.File(path) as f:
        assert int(f["residuals"].attrs["encoding-version"]) == version
    t = ProfileStore.open(path).residuals
    assert t.feature_columns == tuple(c for g in FEATURE_GROUPS[:version - 1] for c in g)
    assert len(t) == 20
    assert (t.set == "cross_validated").sum() == 19
    assert t.micro_batch_size.tolist() == [1 + i % 4 for i in range(20)]
    plan = {"gpu": "fixture-gpu", "family": "dense", "precision": "fp16", "recompute": "none",
            "schedule": "1f1b", "micro_batch_size": 8, "seq_length": 2048, "cp": 1, "ep": 1,
            "attention_kernel": "unfused", "tp_comm_overlap": "on", "fsdp": "on",
            "zero_stage": "2/3", "overlap_grad_reduce": "on", "overlap_param_gather": "on"}
    want = [("recompute", "none", ("full",)), ("micro_batch_size", 8, (1, 2, 3, 4))]
    if version >= 3:  # the runs are FlashAttention, some with TP overlap, none with FSDP
        want += [("attention_kernel", "unfused", ("flash",)), ("fsdp", "on", ("off",))]
    assert [(d.feature, d.value, d.calibrated) for d in feature_departures(t, plan)] == want
    assert unchecked_note(t).endswith("ZeRO stage, overlap_grad_reduce, overlap_param_gather"
                                      + ("" if version == 4 else
                                         "; the throughput ceiling (model FLOP/s per GPU)")
                                      + " (re-run vtrain calibrate to write them)")
    if version == 4:  # the ceiling is compared: row 19's 118 TFLOP/s, the fastest cross-validated
        fast = feature_departures(t, {**plan, "model_flops_per_gpu": 119e12}, 1.0)
        assert fast[-1].feature == "throughput" and fast[-1].calibrated == (
            pytest.approx(118.0),) and fast[-1].run == (str(t.file[18]), 19)
    store = ProfileStore.open(path)
    store.save(tmp_path / "again.h5")
    with h5py.File(tmp_path / "again.h5") as f:
        assert int(f["residuals"].attrs["encoding-version"]) == version
