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
activations, workspace, allocator reserve, CUDA context, NCCL buffers; the stage is the
pipeline rank, 0-based); then the counts (fits / tight / does not fit / refused, by cause).

A recipe that does not fit or is tight also prints what the recipe file notes about its
source, verbatim (:attr:`BridgeRecipe.uncertain`: its docstring against its code;
:attr:`BridgeRecipe.alias_of`: another GPU's recipe function aliased), and, where its
docstring states another layout (:attr:`BridgeRecipe.docstring_layout`), the verdict at that
layout (:func:`core.accuracy.bridge_sessions.docstring_layout_session`).

The four that do not fit are Llama 3.1 405B at t4 p16 v8 (v4) cp1, micro-batch 1 of 8,192
tokens, no recomputation: pipeline rank 1 holds Megatron-Core's ``(p - 2)*2 + (v - 1)*p + 1
= 141`` forward chunks of one layer each (77 of two layers under v4) at 31.75 s*b*h/t bytes a
layer (26.5 in FP8): 139.9 GiB of activations (127.5) beside 60.9 GiB of weights, gradients
and optimizer state (54.9) with d = 2. Three are recipes whose docstring says TP=4 PP=8 CP=2
(at that layout they fit: 159.6 and 139.9 GiB); the fourth, on 256 B200, is the GB200
recipe aliased (tight on the GB200's 186 GiB), whose tensors alone (183.0 GiB) exceed the
B200's 180 (docs/accuracy.md, "Memory").

Run: ``python benchmarks/bench_recipes.py [--no-mfu]`` (about a minute with the MFU).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.accuracy.bridge_sessions import docstring_layout_session, recipe_sessions  # noqa: E402
from core.sim.report import memory_verdict  # noqa: E402
from core.sim.simulate import memory_verdict as stage_verdict  # noqa: E402
from core.sim.simulate import session_profile, simulate, stage_memory  # noqa: E402

GiB = 2.0 ** 30
#: The largest stage's terms printed for a plan that does not fit (StageMemory attributes).
TERMS = (("weights", "weights_bytes"), ("grads", "gradients_bytes"),
         ("optimizer", "optimizer_bytes"), ("activations", "activations_bytes"),
         ("workspace", "workspace_bytes"), ("reserve", "allocator_reserve_bytes"),
         ("context", "cuda_context_bytes"), ("nccl", "nccl_buffer_bytes"))


def session_verdict(session) -> dict:
    """``verdict`` (:func:`core.sim.report.memory_verdict`), ``need_gib`` (the largest stage's
    whole process), ``capacity_gib``, ``stage`` (that stage, 0-based) and ``terms`` (its terms,
    GiB: :data:`TERMS`) of a session."""
    capacity = float(session_profile(session).memory_bytes)
    memory = stage_memory(session)
    need, fits, _ = stage_verdict(memory, capacity)
    worst = max(memory, key=lambda m: m.total_bytes)
    return dict(verdict=memory_verdict(need, capacity, session.cluster.memory_reserve_fraction,
                                       fits),
                need_gib=need / GiB, capacity_gib=capacity / GiB, stage=worst.stage,
                terms={name: getattr(worst, attr) / GiB for name, attr in TERMS})


def recipe_verdicts(mfu: bool = True, recipes=None) -> list[dict]:
    """One dict per recipe: ``function``, ``key`` (the recipe's), ``verdict`` (``fits``,
    ``tight``, ``does not fit`` or ``refused``), ``cause`` / ``why`` of a refusal, and for a
    modelled one the fields of :func:`session_verdict` and ``mfu`` (NaN with ``mfu=False``);
    every row ``notes`` (the recipe file's notes on its source, verbatim: ``uncertain`` and
    ``alias_of``) and ``docstring`` (None, or where the recipe's docstring states another
    layout: ``layout`` (``t4 p8 cp2``) and :func:`session_verdict`'s fields at it, or
    ``refused`` with its reason)."""
    kw = {} if recipes is None else {"recipes": tuple(recipes)}
    rows = []
    for rs in recipe_sessions(**kw):
        r = rs.recipe
        row = {"function": r.function, "key": r.key,
               "notes": list(r.uncertain) + ([r.alias_of] if r.alias_of else []),
               "docstring": None}
        doc = docstring_layout_session(r)
        if doc is not None:
            layout = " ".join(f"{k}{v}" for k, v in r.docstring_layout)
            row["docstring"] = ({"layout": layout, **session_verdict(doc.session)}
                                if doc.session is not None else
                                {"layout": layout, "verdict": "refused",
                                 "why": f"{doc.refusal[0]}: {doc.refusal[1]}"})
        if rs.session is None:
            row.update(verdict="refused", cause=rs.refusal[0], why=rs.refusal[1])
            rows.append(row)
            continue
        row.update(session_verdict(rs.session),
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
            print(" " * 14 + f"stage {r['stage']} (pipeline rank, 0-based): " + ", ".join(
                f"{k} {v:.1f}" for k, v in r["terms"].items()) + " GiB")
        if r["verdict"] in ("does not fit", "tight"):
            for note in r["notes"]:
                print(" " * 14 + f"recipe file notes: {note}")
            doc = r["docstring"]
            if doc is not None and doc["verdict"] == "refused":
                print(" " * 14 + f"at its docstring's {doc['layout']}: refused, {doc['why']}")
            elif doc is not None:
                print(" " * 14 + f"at its docstring's {doc['layout']}: {doc['verdict']}, "
                      f"{doc['need_gib']:.1f} / {doc['capacity_gib']:.1f} GiB")
    verdicts, causes = counts(rows)
    print()
    print(f"{len(rows)} recipes: " + ", ".join(f"{verdicts[v]} {v}" for v in (
        "fits", "tight", "does not fit", "refused")))
    for cause, n in causes.most_common():
        print(f"  refused, {cause}: {n}")
    return 1 if verdicts["does not fit"] else 0


if __name__ == "__main__":
    sys.exit(main())
