"""Parameter and FLOP counts of a whole model: totals (:func:`num_parameters`), per GPU of a
plan's stages (:func:`params_per_gpu`), model and hardware FLOPs per iteration (MFU, HFU).
They ask the model's family (:func:`core.model.families.family_of`) for its layer's numbers.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np

from core import schedules
from core.model.attention import causal_core_fraction
from core.model.families import family_of
from core.model.layout import chunk_layout, chunks_per_stage, edge_stages, loss_stage, stage_counts
from core.model.mla import mla_up_proj_forward_flops_per_token
from core.model.moe import (expert_tensor_parallel, moe_ffn, moe_forward_flops_per_token,
                            moe_layer_mask, moe_layer_parameters, num_moe_layers)
from core.model.mtp import mtp_extra_parameters, mtp_layer_is_moe, mtp_layers
from core.model.recompute import (mtp_layers_recomputed, recomputed_in_chunk,
                                  recomputed_layers, selective_op_flops_per_token)
from core.model.mlp import is_gated
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, recompute_modules
from core.plan.layout import pipeline_layout_text

__all__ = [
    "MODEL_FIELD_VALUES", "causal_model_flops_per_iteration", "edge_params_per_gpu",
    "expert_params_per_gpu", "hardware_flops_per_iteration", "input_embedding_parameters",
    "layers_forward_flops_per_token", "model_flops_per_iteration", "mtp_edge_parameters",
    "mtp_forward_flops_per_token", "mtp_layer_total_parameters", "num_active_parameters",
    "num_active_parameters_with_embedding", "num_parameters", "params_per_gpu",
    "recomputed_moe_layers", "stage_layers_with_mtp", "stage_moe_layer_counts",
]


def mtp_edge_parameters(model: ModelConfig, t: int, p: int) -> float:
    """Parameters one GPU of the last stage holds for multi-token prediction besides the MTP
    layers' transformer layers: their :func:`mtp_extra_parameters` (sharded ones over ``t``)
    and, with ``p > 1``, the embedding's copy (an untied model's word embedding ``V'h/t``, and
    learned positions), part of :func:`edge_params_per_gpu`'s last stage; 0 without MTP."""
    n = mtp_layers(model)
    if not n:
        return 0.0
    sh, rep = mtp_extra_parameters(model)
    out = n * (sh / t + rep)
    if p > 1:  # Megatron-Core builds the embedding there too (a tied one is there already)
        (first_sh, first_rep), _ = family_of(model).edge_parameters(model, t)
        out += (0.0 if model.tied_embeddings else first_sh / t) + first_rep
    return out


def mtp_layer_total_parameters(model: ModelConfig) -> float:
    """All parameters of one MTP layer: its transformer layer (an MoE layer's with every
    expert when :func:`mtp_layer_is_moe`) and :func:`mtp_extra_parameters`."""
    if mtp_layer_is_moe(model):
        moe = moe_layer_parameters(model)
        layer = moe.sharded + moe.replicated + moe.experts
    else:
        layer = sum(family_of(model).layer_parameters(model))
    return layer + sum(mtp_extra_parameters(model))


def mtp_forward_flops_per_token(model: ModelConfig, dense_layer: float, out: float) -> float:
    """Forward FLOPs per token of the ``N`` MTP layers: each its transformer layer's (dense
    ``dense_layer`` or :func:`moe_forward_flops_per_token`), ``eh_proj``'s ``2 * 2h * h`` and
    one more output layer ``out`` (``2hV'``; Megatron-LM's ``num_floating_point_operations``
    counts the same, with the norms' few FLOPs besides)."""
    n = mtp_layers(model)
    if not n:
        return 0.0
    layer = moe_forward_flops_per_token(model) if mtp_layer_is_moe(model) else dense_layer
    return n * (layer + 4.0 * model.hidden_size ** 2 + out)


# --------------------------------------------------------------------------- parameters

def num_parameters(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """Total parameter count; a tied word embedding counted once.

    ``L`` times the family's layer parameters plus the first and last stage's
    others (:func:`core.model.layer.dense_layer_parameters`,
    ``dense_edge_parameters``). GPT: per layer QKV ``3h^2+3h``, projection
    ``h^2+h``, MLP ``2*h*f+f+h``, two layer norms ``4h``; plus embedding
    ``V'h``, positions ``s*h`` and the final layer norm ``2h``. Llama 2 7B
    (GQA off, SwiGLU, RMSNorm, RoPE, no biases, untied): 6,738,415,616. ``V'`` is
    the vocabulary padded for ``tensor_parallel``. Multi-token prediction adds ``N`` MTP
    layers (:func:`mtp_layer_total_parameters`; their embedding and output layer are the main
    model's, counted once).
    """
    fam = family_of(model)
    layer = sum(fam.layer_parameters(model))
    first, last = fam.edge_parameters(model, tensor_parallel)
    n_moe = num_moe_layers(model)
    moe = moe_layer_parameters(model) if n_moe else None
    moe_layer = moe.sharded + moe.replicated + moe.experts if moe else 0.0
    mtp = mtp_layers(model) * mtp_layer_total_parameters(model) if mtp_layers(model) else 0.0
    return int(round((model.num_layers - n_moe) * layer + n_moe * moe_layer + sum(first) + sum(last)
                     + mtp))


def num_active_parameters(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """Active parameters as the model cards of OpenAI and DeepSeek publish them: the
    parameters a token's GEMMs use, :func:`num_active_parameters_with_embedding` less the input
    embedding (:func:`input_embedding_parameters`, a table lookup: no FLOPs). GPT-OSS 20B:
    3.61 B (model card, Table 1: 4.19 B with the embedding); DeepSeek-V3: 36.6 B ("37B
    activated", technical report). Mistral AI's "12.9B" of Mixtral 8x7B and Qwen's "3.3B" of
    Qwen3-30B-A3B count the input embedding (12.88 B and 3.35 B, 12.75 B and 3.04 B without):
    compare those with :func:`num_active_parameters_with_embedding`. Model FLOPs (MFU) do not
    use this count (:func:`model_flops_per_iteration` counts the GEMMs)."""
    return num_active_parameters_with_embedding(model, tensor_parallel) - \
        input_embedding_parameters(model, tensor_parallel)


def input_embedding_parameters(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """The input embedding's own parameters: the word embedding ``V'h`` when the output layer
    has its own weights (tied, the matrix is the output layer's GEMM weight and stays active)
    and the learned position table ``s*h`` (RoPE has none). ``V'`` is padded for
    ``tensor_parallel``."""
    (word, positions), _ = family_of(model).edge_parameters(model, tensor_parallel)
    return int(round(positions + (0.0 if model.tied_embeddings else word)))


def num_active_parameters_with_embedding(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """Parameters a token passes through, the input embedding included: :func:`num_parameters`
    with each MoE layer's routed experts counted ``moe_top_k`` times one expert instead of
    ``num_experts`` times (the router, shared experts, attention and embeddings all count).
    Equal to :func:`num_parameters` for a dense model. Mixtral 8x7B: 12.9 B of 46.7 B (Mistral
    AI's announcement: "12.9B active parameters per token")."""
    total = num_parameters(model, tensor_parallel)
    n_moe = num_moe_layers(model) + (mtp_layers(model) if mtp_layer_is_moe(model) else 0)
    if not n_moe:
        return total
    moe = moe_layer_parameters(model)
    return int(round(total - n_moe * (moe.experts - model.moe_top_k * moe.expert)))


def edge_params_per_gpu(model: ModelConfig, t: int, p: int) -> tuple[float, float]:
    """Parameters outside the layers held by one GPU of the first and of the last stage.

    The family's first- and last-stage parameters (sharded ones divided by
    ``t``); with a tied output layer and ``p > 1`` the last stage adds its copy of
    the word embedding ``V'h/t`` (Megatron keeps one on each end and all-reduces
    their gradients). With ``p = 1`` both are on the one stage: add both. Multi-token
    prediction adds to the last stage its layers' :func:`mtp_extra_parameters` and, with
    ``p > 1``, a copy of the embedding (Megatron-Core's ``GPTModel`` builds it on the MTP
    stage; an untied model's word embedding and learned positions) whose gradients are summed
    with the first stage's, as a tied output layer's are (that sum is not timed, as for tied
    embeddings). The MTP layers' transformer layers are counted with the stage's layers
    (:func:`params_per_gpu`).
    """
    fam = family_of(model)
    (first_sh, first_rep), (last_sh, last_rep) = fam.edge_parameters(model, t)
    tied_copy = first_sh / t if (p > 1 and model.tied_embeddings) else 0.0
    last = last_sh / t + last_rep + tied_copy + mtp_edge_parameters(model, t, p)
    return first_sh / t + first_rep, last


MODEL_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(ModelConfig)))
_PARAMS: dict[tuple, np.ndarray] = {}


def params_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage before any ZeRO sharding, shape (p,).

    Per layer the family's sharded and replicated parameters (GPT:
    ``(4h^2 + 2hf + 3h + f)/t + 6h``), times the stage's layers; stage 0 adds the
    vocabulary-parallel embedding ``V'h/t`` and learned positions ``s*h``; the last stage
    adds the final norm and its output layer ``V'h/t`` (untied; tied: a copy of the word
    embedding when ``p > 1``), see :func:`edge_params_per_gpu`; the MTP layers' transformer
    layers count on the last stage (:func:`stage_layers_with_mtp`).

    Memoized (sweeps ask for the same few layouts often; a new array is returned), keyed by
    every field it reads: all the model's, and the plan's ``t``, ``p``, chunks per stage,
    uneven first / last stages and pipeline-split flags (the layout), ``ep`` and ``etp``, and
    the schedule's placement (ZB-V's loss stage is stage 0).
    """
    key = (MODEL_FIELD_VALUES(model), plan.tensor_parallel,
           plan.pipeline_parallel, chunks_per_stage(plan), plan.first_stage_layers,
           plan.last_stage_layers, bool(plan.account_for_embedding_in_pipeline_split),
           bool(plan.account_for_loss_in_pipeline_split), pipeline_layout_text(plan),
           plan.expert_parallel,
           expert_tensor_parallel(plan), schedules.get(plan.schedule).placement_kind)
    hit = _PARAMS.get(key)
    if hit is None:
        if len(_PARAMS) > 4096:
            _PARAMS.clear()
        hit = _PARAMS[key] = _params_per_gpu(model, plan)
    return hit.copy()


def _params_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """:func:`params_per_gpu`, computed."""
    fam = family_of(model)
    t = plan.tensor_parallel
    sharded, replicated = fam.layer_parameters(model)
    counts = stage_layers_with_mtp(model, plan)
    moe_counts = stage_moe_layer_counts(model, plan)
    n = (counts - moe_counts) * (sharded / t + replicated)
    if moe_counts.any():
        moe = moe_layer_parameters(model)
        n += moe_counts * (moe.sharded / t + moe.replicated) + expert_params_per_gpu(model, plan)
    first, last = edge_params_per_gpu(model, t, edge_stages(plan))
    n[0] += first
    n[loss_stage(plan)] += last
    return n


def stage_moe_layer_counts(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """MoE layers of each pipeline stage (:func:`moe_layer_mask` over the layers of all the
    stage's model chunks, :func:`stage_chunk_layers`), float array shape (p,); the last stage
    adds the MTP layers when theirs is an MoE layer (:func:`mtp_layer_is_moe`)."""
    if not model.is_moe:
        return np.zeros(plan.pipeline_parallel, float)
    mask = moe_layer_mask(model)
    out = np.array([sum(mask[r.start:r.stop].sum() for r in chunks)
                    for chunks in chunk_layout(model, plan)[0]], float)
    if mtp_layer_is_moe(model):
        out[loss_stage(plan)] += mtp_layers(model)
    return out


def recomputed_moe_layers(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """MoE layers among each stage's recomputed decoder layers (:func:`recomputed_layers`; the
    MTP layers not included), float array shape (p,).

    Megatron-Core's block method (``TransformerBlock._checkpointed_forward``, Megatron-Core
    0.16.1: the model chunk's layers with ``layer_idx < recompute_num_layers`` are
    checkpointed, the rest run plainly) recomputes the first ``recompute_num_layers`` layers of
    each chunk, so which of them are MoE layers (:func:`moe_layer_mask`) depends on where they
    sit: DeepSeek-V3's three dense layers lead stage 0's first chunk, so recomputing 3 layers
    of each chunk keeps that chunk's MoE layer, not a mean layer. Zero without full
    recomputation or MoE layers."""
    p = plan.pipeline_parallel
    if plan.recompute != "full" or not model.is_moe:
        return np.zeros(p)
    mask = moe_layer_mask(model)
    return np.array([float(sum(int(mask[r.start:r.start + recomputed_in_chunk(plan, len(r))]
                                   .sum()) for r in chunks))
                     for chunks in chunk_layout(model, plan)[0]])


def stage_layers_with_mtp(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Transformer layers one GPU of each stage holds, float array shape (p,): the stage's
    decoder layers (:func:`stage_counts`) and, on the last stage, the ``N`` MTP layers'
    (Megatron-Core runs the MTP block on the last pipeline stage)."""
    counts = np.array(stage_counts(model, plan), float)
    counts[loss_stage(plan)] += mtp_layers(model)
    return counts


def expert_params_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Routed-expert parameters one GPU of each stage holds, shape (p,): the stage's MoE layers
    times ``E`` experts over ``ep * etp`` ranks (Megatron-Core: ``E/ep`` local experts, each
    split over the expert tensor-parallel group). Their gradients reduce over the
    expert-data-parallel group (:func:`expert_data_parallel`), not over ``d``."""
    counts = stage_moe_layer_counts(model, plan)
    if not counts.any():
        return np.zeros_like(counts)
    moe = moe_layer_parameters(model)
    return counts * moe.experts / (plan.expert_parallel * expert_tensor_parallel(plan))


def model_flops_per_iteration(model: ModelConfig, plan: ParallelPlan) -> float:
    """Model FLOPs of one iteration (Narayanan et al. 2021, Eq. 3, general MLP size).

    Forward FLOPs per token: ``L*(8h^2 + 4hf + 4sh) + 2hV'`` with ``V'`` the
    vocabulary padded to a multiple of ``make_vocab_size_divisible_by * t`` (128*t by
    default), as Megatron-LM's ``num_floating_point_operations`` counts it
    (``args.padded_vocab_size``);
    training is 3x forward. With ``f = 4h`` this is
    ``72*B*s*L*h^2*(1 + s/(6h) + V'/(12*L*h))``. MoE layers count the GEMMs a token
    passes through (router, ``k`` experts, shared experts: the active parameters).
    Multi-token prediction adds :func:`mtp_forward_flops_per_token`.
    """
    layer, _, out = family_of(model).forward_flops_per_token(model, plan.tensor_parallel)
    tokens = plan.global_batch_size * model.seq_length
    return tokens * 3 * (layers_forward_flops_per_token(model, layer) + out
                         + mtp_forward_flops_per_token(model, layer, out))


def layers_forward_flops_per_token(model: ModelConfig, dense_layer: float) -> float:
    """Forward FLOPs per token of all ``L`` layers: the dense layers' ``dense_layer`` each and
    the MoE layers' :func:`moe_forward_flops_per_token` (active parameters only)."""
    n_moe = num_moe_layers(model)
    moe = moe_forward_flops_per_token(model) if n_moe else 0.0
    return (model.num_layers - n_moe) * dense_layer + n_moe * moe


def hardware_flops_per_iteration(model: ModelConfig, plan: ParallelPlan) -> float:
    """Model FLOPs plus the recomputed ones (for HFU): full recomputation runs the forward of
    :func:`recomputed_layers` again (Narayanan et al. 2021, Eq. 3's factor 4 instead of 3
    when every layer is recomputed); selective recomputation the GEMMs of its modules
    (:func:`core.plan.parallel.recompute_modules`): ``core_attn`` the attention core, ``4sh``
    per token and layer (Korthikanti et al. 2022, Sec. 5), ``mlp`` the dense layers' MLP,
    ``moe`` the MoE layers' router, active experts and shared experts, ``shared_experts``
    those alone, ``mla_up_proj`` MLA's up-projections
    (:func:`mla_up_proj_forward_flops_per_token`; ``layernorm`` and ``moe_act`` are
    element-wise: no GEMM FLOPs); per-op selective checkpointing (``selective_op``) its
    recomputed matmuls, :func:`selective_op_flops_per_token` per layer.

    Unlike the model FLOPs, whose Eq. 3 credits the attention core's full ``s x s`` square,
    these are the FLOPs the GPUs execute: with FlashAttention (``attention_kernel="flash"``)
    the core of every forward (and recomputed forward) counts only the part under the mask,
    :func:`causal_core_fraction` of it (half for causal attention, a windowed layer its band;
    FlashAttention skips the masked blocks), so that HFU stays a share of the peak at long
    sequences; the unfused path (``baddbmm``, softmax, ``bmm``) computes the whole square,
    and counts it (Eq. 3's factor 96 for full recomputation) (with the full square
    credited, a 128k-token plan would report more than 100 %). Megatron-LM's own count
    halves the core the same way since Megatron-Core 0.19."""
    layer, core, _ = family_of(model).forward_flops_per_token(model, plan.tensor_parallel)
    tokens = plan.global_batch_size * model.seq_length
    extra = 0.0
    n_mtp = mtp_layers(model)
    core_passes = 3.0 * (model.num_layers + n_mtp)  # cores in the model FLOPs (fwd + 2x bwd)
    if plan.recompute == "full":  # the recomputed layers' forwards, MoE ones and dense ones
        rec = float(recomputed_layers(model, plan).sum())
        rec_moe = float(recomputed_moe_layers(model, plan).sum())
        moe = moe_forward_flops_per_token(model) if rec_moe else 0.0
        extra = (rec - rec_moe) * layer + rec_moe * moe
        core_passes += rec
        if n_mtp and mtp_layers_recomputed(plan):  # the MTP layers' transformer layers are
            # checkpointed under full recomputation by the uniform method, not by the block one
            extra += n_mtp * (moe_forward_flops_per_token(model) if mtp_layer_is_moe(model)
                              else layer)
            core_passes += n_mtp
    elif plan.recompute == "selective":
        mods = recompute_modules(plan)
        mtp_moe = n_mtp if mtp_layer_is_moe(model) else 0
        n_moe = num_moe_layers(model) + mtp_moe
        n_all = model.num_layers + n_mtp  # the MTP layers' modules are recomputed too
        h, per_f = model.hidden_size, (6 if is_gated(model.activation) else 4) * model.hidden_size
        if "core_attn" in mods:
            extra += n_all * core
            core_passes += n_all
        if "mlp" in mods:  # the dense layers' MLP GEMMs
            extra += (n_all - n_moe) * per_f * model.ffn
        if n_moe and "moe" in mods:  # router, the k routed experts and the shared experts
            extra += n_moe * (2 * h * (model.num_experts or 0)
                              + per_f * moe_ffn(model) * (model.moe_top_k + model.num_shared_experts))
        elif n_moe and "shared_experts" in mods:
            extra += n_moe * per_f * moe_ffn(model) * model.num_shared_experts
        if "mla_up_proj" in mods and model.multi_latent_attention is True:
            extra += n_all * mla_up_proj_forward_flops_per_token(model)
        # layernorm and moe_act re-run element-wise kernels only: no GEMM FLOPs
    elif plan.recompute == "selective_op":  # the recomputed matmuls of every (dense) layer
        extra = model.num_layers * selective_op_flops_per_token(model)
    # FlashAttention skips the masked blocks; the unfused path (baddbmm, softmax, bmm) computes
    # the whole s x s square
    masked = (core_passes * core * (1.0 - causal_core_fraction(model))
              if model.attention_kernel == "flash" else 0.0)
    return model_flops_per_iteration(model, plan) + tokens * (extra - masked)


def causal_model_flops_per_iteration(model: ModelConfig, plan: ParallelPlan) -> float:
    """Model FLOPs of one iteration counting only the attention core under the causal mask:
    :func:`model_flops_per_iteration` less ``1 - causal_core_fraction`` of the core in each of
    its three passes (forward, and twice that backward) over every layer and MTP layer, FLOPs.

    Narayanan et al.'s Eq. 3 credits the core's full ``s x s`` square (``4sh`` per token and
    layer forward); FlashAttention skips the masked half, and Megatron-Core 0.19's
    ``num_floating_point_operations`` counts only that half (``2 * sum(L^2) * h``), as
    Meta's Llama 3 paper's MFU does. At long sequences the two differ by most of the core:
    a 1M-token plan's Eq. 3 MFU counts twice the attention FLOPs the GPUs run."""
    _, core, _ = family_of(model).forward_flops_per_token(model, plan.tensor_parallel)
    tokens = plan.global_batch_size * model.seq_length
    passes = 3.0 * (model.num_layers + mtp_layers(model))
    return model_flops_per_iteration(model, plan) - tokens * passes * core * (
        1.0 - causal_core_fraction(model))
