"""How fast a sweep stops on Cancel in each phase, and how often each phase reports progress.

The MT-NLG example's complete default space (``SweepSpace.default_for``: at most 3,360 GPUs,
SP, ZeRO 0-3, cp, micro-batch sizes up to what memory allows) is swept in this process
(``workers=1``) with a ``cancel`` that turns true ``--after`` seconds into a phase; the time
from then to :class:`SweepCancelled` is printed per phase, with the number of progress reports
the phase made and the largest gap between two (target: under 0.5 s each). The phases after
the enumeration are reached with the space's b limited to 1, 2, 4, 8 (so the enumeration is
short). The simulation is measured twice: the first time its first compiled batch imports
Numba (when installed; about 1.5-2.5 s here, which no check can interrupt), the second time
Numba is loaded and the sweep stops within one batch.

Run: ``python benchmarks/bench_sweep_cancel.py [--after 0.3] [--workers 1]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.io.session import load_any  # noqa: E402
from core.studies.sweep import SweepCancelled, SweepSpace, run_sweep  # noqa: E402
from core.studies.sweep.phase import PHASES  # noqa: E402

MTNLG = ROOT / "resources" / "examples" / "mtnlg_530b.json"


def measure(session, space, phase: str, after_s: float, workers: int) -> None:
    state = {"at": None, "reports": [], "start": time.perf_counter()}

    def report(name: str, done: int, total: int) -> None:
        now = time.perf_counter()
        state["reports"].append((name, now))
        if name == phase and state["at"] is None:
            state["at"] = now + after_s

    def cancel() -> bool:
        return state["at"] is not None and time.perf_counter() >= state["at"]

    try:
        run_sweep(session, space, cancel=cancel, phase=report, workers=workers)
    except SweepCancelled:
        took = time.perf_counter() - state["at"]
        mine = [t for n, t in state["reports"] if n == phase]
        gaps = [b - a for a, b in zip(mine, mine[1:])]
        print(f"{phase:>9}: cancelled {took * 1e3:7.1f} ms after Cancel "
              f"({len(mine)} progress reports, largest gap {max(gaps, default=0.0) * 1e3:.0f} "
              f"ms; {state['at'] - after_s - state['start']:.2f} s into the sweep)", flush=True)
        return
    print(f"{phase:>9}: the sweep ended before the phase was reached and cancelled")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--after", type=float, default=0.3, help="seconds into the phase")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    session = load_any(MTNLG)
    default = SweepSpace.default_for(session)
    print(f"{MTNLG.name}, default space, workers={args.workers}, Cancel {args.after} s into "
          f"each phase")
    measure(session, default, "enumerate", args.after, args.workers)
    small_b = SweepSpace(max_gpus=session.plan.num_gpus)  # b 1, 2, 4, 8
    for phase in PHASES[1:]:
        measure(session, small_b, phase, args.after if phase == "simulate" else 0.0,
                args.workers)
    # the first compiled batch of a process imports Numba (when installed), which no check
    # can interrupt; once loaded, the simulation stops within one batch
    measure(session, small_b, "simulate", args.after, args.workers)


if __name__ == "__main__":
    main()
