"""The throughput ceiling (issue 27): a plan predicted faster, in model FLOP/s per GPU, than every
calibration run of its GPU kind and precision class is outside what its store was calibrated on
(core/store/calibration_range.py ``throughput_ceiling``, ``throughput_departure``; the residual
table's ``model_flops_per_gpu`` column, encoding version 4).

Checked on tables built here with known FLOPs and times (just above and just below the
ceiling, bf16 = fp16, each FP8 recipe apart, no run of the kind, a table without the column),
the HDF5 and image round trips, the band (a departure: the hull with the feature-transfer
residuals), the sweep's rows against each plan's own interval, and the shipped H100 store
against the published run it was calibrated on (../shared).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import h5py
import numpy as np
import pytest

from core.cli import main
from core.io.session import load_any
from core.model.model_math import model_flops_per_iteration
from core.plan.cluster import ClusterConfig
from core.store.calibration_range import (THROUGHPUT, Ceiling, feature_departures,
                                          throughput_ceiling, throughput_departure)
from core.store.image import from_image, to_image
from core.store.interval import (interval_factors, interval_for, model_flops_per_gpu,
                                 session_interval)
from core.store.profile_store import ProfileStore
from core.store.profiles_gen import generate_store
from core.store.residuals import FEATURE_COLUMNS, FEATURE_GROUPS, ResidualTable
from tests.conftest import EXAMPLES, ROOT
from tests.test_calibration_range import BASE, _crafted

SHARED = ROOT.parent / "shared" / "data" / "public-modern"
#: The feature columns of a residual table of version 3 (before the throughput column).
V3 = FEATURE_GROUPS[0] + FEATURE_GROUPS[1]
A100_PEAK = 312e12


def _table(rows: list[dict]) -> ResidualTable:
    """Single-node rows (8 GPUs, 1e10 parameters, predicted 1 s): each row's ``set`` (default
    cross_validated), ``flops`` (model FLOPs per GPU per iteration), ``measured`` (s) and
    features (``BASE`` updated); data row ``i + 1`` of ``x.csv``."""
    feats = [{**BASE, **{k: v for k, v in r.items() if k in BASE}} for r in rows]
    n = len(rows)
    return ResidualTable([r.get("set", "cross_validated") for r in rows], ["x.csv"] * n,
                         np.arange(1, n + 1), [8] * n, [8] * n, [1e10] * n,
                         [r["measured"] for r in rows], [1.0] * n,
                         **{c: [f[c] for f in feats] for c in FEATURE_COLUMNS},
                         model_flops_per_gpu=[r["flops"] for r in rows])


#: Rates (flops / measured): A100 bf16 1e14 (row 1), A100 fp16 1.5e14 (row 2: the bf16-class
#: ceiling), A100 fp8-tensorwise 4e14 (row 3), H100 bf16 4e14 (row 4); a feature-transfer and a
#: scale-transfer A100 bf16 run at 1e15 (rows 5, 6), never calibration runs.
ROWS = [dict(flops=1e15, measured=10.0),
        dict(flops=3e15, measured=20.0, precision="fp16"),
        dict(flops=2e15, measured=5.0, precision="fp8-tensorwise"),
        dict(flops=4e15, measured=10.0, gpu="H100-SXM5-80GB"),
        dict(flops=1e16, measured=10.0, set="feature_transfer"),
        dict(flops=1e16, measured=10.0, set="scale_transfer")]


def test_the_ceiling_is_the_highest_measured_rate_of_the_gpu_kind_and_precision_class():
    t = _table(ROWS)
    a100 = "A100-SXM4-80GB"
    assert throughput_ceiling(t, a100, "bf16") == Ceiling(1.5e14, "x.csv", 2)
    assert throughput_ceiling(t, a100, "fp16") == Ceiling(1.5e14, "x.csv", 2)  # one class
    assert throughput_ceiling(t, a100, "fp8-tensorwise") == Ceiling(4e14, "x.csv", 3)
    assert throughput_ceiling(t, a100, "fp8-mxfp8") is None  # each FP8 recipe its own
    assert throughput_ceiling(t, "H100-SXM5-80GB", "bf16") == Ceiling(4e14, "x.csv", 4)
    assert throughput_ceiling(t, "B200-180GB", "bf16") is None  # no run of that kind
    # just above / at / just below: no tolerance
    above = math.nextafter(1.5e14, math.inf)
    d = throughput_departure(t, a100, "fp16", above, A100_PEAK)
    assert (d.feature, d.value, d.calibrated, d.run, d.of) == (
        THROUGHPUT, above / 1e12, (150.0,), ("x.csv", 2), (a100, "bf16"))
    assert d.mfu == (above / A100_PEAK, 1.5e14 / A100_PEAK)
    assert throughput_departure(t, a100, "bf16", 1.5e14) is None
    assert throughput_departure(t, a100, "bf16", math.nextafter(1.5e14, 0)) is None
    assert throughput_departure(t, "B200-180GB", "bf16", 1e18) is None
    assert throughput_departure(t, a100, "fp8-mxfp8", 1e18) is None
    d8 = throughput_departure(t, a100, "fp8-tensorwise", 5e14)
    assert (d8.calibrated, d8.run, d8.mfu) == ((400.0,), ("x.csv", 3), ())
    # in the words and data of the reports
    assert throughput_departure(t, a100, "bf16", 1.9344e14, A100_PEAK).text == (
        "predicted MFU 62 % (193 TFLOP/s per GPU by Eq. 3's count): above every calibration run of "
        "A100-SXM4-80GB bf16/fp16 (highest measured MFU 48 %, 150 TFLOP/s: x.csv row 2)")
    assert d.to_dict() == {"feature": "throughput", "value": above / 1e12, "calibrated": [150.0],
                           "mfu": [above / A100_PEAK, 1.5e14 / A100_PEAK],
                           "run": {"file": "x.csv", "row": 2},
                           "of": {"gpu": a100, "precision": "bf16"}}
    assert "mfu" not in d8.to_dict()


def test_feature_departures_add_the_throughput_given_the_predicted_time():
    t = _table(ROWS)
    f = {**BASE, "model_flops_per_gpu": 1.5e15, "mfu_peak_flops": A100_PEAK}
    assert feature_departures(t, f, 10.0) == ()  # 1.5e14: the ceiling itself
    assert feature_departures(t, f) == ()  # no time, no throughput
    (d,) = feature_departures(t, f, 9.99)
    assert (d.feature, d.value) == (THROUGHPUT, 1.5e15 / 9.99 / 1e12)
    # after the feature departures
    deps = feature_departures(t, {**f, "recompute": "none"}, 9.99)
    assert [x.feature for x in deps] == ["recompute", THROUGHPUT]


def test_a_table_without_the_column_compares_nothing_new(tmp_path):
    t = _table(ROWS)
    old = ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS + V3})
    assert not old.has_throughput and old.feature_columns == V3
    assert throughput_ceiling(old, "A100-SXM4-80GB", "bf16") is None
    f = {**BASE, "model_flops_per_gpu": 1e18}
    assert feature_departures(old, f, 1e-3) == ()
    assert interval_for(old, 1e-3, 8, 8, 1e10, features=f).departures == ()
    # the released version-3 fixture reads as before
    store = ProfileStore.open(ROOT / "tests" / "data" / "profile_store_residuals_v3.h5")
    assert store.residuals.has_features and not store.residuals.has_throughput
    # a table whose third group lacks the second refuses by name
    with pytest.raises(ValueError, match="need the first and those before them"):
        ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS + FEATURE_COLUMNS[:9]},
                      model_flops_per_gpu=t.model_flops_per_gpu)
    with pytest.raises(ValueError, match="model_flops_per_gpu.*positive"):
        dataclasses.replace(t, model_flops_per_gpu=np.zeros(len(t)))


def test_the_column_round_trips_through_hdf5_and_the_image(tmp_path):
    t = _table(ROWS)
    store = generate_store("A100-SXM4-80GB", date="2026-01-01")
    store.residuals = t
    path = tmp_path / "ceiling.h5"
    store.save(path)
    with h5py.File(path) as f:
        g = f["residuals"]
        assert int(g.attrs["encoding-version"]) == 5  # with the data-parallel group after it
        assert g["model_flops_per_gpu"].dtype == np.float64
        assert g["model_flops_per_gpu"][()].tolist() == [r["flops"] for r in ROWS]
    for back in (ProfileStore.open(path).residuals,
                 from_image(to_image(store), ProfileStore).residuals):
        assert back.columns == t.columns
        for c in t.columns:
            assert np.array_equal(getattr(back, c), getattr(t, c)), c
        assert throughput_ceiling(back, "A100-SXM4-80GB", "bf16") == Ceiling(1.5e14, "x.csv", 2)


def _with_transfer() -> ResidualTable:
    """:func:`tests.test_calibration_range._crafted`'s 42 multi-node runs (A100, bf16 and fp8)
    with model FLOPs 1e15 per GPU each (so the bf16 ceiling is 1e15 over the fastest bf16 run's
    time), then 20 feature-transfer runs of their features with residuals far off (0.5-0.69)."""
    base = _crafted()
    cv = dataclasses.replace(base, model_flops_per_gpu=np.full(len(base), 1e15))
    ft = cv.subset(np.arange(20))
    ft = dataclasses.replace(ft, set=np.array(["feature_transfer"] * 20),
                             measured_s=ft.predicted_s * np.exp(0.5 + 0.01 * np.arange(20)))
    return cv.concat(ft)


def test_a_plan_above_the_ceiling_gets_the_hull_with_the_feature_transfer_band():
    t = _with_transfer()
    cv = t.set == "cross_validated"
    bf16 = cv & (t.precision == "bf16")
    ceiling = float((t.model_flops_per_gpu / t.measured_s)[bf16].max())
    f = {**BASE, "model_flops_per_gpu": 1e15}
    slow_s = 1e15 / ceiling  # exactly the ceiling: inside
    fast_s = math.nextafter(slow_s, 0)  # faster by one ulp: above it
    inside = interval_for(t, slow_s, 64, 8, 1e10, features=f)
    above = interval_for(t, fast_s, 64, 8, 1e10, features=f)
    assert inside.departures == () and inside.within_calibration
    assert inside.group == "multi_node"
    assert [d.feature for d in above.departures] == [THROUGHPUT] and not above.within_calibration
    assert above.group == "multi_node+feature_transfer"
    assert above.low_factor <= inside.low_factor and above.high_factor > inside.high_factor
    assert "the feature-transfer residuals' band" in above.note
    # the vectorized factors (the sweep's) are each plan's own
    feats = [dict(BASE)]
    for t_s, iv in ((slow_s, inside), (fast_s, above)):
        lo, hi, _ = interval_factors(t, np.array([64]), 8, 1e10, features=feats,
                                     above_ceiling=np.array([iv is above]),
                                     predicted_s=np.array([t_s]),
                                     model_flops_per_gpu=np.array([1e15]))
        assert (lo[0], hi[0]) == (iv.low_factor, iv.high_factor)


def _h100_session(recompute: str = "none"):
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    return dataclasses.replace(
        s, cluster=ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
        model=dataclasses.replace(s.model, attention_kernel="flash"),
        plan=dataclasses.replace(s.plan, precision="bf16", recompute=recompute))


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared is not checked out")
def test_the_shipped_h100_store_names_the_published_run_as_its_bf16_ceiling(capsys):
    """The highest H100-SXM5-80GB bf16 calibration run is fms-fsdp's Llama2-7B on 96 GPUs
    (published_runs.csv data row 37: 0.853 s an iteration, MFU 46 % as published); a dense
    bf16 plan predicted above it says so, naming the run, in the band and the JSON."""
    with open(SHARED / "published_runs.csv", newline="") as fh:
        row = list(csv.DictReader(fh))[36]  # data row 37
    assert (row["source_id"], row["model_name"], row["num_gpus"]) == (
        "FMS_FSDP_IBM", "Llama2-7B", "96")
    from core.accuracy.measured import read_measurements
    run = {m.row: m for m in read_measurements(str(SHARED / "published_runs.sessions.jsonl"))}[37]
    assert run.measured_iteration_time_s == float(row["measured_iteration_time_s"]) == 0.853
    rate = model_flops_per_gpu(run.session.model, run.session.plan) / 0.853
    store = ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5")
    peak = store.peak_flops["bf16"]
    assert throughput_ceiling(store.residuals, "H100-SXM5-80GB", "bf16") == Ceiling(
        rate, "published_runs.sessions.jsonl", 37)
    # Megatron's count gives 443 TFLOP/s (44.8 %), the published 46 % a count of its own
    assert round(rate / 1e12) == 443 and abs(rate / peak - float(row["mfu_percent"]) / 100) < 0.015
    s = _h100_session()
    flops = model_flops_per_iteration(s.model, s.plan) / s.plan.num_gpus
    fast = flops / (0.5 * peak)  # predicted at 50 % MFU
    iv = session_interval(s, fast, store)
    d = iv.departures[-1]
    assert (d.feature, d.run, d.calibrated, d.of) == (
        THROUGHPUT, ("published_runs.sessions.jsonl", 37), (rate / 1e12,),
        ("H100-SXM5-80GB", "bf16"))
    assert d.mfu == (flops / fast / peak, rate / peak) and not iv.within_calibration
    assert d.text.endswith("above every calibration run of H100-SXM5-80GB bf16/fp16 (highest "
                           "measured MFU 45 %, 443 TFLOP/s: published_runs.sessions.jsonl row 37)")
    assert d.text in iv.note
    assert THROUGHPUT not in [x.feature for x in session_interval(
        s, flops / (0.4 * peak), store).departures]  # 40 %: below
    # the simulate report's JSON: the prediction of this plan, departed or not as its rate says
    path = EXAMPLES / "gpt3_1.3b_single_node.json"
    assert main(["simulate", str(path), "--json", "--set", "cluster.gpu=H100-SXM5-80GB",
                 "--set", "plan.precision=bf16", "--set", "plan.recompute=none",
                 "--set", "model.attention_kernel=flash"]) == 0
    doc = json.loads(capsys.readouterr().out)
    predicted = doc["iteration_time_s"]
    deps = [x for x in doc["interval"]["departures"] if x["feature"] == THROUGHPUT]
    assert bool(deps) == (flops / predicted > rate)
    if deps:
        assert deps[0]["run"] == {"file": "published_runs.sessions.jsonl", "row": 37}


def test_the_sweep_marks_each_row_above_its_ceiling():
    """Every row of a sweep on the A100 store (which has feature-transfer residuals) carries
    the throughput departure exactly when its predicted rate is above the A100 runs' ceiling,
    and then the band of its own interval_for given its time and FLOPs; within_calibration
    follows."""
    from core.studies.sweep import SweepSpace, run_sweep
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.model = dataclasses.replace(s.model, attention_kernel="unfused")
    store = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    res = run_sweep(s, SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4, 8),
                                  recompute=("full", "none")), store=store, workers=1,
                    prune=False)
    ceiling = throughput_ceiling(store.residuals, "A100-SXM4-80GB", "fp16")
    checked = above_n = 0
    for i, pl in enumerate(res.plans):
        t = float(res.iteration_time_s[i])
        if not math.isfinite(t):
            assert THROUGHPUT not in res.calibration_departures[i]
            continue
        sess = dataclasses.replace(s, plan=pl)
        iv = session_interval(sess, t, store)
        rate = model_flops_per_gpu(s.model, pl) / t
        above = rate > ceiling.flops_per_s
        above_n += above
        assert ("above every calibration run" in res.calibration_departures[i]) == above
        assert res.calibration_departures[i] == iv.departure_text
        assert bool(res.within_calibration[i]) == iv.within_calibration
        assert (res.interval_low_s[i], res.interval_high_s[i]) == pytest.approx(
            (iv.low_s, iv.high_s), rel=1e-12)
        checked += 1
    assert checked > 20 and 0 < above_n < checked  # both kinds of row


def test_a_table_written_before_a_column_group_says_what_is_not_checked():
    """A report must not read as "no departure" where nothing was compared: a table without
    the data-parallel group (version 4) names the ZeRO stage and the two overlaps, one without
    the throughput column (version 3) the ceiling too, one without the second group
    (version 2) attention, TP overlap and FSDP too; a full table and a store without
    residuals say nothing (the latter has no band, whose note says so)."""
    from core.store.calibration_range import unchecked_note
    t = _table(ROWS)
    v4 = ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS + V3 + ("model_flops_per_gpu",)})
    v3 = ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS + V3})
    v2 = ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS + FEATURE_COLUMNS[:9]})
    v1 = ResidualTable(**{c: getattr(t, c) for c in t.COLUMNS})
    assert unchecked_note(t) == "" and unchecked_note(None) == ""
    tail = " (re-run vtrain calibrate to write them)"
    head = ("the profile store's residuals were written before these columns, so a plan is not "
            "checked against its calibration runs for: ")
    dp = "ZeRO stage, overlap_grad_reduce, overlap_param_gather"
    assert unchecked_note(v4) == head + dp + tail
    assert unchecked_note(v3) == (head + dp + "; the throughput ceiling (model FLOP/s per GPU)"
                                  + tail)
    assert unchecked_note(v2) == (head + "attention, TP overlap, FSDP, " + dp + "; the "
                                  "throughput ceiling (model FLOP/s per GPU)" + tail)
    assert unchecked_note(v1, "S") == (
        "S's residuals were written before these columns, so a plan is not checked against its "
        "calibration runs for: GPU, family, precision, recompute, schedule, micro-batch, "
        "sequence length, cp, ep, attention, TP overlap, FSDP, " + dp + "; the throughput "
        "ceiling (model FLOP/s per GPU)" + tail)
    f = {**BASE, "model_flops_per_gpu": 1e15}
    assert unchecked_note(v3) in interval_for(v3, 10.0, 8, 8, 1e10, features=f).note
    assert "written before" not in interval_for(t, 10.0, 8, 8, 1e10, features=f).note
    assert "written before" not in interval_for(v3, 10.0, 8, 8, 1e10).note  # no plan features


def test_the_report_and_the_sweep_of_a_version_3_store_say_the_ceiling_is_not_checked(capsys):
    from core.studies.sweep import SweepSpace, run_sweep
    path = ROOT / "tests" / "data" / "profile_store_residuals_v3.h5"
    want = ("the fixture-gpu profile store (calibrated)'s residuals were written before these "
            "columns, so a plan is not checked against its calibration runs for: ZeRO stage, "
            "overlap_grad_reduce, overlap_param_gather; the throughput ceiling (model FLOP/s "
            "per GPU)")
    assert main(["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--json",
                 "--profile", str(path)]) == 0
    assert want in json.loads(capsys.readouterr().out)["interval"]["note"]
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    res = run_sweep(s, SweepSpace(max_gpus=8, micro_batch_sizes=(1,), recompute=("full",)),
                    store=ProfileStore.open(path), workers=1)
    assert [w for w in res.warnings if "written before" in w] == [
        want.replace(" (calibrated)", "") + " (re-run vtrain calibrate to write them)"]
