"""Does the default sweep find the plans NVIDIA's experts chose? The Megatron-Bridge recipes.

Every modelled pretraining performance recipe of Megatron-Bridge 0.6.2
(``resources/bridge_perf_recipes.json``, built by
:func:`core.accuracy.bridge_sessions.recipe_sessions`; the refused ones are skipped) is a plan
an expert Megatron-Core user chose. For each, this benchmark

* simulates the recipe's own plan (:func:`core.sim.simulate.simulate`: iteration time; the
  memory verdict of :func:`core.sim.report.memory_verdict`, as ``bench_recipes.py``);
* runs the default sweep (:meth:`core.studies.sweep.SweepSpace.default_on`, the session's
  values NOT held) on exactly the recipe's GPU count, for a session with the recipe's model
  (the preset at the recipe's sequence length), GPU kind and cluster, global batch and
  precision (with its FP8 recipe) and balanced routing (``moe_imbalance_factor``, a
  modelling assumption of the recipe sessions), and every other plan field at
  :func:`core.io.hf_import.default_plan`'s (what ``vtrain import preset`` writes):
  what a user who asks "which plan is best" for this job gets;
* prints the sweep's fastest plan that fits (or is tight) and its time, and the ratio
  recipe / sweep.

A row is flagged ``MISSED`` when the recipe's plan fits (or is tight) and is more than 0.5 %
faster than the sweep's best: a plan the sweep does not reach. For such a row (and, with
``--why``, for every row) the recipe plan's fields whose values are outside the sweep's
space are named (each plan field's values in :attr:`SweepResult.dimensions`, swept or held:
a custom pipeline layout, CUDA graphs, recompute modules, the precision-aware optimizer,
gradients reduced in bf16 ...), and, when no swept plan has the recipe's combination of
:data:`STRUCTURE` values, the pairs of them no swept plan has (:func:`missing_combination`).
``--keep FIELD,...`` copies those fields of the recipe's
plan into the sweep's session (the sweep then holds them at the recipe's values, or, for
those it chooses, starts from them), to check that they explain the gap.

The exit status is 0 (the flagged rows are findings, not failures).

Found (2026-12-05, 35 dense and 12 MoE recipes): 6 missed, all Llama 3.1 405B, by 0.5-1.2 %.
On H100 (512 and 1,024 GPUs) the gradients reduced in bf16 (``grad_reduce_dtype``, and
``fp8_param_gather`` with FP8) that every recipe sets and the sweep holds at the session's
(fp32): with ``--keep grad_reduce_dtype,fp8_param_gather`` the sweep finds the recipe's plan
(ratio 1.0000). On B200 the same, and with v=8 the pair p=16, v=8 (126 layers + embedding +
loss = 128 slots over 128 virtual stages, one slot each), which the sweep did not make
(:func:`core.studies.sweep.splits.slots_split` asked two slots per virtual stage when it added
the flags): t4 p16 v8 on 128 B200s (mxfp8) stayed 1.0 % faster than the sweep's best with the
fields kept. Since then (2026-12-05) the interleaved schedule may give the embedding and the
loss a virtual stage each: with the two fields kept (``--only 405B --gpu B200 --max-gpus 256
--keep grad_reduce_dtype,fp8_param_gather``) none of the 12 B200 and GB200 recipes is missed.

Wall time of one recipe's sweep on the 2-core development machine (``--workers 1``, other
work running; measured 2026-12-05): Llama 3 8B 1-11 s, Llama 3 70B on 64 GPUs 5-9 s, Llama 3.1
405B on 128-1,024 GPUs 8-20 s (40-60 s with two other sweeps beside it): the 35 modelled
Llama 3 recipes in about 6 minutes. Mixture-of-experts: Qwen3-30B-A3B 18 s on 8 GPUs, 34 s on
16, 187 s on 64 (940,872 plans); GPT-OSS 120B on 64 GPUs 58-87 s; Qwen3-235B-A22B on 64 GPUs 111 s
(840,552 plans); DeepSeek-V3 on 256 B200s
585 s (2,087,320 plans, two other sweeps beside it). Every modelled recipe: well over an hour
(use ``--only`` / ``--gpu`` / ``--precision`` / ``--max-gpus``).

Run: ``python benchmarks/bench_sweep_recipes.py [--only Llama3-70B] [--gpu H100] [--max-gpus N]
[--workers 1] [--keep FIELD,...] [--why]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.accuracy.bridge_sessions import recipe_sessions  # noqa: E402
from core.io.hf_import import default_plan  # noqa: E402
from core.plan.fields import ConfigError  # noqa: E402
from core.plan.parallel import PLAN_FIELDS  # noqa: E402
from core.sim.report import memory_verdict  # noqa: E402
from core.sim.simulate import memory_verdict as stage_verdict  # noqa: E402
from core.sim.simulate import session_profile, simulate, stage_memory  # noqa: E402
from core.studies.sweep import SweepSpace, run_sweep  # noqa: E402
from core.studies.sweep.dimensions import value_text  # noqa: E402

#: A recipe is "missed" when its plan is faster than the sweep's best by more than this.
MISS_MARGIN = 0.005

#: The recipe plan's fields the sweep's session takes from the recipe: the job (global batch,
#: precision and its FP8 recipe), not a plan choice, and the recipe sessions' balanced routing
#: (a modelling assumption).
JOB_FIELDS = ("global_batch_size", "precision", "fp8_recipe", "moe_imbalance_factor")

#: Fields that say nothing of the plan's speed (the GPU count's parts are checked through
#: t, p, d, cp).
_IGNORED = frozenset({"global_batch_size"})


def sweep_session(recipe_session, keep=()):
    """The session the default sweep runs for a recipe: the recipe session's model and
    cluster, :func:`default_plan` of the model with :data:`JOB_FIELDS` and ``keep`` (plan
    field names) copied from the recipe's plan (``keep``: names of :data:`PLAN_FIELDS`)."""
    plan = recipe_session.plan
    base = default_plan(recipe_session.model)
    base = dataclasses.replace(base, **{f: getattr(plan, f) for f in (*JOB_FIELDS, *keep)})
    return dataclasses.replace(recipe_session, plan=base)


def recipe_figures(session) -> tuple[float, str, float, float]:
    """(iteration s, memory verdict, peak GiB of the largest stage, capacity GiB) of a recipe
    session's own plan."""
    capacity = float(session_profile(session).memory_bytes)
    need, fits, _ = stage_verdict(stage_memory(session), capacity)
    verdict = memory_verdict(need, capacity, session.cluster.memory_reserve_fraction, fits)
    return simulate(session).report.iteration_time_s, verdict, need / 2**30, capacity / 2**30


def outside_space(plan, dimensions) -> list[str]:
    """``field=value (sweep: values)`` for each field of ``plan`` whose value is not among the
    sweep's values of that field (:attr:`SweepResult.dimensions`)."""
    out = []
    for dim in dimensions:
        name = dim["field"]
        if name in _IGNORED:
            continue
        mine = getattr(plan, name)
        values = dim["values"]
        if value_text(_jsonable(mine)) not in {value_text(_jsonable(v)) for v in values}:
            shown = ",".join(value_text(_jsonable(v)) for v in values[:6])
            if len(values) > 6:
                shown += ",..."
            kind = "swept" if dim["swept"] else "held"
            out.append(f"{name}={value_text(_jsonable(mine))} ({kind}: {shown})")
    return out


#: The plan fields whose combination the sweep enumerates (its structure): a recipe plan whose
#: values are each among the sweep's may still be a combination the sweep never makes.
STRUCTURE = ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel",
             "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "schedule",
             "virtual_pipeline_stages", "recompute", "zero_stage")
#: Pairs of structure fields checked one by one when the whole combination is missing.
_PAIRS = (("pipeline_parallel", "virtual_pipeline_stages"), ("tensor_parallel", "pipeline_parallel"),
          ("tensor_parallel", "context_parallel"), ("expert_parallel", "expert_tensor_parallel"),
          ("pipeline_parallel", "micro_batch_size"), ("pipeline_parallel", "recompute"))


def missing_combination(plan, plans) -> list[str]:
    """When no plan of the sweep (``plans``) has ``plan``'s :data:`STRUCTURE` values together:
    one line naming the combination, and one per pair of :data:`_PAIRS` no sweep plan has
    (e.g. ``pipeline_parallel=16 with virtual_pipeline_stages=8``); else []."""
    def key(q, fields):
        return tuple(getattr(q, f) for f in fields)
    if key(plan, STRUCTURE) in {key(q, STRUCTURE) for q in plans}:
        return []
    out = ["no swept plan has the recipe's " + " ".join(
        f"{f}={value_text(getattr(plan, f))}" for f in STRUCTURE) + " together"]
    for pair in _PAIRS:
        if key(plan, pair) not in {key(q, pair) for q in plans}:
            out.append(f"no swept plan has {pair[0]}={value_text(getattr(plan, pair[0]))} with "
                       f"{pair[1]}={value_text(getattr(plan, pair[1]))}")
    return out


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return v


def run_one(rs, workers: int, keep, why: bool) -> dict:
    """One recipe's row (module doc)."""
    n = rs.session.plan.num_gpus
    t_recipe, verdict, need, cap = recipe_figures(rs.session)
    session = sweep_session(rs.session, keep)
    t0 = time.perf_counter()
    result = run_sweep(session, SweepSpace.default_on(session, n), workers=workers)
    wall = time.perf_counter() - t0
    row = dict(name=rs.recipe.function, gpus=n, recipe_plan=rs.session.plan.label(),
               t_recipe=t_recipe, verdict=verdict, need=need, cap=cap, wall=wall,
               plans=result.num_plans, best=None, t_best=float("nan"), missed=False, outside=[])
    f = result.fastest
    if f is not None:
        row.update(best=result.plans[f].label(), t_best=float(result.iteration_time_s[f]),
                   best_verdict=str(result.memory_verdict[f]))
    fits = verdict in ("fits", "tight")
    row["missed"] = fits and (f is None or t_recipe < row["t_best"] * (1.0 - MISS_MARGIN))
    if row["missed"] or why:
        row["outside"] = (outside_space(rs.session.plan, result.dimensions)
                          + missing_combination(rs.session.plan, result.plans))
    return row


def print_row(r: dict) -> None:
    ratio = r["t_recipe"] / r["t_best"] if r["best"] else float("nan")
    flag = "MISSED" if r["missed"] else ("ok" if r["best"] else "no plan")
    print(f"{flag:7s} {r['name']}  {r['gpus']} GPUs  [{r['plans']:,} plans, sweep {r['wall']:.0f} s]",
          flush=True)
    print(f"    recipe: {r['t_recipe']:8.3f} s  {r['verdict']} ({r['need']:.1f}/{r['cap']:.0f} GiB)"
          f"  {r['recipe_plan']}")
    if r["best"]:
        print(f"    sweep : {r['t_best']:8.3f} s  {r['best_verdict']}  {r['best']}")
        print(f"    recipe / sweep = {ratio:.4f}")
    for item in r["outside"]:
        print(f"    outside the sweep's space: {item}")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="only recipes whose model name contains this (e.g. Llama3-70B)")
    ap.add_argument("--gpu", help="only recipes whose GPU kind contains this (e.g. H100)")
    ap.add_argument("--precision", help="only recipes of this precision (bf16, fp8, mxfp8, fp8sc)")
    ap.add_argument("--max-gpus", type=int, help="only recipes on at most this many GPUs")
    ap.add_argument("--workers", type=int, default=1, help="sweep processes (default 1)")
    ap.add_argument("--keep", default="", help="recipe plan fields the sweep's session keeps")
    ap.add_argument("--why", action="store_true",
                    help="name the recipe's fields outside the sweep's space on every row")
    args = ap.parse_args()
    keep = tuple(f for f in args.keep.split(",") if f)
    bad = [f for f in keep if f not in PLAN_FIELDS]
    if bad:
        print(f"--keep: not plan fields: {', '.join(bad)}", file=sys.stderr)
        return 2
    rows = []
    for rs in recipe_sessions():
        gpu, name, n, prec = rs.recipe.key[:4]
        if rs.session is None or (args.only and args.only.lower() not in name.lower()) \
                or (args.gpu and args.gpu.lower() not in gpu.lower()) \
                or (args.precision and args.precision != prec) \
                or (args.max_gpus and n > args.max_gpus):
            continue
        try:
            rows.append(run_one(rs, args.workers, keep, args.why))
        except ConfigError as exc:
            print(f"refused {rs.recipe.function}: "
                  + "; ".join(f"{e.field}: {e.message}" for e in exc.errors), flush=True)
            continue
        print_row(rows[-1])
    missed = [r for r in rows if r["missed"]]
    print(f"\n{len(rows)} recipes swept, {len(missed)} missed (recipe fits and is > "
          f"{MISS_MARGIN:.1%} faster than the sweep's best)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
