"""Peak memory and time of ``vtrain sweep SESSION --gpus-from PRICES.csv`` (which GPUs to rent).

A price sheet of ``--kinds`` GPU kinds (of H100-SXM5-80GB, H200-SXM-141GB, B200-180GB, 8 per
node) up to ``--max-gpus`` each, and a session imported with ``vtrain import preset PRESET
--gpu H100-SXM5-80GB`` (default Qwen3-30B-A3B), swept with ``--tokens 1e12 --set
plan.global_batch_size=512 --json --workers 1`` in a fresh process. Printed: its peak resident
memory (``ru_maxrss`` of the child, ``RUSAGE_CHILDREN``), its wall and CPU seconds, each row's
plans and plans that fit and were simulated, and the answer (best by days and by dollars).
``--root DIR`` runs another checkout's ``core`` (an export of the commit before a change,
``git archive``) for a before / after comparison; the answers must be the same.

Measured on the 2-core development machine (shared, load average about 2), Qwen3-30B-A3B,
up to 8 GPUs per kind (H100 84,520 plans, 490 simulated; H200 127,083, 2,016; B200 131,429,
992), ``--workers 1``:

=======  ==========================  ==========================  ===============
kinds    before (e99c116): peak, s   after: peak, s              same answer
=======  ==========================  ==========================  ===============
1        --                          0.67 GB, 11.8 s             --
3        1.58 GB, 52.5 s             1.07 GB, 51.1 s             yes
=======  ==========================  ==========================  ===============

Before, every row's whole sweep (every plan of every kind, about 5 kB a plan) was held to
the end: peak memory grew with the sum of the rows' plans. After, a row's sweep is cut to its
simulated plans once they are costed: the peak is about the largest row's own sweep. The time
is the rows' sweeps' (the enumeration, closed-form memory and lower bounds of every plan of
each kind) and does not change. One kind's sweep still holds every plan of that kind while it
runs (``vtrain sweep --max-gpus N`` does the same): tracemalloc of the H100 row above, 84,520
plans, 345 MB held at its end (about 4 kB a plan: 127 MB the plans' field dicts, 58 MB the
sweep's memo of stage structures), 145 MB once cut (imports and caches). At 256 GPUs a kind
has millions of plans (about 1.2 million that fit): one row alone needs of the order of 15-25
GB, which this change does not reduce; it only stops the rows adding up.

Run: ``python benchmarks/bench_gpu_choice.py [--kinds 3] [--max-gpus 8] [--preset NAME]
[--root DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = (("H100-SXM5-80GB", 2.5), ("H200-SXM-141GB", 3.5), ("B200-180GB", 5.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", type=int, default=3, help="GPU kinds in the sheet (1 to 3)")
    ap.add_argument("--max-gpus", type=int, default=8)
    ap.add_argument("--preset", default="Qwen3-30B-A3B")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose core to run")
    args = ap.parse_args()
    root = args.root.resolve()
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryDirectory(prefix="vtrain-bench-gpu-choice-") as tmp:
        session, sheet = Path(tmp) / "s.json", Path(tmp) / "prices.csv"
        subprocess.run([sys.executable, "-m", "core.cli", "import", "preset", args.preset,
                        "--gpu", "H100-SXM5-80GB", "--out", str(session)], cwd=root, env=env,
                       check=True, capture_output=True)
        sheet.write_text("gpu,price_per_gpu_hour_usd,max_gpus,gpus_per_node,source,date\n"
                         + "".join(f"{g},{p},{args.max_gpus},8,bench,2026-12\n"
                                   for g, p in KINDS[:args.kinds]))
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "core.cli", "sweep", str(session),
                              "--gpus-from", str(sheet), "--tokens", "1e12", "--set",
                              "plan.global_batch_size=512", "--json", "--workers", "1"],
                             cwd=root, env=env, check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc = json.loads(out)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    print(f"{args.preset}, {args.kinds} kinds up to {args.max_gpus} GPUs: peak "
          f"{r1.ru_maxrss / 1e6:.2f} GB, wall {wall:.1f} s, CPU {cpu:.1f} s "
          f"(load average {os.getloadavg()[0]:.1f}; root {root})")
    for row in doc["rows"]:
        print(f"  {row['label']}: {row['num_plans']:,} plans, {row['num_feasible']:,} simulated")
    for name in ("best_by_days", "best_by_dollars"):
        p = doc[name]
        print(f"  {name}: " + ("none" if p is None else
                               f"{p['num_gpus']} {p['gpu']} {p['plan']}: "
                               f"{p['expected_days']:.6g} days, ${p['expected_cost_usd']:,.6g}"))


if __name__ == "__main__":
    main()
