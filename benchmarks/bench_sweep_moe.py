"""CPU seconds of the default plan sweep of mixture-of-experts models (``vtrain sweep``).

Cases (each preset imported with ``vtrain import preset NAME --gpu H100-SXM5-80GB``, then
``vtrain sweep SESSION --gpus N --set plan.global_batch_size=B --json --workers 1``):

* ``qwen16``: Qwen3-30B-A3B on 16 GPUs, global batch 256 (211,399 plans, 98,006 fit);
* ``qwen32``: Qwen3-30B-A3B on 32 GPUs, global batch 256 (394,753 plans);
* ``ds256``: DeepSeek-V3 on 256 GPUs, global batch 1,024 (126,432 plans, 12,483 fit);
* ``qwen16b512``: Qwen3-30B-A3B on 16 GPUs, global batch 512 (234,149 plans, 100,567 fit);
* ``qwen64``: Qwen3-30B-A3B on 64 GPUs, global batch 512 (the trial's sweep: minutes).

Each sweep runs in a fresh process (``--workers 1``: one process); the figures are its CPU
seconds (user + system, ``RUSAGE_CHILDREN``: less sensitive than wall time to the other
processes of a shared machine) and its wall seconds, the minimum over ``--repeat`` runs.
``--root DIR`` runs another checkout's ``core`` (e.g. an export of the commit before a
change) for a before / after comparison; ``--save DIR`` keeps each case's ``--json`` output
(compare two with everything but ``wall_s`` and the profile's path: the same plans, times
and fronts).

Measured on the 2-core development machine (load average 3 to 6 from other work: the
figures vary by about 15 % from run to run), one ``--workers 1`` sweep, CPU seconds (wall):

=========  ===================  ===================  =========================================
case       before (be2060d)     after                the same ``--json`` (but ``wall_s``)
=========  ===================  ===================  =========================================
qwen16     65.4 (120.2)         49.1 (87.4)          yes
qwen32     137.9 (215.9)        95.5 (97.8)          yes
ds256      16.8 (25.2)          15.7 (16.6)          yes
=========  ===================  ===================  =========================================

Where the time went (cProfile of qwen16 before): 204 of 270 profiled seconds in the lower
bounds (:func:`core.studies.sweep.bound.fill_lower_bounds`), 84 of them in the expert
all-to-all overlap's exposures (:func:`core.sim.stages.ep_overlap_exposed`: every MoE layer's
tasks found and summed again for every bound plan). After: each chunk's layers grouped by
their tasks' sources once (the places kept in the sweep's memo), one layer of each kind
summed (the same numpy operations on the same figures), 9 profiled seconds; the chunk
structures of a plan made with what they share read once
(:func:`core.sim.templates.stage_structures`). DeepSeek-V3 on 256 GPUs prunes to 12,483
fitting plans and took 13 to 17 CPU seconds before (``--workers 1``; 22 s wall with the
default workers), not the quarter of an hour once reported: its time is spread (bounds 11,
enumeration and memory 9, figures 4 profiled seconds), with no hot spot of this kind.

``qwen16b512`` (2026-12-05, the same machine at load average 4 to 7, through
``benchmarks/check_sweep_cli.py`` against an export of d3d8820, the commit before the layouts'
memo by the fields they read, ``docs/sweep_parallel.md``): 36.5 -> 32.8 CPU seconds, the
same ``--json`` and CSV. ``qwen64`` was not measured (about 6 minutes a run).

Run: ``python benchmarks/bench_sweep_moe.py [--cases qwen16,ds256] [--repeat N] [--root DIR]
[--save DIR]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "qwen16": ("Qwen3-30B-A3B", 16, 256),
    "qwen32": ("Qwen3-30B-A3B", 32, 256),
    "ds256": ("DeepSeek-V3", 256, 1024),
    "qwen16b512": ("Qwen3-30B-A3B", 16, 512),
    "qwen64": ("Qwen3-30B-A3B", 64, 512),
}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_case(root: Path, name: str, tmp: Path, save: Path | None) -> tuple[float, float, str]:
    """One sweep of case ``name`` with ``root``'s code: (CPU s, wall s, its JSON output)."""
    preset, gpus, batch = CASES[name]
    env = {**os.environ, "PYTHONPATH": str(root)}
    session = tmp / f"{name}.json"
    if not session.exists():
        subprocess.run([sys.executable, "-m", "core.cli", "import", "preset", preset, "--gpu",
                        "H100-SXM5-80GB", "--out", str(session)], cwd=root, env=env, check=True,
                       capture_output=True)
    c0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "core.cli", "sweep", str(session), "--gpus",
                          str(gpus), "--set", f"plan.global_batch_size={batch}", "--json",
                          "--workers", "1"], cwd=root, env=env, check=True,
                         capture_output=True, text=True).stdout
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"{name}.json").write_text(out)
    return cpu, wall, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="qwen16,ds256", help="comma-separated, of " + ",".join(CASES))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose core to run")
    ap.add_argument("--save", type=Path, help="folder for each case's --json output")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vtrain-bench-moe-") as tmp:
        for name in args.cases.split(","):
            runs = [run_case(args.root.resolve(), name, Path(tmp), args.save)
                    for _ in range(args.repeat)]
            load = os.getloadavg()[0]
            print(f"{name}: CPU {min(r[0] for r in runs):.1f} s, wall {min(r[1] for r in runs):.1f} s "
                  f"(min of {args.repeat}; load average {load:.1f}; root {args.root})", flush=True)


if __name__ == "__main__":
    main()
