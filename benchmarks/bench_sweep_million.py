"""The complete default space of two large studies: how long, without Numba and with it.

* Llama 3.1 405B (seq 8,192, global batch 2,048) on up to 16,384 H100-SXM5 GPUs: every t,
  p, d, cp (powers of two), schedule with its v, recomputation, SP, ZeRO stage and b up to
  what memory allows (``SweepSpace(max_gpus=16384, micro_batch_sizes=None)``, the command
  line's default for that budget).
* DeepSeek-V3 (seq 4,096, global batch 15,360, 256 experts) on up to 2,048 H100-SXM5 GPUs:
  the same, with every expert-parallel size.
* MT-NLG 530B (seq 2,048, global batch 1,920: ``resources/examples/mtnlg_530b.json``) on up to
  3,360 A100-SXM4-80GB GPUs: the same.

Each runs in a fresh process (``--workers 1``, this process only) once with
``VTRAIN_NO_NUMBA=1`` (the numpy batch solver) and once with Numba where installed, under a
wall-clock budget (``--budget-s``, default 120 s each): the sweep reports every phase's
progress (:data:`core.studies.sweep.phase.PHASES`) and is cancelled at the budget. Printed:
the plan counts when it finishes, else the phase it reached, its progress, its rate and the
time the phase alone would take at that rate (an extrapolation, said so), and each phase's
wall and CPU time (``time.process_time``: steadier than wall time on a shared machine; the
enumeration and memory phases interleave, one per micro-batch size, so their spans overlap).
The target is each complete space in under 60 s wall on 2 cores without Numba
(docs/sweep_parallel.md, "Figures", has the latest run); on a loaded machine the CPU times
are the steadier figure.

Run: ``python benchmarks/bench_sweep_million.py [--budget-s 120] [--only llama|deepseek|mtnlg]
[--numba only|off|both]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: case -> (model preset, sequence length, global batch, most GPUs, GPU kind)
CASES = {
    "llama": ("Llama 3.1 405B", 8192, 2048, 16384, "H100-SXM5-80GB"),
    "deepseek": ("DeepSeek-V3", 4096, 15360, 2048, "H100-SXM5-80GB"),
    "mtnlg": ("MT-NLG 530B", 2048, 1920, 3360, "A100-SXM4-80GB"),
}


def _child(case: str, budget_s: float) -> None:
    """One sweep of ``case`` in this fresh process; prints one JSON line."""
    sys.path.insert(0, str(ROOT))
    import dataclasses

    import numpy as np

    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    import core.studies.sweep.run as sweep_run
    from core.studies.sweep import SweepCancelled, SweepSpace, run_sweep

    name, seq, batch, gpus, gpu = CASES[case]
    own = {"wall_s": 0.0, "cpu_s": 0.0, "calls": 0}
    enumerate_plans = sweep_run.enumerate_plans

    def timed_enumerate(*args, **kwargs):  # the enumeration's own time, b by b
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            return enumerate_plans(*args, **kwargs)
        finally:
            own["wall_s"] += time.perf_counter() - w0
            own["cpu_s"] += time.process_time() - c0
            own["calls"] += 1

    sweep_run.enumerate_plans = timed_enumerate
    model = dataclasses.replace(MODEL_PRESETS[name], seq_length=seq)
    session = Session(model, ParallelPlan(tensor_parallel=8, pipeline_parallel=1,
                                          data_parallel=1, micro_batch_size=1,
                                          global_batch_size=batch),
                      ClusterConfig(gpu=gpu, gpus_per_node=8))
    space = SweepSpace(max_gpus=gpus, micro_batch_sizes=None)
    t0 = time.perf_counter()
    phases: dict[str, dict] = {}

    c0 = time.process_time()

    def report(phase: str, done: int, total: int) -> None:
        now, cpu = time.perf_counter() - t0, time.process_time() - c0
        p = phases.setdefault(phase, {"start_s": now, "start_cpu_s": cpu})
        p.update(end_s=now, end_cpu_s=cpu, done=done, total=total)

    out: dict = {"case": case, "model": name, "max_gpus": gpus, "global_batch": batch}
    try:
        r = run_sweep(session, space, workers=1, phase=report,
                      cancel=lambda: time.perf_counter() - t0 > budget_s)
        out.update(finished=True, num_plans=r.num_plans,
                   num_fit=int(r.num_feasible + r.pruned.sum()),
                   num_simulated=int(np.isfinite(r.iteration_time_s).sum()),
                   num_pruned=int(r.pruned.sum()), fastest_s=(
                       None if r.fastest is None else float(r.iteration_time_s[r.fastest])),
                   fastest=None if r.fastest is None else r.plans[r.fastest].label())
    except SweepCancelled:
        out["finished"] = False
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    out["phases"] = phases
    out["enumerate_own"] = own
    import core.sim.fastpath_kernel as kernel
    out["numba_loaded"] = kernel.loaded()
    print(json.dumps(out))


def _show(doc: dict, label: str) -> None:
    head = f"{doc['model']} <= {doc['max_gpus']:,} GPUs, B = {doc['global_batch']:,} [{label}]"
    if doc["finished"]:
        print(f"{head}: {doc['num_plans']:,} plans, {doc['num_fit']:,} fit, "
              f"{doc['num_simulated']:,} simulated, {doc['num_pruned']:,} pruned in "
              f"{doc['wall_s']:.1f} s (CPU {doc['cpu_s']:.1f} s); fastest {doc['fastest']} "
              f"{doc['fastest_s']:.2f} s/iter",
              flush=True)
    else:
        print(f"{head}: not finished within {doc['wall_s']:.0f} s", flush=True)
    for phase, p in doc["phases"].items():
        took = p["end_s"] - p["start_s"]
        line = (f"    {phase:>9}: {p['done']:,} of {p['total']:,} in {took:.1f} s "
                f"(CPU {p['end_cpu_s'] - p['start_cpu_s']:.1f} s)")
        if p["done"] < p["total"] and p["done"] > 0 and took > 0:
            line += (f" (extrapolated: the whole phase about "
                     f"{took * p['total'] / p['done']:.0f} s at this rate)")
        print(line, flush=True)
    own = doc.get("enumerate_own")
    if own:
        print(f"    enumerate_plans alone: {own['wall_s']:.1f} s wall, {own['cpu_s']:.1f} s CPU "
              f"({own['calls']} calls)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--only", choices=sorted(CASES))
    ap.add_argument("--numba", choices=("both", "off", "only"), default="both")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.budget_s)
        return
    runs = {"both": ("off", "on"), "off": ("off",), "only": ("on",)}[args.numba]
    for case in ([args.only] if args.only else list(CASES)):
        for numba in runs:
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            if numba == "off":
                env["VTRAIN_NO_NUMBA"] = "1"
            proc = subprocess.run([sys.executable, __file__, "--child", case, "--budget-s",
                                   str(args.budget_s)], env=env, capture_output=True, text=True)
            if proc.returncode:
                print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else
                      f"exit {proc.returncode}")
                continue
            _show(json.loads(proc.stdout.strip().splitlines()[-1]),
                  "numpy (VTRAIN_NO_NUMBA=1)" if numba == "off" else "Numba where installed")


if __name__ == "__main__":
    main()
