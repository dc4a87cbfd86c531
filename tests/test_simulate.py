"""End-to-end simulation, report figures, memory formulas, trace export and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.op_times import params_per_gpu
from core.model.ops import analytic_op_time
from core.io.session import load_any, save_session, session_to_json
from core.sim.simulate import open_profile, profile_path, simulate, stage_memory
from core.sim.graph_types import KINDS
from core.sim.solver import solve
from tests.conftest import EXAMPLES, ROOT, SHARED, case_file, shared_file


def session_1node(**plan):
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=2,
                global_batch_size=8, schedule="1f1b", recompute="none", precision="bf16")
    base.update(plan)
    return Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(**base), ClusterConfig(), CostConfig(2.0, 1e9))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")) + sorted((SHARED / "configs").glob("*.json")),
                         ids=lambda p: p.name)
def test_examples_and_authors_configs_simulate(path):
    r = simulate(load_any(path)).report
    assert r.iteration_time_s > 0 and np.isfinite(r.iteration_time_s)
    # HFU counts what runs (the causal half of the attention core, and any recomputation);
    # MFU credits Eq. 3's full square: either may be larger, HFU never exceeds the peak
    assert 0 < r.mfu < 1 and 0 < r.hfu <= 1
    assert 0 <= r.bubble_fraction < 1
    assert r.fits_in_memory


def test_single_gpu_iteration_is_the_sum_of_its_ops():
    s = session_1node()
    store = open_profile(profile_path(s))
    # gradient accumulation fusion (the default): only the embedding's weight gradient is added
    # by a kernel of its own
    key = dict(b=2, s=2048, h=2048, a=16, f=8192, t=1, V=50304, dtype="bf16", wacc="fused")
    per_mb = sum(analytic_op_time(op, key, store) for op in
                 ("embedding_fwd", "output_fwd", "output_bwd", "embedding_bwd"))
    per_mb += 24 * sum(analytic_op_time(op, key, store) for op in
                       ("attention_fwd", "mlp_fwd", "mlp_bwd", "attention_bwd"))
    opt = analytic_op_time("optimizer_step", {"n": int(params_per_gpu(s)[0]), "dtype": "bf16"}, store)
    r = simulate(s, store).report
    assert r.iteration_time_s == pytest.approx(4 * per_mb + opt, rel=1e-3)  # table interpolation
    assert r.bubble_fraction == pytest.approx(0.0, abs=1e-12)


def test_recomputation_adds_one_forward_per_layer():
    plain = simulate(session_1node()).report
    full = simulate(session_1node(recompute="full")).report
    s = session_1node()
    store = open_profile(profile_path(s))
    key = dict(b=2, s=2048, h=2048, a=16, f=8192, t=1, V=50304, dtype="bf16")
    fwd = 24 * (analytic_op_time("attention_fwd", key, store) + analytic_op_time("mlp_fwd", key, store))
    assert full.iteration_time_s - plain.iteration_time_s == pytest.approx(4 * fwd, rel=1e-3)
    # HFU: the model FLOPs (Eq. 3, the full s x s core credited: 4sh per token and layer) plus
    # one more forward per layer: the unfused attention computes the whole square, so Eq. 3's
    # factor 96 instead of 72; with FlashAttention, less the masked half of every executed
    # core (3 + 1 passes)
    model = 3 * 24 * (8 + 16 + 4) * 2048**2 + 6 * 2048 * 50304
    recomputed = 24 * (8 + 16 + 4) * 2048**2
    assert s.model.attention_kernel == "unfused"
    assert full.hfu / full.mfu == pytest.approx(1 + recomputed / model, rel=1e-9)
    flash = dataclasses.replace(s, model=dataclasses.replace(s.model, attention_kernel="flash"),
                                plan=dataclasses.replace(s.plan, recompute="full"))
    fr = simulate(flash, store).report
    masked = (3 + 1) * 24 * (4 * 2048 * 2048) / 2
    assert fr.hfu / fr.mfu == pytest.approx(1 + (recomputed - masked) / model, rel=1e-9)


def test_report_figures_are_consistent():
    s = load_any(EXAMPLES / "gpt3_175b.json")
    r = simulate(s).report
    B, seq, L, h, V = 1536, 2048, 96, 12288, 51200  # 50257 padded to a multiple of 128*t = 1024
    flops = 72 * B * seq * L * h**2 * (1 + seq / (6 * h) + V / (12 * L * h))  # Narayanan Eq. 3
    assert r.model_flops_per_iteration == pytest.approx(flops, rel=1e-12)
    assert r.mfu == pytest.approx(flops / r.iteration_time_s / (512 * 312e12))
    assert r.tokens_per_s == pytest.approx(B * seq / r.iteration_time_s)
    # whole iterations: ceil(300e9 / (1536 * 2048)) = ceil(95367.43), an integer
    assert r.num_iterations == math.ceil(300e9 / (B * seq)) == 95368
    assert isinstance(r.num_iterations, int)
    assert r.training_days == pytest.approx(r.num_iterations * r.iteration_time_s / 86400)
    assert r.gpu_hours == pytest.approx(r.training_days * 24 * 512)
    assert r.cost_usd == pytest.approx(r.gpu_hours * 2.0)
    assert (r.compute_s + r.comm_s + r.pp_comm_s + r.bubble_s + r.imbalance_s
            == pytest.approx(r.iteration_time_s))


def test_tensor_parallel_adds_all_reduces():
    r = simulate(session_1node(tensor_parallel=4))
    tp = r.graph.kind == 6
    assert tp.sum() == 4 * (1 + 24 * 4 + 1)  # per micro-batch: embedding, 4 per layer, output backward
    assert r.report.comm_s > 0


def test_memory_formulas_korthikanti():
    # GPT-3 175B, t=8, p=16, b=1: Korthikanti et al. 2022 Eq. 2 per layer, stage 5 of 16 keeps
    # p - 5 = 11 micro-batches in flight under 1F1B, 6 layers per stage.
    plan = dict(tensor_parallel=8, pipeline_parallel=16, data_parallel=4, micro_batch_size=1,
                global_batch_size=1536, schedule="1f1b", precision="bf16")
    s = Session(MODEL_PRESETS["GPT-3 175B"], ParallelPlan(**plan, recompute="none"))
    mem = stage_memory(s)
    seq, b, h, a, t = 2048, 1, 12288, 96, 8
    per_layer = seq * b * h * (10 + 24 / t + 5 * a * seq / (h * t))
    assert mem[5].activations_bytes == pytest.approx(per_layer * 6 * (16 - 5))
    n = params_per_gpu(s)[5]
    # bf16 with fp32 main gradients: 18 bytes per parameter (Megatron-LM's table), and TE's
    # placeholder weight gradients: one layer's four linear weights in bf16, 12h^2/t elements
    placeholders = 2 * 12 * h * h / t
    assert mem[5].weights_bytes + mem[5].gradients_bytes + mem[5].optimizer_bytes == pytest.approx(
        18 * n + placeholders)
    # sharded QKV/proj/fc1/fc2 weights and QKV, fc1 biases (12h^2 + 7h)/t; replicated biases and norms 6h
    assert n == pytest.approx(6 * ((12 * h * h + 7 * h) / 8 + 6 * h), rel=1e-12)
    full = stage_memory(Session(s.model, ParallelPlan(**plan, recompute="full")))
    assert full[5].activations_bytes == pytest.approx(2 * seq * b * h * 6 * 11 + per_layer)


def test_profile_of_another_gpu_is_named_in_a_warning():
    s = session_1node()  # cluster.gpu A100-SXM4-80GB
    assert not any("the profile is of" in w for w in simulate(s).report.warnings)
    r = simulate(s, open_profile(ROOT / "profiles" / "H100-SXM5-80GB.h5")).report
    assert r.warnings[0].startswith("the profile is of H100-SXM5-80GB, not of cluster.gpu "
                                    "A100-SXM4-80GB")


def test_large_collective_warning_says_what_was_measured_and_how_it_was_extended():
    # 175B with t=2 on one node: tensor-parallel all-reduces far beyond the 1 GiB measured
    s = Session(MODEL_PRESETS["GPT-3 175B"], ParallelPlan(
        tensor_parallel=2, pipeline_parallel=1, data_parallel=1, micro_batch_size=64, global_batch_size=64,
        schedule="1f1b", recompute="full", precision="bf16"))
    ws = [w for w in simulate(s).report.warnings if "all_reduce" in w]
    assert ws and all("beyond the measured sizes (" in w and "latency-bandwidth fit" in w for w in ws)


def test_plan_that_does_not_fit_is_flagged_not_hidden():
    s = Session(MODEL_PRESETS["GPT-3 175B"], ParallelPlan(
        tensor_parallel=8, pipeline_parallel=2, data_parallel=1, micro_batch_size=4, global_batch_size=64,
        schedule="1f1b", recompute="none", precision="bf16"))
    r = simulate(s).report
    assert not r.fits_in_memory
    assert r.max_memory_per_gpu_bytes > 80 * 2**30
    assert any("does not fit" in w for w in r.warnings)


def test_h100_is_faster_than_a100():
    a = simulate(load_any(EXAMPLES / "gpt3_175b.json"))
    s = load_any(EXAMPLES / "gpt3_175b.json")
    s.cluster.gpu = "H100-SXM5-80GB"
    h = simulate(s)
    assert h.report.iteration_time_s < a.report.iteration_time_s
    assert h.report.profile["device"] == "H100-SXM5-80GB"


def test_trace_export(tmp_path):
    path = tmp_path / "t.json"
    assert main(["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--trace-out", str(path)]) == 0
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    result = simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    assert len(events) == result.graph.num_tasks
    last = max(e["ts"] + e["dur"] for e in events)
    assert last == pytest.approx(result.report.iteration_time_s * 1e6, rel=1e-6)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {"stage 0", "stage 1"}


def test_trace_export_named_gz_is_gzip(tmp_path):
    """The trial's ML engineer wrote --trace-out iteration.json.gz (PyTorch's profiler's name
    for its traces) and got plain JSON under a .gz name, which gunzip and chrome://tracing
    refuse; a .gz name now gets the same trace gzip-compressed (RFC 1952 magic 1f 8b)."""
    import gzip
    cfg = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    assert main(["simulate", cfg, "--trace-out", str(plain)]) == 0
    assert main(["simulate", cfg, "--trace-out", str(packed)]) == 0
    raw = packed.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(raw)) == json.loads(plain.read_text())
    assert plain.read_bytes()[:1] == b"{"


def test_cli_json_keys(capsys):
    cfg = shared_file("configs", "mtnlg_530b_3360gpu_t8_d12_p35.json")
    assert main(["simulate", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("iteration_time_s", "bubble_fraction", "mfu", "tokens_per_s", "num_gpus",
                "max_memory_per_gpu_bytes", "fits_in_memory", "training_days", "cost_usd"):
        assert key in doc
    assert doc["num_gpus"] == 3360
    # the bubble can't be below the 1F1B ideal for p=35, m=160
    # 1F1B's idle share (p-1)/(m+p-1) = 34/194 of the pipeline, diluted by the data-parallel
    # all-reduce and optimizer tail that the balanced schedule also runs
    assert 0.95 * 34 / 194 <= doc["bubble_fraction"] <= 34 / 194


def test_cli_overrides(capsys):
    assert main(["simulate", str(EXAMPLES / "gpt3_175b.json"), "--json", "--tokens", "1e9",
                 "--price-per-gpu-hour", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_usd"] == 0 and doc["num_iterations"] == math.ceil(1e9 / (1536 * 2048))


@pytest.mark.parametrize("setup,needle", [
    (lambda p: p.write_text("{oops"), "not a valid JSON file"),
    (lambda p: p.write_text(session_to_json(Session(plan=ParallelPlan(tensor_parallel=5)))),
     "num_attention_heads=96 is not divisible by tensor_parallel_size=5"),
    (lambda p: p.write_text(json.dumps({"format": "vtrain-session", "version": 1, "model": {},
                                        "plan": {"tensor_parallel": 5}})),
     "num_layers"),
    (lambda p: None, "cannot read"),
])
def test_cli_bad_input_exits_2_with_one_message(tmp_path, setup, needle):
    path = tmp_path / "in.json"
    setup(path)
    proc = subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_missing_profile_exits_2(tmp_path, capsys):
    path = tmp_path / "s.json"
    s = session_1node()
    s.cluster.profile_path = str(tmp_path / "missing.h5")
    save_session(s, path)
    assert main(["simulate", str(path)]) == 2
    assert "missing.h5" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["tables", "json"])
def test_cli_reader_going_away_is_a_quiet_exit_0(extra):
    """``vtrain simulate ... | head -1``: status 0 and nothing on stderr, tables or JSON."""
    code = ("import sys; from core.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "simulate", str(EXAMPLES / "gpt3_175b.json"),
                             *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()  # the reader goes away before the report is printed in full
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


def test_cli_output_to_a_pipe_is_not_wrapped_at_80_columns():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(EXAMPLES / "gpt3_175b.json")],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0
    line = next(x for x in proc.stdout.splitlines() if x.startswith("Per stage"))
    from core.sim.labels import TIME_TERMS
    # the terms on one line, each named as every view names it
    assert re.search(", ".join(rf"{re.escape(TIME_TERMS[t])} [\d.]+ s"
                               for t in ("compute", "comm", "pp_comm", "bubble", "imbalance")), line)


def test_collective_warnings_fold_into_one_line_naming_the_largest():
    from core.sim.comm import CollectiveExtrapolation, summarize_warnings
    ws = [CollectiveExtrapolation("all_gather", 3000.0, 4, "1 KiB to 2 GiB"),
          "does not fit: stage 0 needs 90.0 GiB",
          CollectiveExtrapolation("all_reduce", 5000.5, 2, "1 MiB to 1024 MiB")]
    assert ws[0] == ("all_gather of 3000.0 MiB on 4 GPUs: beyond the measured sizes (1 KiB to "
                     "2 GiB), extrapolated with that curve's latency-bandwidth fit")
    out = summarize_warnings(ws)
    assert out == ["2 collective sizes beyond the measured curves (the largest: all_reduce of "
                   "5000.5 MiB on 2 GPUs, measured 1 MiB to 1024 MiB), extrapolated with each "
                   "curve's latency-bandwidth fit", "does not fit: stage 0 needs 90.0 GiB"]
    assert summarize_warnings(ws[:2]) == ws[:2]  # one is left as it is
    # text that only reads like one is not folded: warnings fold by their fields, not their text
    assert summarize_warnings([str(ws[0]), str(ws[2])]) == [str(ws[0]), str(ws[2])]


def test_collective_warning_keeps_its_fields_through_pickling_and_plan_naming():
    import pickle

    from core.sim.comm import CollectiveExtrapolation, summarize_warnings
    w = CollectiveExtrapolation("all_reduce", 1290.2, 8, "1 KiB to 1 GiB")
    back = pickle.loads(pickle.dumps(w))  # sweep workers return warnings through pickle
    assert back == w and (back.kind, back.mib, back.gpus) == ("all_reduce", 1290.2, 8)
    named = back.in_plans(["t=1 p=1 d=8 b=16", "t=2 p=1 d=4 b=16"], 5)
    assert named.endswith("; in 5 plans: t=1 p=1 d=8 b=16, t=2 p=1 d=4 b=16 and 3 more")
    other = CollectiveExtrapolation("all_gather", 10.0, 2, "1 KiB to 1 GiB").in_plans(["x"], 1)
    assert summarize_warnings([named, other])[0].endswith(
        "; in plans t=1 p=1 d=8 b=16, t=2 p=1 d=4 b=16, x and 3 more (a plan can count more "
        "than once)")


def test_case_bubble_12_stages_is_the_schedule_idle_share():
    # ../shared/cases/bubble_12_stages.json: 24 layers, p=12, m=128, t=d=1. The bubble is
    # 1F1B's idle share (p-1)/(m+p-1) = 11/139 (7.9 %); the blocking sends are exposed pipeline
    # communication, never bubble; the parts sum to the iteration time.
    from core.io.session import load_session
    r = simulate(load_session(case_file("bubble_12_stages.json"))).report
    assert r.bubble_fraction == pytest.approx(11 / 139, rel=5e-3)  # the optimizer step dilutes it
    assert r.pp_comm_s > 0
    parts = r.compute_s + r.comm_s + r.pp_comm_s + r.bubble_s + r.imbalance_s
    assert parts == pytest.approx(r.iteration_time_s, rel=1e-12)
    # with free transfers (the full graph, general solver) the iteration is pp_comm_s shorter
    res = simulate(load_session(case_file("bubble_12_stages.json")))
    g = res.graph
    g.duration_s = np.where(g.kind == KINDS.index("pp_p2p"), 0.0, g.duration_s)
    assert r.pp_comm_s == pytest.approx(r.iteration_time_s - solve(g).iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("schedule,v", [("zb-h1", None), ("interleaved", 2)])
def test_time_breakdown_of_modern_schedules(schedule, v):
    # the same work as 1F1B (W tasks count as compute), parts summing to the iteration time
    base = dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=1, micro_batch_size=1,
                global_batch_size=16, recompute="none", precision="bf16")
    one = simulate(Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(**base, schedule="1f1b"))).report
    r = simulate(Session(MODEL_PRESETS["GPT-3 1.3B"],
                         ParallelPlan(**base, schedule=schedule, virtual_pipeline_stages=v))).report
    assert r.compute_s == pytest.approx(one.compute_s, rel=1e-9)
    assert (r.compute_s + r.comm_s + r.pp_comm_s + r.bubble_s + r.imbalance_s
            == pytest.approx(r.iteration_time_s, rel=1e-12))
    assert r.bubble_s < one.bubble_s
    if schedule == "interleaved":  # v times the transfers: blocking, the bubble is traded for sends
        blocking = simulate(Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(
            **base, schedule=schedule, virtual_pipeline_stages=v, overlap_p2p_comm=False))).report
        assert blocking.pp_comm_s > one.pp_comm_s
        # Megatron-LM's default overlaps them with the compute: less is exposed, same compute
        assert r.pp_comm_s < blocking.pp_comm_s
        assert r.iteration_time_s < blocking.iteration_time_s
        assert r.compute_s == pytest.approx(blocking.compute_s, rel=1e-12)
    else:  # the W items fill the cool-down: same transfers, shorter iteration
        assert r.iteration_time_s < one.iteration_time_s


def test_hfu_counts_the_causal_core_and_stays_below_the_peak():
    """A 128k-token plan: Eq. 3 credits the full s x s core (MFU may exceed what runs), HFU
    counts the causal half the GPUs execute (and any recomputation): never above 100 %.
    Closed form: hardware - model = -(3 L) * B s * 4 s h / 2 without recomputation."""
    import dataclasses

    from core.model import model_math as mm
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=131072)
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                      context_parallel=8, micro_batch_size=1, global_batch_size=1,
                      recompute="full", zero_stage=1)
    plain = dataclasses.replace(pl, recompute="none")
    diff = mm.hardware_flops_per_iteration(m, plain) - mm.model_flops_per_iteration(m, plain)
    assert diff == pytest.approx(-(3 * 32) * 131072 * (4 * 131072 * 4096) / 2, rel=1e-12)
    r = simulate(Session(model=m, plan=pl, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))).report
    assert 0 < r.hfu <= 1
    # a sliding-window layer executes its band: W - W(W-1)/(2s) keys per query on average
    gpt = MODEL_PRESETS["GPT-OSS 120B"]
    s, W = gpt.seq_length, gpt.window_size + 1
    assert mm.causal_core_fraction(gpt) == pytest.approx(
        (0.5 * 18 + 18 * (W - W * (W - 1) / (2 * s)) / s) / 36, rel=1e-12)


def test_idle_time_waiting_for_overlapped_communication_is_not_bubble():
    """A one-stage FSDP plan has no pipeline bubble: its idle time is waiting for the
    overlapped parameter all-gathers and gradient reduce-scatters (tester: 'bubble 0.143 s'
    at p = 1). The terms still sum to the iteration time; a plan without overlapped
    communication keeps its bubble and has no such wait."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    s = Session(model=MODEL_PRESETS["Llama 3 8B"],
                plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=64,
                                  micro_batch_size=1, global_batch_size=512, zero_stage=3,
                                  overlap_grad_reduce=True, overlap_param_gather=True),
                cluster=ClusterConfig(gpu="B200-180GB"))
    r = simulate(s).report
    assert r.bubble_s == 0.0 and r.bubble_fraction == 0.0
    assert r.overlap_wait_s > 0
    busy = r.compute_s + r.comm_s + r.ep_comm_s + r.cp_comm_s
    assert r.overlap_wait_s + r.imbalance_s == pytest.approx(r.iteration_time_s - busy
                                                             - r.pp_comm_s, rel=1e-9)
    # the GPT-3 1.3B example (p = 2, ZeRO 0, no overlap): a bubble, nothing to wait for
    plain = simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json")).report
    assert plain.overlap_wait_s == 0.0 and plain.bubble_s > 0
    total = (plain.compute_s + plain.comm_s + plain.pp_comm_s + plain.bubble_s
             + plain.imbalance_s + plain.overlap_wait_s)
    assert total == pytest.approx(plain.iteration_time_s, rel=1e-9)
