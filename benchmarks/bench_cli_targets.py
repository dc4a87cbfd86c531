"""The two command-line speed targets of issue 12, as a user runs them (new processes).

1. ``vtrain simulate resources/examples/mtnlg_530b.json --json``: the ``wall_s`` it reports
   (target <= 0.04 s) and the command's end-to-end time (interpreter start and imports
   included): with the parsed-store cache off (``VTRAIN_CACHE_DIR=``: the HDF5 file parsed),
   on a first run (an empty cache: the shipped store's image read) and then cached.
2. ``vtrain sweep resources/examples/mtnlg_530b.json --json``: the ``wall_s`` it reports with
   the default workers (all cores; target <= 2.5 s on 2 cores) and with ``--workers 1``, first
   with an empty Numba cache (``NUMBA_CACHE_DIR``: the batch solver's kernel compiled, the
   JIT cost counted) and then with the compiled kernel cached.

Each figure is the minimum and the median of ``--repeat`` runs; the load average is printed
beside them (the machine is shared: other processes slow every figure down).

Run: ``python benchmarks/bench_cli_targets.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "resources" / "examples" / "mtnlg_530b.json"


def run(args: list[str], env: dict[str, str]) -> tuple[dict, float]:
    """The JSON document a ``vtrain`` command prints and its end-to-end seconds."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out), time.perf_counter() - t0


def figures(label: str, walls: list[float], ends: list[float]) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{label}: wall_s min={min(walls):.4f} median={statistics.median(walls):.4f}; "
          f"end_to_end_s min={min(ends):.3f} median={statistics.median(ends):.3f} "
          f"(n={len(walls)}, load average {load:.2f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vtrain-bench-") as tmp:
        base = {**os.environ, "VTRAIN_CACHE_DIR": str(Path(tmp) / "cache"),
                "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
        sim = ["simulate", str(EXAMPLE), "--json"]
        doc, end = run(sim, {**base, "VTRAIN_CACHE_DIR": ""})  # cache off: the HDF5 file parsed
        figures("vtrain simulate mtnlg_530b.json --json, store parsed (VTRAIN_CACHE_DIR= : no cache)",
                [doc["wall_s"]], [end])
        doc, end = run(sim, base)  # an empty cache: the shipped store's image is read
        figures("vtrain simulate mtnlg_530b.json --json, first run (empty cache, shipped image)",
                [doc["wall_s"]], [end])
        walls, ends = [], []
        for _ in range(args.repeat):
            doc, end = run(sim, base)
            walls.append(doc["wall_s"])
            ends.append(end)
        figures("vtrain simulate mtnlg_530b.json --json, store image cached", walls, ends)
        print(f"  parts of the median run (ms): "
              f"{ {k: round(v * 1000, 1) for k, v in doc['wall_parts_s'].items()} }")
        for label, extra in (("default workers (all cores)", []), ("--workers 1", ["--workers", "1"])):
            sweep = ["sweep", str(EXAMPLE), "--json", *extra]
            env = {**base, "NUMBA_CACHE_DIR": str(Path(tmp) / f"numba-{len(extra)}")}
            doc, end = run(sweep, env)  # the kernel compiled: Numba's cache empty
            figures(f"vtrain sweep mtnlg_530b.json --json {label}, kernel compiled (JIT cold)",
                    [doc["wall_s"]], [end])
            walls, ends = [], []
            for _ in range(max(1, args.repeat // 2)):
                doc, end = run(sweep, env)
                walls.append(doc["wall_s"])
                ends.append(end)
            figures(f"vtrain sweep mtnlg_530b.json --json {label}, kernel cached", walls, ends)
        print(f"  num_plans={doc['num_plans']} fastest={doc['fastest']['iteration_time_s']:.4f} s "
              f"pareto={len(doc['pareto'])} plans; cores={os.cpu_count()}")


if __name__ == "__main__":
    main()
