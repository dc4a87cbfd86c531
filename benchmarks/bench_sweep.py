"""Wall time of the full MT-NLG 530B design-space sweep (issue 5's target: under 10 s).

The space of the vTrain paper's first case study (Bang et al., MICRO 2024):
MT-NLG 530B (L=105, h=20480, a=128, s=2048), global batch 1920, A100 nodes of
8 GPUs; t in {1, 2, 4, 8}, p in the divisors of 105, d up to 30, micro-batch
size in {1, 2, 4}. Two variants:

* ``as-trained``: 1F1B with full recomputation, as MT-NLG was trained (1,344 plans);
* ``all``: every schedule and recomputation mode (none, selective, full);
* ``modern``: ``all`` times sequence parallelism off/on and ZeRO stages 0-3 (issue 10's
  target: under a minute).

Each variant is run once cold (first run in the process: profile store opened,
pipeline structures built) and then ``--repeat`` times warm; wall time is
``run_sweep`` end to end (enumeration, validation, batch simulation, memory,
cost, Pareto front). Single process.

Run: ``python benchmarks/bench_sweep.py [CONFIG.json] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.session import load_any  # noqa: E402
from core.sweep import SweepSpace, run_sweep  # noqa: E402

DEFAULT_CONFIG = (ROOT.parent / "shared" / "data" / "vtrain-a100" / "configs"
                  / "mtnlg_530b_3360gpu_t8_d12_p35.json")
TOKENS = 270e9  # MT-NLG's token budget (Smith et al. 2022)


def space(variant: str) -> SweepSpace:
    """The paper's MT-NLG space; ``variant`` is ``as-trained``, ``all`` or ``modern``."""
    extra = dict(schedules=("1f1b",), recompute=("full",)) if variant == "as-trained" else {}
    if variant == "modern":
        extra = dict(sequence_parallel=(False, True), zero_stages=(0, 1, 2, 3))
    return SweepSpace(tensor_parallel=(1, 2, 4, 8), max_data_parallel=30, micro_batch_sizes=(1, 2, 4),
                      **extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    session = load_any(args.config)
    session.cost.training_tokens = TOKENS
    for variant in ("as-trained", "all", "modern"):
        t0, c0 = time.perf_counter(), time.process_time()
        result = run_sweep(session, space(variant))
        cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
        warm = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = run_sweep(session, space(variant))
            warm.append(time.perf_counter() - t0)
        n = result.num_plans
        best = min(warm) if warm else cold
        print(f"space={variant} num_plans={n} num_feasible={result.num_feasible} "
              f"pareto={int(result.pareto.sum())}")
        print(f"  cpu_s cold={cold_cpu:.2f} (this process's CPU time: the wall time on a shared "
              "machine counts the other processes too)")
        print(f"  wall_s cold={cold:.2f} warm_median={statistics.median(warm) if warm else cold:.2f} "
              f"warm_min={best:.2f}  plans_per_s={n / best:,.0f} (cold {n / cold:,.0f})")


if __name__ == "__main__":
    main()
