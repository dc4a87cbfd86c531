"""The rules between a session's fields: :func:`validate` (every rule a session breaks),
:func:`check`, the checks the studies run before choosing plans (:func:`check_all_but_the_plan`,
:func:`probe_plan`) and the fields that have no effect (:func:`inactive_fields`).

The rules of a plan (parallel sizes, pipeline split and schedule, context and expert
parallelism, recomputation, ZeRO, precision, the cluster) are here; the rules of the model
alone are in :mod:`core.plan.model_rules`. The rules that read ``plan.schedule`` are all in
this module: the schedule's own rules and the registry's (:func:`_batch_schedule_errors`,
:func:`_pipeline_split_errors`), and those that compare it with a schedule's name
(:func:`_plan_flag_errors`, :func:`ep_overlap_errors`, :func:`probe_plan`,
:data:`_ENABLED_BY`); outside it only :func:`core.plan.layout.layout_chunks` does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from core.plan.cluster import (GPU_FP8_DTYPES, GPU_KINDS, GPU_NIC_GBITS_PER_GPU, GPU_NVLINK_DOMAIN,
                               ClusterConfig, gpu_kind)
from core.plan.fields import (BOUNDS, NOT_MODELLED, UNEVEN_PIPELINE_SPLIT, ConfigError, FieldError,
                              is_int, section_errors)
from core.plan.layout import (NotModelledError, PipelineSplitError, layout_chunks,
                              layout_conflict, largest_model_chunk, pipeline_layout_errors,
                              pipeline_layout_text, pipeline_split_slots, stage_layer_counts,
                              virtual_stage_layer_counts, layer_split_hint)
from core.plan.model_config import ModelConfig
from core.plan.model_rules import MLA_FIELDS, model_feature_errors
from core.plan.parallel import (CUDA_GRAPH_MODULES, fsdp_fp32_applies, RECOMPUTE_MODULES,
                                UNMODELLED_RECOMPUTE_MODULES, ZERO_STAGES, ParallelPlan,
                                fp8_recipe, parse_cuda_graph_modules, parse_recompute_modules,
                                recompute_modules, p2p_overlap_applies, wgrad_accumulation)
from core.plan.framework_rules import framework_plan_errors
from core.plan.session import Session
from core.plan.sharding_rules import sharding_precision_errors

__all__ = ["validate", "plan_rules", "moe_errors", "ep_overlap_errors", "cuda_graph_errors", "check", "check_all_but_the_plan",
           "probe_plan", "inactive_fields"]


def validate(session: Session, *, sections: tuple[str, ...] = ("model", "plan", "cluster", "cost",
                                                               "reliability"),
             model_checked: bool = False) -> list[FieldError]:
    """Return every rule the session breaks (empty list when valid).

    ``sections``: the sections whose fields are checked one by one (type, bounds,
    choices); a plan sweep checks the model, cluster and cost once and then only each
    candidate's plan (the cross-field rules below are always checked). ``model_checked``:
    the caller has validated this model and found it valid, so the rules of the model alone
    (:func:`model_feature_errors`) are not checked again (a plan sweep, once per candidate).

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
        errs += [e for e in model_feature_errors(m) if e.field not in reported]
    errs += _gpu_kind_errors(c)
    if errs:  # divisibility rules below need positive integers
        return errs
    for rule in _SIZE_RULES:
        errs += rule(m, pl, c)
    return errs


def _gpu_kind_errors(c: ClusterConfig) -> list[FieldError]:
    """``cluster.gpu`` a shipped GPU kind, unless ``cluster.profile_path`` names a store."""
    if c.gpu not in GPU_KINDS and not c.profile_path:
        kind = gpu_kind(c.gpu) if isinstance(c.gpu, str) else c.gpu
        if kind in GPU_KINDS:  # another tool's name (--gpu and --set take it): the file's kind
            return [FieldError("cluster.gpu", f"gpu={c.gpu!r} is not a GPU kind of the session "
                               f"format; did you mean {kind!r} (as --gpu and --set cluster.gpu= "
                               "read that name)?")]
        return [FieldError("cluster.gpu", f"gpu={c.gpu!r} has no shipped profile; "
                           f"choose one of {', '.join(GPU_KINDS)}, or give a profile store of "
                           "it (cluster.profile_path in a session file; --profile STORE.h5 "
                           "where the command has that option)")]
    return []


def plan_rules(model: ModelConfig, cluster: ClusterConfig
               ) -> tuple[Callable[[ParallelPlan], list[FieldError]], ...]:
    """The cross-field rules :func:`validate` checks of a plan under ``model`` and ``cluster``,
    in its order, each a function of the plan alone (its errors, a list).

    ``validate(Session(model, plan, cluster, cost), sections=(), model_checked=True)`` is
    empty iff every rule returns empty, the rules called in order (validate calls the third
    and later, which need positive integer sizes, only when the first two return empty; it
    returns the errors of all of them). Each rule reads the plan through its attributes only,
    and the model and cluster it was made with: a plan sweep memoizes each one's verdict by
    the plan fields it reads (:class:`core.plan.verdicts.PlanVerdicts`)."""
    def bind(rule):
        return lambda pl: rule(model, pl, cluster)
    return ((_plan_feature_errors, lambda pl: _gpu_kind_errors(cluster))
            + tuple(bind(rule) for rule in _SIZE_RULES))


def _head_split_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Megatron-LM's divisibility rules of the attention heads, query groups and MLP: ``h``
    divisible by ``a`` unless ``kv_channels`` gives the head size; ``a``, the query groups
    and the MLP hidden size divisible by ``t``."""
    t = pl.tensor_parallel
    errs: list[FieldError] = []
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
    return errs


def _model_plan_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """The plan's rules for the model's features: expert parallelism (:func:`moe_errors`),
    latent attention (:func:`_mla_plan_errors`), HSDP, torchao's float8 (``plan.fp8_impl``) and
    torchtitan's gathered TP inputs (``plan.tp_saved_input``:
    :func:`core.plan.framework_rules.framework_plan_errors`) and torchtitan's per-op
    recomputation with the models they do not model."""
    errs: list[FieldError] = []
    errs += moe_errors(m, pl)
    errs += _mla_plan_errors(m, pl)
    if m.is_moe and pl.data_parallel_shard_size is not None:
        errs.append(FieldError("plan.data_parallel_shard_size", "data_parallel_shard_size with a "
                               "mixture-of-experts model is not modelled (the routed experts' "
                               "expert-data-parallel shards)", rule=NOT_MODELLED))
    errs += framework_plan_errors(m, pl)
    if pl.recompute == "selective_op":
        if m.is_moe:
            errs.append(FieldError("plan.recompute", "recompute='selective_op' with a mixture-of-"
                                   "experts model is not modelled (grouped GEMMs and all-to-alls "
                                   "in torchtitan's save list)", rule=NOT_MODELLED))
        if m.attention_kernel != "flash":
            errs.append(FieldError("plan.recompute", "recompute='selective_op' needs "
                                   "model.attention_kernel = flash: torchtitan saves the output of "
                                   "its fused attention (SDPA); the unfused core's batched GEMMs "
                                   "and softmax are not in its save list (not modelled)", rule=NOT_MODELLED))
    return errs


def _pipeline_split_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Rules of the layers' split over the pipeline stages: the custom layout
    (:func:`pipeline_layout_errors`), the stages' layer counts (:func:`stage_layer_counts`,
    each error named by the field that chose the split), a layout whose first stage holds
    only the embedding under a schedule that splits the backward, and
    ``recompute_num_layers`` at most the layers of the largest model chunk."""
    p = pl.pipeline_parallel
    errs: list[FieldError] = []
    layout = pipeline_layout_text(pl)
    layout_errs = [] if layout is None else pipeline_layout_errors(
        layout, m.num_layers, m.mtp_num_layers if is_int(m.mtp_num_layers) else 0, p,
        layout_chunks(pl) if is_int(pl.virtual_pipeline_stages or 1) else 1)
    errs += [FieldError("plan.pipeline_model_parallel_layout", e) for e in layout_errs]
    mtp = m.mtp_num_layers if is_int(m.mtp_num_layers) else None  # the layout hint's m count
    try:
        counts = None if layout_errs else stage_layer_counts(m.num_layers, pl, mtp)
    except ValueError as exc:
        uneven = pl.first_stage_layers is not None or pl.last_stage_layers is not None
        counts = None
        field = ("plan.account_for_embedding_in_pipeline_split"
                 if pl.account_for_embedding_in_pipeline_split else
                 "plan.account_for_loss_in_pipeline_split" if pl.account_for_loss_in_pipeline_split
                 else "plan.first_stage_layers" if uneven else "plan.pipeline_parallel")
        if layout is not None:
            field = "plan.pipeline_model_parallel_layout"
        rule = (UNEVEN_PIPELINE_SPLIT if isinstance(exc, PipelineSplitError)
                else NOT_MODELLED if isinstance(exc, NotModelledError) else "")
        errs.append(FieldError(field, str(exc), rule=rule))
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
                                   "weight gradient", rule=NOT_MODELLED))
    n = pl.recompute_num_layers
    if counts is not None and is_int(n):
        # Megatron's block method counts per model chunk (TransformerBlock): each pipeline stage,
        # or each of its v virtual stages under the interleaved schedule; a layout may leave one
        # empty
        v = layout_chunks(pl) if is_int(pl.virtual_pipeline_stages or 1) else 1
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
    return errs


def _batch_schedule_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """``B`` divisible by ``d*b``, then the pipeline schedule's own rules
    (:func:`core.schedules.schedule_errors`: micro-batches, virtual stages, the layers per
    virtual stage unless a custom layout places them)."""
    d, b, B = pl.data_parallel, pl.micro_batch_size, pl.global_batch_size
    layout = pipeline_layout_text(pl)
    errs: list[FieldError] = []
    if B % (d * b):
        errs.append(FieldError("plan.global_batch_size", f"global_batch_size={B} is not divisible by "
                               f"micro_batch_size*data_parallel_size={b}*{d}={b * d}"))
    else:
        from core.schedules import schedule_errors  # numpy: not on the `vtrain --help` path
        extra = pipeline_split_slots(m.num_layers, pl) - m.num_layers
        L, p, v = m.num_layers, pl.pipeline_parallel, layout_chunks(pl)
        # layers that split over p but not over its p*v virtual stages: what does (where they
        # do not split over p, the split rule's message names it already)
        mtp = m.mtp_num_layers if is_int(m.mtp_num_layers) else None
        hint = (layer_split_hint(L, pl, mtp) if layout is None and not extra and v > 1 and p > 0
                and L % p == 0 and L % (p * v) else "")
        errs += [FieldError(f, msg + (hint if f == "plan.virtual_pipeline_stages" else ""))
                 for f, msg in schedule_errors(
                     pl.schedule, pl.pipeline_parallel, pl.num_microbatches,
                     pl.virtual_pipeline_stages,
                     None if layout is not None else m.num_layers,  # the layout places them
                     extra)]
    return errs


def _placement_errors(m: ModelConfig, pl: ParallelPlan, c: ClusterConfig) -> list[FieldError]:
    """Rules of the ranks' placement on the nodes: the world size ``t*p*cp*d`` within
    :data:`BOUNDS`, context parallelism (:func:`_context_parallel_errors`), sequence
    parallelism's split of ``s`` over ``t``, the tensor-parallel overlap inside one NVLink
    domain, and ``t`` dividing the GPUs of a node or a multiple of them (tensor parallelism
    across nodes is allowed, and slow)."""
    t, p, d = pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel
    errs: list[FieldError] = []
    cp = pl.context_parallel
    if t * p * cp * d > BOUNDS["parallel"].hi:
        errs.append(FieldError("plan.data_parallel", f"tensor_parallel_size*pipeline_parallel_size*"
                               f"context_parallel_size*data_parallel_size={t}*{p}*{cp}*{d}="
                               f"{t * p * cp * d:,} GPUs is more than "
                               f"{BOUNDS['parallel'].hi:,.0f} ({BOUNDS['parallel'].why})"))
    errs += _context_parallel_errors(m, pl, c)
    if (cp == 1 and pl.sequence_parallel is True and t > 1 and is_int(m.seq_length)
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
                                   "domain)", rule=NOT_MODELLED))
    if t > c.gpus_per_node:
        if t % c.gpus_per_node:
            errs.append(FieldError("plan.tensor_parallel", f"tensor_parallel_size={t} spans nodes "
                                   f"unevenly: it must be a multiple of gpus_per_node={c.gpus_per_node}"))
    elif c.gpus_per_node % t:
        errs.append(FieldError("plan.tensor_parallel", f"gpus_per_node={c.gpus_per_node} is not "
                               f"divisible by tensor_parallel_size={t}"))
    return errs


def _cluster_errors(pl: ParallelPlan, c: ClusterConfig) -> list[FieldError]:
    """Rules of the plan on its GPU kind: FP8 and MXFP8 need tensor cores for them
    (:data:`GPU_FP8_DTYPES`), a plan over nodes needs a network (given or the GPU's reference
    node's) and ``gpus_per_node`` at most the NVLink domain (:data:`GPU_NVLINK_DOMAIN`); the
    GPU checks are skipped with ``cluster.profile_path``."""
    errs: list[FieldError] = []
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
            and is_int(pl.num_gpus) and is_int(c.gpus_per_node) and pl.num_gpus > c.gpus_per_node):
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
        if not is_int(size) or size < 2 or cp % size or size >= cp:
            return [FieldError("plan.cp_a2a_size", f"cp_a2a_size={size} must divide "
                               f"context_parallel_size={cp} and be smaller than it (the ring "
                               "joins at least two all-to-all groups); use a2a for one group")]
    a = size if kind == "a2a+p2p" else cp
    errs = []
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
                               "(the ring's steps of a banded mask)", rule=NOT_MODELLED))
    if getattr(m, "softmax_type", "vanilla") != "vanilla":
        errs.append(FieldError("plan.context_parallel", f"context_parallel_size={cp} with "
                               f"softmax_type={m.softmax_type!r} is not modelled (the ring's "
                               "merge of partial softmaxes with the extra logit)", rule=NOT_MODELLED))
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
    * The ``flex`` token dispatcher needs ``etp * ep > 1`` (Megatron-Core 0.16
      ``MoEFlexTokenDispatcher.__init__``: ``assert self.tp_size * self.ep_size > 1, "Flex
      token dispatcher requires TPxEP > 1"``, the sizes of the expert tensor-parallel and
      expert-parallel groups).
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
    if not all(is_int(x) and x >= 1 for x in (ep, t, d, cp, m.num_experts)) or \
            (etp_set is not None and not (is_int(etp_set) and etp_set >= 1)):
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
                               "not modelled", rule=NOT_MODELLED))
    disp = getattr(pl, "moe_token_dispatcher_type", "alltoall")
    if disp == "flex" and etp * ep == 1:
        errs.append(FieldError("plan.moe_token_dispatcher_type", "moe_token_dispatcher_type="
                               f"'flex' with expert_tensor_parallel*expert_parallel={etp}*{ep}=1: "
                               "Megatron-Core's flex dispatcher needs more than one rank in the "
                               "expert tensor-and-expert-parallel group (MoEFlexTokenDispatcher "
                               "asserts 'Flex token dispatcher requires TPxEP > 1', "
                               "transformer/moe/token_dispatcher.py); use alltoall, or "
                               "expert_parallel or expert_tensor_parallel > 1"))
    if ep > 1 and pl.precision == "fp16":
        errs.append(FieldError("plan.precision", f"expert_parallel={ep} with precision='fp16': "
                               "Megatron-LM does not support expert parallelism with fp16 "
                               "training (use bf16)"))
    fe = m.moe_ffn_hidden_size or m.ffn
    if is_int(fe) and fe % etp:
        errs.append(FieldError("plan.expert_tensor_parallel", f"moe_ffn_hidden_size={fe} is not "
                               f"divisible by expert_tensor_parallel={etp}"))
    if m.num_shared_experts and is_int(fe) and (m.num_shared_experts * fe) % t:
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
    if is_int(p) and p > 1 and not (sched is not None and sched.in_megatron
                                     and sched.uses_virtual_stages):
        errs.append(FieldError(name, f"overlap_moe_expert_parallel_comm with pipeline_parallel="
                               f"{p} needs the interleaved schedule (Megatron-Core: virtual "
                               f"pipeline stages must be set), not {pl.schedule!r}"))
    elif is_int(p) and p == 1 and sched is not None and not sched.in_megatron:
        errs.append(FieldError(name, f"overlap_moe_expert_parallel_comm runs Megatron-Core's "
                               f"combined 1F1B schedule, not {pl.schedule!r} (use 1f1b)"))
    if pl.recompute == "full":
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with full recomputation: "
                               "Megatron-Core needs it disabled"))
    elif pl.recompute == "selective_op":
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with torchtitan's per-op "
                               "checkpointing (selective_op) is not modelled", rule=NOT_MODELLED))
    elif pl.recompute == "selective" and "moe" in recompute_modules(pl):
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with the recompute module "
                               "moe: Megatron-Core needs moe out of recompute_modules"))
    if pl.precision == "fp32":
        errs.append(FieldError(name, "overlap_moe_expert_parallel_comm with precision='fp32': "
                               "Megatron-Core supports it with a bf16 or fp16 model only"))
    if is_int(m.mtp_num_layers) and m.mtp_num_layers > 1:
        errs.append(FieldError(name, f"overlap_moe_expert_parallel_comm with mtp_num_layers="
                               f"{m.mtp_num_layers}: Megatron-Core supports at most one "
                               "multi-token prediction layer with it"))
    return errs


def _mla_plan_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Rules of a plan for multi-head latent attention: the recompute module ``mla_up_proj``
    (Megatron-Core: MLA's up-projections under ``CheckpointWithoutOutput``) needs an MLA model;
    not modelled: ``tp_comm_overlap`` (the userbuffer overlap pairs of MLA's latent
    collectives), torchtitan's per-op recomputation, and with context parallelism (cp > 1;
    Megatron-Core 0.16.1 runs MLA through Transformer Engine 2.20's context-parallel attention,
    whose p2p, all_gather, a2a and a2a+p2p functions all take Q/K and V of their own head
    sizes, modelled with :func:`core.model.context_parallel.cp_head_sizes`):

    * ``cp_comm_type`` ``allgather``, PyTorch's ``context_parallel`` (torchtitan): not TE's;
      which SDPA backend runs MLA's unequal head sizes under it is not modelled;
    * ``recompute_modules`` ``mla_up_proj``: TE's context-parallel functions save their own
      copies of K and V (p2p: the ring's last K/V buffer, ``torch.cat`` of K and V; a2a: the
      all-to-all'd Q, K, V), which the up-projections' checkpoint does not free.

    Multi-token prediction with cp > 1 (any model) is modelled: Megatron-Core's
    ``roll_tensor(..., cp_group)`` boundary exchanges are charged on each MTP layer's forward
    (:meth:`core.sim.stage_comm.StageComm.cp_mtp_roll`)."""
    errs: list[FieldError] = []
    mla = m.multi_latent_attention is True
    mods = (parse_recompute_modules(pl.recompute_modules)
            if pl.recompute == "selective" and isinstance(pl.recompute_modules, str) else ())
    if not mla and "mla_up_proj" in mods:
        errs.append(FieldError("plan.recompute_modules", "recompute_modules: mla_up_proj needs "
                               "model.multi_latent_attention (it recomputes MLA's "
                               "up-projections)"))
    if mla and pl.recompute == "selective_op":
        errs.append(FieldError("plan.recompute", "recompute='selective_op' with multi-head latent "
                               "attention is not modelled (torchtitan's save list of MLA's "
                               "matmuls)", rule=NOT_MODELLED))
    if mla and pl.tp_comm_overlap is True:
        errs.append(FieldError("plan.tp_comm_overlap", "tp_comm_overlap with multi-head latent "
                               "attention is not modelled (the overlap of MLA's latent "
                               "all-gathers and gradient reduce-scatters with its up and down "
                               "projections)", rule=NOT_MODELLED))
    cp = pl.context_parallel if is_int(pl.context_parallel) else 1
    if mla and cp > 1 and getattr(pl, "cp_comm_type", "p2p") == "allgather":
        errs.append(FieldError("plan.cp_comm_type", "cp_comm_type='allgather' (PyTorch's "
                               "context_parallel) with multi-head latent attention is not "
                               "modelled: MLA with context parallelism is modelled through "
                               "Transformer Engine's p2p, all_gather, a2a and a2a+p2p",
                               rule=NOT_MODELLED))
    if mla and cp > 1 and "mla_up_proj" in mods:
        errs.append(FieldError("plan.recompute_modules", f"recompute_modules: mla_up_proj with "
                               f"context_parallel_size={cp} is not modelled: Transformer "
                               "Engine's context-parallel attention saves its own copies of K "
                               "and V, which the up-projections' checkpoint does not free",
                               rule=NOT_MODELLED))
    return errs


def _plan_feature_errors(pl: ParallelPlan) -> list[FieldError]:
    """Rules of sequence parallelism, recomputation, ZeRO, overlap and gradient dtype
    (Megatron-LM's argument checks where it has one): :func:`_plan_flag_errors`, then
    :func:`core.plan.sharding_rules.sharding_precision_errors`."""
    return _plan_flag_errors(pl) + sharding_precision_errors(pl)


def _plan_flag_errors(pl: ParallelPlan) -> list[FieldError]:
    """The plan's flags are booleans; the tensor-parallel overlap needs sequence parallelism;
    the ZeRO stage and the parameter-gather overlap; the layer counts are positive; the custom
    layout's conflicts; uneven first/last stages are not modelled with the interleaved
    schedule; the recomputed layers and modules need their recomputation mode."""
    errs: list[FieldError] = []
    for name in ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather",
                 "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                 "tp_comm_overlap", "gradient_accumulation_fusion", "overlap_p2p_comm"):
        if not isinstance(getattr(pl, name), bool):
            errs.append(FieldError(f"plan.{name}", f"{name}={getattr(pl, name)!r} must be true or false"))
    if (pl.overlap_p2p_comm is False and p2p_overlap_applies(pl)
            and isinstance(pl.pipeline_parallel, int) and pl.pipeline_parallel == 2):
        # Megatron-LM's validate_args (core.io.megatron.rules, rule interleaved-pipeline-size)
        errs.append(FieldError("plan.overlap_p2p_comm", "the interleaved schedule with p = 2 "
                               "needs overlap_p2p_comm (Megatron-LM: with "
                               "--no-overlap-p2p-communication the pipeline-model-parallel size "
                               "must be greater than 2)"))
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
    conflict = layout_conflict(pl)
    if conflict is not None:
        errs.append(FieldError("plan.pipeline_model_parallel_layout", conflict))
    if (pl.first_stage_layers is not None or pl.last_stage_layers is not None) and \
            _multi_chunk(pl.schedule):
        errs.append(FieldError("plan.first_stage_layers", "first_stage_layers / last_stage_layers "
                               f"with the {pl.schedule} schedule (several model chunks per stage) "
                               "are not modelled yet", rule=NOT_MODELLED))
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
                                           f"not modelled ({UNMODELLED_RECOMPUTE_MODULES[n]})",
                                           rule=NOT_MODELLED))
    return errs


#: CUDA graph modules the simulator does not model, and why (refused by name).
UNMODELLED_CUDA_GRAPH_MODULES: dict[str, str] = {
    "moe": "it captures the whole MoE layer, token dispatch and experts, whose sizes follow "
           "the routing: a graph of them needs static token buffers (Megatron-Core takes moe "
           "only with drop-and-pad MoE layers: moe_expert_capacity_factor and "
           "moe_pad_expert_input_to_capacity), and the padded or dropped tokens are not modelled",
    "mamba": "it captures Mamba layers, which the simulator's models do not have",
}


def cuda_graph_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """Rules of ``plan.cuda_graph_impl`` and ``plan.cuda_graph_modules`` (Megatron-Core's
    ``--cuda-graph-impl`` and ``--cuda-graph-modules``; :mod:`core.model.cuda_graphs`). Read from
    Megatron-Core 0.19.2 ``transformer/transformer_config.py`` ``TransformerConfig.__post_init__``
    (the same checks as 0.16.1's, there on ``cuda_graph_scope``) unless said otherwise.

    * Invalid (Megatron-Core refuses them): modules with ``full_iteration`` ("cuda_graph_modules
      must be empty"); with ``none`` they are inactive (:func:`inactive_fields`: Megatron
      ignores ``--cuda-graph-modules`` without graphs), only their names checked; each a name of
      :data:`~core.plan.parallel.CUDA_GRAPH_MODULES` (``full_iteration`` is the implementation of
      that name); with ``transformer_engine``, ``moe_preprocess`` only with ``moe_router``
      (``local`` adds the one the other lacks); ``moe_router`` or ``moe_preprocess`` without MoE
      layers ("moe cuda graph is only supported for MoE"); ``mlp`` without dense layers ("mlp
      cuda graph is only supported for dense layers"); ``local`` with ``mlp`` but not ``attn``
      on a model with MoE layers (``TransformerLayer.create_mcore_cudagraph_manager`` asserts the
      layer is dense); per-layer graphs under full recomputation ("full recompute is only
      supported with full iteration CUDA graph"); ``transformer_engine``'s ``moe_router`` with
      the recompute module ``moe``; ``transformer_engine``'s ``mlp`` under
      ``overlap_moe_expert_parallel_comm`` ("CUDA graph scope on moe and mlp is not supported";
      0.16.1 took only ``transformer_engine`` graphs there, 0.19.2 takes ``local`` and
      ``full_iteration`` too, as here).
    * Not modelled (refused by name): ``moe`` and ``mamba``
      (:data:`UNMODELLED_CUDA_GRAPH_MODULES`), a graph of a whole MoE layer (``local`` or
      ``transformer_engine`` without modules, or ``local`` with ``attn``, of a model with MoE
      layers: it captures the MoE layer as ``moe`` does), any graphs under torchtitan's per-op
      checkpointing.
    """
    impl = getattr(pl, "cuda_graph_impl", "none")
    text = getattr(pl, "cuda_graph_modules", None)
    name, mname = "plan.cuda_graph_impl", "plan.cuda_graph_modules"
    errs: list[FieldError] = []
    names = parse_cuda_graph_modules(text) if isinstance(text, str) else ()
    if names and impl == "full_iteration":
        errs.append(FieldError(mname, f"cuda_graph_modules={text!r} with cuda_graph_impl="
                               "'full_iteration': Megatron-Core needs cuda_graph_modules empty "
                               "there (the graph captures the whole forward-backward)"))
        return errs
    bad = [n for n in names if n not in CUDA_GRAPH_MODULES]
    if bad:
        hint = (" (full_iteration is cuda_graph_impl='full_iteration')"
                if "full_iteration" in bad else "")
        errs.append(FieldError(mname, f"cuda_graph_modules: {', '.join(bad)} not one of "
                               f"{', '.join(CUDA_GRAPH_MODULES)}{hint}"))
    if impl in (None, "none"):  # no graphs: the modules are inactive (inactive_fields)
        return errs
    per_layer = impl in ("local", "transformer_engine")
    if impl == "transformer_engine" and "moe_preprocess" in names and "moe_router" not in names:
        errs.append(FieldError(mname, "cuda_graph_modules: moe_preprocess needs moe_router "
                               "(Megatron-Core: moe_preprocess cuda graph is only supported with "
                               "moe_router cuda graph)"))
    moe_mods = [n for n in ("moe_router", "moe_preprocess") if n in names]
    if per_layer and moe_mods and not m.is_moe:
        errs.append(FieldError(mname, f"cuda_graph_modules: {', '.join(moe_mods)} on a model "
                               "without MoE layers (Megatron-Core: moe cuda graph is only "
                               "supported for MoE)"))
    if per_layer and "mlp" in names and m.is_moe and m.moe_first_dense_layers == 0 \
            and m.moe_layer_frequency == 1:
        errs.append(FieldError(mname, "cuda_graph_modules: mlp on a model whose layers are all "
                               "MoE layers (Megatron-Core: mlp cuda graph is only supported for "
                               "dense layers)"))
    elif impl == "local" and "mlp" in names and "attn" not in names and m.is_moe:
        errs.append(FieldError(mname, "cuda_graph_modules: mlp without attn under "
                               "cuda_graph_impl='local' on a model with MoE layers (Megatron-Core's "
                               "TransformerLayer.create_mcore_cudagraph_manager asserts a layer "
                               "graphed for mlp is dense)"))
    for n in names:
        if n in UNMODELLED_CUDA_GRAPH_MODULES:
            errs.append(FieldError(mname, f"cuda_graph_modules: {n} is not modelled "
                                   f"({UNMODELLED_CUDA_GRAPH_MODULES[n]})", rule=NOT_MODELLED))
    if per_layer and m.is_moe and (not names or (impl == "local" and "attn" in names)):
        what = "whole layers" if not names else "attn (whole layers)"
        errs.append(FieldError(name, f"cuda_graph_impl={impl!r} capturing {what} of an MoE "
                               f"model is not modelled ({UNMODELLED_CUDA_GRAPH_MODULES['moe']}); "
                               "name the modules (cuda_graph_modules, e.g. attn,moe_router,"
                               "moe_preprocess with transformer_engine)", rule=NOT_MODELLED))
    if per_layer and pl.recompute == "full":
        errs.append(FieldError(name, f"cuda_graph_impl={impl!r} with full recomputation: "
                               "Megatron-Core supports full recompute only with the full "
                               "iteration CUDA graph (cuda_graph_impl='full_iteration')"))
    if impl == "transformer_engine" and "moe_router" in names and pl.recompute == "selective" \
            and "moe" in recompute_modules(pl):
        errs.append(FieldError(mname, "cuda_graph_modules: moe_router with the recompute module "
                               "moe (Megatron-Core: moe recompute is not supported with moe_router "
                               "CUDA graph with --cuda-graph-impl transformer_engine)"))
    if impl == "transformer_engine" and "mlp" in names \
            and getattr(pl, "overlap_moe_expert_parallel_comm", False) is True:
        errs.append(FieldError(mname, "cuda_graph_modules: mlp with "
                               "overlap_moe_expert_parallel_comm (Megatron-Core: CUDA graph scope "
                               "on moe and mlp is not supported with it)"))
    if impl not in (None, "none") and pl.recompute == "selective_op":
        errs.append(FieldError(name, f"cuda_graph_impl={impl!r} with torchtitan's per-op "
                               "checkpointing (selective_op) is not modelled (CUDA graphs are "
                               "Megatron-Core's)", rule=NOT_MODELLED))
    return errs


#: :func:`validate`'s rules that need the plan's sizes to be positive integers, in its order;
#: each ``(model, plan, cluster) -> errors``.
_SIZE_RULES: tuple[Callable[[ModelConfig, ParallelPlan, ClusterConfig], list[FieldError]], ...] = (
    lambda m, pl, c: _head_split_errors(m, pl),
    lambda m, pl, c: _model_plan_errors(m, pl),
    lambda m, pl, c: _pipeline_split_errors(m, pl),
    lambda m, pl, c: _batch_schedule_errors(m, pl),
    _placement_errors,
    lambda m, pl, c: _cluster_errors(pl, c),
    lambda m, pl, c: cuda_graph_errors(m, pl),
)


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
    fixes p*v, the EP all-to-all overlap, which needs ep > 1); recomputation full, or
    selective when the plan names its modules, or none under per-layer CUDA graphs (which
    full recomputation rules out: a study tries the modes they allow). Then
    ``changes`` (a value None leaves the plan's own). What :func:`check_all_but_the_plan`
    validates, and what the sweep's reasons probe one value at a time."""
    fields = dict(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
        schedule="1f1b", virtual_pipeline_stages=None,
        # the recomputed modules are the plan's own under selective recomputation
        recompute=("selective" if plan.recompute_modules is not None else
                   "none" if getattr(plan, "cuda_graph_impl", "none") in ("local", "transformer_engine")
                   else "full"),
        recompute_num_layers=None,
        first_stage_layers=None, last_stage_layers=None, context_parallel=1, expert_parallel=1,
        expert_tensor_parallel=None, data_parallel_shard_size=None,
        pipeline_model_parallel_layout=None,
        # needs ep > 1 and no full recomputation: a study decides it with the sizes
        overlap_moe_expert_parallel_comm=False, delay_wgrad_compute=False,
        # needs 1 < t <= a node (and sequence parallelism): a study decides it with t
        tp_comm_overlap=False)
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
        "the EP all-to-all overlap (plan.overlap_moe_expert_parallel_comm)"),
    **{f"model.{name}": (lambda s: bool(s.model.multi_latent_attention),
                         "multi-head latent attention (model.multi_latent_attention)")
       for name in MLA_FIELDS},
    # Megatron-Core builds each linear with bias=add_bias_linear or its own switch
    # (add_qkv_bias: linear_qkv's); vtrain's O and MLP switches the same way
    **{f"model.{name}": (lambda s: not s.model.add_bias_linear,
                         "linear biases off (model.add_bias_linear false: with it every "
                         "linear already has its bias)")
       for name in ("add_qkv_bias", "add_proj_bias", "add_mlp_bias")},
    "model.window_attn_skip_freq": (lambda s: s.model.window_size is not None,
                                    "a sliding window (model.window_size)"),
    **{f"model.{name}": (lambda s: s.model.activation == "swiglu",
                         "a gated MLP (model.activation swiglu)")
       for name in ("activation_func_clamp_value", "glu_linear_offset")},
    "plan.virtual_pipeline_stages": (lambda s: _uses_virtual_stages(s.plan.schedule),
                                     "the interleaved schedule (plan.schedule)"),
    "plan.overlap_p2p_comm": (lambda s: p2p_overlap_applies(s.plan),
                              "the interleaved schedule (plan.schedule: Megatron-LM overlaps no "
                              "other schedule's PP send/recv)"),
    "plan.recompute_num_layers": (lambda s: s.plan.recompute == "full",
                                  "full recomputation (plan.recompute)"),
    "plan.recompute_modules": (lambda s: s.plan.recompute == "selective",
                               "selective recomputation (plan.recompute)"),
    **{f"plan.{name}": (lambda s: s.plan.precision == "fp8", "FP8 training (plan.precision)")
       for name in ("fp8_recipe", "fp8_param_gather", "fp8_impl")},
    # PyTorch's allow_tf32 acts on fp32 matmuls only: accepted with any precision (Hugging Face's
    # --bf16 --tf32 is common), greyed out where it changes nothing
    "plan.tf32": (lambda s: s.plan.precision == "fp32", "fp32 training (plan.precision)"),
    **{f"plan.{name}": (lambda s: s.plan.zero_stage >= 1,
                        "a sharded optimizer (plan.zero_stage 1 or more)")
       for name in ("overlap_param_gather", "data_parallel_shard_size")},
    "plan.gradient_accumulation_fusion": (lambda s: wgrad_accumulation(s.plan) != "none",
                                          "ZeRO 0-2 (plan.zero_stage: FSDP reduce-scatters "
                                          "each micro-batch's gradients)"),
    "plan.tp_saved_input": (lambda s: bool(s.plan.sequence_parallel)
                            and s.plan.tensor_parallel > 1,
                            "tensor and sequence parallelism (plan.tensor_parallel > 1, "
                            "plan.sequence_parallel)"),
    "plan.fsdp_fp32_params": (lambda s: fsdp_fp32_applies(s.plan),
                              "ZeRO-3 of 16-bit weights (plan.zero_stage 3, plan.precision bf16, "
                              "fp16 or fp8, no plan.use_precision_aware_optimizer)"),
    "plan.tp_comm_overlap": (lambda s: bool(s.plan.sequence_parallel),
                             "sequence parallelism (plan.sequence_parallel)"),
    **{f"plan.{name}": (lambda s: s.plan.use_precision_aware_optimizer is True,
                        "the precision-aware optimizer (plan.use_precision_aware_optimizer)")
       for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
                    "te_master_weights")},
    "plan.cuda_graph_modules": (lambda s: s.plan.cuda_graph_impl in ("local", "transformer_engine"),
                                "per-layer CUDA graphs (plan.cuda_graph_impl local or "
                                "transformer_engine)"),
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
