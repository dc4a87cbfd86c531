"""Wall time of simulating one iteration, and the chain-merging solver against the level solver.

Part 1, MT-NLG 530B (3,360 A100s, t=8, d=12, p=35; the authors'-format config
from ../shared, else the shipped example): the median and minimum wall time of
``simulate`` over several runs after a warm-up (profile store cached, as in the
GUI), the median ``wall_s`` that ``vtrain simulate --json`` reports in a new
process (profile store read included) for that config and for the shipped
example ``resources/examples/mtnlg_530b.json``, that command's end-to-end time
(imports too), and the predicted iteration time next to the 44.4 s per
iteration that MT-NLG's authors report for this plan (Smith et al. 2022: 3,360
A100s, global batch 1920, sequence 2048; 113 TFLOP/s per GPU with
recomputation).

Part 2, per case: ``earliest_times_levels`` (the level-synchronous solver,
one numpy pass per topological level: the solver before chain merging) and
``earliest_times`` (chains merged first) on the same graph, their ratio, the
largest difference of their start times, and the wall time of ``simulate``
with the new solver. Cases: MT-NLG 530B and GPT-3 175B (the shipped
examples), and the MT-NLG example with 560 layers at p = 1, 2, 8 (t=8,
d=12, m=160: about a million tasks; the level solver needs one pass per task
of a stage's chain there, tens of seconds at p = 1).

Part 3, a plan whose work items carry many overlapped collectives: Llama 3.1 405B (the
preset) on 192 H100s at t=8 p=3 d=2 cp=2, ZeRO-3 with ``overlap_param_gather`` and
``tp_comm_overlap``, full recomputation, B=1024 (2.7 M tasks): tasks, edges per task and
``vtrain simulate --json``'s ``wall_s`` and peak resident memory in a new process. Before
each collective's side tasks gated the item by their chain's ends only, this graph had 49.8 M
edges (18 per task) and took 16 s and 3.3 GB; B=2048 (5.4 M tasks) 30 s and 6.6 GB.

Run: ``python benchmarks/bench_simulate.py [CONFIG.json]`` (CONFIG replaces the
MT-NLG config of part 1).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.io.session import load_any  # noqa: E402
from core.sim.simulate import simulate  # noqa: E402
from core.sim.solver import earliest_times, earliest_times_levels, merge_chains  # noqa: E402

REPORTED_ITERATION_S = 44.4
EXAMPLES = ROOT / "resources" / "examples"


def best_of(fn, repeat: int) -> tuple[float, object]:
    """Minimum wall time of ``repeat`` calls of ``fn`` and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def part1(path: Path) -> None:
    session = load_any(path)
    simulate(session)  # warm-up: opens and caches the profile store
    walls = []
    for _ in range(7):
        t0 = time.perf_counter()
        result = simulate(session)
        walls.append(time.perf_counter() - t0)
    r = result.report
    print(f"config={path.name} tasks={result.graph.num_tasks} edges={result.graph.src.size}")
    print(f"simulate_wall_median_s={statistics.median(walls):.4f} simulate_wall_min_s={min(walls):.4f} "
          "(profile store cached)")
    for config in dict.fromkeys([path, EXAMPLES / "mtnlg_530b.json"]):
        cli_walls, cli_ends = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(config), "--json"],
                                 cwd=ROOT, check=True, capture_output=True, text=True).stdout
            cli_ends.append(time.perf_counter() - t0)
            cli_walls.append(json.loads(out)["wall_s"])
        print(f"vtrain simulate {config.name} --json: wall_s median={statistics.median(cli_walls):.4f} "
              f"min={min(cli_walls):.4f} (new process, profile store read included); "
              f"end_to_end_s median={statistics.median(cli_ends):.2f}")
    print(f"predicted_iteration_s={r.iteration_time_s:.2f} reported_iteration_s={REPORTED_ITERATION_S} "
          f"error={(r.iteration_time_s - REPORTED_ITERATION_S) / REPORTED_ITERATION_S:+.1%}")
    print(f"mfu={r.mfu:.3f} hfu={r.hfu:.3f} bubble_fraction={r.bubble_fraction:.3f} "
          f"profile={r.profile.get('device')}:{r.profile.get('method')}")


def cases() -> list[tuple[str, object]]:
    out = [("MT-NLG 530B", load_any(EXAMPLES / "mtnlg_530b.json")),
           ("GPT-3 175B", load_any(EXAMPLES / "gpt3_175b.json"))]
    for p in (1, 2, 8):
        s = load_any(EXAMPLES / "mtnlg_530b.json")
        s.model.num_layers = 560
        s.plan.pipeline_parallel = p
        out.append((f"560 layers p={p}", s))
    return out


def part2() -> None:
    print()
    print(f"{'case':<18} {'tasks':>9} {'chains':>7} {'old_s':>8} {'new_s':>8} {'ratio':>7} "
          f"{'max|dstart|_s':>13} {'simulate_s':>10}")
    for name, session in cases():
        simulate(session)  # warm-up
        sim_s, result = best_of(lambda: simulate(session), 3)
        g = result.graph
        new_s, (start, _) = best_of(lambda: earliest_times(g.duration_s, g.src, g.dst), 5)
        t0 = time.perf_counter()
        old_start, old_end = earliest_times_levels(g.duration_s, g.src, g.dst)
        old_s = time.perf_counter() - t0
        if old_s < 2:
            old_s, _ = best_of(lambda: earliest_times_levels(g.duration_s, g.src, g.dst), 3)
        diff = float(np.abs(start - old_start).max())
        agree = diff <= 1e-11 * float(old_end.max())
        chains = merge_chains(g.num_tasks, g.src, g.dst).num_chains
        print(f"{name:<18} {g.num_tasks:>9,} {chains:>7,} {old_s:>8.4f} {new_s:>8.4f} {old_s / new_s:>6.1f}x "
              f"{diff:>13.2e} {sim_s:>10.4f}  starts {'agree' if agree else 'DIFFER'}")


def overlapped_405b():
    """Part 3's session (see the module docstring)."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    plan = ParallelPlan(tensor_parallel=8, pipeline_parallel=3, data_parallel=2, context_parallel=2,
                        micro_batch_size=1, global_batch_size=1024, schedule="1f1b",
                        recompute="full", precision="bf16", sequence_parallel=True, zero_stage=3,
                        overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True)
    return Session(MODEL_PRESETS["Llama 3.1 405B"], plan,
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


def part3() -> None:
    import resource
    import tempfile

    from core.io.session import save_session
    print()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama405b_overlapped.json"
        save_session(overlapped_405b(), path)
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(path), "--json"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout
        end = time.perf_counter() - t0
    doc = json.loads(out)
    rss_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 2**30
    g = simulate(overlapped_405b()).graph
    print(f"Llama 3.1 405B t=8 p=3 d=2 cp=2 ZeRO-3 overlap_param_gather tp_comm_overlap B=1024: "
          f"tasks={g.num_tasks:,} edges={g.src.size:,} ({g.src.size / g.num_tasks:.2f} per task); "
          f"vtrain simulate --json wall_s={doc['wall_s']:.2f} end_to_end_s={end:.2f} "
          f"peak_rss_gib={rss_gib:.2f} (largest of this script's child processes so far)")


def main() -> None:
    default = ROOT.parent / "shared" / "data" / "vtrain-a100" / "configs" / "mtnlg_530b_3360gpu_t8_d12_p35.json"
    if not default.exists():
        default = EXAMPLES / "mtnlg_530b.json"
    part1(Path(sys.argv[1]) if len(sys.argv) > 1 else default)
    part2()
    part3()


if __name__ == "__main__":
    main()
