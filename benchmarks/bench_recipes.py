"""Memory verdicts of the Megatron-Bridge performance recipes NVIDIA ran.

Every one of the 119 pretraining performance recipes of Megatron-Bridge 0.6.2
(``resources/bridge_perf_recipes.json``: Llama3-8B, Llama3-70B, Llama3.1-405B, Qwen3-30B-A3B,
Qwen3-235B-A22B, DeepSeek-V3, GPT-OSS-120B on H100, B200 and GB200) is one of NVIDIA's
performance benchmarks: it ran, so it fits in GPU memory. Each is built into its vtrain session
(:func:`core.accuracy.bridge_sessions.recipe_session`: the model preset, the recipe's plan,
GPU kind and settings) or refused with its cause (what it runs that is not modelled: FP8
attention, CPU activation offloading, NVFP4; or a configuration rule it breaks). Each modelled
recipe's memory verdict (:func:`core.sim.report.memory_verdict` of the whole-process peak per
GPU against the GPU's memory, the session's 10 % margin naming a tight fit) must say it fits
or is tight.

Printed per recipe: the verdict, the modelled peak GiB per GPU of the largest stage against the
capacity, the predicted MFU (``--no-mfu``: memory only, seconds instead of a minute), and for
a plan that does not fit the largest stage's terms (weights, gradients, optimizer state,
activations, workspace, allocator reserve, CUDA context, NCCL buffers); then the counts
(fits / tight / does not fit / refused, by cause).

Run: ``python benchmarks/bench_recipes.py [--no-mfu]`` (about a minute with the MFU).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.accuracy.bridge_sessions import recipe_sessions  # noqa: E402
from core.sim.report import memory_verdict  # noqa: E402
from core.sim.simulate import memory_verdict as stage_verdict  # noqa: E402
from core.sim.simulate import session_profile, simulate, stage_memory  # noqa: E402

GiB = 2.0 ** 30
#: The largest stage's terms printed for a plan that does not fit (StageMemory attributes).
TERMS = (("weights", "weights_bytes"), ("grads", "gradients_bytes"),
         ("optimizer", "optimizer_bytes"), ("activations", "activations_bytes"),
         ("workspace", "workspace_bytes"), ("reserve", "allocator_reserve_bytes"),
         ("context", "cuda_context_bytes"), ("nccl", "nccl_buffer_bytes"))


def recipe_verdicts(mfu: bool = True, recipes=None) -> list[dict]:
    """One dict per recipe: ``function``, ``key`` (the recipe's), ``verdict`` (``fits``,
    ``tight``, ``does not fit`` or ``refused``), ``cause`` / ``why`` of a refusal, and for a
    modelled one ``need_gib`` (the largest stage's whole process), ``capacity_gib``,
    ``terms`` (that stage's, GiB: :data:`TERMS`) and ``mfu`` (NaN with ``mfu=False``)."""
    kw = {} if recipes is None else {"recipes": tuple(recipes)}
    rows = []
    for rs in recipe_sessions(**kw):
        row = {"function": rs.recipe.function, "key": rs.recipe.key}
        if rs.session is None:
            row.update(verdict="refused", cause=rs.refusal[0], why=rs.refusal[1])
            rows.append(row)
            continue
        capacity = float(session_profile(rs.session).memory_bytes)
        memory = stage_memory(rs.session)
        need, fits, _ = stage_verdict(memory, capacity)
        worst = max(memory, key=lambda m: m.total_bytes)
        row.update(verdict=memory_verdict(need, capacity,
                                          rs.session.cluster.memory_reserve_fraction, fits),
                   need_gib=need / GiB, capacity_gib=capacity / GiB, stage=worst.stage,
                   terms={name: getattr(worst, attr) / GiB for name, attr in TERMS},
                   mfu=simulate(rs.session).report.mfu if mfu else float("nan"))
        rows.append(row)
    return rows


def counts(rows: list[dict]) -> tuple[Counter, Counter]:
    """(verdict counts, refusal causes counted)."""
    return (Counter(r["verdict"] for r in rows),
            Counter(r["cause"] for r in rows if r["verdict"] == "refused"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-mfu", action="store_true", help="memory verdicts only (no simulation)")
    args = ap.parse_args()
    rows = recipe_verdicts(mfu=not args.no_mfu)
    width = max(len(r["function"]) for r in rows)
    for r in rows:
        if r["verdict"] == "refused":
            print(f"{'refused':13s} {r['function']:{width}s}  {r['cause']}: {r['why']}")
            continue
        print(f"{r['verdict']:13s} {r['function']:{width}s}  {r['need_gib']:6.1f} / "
              f"{r['capacity_gib']:5.1f} GiB  MFU {r['mfu']:.3f}")
        if r["verdict"] == "does not fit":
            print(" " * 14 + f"stage {r['stage']}: " + ", ".join(
                f"{k} {v:.1f}" for k, v in r["terms"].items()) + " GiB")
    verdicts, causes = counts(rows)
    print()
    print(f"{len(rows)} recipes: " + ", ".join(f"{verdicts[v]} {v}" for v in (
        "fits", "tight", "does not fit", "refused")))
    for cause, n in causes.most_common():
        print(f"  refused, {cause}: {n}")
    return 1 if verdicts["does not fit"] else 0


if __name__ == "__main__":
    sys.exit(main())
