"""Communication times from rank placement, profile curves and network bandwidth.

Rank placement follows Megatron-Core's default order ``"tp-cp-ep-dp-pp"``
(``parallel_state.initialize_model_parallel``; expert parallelism lives inside the
data-parallel ranks): tensor-parallel rank fastest, then context-parallel, then
data-parallel, then pipeline-parallel, i.e. global rank
``r = tp + t * (cp_rank + cp * (dp + d * pp))``; node of a rank is
``r // gpus_per_node``. Without context parallelism (cp = 1) this is Megatron-LM's
order ``tp + t * (dp + d * pp)``.

* Collectives inside a node use the profile store's measured curves (nccl-tests
  conventions: ``nbytes`` is the whole buffer). If the cluster sets an explicit
  intra-node bandwidth, a ring model with that bus bandwidth and the profile's
  fitted latency is used instead.
* Collectives spanning nodes are hierarchical (NCCL's tree/ring over nodes):
  reduce-scatter inside the node, ring all-reduce of the shard across nodes at
  each GPU's share of the node bandwidth, all-gather inside the node. A job that does
  not fill whole nodes leaves ``num_gpus % gpus_per_node`` ranks on its last node; a
  group crossing into it moves the shard of its fewest members there
  (:func:`partial_node_share`), the slowest node setting the ring's pace.
* Pipeline send/recv between two nodes moves ``nbytes`` at one GPU's share of
  the node bandwidth, plus a fixed latency.
* Expert parallelism (MoE): Megatron-Core places the expert groups by a second rank order,
  expert tensor-parallel rank fastest, then expert-parallel, then expert-data-parallel,
  then pipeline (``parallel_state``: order tp-ep-dp-pp over ``etp, ep, edp, p``). The
  all-to-all of an ``ep`` group (ranks ``etp`` apart) stays in a node when ``etp*ep``
  ranks fit in it; otherwise each rank sends the share of its buffer bound for other nodes
  over its NIC while the rest crosses NVLink (:meth:`CommModel.all_to_all`).
* The context-parallel ring (:meth:`CommModel.cp_send_recv`) is a send/recv to the next
  cp rank and from the previous one, all ranks at once: inside a node when the
  ``t*cp`` ranks of a cp group fit in one, otherwise its slowest hops cross nodes.

Four parameters of the profile's ``op_model`` apply: ``inter_node_efficiency``
(the share of the nominal network bandwidth that collectives achieve),
``p2p_efficiency`` (the share that pipeline transfers between nodes achieve),
``collective_overhead_s`` (framework time per collective call) and
``p2p_overhead_s`` (framework time per pipeline transfer around the bytes:
the blocking send/recv of Megatron-LM or of DeepSpeed's pipeline engine; as
sends block the sender (:mod:`core.sim.graph`; not the interleaved schedule's with
``plan.overlap_p2p_comm``), about one transfer per 1F1B step lies on the critical
path, i.e. roughly ``(m + p - 1)`` of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.plan.cluster import ClusterConfig, node_network_gbits_per_s
from core.plan.parallel import ParallelPlan
from core.model.ops import effective_op_model
from core.store.nccl_tests import BUS_BANDWIDTH_FACTOR, RING_STEPS

__all__ = ["CommModel", "CollectiveExtrapolation", "summarize_warnings", "INTER_NODE_LATENCY_S", "DEFAULT_INTRA_LATENCY_S"]

#: Latency of one inter-node message step (InfiniBand + NCCL proxy), seconds.
INTER_NODE_LATENCY_S = 10e-6
#: Per-step latency of intra-node collectives when the profile has no curve to fit it from.
DEFAULT_INTRA_LATENCY_S = 8e-6


class CollectiveExtrapolation(str):
    """A warning that one collective size lies beyond its measured curve: its text (a ``str``,
    like every warning) with its figures as fields, so that warnings fold by their fields, never
    by reading their text back.

    Parameters
    ----------
    kind : str
        Collective kind (``all_reduce``, ...).
    mib : float
        Message size per GPU, MiB (2^20 bytes).
    gpus : int
        Group size.
    measured : str
        The measured sizes of that curve, as shown (``"1 KiB to 2 GiB"``).
    plans : tuple of str
        Labels of the first plans of a sweep it concerns (empty for one simulation).
    plans_total : int
        How many plans it concerns (0 for one simulation).
    """

    def __new__(cls, kind: str, mib: float, gpus: int, measured: str,
                plans: tuple[str, ...] = (), plans_total: int = 0) -> "CollectiveExtrapolation":
        text = (f"{kind} of {mib:.1f} MiB on {gpus} GPUs: beyond the measured sizes ({measured}), "
                "extrapolated with that curve's latency-bandwidth fit")
        if plans_total:
            more = plans_total - len(plans)
            text += (f"; in {plans_total} plan{'s' if plans_total != 1 else ''}: "
                     f"{', '.join(plans)}" + (f" and {more} more" if more > 0 else ""))
        self = super().__new__(cls, text)
        self.kind, self.mib, self.gpus, self.measured = kind, float(mib), int(gpus), measured
        self.plans, self.plans_total = tuple(plans), int(plans_total)
        return self

    def __getnewargs__(self) -> tuple:  # pickled to and from sweep worker processes
        return (self.kind, self.mib, self.gpus, self.measured, self.plans, self.plans_total)

    def in_plans(self, labels: list[str], total: int) -> "CollectiveExtrapolation":
        """The same warning naming the plans of a sweep it concerns: the first ``labels`` of
        ``total``."""
        return CollectiveExtrapolation(self.kind, self.mib, self.gpus, self.measured,
                                       tuple(labels), total)


def summarize_warnings(warnings: list[str]) -> list[str]:
    """``warnings`` with every :class:`CollectiveExtrapolation` folded into one line naming how
    many there are, the largest and, for a sweep's warnings, which plans they concern; the others
    unchanged, in order. One such warning is left as it is."""
    beyond = [w for w in warnings if isinstance(w, CollectiveExtrapolation)]
    if len(beyond) < 2:
        return list(warnings)
    m = max(beyond, key=lambda w: w.mib)
    line = (f"{len(beyond)} collective sizes beyond the measured curves (the largest: {m.kind} "
            f"of {m.mib:.1f} MiB on {m.gpus} GPUs, measured {m.measured}), extrapolated with "
            "each curve's latency-bandwidth fit")
    named: list[str] = []
    unnamed = 0
    for w in beyond:
        named += [x for x in w.plans if x not in named]
        unnamed += max(w.plans_total - len(w.plans), 0)
    if named:
        more = len(named) - 3 + unnamed
        line += (f"; in plans {', '.join(named[:3])}"
                 + (f" and {more} more (a plan can count more than once)" if more > 0 else ""))
    out, placed = [], False
    for w in warnings:
        if isinstance(w, CollectiveExtrapolation):
            if not placed:
                out.append(line)
                placed = True
        else:
            out.append(w)
    return out


def _size(nbytes: float) -> str:
    """``nbytes`` in the binary unit that keeps it at 1 or more (``"1 KiB"``, ``"2 GiB"``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def groups_in_node(n: int, t: int, g: int, num_gpus: int) -> bool:
    """Whether every group of ``n`` ranks ``t`` apart (a context-parallel group: the ranks
    ``tp + t*j`` of a block of ``t*n`` consecutive ranks) lies in one node of ``g`` GPUs: the
    block divides the node, or the whole job of ``num_gpus`` fits in one node. Otherwise some
    block straddles a node boundary (or spans nodes)."""
    return t * n <= g and (g % (t * n) == 0 or num_gpus <= g)


def _group_per_node(n: int, t: int, g: int, in_node: bool) -> int:
    """GPUs per node of a group of ``n`` ranks ``t`` apart (a context-parallel group) on nodes
    of ``g`` GPUs, for :meth:`CommModel.hierarchical`: all ``n`` when the group stays in a node
    (``in_node``); ``g / t`` of them when it spans whole nodes; and when it is smaller than a
    node but straddles a node boundary (``t*n`` not dividing ``g``), half of it on each side,
    the group that sets the pace (as the ring of :meth:`CommModel.cp_send_recv` is priced)."""
    if in_node:
        return n
    if t * n <= g:  # smaller than a node, across a boundary: split over two nodes
        return max(1, -(-n // 2))
    return max(1, min(n, g // t))


def partial_node_share(n: int, stride: int, g: int, num_gpus: int) -> int | None:
    """Members on the job's last, partial node of the group that has the fewest there, among
    the groups of ``n`` ranks ``stride`` apart (the ranks ``off + stride*j`` of a block of
    ``stride*n`` consecutive ranks, Megatron-Core's order) that span more than one node;
    None when the job fills whole nodes of ``g`` GPUs (or one node), or no group spanning
    nodes touches the partial node.

    Ranks sit on nodes consecutively (node of rank ``r`` is ``r // g``), so ``num_gpus % g``
    ranks share the last node. A group holding ``k`` members there moves ``nbytes / k`` of
    the inter-node shard through each of their NICs (:meth:`CommModel.hierarchical`), more
    than the ``nbytes / per_node`` of a full node; the inter-node ring goes at the pace of
    its slowest node. Cost: O(``num_gpus % g``)."""
    rest = num_gpus % g
    if n <= 1 or num_gpus <= g or not rest:
        return None
    counts: dict[tuple[int, int], int] = {}
    for r in range(num_gpus - rest, num_gpus):
        block, off = divmod(r, stride * n)
        key = (block, off % stride)
        counts[key] = counts.get(key, 0) + 1
    spanning = [c for c in counts.values() if c < n]
    return min(spanning) if spanning else None


@dataclass
class CommModel:
    """Times of the collectives of one plan on one cluster, in seconds.

    Parameters
    ----------
    store : ProfileStore
        Supplies intra-node collective curves.
    plan, cluster : ParallelPlan, ClusterConfig
        Placement and bandwidths.

    Attributes
    ----------
    warnings : list of str
        One line per lookup that extrapolated beyond the profile's curves.
    """

    store: object
    plan: ParallelPlan
    cluster: ClusterConfig
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        p = effective_op_model(getattr(self.store, "op_model", None))
        self.inter_node_efficiency = float(p["inter_node_efficiency"])
        self.collective_overhead_s = float(p["collective_overhead_s"])
        self.p2p_efficiency = float(p["p2p_efficiency"])
        self.p2p_overhead_s = float(p["p2p_overhead_s"])
        self.all_to_all_efficiency = float(p["all_to_all_efficiency"])
        # DeepEP / HybridEP's own kernels (the flex dispatcher); a store without a figure of
        # their own times them as the NCCL all-to-all (core.model.ops.effective_op_model)
        self.flex_all_to_all_efficiency = float(p["flex_all_to_all_efficiency"])

    @property
    def node_network_gbits_per_s(self) -> float:
        """The node's network bandwidth, Gb/s (:func:`core.plan.cluster.node_network_gbits_per_s`:
        the cluster's, or its GPU's reference node when empty). Raises ValueError when
        neither is known, only when a transfer leaves the node."""
        return node_network_gbits_per_s(self.cluster)

    # ------------------------------------------------------------------ placement
    def node_of(self, tp: int, dp: int, pp: int, cp_rank: int = 0) -> int:
        """Node index of the rank at (tp, cp_rank, dp, pp) under Megatron-Core's rank order."""
        t, d = self.plan.tensor_parallel, self.plan.data_parallel
        cp = self.plan.context_parallel
        return (tp + t * (cp_rank + cp * (dp + d * pp))) // self.cluster.gpus_per_node

    def stages_share_node(self, stage: int, other: int | None = None) -> bool:
        """Whether stage ``stage`` and ``other`` (default ``stage+1``) of replica 0 sit in one node."""
        other = stage + 1 if other is None else other
        return self.node_of(0, 0, stage) == self.node_of(0, 0, other)

    @property
    def _gpu_inter_bytes_per_s(self) -> float:
        """One GPU's share of its node's network bandwidth, bytes/s."""
        return (self.node_network_gbits_per_s * 1e9 / 8 / self.cluster.gpus_per_node
                * self.inter_node_efficiency)

    # ------------------------------------------------------------------ primitives
    def intra(self, kind: str, group_size: int, nbytes: float) -> float:
        """A collective among ``group_size`` GPUs of one node, seconds."""
        if group_size <= 1 or nbytes <= 0:
            return 0.0
        bw = self.cluster.intra_node_bandwidth_gbytes_per_s
        kinds = self.store.collective_kinds()
        if bw:
            alpha = self.store.ring_model(kind)[0] if kinds.get(kind) else DEFAULT_INTRA_LATENCY_S
            return alpha * RING_STEPS[kind](group_size) + nbytes * BUS_BANDWIDTH_FACTOR[kind](group_size) / (bw * 1e9)
        if not kinds.get(kind):
            if kinds.get("all_reduce"):  # same links: the all-reduce ring fit with this kind's factors
                alpha, busbw = self.store.ring_model("all_reduce")
                return alpha * RING_STEPS[kind](group_size) + nbytes * BUS_BANDWIDTH_FACTOR[kind](group_size) / busbw
            raise KeyError(f"profile {self.store.device_name} has no {kind} curves and the cluster "
                           f"sets no intra-node bandwidth")
        lk = self.store.collective_time(kind, group_size, nbytes)
        if lk.extrapolated:
            what = f"{kind} of {nbytes / 2**20:.1f} MiB on {group_size} GPUs"
            if group_size in kinds[kind]:
                xs = self.store.collective_curve(kind, group_size)[0]
                self.warnings.append(CollectiveExtrapolation(
                    kind, nbytes / 2**20, group_size, f"{_size(xs[0])} to {_size(xs[-1])}"))
            else:
                self.warnings.append(
                    f"{what}: no measured curve for {group_size} GPUs, estimated with the ring "
                    f"model fitted to the measured group sizes {kinds[kind]}")
        return lk.time_s

    def inter_all_reduce(self, num_nodes: int, nbytes: float) -> float:
        """Ring all-reduce of ``nbytes`` per GPU across ``num_nodes`` nodes, seconds."""
        return self.inter_ring("all_reduce", num_nodes, nbytes)

    def inter_ring(self, kind: str, num_nodes: int, nbytes: float) -> float:
        """Ring ``kind`` (all_reduce, reduce_scatter, all_gather) of an ``nbytes`` buffer per GPU
        across ``num_nodes`` nodes, seconds: ``steps * latency + factor * nbytes / bandwidth``
        with 2(n-1) steps and factor 2(n-1)/n for the all-reduce, half of each for the others."""
        if num_nodes <= 1 or nbytes <= 0:
            return 0.0
        steps = RING_STEPS[kind](num_nodes)
        return (steps * INTER_NODE_LATENCY_S
                + BUS_BANDWIDTH_FACTOR[kind](num_nodes) * nbytes / self._gpu_inter_bytes_per_s)

    # ------------------------------------------------------------------ plan-level
    def hierarchical_all_reduce(self, group_size: int, per_node: int, nbytes: float,
                                shard_per_node: int | None = None) -> float:
        """All-reduce of ``nbytes`` among ``group_size`` GPUs, ``per_node`` of them in each node.

        One node: the profile's intra-node collective. Several: reduce-scatter
        in the node, ring all-reduce of the ``nbytes/per_node`` shard across
        ``ceil(group_size/per_node)`` nodes, all-gather in the node.
        ``shard_per_node``: the members on the node with the fewest of them, when fewer
        than ``per_node`` (a job's last, partial node, :func:`partial_node_share`): the ring
        moves ``nbytes/shard_per_node`` per GPU there and goes at that node's pace.
        """
        if group_size <= 1:
            return 0.0
        num_nodes = math.ceil(group_size / per_node)
        if num_nodes == 1:
            return self.collective_overhead_s + self.intra("all_reduce", group_size, nbytes)
        shard = min(per_node, shard_per_node) if shard_per_node else per_node
        return (self.collective_overhead_s + self.intra("reduce_scatter", per_node, nbytes)
                + self.inter_all_reduce(num_nodes, nbytes / shard)
                + self.intra("all_gather", per_node, nbytes))

    def hierarchical(self, kind: str, group_size: int, per_node: int, nbytes: float,
                     shard_per_node: int | None = None) -> float:
        """Collective ``kind`` of an ``nbytes`` buffer among ``group_size`` GPUs, ``per_node`` of
        them in each node (nccl-tests convention: ``nbytes`` is the whole buffer, the input of a
        reduce-scatter and the output of an all-gather).

        All-reduce: :meth:`hierarchical_all_reduce`. Reduce-scatter: in the node, then a ring
        reduce-scatter of the ``nbytes/per_node`` shard across the nodes; all-gather the
        reverse. A reduce-scatter plus an all-gather moves what one all-reduce moves.
        ``shard_per_node``: as :meth:`hierarchical_all_reduce`.
        """
        if kind == "all_reduce":
            return self.hierarchical_all_reduce(group_size, per_node, nbytes, shard_per_node)
        if group_size <= 1:
            return 0.0
        num_nodes = math.ceil(group_size / per_node)
        if num_nodes == 1:
            return self.collective_overhead_s + self.intra(kind, group_size, nbytes)
        shard = min(per_node, shard_per_node) if shard_per_node else per_node
        return (self.collective_overhead_s + self.intra(kind, per_node, nbytes)
                + self.inter_ring(kind, num_nodes, nbytes / shard))

    def _partial(self, n: int, stride: int) -> int | None:
        """:func:`partial_node_share` of a group of ``n`` ranks ``stride`` apart in this plan."""
        return partial_node_share(n, stride, self.cluster.gpus_per_node, self.plan.num_gpus)

    def tp_all_reduce(self, nbytes: float) -> float:
        """Tensor-parallel all-reduce of ``nbytes``: consecutive ranks, across nodes when t > gpus_per_node."""
        return self.tp_collective("all_reduce", nbytes)

    def tp_collective(self, kind: str, nbytes: float) -> float:
        """Tensor-parallel ``kind`` (all_reduce, reduce_scatter, all_gather) of an ``nbytes``
        buffer (sequence parallelism replaces each all-reduce by a reduce-scatter and an
        all-gather of the same buffer; Korthikanti et al. 2022, Sec. 4.2.2)."""
        t = self.plan.tensor_parallel
        return self.hierarchical(kind, t, min(t, self.cluster.gpus_per_node), nbytes,
                                 self._partial(t, 1))

    def dp_collective(self, kind: str, nbytes: float) -> float:
        """Data-parallel ``kind`` of an ``nbytes`` buffer per GPU over the ``d*cp`` ranks
        ``tp + t*j`` (placement as :meth:`dp_all_reduce`): the gradient reduce-scatter and
        parameter all-gather of a sharded optimizer (ZeRO, Rajbhandari et al. 2020).

        Hybrid sharding (``plan.data_parallel_shard_size``, HSDP; Megatron-Core's
        ``--num-distributed-optimizer-instances``, PyTorch FSDP's HYBRID_SHARD, torchtitan's
        dp_shard x dp_replicate): the shard group is the ``S = size*cp`` consecutive ranks
        ``tp + t*j`` (:func:`core.plan.parallel.zero_shard_size`; inside a node when ``t*S`` GPUs fit
        in one), replicated over ``R = d/size`` groups ``t*S`` ranks apart. The all-gather runs
        in the shard group; the reduce-scatter runs in it and is followed by an all-reduce of
        the ``nbytes/S`` shard across the ``R`` replicas (Megatron-Core
        ``DistributedDataParallel``: reduce-scatter over the intra-instance group, all-reduce
        over the inter-instance group; ``max(1, gpus_per_node // (t*S))`` replicas share a
        node, across nodes when the shard group fills one). An all-reduce (unsharded
        gradients) spans all ``d*cp`` ranks as without hybrid sharding. A job whose GPUs do
        not fill whole nodes prices the inter-node shard at the members of the group on its
        last, partial node (:func:`partial_node_share`)."""
        from core.plan.parallel import zero_replicas, zero_shard_size
        t, g = self.plan.tensor_parallel, self.cluster.gpus_per_node
        R = zero_replicas(self.plan)
        if R <= 1 or kind == "all_reduce":
            d = self.plan.dp_cp_size
            return self.hierarchical(kind, d, max(1, min(d, g // t)), nbytes, self._partial(d, t))
        S = zero_shard_size(self.plan)
        out = self.hierarchical(kind, S, max(1, min(S, g // t)), nbytes, self._partial(S, t))
        if kind == "reduce_scatter":
            out += self.hierarchical_all_reduce(R, max(1, min(R, g // (t * S))), nbytes / S,
                                                self._partial(R, t * S))
        return out

    def dp_all_reduce(self, nbytes: float) -> float:
        """Data-parallel gradient all-reduce of ``nbytes`` per GPU (hierarchical).

        The group is the ``D = d*cp`` ranks ``tp + t*j`` (Megatron-Core reduces gradients over
        the data-parallel group with the context-parallel ranks, which sit between the
        tensor- and data-parallel ones); ``k = min(D, gpus_per_node // t)`` of them share a
        node (at least 1), and the group spans ``ceil(D / k)`` nodes.
        """
        d, t, g = self.plan.dp_cp_size, self.plan.tensor_parallel, self.cluster.gpus_per_node
        return self.hierarchical_all_reduce(d, max(1, min(d, g // t)), nbytes,
                                            self._partial(d, t))

    def all_to_all(self, group_size: int, per_node: int, nbytes: float,
                   inter_fraction: float | None = None) -> float:
        """All-to-all among ``group_size`` GPUs, ``per_node`` of them in each node, of an
        ``nbytes`` send buffer per GPU (nccl-tests' alltoall convention: the buffer holds
        ``group_size`` equal blocks, one per peer, the rank's own included), seconds.

        Each rank sends ``(n-1)/n`` of its buffer. In one node that takes the intra-node
        model (:meth:`intra`: the store's all_to_all curves, else the all-reduce ring fit's
        bus bandwidth with the all-to-all factor, or the cluster's intra-node bandwidth).
        Across nodes the ``(n - k)/n`` bound for other nodes leave through the GPU's share of
        the node's network bandwidth while the ``(k-1)/n`` for its own node cross NVLink at
        the same time: the slower of the two, plus one network latency.

        ``inter_fraction`` (a node-deduplicating dispatcher, DeepEP / HybridEP) replaces the
        ``(n - k)/n`` of the buffer that leaves the node; the tokens it brings in are forwarded
        to their experts' ranks over NVLink, so the node's own exchange then moves the whole
        buffer (the local copies and the forwarded ones).
        """
        n, k = group_size, max(1, min(per_node, group_size))
        if n <= 1 or nbytes <= 0:
            return 0.0
        if k >= n:
            return self.collective_overhead_s + self.intra("all_to_all", n, nbytes)
        share = (n - k) / n if inter_fraction is None else float(inter_fraction)
        inter = INTER_NODE_LATENCY_S + nbytes * share / self._gpu_inter_bytes_per_s
        # the k ranks of the node exchange k/n of each buffer among themselves (all of it
        # when the tokens from other nodes are forwarded inside the node)
        local_bytes = nbytes * k / n if inter_fraction is None else nbytes
        local = self.intra("all_to_all", k, local_bytes) if k > 1 else 0.0
        return self.collective_overhead_s + max(inter, local)

    def _expert_node_share(self, stride: int, group_size: int) -> int:
        """Ranks of a group ``stride`` apart in Megatron-Core's expert rank order that share
        a node (at least 1)."""
        return max(1, min(group_size, self.cluster.gpus_per_node // max(stride, 1)))

    def ep_all_to_all(self, nbytes: float, remote_copies: float | None = None,
                      top_k: int = 1) -> float:
        """Token dispatch or combine of one MoE layer over the expert-parallel group: an
        all-to-all of an ``nbytes`` buffer per GPU (``top_k`` copies of each token) among
        ``ep`` ranks ``etp`` apart. ``remote_copies`` (the ``flex`` dispatcher,
        :func:`core.model.moe.flex_remote_node_copies`): the copies of a token that leave
        its node, ``remote_copies / top_k`` of the buffer, instead of ``(n - k)/n``."""
        from core.model.moe import expert_tensor_parallel
        ep, etp = self.plan.expert_parallel, expert_tensor_parallel(self.plan)
        per_node = self._expert_node_share(etp, ep)
        fraction = None if remote_copies is None or per_node >= ep else remote_copies / top_k
        t = self.all_to_all(ep, per_node, nbytes, fraction)
        flex = getattr(self.plan, "moe_token_dispatcher_type", "alltoall") == "flex"
        eff = self.flex_all_to_all_efficiency if flex else self.all_to_all_efficiency
        if t <= 0 or eff == 1.0:
            return t
        # the op model's all_to_all_efficiency (Megatron's alltoall dispatcher: NCCL's
        # all-to-all with variable splits) or flex_all_to_all_efficiency (DeepEP / HybridEP's
        # kernels): what token exchanges achieve of the collective model's rates; fitted by
        # the shared calibration
        return self.collective_overhead_s + (t - self.collective_overhead_s) / eff

    def ep_remote_copies(self, num_experts: int, top_k: int, num_groups: int | None = None,
                         group_topk: int | None = None) -> float | None:
        """Copies of one token that leave its node under the ``flex`` dispatcher
        (:func:`core.model.moe.flex_remote_node_copies` over the nodes the expert-parallel
        group spans, with node-limited routing's ``num_groups`` and ``group_topk`` when set;
        :func:`core.model.moe.flex_remote_copies_uneven` where the group's ranks fill its nodes
        unevenly), or None when the plan dispatches with ``alltoall`` or the group fits one node (the
        plain all-to-all then)."""
        from core.model.moe import (expert_tensor_parallel, flex_remote_copies_uneven,
                                     flex_remote_node_copies)
        if getattr(self.plan, "moe_token_dispatcher_type", "alltoall") != "flex":
            return None
        ep = self.plan.expert_parallel
        share = self._expert_node_share(expert_tensor_parallel(self.plan), ep)
        nodes = -(-ep // share)
        if nodes == 1:
            return None
        if ep % share:
            # the group's ranks fill its nodes unevenly (ep = 128 ranks 2 apart on 72-GPU
            # domains: 36, 36, 36, 20): each node's share of the experts (E / ep per rank)
            per_rank = num_experts // ep
            ranks = [share] * (ep // share) + [ep % share]
            return flex_remote_copies_uneven(top_k, [r * per_rank for r in ranks], num_groups,
                                             group_topk)
        return flex_remote_node_copies(num_experts, top_k, nodes, num_groups, group_topk)

    def etp_collective(self, kind: str, nbytes: float) -> float:
        """Expert tensor-parallel ``kind`` (all_gather, reduce_scatter) of an ``nbytes`` buffer
        among the ``etp`` consecutive ranks of an expert's tensor-parallel group (the tokens
        an expert's shards all process; Megatron-Core's all-to-all dispatcher gathers them
        after the dispatch and reduce-scatters the experts' output)."""
        from core.model.moe import expert_tensor_parallel
        etp = expert_tensor_parallel(self.plan)
        return self.hierarchical(kind, etp, min(etp, self.cluster.gpus_per_node), nbytes,
                                 self._partial(etp, 1))

    def edp_collective(self, kind: str, nbytes: float) -> float:
        """Expert-data-parallel ``kind`` of an ``nbytes`` buffer per GPU: the gradient
        reduction (and sharded parameters' all-gather) of the routed experts' parameters over
        the ``edp`` ranks that hold the same experts, ``etp*ep`` apart."""
        from core.model.moe import expert_data_parallel, expert_tensor_parallel
        edp = expert_data_parallel(self.plan)
        stride = expert_tensor_parallel(self.plan) * self.plan.expert_parallel
        return self.hierarchical(kind, edp, self._expert_node_share(stride, edp), nbytes,
                                 self._partial(edp, stride))
    def cp_ring_in_node(self) -> bool:
        """Whether every context-parallel ring stays inside a node: the cp group of a
        tensor-parallel rank is the ``cp`` ranks ``tp + t*j`` of a block of ``t*cp`` consecutive
        ranks; every block lies in one node when ``t*cp`` divides the GPUs per node or the
        whole job fits in one node. Otherwise a block straddles a node boundary (or spans
        nodes) and, the iteration being synchronous, its ring sets the pace."""
        return groups_in_node(self.plan.context_parallel, self.plan.tensor_parallel,
                              self.cluster.gpus_per_node, self.plan.num_gpus)

    def cp_send_recv(self, nbytes: float) -> float:
        """One step of the context-parallel ring: every cp rank sends ``nbytes`` to the next and
        receives as much from the previous one at once (Transformer Engine's batched
        isend/irecv), seconds. Inside a node: the profile's send/recv between two GPUs
        (NVLink, both directions at once); a ring that leaves the node waits for its
        inter-node hops, each at one GPU's share of its node's network bandwidth (every GPU
        of a node sends at once) plus the inter-node latency. No framework overhead per
        transfer (TE posts them without synchronizing the host, unlike the pipeline sends)."""
        if nbytes <= 0 or self.plan.context_parallel <= 1:
            return 0.0
        if self.cp_ring_in_node():
            return self.intra("send_recv", 2, nbytes)
        gpu_bytes_per_s = (self.node_network_gbits_per_s * 1e9 / 8
                           / self.cluster.gpus_per_node * self.p2p_efficiency)
        return INTER_NODE_LATENCY_S + nbytes / gpu_bytes_per_s

    def cp_all_gather(self, nbytes: float) -> float:
        """All-gather of K and V among the cp ranks of a context-parallel group (``nbytes`` the
        gathered buffer, nccl-tests convention), seconds: PyTorch's ``context_parallel`` with its
        all-gather rotation (``plan.cp_comm_type = "allgather"``) and Megatron-Core's all-gather
        exchange (``all_gather``). The group's ranks are ``t`` apart: all in one node when
        :meth:`cp_ring_in_node`, else ``gpus_per_node / t`` of them per node
        (:meth:`hierarchical`)."""
        return self._cp_collective("all_gather", nbytes)

    def cp_reduce_scatter(self, nbytes: float) -> float:
        """Reduce-scatter of the K and V gradients of the whole sequence among the cp ranks
        (``nbytes`` the full buffer, nccl-tests convention), seconds: the backward of
        Megatron-Core's all-gather exchange (``plan.cp_comm_type = "all_gather"``); the group as
        in :meth:`cp_all_gather`."""
        return self._cp_collective("reduce_scatter", nbytes)

    def _cp_collective(self, kind: str, nbytes: float) -> float:
        cp, t = self.plan.context_parallel, self.plan.tensor_parallel
        if nbytes <= 0 or cp <= 1:
            return 0.0
        return self.hierarchical(kind, cp, _group_per_node(
            cp, t, self.cluster.gpus_per_node, self.cp_ring_in_node()), nbytes)

    def cp_all_to_all(self, nbytes: float) -> float:
        """All-to-all among the ranks of one all-to-all group of context parallelism
        (``plan.cp_comm_type`` a2a: the cp ranks; a2a+p2p: ``plan.cp_a2a_size`` of them,
        Megatron-Core's inner hierarchical group), ``nbytes`` the send buffer per GPU, seconds
        (:meth:`all_to_all`). The group's ranks are ``t`` apart: all in one node when the
        ``t * size`` ranks they span divide the node (or the job fits in one), else
        ``gpus_per_node / t`` of them per node."""
        from core.model.context_parallel import cp_a2a_size
        n, t, g = cp_a2a_size(self.plan), self.plan.tensor_parallel, self.cluster.gpus_per_node
        if nbytes <= 0 or n <= 1:
            return 0.0
        in_node = groups_in_node(n, t, g, self.plan.num_gpus)
        return self.all_to_all(n, _group_per_node(n, t, g, in_node), nbytes)

    def p2p(self, stage: int, nbytes: float, other: int | None = None) -> float:
        """Send ``nbytes`` from pipeline stage ``stage`` to ``other`` (default ``stage+1``) or back."""
        if nbytes <= 0:
            return 0.0
        if self.stages_share_node(stage, other):
            return self.p2p_overhead_s + self.intra("send_recv", 2, nbytes)
        gpu_bytes_per_s = (self.node_network_gbits_per_s * 1e9 / 8
                           / self.cluster.gpus_per_node * self.p2p_efficiency)
        return self.p2p_overhead_s + INTER_NODE_LATENCY_S + nbytes / gpu_bytes_per_s
