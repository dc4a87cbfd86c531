"""Megatron-Bridge performance recipes: the settings behind the rows of its performance summary.

NVIDIA's Megatron-Bridge performance summary (``docs/performance-summary*.md``; the
``MB_PERF_SUMMARY`` rows of ../shared/data/public-modern/published_runs.csv) gives a run's
GPUs, precision, parallel sizes and batch, but not its recomputation, MoE dispatcher or
overlaps. Each of its runs is one function of Megatron-Bridge's ``perf_recipes`` package
(``<family>/<gpu>/<model>.py``), which sets them. ``resources/bridge_perf_recipes.json``
holds the effective settings of every pretraining performance recipe of Megatron-Bridge 0.6.2
for the models the summary covers (Llama3-8B, Llama3-70B, Llama3.1-405B, Qwen3-30B-A3B,
Qwen3-235B-A22B, DeepSeek-V3, GPT-OSS-120B) on H100, B200 and GB200: 119 recipes, read from
the recipe functions and every helper they call (``_benchmark_common``, ``_perf_precision``,
the model's base recipe, the family helpers, ``CommOverlapConfig`` and
``MixedPrecisionConfig`` setup; Megatron-Core 0.19.2 semantics) and cross-checked by running
them on CPU with torch and Transformer Engine stubbed (the file's ``provenance``).
:data:`BRIDGE_PERF_RECIPES` holds them as :class:`BridgeRecipe`.

Matching (:func:`match_bridge_recipe`): a published row takes the recipe that matches it on
**all** of GPU kind, model, GPU count, precision, ``t``, ``p``, ``v``, ``cp``, ``ep`` and
micro-batch size. The global batch size is not a key: it sets how many micro-batches an
iteration runs and nothing a micro-batch does; Bridge's performance scripts take it as a
command-line override of the recipe, and its recipes vary it alone
(``qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_large_scale_config`` is the H100 Qwen3-235B
recipe at global batch 512). Where several recipes share a key, the summary's own recipe
(the plain ``<model>_pretrain_<n>gpu_<gpu>_<precision>_config``, not a ``_dev``,
``_ncclep``, ``_partial_cg`` or ``_large_scale`` variant) wins, then the one with the row's
global batch; recipes that still disagree on a setting the prediction uses match nothing.

A row whose layout differs from every recipe's (an older container's run, another GPU count)
may still take what **all** the summary recipes of its GPU kind, model and precision agree on
(:func:`bridge_recipe_family`): the recomputation, the MoE dispatcher, the expert all-to-all
overlap, delayed weight gradients, TP communication overlap and MTP layers, each only where
every one of them sets the same value. Refusals are never taken from the family: they need
the row's own recipe.

What a matched recipe runs that is not modelled and changes the time refuses the row by name
(``refuse``): FP8 attention (``fp8_dot_product_attention``), CPU activation offloading
(``cpu_offloading_num_layers``, or fine-grained offloading of modules) and precisions other
than BF16, FP8 current scaling, MXFP8 and FP8 sub-channel (blockwise) scaling. Settings that
the prediction does not represent but that do not change the modelled work are listed in
``not_represented`` for the record: ``moe_expert_rank_capacity_factor`` with forced balanced routing
(no token is dropped), ``fp8_output_proj`` (no Megatron-Core 0.19.2 field: inert),
Transformer Engine's op fuser (the same GEMMs, fused). The precision-aware optimizer is
represented (``optimizer``: the plan's ``use_precision_aware_optimizer`` and state dtypes;
Megatron-Bridge's ``MixedPrecisionConfig`` passes ``fp8_recipe`` tensorwise to the optimizer
config even in BF16, so Megatron-Core keeps the fp32 master weights unless the recipe trains
FP8 with delayed scaling: ``te_master_weights``, :func:`core.model.memory.
optimizer_holds_master_weights`).

CUDA graphs are represented: the recipe's ``cuda_graph`` (its implementation, then
``modules=[...]`` for Transformer Engine's per-module graphs, or a parenthesized remark) is
read into ``cuda_graph_impl`` / ``cuda_graph_modules`` (:func:`parse_recipe_cuda_graph`), the
plan fields of the same names; a recipe whose graphs the simulator refuses (the whole layers
of an MoE model) is refused by the plan's validation, by name.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.plan.parallel import CUDA_GRAPH_IMPLS

__all__ = ["BridgeRecipe", "BRIDGE_PERF_RECIPES", "BRIDGE_VERSION", "BRIDGE_RECIPES_FILE",
           "match_bridge_recipe", "bridge_recipe_family", "load_bridge_recipes", "FAMILY_SETTINGS",
           "model_key", "parse_recipe_cuda_graph", "apply_recipe"]

#: The Megatron-Bridge release the recipes were read from.
BRIDGE_VERSION = "Megatron-Bridge 0.6.2"


#: The recipe table (module doc).
BRIDGE_RECIPES_FILE = Path(__file__).resolve().parents[2] / "resources" / "bridge_perf_recipes.json"

@dataclass(frozen=True)
class BridgeRecipe:
    """One performance recipe's identity and effective settings.

    ``key``: (GPU kind, model name as the summary writes it, GPUs, precision ``bf16`` /
    ``fp8`` / ``mxfp8`` / ``fp8sc`` / ``nvfp4``, t, p, v (1: no interleaving), cp, ep (1:
    dense), micro-batch, global batch as the recipe sets it). ``recompute``: ``none``,
    ``selective`` with ``recompute_modules`` or ``full`` (``recompute_num_layers``: the
    block method's layers per chunk; None: every layer); ``dispatcher``: the MoE token
    dispatcher (``alltoall``; ``flex`` for HybridEP / DeepEP); ``ep_overlap`` /
    ``delay_wgrad``: ``overlap_moe_expert_parallel_comm`` / ``delay_wgrad_compute``;
    ``tp_comm_overlap``: in force at run time (off without t > 1 and sequence parallelism);
    ``mtp_num_layers``: the base recipe's multi-token prediction layers; ``refuse``: (cause,
    why) of a setting that is not modelled; ``summary``: the plain recipe of its key (not a
    ``_dev``, ``_ncclep``, ``_partial_cg``, ``_paged_stash`` or ``_large_scale`` variant);
    ``overlap_grad_reduce`` / ``overlap_param_gather``: the DDP overlaps in force;
    ``fp8_param_gather``: the FP8 parameter all-gather; ``pipeline_layout``: the custom
    pipeline layout in Megatron's string form (``E`` embedding, ``t`` layer, ``m`` MTP, ``L``
    loss, ``|`` between virtual stages), None without one; ``cuda_graph_impl`` /
    ``cuda_graph_modules``: the CUDA graphs (:func:`parse_recipe_cuda_graph`). ``uncertain``: the
    recipe file's notes where the recipe's own source disagrees with itself (its docstring
    against its code) or cannot be run as named, verbatim; ``alias_of``: the file's note on a
    module-level alias of another GPU's recipe function, verbatim (None otherwise);
    ``docstring_layout``: ``(("t", .), ("p", .), ("cp", .))`` where the recipe's docstring
    states a layout its code does not set (empty otherwise): the layout its memory verdict is
    also shown at (:func:`core.accuracy.bridge_sessions.docstring_layout_session`)."""

    function: str
    source: str
    key: tuple
    recompute: str = "none"
    recompute_modules: str | None = None
    recompute_num_layers: int | None = None
    dispatcher: str | None = None
    ep_overlap: bool = False
    delay_wgrad: bool = False
    tp_comm_overlap: bool | None = None
    mtp_num_layers: int | None = None
    refuse: tuple[str, str] | None = None
    not_represented: tuple[str, ...] = field(default=())
    summary: bool = True
    sequence_parallel: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    fp8_param_gather: bool | None = None
    pipeline_layout: str | None = None
    seq_length: int | None = None
    cuda_graph_impl: str = "none"
    cuda_graph_modules: str | None = None
    #: the expert tensor-parallel size the recipe sets (None: Megatron-Core's default, t)
    etp: int | None = None
    #: the precision-aware optimizer's plan fields, ``(name, value)`` pairs (:func:`_optimizer`)
    optimizer: tuple[tuple[str, Any], ...] = ()
    uncertain: tuple[str, ...] = ()
    alias_of: str | None = None
    docstring_layout: tuple[tuple[str, int], ...] = ()

    def settings(self) -> tuple:
        """The settings a prediction takes from the recipe (to compare recipes that share a
        key)."""
        return (self.recompute, self.recompute_modules, self.recompute_num_layers,
                self.dispatcher, self.ep_overlap, self.delay_wgrad, self.tp_comm_overlap,
                self.mtp_num_layers, self.refuse, self.overlap_grad_reduce,
                self.overlap_param_gather, self.fp8_param_gather, self.pipeline_layout,
                self.cuda_graph_impl, self.cuda_graph_modules, self.optimizer)

    def setting(self, name: str) -> Any:
        """The value of one of :data:`FAMILY_SETTINGS`: the attribute, and for ``recompute``
        the triple ``(recompute, recompute_modules, recompute_num_layers)``."""
        if name == "recompute":
            return self.recompute, self.recompute_modules, self.recompute_num_layers
        return getattr(self, name)


_FP8_DPA = ("FP8 attention (fp8_dot_product_attention)",
            "the recipe runs the attention core in FP8 (fp8_dot_product_attention=True); FP8 "
            "attention is not modelled (the core is timed in BF16)")
_SUMMARY_NAME = re.compile(r"^[a-z0-9_]+_pretrain_\d+gpu_(h100|b200|gb200)_(bf16|fp8cs|fp8mx|fp8sc|nvfp4)"
                           r"_config$")


def _recipe(d: dict[str, Any]) -> BridgeRecipe:
    """A :class:`BridgeRecipe` from one entry of the recipe file (its raw settings; the rules
    of the module doc)."""
    gran = d.get("recompute_granularity")
    modules = d.get("recompute_modules")
    recompute, mods, layers = "none", None, None
    if gran == "selective" and modules != []:  # [] recomputes nothing (Megatron-Core: only
        recompute = "selective"                 # None becomes [core_attn])
        mods = ",".join(modules) if modules else None
    elif gran == "full":
        recompute = "full"
        # block: the first N layers of each chunk; uniform: every layer, in groups of N
        layers = int(d["recompute_num_layers"]) if d.get("recompute_method") == "block" else None
    refuse = None
    if d.get("fp8_dot_product_attention"):
        refuse = _FP8_DPA
    elif d.get("cpu_offloading_num_layers"):
        n = int(d["cpu_offloading_num_layers"])
        refuse = ("CPU activation offloading",
                  f"the recipe offloads the activations of {n} of the layers to CPU memory "
                  f"(cpu_offloading_num_layers={n}"
                  + (", Megatron-FSDP" if d.get("use_megatron_fsdp") else "")
                  + "); activation offloading is not modelled")
    elif d.get("fine_grained_activation_offloading") and d.get("offload_modules"):
        mods_off = ", ".join(d["offload_modules"])
        refuse = ("CPU activation offloading",
                  f"the recipe offloads the activations of {mods_off} to CPU memory "
                  "(fine_grained_activation_offloading); activation offloading is not modelled")
    elif d["precision"] == "nvfp4":
        refuse = ("NVFP4", "the recipe trains in NVFP4 (4-bit floating point with block "
                           "scales); NVFP4 is not modelled")
    graph_impl, graph_modules = parse_recipe_cuda_graph(d.get("cuda_graph"))
    notes = []
    if d.get("moe_expert_rank_capacity_factor"):
        notes.append(f"moe_expert_rank_capacity_factor {d['moe_expert_rank_capacity_factor']}")
    if d.get("fp8_output_proj"):
        notes.append("fp8_output_proj (inert in Megatron-Core 0.19.2)")
    if d.get("use_transformer_engine_op_fuser"):
        notes.append("Transformer Engine op fuser")
    key = (d["gpu"], d["model"], int(d["num_gpus"]), d["precision"], int(d["t"]), int(d["p"]),
           int(d["v"] or 1), int(d["cp"] or 1), int(d["ep"] or 1), int(d["micro_batch"]),
           int(d["global_batch"]))
    return BridgeRecipe(
        d["function"], d["source"], key, recompute, mods, layers,
        dispatcher=d.get("moe_token_dispatcher_type"),  # null for the dense models
        ep_overlap=bool(d.get("overlap_moe_expert_parallel_comm")),
        delay_wgrad=bool(d.get("delay_wgrad_compute")),
        tp_comm_overlap=d.get("tp_comm_overlap"),
        mtp_num_layers=d.get("mtp_num_layers") or None,
        refuse=refuse, not_represented=tuple(notes),
        summary=bool(_SUMMARY_NAME.match(d["function"])),
        sequence_parallel=bool(d.get("sequence_parallel")),
        overlap_grad_reduce=bool(d.get("overlap_grad_reduce", True)),
        overlap_param_gather=bool(d.get("overlap_param_gather", True)),
        fp8_param_gather=d.get("fp8_param_gather"),
        pipeline_layout=_layout_string(d.get("pipeline_model_parallel_layout")),
        cuda_graph_impl=graph_impl, cuda_graph_modules=graph_modules,
        seq_length=int(d["seq_length"]) if d.get("seq_length") else None,
        etp=int(d["etp"]) if d.get("etp") else None,
        optimizer=_optimizer(d),
        uncertain=tuple(str(x) for x in d.get("uncertain") or ()),
        alias_of=d.get("alias_of") or None,
        docstring_layout=tuple((name, int(d["docstring_layout"][name]))
                               for name in ("t", "p", "cp")) if d.get("docstring_layout") else ())


def _optimizer(d: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The plan's precision-aware optimizer fields a recipe sets (``(name, value)`` pairs;
    empty without it). Its ``main_grads_dtype`` is not among them: Megatron-Core 0.16.1 reads it
    only in an assertion, and the perf recipes' gradient buffer is bf16
    (``grad_reduce_in_fp32=False``, ``plan.grad_reduce_dtype``)."""
    if not d.get("use_precision_aware_optimizer"):
        return ()
    # Bridge's optimizer config gets fp8_recipe tensorwise (BF16 too), and no perf recipe
    # trains delayed-scaling FP8: Megatron-Core keeps the fp32 master weights in every one
    return (("use_precision_aware_optimizer", True), ("te_master_weights", False),
            ("main_params_dtype", d.get("main_params_dtype", "fp32")),
            ("exp_avg_dtype", d.get("exp_avg_dtype", "fp32")),
            ("exp_avg_sq_dtype", d.get("exp_avg_sq_dtype", "fp32")))


def parse_recipe_cuda_graph(text: str | None) -> tuple[str, str | None]:
    """``(cuda_graph_impl, cuda_graph_modules)`` of a recipe's ``cuda_graph`` entry: its first
    word is the implementation (Megatron-Core's ``--cuda-graph-impl`` choices; ``none`` when
    empty); what follows is nothing, a parenthesized remark (e.g. how Megatron-Core migrated
    it), or ``modules=[...]``, a Python list of module names (comma-joined in the result; None
    without modules: the whole layer).

    Raises
    ------
    ValueError
        An implementation Megatron-Core does not have, or anything else after it (the recipe
        file is data this function must read whole).
    """
    words = str(text or "none").strip()
    impl, _, rest = words.partition(" ")
    rest = rest.strip()
    if impl not in CUDA_GRAPH_IMPLS:
        raise ValueError(f"cuda_graph {words!r}: {impl!r} is not one of {', '.join(CUDA_GRAPH_IMPLS)}")
    if not rest or (rest.startswith("(") and rest.endswith(")")):
        return impl, None
    if rest.startswith("modules="):
        mods = ast.literal_eval(rest[len("modules="):])
        if isinstance(mods, list) and all(isinstance(m, str) for m in mods):
            return impl, ",".join(mods) or None
    raise ValueError(f"cuda_graph {words!r}: expected modules=[...] or a remark in parentheses "
                     f"after {impl!r}")


_LAYOUT_SYMBOLS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def _layout_string(layout: Any) -> str | None:
    """A recipe's ``pipeline_model_parallel_layout`` in Megatron's string form: a string as
    it is, a list of virtual stages (lists of ``embedding``, ``decoder``, ``mtp``, ``loss``)
    joined with ``|``; None without one."""
    if not layout:
        return None
    if isinstance(layout, str):
        return layout
    return "|".join("".join(_LAYOUT_SYMBOLS[x] for x in stage) for stage in layout)


def model_key(name: str) -> str:
    """A model name as recipes are matched: lower case, without spaces, hyphens, underscores
    and other punctuation but the dot (``Llama-3 70B`` and ``llama3_70b`` are ``llama370b``;
    ``Llama3.1-405B`` is ``llama3.1405b``)."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


@lru_cache(maxsize=None)
def load_bridge_recipes(path: str | None = None) -> tuple[BridgeRecipe, ...]:
    """The recipes of the recipe file (``path``, default :data:`BRIDGE_RECIPES_FILE`).

    Raises
    ------
    OSError, ValueError, KeyError
        The file is missing or not the recipe table (a packaging fault, not user input)."""
    doc = json.loads(Path(path or BRIDGE_RECIPES_FILE).read_text())
    if doc.get("format") != "vtrain-bridge-perf-recipes":
        raise ValueError(f"{path or BRIDGE_RECIPES_FILE}: not a Megatron-Bridge recipe table")
    return tuple(_recipe(d) for d in doc["recipes"])


#: The recipes of Megatron-Bridge 0.6.2 (module doc).
BRIDGE_PERF_RECIPES: tuple[BridgeRecipe, ...] = load_bridge_recipes()


def _index() -> dict[tuple, list[BridgeRecipe]]:
    out: dict[tuple, list[BridgeRecipe]] = {}
    for r in BRIDGE_PERF_RECIPES:
        out.setdefault((r.key[0], model_key(r.key[1]), *r.key[2:-1]), []).append(r)
    return out


#: The recipes by key without the global batch, the model name in lower case (names compare
#: without case; the global batch is an override, module doc).
_BY_KEY = _index()


def match_bridge_recipe(gpu: str, model_name: str, num_gpus: int, precision: str, t: int, p: int,
                        v: int, cp: int, ep: int, micro_batch: int,
                        global_batch: int | None = None,
                        seq_length: int | None = None) -> BridgeRecipe | None:
    """The recipe of :data:`BRIDGE_PERF_RECIPES` that matches a row on every key field but the
    global batch (``recipe.key[-1]``; the caller says when the row's differs), or None.

    ``precision``: ``bf16``, ``fp8`` (per-tensor current scaling), ``mxfp8`` or ``fp8sc``
    (blockwise); ``v``, ``cp`` and ``ep`` are 1 when unused. Model names compare by
    :func:`model_key`.
    Of several recipes with the key, the summary's plain recipes count first, then those at
    ``global_batch``; None when those left disagree on a setting (:meth:`BridgeRecipe.settings`)."""
    found = _BY_KEY.get((gpu, model_key(model_name), num_gpus, precision, t, p, v, cp, ep,
                         micro_batch), [])
    if seq_length is not None:  # a run at another sequence length is not the recipe's
        found = [r for r in found if r.seq_length in (None, seq_length)]
    found = [r for r in found if r.summary] or found
    if global_batch is not None:
        found = [r for r in found if r.key[-1] == global_batch] or found
    if not found or len({r.settings() for r in found}) > 1:
        return None
    return found[0]


#: The settings :func:`bridge_recipe_family` reports (BridgeRecipe attribute names).
FAMILY_SETTINGS = ("recompute", "dispatcher", "ep_overlap", "delay_wgrad", "tp_comm_overlap",
                   "mtp_num_layers", "overlap_grad_reduce", "overlap_param_gather")


@dataclass(frozen=True)
class RecipeFamily:
    """What all the summary recipes of one GPU kind, model and precision agree on.

    ``recipes``: their function names; ``settings``: setting name (:data:`FAMILY_SETTINGS`)
    to the value every one of them has; ``recompute`` comes with ``recompute_modules`` and
    ``recompute_num_layers`` (one setting); ``layouts``: per ``(p, v)``, the custom pipeline
    layout all of the family's recipes at that ``p`` and ``v`` share."""

    recipes: tuple[str, ...]
    settings: dict[str, Any]
    #: (p, v) to the custom pipeline layout every recipe of the family at that p and v has
    layouts: dict[tuple[int, int], str] = field(default_factory=dict)


def bridge_recipe_family(gpu: str, model_name: str, precision: str) -> RecipeFamily | None:
    """The settings all summary recipes (:attr:`BridgeRecipe.summary`) of ``gpu``,
    ``model_name`` (:func:`model_key`) and ``precision`` agree on (module doc), or None when
    there is no such recipe. Recipes refused by name (``refuse``) are not family: what they run
    is not what the prediction would. The TP communication overlap counts only recipes with
    ``t > 1`` and sequence parallelism (Bridge switches it off at run time otherwise, whatever
    the recipe asks)."""
    name = model_key(model_name)
    rs = [r for r in BRIDGE_PERF_RECIPES if r.summary and r.refuse is None and r.key[0] == gpu
          and model_key(r.key[1]) == name and r.key[3] == precision]
    if not rs:
        return None
    settings: dict[str, Any] = {}
    for s in FAMILY_SETTINGS:
        vals = {r.setting(s) for r in rs
                if s != "tp_comm_overlap" or (r.key[4] > 1 and r.sequence_parallel)}
        if len(vals) == 1:
            settings[s] = vals.pop()
    layouts: dict[tuple[int, int], str] = {}
    for pv in {(r.key[5], r.key[6]) for r in rs}:
        found = {r.pipeline_layout for r in rs if (r.key[5], r.key[6]) == pv}
        if len(found) == 1 and None not in found:
            layouts[pv] = found.pop()
    return RecipeFamily(tuple(r.function for r in rs), settings, layouts)


def apply_recipe(recipe: BridgeRecipe, body: dict[str, dict[str, Any]]) -> None:
    """The recipe's settings into the session fields the row leaves empty: recomputation
    (``recompute``, ``recompute_modules``, ``recompute_num_layers``), sequence parallelism, the
    DDP overlaps, TP communication overlap, the FP8 parameter all-gather, the custom pipeline
    layout (without its MTP layers when the model has none), MTP layers, the CUDA graphs
    (``cuda_graph_impl``, ``cuda_graph_modules``), the precision-aware optimizer and its state
    dtypes, the distributed optimizer (ZeRO-1) where it overlaps the parameter all-gather
    (Megatron-LM requires it) and, for a mixture-of-experts
    model, the token dispatcher, the expert all-to-all overlap and delayed weight gradients."""
    plan, model = body["plan"], body["model"]
    settings = {"recompute": recipe.recompute, "recompute_modules": recipe.recompute_modules,
                "recompute_num_layers": recipe.recompute_num_layers,
                "sequence_parallel": recipe.sequence_parallel,
                "overlap_grad_reduce": recipe.overlap_grad_reduce,
                "overlap_param_gather": recipe.overlap_param_gather,
                "tp_comm_overlap": recipe.tp_comm_overlap,
                "fp8_param_gather": recipe.fp8_param_gather,
                "cuda_graph_impl": recipe.cuda_graph_impl,
                "cuda_graph_modules": recipe.cuda_graph_modules}
    if (model.get("num_experts") or 0) > 1:
        settings.update(moe_token_dispatcher_type=recipe.dispatcher,
                        overlap_moe_expert_parallel_comm=recipe.ep_overlap,
                        delay_wgrad_compute=recipe.delay_wgrad)
    if recipe.overlap_param_gather:
        # Megatron-LM's validate_args: --overlap-param-gather needs --use-distributed-optimizer
        settings["zero_stage"] = 1
    settings.update(recipe.optimizer)
    if recipe.mtp_num_layers is not None:
        model.setdefault("mtp_num_layers", recipe.mtp_num_layers)
    layout = recipe.pipeline_layout
    if layout and not model.get("mtp_num_layers"):
        layout = layout.replace("m", "")
    settings["pipeline_model_parallel_layout"] = layout
    for name, value in settings.items():
        if value is not None:
            plan.setdefault(name, value)
