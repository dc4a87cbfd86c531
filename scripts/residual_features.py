"""Add the run-feature columns to the residual tables of the shipped stores, parameters unchanged.

The shipped stores' residual tables (``profiles/*.h5``, :mod:`core.store.residuals`) were
written before the feature columns (:data:`core.store.residuals.FEATURE_COLUMNS`), or before
their second group (attention kernel, TP overlap, FSDP), third (the run's model FLOPs per GPU
per iteration, :data:`core.store.residuals.THROUGHPUT_COLUMN`: the throughput ceiling) or
fourth (the ZeRO stage of the gradients, ``overlap_grad_reduce``, ``overlap_param_gather``:
how the data-parallel gradients are communicated). This script finds each residual row's run, computes its features
(:func:`core.store.calibration_range.plan_features`, and
:func:`core.store.interval.model_flops_per_gpu`; the columns a table already has must come
out the same) and writes the store back with the same
op tables, collectives, provenance and residuals (measured and predicted times untouched):
only the residual table gains columns. A row's run is looked up by its file and data row
(``file``, ``row``) in the measurement files under ``../shared/data``; a file the reader no
longer reads (the published runs' old CSV, now JSON lines of sessions) is matched by GPU
count, layer parameters and measured time among the runs of ``--sessions`` (exactly one
must match). It refuses to write when any row has no run or the store's other contents
would change. Then run ``scripts/store_images.py``.

Run: ``python scripts/residual_features.py [--check] [STORE.h5 ...]`` (default: every
shipped store with residuals; ``--check`` only reports).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
SESSIONS = DATA / "public-modern" / "published_runs.sessions.jsonl"


def _runs_by_file(names: set[str]) -> dict:
    """(file name, row) -> measured run, for every named file found under :data:`DATA` that
    the measurement reader reads."""
    from core.accuracy.measured import MeasurementFileError, read_measurements
    out = {}
    for name in names:
        for path in sorted(DATA.rglob(name)):
            try:
                runs = read_measurements(str(path))
            except MeasurementFileError:
                continue
            out.update({(name, m.row): m for m in runs if m.session is not None})
            break
    return out


def features_table(table, sessions_path: Path = SESSIONS):
    """``table`` (a ResidualTable) with its feature columns, from the runs of its rows."""
    import numpy as np

    from core.accuracy.measured import read_measurements
    from core.store.calibration_range import plan_features
    from core.store.interval import layer_parameters, model_flops_per_gpu
    from core.store.residuals import FEATURE_COLUMNS, THROUGHPUT_COLUMN, ResidualTable

    by_file = _runs_by_file(set(table.file.tolist()))
    pool = [m for m in read_measurements(str(sessions_path)) if m.session is not None
            and m.has_time] if sessions_path.is_file() else []
    feats = []
    for i in range(len(table)):
        m = by_file.get((str(table.file[i]), int(table.row[i])))
        if m is None:
            hits = [c for c in pool if c.session.plan.num_gpus == table.num_gpus[i]
                    and abs(c.measured_iteration_time_s / table.measured_s[i] - 1) < 1e-9
                    and abs(layer_parameters(c.session.model) / table.layer_parameters[i] - 1) < 1e-9]
            if len(hits) != 1:
                raise SystemExit(f"residual row {i} ({table.file[i]} row {table.row[i]}): "
                                 f"{len(hits)} matching runs, expected 1")
            m = hits[0]
        s = m.session
        if (s.plan.num_gpus != table.num_gpus[i]
                or abs(m.measured_iteration_time_s / table.measured_s[i] - 1) > 1e-9):
            raise SystemExit(f"residual row {i}: its run ({table.file[i]} row {table.row[i]}) "
                             "differs in GPU count or measured time")
        feats.append({**plan_features(s), THROUGHPUT_COLUMN: model_flops_per_gpu(s.model, s.plan)})
    cols = {c: getattr(table, c) for c in table.COLUMNS}
    cols.update({c: np.array([f[c] for f in feats]) for c in FEATURE_COLUMNS + (THROUGHPUT_COLUMN,)})
    return ResidualTable(**cols, procedure=table.procedure)


def main() -> int:
    """Add the features to the stores (see module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="*")
    ap.add_argument("--check", action="store_true", help="report only, write nothing")
    args = ap.parse_args()
    import numpy as np

    from core.store.image import to_image
    from core.store.profile_store import ProfileStore
    from core.store.residuals import OPTIONAL_COLUMNS
    paths = args.stores or sorted(str(p) for p in (ROOT / "profiles").glob("*.h5"))
    for path in paths:
        store = ProfileStore.open(path)
        if store.residuals is None or store.residuals.feature_columns == OPTIONAL_COLUMNS:
            print(f"{path}: {'no residuals' if store.residuals is None else 'has features'}")
            continue
        old = store.residuals
        new = features_table(old)
        for c in old.feature_columns:  # what the table has is what its runs give
            if not np.array_equal(getattr(old, c), getattr(new, c)):
                raise SystemExit(f"{path}: residual column {c!r} differs from its runs' features")
        before = to_image(store)
        store.residuals = new
        if args.check:
            print(f"{path}: {len(new)} rows would gain features")
            continue
        store.save(path)
        again = ProfileStore.open(path)
        again_res, again.residuals = again.residuals, old
        if to_image(again) != before:
            raise SystemExit(f"{path}: the store's contents changed beyond the residual features")
        assert again_res.feature_columns == OPTIONAL_COLUMNS and len(again_res) == len(old)
        for c in again_res.COLUMNS + old.feature_columns:  # the columns it had, bit for bit
            assert np.array_equal(getattr(again_res, c), getattr(old, c)), c
        print(f"{path}: {len(new)} residual rows with features; parameters unchanged")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
