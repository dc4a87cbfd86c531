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

Then the sweep of ``vtrain sweep resources/examples/mtnlg_530b.json`` (the CLI's
default space for that file: at most its 3,360 GPUs, every schedule with
interleaved v and ZB-H1, every recomputation mode) runs three ways -- serial,
on a process pool of ``--workers`` processes, and on a local Dask cluster of
``--workers`` processes (``--dask local``; or ``--dask tcp://host:8786``) --
printing plans per second for each and whether the three results are identical
(every array bit for bit, ``num_plans``, ``fastest``, ``cheapest``, ``pareto``). The
parallel wall times include starting the processes (and the Dask cluster).

Run: ``python benchmarks/bench_sweep.py [CONFIG.json] [--repeat N] [--workers 2]
[--dask local] [--parallel-only]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.io.session import load_any  # noqa: E402
from core.studies.sweep import SweepSpace, run_sweep  # noqa: E402

DEFAULT_CONFIG = (ROOT.parent / "shared" / "data" / "vtrain-a100" / "configs"
                  / "mtnlg_530b_3360gpu_t8_d12_p35.json")
TOKENS = 270e9  # MT-NLG's token budget (Smith et al. 2022)


def space(variant: str) -> SweepSpace:
    """The paper's MT-NLG space; ``variant`` is ``as-trained``, ``all`` or ``modern``."""
    extra = dict(schedules=("1f1b",), recompute=("full",)) if variant == "as-trained" else {}
    if variant == "modern":
        extra = dict(sequence_parallel=(False, True), zero_stages=(0, 1, 2, 3))
    return SweepSpace(hold_session_values=True, tensor_parallel=(1, 2, 4, 8), max_data_parallel=30,
                      micro_batch_sizes=(1, 2, 4),
                      **extra)


EXAMPLE = ROOT / "resources" / "examples" / "mtnlg_530b.json"


def _same(a, b) -> bool:
    arrays = ("iteration_time_s", "max_memory_per_gpu_bytes", "cost_usd", "training_days", "pareto",
              "fits_in_memory")
    return (a.num_plans == b.num_plans and a.plans == b.plans and a.fastest == b.fastest
            and a.cheapest == b.cheapest and a.reason == b.reason and a.warnings == b.warnings
            and all(getattr(a, k).tobytes() == getattr(b, k).tobytes() for k in arrays)
            and a.pareto_indices().tolist() == b.pareto_indices().tolist())


def parallel(workers: int, dask: str) -> None:
    """Serial, process pool and Dask on the example's default CLI space."""
    session = load_any(EXAMPLE, validate=False)
    sp = SweepSpace(max_gpus=session.plan.num_gpus, hold_session_values=True)
    runs = {}
    for label, kw in (("serial", {}), (f"--workers {workers}", dict(workers=workers)),
                      (f"--dask {dask} --workers {workers}", dict(workers=workers, dask=dask))):
        t0 = time.perf_counter()
        r = run_sweep(session, sp, prune=False, **kw)
        wall = time.perf_counter() - t0
        runs[label] = r
        print(f"{EXAMPLE.name} {label:>26}: num_plans={r.num_plans} wall_s={wall:.2f} "
              f"plans_per_s={r.num_plans / wall:,.0f}", flush=True)
    first = next(iter(runs.values()))
    same = all(_same(first, r) for r in runs.values())
    print(f"  identical results (arrays bit for bit, num_plans, fastest, cheapest, pareto): "
          f"{'yes' if same else 'NO'}; fastest={first.plans[first.fastest].label()} "
          f"pareto={int(first.pareto.sum())} plans")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="processes of the parallel runs")
    ap.add_argument("--dask", default="local", help="Dask scheduler address, or 'local'")
    ap.add_argument("--parallel-only", action="store_true",
                    help="only the serial / --workers / --dask comparison")
    args = ap.parse_args()
    parallel(args.workers, args.dask)
    if args.parallel_only:
        return
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
