"""CUDA graphs: which ops of an iteration a plan's graphs capture (``plan.cuda_graph_impl``,
``plan.cuda_graph_modules``; Megatron-Core ``--cuda-graph-impl``, ``--cuda-graph-modules``).

Megatron runs its modules eagerly from Python, so each op takes the larger of its device
time and its host time (:func:`core.model.ops.combine_op_time`: ``op_overhead_s`` per call
plus ``kernel_launch_s`` per kernel). A CUDA graph replays the kernels of the modules it
captured with one launch: a captured op takes its device time only (its forward, its
backward, which the graphs capture too, and its recomputed forward under selective
recomputation, which runs inside the captured backward).

Checked against the source of Megatron-Core 0.19.2 (``megatron/core``; the names
``--cuda-graph-modules``, ``CudaGraphModule`` and the implementation ``full_iteration`` are
0.19.2's and Megatron-LM's arguments' at d98e8a64, 2026-08-22) and 0.16.1 (there
``--cuda-graph-scope`` / ``CudaGraphScope``, and ``full_iteration`` a scope of ``local``); each
fact below holds in both unless a version is named. A GPT model's layers, dense and MoE, are
``TransformerLayer`` (``models/gpt/gpt_layer_specs.py``; ``MoETransformerLayer``, whose
``local`` graphs split an MoE layer into router and post-process graphs, is only in the
hybrid / Mamba specs, which this simulator does not model). What each module captures, as this
simulator's ops (:mod:`core.model.keys`):

==================  ============================================================================
module              ops captured
==================  ============================================================================
``attn``            ``transformer_engine``: ``TransformerLayer._te_cuda_graph_capture`` runs
                    ``_forward_attention``: the input norm, the attention (QKV, core,
                    projection; MLA's latent parts) and its residual add: ``attention_fwd/bwd``
                    (and their parts: the core, the norm, MLA's up-projections, the
                    sliding-window variants; the forward's residual add is a kernel of the op
                    after it here, ``mlp_fwd`` or ``router_fwd``)
``mlp``             ``transformer_engine``: ``_forward_mlp`` of a dense layer (the pre-MLP norm,
                    the MLP and its residual add): ``mlp_fwd/bwd``
``moe_router``      ``transformer_engine``: an MoE layer's ``_forward_mlp`` up to
                    ``MoELayer.route`` (``MoELayer.forward``'s ``custom_forward`` runs
                    ``shared_experts_compute`` then ``route``; ``moe_utils.
                    maybe_skip_or_early_return_by_cudagraph`` ends the capture there): the
                    pre-MLP norm and the router (``router_fwd/bwd``), and the shared experts
                    unless ``moe_shared_expert_overlap``, which this simulator never sets
                    (``shared_experts_fwd/bwd``)
``moe_preprocess``  ``transformer_engine``, with ``moe_router``: ``MoELayer.preprocess`` too
                    (the dispatcher's ``dispatch_preprocess``): with the ``alltoall`` dispatcher
                    the permutation of the tokens before the all-to-all (``moe_permute_fwd/bwd``;
                    the sort by local expert after the all-to-all, in ``dispatch_postprocess``,
                    is eager in Megatron but part of that op here); with ``flex`` (DeepEP /
                    HybridEP) only the routing metadata (``MoEFlexTokenDispatcher.
                    dispatch_preprocess``), no op of this model (its permutation runs after the
                    dispatch, eagerly)
whole layer         ``transformer_engine`` with no modules (``_layer_is_graphable`` takes every
                    layer; the graph runs ``_forward_attention`` and ``_forward_mlp``), or
                    ``local`` with no modules: ``attn`` and ``mlp`` of every dense layer
``local`` with      ``TransformerLayer.create_mcore_cudagraph_manager``: a layer gets one
modules             ``CudaGraphManager`` over its whole forward when ``attn`` is named (any
                    layer) or ``mlp`` is (dense layers), else none: ``attn`` and ``mlp`` of every
                    dense layer when either is named; nothing when only ``moe_router`` /
                    ``moe_preprocess`` are (no GPT layer is graphed for them)
``full_iteration``  ``full_cuda_graph.FullCudaGraphWrapper`` around ``forward_backward_func``:
                    every forward, backward and recomputed op of every micro-batch, the
                    embedding, the output layer and loss, the multi-token prediction layers;
                    not the optimizer step (``optimizer.step`` runs after
                    ``forward_backward_func``; ``--optimizer-cuda-graph``, which 0.19.2's
                    ``OptimizerConfig.optimizer_cuda_graph`` passes to the optimizer as
                    ``capturable``, is not represented) nor the FP8 weights' re-quantization
                    this simulator times with it
==================  ============================================================================

Refused (:func:`core.plan.rules.cuda_graph_errors`, which cites Megatron-Core's checks in
``TransformerConfig.__post_init__``): by name (rule ``not modelled``) ``moe`` and a whole MoE
layer (the whole layer of an MoE model, or ``local`` with ``attn`` there: a graph of the token
dispatch and the experts needs static token buffers, whose sizes the routing sets; Megatron-Core
takes ``moe`` only with drop-and-pad MoE layers, and padded or dropped tokens are not
modelled), ``mamba`` (no Mamba layers here) and torchtitan's per-op checkpointing (no Megatron
graphs there); as invalid, what Megatron-Core refuses, among them per-layer graphs under full
recomputation (only ``full_iteration`` takes it). A full-iteration graph of an MoE model is
timed: its dispatch needs static receive buffers too (the Megatron-Bridge recipes set HybridEP's
``moe_expert_rank_capacity_factor``), which under balanced routing drop no token and leave the
experts the routed tokens' work (as :mod:`core.accuracy.bridge_recipes` reads that factor);
padding the experts' inputs to a capacity (drop-and-pad) is what is not modelled. The
multi-token prediction layers' transformer layers are captured as the decoder's (the same ops;
``TECudaGraphHelper`` takes ``mtp.layers[i].transformer_layer``). Collectives, pipeline
transfers and the optimizer keep their times: no host time of theirs is modelled apart.

Memory: the graphs' static inputs, outputs and intermediate buffers live in private memory
pools that this simulator does not count (:func:`cuda_graph_memory_note`).
"""

from __future__ import annotations

from core.model.keys import DERIVED_OPS
from core.plan.parallel import cuda_graph_modules

__all__ = ["SCOPE_OPS", "FULL_ITERATION_EXCLUDED_OPS", "captured_ops", "is_captured",
           "cuda_graph_memory_note", "uses_cuda_graphs"]


#: Base ops (derived ops follow their base, :data:`core.model.keys.DERIVED_OPS`) each modelled
#: Megatron module captures under ``transformer_engine`` (module doc); ``moe_preprocess`` with
#: the ``alltoall`` dispatcher.
SCOPE_OPS: dict[str, tuple[str, ...]] = {
    "attn": ("attention_fwd", "attention_bwd"),
    "mlp": ("mlp_fwd", "mlp_bwd"),
    "moe_router": ("router_fwd", "router_bwd", "shared_experts_fwd", "shared_experts_bwd"),
    "moe_preprocess": ("moe_permute_fwd", "moe_permute_bwd"),
}


#: Ops a full-iteration graph leaves eager: the optimizer step and the FP8 weights'
#: re-quantization timed with it (they run after ``forward_backward_func``).
FULL_ITERATION_EXCLUDED_OPS = frozenset({"optimizer_step", "fp8_weight_cast"})


def uses_cuda_graphs(plan) -> bool:
    """Whether ``plan`` captures anything in CUDA graphs (``cuda_graph_impl`` not ``none``)."""
    return getattr(plan, "cuda_graph_impl", "none") not in (None, "none")


def captured_ops(plan) -> frozenset[str] | None:
    """Base ops ``plan``'s CUDA graphs capture; ``None`` for a full-iteration graph (every op
    but :data:`FULL_ITERATION_EXCLUDED_OPS`), empty without graphs. Assumes a plan that
    :func:`core.plan.rules.validate` accepts (a refused scope captures nothing here)."""
    impl = getattr(plan, "cuda_graph_impl", "none")
    if impl == "full_iteration":
        return None
    if impl not in ("local", "transformer_engine"):
        return frozenset()
    mods = cuda_graph_modules(plan)
    if not mods:  # the whole layer
        mods = ("attn", "mlp")
    elif impl == "local":  # a dense layer graphed whole for attn or mlp; MoE modules: none
        mods = ("attn", "mlp") if "attn" in mods or "mlp" in mods else ()
    if "moe_preprocess" in mods and getattr(plan, "moe_token_dispatcher_type", "alltoall") != "alltoall":
        mods = tuple(m for m in mods if m != "moe_preprocess")  # flex: metadata only
    return frozenset(op for m in mods for op in SCOPE_OPS.get(m, ()))


def is_captured(op: str, captured: frozenset[str] | None) -> bool:
    """Whether ``op`` (a base or derived op) runs inside a graph of :func:`captured_ops`
    ``captured``."""
    if captured is None:
        return op not in FULL_ITERATION_EXCLUDED_OPS
    return DERIVED_OPS.get(op, op) in captured


def cuda_graph_memory_note(plan) -> str | None:
    """The report's caveat on memory under CUDA graphs (None without them)."""
    if not uses_cuda_graphs(plan):
        return None
    return (f"CUDA graphs (cuda_graph_impl={plan.cuda_graph_impl}): the memory per GPU does not "
            "count the graphs' private memory pools (their static inputs, outputs and "
            "intermediate buffers)")
