"""``vtrain validate``: predict measured iteration times and report the error."""

from __future__ import annotations

import argparse
import csv
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.cli.common import decimal_arg, integer_arg, path_arg
from core.cli.common import check_outputs, check_profile_option, field_error, row_progress

if TYPE_CHECKING:  # numpy and rich are imported by the functions that use them (fast ``vtrain --help``)
    from core.util.console import Console

__all__ = ["add_parser", "run", "defaults_taken"]


def add_parser(sub: Any) -> None:
    """Register ``validate`` on ``vtrain``'s sub-parsers."""
    v = sub.add_parser(
        "validate", help="predict measured iteration times and report the error",
        description="Predict every measured run of a file (the vTrain authors' CSV, a CSV "
                    "whose columns are session fields, or JSON lines of sessions with their "
                    "measurements; see docs/accuracy.md, 'Measurement file layouts') and print "
                    "MAPE, median and max absolute percentage error, R^2 and the error by model "
                    "size, t and p. A session-column CSV must give the model's shape and "
                    "vocabulary, b, d, the precision and the GPU; the defaults it takes for the "
                    "other columns (Megatron-LM's) are stated. Runs the simulator does not "
                    "support are skipped with their reason (none predicted: exit 2); runs the "
                    "memory model says cannot fit are reported.")
    v.add_argument("csv", type=path_arg, metavar="FILE", help="measurement file: CSV or JSON lines (layouts: "
                   "docs/accuracy.md, 'Measurement file layouts')")
    v.add_argument("--profile", type=path_arg, metavar="STORE.h5",
                   help="profile store for every row, as simulate --profile: rows of a GPU kind "
                        "without a shipped store are predicted with it, and rows of another kind "
                        "than the store's are predicted with it too, with a warning naming both "
                        "kinds (default: the shipped store of each row's GPU)")
    v.add_argument("--cross-validate", type=integer_arg, metavar="K", default=None,
                   help="k-fold cross-validation: refit the profile's parameters on K-1 folds "
                        "and predict the held-out fold (accuracy on data not used in the fit)")
    v.add_argument("--kernel-classes", action="store_true",
                   help="with --cross-validate on modern GPU runs: the shared fit also fits the "
                        "grouped expert GEMM and FlashAttention efficiencies (vtrain calibrate "
                        "--kernel-classes)")
    v.add_argument("--coverage", type=decimal_arg, default=0.9, metavar="C",
                   help="nominal coverage of each row's error band, between 0 and 1 (default "
                        "0.9); the report gives the share of rows inside their band")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.add_argument("--out", type=path_arg, metavar="FILE.csv",
                   help="write every row with its prediction and error band as CSV (a name "
                        "ending in .csv, or without a suffix)")
    v.add_argument("--plot", type=path_arg, metavar="FILE.png",
                   help="plot predicted against measured (log axes), in the image format the "
                        "suffix names (.png, .pdf, .svg ...; PNG without a suffix)")


def _predictor(profile: str | None, coverage: float):
    from core.sim.simulate import open_profile, session_profile, simulate

    store = open_profile(profile) if profile else None

    def predict(session):
        r = simulate(session, store or session_profile(session), coverage).report
        return r.iteration_time_s, r.interval
    return predict


def _check_coverage(value: float) -> float:
    from core.store.interval import check_coverage
    try:
        return check_coverage(value)
    except ValueError as exc:
        raise field_error("--coverage", str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """``vtrain validate``: see :func:`add_parser`.

    Steps: check the options, read the file, predict every row (in sample, or each fold
    refitted on the others with ``--cross-validate``), gather the metrics, write ``--out`` and
    ``--plot``, then print one JSON object (``--json``) or the text report.
    """
    from core.util.inputs import strict_dumps
    from core.accuracy.measured import read_measurements
    from core.accuracy.validate import predict_rows

    coverage, store = _check_args(args)
    profile_path = os.path.abspath(args.profile) if args.profile else None  # as simulate's
    with row_progress(f"reading {Path(args.csv).name}", args.json) as progress:
        ms = read_measurements(args.csv, progress, profile_path=profile_path)
    shared = False
    if args.cross_validate:
        result, shared = _cross_validated(args, ms, coverage)
    else:
        with row_progress("predicting", args.json) as progress:
            result = predict_rows(ms, _predictor(args.profile, coverage), progress)
    metrics = _metrics(result, ms, args.cross_validate or 0, store)
    if not metrics["n"] and not metrics["memory"]["n"]:
        raise _nothing_predicted(args.csv, ms, metrics)
    if args.out:
        _write_rows(result, args.out)
    if args.plot and metrics["n"]:
        _plot(result, args.plot, metrics)
    elif args.plot:  # the plot is of times: said, not left for the user to find missing
        from core.util.console import Console, esc
        Console(stderr=True).print(f"--plot {esc(str(args.plot))}: not written: no predicted row "
                                   "has a measured time (the plot is of iteration times)",
                                   highlight=False)
    if args.json:
        metrics["rows"] = _row_records(result)
        print(strict_dumps(_no_nan(metrics)))
        return 0
    _print_report(args, ms, result, metrics, _how(args, shared, result))
    return 0


def _nothing_predicted(path: str, ms, metrics: dict) -> Exception:
    """The error of a file none of whose rows could be predicted: the rows skipped per cause and
    the first row's reason (every reason: ``vtrain validate`` of a file with a predictable row,
    or the rows' ``skip_reason`` in :func:`core.accuracy.measured.read_measurements`)."""
    from core.accuracy.measured import MeasurementFileError
    causes = ", ".join(f"{c} {n}" for c, n in metrics["skipped_by_cause"].items())
    first = next((m for m in ms if m.skip_reason), None)
    reason = f"; {first.where}: {first.skip_reason}" if first else ""
    return MeasurementFileError(f"{path}: no row could be predicted ({len(ms)} skipped: "
                                f"{causes}){reason}")


def _check_args(args: argparse.Namespace):
    """Refuse a fold count below 2 (0 too: it is not "no cross-validation") and an ``--out`` / ``--plot`` that would overwrite an
    input; return the checked ``--coverage`` and ``--profile``'s store (None without).

    Raises
    ------
    ConfigError
        Naming the option at fault (:func:`core.cli.common.field_error`).
    """
    if args.cross_validate is not None and args.cross_validate < 2:
        raise field_error("--cross-validate", f"{args.cross_validate}: needs at least 2 folds")
    if args.kernel_classes and (not args.cross_validate or args.profile):
        raise field_error("--kernel-classes", "fits the kernel classes in the shared fit: needs "
                                              "--cross-validate K and no --profile")
    coverage = _check_coverage(args.coverage)
    check_outputs([("--out", args.out), ("--plot", args.plot)], [args.csv, args.profile])
    if args.plot:
        plot_format(args.plot)
    if args.out and Path(args.out).suffix.lower() not in ("", ".csv"):
        raise field_error("--out", f"{args.out}: the rows are written as CSV; name the file .csv "
                                   "(--json prints them as JSON, under \"rows\")")
    store = check_profile_option(args.profile) if args.profile else None
    return coverage, store


def _cross_validated(args: argparse.Namespace, ms, coverage: float):
    """Predict the rows of ``ms`` by ``args.cross_validate``-fold cross-validation.

    Each fold is predicted by the profile refitted on the other folds: ``--profile``'s store, or
    the analytic stores with efficiencies shared across GPU kinds (the procedure of ``vtrain
    calibrate --out-dir``, docs/accuracy.md) when the rows call for it, or else each row's shipped
    store. With fewer usable rows than folds each row is its own fold (``args.cross_validate`` is
    lowered to the row count, with a note on stderr). Each fold's error band comes from the
    out-of-fold residuals of the other folds (cross-conformal).

    Returns
    -------
    (ValidationResult, bool)
        The predictions (NaN for rows not used) with their bands and memory predictions, and
        whether the shared fit was used.

    Raises
    ------
    ConfigError
        Fewer than 2 usable rows (``--cross-validate``).
    """
    import numpy as np

    from core.util.console import Console, esc
    from core.accuracy.calibrate import cross_validate, measured_sessions
    from core.accuracy.shared_fit import analytic_bases, shared_fit_kwargs, use_shared_fit
    from core.accuracy.validate import ValidationResult
    from core.sim.simulate import open_profile, session_profile
    sessions, measured = measured_sessions(ms)
    err = Console(stderr=True)
    if len(sessions) < 2:
        memory_only = sum(1 for m in ms if not m.skip_reason and not m.has_time)
        raise field_error("--cross-validate", f"{len(sessions)} usable rows: cross-validation "
                                              "needs at least 2" + (
            f" with a measured time ({memory_only} rows measured peak memory only: the fit is "
            "of iteration times)" if memory_only else ""))
    if len(sessions) < args.cross_validate:  # each row its own fold (leave-one-out)
        err.print(f"{args.cross_validate} folds asked, {len(sessions)} usable rows: "
                  f"{len(sessions)} folds (leave-one-out)", highlight=False)
        args.cross_validate = len(sessions)
    shared = not args.profile and use_shared_fit(sessions)
    if args.profile:
        base, fit_kw = open_profile(args.profile), {}  # opened (cached) by check_profile_option
    elif shared:  # the procedure of `vtrain calibrate --out-dir` (docs/accuracy.md)
        base = analytic_bases()
        fit_kw = shared_fit_kwargs(base, sessions, args.kernel_classes)
    else:
        base, fit_kw = session_profile, {}
    pred_used, _ = cross_validate(sessions, measured, base, folds=args.cross_validate,
                                  progress=lambda msg: err.print(esc(msg), highlight=False),
                                  **fit_kw)
    used = [i for i, m in enumerate(ms) if not m.skip_reason and m.has_time]
    pred = np.full(len(ms), np.nan)
    pred[used] = pred_used
    # each fold's bands from the out-of-fold residuals of the other folds
    from core.store.interval import cross_conformal_intervals, residual_table_from_cv
    table = residual_table_from_cv(sessions, measured, pred_used, Path(args.csv).name,
                                   [ms[i].row for i in used])
    ivs = cross_conformal_intervals(table, coverage, folds=args.cross_validate)
    low, high = np.full(len(ms), np.nan), np.full(len(ms), np.nan)
    for i, iv in zip(used, ivs):
        if iv.available:
            low[i], high[i] = iv.low_s, iv.high_s
    note = next((iv.note for iv in ivs if not iv.available), "")
    from core.accuracy.validate import predict_memory
    return ValidationResult(ms, pred, low, high, coverage, predict_memory(ms), note), shared


def _metrics(result, ms, folds: int, profile=None) -> dict:
    """The report's figures: :meth:`ValidationResult.metrics` plus the fold count (0: none),
    skipped rows by cause, the defaults taken, the GPU names read as kinds, the warnings
    (:func:`_warnings`), the runs the memory model says cannot fit (GiB) and the error by
    group (:func:`_group_keys`). ``profile``: ``--profile``'s store, or None."""
    from core.accuracy.measured import skip_counts
    from core.accuracy.validate import over_capacity
    metrics = result.metrics()
    metrics["cross_validated_folds"] = folds
    metrics["skipped_by_cause"] = skip_counts(ms)
    metrics["defaults"] = defaults_taken(ms)
    metrics["gpu_names_read"] = _gpu_names_read(ms)
    metrics["warnings"] = _warnings(result, profile)
    metrics["profile_fit"] = [] if folds else _profile_fit(result)
    if metrics.get("interval_coverage", 0) is None:  # why no row has a band
        metrics["interval_note"] = result.band_note or "no predicted row has one"
    elif metrics.get("interval_rows", 0) < metrics["n"] and result.band_note:  # why some have none
        metrics["interval_note"] = (f"{metrics['n'] - metrics['interval_rows']} of "
                                    f"{metrics['n']} rows have none: {result.band_note}")
    metrics["memory_over_capacity"] = [  # runs that ran though the memory model says no
        {"row": m.row, "need_gib": need / 2**30, "capacity_gib": cap / 2**30}
        for m, need, cap in over_capacity(ms)]
    metrics["by_group"] = {key: [{"label": g, "n": n, "mape_percent": mape, "max_ape_percent": mx}
                                 for g, n, mape, mx in result.by_group(key)]
                           for key in _group_keys(ms)}
    return metrics


def _profile_fit(result) -> list[dict]:
    """What the calibration of each store the predicted rows used left open, from its
    provenance (:func:`core.accuracy.calibrate.calibrated_store`, ``vtrain calibrate --trace``):
    ``{"store", "device", "rows", "underdetermined", "not_determined"}`` per store with either,
    ``underdetermined`` the fit's note where it had fewer rows than fitted parameters
    (:func:`core.accuracy.calibrate.underdetermined`; None without) and ``not_determined`` the
    parameters its rows did not determine (name -> why), which kept the base store's values.
    Empty for stores without either (the shipped ones)."""
    from core.sim.simulate import session_profile
    stores: dict[tuple, list] = {}
    for m, used in zip(result.measurements, result.used):
        if used:
            key = (m.session.cluster.gpu, m.session.cluster.profile_path)
            stores.setdefault(key, [session_profile(m.session), []])[1].append(m.row)
    out = []
    for store, rows in stores.values():
        prov = store.provenance or {}
        under, held = prov.get("underdetermined"), prov.get("not_determined") or {}
        if not under and not held:
            continue
        path = getattr(store, "path", None)
        out.append({"store": Path(path).name if path else store.device_name,
                    "device": store.device_name, "rows": rows,
                    "underdetermined": str(under) if under else None,
                    "not_determined": {str(k): str(v) for k, v in dict(held).items()}})
    return out


def _gpu_names_read(ms) -> list[dict]:
    """The GPU names of a session-column CSV read as shipped kinds (:attr:`core.accuracy.
    measured.MeasuredRun.gpu_name`), each ``{"name", "kind", "rows"}`` with its row count."""
    seen: dict[tuple[str, str], int] = {}
    for m in ms:
        if m.gpu_name and m.session is not None:
            key = (m.gpu_name, m.session.cluster.gpu)
            seen[key] = seen.get(key, 0) + 1
    return [{"name": n, "kind": k, "rows": c} for (n, k), c in seen.items()]


def _warnings(result, profile) -> list[dict]:
    """What the report warns of, each ``{"rows", "column", "message"}``: rows predicted with
    ``--profile``'s store (``profile``) though their GPU is another kind (one entry per kind,
    as simulate warns: "the profile is of X, not of cluster.gpu Y"), the unit slips of
    :func:`core.accuracy.validate.unit_warnings`, one per row, the times faster than the GPU's
    peak (:func:`_faster_than_peak`) and the rows that repeat an earlier one
    (:func:`core.accuracy.validate.repeated_rows`), one entry per row repeated."""
    from core.accuracy.validate import unit_warnings
    out = []
    if profile is not None:
        kinds: dict[str, list[int]] = {}
        for m, used in zip(result.measurements, result.used):
            if used and m.session.cluster.gpu != profile.device_name:
                kinds.setdefault(m.session.cluster.gpu, []).append(m.row)
        for gpu, rows in kinds.items():
            out.append({"rows": rows, "column": "gpu", "message": (
                f"the profile is of {profile.device_name}, not of cluster.gpu {gpu}: these rows "
                f"were predicted with it (--profile is every row's store), so their times, MFU "
                f"and memory capacity are {profile.device_name}'s")})
    out += [{"rows": [w["row"]], "column": w["column"], "message": w["message"]}
            for w in unit_warnings(result)]
    out += _faster_than_peak(result)
    from core.accuracy.validate import repeated_rows
    column = {m.row: m.time_column for m in result.measurements}
    where = {m.row: m.where for m in result.measurements}
    out += [{"rows": again, "column": column[row], "message": (
        f"the same session and measurement as {where[row]}: counted again in every figure (and "
        "in --cross-validate, a copy in another fold is a row its fit has seen); delete the "
        "repeat unless the run was measured twice to the same figure")}
        for row, again in repeated_rows(result.measurements)]
    return out


def _faster_than_peak(result) -> list[dict]:
    """A warning per predicted row whose measured time gives a model FLOPs utilization above 1
    (:func:`_mfu`: Megatron's model FLOPs at the GPU's data-sheet peak): no GPU runs the
    model's FLOPs faster than its peak, so the time is not of the plan's whole iteration (the
    published runs reach 0.67 at most, the vTrain authors' 0.46)."""
    out = []
    for m, used in zip(result.measurements, result.used):
        mfu = _mfu(m.session, m.measured_iteration_time_s) if used and m.has_time else None
        if mfu is not None and mfu > 1:
            out.append({"rows": [m.row], "column": m.time_column, "message": (
                f"measured {m.measured_iteration_time_s:,.6g} s gives a model FLOPs utilization "
                f"of {mfu:.0%} at the GPU's data-sheet peak, faster than the GPU can run the "
                "model's FLOPs: not the time of this plan's whole iteration (another global "
                "batch, micro-batch size or model shape than what ran, or part of the step?)")})
    return out


def defaults_taken(ms) -> dict[str, list[dict]]:
    """Every default the rows of a session-column CSV took (:data:`core.accuracy.measured.
    CSV_DEFAULTS`: the column absent or the cell empty), field -> ``[{"value", "rows"}]``, one
    entry per value with its row count, in the order first met; empty for files that state
    every field."""
    taken: dict[str, dict[str, list]] = {}
    for m in ms:
        for name, value in m.defaults.items():
            entry = taken.setdefault(name, {}).setdefault(repr(value), [value, 0])
            entry[1] += 1
    return {name: [{"value": v, "rows": n} for v, n in values.values()]
            for name, values in taken.items()}


#: How the report's defaults line names each origin of a default
#: (:func:`core.accuracy.measured.default_origin`), in the order it lists them.
_DEFAULT_ORIGINS = {"Megatron-LM": "Megatron-LM's", "session": "the session's",
                    "reference node": "the GPU's reference node"}


def _defaults_line(defaults: dict[str, list[dict]], rows: int) -> str:
    """The report's line stating each default taken (:func:`defaults_taken`) with its rows,
    grouped by where it comes from (:data:`_DEFAULT_ORIGINS`)."""
    from core.accuracy.measured import cell_text, default_origin
    groups: dict[str, list[str]] = {origin: [] for origin in _DEFAULT_ORIGINS}
    for name, values in defaults.items():
        text = ", ".join(f"{cell_text(e['value'])}"
                         + ("" if e["rows"] == rows else f" ({e['rows']} rows)") for e in values)
        groups[default_origin(name)].append(f"{name}={text}")
    parts = [f"{_DEFAULT_ORIGINS[o]}: {'; '.join(p)}" for o, p in groups.items() if p]
    return ("defaults taken for absent columns and empty cells (docs/accuracy.md 'Session "
            f"defaults'; every row unless counted) - {' - '.join(parts)}")


def _how(args: argparse.Namespace, shared: bool, result) -> str:
    """How the rows were predicted, for the report's first line: the cross-validation done, or
    the profile used and whether the figures are in sample (:func:`_profile_note`)."""
    if args.cross_validate and shared:
        return (f"{args.cross_validate}-fold cross-validated: each fold predicted by the analytic "
                "stores of its GPU kinds with efficiencies shared across the kinds, refitted on "
                "the other folds of this file alone")
    if args.cross_validate:
        return (f"{args.cross_validate}-fold cross-validated: each fold predicted by the profile "
                "refitted on the other folds of this file alone")
    return _profile_note(args.profile, result, Path(args.csv).name)


def _print_report(args: argparse.Namespace, ms, result, metrics: dict, how: str) -> None:
    """The text report: the headline, the time and memory errors, the runs the memory model says
    cannot fit, the named assumptions and the skipped rows."""
    from core.accuracy.measured import row_number_where, row_where
    from core.util.console import Console, esc
    console = Console()
    mem = metrics["memory"]
    console.print(f"[bold]{esc(Path(args.csv).name)}[/]: {metrics['n']} rows predicted"
                  + (f" for time, {mem['n']} for memory" if mem["n"] else "")
                  + f", {metrics['skipped']} skipped; {esc(how)}")
    if metrics["defaults"]:
        console.print(esc(_defaults_line(metrics["defaults"], len(ms))), highlight=False)
    for g in metrics["gpu_names_read"]:
        console.print(f"gpu {esc(repr(g['name']))} read as {esc(g['kind'])} ({g['rows']} rows; "
                      "as --set cluster.gpu= reads it)", highlight=False)
    lines = {m.row: m.line for m in ms}  # each row named with its line (row_where)
    for f in metrics["profile_fit"]:  # what the store's own calibration left open
        if f["underdetermined"]:
            console.print(f"[yellow]profile {esc(f['store'])} is underdetermined:[/] "
                          f"{esc(f['underdetermined'])} ({len(f['rows'])} rows predicted with "
                          "it)", highlight=False)
        if f["not_determined"]:
            held = "; ".join(f"{k} ({v})" for k, v in f["not_determined"].items())
            console.print(f"[yellow]profile {esc(f['store'])}:[/] parameters its calibration "
                          f"rows did not determine, at its base store's values: {esc(held)}",
                          highlight=False)
    for w in metrics["warnings"]:
        rows = ", ".join(row_number_where(r, lines.get(r, 0)) for r in w["rows"][:10]) + (
            f" and {len(w['rows']) - 10} more" if len(w["rows"]) > 10 else "")
        console.print(f"[yellow]warning:[/] row{'s' if len(w['rows']) > 1 else ''} {rows}, "
                      f"column {esc(w['column'])}: {esc(w['message'])}", highlight=False)
    if metrics["n"]:
        _print_errors(console, result, metrics, args.profile)
    if mem["n"]:
        _print_memory_errors(console, result, mem)
    used = [m for m in ms if not m.skip_reason]
    # the memory model against runs that ran
    over = [f"{row_where(r['row'], lines.get(r['row'], 0))} {r['need_gib']:,.1f} of "
            f"{r['capacity_gib']:,.1f} GiB" for r in metrics["memory_over_capacity"]]
    if over:
        console.print(f"memory model: {len(over)} of {len(used)} predicted rows need more than "
                      f"their GPU's memory, though the runs ran: {esc('; '.join(over))}",
                      highlight=False)
    _print_assumptions(console, used)
    _print_skipped(console, ms, metrics)


def _print_assumptions(console: Console, used) -> None:
    """A table of the named assumptions (docs/accuracy.md) of the predicted rows ``used`` with
    their row counts, most used first; nothing when none was named."""
    from rich.table import Table

    from core.util.console import esc
    named: dict[str, int] = {}
    for m in used:
        for a in m.assumptions:
            named[a.split(":")[0]] = named.get(a.split(":")[0], 0) + 1
    if named:
        a = Table(title="assumptions of the predicted rows (named policies, docs/accuracy.md; "
                        "each row's in --json)", title_justify="left")
        a.add_column("assumption")
        a.add_column("rows", justify="right")
        for name, n in sorted(named.items(), key=lambda kv: (-kv[1], kv[0])):
            a.add_row(esc(name), str(n))
        console.print(a)


def _print_skipped(console: Console, ms, metrics: dict) -> None:
    """The skipped rows: a table of their causes, then the first :data:`_MAX_ROWS_SHOWN` rows
    with their reasons (the rest counted)."""
    from rich.table import Table

    from core.util.console import esc
    if metrics["skipped"]:
        c = Table(title=f"skipped rows by cause ({metrics['skipped']} rows; a row may have "
                        "several causes)", title_justify="left")
        c.add_column("cause")
        c.add_column("rows", justify="right")
        for cause, n in metrics["skipped_by_cause"].items():
            c.add_row(esc(cause), str(n))
        console.print(c)
    skipped = [m for m in ms if m.skip_reason]
    for m in skipped[:_MAX_ROWS_SHOWN]:
        console.print(f"[yellow]skipped {esc(m.where)}:[/] {esc(m.skip_reason)}", highlight=False)
    if len(skipped) > _MAX_ROWS_SHOWN:
        console.print(f"[yellow]... and {len(skipped) - _MAX_ROWS_SHOWN} more skipped rows "
                      "(see --out)[/]")


def _no_nan(value):
    """``value`` with every NaN float replaced by None (no row predicted: no figures)."""
    import math
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _group_keys(ms) -> list[str]:
    """Group labels the error tables break down by: model, t, p and, for the published-runs
    layout, GPU kind, dense / MoE, precision and source."""
    keys = ["model", "t", "p"]
    if any("gpu" in m.group for m in ms):
        keys += ["gpu", "kind", "precision", "source"]
    return keys


def _mfu(session, seconds: float) -> float | None:
    """Model FLOPs utilization of ``session`` at ``seconds`` per iteration: Megatron's model
    FLOPs (:func:`core.sim.simulate.model_flops_per_iteration`) over t*p*cp*d GPUs at the data-sheet
    peak of the plan's precision, TF32's for an fp32 plan with TF32 matmuls (None when the
    store has no such peak)."""
    from core.plan.parallel import tf32_matmuls
    from core.sim.simulate import model_flops_per_iteration, session_profile
    try:
        dtype = "tf32" if tf32_matmuls(session.plan) else session.plan.precision
        peak = session_profile(session).peak_flops[dtype]
        world = session.plan.num_gpus
        return model_flops_per_iteration(session) / (seconds * world * peak)
    except Exception:  # noqa: BLE001 - a figure for the report only
        return None


def _row_records(result) -> list[dict]:
    """Every row with its prediction, error, MFU at the measured and the predicted time, its
    measured and predicted peak memory (GiB, at its memory_scale) and memory error, skip reason
    and causes, and named assumptions."""
    import math

    from core.accuracy.validate import row_memory
    out = []
    mem_pred = result.predicted_memory_gib
    mem_err = result.memory_errors_percent()
    for i, (m, pred) in enumerate(zip(result.measurements, result.predicted_s)):
        ok = not math.isnan(pred)
        timed = ok and m.has_time
        mem = row_memory(m) if ok or not m.skip_reason else None
        mp = None if mem_pred is None or math.isnan(mem_pred[i]) else float(mem_pred[i])
        out.append({"row": m.row, "line": m.line, **m.group,
                    "measured_s": None if not m.has_time else m.measured_iteration_time_s,
                    "memory_need_gib": mem[0] / 2**30 if mem else None,
                    "memory_capacity_gib": mem[1] / 2**30 if mem else None,
                    "predicted_s": float(pred) if ok else None,
                    "error_percent": ((pred - m.measured_iteration_time_s)
                                      / m.measured_iteration_time_s * 100 if timed else None),
                    "measured_memory_gib": None if math.isnan(m.measured_memory_gib)
                    else m.measured_memory_gib,
                    "memory_scale": m.memory_scale or None,
                    "predicted_memory_gib": mp,
                    "memory_error_percent": None if mp is None else float(mem_err[i]),
                    "mfu_at_measured": _mfu(m.session, m.measured_iteration_time_s) if timed else None,
                    "mfu_at_predicted": _mfu(m.session, float(pred)) if ok else None,
                    "skip_reason": m.skip_reason, "skip_causes": m.skip_causes,
                    "assumptions": m.assumptions, "defaults": m.defaults})
    return out


#: Skipped rows listed with their reasons (the rest go to --out).
_MAX_ROWS_SHOWN = 50


def _print_errors(console: Console, result, metrics: dict, profile: str | None) -> None:
    """The error figures, the error band's coverage and the error tables by model, t and p."""
    from rich.table import Table

    from core.util.console import esc
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("MAPE", f"{metrics['mape_percent']:.2f} %")
    t.add_row("median APE", f"{metrics['median_ape_percent']:.2f} %")
    t.add_row("max APE", f"{metrics['max_ape_percent']:.2f} %")
    t.add_row("R^2", "n/a (one row)" if metrics["n"] == 1 else f"{metrics['r2']:.4f}")
    if metrics.get("interval_coverage") is not None:
        t.add_row(f"inside {result.coverage:.0%} band",
                  f"{metrics['interval_coverage']:.1%} of {metrics['interval_rows']} rows "
                  f"(median width {metrics['interval_median_width_percent']:.1f} % of the "
                  "prediction)")
    console.print(t)
    if "interval_note" in metrics:  # below the table: a long note would widen its figures
        none = "" if metrics.get("interval_coverage") is not None else " none:"
        console.print(f" [bold]error band[/]{none} {esc(metrics['interval_note'])}",
                      highlight=False)
    titles = {"model": "model size", "t": "tensor parallel t", "p": "pipeline parallel p",
              "gpu": "GPU kind", "kind": "dense / MoE", "precision": "precision", "source": "source"}
    for key in _group_keys(result.measurements):
        title = titles[key]
        g = Table(title=f"error by {title}", title_justify="left")
        for col in (title, "rows", "MAPE %", "max APE %"):
            g.add_column(col, justify="right")
        for label, n, mape, mx in result.by_group(key):
            g.add_row(esc(label), str(n), f"{mape:.2f}", f"{mx:.2f}")
        console.print(g)


def _print_memory_errors(console: Console, result, mem: dict) -> None:
    """The memory error figures (rows with a measured peak) and each such row's error."""
    import math

    from rich.table import Table

    from core.util.console import esc
    scales = ", ".join(f"{n} {s}" for s, n in sorted(mem["rows_by_scale"].items()))
    t = Table(show_header=False, box=None, title=f"peak memory per GPU ({scales}; the fullest "
              "stage's GPU at each row's memory_scale)", title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("memory MAPE", f"{mem['mape_percent']:.2f} %")
    t.add_row("median APE", f"{mem['median_ape_percent']:.2f} %")
    t.add_row("max APE", f"{mem['max_ape_percent']:.2f} %")
    console.print(t)
    rows = Table(title="memory error by row", title_justify="left")
    for col in ("row", "model", "memory_scale", "measured GiB", "predicted GiB", "error %"):
        rows.add_column(col, justify="right")
    err = result.memory_errors_percent()
    shown = 0
    for m, pred, e in zip(result.measurements, result.predicted_memory_gib, err):
        if math.isnan(e):
            continue
        shown += 1
        if shown > _MAX_ROWS_SHOWN:
            continue
        rows.add_row(str(m.row), esc(m.group.get("model", "")), esc(m.memory_scale),
                     f"{m.measured_memory_gib:.2f}", f"{pred:.2f}", f"{e:+.1f}")
    console.print(rows)
    if shown > _MAX_ROWS_SHOWN:
        console.print(f"... and {shown - _MAX_ROWS_SHOWN} more rows (see --json or --out)")


def _profile_note(profile: str | None, result, csv_name: str) -> str:
    """How the predictions relate to the profile: in-sample when it was calibrated on the file."""
    from core.sim.simulate import open_profile, session_profile

    sessions = [m.session for m, used in zip(result.measurements, result.used) if used]
    if not sessions:
        return "no row could be predicted"
    if not profile:  # each row its own GPU kind's shipped store
        stores = {}
        for s in sessions:
            key = (s.cluster.gpu, s.cluster.profile_path)
            if key not in stores:
                stores[key] = session_profile(s)
        if len(stores) > 1:
            kinds = sorted({(st.device_name, (st.provenance or {}).get("method", "unknown method"))
                            for st in stores.values()})
            note = "profiles of each row's GPU: " + ", ".join(f"{d} ({m})" for d, m in kinds)
            if any(_calibrated_on(st, csv_name) for st in stores.values()):
                note += (", calibrated on this file: in-sample figures (use --cross-validate K "
                         "for out-of-sample ones)")
            return note
    store = open_profile(profile) if profile else session_profile(sessions[0])
    prov = store.provenance or {}
    name = (f"profile {Path(profile).name + ': ' if profile else ''}{store.device_name} "
            f"({prov.get('method', 'unknown method')})")
    if _calibrated_on(store, csv_name):
        return (f"{name}, calibrated on this file: in-sample figures (use --cross-validate K "
                "for out-of-sample ones)")
    return name


def _calibrated_on(store, csv_name: str) -> bool:
    """Whether ``store`` was calibrated on a file named ``csv_name``: one of the names its
    provenance's ``data`` lists (``"a.csv; b.csv"``, :func:`core.accuracy.calibrate.
    calibrated_store`), the whole name (a file ``sessions.jsonl`` is not the shipped stores'
    ``published_runs.sessions.jsonl``)."""
    prov = store.provenance or {}
    return prov.get("method") == "calibrated" and csv_name in [
        d.strip() for d in str(prov.get("data", "")).split(";")]


def _write_rows(result, path: str) -> None:
    import numpy as np

    from core.io.session import atomic_write_text
    from core.util.text import spreadsheet_cell  # names from the file are text, never formulas

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["row", "model", "num_gpus", "tensor_parallel", "pipeline_parallel", "data_parallel",
                "micro_batch_size", "global_batch_size", "measured_iteration_time_s",
                "predicted_iteration_time_s", "error_percent", "interval_low_s", "interval_high_s",
                "measured_peak_memory_gib", "memory_scale", "predicted_peak_memory_gib",
                "memory_error_percent", "skip_reason"])
    n = len(result.measurements)
    low = result.interval_low_s if result.interval_low_s is not None else np.full(n, np.nan)
    high = result.interval_high_s if result.interval_high_s is not None else np.full(n, np.nan)
    mem_pred = result.predicted_memory_gib
    if mem_pred is None:
        mem_pred = np.full(n, np.nan)
    mem_err = result.memory_errors_percent()
    for m, pred, lo, hi, mp, me in zip(result.measurements, result.predicted_s, low, high,
                                       mem_pred, mem_err):
        s = m.session
        pl = s.plan if s else None
        err = "" if np.isnan(pred) or not m.has_time else \
            f"{(pred - m.measured_iteration_time_s) / m.measured_iteration_time_s * 100:.3f}"
        memory = ["" if np.isnan(m.measured_memory_gib) else f"{m.measured_memory_gib:.6g}",
                  m.memory_scale, "" if np.isnan(mp) else f"{mp:.6g}",
                  "" if np.isnan(me) else f"{me:.3f}"]
        band = ["", ""] if np.isnan(lo) else [f"{lo:.6g}", f"{hi:.6g}"]
        w.writerow([spreadsheet_cell(m.row), spreadsheet_cell(m.group.get("model", "")),
                    pl.num_gpus if pl else "",
                    pl.tensor_parallel if pl else "", pl.pipeline_parallel if pl else "",
                    pl.data_parallel if pl else "", pl.micro_batch_size if pl else "",
                    pl.global_batch_size if pl else "",
                    f"{m.measured_iteration_time_s:.6g}" if m.has_time else "",
                    "" if np.isnan(pred) else f"{pred:.6g}", err, *band,
                    *map(spreadsheet_cell, memory), spreadsheet_cell(m.skip_reason)])
    atomic_write_text(path, buf.getvalue())


def plot_format(path: str) -> str:
    """The image format ``--plot PATH`` is written in: the one its suffix names, among those
    matplotlib writes (``png``, ``pdf``, ``svg`` ...: its canvas's supported file types), or
    ``png`` for a name without a suffix. A PNG written under ``plot.svg`` or ``plot.txt`` was
    a file its name misdescribes.

    Raises
    ------
    ConfigError
        Naming ``--plot`` and the formats matplotlib writes, for another suffix."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return "png"
    kinds = Figure().canvas.get_supported_filetypes()
    if suffix not in kinds:
        raise field_error("--plot", f"{path}: '.{suffix}' is not an image format matplotlib "
                                    f"writes; give one of {', '.join('.' + k for k in sorted(kinds))}")
    return suffix


def _plot(result, path: str, metrics: dict) -> None:
    import matplotlib
    import numpy as np
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    used = result.timed
    meas = result.measured_s[used]
    pred = result.predicted_s[used]
    fig, ax = plt.subplots(figsize=(5.5, 5.0), dpi=120)
    lo, hi = min(meas.min(), pred.min()) * 0.8, max(meas.max(), pred.max()) * 1.25
    ax.fill_between([lo, hi], [lo * 0.95, hi * 0.95], [lo * 1.05, hi * 1.05], color="0.88",
                    label="±5 %", zorder=0)
    ax.plot([lo, hi], [lo, hi], color="k", lw=0.8, zorder=1)
    groups = [m.group.get("t", "?") for m, u in zip(result.measurements, used) if u]
    for label in sorted(set(groups), key=lambda x: (len(x), x)):
        sel = np.array([g == label for g in groups])
        ax.scatter(meas[sel], pred[sel], s=12, alpha=0.75, label=f"t={label}", zorder=2)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="measured iteration time (s)", ylabel="predicted iteration time (s)")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    folds = metrics.get("cross_validated_folds")
    r2 = "n/a (one row)" if metrics["n"] == 1 else f"{metrics['r2']:.3f}"
    ax.set_title(f"MAPE {metrics['mape_percent']:.2f} %, R² {r2}"
                 + (f" ({folds}-fold CV)" if folds else ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    from core.util.atomic import atomic_target
    with atomic_target(path) as tmp:
        fig.savefig(tmp, format=plot_format(path))
    plt.close(fig)
