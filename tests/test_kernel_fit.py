"""Kernel classes measured alone (core.accuracy.kernel_fit, core.profiling.kernel_classes,
``vtrain profile kernels`` / ``check-kernels``): each point timed by the op model in closed
form, each class's parameters recovered from synthetic points, host-paced points left out, the
committed H200 measurements' fitted values, and bad files refused naming point and field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from core.accuracy.kernel_fit import (KernelClassesError, class_errors, fit_kernel_classes,
                                      host_bound, modelled_seconds, read_kernel_classes)
from core.cli import main
from core.model.ops import DEFAULT_OP_MODEL, FLASH_BWD_RELATIVE_EFFICIENCY

ROOT = Path(__file__).resolve().parents[1]
H200_FILE = ROOT / "benchmarks" / "data" / "h200_kernel_classes.json"
PEAKS = {"bf16": 989e12, "fp8": 1979e12, "tf32": 495e12, "fp32": 67e12}
BW = 4.8e12
TRUTH = {**DEFAULT_OP_MODEL, "gemm_efficiency_max": 0.7, "gemm_half_size": 150.0,
         "kernel_overhead_s": 0.0, "fp8_gemm_efficiency": 0.9, "flash_attention_efficiency": 0.85,
         "grouped_gemm_efficiency": 0.95, "memory_efficiency": 0.8}


def _gemm(m, n, k, dtype="bf16", **extra):
    return {"class": "gemm", "dtype": dtype, "layout": "fprop", "m": m, "n": n, "k": k,
            "flops": 2.0 * m * n * k, "bytes": 2.0 * (m * k + n * k + m * n), **extra}


def _attn(cls, s, d=128, b=1, hq=32):
    fwd = 4.0 * b * hq * s * s * d * 0.5
    return {"class": cls, "backend": "cudnn", "b": b, "s": s, "hq": hq, "hkv": 8, "d": d,
            "causal": 1, "flops": fwd * (2.5 if cls == "attention_bwd" else 1.0),
            "bytes": 2.0 * b * s * d * 80}


def _synthetic() -> list[dict]:
    pts = [_gemm(m, n, k) for m, n, k in ((256, 256, 256), (512, 1024, 512), (2048, 2048, 2048),
                                          (8192, 4096, 4096), (4096, 14336, 4096))]
    pts += [_gemm(8192, 4096, 4096, "fp8", recipe="tensorwise"), _gemm(8192, 8192, 8192, "fp8")]
    pts += [_attn(c, s) for c in ("attention_fwd", "attention_bwd") for s in (2048, 8192)]
    pts += [{"class": "grouped_gemm", "dtype": "bf16", "e": 8, "m": 1024, "n": 4096, "k": 7168,
             "flops": 2.0 * 8 * 1024 * 4096 * 7168, "bytes": 1e8}]
    pts += [{"class": "memory", "kernel": kname, "tokens": 8192, "h": 8192, "flops": 0.0,
             "bytes": 3 * 8192 * 8192 * 2.0} for kname in ("add", "rms_norm")]
    secs = modelled_seconds(pts, PEAKS, BW, TRUTH)
    return [{**p, "seconds": float(t)} for p, t in zip(pts, secs)]


def test_closed_forms():
    g = _gemm(4096, 4096, 4096)
    x = 4096.0  # the geometric mean of M, N, K
    eff = 0.7 * x / (x + 150.0)
    assert modelled_seconds([g], PEAKS, BW, TRUTH)[0] == pytest.approx(g["flops"] / (989e12 * eff))
    f8 = _gemm(4096, 4096, 4096, "fp8")
    assert modelled_seconds([f8], PEAKS, BW, TRUTH)[0] == pytest.approx(
        f8["flops"] / (1979e12 * eff * 0.9))
    fb = _attn("attention_bwd", 8192)
    xa = (8192.0 * 8192 * 128) ** (1 / 3)  # M = N = s, K = d
    ea = 0.7 * xa / (xa + 150.0) * 0.85
    assert modelled_seconds([fb], PEAKS, BW, TRUTH)[0] == pytest.approx(
        fb["flops"] / (989e12 * FLASH_BWD_RELATIVE_EFFICIENCY * ea))
    m = {"class": "memory", "kernel": "copy", "tokens": 1, "h": 1, "flops": 0.0, "bytes": 4.8e9}
    assert modelled_seconds([m], PEAKS, BW, TRUTH)[0] == pytest.approx(1e-3 / 0.8)


def test_fit_recovers_each_class():
    pts = _synthetic()
    fit = fit_kernel_classes(pts, PEAKS, BW, {"kernel_overhead_s": 0.0})
    for name in ("gemm_efficiency_max", "fp8_gemm_efficiency", "flash_attention_efficiency",
                 "grouped_gemm_efficiency", "memory_efficiency"):
        assert fit.params[name] == pytest.approx(TRUTH[name], rel=1e-3), name
    assert fit.params["gemm_half_size"] == pytest.approx(150.0, rel=1e-2)
    # the backward's share of the forward's efficiency is the model's own 0.8 here
    assert fit.reported["flash_bwd_relative_efficiency"] == pytest.approx(
        FLASH_BWD_RELATIVE_EFFICIENCY, rel=1e-3)
    assert fit.points["attention_fwd"] == 2 and fit.points["grouped_gemm"] == 1
    # one class off leaves the others' parameters where they were
    off = [{**p, "seconds": p["seconds"] * (2.0 if p["class"] == "memory" else 1.0)} for p in pts]
    fit2 = fit_kernel_classes(off, PEAKS, BW, {"kernel_overhead_s": 0.0})
    assert fit2.params["memory_efficiency"] == pytest.approx(0.4, rel=1e-3)
    assert fit2.params["gemm_efficiency_max"] == pytest.approx(0.7, rel=1e-3)
    rows = {r["group"]: r for r in class_errors(pts, PEAKS, BW, TRUTH)}
    assert rows["gemm bf16"]["mape"] == pytest.approx(0.0, abs=1e-9)
    assert rows["gemm fp8 tensorwise"]["n"] == 1 and rows["gemm fp8"]["n"] == 1


def test_host_paced_points_are_left_out():
    pts = [p for p in _synthetic() if p["seconds"] > 20e-6]  # the kernels longer than the floor
    tiny = {**_gemm(64, 64, 64), "seconds": 15e-6}   # 0.5 MFLOP: the host's 15 us, not the GEMM's
    floor_kernel = {**_gemm(2048, 2048, 2048), "seconds": 15e-6 * 1.5}  # a real 17 us GEMM
    hb = host_bound([*pts, tiny, floor_kernel], PEAKS, BW)
    assert list(hb[-2:]) == [True, False]
    assert not hb[:-2].any()
    fit = fit_kernel_classes([*pts, tiny], PEAKS, BW, {"kernel_overhead_s": 0.0})
    assert fit.params["gemm_efficiency_max"] == pytest.approx(0.7, rel=1e-3)
    # a tiny GEMM far slower than the floor is the kernel's own time: kept
    assert not host_bound([*pts, {**tiny, "seconds": 15e-4}], PEAKS, BW)[-1]


def test_committed_h200_measurements():
    """The H200 file measured on 2026-12-04 (benchmarks/data/README.md): what each class
    sustains, as fractions of the data-sheet peaks (989 TFLOP/s bf16, 4.8 TB/s)."""
    kc = read_kernel_classes(H200_FILE)
    assert kc.provenance["gpu"] == "NVIDIA H200" and not kc.failed and len(kc.points) == 555
    fit = fit_kernel_classes(kc.points, PEAKS, BW)
    assert fit.params["gemm_efficiency_max"] == pytest.approx(0.676, abs=0.005)
    assert fit.params["fp8_gemm_efficiency"] == pytest.approx(0.893, abs=0.005)
    assert fit.params["memory_efficiency"] == pytest.approx(0.869, abs=0.005)
    assert fit.params["grouped_gemm_efficiency"] == pytest.approx(0.920, abs=0.005)
    assert fit.params["flash_attention_efficiency"] == pytest.approx(0.835, abs=0.005)
    assert fit.reported["memory_efficiency_elementwise"] == pytest.approx(0.906, abs=0.005)
    assert fit.reported["memory_efficiency_norm"] == pytest.approx(0.534, abs=0.005)
    assert fit.reported["flash_bwd_relative_efficiency"] == pytest.approx(0.81, abs=0.03)
    # cuDNN's fused attention (Transformer Engine's) against torch's FlashAttention-2
    assert fit.reported["flashattention2_efficiency"] < 0.6 * fit.params["flash_attention_efficiency"]


def test_whole_step_is_the_sum_of_its_ops():
    """A ``step`` point (a whole Llama model on one GPU) is charged the sum of its ops: the
    embedding and output ops once, each layer op ``layers`` times (closed form from
    analytic_op_time); the committed Llama 3 8B step on the H200 against the shipped store."""
    from types import SimpleNamespace

    from core.accuracy.kernel_fit import layer_errors
    from core.model.kernels import op_key
    from core.model.ops import analytic_op_time
    from core.plan.model_config import ModelConfig
    from core.plan.parallel import ParallelPlan
    from core.store.profile_store import ProfileStore

    kc = read_kernel_classes(ROOT / "benchmarks" / "data" / "h200_llama_step.json")
    steps = {(p["layers"], p["op"]): p for p in kc.layers if not p["compile"]}
    compiled = {(p["layers"], p["op"]): p for p in kc.layers if p["compile"]}
    assert set(steps) == set(compiled) == {(8, "forward"), (8, "forward_backward"),
                                           (32, "forward"), (32, "forward_backward")}
    # torch.compile's fusion takes 9 % off the 32-layer step
    assert compiled[(32, "forward_backward")]["seconds"] == pytest.approx(0.712, abs=0.001)
    store = ProfileStore.open(ROOT / "profiles" / "H200-SXM-141GB.h5")
    p = steps[(32, "forward_backward")]
    model = ModelConfig(name="x", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        num_query_groups=8, ffn_hidden_size=14336, seq_length=8192,
                        vocab_size=128256, make_vocab_size_divisible_by=1, activation="swiglu",
                        normalization="rmsnorm", position_embedding="rope", tied_embeddings=False,
                        add_bias_linear=False, attention_kernel="flash")
    key = op_key(model, ParallelPlan(tensor_parallel=1, micro_batch_size=1, precision="bf16"))
    dev = SimpleNamespace(peak_flops=store.peak_flops, op_model=store.op_model, device_name="x",
                          memory_bandwidth_bytes_per_s=store.memory_bandwidth_bytes_per_s)
    t = {op: analytic_op_time(op, key, dev, host=False) for op in (
        "embedding_fwd", "embedding_bwd", "output_fwd", "output_bwd", "attention_fwd",
        "attention_bwd", "mlp_fwd", "mlp_bwd")}
    want = (t["embedding_fwd"] + t["embedding_bwd"] + t["output_fwd"] + t["output_bwd"]
            + 32 * (t["attention_fwd"] + t["attention_bwd"] + t["mlp_fwd"] + t["mlp_bwd"]))
    (row,) = layer_errors([p], store.peak_flops, store.memory_bandwidth_bytes_per_s, store.op_model)
    assert row["modelled_s"] == pytest.approx(want, rel=1e-12)
    assert row["op"] == "step forward_backward (32 layers)"
    # measured 0.786 s for the eager 8B step; the shipped store within 4 % of it
    assert p["seconds"] == pytest.approx(0.786, abs=0.001)
    assert abs(row["error"]) < 0.04
    # per layer (the slope from 8 to 32 layers), the shipped store is the eager layer to 1 %
    slope = (p["seconds"] - steps[(8, "forward_backward")]["seconds"]) / 24
    model_slope = t["attention_fwd"] + t["attention_bwd"] + t["mlp_fwd"] + t["mlp_bwd"]
    assert model_slope / slope == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("doc, rule", [
    ({"format": "other", "version": 1, "points": []}, "field 'format'"),
    ({"format": "vtrain-kernel-classes", "version": 2, "points": []}, "field 'version'"),
    ({"format": "vtrain-kernel-classes", "version": 1, "points": [{"class": "conv"}]},
     "points[0]: field 'class'"),
    ({"format": "vtrain-kernel-classes", "version": 1, "points": [
        {"class": "memory", "tokens": 1, "h": 1, "flops": 0, "bytes": 8, "seconds": 0}]},
     "points[0]: field 'seconds' must be > 0"),
    ({"format": "vtrain-kernel-classes", "version": 1, "points": [
        {"class": "gemm", "dtype": "bf16", "m": 1, "n": "2", "k": 1, "flops": 4, "bytes": 8,
         "seconds": 1}]}, "points[0]: field 'n'"),
    ({"format": "vtrain-kernel-classes", "version": 1, "points": [
        {"class": "memory", "error": "skipped"}]}, "no timed points"),
])
def test_bad_files_named(tmp_path, doc, rule):
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KernelClassesError, match=rule.replace("[", r"\[").replace("]", r"\]")):
        read_kernel_classes(path)


def test_check_kernels_command(capsys, tmp_path):
    store = ROOT / "profiles" / "H200-SXM-141GB.h5"
    assert main(["profile", "check-kernels", str(H200_FILE), "--profile", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["group"]: r for r in doc["store_errors"]}
    assert rows["gemm bf16"]["n"] + rows["gemm bf16"]["host_bound"] == 303
    assert math.isfinite(rows["attention_fwd cudnn d128"]["median_error"])
    assert doc["fit"]["gemm_efficiency_max"] == pytest.approx(0.676, abs=0.005)
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["profile", "check-kernels", str(bad), "--profile", str(store)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "field 'format'" in err[0] and str(bad) in err[0]


def test_measurement_runs_on_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "k.json"
    assert main(["profile", "kernels", "--out", str(out), "--quick", "--device", "cpu"]) == 0
    kc = read_kernel_classes(out)
    classes = {p["class"] for p in kc.points} | {p["class"] for p in kc.failed}
    assert classes == {"gemm", "attention_fwd", "attention_bwd", "grouped_gemm", "memory"}
    assert all(p["seconds"] > 0 for p in kc.points)


def test_fit_exact_with_kernel_overhead():
    """With ``kernel_overhead_s`` and a memory-bound grouped GEMM, each factor is solved for:
    the class's median modelled time is its measured one, every parameter recovered (a first
    step ``exp(median log(modelled / measured))``, or the GEMM classes fitted before the memory
    efficiency, misses by percents)."""
    truth = {**TRUTH, "kernel_overhead_s": 4e-6}
    e, m, n, k = 16, 128, 1536, 2048  # Qwen3-30B-A3B's fc1 at 128 tokens an expert
    small = {"class": "grouped_gemm", "dtype": "bf16", "e": e, "m": m, "n": n, "k": k,
             "flops": 2.0 * e * m * n * k, "bytes": 2.0 * (e * m * k + e * n * k + e * m * n)}
    pts = [p for p in _synthetic()] + [small]
    pts = [{**p, "seconds": float(t)} for p, t in zip(pts, modelled_seconds(pts, PEAKS, BW, truth))]
    x = (m * n * k) ** (1 / 3)
    assert small["bytes"] / (BW * 0.8) > small["flops"] / (989e12 * 0.7 * x / (x + 150) * 0.95)
    fit = fit_kernel_classes(pts, PEAKS, BW, {"kernel_overhead_s": 4e-6})
    for name in ("gemm_efficiency_max", "fp8_gemm_efficiency", "flash_attention_efficiency",
                 "grouped_gemm_efficiency", "memory_efficiency"):
        assert fit.params[name] == pytest.approx(truth[name], rel=1e-4), name
    assert fit.reported["flash_bwd_relative_efficiency"] == pytest.approx(
        FLASH_BWD_RELATIVE_EFFICIENCY, rel=1e-4)
    assert fit.reported["memory_efficiency_norm"] == pytest.approx(0.8, rel=1e-4)


def _doc(*points, **top):
    return {"format": "vtrain-kernel-classes", "version": 1, "points": list(points), **top}


_LAYER = {"class": "layer", "op": "mlp_fwd", "model": "Llama 3 8B", "h": 4096, "a": 32, "g": 8,
          "f": 14336, "t": 2, "b": 1, "s": 8192, "dtype": "bf16", "flops": 0, "bytes": 0,
          "seconds": 2.5e-3}


@pytest.mark.parametrize("doc, rule", [
    (_doc({"class": ["gemm"]}), "points[0]: field 'class'"),
    (_doc(points={"a": 1}), "field 'points' must be a list"),
    ({**_doc(_gemm(64, 64, 64, seconds=1e-3)), "provenance": [1, 2]}, "field 'provenance'"),
    ({**_doc(_gemm(64, 64, 64, seconds=1e-3)), "version": True}, "field 'version'"),
    (_doc(_gemm(0, 64, 64, seconds=1e-3)), "points[0]: field 'm' must be a whole number > 0"),
    (_doc(_gemm(0.5, 64, 64, seconds=1e-3)), "points[0]: field 'm' must be a whole number > 0"),
    (_doc(_gemm(10**300, 64, 64, seconds=1e-3)), "points[0]: field 'm'"),
    (_doc(_gemm(64, 64, 64, "fp8", recipe="blockwise", seconds=1e-3)), "points[0]: field 'recipe'"),
    (_doc({**_attn("attention_fwd", 1024), "causal": 2, "seconds": 1e-3}), "points[0]: field 'causal'"),
    (_doc({**_attn("attention_fwd", 1024), "backend": 5, "seconds": 1e-3}), "points[0]: field 'backend'"),
    (_doc({**_LAYER, "g": 2, "t": 4}), "points[0]: field 'g' (2) must be divisible by field 't' (4)"),
    (_doc({**_LAYER, "a": 30}), "points[0]: field 'h' (4096) must be divisible by field 'a' (30)"),
    (_doc({**_LAYER, "a": 0}), "points[0]: field 'a' must be a whole number > 0"),
    (_doc({**_LAYER, "t": 0}), "points[0]: field 't' must be a whole number > 0"),
    (_doc({**_LAYER, "dtype": "junk"}), "points[0]: field 'dtype' must be one of"),
])
def test_hostile_files_named(tmp_path, doc, rule):
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KernelClassesError, match=rule.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        read_kernel_classes(path)


def test_nested_and_huge_json_refused(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(KernelClassesError, match="nested"):
        read_kernel_classes(deep)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(_doc(_gemm(64, 64, 64, seconds=1e-3))).replace('"m": 64', '"m": 1' + "0" * 400))
    with pytest.raises(KernelClassesError, match=r"points\[0\]\.m"):
        read_kernel_classes(huge)


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("vtrain: error: "), err
    return err[0]


def test_check_kernels_refusals(capsys, tmp_path):
    h200 = str(ROOT / "profiles" / "H200-SXM-141GB.h5")
    a100 = str(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    err = _one_line_error(capsys, ["profile", "check-kernels", str(H200_FILE), str(H200_FILE),
                                   "--profile", h200])
    assert "given twice" in err
    # FP8 points against a store without an FP8 peak: the file, the point and its field
    kc = read_kernel_classes(H200_FILE)
    first_fp8 = next(i for i, p in zip(kc.index, kc.points) if p.get("dtype") == "fp8")
    err = _one_line_error(capsys, ["profile", "check-kernels", str(H200_FILE), "--profile", a100])
    assert f"{H200_FILE}: points[{first_fp8}]: field 'dtype' 'fp8'" in err and a100 in err
    layer = tmp_path / "layer.json"
    layer.write_text(json.dumps(_doc(_gemm(64, 64, 64, seconds=1e-3), {**_LAYER, "dtype": "fp8"})))
    err = _one_line_error(capsys, ["profile", "check-kernels", str(layer), "--profile", a100])
    assert f"{layer}: points[1]: field 'dtype' 'fp8'" in err


def test_check_kernels_json_is_strict(capsys, tmp_path):
    """A class whose points were all host-paced has no error figures: null, never NaN."""
    pts = [{**_gemm(m, 4096, 4096), "seconds": 2 * m * 4096 * 4096 / 6.5e14} for m in (2048, 4096, 8192)]
    pts.append({**_gemm(64, 64, 64, "fp8"), "seconds": 1.4e-5})  # host-paced, alone in its class
    path = tmp_path / "k.json"
    path.write_text(json.dumps(_doc(*pts)))
    assert main(["profile", "check-kernels", str(path), "--profile",
                 str(ROOT / "profiles" / "H200-SXM-141GB.h5"), "--json"]) == 0

    def refuse(name):
        raise AssertionError(f"{name} in --json output")
    doc = json.loads(capsys.readouterr().out, parse_constant=refuse)
    row = {r["group"]: r for r in doc["store_errors"]}["gemm fp8"]
    assert row["n"] == 0 and row["host_bound"] == 1 and row["median_error"] is None


def test_measurement_options_refused_before_measuring(tmp_path, capsys):
    pytest.importorskip("torch")
    from core.profiling import kernel_classes
    out = str(tmp_path / "k.json")
    for argv, rule in ((["--device", "nonsense"], "--device 'nonsense'"),
                       (["--device", "cuda:7"] if not kernel_classes.torch.cuda.is_available()
                        else ["--device", "cuda:999"], "--device 'cuda"),
                       (["--budget-s", "-5"], "--budget-s"),
                       (["--budget-s", "nan"], "--budget-s")):
        assert kernel_classes.main(["--out", out, "--quick", *argv]) == 2
        io = capsys.readouterr()
        err = io.err.splitlines()
        assert len(err) == 1 and rule in err[0] and io.out == "", (argv, io)
    for bad in (str(tmp_path), str(tmp_path / "missing" / "k.json")):
        assert kernel_classes.main(["--out", bad, "--quick", "--device", "cpu"]) == 2
        io = capsys.readouterr()
        assert len(io.err.splitlines()) == 1 and bad in io.err and io.out == ""
    err = _one_line_error(capsys, ["profile", "kernels", "--out", out, "--quick", "--device", "meta"])
    assert "--device 'meta'" in err
    assert not Path(out).exists()


def test_no_cuda_without_device_is_refused(tmp_path, capsys, monkeypatch):
    """Without --device on a machine whose torch sees no CUDA device, the command refuses in
    one line (exit 2) instead of running the GPU-sized points on the CPU for hours."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "k.json"
    assert main(["profile", "kernels", "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--device" in err[0] and "no CUDA device" in err[0]
    assert not out.exists()


def test_class_names_of_the_command_line_are_the_measurement_s(tmp_path, capsys):
    kernel_classes = pytest.importorskip("core.profiling.kernel_classes")
    from core.cli.profile_kernels import KERNEL_CLASS_NAMES
    assert KERNEL_CLASS_NAMES == kernel_classes.CLASSES
    out = tmp_path / "k.json"
    assert main(["profile", "kernels", "--out", str(out), "--quick", "--device", "cpu",
                 "--classes", "step"]) == 0
    kc = read_kernel_classes(out)
    assert {p["class"] for p in kc.layers} == {"step"} and not kc.points
    assert {(p["layers"], p["op"]) for p in kc.layers} == {
        (1, "forward"), (1, "forward_backward"), (2, "forward"), (2, "forward_backward")}
