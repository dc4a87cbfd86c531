"""FP8 training (plan.precision = "fp8", plan.fp8_recipe) as Megatron-Core with Transformer Engine:
GEMM rates, quantization kernels, memory, refusals, caches and MFU."""

from __future__ import annotations

import re

import copy
import dataclasses

import numpy as np
import pytest

from tests.conftest import ROOT
from core.model import model_math as mm
from core.plan.cluster import GPU_FP8_DTYPES, GPU_KINDS
from core.plan.parallel import ParallelPlan, fp8_recipe, grad_dtype
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.store.gpu_spec import shipped_specs
from core.sim.op_times import lookup_op_times, op_key
from core.sim.stages import stage_times
from core.model.ops import analytic_op_time, device_key, kernel_arrays, kernel_peak_flops, kernel_times, op_kernels
from core.io.session import load_any, save_session
from core.store.profiles_gen import generate_store
from core.sim.simulate import simulate

H100 = "H100-SXM5-80GB"
B200 = "B200-180GB"
_ANALYTIC: dict = {}


def open_profile(kind: str):
    """The analytic store of ``kind`` (the generator's; the shipped ones are calibrated, with a
    fitted FP8 GEMM efficiency): the FP8 model's properties at the spec's efficiencies."""
    if kind not in _ANALYTIC:
        _ANALYTIC[kind] = generate_store(kind)
    return _ANALYTIC[kind]
EXAMPLES = ROOT / "resources" / "examples"


def _session(gpu: str = "H100-SXM5-80GB", precision: str = "fp8", recipe: str | None = None):
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")  # GPT-3 1.3B, t=2 p=2 d=2
    s.cluster.gpu = gpu
    s.plan.precision = precision
    s.plan.fp8_recipe = recipe
    return s


def _key(**kw):
    return {**dict(b=8, s=4096, h=12288, a=96, f=4 * 12288, t=1, V=51200, dtype="bf16"), **kw}


# --------------------------------------------------------------------------- GEMM rates

def test_a_large_linear_gemm_runs_at_the_fp8_peak_ratio():
    """fc1 of GPT-3 175B at b=8, s=4096 is compute-bound: its time minus the per-kernel overhead
    scales with the peak, 989/1979 on the H100 (roofline with the same efficiency curve)."""
    store = open_profile(H100)
    p = {**store.op_model}
    kov = p["kernel_overhead_s"]

    def fc1(dtype: str, **kw) -> tuple[mm.Kernel, float]:
        key = device_key(_key(dtype=dtype, **kw), store.peak_flops)
        k = [x for x in op_kernels("mlp_fwd", key) if x.name == "fc1"]
        t = kernel_times(*kernel_arrays(k), kernel_peak_flops(k, dtype, store.peak_flops), store.memory_bandwidth_bytes_per_s, p)
        return k[0], float(t[0])

    kb, tb = fc1("bf16")
    k8, t8 = fc1("fp8")
    m, n, k = 8 * 4096, 4 * 12288, 12288
    x = (m * n * k) ** (1 / 3)
    eff = p["gemm_efficiency_max"] * x / (x + p["gemm_half_size"])
    assert k8.dtype == "fp8" and kb.dtype == ""
    assert k8.flops == kb.flops == 2.0 * m * n * k  # the model FLOPs do not change
    assert k8.bytes == m * k + k * n + 2 * m * n  # FP8 inputs, BF16 output
    assert t8 == pytest.approx(2.0 * m * n * k / (1979e12 * eff) + kov, rel=1e-12)
    assert tb == pytest.approx(2.0 * m * n * k / (989e12 * eff) + kov, rel=1e-12)
    assert (t8 - kov) / (tb - kov) == pytest.approx(989 / 1979, rel=1e-12)
    # MXFP8 on Blackwell runs at the mxfp8 peak (the FP8 rate there)
    b200 = open_profile(B200)
    k = [x for x in op_kernels("mlp_fwd", device_key(_key(dtype="fp8", fp8="mxfp8"), b200.peak_flops))
         if x.is_gemm]
    assert {x.dtype for x in k} == {"mxfp8"}
    assert list(kernel_peak_flops(k, "fp8", b200.peak_flops)) == [4500e12, 4500e12]


def test_only_the_linear_layers_run_in_fp8():
    """QKV, projection, fc1, fc2 and their dgrad/wgrad in FP8; the attention core, the output layer
    and the embedding in BF16 (kernels and times equal to bf16's for those ops)."""
    store = open_profile(H100)
    key = _key(dtype="fp8", fp8="tensorwise", attn="flash")
    fp8_gemms = {k.name for op in ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd")
                 for k in op_kernels(op, key) if k.dtype == "fp8"}
    assert fp8_gemms == {"qkv", "proj", "fc1", "fc2", "qkv_dgrad", "qkv_wgrad", "proj_dgrad", "proj_wgrad",
                         "fc1_dgrad", "fc1_wgrad", "fc2_dgrad", "fc2_wgrad"}
    for op in ("embedding_fwd", "embedding_bwd", "output_fwd", "output_bwd", "attention_core_fwd"):
        assert op_kernels(op, key) == op_kernels(op, _key(attn="flash")), op
        assert analytic_op_time(op, key, store) == analytic_op_time(op, _key(attn="flash"), store), op
    # a whole GEMM-heavy op gains less than the peak ratio (casts, BF16 memory-bound kernels), but gains
    ratio = analytic_op_time("mlp_fwd", key, store) / analytic_op_time("mlp_fwd", _key(), store)
    assert 989 / 1979 < ratio < 0.75


# --------------------------------------------------------------------------- quantization kernels

@pytest.mark.parametrize("recipe, tn, kernels", [
    # (name, bytes per element): read BF16 (2), amax pass with current scaling (2) and its scale
    # kernel (no bytes), FP8 copies (1 each)
    ("tensorwise", True, [("x_amax", 2.0), ("x_scale", 0.0), ("x_cast", 2 + 2 * 1)]),
    ("tensorwise", False, [("x_amax", 2.0), ("x_scale", 0.0), ("x_cast", 2 + 1)]),
    ("delayed", True, [("x_cast", 2 + 2 * 1)]),
    ("delayed", False, [("x_cast", 2 + 1)]),
    ("mxfp8", False, [("x_cast", 2 + 2 * (1 + 1 / 32))]),
    ("blockwise", True, [("x_cast", 2 + 2 * (1 + 4 / 128))]),
])
def test_cast_kernels_move_the_bytes_of_their_closed_form(recipe, tn, kernels):
    n = 3 * 4096 * 12288
    got = mm.fp8_cast_kernels("x", n, recipe, tn)
    assert [(k.name, k.bytes / n) for k in got] == [(name, pytest.approx(b, rel=1e-15)) for name, b in kernels]
    assert all(k.flops == 0 and not k.is_gemm for k in got)


def test_each_linear_layer_quantizes_its_input_and_its_output_gradient():
    b, s, h, f, t = 2, 2048, 4096, 16384, 2
    T = b * s
    key = dict(b=b, s=s, h=h, a=32, f=f, t=t, V=51200, dtype="fp8", fp8="delayed", fp8_tn=True)
    casts = {k.name: k.bytes for op in ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd")
             for k in op_kernels(op, key) if k.name.endswith("_cast")}
    per = 4  # delayed scaling on Hopper: read 2, write the FP8 copy and its transpose
    assert casts == {"qkv_input_cast": per * T * h, "proj_input_cast": per * T * h // t,
                     "fc1_input_cast": per * T * h, "fc2_input_cast": per * T * f // t,
                     "proj_grad_cast": per * T * h, "qkv_grad_cast": per * T * 3 * h // t,
                     "fc2_grad_cast": per * T * h, "fc1_grad_cast": per * T * f // t}
    # the weights are quantized once per iteration, with the optimizer step
    w = op_kernels(mm.FP8_WEIGHT_CAST_OP, {"n": 1000, "dtype": "fp8", "fp8": "tensorwise", "fp8_tn": True})
    assert [(k.name, k.bytes) for k in w] == [("weights_amax", 2000.0), ("weights_cast", 4000.0)]


@pytest.mark.parametrize("recipe, tn, kernels", [
    # (name, bytes per element of the gathered tensor) over t = 4: the rank's quarter is read
    # (2) and written in FP8 (1 per copy; amax one more read), the transposed copy made from the
    # gathered FP8 tensor on Hopper (read 1, write 1)
    ("tensorwise", True, [("x_amax", 2 / 4), ("x_scale", 0.0), ("x_cast", (2 + 1) / 4),
                          ("x_transpose", 2.0)]),
    ("tensorwise", False, [("x_amax", 2 / 4), ("x_scale", 0.0), ("x_cast", (2 + 1) / 4)]),
    ("delayed", True, [("x_cast", (2 + 1) / 4), ("x_transpose", 2.0)]),
    ("mxfp8", False, [("x_cast", (2 + 2 * (1 + 1 / 32)) / 4)]),
])
def test_sequence_parallel_inputs_are_quantized_before_their_all_gather(recipe, tn, kernels):
    """With sequence parallelism Transformer Engine quantizes the rank's shard and all-gathers
    FP8: the QKV and fc1 inputs and the projection's and fc2's output gradients are cast on
    T/t tokens (on Hopper the wgrad's transposed copy from the gathered tensor); the tensors
    that are not gathered keep the full cast; without sequence parallelism nothing changes."""
    n = 3 * 4096 * 12288
    got = mm.fp8_gathered_cast_kernels("x", n, 4, recipe, tn)
    assert [(k.name, k.bytes / n) for k in got] == [(name, pytest.approx(b, rel=1e-15))
                                                    for name, b in kernels]
    b, s, h, f, t = 2, 2048, 4096, 16384, 2
    T = b * s
    key = dict(b=b, s=s, h=h, a=32, f=f, t=t, V=51200, dtype="fp8", fp8="delayed", fp8_tn=True)
    casts = lambda k: {x.name: x.bytes for op in ("attention_fwd", "attention_bwd", "mlp_fwd",
                                                  "mlp_bwd") for x in op_kernels(op, k)
                       if x.name.endswith(("_cast", "_transpose"))}
    sp = casts({**key, "sp": True})
    for name in ("qkv_input", "fc1_input", "proj_grad", "fc2_grad"):
        assert (sp[name + "_cast"], sp[name + "_transpose"]) == (3 * T * h / t, 2 * T * h)
    plain = casts(key)
    assert {k: v for k, v in sp.items() if not k.startswith(("qkv_input", "fc1_input", "proj_grad",
                                                             "fc2_grad"))} == \
        {k: v for k, v in plain.items() if not k.startswith(("qkv_input", "fc1_input",
                                                             "proj_grad", "fc2_grad"))}
    assert plain["qkv_input_cast"] == 4 * T * h  # without sequence parallelism: as before


def test_the_transposed_copies_depend_on_the_gpu():
    assert mm.fp8_tn_only(open_profile(H100).peak_flops) is True
    assert mm.fp8_tn_only(open_profile(B200).peak_flops) is False
    assert device_key({"dtype": "fp8"}, open_profile(B200).peak_flops)["fp8_tn"] is False
    assert "fp8_tn" not in device_key({"dtype": "bf16"}, open_profile(B200).peak_flops)


# --------------------------------------------------------------------------- memory

def test_bytes_per_parameter_of_fp8_training():
    """BF16 weights, fp32 main gradients, fp32 master + Adam (18 bytes, 6 + 12/d distributed) plus
    the FP8 copies of the linear layers' weights."""
    pl = ParallelPlan(data_parallel=8, precision="fp8")
    assert grad_dtype(pl) == "fp32"
    assert mm.bytes_per_parameter(pl) == (2, 4, 12)
    assert mm.bytes_per_parameter(dataclasses.replace(pl, zero_stage=1)) == (2, 4, 12 / 8)
    assert mm.fp8_weight_bytes_per_parameter("tensorwise", tn_only=True) == 2
    assert mm.fp8_weight_bytes_per_parameter("delayed", tn_only=False) == 1
    assert mm.fp8_weight_bytes_per_parameter("mxfp8", tn_only=False) == 2 * (1 + 1 / 32)
    assert mm.fp8_weight_bytes_per_parameter("blockwise") == 2 * (1 + 4 / 128 ** 2)


def test_fp8_memory_adds_the_weight_copies_and_saves_linear_inputs_in_one_byte():
    m = MODEL_PRESETS["GPT-3 175B"]
    h = m.hidden_size
    bf = ParallelPlan(tensor_parallel=8, pipeline_parallel=16, data_parallel=4, micro_batch_size=1,
                      global_batch_size=1536, recompute="selective", precision="bf16")
    f8 = dataclasses.replace(bf, precision="fp8")
    w = mm.fp8_weights_per_gpu(m, f8)
    assert list(w) == [6 * 12 * h * h / 8] * 16  # 6 layers of 12h^2 (no biases) over t=8
    for tn, per in ((True, 2), (False, 1)):
        a, b = mm.stage_memory(m, bf), mm.stage_memory(m, f8, fp8_tn=tn)
        for x, y, n in zip(a, b, w):
            assert y.weights_bytes - x.weights_bytes == pytest.approx(per * n, rel=1e-12)
            assert (y.gradients_bytes, y.optimizer_bytes) == (x.gradients_bytes, x.optimizer_bytes)
    sbh = m.seq_length * 1 * h
    # selective recomputation, t=8, GeLU f=4h, unfused attention: Korthikanti sbh(10 + 24/t) with
    # QKV's and fc1's inputs (10 -> 8) and fc2's (8 -> 4) inputs in FP8; the projection's input
    # too with delayed scaling (-1), while with the other recipes (the default, tensorwise)
    # Megatron-Core has the projection save its original BF16 input (attention.py)
    dl = dataclasses.replace(f8, fp8_recipe="delayed")
    assert mm.activation_bytes_per_layer(m, bf) == sbh * (10 + 24 / 8)
    assert mm.activation_bytes_per_layer(m, dl) == sbh * (8 + 19 / 8)
    assert mm.activation_bytes_per_layer(m, f8) == sbh * (8 + 20 / 8)
    # FlashAttention without recomputation keeps its BF16 output too: with delayed scaling the
    # FP8 copy adds 1, with tensorwise the projection reads that BF16 tensor (nothing more)
    fl = dataclasses.replace(m, attention_kernel="flash")
    none = dataclasses.replace(dl, recompute="none")
    assert mm.activation_bytes_per_layer(fl, none) == sbh * (8 + (24 + 1 - 4) / 8)
    assert mm.activation_bytes_per_layer(fl, dataclasses.replace(f8, recompute="none")) == \
        sbh * (8 + (24 - 4) / 8)
    assert mm.activation_bytes_per_layer(m, dataclasses.replace(f8, recompute="full")) == 2 * sbh


# --------------------------------------------------------------------------- refusals

def _errors(s) -> dict[str, str]:
    return {e.field: e.message for e in validate(s)}


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused_by_name():
    errs = _errors(_session("A100-SXM4-80GB"))
    assert list(errs) == ["plan.precision"]
    assert "cluster.gpu='A100-SXM4-80GB'" in errs["plan.precision"]
    assert "no FP8 tensor cores" in errs["plan.precision"]


def test_mxfp8_needs_blackwell():
    errs = _errors(_session("H100-SXM5-80GB", recipe="mxfp8"))
    assert list(errs) == ["plan.fp8_recipe"]
    assert "cluster.gpu='H100-SXM5-80GB'" in errs["plan.fp8_recipe"] and "Blackwell" in errs["plan.fp8_recipe"]
    assert _errors(_session("B200-180GB", recipe="mxfp8")) == {}
    assert _errors(_session("GB200-NVL72", recipe="mxfp8")) == {}


def test_fp8_recipe_without_fp8_and_fp8_gradients_are_refused():
    errs = _errors(_session(precision="bf16", recipe="delayed"))
    assert list(errs) == ["plan.fp8_recipe"] and "needs precision='fp8'" in errs["plan.fp8_recipe"]
    s = _session()
    s.plan.grad_reduce_dtype = "fp16"
    assert list(_errors(s)) == ["plan.grad_reduce_dtype"]
    for g in ("fp32", "bf16"):
        s.plan.grad_reduce_dtype = g
        assert _errors(s) == {}, g
    for recipe in (None, "delayed", "tensorwise", "blockwise"):
        assert _errors(_session(recipe=recipe)) == {}, recipe


def test_fp8_dtypes_of_each_gpu_kind_are_its_spec_peaks():
    specs = shipped_specs()
    assert set(GPU_FP8_DTYPES) == set(GPU_KINDS)
    for kind, spec in specs.items():
        assert GPU_FP8_DTYPES[kind] == tuple(d for d in ("fp8", "mxfp8") if d in spec.peak_flops), kind
        assert "mxfp8" not in spec.peak_flops or spec.peak_flops["mxfp8"] == spec.peak_flops["fp8"]


def test_cli_refuses_fp8_on_a100_with_exit_status_2(tmp_path, capsys):
    from core.cli import main
    s = _session("A100-SXM4-80GB")
    path = tmp_path / "s.json"
    save_session(s, path)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "plan.precision" in err and "A100-SXM4-80GB" in err and "Traceback" not in err


# --------------------------------------------------------------------------- caches and lookups

def test_fp8_op_times_scale_the_bf16_rows_of_the_store():
    """Tables hold 16-bit ops: an FP8 op takes its BF16 row scaled by the analytic ratio, which on an
    analytic store is the analytic FP8 time itself (the row is that model tabulated)."""
    store = open_profile(H100)
    s = _session()
    got = lookup_op_times(s, store).times
    key = op_key(s)
    assert key["dtype"] == "fp8" and key["fp8"] == "tensorwise"
    for op, v in got.items():
        assert v == pytest.approx(analytic_op_time(op, key, store), rel=1e-9), op


def test_a_shared_cache_keeps_fp8_bf16_and_recipes_apart():
    """One lookup cache over plans that differ only in precision or recipe (as a sweep shares it)
    gives each the times a fresh cache gives."""
    store = open_profile(H100)
    sessions = [_session(precision="bf16")] + [_session(recipe=r) for r in ("delayed", "tensorwise", "blockwise")]
    shared: dict = {}
    got = [stage_times(s, store, shared) for s in sessions]
    fresh = [stage_times(s, store, {}) for s in sessions]
    for a, b in zip(got, fresh):
        assert np.array_equal(a.fwd_s, b.fwd_s) and np.array_equal(a.bwd_s, b.bwd_s)
        assert np.array_equal(a.optimizer_s, b.optimizer_s)
    fwd = [float(g.fwd_s.sum()) for g in got]
    assert len(set(fwd)) == 4  # bf16, delayed, tensorwise and blockwise all differ
    assert fwd[0] > max(fwd[1:])  # FP8 is faster here
    assert fwd[1] < fwd[2]  # delayed scaling saves current scaling's amax pass
    # the optimizer step adds the per-iteration weight quantization
    opt = [float(g.optimizer_s[0]) for g in got]
    assert opt[1] > opt[0] and opt[2] > opt[1]


def test_sweep_over_plans_of_both_precisions_matches_simulate():
    from core.studies.sweep import SweepSpace, run_sweep
    for s in (_session(precision="bf16"), _session()):
        res = run_sweep(s, SweepSpace(num_gpus=8, tensor_parallel=(1, 2), pipeline_parallel=(1, 2),
                                      micro_batch_sizes=(1,),
                                      schedules=("1f1b",), recompute=("none",)))
        for i, pl in enumerate(res.plans):
            one = copy.deepcopy(s)
            one.plan = pl
            assert res.iteration_time_s[i] == pytest.approx(simulate(one).report.iteration_time_s, rel=1e-9)


# --------------------------------------------------------------------------- report

def test_report_says_precision_and_recipe_and_mfu_is_of_the_bf16_peak():
    s = _session(recipe="delayed")
    r = simulate(s).report
    assert (r.precision, r.fp8_recipe, r.mfu_peak_dtype) == ("fp8", "delayed", "bf16")
    assert r.mfu == pytest.approx(r.model_flops_per_iteration / (r.iteration_time_s * r.num_gpus * 989e12),
                                  rel=1e-12)
    bf = simulate(_session(precision="bf16")).report
    assert bf.model_flops_per_iteration == r.model_flops_per_iteration
    assert (bf.precision, bf.fp8_recipe) == ("bf16", None)
    assert r.iteration_time_s < bf.iteration_time_s and r.mfu > bf.mfu
    d = r.to_dict()
    assert (d["precision"], d["fp8_recipe"], d["mfu_peak_dtype"]) == ("fp8", "delayed", "bf16")
    assert fp8_recipe(s.plan) == "delayed" and fp8_recipe(_session(recipe=None).plan) == "tensorwise"


# --------------------------------------------------------------------------- Megatron-LM arguments

def _launch(*extra: str):
    from core.io.megatron.launch import Launch
    args = ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
            "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1",
            "--global-batch-size", "64", "--tensor-model-parallel-size", "2", "--vocab-size", "50257",
            "--tokenizer-type", "NullTokenizer", "--train-samples", "1000", *extra]
    return Launch(args, 1, 8, "torchrun", "pretrain_gpt.py", "test.sh")


@pytest.mark.parametrize("extra, recipe", [
    (["--bf16", "--fp8-format", "hybrid"], "delayed"),  # Megatron-Core's default recipe
    (["--bf16", "--fp8-format", "e4m3"], "delayed"),
    (["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"], None),
    (["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "mxfp8"], "mxfp8"),
    (["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "blockwise"], "blockwise"),
])
def test_megatron_fp8_arguments_import_and_round_trip(extra, recipe):
    from core.io.megatron.from_session import export_arguments
    from core.io.megatron.launch import parse_arguments
    from core.io.megatron.to_session import session_from_launch
    s = session_from_launch(_launch(*extra), gpu="B200-180GB").session
    assert (s.plan.precision, s.plan.fp8_recipe) == ("fp8", recipe)
    args = parse_arguments(export_arguments(s))
    assert args["--fp8-format"] == ["hybrid"] and "--bf16" in args
    assert args["--fp8-recipe"] == [recipe or "tensorwise"]  # explicit: Megatron's default differs
    from core.io.megatron.launch import Launch
    back = session_from_launch(Launch(export_arguments(s), 1, 8, "torchrun", "pretrain_gpt.py", "x.sh"),
                               gpu="B200-180GB").session
    assert back.plan == s.plan and dataclasses.replace(back.model, name=s.model.name) == s.model


@pytest.mark.parametrize("extra, message", [
    (["--bf16", "--fp8-format", "e5m2"], "--fp8-format 'e5m2': invalid choice (choose from "
     "e4m3, hybrid)"),
    (["--fp16", "--fp8-format", "hybrid"], "--fp8-format: with --fp16 is not modelled yet"),
    (["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "custom"], "--fp8-recipe: not modelled yet"),
])
def test_megatron_fp8_arguments_refused_by_name(extra, message):
    from core.io.megatron.arguments import MegatronArgsError
    from core.io.megatron.to_session import session_from_launch
    with pytest.raises(MegatronArgsError, match=re.escape(message)):
        session_from_launch(_launch(*extra))


def test_calibration_linearizes_fp8_plans_exactly_at_their_point():
    """core.accuracy.calibrate times FP8 kernels at their own peaks: its linearization of FP8 plans gives the
    simulated iteration time (the calibration helper fits FP8 runs with it)."""
    from core.accuracy.calibrate import linearize, model_store, predict_linearized
    from core.plan.cluster import ClusterConfig, CostConfig
    from core.plan.model_config import ModelConfig
    from core.plan.session import Session
    from core.model.ops import DEFAULT_OP_MODEL
    from core.store.profiles_gen import generate_store
    base = generate_store("H100-SXM5-80GB", date="2026-01-01")
    op_model = {**DEFAULT_OP_MODEL, "op_overhead_s": 2e-4, "collective_overhead_s": 3e-5}
    sessions = [Session(ModelConfig("tiny", L, h, 8, None, 512, 50257),
                        ParallelPlan(t, p, d, b, B, "1f1b", "full", "fp8", fp8_recipe=r),
                        ClusterConfig("H100-SXM5-80GB", 8), CostConfig())
                for (h, L, t, p, d, b, B, r) in [(1024, 4, 1, 1, 1, 2, 8, None), (1024, 8, 2, 2, 2, 1, 16, "delayed"),
                                                 (2048, 4, 1, 2, 4, 1, 8, "blockwise")]]
    rows = [linearize(s, base, op_model) for s in sessions]
    sim = [simulate(s, model_store(base, op_model)).report.iteration_time_s for s in sessions]
    np.testing.assert_allclose(predict_linearized(rows, op_model), sim, rtol=1e-9)


def test_zero_bubble_splits_an_fp8_backward_by_rate_weighted_flops():
    """ZB-H1's W share of the attention backward counts the FP8 weight GEMMs' FLOPs at 1/r
    (r = FP8 peak / BF16 peak); the per-op graph and the micro-batch graph agree."""
    from core.sim.op_times import weight_gradient_share
    from core.sim.graph import build_graph
    from core.sim.solver import solve
    s = _session()
    s.plan.schedule = "zb-h1"
    h, sl = s.model.hidden_size, s.model.seq_length
    r = 1979 / 989
    assert weight_gradient_share("attention_bwd", s, r) == pytest.approx((8 * h / r) / (16 * h / r + 8 * sl))
    assert weight_gradient_share("attention_bwd", s) == 8 * h / (16 * h + 8 * sl)
    store = open_profile(H100)
    st = stage_times(s, store)
    assert st.fp8_speedup == pytest.approx(r, rel=1e-12)
    attn = st.op_times_s["attention_bwd"]
    assert attn * weight_gradient_share("attention_bwd", s, r) < attn * weight_gradient_share("attention_bwd", s)
    fine, _ = build_graph(s, store)
    coarse, _ = build_graph(s, store, detail="microbatch")
    assert solve(coarse).iteration_time_s == pytest.approx(solve(fine).iteration_time_s, rel=1e-12)
    assert stage_times(_session(precision="bf16"), store).fp8_speedup == 1.0


def test_simulate_cli_prints_precision_recipe_and_the_mfu_peak(tmp_path, capsys):
    import json
    from core.cli import main
    path = tmp_path / "s.json"
    save_session(_session(recipe="blockwise"), path)
    assert main(["simulate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["precision"], doc["fp8_recipe"], doc["mfu_peak_dtype"]) == ("fp8", "blockwise", "bf16")
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fp8, recipe blockwise" in out and "(of the BF16 dense peak)" in out


def test_simulate_header_names_the_recipe_in_effect_when_fp8_recipe_is_empty(tmp_path, capsys):
    """An empty ``plan.fp8_recipe`` with precision fp8 runs tensorwise (FP8_DEFAULT_RECIPE): the
    report's header (the plan's full label) names it as the Precision line does (new-user
    trial: the header said ``precision=fp8`` only)."""
    from core.cli import main
    s = _session(recipe=None)
    assert s.plan.label(full=True).endswith(" precision=fp8 no-grad_acc_fusion fp8=tensorwise")
    assert s.plan.label(full=True) == _session(recipe="tensorwise").plan.label(full=True)
    assert _session(recipe="delayed").plan.label(full=True).endswith(" fp8=delayed")
    assert "fp8=" not in _session(precision="bf16").plan.label(full=True)
    assert "fp8" not in s.plan.label()  # the short label (sweep rows) never names precision
    path = tmp_path / "s.json"
    save_session(s, path)
    assert main(["simulate", str(path)]) == 0
    header, *rest = capsys.readouterr().out.splitlines()
    assert header.endswith("precision=fp8 no-grad_acc_fusion fp8=tensorwise; m=32)")
    assert any(line.startswith("Precision") and "fp8, recipe tensorwise" in line for line in rest)


def test_context_parallel_fp8_plans_pass_bf16_kv_blocks():
    """FP8 training keeps attention in BF16: the ring's K/V blocks are BF16 (TE's attention with
    context parallelism), and a cp=2 FP8 plan simulates, faster than BF16."""
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=8192)
    bf = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, micro_batch_size=1,
                      global_batch_size=32, recompute="selective", precision="bf16", sequence_parallel=True,
                      context_parallel=2)
    f8 = dataclasses.replace(bf, precision="fp8")
    assert mm.cp_kv_block_bytes(m, f8) == mm.cp_kv_block_bytes(m, bf) == 1 * 4096 * 2 * 4 * 128 * 2
    from core.plan.cluster import ClusterConfig, CostConfig
    from core.plan.session import Session
    t = [simulate(Session(m, pl, ClusterConfig("H100-SXM5-80GB", 8), CostConfig())).report.iteration_time_s
         for pl in (bf, f8)]
    assert t[1] < t[0]


# --------------------------------------------------------------------------- mixture of experts

def _moe_key(**kw):
    return {**dict(b=1, s=4096, h=4096, a=32, g=8, f=14336, t=1, V=32000, dtype="bf16", act="swiglu",
                   norm="rmsnorm", pos="rope", attn="flash", E=8, topk=2, fe=14336, ep=2, etp=1, ns=1,
                   imb=1.0), **kw}


def test_moe_experts_run_in_fp8_and_the_router_in_bf16():
    """Routed experts (grouped GEMMs) and shared experts in FP8 with their casts; the router's gate
    BF16 (Megatron-Core's TopKRouter is a plain linear)."""
    key = _moe_key(dtype="fp8", fp8="delayed", fp8_tn=True)
    R, local, fe, h, T = 4096 * 2, 4, 14336, 4096, 4096  # R = b s k etp imb / t copies on the rank
    ks = {k.name: k for op in ("experts_fwd", "experts_bwd", "shared_experts_fwd", "shared_experts_bwd",
                               "router_fwd", "router_bwd") for k in op_kernels(op, key)}
    assert {n for n, k in ks.items() if k.dtype == "fp8"} == {
        f"{p}_{g}{x}" for p in ("experts", "shared") for g in ("fc1", "fc2") for x in ("", "_dgrad", "_wgrad")}
    assert ks["experts_fc1"].batch == local and ks["experts_fc1"].m == R / local
    assert ks["experts_fc1"].flops == 2.0 * R * 2 * fe * h  # SwiGLU: fc1 2 f_e wide
    assert ks["router"].dtype == "" and ks["router_dgrad"].dtype == ""
    per = 4  # delayed scaling on Hopper: read 2, write the copy and its transpose
    assert {n: k.bytes for n, k in ks.items() if n.endswith("_cast")} == {
        "experts_fc1_input_cast": per * R * h, "experts_fc2_input_cast": per * R * fe,
        "experts_fc2_grad_cast": per * R * h, "experts_fc1_grad_cast": per * R * 2 * fe,
        "shared_fc1_input_cast": per * T * h, "shared_fc2_input_cast": per * T * fe,
        "shared_fc2_grad_cast": per * T * h, "shared_fc1_grad_cast": per * T * 2 * fe}
    bf = {k.name: k for op in ("experts_fwd", "router_fwd") for k in op_kernels(op, _moe_key())}
    assert bf["experts_fc1"].flops == ks["experts_fc1"].flops and bf["experts_fc1"].dtype == ""
    assert bf["router"] == ks["router"]


def test_moe_activations_keep_the_experts_inputs_in_fp8():
    """Mixtral 8x7B, one MoE layer, t=1, selective recomputation: FP8 saves the QKV input (1 byte
    per sbh), with delayed scaling the projection input (a kv/h = 1 per sbh), and, per routed
    copy, h of the fc1 input and f_e of the fc2 input; the router keeps its BF16 input (no
    shared experts). With the other recipes the projection and the shared experts' fc1 save
    their original BF16 input (Megatron-Core attention.py, shared_experts.py)."""
    m = dataclasses.replace(MODEL_PRESETS["Mixtral 8x7B"], seq_length=4096)
    bf = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, micro_batch_size=1,
                      global_batch_size=64, recompute="selective", precision="bf16", expert_parallel=8)
    sbh, R = 4096 * 4096, 4096 * 2
    for recipe, delayed in (("delayed", 1), ("tensorwise", 0)):
        f8 = dataclasses.replace(bf, precision="fp8", fp8_recipe=recipe)
        saved = (mm.moe_activation_bytes_per_layer(m, bf, "selective")
                 - mm.moe_activation_bytes_per_layer(m, f8, "selective"))
        assert saved == sbh * (1 + delayed) + R * (4096 + 14336)
        # with shared experts (delayed scaling) their FP8 copy of the norm output adds 1 back;
        # their fc2 input saves f_s/h
        sh = dataclasses.replace(m, num_shared_experts=1)
        saved = (mm.moe_activation_bytes_per_layer(sh, bf, "selective")
                 - mm.moe_activation_bytes_per_layer(sh, f8, "selective"))
        assert saved == sbh * (1 - delayed + delayed + 14336 / 4096) + R * (4096 + 14336)


def test_an_fp8_moe_plan_simulates_faster_and_counts_expert_weight_copies():
    from core.plan.cluster import ClusterConfig, CostConfig
    from core.plan.session import Session
    m = dataclasses.replace(MODEL_PRESETS["Mixtral 8x7B"], seq_length=4096)
    bf = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=4, micro_batch_size=1,
                      global_batch_size=64, recompute="selective", precision="bf16", expert_parallel=4,
                      sequence_parallel=True)
    f8 = dataclasses.replace(bf, precision="fp8")
    rb, r8 = (simulate(Session(m, pl, ClusterConfig("H100-SXM5-80GB", 8), CostConfig())).report for pl in (bf, f8))
    assert r8.iteration_time_s < rb.iteration_time_s
    w = mm.fp8_weights_per_gpu(m, f8)
    # per stage 16 MoE layers: attention (q, kv, proj) over t plus 8 experts of 3 h f_e over ep*etp = 4*2
    attn = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    assert list(w) == [16 * (attn / 2 + 8 * 3 * 4096 * 14336 / 8)] * 2
    for x, y, n in zip(rb.memory, r8.memory, w):
        assert y.weights_bytes - x.weights_bytes == pytest.approx(2 * n, rel=1e-12)


def test_diff_of_a_bf16_and_an_fp8_plan_names_the_precision_and_the_compute_gain():
    from core.studies.diff import diff_plans, plan_label
    a, b = _session(precision="bf16"), _session(recipe="delayed")
    assert plan_label(b) == plan_label(a) + " precision=fp8 fp8=delayed"
    d = diff_plans(a, b).to_dict()
    assert d["a"]["label"] != d["b"]["label"]
    assert d["b"]["iteration_time_s"] < d["a"]["iteration_time_s"]


# ------------------------------------------------ per-tensor current scaling and grouped GEMMs

@pytest.mark.parametrize("recipe, tn, per_group", [
    # TE 2.11 Float8CurrentScalingQuantizer::quantize_impl: amax, scale from amax, quantize
    ("tensorwise", True, [("x_amax", 2.0), ("x_scale", 0.0), ("x_cast", 2 + 2 * 1)]),
    ("mxfp8", False, [("x_cast", 2 + 2 * (1 + 1 / 32))]),
    ("blockwise", True, [("x_cast", 2 + 2 * (1 + 4 / 128))]),
])
def test_a_grouped_linear_quantizes_each_expert_split_on_its_own(recipe, tn, per_group):
    """TE 2.11 ``split_quantize`` (GroupedLinear's per-expert quantization) fuses the splits
    into one kernel with delayed scaling only; any other recipe runs each split's quantizer:
    the same bytes as one tensor, ``groups`` times the kernels, each on ``n / groups``."""
    n, g = 3 * 4096 * 12288, 16
    got = mm.fp8_cast_kernels("x", n, recipe, tn, groups=g)
    assert len(got) == g * len(per_group)
    assert [(k.name, k.bytes / n) for k in got] == [
        (name, pytest.approx(b / g, rel=1e-15)) for name, b in per_group] * g
    one = mm.fp8_cast_kernels("x", n, recipe, tn)
    assert sum(k.bytes for k in got) == pytest.approx(sum(k.bytes for k in one), rel=1e-15)
    # delayed scaling: nvte_multi_cast_transpose, one kernel for every split
    assert mm.fp8_cast_kernels("x", n, "delayed", True, groups=g) == \
        mm.fp8_cast_kernels("x", n, "delayed", True)


def test_the_weights_cast_keeps_amax_and_cast_without_a_scale_kernel():
    w = mm.fp8_cast_kernels("weights", 1000, "tensorwise", True, weight=True)
    assert [k.name for k in w] == ["weights_amax", "weights_cast"]


def test_routed_experts_pay_one_launch_per_expert_quantization():
    """Qwen3-30B-A3B's MoE layer on EP 8 (16 local experts), FP8 current scaling on Hopper: the
    experts' forward quantizes fc1's and fc2's inputs per expert (2 x 16 x 3 kernels), the
    backward fc2's and fc1's output gradients the same way; bytes as one tensor each. Its
    device time exceeds the one-tensor form (three kernels per quantization) by exactly the
    extra launches' kernel overhead (memory time is linear in bytes): (3 x 16 - 3) x 2 x
    kernel_overhead_s per pass."""
    from core.model.ops import DEFAULT_OP_MODEL, kernel_arrays, kernel_peak_flops, kernel_times
    key = dict(b=2, s=4096, h=2048, a=32, g=4, kv=128, f=6144, t=1, V=151936, dtype="fp8",
               fp8="tensorwise", fp8_tn=True, act="swiglu", norm="rmsnorm", E=128, topk=8,
               fe=768, ep=8, etp=1, ns=0, imb=1.0, glc=0, eb=0, sp=False)
    local = 128 // 8
    peaks = {"bf16": 989e12, "fp8": 1979e12}
    op_model = {**DEFAULT_OP_MODEL, "kernel_overhead_s": 4e-6}
    for op, names in (("experts_fwd", ("experts_fc1_input", "experts_fc2_input")),
                      ("experts_bwd", ("experts_fc2_grad", "experts_fc1_grad"))):
        ks = op_kernels(op, key)
        for name in names:
            assert [k.name for k in ks].count(f"{name}_amax") == local
            assert [k.name for k in ks].count(f"{name}_scale") == local
            assert [k.name for k in ks].count(f"{name}_cast") == local
        quant = [k for k in ks if k.name.startswith(names) and not k.is_gemm]
        merged = [k for n in names for k in mm.fp8_cast_kernels(
            n, sum(x.bytes for x in quant if x.name == f"{n}_amax") / 2, "tensorwise", True)]

        def device(kernels):
            return float(kernel_times(*kernel_arrays(kernels), kernel_peak_flops(kernels, "fp8", peaks),
                                      3.35e12, op_model).sum())
        assert device(quant) - device(merged) == pytest.approx(
            (3 * local - 3) * 2 * 4e-6, rel=1e-9)
