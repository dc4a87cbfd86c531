"""``vtrain validate``, ``vtrain calibrate`` and ``vtrain profile import-nccl-tests``.

Kept apart from :mod:`core.cli`, which only registers these subcommands.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path
from typing import Any

from .config import ConfigError, FieldError

__all__ = ["add_accuracy_parsers", "add_import_parser", "run_validate", "run_calibrate",
           "run_import_nccl"]


def add_accuracy_parsers(sub: Any) -> None:
    """Register ``validate`` and ``calibrate`` on ``vtrain``'s sub-parsers."""
    v = sub.add_parser(
        "validate", help="predict measured iteration times and report the error",
        description="Predict every row of a measurement CSV (the vTrain authors' single- or "
                    "multi-node layout, or the general layout with named columns; see "
                    "docs/accuracy.md) and print MAPE, median and max absolute percentage "
                    "error, R^2 and the error by model size, t and p. Rows the simulator does "
                    "not support are skipped with their reason.")
    v.add_argument("csv", metavar="CSV")
    v.add_argument("--profile", metavar="STORE.h5",
                   help="profile store for every row (default: the shipped store of each row's GPU)")
    v.add_argument("--cross-validate", type=int, metavar="K", default=0,
                   help="k-fold cross-validation: refit the profile's parameters on K-1 folds "
                        "and predict the held-out fold (accuracy on data not used in the fit)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.add_argument("--out", metavar="FILE.csv", help="write every row with its prediction")
    v.add_argument("--plot", metavar="FILE.png", help="plot predicted against measured (log axes)")

    c = sub.add_parser(
        "calibrate", help="fit a profile's parameters to measured iteration times",
        description="Fit the free parameters of a profile store (op model efficiencies and "
                    "overheads, inter-node efficiency) and per-shape op-time factors to "
                    "measured iteration times (files weighted equally unless --file-weights "
                    "says otherwise), report per file the "
                    "k-fold cross-validated error of that fit and write a calibrated store whose provenance lists the data, the "
                    "parameters and the cross-validated error.")
    c.add_argument("csv", metavar="CSV", nargs="+")
    c.add_argument("--profile", metavar="STORE.h5", required=True, help="store to start from")
    c.add_argument("--out", metavar="STORE.h5", required=True)
    c.add_argument("--folds", type=int, default=5, metavar="K",
                   help="cross-validation folds per file (0: skip cross-validation)")
    c.add_argument("--file-weights", type=float, nargs="+", metavar="W",
                   help="share of the fit each CSV gets, one per CSV in order (default: equal), "
                        "e.g. 1 4 to let the second file count four times as much as the first")


def add_import_parser(psub: Any) -> None:
    """Register ``profile import-nccl-tests`` on the ``profile`` sub-parsers."""
    imp = psub.add_parser("import-nccl-tests",
                          help="add collective curves from nccl-tests output to a store")
    imp.add_argument("files", metavar="FILE", nargs="+",
                     help="nccl-tests stdout or the vTrain authors' CSV form, one file per run")
    imp.add_argument("--into", metavar="STORE.h5", required=True)
    imp.add_argument("--group-size", type=int, help="GPUs per run, when the file does not say")
    imp.add_argument("--kind", choices=["all_reduce", "all_gather", "reduce_scatter", "send_recv"],
                     help="collective, when the file does not say")
    imp.add_argument("--knots", type=int, metavar="N",
                     help="store a piecewise log-log fit with N knots instead of every measured size")


def _usage(field: str, msg: str) -> ConfigError:
    return ConfigError([FieldError(field, msg)])


def _predictor(profile: str | None):
    from .simulate import open_profile, profile_path, simulate

    store = open_profile(profile) if profile else None

    def predict(session) -> float:
        return simulate(session, store or open_profile(profile_path(session))).report.iteration_time_s
    return predict


def run_validate(args: argparse.Namespace) -> int:
    """``vtrain validate``: see :func:`add_accuracy_parsers`."""
    import numpy as np
    from rich.table import Table

    from .console import Console
    from .validate import ValidationResult, predict_rows, read_measurements

    if args.cross_validate == 1 or args.cross_validate < 0:
        raise _usage("--cross-validate", "needs at least 2 folds")
    ms = read_measurements(args.csv)
    if args.cross_validate:
        from .calibrate import cross_validate, measured_sessions
        from .simulate import open_profile, profile_path
        sessions, measured = measured_sessions(ms)
        if len(sessions) < args.cross_validate:
            raise _usage("--cross-validate", f"{len(sessions)} usable rows are fewer than "
                                             f"{args.cross_validate} folds")
        base = open_profile(args.profile or profile_path(sessions[0]))
        err = Console(stderr=True)
        pred_used, _ = cross_validate(sessions, measured, base, folds=args.cross_validate,
                                      progress=lambda msg: err.print(msg, highlight=False))
        pred = np.full(len(ms), np.nan)
        pred[[i for i, m in enumerate(ms) if not m.skip_reason]] = pred_used
        result = ValidationResult(ms, pred)
    else:
        result = predict_rows(ms, _predictor(args.profile))
    metrics = result.metrics()
    metrics["cross_validated_folds"] = args.cross_validate
    if args.out:
        _write_rows(result, args.out)
    if args.plot:
        _plot(result, args.plot, metrics)
    if args.json:
        print(json.dumps(metrics))
        return 0
    console = Console()
    if args.cross_validate:
        how = (f"{args.cross_validate}-fold cross-validated: each fold predicted by the profile "
               "refitted on the other folds of this file alone")
    else:
        how = _profile_note(args.profile, result, Path(args.csv).name)
    console.print(f"[bold]{Path(args.csv).name}[/]: {metrics['n']} rows predicted, "
                  f"{metrics['skipped']} skipped; {how}")
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("MAPE", f"{metrics['mape_percent']:.2f} %")
    t.add_row("median APE", f"{metrics['median_ape_percent']:.2f} %")
    t.add_row("max APE", f"{metrics['max_ape_percent']:.2f} %")
    t.add_row("R^2", f"{metrics['r2']:.4f}")
    console.print(t)
    for key, title in (("model", "model size"), ("t", "tensor parallel t"), ("p", "pipeline parallel p")):
        g = Table(title=f"error by {title}", title_justify="left")
        for col in (title, "rows", "MAPE %", "max APE %"):
            g.add_column(col, justify="right")
        for label, n, mape, mx in result.by_group(key):
            g.add_row(label, str(n), f"{mape:.2f}", f"{mx:.2f}")
        console.print(g)
    skipped = [m for m in ms if m.skip_reason]
    for m in skipped[:20]:
        console.print(f"[yellow]skipped row {m.row}:[/] {m.skip_reason}", highlight=False)
    if len(skipped) > 20:
        console.print(f"[yellow]... and {len(skipped) - 20} more skipped rows (see --out)[/]")
    return 0


def _profile_note(profile: str | None, result, csv_name: str) -> str:
    """How the predictions relate to the profile: in-sample when it was calibrated on the file."""
    from .simulate import open_profile, profile_path

    sessions = [m.session for m in result.measurements if m.session is not None]
    if not sessions:
        return "no row could be predicted"
    store = open_profile(profile or profile_path(sessions[0]))
    prov = store.provenance or {}
    name = f"profile {store.device_name} ({prov.get('method', 'unknown method')})"
    if prov.get("method") == "calibrated" and csv_name in str(prov.get("data", "")):
        return (f"{name}, calibrated on this file: in-sample figures (use --cross-validate K "
                "for out-of-sample ones)")
    return name


def _write_rows(result, path: str) -> None:
    import numpy as np

    from .session import atomic_write_text

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["row", "model", "num_gpus", "tensor_parallel", "pipeline_parallel", "data_parallel",
                "micro_batch_size", "global_batch_size", "measured_iteration_time_s",
                "predicted_iteration_time_s", "error_percent", "skip_reason"])
    for m, pred in zip(result.measurements, result.predicted_s):
        s = m.session
        pl = s.plan if s else None
        err = "" if np.isnan(pred) else f"{(pred - m.measured_s) / m.measured_s * 100:.3f}"
        w.writerow([m.row, m.group.get("model", ""), pl.num_gpus if pl else "",
                    pl.tensor_parallel if pl else "", pl.pipeline_parallel if pl else "",
                    pl.data_parallel if pl else "", pl.micro_batch_size if pl else "",
                    pl.global_batch_size if pl else "", f"{m.measured_s:.6g}",
                    "" if np.isnan(pred) else f"{pred:.6g}", err, m.skip_reason])
    atomic_write_text(path, buf.getvalue())


def _plot(result, path: str, metrics: dict) -> None:
    import matplotlib
    import numpy as np
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    used = result.used
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
    ax.set_title(f"MAPE {metrics['mape_percent']:.2f} %, R² {metrics['r2']:.3f}"
                 + (f" ({folds}-fold CV)" if folds else ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    from .atomic import atomic_target
    with atomic_target(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def run_calibrate(args: argparse.Namespace) -> int:
    """``vtrain calibrate``: see :func:`add_accuracy_parsers`."""
    import numpy as np

    from .console import Console
    from .calibrate import (balanced_weights, calibrated_store, cross_validate_files, fit,
                            measured_sessions)
    from .profile_store import ProfileStore
    from .validate import read_measurements

    console = Console(stderr=True)
    base = ProfileStore.open(args.profile)
    per_file = []
    for path in args.csv:
        ms = read_measurements(path)
        sessions, measured = measured_sessions(ms)
        if not sessions:
            raise _usage(path, "no usable rows")
        per_file.append((Path(path).name, sessions, measured))
    shares = args.file_weights
    if shares is not None and (len(shares) != len(per_file) or not all(w > 0 for w in shares)):
        raise _usage("--file-weights", f"needs one positive weight per CSV ({len(per_file)}), "
                                       f"got {' '.join(f'{w:g}' for w in shares)}")
    cv: dict[str, dict[str, float]] = {}
    files = [(ss, yy) for _, ss, yy in per_file]
    if args.folds:
        for j, (name, sessions, measured) in enumerate(per_file):
            console.print(f"cross-validating on {name} ({len(sessions)} rows, {args.folds} folds)...")
            _, met = cross_validate_files(files, j, base, folds=args.folds, shares=shares,
                                          progress=lambda msg: console.print(f"  {msg}"))
            cv[name] = {k: float(v) for k, v in met.items()}
            console.print(f"  {name}: MAPE {met['mape_percent']:.2f} %, median "
                          f"{met['median_ape_percent']:.2f} %, max {met['max_ape_percent']:.2f} %, "
                          f"R^2 {met['r2']:.4f}")
    sessions = [s for _, ss, _ in per_file for s in ss]
    measured = np.concatenate([m for _, _, m in per_file])
    how = ("files weighted equally" if shares is None else
           "file weights " + ", ".join(f"{n} {w:g}" for (n, _, _), w in zip(per_file, shares)))
    console.print(f"fitting on all {len(sessions)} rows ({how})...")
    result = fit(sessions, measured, base,
                 weights=balanced_weights([len(ss) for ss, _ in files], shares),
                 progress=lambda msg: console.print(f"  {msg}"))
    store = calibrated_store(base, result, [n for n, _, _ in per_file], cv, shares)
    store.save(args.out)
    out = {"out": str(args.out), "parameters": result.op_model,
           "num_shape_factors": len(result.corrections), "cross_validation": cv,
           "in_sample": result.train_metrics}
    print(json.dumps(out, indent=2))
    return 0


def run_import_nccl(args: argparse.Namespace) -> int:
    """``vtrain profile import-nccl-tests``: add each file's curve to the store (atomic save)."""
    from .nccl_tests import fit_curve, read_nccl_tests
    from .profile_store import ProfileStore

    store = ProfileStore.open(args.into)
    imported = []
    for f in args.files:
        curve = read_nccl_tests(f, kind=args.kind, group_size=args.group_size)
        if args.knots:
            curve = fit_curve(curve, args.knots)
        store.add_collective(curve.kind, curve.group_size, curve.nbytes, curve.time_s)
        imported.append(f"{Path(f).name}: {curve.kind}/{curve.group_size}")
        print(f"{f}: {curve.kind} on {curve.group_size} GPUs, {curve.nbytes.size} "
              f"{'knots' if args.knots else 'sizes'} ({curve.nbytes[0]:.0f}-{curve.nbytes[-1]:.0f} bytes)")
    store.provenance = {**store.provenance, "collectives_imported": "; ".join(imported)
                        + (f" (piecewise log-log fit, {args.knots} knots)" if args.knots else "")}
    store.save(args.into)
    print(f"wrote {args.into}")
    return 0
