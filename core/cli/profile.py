"""``vtrain profile generate|show|run|collectives|kernels|check-kernels|import-nccl-tests`` (argument
parsing and output; ``kernels`` and ``check-kernels`` in :mod:`core.cli.profile_kernels`).

The command line itself never imports torch: :mod:`core.profiling` imports it
only when a profile actually runs.
Errors are printed as one ``vtrain: error: ...`` line with exit status 2;
Ctrl-C exits with status 130 and leaves the store file valid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.util.text import printable
from core.plan.fields import ConfigError
from core.cli.common import integer_arg, path_arg
from core.cli.common import UsageError, list_items, check_outputs

if TYPE_CHECKING:  # rich is imported by the functions that print (fast ``vtrain --help``)
    from rich.progress import Progress

    from core.util.console import Console


def _esc(text: Any) -> str:
    """:func:`core.util.console.esc` (rich is imported when something is printed)."""
    from core.util.console import esc
    return esc(text)


__all__ = ["add_parser", "run", "provenance_lines", "profile_line", "print_store"]

PROFILE_ACTIONS = ("run", "collectives")


def add_parser(sub: Any) -> None:
    """Add ``profile`` and its actions (generate, show, run, collectives, import-nccl-tests) to
    ``vtrain``'s sub-parsers."""
    prof = sub.add_parser("profile", help="generate or inspect profile stores")
    psub = prof.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    gen = psub.add_parser(
        "generate", help="write an analytic store from a GPU's data-sheet figures",
        description="Build an analytic profile store from a GPU spec file (peak FLOP/s per "
                    "dtype, HBM capacity and bandwidth, NVLink bandwidth and domain size, NIC "
                    "bandwidth, assumed efficiencies, sources; format in docs/profile_store.md) "
                    "or from the shipped spec of a GPU kind (resources/gpu_specs/).")
    what = gen.add_mutually_exclusive_group(required=True)
    what.add_argument("--gpu", help="shipped GPU kind, e.g. H100-SXM5-80GB")
    what.add_argument("--spec", type=path_arg, metavar="GPU.json", help="GPU spec file (any GPU)")
    gen.add_argument("--out", type=path_arg, required=True, metavar="STORE.h5",
                     help="store to write (atomically; an existing file is replaced)")
    gen.add_argument("--parameters-from", type=path_arg, metavar="CALIBRATED.h5",
                     help="take the fitted parameters of this calibrated store (a GPU of the same "
                          "architecture) instead of the spec's assumed efficiencies: how the "
                          "shipped A800 store takes the A100's")
    show = psub.add_parser("show", help="print a store's device, provenance and contents")
    show.add_argument("store", type=path_arg, metavar="STORE.h5", nargs="+", help="one or more profile stores")
    add_profiling_parsers(psub)  # profile run / collectives (torch when run)
    from core.cli.profile_kernels import add_parsers as add_kernel_parsers
    add_kernel_parsers(psub)  # profile kernels (torch when run) / check-kernels
    add_import_parser(psub)


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain profile ACTION``; returns the exit status."""
    from core.store.profile_store import ProfileStore
    if args.profile_command == "import-nccl-tests":
        return run_import_nccl(args)
    if args.profile_command in ("run", "collectives"):
        return run_measurement(args)
    if args.profile_command == "generate":
        return _generate(args)
    if args.profile_command in ("kernels", "check-kernels"):
        from core.cli import profile_kernels
        return (profile_kernels.run_kernels if args.profile_command == "kernels"
                else profile_kernels.run_check_kernels)(args)
    from core.util.console import Console
    stores = [ProfileStore.open(path) for path in args.store]  # all readable before printing
    console = Console()
    for i, store in enumerate(stores):
        if i:
            console.print()
        print_store(store, console)
    return 0


def _generate(args: argparse.Namespace) -> int:
    """``vtrain profile generate``: an analytic store from ``--spec FILE`` or ``--gpu KIND``."""
    from core.plan.cluster import gpu_kind
    from core.store.gpu_spec import read_gpu_spec, shipped_spec_path
    from core.store.profiles_gen import shipped_gpu_names, store_from_spec

    check_outputs([("--out", args.out)], [args.spec, args.parameters_from])
    if args.spec:
        spec = read_gpu_spec(args.spec)
    else:
        path = shipped_spec_path(gpu_kind(args.gpu))
        if not path.is_file():
            raise UsageError(f"--gpu {args.gpu!r}: no shipped spec; known: "
                             f"{', '.join(shipped_gpu_names())} (or give --spec GPU.json)")
        spec = read_gpu_spec(path)
    try:
        store = store_from_spec(spec)
    except ValueError as exc:  # a figure beyond what a store may hold (STORE_BOUNDS)
        raise UsageError(f"{args.spec or args.gpu}: {exc}") from None
    if args.parameters_from:
        return _transfer(store, args.parameters_from, args.out)
    store.save(args.out)
    peaks = ", ".join(f"{k} {v / 1e12:,.4g}" for k, v in store.peak_flops.items())
    figures = ("reference part's peaks; its share of them, peak_fraction, to be fitted by "
               "vtrain calibrate" if spec.peak_fraction_fitted else "data-sheet figures")
    from core.store.gpu_spec import assumed_efficiencies
    values, defaulted = assumed_efficiencies(spec.efficiencies)
    assumed = ("assumed efficiencies" if not defaulted else
               "assumed efficiencies; not in the spec, the op model's defaults: " + ", ".join(
                   f"{k} {values[k]:g}" for k in defaulted))
    print(printable(f"wrote {args.out}: {spec.name}, analytic ({figures}, {assumed}); peak "
                    f"TFLOP/s {peaks}; NVLink domain {spec.gpus_per_nvlink_domain} GPUs"))
    return 0


def _transfer(base: Any, reference_path: str, out: str) -> int:
    """``--parameters-from``: ``base`` with the parameters fitted for the reference store."""
    from core.accuracy.shared_fit import transferred_store
    from core.store.profile_store import ProfileStore
    try:
        store = transferred_store(base, ProfileStore.open(reference_path))
    except ValueError as exc:
        raise UsageError(f"--parameters-from {reference_path}: {exc}") from None
    store.save(out)
    print(printable(f"wrote {out}: {base.device_name}, its data-sheet figures with the parameters "
                    f"calibrated for {store.provenance['parameters_from']}"))
    return 0


def add_profiling_parsers(psub: Any) -> None:
    """Add the ``run`` and ``collectives`` actions to the ``vtrain profile`` sub-parsers."""
    run = psub.add_parser(
        "run", help="measure op times on this machine's CPU or GPU into a store (needs torch)",
        description="Time one tensor-parallel rank's share of Megatron-style GPT layers, the "
                    "embedding, the output layer and the optimizer step on the local device "
                    "with torch, for each shape, and write a measured profile store. The store "
                    "is saved after every shape group, so Ctrl-C keeps what was finished.")
    run.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    run.add_argument("--out", type=path_arg, required=True, metavar="STORE.h5",
                     help="store to write; an existing store of the same device is extended")
    run.add_argument("--shapes", type=path_arg, metavar="FILE",
                     help="JSON list of shape dicts and/or session files (default: a small set "
                          "for the device; format in core/profiling/shapes.py)")
    run.add_argument("--threads", type=integer_arg, metavar="N",
                     help="CPU threads for torch (pin the same number when training)")
    run.add_argument("--dtype", choices=("fp32", "bf16", "fp16"),
                     help="dtype of shape dicts that give none (default fp32 on cpu, bf16 on cuda)")
    run.add_argument("--kernels", action=argparse.BooleanOptionalAction, default=None,
                     help="record a per-kernel breakdown with torch.profiler (default: on cuda)")
    run.add_argument("--no-merge", dest="merge", action="store_false",
                     help="replace an existing store at --out instead of extending it")
    coll = psub.add_parser(
        "collectives", help="measure collective curves with torch.distributed on this machine",
        description="Spawn WORLD_SIZE local processes (gloo on CPUs, nccl on GPUs), time "
                    "all-reduce, all-gather, reduce-scatter and send/recv over buffer sizes "
                    "(nccl-tests conventions) and add the curves to a store.")
    coll.add_argument("--world-size", type=integer_arg, required=True, metavar="N",
                      help="processes (ranks) to spawn on this machine, at least 2")
    coll.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                      help="torch.distributed backend: gloo on CPUs, nccl on GPUs (default gloo)")
    coll.add_argument("--out", type=path_arg, metavar="STORE.h5",
                      help="store to add the curves to (created if missing); omit to only print")
    coll.add_argument("--sizes", metavar="BYTES,...",
                      help="comma-separated buffer sizes in bytes (default 4 KiB..16 MiB on gloo, "
                           "..1 GiB on nccl)")
    coll.add_argument("--kinds", metavar="KIND,...",
                      help="subset of all_reduce,all_gather,reduce_scatter,send_recv")


def add_import_parser(psub: Any) -> None:
    """Register ``profile import-nccl-tests`` on the ``profile`` sub-parsers."""
    imp = psub.add_parser("import-nccl-tests",
                          help="add collective curves from nccl-tests output to a store")
    imp.add_argument("files", type=path_arg, metavar="FILE", nargs="+",
                     help="nccl-tests stdout or the vTrain authors' CSV form, one file per run")
    imp.add_argument("--into", type=path_arg, metavar="STORE.h5", required=True,
                     help="store to add the curves to (saved atomically)")
    imp.add_argument("--group-size", type=integer_arg, help="GPUs per run, when the file does not say")
    imp.add_argument("--kind", choices=["all_reduce", "all_gather", "reduce_scatter", "send_recv"],
                     help="collective, when the file does not say")
    imp.add_argument("--knots", type=integer_arg, metavar="N",
                     help="store a piecewise log-log fit with N knots instead of every measured size")


def _error(msg: str) -> int:
    print(f"vtrain: error: {msg}", file=sys.stderr)
    return 2


def _value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


#: Lists of names or numbers up to this long print whole in provenance lines.
_LIST_NAMED = 12


def provenance_lines(provenance: dict[str, Any]) -> list[str]:
    """Readable ``key: value`` lines of a store's provenance.

    A dict of scalars prints as ``k=v`` pairs; a dict of dicts (a calibrated
    store's cross-validation per file) as one indented line per entry; a list of at most
    :data:`_LIST_NAMED` names or numbers (a calibrated store's fitted parameters) as those,
    a longer list or one of other things as its length.
    """
    lines = []
    for k, v in provenance.items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            lines.append(f"{k}:")
            lines += [f"  {name}: " + ", ".join(f"{a}={_value(b)}" for a, b in sub.items())
                      for name, sub in v.items()]
        elif isinstance(v, dict):  # an empty one (no parameter left undetermined) as "none"
            lines.append(f"{k}: " + (", ".join(f"{a}={_value(b)}" for a, b in v.items()) or "none"))
        elif isinstance(v, list) and 0 < len(v) <= _LIST_NAMED and all(
                isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in v):
            lines.append(f"{k}: " + ", ".join(_value(x) for x in v))
        elif isinstance(v, list):
            lines.append(f"{k}: ({len(v)} entr{'y' if len(v) == 1 else 'ies'})")
        else:
            lines.append(f"{k}: {_value(v)}")
    return lines


def profile_line(profile: dict[str, Any]) -> str:
    """One line naming a report's profile: device, method, date, and for measured stores the
    torch version and threads (``Report.profile`` as input)."""
    from core.store.profiles import method_text
    parts = [method_text(profile) or "?", str(profile.get("date", "?"))]
    if profile.get("method") == "measured":
        if profile.get("torch_version"):
            parts.append(f"torch {profile['torch_version']}")
        if profile.get("cuda_version") not in (None, "", "none"):
            parts.append(f"CUDA {profile['cuda_version']}")
        if profile.get("threads") and profile.get("torch_device", "cpu") == "cpu":
            parts.append(f"{profile['threads']} threads")
    if profile.get("peak_fraction") is not None:  # a part without a data sheet of its own
        parts.append(f"sustains {profile['peak_fraction']:.2f} of the reference peaks, fitted")
    return f"profile: {profile.get('device')} ({', '.join(parts)}) {profile.get('path', '')}"


def run_measurement(args: argparse.Namespace) -> int:
    """Run ``vtrain profile run|collectives``; returns the exit status."""
    from core import profiling
    from core.util.console import Console
    from core.store.format import ProfileStoreError
    console = Console()
    try:
        if args.profile_command == "run":
            return _run(args, profiling, console)
        return _collectives(args, profiling, console)
    except profiling.ProfilingUnavailable as exc:
        return _error(str(exc))
    except (profiling.ShapeFileError, ProfileStoreError, ValueError, RuntimeError) as exc:
        return _error(str(exc))


def _progress_bar(console: Console) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def _run(args: argparse.Namespace, profiling: Any, console: Console) -> int:
    check_outputs([("--out", args.out)], [args.shapes])  # --out is read and extended
    ok, why = profiling.torch_status()
    if not ok:
        raise profiling.ProfilingUnavailable(why)
    device_type = "cpu" if args.device == "cpu" else "cuda"
    dtype = args.dtype or ("fp32" if device_type == "cpu" else "bf16")
    shapes = (profiling.load_shapes(args.shapes, dtype) if args.shapes
              else profiling.default_shapes(device_type))
    last = {"saved": 0}
    with _progress_bar(console) as bar:
        on_progress = _progress_updater(bar, bar.add_task("profiling", total=None), last)
        try:
            result = profiling.run_profile(args.out, args.device, shapes, threads=args.threads,
                                           progress=on_progress, kernels=args.kernels,
                                           merge=args.merge)
        except KeyboardInterrupt:
            bar.stop()
            console.print(f"[yellow]interrupted:[/] {_esc(args.out)} holds {last['saved']} of "
                          f"{len(shapes)} shape groups (a valid store)")
            return 130
    store = result.store
    console.print(f"wrote {_esc(result.path)}: {result.groups_done}/{result.groups_total} shape groups "
                  f"in {result.wall_s:,.0f} s")
    print_store(store, console, provenance=False)
    if not store.collective_kinds():
        console.print(f"[dim]for plans with t, p or d above 1, add collective curves first: "
                      f"vtrain profile collectives --world-size N --out {_esc(result.path)} "
                      "(or set cluster.intra_node_bandwidth_gbytes_per_s in the session)[/]",
                      highlight=False)
    if device_type == "cpu":
        console.print("[dim]use it: vtrain simulate SESSION --profile "
                      f"{_esc(result.path)} (precision fp32, t <= gpus_per_node)[/]", highlight=False)
    return 0


def print_store(store: Any, console: Console, provenance: bool = True) -> None:
    """What a store holds: device summary, peak FLOP/s and memory, its provenance (with
    ``provenance``), its op tables with their time ranges and its collective curves."""
    from rich.table import Table

    console.print(_esc(store.summary()))
    peaks = ", ".join(f"{k} {v / 1e9:,.0f}" for k, v in store.peak_flops.items())
    console.print(f"peak GFLOP/s: {peaks}; memory {store.memory_bytes / 2**30:,.1f} GiB at "
                  f"{store.memory_bandwidth_bytes_per_s / 1e9:,.1f} GB/s", highlight=False)
    if provenance:
        for line in provenance_lines(store.provenance):
            console.print(f"  {_esc(line)}", highlight=False)
        if store.provenance.get("method") == "analytic":  # what the spec left to the defaults
            from core.store.gpu_spec import assumed_efficiencies
            values, defaulted = assumed_efficiencies(store.provenance.get("efficiencies") or {})
            if defaulted:
                console.print("  efficiencies not in the spec, the op model's defaults: "
                              + ", ".join(f"{k}={values[k]:g}" for k in defaulted),
                              highlight=False)
        from core.accuracy.shared_fit import parameters_at_bound
        for line in parameters_at_bound(store.provenance):
            console.print(f"  [yellow]at a bound of its fit:[/] {_esc(line)}: a sign of a term the "
                          "op model lacks (docs/accuracy.md)", highlight=False)
    t = Table(title="operations", title_justify="left")
    for col in ("op", "rows", "interpolated over", "time range"):
        t.add_column(col)
    for op in store.op_names():
        _, times, axis = store.op_table(op)
        t.add_row(_esc(op), str(len(times)), _esc(axis),
                  f"{times.min() * 1e3:,.3f} .. {times.max() * 1e3:,.3f} ms" if len(times) else "")
    console.print(t)
    kinds = store.collective_kinds()
    if kinds:
        c = Table(title="collectives", title_justify="left")
        c.add_column("kind")
        c.add_column("group sizes")
        for kind, sizes in kinds.items():
            c.add_row(kind, ", ".join(map(str, sizes)))
        console.print(c)


def _bus_factor(kind: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md): busbw = size * factor / time."""
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
            "reduce_scatter": (n - 1) / n}.get(kind, 1.0)


def _progress_updater(bar: Any, task: Any, last: dict) -> Any:
    """A progress callback that moves ``bar``'s ``task`` and records the groups saved in ``last``."""
    def on_progress(p: Any) -> None:
        last["saved"] = p.groups_saved
        bar.update(task, completed=p.done, total=p.total, description=p.message[:70])
    return on_progress


def _collectives(args: argparse.Namespace, profiling: Any, console: Console) -> int:
    from rich.table import Table
    check_outputs([("--out", args.out)], [])  # before the measurement, not after it
    try:
        sizes = ([integer_arg(x) for x in list_items("--sizes", args.sizes)]  # ASCII digits
                 if args.sizes is not None else None)
        kinds = list_items("--kinds", args.kinds) if args.kinds is not None else None
    except ConfigError as exc:
        return _error(str(exc.errors[0]))
    except (ValueError, argparse.ArgumentTypeError):
        return _error(f"--sizes {args.sizes!r}: expected comma-separated integers (bytes)")
    last = {"saved": 0}
    with _progress_bar(console) as bar:
        on_progress = _progress_updater(bar, bar.add_task("collectives", total=None), last)
        try:
            result = profiling.run_collectives(args.world_size, args.backend, out=args.out,
                                               sizes=sizes, kinds=kinds, progress=on_progress)
        except KeyboardInterrupt:
            bar.stop()
            if args.out:
                console.print(f"[yellow]interrupted:[/] {_esc(args.out)} holds the {last['saved']} "
                              "collective kind(s) finished before")
            return 130
    t = Table(title=f"{args.backend}, {args.world_size} ranks (size = whole buffer, "
                    "nccl-tests convention)", title_justify="left")
    for col in ("kind", "bytes", "time (us)", "bus bandwidth (GB/s)"):
        t.add_column(col, justify="right")
    for kind, (xs, ts) in result.curves.items():
        factor = _bus_factor(kind, args.world_size)
        for x, s in zip(xs, ts):
            t.add_row(kind, f"{x:,}", f"{s * 1e6:,.1f}", f"{x * factor / s / 1e9:,.2f}")
    console.print(t)
    for kind, why in result.skipped.items():
        console.print(f"[yellow]skipped {kind}:[/] {_esc(why)}")
    if result.path is not None:
        console.print(f"added {len(result.curves)} curve(s) to {_esc(result.path)}")
    for kind, why in result.rejected.items():  # measured, refused by the store's checks
        console.print(f"[red]not stored {kind}:[/] {_esc(why)}; measure it again on an idle "
                      f"machine (--kinds {kind}): other processes competing for the CPU make "
                      "gloo's times noisy")
    return 1 if result.rejected else 0


def run_import_nccl(args: argparse.Namespace) -> int:
    """``vtrain profile import-nccl-tests``: add each file's curve to the store (atomic save)."""
    from core.store.nccl_tests import NcclTestsError, fit_curve, read_nccl_tests
    from core.store.profile_store import ProfileStore

    from core.plan.fields import ConfigError, FieldError
    from core.store.profile_store import STORE_BOUNDS

    check_outputs([("--into", args.into)], args.files)  # --into is read and extended
    glo, ghi, _ = STORE_BOUNDS["group_size"]
    if args.group_size is not None and not glo <= args.group_size <= ghi:
        raise ConfigError([FieldError("--group-size", f"{args.group_size:,} must be from {glo} to "
                                      f"{ghi:,} GPUs (a collective runs on two or more)")])
    if args.knots is not None and args.knots < 2:
        raise ConfigError([FieldError("--knots", f"{args.knots:,} must be at least 2 (a "
                                      "piecewise fit has a knot at each end)")])
    store = ProfileStore.open(args.into)
    imported = []
    for f in args.files:
        curve = read_nccl_tests(f, kind=args.kind, group_size=args.group_size)
        try:
            if args.knots is not None:
                curve = fit_curve(curve, args.knots)
            store.add_collective(curve.kind, curve.group_size, curve.nbytes, curve.time_s)
        except ValueError as exc:
            raise NcclTestsError(f"{f}: {exc}") from None
        imported.append(f"{Path(f).name}: {curve.kind}/{curve.group_size}")
        print(printable(f"{f}: {curve.kind} on {curve.group_size} GPUs, {curve.nbytes.size} "
                        f"{'knots' if args.knots else 'sizes'} ({curve.nbytes[0]:.0f}-"
                        f"{curve.nbytes[-1]:.0f} bytes)"))
    store.provenance = {**store.provenance, "collectives_imported": "; ".join(imported)
                        + (f" (piecewise log-log fit, {args.knots} knots)" if args.knots else "")}
    store.save(args.into)
    print(printable(f"wrote {args.into}"))
    return 0
