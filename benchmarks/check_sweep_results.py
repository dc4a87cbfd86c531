"""Check that sweeps give the same results as a saved reference (speed work must not move them).

``--save DIR`` runs the serial sweep of every shipped example (``resources/examples``, the
CLI's default space: at most the file's GPUs, every schedule and recomputation mode) and
writes each result as JSON (every plan's row plus the summary, ``wall_s`` left out).
``--against DIR`` runs them again -- serially, with ``--workers N`` and with ``--dask local``
when asked -- and compares each with the saved one: equal JSON documents (every plan's
iteration time, memory, cost, ``num_plans``, ``fastest``, ``cheapest``, ``pareto``) or the
first differences. Exit status 1 when any differs.

Run before a change with ``--save /tmp/ref`` (e.g. on a checkout of the base commit), after it
with ``--against /tmp/ref [--workers 2] [--dask local]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.io.session import load_any  # noqa: E402
from core.studies.sweep import SweepSpace, run_sweep  # noqa: E402

EXAMPLES = sorted((ROOT / "resources" / "examples").glob("*.json"))


def document(path: Path, **kw) -> dict:
    session = load_any(path)
    # the space and the exhaustive run the reference was made with (before the default space grew)
    result = run_sweep(session, SweepSpace(max_gpus=session.plan.num_gpus, hold_session_values=True),
                       prune=False, **kw)
    doc = result.to_dict(include_all=True)
    doc.pop("wall_s")
    doc["profile"].pop("path", None)
    return json.loads(json.dumps(doc, sort_keys=True, default=str))


def differences(a: dict, b: dict, limit: int = 5) -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        if key == "plans" and isinstance(a.get(key), list) and isinstance(b.get(key), list):
            rows = [i for i, (x, y) in enumerate(zip(a[key], b[key])) if x != y]
            out.append(f"plans: {len(a[key])} vs {len(b[key])} rows, {len(rows)} differ"
                       + "".join(f"; row {i}: " + ", ".join(
                           f"{c} {a[key][i].get(c)!r} vs {b[key][i].get(c)!r}"
                           for c in a[key][i] if a[key][i].get(c) != b[key][i].get(c))
                           for i in rows[:limit]))
        else:
            out.append(f"{key} differs")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="DIR")
    group.add_argument("--against", metavar="DIR")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--dask", metavar="ADDRESS", help="also check --dask ADDRESS ('local')")
    args = ap.parse_args()
    if args.save:
        folder = Path(args.save)
        folder.mkdir(parents=True, exist_ok=True)
        for path in EXAMPLES:
            doc = document(path)
            (folder / f"{path.stem}.sweep.json").write_text(json.dumps(doc, sort_keys=True))
            print(f"saved {path.name}: {doc['num_plans']} plans")
        return 0
    runs = [("serial", {})]
    if args.workers > 1:
        runs.append((f"--workers {args.workers}", dict(workers=args.workers)))
    if args.dask:
        runs.append((f"--dask {args.dask}", dict(workers=max(2, args.workers), dask=args.dask)))
    bad = 0
    for path in EXAMPLES:
        want = json.loads((Path(args.against) / f"{path.stem}.sweep.json").read_text())
        for label, kw in runs:
            diff = differences(want, document(path, **kw))
            bad += bool(diff)
            print(f"{path.name} {label}: {'IDENTICAL' if not diff else 'DIFFERENT: ' + '; '.join(diff)}"
                  f" ({want['num_plans']} plans)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
