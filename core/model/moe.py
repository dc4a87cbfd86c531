"""Mixture of experts (Megatron-Core ``MoELayer``): router, token permutation, routed and shared
experts: parameters (total and active), FLOPs, kernels of :data:`core.model.keys.MOE_OPS`,
activation bytes; expert parallelism's groups and the flex dispatcher's remote copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from core.model.base import DTYPE_BYTES, Kernel, gemm, mem, wgrad_accumulate, wgrad_accumulate_bytes
from core.model.fp8 import linear_kernels
from core.model.layer import (attention_parameters, dense_activation_bytes_per_layer,
                              dense_forward_flops_per_token)
from core.model.mlp import glu_clamp_kernels, is_gated, mlp_parameters
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, recompute_modules, tensor_dtype

__all__ = [
    "MoeLayerParameters", "expert_data_parallel", "expert_tensor_parallel", "gradients_reduced",
    "flex_remote_node_copies", "flex_remote_copies_uneven", "moe_activation_bytes_per_layer", "moe_ffn",
    "moe_forward_flops_per_token", "moe_layer_mask", "moe_layer_parameters", "moe_op_kernels",
    "moe_routed_rows", "num_moe_layers", "sorts_chunks",
]


def flex_remote_copies_uneven(top_k: int, node_experts: list[int] | tuple[int, ...],
                              num_groups: int | None = None,
                              group_topk: int | None = None) -> float:
    """:func:`flex_remote_node_copies` (no node-limited groups) over nodes that hold unequal
    shares of the experts: an expert-parallel group laid over nodes its ranks do not fill
    evenly (128 ranks 2 apart on GB200 NVL72's 72-GPU domains: 36, 36, 36 and 20 ranks per
    node). A token starts on node ``j`` with the share of the group's ranks there,
    ``o_j / E`` (each rank holds ``E / ep`` experts and as many tokens), and reaches another
    node ``i`` unless none of its ``top_k`` uniform distinct experts is among the ``o_i``
    there: ``sum_j (o_j / E) sum_(i != j) (1 - C(E - o_i, k) / C(E, k))``, ``E = sum o``.
    With equal shares it is :func:`flex_remote_node_copies`' ``(N - 1)(1 - C(E - E/N, k) /
    C(E, k))``. With node-limited routing (``num_groups`` G, ``group_topk`` M < G) a node's
    chance to be reached is :func:`flex_remote_node_copies`' (the M groups uniform, ``k/M``
    experts uniform in each) over the experts the node holds of each group, the nodes holding
    consecutive experts in rank order.

    Raises
    ------
    ValueError
        A share below 1, ``top_k`` below 1 or above the experts, or groups that do not split
        the experts or hold fewer than ``top_k`` experts."""
    o = [int(x) for x in node_experts]
    E, k = sum(o), int(top_k)
    if not o or min(o) < 1 or not 1 <= k <= E:
        raise ValueError(f"node_experts={o}, top_k={k}: every node needs an expert and top_k "
                         "must be from 1 to the experts")
    if num_groups and num_groups > 1 and group_topk not in (None, num_groups):
        G, M = int(num_groups), int(group_topk)
        if E % G or not 1 <= M <= G or M * (E // G) < k:
            raise ValueError(f"num_groups={G}, group_topk={M}: the groups must split the "
                             f"{E} experts evenly and the chosen ones hold at least top_k={k}")
        reached = _group_limited_reach(k, tuple(o), G, M)
        return float(sum(r * (1.0 - oi / E) for r, oi in zip(reached, o)))
    total = math.comb(E, k)
    reach = [1.0 - math.comb(E - oi, k) / total for oi in o]
    all_reach = sum(reach)
    return sum(oj / E * (all_reach - reach[j]) for j, oj in enumerate(o))


def flex_remote_node_copies(num_experts: int, top_k: int, num_nodes: int,
                            num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected copies of one token that leave its node under a node-deduplicating dispatcher
    (Megatron-Core's ``flex`` dispatcher: DeepEP / HybridEP, which send a token once to each
    other node that holds one of its experts and forward it there over NVLink), with the
    ``num_experts`` experts spread evenly over ``num_nodes`` nodes and each token routed to
    ``top_k`` distinct experts uniformly (balanced routing):
    ``(N - 1) (1 - C(E - E/N, k) / C(E, k))``, the other nodes times the chance that at least
    one of the token's experts is there. The plain all-to-all sends ``k (N - 1)/N`` copies
    (every expert's copy): Qwen3-30B-A3B (E = 128, k = 8) over 2 nodes, 0.996 against 4.

    Node-limited routing (``num_groups`` G, ``group_topk`` M; Megatron-Core
    ``moe_utils.group_limited_topk``, DeepSeek-V3's "each token is sent to at most 4 nodes"):
    the experts split into G contiguous groups of ``s = E/G``; a token's M groups are those with
    the highest sum of their top ``k/M`` scores, and its k experts the top k among them, so
    nearly every chosen group supplies about ``k/M`` of them. Modelled so: the M groups
    uniform (balanced routing), ``k/M`` experts uniform within each (with ``k = qM + r``, r
    groups of ``q + 1``: each group misses a node holding ``o`` of its experts with
    ``((M - r) C(s - o, q) + r C(s - o, q + 1)) / (M C(s, q))`` on average). A node is missed
    with the mean over the ``C(G, M)`` group choices of the product of its groups' misses,
    ``e_M(miss_1 .. miss_G) / C(G, M)`` (the elementary symmetric polynomial, no enumeration);
    the copies are ``(N - 1)/N`` times the sum over the nodes of the chance to be reached (the
    token's own node is any of the N alike). With ``M = G`` (or no groups) the formula above.
    DeepSeek-V3 (E = 256, k = 8, G = 8, M = 4) over 8 nodes, a group per node: each chosen
    group's node is reached, ``7/8 * 4 = 3.5`` copies, against 4.63 without the limit and 7
    with the plain all-to-all (a simulation of Megatron's routing on uniform scores: 3.46).

    Raises
    ------
    ValueError
        ``num_nodes`` does not divide ``num_experts``, a size below 1, or groups that do not
        split the experts or hold fewer than ``top_k`` experts.
    """
    E, k, N = int(num_experts), int(top_k), int(num_nodes)
    if min(E, k, N) < 1 or E % N or k > E:
        raise ValueError(f"num_experts={E}, top_k={k}, num_nodes={N}: the nodes must split the "
                         "experts evenly and top_k be at most num_experts")
    if N == 1:
        return 0.0
    if not num_groups or num_groups == 1:
        miss = math.comb(E - E // N, k) / math.comb(E, k)  # none of the k experts on that node
        return (N - 1) * (1.0 - miss)
    G, M = int(num_groups), int(group_topk or num_groups)
    if E % G or not 1 <= M <= G or M * (E // G) < k:
        raise ValueError(f"num_groups={G}, group_topk={M}: the groups must split the "
                         f"{E} experts evenly and the chosen ones hold at least top_k={k}")
    if M == G:  # every group chosen: the top k of all experts
        return flex_remote_node_copies(E, k, N)
    return _group_limited_copies(E, k, N, G, M)


@lru_cache(maxsize=256)
def _group_limited_copies(E: int, k: int, N: int, G: int, M: int) -> float:
    """:func:`flex_remote_node_copies` with node-limited routing (cached)."""
    s = E // G
    expert = np.arange(E)
    overlap = np.zeros((N, G), np.int64)  # experts of node n in group g
    np.add.at(overlap, (expert // (E // N), expert // s), 1)
    q, r = divmod(k, M)

    def miss(n: int) -> np.ndarray:  # a group with o of a node's experts misses it, by o
        return np.array([math.comb(s - o, n) for o in range(s + 1)], float) / math.comb(s, n)
    per_group = ((M - r) * miss(q) + r * miss(min(q + 1, s))) / M  # (s + 1,)
    x = per_group[overlap]  # (N, G): each group's chance to miss each node
    e = np.zeros((N, M + 1))
    e[:, 0] = 1.0
    for g in range(G):  # elementary symmetric polynomials e_j of x[:, :g+1], j <= M
        e[:, 1:] = e[:, 1:] + e[:, :-1] * x[:, g:g + 1]
    reached = 1.0 - e[:, M] / math.comb(G, M)
    return (N - 1) / N * float(reached.sum())


@lru_cache(maxsize=256)
def _group_limited_reach(k: int, shares: tuple[int, ...], G: int, M: int) -> tuple[float, ...]:
    """Each node's chance to be reached by a token under node-limited routing, the nodes
    holding ``shares`` consecutive experts (:func:`_group_limited_copies`' terms, any shares)."""
    E, N = sum(shares), len(shares)
    s = E // G
    expert = np.arange(E)
    overlap = np.zeros((N, G), np.int64)
    np.add.at(overlap, (np.repeat(np.arange(N), shares), expert // s), 1)
    q, r = divmod(k, M)

    def miss(n: int) -> np.ndarray:
        return np.array([math.comb(s - o, n) for o in range(s + 1)], float) / math.comb(s, n)
    per_group = ((M - r) * miss(q) + r * miss(min(q + 1, s))) / M
    x = per_group[overlap]
    e = np.zeros((N, M + 1))
    e[:, 0] = 1.0
    for g in range(G):
        e[:, 1:] = e[:, 1:] + e[:, :-1] * x[:, g:g + 1]
    return tuple(float(v) for v in 1.0 - e[:, M] / math.comb(G, M))


def expert_tensor_parallel(plan: ParallelPlan) -> int:
    """Expert tensor-parallel size ``etp``: ``plan.expert_tensor_parallel``, or ``t`` when unset
    (Megatron-Core's ``--expert-tensor-parallel-size`` default)."""
    return plan.expert_tensor_parallel or plan.tensor_parallel


def expert_data_parallel(plan: ParallelPlan) -> int:
    """Expert-data-parallel size ``edp = t*cp*d / (etp*ep)``: the ranks that hold the same
    experts and reduce their gradients (Megatron-Core ``parallel_state``: the expert rank
    generator over tp-ep-dp-pp with ``world / (etp*ep*p)`` data-parallel ranks)."""
    cp = getattr(plan, "context_parallel", 1) or 1
    return max(1, plan.tensor_parallel * cp * plan.data_parallel
               // (expert_tensor_parallel(plan) * plan.expert_parallel))


def gradients_reduced(model: ModelConfig, plan: ParallelPlan) -> bool:
    """Whether gradients are reduced across GPUs: ``d*cp > 1`` (Megatron-Core reduces them over
    ``get_data_parallel_group(with_context_parallel=True)``), or an MoE model whose routed
    experts have ``edp > 1`` replicas (:func:`expert_data_parallel`; with ``d*cp = 1`` and
    ``t > etp*ep``). Where they are not, the plan's ZeRO stage and its ``overlap_grad_reduce``
    and ``overlap_param_gather`` change nothing that is timed."""
    return plan.dp_cp_size > 1 or (bool(model.is_moe) and expert_data_parallel(plan) > 1)


def moe_layer_mask(model: ModelConfig) -> np.ndarray:
    """Which layers are MoE layers, bool array shape (L,): layer ``i`` (0-based) when the model
    has experts, ``i >= moe_first_dense_layers`` and ``i % moe_layer_frequency == 0``
    (Megatron-Core's ``--moe-layer-freq k`` pattern ``[1 if i % k == 0 else 0]``; Hugging Face
    DeepSeek's ``first_k_dense_replace`` and ``moe_layer_freq``). The others keep the dense MLP."""
    i = np.arange(model.num_layers)
    if not model.is_moe:
        return np.zeros(model.num_layers, bool)
    return (i >= model.moe_first_dense_layers) & (i % model.moe_layer_frequency == 0)


def num_moe_layers(model: ModelConfig) -> int:
    """How many layers :func:`moe_layer_mask` marks, in closed form (no per-layer array: the
    editor asks for sizes before they are checked): the multiples of ``moe_layer_frequency``
    from ``moe_first_dense_layers`` to ``L - 1``; 0 for a dense model."""
    if not model.is_moe:
        return 0
    k, first, L = model.moe_layer_frequency, model.moe_first_dense_layers, model.num_layers
    return max(0, (L - 1) // k - (-(-first // k)) + 1)


def moe_ffn(model: ModelConfig) -> int:
    """Hidden size of one expert's MLP: ``moe_ffn_hidden_size``, or the dense MLP's when unset."""
    return model.moe_ffn_hidden_size or model.ffn


@dataclass(frozen=True)
class MoeLayerParameters:
    """Parameters of one MoE layer by how they are split over the GPUs.

    ``sharded``: over ``t`` (attention and the shared experts' MLP); ``replicated``: norms,
    the router's ``h x E`` gate (Megatron-Core keeps it on every rank) and replicated biases;
    ``experts``: the ``E`` routed experts, split over ``ep * etp`` ranks; ``expert``: one
    routed expert.
    """

    sharded: float
    replicated: float
    experts: float
    expert: float


def moe_layer_parameters(model: ModelConfig) -> MoeLayerParameters:
    """Parameters of one MoE layer: the attention half (:func:`attention_parameters`), the
    pre-MLP norm, the router gate ``h E`` (and its bias ``E`` with ``add_bias_linear``:
    Megatron-Core's ``TopKRouter``; GPT-OSS's router bias), ``E`` experts each an MLP of ``moe_ffn`` width
    with the model's activation (:func:`mlp_parameters`; Mixtral: ``3 h f_e``) and the shared
    experts as one dense MLP of ``num_shared_experts * moe_ffn`` width (Megatron-Core
    ``SharedExpertMLP``)."""
    h, E = model.hidden_size, model.num_experts or 0
    fe = moe_ffn(model)
    attn_sh, attn_rep = attention_parameters(model)
    expert_w, mlp_rep = mlp_parameters(model, fe)  # mlp_rep: pre-MLP norm (+ fc2 bias)
    expert = expert_w + (h if model.add_bias_linear else 0)  # each expert's own fc2 bias
    norm = 2 * h if model.normalization == "layernorm" else h
    shared = mlp_parameters(model, model.num_shared_experts * fe)[0] if model.num_shared_experts else 0
    shared_bias = h if (model.num_shared_experts and model.add_bias_linear) else 0
    router_bias = E if model.add_bias_linear else 0  # TopKRouter's bias (add_bias_linear)
    return MoeLayerParameters(attn_sh + shared, attn_rep + norm + h * E + router_bias + shared_bias,
                              E * expert, expert)


def moe_forward_flops_per_token(model: ModelConfig) -> float:
    """Forward FLOPs per token of one MoE layer, counting the GEMMs a token passes through:
    the attention half as a dense layer's, the router ``2hE``, its ``k`` experts'
    ``4 h f_e`` each (``6 h f_e`` gated) and the shared experts' MLP (model FLOPs on the
    active parameters, as MFU of MoE models is reported)."""
    h, E, k = model.hidden_size, model.num_experts or 0, model.moe_top_k
    per_f = (6 if is_gated(model.activation) else 4) * h
    dense_layer, _, _ = dense_forward_flops_per_token(model, 1)
    attention = dense_layer - per_f * model.ffn
    return attention + 2 * h * E + per_f * moe_ffn(model) * (k + model.num_shared_experts)


def moe_routed_rows(key: Mapping[str, Any]) -> float:
    """Token copies one GPU's experts process per micro-batch: ``b s k etp imb / t``.

    With balanced routing the ``d b s`` tokens of a step (``t`` ranks each) send ``k``
    copies each, spread evenly over ``E`` experts; each expert lives on ``edp = t d /
    (etp ep)`` replicas, split over ``etp`` ranks that all see its tokens: per GPU
    ``E/ep`` local experts of ``b s k etp ep / (E t)`` tokens; ``imb`` scales it to the
    busiest rank, which sets the step's time."""
    T = int(key["b"]) * int(key["s"])
    return T * int(key["topk"]) * int(key["etp"]) * float(key["imb"]) / int(key["t"])


def moe_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of an MoE layer's op (:data:`MOE_OPS`). (The ops' kernel lists
    are written out in execution order, by part: :func:`_moe_routing_kernels`,
    :func:`_moe_experts_kernels`, :func:`_moe_shared_experts_kernels`; read them against
    Megatron-Core's ``MoELayer``.)

    ``T = b s`` tokens; ``T_in = T/t`` enter the layer on a rank with sequence parallelism
    (``T`` without); ``R`` (:func:`moe_routed_rows`) copies reach the rank's ``E/ep``
    experts, ``M = R ep / E`` each. Router: ``(T_in, h) x (h, E)`` GEMM, softmax and top-k
    in fp32 (read the logits, write probabilities, write ``k`` probabilities and indices);
    permutation: a gather of ``k`` copies of each token (read and write ``T_in k h``) and,
    with the all-to-all dispatcher and more than one local expert, the sort of the received
    chunks by local expert (read and write ``R h``; :func:`sorts_chunks`: the ``flex``
    dispatcher, DeepEP / HybridEP, permutes the received tokens once and sorts nothing);
    experts: Megatron-Core's grouped GEMM (``TEGroupedMLP``), ``E/ep`` GEMMs of ``M`` rows,
    fc1 ``(M, h) x (h, f_e/etp)`` (``2 f_e/etp`` gated), the activation, fc2 ``(M, f_e/etp)
    x (f_e/etp, h)``; un-permutation: the weighted sum of the copies (read ``T_in k h`` and
    the probabilities, write ``T_in h``); shared experts: a dense MLP of ``ns f_e`` width on
    the ``T`` tokens of the tensor-parallel group. The residual adds and the pre-MLP norm
    are those of the dense MLP (:func:`dense_op_kernels`), split between the router and the
    un-permutation, so that with ``E = k = 1`` the MoE ops are the dense MLP's kernels plus
    the router's and the permutations'. FP8 (``dtype="fp8"``): the routed and shared
    experts' GEMMs run in FP8 with their quantization kernels, as the dense MLP's
    (:func:`linear_kernels`; TE's ``GroupedLinear`` in ``TEGroupedMLP``); the router's gate
    stays BF16 (a plain ``torch`` linear in Megatron-Core's ``TopKRouter``), and so do the
    permutations and the all-to-alls' tokens. The routed experts' quantizations are one per
    local expert (``GroupedLinear``'s ``tex.split_quantize``; ``groups`` of
    :func:`core.model.fp8.fp8_cast_kernels`).
    """
    sh = _moe_shape(key)
    if op in ("router_fwd", "router_bwd", "moe_permute_fwd", "moe_permute_bwd",
              "moe_unpermute_fwd", "moe_unpermute_bwd"):
        return _moe_routing_kernels(op, sh)
    if op in ("experts_fwd", "experts_bwd"):
        return _moe_experts_kernels(op, sh)
    if op in ("shared_experts_fwd", "shared_experts_bwd"):
        return _moe_shared_experts_kernels(op, sh)
    raise KeyError(f"unknown MoE op {op!r}")


@dataclass(frozen=True)
class _MoeShape:
    """One rank's sizes of an MoE layer's ops (see :func:`moe_op_kernels`): ``e`` bytes per
    element, ``acc`` / ``plain_acc`` per weight gradient added by a kernel of its own, of the
    linear layers / the router's gate (:func:`core.model.base.wgrad_accumulate_bytes`),
    ``linear`` / ``cast`` the linear-layer kernel makers (:func:`core.model.fp8.linear_kernels`),
    ``T = b s`` tokens and ``T_in`` those entering the layer, ``tok`` bytes of ``T_in`` hidden
    states, ``E`` experts, top-``k``, ``fe`` expert width, ``ep``, ``etp``, ``ns`` shared
    experts, ``R`` routed rows (:func:`moe_routed_rows`) over ``local = E/ep`` experts of
    ``M`` rows, ``fc1`` the experts' fc1 columns, ``inner`` bytes of their activation's output and ``sort`` the chunk sort
    kernel (:func:`sorts_chunks`)."""

    e: int
    acc: float
    plain_acc: float
    linear: Any
    cast: Any
    h: int
    t: int
    T: int
    T_in: float
    tok: float
    norm: str
    gated: bool
    E: int
    k: int
    fe: int
    etp: int
    ns: int
    R: float
    local: int
    M: float
    fc1: int
    inner: float
    sort: list
    clamp: bool
    bias: bool


def _moe_shape(key: Mapping[str, Any]) -> _MoeShape:
    """The :class:`_MoeShape` of an MoE op key (:data:`core.model.keys.MOE_KEY` columns)."""
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    acc, plain_acc = wgrad_accumulate_bytes(key, dtype)
    linear, cast = linear_kernels(key)  # FP8 experts and shared experts (TE GroupedLinear)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    E, k, fe = int(key["E"]), int(key["topk"]), int(key["fe"])
    ep, etp, ns = int(key["ep"]), int(key["etp"]), int(key.get("ns", 0))
    T = b * s
    sp = bool(key.get("sp"))
    T_in = T / t if sp else T
    tok = T_in * h * e
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    gated = is_gated(key.get("act"))
    R = moe_routed_rows(key)
    local = E // ep
    M = R / local
    fc1 = (2 if gated else 1) * fe // etp
    inner = R * (fe // etp) * e
    sort = [mem("moe_sort_chunks", 2 * R * h * e)] if sorts_chunks(key) else []
    return _MoeShape(e=e, acc=acc, plain_acc=plain_acc, linear=linear, cast=cast, h=h, t=t, T=T,
                     T_in=T_in, tok=tok,
                     norm=norm, gated=gated, E=E, k=k, fe=fe, etp=etp, ns=ns, R=R, local=local,
                     M=M, fc1=fc1, inner=inner, sort=sort,
                     clamp=bool(key.get("glc", 0)), bias=bool(key.get("eb", 0)))


def sorts_chunks(key: Mapping[str, Any]) -> bool:
    """Whether an MoE op key's dispatcher sorts the received tokens by local expert (the
    ``moe_sort_chunks`` kernel before the experts and again after them, forward and backward).

    Megatron-Core 0.19.2 ``transformer/moe/token_dispatcher.py``: only the all-to-all dispatcher
    does, ``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` and ``combine_preprocess``
    (``sort_chunks_by_idxs``), and only ``if self.num_local_experts > 1`` (``E/ep`` experts per
    rank; with one there is nothing to sort). The ``flex`` dispatcher never does:
    ``MoEFlexTokenDispatcher.dispatch_postprocess`` / ``combine_preprocess`` call its manager's
    ``get_permuted_hidden_states_by_experts`` / ``get_restored_hidden_states_by_experts``, one
    ``permute`` of the received tokens into expert order and its ``unpermute`` for DeepEP
    (``_DeepepManager``), nothing for HybridEP (``_HybridEPManager`` returns its input:
    ``hybrid_ep_dispatch`` / ``hybrid_ep_combine`` permute inside the exchange,
    ``fused_a2a.py``). The key's ``disp`` column names the dispatcher (``alltoall`` when
    absent)."""
    if str(key.get("disp", "alltoall")) == "flex":
        return False
    return int(key["E"]) // int(key["ep"]) > 1


def _moe_routing_kernels(op: str, sh: _MoeShape) -> list[Kernel]:
    """Kernels of the router (with the residual add and the pre-MLP norm) and of the
    permutation and un-permutation, forward and backward (see :func:`moe_op_kernels`)."""
    e, h, E, k, T_in, tok, norm, sort = sh.e, sh.h, sh.E, sh.k, sh.T_in, sh.tok, sh.norm, sh.sort
    if op == "router_fwd":
        return [mem("bias_dropout_add", 3.5 * tok), mem(norm, 2 * tok),
                gemm("router", T_in, E, h, e),                     # (T_in, h) x (h, E)
                mem("router_softmax_topk", T_in * (E * (e + 8) + 12 * k))]
    if op == "router_bwd":
        return [mem("router_softmax_topk_bwd", T_in * E * (e + 8)),
                gemm("router_dgrad", T_in, h, E, e), gemm("router_wgrad", E, h, T_in, e),
                *wgrad_accumulate(sh.plain_acc * h * E),  # the gate: a plain parameter
                mem(f"{norm}_bwd", 4 * tok), mem("bias_dropout_add_bwd", 2 * tok)]
    if op == "moe_permute_fwd":
        return [mem("moe_permute", 2 * T_in * k * h * e + 8 * T_in * k), *sort]
    if op == "moe_permute_bwd":
        return [*sort, mem("moe_permute_bwd", (k + 1) * T_in * h * e)]
    if op == "moe_unpermute_fwd":
        return [*sort, mem("moe_unpermute", T_in * k * (h * e + 4) + T_in * h * e),
                mem("bias_dropout_add", 3.5 * tok)]
    # moe_unpermute_bwd
    return [mem("bias_dropout_add_bwd", 2 * tok),
            mem("moe_unpermute_bwd", T_in * h * e + T_in * k * (2 * h * e + 8)), *sort]


def _moe_experts_kernels(op: str, sh: _MoeShape) -> list[Kernel]:
    """Kernels of the routed experts' grouped GEMMs and activation, ``experts_fwd`` or
    ``experts_bwd`` (see :func:`moe_op_kernels`)."""
    linear, cast, h, R, M, local = sh.linear, sh.cast, sh.h, sh.R, sh.M, sh.local
    fe, etp, fc1, inner, gated = sh.fe, sh.etp, sh.fc1, sh.inner, sh.gated
    clamp = glu_clamp_kernels(op[-3:], 2 * inner) if sh.clamp else []
    bias = expert_bias_kernels(op[-3:], R, h, sh.e, local) if sh.bias else []
    if op == "experts_fwd":
        return [*cast("experts_fc1_input", R * h, groups=local),
                linear("experts_fc1", M, fc1, h, local),              # E/ep x (M, h) x (h, fc1)
                *clamp,
                mem("bias_swiglu", 3 * inner) if gated else mem("bias_gelu", 2 * inner),
                *cast("experts_fc2_input", R * (fe // etp), groups=local),
                linear("experts_fc2", M, h, fe // etp, local),       # E/ep x (M, fe/etp) x (., h)
                *bias]
    return [*bias,
            *cast("experts_fc2_grad", R * h, groups=local),
            linear("experts_fc2_dgrad", M, fe // etp, h, local),
            linear("experts_fc2_wgrad", fe // etp, h, M, local),
            mem("bias_swiglu_bwd", 5 * inner) if gated else mem("bias_gelu_bwd", 3 * inner),
            *clamp,
            *cast("experts_fc1_grad", R * fc1, groups=local),
            linear("experts_fc1_dgrad", M, h, fc1, local),
            linear("experts_fc1_wgrad", fc1, h, M, local),
            *wgrad_accumulate(sh.acc * local * (h * fc1 + h * fe // etp))]


def expert_bias_kernels(op_pass: str, rows: float, h: int, e: int, local: int) -> list[Kernel]:
    """Kernels that add the routed experts' fc2 bias (``eb`` key column: an MoE model with
    ``add_bias_linear``, GPT-OSS) on one rank: ``rows`` token copies (:func:`moe_routed_rows`)
    of ``h`` outputs of ``e`` bytes over ``local`` experts, ``op_pass`` ``"fwd"`` or ``"bwd"``.

    ``TEGroupedMLP`` builds fc2 with ``skip_bias_add=True`` and adds each expert's bias weighted
    by the routing probability in PyTorch (``TEGroupedMLP._apply_bias``,
    ``megatron/core/transformer/moe/experts.py``, Megatron-Core 0.16.1 and 0.19.2; 0.19.2's
    opt-in Transformer Engine op-fuser path, ``NVTE_CUTEDSL_FUSED_GROUPED_MLP``, is not
    modelled): per local expert
    ``t + b * p`` on its rows, with ``p`` the fp32 probabilities (the dispatchers keep them in
    fp32), so the products and sums are fp32 (``F = 4 rows h`` bytes over the experts, ``C =
    e rows h`` the 16-bit output); then ``torch.cat`` of the experts' fp32 rows and ``.to`` the
    output's dtype. Forward: the ``b p`` products (write ``F``), the sums (read ``C + F``,
    write ``F``), the cat (read and write ``F``), the cast (read ``F``, write ``C``): ``6F +
    2C``. Backward (autograd): the cast's gradient to fp32 (read ``C``, write ``F``), the
    cat's (views), each sum's gradient to the 16-bit output (read ``F``, write ``C``), each
    product's gradients of ``b`` and of ``p`` (a product and a reduction each: read ``F``, write
    ``F``, read ``F``): ``8F + 2C``. The per-expert kernels are ``local`` launches each."""
    F, C = 4.0 * rows * h, float(e) * rows * h
    n = max(int(local), 1)
    if op_pass == "fwd":
        return [*[mem("expert_bias_mul", F / n) for _ in range(n)],
                *[mem("expert_bias_add", (C + 2 * F) / n) for _ in range(n)],
                mem("expert_bias_cat", 2 * F), mem("expert_bias_cast", F + C)]
    return [mem("expert_bias_cast_bwd", C + F),
            *[mem("expert_bias_add_bwd", (F + C) / n) for _ in range(n)],
            *[mem("expert_bias_mul_bwd", 3 * F / n) for _ in range(2 * n)]]


def _moe_shared_experts_kernels(op: str, sh: _MoeShape) -> list[Kernel]:
    """Kernels of the shared experts, a dense MLP ``ns f_e`` wide on the ``T`` tokens of the
    tensor-parallel group; none without shared experts (see :func:`moe_op_kernels`)."""
    if not sh.ns:
        return []  # no shared experts: no kernels
    linear, cast, h, t, T, e, gated = sh.linear, sh.cast, sh.h, sh.t, sh.T, sh.e, sh.gated
    fs = sh.ns * sh.fe
    fc1s = (2 if gated else 1) * fs // t
    inner_s = T * (fs // t) * e
    clamp = glu_clamp_kernels(op[-3:], 2 * inner_s) if sh.clamp else []
    if op == "shared_experts_fwd":
        return [*cast("shared_fc1_input", T * h), linear("shared_fc1", T, fc1s, h), *clamp,
                mem("bias_swiglu", 3 * inner_s) if gated else mem("bias_gelu", 2 * inner_s),
                *cast("shared_fc2_input", T * (fs // t)), linear("shared_fc2", T, h, fs // t)]
    return [*cast("shared_fc2_grad", T * h),
            linear("shared_fc2_dgrad", T, fs // t, h), linear("shared_fc2_wgrad", fs // t, h, T),
            mem("bias_swiglu_bwd", 5 * inner_s) if gated else mem("bias_gelu_bwd", 3 * inner_s),
            *clamp,
            *cast("shared_fc1_grad", T * fc1s),
            linear("shared_fc1_dgrad", T, h, fc1s), linear("shared_fc1_wgrad", fc1s, h, T),
            *wgrad_accumulate(sh.acc * (h * fc1s + h * fs // t))]


def moe_activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str) -> float:
    """Activation bytes one MoE layer keeps for its backward, per micro-batch, on one GPU.

    The dense layer's (:func:`dense_activation_bytes_per_layer`) with the shared experts as
    its MLP (``6 ns f_e/h`` gated, ``4 ns f_e/h`` otherwise; 0 without shared experts), plus,
    unless the layer is checkpointed (``full``), the routed part in 16-bit bytes: each of the
    ``R`` token copies on the rank (:func:`moe_routed_rows`; the busiest rank) keeps the
    experts' fc1 input (``2h``) and fc1 output and activation output (``6 f_e/etp`` gated,
    ``4 f_e/etp`` otherwise) and the router its fp32 probabilities (``4E`` per token). The
    un-permutation keeps nothing: Megatron-Core applies the routing probabilities inside the
    experts' activation (``TEGroupedMLP.forward``: ``weighted_bias_swiglu_impl`` /
    ``activation * permuted_probs``, whose backward reads the fc1 output already kept), and
    the all-to-all dispatcher's ``combine_postprocess`` calls ``unpermute`` without ``probs``
    (a gather / scatter-add whose backward needs only the indices; megatron-core 0.19.2,
    ``transformer/moe/experts.py``, ``token_dispatcher.py``). Nor do the permutation and the
    all-to-alls keep their outputs. FP8: the experts' fc1 input and fc2 input are the FP8
    copies TE keeps (``h`` and ``f_e/etp`` bytes per row instead of ``2h`` and ``2 f_e/etp``).
    Selective recomputation by module (:func:`core.plan.parallel.recompute_modules`): ``moe``
    (Megatron-Core ``MoELayer`` under ``tensor_parallel.checkpoint``) keeps none of the routed
    part nor the shared experts'; ``moe_act`` (``TEGroupedMLP``'s activation under
    ``CheckpointWithoutOutput``) drops the activation output, ``2 f_e/etp`` per row (under FP8
    its FP8 copy, ``f_e/etp``: fc2 saves its original input, freed with it);
    ``shared_experts`` the shared experts' share. A clamped gated MLP
    (``activation_func_clamp_value``, GPT-OSS) keeps the clamped copy of the fc1 output too
    (``4 f_e/etp`` per row; :func:`core.model.mlp.glu_clamp_kernels`: the clamps save their
    input, the fc1 output, and the fused activation its clamped input), unless ``moe_act`` is
    recomputed (the copy is made inside the checkpointed function). The shared experts' clamped
    copy is not counted.
    """
    h = model.hidden_size
    per_f = 6 if is_gated(model.activation) else 4
    fe = moe_ffn(model)
    shared = per_f * model.num_shared_experts * fe / h
    out = dense_activation_bytes_per_layer(model, plan, mode, mlp=shared)
    if mode == "full":
        return out
    t = plan.tensor_parallel
    sp = bool(plan.sequence_parallel and t > 1)
    etp = expert_tensor_parallel(plan)
    cp = plan.context_parallel
    key = dict(b=plan.micro_batch_size, s=model.seq_length // cp, topk=model.moe_top_k, etp=etp,
               imb=plan.moe_imbalance_factor, t=t)
    R = moe_routed_rows(key)
    T = plan.micro_batch_size * model.seq_length // cp
    T_in = T / t if sp else T
    # FP8: the experts' fc1 input (2h) and fc2 input (2 f_e/etp) are TE's FP8 copies (1 byte)
    fp8 = plan.precision == "fp8"
    routed = R * ((1 if fp8 else 2) * h + (per_f - fp8) * (fe // etp)) \
        + T_in * 4 * (model.num_experts or 0)
    mods = recompute_modules(plan) if mode == "selective" else ()
    if "moe" in mods:  # the whole MoE layer checkpointed: only its input (the norm output) kept
        routed = 0.0
    elif "moe_act" in mods:  # the experts' activation output (fc2's input) is not kept; under
        # FP8 fc2 saves its original input (set_save_original_input), freed with the output
        routed -= R * (1 if fp8 else 2) * (fe // etp)
    elif model.activation_func_clamp_value is not None and per_f == 6:
        # the clamp's concatenated copy of the fc1 output, saved by the fused activation beside
        # the fc1 output the clamps keep (core.model.mlp.glu_clamp_kernels)
        routed += R * 4 * (fe // etp)
    return out + routed * DTYPE_BYTES[tensor_dtype(plan.precision)] / 2


def flex_buffer_memory_note(model: ModelConfig, plan) -> str | None:
    """The report's caveat on memory under the flex dispatcher (None without it): DeepEP's and
    HybridEP's communication buffers (Megatron-Core ``fused_a2a``: NVLink and RDMA buffers
    allocated outside PyTorch's caching allocator, sized by the kernels' configuration hints)
    are not in the memory per GPU; no source here gives their size, so none is guessed. The
    buffers belong to the expert tensor-and-expert-parallel group (``fused_a2a.get_buffer`` of
    the dispatcher's ``tp_ep_group``), ``etp * ep`` ranks: none with one rank (where the
    dispatcher cannot run: :func:`core.plan.rules.moe_errors`)."""
    etp = plan.expert_tensor_parallel or plan.tensor_parallel
    if plan.moe_token_dispatcher_type != "flex" or not num_moe_layers(model) or \
            etp * plan.expert_parallel <= 1:
        return None
    return ("moe_token_dispatcher_type=flex: the memory per GPU does not count DeepEP's / "
            "HybridEP's communication buffers (NVLink and RDMA buffers allocated outside "
            "PyTorch's caching allocator; their size follows the kernels' configuration, not "
            "modelled)")
