"""TF32 matmuls of fp32 training (``plan.tf32``, PyTorch's ``allow_tf32``): the GEMMs of an fp32
plan at the store's ``tf32`` peak, nothing else changed; refusals by name; held by the sweep."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from core.io.session import load_session, save_session, session_to_json
from core.model.ops import (LAYER_OPS, analytic_op_time, effective_op_model, kernel_arrays,
                            kernel_peak_flops, kernel_times, op_kernels)
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.rules import inactive_fields, validate
from core.plan.session import Session
from core.sim.op_times import lookup_op_times, op_key
from core.sim.simulate import simulate
from core.store.calibration_range import precision_label
from core.store.profiles_gen import generate_store
from core.studies.sweep import SweepSpace, run_sweep
from core.studies.sweep.dimensions import sweep_dimensions
from tests.conftest import EXAMPLES

H100 = "H100-SXM5-80GB"
#: H100 SXM5 data sheet (resources/gpu_specs/H100-SXM5-80GB.json): dense FP32 and TF32 peaks.
FP32_PEAK, TF32_PEAK = 67e12, 495e12


def _session(precision: str = "fp32", tf32: bool = True, h: int = 4096,
             attention_kernel: str = "unfused", t: int = 1, d: int = 1) -> Session:
    """A 4-layer GPT (learned positions, LayerNorm, GELU) on H100s."""
    model = ModelConfig(f"gpt h={h}", 4, h, 32, 4 * h, 2048, 51200,
                        attention_kernel=attention_kernel)
    plan = ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=d,
                        micro_batch_size=1, global_batch_size=2 * d, recompute="none",
                        precision=precision, tf32=tf32)
    return Session(model, plan, ClusterConfig(gpu=H100, gpus_per_node=8), CostConfig())


@pytest.fixture(scope="module")
def store():
    return generate_store(H100)


# --------------------------------------------------------------------------- the op model

def test_compute_bound_gemms_of_an_fp32_gpt_layer_run_at_the_tf32_peak(store):
    """Closed form: a compute-bound GEMM's roofline time is ``flops / (peak * eff(x))`` plus the
    kernel overhead, ``eff`` the curve of its size (unchanged by TF32); with TF32 on, the peak
    is 495 TFLOP/s instead of 67, so the time less the overhead scales by 67/495 exactly."""
    assert (store.peak_flops["fp32"], store.peak_flops["tf32"]) == (FP32_PEAK, TF32_PEAK)
    p = effective_op_model(store.op_model)
    off, on = op_key(_session(tf32=False)), op_key(_session(tf32=True))
    assert "tf32" not in off and on["tf32"] is True
    checked = 0
    for op in LAYER_OPS:
        k_off, k_on = op_kernels(op, off), op_kernels(op, on)
        assert [(k.name, k.flops, k.bytes) for k in k_off] == [(k.name, k.flops, k.bytes) for k in k_on]
        t_off = kernel_times(*kernel_arrays(k_off), kernel_peak_flops(k_off, "fp32", store.peak_flops),
                             store.memory_bandwidth_bytes_per_s, p)
        t_on = kernel_times(*kernel_arrays(k_on), kernel_peak_flops(k_on, "fp32", store.peak_flops),
                            store.memory_bandwidth_bytes_per_s, p)
        for k, a, b in zip(k_on, t_off, t_on):
            if not k.is_gemm:  # element-wise, norm and softmax kernels: fp32 bytes, unchanged
                assert (k.dtype, b) == ("", a), k.name
                continue
            assert k.dtype == "tf32", k.name  # the linear layers' and the unfused core's bmm
            x = (float(k.m) * k.n * k.k) ** (1 / 3)
            eff = p["gemm_efficiency_max"] * p["peak_fraction"] * x / (x + p["gemm_half_size"])
            mem_s = k.bytes / (store.memory_bandwidth_bytes_per_s * p["memory_efficiency"])
            if k.flops / (TF32_PEAK * eff) > mem_s:  # compute-bound at both peaks
                assert a - p["kernel_overhead_s"] == pytest.approx(k.flops / (FP32_PEAK * eff), rel=1e-12)
                assert b - p["kernel_overhead_s"] == pytest.approx(
                    (a - p["kernel_overhead_s"]) * FP32_PEAK / TF32_PEAK, rel=1e-12)
                checked += 1
    assert checked >= 8  # qkv, proj, fc1, fc2 forward; their dgrad and wgrad
    # the MLP forward (fc1, GELU, fc2 and the rest): faster by the GEMMs' share alone
    assert analytic_op_time("mlp_fwd", on, store) < analytic_op_time("mlp_fwd", off, store) / 3


def test_flash_attention_keeps_the_fp32_peak(store):
    """FlashAttention does not run in fp32: its kernels keep the fp32 peak they had (today's
    model of an fp32 flash plan); the linear layers around it move to TF32."""
    on = op_key(_session(attention_kernel="flash"))
    kernels = op_kernels("attention_fwd", on) + op_kernels("attention_bwd", on)
    by_name = {k.name: k.dtype for k in kernels if k.is_gemm}
    assert by_name["flash_attn"] == by_name["flash_attn_bwd"] == ""
    assert by_name["qkv"] == by_name["proj_wgrad"] == "tf32"
    peaks = kernel_peak_flops(kernels, "fp32", store.peak_flops)
    names = [k.name for k in kernels]
    assert peaks[names.index("flash_attn")] == FP32_PEAK


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8"])
def test_the_flag_changes_nothing_outside_fp32(store, precision):
    """Hugging Face's ``--bf16 --tf32``: accepted, and the plan is simulated bit for bit as
    without the flag (no fp32 matmul to speed up)."""
    a, b = _session(precision, tf32=False, h=1024), _session(precision, tf32=True, h=1024)
    assert validate(b) == []
    assert op_key(a) == op_key(b)
    ra, rb = simulate(a, store).report, simulate(b, store).report
    assert ra.iteration_time_s == rb.iteration_time_s and ra.mfu == rb.mfu
    assert ra.mfu_peak_dtype == rb.mfu_peak_dtype and ra.to_dict() == rb.to_dict()
    assert inactive_fields(b)["plan.tf32"] == "needs fp32 training (plan.precision)"
    assert "plan.tf32" not in inactive_fields(_session("fp32"))
    assert precision_label(b.plan) == precision_label(a.plan)


def test_report_mfu_is_of_the_tf32_peak(store):
    """MFU of an fp32 plan with TF32 is against the TF32 dense peak, the peak its GEMMs run at
    (against FP32's it could exceed 1); without TF32 against FP32's."""
    on, off = simulate(_session(tf32=True), store).report, simulate(_session(tf32=False), store).report
    assert (on.mfu_peak_dtype, off.mfu_peak_dtype) == ("tf32", "fp32")
    assert on.iteration_time_s < off.iteration_time_s / 2
    for r, peak in ((on, TF32_PEAK), (off, FP32_PEAK)):
        assert r.mfu == pytest.approx(r.model_flops_per_iteration / (r.iteration_time_s * r.num_gpus * peak),
                                      rel=1e-12)
    assert precision_label(_session(tf32=True).plan) == "fp32-tf32"


def test_a_store_without_a_tf32_peak_refuses_by_name(store):
    s = _session()
    lacking = copy.deepcopy(store)
    lacking.peak_flops = {k: v for k, v in store.peak_flops.items() if k != "tf32"}
    with pytest.raises(KeyError, match="tf32"):
        analytic_op_time("mlp_fwd", op_key(s), lacking)
    with pytest.raises(KeyError, match=f"{H100}.*'tf32'"):
        simulate(s, lacking)
    simulate(_session(tf32=False), lacking)  # fp32 without TF32 needs no tf32 peak


def _measured_mlp_store(store, rows: dict[str, float]):
    """``store`` as a measured profile whose mlp_fwd table holds one row per dtype of
    ``rows`` (dtype -> seconds) at :func:`_session`'s shape (h = 4096, b = 1, t = 1)."""
    out = copy.deepcopy(store)
    out.provenance = {**store.provenance, "method": "measured"}
    n = len(rows)
    out.add_op_table("mlp_fwd", {"b": [1] * n, "s": [2048] * n, "h": [4096] * n,
                                 "f": [16384] * n, "t": [1] * n, "dtype": list(rows),
                                 "act": ["gelu"] * n, "norm": ["layernorm"] * n},
                     np.array(list(rows.values())), "b")
    return out


def test_a_measured_store_without_tf32_rows_refuses_and_never_reads_fp32_rows(store):
    """``vtrain profile run`` times fp32 with TF32 off: its fp32 rows never time a TF32 plan.
    Without any tf32 row the plan is refused, naming the store and the field; with one, that
    row is read."""
    measured = _measured_mlp_store(store, {"fp32": 0.5})
    assert lookup_op_times(_session(tf32=False), measured).times["mlp_fwd"] == 0.5
    with pytest.raises(KeyError, match=f"measured profile of {H100} has no TF32 op times.*plan.tf32"):
        lookup_op_times(_session(tf32=True), measured)
    both = _measured_mlp_store(store, {"fp32": 0.5, "tf32": 0.125})
    assert lookup_op_times(_session(tf32=True), both).times["mlp_fwd"] == 0.125
    assert lookup_op_times(_session(tf32=False), both).times["mlp_fwd"] == 0.5


# --------------------------------------------------------------------------- plan and session

def test_the_field_is_a_boolean_and_sessions_round_trip(tmp_path):
    s = _session()
    s.plan.tf32 = "yes"
    assert [e.field for e in validate(s)] == ["plan.tf32"]
    s.plan.tf32 = True
    save_session(s, tmp_path / "a.json")
    assert load_session(tmp_path / "a.json") == s and load_session(tmp_path / "a.json").plan.tf32 is True


def test_sessions_written_before_the_field_load_with_tf32_off(tmp_path):
    """PyTorch's default: an old file without ``plan.tf32`` reads as False."""
    doc = json.loads((EXAMPLES / "mtnlg_530b.json").read_text())
    del doc["plan"]["tf32"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    s = load_session(tmp_path / "old.json")
    assert s.plan.tf32 is False
    assert session_to_json(s) == (EXAMPLES / "mtnlg_530b.json").read_text()


# --------------------------------------------------------------------------- sweep

def test_the_sweep_holds_the_sessions_setting_and_times_it(store):
    """The sweep never chooses TF32 (the user's framework setting): every plan keeps the
    session's, the dimensions say so, and its times are simulate's."""
    s = _session(h=1024, d=4)
    space = SweepSpace(num_gpus=4, tensor_parallel=(1, 2), pipeline_parallel=(1,),
                       micro_batch_sizes=(1,), schedules=("1f1b",), recompute=("none",))
    assert "tf32" not in space.swept_fields()
    res = run_sweep(s, space, store=store)
    assert res.plans and all(pl.tf32 is True for pl in res.plans)
    dim = next(x for x in sweep_dimensions(s, space, res.plans) if x["field"] == "tf32")
    assert dim == {"field": "tf32", "swept": False, "values": [True],
                   "why": "the session's value (the sweep does not choose it)", "left_out": []}
    off = dataclasses.replace(s, plan=dataclasses.replace(s.plan, tf32=False))
    res_off = run_sweep(off, space, store=store)
    for i, pl in enumerate(res.plans):
        one = copy.deepcopy(s)
        one.plan = pl
        assert res.iteration_time_s[i] == pytest.approx(simulate(one, store).report.iteration_time_s,
                                                        rel=1e-9)
        assert res.iteration_time_s[i] < res_off.iteration_time_s[i]


def test_plan_diff_labels_tell_tf32_apart():
    from core.studies.diff import plan_label
    on, off = _session(tf32=True), _session(tf32=False)
    assert plan_label(on) == plan_label(off) + " tf32"
    assert plan_label(_session("bf16", tf32=True)) == plan_label(_session("bf16", tf32=False))


def test_the_sweep_command_says_the_held_precision_and_tf32(tmp_path, capsys):
    from core.cli import main
    path = tmp_path / "s.json"
    save_session(_session(h=1024, d=4), path)
    small = ["--max-gpus", "4", "--tensor-parallel", "1,2", "--micro-batch-sizes", "1",
             "--schedules", "1f1b", "--recompute", "none"]
    assert main(["sweep", str(path), *small, "--json"]) == 0
    dims = {d["field"]: d for d in json.loads(capsys.readouterr().out)["dimensions"]}
    assert (dims["tf32"]["swept"], dims["tf32"]["values"]) == (False, [True])
    assert (dims["precision"]["swept"], dims["precision"]["values"]) == (False, ["fp32"])
    assert main(["sweep", str(path), *small]) == 0
    assert "precision fp32 with TF32 matmuls" in capsys.readouterr().out
