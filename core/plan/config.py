"""Typed configuration models: model, parallel plan, cluster and cost.

Every field carries its unit and meaning in its metadata (``unit``, ``help``),
which the GUI editor and the CLI use for labels and tooltips. The models are
plain dataclasses: constructing one has no side effects and performs no
validation; :func:`validate` returns every rule a configuration breaks, each
with the field it concerns, so a form can show the message next to the field.

Terms follow Megatron-LM: tensor-parallel size ``t``, pipeline-parallel size
``p``, context-parallel size ``cp``, data-parallel size ``d`` (world size ``t*p*cp*d``),
micro-batch size ``b``, global batch size ``B`` and number of micro-batches ``m = B / (d*b)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "ModelConfig",
    "ParallelPlan",
    "ClusterConfig",
    "CostConfig",
    "ReliabilityConfig", "LLAMA3_FAILURES_PER_GPU_HOUR",
    "Session",
    "FieldError",
    "ConfigError",
    "validate",
    "RECOMPUTE_MODULES",
    "recompute_modules",
    "parse_recompute_modules",
    "check_all_but_the_plan", "probe_plan",
    "expand_pipeline_layout",
    "pipeline_layout_errors",
    "pipeline_layout_text",
    "layout_layer_counts",
    "layout_summary",
    "check",
    "MODEL_PRESETS",
    "GPU_KINDS",
    "GPU_NVLINK_DOMAIN", "GPU_NIC_GBITS_PER_GPU", "CP_COMM_TYPES", "node_network_gbits_per_s",
    "SCHEDULES", "SWEEP_SCHEDULES",
    "ACTIVATIONS",
    "SOFTMAX_TYPES",
    "NORMALIZATIONS",
    "POSITION_EMBEDDINGS",
    "ATTENTION_KERNELS",
    "RECOMPUTE_MODES", "RECOMPUTE_CHOICES", "zero_shard_size", "zero_replicas",
    "PRECISIONS", "FP8_RECIPES",
    "read_vtrain_config",
    "BOUNDS",
    "Bound",
    "check_value",
    "path_problem",
    "MAX_INTEGER",
    "GPT_SHAPE_FIELDS",
    "GPT_FAMILY",
    "LLAMA_FAMILY",
    "model_from_fields",
    "missing_required",
    "section_errors",
    "rename_field",
    "padded_vocab_size",
    "PLAN_FIELDS",
    "ZERO_STAGES",
    "GRAD_REDUCE_DTYPES",
    "plan_key",
    "plan_field_title",
    "stage_layer_counts",
    "virtual_stage_layer_counts",
    "pipeline_split_slots",
    "grad_dtype",
    "GPU_FP8_DTYPES", "fp8_recipe", "tensor_dtype", "FP8_DEFAULT_RECIPE",
]

#: Pipeline schedules (registered in core.schedules; the order of the editor's list).
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1", "zb-v")
#: The schedules a sweep tries by default (ZB-V only when asked: ``--schedules``).
SWEEP_SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1")
#: MLP activations: GeLU (two ffn matrices) or SwiGLU (gated: three ffn matrices, Shazeer 2020).
ACTIVATIONS = ("gelu", "swiglu", "squared_relu")
#: Attention softmax types (Megatron-Core ``--softmax-type``, ``TransformerConfig.softmax_type``):
#: the plain softmax; "off-by-one" adds a fixed zero logit to every row's denominator (Miller 2023,
#: "Attention is off by one"; a buffer, no parameters); "learnable" adds one learned logit per
#: head (attention sinks, GPT-OSS: ``a`` parameters per layer, ``softmax_offset``).
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")
#: Layer normalizations: LayerNorm (weight and bias) or RMSNorm (weight only, Zhang & Sennrich 2019).
NORMALIZATIONS = ("layernorm", "rmsnorm")
#: Position embeddings: a learned (s, h) table or rotary embeddings (RoPE, Su et al. 2021; no
#: parameters).
POSITION_EMBEDDINGS = ("learned", "rope")
#: Attention kernels: Megatron's unfused path (baddbmm, softmax, dropout, bmm; keeps the s*s
#: scores) or FlashAttention (Dao 2023; no s*s tensor kept).
ATTENTION_KERNELS = ("unfused", "flash")
RECOMPUTE_MODES = ("none", "selective", "full")
#: Every value of ``plan.recompute``: :data:`RECOMPUTE_MODES` (Megatron's, the modes a sweep
#: tries) and ``selective_op``, torchtitan's per-op selective activation checkpointing
#: (:func:`core.model.model_math.selective_op_linears`; chosen, never swept).
RECOMPUTE_CHOICES = RECOMPUTE_MODES + ("selective_op",)
#: Megatron-Core's ``--recompute-modules`` (``TransformerConfig.recompute_modules``) for
#: selective recomputation: the attention core, the input layernorms, the dense MLP, the routed
#: experts' activation, the whole MoE layer, the shared experts and MLA's up-projections.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts")
#: Modules of :data:`RECOMPUTE_MODULES` the simulator does not model (refused by name).
UNMODELLED_RECOMPUTE_MODULES: dict[str, str] = {}
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
#: Token dispatchers of MoE layers (Megatron-Core --moe-token-dispatcher-type; its allgather
#: dispatcher is not modelled).
MOE_DISPATCHERS = ("alltoall", "flex")
#: How context parallelism exchanges K and V (plan.cp_comm_type): ``p2p`` the ring (Megatron-Core's
#: default ``--cp-comm-type p2p``, Transformer Engine's AttnFuncWithCPAndKVP2P; PyTorch's
#: ``context_parallel`` with the ``alltoall`` rotation is the same ring); ``allgather`` PyTorch's
#: ``context_parallel`` default (torchtitan's ``context_parallel_rotate_method``): K/V
#: all-gathered once per pass, overlapped with the first step's attention, the K/V gradients
#: passed around the ring; ``a2a`` Megatron-Core's all-to-all exchange (DeepSpeed-Ulysses; TE's
#: ``AttnFuncWithCPAndKVAll2All``): Q, K, V all-to-all from a sequence split to a head split
#: before the attention core, which runs on the whole sequence for ``1/cp`` of the heads, and
#: the output back after it, none of it overlapped; ``a2a+p2p`` Megatron-Core's hierarchical
#: exchange (``--hierarchical-context-parallel-sizes A P``): all-to-all inside groups of
#: ``plan.cp_a2a_size`` ranks, the ring over the ``cp / cp_a2a_size`` groups; ``all_gather``
#: Megatron-Core's all-gather exchange (``--cp-comm-type all_gather``, TE's
#: ``AttnFuncWithCPAndKVAllGather``, the Llama 3 paper's Sec. 3.3.2): K/V all-gathered before the
#: core and their gradients reduce-scattered after it, none of it overlapped, the core two
#: kernels (the rank's two sequence chunks against their K/V prefixes). ``allgather`` (PyTorch's
#: spelling, torchtitan's) and ``all_gather`` (TE's, which Megatron-Core passes on) name
#: different exchanges: PyTorch overlaps its gather.
CP_COMM_TYPES = ("p2p", "allgather", "a2a", "a2a+p2p", "all_gather")
#: FP8 scaling recipes (Megatron-Core's --fp8-recipe; Transformer Engine): delayed scaling
#: (amax history), per-tensor current scaling (tensorwise), MXFP8 (32-element blocks with
#: E8M0 scales; Blackwell) and blockwise (128x128 weight / 1x128 activation blocks).
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
#: Implementations of Megatron-Core's fused cross-entropy (--cross-entropy-fusion-impl): native
#: (Megatron-Core's jit-fused vocab-parallel kernels) or te (Transformer Engine's
#: parallel_cross_entropy, which computes the logits' gradient in the forward).
CROSS_ENTROPY_FUSION_IMPLS = ("native", "te")
#: The recipe of ``precision="fp8"`` when ``fp8_recipe`` is empty: per-tensor current scaling,
#: what Megatron-Bridge's FP8 configs and torchao's float8 run. (Megatron-LM's own
#: ``--fp8-recipe`` default is ``delayed`` in Megatron-Core 0.19, ``TransformerConfig``; the
#: Megatron import reads a launch without the flag as that.)
FP8_DEFAULT_RECIPE = "tensorwise"
#: ZeRO stages (Rajbhandari et al. 2020): 0 replicated, 1 optimizer state sharded (Megatron's
#: distributed optimizer), 2 gradients too, 3 parameters too (FSDP).
ZERO_STAGES = (0, 1, 2, 3)
#: Data types the data-parallel gradients can be accumulated and reduced in.
GRAD_REDUCE_DTYPES = ("fp32", "bf16", "fp16")
#: GPU kinds with a shipped profile store; the value is the store's file stem
#: (``profiles/<kind>.h5``, built from ``resources/gpu_specs/<kind>.json``).
#: ``H100-96GB-HBM2e-500W`` has no data sheet of its own: its store's peaks are the H100 SXM5's,
#: and the share of them it sustains under its 500 W cap is fitted on its published runs
#: (``peak_fraction``, docs/accuracy.md). The kinds people rent that no published run measures
#: (H800 and A800: the H100's and A100's compute with NVLink cut to 400 GB/s; H20, B300, GH200)
#: take the calibrated parameters of their architecture (the A100's for the A800, the shared
#: Hopper/Blackwell fit for the others), applied to their own data-sheet figures.
GPU_KINDS = ("A100-SXM4-80GB", "A800-SXM4-80GB", "H100-SXM5-80GB", "H100-96GB-HBM2e-500W",
             "H800-SXM5-80GB", "H20-96GB", "H200-SXM-141GB", "GH200-96GB", "B200-180GB",
             "B300-288GB", "GB200-NVL72")
#: GPUs that reach each other over NVLink, per GPU kind (``gpus_per_nvlink_domain`` of its
#: spec file; a test keeps the two equal): 8 on HGX/DGX boards, 72 in a GB200 NVL72 rack, 256
#: in a DGX GH200 (its NVLink Switch System; smaller GH200 nodes fit inside it).
#: ``cluster.gpus_per_node`` may not exceed it: the GPUs of a node talk over NVLink.
GPU_NVLINK_DOMAIN = {"A100-SXM4-80GB": 8, "A800-SXM4-80GB": 8, "H100-SXM5-80GB": 8,
                     "H100-96GB-HBM2e-500W": 8, "H800-SXM5-80GB": 8, "H20-96GB": 8,
                     "H200-SXM-141GB": 8, "GH200-96GB": 256, "B200-180GB": 8, "B300-288GB": 8,
                     "GB200-NVL72": 72}
#: FP8 GEMM dtypes each shipped GPU kind has tensor cores for: the ``fp8`` / ``mxfp8`` keys of its
#: spec file's ``peak_tflops`` (a test keeps the two equal). The A100 (Ampere) has none; Hopper
#: has per-tensor scaled FP8; Blackwell adds MXFP8 (32-element blocks, E8M0 scales).
GPU_FP8_DTYPES = {"A100-SXM4-80GB": (), "A800-SXM4-80GB": (), "H100-SXM5-80GB": ("fp8",),
                  "H100-96GB-HBM2e-500W": ("fp8",), "H800-SXM5-80GB": ("fp8",),
                  "H20-96GB": ("fp8",), "H200-SXM-141GB": ("fp8",), "GH200-96GB": ("fp8",),
                  "B200-180GB": ("fp8", "mxfp8"), "B300-288GB": ("fp8", "mxfp8"),
                  "GB200-NVL72": ("fp8", "mxfp8")}
#: Scale-out NIC bandwidth per GPU of each shipped GPU kind's reference node, Gb/s: the
#: ``nic_gbits_per_s`` of its spec file (a test keeps the two equal; sources there: DGX A100
#: 8 x 200 Gb/s HDR, DGX H100/H200/B200 8 x 400 Gb/s ConnectX-7, GB200 NVL72 one 400 Gb/s NIC
#: per GPU, DGX GH200 one 400 Gb/s per superchip, DGX B300 8 x 800 Gb/s ConnectX-8; the A800,
#: H800 and H20 assume their A100/H100 reference nodes'). :func:`node_network_gbits_per_s` uses
#: it when a session leaves the network empty.
GPU_NIC_GBITS_PER_GPU = {"A100-SXM4-80GB": 200.0, "A800-SXM4-80GB": 200.0,
                         "H100-SXM5-80GB": 400.0, "H100-96GB-HBM2e-500W": 400.0,
                         "H800-SXM5-80GB": 400.0, "H20-96GB": 400.0, "H200-SXM-141GB": 400.0,
                         "GH200-96GB": 400.0, "B200-180GB": 400.0, "B300-288GB": 800.0,
                         "GB200-NVL72": 400.0}


def node_network_gbits_per_s(cluster: "ClusterConfig") -> float:
    """The network bandwidth of one node, Gb/s (all its NICs together):
    ``cluster.inter_node_bandwidth_gbits_per_s``, or when that is empty (None) the GPU's
    reference node, ``gpus_per_node`` NICs of :data:`GPU_NIC_GBITS_PER_GPU` (one NIC per GPU:
    3,200 for eight H100s, 28,800 for a GB200 NVL72 rack).

    Raises
    ------
    ValueError
        The field is empty and the GPU kind has no reference node (a store of your own):
        the bandwidth must be given (:func:`validate` says so for plans that span nodes).
    """
    bw = cluster.inter_node_bandwidth_gbits_per_s
    if bw is not None:
        return float(bw)
    nic = GPU_NIC_GBITS_PER_GPU.get(cluster.gpu)
    if nic is None:
        raise ValueError(f"cluster.inter_node_bandwidth_gbits_per_s is empty and GPU "
                         f"{cluster.gpu!r} has no reference node to take it from: set the "
                         "network bandwidth per node")
    return nic * cluster.gpus_per_node


#: How other tools' configuration files and published tables name the shipped GPU kinds: a
#: name is read as words (letters and digits; ``"NVIDIA DGX H100 SXM5 80GB HBM3"``), the
#: vendor and system words (:data:`_GPU_NAME_NOISE`) dropped; exactly one family word must
#: remain (the key here), and the name maps to the one shipped variant of that family whose
#: required words it has and which carries every other word (its form factor, memory size
#: and type, power, NVLink domain). Each variant is ``(kind, words it carries, words it
#: requires)``. Not aliased on purpose: other variants of a family (H100 PCIe / NVL, an H100
#: at 500 W without its 96 GB, A100 40 GB, GB200 NVL36 ...: other memory, bandwidth, power or
#: NVLink domain) keep their name and are refused by name.
_GPU_FAMILIES: dict[str, tuple[tuple[str, set[str], set[str]], ...]] = {
    "a100": (("A100-SXM4-80GB", {"sxm", "sxm4", "80gb", "hbm2e", "400w"}, set()),),
    "a800": (("A800-SXM4-80GB", {"sxm", "sxm4", "80gb", "hbm2e", "400w"}, set()),),
    "h100": (("H100-SXM5-80GB", {"sxm", "sxm5", "80gb", "hbm3", "700w"}, set()),
             # Meta's Grand Teton H100 (torchtitan's benchmarks): named by its 96 GB and 500 W
             ("H100-96GB-HBM2e-500W", {"sxm", "sxm5", "96gb", "hbm2e", "500w", "grand", "teton"},
              {"96gb", "500w"})),
    "h800": (("H800-SXM5-80GB", {"sxm", "sxm5", "80gb", "hbm3", "700w"}, set()),),
    # the 96 GB HBM3 H20 (HGX H20); its 141 GB HBM3e successor keeps its name (refused)
    "h20": (("H20-96GB", {"sxm", "96gb", "hbm3", "400w"}, set()),),
    "h200": (("H200-SXM-141GB", {"sxm", "sxm5", "141gb", "hbm3e", "700w"}, set()),),
    # the 96 GB HBM3 superchip; the 144 GB HBM3e one keeps its name (refused)
    "gh200": (("GH200-96GB", {"96gb", "hbm3", "grace", "hopper", "superchip"}, set()),),
    # 192 GB is the B200's physical HBM, 180 GB what it exposes; HGX B200 boards take SXM6 modules
    "b200": (("B200-180GB", {"sxm", "sxm6", "180gb", "192gb", "hbm3e", "1000w"}, set()),),
    # HGX B300 (Blackwell Ultra, 8 GPUs per board); GB300 racks are another kind (refused)
    "b300": (("B300-288GB", {"sxm", "288gb", "hbm3e", "ultra", "blackwell"}, set()),),
    # GB200 is the Grace Blackwell superchip itself; NVL72 its rack's NVLink domain
    "gb200": (("GB200-NVL72", {"nvl72", "186gb", "hbm3e", "1200w", "grace", "blackwell",
                               "superchip", "rack"}, set()),),
}
_GPU_NAME_NOISE = {"nvidia", "tesla", "dgx", "hgx", "tensor", "core", "gpu", "gpus"}
#: Words a parenthesis after a GPU name may hold and still only describe the machine (with
#: small counts and the name's own family): "(4 GPUs per compute tray)", "(HGX, 8 per node)".
_GPU_DESCRIPTIVE = _GPU_NAME_NOISE | {
    "per", "compute", "tray", "trays", "node", "nodes", "server", "servers", "system", "board",
    "baseboard", "reference", "design", "rack", "racks", "of", "the", "a", "in", "each", "with",
    "x", "and", "cluster", "platform"}


@dataclass(frozen=True)
class Bound:
    """Inclusive range ``lo..hi`` a numeric field must lie in, and why a real model or
    cluster stays inside it (quoted in the error message)."""

    lo: float
    hi: float
    why: str


#: The bounds of every numeric input, in one place. Every reader (session files, the
#: authors' JSON, measurement CSVs, job traces, the GUI's editor through :func:`validate`)
#: checks them, so no simulation starts from a size no real run could have: sizes far
#: beyond them make the execution graph or the sweep unbuildable (2^63 layers never
#: returns) and rates near zero make times infinite (a 5e-324 GB/s link).
BOUNDS: dict[str, Bound] = {
    "layers": Bound(1, 10_000, "the deepest published LLMs have 100 to 200 layers"),
    "hidden": Bound(1, 1_000_000, "the widest published LLMs have hidden sizes near 25,600"),
    "heads": Bound(1, 1_000_000, "at most one head per hidden unit"),
    "ffn": Bound(1, 4_000_000, "four times the hidden-size bound"),
    "seq": Bound(1, 2**24, "the longest published training contexts are about 2^20 tokens"),
    "vocab": Bound(1, 2**31 - 1, "token ids are 32-bit integers in Megatron-LM's datasets"),
    "parallel": Bound(1, 2**20, "the largest training clusters have about 10^5 GPUs"),
    "micro_batch": Bound(1, 2**20, "a micro-batch is at most the global batch"),
    "global_batch": Bound(1, 2**24, "the largest published global batches are about 2^24 tokens"),
    "gpus_per_node": Bound(1, 1024, "the largest NVLink domains have 72 to 576 GPUs"),
    "intra_bw": Bound(0.1, 100_000, "GB/s per GPU: PCIe 3 x16 gives 16, NVLink 5 gives 900"),
    "inter_bw": Bound(0.1, 1_000_000, "Gb/s per node: eight 400 Gb/s NICs give 3,200"),
    "price": Bound(0, 10_000, "USD per GPU-hour: cloud prices are 1 to 100"),
    "tokens": Bound(1, 1e16, "the largest published training runs use about 4e13 tokens"),
    "experts": Bound(1, 65_536, "the largest published MoE models have 256 to 512 experts"),
    "shared_experts": Bound(0, 65_536, "DeepSeek-V3 has one shared expert, Qwen2-MoE four"),
    "dense_layers": Bound(0, 10_000, "at most every layer"),
    "imbalance": Bound(1, 1_000, "tokens of the busiest expert over the mean; 1 is balanced"),
    "latent": Bound(1, 1_000_000, "DeepSeek-V3's latent ranks are 512 (K/V) and 1536 (Q), at "
                    "most the hidden-size bound"),
    "mla_head": Bound(1, 65_536, "DeepSeek-V2/V3 heads are 128 (+64 rotary) channels"),
    "mtp_layers": Bound(0, 10_000, "DeepSeek-V3 predicts one extra token (one MTP layer)"),
    "clamp": Bound(0, 1e6, "GPT-OSS clamps its gated MLP's inputs at 7"),
    "glu_offset": Bound(-1e6, 1e6, "GPT-OSS adds 1 to the linear half of its gated MLP"),
}


def _f(default: Any, unit: str, help: str, **kw: Any) -> Any:
    """A dataclass field with ``unit`` and ``help`` metadata.

    Further metadata, checked by every reader and by :func:`validate` (no code per field):
    ``bounds`` (a :data:`BOUNDS` entry, for numbers), ``min``/``max`` (a field's own
    limits, within its bounds), ``choices`` (allowed values, for strings and
    enumerations), ``required`` (a session file must give the field, ``null`` where the type
    allows it: its default is not what a file that leaves it out means; every model field,
    see :func:`missing_required`), ``path`` (a string naming a file: it must be resolvable,
    :func:`path_problem`). The type is the annotation (``int``, ``float``, ``str``, ``bool``,
    optionally ``| None``).
    """
    return field(default=default, metadata={"unit": unit, "help": help, **kw})


@dataclass
class ModelConfig:
    """A dense decoder-only transformer as Megatron-LM / Megatron-Core builds it.

    The defaults are Megatron-LM's GPT (full multi-head attention, GeLU MLP,
    LayerNorm, learned positions, biases, word embedding tied with the output
    layer, unfused attention); the family fields describe Llama-style models
    (grouped-query attention, SwiGLU, RMSNorm, RoPE, no biases, untied output
    layer, FlashAttention). Their formulas live in :mod:`core.model.model_math`.

    Every field is ``required`` in a session file (the defaults serve code that builds a
    GPT model; a file that leaves a field out is refused, never filled with GPT's value),
    but for the first release's GPT-shape files (:data:`GPT_SHAPE_FIELDS`).
    """

    name: str = _f("GPT-3 175B", "", "Display name of the model", required=True)
    num_layers: int = _f(96, "", "Number of transformer layers L (--num-layers)",
                         bounds=BOUNDS["layers"], required=True)
    hidden_size: int = _f(12288, "", "Hidden size h (--hidden-size)", bounds=BOUNDS["hidden"],
                          required=True)
    num_attention_heads: int = _f(96, "", "Attention heads a (--num-attention-heads)",
                                  bounds=BOUNDS["heads"], required=True)
    ffn_hidden_size: int | None = _f(
        None, "", "MLP hidden size (--ffn-hidden-size); empty (null) means 4*h",
        bounds=BOUNDS["ffn"], required=True)
    seq_length: int = _f(2048, "tokens", "Sequence length s (--seq-length)", bounds=BOUNDS["seq"],
                         required=True)
    vocab_size: int = _f(50257, "tokens", "Vocabulary size V before Megatron's padding",
                         bounds=BOUNDS["vocab"], required=True)
    num_query_groups: int | None = _f(
        None, "", "Query groups g of grouped-query attention (--num-query-groups; 1 is multi-query "
        "attention); empty means one per head (multi-head attention)", min=1,
        bounds=BOUNDS["heads"], required=True)
    activation: str = _f("gelu", "", "MLP activation: gelu (two ffn matrices), swiglu (gated, "
                         "three ffn matrices; --swiglu) or squared_relu (relu(x)^2, two ffn "
                         "matrices, Nemotron-4; --squared-relu)", choices=ACTIVATIONS,
                         required=True)
    normalization: str = _f("layernorm", "", "Normalization: layernorm or rmsnorm (no bias; "
                            "--normalization RMSNorm)", choices=NORMALIZATIONS, required=True)
    position_embedding: str = _f("learned", "", "Position embedding: learned (an s*h table) or "
                                 "rope (rotary, no parameters; --position-embedding-type rope)",
                                 choices=POSITION_EMBEDDINGS, required=True)
    tied_embeddings: bool = _f(True, "", "Output layer shares the word embedding's weights "
                               "(false: --untie-embeddings-and-output-weights)", required=True)
    add_bias_linear: bool = _f(True, "", "Biases in the linear layers (false: "
                               "--disable-bias-linear)", required=True)
    add_qkv_bias: bool = _f(False, "", "Bias in the QKV projection even without the other "
                            "linear biases (--add-qkv-bias, Qwen2)", required=True)
    qk_layernorm: bool = _f(False, "", "Normalize each query and key head before the scores "
                            "(QK-norm, --qk-layernorm; Qwen3), with the model's normalization",
                            required=True)
    attention_kernel: str = _f("unfused", "", "Attention kernel: unfused (Megatron's baddbmm, "
                               "softmax, bmm; keeps the s*s scores) or flash (FlashAttention, "
                               "no s*s activation memory; --use-flash-attn)",
                               choices=ATTENTION_KERNELS, required=True)
    kv_channels: int | None = _f(
        None, "", "Attention head size (--kv-channels); empty means h/a. Q is a*kv_channels wide, "
        "K and V g*kv_channels each", bounds=BOUNDS["hidden"], required=True)
    num_experts: int | None = _f(
        None, "", "Experts per MoE layer (--num-experts); empty means a dense model",
        bounds=BOUNDS["experts"], required=True)
    moe_top_k: int = _f(2, "", "Experts each token is routed to (--moe-router-topk)",
                        bounds=BOUNDS["experts"], required=True)
    moe_ffn_hidden_size: int | None = _f(
        None, "", "Hidden size of each expert's MLP (--moe-ffn-hidden-size); empty means "
        "ffn_hidden_size", bounds=BOUNDS["ffn"], required=True)
    num_shared_experts: int = _f(
        0, "", "Shared experts every token passes through, each moe_ffn_hidden_size wide "
        "(Megatron: --moe-shared-expert-intermediate-size = n * moe_ffn_hidden_size)",
        bounds=BOUNDS["shared_experts"], required=True)
    moe_layer_frequency: int = _f(1, "layers", "Every k-th layer is an MoE layer (--moe-layer-freq "
                                  "k); the others are dense", bounds=BOUNDS["layers"],
                                  required=True)
    moe_first_dense_layers: int = _f(
        0, "layers", "The first layers are dense whatever the frequency (DeepSeek's "
        "first_k_dense_replace; Megatron: a --moe-layer-freq pattern)",
        bounds=BOUNDS["dense_layers"], required=True)
    moe_router_num_groups: int | None = _f(
        None, "", "Node-limited routing: the experts split into this many groups (Megatron-Core "
        "--moe-router-num-groups; DeepSeek-V3's n_group 8); empty means none", short="groups",
        min=1, bounds=BOUNDS["experts"], required=True)
    moe_router_group_topk: int | None = _f(
        None, "", "Node-limited routing: the groups each token may reach (Megatron-Core "
        "--moe-router-group-topk; DeepSeek-V3's topk_group 4)", short="group_topk", min=1,
        bounds=BOUNDS["experts"], required=True)
    multi_latent_attention: bool = _f(
        False, "", "Multi-head latent attention (DeepSeek-V2/V3, --multi-latent-attention; "
        "Megatron-Core MLASelfAttention): queries and keys/values pass through low-rank latents "
        "(q_lora_rank, kv_lora_rank); heads of qk_head_dim + qk_pos_emb_head_dim channels for the "
        "scores and v_head_dim for the values. With qk_layernorm the latents are normalized "
        "(Megatron's q_layernorm / kv_layernorm). Needs attention_kernel flash", required=True)
    q_lora_rank: int | None = _f(
        None, "", "With MLA: rank of the query latent (--q-lora-rank; DeepSeek-V3 1536); empty "
        "means no query compression (one h -> a*(qk_head_dim + qk_pos_emb_head_dim) projection)",
        short="q_lora", bounds=BOUNDS["latent"], required=True)
    kv_lora_rank: int = _f(512, "", "With MLA: rank of the key/value latent (--kv-lora-rank)",
                           short="kv_lora", bounds=BOUNDS["latent"], required=True)
    qk_head_dim: int = _f(128, "", "With MLA: channels of each query/key head without the "
                          "rotary part (--qk-head-dim; DeepSeek's qk_nope_head_dim)",
                          bounds=BOUNDS["mla_head"], required=True)
    qk_pos_emb_head_dim: int = _f(64, "", "With MLA: rotary channels of each query/key head, "
                                  "the key's shared by all heads (--qk-pos-emb-head-dim; "
                                  "DeepSeek's qk_rope_head_dim)", bounds=BOUNDS["mla_head"],
                                  required=True)
    v_head_dim: int = _f(128, "", "With MLA: channels of each value head (--v-head-dim); the "
                         "output projection's input is a*v_head_dim wide",
                         bounds=BOUNDS["mla_head"], required=True)
    mtp_num_layers: int = _f(0, "layers", "Multi-token prediction layers on the last pipeline "
                             "stage (--mtp-num-layers; DeepSeek-V3: 1): each embeds the tokens "
                             "shifted once more, projects them with the previous hidden state "
                             "(eh_proj, 2h -> h), runs one transformer layer like the last one "
                             "and the shared output layer with its own loss",
                             bounds=BOUNDS["mtp_layers"], required=True)
    window_size: int | None = _f(
        None, "tokens", "Sliding-window attention: each query attends to itself and the window_size "
        "tokens before it (Megatron-Core --window-size (w, 0), causal); empty means full causal "
        "attention", short="window", min=1, bounds=BOUNDS["seq"], required=True)
    window_attn_skip_freq: int | None = _f(
        None, "layers", "With a window: every N-th layer (1-based, layer % N == 0) keeps full "
        "attention, the others are windowed (Megatron-Core --window-attn-skip-freq N; GPT-OSS: "
        "2); empty means every layer is windowed", short="window_skip", min=1,
        bounds=BOUNDS["layers"], required=True)
    softmax_type: str = _f(
        "vanilla", "", "Attention softmax (Megatron-Core --softmax-type): vanilla; off-by-one "
        "(a fixed zero logit in every row's denominator, no parameters); learnable (attention "
        "sinks: one learned logit per head in the denominator, a parameters per layer; GPT-OSS). "
        "The extra logit per row is negligible work inside the attention kernel",
        choices=SOFTMAX_TYPES, short="softmax", required=True)
    activation_func_clamp_value: float | None = _f(
        None, "", "Gated MLP (swiglu): clamp the gate to at most this and the linear half to "
        "-this..this before the activation (Megatron-Core --activation-func-clamp-value; "
        "GPT-OSS: 7); element-wise inside the fused activation kernel, no time of its own; "
        "empty means no clamp", short="clamp", bounds=BOUNDS["clamp"], required=True)
    glu_linear_offset: float = _f(
        0.0, "", "Gated MLP (swiglu): activation(gate) * (linear + this) (Megatron-Core "
        "--glu-linear-offset; GPT-OSS: 1); element-wise inside the fused activation kernel, "
        "no time of its own", short="glu_offset", min=-1e6, bounds=BOUNDS["glu_offset"],
        required=True)

    @property
    def ffn(self) -> int:
        """MLP hidden size, ``4*h`` when :attr:`ffn_hidden_size` is unset."""
        return self.ffn_hidden_size if self.ffn_hidden_size else 4 * self.hidden_size

    @property
    def query_groups(self) -> int:
        """Query groups ``g``: :attr:`num_query_groups`, or ``a`` when unset."""
        return self.num_query_groups if self.num_query_groups else self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Attention head size: :attr:`kv_channels`, or ``h/a`` when unset (Megatron's
        ``--kv-channels`` default); with multi-head latent attention the query/key head size
        ``qk_head_dim + qk_pos_emb_head_dim`` (validation keeps ``kv_channels`` equal to it)."""
        if self.kv_channels:
            return self.kv_channels
        if self.multi_latent_attention is True:
            return self.qk_head_dim + self.qk_pos_emb_head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        """Whether the model has mixture-of-experts layers (``num_experts`` set)."""
        return bool(self.num_experts)


#: The model fields of the first release's session files, written before the model families
#: existed: a model section that gives only these (all but ``ffn_hidden_size``, which may be
#: left out: 4h) describes a GPT model and takes the GPT values of the other fields (the
#: defaults of :class:`ModelConfig`). Any other model section gives every model field.
GPT_SHAPE_FIELDS = ("name", "num_layers", "hidden_size", "num_attention_heads",
                    "ffn_hidden_size", "seq_length", "vocab_size")


#: Megatron-LM's GPT values of every model field but the shape (:data:`GPT_SHAPE_FIELDS`): what
#: a reader of a format that describes GPT models only (the vTrain authors' JSON and CSVs, job
#: traces' shapes, a first-release session) gives the fields that format cannot express.
GPT_FAMILY: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                              if f.name not in GPT_SHAPE_FIELDS}


def model_from_fields(values: dict[str, Any]) -> ModelConfig:
    """A :class:`ModelConfig` from ``values``, which name every model field: a reader states
    each one from its input (or, for a GPT-only format, from :data:`GPT_FAMILY`), so no field
    takes GPT's default by omission.

    Raises
    ------
    TypeError
        ``values`` lacks a model field or names one that does not exist (a reader's bug,
        not a user's input error).
    """
    names = [f.name for f in dataclasses.fields(ModelConfig)]
    missing = [n for n in names if n not in values]
    unknown = sorted(set(values) - set(names))
    if missing or unknown:
        raise TypeError(f"model_from_fields: missing {missing}, unknown {unknown}")
    return ModelConfig(**values)


def missing_required(cls: type, data: dict[str, Any]) -> list[str]:
    """The fields of dataclass ``cls`` that a session file's section ``data`` must give and
    lacks, in field order: those whose metadata says ``required``; for :class:`ModelConfig`
    a section of only :data:`GPT_SHAPE_FIELDS` (a first-release file: a GPT model) needs
    those but ``ffn_hidden_size``."""
    names = [f.name for f in dataclasses.fields(cls) if f.metadata.get("required")]
    if cls is ModelConfig and set(data) <= set(GPT_SHAPE_FIELDS):
        names = [n for n in GPT_SHAPE_FIELDS if n != "ffn_hidden_size"]
    return [n for n in names if n not in data]


@dataclass
class ParallelPlan:
    """How one iteration is split over GPUs (Megatron-LM / Megatron-Core arguments).

    The one record of a plan: sweep columns (:data:`PLAN_FIELDS`), cache keys
    (:func:`plan_key`), labels (:meth:`label`) and the editor's rows all derive
    from these fields and their metadata (``unit``, ``help``, ``choices``,
    ``min``/``max``, ``short``: the label's abbreviation; ``label``: ``"always"``
    to show the field in every label, ``"never"`` to leave it out, otherwise it
    shows when it differs from its default).
    """

    tensor_parallel: int = _f(8, "GPUs", "Tensor-parallel size t (--tensor-model-parallel-size)",
                              short="t", label="always", bounds=BOUNDS["parallel"], required=True)
    pipeline_parallel: int = _f(16, "stages", "Pipeline-parallel size p (--pipeline-model-parallel-size)",
                                short="p", label="always", bounds=BOUNDS["parallel"], required=True)
    data_parallel: int = _f(4, "replicas", "Data-parallel size d (world size / (t*p*cp))",
                            short="d", label="always", bounds=BOUNDS["parallel"], required=True)
    micro_batch_size: int = _f(1, "sequences", "Micro-batch size b (--micro-batch-size)",
                               short="b", label="always", bounds=BOUNDS["micro_batch"], required=True)
    global_batch_size: int = _f(1536, "sequences", "Global batch size B (--global-batch-size)",
                                short="B", label="never", bounds=BOUNDS["global_batch"], required=True)
    schedule: str = _f("1f1b", "", "Pipeline schedule: 1f1b (PipeDream-flush), gpipe, interleaved "
                       "(interleaved 1F1B, --num-layers-per-virtual-pipeline-stage), zb-h1 "
                       "(zero-bubble, backward split into input and weight gradients) or zb-v "
                       "(zero-bubble, two chunks per stage placed V-shape; not in Megatron-LM)",
                       choices=SCHEDULES, short="", label="always")
    recompute: str = _f("full", "", "Activation recomputation: none, selective (the attention "
                        "core, --recompute-activations), full (--recompute-granularity full) or "
                        "selective_op (torchtitan's per-op selective activation checkpointing: "
                        "every other matmul and the attention output saved, the rest recomputed)",
                        choices=RECOMPUTE_CHOICES, label="always", required=True)
    precision: str = _f("bf16", "", "Training precision (mixed precision with fp32 master weights)",
                        choices=PRECISIONS, label="never", required=True)
    virtual_pipeline_stages: int | None = _f(
        None, "chunks", "Virtual pipeline stages v per rank for the interleaved schedule "
        "(--num-virtual-stages-per-pipeline-rank); empty for other schedules", short="v", min=2,
        bounds=BOUNDS["layers"])
    sequence_parallel: bool = _f(False, "", "Sequence parallelism (--sequence-parallel): tensor-"
                                 "parallel all-reduces become reduce-scatter + all-gather, LayerNorm "
                                 "and dropout run on s/t tokens", short="sp")
    recompute_num_layers: int | None = _f(
        None, "layers", "With full recomputation: layers recomputed in each model chunk, the "
        "first ones of each pipeline stage (of each virtual stage under the interleaved schedule; Megatron's "
        "--recompute-method block --recompute-num-layers); the others keep their activations; "
        "empty means all", short="recompute_layers", min=1, bounds=BOUNDS["layers"])
    zero_stage: int = _f(0, "", "ZeRO stage: 0 replicated, 1 distributed optimizer (optimizer "
                         "state sharded over d), 2 gradients too, 3 parameters too (FSDP)",
                         short="zero", min=0, max=3)
    overlap_grad_reduce: bool = _f(False, "", "Overlap the data-parallel gradient reduction with "
                                   "the backward pass, bucket by bucket (--overlap-grad-reduce)",
                                   short="overlap_grad")
    overlap_param_gather: bool = _f(False, "", "Overlap the parameter all-gather of a sharded "
                                    "optimizer with the forward pass (--overlap-param-gather; "
                                    "needs zero_stage >= 1)", short="overlap_param")
    tp_comm_overlap: bool = _f(False, "", "Overlap the tensor-parallel all-gathers and "
                               "reduce-scatters of the attention and MLP with their GEMMs, split "
                               "into t chunks (--tp-comm-overlap, Transformer Engine userbuffers; "
                               "needs sequence parallelism)", short="tp_overlap")
    grad_reduce_dtype: str | None = _f(
        None, "", "Data type gradients are accumulated and reduced in; empty means Megatron's "
        "default: fp32 with bf16 (main gradients), otherwise the training precision",
        choices=GRAD_REDUCE_DTYPES, short="grad_dtype")
    first_stage_layers: int | None = _f(
        None, "layers", "Layers of the first pipeline stage (--decoder-first-pipeline-num-layers); "
        "empty means an even split", short="first_layers", min=1, bounds=BOUNDS["layers"])
    last_stage_layers: int | None = _f(
        None, "layers", "Layers of the last pipeline stage (--decoder-last-pipeline-num-layers); "
        "empty means an even split", short="last_layers", min=1, bounds=BOUNDS["layers"])
    account_for_embedding_in_pipeline_split: bool = _f(
        False, "", "Count the embedding as one layer slot of the first virtual pipeline stage "
        "(Megatron-Core --account-for-embedding-in-pipeline-split): num_layers + 1 (+ 1 with the "
        "loss) slots split evenly over the p*v virtual stages, so the first holds one "
        "transformer layer fewer", short="emb_split")
    account_for_loss_in_pipeline_split: bool = _f(
        False, "", "Count the loss (output layer) as one layer slot of the last virtual pipeline "
        "stage (Megatron-Core --account-for-loss-in-pipeline-split): the last virtual stage holds "
        "one transformer layer fewer", short="loss_split")
    context_parallel: int = _f(1, "GPUs", "Context-parallel size cp (--context-parallel-size): "
                               "the sequence is split over cp ranks, ring attention exchanges K/V",
                               short="cp", bounds=BOUNDS["parallel"])
    cp_comm_type: str = _f(
        "p2p", "", "How context parallelism exchanges K and V: p2p, the ring (Megatron-Core "
        "--cp-comm-type p2p; PyTorch context_parallel's alltoall rotation), or allgather, PyTorch "
        "context_parallel's default (torchtitan): K/V all-gathered once per pass under the first "
        "step's attention, their gradients passed around the ring; a2a, Megatron-Core's "
        "all-to-all (Ulysses: heads split over the cp ranks, --cp-comm-type a2a); a2a+p2p, "
        "all-to-all inside groups of cp_a2a_size ranks and the ring between them; all_gather, "
        "Megatron-Core's (--cp-comm-type all_gather, Transformer Engine's): K/V all-gathered "
        "before attention and their gradients reduce-scattered after it, not overlapped",
        choices=CP_COMM_TYPES, short="cp_comm",
        choice_notes={"p2p": "the ring", "allgather": "PyTorch's, overlapped",
                      "a2a": "all-to-all", "a2a+p2p": "hierarchical",
                      "all_gather": "Megatron-Core's / Transformer Engine's, not overlapped"})
    cp_a2a_size: int | None = _f(
        None, "GPUs", "Ranks of each all-to-all group of the a2a+p2p exchange (the first of "
        "Megatron-Core's --hierarchical-context-parallel-sizes; the ring joins cp / this "
        "groups); empty for the other exchanges", short="cp_a2a", min=2,
        bounds=BOUNDS["parallel"])
    expert_parallel: int = _f(1, "GPUs", "Expert-parallel size ep (--expert-model-parallel-size): "
                              "experts split over ep ranks inside the data-parallel group",
                              short="ep", bounds=BOUNDS["parallel"])
    expert_tensor_parallel: int | None = _f(
        None, "GPUs", "Tensor-parallel size of the experts (--expert-tensor-parallel-size); "
        "empty means t", short="etp", bounds=BOUNDS["parallel"])
    moe_imbalance_factor: float = _f(
        1.0, "", "Tokens routed to the busiest expert over the mean (1 = balanced routing, "
        "as Megatron's forced-balance benchmarks)", short="imbalance", label="never",
        bounds=BOUNDS["imbalance"])
    fp8_recipe: str | None = _f(
        None, "", "FP8 scaling recipe with precision fp8 (--fp8-recipe): delayed, tensorwise "
        "(per-tensor current scaling), mxfp8 or blockwise; empty means tensorwise",
        choices=FP8_RECIPES, short="fp8", label="never")
    recompute_modules: str | None = _f(
        None, "", "With selective recomputation: the modules recomputed, comma-separated as "
        "Megatron-Core's --recompute-modules (core_attn, layernorm, mlp, moe_act, moe, "
        "shared_experts); empty means core_attn", short="recompute_modules", label="never")
    data_parallel_shard_size: int | None = _f(
        None, "replicas", "Hybrid sharding (HSDP): the ZeRO/FSDP shards span groups of this many "
        "data-parallel ranks and are replicated over d/size groups (Megatron: "
        "--num-distributed-optimizer-instances d/size; torchtitan: dp_shard); empty means "
        "all d ranks", short="dp_shard", bounds=BOUNDS["parallel"])
    fp8_param_gather: bool = _f(
        False, "", "All-gather the FP8 linear layers' weights in FP8, 1 byte instead of 2, and "
        "keep them in FP8 (Megatron: --fp8-param-gather with the distributed optimizer; "
        "torchtitan: enable_fsdp_float8_all_gather); needs precision fp8 and zero_stage >= 1",
        short="fp8_gather")
    moe_token_dispatcher_type: str = _f(
        "alltoall", "", "How MoE tokens reach their experts (Megatron-Core "
        "--moe-token-dispatcher-type): alltoall (NCCL all-to-all, k copies of each token to the "
        "ranks of its k experts) or flex (DeepEP / HybridEP: across nodes one copy per "
        "destination node, forwarded to its experts over NVLink)", choices=MOE_DISPATCHERS,
        short="dispatcher")
    overlap_moe_expert_parallel_comm: bool = _f(
        False, "", "Overlap the expert all-to-alls of one micro-batch with the computation of "
        "another (Megatron-Core --overlap-moe-expert-parallel-comm, the combined 1F1B schedule: "
        "each steady-state forward runs layer by layer beside a backward); needs expert_parallel "
        "> 1, the interleaved schedule when pipeline_parallel > 1, and no full recomputation",
        short="ep_overlap")
    delay_wgrad_compute: bool = _f(
        False, "", "Under overlap_moe_expert_parallel_comm, run the experts' weight gradients "
        "after the backward's dispatch all-to-all has started (Megatron-Core "
        "--delay-wgrad-compute), so it overlaps them too", short="delay_wgrad")
    cross_entropy_loss_fusion: bool = _f(
        False, "", "Fuse the vocab-parallel cross-entropy's element-wise steps (Megatron-Core "
        "--cross-entropy-loss-fusion; on in Megatron-Bridge and NeMo): fewer passes over the "
        "logits than Megatron's default one kernel per step", short="ce_fusion")
    cross_entropy_fusion_impl: str = _f(
        "native", "", "The fused cross-entropy's kernels (Megatron-Core "
        "--cross-entropy-fusion-impl): native (Megatron-Core's jit-fused kernels on an fp32 copy "
        "of the logits) or te (Transformer Engine's parallel_cross_entropy on the half-precision "
        "logits, the gradient computed in the forward and kept in their place; the Megatron-"
        "Bridge performance recipes' choice); needs cross_entropy_loss_fusion",
        choices=CROSS_ENTROPY_FUSION_IMPLS, short="ce_impl", label_needs="cross_entropy_loss_fusion")
    pipeline_model_parallel_layout: str | None = _f(
        None, "", "Custom pipeline layout (Megatron-Core --pipeline-model-parallel-layout): the "
        "p*v virtual stages separated by '|', each listing E (embedding), t (one transformer "
        "layer), m (one multi-token prediction layer) and L (loss) in that order; x*N and (...)*N "
        "repeat, e.g. DeepSeek-V3's 'Et|(tt|)*30mL'. Virtual stage k is chunk k//p of stage k%p; "
        "empty means Megatron's split (even, or the first/last stage fields)", short="layout")

    @property
    def num_gpus(self) -> int:
        """World size ``t*p*cp*d`` (Megatron-Core: the data-parallel size is
        world / (t*p*cp))."""
        return (self.tensor_parallel * self.pipeline_parallel * self.context_parallel
                * self.data_parallel)

    @property
    def dp_cp_size(self) -> int:
        """Size ``d*cp`` of the data-parallel group with context parallelism: Megatron-Core
        reduces gradients and shards the distributed optimizer over it
        (``parallel_state.get_data_parallel_group(with_context_parallel=True)``: the cp
        ranks hold the same weights and see other tokens)."""
        return self.data_parallel * self.context_parallel

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per iteration per pipeline, ``B / (d*b)`` (floor)."""
        return self.global_batch_size // (self.data_parallel * self.micro_batch_size)

    def label(self, *, full: bool = False) -> str:
        """Short text naming the plan, e.g. ``"t=8 p=35 d=12 b=1 1f1b recompute=full"``.

        Derived from the fields' metadata: fields marked ``label="always"`` first,
        then every other field whose value differs from its default (booleans by
        their short name, e.g. ``sp``); with ``full``, the ``"never"`` fields
        (B, precision, the FP8 recipe) too, those that are set. A field with ``label_needs``
        metadata (the boolean field it qualifies, e.g. the fused cross-entropy's kernels) is
        left out while that field is off: it changes nothing then; so are sequence parallelism
        and the TP communication overlap at ``t = 1``, and the context-parallel exchange at
        ``cp = 1``, where they change nothing either.
        """
        parts = []
        for f in dataclasses.fields(self):
            how = f.metadata.get("label", "changed")
            value = getattr(self, f.name)
            if f.name in ("sequence_parallel", "tp_comm_overlap") and self.tensor_parallel == 1:
                continue
            if f.name in ("cp_comm_type", "cp_a2a_size") and self.context_parallel == 1:
                continue  # no exchange without context parallelism
            if how == "never" and (not full or value is None):  # e.g. no FP8 recipe
                continue
            if f.metadata.get("label_needs") and not getattr(self, f.metadata["label_needs"]):
                continue
            if how == "changed" and value == f.default:
                continue
            short = f.metadata.get("short", f.name)
            if isinstance(value, bool):
                parts.append(short if value else f"no-{short}")
            elif short == "":
                parts.append(str(value))
            else:
                parts.append(f"{short}={value}")
        return " ".join(parts)


#: Names of the plan's fields, in order: the sweep's plan columns and the cache keys.
PLAN_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ParallelPlan))


def plan_field_title(name: str) -> str:
    """Short column title of plan field ``name`` (its ``short`` metadata, else the name)."""
    f = ParallelPlan.__dataclass_fields__[name]
    return f.metadata.get("short") or name


_PLAN_FIELD_VALUES = operator.attrgetter(*PLAN_FIELDS)  # one C call: sweeps ask per plan


def plan_key(plan: ParallelPlan) -> tuple:
    """Hashable key of every field of ``plan`` (cache keys: no field can be left out)."""
    return _PLAN_FIELD_VALUES(plan)


def zero_shard_size(plan: ParallelPlan) -> int:
    """Ranks one ZeRO/FSDP shard group spans: ``size*cp`` with hybrid sharding
    (``plan.data_parallel_shard_size`` = size), else the whole data-parallel group with the
    context-parallel ranks, ``d*cp`` (Megatron-Core shards the distributed optimizer over
    ``get_data_parallel_group(with_context_parallel=True)``, and with
    ``--num-distributed-optimizer-instances`` over the ``d*cp/instances`` ranks of one
    instance, ``intra_distributed_optimizer_instance_group``)."""
    size = getattr(plan, "data_parallel_shard_size", None) or plan.data_parallel
    return size * plan.context_parallel


def zero_replicas(plan: ParallelPlan) -> int:
    """Replicas of each ZeRO/FSDP shard: ``d / data_parallel_shard_size`` with hybrid
    sharding (HSDP; Megatron's distributed-optimizer instances), 1 otherwise."""
    size = getattr(plan, "data_parallel_shard_size", None)
    return plan.data_parallel // size if size else 1


def grad_dtype(plan: ParallelPlan) -> str:
    """Data type of the data-parallel gradients: ``plan.grad_reduce_dtype``, or Megatron's default,
    fp32 main gradients with bf16 and with fp8, which trains bf16 weights (Megatron-LM forces
    ``--accumulate-allreduce-grads-in-fp32`` for bf16; Megatron-Core's ``grad_reduce_in_fp32``),
    and the training precision otherwise."""
    if plan.grad_reduce_dtype:
        return plan.grad_reduce_dtype
    return "fp32" if tensor_dtype(plan.precision) == "bf16" else plan.precision


def parse_recompute_modules(text: str | None) -> tuple[str, ...]:
    """The names of a ``recompute_modules`` text (comma- or space-separated, as Megatron-LM's
    ``--recompute-modules`` list), in order, without repeats; ``("core_attn",)`` when empty
    (Megatron-Core's default). Unknown names are kept (:func:`validate` refuses them)."""
    if text is None or not str(text).strip():
        return ("core_attn",)
    out: list[str] = []
    for name in str(text).replace(",", " ").split():
        if name not in out:
            out.append(name)
    return tuple(out)


def recompute_modules(plan: ParallelPlan) -> tuple[str, ...]:
    """Modules selective recomputation runs again (:func:`parse_recompute_modules` of
    ``plan.recompute_modules``); empty unless ``plan.recompute == "selective"``."""
    if plan.recompute != "selective":
        return ()
    return parse_recompute_modules(getattr(plan, "recompute_modules", None))


def fp8_recipe(plan: ParallelPlan) -> str | None:
    """The FP8 scaling recipe of ``plan``: ``plan.fp8_recipe`` or :data:`FP8_DEFAULT_RECIPE` with
    ``precision="fp8"``, ``None`` otherwise."""
    if plan.precision != "fp8":
        return None
    return plan.fp8_recipe or FP8_DEFAULT_RECIPE


def tensor_dtype(precision: str) -> str:
    """Data type of the tensors between kernels, of the weights the model keeps and of the
    optimizer's inputs under training precision ``precision``: the precision itself, except
    ``"bf16"`` for ``"fp8"`` (Transformer Engine runs only the linear layers' GEMMs in FP8; their
    inputs are quantized from BF16 and their outputs are BF16; Megatron-LM trains FP8 with
    ``--bf16 --fp8-format ...``)."""
    return "bf16" if precision == "fp8" else precision


#: Megatron-Core's rule for the layer-slot split, quoted by the validation messages.
_SLOT_RULE = ("Megatron-Core: with account_for_embedding_in_pipeline_split / "
              "account_for_loss_in_pipeline_split, (num_layers + embedding + loss) must be "
              "divisible by pipeline_parallel_size * virtual_pipeline_stages")


def pipeline_split_slots(num_layers: int, plan: ParallelPlan) -> int:
    """Layer slots the pipeline split divides: ``num_layers`` plus one for the embedding with
    ``account_for_embedding_in_pipeline_split`` and one for the loss with
    ``account_for_loss_in_pipeline_split`` (Megatron-Core ``get_num_layers_to_build``)."""
    return (num_layers + int(bool(plan.account_for_embedding_in_pipeline_split))
            + int(bool(plan.account_for_loss_in_pipeline_split)))


def _split_flags(plan: ParallelPlan) -> bool:
    return bool(plan.account_for_embedding_in_pipeline_split
                or plan.account_for_loss_in_pipeline_split)


#: Megatron-Core's rule for ``--pipeline-model-parallel-layout``, quoted by the messages.
LAYOUT_RULE = ("Megatron-Core's layout: virtual stages separated by '|', each E (embedding), t "
               "(transformer layer), m (MTP layer), L (loss) in that order; x*N and (...)*N repeat")

#: Longest expanded layout accepted (symbols): far more than any model's layers, so a string
#: like '((t*9999)*9999)*9999' is refused before it is built.
MAX_LAYOUT_SYMBOLS = 100_000


def _layout_chunks(plan: ParallelPlan) -> int:
    """``v`` of ``plan``: its schedule's model chunks per stage
    (:meth:`core.schedules.PipelineSchedule.chunks`: ``virtual_pipeline_stages`` under the
    interleaved schedule, 2 under ZB-V, else 1; 1 for an unknown schedule)."""
    from core.schedules import get as get_schedule  # numpy: not on the `vtrain --help` path
    try:
        return get_schedule(plan.schedule).chunks(plan.virtual_pipeline_stages)
    except ValueError:
        return 1


def _multi_chunk(schedule: str) -> bool:
    """Whether ``schedule`` places several model chunks per stage (interleaved 1F1B, ZB-V);
    False for an unknown name."""
    from core.schedules import get as get_schedule
    try:
        sched = get_schedule(schedule)
    except ValueError:
        return False
    return sched.uses_virtual_stages or sched.fixed_chunks > 1


def _uses_virtual_stages(schedule: str) -> bool:
    """Whether ``schedule`` reads ``plan.virtual_pipeline_stages`` (interleaved 1F1B); False for
    an unknown name."""
    from core.schedules import get as get_schedule
    try:
        return get_schedule(schedule).uses_virtual_stages
    except ValueError:
        return False


def pipeline_layout_text(plan: Any) -> str | None:
    """``plan.pipeline_model_parallel_layout`` stripped, or None when it is unset or blank."""
    text = getattr(plan, "pipeline_model_parallel_layout", None)
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip()


@lru_cache(maxsize=256)
def expand_pipeline_layout(text: str) -> tuple[str, ...]:
    """The virtual stages of a pipeline layout string (Megatron-Core
    ``--pipeline-model-parallel-layout``, ``PipelineParallelLayerLayout.parse_str_to_list``),
    expanded: one string of the symbols ``E``, ``t``, ``m``, ``L`` per virtual stage, in
    virtual-stage order (an empty string for an empty virtual stage).

    Grammar: symbols ``E t m L``, ``|`` between virtual stages, ``x*N`` repeats the symbol
    (or ``|``) before it ``N >= 1`` times, ``(...)*N`` a group; spaces and commas are ignored
    (Megatron drops commas). Example: ``"Et|(tt|)*30mL"`` -> ``("Et", "tt", ..., "tt", "mL")``,
    32 virtual stages. Within a stage the symbols must come in the order ``E``, ``t``, ``m``,
    ``L`` (the order Megatron-Core runs them).

    Raises
    ------
    ValueError
        The string breaks the grammar (an unknown character, an unmatched parenthesis, ``*``
        without a symbol before it or a count after it), expands past
        :data:`MAX_LAYOUT_SYMBOLS` symbols, or a stage lists its symbols out of order.
    """
    src = "".join(str(text).split()).replace(",", "")
    pos = 0

    def seq(depth: int) -> str:
        nonlocal pos
        out: list[str] = []
        size = 0
        while pos < len(src):
            c = src[pos]
            if c == ")":
                if depth == 0:
                    raise ValueError(f"unmatched ')' at character {pos + 1}")
                return "".join(out)
            if c == "(":
                pos += 1
                atom = seq(depth + 1)
                if pos >= len(src):
                    raise ValueError("unmatched '(' (no closing ')')")
                pos += 1
            elif c in "EtmL|":
                atom, pos = c, pos + 1
            elif c == "*":
                raise ValueError(f"'*' at character {pos + 1} must follow a symbol or a group "
                                 "'(...)'")
            else:
                raise ValueError(f"unknown symbol {c!r} at character {pos + 1} (use E, t, m, L, "
                                 "|, (, ), *N)")
            if pos < len(src) and src[pos] == "*":
                digits = ""
                while pos + 1 + len(digits) < len(src) and src[pos + 1 + len(digits)].isdigit():
                    digits += src[pos + 1 + len(digits)]
                value = digits.lstrip("0")  # no int() of a huge digit string
                if not value:
                    raise ValueError(f"'*' at character {pos + 1} must be followed by a count "
                                     ">= 1")
                n = int(value) if len(value) <= 12 else MAX_LAYOUT_SYMBOLS + 1
                if len(atom) * n + size > MAX_LAYOUT_SYMBOLS:
                    raise ValueError(f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
                atom *= n
                pos += 1 + len(digits)
            size += len(atom)
            if size > MAX_LAYOUT_SYMBOLS:
                raise ValueError(f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
            out.append(atom)
        if depth:
            raise ValueError("unmatched '(' (no closing ')')")
        return "".join(out)

    if not src:
        raise ValueError("is empty (leave the field unset for Megatron's split)")
    stages = tuple(seq(0).split("|"))
    order = "EtmL"
    for k, st in enumerate(stages):
        ranks = [order.index(c) for c in st]
        if ranks != sorted(ranks):
            raise ValueError(f"virtual stage {k} {st!r} lists its symbols out of order (E, then "
                             "t, then m, then L: the order Megatron-Core runs them)")
    return stages


def pipeline_layout_errors(text: str, num_layers: int, mtp_layers: int, p: int, v: int
                           ) -> list[str]:
    """Every rule pipeline layout ``text`` breaks for a model of ``num_layers`` transformer
    layers and ``mtp_layers`` multi-token prediction layers under ``p`` stages of ``v`` chunks
    (empty when it is fine); each message names the rule.

    Megatron-Core's rules (``PipelineParallelLayerLayout.validate_layer_layout``): the grammar
    of :func:`expand_pipeline_layout`; ``p*v`` virtual stages; one ``E``, in the first virtual
    stage, one ``L``, in the last; as many ``t`` as ``num_layers`` and ``m`` as
    ``mtp_layers``. MTP layers outside the last virtual stage (with the loss) are refused: not
    modelled."""
    try:
        stages = expand_pipeline_layout(text)
    except ValueError as exc:
        return [f"{text!r} {exc} ({LAYOUT_RULE})"]
    errs: list[str] = []
    n = p * v
    if len(stages) != n:
        errs.append(f"{text!r} has {len(stages)} virtual stages; it needs pipeline_parallel_size*"
                    f"virtual_pipeline_stages = {p}*{v} = {n} (v = virtual_pipeline_stages with the "
                    "interleaved schedule, else 1)")
    flat = "".join(stages)
    for sym, where, k in (("E", "first", 0), ("L", "last", len(stages) - 1)):
        if flat.count(sym) != 1 or sym not in stages[k]:
            errs.append(f"{text!r} must hold exactly one {sym} ({'embedding' if sym == 'E' else 'loss'}"
                        f"), in the {where} virtual stage (Megatron-Core's rule); it has "
                        f"{flat.count(sym)}")
    if flat.count("t") != num_layers:
        errs.append(f"{text!r} has {flat.count('t')} transformer layers (t); the model has "
                    f"num_layers={num_layers}")
    if flat.count("m") != mtp_layers:
        errs.append(f"{text!r} has {flat.count('m')} MTP layers (m); the model has "
                    f"mtp_num_layers={mtp_layers}")
    elif any("m" in st for st in stages[:-1]):
        errs.append(f"{text!r}: MTP layers (m) outside the last virtual stage (the loss's) are "
                    "not modelled")
    return errs


def layout_layer_counts(text: str, num_layers: int, p: int, v: int) -> list[int]:
    """Transformer layers (``t``) of each of the ``p*v`` virtual stages of pipeline layout
    ``text`` (:func:`expand_pipeline_layout`); raises ValueError (the first rule of
    :func:`pipeline_layout_errors` broken, MTP aside: its count needs the model) when it does
    not fit ``num_layers`` over ``p*v`` virtual stages."""
    stages = expand_pipeline_layout(text)
    mtp = "".join(stages).count("m")
    errs = pipeline_layout_errors(text, num_layers, mtp, p, v)
    if errs:
        raise ValueError(f"pipeline_model_parallel_layout {errs[0]}")
    return [st.count("t") for st in stages]


def layout_summary(num_layers: int, plan: ParallelPlan) -> str | None:
    """One line on ``plan``'s custom pipeline layout: its virtual stages and the transformer
    layers of each, runs of equal counts collapsed (``"32 virtual stages: 1, 2 x30, 0 layers;
    E first, L last"``); None without a layout. Raises ValueError when the layout does not fit
    (:func:`virtual_stage_layer_counts`)."""
    text = pipeline_layout_text(plan)
    if text is None:
        return None
    counts = virtual_stage_layer_counts(num_layers, plan)
    runs: list[list[int]] = []
    for c in counts:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    parts = ", ".join(f"{c} x{n}" if n > 1 else str(c) for c, n in runs)
    mtp = "".join(expand_pipeline_layout(text)).count("m")
    return (f"{len(counts)} virtual stages: {parts} layers"
            + (f"; {mtp} MTP layer{'s' if mtp > 1 else ''} with the loss" if mtp else ""))


def _layout_conflict(plan: ParallelPlan) -> str | None:
    """Why ``plan``'s custom pipeline layout cannot stand with its other split fields, or None
    (no layout, or none of them set)."""
    if pipeline_layout_text(plan) is None or not (
            plan.first_stage_layers is not None or plan.last_stage_layers is not None
            or plan.account_for_embedding_in_pipeline_split is True
            or plan.account_for_loss_in_pipeline_split is True):
        return None
    return ("pipeline_model_parallel_layout cannot be combined with first_stage_layers / "
            "last_stage_layers / account_for_embedding_in_pipeline_split / "
            "account_for_loss_in_pipeline_split (Megatron-Core refuses them together: the "
            "layout places every layer)")


def _layout_conflicts(plan: ParallelPlan) -> None:
    why = _layout_conflict(plan)
    if why is not None:
        raise ValueError(why)


def stage_layer_counts(num_layers: int, plan: ParallelPlan) -> list[int]:
    """Transformer layers of each pipeline stage, length p (all its model chunks together).

    Even split ``L/p`` unless ``first_stage_layers`` / ``last_stage_layers`` are
    set; then those stages hold that many and the other stages split the rest
    evenly (Megatron-Core ``--decoder-first/last-pipeline-num-layers``). With
    ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``
    the :func:`pipeline_split_slots` ``L + 1`` or ``L + 2`` split evenly over the ``p``
    stages and the first (last) stage holds one layer fewer (Megatron-Core
    ``get_num_layers_to_build``); with interleaving each stage's chunks add up to the same
    counts (the split over ``p*v`` virtual stages is checked by the interleaved schedule,
    :func:`virtual_stage_layer_counts` gives the chunks). With a custom pipeline layout
    (``plan.pipeline_model_parallel_layout``) each stage holds the ``t`` of its virtual stages
    ``i, p + i, ...`` (:func:`layout_layer_counts`; a stage may hold none).

    Raises
    ------
    ValueError
        The layers do not split that way (never dropped or added silently).
    """
    p, L = plan.pipeline_parallel, num_layers
    layout = pipeline_layout_text(plan)
    if layout is not None:
        _layout_conflicts(plan)
        v = _layout_chunks(plan)
        vc = layout_layer_counts(layout, L, p, v)
        from core.schedules import get as get_schedule
        return [sum(vc[k] for k in row) for row in get_schedule(plan.schedule).virtual_stages(p, v).tolist()]
    first, last = plan.first_stage_layers, plan.last_stage_layers
    if _split_flags(plan):
        if first is not None or last is not None:
            raise ValueError("first_stage_layers / last_stage_layers cannot be set with "
                             "account_for_embedding_in_pipeline_split / "
                             "account_for_loss_in_pipeline_split (Megatron-Core's rule)")
        slots = pipeline_split_slots(L, plan)
        if slots % p:
            raise ValueError(f"num_layers={L} + embedding + loss = {slots} layer slots are not "
                             f"divisible by pipeline_parallel_size={p} ({_SLOT_RULE})")
        counts = [slots // p] * p
        counts[0] -= int(bool(plan.account_for_embedding_in_pipeline_split))
        counts[-1] -= int(bool(plan.account_for_loss_in_pipeline_split))
        return counts
    if first is None and last is None:
        if L % p:
            raise ValueError(f"num_layers={L} is not divisible by pipeline_parallel_size={p}")
        return [L // p] * p
    if p < 2:
        raise ValueError("first_stage_layers / last_stage_layers need pipeline_parallel_size >= 2")
    rest = L - (first or 0) - (last or 0)
    middle = p - (first is not None) - (last is not None)
    if rest < 0 or (middle == 0 and rest != 0):
        raise ValueError(f"first_stage_layers + last_stage_layers = {(first or 0) + (last or 0)} "
                         f"must {'equal' if middle == 0 else 'be less than'} num_layers={L}")
    if middle and (rest == 0 or rest % middle):
        raise ValueError(f"the {rest} layers left after the first/last stage's do not split evenly "
                         f"over the other {middle} stages")
    each = rest // middle if middle else 0
    counts = [each] * p
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


def capped_recompute_layers(plan: ParallelPlan, num_layers: int) -> ParallelPlan:
    """``plan`` with ``recompute_num_layers`` None when the count reaches the plan's largest
    model chunk, else ``plan`` itself.

    Megatron's block method applies ``--recompute-num-layers`` to each model chunk
    (TransformerBlock: a pipeline stage, or a virtual stage under the interleaved schedule)
    and a chunk with fewer layers recomputes them all, so such a count is "every layer"
    (the same simulation). Readers of other tools' settings (Megatron arguments, published
    runs) and the sweep's plans take it through here; :func:`validate` refuses a count above
    every chunk in a session, where it reads as a per-stage count. A plan whose layers do
    not split is returned as is (validation names it)."""
    n = plan.recompute_num_layers
    if not isinstance(n, int) or isinstance(n, bool):
        return plan
    most = largest_model_chunk(num_layers, plan)
    return dataclasses.replace(plan, recompute_num_layers=None) if most and n >= most else plan


def largest_model_chunk(num_layers: int, plan: ParallelPlan, chunks: int | None = None
                        ) -> int | None:
    """Transformer layers of the plan's largest model chunk (:func:`virtual_stage_layer_counts`
    with ``chunks``: a pipeline stage, or a virtual stage under the interleaved schedule), or
    None when the layers do not split (validation names why) or no chunk holds a layer."""
    try:
        return max(virtual_stage_layer_counts(num_layers, plan, chunks), default=0) or None
    except (ValueError, TypeError, ZeroDivisionError):
        return None


def virtual_stage_layer_counts(num_layers: int, plan: ParallelPlan, chunks: int | None = None
                               ) -> list[int]:
    """Transformer layers of each of the ``p*v`` virtual stages, length ``p*v``; virtual stage
    ``k`` is model chunk ``k // p`` of stage ``k % p`` and holds the layers after those of
    virtual stages ``0..k-1``.

    ``chunks`` is ``v`` (default: ``plan.virtual_pipeline_stages`` under the interleaved
    schedule, else 1). With ``v = 1`` this is :func:`stage_layer_counts`. With interleaving
    the layers split evenly, ``L/(p v)`` each; with the embedding / loss flags the
    :func:`pipeline_split_slots` split evenly, ``(L + 2)/(p v)`` each, the first virtual
    stage's first slot being the embedding and the last's last slot the loss, so those hold
    one layer fewer (Megatron-Core ``get_num_layers_to_build`` and
    ``get_transformer_layer_offset``; a virtual stage may hold no layer, as Megatron
    allows). Example: Llama 3.1 405B, 126 layers, p=8 v=8 -> ``[1, 2, ..., 2, 1]``. With a
    custom pipeline layout (``plan.pipeline_model_parallel_layout``, Megatron-Core's
    ``--pipeline-model-parallel-layout``) the ``t`` of each of its virtual stages
    (:func:`layout_layer_counts`): DeepSeek-V3's ``"Et|(tt|)*30mL"``, 61 layers, p=8 v=4 ->
    ``[1, 2, ..., 2, 0]``.

    Raises
    ------
    ValueError
        The layers (slots) do not split evenly over the ``p*v`` virtual stages, uneven
        first/last stages are combined with interleaving, or the layout does not fit
        (:func:`pipeline_layout_errors`) or is combined with the other split fields.
    """
    p = plan.pipeline_parallel
    if chunks is None:
        chunks = _layout_chunks(plan)
    v = int(chunks)
    layout = pipeline_layout_text(plan)
    if layout is not None:
        _layout_conflicts(plan)
        return layout_layer_counts(layout, num_layers, p, max(v, 1))
    if v <= 1:
        return stage_layer_counts(num_layers, plan)
    if plan.first_stage_layers is not None or plan.last_stage_layers is not None:
        raise ValueError("first_stage_layers / last_stage_layers with the interleaved schedule "
                         "are not modelled yet")
    slots, n = pipeline_split_slots(num_layers, plan), p * v
    if slots % n:
        what = (f"num_layers={num_layers} + embedding + loss = {slots} layer slots"
                if _split_flags(plan) else f"num_layers={num_layers}")
        raise ValueError(f"{what} not divisible by pipeline_parallel_size*virtual_pipeline_stages"
                         f"={p}*{v}={n}" + (f" ({_SLOT_RULE})" if _split_flags(plan) else ""))
    counts = [slots // n] * n
    counts[0] -= int(bool(plan.account_for_embedding_in_pipeline_split))
    counts[-1] -= int(bool(plan.account_for_loss_in_pipeline_split))
    return counts


@dataclass
class ClusterConfig:
    """The GPUs and the network between them."""

    gpu: str = _f("A100-SXM4-80GB", "", "GPU kind; selects the profile store", choices=GPU_KINDS,
                  check_choices=False)  # another kind is fine with a profile_path (validate)
    gpus_per_node: int = _f(8, "GPUs", "GPUs in one node: the NVLink domain (8 on HGX/DGX "
                            "boards, 72 for a GB200 NVL72 rack)", bounds=BOUNDS["gpus_per_node"])
    intra_node_bandwidth_gbytes_per_s: float | None = _f(
        None, "GB/s", "Per-GPU NVLink bandwidth inside a node, one direction; empty means "
        "the collective times measured in the GPU's profile", bounds=BOUNDS["intra_bw"]
    )
    inter_node_bandwidth_gbits_per_s: float | None = _f(
        None, "Gb/s", "Network bandwidth per node (all NICs of the node together; a GB200 NVL72 "
        "rack with one 400 Gb/s NIC per GPU: 72 x 400 = 28,800); empty means the GPU's reference "
        "node, one NIC per GPU as its DGX/HGX design has (A100 200 Gb/s, H100, H200, B200 and "
        "GB200 400 Gb/s per GPU)", bounds=BOUNDS["inter_bw"]
    )
    profile_path: str | None = _f(
        None, "", "Profile store to use instead of the shipped one for this GPU kind", path=True
    )
    memory_reserve_fraction: float = _f(
        0.1, "", "Share of each GPU's memory kept free for the framework, CUDA context and "
        "fragmentation: a plan fits when it needs at most (1 - this) of the capacity",
        min=0.0, max=0.9)


@dataclass
class CostConfig:
    """What the training run costs."""

    price_per_gpu_hour_usd: float = _f(2.0, "USD/GPU-hour", "Price of one GPU for one hour",
                                       bounds=BOUNDS["price"])
    training_tokens: float = _f(300e9, "tokens", "Tokens to train on (token budget)",
                                bounds=BOUNDS["tokens"])
    price_per_kwh_usd: float = _f(
        0.08, "USD/kWh", "Price of electricity (the energy of the run, core.sim.energy); default the "
        "US average industrial price of 2023, about 8 cents (EIA, Electric Power Monthly, "
        "Table 5.3)", min=0.0, max=100.0)
    power_usage_effectiveness: float = _f(
        1.1, "", "Facility energy over IT energy (PUE: cooling, power conversion); default 1.10, "
        "the fleet-wide figure hyperscale operators report (Google 2024 Environmental Report, "
        "2023 fleet PUE 1.10); 1 counts the machines only", min=1.0, max=5.0)


#: Unexpected interruptions of the Llama 3 405B pre-training run per GPU-hour: 419 in 54 days
#: on 16,384 H100 GPUs (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4 and
#: Table 5): 419 / (54 * 24 * 16,384) = 1.97e-5 per GPU-hour, 3.79e-3 per 8-GPU node-day;
#: at 16,384 GPUs one interruption every 3.1 hours. The 47 planned interruptions (maintenance,
#: firmware) are left out: a job schedules them.
LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16_384)


@dataclass
class ReliabilityConfig:
    """Failures, restarts and checkpoints of a long run (:mod:`core.sim.goodput`, docs/goodput.md).

    Optional in a session file: a file without it takes these defaults, each with its source.
    Failures form a Poisson process whose rate grows with the GPUs of the job (the per-GPU rate
    times the world size): Kokolis et al. 2024 ("Revisiting Reliability in Large-Scale Machine
    Learning Research Clusters", arXiv 2410.21680) measure the effective training time ratio
    falling with job size on Meta's clusters in this way.
    """

    failure_rate_per_gpu_hour: float = _f(
        LLAMA3_FAILURES_PER_GPU_HOUR, "per GPU-hour",
        "Job interruptions per GPU-hour (a job of N GPUs fails N times as often); per node-day "
        "it is this times 24 times the GPUs per node. Default: Llama 3 405B's 419 unexpected "
        "interruptions in 54 days on 16,384 H100s (Dubey et al. 2024, Sec. 3.3.4), 1.97e-5, "
        "one interruption every 3.1 hours at that size; 0 means no failures", min=0.0, max=1.0)
    restart_time_s: float = _f(
        600.0, "s", "Time from an interruption to training again: rescheduling and replacing the "
        "node, starting the processes, NCCL initialisation, loading the last checkpoint and "
        "warming up. Default 10 minutes, an assumption of this order for jobs of thousands of "
        "GPUs (no published figure for Llama 3's); failures may strike during it too",
        min=0.0, max=7 * 86400.0)
    checkpoint_write_gbytes_per_s_per_node: float = _f(
        1.0, "GB/s", "Sustained checkpoint write bandwidth of one node to the storage system. "
        "Default 1 GB/s: Llama 3's Tectonic storage sustains 2 TB/s for 16,384 GPUs, 2,048 "
        "nodes (Dubey et al. 2024, Sec. 3.1.1)", min=1e-3, max=1e4)
    async_save: bool = _f(
        False, "", "Asynchronous checkpointing (Megatron-LM --async-save, PyTorch DCP async_save): "
        "training stalls only while the state is copied to host memory and the write goes on "
        "in the background. Default false, Megatron-LM's default")
    host_copy_gbytes_per_s_per_gpu: float = _f(
        25.0, "GB/s", "Device-to-host copy bandwidth of one GPU, the stall of an asynchronous "
        "save. Default 25 GB/s: what a PCIe Gen4 x16 link moves in practice (32 GB/s nominal; "
        "Gen5 on H100 doubles it)", min=0.1, max=1e4)
    checkpoint_interval_iterations: int | None = _f(
        None, "iterations", "Iterations between checkpoints (Megatron-LM --save-interval); empty "
        "means the optimum of Young (1974) and Daly (2006) from the failure rate and the "
        "checkpoint's cost", min=1, max=2**40)


@dataclass
class Session:
    """Everything one simulation needs; what a session file holds.

    ``source`` (not a field, never saved): the file it was read from, when it was
    (:func:`core.io.session.load_any`), so that later errors can name it; ``key_names``:
    session field -> the key that file uses for it, when it is not a session file (the
    authors' format), so that later errors use the file's own names (:meth:`in_its_terms`).
    """

    source = None
    key_names = None  # (no annotation: not a dataclass field)

    def in_its_terms(self, exc: "ConfigError") -> "ConfigError":
        """``exc`` naming this session's file and, for another format, that format's keys."""
        if exc.source or not self.source:
            return exc
        errors = exc.errors
        if self.key_names:
            errors = [rename_field(e, self.key_names) for e in errors]
        return ConfigError(errors, self.source)

    model: ModelConfig = field(default_factory=ModelConfig)
    plan: ParallelPlan = field(default_factory=ParallelPlan)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    #: Failures, restarts and checkpoints (:mod:`core.sim.goodput`); optional in a session file
    #: (a file without it takes the defaults), always written
    reliability: ReliabilityConfig = field(default_factory=ReliabilityConfig)
    notes: str = ""
    #: Settings of the design-space sweep (the GUI's Explore tab), plain JSON:
    #: ``{"space": SweepSpace.to_dict(), "deadline_days": float | None}``. Optional:
    #: None (the default) is not written, so files without it stay byte-identical.
    #: Its content is checked by :meth:`core.studies.sweep.SweepSpace.from_dict` where it is used.
    sweep: dict[str, Any] | None = None
    #: Settings of the studies (the GUI's Studies tab), plain JSON:
    #: ``{"optimal": {...}, "schedule": {...}}``; optional like ``sweep``. Checked
    #: where used (:func:`core.studies.optimal.compute_optimal`, :mod:`core.studies.scheduler`).
    studies: dict[str, Any] | None = None
    #: The Compare tab's pinned plan A, ``{"pinned": {"model": ..., "plan": ..., "cluster":
    #: ..., "cost": ...}}`` (the sections of a session; model and plan required), so that
    #: a saved session keeps its comparison (``vtrain diff SESSION.json`` with one file
    #: compares it with the session's own plan). Optional like ``sweep``; checked in full
    #: when read (:meth:`from_dict`), built by :meth:`pinned`.
    compare: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of all sections (no format header); ``sweep``, ``studies`` and
        ``compare`` only when set."""
        out = dataclasses.asdict(self)
        for name in ("sweep", "studies", "compare"):
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], require: bool = False) -> "Session":
        """Build a session from :meth:`to_dict` output.

        Every given field is checked for type, bounds and choices (:func:`check_value`);
        with ``require``, every field marked ``required`` in a given section must be there
        (what a session file must hold).

        Raises
        ------
        ConfigError
            On an unknown section or field, a missing required field, or a value of the
            wrong type, out of bounds or not among the choices.
        """
        if not isinstance(data, dict):
            raise ConfigError([FieldError("session", "must be a JSON object")])
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known), key=str)
        if unknown:
            raise ConfigError([FieldError(k, "unknown section") for k in unknown])
        kwargs: dict[str, Any] = {}
        errors: list[FieldError] = []
        for name, f in known.items():
            if name not in data:
                continue
            if name == "notes":
                if not isinstance(data[name], str):
                    raise ConfigError([FieldError("notes", "must be a string")])
                kwargs[name] = data[name]
                continue
            if name in ("sweep", "studies", "compare"):
                if data[name] is not None and not isinstance(data[name], dict):
                    raise ConfigError([FieldError(name, "must be a JSON object or null")])
                # a deep copy: the session never shares mutable state with its source
                kwargs[name] = None if data[name] is None else json.loads(json.dumps(data[name]))
                if name == "compare" and data[name] is not None:
                    _pinned_from_dict(kwargs[name])  # raises naming compare.pinned.<field>
                continue
            section_cls = {"model": ModelConfig, "plan": ParallelPlan,
                           "cluster": ClusterConfig, "cost": CostConfig,
                           "reliability": ReliabilityConfig}[name]
            try:
                kwargs[name] = _section_from_dict(section_cls, name, data[name], require)
            except ConfigError as exc:  # every section's errors in one message
                errors += exc.errors
        if errors:
            raise ConfigError(errors)
        return cls(**kwargs)

    def pinned(self) -> "Session | None":
        """The Compare tab's pinned plan A as a session of its own (no ``sweep``, ``studies``
        or ``compare``), or None when nothing is pinned.

        Raises
        ------
        ConfigError
            ``compare`` is not ``{"pinned": {section: {...}}}`` with the sections of a
            session (fields named ``compare.pinned.<section>.<field>``).
        """
        return None if self.compare is None else _pinned_from_dict(self.compare)

    def with_pinned(self, pinned: "Session | None") -> "Session":
        """A copy of this session with ``pinned`` (its model, plan, cluster and cost) as the
        Compare tab's plan A (None: nothing pinned)."""
        out = self.copy()
        out.compare = None if pinned is None else {"pinned": {
            k: v for k, v in pinned.to_dict().items() if k in _PINNED_SECTIONS}}
        return out

    def copy(self) -> "Session":
        """A deep copy (values are copied as they are, unchecked: an editor may hold invalid ones)."""
        import copy
        return copy.deepcopy(self)


_PINNED_SECTIONS = ("model", "plan", "cluster", "cost")


def _pinned_from_dict(compare: Any) -> Session:
    """The pinned plan of a session's ``compare`` section (see :attr:`Session.compare`).

    Raises
    ------
    ConfigError
        Not ``{"pinned": {...}}``, a section other than model, plan, cluster and cost,
        model or plan missing, or a field of the wrong type, out of bounds or unknown
        (named ``compare.pinned.<section>.<field>``).
    """
    where = "compare.pinned"
    if not isinstance(compare, dict) or set(compare) != {"pinned"}:
        raise ConfigError([FieldError("compare", 'must be {"pinned": {...}} (the Compare tab\'s '
                                                 "plan A)")])
    pinned = compare["pinned"]
    if not isinstance(pinned, dict):
        raise ConfigError([FieldError(where, "must be a JSON object of session sections")])
    extra = sorted(set(pinned) - set(_PINNED_SECTIONS), key=str)
    missing = [k for k in ("model", "plan") if k not in pinned]
    if extra or missing:
        raise ConfigError([FieldError(f"{where}.{k}", "unknown section (the pinned plan holds "
                                                      "model, plan, cluster and cost)")
                           for k in extra]
                          + [FieldError(f"{where}.{k}", "missing section") for k in missing])
    try:
        return Session.from_dict(pinned, require=True)
    except ConfigError as exc:
        raise ConfigError([dataclasses.replace(e, field=f"{where}.{e.field}")
                           for e in exc.errors]) from None


#: Longest string a session field may hold (names, GPU kinds, paths).
MAX_STRING_LENGTH = 4096
#: Largest magnitude of an integer in any numeric field (int64, as numpy and Megatron-LM hold
#: counts); every field's own bounds are far less, this one names the rule for the absurd.
MAX_INTEGER = 2**63 - 1


def path_problem(text: str) -> str | None:
    """Why the path ``text`` cannot be resolved, or None.

    Lexical and local only (no file is opened, and whether it exists is not told): a NUL
    byte, characters the file system cannot encode, or ``~user`` naming a user this machine does not have. A path that is a symlink
    loop is refused when it is opened, with the message of any unreadable store.
    """
    if "\0" in text:
        return "cannot be resolved: it holds a NUL byte"
    try:
        os.fsencode(text)
    except UnicodeError:  # a lone surrogate (from a JSON escape) is no file name
        return "cannot be resolved: it holds characters no file name can have"
    if text.startswith("~"):
        try:
            expanded = os.path.expanduser(text)
        except (RuntimeError, KeyError, ValueError):  # pragma: no cover - expanduser leaves it
            expanded = text
        if expanded.startswith("~"):
            user = text[1:].split("/", 1)[0] or "the current user"
            return f"cannot be resolved: no home folder for {user} on this machine"
    return None


def field_kind(f: dataclasses.Field) -> tuple[str, bool]:
    """``(base type, optional)`` of a dataclass field from its annotation, e.g.
    ``("int", True)`` for ``int | None``."""
    return _annotation_kind(str(f.type))


@lru_cache(maxsize=256)
def _annotation_kind(annotation: str) -> tuple[str, bool]:
    parts = [p.strip() for p in annotation.split("|")]
    optional = "None" in parts
    base = next((p for p in parts if p != "None"), "object")
    return base, optional


class _Shown:
    """:func:`_shown` of a value, computed only when a message formats it (a valid value,
    the common case, is never turned into text; sweeps check millions of them)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __format__(self, spec: str) -> str:
        return format(_shown(self.value), spec)

    __str__ = __repr__ = lambda self: _shown(self.value)


def _shown(value: Any) -> str:
    """``value`` as JSON writes it (``null``, ``true``, ``"text"``; ``repr`` for what JSON
    cannot hold), shortened to 60 characters: a value from a file can be anything. A huge
    integer is described by its digit count (``str`` of 4,300 digits or more raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -10**50 < value < 10**50:
        from core.util.inputs import describe_number
        return describe_number(value)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _num_text(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check_value(name: str, f: dataclasses.Field, value: Any) -> str | None:
    """The rule ``value`` breaks as the value of field ``f`` (None when it is fine).

    Driven by the field's annotation and metadata (``bounds``, ``choices``): booleans
    must be ``bool`` (never a string or a number), integers ``int`` (not ``bool``, not
    a float), numbers finite ``int`` or ``float`` inside the field's :class:`Bound`,
    strings at most :data:`MAX_STRING_LENGTH` long and one of ``choices`` when given. An
    integer is compared as an integer, never converted to a float (``OverflowError``): one
    beyond the field's bounds, or beyond :data:`MAX_INTEGER` where it has none, is refused by
    its magnitude; a field marked ``path`` must name a
    path that can be resolved (:func:`path_problem`).
    The message starts with ``name=value`` (the readers rename it for other formats).
    """
    base, optional = field_kind(f)
    meta = f.metadata
    if value is None and optional:
        return None
    bound: Bound | None = meta.get("bounds")
    shown = _Shown(value)
    if base == "bool":
        return None if isinstance(value, bool) else f"{name}={shown} must be true or false"
    if base == "str":
        if not isinstance(value, str):
            return f"{name}={shown} must be a string"
        if len(value) > MAX_STRING_LENGTH:
            return f"{name} must be at most {MAX_STRING_LENGTH:,} characters long"
        if meta.get("path"):
            problem = path_problem(value)
            if problem:
                return f"{name}={shown} {problem}"
        choices = meta.get("choices")
        if choices and meta.get("check_choices", True) and value not in choices:
            notes = meta.get("choice_notes", {})  # what each value is, where names are alike
            return f"{name}={shown} is not one of " + ", ".join(
                f"{c} ({notes[c]})" if c in notes else str(c) for c in choices)
        return None
    if base in ("int", "float"):
        integer = base == "int"
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        lo = bound.lo if bound else None
        if isinstance(value, bool) or not ok_type:
            if integer and lo is not None and lo >= 1:
                return f"{name}={shown} must be a positive integer"
            return f"{name}={shown} must be {'an integer' if integer else 'a number'}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name}={shown} must be a finite number"
        choices = meta.get("choices")
        if choices and value not in choices:
            return f"{name}={shown} is not one of {', '.join(map(str, choices))}"
        if "min" in meta and value < meta["min"]:
            return f"{name}={shown} must be at least {_num_text(meta['min'])}"
        if "max" in meta and value > meta["max"]:
            return f"{name}={shown} must be at most {_num_text(meta['max'])}"
        # integers are compared as integers (exactly), never converted to a float
        if bound is None:
            if isinstance(value, int) and not -MAX_INTEGER <= value <= MAX_INTEGER:
                return (f"{name}={shown} is beyond any bound of a field (integers are at most "
                        f"2^63 - 1 in magnitude)")
            return None
        if value < bound.lo:
            if integer and bound.lo == 1:
                return f"{name}={shown} must be a positive integer"
            if bound.lo == 0:
                return f"{name}={shown} must be zero or more"
            return f"{name}={shown} must be at least {_num_text(bound.lo)} ({bound.why})"
        if value > bound.hi:
            return f"{name}={shown} must be at most {_num_text(bound.hi)} ({bound.why})"
        return None
    return None


def section_errors(section: str, obj: Any) -> list[FieldError]:
    """Type, bound and choice errors of every field of dataclass ``obj`` (see :func:`check_value`),
    named ``section.field``."""
    errs = []
    for f in dataclasses.fields(obj):
        msg = check_value(f.name, f, getattr(obj, f.name))
        if msg:
            errs.append(FieldError(f"{section}.{f.name}", msg))
    return errs


def _section_from_dict(cls: type, section: str, data: Any, require: bool = False) -> Any:
    if not isinstance(data, dict):
        raise ConfigError([FieldError(section, "must be a JSON object")])
    fields = {f.name: f for f in dataclasses.fields(cls)}
    errors = [FieldError(f"{section}.{k}", "unknown field")
              for k in sorted(set(data) - set(fields), key=str)]
    missing = missing_required(cls, data) if require else []
    if len(missing) == 1:
        errors.append(FieldError(f"{section}.{missing[0]}", "missing; a session file must give "
                                 "it (no meaningful default)"))
    elif missing:  # one error naming them all: a file is fixed in one go
        errors.append(FieldError(section, f"missing {', '.join(missing)}; a session file must "
                                 "give " + ("every model field (null where a field may be empty)"
                                            if cls is ModelConfig else "them (no meaningful "
                                            "default)")))
    kwargs = {}
    for name, value in data.items():
        if name not in fields:
            continue
        base, optional = field_kind(fields[name])
        if base in _TYPE_WORDS and not _matches_type(base, value):
            errors.append(FieldError(f"{section}.{name}", f"must be of type {base}"
                                     f"{' or null' if optional else ''}, got {_shown(value)}"))
            continue
        msg = check_value(name, fields[name], value)
        if msg:
            errors.append(FieldError(f"{section}.{name}", msg))
            continue
        kwargs[name] = float(value) if base == "float" and value is not None else value
    if errors:
        raise ConfigError(errors)
    return cls(**kwargs)


_TYPE_WORDS = ("int", "float", "str", "bool")
#: How a message names a field's type.
_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def _matches_type(base: str, value: Any) -> bool:
    if value is None:
        return True
    if base == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, {"int": int, "float": (int, float), "str": str}[base])


@dataclass(frozen=True)
class FieldError:
    """One broken rule: ``field`` is a dotted path such as ``plan.tensor_parallel``."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ConfigError(ValueError):
    """A configuration breaks one or more rules; ``errors`` lists them all.

    ``source`` (optional) names the file they come from; the message then starts with it.
    """

    def __init__(self, errors: list[FieldError], source: str | None = None):
        self.errors = list(errors)
        self.source = source
        text = "; ".join(str(e) for e in self.errors)
        super().__init__(f"{source}: {text}" if source else text)

    def in_file(self, source: str | Path) -> "ConfigError":
        """The same errors, the message naming the file ``source``."""
        return ConfigError(self.errors, str(source))


def padded_vocab_size(vocab_size: int, tensor_parallel: int, divisible_by: int = 128) -> int:
    """Vocabulary padded as Megatron-LM does (``--make-vocab-size-divisible-by``).

    The padded size is the smallest multiple of ``divisible_by * t`` that is
    at least ``vocab_size`` (Megatron-LM ``_vocab_size_with_padding``).
    """
    multiple = divisible_by * tensor_parallel
    return -(-vocab_size // multiple) * multiple


def validate(session: Session, *, sections: tuple[str, ...] = ("model", "plan", "cluster", "cost",
                                                               "reliability"),
             model_checked: bool = False) -> list[FieldError]:
    """Return every rule the session breaks (empty list when valid).

    ``sections``: the sections whose fields are checked one by one (type, bounds,
    choices); a plan sweep checks the model, cluster and cost once and then only each
    candidate's plan (the cross-field rules below are always checked). ``model_checked``:
    the caller has validated this model and found it valid, so the rules of the model alone
    (:func:`_model_feature_errors`) are not checked again (a plan sweep, once per candidate).

    Rules: every field's type, :data:`BOUNDS` and choices (:func:`section_errors`); then
    Megatron-LM's argument checks: ``h`` divisible by
    ``a`` unless ``kv_channels`` gives the head size; ``a`` and the MLP hidden size divisible by ``t``; ``L`` divisible
    by ``p``; ``B`` divisible by ``d*b``; ``t`` divides the GPUs of a node
    or is a multiple of them (tensor parallelism across nodes is allowed, and
    slow); known enumerations; ``gpus_per_node`` at most the NVLink domain of
    a shipped GPU kind (:data:`GPU_NVLINK_DOMAIN`; not checked with
    ``cluster.profile_path``); ``precision="fp8"`` only on a shipped GPU kind with FP8 tensor
    cores and ``fp8_recipe="mxfp8"`` only on one with MXFP8 (:data:`GPU_FP8_DTYPES`; with
    ``cluster.profile_path`` the store's peaks decide when simulating); the rules of the plan's newer fields
    (:func:`_plan_feature_errors`) and of mixture of experts (:func:`moe_errors`).
    """
    m, pl, c, cost = session.model, session.plan, session.cluster, session.cost
    errs: list[FieldError] = []

    for section, obj in (("model", m), ("plan", pl), ("cluster", c), ("cost", cost),
                         ("reliability", session.reliability)):
        if section in sections:
            errs += section_errors(section, obj)
    reported = {e.field for e in errs}  # the cross-field rules, without repeating a type error
    errs += [e for e in _plan_feature_errors(pl) if e.field not in reported]
    if not model_checked:
        errs += [e for e in _model_feature_errors(m) if e.field not in reported]
    if c.gpu not in GPU_KINDS and not c.profile_path:
        errs.append(FieldError("cluster.gpu", f"gpu={c.gpu!r} has no shipped profile; "
                               f"choose one of {', '.join(GPU_KINDS)} or set cluster.profile_path"))
    if errs:  # divisibility rules below need positive integers
        return errs

    t, p, d, b, B = (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel,
                     pl.micro_batch_size, pl.global_batch_size)
    if m.kv_channels is None and m.hidden_size % m.num_attention_heads:
        # Megatron-LM asserts it only when it derives the head size (no --kv-channels)
        errs.append(FieldError("model.hidden_size", f"hidden_size={m.hidden_size} is not divisible "
                               f"by num_attention_heads={m.num_attention_heads} (or set "
                               "kv_channels, the head size)"))
    if m.num_attention_heads % t:
        errs.append(FieldError("plan.tensor_parallel", f"num_attention_heads={m.num_attention_heads} "
                               f"is not divisible by tensor_parallel_size={t}"))
    g = m.num_query_groups
    if g is not None:
        if m.num_attention_heads % g:
            errs.append(FieldError("model.num_query_groups", f"num_attention_heads="
                                   f"{m.num_attention_heads} is not divisible by num_query_groups={g}"))
        elif g % t:  # Megatron-Core splits the K/V heads over the tensor-parallel ranks
            errs.append(FieldError("plan.tensor_parallel", f"num_query_groups={g} is not divisible "
                                   f"by tensor_parallel_size={t}"))
    if m.ffn % t:
        errs.append(FieldError("plan.tensor_parallel", f"ffn_hidden_size={m.ffn} is not divisible "
                               f"by tensor_parallel_size={t}"))
    errs += moe_errors(m, pl)
    errs += _mla_plan_errors(m, pl)
    if m.is_moe and pl.data_parallel_shard_size is not None:
        errs.append(FieldError("plan.data_parallel_shard_size", "data_parallel_shard_size with a "
                               "mixture-of-experts model is not modelled (the routed experts' "
                               "expert-data-parallel shards)"))
    if pl.recompute == "selective_op":
        if m.is_moe:
            errs.append(FieldError("plan.recompute", "recompute='selective_op' with a mixture-of-"
                                   "experts model is not modelled (grouped GEMMs and all-to-alls "
                                   "in torchtitan's save list)"))
        if m.attention_kernel != "flash":
            errs.append(FieldError("plan.recompute", "recompute='selective_op' needs "
                                   "model.attention_kernel = flash: torchtitan saves the output of "
                                   "its fused attention (SDPA); the unfused core's batched GEMMs "
                                   "and softmax are not in its save list (not modelled)"))
    layout = pipeline_layout_text(pl)
    layout_errs = [] if layout is None else pipeline_layout_errors(
        layout, m.num_layers, m.mtp_num_layers if _is_int(m.mtp_num_layers) else 0, p,
        _layout_chunks(pl) if _is_int(pl.virtual_pipeline_stages or 1) else 1)
    errs += [FieldError("plan.pipeline_model_parallel_layout", e) for e in layout_errs]
    try:
        counts = None if layout_errs else stage_layer_counts(m.num_layers, pl)
    except ValueError as exc:
        uneven = pl.first_stage_layers is not None or pl.last_stage_layers is not None
        counts = None
        field = ("plan.account_for_embedding_in_pipeline_split"
                 if pl.account_for_embedding_in_pipeline_split else
                 "plan.account_for_loss_in_pipeline_split" if pl.account_for_loss_in_pipeline_split
                 else "plan.first_stage_layers" if uneven else "plan.pipeline_parallel")
        if layout is not None:
            field = "plan.pipeline_model_parallel_layout"
        errs.append(FieldError(field, str(exc)))
    if layout is not None and counts is not None:
        from core.schedules import get as get_schedule
        try:
            splits = get_schedule(pl.schedule).splits_backward
        except (KeyError, ValueError):
            splits = False  # an unknown schedule is named by its own rule
        if splits and virtual_stage_layer_counts(m.num_layers, pl)[0] == 0:
            # the embedding's backward is all weight gradient: a first stage with nothing
            # else has no input-gradient pass B for the schedule to split from W
            errs.append(FieldError("plan.pipeline_model_parallel_layout", f"schedule="
                                   f"{pl.schedule!r} with a first stage that holds only the "
                                   "embedding (no transformer layer) is not modelled: its "
                                   "backward has no input-gradient part to split from the "
                                   "weight gradient"))
    n = pl.recompute_num_layers
    if counts is not None and _is_int(n):
        # Megatron's block method counts per model chunk (TransformerBlock): each pipeline stage,
        # or each of its v virtual stages under the interleaved schedule; a layout may leave one
        # empty
        v = _layout_chunks(pl) if _is_int(pl.virtual_pipeline_stages or 1) else 1
        # (a split that fails is named by the interleaved schedule's own rule) a chunk with
        # fewer layers recomputes them all (Megatron caps it there); a count above every chunk
        # reads it per stage
        most = largest_model_chunk(m.num_layers, pl, v) if v > 1 else max(counts, default=0)
        if most and n > most:
            layers = f"{most} layer{'s' if most != 1 else ''}"
            where = (f"the {layers} of the largest model chunk (Megatron's block method "
                     f"counts per model chunk: each of a stage's v={v} virtual stages)"
                     if v > 1 else f"the {layers} of the largest pipeline stage")
            errs.append(FieldError("plan.recompute_num_layers",
                                   f"recompute_num_layers={n} is more than {where}; "
                                   f"{most} recomputes every layer"))
    if B % (d * b):
        errs.append(FieldError("plan.global_batch_size", f"global_batch_size={B} is not divisible by "
                               f"micro_batch_size*data_parallel_size={b}*{d}={b * d}"))
    else:
        from core.schedules import schedule_errors  # numpy: not on the `vtrain --help` path
        errs += [FieldError(f, msg) for f, msg in schedule_errors(
            pl.schedule, p, pl.num_microbatches, pl.virtual_pipeline_stages,
            None if layout is not None else m.num_layers,  # the layout places the layers
            pipeline_split_slots(m.num_layers, pl) - m.num_layers)]
    cp = pl.context_parallel
    if t * p * cp * d > BOUNDS["parallel"].hi:
        errs.append(FieldError("plan.data_parallel", f"tensor_parallel_size*pipeline_parallel_size*"
                               f"context_parallel_size*data_parallel_size={t}*{p}*{cp}*{d}="
                               f"{t * p * cp * d:,} GPUs is more than "
                               f"{BOUNDS['parallel'].hi:,.0f} ({BOUNDS['parallel'].why})"))
    errs += _context_parallel_errors(m, pl, c)
    if (cp == 1 and pl.sequence_parallel is True and t > 1 and _is_int(m.seq_length)
            and m.seq_length % t):
        # Megatron-Core scatters the (s, b, h) activations along s over the t ranks
        # (scatter_to_sequence_parallel_region: "First dimension of the tensor should be
        # divisible by tensor parallel size")
        errs.append(FieldError("plan.sequence_parallel", f"seq_length={m.seq_length} is not "
                               f"divisible by tensor_parallel_size={t} (sequence parallelism "
                               "splits the sequence over the tensor-parallel ranks)"))
    if pl.tp_comm_overlap is True and pl.sequence_parallel is True:
        if t == 1:  # Megatron-LM turns sequence parallelism off at t = 1, then refuses the overlap
            errs.append(FieldError("plan.tp_comm_overlap", "tp_comm_overlap needs "
                                   "tensor_parallel > 1 (Megatron-LM turns sequence parallelism "
                                   "off at t = 1, and --tp-comm-overlap needs it)"))
        elif t > c.gpus_per_node:
            # Transformer Engine's userbuffers exchange over NVLink (CUDA IPC) inside a node
            errs.append(FieldError("plan.tp_comm_overlap", f"tp_comm_overlap with "
                                   f"tensor_parallel={t} across nodes of gpus_per_node="
                                   f"{c.gpus_per_node} is not modelled (Transformer Engine's "
                                   "userbuffers overlap a tensor-parallel group inside one NVLink "
                                   "domain)"))
    if t > c.gpus_per_node:
        if t % c.gpus_per_node:
            errs.append(FieldError("plan.tensor_parallel", f"tensor_parallel_size={t} spans nodes "
                                   f"unevenly: it must be a multiple of gpus_per_node={c.gpus_per_node}"))
    elif c.gpus_per_node % t:
        errs.append(FieldError("plan.tensor_parallel", f"gpus_per_node={c.gpus_per_node} is not "
                               f"divisible by tensor_parallel_size={t}"))
    fp8 = GPU_FP8_DTYPES.get(c.gpu)
    if pl.precision == "fp8" and fp8 is not None and not c.profile_path:
        recipe = fp8_recipe(pl)
        if "fp8" not in fp8:
            errs.append(FieldError("plan.precision", f"precision='fp8' on cluster.gpu={c.gpu!r}: "
                                   "this GPU has no FP8 tensor cores (its spec gives no FP8 peak); "
                                   "use bf16 or a Hopper/Blackwell GPU"))
        elif recipe == "mxfp8" and "mxfp8" not in fp8:
            errs.append(FieldError("plan.fp8_recipe", f"fp8_recipe='mxfp8' on cluster.gpu={c.gpu!r}: "
                                   "MXFP8 needs Blackwell tensor cores (B200, GB200; the GPU's spec "
                                   "gives no mxfp8 peak); use tensorwise, delayed or blockwise"))
    if (c.inter_node_bandwidth_gbits_per_s is None and c.gpu not in GPU_NIC_GBITS_PER_GPU
            and _is_int(pl.num_gpus) and _is_int(c.gpus_per_node) and pl.num_gpus > c.gpus_per_node):
        errs.append(FieldError("cluster.inter_node_bandwidth_gbits_per_s",
                               f"empty, and GPU {c.gpu!r} has no reference node to take the "
                               f"network from; the plan spans {pl.num_gpus} GPUs over nodes of "
                               f"{c.gpus_per_node}: set the network bandwidth per node"))
    domain = GPU_NVLINK_DOMAIN.get(c.gpu)
    if domain is not None and not c.profile_path and c.gpus_per_node > domain:
        errs.append(FieldError("cluster.gpus_per_node", f"gpus_per_node={c.gpus_per_node} exceeds "
                               f"the NVLink domain of {c.gpu} ({domain} GPUs): the GPUs of a node "
                               "talk over NVLink; use a GPU kind with a larger domain or a store "
                               "of your own (cluster.profile_path)"))
    return errs


def _cp_a2a_errors(m: ModelConfig, pl: ParallelPlan, kind: str, size: int | None
                   ) -> list[FieldError]:
    """The all-to-all exchanges' rules (``cp_comm_type`` a2a, a2a+p2p): Transformer Engine's
    all-to-all splits each tensor-parallel rank's query heads and K/V heads over the
    all-to-all group (``cp`` ranks for a2a, ``cp_a2a_size`` for a2a+p2p; "The number of
    attention heads needs to be divisible by CP size"), and a2a+p2p needs its group size, a
    divisor of ``cp`` between 2 and ``cp/2`` (Megatron-Core: the product of
    ``--hierarchical-context-parallel-sizes`` is the cp size)."""
    cp, t = pl.context_parallel, pl.tensor_parallel
    if kind == "a2a+p2p":
        if size is None:
            return [FieldError("plan.cp_a2a_size", "cp_comm_type 'a2a+p2p' needs cp_a2a_size, the "
                               "all-to-all group's size (Megatron-Core "
                               "--hierarchical-context-parallel-sizes A P: A)")]
        if not _is_int(size) or size < 2 or cp % size or size >= cp:
            return [FieldError("plan.cp_a2a_size", f"cp_a2a_size={size} must divide "
                               f"context_parallel_size={cp} and be smaller than it (the ring "
                               "joins at least two all-to-all groups); use a2a for one group")]
    a = size if kind == "a2a+p2p" else cp
    errs = []
    if m.multi_latent_attention is True:
        return [FieldError("plan.cp_comm_type", f"cp_comm_type={kind!r} with multi-head latent "
                           "attention is not modelled")]
    heads, groups = m.num_attention_heads // t, m.query_groups // t
    for what, n in (("query heads", heads), ("K/V heads (query groups)", groups)):
        if n % a:
            errs.append(FieldError("plan.cp_comm_type", f"cp_comm_type={kind!r} splits each "
                                   f"tensor-parallel rank's {what} ({n}) over {a} ranks: "
                                   f"{n} is not divisible by {a}"))
    return errs


def _context_parallel_errors(m: ModelConfig, pl: ParallelPlan, c: ClusterConfig
                             ) -> list[FieldError]:
    """Megatron-Core's rules of context parallelism (``--context-parallel-size`` cp > 1), each
    naming its field: the sequence splits into ``2*cp`` chunks for the causal load balance
    (``seq_length`` divisible by ``2*cp``; with sequence parallelism the rank's ``s/cp``
    tokens also split over ``t``); ring attention runs in Transformer Engine's fused
    attention (``attention_kernel`` flash: Megatron's unfused path has no context
    parallelism); the cp ranks of a tensor-parallel rank sit ``t`` apart, so a cp group
    larger than a node must fill whole nodes (``t*cp`` a multiple of ``gpus_per_node``;
    smaller groups that straddle a node boundary are allowed and priced as inter-node,
    :meth:`core.sim.comm.CommModel.cp_ring_in_node`). Without context parallelism
    ``cp_comm_type`` (and an a2a+p2p group size) has no effect, as in Megatron-Core, so that a
    study of an all-to-all session keeps its cp = 1 plans."""
    cp = pl.context_parallel
    kind = getattr(pl, "cp_comm_type", "p2p")
    a2a_size = getattr(pl, "cp_a2a_size", None)
    errs: list[FieldError] = []
    if a2a_size is not None and kind != "a2a+p2p":
        errs.append(FieldError("plan.cp_a2a_size", f"cp_a2a_size={a2a_size} is the all-to-all "
                               "group of the a2a+p2p exchange (plan.cp_comm_type a2a+p2p); "
                               f"cp_comm_type is {kind!r}: leave it empty"))
    if cp == 1:  # no exchange: the type has no effect (Megatron ignores --cp-comm-type too)
        return errs
    if kind in ("a2a", "a2a+p2p"):
        errs += _cp_a2a_errors(m, pl, kind, a2a_size)
    s, t = m.seq_length, pl.tensor_parallel
    if s % (2 * cp):
        errs.append(FieldError("plan.context_parallel", f"seq_length={s} is not divisible by "
                               f"2*context_parallel_size={2 * cp} (Megatron-Core splits the "
                               "sequence into 2*cp chunks for the causal load balance)"))
    elif pl.sequence_parallel and t > 1 and (s // cp) % t:
        errs.append(FieldError("plan.context_parallel", f"seq_length/context_parallel_size="
                               f"{s // cp} is not divisible by tensor_parallel_size={t} "
                               "(sequence parallelism splits each rank's tokens over t)"))
    if getattr(m, "window_size", None) is not None:
        errs.append(FieldError("plan.context_parallel", f"context_parallel_size={cp} with "
                               "sliding-window attention (model.window_size) is not modelled "
                               "(the ring's steps of a banded mask)"))
    if getattr(m, "softmax_type", "vanilla") != "vanilla":
        errs.append(FieldError("plan.context_parallel", f"context_parallel_size={cp} with "
                               f"softmax_type={m.softmax_type!r} is not modelled (the ring's "
                               "merge of partial softmaxes with the extra logit)"))
    if m.attention_kernel != "flash":
        errs.append(FieldError("plan.context_parallel", f"context_parallel_size={cp} needs "
                               "model.attention_kernel = flash: Megatron-Core runs ring "
                               "attention in Transformer Engine's fused attention, the unfused "
                               "path has no context parallelism"))
    g = c.gpus_per_node
    if t <= g and t * cp > g and (t * cp) % g:
        errs.append(FieldError("plan.context_parallel", f"tensor_parallel_size*context_parallel_"
                               f"size={t}*{cp}={t * cp} spans nodes unevenly: larger than a node, "
                               f"it must be a multiple of gpus_per_node={g}"
                               + (" (a job that uses fewer GPUs of each NVLink domain, such as 64 "
                                  "of a GB200 NVL72 rack, sets cluster.gpus_per_node to those)"
                                  if g > 8 else "")))
    return errs


def _model_feature_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of the model's mixture-of-experts and attention fields; what the simulator does not
    model is refused by name."""
    errs: list[FieldError] = []
    errs += _mla_model_errors(m)
    errs += _moe_model_errors(m)
    w, n = m.window_size, m.window_attn_skip_freq
    if n is not None and w is None:
        errs.append(FieldError("model.window_attn_skip_freq", "window_attn_skip_freq needs a "
                               "window_size (the layers it keeps full are among windowed ones)"))
    if w is not None and m.attention_kernel != "flash":
        errs.append(FieldError("model.window_size", "sliding-window attention needs "
                               "attention_kernel = flash (Megatron-Core's unfused "
                               "DotProductAttention has no window; Transformer Engine's has)"))
    gated = m.activation == "swiglu"
    if m.activation_func_clamp_value is not None and not gated:
        errs.append(FieldError("model.activation_func_clamp_value", "activation_func_clamp_value "
                               "needs a gated MLP (activation = swiglu): the clamp acts on the "
                               "gate and the linear half"))
    if _is_num(m.glu_linear_offset) and m.glu_linear_offset != 0 and not gated:
        errs.append(FieldError("model.glu_linear_offset", "glu_linear_offset needs a gated MLP "
                               "(activation = swiglu; Megatron-Core: only used with "
                               "gated_linear_unit)"))
    return errs


#: The MLA fields and their values without MLA (the dataclass defaults).
_MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")


def _mla_model_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of multi-head latent attention (Megatron-Core ``MLATransformerConfig`` and the
    combinations the simulator models), each naming its field:

    * ``mtp_num_layers`` with a sliding window is not modelled (multi-token prediction).
    * Without ``multi_latent_attention`` the MLA fields keep their defaults (a value there
      would be ignored: refused instead).
    * With it: ``kv_channels`` unset or ``qk_head_dim + qk_pos_emb_head_dim`` (Megatron's
      MLA sets the query/key head size so; another value names another model); no grouped
      query attention (``num_query_groups`` unset or ``a``: MLA's keys and values have ``a``
      heads); ``attention_kernel`` flash (Megatron-Core runs MLA's core in Transformer
      Engine's fused attention, which takes a value head size other than the query's);
      ``add_qkv_bias`` off (MLA's projections have no bias); no sliding window, no attention
      sinks (``softmax_type``) and no context parallelism (not modelled with MLA; see
      :func:`validate`'s plan rules).
    """
    errs: list[FieldError] = []
    mtp = m.mtp_num_layers
    if _is_int(mtp) and mtp > 0 and m.window_size is not None:
        errs.append(FieldError("model.mtp_num_layers", f"mtp_num_layers={mtp} with sliding-"
                               "window attention is not modelled (which attention the MTP "
                               "layer has)"))
    if m.multi_latent_attention is not True:
        defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
        for name in _MLA_FIELDS:
            if getattr(m, name) != defaults[name]:
                errs.append(FieldError(f"model.{name}", f"{name}={getattr(m, name)!r} needs "
                                       "multi_latent_attention (multi-head latent attention)"))
        return errs
    if not all(_is_int(getattr(m, n)) for n in _MLA_FIELDS[1:]):
        return errs  # type errors are reported by section_errors
    qk = m.qk_head_dim + m.qk_pos_emb_head_dim
    if m.kv_channels is not None and m.kv_channels != qk:
        errs.append(FieldError("model.kv_channels", f"kv_channels={m.kv_channels} with multi-head "
                               "latent attention must be empty or qk_head_dim + "
                               f"qk_pos_emb_head_dim = {qk} (the query/key head size)"))
    if m.num_query_groups is not None and m.num_query_groups != m.num_attention_heads:
        errs.append(FieldError("model.num_query_groups", f"num_query_groups={m.num_query_groups} "
                               "with multi-head latent attention: MLA's keys and values have one "
                               "head per query head (leave it empty)"))
    if m.attention_kernel != "flash":
        errs.append(FieldError("model.attention_kernel", "multi-head latent attention needs "
                               "attention_kernel = flash (Megatron-Core runs MLA's core in "
                               "Transformer Engine's fused attention; the unfused path is not "
                               "modelled)"))
    if m.add_qkv_bias:
        errs.append(FieldError("model.add_qkv_bias", "add_qkv_bias with multi-head latent "
                               "attention: MLA's projections have no bias"))
    if m.window_size is not None:
        errs.append(FieldError("model.window_size", "sliding-window attention with multi-head "
                               "latent attention is not modelled"))
    if getattr(m, "softmax_type", "vanilla") != "vanilla":
        errs.append(FieldError("model.softmax_type", f"softmax_type={m.softmax_type!r} with "
                               "multi-head latent attention is not modelled"))
    return errs


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _moe_model_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of the mixture-of-experts fields (Megatron-Core ``TransformerConfig`` and
    ``arguments.py``): ``moe_top_k`` at most ``num_experts``; the MoE-only fields need
    ``num_experts``; the first dense layers leave at least one MoE layer (a model without
    one is the dense model: say so rather than simulate it under an MoE name)."""
    errs: list[FieldError] = []
    E = m.num_experts
    if E is None:
        for name, default in (("moe_ffn_hidden_size", None), ("num_shared_experts", 0),
                              ("moe_layer_frequency", 1), ("moe_first_dense_layers", 0),
                              ("moe_router_num_groups", None), ("moe_router_group_topk", None)):
            if getattr(m, name, default) != default:
                errs.append(FieldError(f"model.{name}", f"{name}={getattr(m, name)!r} needs "
                                       "num_experts (a mixture-of-experts model)"))
        return errs
    errs += _group_routing_errors(m)
    if not all(_is_int(x) for x in (E, m.moe_top_k, m.moe_layer_frequency,
                                    m.moe_first_dense_layers, m.num_layers)):
        return errs  # type errors are reported by section_errors
    if m.moe_top_k > E:
        errs.append(FieldError("model.moe_top_k", f"moe_top_k={m.moe_top_k} is more than "
                               f"num_experts={E}: a token is routed to distinct experts"))
    k, first = m.moe_layer_frequency, m.moe_first_dense_layers
    if k < 1 or first < 0:
        return errs  # bound errors are reported by section_errors
    if (m.num_layers - 1) // k < -(-first // k):  # no multiple of k in first..L-1
        errs.append(FieldError("model.moe_first_dense_layers", f"moe_first_dense_layers="
                               f"{m.moe_first_dense_layers} and moe_layer_frequency="
                               f"{m.moe_layer_frequency} leave no MoE layer among the "
                               f"{m.num_layers} layers"))
    return errs


def _group_routing_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of node-limited routing (Megatron-Core ``TransformerConfig``, ``moe_utils.
    group_limited_topk``): ``moe_router_group_topk`` needs ``moe_router_num_groups`` ("When
    using group limited routing, moe_router_num_groups must be specified"; the groups alone
    limit nothing); the groups split the experts evenly; a token reaches at most
    ``num_groups`` groups, holding at least ``moe_top_k`` experts."""
    G, M = getattr(m, "moe_router_num_groups", None), getattr(m, "moe_router_group_topk", None)
    if M is None:
        return []
    if G is None:
        return [FieldError("model.moe_router_num_groups", "moe_router_group_topk (node-limited "
                           "routing) needs moe_router_num_groups (Megatron-Core: it must be "
                           "specified)")]
    if not all(_is_int(x) and x >= 1 for x in (G, M, m.num_experts, m.moe_top_k)):
        return []  # type and bound errors are reported by section_errors
    E, k = m.num_experts, m.moe_top_k
    if E % G:
        return [FieldError("model.moe_router_num_groups", f"moe_router_num_groups={G} does not "
                           f"divide num_experts={E}")]
    if M > G:
        return [FieldError("model.moe_router_group_topk", f"moe_router_group_topk={M} is more "
                           f"than moe_router_num_groups={G}")]
    if M * (E // G) < k:
        return [FieldError("model.moe_router_group_topk", f"moe_router_group_topk={M} groups of "
                           f"{E // G} experts hold fewer than moe_top_k={k}")]
    return []


def moe_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Rules of expert parallelism for model ``m`` under plan ``pl`` (Megatron-Core).

    * ``expert_parallel`` > 1, ``expert_tensor_parallel`` or ``moe_imbalance_factor`` other
      than 1 need an MoE model (``arguments.py``: "num_experts must be non None to use
      expert model parallelism").
    * ``num_experts`` divisible by ``expert_parallel`` (each EP rank holds ``E/ep`` experts).
    * The expert ranks: Megatron-Core's ``parallel_state.initialize_model_parallel`` builds a
      second rank generator for the experts in the order tp-ep-dp-pp with
      ``expert_data_parallel = world / (etp * ep * p)``; the world ``t*cp*d*p`` must divide
      by ``etp*ep*p``, i.e. ``etp*ep`` divides ``t*cp*d``.
    * Expert parallelism with tensor parallelism needs sequence parallelism (``arguments.py``:
      "When using expert parallelism and tensor parallelism, sequence parallelism must be
      used").
    * Expert parallelism needs bf16 or fp32 (``arguments.py``: "Expert parallelism is not
      supported with fp16 training"); FP8 with experts is not modelled.
    * The expert MLP's hidden size divisible by ``etp`` (column/row-parallel experts).
    * Without sequence parallelism and with ``t > 1`` every tensor-parallel rank holds all
      tokens; an expert tensor-parallel size other than ``t`` there is not modelled.
    """
    errs: list[FieldError] = []
    ep, etp_set, imb = pl.expert_parallel, pl.expert_tensor_parallel, pl.moe_imbalance_factor
    if not m.num_experts:
        for name, value, default in (("expert_parallel", ep, 1), ("expert_tensor_parallel",
                                                                  etp_set, None),
                                     ("moe_imbalance_factor", imb, 1.0),
                                     ("moe_token_dispatcher_type",
                                      getattr(pl, "moe_token_dispatcher_type", "alltoall"),
                                      "alltoall")):
            if value != default:
                errs.append(FieldError(f"plan.{name}", f"{name}={value!r} needs a mixture-of-"
                                       "experts model (model.num_experts)"))
        return errs + ep_overlap_errors(m, pl)
    t, d = pl.tensor_parallel, pl.data_parallel
    cp = getattr(pl, "context_parallel", 1)
    if not all(_is_int(x) and x >= 1 for x in (ep, t, d, cp, m.num_experts)) or \
            (etp_set is not None and not (_is_int(etp_set) and etp_set >= 1)):
        return errs  # type and bound errors are reported by section_errors
    etp = etp_set if etp_set is not None else t
    E = m.num_experts
    if E % ep:
        errs.append(FieldError("plan.expert_parallel", f"num_experts={E} is not divisible by "
                               f"expert_parallel={ep}"))
    if (t * cp * d) % (etp * ep):
        errs.append(FieldError("plan.expert_parallel", f"expert_tensor_parallel*expert_parallel="
                               f"{etp}*{ep}={etp * ep} does not divide tensor_parallel*"
                               f"context_parallel*data_parallel={t}*{cp}*{d}={t * cp * d} "
                               "(Megatron-Core places the expert groups inside those ranks)"))
    if ep > 1 and t > 1 and not pl.sequence_parallel:
        errs.append(FieldError("plan.sequence_parallel", f"expert_parallel={ep} with "
                               f"tensor_parallel={t} needs sequence_parallel (Megatron-LM: "
                               "expert and tensor parallelism need sequence parallelism)"))
    elif t > 1 and not pl.sequence_parallel and etp != t:
        errs.append(FieldError("plan.expert_tensor_parallel", f"expert_tensor_parallel={etp} "
                               f"other than tensor_parallel={t} without sequence_parallel is "
                               "not modelled"))
    if ep > 1 and pl.precision == "fp16":
        errs.append(FieldError("plan.precision", f"expert_parallel={ep} with precision='fp16': "
                               "Megatron-LM does not support expert parallelism with fp16 "
                               "training (use bf16)"))
    fe = m.moe_ffn_hidden_size or m.ffn
    if _is_int(fe) and fe % etp:
        errs.append(FieldError("plan.expert_tensor_parallel", f"moe_ffn_hidden_size={fe} is not "
                               f"divisible by expert_tensor_parallel={etp}"))
    if m.num_shared_experts and _is_int(fe) and (m.num_shared_experts * fe) % t:
        errs.append(FieldError("plan.tensor_parallel", f"the shared experts' hidden size "
                               f"num_shared_experts*moe_ffn_hidden_size={m.num_shared_experts * fe}"
                               f" is not divisible by tensor_parallel_size={t}"))
    errs += ep_overlap_errors(m, pl)
    return errs


def ep_overlap_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Rules of ``plan.overlap_moe_expert_parallel_comm`` (Megatron-Core 0.19
    ``TransformerConfig.__post_init__`` and ``schedules.py``); when the field is off, only that
    ``plan.delay_wgrad_compute`` needs it.

    * Expert parallelism: ``expert_parallel > 1`` ("only supported with expert model
      parallelism").
    * With ``pipeline_parallel > 1`` the interleaved schedule ("virtual_pipeline_model_parallel_size
      must be specified"); with one stage Megatron's combined 1F1B without pipelining, which
      the ``1f1b`` schedule names here. Schedules not in Megatron-LM (GPipe, ZB-H1, ZB-V) have
      no combined 1F1B.
    * No full recomputation, and no ``moe`` among the recomputed modules.
    * At most one multi-token prediction layer.
    * A bf16 or fp16 model ("only supported with bf16 or fp16 model"; FP8 training keeps bf16
      parameters): not fp32.
    * Torchtitan's per-op checkpointing (``selective_op``) is not Megatron-Core's: refused.
    """
    if getattr(pl, "overlap_moe_expert_parallel_comm", False) is not True:
        if getattr(pl, "delay_wgrad_compute", False) is True:
            return [FieldError("plan.delay_wgrad_compute", "delay_wgrad_compute needs "
                               "overlap_moe_expert_parallel_comm (Megatron-Core: it must be "
                               "enabled when enabling delay_wgrad_compute)")]
        return []
    name = "plan.overlap_moe_expert_parallel_comm"
    errs: list[FieldError] = []
    if not m.num_experts or pl.expert_parallel == 1:
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm needs expert parallelism "
                               "(plan.expert_parallel > 1; Megatron-Core: only supported with "
                               "expert model parallelism)"))
    p = pl.pipeline_parallel
    from core.schedules import get as get_schedule
    try:
        sched = get_schedule(pl.schedule)
    except ValueError:
        sched = None  # an unknown schedule is named by its own rule
    if _is_int(p) and p > 1 and not (sched is not None and sched.in_megatron
                                     and sched.uses_virtual_stages):
        errs.append(FieldError(name, f"overlap_moe_expert_parallel_comm with pipeline_parallel="
                               f"{p} needs the interleaved schedule (Megatron-Core: virtual "
                               f"pipeline stages must be set), not {pl.schedule!r}"))
    elif _is_int(p) and p == 1 and sched is not None and not sched.in_megatron:
        errs.append(FieldError(name, f"overlap_moe_expert_parallel_comm runs Megatron-Core's "
                               f"combined 1F1B schedule, not {pl.schedule!r} (use 1f1b)"))
    if pl.recompute == "full":
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with full recomputation: "
                               "Megatron-Core needs it disabled"))
    elif pl.recompute == "selective_op":
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with torchtitan's per-op "
                               "checkpointing (selective_op) is not modelled"))
    elif pl.recompute == "selective" and "moe" in recompute_modules(pl):
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with the recompute module "
                               "moe: Megatron-Core needs moe out of recompute_modules"))
    if pl.precision == "fp32":
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with precision='fp32': "
                               "Megatron-Core supports it with a bf16 or fp16 model only"))
    if _is_int(m.mtp_num_layers) and m.mtp_num_layers > 1:
        errs.append(FieldError(name, f"overlap_moe_expert_parallel_comm with mtp_num_layers="
                               f"{m.mtp_num_layers}: Megatron-Core supports at most one "
                               "multi-token prediction layer with it"))
    return errs


def _mla_plan_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Rules of a plan for multi-head latent attention: the recompute module ``mla_up_proj``
    (Megatron-Core: MLA's up-projections under ``CheckpointWithoutOutput``) needs an MLA model;
    context parallelism with MLA is not modelled (the ring's K/V blocks of MLA's head sizes),
    nor ``tp_comm_overlap`` (the userbuffer overlap pairs of MLA's latent collectives)."""
    errs: list[FieldError] = []
    mla = m.multi_latent_attention is True
    if pl.recompute == "selective" and isinstance(pl.recompute_modules, str) and not mla \
            and "mla_up_proj" in parse_recompute_modules(pl.recompute_modules):
        errs.append(FieldError("plan.recompute_modules", "recompute_modules: mla_up_proj needs "
                               "model.multi_latent_attention (it recomputes MLA's "
                               "up-projections)"))
    if mla and pl.recompute == "selective_op":
        errs.append(FieldError("plan.recompute", "recompute='selective_op' with multi-head latent "
                               "attention is not modelled (torchtitan's save list of MLA's "
                               "matmuls)"))
    if mla and pl.tp_comm_overlap is True:
        errs.append(FieldError("plan.tp_comm_overlap", "tp_comm_overlap with multi-head latent "
                               "attention is not modelled (the overlap of MLA's latent "
                               "all-gathers and gradient reduce-scatters with its up and down "
                               "projections)"))
    mtp = m.mtp_num_layers
    if _is_int(mtp) and mtp > 0 and _is_int(pl.context_parallel) and pl.context_parallel > 1:
        errs.append(FieldError("plan.context_parallel", f"context_parallel_size="
                               f"{pl.context_parallel} with multi-token prediction "
                               "(model.mtp_num_layers) is not modelled"))
    if mla and _is_int(pl.context_parallel) and pl.context_parallel > 1:
        errs.append(FieldError("plan.context_parallel", f"context_parallel_size="
                               f"{pl.context_parallel} with multi-head latent attention is not "
                               "modelled"))
    return errs


def _plan_feature_errors(pl: ParallelPlan) -> list[FieldError]:
    """Rules of sequence parallelism, recomputation, ZeRO, overlap and gradient dtype
    (Megatron-LM's argument checks where it has one)."""
    errs: list[FieldError] = []
    for name in ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather",
                 "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                 "tp_comm_overlap"):
        if not isinstance(getattr(pl, name), bool):
            errs.append(FieldError(f"plan.{name}", f"{name}={getattr(pl, name)!r} must be true or false"))
    if pl.tp_comm_overlap is True and pl.sequence_parallel is not True:
        # Megatron-LM's arguments.py: "Tensor parallel communication/GEMM overlap can happen
        # only when sequence parallelism is enabled"
        errs.append(FieldError("plan.tp_comm_overlap", "tp_comm_overlap needs sequence_parallel "
                               "(Megatron-LM: --tp-comm-overlap only with --sequence-parallel)"))
    z = pl.zero_stage
    if isinstance(z, bool) or z not in ZERO_STAGES:
        errs.append(FieldError("plan.zero_stage", f"zero_stage={z!r} is not one of 0, 1, 2, 3"))
    elif pl.overlap_param_gather is True and z == 0:
        errs.append(FieldError("plan.overlap_param_gather", "overlap_param_gather needs a sharded "
                               "optimizer (zero_stage >= 1; Megatron: --use-distributed-optimizer)"))
    for name in ("recompute_num_layers", "first_stage_layers", "last_stage_layers"):
        v = getattr(pl, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            errs.append(FieldError(f"plan.{name}", f"{name}={v!r} must be a positive integer or empty"))
    conflict = _layout_conflict(pl)
    if conflict is not None:
        errs.append(FieldError("plan.pipeline_model_parallel_layout", conflict))
    if (pl.first_stage_layers is not None or pl.last_stage_layers is not None) and \
            _multi_chunk(pl.schedule):
        errs.append(FieldError("plan.first_stage_layers", "first_stage_layers / last_stage_layers "
                               f"with the {pl.schedule} schedule (several model chunks per stage) "
                               "are not modelled yet"))
    if pl.recompute_num_layers is not None and pl.recompute != "full":
        errs.append(FieldError("plan.recompute_num_layers", "recompute_num_layers needs recompute "
                               "= full (Megatron's block method)"))
    if pl.recompute_modules is not None:
        rm = pl.recompute_modules
        if not isinstance(rm, str):
            errs.append(FieldError("plan.recompute_modules", f"recompute_modules={rm!r} must be a "
                                   "comma-separated list of module names or empty"))
        elif pl.recompute != "selective":
            errs.append(FieldError("plan.recompute_modules", "recompute_modules needs recompute = "
                                   "selective (Megatron-Core: --recompute-modules with "
                                   "--recompute-granularity selective)"))
        else:
            names = parse_recompute_modules(rm)
            bad = [n for n in names if n not in RECOMPUTE_MODULES]
            if bad:
                errs.append(FieldError("plan.recompute_modules", f"recompute_modules: {', '.join(bad)} "
                                       f"not one of {', '.join(RECOMPUTE_MODULES)}"))
            for n in names:
                if n in UNMODELLED_RECOMPUTE_MODULES:
                    errs.append(FieldError("plan.recompute_modules", f"recompute_modules: {n} is "
                                           f"not modelled ({UNMODELLED_RECOMPUTE_MODULES[n]})"))
    size = pl.data_parallel_shard_size
    if size is not None and _is_int(size) and _is_int(pl.data_parallel) and size >= 1:
        if pl.data_parallel % size:
            errs.append(FieldError("plan.data_parallel_shard_size", f"data_parallel_shard_size="
                                   f"{size} does not divide data_parallel={pl.data_parallel} (the "
                                   "shards are replicated over d/size whole groups; Megatron: d*cp "
                                   "divisible by --num-distributed-optimizer-instances)"))
        elif pl.zero_stage in ZERO_STAGES and pl.zero_stage < 1:
            errs.append(FieldError("plan.data_parallel_shard_size", f"data_parallel_shard_size="
                                   f"{size} needs a sharded optimizer (zero_stage >= 1; Megatron: "
                                   "--num-distributed-optimizer-instances needs "
                                   "--use-distributed-optimizer)"))
    if pl.fp8_param_gather is True:
        if pl.precision != "fp8":
            errs.append(FieldError("plan.fp8_param_gather", f"fp8_param_gather needs precision="
                                   f"'fp8' (precision is {pl.precision!r}): only FP8 linear "
                                   "layers' weights can be gathered in FP8"))
        elif pl.zero_stage in ZERO_STAGES and pl.zero_stage < 1:
            errs.append(FieldError("plan.fp8_param_gather", "fp8_param_gather needs a sharded "
                                   "optimizer (zero_stage >= 1: Megatron's --fp8-param-gather "
                                   "with --use-distributed-optimizer, torchtitan's with FSDP); "
                                   "zero_stage is 0, nothing is gathered"))
    elif not isinstance(pl.fp8_param_gather, bool):
        errs.append(FieldError("plan.fp8_param_gather", f"fp8_param_gather="
                               f"{pl.fp8_param_gather!r} must be true or false"))
    if pl.recompute == "selective_op" and pl.tensor_parallel != 1 and \
            _is_int(pl.tensor_parallel) and pl.sequence_parallel is False:
        errs.append(FieldError("plan.recompute", f"recompute='selective_op' with "
                               f"tensor_parallel_size={pl.tensor_parallel} needs "
                               "sequence_parallel (torchtitan's tensor parallelism is sequence-"
                               "parallel; without it the row-parallel linears' all-reduces, "
                               "not in the save list, would run again: not modelled)"))
    if pl.fp8_recipe is not None and pl.precision != "fp8":
        errs.append(FieldError("plan.fp8_recipe", f"fp8_recipe={pl.fp8_recipe!r} needs precision="
                               f"'fp8' (precision is {pl.precision!r}; Megatron-LM: --fp8-recipe "
                               "only with --fp8-format)"))
    g = pl.grad_reduce_dtype
    if g is not None:
        if g not in GRAD_REDUCE_DTYPES:
            errs.append(FieldError("plan.grad_reduce_dtype", f"grad_reduce_dtype={g!r} is not one of "
                                   f"{', '.join(GRAD_REDUCE_DTYPES)} or empty"))
        elif pl.precision == "fp8" and g not in ("fp32", "bf16"):
            errs.append(FieldError("plan.grad_reduce_dtype", f"grad_reduce_dtype={g!r} with precision="
                                   "'fp8': gradients of FP8 training are bf16 and are reduced in "
                                   "fp32 (default) or bf16 (--grad-reduce-in-bf16), never in FP8"))
        elif pl.precision in PRECISIONS and pl.precision != "fp8" and g not in ("fp32", pl.precision):
            errs.append(FieldError("plan.grad_reduce_dtype", f"grad_reduce_dtype={g!r} with precision="
                                   f"{pl.precision!r}: gradients are reduced in fp32 or in the "
                                   "training precision"))
    return errs


def check(session: Session) -> Session:
    """Return ``session`` unchanged, or raise :class:`ConfigError` listing every broken rule."""
    errs = validate(session)
    if errs:
        raise ConfigError(errs)
    return session


def check_all_but_the_plan(session: Session, model: ModelConfig | None = None,
                           global_batch_size: int | None = None) -> None:
    """Raise :class:`ConfigError` for the rules ``session`` breaks apart from its plan's
    t, p, d, b, schedule, recompute and expert parallelism: the studies (sweep, optimal, schedule) choose
    those themselves (and the fields that depend on p: the first and last stages' layers,
    the recomputed layers; the context-parallel size, swept only when asked). With ``model``
    (``global_batch_size``), that model (batch) is
    checked in place of the session's own."""
    probe = session.copy()
    if model is not None:
        probe.model = model
    probe.plan = probe_plan(session.plan, global_batch_size=global_batch_size)
    check(probe)


def probe_plan(plan: ParallelPlan, **changes: Any) -> ParallelPlan:
    """``plan`` with every size a study chooses at 1 (t, p, d, b, cp, ep), the 1F1B schedule,
    and the fields that depend on them cleared (v, the first/last stages' layers, the
    recomputed layers, the expert tensor-parallel and HSDP sizes, the custom layout, which
    fixes p*v, the expert all-to-all overlap, which needs ep > 1); recomputation full, or
    selective when the plan names its modules. Then
    ``changes`` (a value None leaves the plan's own). What :func:`check_all_but_the_plan`
    validates, and what the sweep's reasons probe one value at a time."""
    fields = dict(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
        schedule="1f1b", virtual_pipeline_stages=None,
        # the recomputed modules are the plan's own under selective recomputation
        recompute="selective" if plan.recompute_modules is not None else "full",
        recompute_num_layers=None,
        first_stage_layers=None, last_stage_layers=None, context_parallel=1, expert_parallel=1,
        expert_tensor_parallel=None, data_parallel_shard_size=None,
        pipeline_model_parallel_layout=None,
        # needs ep > 1 and no full recomputation: a study decides it with the sizes
        overlap_moe_expert_parallel_comm=False, delay_wgrad_compute=False)
    fields.update({k: v for k, v in changes.items() if v is not None})
    return dataclasses.replace(plan, **fields)


#: Fields that only take effect when another field enables them: path -> (test of the session,
#: what enables the field). Megatron-LM ignores these flags in the same situations (e.g.
#: ``--virtual-pipeline-model-parallel-size`` without the interleaved schedule, the MoE flags
#: without ``--num-experts``, ``--fp8-recipe`` without ``--fp8-format``).
_ENABLED_BY: dict[str, tuple[Callable[[Session], bool], str]] = {
    **{f"model.{name}": (lambda s: s.model.num_experts is not None,
                         "a mixture-of-experts model (model.num_experts)")
       for name in ("moe_top_k", "moe_ffn_hidden_size", "num_shared_experts",
                    "moe_layer_frequency", "moe_first_dense_layers", "moe_router_num_groups",
                    "moe_router_group_topk")},
    **{f"plan.{name}": (lambda s: s.model.num_experts is not None,
                        "a mixture-of-experts model (model.num_experts)")
       for name in ("expert_parallel", "expert_tensor_parallel", "moe_imbalance_factor",
                    "moe_token_dispatcher_type")},
    "plan.cp_comm_type": (lambda s: s.plan.context_parallel > 1,
                          "context parallelism (plan.context_parallel > 1)"),
    "plan.cp_a2a_size": (lambda s: s.plan.context_parallel > 1
                         and getattr(s.plan, "cp_comm_type", "p2p") == "a2a+p2p",
                         "the a2a+p2p exchange (plan.cp_comm_type a2a+p2p)"),
    "plan.overlap_moe_expert_parallel_comm": (
        lambda s: s.model.num_experts is not None and s.plan.expert_parallel > 1,
        "expert parallelism (plan.expert_parallel > 1 with model.num_experts)"),
    "plan.cross_entropy_fusion_impl": (
        lambda s: s.plan.cross_entropy_loss_fusion is True,
        "the fused cross-entropy (plan.cross_entropy_loss_fusion)"),
    "plan.delay_wgrad_compute": (
        lambda s: s.plan.overlap_moe_expert_parallel_comm is True,
        "the expert all-to-all overlap (plan.overlap_moe_expert_parallel_comm)"),
    **{f"model.{name}": (lambda s: bool(s.model.multi_latent_attention),
                         "multi-head latent attention (model.multi_latent_attention)")
       for name in _MLA_FIELDS},
    "model.window_attn_skip_freq": (lambda s: s.model.window_size is not None,
                                    "a sliding window (model.window_size)"),
    **{f"model.{name}": (lambda s: s.model.activation == "swiglu",
                         "a gated MLP (model.activation swiglu)")
       for name in ("activation_func_clamp_value", "glu_linear_offset")},
    "plan.virtual_pipeline_stages": (lambda s: _uses_virtual_stages(s.plan.schedule),
                                     "the interleaved schedule (plan.schedule)"),
    "plan.recompute_num_layers": (lambda s: s.plan.recompute == "full",
                                  "full recomputation (plan.recompute)"),
    "plan.recompute_modules": (lambda s: s.plan.recompute == "selective",
                               "selective recomputation (plan.recompute)"),
    **{f"plan.{name}": (lambda s: s.plan.precision == "fp8", "FP8 training (plan.precision)")
       for name in ("fp8_recipe", "fp8_param_gather")},
    **{f"plan.{name}": (lambda s: s.plan.zero_stage >= 1,
                        "a sharded optimizer (plan.zero_stage 1 or more)")
       for name in ("overlap_param_gather", "data_parallel_shard_size")},
    "plan.tp_comm_overlap": (lambda s: bool(s.plan.sequence_parallel),
                             "sequence parallelism (plan.sequence_parallel)"),
}


def inactive_fields(session: Session) -> dict[str, str]:
    """Fields of ``session`` that have no effect on it, each with what would enable it
    (``{"model.kv_lora_rank": "needs multi-head latent attention (model.multi_latent_attention)",
    ...}``): the MoE fields of a dense model, the MLA sizes without latent attention, the
    virtual stages without the interleaved schedule, the FP8 recipe in BF16, and so on
    (:data:`_ENABLED_BY`). The editor greys them out; their values are kept and saved. A field
    whose value breaks a rule of :func:`validate` is the user's to fix, so callers keep such
    fields editable.

    Never raises for a session of the right types; a test that cannot be evaluated (a wrong
    type left by a bad edit) counts the field as active.
    """
    out = {}
    for path, (enabled, what) in _ENABLED_BY.items():
        try:
            active = enabled(session)
        except (TypeError, AttributeError):
            active = True
        if not active:
            out[path] = f"needs {what}"
    return out


# --------------------------------------------------------------------------- presets

#: Llama's values of every model field but the shape, query groups and head size (Touvron et
#: al. 2023; Meta Llama 3 model card; the ``transformers`` Llama code, which Mistral, Mixtral,
#: Qwen2/3 and DeepSeek descend from): SwiGLU, RMSNorm, RoPE, no linear biases, untied output
#: layer, FlashAttention, no QK-norm; no experts, latent attention, window or sinks (their
#: sizes inert, Megatron's defaults). The presets and ``vtrain import hf`` start from it and
#: state what a model changes, so no field takes GPT's default.
LLAMA_FAMILY: dict[str, Any] = {
    "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope",
    "tied_embeddings": False, "add_bias_linear": False, "add_qkv_bias": False,
    "qk_layernorm": False, "attention_kernel": "flash", "num_experts": None, "moe_top_k": 2,
    "moe_ffn_hidden_size": None, "num_shared_experts": 0, "moe_layer_frequency": 1,
    "moe_first_dense_layers": 0, "moe_router_num_groups": None, "moe_router_group_topk": None,
    "multi_latent_attention": False, "q_lora_rank": None, "kv_lora_rank": 512, "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "mtp_num_layers": 0, "window_size": None,
    "window_attn_skip_freq": None, "softmax_type": "vanilla", "activation_func_clamp_value": None,
    "glu_linear_offset": 0.0}


def _shape(name: str, layers: int, hidden: int, heads: int, ffn: int | None, seq: int,
           vocab: int) -> dict[str, Any]:
    return dict(zip(GPT_SHAPE_FIELDS, (name, layers, hidden, heads, ffn, seq, vocab)))


def _gpt(name: str, layers: int, hidden: int, heads: int, seq: int, vocab: int) -> ModelConfig:
    """A GPT model of Megatron-LM (:data:`GPT_FAMILY`; the MLP 4h)."""
    return model_from_fields({**_shape(name, layers, hidden, heads, None, seq, vocab),
                              **GPT_FAMILY})


def _llama(name: str, layers: int, hidden: int, heads: int, groups: int, ffn: int, seq: int,
           vocab: int, **family: Any) -> ModelConfig:
    """A Llama-family model (:data:`LLAMA_FAMILY`) with ``groups`` query groups (GQA);
    ``family`` sets further model fields (experts, head size, QK-norm)."""
    return model_from_fields({**_shape(name, layers, hidden, heads, ffn, seq, vocab),
                              "num_query_groups": groups, "kv_channels": None, **LLAMA_FAMILY,
                              **family})


def _gpt_oss(name: str, layers: int, experts: int) -> ModelConfig:
    """A GPT-OSS model (OpenAI 2025; Megatron-Bridge's ``GPTOSSProvider``): Llama-style
    (GQA, RMSNorm, RoPE with YaRN scaling, untied, FlashAttention) with heads of 64 channels,
    biases in every linear layer, attention sinks (``softmax_type`` learnable), a 128-token
    sliding window alternating with full attention (``--window-attn-skip-freq 2``), a gated MLP
    clamped at 7 with linear offset 1, and ``experts`` experts of 2880, top-4, in every layer."""
    return _llama(name, layers, 2880, 64, 8, 2880, 4096, 201088, add_bias_linear=True,
                  kv_channels=64, num_experts=experts, moe_top_k=4, moe_ffn_hidden_size=2880,
                  window_size=128, window_attn_skip_freq=2, softmax_type="learnable",
                  activation_func_clamp_value=7.0, glu_linear_offset=1.0)


#: Published model shapes. Sources: GPT-3 (Brown et al. 2020, Table 2.1),
#: MT-NLG (Smith et al. 2022, Sec. 3.1), Megatron-LM 1T scaling table
#: (Narayanan et al. 2021, Table 1); Llama 2 (Touvron et al. 2023, Table 1 and the Hugging
#: Face configs meta-llama/Llama-2-7b-hf, -70b-hf), Llama 3 and 3.1 (the Hugging Face configs
#: meta-llama/Meta-Llama-3-8B, -70B, Llama-3.1-405B; pre-training context 8192); Mixtral 8x7B
#: (the Hugging Face config mistralai/Mixtral-8x7B-v0.1; Jiang et al. 2024, "Mixtral of Experts",
#: Sec. 2: 8 experts, top-2, pre-trained at a 32k context; 46.7 B parameters, 12.9 B active);
#: Qwen3-30B-A3B (the Hugging Face config Qwen/Qwen3-30B-A3B: 48 layers, h 2048, 32 heads of
#: 128 channels, 4 KV heads, QK-norm, 128 experts of 768, top-8, untied, vocabulary 151936;
#: Qwen3 Technical Report, Yang et al. 2025, Sec. 3: pre-trained at 4,096 tokens in its
#: general stages; 30.5 B parameters, 3.3 B active); GPT-OSS 120B and 20B (the Hugging Face
#: configs openai/gpt-oss-120b and -20b: 36 / 24 layers, h 2880, 64 heads of 64 channels, 8 KV
#: heads, 128 / 32 experts of 2880, top-4, every layer MoE, untied, vocabulary 201088; a
#: 128-token sliding window on every other layer starting with the first, attention sinks,
#: biases in attention, router and experts, the gated MLP clamped at 7 with a linear offset of
#: 1; pre-trained at initial_context_length 4096, as Megatron-Bridge's GPT-OSS recipes; OpenAI's
#: gpt-oss model card, Table 1: 116.83 B parameters, 5.13 B active; 20.91 B, 3.61 B);
#: DeepSeek-V3 (the Hugging Face config
#: deepseek-ai/DeepSeek-V3: 61 layers, h 7168, 128 heads, multi-head latent attention with
#: q_lora 1536, kv_lora 512, heads of 128 + 64 rotary channels and values of 128, first 3
#: layers dense with ffn 18432, then 256 routed experts of 2048 and 1 shared, top-8, untied,
#: vocabulary 129280; DeepSeek-V3 Technical Report, 2024, Sec. 4.2: pre-trained at 4K tokens
#: with one multi-token prediction layer, "MTP depth D = 1"; 671 B parameters, 37 B active,
#: without the MTP module: 682.6 B with it, its embedding and output head shared).
MODEL_PRESETS: dict[str, ModelConfig] = {
    p.name: p
    for p in (
        _gpt("GPT-3 1.3B", 24, 2048, 16, 2048, 50257),
        _gpt("GPT-3 2.7B", 32, 2560, 32, 2048, 50257),
        _gpt("GPT-3 6.7B", 32, 4096, 32, 2048, 50257),
        _gpt("GPT-3 13B", 40, 5120, 40, 2048, 50257),
        _gpt("GPT-3 175B", 96, 12288, 96, 2048, 50257),
        _gpt("MT-NLG 530B", 105, 20480, 128, 2048, 50257),
        _gpt("Megatron 1T", 128, 25600, 160, 2048, 51200),
        _llama("Llama 2 7B", 32, 4096, 32, 32, 11008, 4096, 32000),
        _llama("Llama 2 70B", 80, 8192, 64, 8, 28672, 4096, 32000),
        _llama("Llama 3 8B", 32, 4096, 32, 8, 14336, 8192, 128256),
        _llama("Llama 3 70B", 80, 8192, 64, 8, 28672, 8192, 128256),
        _llama("Llama 3.1 405B", 126, 16384, 128, 8, 53248, 8192, 128256),
        _llama("Mixtral 8x7B", 32, 4096, 32, 8, 14336, 32768, 32000, num_experts=8, moe_top_k=2),
        _llama("Qwen3-30B-A3B", 48, 2048, 32, 4, 6144, 4096, 151936, kv_channels=128,
               qk_layernorm=True, num_experts=128, moe_top_k=8, moe_ffn_hidden_size=768),
        _llama("DeepSeek-V3", 61, 7168, 128, 128, 18432, 4096, 129280, multi_latent_attention=True,
               q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
               v_head_dim=128, qk_layernorm=True, num_experts=256, moe_top_k=8,
               moe_ffn_hidden_size=2048, num_shared_experts=1, moe_first_dense_layers=3,
               mtp_num_layers=1, moe_router_num_groups=8, moe_router_group_topk=4),
        *(_gpt_oss(name, layers, experts) for name, layers, experts in (
            ("GPT-OSS 120B", 36, 128), ("GPT-OSS 20B", 24, 32))),
    )
}


# --------------------------------------------------------------------------- other formats

#: The authors' keys: key -> (the session field it fills, or None; type when it fills none).
#: Types, bounds and choices of a key that fills a session field are that field's, checked
#: by the same code (:func:`check_value`) under the authors' key name.
_AUTHORS_FIELDS: dict[str, tuple[str | None, str]] = {
    "num_gpus": (None, "int"),
    "gpu_name": (None, "str"),  # mapped by gpu_kind, then checked as cluster.gpu
    "tensor_parallel_size": ("plan.tensor_parallel", ""),
    "data_parallel_size": ("plan.data_parallel", ""),
    "pipeline_parallel_size": ("plan.pipeline_parallel", ""),
    "global_batch_size": ("plan.global_batch_size", ""),
    "micro_batch_size": ("plan.micro_batch_size", ""),
    "num_layers": ("model.num_layers", ""),
    "hidden_size": ("model.hidden_size", ""),
    "num_attention_heads": ("model.num_attention_heads", ""),
    "max_length": ("model.seq_length", ""),
    "ffn_hidden_size": ("model.ffn_hidden_size", ""),
    "vocab_size": ("model.vocab_size", ""),
    "use_gradient_bucket": (None, "bool"),  # true: plan.overlap_grad_reduce
    "use_checkpoint": (None, "bool"),  # true: plan.recompute "full", false: "none"
    "pipeline_scheduling": (None, "str"),  # lower-cased, then checked as plan.schedule
    "inter_node_bandwidth": ("cluster.inter_node_bandwidth_gbits_per_s", ""),
    "intra_node_bandwidth": ("cluster.intra_node_bandwidth_gbytes_per_s", ""),
    "node_size": ("cluster.gpus_per_node", ""),
    "trace_path": (None, "str"),  # ignored
}
_AUTHORS_KEYS = set(_AUTHORS_FIELDS)
_AUTHORS_REQUIRED = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                     "global_batch_size", "micro_batch_size", "num_layers", "hidden_size",
                     "num_attention_heads", "max_length")
_SECTION_CLASSES = {"model": "ModelConfig", "plan": "ParallelPlan", "cluster": "ClusterConfig",
                    "cost": "CostConfig"}


def _session_field(path: str) -> dataclasses.Field:
    """The dataclass field of a dotted session path such as ``plan.tensor_parallel``."""
    section, name = path.split(".")
    cls = globals()[_SECTION_CLASSES[section]]
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _authors_key_errors(raw: dict) -> list[FieldError]:
    """Type, bound and choice errors of the authors' keys present in ``raw``, named by key.

    The format has no null: a key is given with a value of its type or left out (its
    default), even where the session field it fills may be empty."""
    errs = []
    for key, (target, kind) in _AUTHORS_FIELDS.items():
        if key not in raw:
            continue
        if target is not None:
            f = _session_field(target)
        else:
            f = dataclasses.field(metadata={"bounds": BOUNDS["parallel"]} if key == "num_gpus" else {})
            f.name, f.type = key, kind
        if raw[key] is None and field_kind(f)[1]:  # null, where the session field may be empty
            unit = f.metadata.get("unit")
            errs.append(FieldError(key, f"{key}=null must be {_TYPE_NAMES[field_kind(f)[0]]}"
                                        f"{f' ({unit})' if unit else ''}; leave the key out "
                                        "for its default"))
            continue
        msg = check_value(key, f, raw[key])
        if msg:
            errs.append(FieldError(key, msg))
    return errs


def gpu_kind(name: str) -> str:
    """Map a GPU name used by other tools (``"A100"``, ``"DGX-H100"``, ``"H100 SXM5 80GB
    HBM3"``, ``"GB200 (NVL72)"``) to a shipped GPU kind (:data:`_GPU_FAMILIES`); a name that
    names another variant, or no shipped family, is returned unchanged (the caller's
    validation refuses it by name). A parenthesis that only describes the machine (``"GB200
    NVL72 (4 GPUs per compute tray)"``: no memory, power, form factor, memory type or GPU
    family in it) is set aside when the name does not map with it."""
    if name in GPU_KINDS:
        return name
    kind = _gpu_kind_words(name)
    if kind != name or "(" not in name:
        return kind
    bare = re.sub(r"\([^()]*\)", " ", name)
    outer = set(re.findall(r"[a-z0-9]+", bare.lower())) & set(_GPU_FAMILIES)
    for part in re.findall(r"\(([^()]*)\)", name):
        words = re.findall(r"[a-z0-9]+", part.lower())
        if not all(w in _GPU_DESCRIPTIVE or w in outer or (w.isdigit() and len(w) <= 3)
                   for w in words):
            return name  # the parenthesis may name a variant (or another GPU): never set aside
    kind = _gpu_kind_words(bare)
    return kind if kind in GPU_KINDS else name


def _gpu_kind_words(name: str) -> str:
    """:func:`gpu_kind` on the name's words (parentheses read as words)."""
    # "80 GB", "700 W", "NVL 72", "NVL-72" are one word each, as "80GB", "700W", "NVL72"
    text = re.sub(r"(\d)[\s-]+(gb|w)\b", r"\1\2", name.lower())
    text = re.sub(r"\bnvl[\s-]+(\d+)\b", r"nvl\1", text)
    # a count of GPUs in a system name is not a variant: "HGX H100 8-GPU", "8x H100"
    text = re.sub(r"\b\d{1,3}\s*-?\s*gpus?\b|\b\d{1,3}\s*x\b(?=\s*[a-z])", " ", text)
    words = [w for w in re.findall(r"[a-z0-9]+", text) if w not in _GPU_NAME_NOISE]
    families = sorted({w for w in words if w in _GPU_FAMILIES})  # a family named twice is one
    if len(families) != 1:
        return name
    rest = {w for w in words if w != families[0]}
    kinds = [kind for kind, carried, required in _GPU_FAMILIES[families[0]]
             if required <= rest and rest <= carried]
    return kinds[0] if len(kinds) == 1 else name


def read_vtrain_config(path: str | Path, *, check_rules: bool = True) -> Session:
    """Read the vTrain authors' JSON configuration format into a :class:`Session`.

    Units in that format: ``inter_node_bandwidth`` in Gb/s per node,
    ``intra_node_bandwidth`` in GB/s; ``max_length`` is the sequence length;
    ``use_checkpoint`` means full activation recomputation. The format describes GPT
    models only: the model's family fields take GPT's values (:data:`GPT_FAMILY`), a key
    the format does not define is refused, and its required keys (:data:`_AUTHORS_REQUIRED`)
    must be there. The paper's configs give no vocabulary: without ``vocab_size`` GPT-2's
    50257 is used. ``use_gradient_bucket`` true means
    the gradient all-reduce runs in buckets overlapped with the backward pass
    (``plan.overlap_grad_reduce``); ``trace_path`` is ignored.

    Raises
    ------
    ConfigError
        On a missing or unknown key, or ``num_gpus`` that disagrees with
        ``tensor_parallel_size * pipeline_parallel_size * data_parallel_size``.
    """
    from core.util.inputs import read_json_file

    path = Path(path)

    class _Unreadable(Exception):
        pass

    try:
        raw = read_json_file(path, _Unreadable)
    except _Unreadable as exc:
        raise ConfigError([FieldError(str(path), str(exc)[len(str(path)) + 2:])]) from None
    try:
        return vtrain_config_from_dict(raw, source=path.name, check_rules=check_rules)
    except ConfigError as exc:
        raise exc.in_file(path) from None


#: Session field -> authors'-format key that fills it (for error messages).
#: Session field -> authors'-format key that fills it (for error messages).
_AUTHORS_NAME = {**{target: key for key, (target, _) in _AUTHORS_FIELDS.items() if target},
                 "plan.schedule": "pipeline_scheduling", "plan.recompute": "use_checkpoint",
                 "cluster.gpu": "gpu_name"}


def rename_field(err: FieldError, names: dict[str, str] | None = None) -> FieldError:
    """``err`` with another format's name (``names``: session field -> the file's key; default
    the authors' JSON keys) in place of the session field it names, in the field and at the
    start of the message."""
    key = (names or _AUTHORS_NAME).get(err.field)
    if key is None:
        return err
    short = err.field.split(".")[-1] + "="
    message = key + "=" + err.message[len(short):] if err.message.startswith(short) else err.message
    return FieldError(key, message)


def vtrain_config_from_dict(raw: Any, source: str = "config", *,
                            check_rules: bool = True) -> Session:
    """Convert a parsed authors'-format dict (see :func:`read_vtrain_config`); with
    ``check_rules`` false, unknown, missing and refused keys are still errors but the
    configuration rules are not checked."""
    if not isinstance(raw, dict):
        raise ConfigError([FieldError(source, "must be a JSON object")])
    errs = [FieldError(k, "unknown key in vTrain config")
            for k in sorted(set(raw) - _AUTHORS_KEYS, key=str)]
    errs += [FieldError(k, "missing required key") for k in _AUTHORS_REQUIRED if k not in raw]
    errs += _authors_key_errors(raw)
    if errs:
        raise ConfigError(errs)
    sched = raw.get("pipeline_scheduling", "1f1b").lower()
    model = model_from_fields({  # the format holds GPT models only: GPT's family fields
        **GPT_FAMILY, "name": f"{raw['num_layers']}-layer h={raw['hidden_size']}",
        "num_layers": raw["num_layers"], "hidden_size": raw["hidden_size"],
        "num_attention_heads": raw["num_attention_heads"],
        "ffn_hidden_size": raw.get("ffn_hidden_size"), "seq_length": raw["max_length"],
        "vocab_size": raw.get("vocab_size", 50257)})
    for preset in MODEL_PRESETS.values():  # the format holds GPT models only
        if dataclasses.replace(preset, name=model.name, ffn_hidden_size=model.ffn_hidden_size,
                               seq_length=model.seq_length, vocab_size=model.vocab_size) == model:
            model.name = preset.name
            break
    plan = ParallelPlan(
        tensor_parallel=raw["tensor_parallel_size"], pipeline_parallel=raw["pipeline_parallel_size"],
        data_parallel=raw["data_parallel_size"], micro_batch_size=raw["micro_batch_size"],
        global_batch_size=raw["global_batch_size"], schedule=sched,
        recompute="full" if raw.get("use_checkpoint", False) else "none", precision="fp16",
        overlap_grad_reduce=raw.get("use_gradient_bucket", False) is True,
    )
    cluster = ClusterConfig(
        gpu=gpu_kind(raw.get("gpu_name", "A100")),
        gpus_per_node=raw.get("node_size", 8),
        intra_node_bandwidth_gbytes_per_s=(float(raw["intra_node_bandwidth"])
                                           if "intra_node_bandwidth" in raw else None),
        inter_node_bandwidth_gbits_per_s=float(raw.get("inter_node_bandwidth", 800.0)),
    )
    session = Session(model=model, plan=plan, cluster=cluster)
    session.key_names = _AUTHORS_NAME
    if not check_rules:
        return session
    # name the keys of the user's file, not the session fields they fill
    errs = [rename_field(e) for e in validate(session)]
    if "num_gpus" in raw and not errs and raw["num_gpus"] != plan.num_gpus:
        errs.append(FieldError("num_gpus", f"num_gpus={raw['num_gpus']} disagrees with "
                               f"tensor_parallel_size*pipeline_parallel_size*data_parallel_size="
                               f"{plan.tensor_parallel}*{plan.pipeline_parallel}*{plan.data_parallel}"
                               f"={plan.num_gpus}"))
    if errs:
        raise ConfigError(errs)
    return session
