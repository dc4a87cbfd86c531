"""Time and peak memory of ``vtrain gui --screenshot`` on a huge plan, beside ``vtrain simulate``.

Usage::

    python benchmarks/bench_gui_screenshot.py [--multiple 30] [--root PATH]

Writes the MT-NLG 530B example with its global batch size multiplied by ``--multiple``
(30: 57,600 sequences, 4,800 micro-batches, about 6.4 million tasks) to a temporary
folder, then runs ``vtrain simulate`` and ``vtrain gui --screenshot`` on it, each in a
fresh process, and prints each one's wall time, CPU time (user + system) and peak
resident memory (the child's ``ru_maxrss`` from ``os.wait4``; ``/usr/bin/time -v``
reports the same). ``--root`` runs another checkout (an older commit, for before/after
figures). The window runs the same simulation as ``simulate``; what it adds is drawing
the timeline, whose picture of a huge plan is a summary of the whole iteration
(:func:`vtrain_gui.timeline.layout.summary_image`) while the exact layout follows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str], root: Path) -> dict:
    """Run ``cmd`` in ``root``; its wall time, CPU seconds and peak memory (MiB)."""
    env = {**os.environ, "PYTHONPATH": str(root), "QT_QPA_PLATFORM": "offscreen"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}: {err.strip()[-500:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mib": round(usage.ru_maxrss / 1024)}  # ru_maxrss: KiB on Linux


def main() -> None:
    """Build the plan, run both commands, print their figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--multiple", type=int, default=30,
                    help="global batch size multiple of the MT-NLG example (default 30)")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout to run (default: this one)")
    args = ap.parse_args()
    root = args.root.resolve()
    doc = json.loads((ROOT / "resources" / "examples" / "mtnlg_530b.json").read_text())
    doc["plan"]["global_batch_size"] *= args.multiple
    with tempfile.TemporaryDirectory(prefix="vtrain-bench-") as tmp:
        session = Path(tmp) / "mtnlg_huge.json"
        session.write_text(json.dumps(doc))
        sys.path.insert(0, str(root))
        from core.io.session import load_any
        from core.sim.simulate import simulate
        tasks = simulate(load_any(session)).graph.num_tasks
        print(f"plan: MT-NLG 530B, global batch {doc['plan']['global_batch_size']:,}, "
              f"{tasks:,} tasks; root {root}")
        py = sys.executable
        figures = {
            "simulate": run([py, "-m", "core.cli", "simulate", str(session)], root),
            "gui --screenshot": run([py, "-m", "core.cli", "gui", "--screenshot",
                                     str(Path(tmp) / "shot.png"), str(session)], root),
        }
    for name, f in figures.items():
        print(f"{name:17s} wall {f['wall_s']:6.2f} s  cpu {f['cpu_s']:6.2f} s  "
              f"peak {f['peak_mib']:6,} MiB")


if __name__ == "__main__":
    main()
