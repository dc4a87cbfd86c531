"""Memory of a pipeline stage's GPU: activations kept per micro-batch and in flight, weights,
gradients and optimizer state (ZeRO, FP8 copies), and the process's fixed terms (CUDA
context, NCCL buffers, GEMM workspaces, allocator reserve).
"""

from __future__ import annotations

import dataclasses
import operator
from functools import lru_cache

import numpy as np

from core import schedules
from core.model.base import DTYPE_BYTES
from core.model.context_parallel import cp_exchange_buffer_bytes
from core.model.counts import (MODEL_FIELD_VALUES, expert_params_per_gpu, params_per_gpu,
                               recomputed_moe_layers, stage_layers_with_mtp,
                               stage_moe_layer_counts)
from core.model.families import family_of
from core.model.fp8 import (FP8_BYTES, fp8_gathers_params, fp8_keeps_weight_copies,
                            fp8_weight_bytes_per_parameter, param_gather_bytes)
from core.model.keys import cross_entropy_fusion
from core.model.layout import chunk_layout, chunks_per_stage, loss_stage
from core.model.mla import mla_dims
from core.model.optimizer_memory import (STATE_DTYPE_BYTES, bytes_per_parameter,
                                         grad_copy_bytes_per_parameter,
                                         optimizer_holds_master_weights, optimizer_state_bytes,
                                         optimizer_step_scratch_bytes, optimizer_step_traffic)
from core.model.moe import (expert_data_parallel, expert_tensor_parallel,
                            moe_activation_bytes_per_layer, moe_layer_parameters)
from core.model.mtp import mtp_extra_parameters, mtp_layer_is_moe, mtp_layers
from core.model.recompute import mtp_layers_recomputed, recomputed_layers
from core.model.softcap import final_logit_softcap_bytes
from core.model.stage_memory import StageMemory
from core.model.wgrad_buffers import weight_gradient_buffer_bytes
from core.plan.parallel import (PLAN_FIELDS, ParallelPlan, fp8_recipe, grad_dtype, plan_key,
                                tensor_dtype, tp_saves_gathered_input, zero_shard_size)
from core.plan.model_config import ModelConfig, padded_vocab_size
from core.plan.layout import pipeline_layout_text, stage_layer_counts

__all__ = [
    "ACTIVATION_FREE_PLAN_FIELDS", "ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES",
    "embedding_activation_bytes", "embedding_in_flight", "final_norm_activation_bytes",
    "GEMM_WORKSPACE_BYTES", "NCCL_BUFFSIZE_BYTES", "NCCL_CHANNELS", "NCCL_RING_PEERS",
    "STATE_FREE_PLAN_FIELDS", "StageMemoryArrays", "activation_bytes_per_layer",
    "STATE_DTYPE_BYTES", "bytes_per_parameter", "grad_copy_bytes_per_parameter",
    "optimizer_holds_master_weights", "optimizer_state_bytes", "optimizer_step_scratch_bytes",
    "optimizer_step_traffic", "ep_overlap_in_flight", "ep_overlap_on", "ep_overlap_paired_share",
    "fp8_linear_params_per_layer", "fp8_weights_per_gpu", "in_flight_microbatches",
    "nccl_buffer_bytes", "nccl_communicators", "process_memory_terms", "process_terms_of",
    "schedule_in_flight", "stage_activation_bytes", "stage_activation_rows", "stage_memory", "stage_memory_arrays",
    "stage_state_bytes", "state_bytes_of", "optimizer_at_peak",
    "uneven_chunks",
]


# --- what a training process holds besides the model's tensors (docs/simulator.md, "Memory
# model"); named constants with their sources, the same for every plan (never fitted per row)

#: GEMM workspaces allocated through PyTorch's caching allocator (so in
#: ``torch.cuda.max_memory_allocated``), bytes: PyTorch's cuBLAS/cuBLASLt workspace, 32 MiB
#: on Hopper and later (``CUDABlasHandlePool.cpp``, ``getChosenWorkspaceSize``: ``:4096:8``;
#: 8.125 MiB before Hopper), and Transformer Engine's, 32 MiB on sm90 and later
#: (``transformer_engine.pytorch.module.base.get_cublas_workspace_size_bytes``; 4 MiB before).
#: The Ampere figure (12 MiB in all) is not told apart: 52 MiB, below any figure's precision.
GEMM_WORKSPACE_BYTES = 2 * 32 * 2**20
#: Share of the allocated peak (``torch.cuda.max_memory_allocated``) that PyTorch's caching
#: allocator keeps reserved beyond it (``max_memory_reserved - max_memory_allocated``): blocks
#: freed by short-lived tensors (activations, their gradients, workspaces) and cached in
#: segments that later requests split or cannot use (PyTorch docs, "CUDA semantics: memory
#: management"; ZeRO, Rajbhandari et al. 2020, Sec. 3.2, "memory fragmentation"). An
#: empirical share, one global constant set on the development data (../shared/data/
#: measured-memory: 2.8-6.5 % on its 8 SimuMax plans, median 3.3 %; the share is steadier than
#: one of the activations alone, 0.23-0.88), never fitted per row; ``benchmarks/
#: bench_memory.py`` prints how it does.
ALLOCATOR_RESERVE_FRACTION = 0.033
#: The CUDA context of a training process, bytes: outside PyTorch's allocator, seen by
#: ``nvidia-smi`` only (PyTorch docs, "CUDA semantics: memory management": memory not managed
#: by the caching allocator). With lazy module loading (``CUDA_MODULE_LOADING=LAZY``, CUDA
#: 11.7+, PyTorch's default) and the kernels of PyTorch, cuBLAS, cuDNN, NCCL and Transformer
#: Engine loaded it is 0.5-1 GiB per GPU; the middle of that range. No measured
#: ``nvidia-smi`` row checks it yet.
CUDA_CONTEXT_BYTES = 0.75 * 2**30
#: NCCL's buffer of one protocol per channel and peer, bytes: ``NCCL_BUFFSIZE``'s default,
#: 4 MiB (NCCL docs, "Environment variables: NCCL_BUFFSIZE"), allocated by NCCL with
#: ``cudaMalloc`` outside PyTorch's allocator.
NCCL_BUFFSIZE_BYTES = 4 * 2**20
#: Channels NCCL opens per communicator: it picks the count per topology (NCCL docs,
#: ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``); 16 is a typical ring count on NVLink
#: nodes (nccl-tests' "16 coll channels" on DGX A100/H100 logs). An assumption, named.
NCCL_CHANNELS = 16
#: Peers of a rank per channel in NCCL's ring: the one it receives from and the one it sends
#: to (a buffer each).
NCCL_RING_PEERS = 2


# --------------------------------------------------------------------------- memory

def activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str | None = None
                               ) -> float:
    """Activation bytes one layer keeps per micro-batch on one GPU under recompute ``mode``
    (default the plan's), Korthikanti et al. 2022, Table 2 (see the family's formula)."""
    return family_of(model).activation_bytes_per_layer(model, plan, mode or plan.recompute)


def in_flight_microbatches(plan: ParallelPlan, stage: int, model: ModelConfig | None = None
                           ) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of one
    micro-batch through all the stage's layers: the schedule's count
    (:func:`core.schedules.in_flight_microbatches`; 1F1B ``min(p - stage, m)``, Korthikanti
    et al. 2022, Sec. 4.2.3; GPipe ``m``). ``model`` is needed (ValueError otherwise) when the
    embedding / loss take layer slots under interleaving: the chunks' layers weigh the count."""
    return ep_overlap_in_flight(plan, schedule_in_flight(
        plan.schedule, plan.pipeline_parallel, plan.num_microbatches, chunks_per_stage(plan),
        uneven_chunks(plan, model)), model)[stage]


def embedding_in_flight(plan: ParallelPlan) -> float:
    """Micro-batches whose embedding output the first stage keeps at its peak:
    :func:`core.schedules.embedding_in_flight` (the model's first virtual stage's forwards not
    yet back-propagated; 1F1B ``min(p, m)``, Korthikanti et al. 2022 Sec. 4.2.3 and
    Megatron-Core 0.19.2 ``megatron/training/theoretical_memory_usage.py`` lines 330-339:
    ``p`` micro-batches of the embedding in flight), and under
    ``overlap_moe_expert_parallel_comm`` with pipelining one more (its extra warm-up forward,
    :func:`ep_overlap_in_flight`; under interleaving counted as the first chunk's, an upper
    bound), at most ``m``."""
    n = schedules.embedding_in_flight(plan.schedule, plan.pipeline_parallel,
                                      plan.num_microbatches, chunks_per_stage(plan))
    if ep_overlap_on(plan) and plan.pipeline_parallel > 1:
        n = min(n + 1, plan.num_microbatches)
    return float(n)


def embedding_activation_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes the first stage's embedding keeps for one micro-batch on one GPU, whatever the
    recomputation (Megatron-Core checkpoints transformer layers only; the embedding runs once):

    * its input ids, int64, ``8 s b`` (``s/cp`` tokens with context parallelism): saved by the
      word embedding's gather for its weight gradient (Megatron-Core 0.19.2
      ``tensor_parallel/layers.py`` ``VocabParallelEmbedding.forward``: ``F.embedding`` of the
      ids, or with ``t > 1`` of their masked copy), the whole sequence on every tensor-parallel
      rank: not divided by ``t`` (sequence parallelism scatters the embedding's output only).
      Megatron's estimate counts ``8 s b`` per micro-batch and divides it by ``t`` with the
      rest (``theoretical_memory_usage.py`` lines 330-333, 379);
    * its dropout mask, 1 byte per element (``torch.nn.Dropout``'s bool mask), ``s b h``, over
      ``t`` with sequence parallelism (``LanguageModelEmbedding.forward`` drops out after
      ``scatter_to_sequence_parallel_region``), when ``model.hidden_dropout > 0`` (at 0
      PyTorch's dropout returns its input and keeps no mask): Korthikanti et al. 2022
      Sec. 4.1 (``s b h p / t`` on the first stage), Megatron's lines 334-339.

    :func:`stage_activation_bytes` multiplies it by :func:`embedding_in_flight`."""
    tokens = model.seq_length // plan.context_parallel * plan.micro_batch_size
    t = plan.tensor_parallel
    sp = plan.sequence_parallel and t > 1
    mask = tokens * model.hidden_size / (t if sp else 1) if model.hidden_dropout > 0 else 0.0
    return float(8 * tokens + mask)


def final_norm_activation_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes the loss stage's final norm keeps for one micro-batch on one GPU, whatever the
    recomputation (Megatron-Core's ``final_layernorm`` runs after the checkpointed layers):
    its input (saved by the norm for its backward) and its output (the output layer's input,
    saved for its weight gradient), ``2 s b h e``, over ``t`` with sequence parallelism (the
    norm runs on ``s/t`` tokens; ``ColumnParallelLinear`` saves its input before the
    all-gather and gathers it again in the backward, Megatron-Core 0.19.2
    ``tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication``), ``e``
    the activations' bytes (BF16 under FP8: Transformer Engine keeps the norm and the output
    layer in BF16). Korthikanti et al. 2022 Sec. 4.1: ``2 s b h / t`` for the last
    layer-norm's input and as much for the output layer's; Megatron's estimate counts the
    same ``4 s b h / t`` (``theoretical_memory_usage.py`` lines 370-376, with ``p = 1`` only).
    With ``N`` multi-token-prediction layers each has its final norm (its ``_postprocess``,
    outside its checkpoint) and the output layer reads their outputs concatenated
    (``MultiTokenPredictionBlock``'s ``torch.cat``): ``N + 1`` times as much. The norm's
    fp32 statistics (``s b`` floats) are left out.

    With ``plan.tp_saved_input`` gathered (torchtitan, :func:`tp_saves_gathered_input`) the
    output layer keeps its all-gathered input, all ``s`` tokens: torchtitan 0.2.0
    ``models/llama3/infra/parallelize.py`` ``apply_tp`` makes ``norm`` ``SequenceParallel()``
    (its input the ``s/t`` shard) and ``output`` ``ColwiseParallel(input_layouts=Shard(1))``,
    whose input hook all-gathers the norm's output to a replicated DTensor that ``F.linear``
    saves: ``s b h e (1/t + 1)`` (BF16 under float8: torchtitan's converter leaves the
    output layer out, ``filter_fqns``)."""
    tokens = model.seq_length // plan.context_parallel * plan.micro_batch_size
    t = plan.tensor_parallel
    sp = plan.sequence_parallel and t > 1
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    if tp_saves_gathered_input(plan):  # the norm's input shard, the output layer's whole input
        return float((1 + mtp_layers(model)) * tokens * model.hidden_size * e * (1 / t + 1))
    return float((1 + mtp_layers(model)) * 2 * tokens * model.hidden_size * e / (t if sp else 1))


def ep_overlap_on(plan: ParallelPlan) -> bool:
    """Whether the plan overlaps its expert all-to-alls: ``overlap_moe_expert_parallel_comm``
    with ``ep > 1``."""
    return bool(getattr(plan, "overlap_moe_expert_parallel_comm", False) is True
                and plan.expert_parallel > 1)


def ep_overlap_paired_share(plan: ParallelPlan, stage: int) -> float:
    """Share of stage ``stage``'s forwards and backwards that run paired under
    ``overlap_moe_expert_parallel_comm`` (:func:`core.schedules.combined_1f1b_paired_share`);
    0 without it (or without expert parallelism)."""
    if not ep_overlap_on(plan):
        return 0.0
    return schedules.combined_1f1b_paired_share(plan.schedule, plan.pipeline_parallel,
                                                plan.num_microbatches, chunks_per_stage(plan),
                                                stage)


def ep_overlap_in_flight(plan: ParallelPlan, in_flight: tuple[float, ...],
                          model: ModelConfig | None) -> tuple[float, ...]:
    """``in_flight`` (per stage) under ``overlap_moe_expert_parallel_comm`` (unchanged without
    it), at most ``m`` in all:

    * with pipelining one forward more before the first backward
      (``schedules.get_pp_rank_microbatches``: one more warm-up micro-batch chunk with
      interleaving, ``1/v`` of the stage's layers);
    * while a forward runs beside a backward (``TransformerModelChunkSchedulePlan.run``: the
      forward's layer ``i`` with the backward's layer ``n-1-i``, each backward layer freeing
      what it saved) the two hold one layer more than one micro-batch: ``1/n`` of a stage of
      ``n`` layers, on stages that pair any items (:func:`ep_overlap_paired_share`; without
      pipelining ``m > 1``).

    Raises ValueError without ``model`` when the plan overlaps (the stages' layer counts)."""
    if not ep_overlap_on(plan):
        return in_flight
    if model is None:
        raise ValueError("the in-flight activations of the EP all-to-all overlap need the model")
    m = plan.num_microbatches
    counts = stage_layer_counts(model.num_layers, plan)
    warm = 1.0 / chunks_per_stage(plan) if plan.pipeline_parallel > 1 else 0.0
    return tuple(min(x + warm + (1.0 / max(n, 1) if ep_overlap_paired_share(plan, i) > 0 else 0.0),
                     float(m)) for i, (x, n) in enumerate(zip(in_flight, counts)))


def uneven_chunks(plan: ParallelPlan, model: ModelConfig | None = None
                   ) -> tuple[tuple[int, ...], ...] | None:
    """Layers of each chunk of each stage when the embedding / loss take layer slots under
    interleaving (chunks of one stage differ), else None."""
    if chunks_per_stage(plan) == 1 or not (plan.account_for_embedding_in_pipeline_split
                                           or plan.account_for_loss_in_pipeline_split
                                           or pipeline_layout_text(plan) is not None):
        return None
    if model is None:
        raise ValueError("the layers of uneven chunks need the model")
    return chunk_layout(model, plan)[2]


@lru_cache(maxsize=1024)
def schedule_in_flight(schedule: str, p: int, m: int, v: int,
               chunk_layers: tuple[tuple[int, ...], ...] | None = None) -> tuple[float, ...]:
    """:func:`core.schedules.in_flight_microbatches` of every stage (cached: sweeps ask often);
    ``chunk_layers``: each stage's chunks' layers when they differ."""
    return schedules.in_flight_all(schedule, p, m, v, chunk_layers)


def fp8_weights_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Weights of the FP8 linear layers held by one GPU of each stage, shape (p,): the
    family's sharded layer parameters without biases and attention sinks, over ``t``, times the
    stage's layers (the embedding, the output layer and the norms stay BF16; see :func:`op_kernels`). MoE
    layers: attention and shared experts over ``t``, the routed experts over ``ep*etp``
    (the router's gate stays BF16). Multi-head latent attention adds its replicated down
    projections, ``h (q_l + kv_l + d_pe)`` per layer on every rank."""
    weights = dataclasses.replace(model, add_bias_linear=False, add_qkv_bias=False,
                                  add_proj_bias=False, add_mlp_bias=False,
                                  softmax_type="vanilla")  # attention sinks stay BF16 too
    sharded, _ = family_of(model).layer_parameters(weights)
    counts = stage_layers_with_mtp(model, plan)
    moe_counts = stage_moe_layer_counts(model, plan)
    out = (counts - moe_counts) * sharded / plan.tensor_parallel
    out[loss_stage(plan)] += mtp_layers(model) * mtp_extra_parameters(model)[0] / plan.tensor_parallel
    if getattr(model, "multi_latent_attention", False) is True:
        # MLA's down projections: replicated TELinear layers, FP8 like the others
        ql, kvl, _, pe, _ = mla_dims(model)
        out += counts * model.hidden_size * (ql + kvl + pe)
    if moe_counts.any():  # MoE layers: attention and shared experts over t, experts over ep*etp
        moe = moe_layer_parameters(weights)
        out += moe_counts * (moe.sharded / plan.tensor_parallel
                             + moe.experts / (plan.expert_parallel * expert_tensor_parallel(plan)))
    return out


def fp8_linear_params_per_layer(model: ModelConfig, tensor_parallel: int) -> float:
    """Weights of one dense layer's FP8 linear layers on one GPU: the family's sharded layer
    parameters without biases, over ``t`` (QKV, projection, fc1, fc2; the norms and biases stay
    BF16, as :func:`fp8_weights_per_gpu`)."""
    weights = dataclasses.replace(model, add_bias_linear=False, add_qkv_bias=False,
                                  add_proj_bias=False, add_mlp_bias=False)
    return family_of(model).layer_parameters(weights)[0] / tensor_parallel


def nccl_communicators(plan: ParallelPlan) -> int:
    """NCCL communicators one rank of ``plan`` opens: one per process group with more than one
    rank that training communicates over (PyTorch creates a group's communicator at its first
    collective): tensor-parallel (``t > 1``), context-parallel (``cp > 1``), data-parallel
    (``d*cp > 1``: the gradient reduction and, sharded, the parameter gather), pipeline
    (``p > 1``: the stage-to-stage sends), the model-parallel group (``t*p > 1`` with ``p > 1``:
    Megatron-Core's gradient-norm all-reduce, ``parallel_state.get_model_parallel_group``),
    expert-parallel (``ep > 1``) and, with it, expert-data-parallel (:func:`expert_data_parallel`
    ``> 1``: Megatron-Core's DDP reduces the experts' gradients over their own group,
    ``parallel_state.get_expert_data_parallel_group``)."""
    t, p = plan.tensor_parallel, plan.pipeline_parallel
    cp = getattr(plan, "context_parallel", 1) or 1
    ep = getattr(plan, "expert_parallel", 1) or 1
    return int(t > 1) + int(cp > 1) + int(plan.data_parallel * cp > 1) + int(p > 1) \
        + int(p > 1 and t * p > 1) + int(ep > 1) \
        + int(ep > 1 and expert_data_parallel(plan) > 1)


def nccl_buffer_bytes(plan: ParallelPlan) -> float:
    """NCCL's own buffers on one GPU, bytes: :data:`NCCL_BUFFSIZE_BYTES` per channel and ring
    peer (:data:`NCCL_CHANNELS`, :data:`NCCL_RING_PEERS`) for each of
    :func:`nccl_communicators` (NCCL docs, ``NCCL_BUFFSIZE``: "the size of the buffer NCCL uses
    for each pair of ranks" per channel); 128 MiB per communicator."""
    return nccl_communicators(plan) * NCCL_CHANNELS * NCCL_RING_PEERS * NCCL_BUFFSIZE_BYTES


class StageMemoryArrays(tuple):
    """:func:`stage_memory_arrays`' result: a tuple of the four tensor arrays (weights,
    gradients, optimizer state, activations; float64, shape (p,)) that unpacks as four, with
    the process's other terms as attributes, float64 (p,) each: ``workspace``,
    ``allocator_reserve``, ``cuda_context``, ``nccl_buffers`` (:func:`process_memory_terms`)."""

    workspace: np.ndarray
    allocator_reserve: np.ndarray
    cuda_context: np.ndarray
    nccl_buffers: np.ndarray

    def __new__(cls, tensors: tuple, terms: dict[str, np.ndarray]) -> "StageMemoryArrays":
        out = super().__new__(cls, tensors)
        for name, value in terms.items():
            setattr(out, name, value)
        return out

    @classmethod
    def of(cls, plan: ParallelPlan, weights: np.ndarray, grads: np.ndarray, opt: np.ndarray,
           acts: np.ndarray) -> "StageMemoryArrays":
        """The four tensor arrays (bytes, float64 (p,) each) with the process's other terms
        for ``plan`` (:func:`process_memory_terms` of their sum)."""
        return cls((weights, grads, opt, acts),
                   process_memory_terms(plan, weights + grads + opt + acts))

    @classmethod
    def rows(cls, weights: np.ndarray, grads: np.ndarray, opt: np.ndarray, acts: np.ndarray,
             nccl_bytes: np.ndarray) -> "StageMemoryArrays":
        """:meth:`of` for ``k`` plans of ``p`` stages at once: the four tensor arrays float64
        (k, p) each, row ``j`` one plan's, and each plan's :func:`nccl_buffer_bytes` (float64
        (k, 1)); the process terms are (k, p) arrays (:func:`process_terms_of`), each row
        bit-identical to :meth:`of` of that plan (the same elementwise operations)."""
        return cls((weights, grads, opt, acts),
                   process_terms_of(weights + grads + opt + acts, nccl_bytes))

    @property
    def overhead_bytes(self) -> np.ndarray:
        """The terms beyond the four tensor arrays, summed per stage, float64 (p,)."""
        return self.workspace + self.allocator_reserve + self.cuda_context + self.nccl_buffers


def process_memory_terms(plan: ParallelPlan, tensors: np.ndarray) -> dict[str, np.ndarray]:
    """What a training process holds on each GPU besides the model's tensors, bytes, float64
    (p,) each, given the stages' tensor bytes:

    * ``workspace``: :data:`GEMM_WORKSPACE_BYTES` (in ``max_memory_allocated``);
    * ``allocator_reserve``: :data:`ALLOCATOR_RESERVE_FRACTION` of the allocated memory,
      ``tensors`` (weights, gradients, optimizer state and activations, shape (p,)) plus the
      workspaces (``max_memory_reserved`` less ``max_memory_allocated``);
    * ``cuda_context``: :data:`CUDA_CONTEXT_BYTES`; ``nccl_buffers``: :func:`nccl_buffer_bytes`
      (outside PyTorch's allocator: ``nvidia-smi`` only).
    """
    return process_terms_of(tensors, float(nccl_buffer_bytes(plan)))


def process_terms_of(tensors: np.ndarray, nccl_bytes: float | np.ndarray
                     ) -> dict[str, np.ndarray]:
    """:func:`process_memory_terms` of tensor bytes ``tensors`` (float64 (p,), or (k, p) for
    ``k`` plans) and NCCL buffer bytes ``nccl_bytes`` (:func:`nccl_buffer_bytes`: a float, or
    float64 (k, 1), one per plan); each term has the shape of ``tensors``."""
    tensors = np.asarray(tensors, float)
    workspace = np.full(tensors.shape, float(GEMM_WORKSPACE_BYTES))
    return {"workspace": workspace,
            "allocator_reserve": ALLOCATOR_RESERVE_FRACTION * (tensors + workspace),
            "cuda_context": np.full(tensors.shape, float(CUDA_CONTEXT_BYTES)),
            "nccl_buffers": np.full(tensors.shape, nccl_bytes)}


def stage_memory_arrays(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool = True
                        ) -> StageMemoryArrays:
    """Memory of one GPU of each pipeline stage (bytes): weights, gradients, optimizer state and
    activations, four float64 arrays shape (p,) (:func:`stage_memory` as arrays), with the
    process's other terms as attributes (:class:`StageMemoryArrays`,
    :func:`process_memory_terms`).

    Weights, gradients and optimizer state: :func:`params_per_gpu` times
    :func:`bytes_per_parameter` (routed experts' parameters, :func:`expert_params_per_gpu`,
    with the expert-data-parallel size in place of ``d``). Under ZeRO-3 parameters are gathered
    layer by layer (Rajbhandari et al. 2020, Sec. 5.3) and a layer's gradients exist unsharded
    until their reduce-scatter: at the peak a GPU holds the current layer's gathered weights and
    its unsharded gradients (in :func:`core.plan.parallel.grad_dtype`, the reduce-scatter's input) and,
    with ``overlap_param_gather`` (the next layer's all-gather prefetched under the current
    layer's compute), the next layer's gathered weights too: PyTorch FSDP, ``BackwardPrefetch``
    ("at the peak, it holds the current set of parameters, next set of parameters, and current
    set of gradients in memory"; FSDP2 and Megatron-FSDP's double buffer prefetch alike).
    Activations: :func:`activation_bytes_per_layer` of each layer times
    :func:`in_flight_microbatches`; under full recomputation the recomputed layers
    keep only their input and the layer being recomputed needs its full
    activations once (Korthikanti et al. 2022, Sec. 4.3; on the loss stage only the larger of
    that working set and one micro-batch's logits terms below, which the loss's and the output
    layer's backward free before the micro-batch's last layer runs again); the last stage adds the
    logits and their fp32 copy for the loss, ``s*b*V'/t*(e + 4)`` (Megatron-Core
    ``VocabParallelCrossEntropy``: the logits cast to fp32, exponentiated in place and saved
    for the backward; fp32 logits, ``e = 4``, are their own copy: ``s*b*V'/t*4``), and ``s*b*V'/t*4`` more for each further micro-batch whose loss awaits
    its backward (with Transformer Engine's fused cross-entropy,
    :func:`cross_entropy_fusion` ``te``, the logits' place holds their gradient instead:
    ``s*b*V'/t*e`` per such micro-batch) (:func:`core.schedules.loss_in_flight`: GPipe's ``m``; 1 otherwise). With FP8 the weights add
    the FP8 copies of the linear layers' weights, :func:`fp8_weights_per_gpu` times
    :func:`fp8_weight_bytes_per_parameter` (``fp8_tn``: the GPU's FP8 GEMMs are TN-only,
    :func:`fp8_tn_only`; divided by ``d`` under ZeRO-3 as the weights are). With
    ``fp8_param_gather`` (:func:`fp8_gathers_params`): under ZeRO 1/2 the linear layers' BF16
    compute weights are not kept, their FP8 copies are (Megatron-LM ``--fp8-param-gather``
    keeps the compute parameters in FP8: ``e`` bytes less per linear weight); under ZeRO-3 the
    shards stay BF16 (torchao casts them to float8 for the all-gather) and the gathered layer's
    linear weights take 1 byte (:func:`param_gather_bytes`). Without persistent FP8 copies
    (``plan.fp8_impl`` torchao, :func:`core.model.fp8.fp8_keeps_weight_copies`:
    torchtitan's torchao ``Float8Linear``, torchao 0.18.0, casts the high-precision weight inside
    each GEMM) the FP8 weights add nothing, but under ZeRO 1/2 with the float8 all-gather, whose
    gathered weights are float8: ``1 - e`` bytes per linear weight. With context parallelism
    every activation is of the rank's ``s/cp`` tokens. Multi-token prediction (``N`` layers on
    the last stage): their transformer layers count with the stage's layers (checkpointed under
    full recomputation of every layer: Megatron-Core's MTP layer recomputes its transformer layer
    by the uniform method, not by the block one, ``recompute_num_layers`` set, which keeps their
    activations: :func:`core.model.recompute.mtp_layers_recomputed`), each
    keeps its two norms' inputs and ``eh_proj``'s input (``4h`` elements per token, split over
    ``t`` with sequence parallelism; checkpointed, only the checkpoint's inputs, the hidden
    states and the shifted tokens' embedding, ``2h``: Megatron-Core 0.16.1
    ``MultiTokenPredictionLayer._proj_and_transformer_layer`` runs the norms and ``eh_proj``
    inside the checkpoint) and adds its logits, ``N + 1`` times the logits in all.
    Soft-capped output logits (Gemma 2, the layer spec's ``final_logit_softcap``) keep the
    cap's ``tanh`` output too, ``s*b*V'/t*e`` for each micro-batch whose loss awaits its
    backward (:func:`core.model.softcap.final_logit_softcap_bytes`).
    Context parallelism adds, on every stage with layers, the buffers of the exchange of the
    attention layer running (:func:`cp_exchange_buffer_bytes`: one layer's, transient).
    Outside the layers (Korthikanti et al. 2022, Sec. 4.1; Megatron's estimate,
    ``theoretical_memory_usage.py`` lines 330-339 and 370-376), under every recomputation:
    the first stage keeps the embedding's input ids and dropout mask for each micro-batch
    whose embedding awaits its backward (:func:`embedding_activation_bytes` times
    :func:`embedding_in_flight`), the loss stage its final norm's input and output for each
    micro-batch whose loss awaits its backward (:func:`final_norm_activation_bytes`, freed
    with the logits before a recomputed layer runs).
    """
    weights, grads, opt, copy = _state_bytes(model, plan, fp8_tn)
    acts = stage_activation_bytes(model, plan)
    return StageMemoryArrays.of(plan, weights.copy(), grads.copy(),
                                optimizer_at_peak(opt, copy, acts), acts)


def optimizer_at_peak(opt: np.ndarray, copy: np.ndarray, acts: np.ndarray) -> np.ndarray:
    """The optimizer state at a stage's peak (bytes, float64, any shape): ``opt`` (of
    :func:`state_bytes_of`) less the smaller of its fp32 gradient copy ``copy``
    (:func:`grad_copy_bytes_per_parameter`) and the activations ``acts``: the copy exists only
    in the optimizer step, when the activations are freed, so the peak holds the larger of the
    two (the caching allocator reuses the one's blocks for the other)."""
    return opt - np.minimum(copy, acts)


def stage_activation_bytes(model: ModelConfig, plan: ParallelPlan, memo: dict | None = None
                           ) -> np.ndarray:
    """The activations of :func:`stage_memory_arrays` (bytes per GPU of each stage, float64
    (p,), a new array; see there for the formulas). They do not read the plan's fields of
    :data:`ACTIVATION_FREE_PLAN_FIELDS` (the sweep shares them between such plans).

    ``memo`` (a dict the caller keeps for one ``model``, never for two) holds the parts many
    plans share: the stages' layer counts (:func:`_stage_layer_parts`, keyed by the plan
    without :data:`_LAYOUT_FREE_PLAN_FIELDS`), the per-layer bytes
    (:func:`_layer_activation_parts`, keyed by the plan without
    :data:`_PER_LAYER_FREE_PLAN_FIELDS`) and the micro-batches in flight with the loss
    stage's terms (:func:`_flight_parts`, without :data:`_FLIGHT_FREE_PLAN_FIELDS`); the
    figures are the same with it or without (tests compare)."""
    (layers, kept_moe, recomputed, has_moe, keep, ckpt, working, moe_keep, in_flight, last,
     adds, cp_buffers, freed, first) = _activation_inputs(model, plan, memo)
    return _activations(layers, kept_moe, recomputed, keep, ckpt, working,
                        moe_keep if has_moe else 0.0, np.array(in_flight, float), last, adds,
                        cp_buffers is not None, 0.0 if cp_buffers is None else cp_buffers, freed,
                        first)


def stage_activation_rows(model: ModelConfig, plans: list[ParallelPlan], memo: dict
                          ) -> np.ndarray:
    """:func:`stage_activation_bytes` of ``k`` plans of one stage count ``p`` at once, float64
    (k, p), row ``j`` bit-identical to ``stage_activation_bytes(model, plans[j])``: the same
    elementwise operations in the same order (:func:`_activations`) on the plans' parts
    stacked as rows and columns. ``memo`` as there."""
    cols = list(zip(*(_activation_inputs(model, pl, memo) for pl in plans)))
    (layers, kept_moe, recomputed, has_moe, keep, ckpt, working, moe_keep, in_flight, last,
     adds, cp_buffers, freed, first) = cols
    col = (lambda xs: np.array(xs, float).reshape(-1, 1))
    cp_on = np.array([c is not None for c in cp_buffers], bool).reshape(-1, 1)
    return _activations(
        np.array(layers), np.array(kept_moe), np.array(recomputed), col(keep), col(ckpt),
        col(working), col([m if h else 0.0 for m, h in zip(moe_keep, has_moe)]),
        np.array(in_flight, float), (np.arange(len(plans)), np.array(last, np.int64)),
        [np.array(a, float) for a in zip(*adds)], cp_on,
        col([0.0 if c is None else c for c in cp_buffers]), np.array(freed, float),
        np.array(first, float))


def _activations(layers, kept_moe, recomputed, keep, ckpt, working, moe_keep,
                 in_flight, last, adds, cp_on, cp_buffers, freed=0.0, first=0.0) -> np.ndarray:
    """The arithmetic of :func:`stage_activation_bytes` on one plan's parts (arrays (p,),
    python scalars, ``last`` an int, ``adds`` the loss stage's terms) or on ``k`` plans' (arrays
    (k, p), columns (k, 1), ``last`` an index pair, ``adds`` arrays (k,)): every stage at once,
    the same IEEE operations in the same order either way. ``kept_moe``: the stage's MoE
    layers that are not recomputed (``moe_keep`` 0.0 for a model without them). ``freed``: the
    loss stage's bytes of the micro-batch in its backward that are gone before its first
    recomputed layer runs again (:func:`_flight_parts`), so that only the larger of them and
    the working set counts there. ``first``: the first stage's embedding terms (a float, or
    an array (k,))."""
    # the checkpointed layers keep their input, the others their activations: the dense ones
    # ``keep`` each, the MoE ones ``moe_keep``
    acts = (recomputed * ckpt + (layers - recomputed - kept_moe) * keep
            + kept_moe * moe_keep) * in_flight
    acts = np.where(recomputed != 0, acts + working, acts)  # the layer being recomputed
    for add in adds:  # the loss stage's logits, their soft cap, the final norms, the MTP inputs
        acts[last] += add
    acts[..., 0] += first  # the embedding's input ids and dropout mask (stage 0)
    # the micro-batch whose backward recomputes a layer of the loss stage has freed its logits
    # (and their cap) by then: the stage's peak holds the larger of the two, not both
    acts[last] -= np.minimum(freed, np.where(recomputed[last] != 0,
                                             np.broadcast_to(working, acts.shape)[last], 0.0))
    if np.any(cp_on):  # the exchange's buffers of the layer running (transient)
        acts = np.where((layers > 0) & cp_on, acts + cp_buffers, acts)
    return acts


def _activation_inputs(model: ModelConfig, plan: ParallelPlan, memo: dict | None) -> tuple:
    """The parts of :func:`stage_activation_bytes` of one plan: ``(layers, kept_moe,
    recomputed, has_moe, keep, ckpt, working, moe_keep, in_flight, last, adds, cp_buffers,
    freed, first)`` (:func:`_stage_layer_parts`, :func:`_layer_activation_parts`, the
    micro-batches in flight per stage (tuple), the loss stage, its added terms in order (tuple
    of floats), the context-parallel buffers, None with ``cp = 1``, what of the added terms
    the micro-batch in its backward frees before a recomputed layer runs, and the first
    stage's added term, :func:`_flight_parts`)."""
    key = plan_key(plan) if memo is not None else None
    layers, kept_moe, recomputed, last, uneven, has_moe = _memoized(
        memo, ("layout", _LAYOUT_KEY(key)) if key is not None else None,
        _stage_layer_parts, model, plan)
    keep, ckpt, working, moe_keep, cp_buffers = _memoized(
        memo, ("layer", _PER_LAYER_KEY(key), has_moe) if key is not None else None,
        _layer_activation_parts, model, plan, has_moe)
    in_flight, adds, freed, first = _memoized(
        memo, ("flight", _FLIGHT_KEY(key), last, uneven) if key is not None else None,
        _flight_parts, model, plan, last, uneven)
    return (layers, kept_moe, recomputed, has_moe, keep, ckpt, working, moe_keep, in_flight,
            last, adds, cp_buffers if plan.context_parallel > 1 else None, freed, first)


def _flight_parts(model: ModelConfig, plan: ParallelPlan, last: int, uneven: tuple | None
                  ) -> tuple[tuple[float, ...], tuple[float, ...], float, float]:
    """The micro-batches in flight of :func:`stage_activation_bytes` (per stage), the loss
    stage's added terms (the logits, their soft cap, the final norms' inputs and outputs, the
    MTP layers' inputs), what of them one micro-batch frees before its backward recomputes a
    layer of the stage (its logits, or their gradient under Transformer Engine's fused
    cross-entropy, their cap's output and the final norm's input and output: the loss's,
    output layer's and final norm's backward run first; 0.0 with MTP layers, whose backward
    order is not modelled) and the first stage's added term (:func:`embedding_activation_bytes`
    times :func:`embedding_in_flight`), ``last`` being the loss stage and ``uneven``
    :func:`uneven_chunks`."""
    t = plan.tensor_parallel
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    n_mtp = mtp_layers(model)
    V = padded_vocab_size(model.vocab_size, t, divisible_by=model.make_vocab_size_divisible_by)
    in_flight = ep_overlap_in_flight(plan, schedule_in_flight(  # of every stage
        plan.schedule, plan.pipeline_parallel, plan.num_microbatches, chunks_per_stage(plan),
        uneven), model)
    tokens = model.seq_length // plan.context_parallel * plan.micro_batch_size
    # the logits of the output layer and of each MTP layer's (one loss each)
    losses = schedules.loss_in_flight(plan.schedule, plan.pipeline_parallel, plan.num_microbatches,
                                      chunks_per_stage(plan))
    if cross_entropy_fusion(plan) == "te":  # the forward's gradient, in the logits' place
        adds = [(1 + n_mtp) * tokens * V / t * e * losses]
        freed = tokens * V / t * e
    else:  # fp32 logits are their own fp32 copy (``.float()`` returns the same tensor)
        adds = [(1 + n_mtp) * tokens * V / t * ((e if e < 4 else 0) + 4 * losses)]
        freed = tokens * V / t * ((e if e < 4 else 0) + 4)
    if family_of(model).final_logit_softcap:  # the cap's tanh output (the layer spec's)
        adds.append(final_logit_softcap_bytes(tokens, V, t, e) * losses)
        freed += final_logit_softcap_bytes(tokens, V, t, e)
    norm = final_norm_activation_bytes(model, plan)  # kept until the loss's backward
    adds.append(norm * losses)
    freed += norm
    if n_mtp:  # each MTP layer's enorm and hnorm inputs and eh_proj's 2h-wide input (4h); when
        # checkpointed (mtp_layers_recomputed) only the checkpoint's two inputs, the hidden
        # states and the shifted tokens' embedding (2h), of which the transformer layer's
        # checkpoint counts h (_stage_layer_parts): h more
        sp = plan.sequence_parallel and t > 1
        width = 1 if mtp_layers_recomputed(plan) else 4
        adds.append(n_mtp * tokens * width * model.hidden_size * e / (t if sp else 1)
                    * in_flight[last])
    first = embedding_activation_bytes(model, plan) * embedding_in_flight(plan)
    return in_flight, tuple(adds), (0.0 if n_mtp else float(freed)), float(first)


#: Plan fields the stages' layer counts of :func:`stage_activation_bytes` do not read
#: (:func:`_stage_layer_parts`: the layout and the recomputed layers).
_LAYOUT_FREE_PLAN_FIELDS = ("tensor_parallel", "data_parallel", "micro_batch_size",
                            "sequence_parallel", "context_parallel", "zero_stage",
                            "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
#: Plan fields the per-layer activation bytes do not read (:func:`_layer_activation_parts`:
#: the pipeline, the data-parallel side and how many layers of a chunk full recomputation
#: recomputes, which only :func:`_stage_layer_parts` reads).
_PER_LAYER_FREE_PLAN_FIELDS = ("pipeline_parallel", "data_parallel", "schedule",
                               "virtual_pipeline_stages", "zero_stage", "overlap_grad_reduce",
                               "overlap_param_gather", "recompute_num_layers")
#: Plan fields the micro-batches in flight and the loss stage's terms do not read
#: (:func:`_flight_parts`: the schedule, the sizes, the layout, the expert all-to-all overlap
#: and the cross-entropy; the recomputation and its layer count too, which decide whether the
#: MTP layers are checkpointed): the recomputed modules, the exchanges, the dispatcher, the
#: tensor-parallel overlap and the data-parallel side but d.
_FLIGHT_FREE_PLAN_FIELDS = ("recompute_modules", "cp_comm_type", "cp_a2a_size",
                            "moe_token_dispatcher_type", "tp_comm_overlap", "zero_stage",
                            "overlap_grad_reduce", "overlap_param_gather")
_LAYOUT_KEY = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                    if f not in _LAYOUT_FREE_PLAN_FIELDS))
_PER_LAYER_KEY = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                       if f not in _PER_LAYER_FREE_PLAN_FIELDS))
_FLIGHT_KEY = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                    if f not in _FLIGHT_FREE_PLAN_FIELDS))


def _memoized(memo: dict | None, key: tuple | None, fn, *args):
    """``fn(*args)``, kept in ``memo`` under ``key`` (computed each time without a memo)."""
    if memo is None:
        return fn(*args)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = fn(*args)
    return hit


def _stage_layer_parts(model: ModelConfig, plan: ParallelPlan) -> tuple:
    """The layer counts of :func:`stage_activation_bytes`: ``(layers, kept_moe, recomputed,
    last, uneven, has_moe)``: each stage's transformer layers (int64 (p,), with the MTP
    layers), MoE layers not recomputed (float (p,): :func:`stage_moe_layer_counts` less
    :func:`recomputed_moe_layers` and the recomputed MTP layers), recomputed layers (with the
    MTP layers' under full recomputation of every layer, :func:`mtp_layers_recomputed`), the
    loss stage,
    :func:`uneven_chunks` and whether any stage has MoE layers (arrays read-only)."""
    counts = stage_layers_with_mtp(model, plan)
    moe_counts = stage_moe_layer_counts(model, plan)
    kept_moe = moe_counts - recomputed_moe_layers(model, plan)
    recomputed = recomputed_layers(model, plan)
    n_mtp = mtp_layers(model)
    if n_mtp and mtp_layers_recomputed(plan):  # the MTP layers' transformer layers: checkpointed
        # (uniform method; with the block method, recompute_num_layers set, Megatron-Core
        # skips their recomputation and they keep their activations)
        recomputed = recomputed.copy()
        recomputed[loss_stage(plan)] += n_mtp
        if mtp_layer_is_moe(model):
            kept_moe[loss_stage(plan)] -= n_mtp
    layers = np.array(counts, np.int64)
    for a in (layers, kept_moe, recomputed):
        a.setflags(write=False)
    return (layers, kept_moe, recomputed, loss_stage(plan), uneven_chunks(plan, model),
            bool(moe_counts.any()))


def _layer_activation_parts(model: ModelConfig, plan: ParallelPlan, has_moe: bool) -> tuple:
    """The per-layer bytes of :func:`stage_activation_bytes`: ``(keep, ckpt, working,
    moe_keep, cp_buffers)``: a layer's kept activations under the plan's recomputation
    (``none`` for full), its checkpoint, the working set of the layer being recomputed (an MoE
    layer's when larger, ``has_moe``), an MoE layer's kept activations (None without MoE
    layers) and the context-parallel exchange's buffers (0.0 with ``cp = 1``)."""
    keep_mode = "none" if plan.recompute == "full" else plan.recompute
    keep = activation_bytes_per_layer(model, plan, keep_mode)
    ckpt = activation_bytes_per_layer(model, plan, "full")
    working = activation_bytes_per_layer(model, plan, "none")
    moe_keep = None
    if has_moe:
        moe_keep = moe_activation_bytes_per_layer(model, plan, keep_mode)
        working = max(working, moe_activation_bytes_per_layer(model, plan, "none"))
    cp_buffers = cp_exchange_buffer_bytes(model, plan) if plan.context_parallel > 1 else 0.0
    return keep, ckpt, working, moe_keep, cp_buffers


#: Plan fields the weights, gradients and optimizer state of :func:`stage_memory_arrays` do
#: not read (the micro-batch size and the recomputation: activations only).
STATE_FREE_PLAN_FIELDS = ("micro_batch_size", "recompute", "recompute_num_layers",
                          "recompute_modules")
_STATE_KEY = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                   if f not in STATE_FREE_PLAN_FIELDS))
_STATE: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


def stage_state_bytes(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool = True
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The weights, gradients, optimizer state and its fp32 gradient copy of
    :func:`stage_memory_arrays` (bytes per GPU, float64 (p,) each, read-only; memoized;
    :func:`state_bytes_of`): what the sweep adds to activations it shares between plans that
    differ only on the data-parallel side (the optimizer state at the peak by
    :func:`optimizer_at_peak`)."""
    return _state_bytes(model, plan, fp8_tn)


#: Plan fields the activations of :func:`stage_memory_arrays` do not read (the data-parallel
#: side but d, which sets the micro-batch count): the sweep shares them.
ACTIVATION_FREE_PLAN_FIELDS = ("zero_stage", "overlap_grad_reduce", "overlap_param_gather")


def _state_bytes(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The weights, gradients and optimizer state of :func:`stage_memory_arrays`, float64 (p,)
    each (read-only), memoized: a sweep's plans that differ only in the micro-batch size or the
    recomputation share them. Keyed by every model field, ``fp8_tn`` and every plan field but
    :data:`STATE_FREE_PLAN_FIELDS` (tests check that none of those changes them)."""
    key = (MODEL_FIELD_VALUES(model), _STATE_KEY(plan_key(plan)), bool(fp8_tn))
    hit = _STATE.get(key)
    if hit is None:
        if len(_STATE) > 4096:
            _STATE.clear()
        hit = _STATE[key] = state_bytes_of(model, plan, fp8_tn)
        for a in hit:
            a.setflags(write=False)
    return hit


def state_bytes_of(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_state_bytes` computed (see :func:`stage_memory_arrays` for the formulas): the
    weights, gradients, optimizer state (:func:`bytes_per_parameter`) and the part of it that
    is the fp32 gradient copy (:func:`grad_copy_bytes_per_parameter`)."""
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    experts = expert_params_per_gpu(model, plan)
    n = params_per_gpu(model, plan) - experts
    w, g, o = bytes_per_parameter(plan)
    we, ge, oe = bytes_per_parameter(plan, expert_data_parallel(plan)) if experts.any() else (0, 0, 0)
    gathered = gathered_grads = 0.0
    if plan.zero_stage >= 3:  # the current unit (and, prefetched, the next) unsharded
        unit, unit_fp8 = fsdp_unit_parameters(model, plan)
        live = 2 if plan.overlap_param_gather else 1
        gathered = live * param_gather_bytes(plan, unit, unit_fp8)
        gathered_grads = unit * DTYPE_BYTES[grad_dtype(plan)]
    recipe = fp8_recipe(plan)
    fp8_w = np.zeros(len(n))
    if recipe is not None and not fp8_keeps_weight_copies(plan):
        # torchao's Float8Linear (torchtitan): no persistent FP8 copy; under ZeRO 1/2 with the
        # float8 all-gather the gathered weights are float8 (1 byte, not e) until resharded
        if plan.zero_stage in (1, 2) and fp8_gathers_params(plan):
            fp8_w = fp8_weights_per_gpu(model, plan) * (FP8_BYTES - e)
    elif recipe is not None:
        fp8_w = fp8_weights_per_gpu(model, plan) * fp8_weight_bytes_per_parameter(recipe, fp8_tn)
        if plan.zero_stage >= 3:
            fp8_w = fp8_w / zero_shard_size(plan)  # FSDP shards over d*cp (size*cp with HSDP)
        elif fp8_gathers_params(plan):  # --fp8-param-gather: the compute weights are FP8 only
            fp8_w = fp8_w - fp8_weights_per_gpu(model, plan) * e
    c = grad_copy_bytes_per_parameter(plan)
    ce = grad_copy_bytes_per_parameter(plan, expert_data_parallel(plan)) if experts.any() else 0
    # the dense and the expert parameters have optimizers of their own, which Megatron-Core's
    # ChainedOptimizer steps one after the other (optimizer/__init__.py:515 "separate optimizers
    # for expert parameters"; optimizer.py ChainedOptimizer.step: every optimizer's
    # prepare_grads, then each step_with_ready_grads): the fp32 gradient copies of both live
    # together, Transformer Engine's step scratch only of the one stepping (the larger)
    both = np.minimum(n * _step_scratch_per_parameter(plan),
                      experts * _step_scratch_per_parameter(plan, expert_data_parallel(plan))
                      ) if experts.any() else 0.0
    return (n * w + experts * we + gathered + fp8_w,
            n * g + experts * ge + gathered_grads + weight_gradient_buffer_bytes(model, plan),
            n * o + experts * oe - both, n * c + experts * ce - both)


def _step_scratch_per_parameter(plan: ParallelPlan, data_parallel: int | None = None) -> float:
    """:func:`optimizer_step_scratch_bytes` on one GPU, sharded as the optimizer state is
    (``/d`` under ZeRO; ``data_parallel`` the group the parameters are sharded over)."""
    scratch = optimizer_step_scratch_bytes(plan)
    d = data_parallel or zero_shard_size(plan)
    return scratch / d if plan.zero_stage >= 1 else scratch


def fsdp_unit_parameters(model: ModelConfig, plan: ParallelPlan
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Parameters of the largest unit ZeRO-3 / FSDP gathers on one GPU of each stage, and of
    its FP8 linear weights, two float arrays shape (p,).

    The units are those both frameworks wrap: each transformer layer (Megatron-LM's
    ``--use-torch-fsdp2`` wraps ``TransformerLayer``, ``LanguageModelEmbedding`` and the output
    ``ColumnParallelLinear``; torchtitan each block, the token embedding and the final norm
    with the output layer): a dense layer's ``sharded/t + replicated`` (the family's
    :meth:`layer_parameters`), an MoE layer's attention, router and shared experts with its
    ``E/ep`` local experts over ``etp`` (:func:`moe_layer_parameters`: all of them are in
    the layer's unit, sharded over the expert-data-parallel group), the first stage's
    embedding and the loss stage's output layer (the family's ``edge_parameters``, ``V'h/t``
    each; a tied output layer is the embedding's unit).
    Each stage gathers the largest of those it holds: Mixtral 8x7B at ``ep = 1``, 1,451 M
    parameters per MoE layer against 218 M for its attention and one MLP; Llama 3 8B's output
    layer, 525 M against 218 M per layer. The FP8 weights are the layers' linear weights
    (:func:`fp8_linear_params_per_layer`; the experts' too), none of the embedding's or the
    output layer's (Transformer Engine runs them in BF16)."""
    t = plan.tensor_parallel
    sharded, replicated = family_of(model).layer_parameters(model)
    dense_layers = stage_layers_with_mtp(model, plan) - stage_moe_layer_counts(model, plan)
    dense_fp8 = fp8_linear_params_per_layer(model, t)
    unit = np.where(dense_layers > 0, sharded / t + replicated, 0.0)
    fp8 = np.where(dense_layers > 0, dense_fp8, 0.0)
    moe_layers = stage_moe_layer_counts(model, plan)
    if moe_layers.any():
        moe = moe_layer_parameters(model)
        experts = moe.experts / (plan.expert_parallel * expert_tensor_parallel(plan))
        moe_unit = moe.sharded / t + moe.replicated + experts
        # linear weights: the attention's (the dense layer's less its MLP's) and the experts'
        moe_fp8 = moe.sharded / t + experts
        bigger = (moe_layers > 0) & (moe_unit > unit)
        unit, fp8 = np.where(bigger, moe_unit, unit), np.where(bigger, moe_fp8, fp8)
    (first_sh, first_rep), (last_sh, last_rep) = family_of(model).edge_parameters(model, t)
    for stage, edge in ((0, first_sh / t + first_rep), (loss_stage(plan), last_sh / t + last_rep)):
        if edge > unit[stage]:
            unit[stage], fp8[stage] = edge, 0.0
    return unit, fp8


def stage_memory(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool = True) -> list[StageMemory]:
    """Memory of one GPU of each pipeline stage (bytes; see :class:`core.model.stage_memory.StageMemory`):
    :func:`stage_memory_arrays` stage by stage."""
    parts = stage_memory_arrays(model, plan, fp8_tn)
    weights, grads, opt = parts[:3]
    acts = parts[3].tolist()
    return [StageMemory(i, weights[i], grads[i], opt[i], acts[i],
                        workspace_bytes=float(parts.workspace[i]),
                        allocator_reserve_bytes=float(parts.allocator_reserve[i]),
                        cuda_context_bytes=float(parts.cuda_context[i]),
                        nccl_buffer_bytes=float(parts.nccl_buffers[i]))
            for i in range(len(acts))]
