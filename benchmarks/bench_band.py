"""Held-out coverage and width of the error band on the shipped stores' residual tables, in seconds.

The stores' residual tables hold the out-of-fold predictions of their calibration runs
(docs/accuracy.md "Error band"); this script splits each table into random folds and gives
every row the band built from the other folds' rows alone
(:func:`core.store.interval.cross_conformal`: the rule that picks the runs like the plan is
applied inside each fold, and no row's residual enters its own band). It prints, per store and
per fold seed, the coverage and median width (percent of the prediction) of the band with the
runs-like-the-plan rule and, as the baseline, of the band grouped by node class only (the table
without its feature columns), over all rows and by model family (dense, and with experts).

No fit is run: this is the band's part of ``benchmarks/bench_published.py`` (the modern GPUs'
shared table, whose residuals are that script's cross-validated predictions) and of
``benchmarks/bench_accuracy.py``'s ``band_figures`` (the A100 table), without the fits.

Run: ``python benchmarks/bench_band.py [--coverage 0.9] [--folds 5] [--seeds 5] [STORE.h5 ...]``
(about 2 s of CPU per store and seed on the A100 table, far less on the modern one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.accuracy.metrics import interval_metrics  # noqa: E402
from core.store.interval import cross_conformal  # noqa: E402
from core.store.profile_store import ProfileStore  # noqa: E402
from core.store.residuals import RESIDUAL_SETS, ResidualTable  # noqa: E402

#: The modern GPUs share one residual table (every modern store holds it); the A100 its own.
STORES = ("H100-SXM5-80GB.h5", "A100-SXM4-80GB.h5")


def node_class_only(table: ResidualTable) -> ResidualTable:
    """``table`` without its feature columns: bands grouped by node class only (the baseline)."""
    return ResidualTable(**{c: getattr(table, c) for c in table.COLUMNS}, procedure=table.procedure)


def figures(table: ResidualTable, coverage: float, folds: int, seed: int) -> dict[str, dict]:
    """Held-out band metrics (:func:`core.accuracy.metrics.interval_metrics`) of the
    ``cross_validated`` rows: all, dense, and with experts (when the table has families)."""
    low, high = cross_conformal(table, coverage, folds=folds, seed=seed)
    cv = table.set == "cross_validated"
    parts = {"all": cv}
    if table.has_features:
        moe = np.char.find(table.family.astype(str), "moe") >= 0
        parts.update(dense=cv & ~moe, moe=cv & moe)
    return {k: interval_metrics(table.measured_s[s], table.predicted_s[s], low[s], high[s])
            for k, s in parts.items() if s.any()}


def _fmt(m: dict) -> str:
    if m["interval_coverage"] is None:
        return "no band" if m["interval_rows"] else "-"
    return (f"{100 * m['interval_coverage']:5.1f} % of {m['interval_rows']:3d}, "
            f"width {m['interval_median_width_percent']:6.1f} %")


def main() -> int:
    """Print the figures (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="*", help="profile stores (default: "
                    + ", ".join(f"profiles/{s}" for s in STORES) + ")")
    ap.add_argument("--coverage", type=float, default=0.9)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=5, help="fold seeds 0..N-1")
    args = ap.parse_args()
    paths = args.stores or [str(ROOT / "profiles" / s) for s in STORES]
    for path in paths:
        table = ProfileStore.open(path).residuals
        if table is None:
            print(f"{Path(path).name}: no residuals")
            continue
        sets = ", ".join(f"{int((table.set == k).sum())} {k}" for k in RESIDUAL_SETS
                         if table.has_set(k))
        if table.has_set("feature_transfer"):
            sets += ": the feature_transfer rows are no calibration runs, never held out"
        print(f"{Path(path).name}: {len(table)} residuals ({sets}), {args.coverage:.0%} band, "
              f"{args.folds} held-out folds")
        for label, t in (("node class only", node_class_only(table)), ("runs like the plan", table)):
            cpu = time.process_time()
            for seed in range(args.seeds):
                m = figures(t, args.coverage, args.folds, seed)
                print(f"  {label:18s} seed {seed}: " + "; ".join(f"{k} {_fmt(v)}" for k, v in m.items()))
            print(f"  ({time.process_time() - cpu:.1f} s CPU)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
