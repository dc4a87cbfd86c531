"""The ``feature_transfer`` residual set (core/store/interval.py, core/store/residuals.py,
scripts/feature_transfer.py): a plan with features none of the calibration runs had gets the
hull of its in-range band and that set's conformal band; a plan within them, and every plan of
a table without the set, keeps its band bit for bit; the sweep's vectorized bands agree; the
held-out check ignores the set."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.store.calibration_range import features_of, plan_features
from core.store.interval import (band_key, conformal_bounds, cross_conformal,
                                 cross_conformal_intervals, interval_factors, interval_for,
                                 layer_parameters, normal_prediction_bounds, session_interval)
from core.store.profile_store import ProfileStore
from core.store.residuals import RESIDUAL_SETS
from tests.conftest import ROOT, load_module
from tests.test_calibration_range import BASE, _table

A100 = ROOT / "profiles" / "A100-SXM4-80GB.h5"
H100 = ROOT / "profiles" / "H100-SXM5-80GB.h5"
FLASH = {**BASE, "attention_kernel": "flash"}
TAIL = "its coverage this far out is not established"


def _synthetic():
    """20 calibration runs (64 GPUs, log residuals -0.05 .. 0.14 in steps of 0.01), 19
    scale-transfer rows (0 .. 0.6) and 25 feature-transfer rows (-0.3 .. 0.1, FlashAttention)."""
    cv = _table([(0.01 * i - 0.05, {}) for i in range(20)])
    st = dataclasses.replace(_table([(x, {}) for x in np.linspace(0.0, 0.6, 19)]),
                             set=np.array(["scale_transfer"] * 19))
    ft = dataclasses.replace(_table([(x, {"attention_kernel": "flash"})
                                     for x in np.linspace(-0.3, 0.1, 25)]),
                             set=np.array(["feature_transfer"] * 25))
    return cv, st, ft


def test_the_hull_in_closed_form_on_a_synthetic_table():
    cv, st, ft = _synthetic()
    t = cv.concat(st).concat(ft)
    assert "feature_transfer" in RESIDUAL_SETS and t.has_set("feature_transfer")
    # n = 20 at 90 %: m = ceil(21 * 0.9) = 19 gaps, one window: -0.05 .. 0.14; n = 25:
    # m = ceil(26 * 0.9) = 24, one window: -0.3 .. 0.1; n = 19: m = 18, 0 .. 0.6
    assert conformal_bounds(np.sort(cv.log_residual), 0.9) == pytest.approx((-0.05, 0.14))
    assert conformal_bounds(np.sort(ft.log_residual), 0.9) == pytest.approx((-0.3, 0.1))
    # FlashAttention departs (the feature-transfer rows are no calibration runs): the hull,
    # its low side from the transfer set, its high side from the in-range band
    iv = interval_for(t, 10.0, 64, 8, 1e10, 0.9, features=FLASH)
    assert [d.feature for d in iv.departures] == ["attention_kernel"]
    assert iv.low_factor == pytest.approx(math.exp(-0.3))
    assert iv.high_factor == pytest.approx(math.exp(0.14))
    assert (iv.low_s, iv.high_s) == pytest.approx((10 * math.exp(-0.3), 10 * math.exp(0.14)))
    assert iv.group == "multi_node+feature_transfer" and iv.num_residuals == 45
    assert iv.in_calibration_range and not iv.within_calibration
    assert iv.note.startswith("outside the calibration runs' features: attention flash")
    assert iv.note.endswith("the band is the hull of the in-range band and the feature-transfer "
                            "residuals' band (other runs, with features this store's "
                            "calibration runs lack, each predicted by a fit without it); " + TAIL)
    # without the set: the in-range band, and the old note
    alone = interval_for(cv.concat(st), 10.0, 64, 8, 1e10, 0.9, features=FLASH)
    assert (alone.low_factor, alone.high_factor) == pytest.approx((math.exp(-0.05),
                                                                  math.exp(0.14)))
    assert alone.group == "multi_node" and alone.departures == iv.departures
    assert alone.note.endswith("its coverage for a plan with them is not established")
    # a plan within the runs' features: the same interval, every field, with and without it
    for g in (64, 1024):
        assert interval_for(t, 10.0, g, 8, 1e10, 0.9, features=dict(BASE)) == \
            interval_for(cv.concat(st), 10.0, g, 8, 1e10, 0.9, features=dict(BASE))
    # outside the range too (1,024 GPUs): the hull of all three, 0 .. 0.6 from scale transfer
    out = interval_for(t, 10.0, 1024, 8, 1e10, 0.9, features=FLASH)
    assert (out.low_factor, out.high_factor) == pytest.approx((math.exp(-0.3), math.exp(0.6)))
    assert out.group == "multi_node+scale_transfer+feature_transfer"
    assert out.num_residuals == 64 and out.in_calibration_range is False
    assert out.note.endswith("the band is the hull of the in-range band, the scale-transfer "
                             "residuals' band (a single-node fit predicting multi-node runs) and "
                             "the feature-transfer residuals' band (other runs, with features "
                             "this store's calibration runs lack, each predicted by a fit "
                             "without it); " + TAIL)
    # 80 %: m = ceil(26 * 0.8) = 21 of 24 gaps; the set's band still the lowest side
    iv80 = interval_for(t, 1.0, 64, 8, 1e10, 0.8, features=FLASH)
    lo80, hi80 = conformal_bounds(np.sort(ft.log_residual), 0.8)
    in80 = conformal_bounds(np.sort(cv.log_residual), 0.8)
    assert (iv80.low_factor, iv80.high_factor) == (math.exp(min(lo80, in80[0])),
                                                   math.exp(max(hi80, in80[1])))
    # 90 % needs ceil(1.9 / 0.1) = 19 residuals: a set of 12 is too few, no band, and why
    few = cv.concat(ft.subset(np.arange(12)))
    none = interval_for(few, 1.0, 64, 8, 1e10, 0.9, features=FLASH)
    assert not none.available and none.group == "feature_transfer" and none.num_residuals == 12
    assert none.in_calibration_range and none.departures == iv.departures
    assert none.note.endswith("no error band: a 90% band needs at least 19 feature-transfer "
                              "residuals, the profile store has 12")


def test_the_sweep_path_and_the_band_key_agree_with_interval_for():
    cv, st, ft = _synthetic()
    t = cv.concat(st).concat(ft)
    feats = [dict(BASE), FLASH, {**BASE, "tp_comm_overlap": "on"}, {**BASE, "recompute": "none"},
             {**BASE, "micro_batch_size": 2}]
    g = np.array([64, 64, 64, 1024, 1024, 64, 8])
    index = np.array([0, 1, 2, 3, 0, 4, 1])
    lo, hi, inside = interval_factors(t, g, 8, 1e10, 0.9, features=feats, feature_index=index)
    wide = 0
    for i in range(g.size):
        iv = interval_for(t, 1.0, int(g[i]), 8, 1e10, 0.9, features=feats[index[i]])
        want = (iv.low_factor, iv.high_factor) if iv.available else (math.nan, math.nan)
        assert np.array_equal([lo[i], hi[i]], want, equal_nan=True), i
        assert bool(inside[i]) == bool(iv.in_calibration_range)
        wide += "feature_transfer" in iv.group
    assert wide == 5  # every departing plan (flash, TP overlap, no recompute, micro-batch 2)
    # BASE and TP overlap compare the same conditions; only the departure sets them apart
    k = [band_key(t, 64, 8, 1e10, f) for f in feats[:3]]
    assert k[0] != k[2] and k[1] == k[2] and k[0][1][0] == k[2][1][0]
    # without the set the departure is no part of the key (the bands are the in-range one)
    own = cv.concat(st)
    assert band_key(own, 64, 8, 1e10, feats[0]) == band_key(own, 64, 8, 1e10, feats[2])


def test_cross_conformal_ignores_the_set():
    """The held-out check: the same folds and bands for the table's own rows with and without
    the set, and no band for the set's rows (they are not the store's runs)."""
    cv, st, ft = _synthetic()
    own = cv.concat(st)
    both = own.concat(ft)
    for seed in (0, 1):
        lo0, hi0 = cross_conformal(own, 0.8, folds=4, seed=seed)
        lo1, hi1 = cross_conformal(both, 0.8, folds=4, seed=seed)
        assert np.array_equal(lo1[:len(own)], lo0, equal_nan=True)
        assert np.array_equal(hi1[:len(own)], hi0, equal_nan=True)
        assert np.isnan(lo1[len(own):]).all() and np.isnan(hi1[len(own):]).all()
    ivs = cross_conformal_intervals(both, 0.8, folds=4)
    assert "feature-transfer row" in ivs[-1].note and not ivs[-1].available


def test_the_transfer_runs_like_the_plan_set_its_side_of_the_hull():
    """Transfer rows of two families: a dense plan takes the dense rows' band (20, conformal),
    an MoE plan with ep the MoE rows' (8: the normal-theory band), as within a node class."""
    cv, st, _ = _synthetic()
    dense = [(x, {"attention_kernel": "flash"}) for x in np.linspace(-0.1, 0.05, 20)]
    moe = [(x, {"attention_kernel": "flash", "family": "moe", "ep": 8})
           for x in np.linspace(-0.6, 0.6, 8)]
    ft = dataclasses.replace(_table(dense + moe), set=np.array(["feature_transfer"] * 28))
    t = cv.concat(st).concat(ft)
    iv = interval_for(t, 1.0, 64, 8, 1e10, 0.9, features=FLASH)
    # dense: 20 rows, m = ceil(21 * 0.9) = 19: the shortest window of 19 gaps, -0.1 .. 0.05 less
    # one end; the hull's high side is the in-range 0.14
    lo, _ = conformal_bounds(np.sort(np.linspace(-0.1, 0.05, 20)), 0.9)
    assert iv.low_factor == pytest.approx(math.exp(lo)) and lo > -0.11
    assert iv.high_factor == pytest.approx(math.exp(0.14))
    assert "20 of them like the plan by family" in iv.note
    moe_plan = {**FLASH, "family": "moe", "ep": 8}
    iv = interval_for(t, 1.0, 64, 8, 1e10, 0.9, features=moe_plan)
    nlo, nhi = normal_prediction_bounds(np.linspace(-0.6, 0.6, 8), 0.9)
    assert (iv.low_factor, iv.high_factor) == pytest.approx((math.exp(nlo), math.exp(nhi)))
    assert "8 of them like the plan by" in iv.note and "a normal-theory band" in iv.note
    # the sweep's vectorized path agrees plan by plan
    lo_f, hi_f, _ = interval_factors(t, np.array([64, 64]), 8, 1e10, 0.9,
                                     features=[FLASH, moe_plan])
    for k, f in enumerate((FLASH, moe_plan)):
        want = interval_for(t, 1.0, 64, 8, 1e10, 0.9, features=f)
        assert (lo_f[k], hi_f[k]) == (want.low_factor, want.high_factor)


def _llama7b(flash: bool, recompute: str, num_gpus: int = 128, seq: int | None = None,
             model: str = "Llama 2 7B") -> Session:
    m = dataclasses.replace(MODEL_PRESETS[model],
                            attention_kernel="flash" if flash else "unfused",
                            **({"seq_length": seq} if seq else {}))
    plan = ParallelPlan(1, 1, num_gpus, 2, num_gpus * 8, "1f1b", recompute, "bf16")
    return Session(m, plan, ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8), CostConfig())


def layer_flops(s: Session) -> float:
    """Model FLOPs per GPU of one iteration of ``s`` (Megatron's count over the world size)."""
    from core.model.model_math import model_flops_per_iteration
    return model_flops_per_iteration(s.model, s.plan) / s.plan.num_gpus


def test_the_shipped_a100_store_widens_a_flash_no_recompute_plan_only():
    store = ProfileStore.open(A100)
    table = store.residuals
    ft = table.set == "feature_transfer"
    assert ft.sum() == 30 and (table.set == "cross_validated").sum() == 929
    assert set(table.file[ft].tolist()) == {"published_runs.sessions.jsonl"}
    prov = store.provenance["feature_transfer_residuals"]
    assert "scripts/feature_transfer.py" in prov and "bench_published.py --folds 5" in prov
    # the rows are the modern stores' out-of-fold predictions, while that store is the source
    digest = hashlib.sha256(H100.read_bytes()).hexdigest()
    if digest in prov:
        h100 = ProfileStore.open(H100).residuals
        cv = h100.subset(h100.set == "cross_validated")
        for c in cv.columns[1:]:
            assert np.array_equal(getattr(table, c)[ft], getattr(cv, c)), c
    # the in-range bands, frozen from the store before the set (2026-12-05): bit for bit (10 s
    # an iteration: below the A100 runs' throughput ceiling)
    inside = session_interval(_llama7b(False, "full", seq=2048), 10.0, store)
    assert not inside.departures and inside.group == "multi_node" and inside.num_residuals == 65
    assert (inside.low_factor, inside.high_factor) == (0.9169315058231116, 1.2044153890591915)
    one = session_interval(_llama7b(False, "full", 8, 2048, "GPT-3 1.3B"), 10.0, store)
    assert (one.group, one.low_factor, one.high_factor) == (
        "single_node", 0.9523097046777479, 1.0431164805481075)
    # FlashAttention, no recomputation, 4k sequences: the hull, wider than the -8.3 % / +20.4 %
    # it had, with the band of the transfer runs like it: dense, no ep, bf16, no cp (rows 22,
    # 23, 28, 29, 36, 37; fewer than 19, so the normal-theory band of their 6 residuals)
    s = _llama7b(True, "none")
    iv = session_interval(s, 7.0, store)
    assert [d.feature for d in iv.departures] == ["recompute", "seq_length", "attention_kernel",
                                                  "throughput"]
    # 7 s is 216 model TFLOP/s per GPU (MFU 69 %), above every A100 run the store was
    # calibrated on (issue 27): the highest, measured_single_node.csv row 464, 144 (46 %)
    top = table.model_flops_per_gpu / table.measured_s
    top[table.set != "cross_validated"] = 0
    best = int(np.argmax(top))
    tput = iv.departures[-1]
    assert (tput.run, tput.calibrated) == ((table.file[best], int(table.row[best])),
                                           (top[best] / 1e12,))
    assert tput.value == layer_flops(s) / 7.0 / 1e12 and tput.mfu == (
        tput.value * 1e12 / 312e12, top[best] / 312e12)
    assert tput.text == ("predicted MFU 69 % (216 TFLOP/s per GPU by Eq. 3's count): above every "
                         "calibration run of A100-SXM4-80GB bf16/fp16 (highest measured MFU 46 %, "
                         "144 TFLOP/s: measured_single_node.csv row 464)")
    like = ft & (table.family == "dense") & (table.ep == 1) & (table.precision == "bf16") & (
        table.cp == 1)
    assert sorted(table.row[like].tolist()) == [22, 23, 28, 29, 36, 37]
    lo, hi = normal_prediction_bounds(table.log_residual[like], 0.9)
    assert (iv.low_factor, iv.high_factor) == (math.exp(lo), max(math.exp(hi), 1.2044153890591915))
    assert (round(100 * (iv.low_factor - 1), 1), round(100 * (iv.high_factor - 1), 1)) == (-24.7, 39.7)
    assert iv.group == "multi_node+feature_transfer" and iv.num_residuals == 95
    assert ("6 of them like the plan by family, ep, precision, cp, a normal-theory band"
            in iv.note and iv.note.endswith(TAIL))
    # the sweep's vectorized bands of both plans are theirs
    plans = [s, _llama7b(False, "full", seq=2048)]
    for p in plans:
        f = features_of(p.model, p.cluster, p.plan)
        assert f == plan_features(p)
        lo_f, hi_f, _ = interval_factors(table, np.array([128]), 8, layer_parameters(p.model),
                                         0.9, features=[f])
        want = interval_for(table, 1.0, 128, 8, layer_parameters(p.model), 0.9, features=f)
        assert (lo_f[0], hi_f[0]) == (want.low_factor, want.high_factor)


def _script():
    """scripts/feature_transfer.py as a module (scripts/ is no package)."""
    return load_module(ROOT / "scripts" / "feature_transfer.py")


def test_the_script_replaces_the_set_and_a_refit_keeps_it(tmp_path):
    """transfer_rows / with_transfer (what scripts/feature_transfer.py writes): the source's
    cross_validated rows as the set, after the target's own rows, unchanged; run twice, the
    same table (the set and its procedure note replaced, not doubled); carry_over (what a refit
    by benchmarks/bench_accuracy.py uses) appends the set a store holds to a new table."""
    from core.store.profiles_gen import generate_store
    ft_mod = _script()
    cv, st, ft = _synthetic()
    own = dataclasses.replace(cv.concat(st), procedure="own folds")
    source = dataclasses.replace(ft, set=np.array(["cross_validated"] * len(ft)),
                                 procedure="source folds")
    rows = ft_mod.transfer_rows(source)
    assert (rows.set == "feature_transfer").all() and len(rows) == 25
    once = ft_mod.with_transfer(own, rows, "note")
    twice = ft_mod.with_transfer(once, rows, "note")
    for c in once.columns:
        assert np.array_equal(getattr(once, c), getattr(twice, c)), c
        assert np.array_equal(getattr(once, c)[:len(own)], getattr(own, c)), c
        assert np.array_equal(getattr(once, c)[len(own):], getattr(rows, c)), c
    assert once.procedure == twice.procedure == "own folds; feature_transfer: note"
    with pytest.raises(SystemExit, match="no cross_validated rows"):
        ft_mod.transfer_rows(ft)
    # a store holding the set: a refit's new table keeps it, with its note and provenance
    store = generate_store("A100-SXM4-80GB", date="2026-01-01")
    store.residuals = once
    store.provenance = {**store.provenance, ft_mod.KEY: "from somewhere"}
    path = tmp_path / "with_set.h5"
    store.save(path)
    refit = dataclasses.replace(own, procedure="refit folds")
    kept, prov = ft_mod.carry_over(refit, path)
    assert prov == "from somewhere" and kept.procedure == "refit folds; feature_transfer: note"
    assert np.array_equal(kept.log_residual, once.log_residual)
    assert ft_mod.carry_over(refit, tmp_path / "missing.h5") == (refit, None)
