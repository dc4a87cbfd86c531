"""Add the ``feature_transfer`` residual set to a shipped store's residual table, nothing refitted.

The set (:data:`core.store.residuals.RESIDUAL_SETS`, :mod:`core.store.interval`) is the error
measured when a model calibrated without a run predicts runs whose features it did not see: a
plan with features none of the store's calibration runs had (FlashAttention, no recomputation,
... on the A100 store, whose runs are all full recomputation, fp16 and unfused attention) gets
the hull of its in-range band and this set's band. Its rows are the out-of-fold predictions of
the published runs on modern GPUs (``../shared/data/public-modern/published_runs.sessions.jsonl``,
5-fold cross-validation of the shared fit: ``benchmarks/bench_published.py --folds 5``, i.e.
``vtrain validate ... --cross-validate 5``), which every modern store keeps as its
``cross_validated`` residuals (docs/accuracy.md "Error band"); they carry FlashAttention, no,
selective and full recomputation, BF16 and FP8, cp and ep.

The script copies the ``cross_validated`` rows of ``--from`` (default the H100 SXM5 store),
every column kept, as ``feature_transfer`` rows into each target store (default the A100
store; rows of that set already there are replaced), notes the source in the table's
procedure and the store's provenance (``feature_transfer_residuals``: what, where from, the
source file's SHA-256, the date, the command), writes the store back and checks that its
other residual rows (values and features), op tables, collectives and other provenance are
unchanged: the store is not refitted, and its in-range band is the same. Then run
``scripts/store_images.py``.

Run: ``python scripts/feature_transfer.py [--from STORE.h5] [--check] [TARGET.h5 ...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SOURCE = ROOT / "profiles" / "H100-SXM5-80GB.h5"
TARGETS = (ROOT / "profiles" / "A100-SXM4-80GB.h5",)
#: Where the table's procedure text for the set starts (replaced on a re-run).
MARK = "; feature_transfer: "
#: The provenance entry the script writes.
KEY = "feature_transfer_residuals"


def transfer_rows(source):
    """The ``cross_validated`` rows of ``source`` (a ResidualTable with the feature columns) as
    ``feature_transfer`` rows. SystemExit naming the rule when it has none or lacks features."""
    import numpy as np

    from core.store.residuals import FEATURE_COLUMNS
    if (source is None or not source.has_features
            or source.plan_feature_columns != FEATURE_COLUMNS):
        raise SystemExit("the source store's residual table must have every feature column "
                         f"({', '.join(FEATURE_COLUMNS)})")
    cv = source.set == "cross_validated"
    if not cv.any():
        raise SystemExit("the source store's residual table has no cross_validated rows")
    rows = source.subset(cv)
    return dataclasses.replace(rows, set=np.array(["feature_transfer"] * len(rows)))


def with_transfer(table, rows, note: str):
    """``table`` without any ``feature_transfer`` rows, followed by ``rows``, its procedure
    with ``note`` in place of an older one."""
    base = table.subset(table.set != "feature_transfer")
    if base.feature_columns != rows.feature_columns:
        raise SystemExit(f"the target's residual table has feature columns "
                         f"{base.feature_columns}, the source's {rows.feature_columns}")
    out = base.concat(rows)
    return dataclasses.replace(out, procedure=base.procedure.split(MARK)[0] + MARK + note)


def carry_over(table, path: Path):
    """``table`` (a new residual table of the store at ``path``, e.g. a refit's) followed by the
    ``feature_transfer`` rows the store at ``path`` holds, with their procedure note, and that
    store's provenance entry for them (:data:`KEY`); ``(table, None)`` when it has none. A refit
    (``benchmarks/bench_accuracy.py --write`` or ``--residuals-only``) writes the table anew and
    keeps the set this way."""
    from core.store.profile_store import ProfileStore

    if not Path(path).is_file():
        return table, None
    old = ProfileStore.open(path)
    t = old.residuals
    if t is None or not t.has_set("feature_transfer"):
        return table, None
    rows = t.subset(t.set == "feature_transfer")
    note = t.procedure.split(MARK, 1)[1] if MARK in t.procedure else "copied earlier"
    return with_transfer(table, rows, note), old.provenance.get(KEY)


def _without_transfer(store) -> bytes:
    """The image of ``store`` (:func:`core.store.image.to_image`) without its ``feature_transfer``
    rows, their procedure note and their provenance: what must not change."""
    from core.store.image import to_image

    saved = store.residuals, store.provenance
    table = store.residuals
    if table is not None:
        table = dataclasses.replace(table.subset(table.set != "feature_transfer"),
                                    procedure=table.procedure.split(MARK)[0])
    store.residuals = table
    store.provenance = {k: v for k, v in store.provenance.items() if k != KEY}
    try:
        return to_image(store)
    finally:
        store.residuals, store.provenance = saved


def main() -> int:
    """Add the set to the targets (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help="stores to write (default: "
                    + ", ".join(str(p.relative_to(ROOT)) for p in TARGETS) + ")")
    ap.add_argument("--from", dest="source", default=str(SOURCE),
                    help=f"store whose cross_validated residuals are copied (default "
                         f"{SOURCE.relative_to(ROOT)})")
    ap.add_argument("--check", action="store_true", help="report only, write nothing")
    args = ap.parse_args()
    import numpy as np

    from core.store.profile_store import ProfileStore

    src_path = Path(args.source)
    source = ProfileStore.open(src_path).residuals
    rows = transfer_rows(source)
    digest = hashlib.sha256(src_path.read_bytes()).hexdigest()
    date = datetime.date.today().isoformat()
    files = ", ".join(sorted(set(rows.file.tolist())))
    note = (f"the {len(rows)} cross_validated rows of {src_path.name} (sha256 {digest[:16]}), "
            f"copied {date}: {source.procedure}")
    for path in args.targets or [str(p) for p in TARGETS]:
        store = ProfileStore.open(path)
        old = store.residuals
        if old is None:
            raise SystemExit(f"{path}: no residual table to add the set to")
        new = with_transfer(old, rows, note)
        before = _without_transfer(store)
        if args.check:
            print(f"{path}: would hold {len(new)} residual rows, {len(rows)} feature_transfer")
            continue
        store.residuals = new
        store.provenance = {
            **store.provenance,
            KEY: (f"{len(rows)} feature_transfer rows in /residuals: the out-of-fold predictions "
                  f"of the published runs on modern GPUs ({files} under "
                  "../shared/data/public-modern; 5-fold cross-validation of the shared fit, "
                  "benchmarks/bench_published.py --folds 5), copied from the cross_validated "
                  f"residuals of {src_path.name} (sha256 {digest}) on {date} by "
                  f"`python scripts/feature_transfer.py --from profiles/{src_path.name}`; "
                  "the band of a plan with features none of this store's calibration runs had "
                  "is the hull with their band (core.store.interval); nothing refitted")}
        store.save(path)
        again = ProfileStore.open(path)
        got = again.residuals
        keep, mine = old.set != "feature_transfer", got.set != "feature_transfer"
        for c in old.columns:  # the store's own rows, value for value
            if not np.array_equal(getattr(old, c)[keep], getattr(got, c)[mine]):
                raise SystemExit(f"{path}: residual column {c!r} of the store's own rows changed")
        if int((~mine).sum()) != len(rows):
            raise SystemExit(f"{path}: {int((~mine).sum())} feature_transfer rows written, "
                             f"expected {len(rows)}")
        if _without_transfer(again) != before:
            raise SystemExit(f"{path}: the store's contents changed beyond the feature_transfer "
                             "rows and their provenance")
        print(f"{path}: {len(got)} residual rows, {len(rows)} of them feature_transfer; "
              "nothing else changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
