"""Peak memory of the default plan sweep of a mixture-of-experts model, per plan (``vtrain sweep``).

Each case imports a preset (``vtrain import preset NAME --gpu H100-SXM5-80GB``: Qwen3-30B-A3B,
sequence 4,096, global batch 256) and runs ``vtrain sweep SESSION --max-gpus N --json
--workers 1`` in a fresh process. The figures: that process's peak resident set
(``ru_maxrss`` of ``RUSAGE_CHILDREN``, read before and after: the largest child so far, so
the cases run from the smallest), the same for a sweep of a single plan (``--gpus 1
--tensor-parallel 1 --pipeline-parallel 1 --micro-batch-sizes 1 --schedules 1f1b
--recompute full``: the interpreter, numpy and the profile store), and the difference divided
by the sweep's plans (``num_plans`` of its JSON), in bytes per plan; also its CPU seconds
(user + system). No assertion: it prints figures. The difference holds fixed costs the
one-plan sweep has not: the compiled batch solver (Numba and LLVM, about 120 MiB) that a
sweep of 20 million elements or more loads (both cases), a large part of the small case's
figure.

Cases: ``qwen8`` (up to 8 GPUs: 84,464 plans, about 15 CPU seconds on the 2-core development
machine), ``qwen32`` (up to 32 GPUs: 836,403 plans, about 2 to 3 CPU minutes) and, behind
``--big``, ``qwen256`` (up to 256 GPUs: many more plans than ``qwen32``, many GB: check
``free -g`` first).
``--root DIR`` runs another checkout's ``core`` (e.g. an export of the commit before a
change) for a before / after comparison; ``--save DIR`` keeps each case's ``--json`` output
(compare two with everything but ``wall_s`` and the profile's path).

Figures (docs/sweep_parallel.md, "Memory"): the 2-core development machine, one run each
(up to 32 GPUs, 2026-12-05: 1,794 bytes per plan before the plans became columns, 960
after).

Run: ``python benchmarks/bench_sweep_memory.py [--cases qwen8,qwen32] [--big] [--root DIR]
[--save DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESET = "Qwen3-30B-A3B"
CASES = {"qwen8": 8, "qwen32": 32, "qwen256": 256}
#: A sweep of one plan: what every sweep process holds before its plans.
ONE_PLAN = ["--gpus", "1", "--tensor-parallel", "1", "--pipeline-parallel", "1",
            "--micro-batch-sizes", "1", "--schedules", "1f1b", "--recompute", "full",
            "--expert-parallel", "1"]


def _children() -> tuple[float, int]:
    """CPU seconds (user + system) of the finished children and their largest peak RSS, bytes."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_maxrss * 1024  # Linux: kilobytes


def run_sweep(root: Path, session: Path, args: list[str]) -> tuple[float, int, dict]:
    """One ``vtrain sweep`` process of ``root``'s code: (its CPU s, its peak RSS bytes, its
    JSON). The peak is read as the children's largest, so a child smaller than an earlier one
    reads as 0 (run the cases from the smallest)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    c0, m0 = _children()
    out = subprocess.run([sys.executable, "-m", "core.cli", "sweep", str(session), "--json",
                          "--workers", "1", *args], cwd=root, env=env, check=True,
                         capture_output=True, text=True).stdout
    c1, m1 = _children()
    return c1 - c0, (m1 if m1 > m0 else 0), json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="qwen8", help="comma-separated, of " + ",".join(CASES))
    ap.add_argument("--big", action="store_true", help="also the 256-GPU case (many GB)")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose core to run")
    ap.add_argument("--save", type=Path, help="folder for each case's --json output")
    args = ap.parse_args()
    root = args.root.resolve()
    names = [n for n in args.cases.split(",") if n]
    if args.big and "qwen256" not in names:
        names.append("qwen256")
    names.sort(key=CASES.__getitem__)  # smallest first: ru_maxrss is the largest child's
    with tempfile.TemporaryDirectory(prefix="vtrain-bench-mem-") as tmp:
        session = Path(tmp) / "qwen.json"
        subprocess.run([sys.executable, "-m", "core.cli", "import", "preset", PRESET, "--gpu",
                        "H100-SXM5-80GB", "--out", str(session)], cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)}, check=True,
                       capture_output=True)
        _, base, _ = run_sweep(root, session, ONE_PLAN)
        print(f"one plan: peak RSS {base / 2**20:.0f} MiB (root {root})", flush=True)
        for name in names:
            cpu, peak, doc = run_sweep(root, session, ["--max-gpus", str(CASES[name])])
            n = doc["num_plans"]
            per = (peak - base) / n if peak else float("nan")
            print(f"{name}: {n:,} plans ({doc['num_fit']:,} fit, {doc['num_feasible']:,} "
                  f"simulated), peak RSS {peak / 2**20:,.0f} MiB, {per:,.0f} bytes per plan "
                  f"above one plan's; CPU {cpu:.1f} s; load average {os.getloadavg()[0]:.1f}",
                  flush=True)
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                doc.pop("wall_s", None)
                (args.save / f"{name}.json").write_text(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
