"""Measurement readers (the authors' CSV, the session-column CSV), error figures, nccl-tests
import and calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.accuracy.calibrate import apply_fit, fit, linearize, model_store, predict_linearized
from core.accuracy.measured import MeasurementFileError, read_measurements, session_columns
from core.accuracy.metrics import error_metrics
from core.accuracy.validate import predict_rows
from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.store.nccl_tests import NcclTestsError, fit_curve, read_nccl_tests
from core.model.ops import DEFAULT_OP_MODEL
from core.store.profiles_gen import generate_store
from core.sim.simulate import simulate
from tests.conftest import shared_file

#: A session-column CSV (docs/accuracy.md): the model's shape and vocabulary, the unfused
#: attention kernel, the precision, the plan and the GPU; every other model field takes
#: Megatron-LM's default (a GPT model: GeLU, LayerNorm, tied embeddings, biases).
SESSION_HEADER = ("vocab_size,attention_kernel,precision,gpu,gpus_per_node,num_layers,hidden_size,num_attention_heads,seq_length,"
                  "global_batch_size,micro_batch_size,tensor_parallel,pipeline_parallel,data_parallel,"
                  "schedule,virtual_pipeline_stages,sequence_parallel,recompute,"
                  "measured_iteration_time_s,notes")


def test_authors_single_node_layout():
    ms = read_measurements(shared_file("measured_single_node.csv"))
    assert len(ms) == 864
    first = ms[0]  # 8,8,2,2048,16,20,1024,4,1,2,160.6027
    pl = first.session.plan
    assert (pl.num_gpus, pl.global_batch_size, pl.micro_batch_size) == (8, 8, 2)
    assert (pl.tensor_parallel, pl.data_parallel, pl.pipeline_parallel) == (4, 1, 2)
    assert first.session.model.hidden_size == 2048 and first.session.model.num_layers == 20
    assert first.measured_iteration_time_s == pytest.approx(0.1606027)
    assert pl.recompute == "full" and pl.precision == "fp16" and pl.schedule == "1f1b"
    assert not first.skip_reason and first.group["source"] == "single-node"


def test_authors_multi_node_layout_with_bom():
    ms = read_measurements(shared_file("measured_multi_node.csv"))
    assert len(ms) == 65
    m0 = ms[0]  # 3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5
    assert m0.group["model"] == "3.6B" and m0.session.plan.data_parallel == 64
    assert m0.session.cluster.inter_node_bandwidth_gbits_per_s == 800.0
    assert m0.measured_iteration_time_s == pytest.approx(3.5665)
    assert all(not m.skip_reason for m in ms)  # t=16 spans two whole nodes: supported


def test_session_columns_and_skip_reasons(tmp_path):
    """Each column sets its session field; a plan that breaks a rule between fields is kept,
    skipped with the rule, and the other rows are predicted."""
    base = "50257,unfused,bf16,A100-SXM4-80GB,8,24,2048,16,1024,64,2,2,2,4,"
    rows = [base + "1f1b,,false,full,0.5,x",                    # ok
            base + "interleaved,2,n,full,0.5,x",               # interleaved
            base + "1f1b,,y,full,0.5,x",                       # sequence parallel
            base + "1f1b,,no,selective,0.5,",                  # selective
            base.replace(",24,", ",25,") + "1f1b,,n,full,0.5,x",  # 25 layers, p=2
            base + "1f1b,,n,full,0.5,x".replace("0.5", "2e5")]     # over a day
    path = tmp_path / "runs.csv"
    path.write_text(SESSION_HEADER + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    reasons = [m.skip_reason for m in ms]
    assert reasons[:4] == ["", "", "", ""] and ms[0].session.plan.zero_stage == 0
    assert (ms[1].session.plan.schedule, ms[1].session.plan.virtual_pipeline_stages) == ("interleaved", 2)
    assert ms[2].session.plan.sequence_parallel is True and ms[0].session.plan.sequence_parallel is False
    assert ms[3].session.plan.recompute == "selective" and ms[0].session.notes == "x"
    assert "num_layers=25 is not divisible by pipeline_parallel_size=2" in reasons[4]
    assert ms[5].skip_causes == ["measured time out of range"]
    result = predict_rows(ms, lambda s: simulate(s).report.iteration_time_s)
    assert result.used.tolist() == [True, True, True, True, False, False]
    # sequence parallelism and selective recomputation change the prediction
    assert result.predicted_s[2] != result.predicted_s[0] != result.predicted_s[3]


def test_session_columns_sharding_and_uneven_split(tmp_path):
    header = SESSION_HEADER + ",zero_stage,overlap_grad_reduce,first_stage_layers,last_stage_layers"
    base = "50257,unfused,bf16,A100-SXM4-80GB,8,24,2048,16,1024,64,2,2,2,4,1f1b,,n,full,0.5,,"
    path = tmp_path / "runs.csv"
    path.write_text(header + "\n" + "\n".join([base + "1,true,,", base + "3,,,",
                                                base + ",,11,13", base + ",,20,20"]) + "\n")
    ms = read_measurements(path)
    pl = [m.session.plan for m in ms]
    assert ms[0].skip_reason == "" and pl[0].zero_stage == 1 and pl[0].overlap_grad_reduce
    assert ms[1].skip_reason == "" and pl[1].zero_stage == 3 and not pl[1].overlap_grad_reduce
    assert ms[2].skip_reason == "" and (pl[2].first_stage_layers, pl[2].last_stage_layers) == (11, 13)
    assert "first_stage_layers + last_stage_layers = 40 must equal num_layers=24" in ms[3].skip_reason


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


def test_nccl_tests_options_never_override_what_the_file_says(tmp_path, capsys):
    """--group-size and --kind are for a file that does not say: given against the file's own
    device lines or collective, they were taken silently (a 4-GPU all-reduce stored as the
    8-GPU curve, or as an all-gather), and every plan on 8 GPUs was timed with it."""
    path = tmp_path / "run.txt"
    path.write_text("# Collective test starting: all_reduce_perf\n" + NCCL_STDOUT)
    with pytest.raises(NcclTestsError, match="a run on 4 GPUs .* not 8: --group-size is for a file"):
        read_nccl_tests(path, group_size=8)
    with pytest.raises(NcclTestsError, match="the file is a all_reduce run .* not all_gather"):
        read_nccl_tests(path, kind="all_gather")
    # agreeing values, and a file that does not say, are read as before
    c = read_nccl_tests(path, kind="all_reduce", group_size=4)
    assert (c.kind, c.group_size, c.nbytes.tolist()) == ("all_reduce", 4, [1024, 2048, 4096])
    silent = tmp_path / "results.txt"
    silent.write_text("\n".join(line for line in NCCL_STDOUT.splitlines() if "Rank" not in line))
    c = read_nccl_tests(silent, kind="all_gather", group_size=8)
    assert (c.kind, c.group_size) == ("all_gather", 8)
    np.testing.assert_allclose(c.time_s, [10e-6, 14e-6, 20e-6])
    # the command line: exit 2, the store unchanged
    store_path = tmp_path / "s.h5"
    generate_store("A100-SXM4-80GB", date="2026-01-01").save(store_path)
    before = store_path.read_bytes()
    assert main(["profile", "import-nccl-tests", str(path), "--into", str(store_path),
                 "--group-size", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vtrain: error: {path}: the file is a run on 4 GPUs") and err.count("\n") == 1
    assert store_path.read_bytes() == before


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
    with pytest.raises(ValueError, match="one positive finite share per file"):
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
    rows = ["50257,unfused,bf16,A100-SXM4-80GB,8,4,512,8,512,8,1,2,2,2,1f1b,,n,full,0.05,x",
            "50257,unfused,bf16,A100-SXM4-80GB,8,4,512,8,512,8,2,1,1,4,1f1b,,n,full,0.04,x",
            "50257,unfused,bf16,A100-SXM4-80GB,8,4,512,8,512,8,2,1,1,4,1f1b,,y,selective_op,0.04,x"]
    csv_path.write_text(SESSION_HEADER + "\n" + "\n".join(rows) + "\n")
    out_csv, png = tmp_path / "pred.csv", tmp_path / "plot.png"
    assert main(["validate", str(csv_path), "--json", "--out", str(out_csv), "--plot", str(png)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n"] == 2 and doc["skipped"] == 1
    for key in ("mape_percent", "median_ape_percent", "max_ape_percent", "r2"):
        assert key in doc
    lines = out_csv.read_text().splitlines()
    # per-op checkpointing with the unfused attention core is refused by name
    assert len(lines) == 4 and "recompute='selective_op' needs model.attention_kernel" in lines[3]
    assert doc["skipped_by_cause"] == {
        "per-op selective checkpointing (not modelled in this plan)": 1}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("text, needle", [("a,b\n1,2\n", "columns 'a', 'b' are neither a session field"),
                                          ("gpu,measured_iteration_time_s\n", "a header and no data rows"),
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
        records = [{**session_columns(s),
                    "measured_iteration_time_s": repr(simulate(s, truth_store).report.iteration_time_s)}
                   for s in part]
        cols = list(dict.fromkeys(k for r in records for k in r))
        lines = [",".join(cols)] + [",".join(str(r.get(c, "")) for c in cols) for r in records]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        paths.append(str(tmp_path / name))
    out = tmp_path / "calibrated.h5"
    # a weight per file, or the command says what is wrong and writes nothing
    assert main(["calibrate", *paths, "--profile", str(base_path), "--out", str(out),
                 "--file-weights", "1"]) == 2
    assert "--file-weights: needs one positive finite weight per CSV (2), got 1" in capsys.readouterr().err
    assert not out.exists()
    assert main(["calibrate", *paths, "--profile", str(base_path), "--out", str(out), "--folds", "2",
                 "--file-weights", "1", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["cross_validation"]) == {"a.csv", "b.csv"}
    from core.store.profile_store import ProfileStore
    store = ProfileStore.open(out)
    assert store.provenance["method"] == "calibrated" and "a.csv" in store.provenance["data"]
    assert store.provenance["file_weights"] == {"a.csv": 1.0, "b.csv": 3.0}
    # the fitted parameters and the bounds they were fitted within, for `vtrain profile show`'s
    # at-a-bound lines (core.accuracy.shared_fit.parameters_at_bound)
    from core.accuracy.fit_params import FIT_PARAMS
    assert store.provenance["fitted_parameters"] == list(FIT_PARAMS)
    assert store.provenance["parameter_bounds"]["gemm_efficiency_max"] == {"low": 0.2, "high": 1.0}
    # the out-of-fold predictions are kept: every run once, the multi-node runs again as
    # predicted by a fit on the single-node runs (scale transfer)
    r = store.residuals
    cv = r.set == "cross_validated"
    # with each run's features (residual-table version 2; core.store.calibration_range)
    assert r.has_features and sorted(r.micro_batch_size[cv]) == sorted(
        s.plan.micro_batch_size for s in sessions)
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


# --------------------------------------------------------------------------- other GPU kinds

_GPT_COLUMNS = ("vocab_size,attention_kernel,gpu,gpus_per_node,inter_node_bandwidth_gbits_per_s,name,num_layers,hidden_size,"
                "num_attention_heads,ffn_hidden_size,seq_length,global_batch_size,micro_batch_size,"
                "tensor_parallel,pipeline_parallel,data_parallel,recompute,precision,"
                "measured_iteration_time_s")


def _gpt_row(**kw) -> str:
    """A session-column row of GPT-3 1.3B on 16 H100 (what is modelled), ``kw`` replacing cells."""
    cells = dict(vocab_size=50257, attention_kernel="unfused", gpu="H100-SXM5-80GB", gpus_per_node=8, inter_node_bandwidth_gbits_per_s=3200,
                 name="GPT-3 1.3B", num_layers=24, hidden_size=2048, num_attention_heads=16,
                 ffn_hidden_size=8192, seq_length=2048, global_batch_size=64, micro_batch_size=2,
                 tensor_parallel=2, pipeline_parallel=2, data_parallel=4, recompute="full",
                 precision="bf16", measured_iteration_time_s=1.0)
    cells.update(kw)
    return ",".join(str(cells[c]) for c in _GPT_COLUMNS.split(","))


def test_gpt_rows_are_predicted_on_the_new_gpu_kinds(tmp_path):
    rows = [_gpt_row(), _gpt_row(gpu="B200-180GB"),
            _gpt_row(gpu="GB200-NVL72", gpus_per_node=72, data_parallel=18,
                     global_batch_size=72, micro_batch_size=1, inter_node_bandwidth_gbits_per_s=28800)]
    path = tmp_path / "modern.csv"
    path.write_text(_GPT_COLUMNS + "\n" + "\n".join(rows) + "\n")
    ms = read_measurements(path)
    assert [m.skip_reason for m in ms] == ["", "", ""]
    assert [m.session.cluster.gpu for m in ms] == ["H100-SXM5-80GB", "B200-180GB", "GB200-NVL72"]
    assert ms[0].session.plan.precision == "bf16" and ms[0].group["model"] == "GPT-3 1.3B"
    result = predict_rows(ms, lambda s: simulate(s).report.iteration_time_s)
    assert result.used.all() and result.predicted_s[1] < result.predicted_s[0]


def test_validate_cli_prints_the_skip_counts(tmp_path, capsys):
    path = tmp_path / "modern.csv"
    path.write_text(_GPT_COLUMNS + ",activation\n" + "\n".join([
        _gpt_row() + ",", _gpt_row(gpu="H100-96GB-HBM2e-500W") + ",relu",
        _gpt_row() + ",squared_relu"]) + "\n")
    with pytest.raises(MeasurementFileError, match=r"row 2 \(line 3\), column 'activation'"):
        read_measurements(path)  # not among the activation's choices: bad input
    path.write_text(_GPT_COLUMNS + "\n" + "\n".join([
        _gpt_row(), _gpt_row(num_layers=25), _gpt_row(gpu="H100-96GB-HBM2e-500W", num_layers=25)])
        + "\n")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "modern.csv: 1 rows predicted, 2 skipped" in out
    assert "skipped row 2 (line 3): invalid plan:" in out and "uneven pipeline split" in out


def test_calibrating_one_store_on_one_run_prints_null_for_what_one_run_cannot_define(tmp_path,
                                                                                    capsys):
    """`vtrain calibrate CSV --profile P --out X --json` on a single run: R^2 is undefined there
    and prints as null (as the shared fit prints it), not a refusal after the store is written."""
    csv = tmp_path / "one.csv"
    csv.write_text(_GPT_COLUMNS + "\n" + _gpt_row() + "\n")
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
    csv.write_text(_GPT_COLUMNS + "\n" + "\n".join(
        _gpt_row(measured_iteration_time_s=t, micro_batch_size=b) for t, b in ((1.0, 1), (1.9, 2)))
        + "\n")
    out = tmp_path / "out.h5"
    assert main(["calibrate", str(csv), "--profile", str(base_path), "--out", str(out),
                 "--folds", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for name, value in (("fp8_gemm_efficiency", 0.8), ("all_to_all_efficiency", 0.5),
                        ("flex_all_to_all_efficiency", 0.9), ("p2p_efficiency", 0.7)):
        assert doc["parameters"][name] == value, name
        assert ProfileStore.open(out).op_model[name] == value, name



def test_torchtitan_stage_layers_closed_form():
    """torchtitan's split counts the embedding and the output layer as one layer each and gives
    the remainder to the first stages; Llama 3 405B's 126 layers over 16 stages are the Llama 3
    paper's 7, 14 x 8, 7."""
    from core.io.torchtitan_import import torchtitan_stage_layers
    assert torchtitan_stage_layers(126, 16) == [7] + [8] * 14 + [7]
    assert torchtitan_stage_layers(61, 4) == [15, 16, 16, 14]  # 63 = 16 + 16 + 16 + 15
    assert torchtitan_stage_layers(30, 4) == [7, 8, 8, 7]
    assert sum(torchtitan_stage_layers(77, 6)) == 77



def test_validate_names_each_rows_profile_when_the_gpus_differ(tmp_path, capsys):
    from core.cli import main
    path = tmp_path / "two.csv"
    path.write_text(_GPT_COLUMNS + "\n" + _gpt_row() + "\n"
                    + _gpt_row(gpu="B200-180GB") + "\n")
    assert main(["validate", str(path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "profiles of each row's GPU: B200-180GB (calibrated), H100-SXM5-80GB (calibrated)" in first
