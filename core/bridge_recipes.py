"""Megatron-Bridge performance recipes: the settings behind the rows of its performance summary.

NVIDIA's Megatron-Bridge performance summary (``docs/performance-summary*.md``; the
``MB_PERF_SUMMARY`` rows of ../shared/data/public-modern/published_runs.csv) gives a run's
GPUs, precision, parallel sizes and batch, but not its recomputation, MoE dispatcher or
overlaps. Each of its runs is one function of Megatron-Bridge's ``perf_recipes`` package
(``<family>/<gpu>/<model>.py``), which sets them. :data:`BRIDGE_PERF_RECIPES` holds, for the
recipes of Megatron-Bridge 0.6.2 that match a published row on **all** of GPU kind, model,
GPU count, precision, ``t``, ``p``, ``v``, ``cp``, ``ep`` and micro-batch size, the effective
values of the settings that change a prediction (read from the recipe function and every
helper it calls: ``_benchmark_common``, ``_perf_precision``, the model's base recipe,
``CommOverlapConfig``'s defaults; Megatron-Core 0.19.2 semantics). The global batch size is
not a key: it sets how many micro-batches an iteration runs and nothing a micro-batch does;
Bridge's performance scripts take it as a command-line override of the recipe, and its
recipes vary it alone (``qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_large_scale_config`` is
the H100 Qwen3-235B recipe at global batch 512). A row whose layout differs matches nothing:
a layout sets the memory, and so the recomputation and overlaps a recipe picks, and the
reader's general assumptions apply (docs/accuracy.md).

What a recipe sets that is not modelled and changes the time refuses the row by name
(``refuse``): FP8 attention (``fp8_dot_product_attention``) and CPU activation offloading.
Settings that the prediction does not represent but that do not change the modelled work are
listed in ``not_represented`` for the record: CUDA graphs (host launch cost; the calibrated
modern stores have no host overhead), ``moe_expert_rank_capacity_factor`` 1.5 with forced
balanced routing (no token is dropped), ``fp8_output_proj`` (no Megatron-Core 0.19.2 field:
inert), the precision-aware optimizer's BF16 moments (optimizer memory and step only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BridgeRecipe", "BRIDGE_PERF_RECIPES", "BRIDGE_VERSION", "match_bridge_recipe"]

#: The Megatron-Bridge release the recipes were read from.
BRIDGE_VERSION = "Megatron-Bridge 0.6.2"


@dataclass(frozen=True)
class BridgeRecipe:
    """One performance recipe's identity and effective settings.

    ``key``: (GPU kind, model name as the summary writes it, GPUs, precision ``bf16`` /
    ``fp8`` / ``mxfp8``, t, p, v (1: no interleaving), cp, ep (1: dense), micro-batch, global
    batch as the recipe sets it). ``recompute``: ``none`` or ``selective`` with ``recompute_modules``;
    ``dispatcher``: the MoE token dispatcher (``alltoall``; ``flex`` for HybridEP / DeepEP);
    ``ep_overlap`` / ``delay_wgrad``: ``overlap_moe_expert_parallel_comm`` /
    ``delay_wgrad_compute``; ``tp_comm_overlap``: as the recipe's ``CommOverlapConfig`` asks
    (Bridge switches it off at run time without tensor parallelism); ``mtp_num_layers``: the
    base recipe's multi-token prediction layers; ``refuse``: (cause, why) of a setting that is
    not modelled."""

    function: str
    source: str
    key: tuple
    recompute: str = "none"
    recompute_modules: str | None = None
    dispatcher: str | None = None
    ep_overlap: bool = False
    delay_wgrad: bool = False
    tp_comm_overlap: bool | None = None
    mtp_num_layers: int | None = None
    refuse: tuple[str, str] | None = None
    not_represented: tuple[str, ...] = field(default=())


_FP8_DPA = ("FP8 attention (fp8_dot_product_attention)",
            "the recipe runs the attention core in FP8 (fp8_dot_product_attention=True); FP8 "
            "attention is not modelled (the core is timed in BF16)")
_FULL_GRAPH = "full-iteration CUDA graph"
_GPT_OSS_MODULES = "layernorm,moe_act"

#: Megatron-Bridge 0.6.2 performance recipes that match published rows exactly (module doc).
#: Paths are relative to ``megatron/bridge/perf_recipes``.
BRIDGE_PERF_RECIPES: tuple[BridgeRecipe, ...] = (
    BridgeRecipe("llama31_405b_pretrain_1024gpu_h100_fp8cs_config", "llama/h100/llama31.py:69",
                 ("H100-SXM5-80GB", "Llama3.1-405B", 1024, "fp8", 8, 8, 8, 2, 1, 1, 1536),
                 tp_comm_overlap=True),
    BridgeRecipe("llama3_70b_pretrain_64gpu_h100_fp8cs_config", "llama/h100/llama3.py:157",
                 ("H100-SXM5-80GB", "Llama3-70B", 64, "fp8", 4, 8, 5, 1, 1, 1, 256),
                 tp_comm_overlap=True),
    BridgeRecipe("gpt_oss_120b_pretrain_64gpu_h100_bf16_config", "gpt_oss/h100/gpt_oss.py:27",
                 ("H100-SXM5-80GB", "GPT-OSS-120B", 64, "bf16", 1, 4, 1, 1, 8, 1, 1280),
                 recompute="selective", recompute_modules=_GPT_OSS_MODULES, dispatcher="alltoall"),
    BridgeRecipe("qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config", "qwen/h100/qwen3_moe.py:66",
                 ("H100-SXM5-80GB", "Qwen3-30B-A3B", 16, "fp8", 1, 1, 1, 1, 16, 1, 1024),
                 dispatcher="flex"),
    BridgeRecipe("qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config", "qwen/h100/qwen3_moe.py:170",
                 ("H100-SXM5-80GB", "Qwen3-235B-A22B", 256, "fp8", 2, 8, 4, 1, 32, 1, 8192),
                 dispatcher="alltoall", ep_overlap=True, delay_wgrad=True, tp_comm_overlap=False),
    BridgeRecipe("llama3_8b_pretrain_8gpu_b200_fp8cs_config", "llama/b200/llama3.py:73",
                 ("B200-180GB", "Llama3-8B", 8, "fp8", 1, 1, 1, 1, 1, 2, 128),
                 not_represented=(_FULL_GRAPH,)),
    BridgeRecipe("gpt_oss_120b_pretrain_64gpu_b200_bf16_config", "gpt_oss/b200/gpt_oss.py:27",
                 ("B200-180GB", "GPT-OSS-120B", 64, "bf16", 1, 1, 1, 1, 8, 4, 1280),
                 recompute="selective", recompute_modules=_GPT_OSS_MODULES, dispatcher="alltoall"),
    BridgeRecipe("qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx_config", "qwen/b200/qwen3_moe.py:284",
                 ("B200-180GB", "Qwen3-30B-A3B", 8, "mxfp8", 1, 1, 1, 1, 8, 4, 512),
                 dispatcher="flex", ep_overlap=True, delay_wgrad=True, refuse=_FP8_DPA,
                 not_represented=(_FULL_GRAPH, "moe_expert_rank_capacity_factor 1.5")),
    BridgeRecipe("llama31_405b_pretrain_256gpu_gb200_fp8cs_config", "llama/gb200/llama31.py:245",
                 ("GB200-NVL72", "Llama3.1-405B", 256, "fp8", 4, 16, 4, 1, 1, 1, 1536),
                 tp_comm_overlap=True),
    BridgeRecipe("llama3_70b_pretrain_64gpu_gb200_fp8cs_config", "llama/gb200/llama3.py:251",
                 ("GB200-NVL72", "Llama3-70B", 64, "fp8", 1, 1, 1, 1, 1, 2, 256),
                 refuse=("CPU activation offloading",
                         "the recipe offloads the activations of 40 of the 80 layers to CPU "
                         "memory (cpu_offloading_num_layers=40, Megatron-FSDP); activation "
                         "offloading is not modelled")),
    BridgeRecipe("llama3_8b_pretrain_8gpu_gb200_fp8cs_config", "llama/gb200/llama3.py:75",
                 ("GB200-NVL72", "Llama3-8B", 8, "fp8", 1, 1, 1, 1, 1, 2, 128),
                 not_represented=(_FULL_GRAPH,)),
    BridgeRecipe("deepseek_v3_pretrain_256gpu_gb200_fp8mx_config", "deepseek/gb200/deepseek_v3.py:131",
                 ("GB200-NVL72", "DeepSeek-V3", 256, "mxfp8", 1, 4, 4, 1, 64, 1, 4096),
                 recompute="selective", recompute_modules="mla_up_proj", dispatcher="flex",
                 ep_overlap=True, delay_wgrad=True, tp_comm_overlap=False, mtp_num_layers=1,
                 not_represented=(_FULL_GRAPH, "moe_expert_rank_capacity_factor 1.5",
                                  "fp8_output_proj (inert in Megatron-Core 0.19.2)",
                                  "precision-aware optimizer (BF16 moments)")),
    BridgeRecipe("deepseek_v3_pretrain_256gpu_gb200_bf16_config", "deepseek/gb200/deepseek_v3.py:29",
                 ("GB200-NVL72", "DeepSeek-V3", 256, "bf16", 1, 4, 4, 1, 64, 1, 4096),
                 recompute="selective", recompute_modules="mla_up_proj", dispatcher="flex",
                 tp_comm_overlap=False, mtp_num_layers=1,
                 not_represented=("CUDA graphs of attention and router",
                                  "precision-aware optimizer (BF16 moments)")),
    BridgeRecipe("gpt_oss_120b_pretrain_64gpu_gb200_bf16_config", "gpt_oss/gb200/gpt_oss.py:182",
                 ("GB200-NVL72", "GPT-OSS-120B", 64, "bf16", 1, 1, 1, 1, 64, 4, 1280),
                 recompute="selective", recompute_modules=_GPT_OSS_MODULES, dispatcher="alltoall",
                 ep_overlap=True, delay_wgrad=True, tp_comm_overlap=False),
)

#: The recipes by key without the global batch, the model name in lower case (names compare
#: without case; the global batch is an override, module doc).
_BY_KEY = {(r.key[0], r.key[1].lower(), *r.key[2:-1]): r for r in BRIDGE_PERF_RECIPES}
assert len(_BY_KEY) == len(BRIDGE_PERF_RECIPES), "two recipes differ only in the global batch"


def match_bridge_recipe(gpu: str, model_name: str, num_gpus: int, precision: str, t: int, p: int,
                        v: int, cp: int, ep: int, micro_batch: int) -> BridgeRecipe | None:
    """The recipe of :data:`BRIDGE_PERF_RECIPES` that matches a row on every key field but the
    global batch (``recipe.key[-1]``; the caller says when the row's differs), or None.

    ``precision``: ``bf16``, ``fp8`` (per-tensor current scaling) or ``mxfp8``; ``v``, ``cp``
    and ``ep`` are 1 when unused. Model names compare without case."""
    return _BY_KEY.get((gpu, model_name.strip().lower(), num_gpus, precision, t, p, v, cp, ep,
                        micro_batch))
