"""Out-of-sample accuracy on the published runs of modern GPUs, row by row, as a Markdown table.

Runs ``vtrain validate ../shared/data/public-modern/published_runs.sessions.jsonl --cross-validate K
--json`` (the shared fit of the GPU kinds, docs/accuracy.md) and prints, per predicted row, the
GPU, model, precision, measured and held-out predicted times, the error and the MFU at both
times (Megatron's model FLOPs over the data-sheet peak of the row's precision: the sanity
check, 30-60 % for large runs), then the figures by group and the skipped rows' causes.

Run: ``python benchmarks/bench_published.py [--folds 5] [--runs FILE] [--kernel-classes]`` (a minute or two).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RUNS = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"


def main() -> int:
    """Print the tables (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--runs", default=str(RUNS), help="measurement file (default: the published "
                    "runs' sessions, JSON lines)")
    ap.add_argument("--kernel-classes", action="store_true", help="the shared fit also fits the "
                    "grouped expert GEMM and FlashAttention efficiencies (docs/accuracy.md, sixth "
                    "round)")
    args = ap.parse_args()
    from core.cli import main as vtrain
    buf = io.StringIO()
    argv = (["validate", args.runs, "--json"]
            + (["--cross-validate", str(args.folds)] if args.folds else [])
            + (["--kernel-classes"] if args.kernel_classes and args.folds else []))
    with redirect_stdout(buf):
        rc = vtrain(argv)
    if rc:
        return rc
    doc = json.loads(buf.getvalue())
    how = f"{args.folds}-fold cross-validated" if args.folds else "shipped stores"
    print(f"{doc['n']} rows predicted ({how}), {doc['skipped']} skipped; "
          f"MAPE {doc['mape_percent'] if doc['n'] else float('nan'):.2f} %")
    if doc.get("interval_rows"):  # each row's band from the other folds' residuals
        print(f"{doc['interval_nominal_coverage']:.0%} error band on {doc['interval_rows']} rows: "
              f"coverage {100 * doc['interval_coverage']:.1f} %, median width "
              f"{doc['interval_median_width_percent']:.1f} % of the prediction")
    print()
    print("| row | GPU | model | precision | measured s | predicted s | error % | MFU measured | MFU predicted |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for r in doc["rows"]:
        if r["predicted_s"] is None:
            continue
        mfu = [f"{100 * x:.0f} %" if x is not None else "-" for x in (r["mfu_at_measured"],
                                                                       r["mfu_at_predicted"])]
        print(f"| {r['row']} | {r['gpu']} | {r['model']} | {r['precision']} | {r['measured_s']:.3f} | "
              f"{r['predicted_s']:.3f} | {r['error_percent']:+.1f} | {mfu[0]} | {mfu[1]} |")
    for key in ("gpu", "kind", "precision"):
        print(f"\n| {key} | rows | MAPE % | max APE % |\n|---|---:|---:|---:|")
        for g in doc["by_group"].get(key, []):
            print(f"| {g['label']} | {g['n']} | {g['mape_percent']:.2f} | {g['max_ape_percent']:.2f} |")
    print("\n| skipped for | rows |\n|---|---:|")
    for cause, n in doc["skipped_by_cause"].items():
        print(f"| {cause} | {n} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
