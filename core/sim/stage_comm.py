"""The communication one plan's stage times wait for, timed by the communication model and
memoized in a sweep's cache: tensor-parallel collectives of one activation, the
context-parallel exchange of an attention op, data-parallel and expert-data-parallel
collectives, and the pipeline transfers.

What belongs here: :class:`StageComm` (one plan's communication calls under their cache
keys), the memo helpers :func:`memoized` and :func:`cached_comm_call`, and the closed forms of the
context-parallel exchange (:func:`_cp_ring_times`, :func:`_cp_allgather_times`).
:func:`core.sim.stages.stage_times` is what uses them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core.model import model_math
from core.plan.session import Session
from core.sim.comm import CommModel

# no public names: core.sim.stages imports what it uses
__all__: list[str] = []


def pinned(cache: dict | None, obj) -> int:
    """``id(obj)`` as part of a cache key, with ``obj`` kept in ``cache`` (under
    ``("pinned", id(obj))``) so that the id cannot name another object while the cache lives:
    a cache that outlives one store or model never answers for a new one at a freed address."""
    if cache is not None:
        cache.setdefault(("pinned", id(obj)), obj)
    return id(obj)


def memoized(cache: dict | None, key: tuple, warnings: list[str], fn) -> float:
    """``fn(sink)`` memoized in ``cache`` under ``key``; the warnings it produced are replayed on hits."""
    if cache is None:
        return fn(warnings)
    hit = cache.get(key)
    if hit is None:
        sink: list[str] = []
        hit = cache[key] = (fn(sink), tuple(sink))
    warnings.extend(hit[1])
    return hit[0]


def cached_comm_call(comm: CommModel, method: str, *args: float):
    """A function ``sink -> seconds`` calling ``comm.method(*args)`` and moving its warnings to ``sink``."""
    def run(sink: list[str]) -> float:
        n = len(comm.warnings)
        value = getattr(comm, method)(*args)
        sink.extend(comm.warnings[n:])
        del comm.warnings[n:]
        return value
    return run


def _cp_ring_times(cp: int, core_fwd_s: float, core_bwd_s: float, block_s: float,
                   double_s: float) -> dict[str, float]:
    """The context-parallel ring of one attention op, forward and backward: its exchange's part
    hidden under the core's steps and its exposed part, seconds (the :data:`_SOURCES` entries
    ``cp_{fwd,bwd}_{hidden,exposed}``).

    Transformer Engine's ring attention (``AttnFuncWithCPAndKVP2P``, Megatron-Core's
    ``--context-parallel-size``) runs the core in ``cp`` equal steps (:mod:`core.model.model_math`:
    each a causal ``s/cp x s/cp`` problem), ``c = core/cp`` each, and starts each step's
    transfer with the step, so the next step waits for it: a step takes ``max(c, x)``
    for a transfer of ``x`` seconds, of which ``min(c, x)`` is hidden and ``max(0, x - c)``
    exposed. Forward: ``cp - 1`` transfers of one K/V block (``block_s``) under the first
    ``cp - 1`` steps. Backward: ``cp`` transfers under the ``cp`` steps: K/V in the first,
    K/V with the running dK/dV (two blocks, ``double_s``) in the next ``cp - 2``, dK/dV in
    the last (the owner needs it before the attention backward ends).
    """
    c_f, c_b = core_fwd_s / cp, core_bwd_s / cp
    bwd = np.array([block_s] + [double_s] * (cp - 2) + [block_s])
    return {"cp_fwd_hidden": (cp - 1) * min(block_s, c_f),
            "cp_fwd_exposed": (cp - 1) * max(block_s - c_f, 0.0),
            "cp_bwd_hidden": float(np.minimum(bwd, c_b).sum()),
            "cp_bwd_exposed": float(np.maximum(bwd - c_b, 0.0).sum())}


def _cp_allgather_times(cp: int, core_fwd_s: float, core_bwd_s: float, gather_s: float,
                        block_s: float) -> dict[str, float]:
    """:func:`_cp_ring_times` for ``plan.cp_comm_type = "allgather"``: PyTorch's
    ``context_parallel`` with its default all-gather rotation (torchtitan;
    ``torch.distributed.tensor.experimental._attention``, ``_AllGatherRotater``), seconds.

    The core runs in the same ``cp`` steps of ``c = core/cp`` each. Forward: the K/V
    all-gather of the whole sequence (``gather_s``) starts with the first step and the second
    step waits for it: ``min(gather, c)`` hidden, the rest exposed. Backward: K/V are
    all-gathered again under the first step, and the K/V gradients are passed around the ring
    (PyTorch's ``alltoall`` rotation, one block, ``block_s``) after each step: the first
    ``cp - 1`` under the next step, the last one waited for after the loop (exposed).
    """
    c_f, c_b = core_fwd_s / cp, core_bwd_s / cp
    bwd = np.array([gather_s] + [block_s] * (cp - 1))
    return {"cp_fwd_hidden": min(gather_s, c_f),
            "cp_fwd_exposed": max(gather_s - c_f, 0.0),
            "cp_bwd_hidden": float(np.minimum(bwd, c_b).sum()),
            "cp_bwd_exposed": float(np.maximum(bwd - c_b, 0.0).sum()) + block_s}



def _memoized_ring(cache: dict | None, cp: int, core_fwd_s: float, core_bwd_s: float,
                   block_s: float, double_s: float) -> dict[str, float]:
    """:func:`_cp_ring_times` of these arguments (a new dict), memoized in ``cache`` under
    them: a sweep's plans of one attention core and exchange share it."""
    if cache is None:
        return _cp_ring_times(cp, core_fwd_s, core_bwd_s, block_s, double_s)
    key = ("cp ring", cp, core_fwd_s, core_bwd_s, block_s, double_s)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _cp_ring_times(cp, core_fwd_s, core_bwd_s, block_s, double_s)
    return dict(hit)


def read_once(cache: dict | None, tag: str, obj, read):
    """``read(obj)`` (e.g. every field of a model or cluster, as a tuple), computed once per
    object and ``cache``, which keeps the object beside it: a cache's sessions must not change
    their model or cluster in place."""
    key = (tag, id(obj))
    hit = cache.get(key) if cache is not None else None
    if hit is None or hit[0] is not obj:
        hit = (obj, read(obj))
        if cache is not None:
            cache[key] = hit
    return hit[1]


def _cluster_fields(cluster) -> tuple:
    return tuple(getattr(cluster, f.name) for f in dataclasses.fields(cluster))


class StageComm:
    """One plan's communication calls, each memoized in ``cache`` (None: none) under a key
    that holds everything its value depends on; the warnings of the lookups go to ``warnings``.

    ``comm``: the plan's :class:`CommModel`; ``ckey``: what it reads (the store, the cluster
    and the plan's t, d*cp and cp: rank placement; the shard group of hybrid sharding, which
    data-parallel collectives span; the GPU count when the job does not fill whole nodes); ``ekey``: ``ckey`` with ``ep`` and ``etp`` for MoE
    models (the expert groups' placement).
    """

    def __init__(self, session: Session, store, cache: dict | None, warnings: list[str],
                 ekey_extra: tuple) -> None:
        pl, cl = session.plan, session.cluster
        self.session, self.cache, self.warnings = session, cache, warnings
        self.comm = CommModel(store, pl, cl)
        self.ckey = (pinned(cache, store), read_once(cache, "cluster", cl, _cluster_fields),
                     pl.tensor_parallel, pl.dp_cp_size, pl.context_parallel,
                     *((pl.data_parallel_shard_size,) if pl.data_parallel_shard_size else ()),
                     # a last, partial node (core.sim.comm.partial_node_share) reads num_gpus
                     *((pl.num_gpus,) if pl.num_gpus % cl.gpus_per_node else ()))
        self.ekey = self.ckey + ekey_extra

    def tp_call(self, kind: str, nbytes: float) -> float:
        """A tensor-parallel collective ``kind`` of ``nbytes``, seconds."""
        return memoized(self.cache, ("tp", self.ckey, kind, nbytes), self.warnings,
                     cached_comm_call(self.comm, "tp_collective", kind, nbytes))

    def dp_call(self, kind: str, nbytes: float) -> float:
        """A data-parallel collective ``kind`` of ``nbytes`` (over d*cp), seconds."""
        return memoized(self.cache, ("dp", self.ckey, kind, nbytes), self.warnings,
                     cached_comm_call(self.comm, "dp_collective", kind, nbytes))

    def edp_call(self, kind: str, nbytes: float) -> float:
        """An expert-data-parallel collective ``kind`` of ``nbytes``, seconds."""
        return memoized(self.cache, ("edp", self.ekey, kind, nbytes), self.warnings,
                     cached_comm_call(self.comm, "edp_collective", kind, nbytes))

    def cp_exchange(self, times: dict[str, float]) -> dict[str, float]:
        """The context-parallel exchange of one attention op (``cp > 1``), as the
        ``cp_{fwd,bwd}_{hidden,exposed}`` sources: the ring (:func:`_cp_ring_times`), PyTorch's
        all-gather rotation (:func:`_cp_allgather_times`), Megatron-Core's all-gather (nothing
        overlapped), plus the all-to-alls of ``a2a`` / ``a2a+p2p`` (exposed); ``times``: the
        op times (the attention core's)."""
        m, pl = self.session.model, self.session.plan
        cp, p = pl.context_parallel, pl.pipeline_parallel
        blk = model_math.cp_kv_block_bytes(m, pl)

        def exchange(method: str, n: float) -> float:  # the all-to-all's group: cp_a2a_size
            return memoized(self.cache, (method, self.ckey, p, n, model_math.cp_a2a_size(pl)),
                         self.warnings, cached_comm_call(self.comm, method, n))

        core = (times["attention_core_fwd"], times["attention_core_bwd"])
        cpa = model_math.cp_a2a_size(pl)
        if getattr(pl, "cp_comm_type", "p2p") == "allgather":  # PyTorch's context_parallel
            ring = _cp_allgather_times(cp, *core, exchange("cp_all_gather", cp * blk),
                                       exchange("cp_send_recv", blk))
        elif model_math.cp_all_gather(pl):  # Megatron-Core's / TE's: nothing overlapped
            gather = exchange("cp_all_gather", cp * blk)
            ring = {"cp_fwd_hidden": 0.0, "cp_fwd_exposed": gather, "cp_bwd_hidden": 0.0,
                    "cp_bwd_exposed": gather + exchange("cp_reduce_scatter", cp * blk)}
        elif cp // cpa > 1:  # the ring (between the all-to-all groups of a2a+p2p)
            ring = _memoized_ring(self.cache, cp // cpa, *core,
                                  *(exchange("cp_send_recv", n) for n in (blk, 2 * blk)))
        else:
            ring = dict.fromkeys(("cp_fwd_hidden", "cp_fwd_exposed", "cp_bwd_hidden",
                                  "cp_bwd_exposed"), 0.0)
        if cpa > 1:  # the all-to-alls before and after the core: not overlapped
            a2a = sum(exchange("cp_all_to_all", n) for n in model_math.cp_a2a_bytes(m, pl))
            ring["cp_fwd_exposed"] += a2a
            ring["cp_bwd_exposed"] += a2a
        return ring

    def cp_mtp_roll(self) -> float:
        """Seconds of one MTP layer's ``roll_tensor`` boundary exchanges per micro-batch under
        context parallelism (the :data:`_SOURCES` entry ``cp_mtp_roll``; 0 at ``cp = 1`` and
        without MTP layers), blocking the compute stream of the MTP layer's forward.

        Megatron-Core 0.16.1 rolls four tensors per MTP layer and micro-batch with
        ``roll_tensor(..., cp_group)`` (:data:`core.model.mtp.MTP_CP_ROLL_ELEMENT_BYTES`: the
        input ids and position ids, ``transformer/multi_token_prediction.py`` lines 705 and
        712; the labels and loss mask, ``models/gpt/gpt_model.py`` lines 626 and 633), none in
        the backward. Each call posts an ``isend`` and an ``irecv`` of one ``(b,)`` boundary
        column per chunk with the previous and the next cp rank, all before the first
        ``wait``, and waits for them all before its output is used: timed as one step of the
        cp ring (:meth:`core.sim.comm.CommModel.cp_send_recv`: every rank sending to a
        neighbour and receiving from one at once, in a node or across) of the call's
        ``b * element size`` bytes (:func:`core.model.mtp.mtp_cp_roll_bytes`), summed over
        the four calls. Messages of a few bytes: the time is the store's send/recv latency."""
        pl = self.session.plan
        if pl.context_parallel <= 1 or not model_math.mtp_layers(self.session.model):
            return 0.0
        return sum(memoized(self.cache, ("cp_send_recv", self.ckey, pl.pipeline_parallel, n,
                                         model_math.cp_a2a_size(pl)), self.warnings,
                            cached_comm_call(self.comm, "cp_send_recv", n))
                   for n in model_math.mtp_cp_roll_bytes(pl.micro_batch_size))

    def tp_collectives(self, act_bytes: float, sp: bool) -> dict[str, float]:
        """Seconds of the tensor-parallel collectives of one activation of ``act_bytes``
        (``t > 1``): by kind (the all-reduce; with sequence parallelism the reduce-scatter and
        all-gather too), MLA's latent ones (``mla_*``, :func:`core.model.mla.mla_tp_latent_width`)
        and the MTP layers' ``eh_proj`` ones (``mtp_fwd``, ``mtp_bwd``)."""
        m = self.session.model
        kinds = ("reduce_scatter", "all_gather", "all_reduce") if sp else ("all_reduce",)
        tp = {k: self.tp_call(k, act_bytes) for k in kinds}
        if m.multi_latent_attention is True:  # MLA's latent collectives (mla_tp_latent_width)
            latent_bytes = act_bytes / m.hidden_size * model_math.mla_tp_latent_width(m)
            tp.update({"mla_" + k: self.tp_call(k, latent_bytes) for k in kinds})
        if model_math.mtp_layers(m):  # eh_proj's collectives (mtp_tp_collectives)
            per_el = act_bytes / m.hidden_size
            for phase, colls in zip(("mtp_fwd", "mtp_bwd"),
                                    model_math.mtp_tp_collectives(m, sp)):
                tp[phase] = sum(self.tp_call(k, per_el * n) for k, n in colls)
        return tp

    def sends(self, p2p_bytes: float, p: int, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of each stage's pipeline sends of ``p2p_bytes``, forward (stage ``i`` to
        ``i+1 mod p``) and backward (``i`` to ``i-1 mod p``), shape (p,) each; the hop from
        the last stage to the first only when chunks wrap (``v > 1``), 0 otherwise. One lookup
        per kind of hop (within a node or across)."""
        cache, comm = self.cache, self.comm
        # hop i -> i+1 for i < p-1, and the wrap-around hop p-1 -> 0 when chunks wrap
        links = list(range(p - 1)) + ([p - 1] if v > 1 else [])
        skey = ("share", self.ckey, p, v > 1)  # rank placement: the cluster, t, d and p
        share = cache.get(skey) if cache is not None else None
        if share is None:
            share = [comm.stages_share_node(i, (i + 1) % p) for i in links]
            if cache is not None:
                cache[skey] = share
        hop = np.zeros(p)
        for flag in set(share):
            i = links[share.index(flag)]
            hop[[j for j, f in zip(links, share) if f == flag]] = memoized(
                cache, ("p2p", self.ckey, flag, p2p_bytes), self.warnings,
                cached_comm_call(comm, "p2p", i, p2p_bytes, (i + 1) % p))
        send_fwd = hop.copy()                 # i -> i+1 (mod p)
        send_bwd = np.concatenate([hop[-1:], hop[:-1]])  # i -> i-1 (mod p): the hop between i-1 and i
        return send_fwd, send_bwd
