"""Error band of every prediction (core/store/interval.py): conformal bounds, groups, store, CLI."""

from __future__ import annotations

import csv
import json
import math

import h5py
import numpy as np
import pytest

from core.cli import main
from core.store.interval import (ResidualTable, conformal_bounds, cross_conformal, interval_for,
                           min_residuals, node_class, normal_prediction_bounds)
from core.store.format import SCHEMA_VERSION
from core.store.profile_store import ProfileStore
from core.store.profiles_gen import generate_store
from core.io.session import load_any
from core.sim.simulate import PROFILES_DIR, simulate
from core.accuracy.measured import read_measurements
from core.accuracy.metrics import interval_metrics
from tests.conftest import EXAMPLES, ROOT, shared_file


def _table(residuals_single, residuals_multi, transfer=(), gpus_multi=(64, 512),
           params_multi=(3e9, 2e11)) -> ResidualTable:
    """A table with the given log residuals: single-node runs (8 GPUs, 1e9 parameters),
    multi-node runs spread over ``gpus_multi`` x ``params_multi``, and scale-transfer rows."""
    rows = []
    for r in residuals_single:
        rows.append(("cross_validated", 8, 1e9, r))
    for i, r in enumerate(residuals_multi):
        rows.append(("cross_validated", gpus_multi[i % 2], params_multi[(i // 2) % 2], r))
    for r in transfer:
        rows.append(("scale_transfer", 64, 3e9, r))
    sets, gpus, params, res = zip(*rows)
    pred = np.full(len(rows), 2.0)
    return ResidualTable(sets, ["x.csv"] * len(rows), np.arange(1, len(rows) + 1), gpus,
                         [8] * len(rows), params, pred * np.exp(res), pred)


def test_conformal_bounds_closed_form():
    # n = 39, 90 %: the window spans m = ceil(40 * 0.9) = 36 gaps; equal widths: the lowest
    r = np.arange(1.0, 40.0)
    assert conformal_bounds(r, 0.9) == (1.0, 37.0)
    assert conformal_bounds(np.arange(1.0, 20.0), 0.9) == (1.0, 19.0)  # n = 19: m = 18 = n - 1
    assert conformal_bounds(np.arange(1.0, 19.0), 0.9) is None  # n = 18: m = 18 > n - 1
    assert min_residuals(0.9) == 19 and min_residuals(0.5) == 3 and min_residuals(0.99) == 199
    # the shortest window leaves a far outlier out: n = 21, 80 %: m = ceil(22 * 0.8) = 18
    skewed = np.array([*range(20), 100.0])
    assert conformal_bounds(skewed, 0.8) == (0.0, 18.0)
    # and takes the tight side of a skewed sample: 0..9 spread wide, 10..29 packed
    packed = np.sort(np.r_[np.linspace(-10, -1, 10), np.linspace(0, 1, 20)])
    lo, hi = conformal_bounds(packed, 0.6)  # m = ceil(31 * 0.6) = 19 gaps
    assert (lo, hi) == (packed[10], packed[29])
    for bad in (0.0, 1.0, 1.5, -0.1, float("nan"), "x"):
        with pytest.raises(ValueError, match="coverage"):
            conformal_bounds(r, bad)


@pytest.mark.parametrize("n, coverage", [(19, 0.9), (65, 0.9), (200, 0.8), (864, 0.95)])
@pytest.mark.parametrize("law", ["skewed", "heavy tail"])
def test_conformal_band_covers_new_exchangeable_residuals_near_nominal(n, coverage, law):
    """Over many draws of n residuals plus one new one from the same law, the shortest window
    holds the new one about as often as nominal: at most m/(n+1) (a fixed window's exact rate,
    Lei et al. 2018) and, choosing the window from the residuals, at most 2.5 points below."""
    rng = np.random.default_rng(1)
    trials = 20000
    if law == "skewed":
        draws = rng.gamma(2.0, 0.03, size=(trials, n + 1)) - 0.05
    else:  # 8 % of runs far slower, as the multi-node anomalies
        draws = np.where(rng.random((trials, n + 1)) < 0.08, rng.uniform(0.2, 0.9, (trials, n + 1)),
                         rng.normal(0.0, 0.03, (trials, n + 1)))
    cal, new = np.sort(draws[:, :n], axis=1), draws[:, n]
    bounds = np.array([conformal_bounds(row, coverage) for row in cal])
    inside = (new >= bounds[:, 0]) & (new <= bounds[:, 1])
    m = math.ceil((n + 1) * coverage - 1e-9)
    se = math.sqrt(coverage * (1 - coverage) / trials)
    assert coverage - 0.025 <= inside.mean() <= m / (n + 1) + 4 * se


def test_interval_groups_by_node_class_and_scales_the_prediction():
    # 39 residuals, 90 %: the window spans m = ceil(40 * 0.9) = 36 gaps, 37 of the 39
    single = np.r_[[-0.2, -0.15, -0.1, -0.05], np.linspace(-0.02, 0.02, 35)]  # wide lower tail
    multi = np.r_[np.linspace(-0.05, 0.15, 37), 0.5, 0.8]  # biased, two far slower runs
    table = _table(single, multi)
    iv = interval_for(table, 10.0, 8, 8, 1e9, 0.9)
    assert iv.group == "single_node" and iv.num_residuals == 39 and iv.in_calibration_range
    assert iv.low_s == pytest.approx(10 * math.exp(single[2]))  # the two lowest left out
    assert iv.high_s == pytest.approx(10 * math.exp(single[38]))
    assert iv.note == "" and iv.band(3.0) == pytest.approx((3 * iv.low_factor, 3 * iv.high_factor))
    iv = interval_for(table, 10.0, 128, 8, 1e10, 0.9)
    assert iv.group == "multi_node" and iv.in_calibration_range
    assert (iv.low_s, iv.high_s) == pytest.approx((10 * math.exp(multi[0]), 10 * math.exp(multi[36])))
    # a biased group gets an asymmetric band around the prediction
    assert iv.high_factor - 1 > 1 - iv.low_factor
    assert node_class(8, 8) == "single_node" and node_class(9, 8) == "multi_node"


def test_plan_outside_the_calibration_range_says_so_and_takes_the_transfer_band():
    transfer = np.linspace(0.05, 0.4, 25)  # extrapolation under-predicted every run
    multi = np.linspace(-0.1, 0.1, 39)
    table = _table(np.zeros(30), multi, transfer)
    iv = interval_for(table, 10.0, 1024, 8, 1e11, 0.9)
    assert not iv.in_calibration_range and iv.group == "multi_node+scale_transfer"
    assert iv.num_residuals == 39 + 25
    assert "outside the calibration range: 1,024 GPUs (calibrated multi-node runs: 64-512)" in iv.note
    assert "coverage this far out is not established" in iv.note
    # the hull of the in-range band (lower side) and the transfer band (upper side)
    lo, _ = conformal_bounds(multi, 0.9)
    _, hi = conformal_bounds(np.sort(transfer), 0.9)
    assert (iv.low_factor, iv.high_factor) == pytest.approx((math.exp(lo), math.exp(hi)))
    assert iv.low_s < 10.0 < iv.high_s
    iv = interval_for(table, 10.0, 256, 8, 1e12, 0.9)  # model size beyond the data
    assert "1 T layer parameters (calibrated multi-node runs: 3 B-200 B)" in iv.note
    assert "3 B-200 B" in iv.note
    iv = interval_for(table, 10.0, 4, 8, 1e9, 0.9)  # fewer GPUs than any single-node run
    assert not iv.in_calibration_range and "4 GPUs (calibrated single-node runs: 8-8)" in iv.note
    # without scale-transfer residuals: no band, and the note says why (never a made-up band)
    iv = interval_for(_table(np.zeros(30), np.zeros(30)), 10.0, 1024, 8, 1e11, 0.9)
    assert not iv.available and iv.low_s is None and iv.band(1.0) is None
    assert "outside the calibration range" in iv.note and "no scale-transfer residuals" in iv.note


def test_no_residuals_no_band_and_too_few_for_the_coverage():
    iv = interval_for(None, 10.0, 8, 8, 1e9, 0.9, store_name="the H100 store")
    assert not iv.available and iv.in_calibration_range is None
    assert iv.note.startswith("no error band: the H100 store holds no cross-validated residuals")
    iv = interval_for(_table(np.zeros(30), np.zeros(10)), 10.0, 64, 8, 3e9, 0.9)
    assert not iv.available and "needs at least 19 multi-node residuals" in iv.note and "has 10" in iv.note
    assert interval_for(_table(np.zeros(30), np.zeros(10)), 10.0, 64, 8, 3e9, 0.5).available


def test_residual_table_round_trips_through_the_store_and_bumps_the_version(tmp_path):
    store = generate_store("A100-SXM4-80GB", date="2026-01-01")
    plain = tmp_path / "plain.h5"
    store.save(plain)
    with h5py.File(plain) as f:  # nothing new in it: still a version-1 file
        assert int(f.attrs["encoding-version"]) == 1 and "residuals" not in f
    assert ProfileStore.open(plain).residuals is None
    store.residuals = _table([0.01, -0.02], [0.05], [0.1])
    store.residuals.procedure = "test procedure"
    path = tmp_path / "with.h5"
    store.save(path)
    with h5py.File(path) as f:
        assert int(f.attrs["encoding-version"]) == SCHEMA_VERSION == 2
        assert f["residuals"].attrs["encoding-type"] == "residual-table"
    back = ProfileStore.open(path).residuals
    for c in ResidualTable.COLUMNS:
        np.testing.assert_array_equal(getattr(back, c), getattr(store.residuals, c))
    assert back.procedure == "test procedure"
    with h5py.File(path, "a") as f:  # a broken table is refused naming the group
        f["residuals"]["measured_s"][0] = -1.0
    with pytest.raises(Exception, match="/residuals: residual table column 'measured_s'"):
        ProfileStore.open(path)


def test_the_version_1_fixture_opens_without_a_band():
    s = ProfileStore.open(ROOT / "tests" / "data" / "profile_store_v1.h5")
    assert s.residuals is None


def _analytic_h100(tmp_path):
    """The analytic H100 store (the shipped one is calibrated): no residuals, no band."""
    path = tmp_path / "H100-analytic.h5"
    if not path.exists():
        generate_store("H100-SXM5-80GB").save(path)
    return path


def test_simulate_json_band_and_analytic_store_without_one(capsys, tmp_path):
    example = EXAMPLES / "gpt3_1.3b_single_node.json"
    assert main(["simulate", str(example), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lo, hi = doc["iteration_time_interval_s"]
    T = doc["iteration_time_s"]
    assert lo < T < hi and doc["interval"]["coverage"] == 0.9
    # recompute none: the A100 runs are all full recomputation, so the hull with the
    # feature-transfer residuals' band
    assert (doc["interval"]["group"] == "single_node+feature_transfer"
            and doc["interval"]["in_calibration_range"])
    d_lo, d_hi = doc["training_days_interval"]
    assert (d_lo, d_hi) == pytest.approx((doc["training_days"] * lo / T, doc["training_days"] * hi / T))
    c_lo, c_hi = doc["cost_usd_interval"]
    assert (c_lo, c_hi) == pytest.approx((doc["cost_usd"] * lo / T, doc["cost_usd"] * hi / T))
    # a wider nominal coverage gives a band at least as wide
    assert main(["simulate", str(example), "--json", "--coverage", "0.92"]) == 0
    lo92, hi92 = json.loads(capsys.readouterr().out)["iteration_time_interval_s"]
    assert lo92 <= lo and hi92 >= hi
    # 98 %: the in-range class has its 864 residuals (99 needed); the 6 transfer runs like the
    # plan (fewer than 99) give their normal-theory band, as like runs do within a class
    assert main(["simulate", str(example), "--json", "--coverage", "0.98"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lo98, hi98 = doc["iteration_time_interval_s"]
    assert lo98 <= lo92 and hi98 >= hi92
    assert "6 of them like the plan by family, ep, precision, cp, a normal-theory band" in \
        doc["interval"]["note"]
    assert main(["simulate", str(example), "--coverage", "1.5"]) == 2
    assert "--coverage" in capsys.readouterr().err
    # the analytic H100 store has no residuals: no band, and the report says why
    assert main(["simulate", str(example), "--json", "--profile",
                 str(_analytic_h100(tmp_path))]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["iteration_time_interval_s"] is None and doc["cost_usd_interval"] is None
    assert "holds no cross-validated residuals" in doc["interval"]["note"]
    assert main(["simulate", str(example), "--profile", str(_analytic_h100(tmp_path))]) == 0
    assert "no error band" in capsys.readouterr().out


def test_report_table_shows_the_band_and_the_range(capsys):
    assert main(["simulate", str(EXAMPLES / "mtnlg_530b.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "90% band" in out and "outside the calibration range: 3,360 GPUs" in out


def test_shipped_a100_residuals_are_the_shared_data_and_cover_held_out_folds():
    """The shipped store's residual table holds every usable row of the shared A100 files
    with its measured time; bands built from the other folds' residuals cover the
    held-out fold's runs at the nominal rate (within 5 points)."""
    store = ProfileStore.open(PROFILES_DIR / "A100-SXM4-80GB.h5")
    table = store.residuals
    assert table is not None
    cv = table.set == "cross_validated"
    for name in ("measured_single_node.csv", "measured_multi_node.csv"):
        ms = [m for m in read_measurements(shared_file(name)) if not m.skip_reason]
        sel = cv & (table.file == name)
        assert sel.sum() == len(ms)
        measured = {m.row: m.measured_iteration_time_s for m in ms}
        np.testing.assert_allclose(table.measured_s[sel], [measured[r] for r in table.row[sel]])
    assert (table.set == "scale_transfer").sum() == 65
    # the out-of-fold predictions are the shipped CV figures (same procedure)
    for name, figures in store.provenance["cross_validation"].items():
        if name.endswith(".csv"):
            sel = cv & (table.file == name)
            ape = np.abs(table.predicted_s[sel] / table.measured_s[sel] - 1) * 100
            assert ape.mean() == pytest.approx(figures["mape_percent"], rel=1e-6)
    own = table.subset(cv)
    for coverage in (0.8, 0.9):
        for seed in (0, 1, 2):
            low, high = cross_conformal(own, coverage, folds=5, seed=seed)
            m = interval_metrics(own.measured_s, own.predicted_s, low, high)
            assert m["interval_rows"] == len(own)
            assert abs(m["interval_coverage"] - coverage) <= 0.05, (coverage, seed, m)
            single = own.node_class == "single_node"
            ms = interval_metrics(own.measured_s[single], own.predicted_s[single], low[single],
                                  high[single])
            assert abs(ms["interval_coverage"] - coverage) <= 0.05, (coverage, seed, ms)
    low, high = cross_conformal(own, 0.9)
    assert interval_metrics(own.measured_s, own.predicted_s, low, high)[
        "interval_median_width_percent"] < 15


def test_validate_adds_coverage_and_band_columns(tmp_path, capsys):
    path = shared_file("measured_multi_node.csv")
    out = tmp_path / "rows.csv"
    assert main(["validate", str(path), "--json", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert 0.0 <= doc["interval_coverage"] <= 1.0 and doc["interval_rows"] == doc["n"] == 65
    rows = list(csv.DictReader(out.open()))
    inside = [float(r["interval_low_s"]) <= float(r["measured_iteration_time_s"])
              <= float(r["interval_high_s"]) for r in rows]
    assert doc["interval_coverage"] == pytest.approx(np.mean(inside))
    for r in rows:
        assert float(r["interval_low_s"]) < float(r["predicted_iteration_time_s"]) < float(
            r["interval_high_s"])
    # the analytic H100 store: every row predicted, none with a band, coverage null
    assert main(["validate", str(path), "--json", "--profile",
                 str(_analytic_h100(tmp_path))]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["interval_coverage"] is None and doc["interval_rows"] == 0


def test_example_sessions_in_range_get_a_band():
    s = load_any(EXAMPLES / "gpt3_175b.json")
    iv = simulate(s).report.interval
    assert iv.available and iv.in_calibration_range and iv.group == "multi_node"


def test_the_version_2_fixture_opens_with_its_residuals():
    s = ProfileStore.open(ROOT / "tests" / "data" / "profile_store_v2.h5")
    r = s.residuals
    assert len(r) == 20 and r.procedure == "fixture" and (r.set == "scale_transfer").sum() == 1
    np.testing.assert_allclose(r.measured_s, np.linspace(0.9, 1.1, 20))
    assert r.calibration_range("multi_node") == (64, 64, 1e9, 1e9)


def test_validate_table_states_coverage_or_why_no_band(capsys, tmp_path):
    path = shared_file("measured_multi_node.csv")
    assert main(["validate", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "inside 90% band" in out and "of 65 rows (median width" in out
    assert main(["validate", str(path), "--profile", str(_analytic_h100(tmp_path))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "error band none: no error band:" in out and "holds no cross-validated residuals" in out


def test_normal_prediction_bounds_in_closed_form():
    # residuals 0.1, -0.1, 0.2, 0.0: mean 0.05, sample sd sqrt(0.05 / 3); Student's t at
    # 0.95 with 3 degrees of freedom 2.353363 (table), at 0.975 3.182446
    x = np.array([0.1, -0.1, 0.2, 0.0])
    sd = np.sqrt(0.05 / 3)
    lo, hi = normal_prediction_bounds(x, 0.9)
    half = 2.353363435 * sd * np.sqrt(1 + 1 / 4)
    assert (lo, hi) == pytest.approx((0.05 - half, 0.05 + half))
    lo95, hi95 = normal_prediction_bounds(x, 0.95)
    assert hi95 - 0.05 == pytest.approx(3.182446305 * sd * np.sqrt(1.25))
    with pytest.raises(ValueError, match="at least 2 residuals"):
        normal_prediction_bounds(np.array([0.1]), 0.9)
