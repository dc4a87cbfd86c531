"""Where the time of ``vtrain sweep resources/examples/mtnlg_530b.json`` goes, phase by phase.

Wall-clock figures are noisy on a shared machine; this script reports CPU seconds of each
phase (``time.thread_time``: unaffected by other processes' load, except through shared
caches), measured in fresh processes as the command line runs them (cold: Numba's kernel
loaded from its cache, the lookup memos empty):

* ``--workers 1`` (the serial sweep): enumeration and validation (:func:`core.studies.sweep.enumerate_plans`),
  the store, the plans' stage times (:func:`core.sim.stages.stage_times`), their memory
  (:func:`core.model.memory.stage_memory_arrays`), the batch solver
  (:func:`core.sim.fastpath.pipeline_iteration_times`: the pipeline structures, Numba's load and
  the compiled pass), the rest of the batches and the summary after them (costs, Pareto
  front, columns), and the process's CPU in all.
* ``--workers 2``: the parent's CPU before the first batch, while sharing the batches with
  the pool and after the last one (the part no other core helps with), and the pool
  process's CPU warming up (Numba's load), solving chunks, and its idle time before the first
  chunk and between chunks (waiting for the next one); and ``wall_s``.

Each figure is the minimum and the median over ``--repeat`` runs, with the load average.

Run: ``python benchmarks/bench_sweep_phases.py [--repeat N]``.
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
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "resources" / "examples" / "mtnlg_530b.json"


def _child(workers: int, log: str) -> None:
    """One sweep of the example in this (fresh) process, its phases timed; prints JSON."""
    sys.path.insert(0, str(ROOT))
    from core.sim import fastpath
    from core.sim import fastpath_kernel
    from core.model import model_math
    from core.studies import sweep
    from core.studies.sweep import batch as sweep_batch
    from core.studies.sweep import bound as sweep_bound
    from core.studies.sweep import parallel as sweep_parallel
    from core.studies.sweep import run as sweep_run
    from core.io.session import load_any

    t_start = time.perf_counter()
    cpu: dict[str, float] = defaultdict(float)
    spans: dict[str, list[float]] = {}

    def event(label: str, t0: float, t1: float, c: float) -> None:
        # the pool's process writes its events to the log (one line each)
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {label} {t0 - t_start:.6f} {t1 - t_start:.6f} {c:.6f}\n")

    def wrap(mod, name: str, label: str | None = None, log_it: bool = False) -> None:
        fn, label = getattr(mod, name), label or name

        def timed(*args, **kw):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                c_end = time.thread_time()
                c = c_end - c0
                cpu[label] += c
                cpu[label + ":end"] = c_end
                span = spans.setdefault(label, [t0, 0.0])
                span[1] = time.perf_counter()
                if log_it:
                    event(label, t0, span[1], c)

        timed.__qualname__, timed.__module__ = name, mod.__name__  # pickled by name
        setattr(mod, name, timed)

    wrap(sweep_run, "enumerate_plans", "enumerate")
    wrap(sweep_run, "session_profile", "store")
    wrap(sweep_batch, "stage_times")
    wrap(sweep_bound, "stage_times")  # the lower bounds' (a sweep with pruning)
    wrap(sweep_run, "solve_batch", log_it=True)      # this thread's batches
    wrap(sweep_parallel, "solve_batch", log_it=True)  # the pool's (inside its chunks)
    wrap(model_math, "stage_memory_arrays", "stage_memory")
    wrap(sweep_batch, "pipeline_iteration_times", "batch_solver")
    wrap(fastpath, "_pipeline_structure", "pipeline_structure")
    wrap(fastpath_kernel, "warm", log_it=True)
    wrap(sweep_parallel, "solve_chunk", log_it=True)
    session = load_any(EXAMPLE)
    t_start = time.perf_counter()
    c0 = time.process_time()
    result = sweep.run_sweep(session, sweep.SweepSpace(max_gpus=session.plan.num_gpus,
                                                       hold_session_values=True), prune=False,
                             workers=workers)
    t_end = time.perf_counter()
    c_end = time.thread_time()
    out = {"wall_s": result.wall_s, "num_plans": result.num_plans,
           "process_cpu_s": time.process_time() - c0}
    if workers == 1:
        out.update({k: cpu[k] for k in ("enumerate", "store", "stage_times", "stage_memory",
                                        "pipeline_structure", "batch_solver")})
        out["batches_other"] = cpu["solve_batch"] - sum(
            cpu[k] for k in ("stage_times", "stage_memory", "batch_solver"))
        out["after_batches"] = out["process_cpu_s"] - cpu["enumerate"] - cpu["store"] - cpu["solve_batch"]
        print(json.dumps(out))
        return
    time.sleep(0.2)  # the pool's last lines
    me = os.getpid()
    rows = [line.split() for line in Path(log).read_text().splitlines()]
    parent = sorted((float(a), float(b), float(c)) for pid, lab, a, b, c in rows
                    if int(pid) == me and lab == "solve_batch")
    pool = [r for r in rows if int(r[0]) != me]
    chunks = sorted((float(a), float(b), float(c)) for _, lab, a, b, c in pool if lab == "solve_chunk")
    warm = [float(c) for _, lab, _, _, c in pool if lab == "warm"]
    warm_end = max((float(b) for _, lab, _, b, _ in pool if lab == "warm"), default=float("nan"))
    out.update({
        "parent_before_first_batch_s": parent[0][0] if parent else float("nan"),
        "parent_after_last_batch_s": (t_end - t_start) - parent[-1][1] if parent else float("nan"),
        "parent_after_last_batch_cpu_s": c_end - cpu["solve_batch:end"],
        "parent_batches_cpu_s": sum(c for _, _, c in parent),
        "pool_warm_cpu_s": sum(warm),
        "pool_chunks_cpu_s": sum(c for _, _, c in chunks),
        "pool_chunks": len(chunks),
        "pool_idle_before_first_chunk_s": (chunks[0][0] - warm_end) if chunks else float("nan"),
        "pool_idle_between_chunks_s": sum(max(0.0, b[0] - a[1]) for a, b in zip(chunks, chunks[1:])),
        "pool_end_minus_parent_end_s": (chunks[-1][1] - parent[-1][1]) if chunks and parent else 0.0,
    })
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.log)
        return
    for workers in (1, 2):
        runs = []
        for _ in range(args.repeat):
            with tempfile.NamedTemporaryFile(prefix="vtrain-phases-", suffix=".log") as log:
                out = subprocess.run([sys.executable, __file__, "--child", str(workers), "--log",
                                      log.name], cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout
            runs.append(json.loads(out.splitlines()[-1]))
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"--workers {workers}: {runs[0]['num_plans']} plans, {args.repeat} runs, "
              f"load average {load:.2f}; seconds (min / median)")
        for key in runs[0]:
            if key == "num_plans":
                continue
            values = [r[key] for r in runs]
            print(f"  {key:32s} {min(values):8.3f} {statistics.median(values):8.3f}")


if __name__ == "__main__":
    main()
