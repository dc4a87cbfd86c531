"""Kernel classes measured alone, against the op model: read a kernel-classes file, time each
point with a store's op model, and fit each class's parameters on its own points.

A kernel-classes file (``vtrain-kernel-classes``, written by
:mod:`core.profiling.kernel_classes` on a GPU) holds one point per kernel timed alone:
dense GEMMs (bf16 in nn.Linear's three layouts, TF32, fp32, FP8 with tensor-wise and row-wise
scales), fused attention forward and backward (FlashAttention-2 and cuDNN), grouped expert
GEMMs and element-wise and norm kernels. Each point becomes the op model's
:class:`core.model.base.Kernel` with the same FLOPs, bytes and GEMM shape, and is timed by
:func:`core.model.ops.kernel_times` with the class's efficiency: that is the time the simulator
charges for that kernel inside an op. A point's error is ``modelled / measured - 1``. Whole
layer ops (class ``layer``: one tensor-parallel rank's Llama attention or MLP op, forward or
backward, run eagerly) are kept apart and compared with the op's modelled device time
(:func:`layer_errors`).

:func:`fit_kernel_classes` fits, each on its own class's points (so that one class's error
cannot be absorbed by another's, issue 27), in this order:

1. ``memory_efficiency`` on the element-wise and norm kernels (their time depends on nothing
   else, and GEMMs with little work per byte are timed by it too);
2. the dense curve ``gemm_efficiency_max * x / (x + gemm_half_size)`` on the bf16 GEMMs
   (bounded least squares on ``log(modelled / measured)``);
3. with the curve fixed, one factor per class: ``fp8_gemm_efficiency`` (tensor-wise FP8 GEMMs,
   Megatron's default recipe on Hopper), ``flash_attention_efficiency`` (the forward of the
   backend Transformer Engine runs, cuDNN, else FlashAttention-2), the backward's share of the
   forward's efficiency (:data:`core.model.ops.FLASH_BWD_RELATIVE_EFFICIENCY` in the model) and
   ``grouped_gemm_efficiency``.

Each factor (1 and 3) makes the class's median ``log(modelled / measured)`` zero, robust to a
few odd points; it is solved for (:func:`_factor`), since ``kernel_overhead_s`` and a
memory-bound GEMM's bytes make the time no plain multiple of ``1 / efficiency``.

Points the host paces are not fitted (:func:`host_bound`: their time is near the file's shortest,
the per-call floor of an eager torch call, about 15 us on the H200 of
``benchmarks/data/h200_kernel_classes.json``, and their kernel is far shorter than that): the
model's device time says nothing there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from core.accuracy.measured import MeasurementFileError
from core.model.base import Kernel, mem
from core.model.ops import (DEFAULT_OP_MODEL, FLASH_BWD_RELATIVE_EFFICIENCY, kernel_arrays,
                            kernel_class, kernel_fp8, kernel_peak_flops,
                            kernel_times)

__all__ = ["KERNEL_CLASSES_FORMAT", "KernelClassesError", "KernelClasses", "read_kernel_classes",
           "point_kernel", "require_peaks", "modelled_seconds", "class_errors", "KernelFit", "fit_kernel_classes",
           "HOST_BOUND_FACTOR", "host_bound", "layer_errors", "LAYER_OPS", "STEP_OPS"]

KERNEL_CLASSES_FORMAT, KERNEL_CLASSES_VERSION = "vtrain-kernel-classes", 1
#: A point whose time is within this factor of the file's shortest point is paced by the host
#: (the per-call floor of eager torch), not by the kernel: reported, not fitted.
HOST_BOUND_FACTOR = 2.0
#: Required numeric fields of each point class (besides ``flops``, ``bytes``, ``seconds``).
_FIELDS = {
    "gemm": ("m", "n", "k"),
    "attention_fwd": ("b", "s", "hq", "hkv", "d", "causal"),
    "attention_bwd": ("b", "s", "hq", "hkv", "d", "causal"),
    "grouped_gemm": ("e", "m", "n", "k"),
    "memory": ("tokens", "h"),
    "layer": ("h", "a", "g", "f", "t", "b", "s"),
    "step": ("h", "a", "g", "f", "V", "layers", "t", "b", "s"),
}
#: What a ``step`` point times (a whole Llama model on one GPU) and the ops whose sum the model
#: charges for it (``L`` times the layer ops).
STEP_OPS = {"forward": ("embedding_fwd", "L*attention_fwd", "L*mlp_fwd", "output_fwd"),
            "forward_backward": ("embedding_fwd", "L*attention_fwd", "L*mlp_fwd", "output_fwd",
                                 "output_bwd", "L*mlp_bwd", "L*attention_bwd", "embedding_bwd")}
#: The ops a ``layer`` point times (one tensor-parallel rank's Llama layer, eager torch).
LAYER_OPS = ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd")
#: The peak FLOP/s dtype of each GEMM point's ``dtype`` field.
_GEMM_DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")


class KernelClassesError(MeasurementFileError):
    """A kernel-classes file cannot be read; the message names the file, point and field (a
    :class:`core.accuracy.measured.MeasurementFileError`: the command line prints it as one line,
    exit status 2)."""


@dataclass
class KernelClasses:
    """A kernel-classes file: its provenance, its timed kernel points, its whole-layer points
    (``layers``: class ``layer``, :func:`layer_errors`), and the points that failed on the
    device, with an ``error`` (``failed``); ``index`` and ``layer_index`` give each point's
    place in the file."""

    path: str
    provenance: dict[str, Any]
    points: list[dict[str, Any]]
    failed: list[dict[str, Any]] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    #: Each point's and each layer point's index in the file's ``points`` (for messages).
    index: list[int] = field(default_factory=list)
    layer_index: list[int] = field(default_factory=list)


def read_kernel_classes(path: str | Path) -> KernelClasses:
    """Read and check a ``vtrain-kernel-classes`` JSON file.

    Rules (each refusal names the file, the point's index and the field): strict JSON
    (:func:`core.util.inputs.read_json_file`: no NaN, Infinity, duplicate keys or deep nesting);
    ``format`` and ``version`` (an integer, not ``true``); ``provenance`` an object and
    ``points`` a list of objects; each point's ``class`` one of :data:`_FIELDS`; a point without
    ``error`` has its class's shape fields as positive integers of at most 2**53 (``causal`` 0 or
    1), ``flops`` and ``bytes`` finite and >= 0, ``seconds`` finite and > 0; a GEMM's ``dtype``
    one of :data:`_GEMM_DTYPES` (an FP8 one's ``recipe``, if given, ``tensorwise`` or
    ``rowwise``); a layer point's ``op`` one of :data:`LAYER_OPS`, its ``dtype`` (if given) a
    training precision, and its sizes split as Megatron-LM requires (``h`` divisible by ``a``,
    ``a`` by ``g``, ``a``, ``g`` and ``f`` by ``t``; :mod:`core.plan.rules`); the text fields
    (``backend``, ``kernel``, ``layout``, ``model``) text.

    Raises
    ------
    KernelClassesError
        Any rule broken, or no timed point at all.
    """
    from core.util.inputs import read_json_file

    path = Path(path)
    doc = read_json_file(path, KernelClassesError)
    if not isinstance(doc, dict) or doc.get("format") != KERNEL_CLASSES_FORMAT:
        raise KernelClassesError(f"{path}: field 'format' must be {KERNEL_CLASSES_FORMAT!r}")
    version = doc.get("version")
    if isinstance(version, bool) or version != KERNEL_CLASSES_VERSION:
        raise KernelClassesError(f"{path}: field 'version' must be {KERNEL_CLASSES_VERSION}")
    provenance = doc.get("provenance", {})
    if not isinstance(provenance, dict):
        raise KernelClassesError(f"{path}: field 'provenance' must be an object")
    raw = doc.get("points", [])
    if not isinstance(raw, list):
        raise KernelClassesError(f"{path}: field 'points' must be a list of points")
    points, failed, layers, index, layer_index = [], [], [], [], []
    for i, p in enumerate(raw):
        where = f"{path}: points[{i}]"
        if not isinstance(p, dict) or not isinstance(p.get("class"), str) or p["class"] not in _FIELDS:
            raise KernelClassesError(f"{where}: field 'class' must be one of {', '.join(_FIELDS)}")
        if "error" in p:
            failed.append(p)
            continue
        _check_point(p, where)
        if p["class"] in ("layer", "step"):
            layers.append(p)
            layer_index.append(i)
        else:
            points.append(p)
            index.append(i)
    if not points and not layers:
        why = f" ({len(failed)} failed on the device, e.g. {str(failed[0]['error'])[:120]!r})" if failed else ""
        raise KernelClassesError(f"{path}: field 'points': no timed points{why}")
    return KernelClasses(str(path), dict(provenance), points, failed, layers, index, layer_index)


#: Largest shape field read (exact in a float; products of three stay finite).
_MAX_SIZE = 2**53
#: Text fields a point may carry (labels; checked as text when present).
_TEXT_FIELDS = ("backend", "kernel", "layout", "model", "recipe", "dtype")


def _check_point(p: Mapping[str, Any], where: str) -> None:
    """Refuse a timed point that breaks a rule of :func:`read_kernel_classes` (KernelClassesError)."""
    cls = p["class"]
    for name in _FIELDS[cls]:
        v = p.get(name)
        if name == "causal":
            if isinstance(v, bool) or v not in (0, 1):
                raise KernelClassesError(f"{where}: field 'causal' must be 0 or 1")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 0 < v <= _MAX_SIZE:
            raise KernelClassesError(f"{where}: field {name!r} must be a whole number > 0 and "
                                     "at most 2**53")
    for name in ("flops", "bytes", "seconds"):
        v = p.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise KernelClassesError(f"{where}: field {name!r} must be a finite number >= 0")
    if p["seconds"] <= 0:
        raise KernelClassesError(f"{where}: field 'seconds' must be > 0")
    for name in _TEXT_FIELDS:
        if name in p and not isinstance(p[name], str):
            raise KernelClassesError(f"{where}: field {name!r} must be text")
    if cls == "gemm":
        if p.get("dtype") not in _GEMM_DTYPES:
            raise KernelClassesError(f"{where}: field 'dtype' must be one of {', '.join(_GEMM_DTYPES)}")
        if p["dtype"] == "fp8" and p.get("recipe", "tensorwise") not in _FP8_RECIPES:
            raise KernelClassesError(f"{where}: field 'recipe' must be one of {', '.join(_FP8_RECIPES)}")
    if cls in ("layer", "step"):
        _check_layer(p, where)


#: The scaling recipes of an FP8 GEMM point (``torch._scaled_mm``'s scales).
_FP8_RECIPES = ("tensorwise", "rowwise")


def _check_layer(p: Mapping[str, Any], where: str) -> None:
    """A layer point's op, precision and Megatron-LM's head and MLP splits (core.plan.rules)."""
    from core.plan.parallel import PRECISIONS

    ops = LAYER_OPS if p["class"] == "layer" else tuple(STEP_OPS)
    if p.get("op") not in ops:
        raise KernelClassesError(f"{where}: field 'op' must be one of {', '.join(ops)}")
    if p.get("dtype", "bf16") not in PRECISIONS:
        raise KernelClassesError(f"{where}: field 'dtype' must be one of {', '.join(PRECISIONS)}")
    h, a, g, f, t = (int(p[k]) for k in ("h", "a", "g", "f", "t"))
    for name, n, d, dname in (("h", h, a, "a"), ("a", a, g, "g"), ("a", a, t, "t"),
                              ("g", g, t, "t"), ("f", f, t, "t")):
        if n % d:
            raise KernelClassesError(f"{where}: field {name!r} ({n}) must be divisible by "
                                     f"field {dname!r} ({d})")


def require_peaks(kc: KernelClasses, peak_flops: Mapping[str, float], store: str) -> None:
    """Refuse a file with a point whose dtype ``store`` (its name in the message) has no peak
    FLOP/s for: an FP8 GEMM checked against an A100's store, say. The message names the file,
    the point and its ``dtype`` field.

    Raises
    ------
    KernelClassesError
        The first such point.
    """
    from core.plan.parallel import tensor_dtype

    def refuse(i: int, dtype: str) -> KernelClassesError:
        return KernelClassesError(
            f"{kc.path}: points[{i}]: field 'dtype' {dtype!r}: the store {store} has no peak "
            f"FLOP/s for it (it has {', '.join(peak_flops) or 'none'}): check the file against "
            "the store of the GPU kind it measured")
    for i, p in zip(kc.index, kc.points):
        need = point_kernel(p).dtype or "bf16"
        if need not in peak_flops:
            raise refuse(i, need)
    for i, p in zip(kc.layer_index, kc.layers):
        dtype = str(p.get("dtype", "bf16"))
        if dtype not in peak_flops or tensor_dtype(dtype) not in peak_flops:
            raise refuse(i, dtype)


def point_kernel(p: Mapping[str, Any]) -> Kernel:
    """The op model's kernel for a point: a GEMM with the point's FLOPs, bytes and shape, its
    ``dtype`` the peak it runs at unless bf16 (``fp8``, ``tf32``, ``fp32``, ``fp16``: what
    :class:`core.model.base.Kernel` holds for a GEMM off the op's dtype); attention as the
    ``flash_attn`` / ``flash_attn_bwd`` kernel of :mod:`core.model.attention` (M = N = s, K = d,
    batch b hq); a grouped GEMM as ``experts_fc1`` of its per-expert shape, batch e; a
    memory-bound kernel as :func:`core.model.base.mem` of its bytes."""
    cls, flops, nbytes = p["class"], float(p["flops"]), float(p["bytes"])
    if cls == "gemm":
        dtype = str(p["dtype"])
        return Kernel("linear", flops, nbytes, int(p["m"]), int(p["n"]), int(p["k"]), 1,
                      "" if dtype == "bf16" else dtype)
    if cls.startswith("attention"):
        name = "flash_attn_bwd" if cls == "attention_bwd" else "flash_attn"
        return Kernel(name, flops, nbytes, int(p["s"]), int(p["s"]), int(p["d"]),
                      int(p["b"]) * int(p["hq"]))
    if cls == "grouped_gemm":
        return Kernel("experts_fc1", flops, nbytes, int(p["m"]), int(p["n"]), int(p["k"]),
                      int(p["e"]))
    return mem(str(p.get("kernel", "memory")), nbytes)


def modelled_seconds(points: Sequence[Mapping[str, Any]], peak_flops: Mapping[str, float],
                     memory_bandwidth_bytes_per_s: float, op_model: Mapping[str, float]
                     ) -> np.ndarray:
    """The op model's device seconds for each point, shape (n,): :func:`core.model.ops.kernel_times`
    with each kernel's class, FP8 flag and peak (:func:`core.model.ops.kernel_peak_flops`: a
    FlashAttention backward at :data:`FLASH_BWD_RELATIVE_EFFICIENCY` of the peak).

    Raises
    ------
    KeyError
        ``peak_flops`` lacks a dtype a point needs.
    """
    kernels = [point_kernel(p) for p in points]
    return kernel_times(*kernel_arrays(kernels), kernel_peak_flops(kernels, "bf16", peak_flops),
                        memory_bandwidth_bytes_per_s, op_model, kernel_fp8(kernels),
                        kernel_class(kernels))


def host_bound(points: Sequence[Mapping[str, Any]], peak_flops: Mapping[str, float],
               memory_bandwidth_bytes_per_s: float) -> np.ndarray:
    """Whether each point is paced by the host, bool shape (n,): its time is within
    :data:`HOST_BOUND_FACTOR` of the file's shortest (the per-call floor of an eager torch call)
    and its kernel could not take even half that floor at the data-sheet peak or bandwidth
    (``max(flops / peak, bytes / bandwidth)``): the host, not the kernel, set its time."""
    t = np.array([p["seconds"] for p in points], float)
    floor = t.min()
    ideal = []
    for p in points:
        k = point_kernel(p)
        peak = float(peak_flops.get(k.dtype or "bf16", math.inf))
        ideal.append(max(k.flops / peak, k.bytes / memory_bandwidth_bytes_per_s))
    return (t < HOST_BOUND_FACTOR * floor) & (np.array(ideal) < 0.5 * floor)


def _group(p: Mapping[str, Any]) -> str:
    """The row a point is reported in: class and what distinguishes kernels within it."""
    cls = p["class"]
    if cls == "gemm":
        extra = f" {p['recipe']}" if p.get("recipe") else ""
        return f"gemm {p['dtype']}{extra}"
    if cls.startswith("attention"):
        return f"{cls} {p.get('backend', '')} d{p['d']}".replace("  ", " ")
    if cls == "memory":
        return f"memory {p.get('kernel', '')}".strip()
    return cls


def class_errors(points: Sequence[Mapping[str, Any]], peak_flops: Mapping[str, float],
                 memory_bandwidth_bytes_per_s: float, op_model: Mapping[str, float]
                 ) -> list[dict[str, Any]]:
    """Per reported group (:func:`_group`): ``group``, ``n`` device-bound points, ``host_bound``
    points left out, ``median_error`` and ``mape`` of ``modelled / measured - 1`` (fractions),
    ``min_error``, ``max_error``. Groups in the file's order."""
    model = modelled_seconds(points, peak_flops, memory_bandwidth_bytes_per_s, op_model)
    meas = np.array([p["seconds"] for p in points], float)
    hb = host_bound(points, peak_flops, memory_bandwidth_bytes_per_s)
    err = model / meas - 1.0
    rows: dict[str, dict[str, Any]] = {}
    for i, p in enumerate(points):
        g = rows.setdefault(_group(p), {"group": _group(p), "errors": [], "host_bound": 0})
        if hb[i]:
            g["host_bound"] += 1
        else:
            g["errors"].append(err[i])
    out = []
    for g in rows.values():
        e = np.array(g.pop("errors"), float)
        g.update(n=int(e.size), median_error=float(np.median(e)) if e.size else math.nan,
                 mape=float(np.mean(np.abs(e))) if e.size else math.nan,
                 min_error=float(e.min()) if e.size else math.nan,
                 max_error=float(e.max()) if e.size else math.nan)
        out.append(g)
    return out


def layer_errors(layers: Sequence[Mapping[str, Any]], peak_flops: Mapping[str, float],
                 memory_bandwidth_bytes_per_s: float, op_model: Mapping[str, float]
                 ) -> list[dict[str, Any]]:
    """Whole Llama layer ops (class ``layer``) and whole-model steps on one GPU (class ``step``:
    the sum of the ops :data:`STEP_OPS` names, ``layers`` times each layer op) measured against
    the op model: per point its
    ``model``, ``op``, ``t``, ``b``, ``s``, ``measured_s``, ``modelled_s`` (the op's device time,
    :func:`core.model.ops.analytic_op_time` without host time, for the Llama family's key of
    that shape with FlashAttention, :func:`core.model.kernels.op_key`) and ``error``
    (``modelled / measured - 1``). Each point's ``h, a, g, f`` make the model
    (:func:`core.plan.presets.MODEL_PRESETS`' Llama family with those sizes, head size 128 or
    ``h / a``).

    Raises
    ------
    KeyError
        ``peak_flops`` lacks the point's dtype.
    """
    from types import SimpleNamespace

    from core.model.kernels import op_key
    from core.model.ops import analytic_op_time
    from core.plan.model_config import ModelConfig
    from core.plan.parallel import ParallelPlan

    device = SimpleNamespace(peak_flops=dict(peak_flops), op_model=dict(op_model),
                             memory_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s,
                             device_name="measured GPU")
    out = []
    for p in layers:
        n_layers = int(p.get("layers", 1))
        model = ModelConfig(name=str(p.get("model", "layer")), num_layers=n_layers,
                            hidden_size=int(p["h"]), num_attention_heads=int(p["a"]),
                            num_query_groups=int(p["g"]), ffn_hidden_size=int(p["f"]),
                            seq_length=int(p["s"]), vocab_size=int(p.get("V", 32000)),
                            make_vocab_size_divisible_by=1, activation="swiglu",
                            normalization="rmsnorm", position_embedding="rope",
                            tied_embeddings=False, add_bias_linear=False, attention_kernel="flash")
        plan = ParallelPlan(tensor_parallel=int(p["t"]), micro_batch_size=int(p["b"]),
                            precision=str(p.get("dtype", "bf16")))
        key = op_key(model, plan)
        if p["class"] == "step":
            t = sum((n_layers if op.startswith("L*") else 1)
                    * analytic_op_time(op.removeprefix("L*"), key, device, host=False)
                    for op in STEP_OPS[str(p["op"])])
            op_name = (f"step {p['op']} ({n_layers} layers"
                       + (", compiled)" if p.get("compile") else ")"))
        else:
            t = analytic_op_time(str(p["op"]), key, device, host=False)
            op_name = str(p["op"])
        out.append({"model": model.name, "op": op_name, "t": int(p["t"]), "b": int(p["b"]),
                    "s": int(p["s"]), "measured_s": float(p["seconds"]), "modelled_s": t,
                    "error": t / float(p["seconds"]) - 1.0})
    return out


@dataclass
class KernelFit:
    """Parameters fitted on measured kernels (:func:`fit_kernel_classes`): ``params`` holds op
    model parameters (``gemm_efficiency_max``, ``gemm_half_size``, ``fp8_gemm_efficiency``,
    ``flash_attention_efficiency``, ``grouped_gemm_efficiency``, ``memory_efficiency``);
    ``reported`` what the model has no parameter for (``flash_bwd_relative_efficiency``,
    ``fp8_rowwise_gemm_efficiency``, ``tf32_gemm_efficiency``, ``fp32_gemm_efficiency``,
    ``memory_efficiency_elementwise``, ``memory_efficiency_norm``, ``flashattention2_efficiency``);
    ``points`` the device-bound points each rests on."""

    params: dict[str, float]
    reported: dict[str, float]
    points: dict[str, int]


def _factor(points: Sequence[Mapping[str, Any]], meas: np.ndarray, peak_flops: Mapping[str, float],
            memory_bandwidth_bytes_per_s: float, op_model: Mapping[str, float], memory: bool
            ) -> float | None:
    """The factor ``x`` by which the efficiency that times ``points`` is to be multiplied so that
    the median of ``log(modelled / measured)`` is 0: the compute efficiency (every peak times
    ``x``) or, with ``memory``, the memory efficiency (the bandwidth times ``x``). Solved by
    bisection on ``log x`` in [-12, 12] (each point's modelled time falls as ``x`` grows, so the
    median log-ratio does too): exact with ``kernel_overhead_s`` and memory-bound GEMMs, where
    ``exp(median(log(modelled / measured)))`` is only the first step. None when no ``x`` in
    that range balances the median (the points' time does not depend on that efficiency)."""
    def g(log_x: float) -> float:
        x = math.exp(log_x)
        peaks = peak_flops if memory else {d: v * x for d, v in peak_flops.items()}
        bw = memory_bandwidth_bytes_per_s * (x if memory else 1.0)
        return float(np.median(np.log(modelled_seconds(points, peaks, bw, op_model) / meas)))
    lo, hi = -12.0, 12.0
    if g(lo) < 0 or g(hi) > 0:
        return None
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if g(mid) > 0:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def fit_kernel_classes(points: Sequence[Mapping[str, Any]], peak_flops: Mapping[str, float],
                       memory_bandwidth_bytes_per_s: float,
                       base: Mapping[str, float] | None = None) -> KernelFit:
    """Fit each kernel class's op-model parameters on its own device-bound points (module doc).

    Parameters
    ----------
    points : the points of a :class:`KernelClasses`
    peak_flops : peak FLOP/s by dtype of the GPU that was measured (its spec's data-sheet figures)
    memory_bandwidth_bytes_per_s : its data-sheet HBM bandwidth
    base : op-model parameters the fit starts from (kernel_overhead_s is kept)

    Raises
    ------
    ValueError
        Fewer than three device-bound bf16 GEMM points (the curve has two parameters).
    """
    from scipy.optimize import least_squares

    base = {**DEFAULT_OP_MODEL, **(base or {}), "peak_fraction": 1.0, "fp8_gemm_efficiency": 1.0,
            "grouped_gemm_efficiency": 1.0, "flash_attention_efficiency": 1.0}
    keep = ~host_bound(points, peak_flops, memory_bandwidth_bytes_per_s)
    pts = [p for p, k in zip(points, keep) if k]
    meas = np.array([p["seconds"] for p in pts], float)

    def sel(pred) -> np.ndarray:
        return np.array([bool(pred(p)) for p in pts], bool)

    counts: dict[str, int] = {}
    reported: dict[str, float] = {}

    def factor(name: str, pred, params: Mapping[str, float]) -> float | None:
        """The factor by which the efficiency that times the points ``pred`` picks is to be
        multiplied, under ``params``, for their median modelled time to be the measured one
        (:func:`_factor`)."""
        mask = sel(pred)
        if not mask.any():
            return None
        sub = [p for p, m in zip(pts, mask) if m]
        f = _factor(sub, meas[mask], peak_flops, memory_bandwidth_bytes_per_s, params,
                    memory=name.startswith("memory"))
        if f is not None:  # points counted only where they fixed the factor
            counts[name] = int(mask.sum())
        return f

    # the memory efficiency first: memory-bound kernels' time depends on nothing else, and
    # GEMMs with little work per byte (small grouped GEMMs) are timed by it too
    f = factor("memory", lambda p: p["class"] == "memory", base)
    if f is not None:
        base["memory_efficiency"] *= f
    dense = sel(lambda p: p["class"] == "gemm" and p["dtype"] in ("bf16", "fp16"))
    if dense.sum() < 3:
        raise ValueError(f"{int(dense.sum())} device-bound bf16 GEMM points: the curve needs 3")
    dense_pts = [p for p, d in zip(pts, dense) if d]

    def resid(x: np.ndarray) -> np.ndarray:
        om = {**base, "gemm_efficiency_max": x[0], "gemm_half_size": x[1]}
        return np.log(modelled_seconds(dense_pts, peak_flops, memory_bandwidth_bytes_per_s, om)
                      / meas[dense])
    fit = least_squares(resid, x0=[0.75, 200.0], bounds=([0.05, 1.0], [1.5, 1e5]), loss="soft_l1",
                        f_scale=0.05)
    params = {**base, "gemm_efficiency_max": float(fit.x[0]), "gemm_half_size": round(float(fit.x[1]), 3)}
    counts["dense_gemm"] = int(dense.sum())

    def gemm_of(dtype: str, recipe: str | None = None):
        return lambda p: (p["class"] == "gemm" and p["dtype"] == dtype
                          and (recipe is None or p.get("recipe", "tensorwise") == recipe))

    main = "cudnn" if any(p.get("backend") == "cudnn" for p in pts) else "flash"
    # the op model's own parameters, each on its class (the curve fixed above)
    for key, name, pred in (
            ("fp8_gemm_efficiency", "fp8_gemm", gemm_of("fp8", "tensorwise")),
            ("flash_attention_efficiency", "attention_fwd",
             lambda p: p["class"] == "attention_fwd" and p.get("backend", main) == main),
            ("grouped_gemm_efficiency", "grouped_gemm", lambda p: p["class"] == "grouped_gemm")):
        f = factor(name, pred, params)
        if f is not None:
            params[key] = params[key] * f
    # what the model has no parameter of its own for, under the fitted parameters
    for key, name, pred, scale in (
            ("fp8_rowwise_gemm_efficiency", "fp8_rowwise_gemm", gemm_of("fp8", "rowwise"), 1.0),
            ("tf32_gemm_efficiency", "tf32_gemm", gemm_of("tf32"), 1.0),
            ("fp32_gemm_efficiency", "fp32_gemm", gemm_of("fp32"), 1.0),
            ("flash_bwd_relative_efficiency", "attention_bwd",
             lambda p: p["class"] == "attention_bwd" and p.get("backend", main) == main,
             FLASH_BWD_RELATIVE_EFFICIENCY),
            ("flashattention2_efficiency", "flashattention2_fwd",
             lambda p: main == "cudnn" and p["class"] == "attention_fwd" and p.get("backend") == "flash",
             params["flash_attention_efficiency"]),
            ("memory_efficiency_elementwise", "memory_elementwise",
             lambda p: p["class"] == "memory" and "norm" not in str(p.get("kernel", "")),
             params["memory_efficiency"]),
            ("memory_efficiency_norm", "memory_norm",
             lambda p: p["class"] == "memory" and "norm" in str(p.get("kernel", "")),
             params["memory_efficiency"])):
        f = factor(name, pred, params)
        if f is not None:
            reported[key] = f * scale
    return KernelFit({k: params[k] for k in (
        "gemm_efficiency_max", "gemm_half_size", "fp8_gemm_efficiency", "flash_attention_efficiency",
        "grouped_gemm_efficiency", "memory_efficiency") if k in params}, reported, counts)
