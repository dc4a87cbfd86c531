"""``vtrain calibrate``: fit a profile's parameters to measured iteration times."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from core.cli.common import decimal_arg, integer_arg, path_arg
from core.cli.common import SET_HELP, check_outputs, check_profile_option, field_error, row_progress

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register ``calibrate`` on ``vtrain``'s sub-parsers."""
    c = sub.add_parser(
        "calibrate", help="fit a profile's parameters to measured iteration times",
        description="Fit the free parameters of a profile store (op model efficiencies and "
                    "overheads, inter-node efficiency) and per-shape op-time factors to "
                    "measured iteration times (files weighted equally unless --file-weights "
                    "says otherwise), report per file the "
                    "k-fold cross-validated error of that fit and write a calibrated store whose provenance lists the data, the "
                    "parameters and the cross-validated error.")
    c.add_argument("csv", type=path_arg, metavar="FILE", nargs="*",
                   help="measurement files, CSV or JSON lines (the layouts of vtrain validate, "
                        "docs/accuracy.md)")
    c.add_argument("--profile", "--store", type=path_arg, metavar="STORE.h5",
                   help="store to start from (one GPU kind; with --out)")
    c.add_argument("--trace", type=path_arg, metavar="TRACE.json", nargs="+",
                   help="instead of measurement files: PyTorch profiler traces of one run, one "
                        "file per rank; fits the op model's efficiencies to the measured time "
                        "per operation class (with --session, --store and --out; "
                        "docs/trace_import.md)")
    c.add_argument("--session", type=path_arg, metavar="S.json", help="with --trace: the session the traces "
                                                       "were taken of")
    c.add_argument("--step", type=integer_arg, metavar="N",
                   help="with --trace: the ProfilerStep#N to fit (default: the last complete one)")
    c.add_argument("--classes", type=path_arg, metavar="TABLE.json",
                   help="with --trace: operation class table (default: the shipped one)")
    c.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help=SET_HELP)
    c.add_argument("--out", type=path_arg, metavar="STORE.h5",
                   help="calibrated store to write (atomically; an existing file is replaced)")
    c.add_argument("--out-dir", type=path_arg, metavar="DIR",
                   help="shared fit of several GPU kinds: each run starts from the analytic store "
                        "of its GPU (built from resources/gpu_specs), one set of efficiencies "
                        "(fractions of each GPU's data-sheet peaks) is fitted on all runs, no "
                        "per-shape factors; writes DIR/<GPU kind>.h5 for every kind of the runs "
                        "and of --gpus (docs/accuracy.md)")
    c.add_argument("--gpus", metavar="KIND", nargs="+", default=[],
                   help="with --out-dir: also write stores for these GPU kinds (their parameters "
                        "are the shared fit; the provenance says they had no runs); the A100's "
                        "store is written only when named here")
    c.add_argument("--json", action="store_true",
                   help="print one JSON object (parameters, cross-validation, in-sample figures) "
                        "instead of tables")
    c.add_argument("--kernel-classes", action="store_true",
                   help="with --out-dir: also fit the grouped expert GEMM and FlashAttention "
                        "efficiencies (each kernel class its own; off by default: on the "
                        "published runs they made the held-out error worse, docs/accuracy.md); "
                        "refused with --trace, whose classes cannot determine them")
    c.add_argument("--folds", type=integer_arg, default=5, metavar="K",
                   help="cross-validation folds per file (0: skip cross-validation; a file "
                        "with fewer usable rows gets one fold per row, a file of one row none)")
    c.add_argument("--file-weights", type=decimal_arg, nargs="+", metavar="W",
                   help="share of the fit each CSV gets, one per CSV in order (default: equal), "
                        "e.g. 1 4 to let the second file count four times as much as the first")


def run(args: argparse.Namespace) -> int:
    """``vtrain calibrate``: see :func:`add_parser`.

    Steps: hand ``--trace`` to :func:`core.cli.calibrate_trace.run_trace` and ``--out-dir`` to
    :func:`_run_shared`; else check the options, read the files, cross-validate each file
    (``--folds``), fit on every row, write the calibrated store to ``--out`` and print what was
    fitted (``--json``: one JSON object).
    """
    from core.accuracy.calibrate import balanced_weights, calibrated_store, fit
    from core.accuracy.shared_fit import finite_metrics
    from core.util.console import Console, esc
    from core.util.inputs import strict_dumps
    from core.store.profile_store import ProfileStore

    console = Console(stderr=True)
    if args.trace:
        from core.cli.calibrate_trace import run_trace
        return run_trace(args)
    _check_measurement_args(args)
    if args.out_dir:
        check_outputs([("--out-dir", args.out_dir)], [], folders=True)  # before the fit
        if args.profile or args.out:
            raise field_error("--out-dir", "give either --out-dir (shared fit of the GPU kinds) or "
                                           "--profile and --out (one store), not both")
        return _run_shared(args, console)
    if args.kernel_classes:
        raise field_error("--kernel-classes", "fits the kernel classes in the shared fit of the "
                                              "GPU kinds: needs --out-dir")
    _check_one_store_args(args)
    base = check_profile_option(args.profile, opener=ProfileStore.open)
    shares = _check_file_weights(args.file_weights, len(args.csv))  # before the files are read
    per_file, rows = _read_files(args, base.device_name)
    files = [(ss, yy) for _, ss, yy in per_file]
    cv, cv_pred, folds = _cross_validate_each(per_file, base, args.folds, shares, console)
    sessions, measured = _all_rows(per_file)
    how = ("files weighted equally" if shares is None else
           "file weights " + ", ".join(f"{n} {w:g}" for (n, _, _), w in zip(per_file, shares)))
    console.print(f"fitting on all {len(sessions)} rows ({esc(how)})...")
    result = fit(sessions, measured, base,
                 weights=balanced_weights([len(ss) for ss, _ in files], shares),
                 progress=lambda msg: console.print(f"  {esc(msg)}"))
    residuals = _residuals(per_file, rows, cv_pred, base, folds, shares, console)
    store = calibrated_store(base, result, [n for n, _, _ in per_file], cv, shares, residuals)
    if "underdetermined" in store.provenance:  # fewer rows than fitted parameters
        console.print(f"[yellow]{esc(store.provenance['underdetermined'])}[/]", highlight=False)
    store.save(args.out)
    out = {"out": str(args.out), "parameters": result.op_model,
           **_parameter_groups(result, store.provenance),
           "num_shape_factors": len(result.corrections), "folds": folds,
           "cross_validation": cv, "in_sample": result.train_metrics}
    if args.json:  # figures a file cannot define (R^2 of one run) as null, as the shared fit's
        print(strict_dumps({**out, "cross_validation": {k: finite_metrics(v) for k, v in cv.items()},
                            "in_sample": finite_metrics(result.train_metrics)}, indent=2))
        return 0
    _print(out, base, Console())
    return 0


def _parameter_groups(result: Any, provenance: dict) -> dict:
    """The op model's parameters as a calibration treated them.

    Returns
    -------
    dict
        ``fitted_parameters``: the names fitted, in order; ``held_parameters``: every other
        parameter of the op model -> why it kept the base store's value (not determined by
        these rows, :attr:`core.accuracy.calibrate.FitResult.not_determined`, or not part of
        this fit); ``at_bound``: the fitted ones that ended at a bound of their fit, name ->
        value, side and limit (:func:`core.accuracy.shared_fit.bound_hits`, as
        ``vtrain profile show`` finds them).
    """
    from core.accuracy.shared_fit import bound_hits
    held = {n: (f"not determined by these rows: {result.not_determined[n]}"
                if n in result.not_determined else "not part of this fit")
            for n in result.op_model if n not in result.fitted}
    return {"fitted_parameters": list(result.fitted), "held_parameters": held,
            "at_bound": bound_hits(provenance)}


def _check_measurement_args(args: argparse.Namespace) -> None:
    """Refuse the ``--trace``-only options without ``--trace``, a call without files, a file
    given twice or two files of one name (:func:`_refuse_repeated_files`) and a ``--folds``
    that is neither 0 nor 2 or more.

    Raises
    ------
    ConfigError
        Naming the option at fault (:func:`core.cli.common.field_error`).
    """
    for name in ("session", "step", "classes", "set"):
        if getattr(args, name) is not None:
            raise field_error(f"--{name}", "needs --trace")
    if not args.csv:
        raise field_error("FILE", "give measurement files (or --trace with profiler traces)")
    _refuse_repeated_files(args.csv)
    if args.folds < 0 or args.folds == 1:  # one fold holds nothing out
        raise field_error("--folds", f"{args.folds}: give 2 or more folds, or 0 to skip "
                                     "cross-validation")


def _check_one_store_args(args: argparse.Namespace) -> None:
    """The options of a fit of one store: no ``--gpus``, both ``--profile`` and ``--out``, and an
    ``--out`` that is none of the inputs.

    Raises
    ------
    ConfigError
        Naming the option at fault.
    """
    if args.gpus:
        raise field_error("--gpus", "needs --out-dir")
    for name in ("profile", "out"):
        if not getattr(args, name):
            raise field_error(f"--{name}", "required (or --out-dir for the shared fit)")
    check_outputs([("--out", args.out)], [*args.csv, args.profile])


def _read_files(args: argparse.Namespace, device: str):
    """Read every measurement file of ``args.csv``, each row simulated with the store
    ``--profile`` names (as ``vtrain validate --profile``: rows of a GPU kind without a shipped
    store are read with it); rows of another kind than the store's ``device`` are warned of on
    standard error (their times are fitted with another GPU's figures), and so are rows that
    repeat an earlier one (:func:`core.accuracy.validate.repeated_rows`).

    Returns
    -------
    (list of (str, list of Session, ndarray), list of list of int)
        Per file its name, its usable sessions and their measured iteration times (s, shape
        (rows,)); and per file the row numbers of those sessions.

    Raises
    ------
    ConfigError
        A file without a usable row.
    """
    from core.accuracy.calibrate import measured_sessions
    from core.accuracy.measured import read_measurements
    import os
    import sys

    from core.util.text import printable
    per_file, rows, seen = [], [], {}
    for path in args.csv:
        with row_progress(f"reading {Path(path).name}", args.json) as progress:
            ms = read_measurements(path, progress, profile_path=os.path.abspath(args.profile))
        sessions, measured = measured_sessions(ms)
        if not sessions:
            raise _no_usable_rows(path, ms)
        _warn_repeats(path, ms, seen)
        _warn_unit_slips(path, ms)
        other = sorted({s.cluster.gpu for s in sessions} - {device})
        if other:
            print(printable(f"warning: {path}: rows of {', '.join(other)} fitted with the store "
                            f"of {device} (--profile): another GPU's figures"), file=sys.stderr)
        per_file.append((Path(path).name, sessions, measured))
        rows.append([m.row for m in ms if not m.skip_reason and m.has_time])
    return per_file, rows


def _warn_unit_slips(path: str, ms) -> None:
    """Warn on standard error of the rows of ``ms`` (file ``path``) whose measured time looks
    like a unit slip against the row's store (:func:`core.accuracy.validate.time_unit_slips`,
    as ``vtrain validate`` warns): the fit takes the times as they are, and a column of
    milliseconds drives the parameters to their bounds."""
    import sys

    from core.accuracy.measured import row_where
    from core.accuracy.validate import time_unit_slips
    from core.sim.simulate import session_profile, simulate
    from core.util.text import printable
    slips = time_unit_slips(ms, lambda s: simulate(s, session_profile(s)).report.iteration_time_s)
    lines = {m.row: m.line for m in ms}
    for w in slips[:10]:
        print(printable(f"warning: {path}: {row_where(w['row'], lines.get(w['row'], 0))}, "
                        f"column {w['column']}: {w['message']}"), file=sys.stderr)
    if len(slips) > 10:
        print(printable(f"warning: {path}: {len(slips) - 10} more rows like these"), file=sys.stderr)
    if slips:
        print(printable(f"warning: {path}: the fit takes these times as they are: convert the "
                        "column, or the store's parameters are fitted to another unit"),
              file=sys.stderr)


def _no_usable_rows(path: str, ms) -> Exception:
    """The error of a file none of whose rows a fit can use, with why: the first skipped row's
    reason, or that the predictable rows measured memory only (a fit is of iteration times;
    the memory model has no fitted parameter)."""
    first = next((m for m in ms if m.skip_reason), None)
    memory_only = sum(1 for m in ms if not m.skip_reason and not m.has_time)
    why = (f" ({first.where}: {first.skip_reason})" if first is not None and not memory_only
           else f" ({memory_only} rows measured peak memory only: a fit is of measured iteration "
                "times, and the memory model has no fitted parameter)" if memory_only else "")
    return field_error(path, "no usable rows" + why)


def _warn_repeats(path: str, ms, seen: dict) -> None:
    """Warn on standard error of the rows of ``ms`` (file ``path``) that repeat an earlier one
    of the file (:func:`core.accuracy.validate.repeated_rows`) or of an earlier file: each is
    fitted again, and in the cross-validation a copy in another fold (or file) is a row its
    fit has seen. ``seen`` (:func:`core.accuracy.validate.measurement_key` -> (file, row)) is
    the earlier files' rows, and gets this file's."""
    import sys

    from core.accuracy.measured import row_number_where, row_where
    from core.accuracy.validate import measurement_key, repeated_rows
    from core.util.text import printable
    why = ("(the same session and measurement): fitted again, and in the cross-validation a "
           "copy in another fold is a row its fit has seen")

    lines = {m.row: m.line for m in ms}

    def rows(numbers: list[int]) -> str:  # "row 9 (line 10)", "rows 9 (line 10), ... and 1,240 more"
        more = f" and {len(numbers) - 10:,} more" if len(numbers) > 10 else ""
        named = ", ".join(row_number_where(n, lines.get(n, 0)) for n in numbers[:10])
        return (f"row{'s' if len(numbers) > 1 else ''} {named}"
                f"{more} repeat{'' if len(numbers) > 1 else 's'}")

    for row, again in repeated_rows(ms):
        print(printable(f"warning: {path}: {rows(again)} {row_where(row, lines.get(row, 0))} "
                        f"{why}"), file=sys.stderr)
    own, earlier = {}, {}
    for m in ms:
        if m.skip_reason or m.session is None:
            continue
        key = measurement_key(m)
        if key in seen:  # of an earlier file: one warning per file
            earlier.setdefault(seen[key][0], []).append(m.row)
        own.setdefault(key, (path, m.row))
    for other, again in earlier.items():
        print(printable(f"warning: {path}: {rows(again)} rows of {other} {why}"), file=sys.stderr)
    for key, where in own.items():
        seen.setdefault(key, where)


def _check_file_weights(shares: list[float] | None, n_files: int) -> list[float] | None:
    """``--file-weights`` (None: files weighted equally), checked: one positive finite weight
    per file (only their ratios count).

    Raises
    ------
    ConfigError
        A count other than ``n_files`` or a weight not above 0 or not finite.
    """
    if shares is not None and (len(shares) != n_files or not all(0 < w < math.inf
                                                                    for w in shares)):
        raise field_error("--file-weights", f"needs one positive finite weight per CSV ({n_files}), "
                                       f"got {' '.join(f'{w:g}' for w in shares)}")
    return shares


def _cross_validate_each(per_file, base, folds: int, shares, console: Any):
    """``folds``-fold cross-validation of each file (fit on the other files and the other folds,
    :func:`core.accuracy.calibrate.cross_validate_files`), its figures printed to ``console``.
    A file with fewer usable rows than ``folds`` is cross-validated with one fold per row
    (leave-one-out), one with fewer than 2 not at all; each is noted on ``console``.

    Returns
    -------
    (dict, list of ndarray or None, dict)
        Per file name its error metrics (floats, files cross-validated only); per file its
        out-of-fold predictions (s; None where not cross-validated); per file name the folds
        used (0: none). The first two empty when ``folds`` is 0.
    """
    from core.accuracy.calibrate import cross_validate_files
    from core.util.console import esc
    cv: dict[str, dict[str, float]] = {}
    files = [(ss, yy) for _, ss, yy in per_file]
    cv_pred: list = []
    used: dict[str, int] = {}
    if not folds:
        return cv, cv_pred, used
    for j, (name, sessions, measured) in enumerate(per_file):
        k = min(folds, len(sessions))
        used[name] = k if k >= 2 else 0
        if k < 2:  # nothing to hold out: the row is the whole file
            console.print(f"{esc(name)}: {len(sessions)} usable row: no cross-validation "
                          "(needs 2 rows)", highlight=False)
            cv_pred.append(None)
            continue
        if k < folds:  # each row its own fold, as vtrain validate --cross-validate does
            console.print(f"{esc(name)}: {folds} folds asked, {len(sessions)} usable rows: "
                          f"{k} folds (leave-one-out)", highlight=False)
        console.print(f"cross-validating on {esc(name)} ({len(sessions)} rows, {k} folds)...")
        pred, met = cross_validate_files(files, j, base, folds=k, shares=shares,
                                         progress=lambda msg: console.print(f"  {esc(msg)}"))
        cv_pred.append(pred)
        cv[name] = {kk: float(v) for kk, v in met.items()}
        console.print(f"  {esc(name)}: MAPE {met['mape_percent']:.2f} %, median "
                      f"{met['median_ape_percent']:.2f} %, max {met['max_ape_percent']:.2f} %, "
                      f"R^2 {met['r2']:.4f}")
    return cv, cv_pred, used


def _all_rows(per_file):
    """The sessions of every file in order and their measured times (s, one array)."""
    import numpy as np
    sessions = [s for _, ss, _ in per_file for s in ss]
    measured = np.concatenate([m for _, _, m in per_file])
    return sessions, measured


def _residuals(per_file, rows, cv_pred, base, folds: dict[str, int], shares, console: Any):
    """The store's residual table from the out-of-fold predictions
    (:func:`core.accuracy.calibrate.calibration_residuals`; ``folds``: per file name the folds
    used, 0 for none), which gives every prediction its error band; None (with a note) when
    no file was cross-validated."""
    from core.accuracy.calibrate import calibration_residuals
    from core.util.console import esc
    if not folds:
        console.print("no cross-validation (--folds 0): the store gets no error band")
        return None
    if all(p is None for p in cv_pred):
        console.print("no file was cross-validated: the store gets no error band")
        return None
    # the out-of-fold predictions give every prediction its error band
    return calibration_residuals(
        [(n, ss, yy, rr) for (n, ss, yy), rr in zip(per_file, rows)], cv_pred, base,
        folds=[folds[n] for n, _, _ in per_file], file_weights=shares,
        progress=lambda msg: console.print(f"  {esc(msg)}"))


def _refuse_repeated_files(paths: list[str]) -> None:
    """Refuse a measurement file given twice (the same file by another path, a link, too) and
    two files of one name: a store records each residual by its file's name and row
    (:class:`core.store.residuals.ResidualTable`), and a row fitted and counted twice moves the
    error band (a store whose rows were all given twice gave 3.86-6.09 s for 3.75-6.96 s).
    A path that cannot be read is left to the reading, which names it.

    Raises
    ------
    ConfigError
        Naming the later path and the earlier one (:func:`core.cli.common.field_error`).
    """
    import os

    by_file: dict[tuple[int, int], str] = {}
    by_name: dict[str, str] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in by_file:
            raise field_error(path, f"the same file as {by_file[key]}, given twice: its rows "
                                    "would be fitted and counted in the error band twice; give "
                                    "each file once")
        name = Path(path).name
        if name in by_name:
            raise field_error(path, f"has the name of {by_name[name]} ({name}): the store "
                                    "records each run by its file's name and row, and the two "
                                    "files' rows would be one; give the files different names")
        by_file[key], by_name[name] = path, path


def _run_shared(args: argparse.Namespace, console: Any) -> int:
    """``vtrain calibrate CSV... --out-dir DIR``: the shared fit of several GPU kinds.

    Steps: check ``--gpus``, read the files, refuse a kind no run can calibrate, cross-validate
    the shared fit (``--folds``), fit on every row, write one store per GPU kind and print what
    was fitted (``--json``: one JSON object).
    """
    import numpy as np

    from core.accuracy.calibrate import fit
    from core.accuracy.shared_fit import analytic_bases, finite_metrics, shared_fit_kwargs
    from core.util.console import Console, esc
    from core.util.inputs import strict_dumps

    if args.file_weights:
        raise field_error("--file-weights", "the shared fit weighs every run alike")
    extra = _extra_kinds(args.gpus)
    sessions, measured, names, rows = _read_shared(args)
    base = analytic_bases()
    kw = shared_fit_kwargs(base, sessions, args.kernel_classes)
    kinds_of = np.array([s.cluster.gpu for s in sessions])
    rows_by_kind = {k: int((kinds_of == k).sum()) for k in sorted(set(kinds_of))}
    _refuse_blind_kinds(extra, rows_by_kind)
    say = (lambda msg: console.print(f"  {esc(msg)}"))
    cv, cv_by_kind, residuals = _cross_validate_shared(args, sessions, measured, names, rows,
                                                       base, kw, kinds_of, rows_by_kind, console)
    console.print(f"fitting the shared parameters on all {len(sessions)} rows...")
    result = fit(sessions, measured, base, progress=say, **kw)
    # the parameters fitted: those of kw["params"] the rows' critical paths depend on (fit)
    names = _write_shared(args, result, extra, rows_by_kind, base, cv, cv_by_kind, residuals,
                          list(result.fitted), console)
    out = {"out_dir": str(Path(args.out_dir)), "stores": list(names.values()),
           "parameters": result.op_model, "fitted_parameters": list(result.fitted),
           "not_determined": dict(result.not_determined),
           "rows_by_kind": rows_by_kind, "cross_validation": cv,
           "cross_validation_by_kind": cv_by_kind,
           "in_sample": finite_metrics(result.train_metrics)}
    if args.json:
        print(strict_dumps(out, indent=2))
        return 0
    _print_shared(out, Console())
    return 0


def _extra_kinds(gpus: list[str]) -> list[str]:
    """The GPU kinds ``--gpus`` names (canonical names; :func:`core.plan.cluster.gpu_kind`).

    Raises
    ------
    ConfigError
        A name that is no shipped GPU kind.
    """
    from core.plan.cluster import GPU_KINDS, gpu_kind
    extra = [gpu_kind(g) for g in gpus]
    unknown = [g for g, k in zip(gpus, extra) if k not in GPU_KINDS]
    if unknown:
        raise field_error("--gpus", f"{', '.join(unknown)}: no shipped GPU kind "
                                    f"(known: {', '.join(GPU_KINDS)})")
    return extra


def _read_shared(args: argparse.Namespace):
    """Every usable row of the files of ``args.csv``, pooled.

    Returns
    -------
    (list of Session, ndarray, list of str, list of int)
        The sessions, their measured iteration times (s, shape (rows,)), each row's file name
        and each row's number in its file.

    Raises
    ------
    ConfigError
        A file without a usable row.
    """
    import numpy as np

    from core.accuracy.calibrate import measured_sessions
    from core.accuracy.measured import read_measurements
    sessions, measured, names, rows, seen = [], [], [], [], {}
    for path in args.csv:
        with row_progress(f"reading {Path(path).name}", args.json) as progress:
            ms = read_measurements(path, progress)
        _warn_repeats(path, ms, seen)
        _warn_unit_slips(path, ms)
        ss, yy = measured_sessions(ms)
        if not ss:
            raise _no_usable_rows(path, ms)
        sessions += ss
        measured.append(yy)
        names += [Path(path).name] * len(ss)
        rows += [m.row for m in ms if not m.skip_reason and m.has_time]
    return sessions, np.concatenate(measured), names, rows


def _refuse_blind_kinds(extra: list[str], rows_by_kind: dict[str, int]) -> None:
    """Refuse a ``--gpus`` kind without a data sheet of its own (its peaks are another part's)
    and without runs in the data: nothing would set the share of the peaks it sustains.

    Raises
    ------
    ConfigError
        Naming those kinds (``--gpus``).
    """
    from core.store.gpu_spec import kind_fits_peak_fraction
    blind = [k for k in extra if kind_fits_peak_fraction(k) and not rows_by_kind.get(k)]
    if blind:  # its peaks are another part's: without its own runs nothing sets its share
        raise field_error("--gpus", f"{', '.join(blind)} has no data sheet of its own: its store "
                                    "needs runs of that GPU in the data to fit the share of the "
                                    "reference peaks it sustains (peak_fraction)")


def _cross_validate_shared(args: argparse.Namespace, sessions, measured, names, rows, base, kw,
                           kinds_of, rows_by_kind: dict[str, int], console: Any):
    """``args.folds``-fold cross-validation of the shared fit over all rows (each row its own
    fold when there are fewer rows than folds: ``args.folds`` is lowered, with a note);
    ``kinds_of`` (array of str, one per row) and ``rows_by_kind`` give the GPU kinds broken out.

    Returns
    -------
    (dict, dict, ResidualTable or None)
        The error metrics over all rows (key ``"all rows"``), the error metrics by GPU kind
        (non-finite figures as None, :func:`core.accuracy.shared_fit.finite_metrics`), and the
        residual table of the out-of-fold predictions; empty dicts and None when ``args.folds``
        is 0.

    Raises
    ------
    ConfigError
        Fewer than 2 usable rows (``--folds``).
    """
    from core.accuracy.calibrate import cross_validate_files
    from core.accuracy.metrics import error_metrics
    from core.accuracy.shared_fit import finite_metrics
    from core.store.interval import residual_table_from_cv
    from core.util.console import esc
    cv: dict[str, dict[str, float]] = {}
    cv_by_kind: dict[str, dict[str, float]] = {}
    if not args.folds:
        console.print("no cross-validation (--folds 0): the stores get no error band")
        return cv, cv_by_kind, None
    if len(sessions) < 2:
        raise field_error("--folds", f"{len(sessions)} usable rows: cross-validation needs 2")
    if len(sessions) < args.folds:  # each row its own fold (leave-one-out)
        console.print(f"{args.folds} folds asked, {len(sessions)} usable rows: "
                      f"{len(sessions)} folds (leave-one-out)")
        args.folds = len(sessions)
    console.print(f"cross-validating the shared fit on {len(sessions)} rows ({args.folds} folds)...")
    pred, met = cross_validate_files([(sessions, measured)], 0, base, folds=args.folds,
                                     progress=lambda msg: console.print(f"  {esc(msg)}"), **kw)
    cv["all rows"] = finite_metrics({k: float(v) for k, v in met.items()})
    for k in rows_by_kind:
        sel = kinds_of == k
        cv_by_kind[k] = finite_metrics(
            {a: float(b) for a, b in error_metrics(pred[sel], measured[sel]).items()})
    residuals = residual_table_from_cv(
        sessions, measured, pred, names, rows,
        procedure=f"cross_validated: {args.folds}-fold cross-validation over all runs, folds "
                  "from numpy default_rng(0), each fold fitted with shared parameters on "
                  "the other folds (core.accuracy.calibrate.cross_validate_files)")
    return cv, cv_by_kind, residuals


def _write_shared(args: argparse.Namespace, result, extra, rows_by_kind, base, cv, cv_by_kind,
                  residuals, params, console: Any) -> dict[str, str]:
    """Write one calibrated store per GPU kind of the data (but the A100's, calibrated on the
    vTrain authors' data, unless ``--gpus`` names it) and per ``--gpus`` kind into
    ``--out-dir`` (created; none may overwrite an input).

    Returns
    -------
    dict
        GPU kind -> file name written in ``--out-dir``.

    Raises
    ------
    ConfigError
        A store's path is one of the input files (``--out-dir``).
    """
    from core.accuracy.shared_fit import shared_stores
    from core.util.text import file_name_part
    # the A100's store is fitted with the full procedure on the vTrain authors' data: its runs
    # here inform the shared parameters, its store is written only when --gpus names it
    kinds = list(dict.fromkeys([k for k in rows_by_kind if k != "A100-SXM4-80GB"] + extra))
    if "A100-SXM4-80GB" in rows_by_kind and "A100-SXM4-80GB" not in extra:
        console.print("A100-SXM4-80GB runs inform the shared fit; its store (calibrated on the "
                      "vTrain authors' data) is not written (name it in --gpus to write it)")
    stores = shared_stores(result, kinds, base, [Path(p).name for p in args.csv], cv, rows_by_kind,
                           cv_by_kind, residuals, params)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # checked before the fit; made, no input is in it
    check_outputs([("--out-dir", out_dir / f"{k}.h5") for k in stores], args.csv)
    names = {kind: f"{file_name_part(kind)}.h5" for kind in stores}  # kinds come from the CSVs
    for kind, store in stores.items():
        store.save(out_dir / names[kind])
    return names


def _print_shared(out: dict, console: Any) -> None:
    """The shared fit as tables: parameters, then the cross-validated error by GPU kind."""
    from rich.table import Table

    from core.util.console import esc
    console.print(f"[bold]wrote {', '.join(esc(s) for s in out['stores'])} to {esc(out['out_dir'])}[/]")
    t = Table(title="Shared parameters (fractions of each GPU's data-sheet peaks)",
              title_justify="left")
    t.add_column("parameter")
    t.add_column("fitted", justify="right")
    for name in out["fitted_parameters"]:
        t.add_row(esc(name), f"{out['parameters'][name]:.4g}")
    console.print(t)
    e = Table(title="Error (cross-validated; in-sample last)", title_justify="left")
    for col in ("rows", "n", "MAPE %", "median APE %", "max APE %"):
        e.add_column(col, justify="left" if col == "rows" else "right")
    groups = [("all rows", out["cross_validation"].get("all rows"))]
    groups += list(out["cross_validation_by_kind"].items())
    groups.append(("all rows, in-sample", out["in_sample"]))
    for label, met in groups:
        if met:
            e.add_row(esc(label), str(int(met["n"])), f"{met['mape_percent']:.2f}",
                      f"{met['median_ape_percent']:.2f}", f"{met['max_ape_percent']:.2f}")
    console.print(e)


def _print(out: dict, base: Any, console: Any) -> None:
    """The calibration as tables: the fitted parameters beside the base store's (each that
    ended at a bound of its fit marked), those held at the base store's values with why, the
    cross-validated error per file and the in-sample error."""
    from rich.table import Table

    from core.util.console import esc
    from core.model.ops import effective_op_model

    console.print(f"[bold]wrote {esc(out['out'])}[/]: calibrated from {esc(base.summary())}")
    own = effective_op_model(base.op_model)  # what the base store times with

    def was(name: str) -> str:
        return "-" if own.get(name) is None else f"{own[name]:.4g}"

    t = Table(title="Fitted parameters", title_justify="left")
    for col in ("parameter", "base", "fitted", "note"):
        t.add_column(col, justify="right" if col in ("base", "fitted") else "left")
    for name in out["fitted_parameters"]:
        hit = out["at_bound"].get(name)
        note = f"[yellow]at its {hit['bound']} bound {hit['limit']:g}[/]" if hit else ""
        t.add_row(esc(name), was(name), f"{out['parameters'][name]:.4g}", note)
    console.print(t)
    if out["at_bound"]:
        console.print("[yellow]a fitted parameter at a bound of its fit is a sign of a term the "
                      "op model lacks (docs/accuracy.md)[/]", highlight=False)
    h = Table(title="Held at the base store's values", title_justify="left")
    for col in ("parameter", "value", "why"):
        h.add_column(col, justify="right" if col == "value" else "left")
    for name, why in out["held_parameters"].items():
        h.add_row(esc(name), f"{out['parameters'][name]:.4g}", esc(why))
    console.print(h)
    console.print(f"{out['num_shape_factors']:,} per-shape op-time factors", highlight=False)
    cols = (("rows", "n", "d"), ("MAPE %", "mape_percent", ".2f"),
            ("median APE %", "median_ape_percent", ".2f"), ("max APE %", "max_ape_percent", ".2f"),
            ("R^2", "r2", ".4f"))
    e = Table(title="Error (cross-validated per file, then in-sample on all rows)",
              title_justify="left")
    e.add_column("data")
    for label, _, _ in cols:
        e.add_column(label, justify="right")

    def cells(met: dict) -> list[str]:  # R^2 of one row is no figure (as vtrain validate)
        return ["n/a (one row)" if k == "r2" and k in met and met.get("n") == 1 else
                format(int(met[k]) if f == "d" else float(met[k]), f) if k in met else "-"
                for _, k, f in cols]

    for name, met in out["cross_validation"].items():
        e.add_row(esc(name), *cells(met))
    e.add_row("all rows, in-sample", *cells(out["in_sample"]))
    console.print(e)
