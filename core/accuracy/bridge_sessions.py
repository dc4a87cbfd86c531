"""A Megatron-Bridge performance recipe as a vtrain session, or why it cannot be one.

Every recipe of :data:`core.accuracy.bridge_recipes.BRIDGE_PERF_RECIPES` is a run NVIDIA made
(its performance benchmarks), so every one it models must fit in GPU memory: the session of
a recipe (:func:`recipe_session`) is what the memory verdict is checked against
(``benchmarks/bench_recipes.py``, ``tests/test_bridge_recipe_verdicts.py``).

The session is the model's preset (:data:`RECIPE_MODELS`, :data:`core.plan.presets.MODEL_PRESETS`)
at the recipe's sequence length, the recipe's plan and its GPU kind, resolved as a published
run's ``bridge-perf-recipe`` row is (``scripts/curate_runs.py``, docs/accuracy.md "Mapping
and policies"; ``../shared/data/public-modern/published_runs.sessions.jsonl`` holds such
sessions):

* the recipe's own settings (:func:`core.accuracy.bridge_recipes.apply_recipe`: recomputation,
  sequence parallelism, the DDP overlaps and the distributed optimizer, TP communication
  overlap, the FP8 parameter all-gather, the pipeline layout, MTP layers, CUDA graphs, the MoE
  dispatcher, the expert all-to-all overlap, delayed weight gradients);
* the precision: ``fp8`` is per-tensor current scaling (``fp8_recipe`` tensorwise),
  ``mxfp8`` MXFP8, ``fp8sc`` blockwise (sub-channel) scaling;
* what every performance recipe sets (``bridge-perf-bf16-grad-reduce``,
  ``bridge-perf-te-cross-entropy``): gradients reduced in bf16, Transformer Engine's fused
  cross-entropy;
* the recipe's expert tensor-parallel size; balanced routing (``moe_imbalance_factor`` 1,
  ``moe-balanced-routing``);
* layers that do not fill the ``p*v`` (virtual) stages but ``L + 2`` does: Megatron's
  ``account_for_embedding/loss_in_pipeline_split`` (``pipeline-split-embedding-loss``);
* the GPU kind's NVLink domain as the node, its reference network.

A recipe is refused, with its cause and reason, when it runs what is not modelled
(:attr:`BridgeRecipe.refuse`: FP8 attention, CPU activation offloading, NVFP4) or when its
session breaks a configuration rule (:func:`core.plan.rules.validate`: an expert-parallel
group its GPUs cannot form, CUDA graphs the simulator does not model, ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.accuracy.bridge_recipes import BRIDGE_PERF_RECIPES, BridgeRecipe
from core.accuracy.bridge_recipes import apply_recipe
from core.plan.cluster import GPU_NVLINK_DOMAIN
from core.plan.fields import ConfigError
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session

__all__ = ["RECIPE_MODELS", "RecipeSession", "docstring_layout_session", "recipe_session",
           "recipe_sessions"]

#: The recipe table's model names to their presets (:data:`core.plan.presets.MODEL_PRESETS`).
RECIPE_MODELS = {"Llama3-8B": "Llama 3 8B", "Llama3-70B": "Llama 3 70B",
                 "Llama3.1-405B": "Llama 3.1 405B", "Qwen3-30B-A3B": "Qwen3-30B-A3B",
                 "Qwen3-235B-A22B": "Qwen3-235B-A22B", "DeepSeek-V3": "DeepSeek-V3",
                 "GPT-OSS-120B": "GPT-OSS 120B"}

#: The recipe table's precisions to (plan.precision, plan.fp8_recipe); NVFP4 is refused by
#: the recipe itself (:attr:`BridgeRecipe.refuse`).
_PRECISIONS = {"bf16": ("bf16", None), "fp8": ("fp8", "tensorwise"), "mxfp8": ("fp8", "mxfp8"),
               "fp8sc": ("fp8", "blockwise")}


@dataclass(frozen=True)
class RecipeSession:
    """A recipe and its session, or the refusal: ``(cause, why)`` and no session."""

    recipe: BridgeRecipe
    session: Session | None
    refusal: tuple[str, str] | None = None


def recipe_session(recipe: BridgeRecipe) -> RecipeSession:
    """The vtrain session of ``recipe`` (module doc), or its refusal."""
    if recipe.refuse is not None:
        return RecipeSession(recipe, None, recipe.refuse)
    gpu, name, n, prec, t, p, v, cp, ep, b, gb = recipe.key
    if n % (t * p * cp):
        return RecipeSession(recipe, None, (
            "GPUs", f"{recipe.function} ({recipe.source}): {n} GPUs are not a multiple of "
            f"t*p*cp = {t * p * cp}"))
    model = dataclasses.asdict(MODEL_PRESETS[RECIPE_MODELS[name]])
    model.pop("family", None)
    if recipe.seq_length:
        model["seq_length"] = recipe.seq_length
    precision, fp8_recipe = _PRECISIONS[prec]
    d = n // (t * p * cp)
    plan = {"tensor_parallel": t, "pipeline_parallel": p, "data_parallel": d,
            "micro_batch_size": b, "global_batch_size": gb, "context_parallel": cp,
            "schedule": "interleaved" if v > 1 else "1f1b",
            "virtual_pipeline_stages": v if v > 1 else None,
            "precision": precision, "fp8_recipe": fp8_recipe, "grad_reduce_dtype": "bf16",
            "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    if (model.get("num_experts") or 0) > 1:
        plan.update(expert_parallel=ep, expert_tensor_parallel=recipe.etp,
                    moe_imbalance_factor=1.0)
    body = {"model": model, "plan": plan}
    apply_recipe(recipe, body)
    if precision != "fp8" or plan.get("zero_stage", 0) < 1:
        plan.pop("fp8_param_gather", None)  # no FP8 weights to gather
    L, stages = model["num_layers"], p * max(v, 1)
    if (not plan.get("pipeline_model_parallel_layout") and p > 1 and L % stages
            and not (L + 2) % stages):
        plan["account_for_embedding_in_pipeline_split"] = True
        plan["account_for_loss_in_pipeline_split"] = True
    cluster = {"gpu": gpu, "gpus_per_node": GPU_NVLINK_DOMAIN.get(gpu, 8)}
    where = f"{recipe.function} ({recipe.source})"
    try:
        session = Session.from_dict({**body, "cluster": cluster, "notes": where})
    except ConfigError as exc:
        e = exc.errors[0]
        return RecipeSession(recipe, None, (e.field, e.message))
    errs = validate(session)
    if errs:
        return RecipeSession(recipe, None, (errs[0].field, "; ".join(
            f"{e.field}: {e.message}" for e in errs)))
    return RecipeSession(recipe, session)


def recipe_sessions(recipes: tuple[BridgeRecipe, ...] = BRIDGE_PERF_RECIPES
                    ) -> list[RecipeSession]:
    """:func:`recipe_session` of each of ``recipes``, in order."""
    return [recipe_session(r) for r in recipes]


def docstring_layout_session(recipe: BridgeRecipe) -> RecipeSession | None:
    """The session of ``recipe`` at the layout its docstring states where its code sets
    another (:attr:`BridgeRecipe.docstring_layout`: ``t``, ``p`` and ``cp``; the data-parallel
    size follows, ``n / (t p cp)``; everything else is the recipe's), or its refusal; None when
    the docstring states no other layout.

    Five Llama 3.1 405B recipes of Megatron-Bridge 0.6.2 say "TP=4 PP=8 CP=2" in their docstring
    and set p=16 cp=1 in their code (``llama/b200/llama31.py`` lines 34, 76, 118,
    ``llama/gb200/llama31.py`` lines 28, 115; their TP-overlap configuration is still the
    ``..._tp4_cp2_...`` one); NVIDIA's published 128-GPU B200 run of that model
    (../shared/data/public-modern row 10) is t4 p8 cp2 v8. A recipe whose coded layout does
    not fit is shown at this one too (``benchmarks/bench_recipes.py``)."""
    if not recipe.docstring_layout:
        return None
    layout = dict(recipe.docstring_layout)
    gpu, name, n, prec, t, p, v, cp, ep, b, gb = recipe.key
    key = (gpu, name, n, prec, layout["t"], layout["p"], v, layout["cp"], ep, b, gb)
    return recipe_session(dataclasses.replace(recipe, key=key, docstring_layout=()))
