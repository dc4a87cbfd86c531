"""The parallel plan record, :class:`ParallelPlan`: how one iteration is split over GPUs, its
enumerations (schedules, recomputation, precisions, ...) and the small derived quantities every
layer reads from a plan (ZeRO shard sizes, gradient and tensor dtypes, recomputed modules, the
FP8 recipe, cache keys).

Terms follow Megatron-LM: tensor-parallel size ``t``, pipeline-parallel size ``p``,
context-parallel size ``cp``, data-parallel size ``d`` (world size ``t*p*cp*d``), micro-batch
size ``b``, global batch size ``B`` and number of micro-batches ``m = B / (d*b)``.

A new plan field goes here; how it splits the layers goes to :mod:`core.plan.layout`, its
rules to :mod:`core.plan.rules`.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass

from core.plan.fields import BOUNDS, described_field

__all__ = ["SCHEDULES", "SWEEP_SCHEDULES", "RECOMPUTE_MODES", "RECOMPUTE_CHOICES", "RECOMPUTE_MODULES",
           "UNMODELLED_RECOMPUTE_MODULES", "PRECISIONS", "MOE_DISPATCHERS", "CP_COMM_TYPES",
           "FP8_RECIPES", "CROSS_ENTROPY_FUSION_IMPLS", "FP8_DEFAULT_RECIPE", "ZERO_STAGES",
           "GRAD_REDUCE_DTYPES", "OPTIMIZER_STATE_DTYPES", "MAIN_PARAMS_DTYPES", "ParallelPlan",
           "PLAN_FIELDS", "plan_field_title", "plan_key",
           "zero_shard_size", "zero_replicas", "grad_dtype", "parse_recompute_modules",
           "recompute_modules", "fp8_recipe", "tensor_dtype", "tf32_matmuls",
           "gemm_peak_dtype", "tp_overlap_applies", "CUDA_GRAPH_IMPLS", "CUDA_GRAPH_MODULES", "parse_cuda_graph_modules",
           "cuda_graph_modules", "WGRAD_ACCUMULATIONS", "wgrad_accumulation",
           "TP_COMM_OVERLAP_BACKENDS", "FP8_IMPLS", "TP_SAVED_INPUTS",
           "tp_saves_gathered_input", "fsdp_fp32_applies"]


#: Pipeline schedules (registered in core.schedules; the order of the editor's list).
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1", "zb-v")
#: The schedules a sweep tries by default (ZB-V only when asked: ``--schedules``).
SWEEP_SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1")


RECOMPUTE_MODES = ("none", "selective", "full")


#: Every value of ``plan.recompute``: :data:`RECOMPUTE_MODES` (Megatron's, the modes a sweep
#: tries) and ``selective_op``, torchtitan's per-op selective activation checkpointing
#: (:func:`core.model.recompute.selective_op_linears`; chosen, never swept).
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


#: How ``tp_comm_overlap`` overlaps the tensor-parallel collectives with their GEMMs:
#: ``userbuffers``, Transformer Engine's (Megatron-Core ``--tp-comm-overlap``: every sequence-
#: parallel all-gather and reduce-scatter of a layer, forward and backward, pipelined with its
#: GEMM), or ``symmetric_memory``, PyTorch's micro-pipeline TP (torchtitan's
#: ``enable_async_tensor_parallel``: torch.compile's ``micro_pipeline_tp_pass`` fuses an
#: all-gather with the matmuls that consume it and a reduce-scatter with the one matmul that
#: produces it; in the backward the reduce-scatters after the QKV and fc1 input-gradient GEMMs
#: take the sum of several matmuls' outputs, ``dq Wq + dk Wk + dv Wv`` and ``d1 W1 + d3 W3``,
#: which its producer matcher does not take, so they stay exposed: torch 2.7.1-2.13
#: ``torch/_inductor/fx_passes/micro_pipeline_tp.py`` ``_find_producer_matmul`` and
#: ``fuse_matmul_reduce_scatter``).
TP_COMM_OVERLAP_BACKENDS = ("userbuffers", "symmetric_memory")


#: FP8 scaling recipes (Megatron-Core's --fp8-recipe; Transformer Engine): delayed scaling
#: (amax history), per-tensor current scaling (tensorwise), MXFP8 (32-element blocks with
#: E8M0 scales; Blackwell) and blockwise (128x128 weight / 1x128 activation blocks).
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")


#: What runs a plan's FP8 linears (``plan.fp8_impl``): Transformer Engine (Megatron-Core;
#: persistent FP8 weight copies, FP8 saved inputs) or torchao's ``Float8Linear`` (torchtitan's
#: float8 converter, torchao 0.18.0: no weight copy, the input saved as it arrives).
FP8_IMPLS = ("transformer_engine", "torchao")


#: What a sequence-parallel column-parallel linear (QKV, fc1, the output layer) saves of its
#: input for the backward (``plan.tp_saved_input``): Megatron-Core's s/t shard, all-gathered
#: again in the backward (Korthikanti et al. 2022, Table 2 with sequence parallelism), or the
#: all-gathered input as the linear received it, all ``s`` tokens on every rank (torchtitan's DTensor
#: tensor parallelism: ``PrepareModuleInput(desired_input_layouts=Replicate())`` before
#: ``ColwiseParallel`` linears; torchtitan 0.2.0 ``models/llama3/infra/parallelize.py``
#: ``apply_tp``).
TP_SAVED_INPUTS = ("sequence_shard", "gathered")


#: Implementations of Megatron-Core's fused cross-entropy (--cross-entropy-fusion-impl): native
#: (Megatron-Core's jit-fused vocab-parallel kernels) or te (Transformer Engine's
#: parallel_cross_entropy, which computes the logits' gradient in the forward).
CROSS_ENTROPY_FUSION_IMPLS = ("native", "te")


#: The recipe of ``precision="fp8"`` when ``fp8_recipe`` is empty: per-tensor current scaling,
#: what Megatron-Bridge's FP8 configs and torchao's float8 run. (Megatron-LM's own
#: ``--fp8-recipe`` default is ``delayed`` in Megatron-Core 0.19, ``TransformerConfig``; the
#: Megatron import reads a launch without the flag as that.)
FP8_DEFAULT_RECIPE = "tensorwise"


#: CUDA graph implementations (Megatron-Core ``--cuda-graph-impl``; its choices and default
#: ``none`` in Megatron-LM's arguments at d98e8a64, 2026-08-22): ``none`` runs every module
#: eagerly from Python; ``local`` Megatron-Core's own per-layer graphs (``CudaGraphManager``:
#: a transformer layer whole, forward and backward; with ``cuda_graph_modules`` only the layers
#: those modules select, :mod:`core.model.cuda_graphs`); ``transformer_engine`` Transformer
#: Engine's ``make_graphed_callables`` over the modules of ``cuda_graph_modules`` (the whole
#: layer when it is empty); ``full_iteration`` one graph of the whole forward-backward of
#: all micro-batches (``FullCudaGraphWrapper`` around ``forward_backward_func``; the older
#: ``--cuda-graph-impl local --cuda-graph-scope full_iteration``, which Megatron-Core migrates
#: to it). The deprecated ``--enable-cuda-graph`` is ``local``, ``--external-cuda-graph``
#: ``transformer_engine``.
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")


#: Module names of Megatron-Core's ``--cuda-graph-modules`` (``--cuda-graph-scope``, deprecated;
#: ``CudaGraphModule`` in 0.19.2, ``CudaGraphScope`` in 0.16.1), the parts of a transformer layer
#: the per-layer graphs (``local``, ``transformer_engine``) capture (:mod:`core.model.cuda_graphs`
#: maps them to this simulator's ops).
CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")


#: ZeRO stages (Rajbhandari et al. 2020): 0 replicated, 1 optimizer state sharded (Megatron's
#: distributed optimizer), 2 gradients too, 3 parameters too (FSDP).
ZERO_STAGES = (0, 1, 2, 3)


#: Data types the data-parallel gradients can be accumulated and reduced in.
GRAD_REDUCE_DTYPES = ("fp32", "bf16", "fp16")


#: Data types of Adam's moments under the precision-aware optimizer (Megatron-LM
#: ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` choices at d98e8a64; Transformer Engine's
#: ``FusedAdam`` keeps fp8 moments as uint8 with a scale per tensor).
OPTIMIZER_STATE_DTYPES = ("fp32", "fp16", "bf16", "fp8")

#: Data types of the master weights under the precision-aware optimizer (Megatron-LM
#: ``--main-params-dtype`` choices).
MAIN_PARAMS_DTYPES = ("fp32", "fp16")


@dataclass(slots=True)
class ParallelPlan:
    """How one iteration is split over GPUs (Megatron-LM / Megatron-Core arguments).

    Its fields are slots, not an instance dict: a sweep holds one plan per row (about 1.2
    million in a 256-GPU mixture-of-experts sweep), 408 bytes each rather than about 1,650
    (CPython 3.11 shares no dict keys past 30 fields).

    The one record of a plan: sweep columns (:data:`PLAN_FIELDS`), cache keys
    (:func:`plan_key`), labels (:meth:`label`) and the editor's rows all derive
    from these fields and their metadata (``unit``, ``help``, ``choices``,
    ``min``/``max``, ``short``: the label's abbreviation; ``label``: ``"always"``
    to show the field in every label, ``"never"`` to leave it out, otherwise it
    shows when it differs from its default).
    """

    tensor_parallel: int = described_field(8, "GPUs", "Tensor-parallel size t (--tensor-model-parallel-size)",
                              short="t", label="always", bounds=BOUNDS["parallel"], required=True)
    pipeline_parallel: int = described_field(16, "stages", "Pipeline-parallel size p (--pipeline-model-parallel-size)",
                                short="p", label="always", bounds=BOUNDS["parallel"], required=True)
    data_parallel: int = described_field(4, "replicas", "Data-parallel size d (world size / (t*p*cp))",
                            short="d", label="always", bounds=BOUNDS["parallel"], required=True)
    micro_batch_size: int = described_field(1, "sequences", "Micro-batch size b (--micro-batch-size)",
                               short="b", label="always", bounds=BOUNDS["micro_batch"], required=True)
    global_batch_size: int = described_field(1536, "sequences", "Global batch size B (--global-batch-size)",
                                short="B", label="never", bounds=BOUNDS["global_batch"], required=True)
    schedule: str = described_field("1f1b", "", "Pipeline schedule: 1f1b (PipeDream-flush), gpipe, interleaved "
                       "(interleaved 1F1B, --num-layers-per-virtual-pipeline-stage), zb-h1 "
                       "(zero-bubble, backward split into input and weight gradients) or zb-v "
                       "(zero-bubble, two chunks per stage placed V-shape; not in Megatron-LM)",
                       choices=SCHEDULES, short="", label="always")
    recompute: str = described_field("full", "", "Activation recomputation: none, selective (the attention "
                        "core, --recompute-activations), full (--recompute-granularity full) or "
                        "selective_op (torchtitan's per-op selective activation checkpointing: "
                        "every other matmul and the attention output saved, the rest recomputed)",
                        choices=RECOMPUTE_CHOICES, label="always", required=True)
    precision: str = described_field("bf16", "", "Training precision (mixed precision with fp32 master weights)",
                        choices=PRECISIONS, label="never", required=True)
    virtual_pipeline_stages: int | None = described_field(
        None, "chunks", "Virtual pipeline stages v per rank for the interleaved schedule "
        "(--num-virtual-stages-per-pipeline-rank); empty for other schedules", short="v", min=2,
        min_why="1 is no interleaving, as Megatron-LM runs it: leave it empty (null)",
        bounds=BOUNDS["layers"])
    overlap_p2p_comm: bool = described_field(
        True, "", "Overlap the interleaved schedule's PP send/recv with compute "
        "(Megatron-LM's default with virtual stages; off with --no-overlap-p2p-communication): "
        "in the steady state (one forward and one backward in turn) a stage issues its sends "
        "asynchronously and goes on with its next item; the warm-up and cool-down transfers "
        "still block. Other schedules' transfers are blocking (Megatron-LM turns the overlap "
        "off without virtual stages)", short="overlap_p2p")
    sequence_parallel: bool = described_field(False, "", "Sequence parallelism (--sequence-parallel): tensor-"
                                 "parallel all-reduces become reduce-scatter + all-gather, LayerNorm "
                                 "and dropout run on s/t tokens", short="sp")
    recompute_num_layers: int | None = described_field(
        None, "layers", "With full recomputation: layers recomputed in each model chunk, the "
        "first ones of each pipeline stage (of each virtual stage under the interleaved schedule; Megatron's "
        "--recompute-method block --recompute-num-layers); the others keep their activations; "
        "empty means all", short="recompute_layers", min=1, bounds=BOUNDS["layers"])
    zero_stage: int = described_field(0, "", "ZeRO stage: 0 replicated, 1 distributed optimizer (optimizer "
                         "state sharded over d), 2 gradients too, 3 parameters too (FSDP)",
                         short="zero", min=0, max=3)
    overlap_grad_reduce: bool = described_field(False, "", "Overlap the DP collectives' gradient reduction "
                                   "with the backward pass, bucket by bucket (--overlap-grad-reduce)",
                                   short="overlap_grad")
    gradient_accumulation_fusion: bool = described_field(
        True, "", "The linear layers' weight-gradient GEMMs add into the fp32 main gradients "
        "(Megatron-Core's default with Transformer Engine or apex; off with "
        "--no-gradient-accumulation-fusion): no separate kernel adds each micro-batch's weight "
        "gradient to the gradient buffer. Has no effect with zero_stage 3 (FSDP reduce-scatters "
        "each micro-batch's gradients)", short="grad_acc_fusion")
    overlap_param_gather: bool = described_field(False, "", "Overlap the DP collectives' parameter all-gather "
                                    "of a sharded optimizer with the forward pass (--overlap-param-gather; "
                                    "needs zero_stage >= 1)", short="overlap_param")
    tp_comm_overlap: bool = described_field(False, "", "Overlap the TP collectives (all-gathers and "
                               "reduce-scatters) of the attention and MLP with their GEMMs, split "
                               "into t chunks (--tp-comm-overlap, Transformer Engine userbuffers; "
                               "needs sequence parallelism)", short="tp_overlap")
    grad_reduce_dtype: str | None = described_field(
        None, "", "Data type gradients are accumulated and reduced in; empty means Megatron's "
        "default: fp32 with bf16 (main gradients), otherwise the training precision",
        choices=GRAD_REDUCE_DTYPES, short="grad_dtype")
    first_stage_layers: int | None = described_field(
        None, "layers", "Layers of the first pipeline stage (--decoder-first-pipeline-num-layers); "
        "empty means an even split", short="first_layers", min=1, bounds=BOUNDS["layers"])
    last_stage_layers: int | None = described_field(
        None, "layers", "Layers of the last pipeline stage (--decoder-last-pipeline-num-layers); "
        "empty means an even split", short="last_layers", min=1, bounds=BOUNDS["layers"])
    account_for_embedding_in_pipeline_split: bool = described_field(
        False, "", "Count the embedding as one layer slot of the first virtual pipeline stage "
        "(Megatron-Core --account-for-embedding-in-pipeline-split): num_layers + 1 (+ 1 with the "
        "loss) slots split evenly over the p*v virtual stages, so the first holds one "
        "transformer layer fewer", short="emb_split")
    account_for_loss_in_pipeline_split: bool = described_field(
        False, "", "Count the loss (output layer) as one layer slot of the last virtual pipeline "
        "stage (Megatron-Core --account-for-loss-in-pipeline-split): the last virtual stage holds "
        "one transformer layer fewer", short="loss_split")
    context_parallel: int = described_field(1, "GPUs", "Context-parallel size cp (--context-parallel-size): "
                               "the sequence is split over cp ranks, ring attention exchanges K/V",
                               short="cp", bounds=BOUNDS["parallel"])
    cp_comm_type: str = described_field(
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
    cp_a2a_size: int | None = described_field(
        None, "GPUs", "Ranks of each all-to-all group of the a2a+p2p exchange (the first of "
        "Megatron-Core's --hierarchical-context-parallel-sizes; the ring joins cp / this "
        "groups); empty for the other exchanges", short="cp_a2a", min=2,
        bounds=BOUNDS["parallel"])
    expert_parallel: int = described_field(1, "GPUs", "Expert-parallel size ep (--expert-model-parallel-size): "
                              "experts split over ep ranks inside the data-parallel group",
                              short="ep", bounds=BOUNDS["parallel"])
    expert_tensor_parallel: int | None = described_field(
        None, "GPUs", "Tensor-parallel size of the experts (--expert-tensor-parallel-size); "
        "empty means t", short="etp", bounds=BOUNDS["parallel"])
    moe_imbalance_factor: float = described_field(
        1.0, "", "Tokens routed to the busiest expert over the mean (1 = balanced routing, "
        "as Megatron's forced-balance benchmarks)", short="imbalance", label="never",
        bounds=BOUNDS["imbalance"])
    fp8_recipe: str | None = described_field(
        None, "", "FP8 scaling recipe with precision fp8 (--fp8-recipe): delayed, tensorwise "
        "(per-tensor current scaling), mxfp8 or blockwise; empty means tensorwise",
        choices=FP8_RECIPES, short="fp8", label="never")
    tf32: bool = described_field(
        False, "", "Run an fp32 plan's matmuls on TF32 tensor cores (PyTorch "
        "torch.backends.cuda.matmul.allow_tf32 = True or torch.set_float32_matmul_precision"
        "('high'); Hugging Face Trainer --tf32; NVIDIA's NGC PyTorch containers turn it on "
        "through TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1): its GEMMs run at the GPU's TF32 peak; "
        "off, PyTorch's default, at the FP32 peak. Only precision fp32 has fp32 matmuls: "
        "with bf16, fp16 or fp8 it changes nothing", short="tf32", label="never")
    recompute_modules: str | None = described_field(
        None, "", "With selective recomputation: the modules recomputed, comma-separated as "
        "Megatron-Core's --recompute-modules (core_attn, layernorm, mlp, moe_act, moe, "
        "shared_experts); empty means core_attn", short="recompute_modules", label="never",
        comma_list=True)
    data_parallel_shard_size: int | None = described_field(
        None, "replicas", "Hybrid sharding (HSDP): the ZeRO/FSDP shards span groups of this many "
        "data-parallel ranks and are replicated over d/size groups (Megatron: "
        "--num-distributed-optimizer-instances d/size; torchtitan: dp_shard); empty means "
        "all d ranks", short="dp_shard", bounds=BOUNDS["parallel"])
    fp8_param_gather: bool = described_field(
        False, "", "All-gather the FP8 linear layers' weights in FP8, 1 byte instead of 2, and "
        "keep them in FP8 (Megatron: --fp8-param-gather with the distributed optimizer; "
        "torchtitan: enable_fsdp_float8_all_gather); needs precision fp8 and zero_stage >= 1",
        short="fp8_gather")
    moe_token_dispatcher_type: str = described_field(
        "alltoall", "", "How MoE tokens reach their experts (Megatron-Core "
        "--moe-token-dispatcher-type): alltoall (NCCL all-to-all, k copies of each token to the "
        "ranks of its k experts) or flex (DeepEP / HybridEP: across nodes one copy per "
        "destination node, forwarded to its experts over NVLink)", choices=MOE_DISPATCHERS,
        short="dispatcher")
    overlap_moe_expert_parallel_comm: bool = described_field(
        False, "", "Overlap the EP all-to-all of one micro-batch with the computation of "
        "another (Megatron-Core --overlap-moe-expert-parallel-comm, the combined 1F1B schedule: "
        "each steady-state forward runs layer by layer beside a backward); needs expert_parallel "
        "> 1, the interleaved schedule when pipeline_parallel > 1, and no full recomputation",
        short="ep_overlap")
    delay_wgrad_compute: bool = described_field(
        False, "", "Under overlap_moe_expert_parallel_comm, run the experts' weight gradients "
        "after the backward's dispatch all-to-all has started (Megatron-Core "
        "--delay-wgrad-compute), so it overlaps them too", short="delay_wgrad")
    cross_entropy_loss_fusion: bool = described_field(
        False, "", "Fuse the vocab-parallel cross-entropy's element-wise steps (Megatron-Core "
        "--cross-entropy-loss-fusion; on in Megatron-Bridge and NeMo): fewer passes over the "
        "logits than Megatron's default one kernel per step", short="ce_fusion")
    cross_entropy_fusion_impl: str = described_field(
        "native", "", "The fused cross-entropy's kernels (Megatron-Core "
        "--cross-entropy-fusion-impl): native (Megatron-Core's jit-fused kernels on an fp32 copy "
        "of the logits) or te (Transformer Engine's parallel_cross_entropy on the half-precision "
        "logits, the gradient computed in the forward and kept in their place; the Megatron-"
        "Bridge performance recipes' choice); needs cross_entropy_loss_fusion",
        choices=CROSS_ENTROPY_FUSION_IMPLS, short="ce_impl", label_needs="cross_entropy_loss_fusion")
    pipeline_model_parallel_layout: str | None = described_field(
        None, "", "Custom pipeline layout (Megatron-Core --pipeline-model-parallel-layout): the "
        "p*v virtual stages separated by '|', each listing E (embedding), t (one transformer "
        "layer), m (one multi-token prediction layer) and L (loss) in that order; x*N and (...)*N "
        "repeat, e.g. DeepSeek-V3's 'Et|(tt|)*30mL'. Virtual stage k is chunk k//p of stage k%p; "
        "empty means Megatron's split (even, or the first/last stage fields)", short="layout")
    cuda_graph_impl: str = described_field(
        "none", "", "CUDA graphs (Megatron-Core --cuda-graph-impl): none (every module runs "
        "eagerly from Python: each op takes the larger of its device and host time), local "
        "(Megatron-Core's graphs of whole transformer layers: every layer when cuda_graph_modules "
        "is empty, else those with attn, or dense ones with mlp), transformer_engine (Transformer "
        "Engine's graphs of the modules of cuda_graph_modules; the whole layer when empty) or "
        "full_iteration (the forward and backward of every micro-batch, one graph). Captured ops "
        "take their device time only; the graphs' memory pools are not counted",
        choices=CUDA_GRAPH_IMPLS, short="cuda_graph")
    cuda_graph_modules: str | None = described_field(
        None, "", "With cuda_graph_impl transformer_engine or local: the modules captured, "
        "comma-separated as Megatron-Core's --cuda-graph-modules (--cuda-graph-scope): attn, mlp, "
        "moe_router, moe_preprocess (moe and mamba are not modelled); empty means the whole layer",
        short="cuda_graph_modules", comma_list=True)
    use_precision_aware_optimizer: bool = described_field(
        False, "", "Transformer Engine's FusedAdam holds the optimizer state in the dtypes of "
        "main_params_dtype, exp_avg_dtype and exp_avg_sq_dtype (Megatron-Core "
        "--use-precision-aware-optimizer; needs the distributed optimizer, zero_stage 1). "
        "With BF16 weights and no FP8 (or delayed-scaling FP8) it also keeps only the 16 bits "
        "of each fp32 master weight that the BF16 weight lacks, and reads the gradients without "
        "an fp32 copy", short="pao")
    te_master_weights: bool = described_field(
        True, "", "Under the precision-aware optimizer, Transformer Engine's FusedAdam holds the "
        "master weights (fp32 ones over BF16 weights as the 16 bits BF16 lacks) and reads the "
        "16-bit gradients without an fp32 copy. Megatron-Core does so when its OptimizerConfig's "
        "fp8_recipe is empty or delayed, or main_params_dtype is not fp32: a Megatron-LM launch "
        "unless its --fp8-recipe (default delayed, given to the optimizer without FP8 too) is "
        "another. Off: "
        "Megatron-Core keeps fp32 master weights and the fp32 gradient copy, as under "
        "Megatron-Bridge's BF16 configs (their MixedPrecisionConfig passes fp8_recipe tensorwise "
        "to the optimizer). FP8 with tensorwise, MX or blockwise scaling is always off",
        short="te_master", label_needs="use_precision_aware_optimizer")
    main_params_dtype: str = described_field(
        "fp32", "", "Master weights' data type under the precision-aware optimizer "
        "(--main-params-dtype)", choices=MAIN_PARAMS_DTYPES, short="main_params",
        label_needs="use_precision_aware_optimizer")
    exp_avg_dtype: str = described_field(
        "fp32", "", "Adam's first moment's data type under the precision-aware optimizer "
        "(--exp-avg-dtype)", choices=OPTIMIZER_STATE_DTYPES, short="exp_avg",
        label_needs="use_precision_aware_optimizer")
    exp_avg_sq_dtype: str = described_field(
        "fp32", "", "Adam's second moment's data type under the precision-aware optimizer "
        "(--exp-avg-sq-dtype)", choices=OPTIMIZER_STATE_DTYPES, short="exp_avg_sq",
        label_needs="use_precision_aware_optimizer")
    tp_comm_overlap_backend: str = described_field(
        "userbuffers", "", "How tp_comm_overlap overlaps: userbuffers (Transformer Engine, "
        "Megatron-Core --tp-comm-overlap: every all-gather and reduce-scatter of a layer, forward "
        "and backward) or symmetric_memory (PyTorch async TP, torchtitan's "
        "enable_async_tensor_parallel: the backward's reduce-scatters after the QKV and fc1 "
        "input-gradient GEMMs are not fused and stay exposed)",
        choices=TP_COMM_OVERLAP_BACKENDS, short="tp_overlap_backend", label_needs="tp_comm_overlap")
    fsdp_fp32_params: bool = described_field(
        False, "", "PyTorch FSDP2 over an fp32 model with MixedPrecisionPolicy(param_dtype=bf16, "
        "reduce_dtype=fp32), as torchtitan trains (training.dtype float32): under ZeRO-3 the "
        "sharded parameters and their gradients are fp32 and the sharded parameters are the "
        "optimizer's master weights (4 + 4 + Adam's 8 = 16 bytes per parameter over d), the "
        "16-bit weights existing only as each unit's gathered copy. Off: Megatron-Core's "
        "16-bit sharded weights beside fp32 master weights (2 + 4 + 12 = 18 over d). ZeRO 0-2 "
        "hold the same bytes either way", short="fsdp_fp32")
    fp8_impl: str = described_field(
        "transformer_engine", "", "What runs the FP8 linears with precision fp8: "
        "transformer_engine (Megatron-Core's TE layers: FP8 copies of the linear weights, and "
        "their transposes on Hopper, kept from one micro-batch to the next and re-quantized once "
        "per iteration; each linear saves its input for the backward as the FP8 copy, 1 byte) "
        "or torchao (torchtitan's float8 converter, Float8Linear, torchao 0.18.0 "
        "float8/float8_linear.py: the high-precision weight is the parameter, cast to float8 "
        "inside every forward and backward GEMM, no FP8 weight copy persists; "
        "matmul_with_hp_or_float8_args saves the linear's input as it arrives: BF16, 2 bytes, "
        "or float8 under torchtitan's float8 tensor parallelism, which casts it before the "
        "all-gather)", choices=FP8_IMPLS, short="fp8_impl")
    tp_saved_input: str = described_field(
        "sequence_shard", "", "With tensor and sequence parallelism: what the column-parallel "
        "linears (QKV, fc1 (w1/w3) and the output layer) save of their input for the backward. "
        "sequence_shard "
        "(Megatron-Core): the norm's output shard, s/t tokens, all-gathered again in the "
        "backward (Korthikanti et al. 2022, Table 2). gathered (torchtitan: "
        "PrepareModuleInput(desired_input_layouts=Replicate()) all-gathers the norm's output "
        "before the ColwiseParallel linears, whose autograd saves that replicated input, "
        "torchtitan 0.2.0 models/llama3/infra/parallelize.py apply_tp): all s tokens on every "
        "rank, 2 bytes (1 under torchtitan's float8 tensor parallelism) x s b h for each of "
        "a layer's two inputs and the output layer's instead of their 1/t shares",
        choices=TP_SAVED_INPUTS,
        short="tp_saved_input", label_needs="sequence_parallel")

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
        (B, precision, the FP8 recipe) too, those that are set, and with ``precision="fp8"``
        the recipe in effect (:func:`fp8_recipe`: an empty ``fp8_recipe`` reads
        ``fp8=tensorwise``, as the simulate report's Precision line). A field with ``label_needs``
        metadata (the boolean field it qualifies, e.g. the fused cross-entropy's kernels) is
        left out while that field is off: it changes nothing then; so are sequence parallelism
        and the TP communication overlap at ``t = 1``, the context-parallel exchange at
        ``cp = 1``, the FP8 implementation outside fp8 plans, what the TP linears save without
        tensor and sequence parallelism, FSDP2's fp32 shards outside ZeRO-3 of a 16-bit plan
        without the precision-aware optimizer, TF32 unless it is on in an fp32
        plan and gradient accumulation fusion under
        FSDP (ZeRO 3), where they change nothing either; the MoE routing imbalance only when
        it is not the balanced 1.0.
        """
        parts = []
        for f in dataclasses.fields(self):
            how = f.metadata.get("label", "changed")
            value = getattr(self, f.name)
            if f.name in ("sequence_parallel", "tp_comm_overlap") and self.tensor_parallel == 1:
                continue
            if f.name in ("cp_comm_type", "cp_a2a_size") and self.context_parallel == 1:
                continue  # no exchange without context parallelism
            if f.name == "tf32" and not tf32_matmuls(self):
                continue  # no fp32 matmuls to run in TF32 (or TF32 off: "no-tf32" says nothing)
            if f.name == "gradient_accumulation_fusion" and wgrad_accumulation(self) == "none":
                continue  # FSDP adds no weight gradient to a buffer
            if f.name == "overlap_p2p_comm" and not p2p_overlap_applies(self):
                continue  # only the interleaved schedule overlaps its transfers
            if f.name == "fp8_impl" and self.precision != "fp8":
                continue  # no FP8 linears to implement
            if f.name == "tp_saved_input" and self.tensor_parallel == 1:
                continue  # nothing gathered (without sequence parallelism: label_needs)
            if f.name == "fsdp_fp32_params" and not fsdp_fp32_applies(self):
                continue  # no ZeRO-3 shards of 16-bit weights to keep in fp32
            if f.name == "moe_imbalance_factor" and value == f.default:
                continue  # balanced routing (and every dense model): nothing to say
            if f.name == "fp8_recipe" and self.precision == "fp8":
                value = fp8_recipe(self)  # the recipe in effect: empty means tensorwise
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


def parse_cuda_graph_modules(text: str | None) -> tuple[str, ...]:
    """The names of a ``cuda_graph_modules`` text (comma- or space-separated, as Megatron's
    ``--cuda-graph-modules`` list), in order, without repeats; ``()`` when empty (the whole
    layer). Unknown names are kept (:func:`core.plan.rules.validate` refuses them)."""
    out: list[str] = []
    for name in str(text or "").replace(",", " ").split():
        if name not in out:
            out.append(name)
    return tuple(out)


def cuda_graph_modules(plan: ParallelPlan) -> tuple[str, ...]:
    """Modules of ``plan``'s per-layer graphs (:func:`parse_cuda_graph_modules`); empty unless
    ``plan.cuda_graph_impl`` is ``local`` or ``transformer_engine`` (empty there: the whole
    layer). :mod:`core.model.cuda_graphs` says what each implementation captures of them."""
    if getattr(plan, "cuda_graph_impl", "none") not in ("local", "transformer_engine"):
        return ()
    return parse_cuda_graph_modules(getattr(plan, "cuda_graph_modules", None))


def fp8_recipe(plan: ParallelPlan) -> str | None:
    """The FP8 scaling recipe of ``plan``: ``plan.fp8_recipe`` or :data:`FP8_DEFAULT_RECIPE` with
    ``precision="fp8"``, ``None`` otherwise."""
    if plan.precision != "fp8":
        return None
    return plan.fp8_recipe or FP8_DEFAULT_RECIPE


#: How a plan's weight gradients reach the gradient buffer (:func:`wgrad_accumulation`; the op
#: key's ``wacc`` column, :func:`core.model.base.wgrad_accumulate_bytes`).
WGRAD_ACCUMULATIONS = ("separate", "fused", "none")


def wgrad_accumulation(plan: ParallelPlan) -> str:
    """How ``plan``'s backward adds each micro-batch's weight gradients to the gradient buffer.

    * ``"fused"`` (``plan.gradient_accumulation_fusion``, Megatron-Core's default, zero_stage
      0-2): the linear layers' weight-gradient GEMMs write into the fp32 ``main_grad`` with
      accumulation (Transformer Engine's ``fuse_wgrad_accumulation``, Megatron-Core's
      ``LinearWithGradAccumulationAndAsyncCommunication``, apex's
      ``wgrad_gemm_accum_fp32``); the plain parameters outside them (the embedding, the MoE
      router's gate) are still added by the data-parallel backward hook
      (``param.main_grad.add_(param.grad)``, Megatron-Core ``DistributedDataParallel``).
    * ``"separate"`` (``gradient_accumulation_fusion`` off): every weight gradient is
      computed into its own tensor and added to the buffer by a kernel of its own.
    * ``"none"`` (zero_stage 3, FSDP): each micro-batch's unsharded gradients are reduce-
      scattered and freed; what is added is the reduce-scattered shard, ``1/shard`` of the
      size (not counted). Megatron-LM refuses ``--use-torch-fsdp2`` with the fusion.
    """
    if plan.zero_stage >= 3:
        return "none"
    return "fused" if plan.gradient_accumulation_fusion is not False else "separate"


def p2p_overlapped(plan: ParallelPlan) -> bool:
    """Whether ``plan``'s pipeline transfers run asynchronously beside its compute.

    True for the interleaved schedule with ``plan.overlap_p2p_comm`` (Megatron-LM's default):
    in its steady state Megatron-Core's ``forward_backward_pipelining_with_interleaving`` then
    issues each send and receive without waiting (``p2p_communication._communicate(...,
    wait_on_reqs=False)``) and waits for a receive just before the item that needs it, and
    for its sends before the next send of that kind and at the schedule's end; the warm-up
    and cool-down transfers wait (:meth:`core.schedules.PipelineSchedule.async_sends`). Every
    other schedule blocks on its transfers (``batch_p2p_comm`` with ``torch.cuda.synchronize``;
    Megatron-LM sets ``overlap_p2p_comm`` false without virtual stages, ``arguments.py``)."""
    return bool(plan.overlap_p2p_comm) and p2p_overlap_applies(plan)


def p2p_overlap_applies(plan: ParallelPlan) -> bool:
    """Whether ``plan.overlap_p2p_comm`` has an effect: Megatron-LM overlaps the transfers of
    its interleaved schedule only (:meth:`core.schedules.PipelineSchedule.async_sends`)."""
    return plan.schedule == "interleaved"


def tp_overlap_applies(plan: ParallelPlan) -> bool:
    """Whether the plan overlaps its tensor-parallel collectives with GEMMs
    (``plan.tp_comm_overlap`` with sequence parallelism and ``t > 1``; at ``t = 1`` there is
    nothing to overlap)."""
    return bool(plan.tp_comm_overlap and plan.sequence_parallel and plan.tensor_parallel > 1)


def fsdp_fp32_applies(plan: ParallelPlan) -> bool:
    """Whether ``plan.fsdp_fp32_params`` can change the plan's memory: ZeRO-3 of a bf16, fp16
    or fp8 plan without Megatron-Core's precision-aware optimizer (the conditions of
    :func:`core.model.optimizer_memory.fsdp_fp32_shards` but the field itself)."""
    return plan.zero_stage >= 3 and plan.precision in ("bf16", "fp16", "fp8") and \
        not plan.use_precision_aware_optimizer


def tp_saves_gathered_input(plan: ParallelPlan) -> bool:
    """Whether the plan's column-parallel linears (QKV, fc1) keep their all-gathered input for
    the backward rather than its sequence shard: ``plan.tp_saved_input`` gathered
    (torchtitan's DTensor tensor parallelism, :data:`TP_SAVED_INPUTS`) with sequence
    parallelism and ``t > 1``. Without sequence parallelism every rank keeps the whole input
    anyway, and at ``t = 1`` there is nothing to gather: False."""
    return (getattr(plan, "tp_saved_input", "sequence_shard") == "gathered"
            and bool(plan.sequence_parallel) and plan.tensor_parallel > 1)


def tf32_matmuls(plan: ParallelPlan) -> bool:
    """Whether ``plan``'s GEMMs run on TF32 tensor cores: ``plan.tf32`` with
    ``precision="fp32"`` (with bf16, fp16 or fp8 there are no fp32 matmuls for the flag to
    change; PyTorch's ``allow_tf32`` acts on fp32 matmuls only)."""
    return plan.precision == "fp32" and getattr(plan, "tf32", False) is True


def gemm_peak_dtype(plan: ParallelPlan) -> str:
    """The dtype of the dense peak FLOP/s that ``plan``'s GEMMs are measured against, MFU's
    (:func:`core.sim.costing.mfu_peak_flops`): ``"tf32"`` under :func:`tf32_matmuls` (an fp32
    plan with TF32 matmuls runs its GEMMs at the TF32 peak; MFU against the FP32 peak would
    exceed 1), else :func:`tensor_dtype` of the precision (BF16 for FP8, as Megatron-Bridge
    reports it)."""
    return "tf32" if tf32_matmuls(plan) else tensor_dtype(plan.precision)


def tensor_dtype(precision: str) -> str:
    """Data type of the tensors between kernels, of the weights the model keeps and of the
    optimizer's inputs under training precision ``precision``: the precision itself, except
    ``"bf16"`` for ``"fp8"`` (Transformer Engine runs only the linear layers' GEMMs in FP8; their
    inputs are quantized from BF16 and their outputs are BF16; Megatron-LM trains FP8 with
    ``--bf16 --fp8-format ...``)."""
    return "bf16" if precision == "fp8" else precision

