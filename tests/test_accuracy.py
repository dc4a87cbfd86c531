"""Measurement readers, error figures, nccl-tests import and calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.accuracy.calibrate import apply_fit, fit, linearize, model_store, predict_linearized
from core.cli import main
from core.plan.config import ClusterConfig, CostConfig, ModelConfig, ParallelPlan, Session
from core.store.nccl_tests import NcclTestsError, fit_curve, read_nccl_tests
from core.model.ops import DEFAULT_OP_MODEL
from core.store.profiles_gen import generate_store
from core.sim.simulate import simulate
from core.accuracy.validate import MeasurementFileError, error_metrics, predict_rows, read_measurements
from core.model.model_math import num_parameters
from tests.conftest import shared_file

GENERAL_HEADER = ("gpu,num_gpus,gpus_per_node,num_layers,hidden_size,num_attention_heads,seq_length,"
                  "global_batch_size,micro_batch_size,tensor_parallel,pipeline_parallel,data_parallel,"
                  "virtual_pipeline_stages,sequence_parallel,recompute,measured_iteration_time_s,extra")


def test_authors_single_node_layout():
    ms = read_measurements(shared_file("measured_single_node.csv"))
    assert len(ms) == 864
    first = ms[0]  # 8,8,2,2048,16,20,1024,4,1,2,160.6027
    pl = first.session.plan
    assert (pl.num_gpus, pl.global_batch_size, pl.micro_batch_size) == (8, 8, 2)
    assert (pl.tensor_parallel, pl.data_parallel, pl.pipeline_parallel) == (4, 1, 2)
    assert first.session.model.hidden_size == 2048 and first.session.model.num_layers == 20
    assert first.measured_s == pytest.approx(0.1606027)
    assert pl.recompute == "full" and pl.precision == "fp16" and pl.schedule == "1f1b"
    assert not first.skip_reason and first.group["source"] == "single-node"


def test_authors_multi_node_layout_with_bom():
    ms = read_measurements(shared_file("measured_multi_node.csv"))
    assert len(ms) == 65
    m0 = ms[0]  # 3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5
    assert m0.group["model"] == "3.6B" and m0.session.plan.data_parallel == 64
    assert m0.session.cluster.inter_node_bandwidth_gbits_per_s == 800.0
    assert m0.measured_s == pytest.approx(3.5665)
    assert all(not m.skip_reason for m in ms)  # t=16 spans two whole nodes: supported


def test_general_layout_and_skip_reasons(tmp_path):
    rows = [
        "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,n,full,0.5,x",      # ok
        "A100,16,8,24,2048,16,1024,64,2,2,2,4,2,n,full,0.5,x",      # interleaved (modelled)
        "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,y,full,0.5,x",      # sequence parallel
        "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,n,selective,0.5,x",  # selective
        "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,n,full,0.5,x".replace("16,8,24", "32,8,24"),
        "A100,16,8,25,2048,16,1024,64,2,2,2,4,1,n,full,0.5,x",      # 25 layers, p=2
        "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,maybe,full,0.5,x",  # not y or n
    ]
    path = tmp_path / "runs.csv"
    path.write_text(GENERAL_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    reasons = [m.skip_reason for m in ms]
    assert reasons[0] == "" and ms[0].session.plan.zero_stage == 0
    assert reasons[1] == ""
    assert (ms[1].session.plan.schedule, ms[1].session.plan.virtual_pipeline_stages) == ("interleaved", 2)
    assert reasons[2] == "" and ms[2].session.plan.sequence_parallel is True
    assert reasons[3] == "" and ms[3].session.plan.recompute == "selective"
    assert "num_gpus=32 disagrees with t*p*d=16" in reasons[4]
    assert "num_layers=25 is not divisible by pipeline_parallel_size=2" in reasons[5]
    assert "sequence_parallel='maybe': expected y or n" in reasons[6]
    result = predict_rows(ms, lambda s: simulate(s).report.iteration_time_s)
    assert result.used.tolist() == [True, True, True, True, False, False, False]
    # sequence parallelism and selective recomputation change the prediction
    assert result.predicted_s[2] != result.predicted_s[0] != result.predicted_s[3]


def test_general_layout_sharding_overlap_and_uneven_columns(tmp_path):
    header = GENERAL_HEADER.replace(",extra", ",distributed_optimizer,fsdp,overlap_grad_reduce,"
                                              "first_stage_layers,last_stage_layers")
    base = "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,n,full,0.5,"
    rows = [base + "y,n,y,,", base + "n/a (FSDP),y,n,,", base + "n,n,n,11,13",
            base + "y,y,n,,", base + "n,n,n,20,20"]
    path = tmp_path / "runs.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    pl = [m.session.plan for m in ms]
    assert ms[0].skip_reason == "" and pl[0].zero_stage == 1 and pl[0].overlap_grad_reduce
    assert ms[1].skip_reason == "" and pl[1].zero_stage == 3 and not pl[1].overlap_grad_reduce
    assert ms[2].skip_reason == "" and (pl[2].first_stage_layers, pl[2].last_stage_layers) == (11, 13)
    assert "fsdp and distributed_optimizer are both y" in ms[3].skip_reason
    assert "first_stage_layers + last_stage_layers = 40 must equal num_layers=24" in ms[4].skip_reason


def test_general_layout_missing_column_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("gpu,num_gpus\nA100,8\n")
    with pytest.raises(MeasurementFileError, match="needs columns .*num_layers"):
        read_measurements(path)
    # a cell a prediction cannot do without skips its row, naming it; the file is read
    path.write_text(GENERAL_HEADER + "\nA100,16,8,24,2048,16,1024,64,2,2,2,four,1,n,full,0.5,x\n"
                    "A100,16,8,24,2048,16,1024,64,2,2,2,4,1,n,full,0.5,x\n")
    ms = read_measurements(path)
    assert ms[0].session is None and ms[0].skip_reason == "column 'data_parallel': 'four' is not a number"
    assert ms[0].skip_causes == ["unreadable data_parallel"] and ms[1].skip_reason == ""


def test_error_metrics_closed_form():
    m = error_metrics(np.array([1.1, 1.8, 3.0]), np.array([1.0, 2.0, 3.0]))
    assert m["mape_percent"] == pytest.approx(20 / 3)
    assert m["median_ape_percent"] == pytest.approx(10.0)
    assert m["max_ape_percent"] == pytest.approx(10.0)
    assert m["r2"] == pytest.approx(1 - (0.01 + 0.04) / 2.0)


NCCL_STDOUT = """# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid  1 on host device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  2 on host device  1 [0x0a] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  3 on host device  2 [0x47] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  4 on host device  3 [0x4d] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        4096          1024     float     sum      -1    20.00    0.20    0.31      0    19.00    0.22    0.32      0
        1024           256     float     sum      -1    10.00    0.10    0.15      0    10.50    0.10    0.15      0
        2048           512     float     sum      -1    14.00    0.15    0.22      0    13.00    0.16    0.24      0
# Out of bounds values : 0 OK
"""


def test_nccl_tests_stdout(tmp_path):
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(NCCL_STDOUT)
    c = read_nccl_tests(path)
    assert (c.kind, c.group_size) == ("all_reduce", 4)
    assert c.nbytes.tolist() == [1024, 2048, 4096]
    np.testing.assert_allclose(c.time_s, [10e-6, 14e-6, 20e-6])


def test_nccl_tests_authors_csv(tmp_path):
    path = tmp_path / "a100_allreduce_3gpu.csv"
    path.write_text("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n"
                    "1048576,262144,float,92790,19.78,92150,19.91\n"
                    "2097152,524288,float,93250,39.36,92970,39.47\n")
    c = read_nccl_tests(path)
    assert (c.kind, c.group_size) == ("all_reduce", 3)
    np.testing.assert_allclose(c.time_s, [92790e-9, 93250e-9])


def test_nccl_tests_needs_group_size(tmp_path):
    path = tmp_path / "allreduce.csv"
    path.write_text("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n1024,256,float,10,1,10,1\n")
    with pytest.raises(NcclTestsError, match="number of GPUs"):
        read_nccl_tests(path)
    assert read_nccl_tests(path, group_size=2).group_size == 2


def test_import_into_store_then_interpolate_and_extrapolate(tmp_path):
    store_path = tmp_path / "s.h5"
    generate_store("A100-SXM4-80GB", date="2026-01-01").save(store_path)
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(NCCL_STDOUT)
    assert main(["profile", "import-nccl-tests", str(path), "--into", str(store_path)]) == 0
    from core.store.profile_store import ProfileStore
    s = ProfileStore.open(store_path)
    inside = s.collective_time("all_reduce", 4, 2048 * 2**0.5)
    assert inside.time_s == pytest.approx(np.exp((np.log(14e-6) + np.log(20e-6)) / 2 - 0 * 1))
    assert inside.time_s == pytest.approx((14e-6 * 20e-6) ** 0.5) and not inside.extrapolated
    outside = s.collective_time("all_reduce", 4, 2**20)
    assert outside.extrapolated and outside.source == "fit" and outside.time_s > 20e-6


def test_fit_curve_is_exact_on_piecewise_power_law():
    from core.store.nccl_tests import CollectiveCurve
    n = 2.0 ** np.arange(10, 30.01, 0.25)  # knots at 2^10, 2^15, ..., 2^30
    t = np.where(n < 2**20, 1e-5 * (n / 2**10) ** 0.1, 1e-5 * (2**10) ** 0.1 * (n / 2**20) ** 0.9)
    fitted = fit_curve(CollectiveCurve("all_reduce", 8, n, t), num_knots=5)  # knot at 2^20
    back = np.exp(np.interp(np.log(n), np.log(fitted.nbytes), np.log(fitted.time_s)))
    np.testing.assert_allclose(back, t, rtol=1e-9)


def small_sessions():
    """Plans of small models that exercise compute, tensor, pipeline and data parallelism."""
    out = []
    for (h, L, t, p, d, b, B, gpn) in [
        (512, 4, 1, 1, 1, 1, 4, 8), (512, 4, 1, 1, 1, 4, 8, 8), (1024, 4, 2, 1, 1, 2, 8, 8),
        (1024, 8, 1, 2, 1, 1, 8, 8), (1024, 8, 2, 2, 2, 1, 16, 8), (512, 8, 1, 1, 4, 2, 16, 2),
        (768, 4, 1, 2, 4, 1, 8, 2), (1024, 4, 4, 1, 2, 8, 16, 4), (512, 4, 2, 2, 2, 2, 8, 2),
        (1024, 8, 1, 4, 2, 2, 16, 4), (768, 8, 2, 1, 4, 4, 32, 2), (512, 4, 1, 1, 8, 1, 16, 4),
    ]:
        out.append(Session(ModelConfig("tiny", L, h, 8, None, 512, 50257),
                           ParallelPlan(t, p, d, b, B, "1f1b", "full", "fp16"),
                           ClusterConfig("A100-SXM4-80GB", gpn, None, 200.0), CostConfig()))
    return out


def test_linearization_is_exact_at_its_point():
    base = generate_store("A100-SXM4-80GB", date="2026-01-01")
    op_model = {**DEFAULT_OP_MODEL, "op_overhead_s": 2e-4, "inter_node_efficiency": 0.6,
                "collective_overhead_s": 3e-5, "p2p_overhead_s": 1e-4}
    sessions = small_sessions()
    rows = [linearize(s, base, op_model) for s in sessions]
    sim = [simulate(s, model_store(base, op_model)).report.iteration_time_s for s in sessions]
    np.testing.assert_allclose(predict_linearized(rows, op_model), sim, rtol=1e-9)
    # moving only communication parameters keeps the path: still exact
    moved = {**op_model, "inter_node_efficiency": 0.3, "collective_overhead_s": 1e-4,
             "p2p_overhead_s": 2e-4}
    sim = [simulate(s, model_store(base, moved)).report.iteration_time_s for s in sessions]
    np.testing.assert_allclose(predict_linearized(rows, moved), sim, rtol=1e-9)


def test_balanced_weights_give_each_file_its_share():
    from core.accuracy.calibrate import balanced_weights
    w = balanced_weights([3, 1])
    np.testing.assert_allclose(w, [2 / 3, 2 / 3, 2 / 3, 2.0])  # each file half of the total, 4
    w = balanced_weights([3, 1], [1, 4])
    np.testing.assert_allclose(w, [4 / 15] * 3 + [16 / 5])      # one fifth and four fifths of 4
    with pytest.raises(ValueError, match="one positive share per file"):
        balanced_weights([3, 1], [1, 0])


def test_calibration_recovers_known_parameters():
    base = generate_store("A100-SXM4-80GB", date="2026-01-01")
    truth = {**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.55, "memory_efficiency": 0.45,
             "op_overhead_s": 1.5e-4, "iteration_overhead_s": 0.02, "inter_node_efficiency": 0.4,
             "p2p_overhead_s": 5e-4}
    sessions = small_sessions()
    measured = np.array([simulate(s, apply_fit(base, truth)).report.iteration_time_s for s in sessions])
    names = ["gemm_efficiency_max", "memory_efficiency", "op_overhead_s", "iteration_overhead_s",
             "inter_node_efficiency", "p2p_overhead_s"]
    res = fit(sessions, measured, base, params=names, rounds=3, corrections=False,
              start={**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.8, "memory_efficiency": 0.8,
                     "op_overhead_s": 5e-5, "iteration_overhead_s": 0.001,
                     "inter_node_efficiency": 0.9, "p2p_overhead_s": 1e-5})
    for n in names:
        assert res.op_model[n] == pytest.approx(truth[n], rel=0.02), n
    assert res.train_metrics["max_ape_percent"] < 0.1


def test_cross_validation_predicts_held_out_runs_of_a_known_model():
    from core.accuracy.calibrate import cross_validate
    base = generate_store("A100-SXM4-80GB", date="2026-01-01")
    truth = {**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.6, "op_overhead_s": 1e-4}
    sessions = small_sessions()
    measured = np.array([simulate(s, apply_fit(base, truth)).report.iteration_time_s for s in sessions])
    pred, met = cross_validate(sessions, measured, base, folds=3, corrections=False, rounds=2,
                               params=["gemm_efficiency_max", "op_overhead_s"],
                               start={**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.8,
                                      "op_overhead_s": 5e-5})
    assert met["n"] == len(sessions) and met["max_ape_percent"] < 0.5
    np.testing.assert_allclose(pred, measured, rtol=5e-3)


def test_shape_factors_absorb_a_shape_specific_slowdown():
    base = generate_store("A100-SXM4-80GB", date="2026-01-01")
    sessions = small_sessions()
    # "measured": the model, but one shape's ops 30% slower; that shape is run three times
    slow = sessions[2]
    for layers, batch in ((8, 16), (12, 32)):
        twin = slow.copy()
        twin.model.num_layers, twin.plan.global_batch_size = layers, batch
        sessions.append(twin)
    from core.accuracy.calibrate import shape_key
    truth_corr = {shape_key(slow): 1.3}
    measured = np.array([simulate(s, apply_fit(base, DEFAULT_OP_MODEL, truth_corr)).report.iteration_time_s
                         for s in sessions])
    res = fit(sessions, measured, base, params=[], rounds=2, start=dict(DEFAULT_OP_MODEL), ridge=1e-6)
    assert res.corrections[shape_key(slow)] == pytest.approx(1.3, rel=0.01)
    assert res.train_metrics["max_ape_percent"] < 0.5
    # shapes run fewer than three times get no factor of their own
    assert set(res.corrections) == {shape_key(slow)}


def test_validate_cli_outputs(tmp_path, capsys):
    csv_path = tmp_path / "runs.csv"
    rows = ["A100,8,8,4,512,8,512,8,1,2,2,2,1,n,full,0.05,x",
            "A100,4,8,4,512,8,512,8,2,1,1,4,1,n,full,0.04,x",
            "A100,4,8,4,512,8,512,8,2,1,1,4,1,y,selective (per-op SAC),0.04,x"]
    csv_path.write_text(GENERAL_HEADER + "\n" + "\n".join(rows) + "\n")
    out_csv, png = tmp_path / "pred.csv", tmp_path / "plot.png"
    assert main(["validate", str(csv_path), "--json", "--out", str(out_csv), "--plot", str(png)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n"] == 2 and doc["skipped"] == 1
    for key in ("mape_percent", "median_ape_percent", "max_ape_percent", "r2"):
        assert key in doc
    lines = out_csv.read_text().splitlines()
    # torchtitan's per-op checkpointing is modelled; with the unfused attention core it is
    # refused by name
    assert len(lines) == 4 and "recompute='selective_op' needs model.attention_kernel" in lines[3]
    assert doc["skipped_by_cause"] == {
        "per-op selective checkpointing (not modelled in this plan)": 1}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("text, needle", [("a,b\n1,2\n", "unknown layout"),
                                          ("gpu,num_gpus\n", "a header and no data rows"),
                                          ("", "empty file")])
def test_validate_cli_bad_file_exits_2(tmp_path, capsys, text, needle):
    path = tmp_path / "x.csv"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    assert needle in capsys.readouterr().err


def test_calibrate_cli_round_trip(tmp_path, capsys):
    """Two measurement files made by a known model: calibrate writes a store that predicts them."""
    base_path = tmp_path / "base.h5"
    generate_store("A100-SXM4-80GB", date="2026-01-01").save(base_path)
    base = generate_store("A100-SXM4-80GB", date="2026-01-01")
    truth = {**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.6, "op_overhead_s": 1e-4}
    truth_store = apply_fit(base, truth)
    sessions = small_sessions()
    paths = []
    for name, part in (("a.csv", sessions[:6]), ("b.csv", sessions[6:])):
        lines = [GENERAL_HEADER.replace("gpus_per_node,", "gpus_per_node,inter_node_bandwidth_gbps,")]
        for s in part:
            m, pl = s.model, s.plan
            t = simulate(s, truth_store).report.iteration_time_s
            lines.append(f"A100,{pl.num_gpus},{s.cluster.gpus_per_node},"
                         f"{s.cluster.inter_node_bandwidth_gbits_per_s},{m.num_layers},{m.hidden_size},"
                         f"{m.num_attention_heads},{m.seq_length},{pl.global_batch_size},"
                         f"{pl.micro_batch_size},{pl.tensor_parallel},{pl.pipeline_parallel},"
                         f"{pl.data_parallel},1,n,full,{t!r},x")
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        paths.append(str(tmp_path / name))
    out = tmp_path / "calibrated.h5"
    # a weight per file, or the command says what is wrong and writes nothing
    assert main(["calibrate", *paths, "--profile", str(base_path), "--out", str(out),
                 "--file-weights", "1"]) == 2
    assert "--file-weights: needs one positive weight per CSV (2), got 1" in capsys.readouterr().err
    assert not out.exists()
    assert main(["calibrate", *paths, "--profile", str(base_path), "--out", str(out), "--folds", "2",
                 "--file-weights", "1", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["cross_validation"]) == {"a.csv", "b.csv"}
    from core.store.profile_store import ProfileStore
    store = ProfileStore.open(out)
    assert store.provenance["method"] == "calibrated" and "a.csv" in store.provenance["data"]
    assert store.provenance["file_weights"] == {"a.csv": 1.0, "b.csv": 3.0}
    # the out-of-fold predictions are kept: every run once, the multi-node runs again as
    # predicted by a fit on the single-node runs (scale transfer)
    r = store.residuals
    cv = r.set == "cross_validated"
    multi = [s for s in sessions if s.plan.num_gpus > s.cluster.gpus_per_node]
    assert cv.sum() == len(sessions) and (r.set == "scale_transfer").sum() == len(multi) > 0
    assert sorted(r.file[cv]) == ["a.csv"] * 6 + ["b.csv"] * 6
    assert list(r.row[r.file == "a.csv"][:6]) == [1, 2, 3, 4, 5, 6]
    truth_s = {(s.plan.num_gpus, s.model.hidden_size, s.plan.micro_batch_size, s.model.num_layers):
               simulate(s, truth_store).report.iteration_time_s for s in sessions}
    for i in np.flatnonzero(cv):  # measured_s is what the file says; the fold's fit is close
        assert r.measured_s[i] in truth_s.values()
    # each run predicted by a 2-fold fit of ten parameters on six runs of the known model: a
    # few per cent at most (the fit is ill-posed enough that rounding moves it by a point)
    assert np.abs(r.log_residual[cv]).max() < 0.06
    assert "error_band" in store.provenance
    assert main(["validate", paths[0], "--profile", str(out), "--json"]) == 0
    vdoc = json.loads(capsys.readouterr().out)
    assert vdoc["mape_percent"] < 2.0
    # 12 residuals in two node classes: too few for a 90 % band, and the report says so
    assert vdoc["interval_coverage"] is None and vdoc["interval_rows"] == 0
    assert main(["validate", paths[0], "--profile", str(out), "--coverage", "0.5", "--json"]) == 0
    vdoc = json.loads(capsys.readouterr().out)
    assert vdoc["interval_rows"] == vdoc["n"] and 0 <= vdoc["interval_coverage"] <= 1
    # without --json: the same figures as tables (fitted parameter values, one row per file)
    assert main(["calibrate", *paths, "--profile", str(base_path), "--out", str(out), "--folds", "2",
                 "--file-weights", "1", "3"]) == 0
    text = capsys.readouterr().out
    assert "Fitted parameters" in text and "a.csv" in text and "b.csv" in text
    assert f"{doc['parameters']['gemm_efficiency_max']:.4g}" in text
    assert f"{doc['cross_validation']['a.csv']['mape_percent']:.2f}" in text
    assert main(["calibrate", *paths, "--profile", str(base_path), "--out", str(out), "--folds", "0"]) == 0
    capsys.readouterr()
    assert ProfileStore.open(out).residuals is None


# --------------------------------------------------------------------------- modern published runs

MODERN_HEADER = ("source_id,gpu,num_gpus,gpus_per_node,inter_node_bandwidth_gbps,framework,model_name,"
                 "num_layers,hidden_size,num_attention_heads,num_query_groups,ffn_hidden_size,activation,"
                 "normalization,seq_length,vocab_size,tied_embeddings,num_experts,moe_top_k,"
                 "moe_ffn_hidden_size,global_batch_size,micro_batch_size,tensor_parallel,"
                 "pipeline_parallel,data_parallel,context_parallel,expert_parallel,"
                 "virtual_pipeline_stages,sequence_parallel,recompute,distributed_optimizer,fsdp,"
                 "precision,measured_iteration_time_s,tokens_per_s_per_gpu,model_tflops_per_gpu,"
                 "mfu_percent,notes")


def _modern_row(**kw) -> str:
    """A published-runs row of a GPT model (what is modelled), with ``kw`` replacing cells."""
    cells = dict(source_id="X", gpu="H100-SXM-80GB", num_gpus=16, gpus_per_node=8,
                 inter_node_bandwidth_gbps=3200, framework="Megatron-LM", model_name="GPT-3 1.3B",
                 num_layers=24, hidden_size=2048, num_attention_heads=16, num_query_groups=16,
                 ffn_hidden_size=8192, activation="gelu", normalization="layernorm", seq_length=2048,
                 vocab_size=50257, tied_embeddings="y", num_experts="", moe_top_k="",
                 moe_ffn_hidden_size="", global_batch_size=64, micro_batch_size=2,
                 tensor_parallel=2, pipeline_parallel=2, data_parallel=4, context_parallel=1,
                 expert_parallel="", virtual_pipeline_stages=1, sequence_parallel="n",
                 recompute="full", distributed_optimizer="n", fsdp="n",
                 precision="bf16 mixed precision", measured_iteration_time_s=1.0,
                 tokens_per_s_per_gpu="", model_tflops_per_gpu="", mfu_percent="", notes='"a, b"')
    cells.update(kw)
    return ",".join(str(cells[c]) for c in MODERN_HEADER.split(","))


def test_modern_columns_at_gpt_values_are_predicted_on_the_new_gpu_kinds(tmp_path):
    rows = [_modern_row(), _modern_row(gpu="B200-180GB"),
            _modern_row(gpu="GB200 (NVL72)", gpus_per_node=72, num_gpus=72, data_parallel=18,
                        global_batch_size=72, micro_batch_size=1, inter_node_bandwidth_gbps=28800)]
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    assert [m.skip_reason for m in ms] == ["", "", ""]
    assert [m.session.cluster.gpu for m in ms] == ["H100-SXM5-80GB", "B200-180GB", "GB200-NVL72"]
    assert ms[0].session.plan.precision == "bf16" and ms[0].group["model"] == "GPT-3 1.3B"
    result = predict_rows(ms, lambda s: simulate(s).report.iteration_time_s)
    assert result.used.all() and result.predicted_s[1] < result.predicted_s[0]


@pytest.mark.parametrize("cells, field, value", [
    ({"activation": "swiglu"}, "activation", "swiglu"),
    ({"normalization": "rmsnorm"}, "normalization", "rmsnorm"),
    ({"num_query_groups": 4}, "num_query_groups", 4),
    ({"tied_embeddings": "n"}, "tied_embeddings", False),
])
def test_model_family_columns_are_simulated(tmp_path, cells, field, value):
    """The dense families are modelled (core.model.model_math): the family columns set the model."""
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == "" and getattr(m.session.model, field) == value
    assert simulate(m.session).report.iteration_time_s > 0


def test_llama_style_rows_get_the_whole_family(tmp_path):
    """SwiGLU + RMSNorm rows are the README's Llama-style models: RoPE, no linear biases,
    fused (flash) attention, which the columns do not hold."""
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(
        activation="swiglu", normalization="rmsnorm", num_query_groups=4, tied_embeddings="n",
        ffn_hidden_size=5632) + "\n")
    (m,) = read_measurements(path)
    model = m.session.model
    assert m.skip_reason == ""
    assert (model.position_embedding, model.add_bias_linear, model.attention_kernel) == (
        "rope", False, "flash")
    h, f, L, V = 2048, 5632, 24, 50432  # V padded for t=2: a multiple of 256
    layer = h * h + 2 * h * (h // 16) * 4 + h * h + 3 * h * f + 2 * h
    assert num_parameters(model, 2) == L * layer + 2 * V * h + h


@pytest.mark.parametrize("cells, cause, words", [
    ({"activation": "relu"}, "invalid plan (model.activation)", 'activation="relu" is not one of'),
    ({"fsdp": '"y: HSDP (shard size not stated)"'},
     "hybrid sharded data parallelism (HSDP)", "hybrid sharding over groups other than a node"),
    ({"fsdp": '"y: HSDP (shard within 8-GPU node, replicate across nodes)"', "data_parallel": 3,
      "num_gpus": 12, "global_batch_size": 48},
     "invalid plan (plan.data_parallel_shard_size)", "does not divide data_parallel=3"),
    ({"fsdp": "y", "distributed_optimizer": "y"}, "distributed optimizer and FSDP", "both y"),
    ({"recompute": "", "framework": "torchtitan"}, "recompute not stated", "recompute is empty"),
    ({"recompute": "selective", "framework": "torchtitan"},
     "selective recomputation (other than Megatron's)", "is not Megatron's"),
    ({"recompute": "selective (fraction of blocks not stated)"},
     "selective recomputation (other than Megatron's)", "fraction of the layers"),
    ({"notes": '"x; sliding window"'}, "sliding-window attention", "sliding-window"),
    ({"recompute": "selective (per-op SAC)", "framework": "torchtitan"},
     "per-op selective checkpointing (not modelled in this plan)",
     "recompute='selective_op' with tensor_parallel_size=2 needs sequence_parallel"),
    ({"recompute": "selective (per-op SAC)"},  # Megatron-LM recomputes by module
     "selective recomputation (other than Megatron's)", "recomputes by module"),
    ({"gpu": "H100 NVL"}, "GPU kind without a shipped profile", "'H100 NVL' has no shipped profile"),
    ({"fsdp": "maybe"}, "unreadable fsdp", "expected y or n"),
    ({"num_gpus": 32}, "GPU count", "num_gpus=32 disagrees with t*p*d=16"),
])
def test_a_row_needing_what_is_not_modelled_is_skipped_with_its_cause(tmp_path, cells, cause, words):
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_causes == [cause] and words in m.skip_reason


@pytest.mark.parametrize("cells, overlap, assumption", [
    ({"notes": '"x; async TP"', "framework": "torchtitan", "sequence_parallel": "y"}, True,
     "async-tp-overlap"),
    ({"framework": "Megatron-Bridge (Megatron-Core)", "sequence_parallel": "y"}, True,
     "bridge-tp-comm-overlap"),
    ({"framework": "Megatron-Bridge (Megatron-Core)", "sequence_parallel": "n"}, False, None),
    ({"sequence_parallel": "y"}, False, None),  # Megatron-LM: the overlap is not stated
])
def test_tp_communication_overlap_of_a_row(tmp_path, cells, overlap, assumption):
    """Megatron-Bridge rows with t > 1 and sequence parallelism, and torchtitan's async TP,
    overlap the tensor-parallel collectives with their GEMMs (plan.tp_comm_overlap), each a
    named assumption; nothing else does."""
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == ""
    assert m.session.plan.tp_comm_overlap is overlap
    names = {"async-tp-overlap", "bridge-tp-comm-overlap"}
    assert names & {a.split(":")[0] for a in m.assumptions} == ({assumption} if assumption else set())


@pytest.mark.parametrize("framework, dtype", [
    ("fms-fsdp (PyTorch FSDP1, torch.compile)", "bf16"), ("torchtitan (FSDP2)", None)])
def test_fsdp1_rows_reduce_gradients_in_bf16(tmp_path, framework, dtype):
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(framework=f'"{framework}"', fsdp="y",
                                                        tensor_parallel=1, data_parallel=8) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == "" and m.session.plan.grad_reduce_dtype == dtype
    assert any(a.startswith("fsdp1-bf16-reduce") for a in m.assumptions) is (dtype == "bf16")


def test_a_recipe_whose_sibling_run_needs_recomputation_is_skipped(tmp_path):
    """Two runs of one recipe (same source, GPU, model, precision and layout; d differs) with
    recompute not stated: at d=1 the distributed optimizer's state does not fit without
    recomputation, so the recipe recomputed something and the d=64 run, which would fit, is
    skipped too rather than predicted under recompute=none."""
    big = dict(framework="Megatron-LM", recompute="", hidden_size=8192, num_layers=80,
               num_attention_heads=64, num_query_groups=64, ffn_hidden_size=32768,
               tensor_parallel=8, pipeline_parallel=1, micro_batch_size=1, global_batch_size=64,
               distributed_optimizer="y")
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**big, data_parallel=1, num_gpus=8)
                    + "\n" + _modern_row(**big, data_parallel=64, num_gpus=512) + "\n"
                    + _modern_row(**{**big, "pipeline_parallel": 2}, data_parallel=32, num_gpus=512)
                    + "\n" + _modern_row(**{**big, "distributed_optimizer": "n"}, data_parallel=1,
                                         num_gpus=8) + "\n")
    small, large, other, replicated = read_measurements(path)
    assert small.skip_causes == ["recompute not stated (none does not fit)"]
    assert large.skip_causes == ["recompute not stated (a run of the same recipe needs it)"]
    assert "row 1 of the same source" in large.skip_reason
    assert other.skip_reason == ""  # another pipeline size: another recipe
    assert replicated.skip_causes == ["recompute not stated (none does not fit)"]


def test_a_sibling_with_other_sharding_is_another_recipe(tmp_path):
    """The sharding changes the memory: a replicated run (no distributed optimizer) that does
    not fit without recomputation says nothing of the sharded run of the same layout, which
    fits and is predicted."""
    big = dict(framework="Megatron-LM", recompute="", hidden_size=8192, num_layers=80,
               num_attention_heads=64, num_query_groups=64, ffn_hidden_size=32768,
               tensor_parallel=8, pipeline_parallel=1, micro_batch_size=1, global_batch_size=64,
               data_parallel=64, num_gpus=512)
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**big, distributed_optimizer="n") + "\n"
                    + _modern_row(**big, distributed_optimizer="y") + "\n")
    replicated, sharded = read_measurements(path)
    assert replicated.skip_causes == ["recompute not stated (none does not fit)"]
    assert sharded.skip_reason == ""


def test_hsdp_and_per_op_checkpointing_rows_are_simulated(tmp_path):
    """An HSDP row sharding within a node: data_parallel_shard_size = gpus_per_node/(t*cp)
    (t=2: 4 of the d=8 ranks, two replicas); a torchtitan per-op SAC row (t=1, Llama-style):
    recompute=selective_op; both predicted."""
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(
        fsdp='"y: HSDP (shard within 8-GPU node, replicate across nodes)"', data_parallel=8,
        num_gpus=32) + "\n" + _modern_row(
        recompute="selective (per-op SAC)", framework="torchtitan", tensor_parallel=1,
        data_parallel=8, activation="swiglu", normalization="rmsnorm", fsdp="y") + "\n")
    hsdp, sac = read_measurements(path)
    assert hsdp.skip_reason == "" and hsdp.session.plan.data_parallel_shard_size == 4
    assert hsdp.session.plan.zero_stage == 3
    assert sac.skip_reason == "" and sac.session.plan.recompute == "selective_op"
    for m in (hsdp, sac):
        assert simulate(m.session).report.iteration_time_s > 0


def test_a_mixture_of_experts_row_is_simulated(tmp_path):
    """num_experts, moe_top_k and expert_parallel are read into the session (MoE is modelled):
    eight experts, top-2, ep = 4 inside the t*d = 8 ranks; MFU on the active parameters."""
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(
        num_experts=8, moe_top_k=2, expert_parallel=4, sequence_parallel="y") + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == ""
    model, plan = m.session.model, m.session.plan
    assert (model.num_experts, model.moe_top_k, plan.expert_parallel) == (8, 2, 4)
    report = simulate(m.session).report
    assert report.num_active_parameters < report.num_parameters and report.ep_comm_s > 0


def test_a_context_parallel_row_is_simulated_on_t_p_cp_d_gpus(tmp_path):
    """num_gpus = t*p*cp*d: a row with cp=2 on 32 GPUs is read and simulated (FlashAttention:
    the row's SwiGLU/RMSNorm family brings it; Megatron-Core's ring needs it)."""
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(
        context_parallel=2, num_gpus=32, activation="swiglu", normalization="rmsnorm",
        ffn_hidden_size=5632) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == "" and m.session.plan.context_parallel == 2
    assert m.session.plan.num_gpus == 32
    report = simulate(m.session).report
    assert report.num_gpus == 32 and report.iteration_time_s > 0


@pytest.mark.parametrize("cells, field, value", [
    ({"fsdp": "y: FSDP (full shard)"}, "zero_stage", 3),
    ({"distributed_optimizer": "y"}, "zero_stage", 1),
    ({"distributed_optimizer": "n/a (FSDP2)", "fsdp": "n"}, "zero_stage", 0),
    ({"sequence_parallel": "y (torchtitan TP plan)"}, "sequence_parallel", True),
    ({"recompute": "selective"}, "recompute", "selective"),
])
def test_sharding_sequence_parallel_and_selective_rows_are_simulated(tmp_path, cells, field, value):
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == "" and getattr(m.session.plan, field) == value
    assert simulate(m.session).report.iteration_time_s > 0


def test_validate_cli_prints_the_skip_counts(tmp_path, capsys):
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join([
        _modern_row(), _modern_row(activation="relu", gpu="H100-96GB-HBM2e (500 W)"),
        _modern_row(activation="relu")]) + "\n")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "modern.csv: 1 rows predicted, 2 skipped" in out
    assert 'skipped row 3: invalid plan: activation="relu" is not one of gelu, swiglu' in out


def test_calibrating_one_store_on_one_run_prints_null_for_what_one_run_cannot_define(tmp_path,
                                                                                    capsys):
    """`vtrain calibrate CSV --profile P --out X --json` on a single run: R^2 is undefined there
    and prints as null (as the shared fit prints it), not a refusal after the store is written."""
    csv = tmp_path / "one.csv"
    csv.write_text(MODERN_HEADER + "\n" + _modern_row() + "\n")
    out = tmp_path / "one.h5"
    from tests.conftest import ROOT
    assert main(["calibrate", str(csv), "--profile", str(ROOT / "profiles" / "H100-SXM5-80GB.h5"), "--out", str(out),
                 "--folds", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["in_sample"]["n"] == 1 and doc["in_sample"]["r2"] is None
    assert doc["in_sample"]["mape_percent"] >= 0 and out.exists()


def test_calibrating_a_store_keeps_what_the_runs_do_not_fit(tmp_path, capsys):
    """`vtrain calibrate --profile P --out X`: the parameters the fit does not touch (the FP8 GEMM,
    NCCL and flex all-to-all and point-to-point efficiencies) keep P's values; they used to
    fall back to the defaults (1), silently changing how X times FP8 GEMMs and expert
    exchanges."""
    from core.store.profile_store import ProfileStore
    from tests.conftest import ROOT
    base = ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5")
    base.op_model = {**base.op_model, "fp8_gemm_efficiency": 0.8, "all_to_all_efficiency": 0.5,
                     "flex_all_to_all_efficiency": 0.9, "p2p_efficiency": 0.7}
    base_path = tmp_path / "base.h5"
    base.save(base_path)
    csv = tmp_path / "runs.csv"
    csv.write_text(MODERN_HEADER + "\n" + "\n".join(
        _modern_row(measured_iteration_time_s=t, micro_batch_size=b) for t, b in ((1.0, 1), (1.9, 2)))
        + "\n")
    out = tmp_path / "out.h5"
    assert main(["calibrate", str(csv), "--profile", str(base_path), "--out", str(out),
                 "--folds", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for name, value in (("fp8_gemm_efficiency", 0.8), ("all_to_all_efficiency", 0.5),
                        ("flex_all_to_all_efficiency", 0.9), ("p2p_efficiency", 0.7)):
        assert doc["parameters"][name] == value, name
        assert ProfileStore.open(out).op_model[name] == value, name


def test_empty_parallel_size_or_time_is_derived_else_the_row_is_skipped(tmp_path, capsys):
    """One empty (or "n/a (FSDP2)") parallel size is the one that makes num_gpus = t*p*cp*d;
    an empty time comes from tokens_per_s_per_gpu (GBS*seq/(tok/s/GPU*N)); a cell neither fixes
    skips only its row, naming the column, and the JSON and --out of such a row hold no time."""
    rows = [_modern_row(data_parallel="n/a (FSDP2)"), _modern_row(tensor_parallel="n/a"),
            _modern_row(num_gpus=""), _modern_row(measured_iteration_time_s="",
                                                  tokens_per_s_per_gpu=4096),
            _modern_row(micro_batch_size="n/a"), _modern_row(data_parallel="", num_gpus=""),
            _modern_row(data_parallel="", num_gpus=10), _modern_row(measured_iteration_time_s="")]
    path = tmp_path / "modern.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    for m in ms[:4]:
        assert m.skip_reason == "", m.skip_reason
        pl = m.session.plan
        assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel) == (2, 2, 4)
    names = [{a.split(":")[0] for a in m.assumptions} for m in ms[:4]]
    assert all("parallel-size-from-gpus" in n for n in names[:3])
    assert "data_parallel=4" in " ".join(ms[0].assumptions)
    # 64 sequences x 2048 tokens / (4096 tokens/s/GPU x 16 GPUs) = 2 s
    assert ms[3].measured_s == pytest.approx(2.0) and "time-from-throughput" in names[3]
    assert ms[4].session is None and "column 'micro_batch_size' is empty; it is required" in ms[4].skip_reason
    assert "column 'num_gpus' is empty" in ms[5].skip_reason  # two unknowns: not derived
    assert "column 'data_parallel' is empty" in ms[6].skip_reason  # 10 / (2*2) is not whole
    assert "measured_iteration_time_s' is empty" in ms[7].skip_reason
    assert ms[7].skip_causes == ["measured_iteration_time_s empty"]
    from core.cli import main
    out = tmp_path / "rows.csv"
    assert main(["validate", str(path), "--json", "--out", str(out)]) == 0
    import json
    rec = json.loads(capsys.readouterr().out)["rows"]
    assert rec[4]["measured_s"] is None and rec[4]["predicted_s"] is None
    assert rec[0]["predicted_s"] > 0
    lines = out.read_text().splitlines()
    assert lines[5].split(",")[8] == ""  # row 5's measured time: empty, not "nan"


def test_torchtitan_stage_layers_closed_form():
    """torchtitan's split counts the embedding and the output layer as one layer each and gives
    the remainder to the first stages; Llama 3 405B's 126 layers over 16 stages are the Llama 3
    paper's 7, 14 x 8, 7."""
    from core.io.torchtitan_import import torchtitan_stage_layers
    assert torchtitan_stage_layers(126, 16) == [7] + [8] * 14 + [7]
    assert torchtitan_stage_layers(61, 4) == [15, 16, 16, 14]  # 63 = 16 + 16 + 16 + 15
    assert torchtitan_stage_layers(30, 4) == [7, 8, 8, 7]
    assert sum(torchtitan_stage_layers(77, 6)) == 77


@pytest.mark.parametrize("framework, layers, p, vp, layout", [
    ("torchtitan (FSDP2)", 126, 16, 1, "Et*7|" + "t*8|" * 14 + "t*7L"),
    ("torchtitan", 126, 8, 2, "Et*7|" + "t*8|" * 14 + "t*7L"),
    ("torchtitan", 30, 4, 1, "Et*7|t*8|t*8|t*7L"),
    ("Meta internal (PyTorch)", 126, 16, 1, "Et*7|" + "t*8|" * 14 + "t*7L"),
    ("Meta internal (PyTorch)", 61, 4, 1, None),  # L + 2 does not divide: Meta's split unknown
    ("torchtitan", 32, 4, 1, None),  # divisible: the even split, as before
])
def test_torchtitan_rows_take_torchtitans_uneven_split(tmp_path, framework, layers, p, vp, layout):
    row = _modern_row(framework=framework, num_layers=layers, pipeline_parallel=p,
                      virtual_pipeline_stages=vp, tensor_parallel=1, data_parallel=1, num_gpus=p,
                      global_batch_size=32, micro_batch_size=1)
    path = tmp_path / "tt.csv"
    path.write_text(MODERN_HEADER + "\n" + row + "\n")
    (m,) = read_measurements(path)
    named = any(a.startswith("torchtitan-pipeline-split:") for a in m.assumptions)
    if layout is None:
        assert not named
        if layers % p:
            assert f"num_layers={layers} is not divisible" in m.skip_reason
        else:
            assert m.skip_reason == "" and m.session.plan.pipeline_model_parallel_layout is None
        return
    assert m.skip_reason == "" and named
    assert m.session.plan.pipeline_model_parallel_layout == layout
    from core.sim.op_times import virtual_stage_layers
    import numpy as np
    from core.io.torchtitan_import import torchtitan_stage_layers
    assert np.diff(virtual_stage_layers(m.session)).tolist() == torchtitan_stage_layers(layers, p * vp)


@pytest.mark.parametrize("name, notes, refused", [
    ("Nemotron-H-56B", "squared-ReLU MLP", True),
    ("Nemotron-4-340B", "squared-ReLU MLP", False),
    ("Jamba-1.5", "", True),
    ("Custom 8B", "hybrid Mamba-Transformer (54 Mamba-2 + 10 attention layers)", True),
    ("Qwen3-Next-80B-A3B", "gated DeltaNet + gated attention", True),
    ("Llama 3 8B", "no Mamba layers", False),
])
def test_hybrid_models_are_refused_never_timed_as_transformers(tmp_path, name, notes, refused):
    path = tmp_path / "h.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(model_name=name, notes=f'"{notes}"') + "\n")
    (m,) = read_measurements(path)
    cause = "hybrid model (Mamba / state-space or linear-attention layers)"
    assert (cause in m.skip_causes) is refused, m.skip_reason


@pytest.mark.parametrize("cells, words", [
    (dict(measured_iteration_time_s="", tokens_per_s_per_gpu="1e-300"), "outside 0.0001 s to 86400 s"),
    (dict(measured_iteration_time_s=1e9), "outside"),
    (dict(measured_iteration_time_s=1e-9), "outside"),
])
def test_an_absurd_time_skips_its_row(tmp_path, cells, words):
    path = tmp_path / "t.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n" + _modern_row() + "\n")
    ms = read_measurements(path)
    assert words in ms[0].skip_reason and ms[0].skip_causes == ["measured time out of range"]
    assert ms[1].skip_reason == ""


@pytest.mark.parametrize("cells, check", [
    # numbers as tables write them
    (dict(num_gpus='"1,024"', data_parallel=256, global_batch_size=1024), lambda m: m.session.plan.num_gpus == 1024),
    (dict(virtual_pipeline_stages="2 (interleaved)"), lambda m: m.session.plan.virtual_pipeline_stages == 2),
    (dict(tensor_parallel="TP2"), lambda m: m.session.plan.tensor_parallel == 2),
    (dict(seq_length="2048 tokens"), lambda m: m.session.model.seq_length == 2048),
    (dict(inter_node_bandwidth_gbps="3.2 Tb/s"),
     lambda m: m.session.cluster.inter_node_bandwidth_gbits_per_s == 3200),
    (dict(measured_iteration_time_s="1500 ms"), lambda m: m.measured_s == pytest.approx(1.5)),
    (dict(measured_iteration_time_s="1.25*"), lambda m: m.measured_s == 1.25),
    # the family's words
    (dict(activation="silu (gated)", normalization="rms_norm"),
     lambda m: (m.session.model.activation, m.session.model.normalization) == ("swiglu", "rmsnorm")),
    (dict(activation="SiLU", normalization="RMSNorm"),
     lambda m: m.session.model.activation == "swiglu" and "silu-is-swiglu" in _assumed(m)),
    (dict(activation="squared-relu", normalization="LayerNorm1p"),
     lambda m: (m.session.model.activation, m.session.model.normalization) == ("squared_relu", "layernorm")),
    (dict(tied_embeddings="untied"), lambda m: m.session.model.tied_embeddings is False),
    (dict(tied_embeddings="\u2717"), lambda m: m.session.model.tied_embeddings is False),
    (dict(tied_embeddings="shared"), lambda m: m.session.model.tied_embeddings is True),
    (dict(tied_embeddings="0.5"), lambda m: "unreadable tied_embeddings" in m.skip_causes),
    # recompute and precision
    (dict(recompute="AC=full"), lambda m: m.session.plan.recompute == "full"),
    (dict(recompute="n/a"), lambda m: m.session.plan.recompute == "none"
     and "megatron-recompute-default" in _assumed(m)),  # Megatron-LM: its default
    (dict(recompute="none"), lambda m: m.session.plan.recompute == "none" and not m.skip_reason),
    (dict(framework="NeMo 2.0", recompute="selective (attention)"),
     lambda m: m.session.plan.recompute == "selective" and not m.skip_reason),
    (dict(precision="E4M3/E5M2 hybrid"), lambda m: m.session.plan.precision == "fp8"),
    (dict(precision="FP8 (DeepSeek recipe)"), lambda m: m.session.plan.fp8_recipe == "blockwise"),
    (dict(framework="llm-foundry", precision="amp_fp8"), lambda m: m.session.plan.fp8_recipe == "delayed"),
    # sharding and notes
    (dict(fsdp="yes (HYBRID_SHARD)"), lambda m: "hybrid sharded data parallelism (HSDP)" in m.skip_causes),
    (dict(notes='"no biases; GPT-style"'), lambda m: m.session.model.add_bias_linear is False),
])
def test_reader_takes_other_tables_spellings(tmp_path, cells, check):
    path = tmp_path / "s.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n")
    (m,) = read_measurements(path)
    assert check(m), (m.skip_reason, m.session and m.session.plan, m.assumptions)


def _assumed(m) -> set[str]:
    return {a.split(":")[0] for a in m.assumptions}


@pytest.mark.parametrize("cells, filled", [
    (dict(model_name="Llama3-70B", num_layers=80, hidden_size=8192, num_attention_heads=64,
          activation="", normalization="", num_query_groups="", ffn_hidden_size="",
          vocab_size="", tied_embeddings="", tensor_parallel=8, pipeline_parallel=2,
          data_parallel=1, global_batch_size=16),
     dict(activation="swiglu", normalization="rmsnorm", num_query_groups=8, ffn_hidden_size=28672,
          vocab_size=128256, tied_embeddings=False)),
    (dict(model_name="Meta-Llama-3.1-8B", num_layers=32, hidden_size=4096, num_attention_heads=32,
          vocab_size="", num_query_groups="", ffn_hidden_size=14336, activation="swiglu",
          normalization="rmsnorm", tied_embeddings="n"),
     dict(vocab_size=128256, num_query_groups=8)),
])
def test_empty_family_cells_of_a_named_public_model_come_from_its_preset(tmp_path, cells, filled):
    path = tmp_path / "e.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells) + "\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == "" and "shape-from-model-name" in _assumed(m)
    for k, value in filled.items():
        assert getattr(m.session.model, k) == value, k
    # an unknown model keeps the documented defaults, named nowhere as a preset
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**{**cells, "model_name": "Custom"}) + "\n")
    (m,) = read_measurements(path)
    assert "shape-from-model-name" not in _assumed(m)


def test_recipes_sequence_parallel_and_distributed_optimizer_when_unstated(tmp_path):
    rows = [_modern_row(framework="NeMo 2.0", sequence_parallel="", distributed_optimizer=""),
            _modern_row(framework="Megatron-Bridge", sequence_parallel="n/a", distributed_optimizer=""),
            _modern_row(framework="torchtitan", sequence_parallel="", fsdp="y"),
            _modern_row(framework="Megatron-LM", sequence_parallel="", distributed_optimizer="")]
    path = tmp_path / "r.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    pl = [m.session.plan for m in ms]
    assert pl[0].sequence_parallel and pl[0].zero_stage == 1
    assert "sequence parallelism with t > 1" in " ".join(ms[0].assumptions)
    assert pl[1].sequence_parallel and pl[1].zero_stage == 1
    assert {"recipe-sequence-parallel", "recipe-distributed-optimizer"} <= _assumed(ms[1])
    assert pl[2].sequence_parallel and pl[2].zero_stage == 3
    assert not pl[3].sequence_parallel and pl[3].zero_stage == 0  # Megatron-LM's defaults


def test_a_windows_1252_file_and_other_header_cases_are_read(tmp_path):
    header = MODERN_HEADER.replace("num_gpus", "Num GPUs").replace("tensor_parallel", "TENSOR_PARALLEL")
    text = header + "\n" + _modern_row(notes='"1.2 \u00b5s latency \u2014 measured"') + "\n"
    path = tmp_path / "w.csv"
    path.write_bytes(text.encode("cp1252"))
    (m,) = read_measurements(path)
    assert m.skip_reason == "" and m.session.plan.num_gpus == 16
    path.write_bytes(text.encode("utf-16"))
    (m,) = read_measurements(path)
    assert m.skip_reason == ""


def test_capacity_factor_in_notes_refuses_an_moe_row(tmp_path):
    moe = dict(num_experts=8, moe_top_k=2, moe_ffn_hidden_size=8192, expert_parallel=2,
               activation="swiglu", normalization="rmsnorm", sequence_parallel="y")
    rows = [_modern_row(**moe, notes='"capacity factor 1.25 (token dropping)"'),
            _modern_row(**moe, notes='"dropless; capacity factor 1.0 for padding only"'),
            _modern_row(**moe)]
    path = tmp_path / "c.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    assert ms[0].skip_causes == ["MoE capacity factor (token dropping)"]
    assert "MoE capacity factor (token dropping)" not in ms[1].skip_causes
    assert "MoE capacity factor (token dropping)" not in ms[2].skip_causes


@pytest.mark.parametrize("label, precision", [
    ("bfloat16 with float32 master weights", "bf16"), ("bf16 (fp32 optimizer states)", "bf16"),
    ("fp16 + fp32 master", "fp16"), ("bf16 compute, fp32 grad reduce", "bf16"), ("bf16/fp32", None),
])
def test_mixed_precision_labels_naming_the_fp32_master_copy(label, precision):
    """Mixed precision says its FP32 master weights: one training dtype; an FP32 gradient
    reduction is that dtype with plan.grad_reduce_dtype fp32; two bare dtypes are refused."""
    from core.accuracy.validate import _precision_policy, _Row
    row = _Row()
    got = _precision_policy(label, row)
    if precision is None:
        assert row.causes == ["precision"]
    else:
        assert got == (precision, None) and not row.causes
        assert row.grad_reduce_fp32 is ("grad reduce" in label)


_MOE = dict(num_experts=256, moe_top_k=8, moe_ffn_hidden_size=2048, expert_parallel=2,
            activation="swiglu", normalization="rmsnorm", num_layers=61, hidden_size=7168,
            num_attention_heads=128, num_query_groups=128, ffn_hidden_size=18432,
            vocab_size=129280, tensor_parallel=1, pipeline_parallel=1, data_parallel=16,
            global_batch_size=64, micro_batch_size=1, recompute="full", framework="Megatron-LM",
            model_name="MoE-test")
_MLA = "MLA (q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)"


@pytest.mark.parametrize("notes, dense, shared", [
    ("first 3 layers dense FFN 18432, other 58 MoE; 1 shared expert (2048) + 256 routed", 3, 1),
    ("3 dense layers first (FFN 18432) then 58 MoE layers; shared expert: 1 x 2048", 3, 1),
    ("dense FFN in the first three layers; one shared expert of width 2048", 3, 1),
    ("first layer dense (FFN 18432); 2 shared experts (1024 each)", 1, 1),
    ("layers 0-2 dense; 1 shared + 256 routed", 3, 1),
    ("first_k_dense_replace=3, n_shared_experts=1", 3, 1),
    ("moe_layer_freq [0]*3+[1]*58; moe_shared_expert_intermediate_size=4096", 3, 2),
    ("every layer MoE; no shared expert", 0, 0),
    ("dense and MoE layers interleave", None, 0),           # refused: not read
    ("shared experts in every layer", 0, None),             # refused: no count
    ("first 3 layers dense; first_k_dense_replace=1", None, 0),  # contradictory: refused
])
def test_moe_notes_in_other_wordings(tmp_path, notes, dense, shared):
    """Dense first layers and shared experts as other tables write them; a mention that is not
    read (or contradicts itself) refuses the row instead of defaulting to every layer MoE
    without shared experts."""
    path = tmp_path / "m.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**_MOE, notes=f'"{notes}"') + "\n")
    (m,) = read_measurements(path)
    causes = set(m.skip_causes)
    if dense is None:
        assert "mixture of experts (first dense layers)" in causes
    else:
        assert "mixture of experts (first dense layers)" not in causes
        assert m.session.model.moe_first_dense_layers == dense
    if shared is None:
        assert "mixture of experts (shared experts)" in causes
    else:
        assert "mixture of experts (shared experts)" not in causes
        assert m.session.model.num_shared_experts == shared


@pytest.mark.parametrize("notes, field, value", [
    (_MLA, "q_lora_rank", 1536),
    ("MLA without query compression (q_lora_rank 0, kv_lora 512, qk_nope 128, qk_rope 64, "
     "v_head 128)", "q_lora_rank", None),
    (_MLA + "; MTP depth 1", "mtp_num_layers", 1),
    ("head_dim=128", "kv_channels", 128),
    ("128-dim heads", "kv_channels", 128),
    ("QK RMSNorm", "qk_layernorm", True),
    ("qk_layernorm=False", "qk_layernorm", False),
])
def test_model_notes_in_other_wordings(tmp_path, notes, field, value):
    cells = dict(_MOE) if "MLA" in notes else dict(
        activation="swiglu", normalization="rmsnorm", hidden_size=2048, num_attention_heads=32,
        num_query_groups=4, model_name="X")
    path = tmp_path / "n.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**cells, notes=f'"{notes}"') + "\n")
    (m,) = read_measurements(path)
    assert "multi-head latent attention (sizes not in the notes)" not in m.skip_causes
    assert getattr(m.session.model, field) == value, m.skip_reason


@pytest.mark.parametrize("cells, notes, check", [
    (dict(recompute=""), "activation recompute: selective (core attention)",
     lambda m: m.session.plan.recompute == "selective"),
    (dict(recompute=""), "--recompute-granularity full --recompute-method uniform",
     lambda m: m.session.plan.recompute == "full"),
    (dict(recompute=""), "Model TFLOP/s (no recompute credit)",
     lambda m: "recompute-from-notes" not in _assumed(m)),
    (dict(virtual_pipeline_stages=""), "interleaved 1F1B with 3 virtual stages",
     lambda m: m.session.plan.virtual_pipeline_stages == 3),
    (dict(virtual_pipeline_stages=""), "interleaved 1F1B",
     lambda m: "virtual pipeline stages not stated" in m.skip_causes),
    (dict(virtual_pipeline_stages=""), "no interleaving",
     lambda m: m.session.plan.virtual_pipeline_stages is None and not m.skip_reason),
    (dict(precision="FP8"), "fp8 delayed scaling (amax history 1024)",
     lambda m: m.session.plan.fp8_recipe == "delayed"),
    (dict(context_parallel=4, data_parallel=1, seq_length=8192, global_batch_size=16),
     "CP 4 (P2P, no all-to-all)", lambda m: m.session.plan.cp_comm_type == "p2p"),
    (dict(context_parallel=4, data_parallel=1, seq_length=8192, global_batch_size=16,
          tensor_parallel=1, num_gpus=8, gpus_per_node=2),
     "hierarchical (a2a+p2p): all-to-all inside the node",
     lambda m: (m.session.plan.cp_comm_type, m.session.plan.cp_a2a_size) == ("a2a+p2p", 2)),
    (dict(fsdp="HSDP (2 replicas x 4 shards)", framework="torchtitan", tensor_parallel=1,
          pipeline_parallel=1, data_parallel=8, num_gpus=8, recompute="full"), "",
     lambda m: m.session.plan.data_parallel_shard_size == 4),
])
def test_plan_notes_in_other_wordings(tmp_path, cells, notes, check):
    path = tmp_path / "p.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**{
        "activation": "swiglu", "normalization": "rmsnorm", **cells, "notes": f'"{notes}"'}) + "\n")
    (m,) = read_measurements(path)
    assert check(m), (m.skip_reason, m.session and m.session.plan, m.assumptions)


def test_validate_names_each_rows_profile_when_the_gpus_differ(tmp_path, capsys):
    from core.cli import main
    path = tmp_path / "two.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row() + "\n"
                    + _modern_row(gpu="B200-180GB") + "\n")
    assert main(["validate", str(path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "profiles of each row's GPU: B200-180GB (calibrated), H100-SXM5-80GB (calibrated)" in first


def _check_one_row(tmp_path, cells, notes, check):
    """Read one general-layout row (``_modern_row`` with ``cells`` and ``notes``) and check it."""
    path = tmp_path / "one.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**{**cells, "notes": f'"{notes}"'}) + "\n")
    (m,) = read_measurements(path)
    assert check(m), (m.skip_reason, m.session and m.session.plan, m.assumptions)


@pytest.mark.parametrize("cells, notes, check", [
    # negations and contrasts where they stand
    (dict(framework="Megatron-Bridge", sequence_parallel="", tensor_parallel=2),
     "no sequence parallelism (TP without SP)", lambda m: m.session.plan.sequence_parallel is False),
    (dict(sequence_parallel="y"), "tp_comm_overlap was turned off for this run",
     lambda m: m.session.plan.tp_comm_overlap is False),
    (dict(distributed_optimizer="y", overlap_grad_reduce=""),
     "overlap_grad_reduce and overlap_param_gather disabled",
     lambda m: not m.session.plan.overlap_grad_reduce and not m.session.plan.overlap_param_gather),
    (dict(framework="torchtitan", sequence_parallel="y", fsdp="y", distributed_optimizer="n"),
     "async TP disabled (plain TP)", lambda m: m.session.plan.tp_comm_overlap is False),
    (dict(), "unlike GPT-OSS there are no attention sinks",
     lambda m: m.session.model.softmax_type == "vanilla"),
    (dict(activation="swiglu", normalization="rmsnorm"), "neither QK-norm nor QKV bias",
     lambda m: not m.session.model.qk_layernorm and not m.session.model.add_qkv_bias),
    (dict(recompute=""), "recompute off for this run (activation checkpointing disabled)",
     lambda m: m.session.plan.recompute == "none"),
    (dict(precision="BF16 (no FP8)"), "", lambda m: m.session.plan.precision == "bf16"),
    (dict(precision="FP8 (delayed scaling rather than current scaling)"), "",
     lambda m: m.session.plan.fp8_recipe == "delayed"),
    (dict(precision="FP8-DS", framework="NeMo 2.0"), "", lambda m: m.session.plan.fp8_recipe == "delayed"),
    (dict(recompute='"selective (core_attn, mlp)"', framework="Megatron-Core"), "",
     lambda m: m.session.plan.recompute_modules == "core_attn,mlp"),
    (dict(inter_node_bandwidth_gbps="400 Gb/s (per GPU)"), "",
     lambda m: m.session.cluster.inter_node_bandwidth_gbits_per_s == 3200),
    (dict(inter_node_bandwidth_gbps="8x400G"), "",
     lambda m: m.session.cluster.inter_node_bandwidth_gbits_per_s == 3200),
    (dict(seq_length="2K tokens"), "", lambda m: m.session.model.seq_length == 2048),
    (dict(gpu="NVIDIA B200 SXM6 180GB"), "", lambda m: m.session.cluster.gpu == "B200-180GB"),
    # contradictions are refused, never resolved by a guess
    (dict(virtual_pipeline_stages=1), "interleaved schedule, VPP 5",
     lambda m: "notes contradict the row" in m.skip_causes),
    (dict(recompute="none"), "recompute: full (uniform)",
     lambda m: "notes contradict the row" in m.skip_causes),
    # prose about recomputation only fills an empty cell (it is often about another setting)
    (dict(recompute="none"), "full activation checkpointing was too slow, so none",
     lambda m: m.session.plan.recompute == "none" and not m.skip_reason),
    (dict(precision="bf16"), "all GEMMs in FP8 with current scaling",
     lambda m: "notes contradict the row" in m.skip_causes),
    (dict(), "TP=8, PP=2 for this run", lambda m: "notes contradict the row" in m.skip_causes),
    (dict(fsdp='"y (reshard_after_forward=False, ZeRO-2-like)"', distributed_optimizer="n"), "",
     lambda m: "unreadable fsdp" in m.skip_causes),
])
def test_third_round_wordings(tmp_path, cells, notes, check):
    _check_one_row(tmp_path, cells, notes, check)


def test_moe_notes_negations_and_sizes(tmp_path):
    rows = [_modern_row(**_MOE, notes='"DeepEP not used (plain alltoall); the model does not use a '
                                       'shared expert; MTP not used"'),
            _modern_row(**{**_MOE, "expert_parallel": "n/a"}, notes='"EP2 inside DP"'),
            _modern_row(**{**_MOE, "framework": "Megatron-Bridge"},
                        notes='"EP overlap kept on, no token dropping"')]
    path = tmp_path / "moe.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    assert ms[0].session.plan.moe_token_dispatcher_type != "flex"
    assert ms[0].session.model.num_shared_experts == 0 and ms[0].session.model.mtp_num_layers == 0
    assert ms[1].session.plan.expert_parallel == 2 and "size-from-notes" in _assumed(ms[1])
    assert "ep-a2a-overlap-from-notes" in _assumed(ms[2])



@pytest.mark.parametrize("notes, check", [
    # a negation of another setting in the same clause is that setting's
    ("HybridEP dispatcher with token dropping disabled", lambda m: m.session.plan.moe_token_dispatcher_type == "flex"),
    ("DeepEP: no token dropping", lambda m: m.session.plan.moe_token_dispatcher_type == "flex"),
    ("EP overlap kept off", lambda m: not m.session.plan.overlap_moe_expert_parallel_comm),
    ("EP overlap on; the 25.11 run had no EP overlap",
     lambda m: "overlaps stated both on and off" not in m.skip_causes),
    ("the B200 recipe of this model uses EP8", lambda m: "notes contradict the row" not in m.skip_causes),
    ("1 MTP layer in training (MTP not used at inference)", lambda m: m.session.model.mtp_num_layers == 1),
    ("no shared expert overlap (moe_shared_expert_overlap=False); 1 shared expert (2048)",
     lambda m: m.session.model.num_shared_experts == 1),
    ("no shared experts in the 3 dense layers; 1 shared expert (2048)",
     lambda m: m.session.model.num_shared_experts == 1),
    ("CP 2 via DeepSpeed-Ulysses (all-to-all); 1 shared expert (2048)",
     lambda m: m.session.plan.cp_comm_type == "a2a"),
])
def test_negations_stay_with_their_setting(tmp_path, notes, check):
    cells = {**_MOE, "num_attention_heads": 128, "num_query_groups": 8}
    if "CP 2" in notes:
        cells.update(context_parallel=2, data_parallel=8, seq_length=4096)
    path = tmp_path / "n.csv"
    path.write_text(MODERN_HEADER + "\n" + _modern_row(**{**cells, "notes": f'"{notes}"'}) + "\n")
    (m,) = read_measurements(path)
    assert m.session is not None and check(m), (m.skip_reason, m.session and m.session.plan,
                                                m.assumptions)


@pytest.mark.parametrize("cells, notes, check", [
    (dict(), "CPU activation offloading of 5 layers (cpu_offloading_num_layers=5)",
     lambda m: "CPU activation offloading" in m.skip_causes),
    (dict(), "activations of 20 layers offloaded to CPU",
     lambda m: "CPU activation offloading" in m.skip_causes),
    (dict(), "no CPU offloading", lambda m: "CPU activation offloading" not in m.skip_causes),
    (dict(precision="fp8"), "FP8 attention (fp8_dot_product_attention=True)",
     lambda m: "FP8 attention (fp8_dot_product_attention)" in m.skip_causes),
    (dict(precision="fp8"), "fp8_dot_product_attention=False",
     lambda m: "FP8 attention (fp8_dot_product_attention)" not in m.skip_causes),
    (dict(recompute=""), "recompute_granularity=full, recompute_method=uniform, recompute_num_layers=1",
     lambda m: m.session.plan.recompute == "full"),
    (dict(recompute="full (toml default for 70B)", framework="torchtitan", fsdp="y",
          distributed_optimizer="n"), "", lambda m: m.session.plan.recompute == "full"),
    (dict(recompute="full (every block; selective_checkpointing=1)", framework="torchtitan",
          fsdp="y", distributed_optimizer="n"), "", lambda m: m.session.plan.recompute == "full"),
])
def test_last_round_wordings(tmp_path, cells, notes, check):
    _check_one_row(tmp_path, cells, notes, check)


def test_mtp_in_words_and_deepseek_v3_with_mtp(tmp_path):
    dsv3 = {**_MOE, "model_name": "DeepSeek-V3"}
    rows = [_modern_row(**dsv3, notes=f'"{_MLA}; table says \'w/ MTP\'"'),
            _modern_row(**_MOE, notes='"w/ MTP"'),
            _modern_row(**_MOE, notes='"MTP on (1 layer)"')]
    path = tmp_path / "mtp.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    assert ms[0].session.model.mtp_num_layers == 1 and "mtp-deepseek-v3" in _assumed(ms[0])
    assert "multi-token prediction" in ms[1].skip_causes  # another model: its count is unknown
    assert ms[2].session.model.mtp_num_layers == 1
