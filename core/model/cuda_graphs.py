"""CUDA graphs: which ops of an iteration a plan's graphs capture (``plan.cuda_graph_impl``,
``plan.cuda_graph_modules``; Megatron-Core ``--cuda-graph-impl``, ``--cuda-graph-modules``).

Megatron runs its modules eagerly from Python, so each op takes the larger of its device
time and its host time (:func:`core.model.ops.combine_op_time`: ``op_overhead_s`` per call
plus ``kernel_launch_s`` per kernel). A CUDA graph replays the kernels of the modules it
captured with one launch: a captured op takes its device time only (its forward, its
backward, which the graphs capture too, and its recomputed forward under selective
recomputation, which runs inside the captured backward). What each Megatron scope captures
(Megatron-Core's ``--cuda-graph-scope`` help text and ``TransformerLayer``'s graphed forward,
as of Megatron-Core 0.15-0.19; the names and the default ``none`` from Megatron-LM's arguments
at d98e8a64, 2026-08-22), as this simulator's ops (:mod:`core.model.keys`):

==================  ============================================================================
scope               ops captured
==================  ============================================================================
``attn``            ``TransformerLayer._forward_attention``: the input norm, the attention
                    (QKV, core, projection; MLA's latent parts) and its residual add:
                    ``attention_fwd/bwd`` (and their parts: the core, the norm, MLA's
                    up-projections, the sliding-window variants)
``mlp``             ``_forward_mlp`` of a dense layer: the pre-MLP norm, the MLP and its
                    residual add: ``mlp_fwd/bwd``
``moe_router``      ``_forward_mlp`` of an MoE layer up to ``MoELayer.router``: the pre-MLP norm
                    and the router (``router_fwd/bwd``), and the shared experts, which this
                    simulator never overlaps with the expert all-to-all
                    (``shared_experts_fwd/bwd``)
``moe_preprocess``  ``MoELayer``'s dispatch preprocessing (needs ``moe_router``): with the
                    ``alltoall`` dispatcher the permutation of the tokens before the
                    all-to-all (``moe_permute_fwd/bwd``); with ``flex`` (DeepEP / HybridEP)
                    only the routing metadata, no op of this model (its permutation runs after
                    the dispatch, eagerly)
whole layer         ``local``, or ``transformer_engine`` with no modules: ``attn`` and ``mlp``
                    of every dense layer
``full_iteration``  ``forward_backward_func`` (``FullCudaGraphWrapper``): every forward,
                    backward and recomputed op of every micro-batch, the embedding, the output
                    layer and loss, the multi-token prediction layers; not the optimizer step
                    (``optimizer.step`` runs after ``forward_backward_func``; Megatron's
                    separate ``--optimizer-cuda-graph`` is not represented) nor the FP8
                    weights' re-quantization this simulator times with it
==================  ============================================================================

Refused by name (:func:`core.plan.rules.cuda_graph_errors`, rule ``not modelled``): ``moe`` and
the whole layer of an MoE model (a graph of the token dispatch and the experts needs static
token buffers, whose sizes the routing sets: Megatron-Core's help says drop-and-pad MoE layers
only; padded or dropped tokens are not modelled), ``mamba`` (no Mamba layers here), per-layer graphs under
full recomputation (whether the recomputed layer replays the graph is not modelled;
``full_iteration`` captures the recomputation with the rest) or torchtitan's per-op
checkpointing (no Megatron graphs there). A full-iteration graph of an MoE model is timed: its
dispatch needs static receive buffers too (the Megatron-Bridge recipes set HybridEP's
``moe_expert_rank_capacity_factor``), which under balanced routing drop no token and leave the
experts the routed tokens' work (as :mod:`core.accuracy.bridge_recipes` reads that factor);
padding the experts' inputs to a capacity (drop-and-pad) is what is not modelled. The
multi-token prediction layers' transformer layers are captured as the decoder's (the same ops).
Collectives, pipeline transfers and the optimizer keep their times: no host time of theirs is
modelled apart.

Memory: the graphs' static inputs, outputs and intermediate buffers live in private memory
pools that this simulator does not count (:func:`cuda_graph_memory_note`).
"""

from __future__ import annotations

from core.model.keys import DERIVED_OPS
from core.plan.parallel import cuda_graph_modules

__all__ = ["SCOPE_OPS", "FULL_ITERATION_EXCLUDED_OPS", "captured_ops", "is_captured",
           "cuda_graph_memory_note", "uses_cuda_graphs"]


#: Base ops (derived ops follow their base, :data:`core.model.keys.DERIVED_OPS`) each modelled
#: Megatron scope captures (module doc); ``moe_preprocess`` with the ``alltoall`` dispatcher.
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
    mods = cuda_graph_modules(plan) or ("attn", "mlp")  # local, or TE's whole layer
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
