"""Wall time of one simulation of the MT-NLG 530B plan (3,360 A100s, t=8, d=12, p=35).

Prints the median and minimum wall time of ``simulate`` over several runs after a
warm-up (profile store cached, as in the GUI), the end-to-end time of the
``vtrain simulate`` command (new process: imports, store load, report), and the
predicted iteration time next to the 44.4 s per iteration that MT-NLG's authors
report for this plan (Smith et al. 2022: 3,360 A100s, global batch 1920,
sequence 2048; 113 TFLOP/s per GPU with recomputation).

Run: ``python benchmarks/bench_simulate.py [CONFIG.json]``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.session import load_any  # noqa: E402
from core.simulate import simulate  # noqa: E402

REPORTED_ITERATION_S = 44.4


def main() -> None:
    default = ROOT.parent / "shared" / "data" / "vtrain-a100" / "configs" / "mtnlg_530b_3360gpu_t8_d12_p35.json"
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    session = load_any(path)
    simulate(session)  # warm-up: opens and caches the profile store
    walls = []
    for _ in range(7):
        t0 = time.perf_counter()
        result = simulate(session)
        walls.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(path), "--json"], cwd=ROOT,
                   check=True, capture_output=True)
    cli_s = time.perf_counter() - t0
    r = result.report
    print(f"config={path.name} tasks={result.graph.num_tasks} edges={result.graph.src.size}")
    print(f"simulate_wall_median_s={statistics.median(walls):.3f} simulate_wall_min_s={min(walls):.3f}")
    print(f"cli_end_to_end_s={cli_s:.2f}")
    print(f"predicted_iteration_s={r.iteration_time_s:.2f} reported_iteration_s={REPORTED_ITERATION_S} "
          f"error={(r.iteration_time_s - REPORTED_ITERATION_S) / REPORTED_ITERATION_S:+.1%}")
    print(f"mfu={r.mfu:.3f} hfu={r.hfu:.3f} bubble_fraction={r.bubble_fraction:.3f} "
          f"profile={r.profile.get('device')}:{r.profile.get('method')}")


if __name__ == "__main__":
    main()
