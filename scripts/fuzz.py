#!/usr/bin/env python3
"""The long fuzz run: hostile configs and corrupted files through the real command line.

    .venv/bin/python scripts/fuzz.py                       # 10,000 configs, 1,000 files
    .venv/bin/python scripts/fuzz.py --configs 500 --files 100 --seed 7
    .venv/bin/python scripts/fuzz.py --replay store_file 123 --seed 1   # one case, verbosely

Generators and oracle: ``tests/fuzzing.py``. Configs are sessions and authors'-format
configs (20 %), mutated by wrong types, out-of-bound, non-finite and beyond-float integers,
missing and unknown fields, deep nesting, markup in names, hostile profile paths and extreme
sizes (sessions simulated, 30 %, or swept, 5 %); complete sessions with hostile text exported
as launch scripts and run under a stub torchrun (15 %); launch scripts that expand or compute
without bound, imported (10 %); complete sessions less one field, which must be refused or
simulate the same model (15 %); profile paths that are links, loops and FIFOs (5 %). Files
are session files
corrupted byte-wise (30 %), profile stores with corrupted bytes, values, dtypes, sizes,
links, external storage, unknown filters, wrong-typed values, negative keys, falling
collective curves and tiny efficiencies (40 %) and measurement CSVs (30 %).

Cases run in worker processes (``--jobs``), so that a crash of the interpreter (a
segmentation fault) counts as a crash of that case and the run goes on; a case that takes
longer than ``--timeout`` seconds (four times that for a sweep) counts as a hang. Prints the counts of ok / clean error /
crash / hang / non-finite result / silently different model / unescaped export per kind and
the first failures with the arguments that replay them; exits 1 unless there are none of the
last five.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIG_SHARE = {"session": 0.3, "authors": 0.2, "session_sweep": 0.05, "export": 0.15,
                "launch": 0.1, "deletion": 0.15, "profile_path": 0.05}
FILE_SHARE = {"session_file": 0.3, "store_file": 0.4, "csv_file": 0.3}


def case_rng(seed: int, kind: str, index: int) -> random.Random:
    return random.Random(f"{seed}:{kind}:{index}")


def worker(kind: str, start: int, stop: int, seed: int, timeout: float) -> None:
    """Run cases ``start..stop-1`` of ``kind``; print one JSON line per case."""
    from tests.fuzzing import CaseTimeout, run_case

    def on_alarm(signum, frame):
        raise CaseTimeout

    signal.signal(signal.SIGALRM, on_alarm)
    with tempfile.TemporaryDirectory(prefix="vtrain-fuzz-") as tmp:
        for i in range(start, stop):
            print(json.dumps({"start": i}), flush=True)
            t0 = time.perf_counter()
            signal.alarm(int(timeout))
            try:
                outcome, note = run_case(kind, case_rng(seed, kind, i), Path(tmp), i)
            except CaseTimeout:
                outcome, note = "hang", f"longer than {timeout:g} s"
            finally:
                signal.alarm(0)
            print(json.dumps({"case": i, "outcome": outcome, "note": note,
                              "s": round(time.perf_counter() - t0, 3)}), flush=True)


#: Kinds whose command may legitimately take long: a sweep of a few thousand plans takes
#: half a minute (no sweep is refused for its size any more: core.studies.sweep.bound.LARGE_SWEEP_WORK only
#: warns, about two minutes).
SLOW_KINDS = {"session_sweep": 4.0}


def run_kind(kind: str, count: int, seed: int, timeout: float, counts: Counter,
             failures: list, slowest: list) -> None:
    """All ``count`` cases of ``kind``, restarting the worker after a crash or a stuck case."""
    timeout = timeout * SLOW_KINDS.get(kind, 1.0)
    nxt = 0
    while nxt < count:
        cmd = [sys.executable, __file__, "--worker", kind, str(nxt), str(count), "--seed", str(seed),
               "--timeout", str(timeout)]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current = None
        while True:
            ready = sel.select(timeout=timeout + 30)
            if not ready:  # the worker is stuck where the alarm cannot reach (C code)
                proc.kill()
                proc.wait()
                counts[(kind, "hang")] += 1
                failures.append((kind, current, "hang", "worker stuck past the timeout"))
                nxt = current + 1
                break
            line = proc.stdout.readline()
            if not line:  # the worker ended: done, or died in the current case
                proc.wait()
                if current is not None and proc.returncode != 0:
                    counts[(kind, "crash")] += 1
                    failures.append((kind, current, "crash", f"worker died with status "
                                     f"{proc.returncode}: {proc.stderr.read()[-300:]}"))
                    nxt = current + 1
                else:
                    nxt = count
                break
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
                continue
            current = None
            counts[(kind, msg["outcome"])] += 1
            slowest.append((msg["s"], kind, msg["case"]))
            if msg["outcome"] not in ("ok", "clean_error"):
                failures.append((kind, msg["case"], msg["outcome"], msg["note"]))
        proc.stdout.close()
        proc.stderr.close()
    print(f"  {kind}: {count:,} cases done", flush=True)


def replay(kind: str, index: int, seed: int) -> int:
    from tests.fuzzing import KINDS, run_case
    with tempfile.TemporaryDirectory(prefix="vtrain-fuzz-") as tmp:
        gen, suffix, command = KINDS[kind]
        path = Path(tmp) / f"case{suffix}"
        path.write_bytes(gen(case_rng(seed, kind, index), Path(tmp)))
        print(f"input ({path.stat().st_size} bytes): {path.read_bytes()[:600]!r}")
        print("command: vtrain " + " ".join(command(str(path))))
        print(run_case(kind, case_rng(seed, kind, index), Path(tmp), index))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=int, default=10_000, help="hostile configs (default 10,000)")
    ap.add_argument("--files", type=int, default=1_000, help="corrupted files (default 1,000)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000,
                    help="seed of this run (default: from the clock; printed)")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds before a case is a hang (four times that for sweeps)")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) - 1)),
                    help="kinds run in parallel")
    ap.add_argument("--worker", nargs=3, metavar=("KIND", "START", "STOP"), help=argparse.SUPPRESS)
    ap.add_argument("--replay", nargs=2, metavar=("KIND", "INDEX"),
                    help="run one case and show its input, command and outcome")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), int(args.worker[2]), args.seed, args.timeout)
        return 0
    if args.replay:
        return replay(args.replay[0], int(args.replay[1]), args.seed)

    plan = {k: round(args.configs * share) for k, share in CONFIG_SHARE.items()}
    plan.update({k: round(args.files * share) for k, share in FILE_SHARE.items()})
    print(f"seed {args.seed}: {args.configs:,} configs, {args.files:,} corrupted files, "
          f"{args.jobs} jobs, {args.timeout:g} s per case", flush=True)
    counts: Counter = Counter()
    failures: list = []
    slowest: list = []
    t0 = time.perf_counter()
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(args.jobs) as pool:
        for fut in [pool.submit(run_kind, k, n, args.seed, args.timeout, counts, failures, slowest)
                    for k, n in plan.items()]:
            fut.result()
    wall = time.perf_counter() - t0
    from tests.fuzzing import OUTCOMES as outcomes
    print(f"\n{'kind':<14}" + "".join(f"{o:>13}" for o in outcomes) + f"{'total':>9}")
    for k in plan:
        row = [counts[(k, o)] for o in outcomes]
        print(f"{k:<14}" + "".join(f"{v:>13,}" for v in row) + f"{sum(row):>9,}")
    totals = [sum(counts[(k, o)] for k in plan) for o in outcomes]
    print(f"{'all':<14}" + "".join(f"{v:>13,}" for v in totals) + f"{sum(totals):>9,}")
    configs = sum(counts[(k, o)] for k in CONFIG_SHARE for o in outcomes)
    files = sum(counts[(k, o)] for k in FILE_SHARE for o in outcomes)
    print(f"\n{configs:,} configs and {files:,} corrupted files in {wall:,.0f} s; clean errors "
          f"{totals[1]:,}, crashes {totals[2]}, hangs {totals[3]}, non-finite results {totals[4]}, "
          f"silently different models {totals[5]}, unescaped exports {totals[6]}")
    slowest.sort(reverse=True)
    print("slowest cases: " + ", ".join(f"{k} {i} ({s:.2f} s)" for s, k, i in slowest[:5]))
    for kind, index, outcome, note in failures[:20]:
        print(f"{outcome}: {kind} {index} (replay: scripts/fuzz.py --replay {kind} {index} "
              f"--seed {args.seed}): {note}")
    return 0 if sum(totals[2:]) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
