"""The default sweep space (Megatron-Core's plan space) on two studies: fastest plan and wall time.

* ``../shared/cases/s3/search_llama3_70b_512_h100.json``: Llama 3 70B on 512 H100s, 8k
  sequence, global batch 1,024 (``vtrain sweep FILE --gpus 512``). Target: a fastest fitting
  plan of at most 17.9 s per iteration (the plan the issue found by hand: t4 p4 d32 b1, SP,
  ZeRO-1, no recomputation).
* ``resources/examples/mtnlg_530b.json`` (``vtrain sweep FILE``: at most its 3,360 GPUs).
  Target: a fastest fitting plan of at most 23.8 s.

Each runs the default space with branch and bound (``run_sweep``'s ``prune``) in one process
and with the default ``--workers``; with ``--exhaustive`` also without pruning, as the oracle
(same fastest plan, printed, and the wall time it saves). Prints the plan counts (valid, fit
in memory, simulated, pruned), the fastest fitting plan with its iteration time, and the
wall and CPU seconds of each run (the machine's load shows in wall, less in CPU).

Run: ``python benchmarks/bench_sweep_default.py [--exhaustive] [--only llama|mtnlg]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.io.session import load_any  # noqa: E402
from core.studies.sweep import SweepSpace, run_sweep  # noqa: E402
from core.studies.sweep.parallel import default_workers  # noqa: E402

STUDIES = {
    "llama": (ROOT.parent / "shared" / "cases" / "s3" / "search_llama3_70b_512_h100.json",
              dict(num_gpus=512), 17.9),
    "mtnlg": (ROOT / "resources" / "examples" / "mtnlg_530b.json", None, 23.8),
}


def run(name: str, exhaustive: bool) -> None:
    path, budget, target = STUDIES[name]
    session = load_any(path, validate=False)
    # the command line's default: b up to what memory allows (micro_batch_sizes=None)
    space = SweepSpace(**(budget or dict(max_gpus=session.plan.num_gpus)), micro_batch_sizes=None)
    runs = [("pruned, --workers 1", dict(workers=1)),
            (f"pruned, --workers {default_workers()}", dict(workers=default_workers()))]
    if exhaustive:
        runs.append(("exhaustive, --workers 1", dict(workers=1, prune=False)))
    for label, kw in runs:
        t0, c0 = time.perf_counter(), time.process_time()
        r = run_sweep(session, space, **kw)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        f = r.fastest
        pruned = int(r.pruned.sum())
        simulated = int(np.isfinite(r.iteration_time_s).sum())
        print(f"{path.name} [{label}]: {r.num_plans:,} plans, {r.num_feasible + pruned:,} fit, "
              f"{simulated:,} simulated, {pruned:,} pruned; wall {wall:.2f} s, CPU (this "
              f"process) {cpu:.2f} s", flush=True)
        if f is None:
            print("  no plan fits")
            continue
        t = float(r.iteration_time_s[f])
        print(f"  fastest: {r.plans[f].label()}: {t:.2f} s per iteration, "
              f"{r.max_memory_per_gpu_bytes[f] / 2**30:.1f} GiB per GPU "
              f"(target <= {target} s: {'met' if t <= target else 'NOT met'})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exhaustive", action="store_true", help="also run without pruning")
    ap.add_argument("--only", choices=sorted(STUDIES))
    args = ap.parse_args()
    for name in ([args.only] if args.only else STUDIES):
        run(name, args.exhaustive)


if __name__ == "__main__":
    main()
