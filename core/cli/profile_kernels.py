"""``vtrain profile kernels`` (measure each kernel class on this GPU, needs torch) and
``vtrain profile check-kernels`` (a store's op model against measured kernels, and each class's
parameters fitted on its own points; :mod:`core.accuracy.kernel_fit`)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from core.cli.common import UsageError, check_outputs, check_profile_option, path_arg

__all__ = ["add_parsers", "run_kernels", "run_check_kernels", "KERNEL_CLASS_NAMES"]

#: ``--classes`` choices: :data:`core.profiling.kernel_classes.CLASSES` (named here so that the
#: command line builds its parser without importing torch; a test keeps the two equal).
KERNEL_CLASS_NAMES = ("memory", "gemm", "attention", "grouped_gemm", "layer", "step")


def add_parsers(psub: Any) -> None:
    """Add ``kernels`` and ``check-kernels`` to the ``vtrain profile`` sub-parsers."""
    k = psub.add_parser(
        "kernels", help="time each kernel class of the op model on this GPU (needs torch)",
        description="Time dense GEMMs (bf16 in nn.Linear's three layouts, TF32, fp32, FP8 with "
                    "tensor-wise and row-wise scales), fused attention forward and backward "
                    "(FlashAttention-2 and cuDNN), grouped expert GEMMs and element-wise and norm "
                    "kernels alone, and write them as a kernel-classes JSON file "
                    "(core/profiling/kernel_classes.py; about 80 s on an H200).")
    k.add_argument("--out", type=path_arg, required=True, metavar="FILE.json",
                   help="file to write (atomically)")
    k.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda; without a CUDA device it must be given)")
    k.add_argument("--quick", action="store_true", help="a few tiny shapes (a smoke test)")
    k.add_argument("--classes", nargs="+", choices=KERNEL_CLASS_NAMES, metavar="CLASS",
                   help=f"what to time: {', '.join(KERNEL_CLASS_NAMES)} (default all but step, "
                        "a whole Llama 3 8B on one GPU: about 80 GB of GPU memory)")
    c = psub.add_parser(
        "check-kernels", help="a store's op model against measured kernels, per kernel class",
        description="Time each measured kernel with the store's op model (the time the "
                    "simulator charges for it inside an op), print the error per kernel class, "
                    "and fit each class's parameters on its own points "
                    "(core/accuracy/kernel_fit.py; docs/accuracy.md).")
    c.add_argument("files", type=path_arg, metavar="FILE.json", nargs="+",
                   help="kernel-classes files of one GPU, read together (vtrain profile kernels; "
                        "benchmarks/data/h200_kernel_classes.json)")
    c.add_argument("--profile", type=path_arg, metavar="STORE.h5", required=True,
                   help="store whose op model is checked (its peaks and bandwidth are the ones "
                        "the fit's fractions refer to: the store of the GPU kind measured)")
    c.add_argument("--json", action="store_true", help="print one JSON document")


def run_kernels(args: argparse.Namespace) -> int:
    """``vtrain profile kernels``: the measurement (torch imported here only)."""
    from core import profiling
    ok, text = profiling.torch_status()
    if not ok:
        raise UsageError(text)
    check_outputs([("--out", args.out)], [])
    from core.profiling import kernel_classes
    if args.device is None and not kernel_classes.cuda_available():
        # the full point set is sized for a data-centre GPU (about 80 s on an H200); on a CPU it
        # would run for hours without saying why, so a CPU run is asked for by name
        raise UsageError("--device: torch sees no CUDA device here; vtrain profile kernels times "
                         "GPU kernels (give --device cpu to time them on the CPU, with --quick "
                         "for a few tiny shapes)")
    try:  # refused before anything is measured, as one line
        kernel_classes.measure_to_file(args.out, args.device or "cuda", args.quick,
                                       tuple(args.classes or kernel_classes.DEFAULT_CLASSES),
                                       log=lambda line: print(line, flush=True))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return 0


def _finite_or_none(doc: Any) -> Any:
    """``doc`` with each NaN (a class whose points were all host-paced) as None: strict JSON."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: _finite_or_none(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_finite_or_none(v) for v in doc]
    return doc


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.1f} %"


def run_check_kernels(args: argparse.Namespace) -> int:
    """``vtrain profile check-kernels``: the table and the fit (see module doc)."""
    from core.accuracy.kernel_fit import (KernelClassesError, KernelFit, class_errors,
                                          fit_kernel_classes, layer_errors, read_kernel_classes,
                                          require_peaks)
    from core.store.profile_store import ProfileStore
    from core.util.atomic import same_file
    for j, f in enumerate(args.files):  # one file twice would count its points twice
        for earlier in args.files[:j]:
            if same_file(f, earlier):
                raise KernelClassesError(f"{f}: given twice (as {earlier} too): each file's "
                                         "points are read once")
    files = [read_kernel_classes(f) for f in args.files]  # every file readable before printing
    store = check_profile_option(args.profile, opener=ProfileStore.open)
    for f in files:
        require_peaks(f, store.peak_flops, args.profile)
    kc = files[0]
    for other in files[1:]:
        kc.points += other.points
        kc.layers += other.layers
        kc.failed += other.failed
    args.file = ", ".join(args.files)
    peaks, bw, om = store.peak_flops, store.memory_bandwidth_bytes_per_s, dict(store.op_model or {})
    rows: list[dict] = []
    fitted_rows: list[dict] = []
    fit = KernelFit({}, {}, {})
    try:
        if kc.points:
            rows = class_errors(kc.points, peaks, bw, om)
            fit = fit_kernel_classes(kc.points, peaks, bw, om)
            fitted_rows = class_errors(kc.points, peaks, bw, {**om, **fit.params})
        layers = layer_errors(kc.layers, peaks, bw, om)
        layers_fitted = layer_errors(kc.layers, peaks, bw, {**om, **fit.params}) if fit.params else []
    except KeyError as exc:
        raise UsageError(f"{args.profile}: {exc.args[0] if exc.args else exc}") from None
    except ValueError as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    measured_on = str(kc.provenance.get("gpu", "unknown GPU"))
    if args.json:
        print(json.dumps(_finite_or_none({"file": args.file, "profile": args.profile, "measured_on": measured_on,
                          "device_of_store": store.device_name, "failed_points": len(kc.failed),
                          "store_errors": rows, "fit": fit.params, "reported": fit.reported,
                          "fit_points": fit.points, "fitted_errors": fitted_rows,
                          "layers": layers, "layers_fitted": layers_fitted}),
                         indent=1, allow_nan=False))
        return 0
    from rich.table import Table

    from core.util.console import Console, esc
    console = Console()
    what = f"{len(kc.points)} kernel points" + (f" and {len(kc.layers)} layer and step ops" if kc.layers else "")
    console.print(f"{esc(args.file)}: {what} measured on {esc(measured_on)} "
                  f"({esc(str(kc.provenance.get('torch', '?')))}, "
                  f"{esc(str(kc.provenance.get('measured_utc', '?')))})"
                  + (f"; {len(kc.failed)} failed there" if kc.failed else ""), highlight=False)
    if store.device_name and measured_on.replace("NVIDIA ", "") not in store.device_name:
        console.print(f"[yellow]note:[/] the store is of {esc(store.device_name)}: the fit's "
                      "fractions are of its peaks and bandwidth", highlight=False)
    if rows:
        _print_classes(console, rows, fitted_rows, fit, om)
    if layers:
        lt = Table(title="layer ops (one tensor-parallel rank) and whole steps (one GPU), eager "
                         "unless compiled: modelled / measured - 1", title_justify="left")
        for col in ("model", "op", "t", "b", "s", "measured ms", "store", "fitted kernels"):
            lt.add_column(col, justify="left" if col in ("model", "op") else "right")
        for i, r in enumerate(layers):
            f = layers_fitted[i]["error"] if layers_fitted else math.nan
            lt.add_row(esc(r["model"]), r["op"], str(r["t"]), str(r["b"]), str(r["s"]),
                       f"{1e3 * r['measured_s']:.3f}", _pct(r["error"]), _pct(f))
        console.print(lt)
    return 0


def _print_classes(console: Any, rows: list[dict], fitted_rows: list[dict], fit: Any,
                   om: dict) -> None:
    """The per-class error table and the fitted parameters."""
    from rich.table import Table

    from core.util.console import esc
    t = Table(title="modelled / measured - 1 (device-bound points; host-paced ones left out)",
              title_justify="left")
    for col in ("kernel class", "points", "host-paced", "store: median", "store: mean |error|",
                "fitted: median", "fitted: mean |error|"):
        t.add_column(col, justify="left" if col == "kernel class" else "right")
    for r, f in zip(rows, fitted_rows):
        t.add_row(esc(r["group"]), str(r["n"]), str(r["host_bound"]), _pct(r["median_error"]),
                  _pct(r["mape"]).lstrip("+"), _pct(f["median_error"]), _pct(f["mape"]).lstrip("+"))
    console.print(t)
    p = Table(title="each class fitted on its own points", title_justify="left")
    for col in ("parameter", "store", "fitted", "points"):
        p.add_column(col, justify="left" if col == "parameter" else "right")
    names = {"gemm_efficiency_max": "dense_gemm", "gemm_half_size": "dense_gemm",
             "fp8_gemm_efficiency": "fp8_gemm", "flash_attention_efficiency": "attention_fwd",
             "grouped_gemm_efficiency": "grouped_gemm", "memory_efficiency": "memory"}
    from core.model.ops import FLASH_BWD_RELATIVE_EFFICIENCY, effective_op_model
    eff = effective_op_model(om)
    for k, v in fit.params.items():
        p.add_row(k, f"{eff.get(k, math.nan):.4g}", f"{v:.4g}", str(fit.points.get(names[k], 0)))
    model_has = {"flash_bwd_relative_efficiency": f"{FLASH_BWD_RELATIVE_EFFICIENCY:g} (fixed)"}
    for k, v in fit.reported.items():
        p.add_row(f"{k} (no parameter of its own)" if k not in model_has else k,
                  model_has.get(k, "-"), f"{v:.4g}", "")
    console.print(p)
