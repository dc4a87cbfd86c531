"""Check that ``vtrain sweep`` commands answer the same on two checkouts, and their CPU seconds.

Speed work must not move a result. Each case is one ``vtrain sweep`` command line (its
arguments, ``--workers 1`` added); it runs once with this checkout's ``core`` and once with
``--root DIR``'s (e.g. ``git archive BASE | tar -x -C DIR``), each in a fresh process, with
``--json`` and again with ``--out FILE.csv``. The ``--json`` documents must be equal but
``wall_s`` (at any depth) and the profile store's path (a ``path`` ending in ``.h5``); the CSV
files byte for byte (every plan's row: iteration times, memory, verdicts, order). Prints,
per case, IDENTICAL or the keys that differ, and the CPU seconds (user + system of the child,
``RUSAGE_CHILDREN``: less sensitive than wall time to the other processes of a shared
machine) before and after. Exit status 1 when any differs.

Run: ``python benchmarks/check_sweep_cli.py --root /tmp/base [--case "ARGS"]...``; without
``--case``, the shipped A100 example ``resources/examples/gpt3_175b.json`` (default space).
Results of 2026-12-05: ``docs/sweep_parallel.md`` (the round of that date).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = ["resources/examples/gpt3_175b.json"]


def _strip(doc):
    """``doc`` without ``wall_s`` keys and profile store paths, at any depth."""
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k != "wall_s" and not (
            k == "path" and isinstance(v, str) and v.endswith(".h5"))}
    if isinstance(doc, list):
        return [_strip(x) for x in doc]
    return doc


def _run(root: Path, args: list[str]) -> tuple[bytes, float]:
    """Stdout of ``vtrain sweep ARGS --workers 1`` with ``root``'s ``core`` (run from
    ``root``), and its CPU seconds. Raises ``RuntimeError`` when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "core.cli", "sweep", *args, "--workers", "1"],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{root}: vtrain sweep {shlex.join(args)}: exit {proc.returncode}: "
                           + proc.stderr.decode(errors="replace")[-2000:])
    return proc.stdout, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, type=Path, help="the other checkout (before)")
    ap.add_argument("--case", action="append", metavar="ARGS",
                    help="vtrain sweep arguments, quoted (repeatable; relative paths are "
                         "read from each checkout's root)")
    args = ap.parse_args()
    bad = 0
    for case in args.case or DEFAULT_CASES:
        argv = shlex.split(case)
        with tempfile.TemporaryDirectory() as tmp:
            out = {}
            for label, root in (("before", args.root.resolve()), ("after", ROOT)):
                doc, cpu_json = _run(root, argv + ["--json"])
                csv_path = Path(tmp) / f"{label}.csv"
                _, cpu_csv = _run(root, argv + ["--out", str(csv_path)])
                out[label] = (_strip(json.loads(doc)), csv_path.read_bytes(), cpu_json, cpu_csv)
            (ja, ca, ta, sa), (jb, cb, tb, sb) = out["before"], out["after"]
            diff = sorted(k for k in set(ja) | set(jb) if ja.get(k) != jb.get(k))
            if ca != cb:
                diff.append("the CSV")
            bad += bool(diff)
            plans = ca.count(b"\n") - 1
            print(f"{case}: {'IDENTICAL' if not diff else 'DIFFERENT: ' + ', '.join(diff)}; "
                  f"CPU s --json {ta:.1f} -> {tb:.1f}, --out CSV {sa:.1f} -> {sb:.1f} "
                  f"({plans} plans)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
