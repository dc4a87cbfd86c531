"""The schedule protocol, its registry and what every schedule shares.

A schedule says, for each pipeline stage, the order in which that stage runs its work items.
A work item is one phase of one micro-batch on one model chunk of the stage's layers:

* ``F``: the forward of the chunk for the micro-batch;
* ``B``: its backward -- the whole backward for schedules that do not split it, the
  input-gradient part only for those that do (zero-bubble);
* ``W``: the weight-gradient part of the backward (split schedules only).

A stage holds ``v`` model chunks (:meth:`PipelineSchedule.chunks`); chunk ``c`` of stage ``i``
holds the layers of virtual stage :meth:`PipelineSchedule.virtual_stages` ``[i, c]`` (``c*p + i``
unless the schedule places them otherwise, as ZB-V's V shape does), and the activation of
virtual stage ``k`` goes to virtual stage ``k+1`` (:meth:`PipelineSchedule.placement`).

What belongs here: the :class:`PipelineSchedule` base class (work order, placement, rules,
Megatron facts), :func:`register` / :func:`get` / :func:`names`, and the cached functions every
caller reads a schedule through (:func:`work_order`, :func:`work_orders`, the in-flight counts of
the memory model). Each schedule is one module of this package.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["PHASE_F", "PHASE_B", "PHASE_W", "PHASES", "WorkOrder", "PipelineSchedule",
           "NotInMegatron", "register", "get", "names", "work_order", "work_orders",
           "in_flight_microbatches", "in_flight_all", "loss_in_flight", "embedding_in_flight",
           "schedule_errors", "combined_1f1b_paired_share", "order_of", "megatron_schedule", "steady_microbatches"]

PHASE_F, PHASE_B, PHASE_W = 0, 1, 2
#: Phase names, indexed by the phase codes above.
PHASES = ("F", "B", "W")


@dataclass(frozen=True)
class WorkOrder:
    """The program order of one pipeline stage.

    Attributes
    ----------
    phase : int8 array, shape (k,)
        :data:`PHASE_F`, :data:`PHASE_B` or :data:`PHASE_W` per work item.
    microbatch : int32 array, shape (k,)
        Micro-batch 0..m-1 of each item.
    chunk : int32 array, shape (k,)
        Virtual chunk 0..v-1 of each item (0 without interleaving).
    """

    phase: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray

    def __len__(self) -> int:
        return int(self.phase.shape[0])




class PipelineSchedule:
    """Base of the registered schedules.

    Attributes
    ----------
    name : str
        The value of ``plan.schedule``.
    title : str
        The name users know it by, for labels.
    splits_backward : bool
        Whether the backward is split into B (input gradient) and W (weight
        gradient) items.
    uses_virtual_stages : bool
        Whether ``plan.virtual_pipeline_stages`` (v >= 2) applies.
    fast_path : bool
        Whether :func:`core.sim.fastpath.pipeline_iteration_times` may solve it; the
        sweep falls back to the general graph solver otherwise.
    fixed_chunks : int
        Model chunks per stage the schedule always places (ZB-V: 2), 0 when the plan's
        ``v`` decides (:meth:`chunks`).
    in_megatron : bool
        Whether Megatron-LM runs it (:meth:`megatron_args`).
    """

    name = ""
    title = ""
    splits_backward = False
    uses_virtual_stages = False
    fast_path = True
    fixed_chunks = 0
    in_megatron = False
    #: Names :meth:`virtual_stages` (a memo key): "wrap" (``c*p + i``), "v" (ZB-V's V shape).
    placement_kind = "wrap"

    @property
    def stage_times_kind(self) -> tuple:
        """All that stage times (:func:`core.sim.stages.stage_times`) read of the schedule: whether
        it splits the backward, uses the plan's ``v``, places a fixed number of chunks and how
        it places them. Plans whose schedules have the same kind share stage times (the sweep's
        key; 1F1B and GPipe do)."""
        return (self.splits_backward, self.uses_virtual_stages, self.fixed_chunks,
                self.placement_kind)

    def chunks(self, v: int | None) -> int:
        """Model chunks per stage for the plan's ``virtual_pipeline_stages`` ``v`` (None or an
        int): ``v`` when the schedule uses it, its :attr:`fixed_chunks` when it places a fixed
        number, else 1."""
        if self.fixed_chunks:
            return self.fixed_chunks
        return int(v or 1) if self.uses_virtual_stages else 1

    def place(self, p: int, v: int) -> np.ndarray:
        """The placement rule :meth:`virtual_stages` caches: ``c*p + i`` for chunk ``c`` of stage
        ``i`` (Megatron's interleaving: the chunks wrap around the stages); schedules with
        another placement override this method."""
        return np.arange(v, dtype=np.int64)[None, :] * p + np.arange(p, dtype=np.int64)[:, None]

    def virtual_stages(self, p: int, v: int) -> np.ndarray:
        """Virtual stage (0..p*v-1, the model's order of layer blocks) that chunk ``c`` of stage
        ``i`` holds, int64 array of shape (p, v) (:meth:`place`; cached, read-only)."""
        return _placement(self, int(p), int(v))[0]

    def placement(self, p: int, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Inverse of :meth:`virtual_stages`: ``(stage, chunk)`` of each virtual stage ``k``,
        two int64 arrays of shape (p*v,) (cached, read-only). The activation of virtual stage
        ``k`` goes to virtual stage ``k+1``, its input gradient back to ``k-1``."""
        return _placement(self, int(p), int(v))[1:]

    def async_sends(self, p: int, m: int, v: int) -> np.ndarray | None:
        """Which items' sends run asynchronously when the plan overlaps its pipeline transfers
        (:func:`core.plan.parallel.p2p_overlapped`): bool (p, K) in program order (as
        :meth:`orders`), or None when the schedule never overlaps them (the default)."""
        return None

    def loss_stage(self, p: int, v: int) -> int:
        """The stage that holds the model's last virtual stage (the output layer and the loss;
        Megatron-Core's multi-token prediction block too): ``p - 1``, stage 0 under ZB-V."""
        return int(_placement(self, int(p), int(v))[1][-1])

    def megatron_args(self, v: int | None) -> list[str]:
        """Megatron-LM's command-line arguments that select this schedule (``v``: the plan's
        ``virtual_pipeline_stages``).

        Raises
        ------
        NotInMegatron
            Megatron-LM has no such schedule.
        """
        raise NotInMegatron(f"Megatron-LM's arguments have 1F1B and interleaved 1F1B only "
                            f"({self.title} is not in Megatron-LM)")

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        """Program order of ``stage`` (0..p-1) for ``m`` micro-batches and ``v`` chunks."""
        raise NotImplementedError

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every stage's :meth:`order` at once: ``phase``, ``microbatch``, ``chunk``, int64
        arrays of shape (p, K). This default stacks :meth:`order` stage by stage (ValueError
        when the stages' programs differ in length); schedules override it with one numpy
        pass over all stages (equal arrays; tests compare them)."""
        per = [self.order(p, m, i, v) for i in range(p)]
        if any(len(o) != len(per[0]) for o in per):
            raise ValueError(f"{self.name}: stages have programs of different lengths")
        return tuple(np.stack([getattr(o, a) for o in per]).astype(np.int64)
                     for a in ("phase", "microbatch", "chunk"))

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        """Bubble share of the iteration with uniform stages and free communication, or None
        when it depends on more than p, m and v."""
        return (p - 1) / (m + p - 1)

    def in_flight_steady_from(self, p: int, v: int) -> int | None:
        """A micro-batch count ``m0`` from which the peak in-flight counts no longer change with
        ``m`` (:func:`in_flight_all`, :func:`loss_in_flight`), None when they grow with it.
        The peak is reached in the warm-up and the cool-down; a longer steady phase (one
        forward, one backward) repeats without raising it. Default ``2 * p * v`` (``v`` the
        chunks per stage): 1F1B's is reached at ``m = p``, interleaved 1F1B's at ``2p``
        (Narayanan et al. 2021 Sec. 2.2.2's warm-up); ``tests/test_pipeline.py`` checks every
        valid ``m`` up to ``10 p v`` against the full orders."""
        return 2 * p * v

    def in_flight_closed_form(self, p: int, m: int, v: int) -> tuple[tuple[float, ...], int] | None:
        """``(in-flight counts of every stage, loss in flight)`` without building the orders,
        for a schedule whose counts grow with ``m`` (:meth:`in_flight_steady_from` None);
        None to build them."""
        return None

    def order_errors(self, p: int, m: int, v: int) -> list[tuple[str, str]]:
        """The rules its work order itself needs (``(field, message)`` pairs; none by default):
        :func:`work_order` and :func:`work_orders` refuse a (p, m, v) that breaks one, so no
        solver is handed an order with items that wait for work never scheduled."""
        return []

    def check_order(self, p: int, m: int, v: int) -> None:
        """ValueError ``"FIELD: message"`` for the first rule of :meth:`order_errors` broken."""
        for field, message in self.order_errors(p, m, v)[:1]:
            raise ValueError(f"{field}: {message}")

    def errors(self, p: int, m: int, v: int | None, num_layers: int, extra_slots: int = 0
               ) -> list[tuple[str, str]]:
        """Rules the plan breaks for this schedule: ``(field, message)`` pairs. ``extra_slots``:
        the layer slots of the embedding and the loss when they count in the pipeline split
        (:func:`core.plan.layout.pipeline_split_slots`), 0 to 2. ``num_layers`` None: a custom
        pipeline layout places the layers (``plan.pipeline_model_parallel_layout``), so no
        divisibility rule applies."""
        if v not in (None, 1):
            return [("plan.virtual_pipeline_stages",
                     f"virtual_pipeline_stages={v} needs schedule 'interleaved'; "
                     f"{self.name} has one chunk per stage (leave it empty)")]
        return []




@lru_cache(maxsize=1024)
def _placement(sched: PipelineSchedule, p: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``virtual_stages`` (p, v) and its inverse ``stage``, ``chunk`` (p*v,) of ``sched`` (its
    :meth:`PipelineSchedule.place`), read-only: the graph, the fast path and the memory model
    ask for them per plan."""
    vs = np.asarray(sched.place(p, v), np.int64)
    stage = np.empty(p * v, np.int64)
    chunk = np.empty(p * v, np.int64)
    stage[vs] = np.arange(p, dtype=np.int64)[:, None]
    chunk[vs] = np.arange(v, dtype=np.int64)[None, :]
    for a in (vs, stage, chunk):
        a.setflags(write=False)
    return vs, stage, chunk


class NotInMegatron(ValueError):
    """A schedule Megatron-LM does not run (:meth:`PipelineSchedule.megatron_args`)."""


_REGISTRY: dict[str, PipelineSchedule] = {}


def register(cls: type[PipelineSchedule]) -> type[PipelineSchedule]:
    """Add a schedule to the registry under ``cls.name`` (:mod:`core.schedules` registers the
    package's schedules in their order; a class decorator too)."""
    _REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> PipelineSchedule:
    """The schedule registered as ``name``.

    Raises
    ------
    ValueError
        No schedule of that name.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"schedule={name!r} is not one of {', '.join(_REGISTRY)}") from None


def megatron_schedule(chunks: int | None) -> str:
    """The registered schedule Megatron-LM runs with ``chunks`` model chunks per rank (its
    ``--num-virtual-stages-per-pipeline-rank``, None when not given): the one in Megatron-LM that
    uses virtual stages when ``chunks > 1`` (interleaved 1F1B), else the one that does not (1F1B)."""
    virtual = chunks is not None and chunks > 1
    return next(n for n, s in _REGISTRY.items() if s.in_megatron and s.uses_virtual_stages == virtual)


def names() -> tuple[str, ...]:
    """Registered schedule names in registration order."""
    return tuple(_REGISTRY)


def order_of(phases, mbs, chunks=None) -> WorkOrder:
    """A read-only :class:`WorkOrder` from per-item phases, micro-batches and chunks (chunk 0
    when ``chunks`` is None)."""
    phase = np.asarray(phases, np.int8)
    mb = np.asarray(mbs, np.int32)
    chunk = np.zeros_like(mb) if chunks is None else np.asarray(chunks, np.int32)
    for a in (phase, mb, chunk):
        a.setflags(write=False)
    return WorkOrder(phase, mb, chunk)


@lru_cache(maxsize=256)
def work_order(schedule: str, p: int, m: int, stage: int, v: int = 1) -> WorkOrder:
    """Program order of one stage (cached; the arrays are read-only).

    Parameters
    ----------
    schedule : str
        A registered name (:func:`names`).
    p, m : int
        Pipeline-parallel size and number of micro-batches (>= 1).
    stage : int
        0..p-1.
    v : int
        Virtual chunks per stage (1 unless the schedule uses them).

    Raises
    ------
    ValueError
        Unknown schedule, or a (p, m, v) its order cannot run
        (:meth:`PipelineSchedule.order_errors`).
    """
    sched = get(schedule)
    sched.check_order(p, m, sched.chunks(v))
    return sched.order(p, m, stage, sched.chunks(v))


@lru_cache(maxsize=64)
def work_orders(schedule: str, p: int, m: int, v: int = 1
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Program order of every stage at once (:meth:`PipelineSchedule.orders`): ``phase``,
    ``microbatch``, ``chunk``, int64 arrays of shape (p, K), row ``i`` equal to
    :func:`work_order` of stage ``i`` (cached; read-only). Raises ValueError for an unknown
    schedule or a (p, m, v) its order cannot run (:meth:`PipelineSchedule.order_errors`)."""
    sched = get(schedule)
    sched.check_order(p, m, sched.chunks(v))
    out = sched.orders(p, m, sched.chunks(v))
    for a in out:
        a.setflags(write=False)
    return out


def steady_microbatches(schedule: str, p: int, m: int, v: int = 1) -> int:
    """The micro-batch count whose peak in-flight counts equal ``m``'s that is cheapest to
    order: ``m`` itself, or for ``m`` beyond the schedule's
    :meth:`PipelineSchedule.in_flight_steady_from` the smallest count from there on that its
    order accepts (``m`` when none is found within ``p * v`` more). A sweep of a global batch of
    millions of sequences asks for orders of millions of items per stage otherwise (minutes,
    gigabytes)."""
    sched = get(schedule)
    m0 = sched.in_flight_steady_from(p, sched.chunks(v))
    if m0 is None or m <= m0:
        return m
    for k in range(m0, min(m, m0 + p * sched.chunks(v) + 1)):
        if not sched.order_errors(p, k, sched.chunks(v)):
            return k
    return m


@lru_cache(maxsize=1024)
def in_flight_all(schedule: str, p: int, m: int, v: int = 1,
                  chunk_layers: tuple[tuple[int, ...], ...] | None = None) -> tuple[float, ...]:
    """:func:`in_flight_microbatches` of every stage (``chunk_layers``: each stage's chunks'
    layers, or None), from :func:`work_orders` in one pass; the same floats. Beyond the
    schedule's steady state the orders of :func:`steady_microbatches` give them; GPipe's
    closed form (:meth:`PipelineSchedule.in_flight_closed_form`) needs none."""
    sched = get(schedule)
    sched.check_order(p, m, sched.chunks(v))
    closed = sched.in_flight_closed_form(p, m, sched.chunks(v))
    if closed is not None:
        return closed[0]
    m = steady_microbatches(schedule, p, m, v)
    phase, _, chunk = work_orders(schedule, p, m, v)
    sched = get(schedule)
    release = PHASE_W if sched.splits_backward else PHASE_B
    step = np.where(phase == PHASE_F, 1, np.where(phase == release, -1, 0))
    vv = sched.chunks(v)
    out = [float(x) / vv for x in np.cumsum(step, axis=1).max(axis=1).tolist()]
    if vv > 1 and chunk_layers is not None:
        for i, layers in enumerate(chunk_layers):
            if len(set(layers)) > 1 and sum(layers):
                weights = np.asarray(layers, np.int64)[chunk[i]]
                out[i] = float(np.cumsum(step[i] * weights).max()) / float(sum(layers))
    return tuple(out)


@lru_cache(maxsize=1024)
def loss_in_flight(schedule: str, p: int, m: int, v: int = 1) -> int:
    """Peak micro-batches whose loss the last stage has computed and not yet back-propagated:
    the running count of the forwards of the model's last virtual stage (chunk ``v - 1``
    of stage ``p - 1``; ZB-V: chunk 1 of stage 0) minus their backwards (B: the loss's gradient is the first step of the
    input-gradient pass, also when the weight gradients are split off), maximised over the
    stage's program. 1F1B, interleaved 1F1B and ZB-H1: 1 (each loss's backward follows its
    forward); GPipe: ``m`` when ``p > 1`` (all forwards run before the first backward).
    Each such micro-batch keeps its cross entropy's saved softmax
    (:func:`core.model.memory.stage_memory_arrays`). Beyond the steady state, from the orders
    of :func:`steady_microbatches` (or the closed form), as :func:`in_flight_all`."""
    return _virtual_stage_in_flight(schedule, p, m, v, -1)  # the virtual stage of the loss


@lru_cache(maxsize=1024)
def embedding_in_flight(schedule: str, p: int, m: int, v: int = 1) -> int:
    """Peak micro-batches whose embedding the first stage has run and not yet
    back-propagated: the running count of the forwards of the model's first virtual stage
    (chunk 0 of stage 0 under every placement) minus their backwards (B: the embedding's
    dropout and gather are the last steps of the input-gradient pass), maximised over the
    stage's program; as :func:`loss_in_flight` for the last virtual stage. 1F1B:
    ``min(p, m)`` (Korthikanti et al. 2022, Sec. 4.2.3: the first stage holds ``p``
    micro-batches); GPipe: ``m`` when ``p > 1``; interleaved 1F1B: the first chunk's
    micro-batches in stage 0's warm-up, at most ``min(p, m)`` more than one per chunk
    round. Each such micro-batch keeps the embedding's input ids and dropout mask
    (:func:`core.model.memory.stage_memory_arrays`). Beyond the steady state from the orders
    of :func:`steady_microbatches`; GPipe's closed form gives ``m`` (every forward runs before
    the first backward, as many embeddings as losses)."""
    return _virtual_stage_in_flight(schedule, p, m, v, 0)  # the virtual stage of the embedding


def _virtual_stage_in_flight(schedule: str, p: int, m: int, v: int, k: int) -> int:
    """Peak running count of virtual stage ``k``'s forwards minus its backwards (B) on the
    stage that runs it (``k`` indexes the placement's virtual stages: 0 the first, -1 the
    last), from the schedule's closed form where it has one (GPipe: ``m``), else from the
    orders of :func:`steady_microbatches`."""
    sched = get(schedule)
    vv = sched.chunks(v)
    sched.check_order(p, m, vv)
    closed = sched.in_flight_closed_form(p, m, vv)
    if closed is not None:
        return closed[1]
    phase, _, chunk = work_orders(schedule, p, steady_microbatches(schedule, p, m, v), v)
    stage_of, chunk_of = sched.placement(p, vv)
    s, c = int(stage_of[k]), int(chunk_of[k])
    mine = chunk[s] == c
    step = np.where(mine & (phase[s] == PHASE_F), 1, np.where(mine & (phase[s] == PHASE_B), -1, 0))
    return int(np.cumsum(step).max())


@lru_cache(maxsize=65536)
def in_flight_microbatches(schedule: str, p: int, m: int, stage: int, v: int = 1,
                           chunk_layers: tuple[int, ...] | None = None) -> float:
    """Peak activations a stage holds, in units of one micro-batch through all its layers.

    The running count of items whose forward has run and whose activations
    are not yet freed (by B, or by W when the backward is split), maximised
    over the stage's program, divided by ``v`` since each chunk holds ``1/v``
    of the stage's layers. 1F1B: ``min(p-i, m)``; GPipe: ``m``; interleaved
    (Megatron-Core): ``(warm-up + 1)/v``, Narayanan et al. 2021 Sec. 2.2.2.
    ``chunk_layers`` (length ``v``, the layers of each of the stage's chunks) weighs each
    item by its chunk's layers when the chunks differ (the embedding / loss counted in the
    pipeline split): the peak of layers held over the stage's layers.
    """
    closed = get(schedule).in_flight_closed_form(p, m, get(schedule).chunks(v))
    if closed is not None:
        return closed[0][stage]
    order = work_order(schedule, p, steady_microbatches(schedule, p, m, v), stage, v)
    release = PHASE_W if get(schedule).splits_backward else PHASE_B
    step = np.where(order.phase == PHASE_F, 1, np.where(order.phase == release, -1, 0))
    vv = get(schedule).chunks(v)
    if vv > 1 and chunk_layers is not None and len(set(chunk_layers)) > 1 and sum(chunk_layers):
        weights = np.asarray(chunk_layers, np.int64)[order.chunk]
        return float(np.cumsum(step * weights).max()) / float(sum(chunk_layers))
    return float(np.cumsum(step).max()) / vv


def schedule_errors(schedule: str, p: int, m: int, v: int | None, num_layers: int,
                    extra_slots: int = 0) -> list[tuple[str, str]]:
    """``(field, message)`` for each rule of ``schedule`` the plan breaks (unknown name included);
    ``extra_slots`` as in :meth:`PipelineSchedule.errors`."""
    try:
        sched = get(schedule)
    except ValueError as exc:
        return [("plan.schedule", str(exc))]
    return sched.errors(p, m, v, num_layers, extra_slots)


@lru_cache(maxsize=4096)
def combined_1f1b_paired_share(schedule: str, p: int, m: int, v: int, stage: int) -> float:
    """Share of stage ``stage``'s ``m*v`` forwards (and as many backwards) that Megatron-Core's
    combined 1F1B (``--overlap-moe-expert-parallel-comm``) runs beside an item of the other
    pass, in [0, 1).

    The forwards before the stage's first backward in :func:`work_order` run alone, as many
    backwards in the cool-down. With pipelining these are the schedule's warm-up and its first
    steady-state forward, which the overlap turns into one more warm-up forward (Megatron-Core
    0.19 ``schedules.get_pp_rank_microbatches``: "one extra micro-batch forward step before the
    1f1b stages"); without pipelining the first forward (and the last backward): ``(m-1)/m``.
    With interleaving stage ``i`` runs ``2(p-1-i) + (v-1)p + 1`` forwards alone, so a plan of
    few micro-batches pairs few or none."""
    order = work_order(schedule, p, m, stage, v)
    backward = np.flatnonzero(order.phase == PHASE_B)
    n = m * get(schedule).chunks(v)
    alone = min(int(backward[0]) if backward.size else n, n)
    return (n - alone) / n
