"""The sweep's space: which plans a sweep tries, their enumeration, and what it swept or held.

:class:`SweepSpace` is the user's choice of GPU budget and candidate sizes (the command line's
options, the Explore tab's form, a session file's ``sweep`` section); :func:`enumerate_plans`
turns it and a session into every valid plan, with one source of truth for validity,
:func:`core.plan.rules.validate`; :mod:`core.studies.sweep.dimensions` says which plan
fields the plans sweep and which they hold, and why. The candidate lists (:func:`tp_pp_candidates`,
:func:`cp_candidates`) are shared with :mod:`core.studies.sweep.explain`, which says why a
space yields no plan. No simulation belongs here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from core import schedules as pipeline_schedules
from core.plan.fields import BOUNDS, ConfigError, FieldError
from core.plan.parallel import (CP_COMM_TYPES, MOE_DISPATCHERS, SWEEP_SCHEDULES,
                                RECOMPUTE_CHOICES, RECOMPUTE_MODES, SCHEDULES, ZERO_STAGES,
                                PLAN_FIELDS, ParallelPlan, plan_key)
from core.plan.session import Session
from core.plan.layout import expand_pipeline_layout, pipeline_layout_text, pipeline_split_slots
from core.studies.sweep.splits import (pipeline_splits, split_flag_options, split_flags_for,
                                       uneven_split_flags)
from core.plan.rules import probe_plan, validate
from core.plan.verdicts import PlanVerdicts
from core.studies.sweep.variants import plan_maker, size_variants, sweep_verdicts, value_check
from core.studies.sweep.pace import yield_interpreter
from core.studies.sweep.phase import PhaseFn, PhaseTicker

__all__ = ["SweepSpace", "DEFAULT_MICRO_BATCH_SIZES", "CROSS_ENTROPY_FUSIONS",
           "DEFAULT_CROSS_ENTROPY_FUSION",
           "DEFAULT_CP_COMM_TYPES", "enumerate_plans",
           "one_stage_schedule", "budget_text", "divisors", "as_list",
           "micro_batch_sizes_of",
           "check_enumerable", "cp_candidates", "RECOMPUTE_ALL_LAYERS", "recompute_layer_counts", "tp_pp_candidates", "layout_stages", "in_budget",
           "index_of_plan"]

#: The cross-entropy choices of :attr:`SweepSpace.cross_entropy_fusion`: each the plan's
#: (``cross_entropy_loss_fusion``, ``cross_entropy_fusion_impl``)
CROSS_ENTROPY_FUSIONS = {"off": (False, "native"), "native": (True, "native"),
                         "te": (True, "te")}

#: The one cross-entropy choice (of :data:`CROSS_ENTROPY_FUSIONS`) of a space that names none
#: and does not hold the session's values: Transformer Engine's fused kernels, the
#: Megatron-Bridge recipes' choice (docs/sweep_parallel.md); Megatron-LM's arguments refuse it
#: (rule ``cross-entropy-te``), which the sweep's summary says of the plans it picks.
DEFAULT_CROSS_ENTROPY_FUSION = "te"

#: The context-parallel exchanges (``plan.cp_comm_type``) a space without them tries on the
#: plans with cp > 1: Megatron-Core's ring (``--cp-comm-type p2p``, its default) and its
#: all-to-all (``a2a``, DeepSpeed-Ulysses, Jacobs et al. 2023), the two its users try.
DEFAULT_CP_COMM_TYPES = ("p2p", "a2a")

#: :attr:`SweepSpace.recompute_num_layers`' word for every layer of a model chunk (the plan
#: field None), as Megatron-LM users would write it.
RECOMPUTE_ALL_LAYERS = "all"


def recompute_layer_counts(values: Any) -> list[int | None]:
    """:attr:`SweepSpace.recompute_num_layers` as the plans' ``recompute_num_layers``, in order
    and once each: ``"all"`` -> None (every layer), a count as it is."""
    return list(dict.fromkeys(None if v == RECOMPUTE_ALL_LAYERS else int(v)
                              for v in as_list(values)))


#: Micro-batch sizes tried when the space does not name them.
DEFAULT_MICRO_BATCH_SIZES = (1, 2, 4, 8)


def single_rank_zero_stages(zs: list, base: ParallelPlan) -> list:
    """The one ZeRO stage of ``zs`` kept at d*cp = 1, where they all shard over one rank and
    change nothing: the first, or the first a field the plans hold needs (the precision-aware
    optimizer the distributed optimizer, zero_stage 1, ``core.plan.rules``; FP8 parameter
    gathers a sharded optimizer, zero_stage >= 1), so such a session keeps its plans at
    d*cp = 1 instead of none passing the rules."""
    if base.use_precision_aware_optimizer is True:
        return [z for z in zs if z == 1][:1] or zs[:1]
    if base.fp8_param_gather:
        return [z for z in zs if z >= 1][:1] or zs[:1]
    return zs[:1]


@dataclass
class SweepSpace:
    """Which plans a sweep tries. Construction validates nothing; see :meth:`errors`.

    The global batch size B, the precision and the model come from the
    session; the GPU budget and candidate sizes from here. Give exactly one
    budget: ``num_gpus`` (exact counts), ``max_gpus``, or only a bound on the
    data-parallel size (``data_parallel`` / ``max_data_parallel``, no GPU bound).

    Attributes
    ----------
    num_gpus : int or sequence of int, optional
        Exact world sizes ``t*p*d`` allowed.
    max_gpus : int, optional
        Largest world size allowed.
    tensor_parallel : sequence of int, optional
        Candidate t. Default: divisors of ``cluster.gpus_per_node`` (within a node),
        plus multiples of it when ``tensor_parallel_across_nodes``.
    tensor_parallel_across_nodes : bool
        Also try t = k * gpus_per_node (k >= 2), which ``validate`` allows and the
        communication model prices as a hierarchical all-reduce. Default False.
    pipeline_parallel : sequence of int, optional
        Candidate p. Default: divisors of the layer count L and of the layer slots ``L + 1``
        and ``L + 2`` (Megatron-Core's ``account_for_embedding/loss_in_pipeline_split`` count
        the embedding / the loss as a layer slot; counted from the session's slots when its
        plan sets them). A plan whose layers split evenly over its ``p*v`` virtual stages keeps
        the session's two flags; one whose layers do not but ``L + 1`` or ``L + 2`` slots do
        gets the flags that make them split (:func:`split_flags_for`: ``L + 2`` both, ``L +
        1`` the loss's), what Megatron-Core users run (Llama 3.1 405B, 126 layers:
        p=8 or 16 with both); a flag the session sets true stays true wherever its slots
        split. Where none of those slot counts split, the plans turn the session's flags off:
        the layers alone split evenly (Llama 3 70B with the loss's slot, a Megatron-Bridge
        recipe's: 80 layers on p=4, 8, 16), or, without interleaving, uneven first / last
        stages (:func:`pipeline_splits`; the powers of two from 4 too: DeepSeek-V3's 61
        layers on p=8 as 7 + 6 x 8 + 6 and 8 + 6 x 8 + 5), as a Megatron-Core user would run
        them (it refuses the flags with ``--decoder-first/last-pipeline-num-layers``). The
        sweep does not try the flags both ways where the layers split without them. With a custom
        pipeline layout (``plan.pipeline_model_parallel_layout``, n virtual stages) every plan
        keeps the layout, so only p*v = n is tried: p a divisor of n (of those given), v = n/p
        under the interleaved schedule (when among ``virtual_pipeline_stages``, if given) and
        p = n under the others; the sweep never drops the layout nor makes one up.
    data_parallel : sequence of int, optional
        Candidate d. Default: every d the budget allows.
    max_data_parallel : int, optional
        Largest d.
    micro_batch_sizes : sequence of int, optional
        Candidate b (sequences). Default :data:`DEFAULT_MICRO_BATCH_SIZES` (kept for the
        library's callers); None -- the command line's and the Explore tab's default,
        :meth:`default_for` -- is "up to what memory allows": :func:`core.studies.sweep.run_sweep`
        tries every b that divides the global batch while the closed-form memory of the
        smallest-memory plan of that b fits (not its multiples once none fits);
        :func:`enumerate_plans` alone tries every divisor of the global batch.
    schedules : sequence of str
        Pipeline schedules from :data:`core.plan.parallel.SCHEDULES`. Default:
        :data:`core.plan.parallel.SWEEP_SCHEDULES`, all but ZB-V (tried only when asked).
    virtual_pipeline_stages : sequence of int, optional
        Candidate v (>= 2) for the interleaved schedule. Default: every v from 2
        to 8 for which ``L`` (or the ``L + 1`` or ``L + 2`` layer slots, with the flags they
        need) divides by ``p*v``.
    recompute : sequence of str
        Recomputation modes from :data:`core.plan.parallel.RECOMPUTE_CHOICES`. Default: Megatron's
        three (:data:`core.plan.parallel.RECOMPUTE_MODES`); torchtitan's per-op ``selective_op`` when
        asked.
    recompute_num_layers : sequence of int or "all", optional
        The recomputed layers per model chunk (Megatron-LM's ``--recompute-method block
        --recompute-num-layers N``) the plans under full recomputation take: ``"all"`` every
        layer (the plan field None, ``-`` in the sweep's table), ``N`` (1 <= N <= the model's
        layers) the first N layers of each model chunk (a pipeline stage, or a virtual stage
        under the interleaved schedule); a plan whose chunks hold N layers or fewer recomputes
        them all, as Megatron's block method does (:func:`core.plan.layout.capped_recompute_layers`:
        the every-layer plan, shown ``-``). Each value is tried on every full plan, whether it
        fits or not. Default (None): every layer, and the fewest layers per chunk that fit
        (:func:`core.studies.sweep.run_sweep`); the session's count when it sets one. ``("all",)``
        keeps a sweep to what a framework that checkpoints whole blocks runs (DeepSpeed,
        Hugging Face Trainer, torchtitan: :func:`core.io.deepspeed_import.sweep_options`).
    sequence_parallel : sequence of bool, optional
        Sequence parallelism off / on. Default (None): on wherever t > 1 (and the sequence
        divides by t), off at t = 1 -- what Megatron-Core users run (``--sequence-parallel``
        with tensor parallelism: the same communication volume as the all-reduces it
        replaces, less activation memory and LayerNorm work, Korthikanti et al. 2022), so
        the default does not also try it off (that would double the space for plans that
        are not faster); ``(False, True)`` tries both.
    zero_stages : sequence of int, optional
        ZeRO stages from :data:`core.plan.parallel.ZERO_STAGES`. Default (None): all four, 0, 1
        (Megatron's distributed optimizer), 2 and 3 (Megatron-FSDP), each where valid.
    context_parallel : sequence of int, optional
        Candidate context-parallel sizes cp (world size ``t*p*cp*d``). Default (None): the
        powers of two that split the sequence into ``2*cp`` chunks (Megatron-Core's rule)
        up to the budget's GPUs, each where the other rules allow it.
    tp_comm_overlap : sequence of bool, optional
        The tensor-parallel communication overlap (``--tp-comm-overlap``) off / on, on only
        where a plan allows it (sequence parallelism, 1 < t <= a node). Default (None): on
        where allowed (held, not swept).
    dp_overlap : sequence of bool, optional
        The data-parallel overlaps (``--overlap-grad-reduce``, and ``--overlap-param-gather``
        where the optimizer is sharded, ZeRO >= 1) off / on. Default (None): on (held, not
        swept).
    hold_session_values : bool
        Those of the five above left None are held at the session plan's values instead of
        the defaults (sequence parallelism, ZeRO stage, context-parallel size, TP overlap,
        data-parallel overlaps): a sweep of the session's own choices only. Default False.
    expert_parallel : sequence of int, optional
        Candidate expert-parallel sizes ep (inside the ``t*cp*d`` ranks, no extra GPUs). Default:
        for a mixture-of-experts model the divisors of ``num_experts``; for a dense model 1 (a
        dense model's sweep does not grow). The expert tensor-parallel size
        (``plan.expert_tensor_parallel``, ``--expert-tensor-parallel-size``) of a
        mixture-of-experts model's plans with t > 1: the session's, t (unset, Megatron-Core's
        default) and 1 (what Megatron-Bridge's MoE recipes with tensor parallelism set:
        Qwen3-235B-A22B at t=2, ep=32; DeepSeek-V3 at t=2, ep=64), each size once (the
        experts' weights and all-to-all change with it, and at t=2 with etp=t an expert group
        of ep=32 needs twice the ranks); the session's at t = 1 and with
        ``hold_session_values``.
    overlap_moe_expert_parallel_comm : sequence of bool, optional
        The expert all-to-all overlap off / on (Megatron-Core's combined 1F1B), on only for the
        plans that allow it (:func:`core.plan.rules.ep_overlap_errors`; the others are tried
        without). Default (None): for a mixture-of-experts model both, off and on where
        allowed (the overlap hides all-to-all time but keeps a second micro-batch's
        activations: faster, not always within memory); off for a dense model; with
        ``hold_session_values`` the session plan's setting where allowed.
        ``delay_wgrad_compute`` is the session's on the plans that overlap.
    moe_token_dispatcher_type : sequence of str, optional
        The MoE token dispatchers (``alltoall``, ``flex``: DeepEP / HybridEP) tried on the plans
        with expert parallelism (ep > 1; at ep = 1 no token leaves its rank, so the session's
        only). Default (None): both for a mixture-of-experts model (which is faster depends on
        the nodes the expert-parallel group spans and the store's efficiencies); the
        session's with ``hold_session_values`` or for a dense model.
    cp_comm_type : sequence of str, optional
        The context-parallel exchanges (``plan.cp_comm_type``, Megatron-Core's
        ``--cp-comm-type``, of :data:`core.plan.parallel.CP_COMM_TYPES`) tried on the plans with
        context parallelism (cp > 1; at cp = 1 there is no exchange, so the session's only, as
        it is). Default (None): :data:`DEFAULT_CP_COMM_TYPES`, the ring ``p2p`` and the
        all-to-all ``a2a``, and the session's own exchange (a torchtitan session's all-gather)
        (which is faster depends on the plan: the ring hides its K/V blocks under the
        attention steps, the all-to-all exposes its exchanges of Q, K, V and
        the output and runs the core on the whole sequence), ``a2a`` only on the plans
        its rules allow (:func:`core.plan.rules.validate`: the query heads and K/V heads of a
        tensor-parallel rank divisible by cp); a variant that
        breaks a rule is not generated. The session's with ``hold_session_values``.
        ``a2a+p2p`` (Megatron-Core's hierarchical exchange) and ``allgather`` / ``all_gather``
        (PyTorch's and Transformer Engine's all-gather exchanges, which Megatron-Core users
        do not pick) are tried only when named; ``a2a+p2p`` keeps the session's all-to-all
        group size ``plan.cp_a2a_size`` (the sweep does not choose it), so its variants exist
        only at the cp it divides (and is smaller than); naming it without a session
        ``cp_a2a_size`` is an error. The other exchanges have no group size
        (``cp_a2a_size`` empty).
    cross_entropy_fusion : sequence of str, optional
        The loss's cross-entropy, of :data:`CROSS_ENTROPY_FUSIONS`: ``off`` (Megatron's one
        kernel per step), ``native`` (``--cross-entropy-loss-fusion``) or ``te`` (with
        ``--cross-entropy-fusion-impl te``, the Megatron-Bridge performance recipes'
        choice). Default (None): ``te``, held (not swept): a kernel choice, fewer passes over
        the logits in half precision, faster and no larger than the others in every plan
        the breaker's check of issue 26 tried; with ``hold_session_values`` the session's.

    Every other plan field (overlap, gradient dtype, uneven first and last
    stages, recomputed layers under full recomputation unless ``recompute_num_layers`` names
    them, the a2a+p2p exchange's all-to-all group size) is the session plan's; the embedding
    / loss layer-slot flags too, but where a plan's layers need them (``pipeline_parallel``).
    """

    num_gpus: int | Sequence[int] | None = None
    max_gpus: int | None = None
    tensor_parallel: Sequence[int] | None = None
    tensor_parallel_across_nodes: bool = False
    pipeline_parallel: Sequence[int] | None = None
    data_parallel: Sequence[int] | None = None
    max_data_parallel: int | None = None
    micro_batch_sizes: Sequence[int] | None = DEFAULT_MICRO_BATCH_SIZES
    schedules: Sequence[str] = SWEEP_SCHEDULES
    recompute: Sequence[str] = RECOMPUTE_MODES
    recompute_num_layers: Sequence[int | str] | None = None
    virtual_pipeline_stages: Sequence[int] | None = None
    sequence_parallel: Sequence[bool] | None = None
    zero_stages: Sequence[int] | None = None
    context_parallel: Sequence[int] | None = None
    expert_parallel: Sequence[int] | None = None
    overlap_moe_expert_parallel_comm: Sequence[bool] | None = None
    moe_token_dispatcher_type: Sequence[str] | None = None
    cp_comm_type: Sequence[str] | None = None
    cross_entropy_fusion: Sequence[str] | None = None
    tp_comm_overlap: Sequence[bool] | None = None
    dp_overlap: Sequence[bool] | None = None
    hold_session_values: bool = False

    @classmethod
    def default_for(cls, session: Session) -> "SweepSpace":
        """The default space of ``session``: what ``vtrain sweep CONFIG`` sweeps without options
        and what the Explore tab sweeps with its fields left empty -- at most the session
        plan's GPU count (a data-parallel bound of 64 when the plan has no valid count), the
        plan space a Megatron-Core user has (every schedule, recomputation, sequence
        parallelism on with t > 1, ZeRO stages, cp, ep, overlaps: the attributes' defaults)
        and micro-batch sizes up to what memory allows (``micro_batch_sizes=None``)."""
        try:
            gpus = session.plan.num_gpus
        except TypeError:
            gpus = None
        budget = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 \
            else None
        return cls(max_gpus=budget, max_data_parallel=None if budget else 64,
                   micro_batch_sizes=None)

    @classmethod
    def default_on(cls, session: Session, num_gpus: int | Sequence[int],
                   hold_session_values: bool = False) -> "SweepSpace":
        """:meth:`default_for` on exactly ``num_gpus`` GPUs (a count or a list of counts; no
        GPU or data-parallel bound beyond them): the space of the studies that choose each
        candidate's or job's plan (compute-optimal, shared cluster), with
        ``hold_session_values`` as given."""
        return dataclasses.replace(cls.default_for(session), num_gpus=num_gpus, max_gpus=None,
                                   max_data_parallel=None,
                                   hold_session_values=bool(hold_session_values))

    def swept_fields(self) -> tuple[str, ...]:
        """Plan fields this space chooses; every other plan field is the session plan's."""
        out = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size",
               "schedule", "virtual_pipeline_stages", "recompute", "recompute_num_layers",
               "recompute_modules", "first_stage_layers", "last_stage_layers", "context_parallel",
               "expert_parallel")
        hold = self.hold_session_values
        if not hold:
            out += ("expert_tensor_parallel",)
        if not hold or self.sequence_parallel is not None or self.tp_comm_overlap is not None:
            out += ("sequence_parallel", "tp_comm_overlap")
        if not hold or self.zero_stages is not None:
            out += ("zero_stage",)
        if not hold or self.dp_overlap is not None:
            out += ("overlap_grad_reduce", "overlap_param_gather")
        if not hold or self.overlap_moe_expert_parallel_comm is not None:
            out += ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
        if not hold or self.moe_token_dispatcher_type is not None:
            out += ("moe_token_dispatcher_type",)
        if not hold or self.cp_comm_type is not None:
            out += ("cp_comm_type", "cp_a2a_size")
        if not hold or self.cross_entropy_fusion is not None:
            out += ("cross_entropy_loss_fusion", "cross_entropy_fusion_impl")
        return out

    def excludes(self, plan: ParallelPlan) -> str | None:
        """Why ``plan`` is outside this space, in words (the first of its GPU count and its
        swept sizes that the space does not allow), or None when none of them rules it out
        (it may still break a configuration rule or not be enumerated for another reason)."""
        n, counts = plan.num_gpus, self.gpu_counts()
        if counts is not None and n not in counts:
            return f"it uses {n:,} GPUs and the sweep {', '.join(f'{c:,}' for c in counts)}"
        if self.max_gpus is not None and n > self.max_gpus:
            return f"it uses {n:,} GPUs, more than the sweep's {self.max_gpus:,}"
        if self.max_data_parallel is not None and plan.data_parallel > self.max_data_parallel:
            return (f"its data-parallel size {plan.data_parallel} is above the sweep's "
                    f"{self.max_data_parallel}")
        for name, values, value in (
                ("tensor-parallel size", self.tensor_parallel, plan.tensor_parallel),
                ("pipeline-parallel size", self.pipeline_parallel, plan.pipeline_parallel),
                ("data-parallel size", self.data_parallel, plan.data_parallel),
                ("micro-batch size", self.micro_batch_sizes, plan.micro_batch_size),
                ("schedule", self.schedules, plan.schedule),
                ("recomputation", self.recompute, plan.recompute),
                ("context-parallel size", self.context_parallel, plan.context_parallel),
                ("expert-parallel size", self.expert_parallel, plan.expert_parallel),
                ("ZeRO stage", self.zero_stages, plan.zero_stage)):
            if values is not None and value not in tuple(values):
                return (f"its {name} {value} is not among the sweep's "
                        f"{', '.join(str(v) for v in values)}")
        if self.recompute_num_layers is not None and plan.recompute == "full":
            asked = recompute_layer_counts(self.recompute_num_layers)
            if plan.recompute_num_layers not in asked:
                n = plan.recompute_num_layers
                return (f"its recomputed layers per model chunk {'all' if n is None else n} "
                        "are not among the sweep's "
                        f"{', '.join(str(v) for v in as_list(self.recompute_num_layers))}")
        return None

    def gpu_counts(self) -> tuple[int, ...] | None:
        """``num_gpus`` as a sorted tuple, or None when unset."""
        if self.num_gpus is None:
            return None
        if isinstance(self.num_gpus, (int, np.integer)) and not isinstance(self.num_gpus, bool):
            return (int(self.num_gpus),)
        return tuple(sorted(set(self.num_gpus)))

    def errors(self) -> list[FieldError]:
        """Every rule the space breaks, fields named ``sweep.<attribute>`` (empty when valid)."""
        errs: list[FieldError] = []

        top = int(BOUNDS["parallel"].hi)

        def pos_int(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 < v <= top

        def ints(name: str, values: Any) -> None:  # None: the default
            if values is None:
                return
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                values = [values]
            values = list(values)
            if not values:
                errs.append(FieldError(f"sweep.{name}", "must name at least one value"))
            bad = [v for v in values if not pos_int(v)]
            if bad:
                errs.append(FieldError(f"sweep.{name}", f"{bad[0]!r} is not a positive integer "
                                       f"up to {top:,}"))

        ints("num_gpus", self.num_gpus)
        for name in ("max_gpus", "max_data_parallel"):
            v = getattr(self, name)
            if v is not None and not pos_int(v):
                errs.append(FieldError(f"sweep.{name}", f"{name}={v!r} must be a positive integer "
                                       f"up to {top:,}"))
        if not isinstance(self.hold_session_values, bool):
            errs.append(FieldError("sweep.hold_session_values",
                                   f"{self.hold_session_values!r} must be true or false"))
        if not isinstance(self.tensor_parallel_across_nodes, bool):
            errs.append(FieldError("sweep.tensor_parallel_across_nodes",
                                   f"{self.tensor_parallel_across_nodes!r} must be true or false"))
        for name in ("tensor_parallel", "pipeline_parallel", "data_parallel", "virtual_pipeline_stages",
                     "expert_parallel"):
            ints(name, getattr(self, name))
        vs = self.virtual_pipeline_stages
        low = ([] if vs is None else [v for v in ([vs] if not isinstance(vs, Iterable) else vs)
                                     if pos_int(v) and v < 2])
        if low:
            errs.append(FieldError("sweep.virtual_pipeline_stages",
                                   f"{low[0]!r}: the interleaved schedule needs v >= 2 virtual "
                                   "stages per rank (v = 1 is plain 1F1B)"))
        ints("micro_batch_sizes", self.micro_batch_sizes)  # None: up to what memory allows
        if self.recompute_num_layers is not None:
            values = as_list(self.recompute_num_layers)
            if not values:
                errs.append(FieldError("sweep.recompute_num_layers",
                                       "must name at least one value"))
            bad = [v for v in values if v != RECOMPUTE_ALL_LAYERS and not pos_int(v)]
            if bad:
                errs.append(FieldError("sweep.recompute_num_layers", f"{bad[0]!r} is neither "
                                       f"{RECOMPUTE_ALL_LAYERS!r} (every layer) nor a positive "
                                       f"integer up to {top:,}"))
        ints("context_parallel", self.context_parallel)
        for name, choices in (("schedules", SCHEDULES), ("recompute", RECOMPUTE_CHOICES),
                              ("moe_token_dispatcher_type", MOE_DISPATCHERS),
                              ("cp_comm_type", CP_COMM_TYPES),
                              ("cross_entropy_fusion", CROSS_ENTROPY_FUSIONS)):
            values = getattr(self, name)
            if values is None and name in ("moe_token_dispatcher_type", "cp_comm_type",
                                           "cross_entropy_fusion"):
                continue
            values = [values] if isinstance(values, str) else list(values or [])
            if not values:
                errs.append(FieldError(f"sweep.{name}", "must name at least one value"))
            for v in values:
                if v not in choices:
                    errs.append(FieldError(f"sweep.{name}", f"{v!r} is not one of {', '.join(choices)}"))
        for name, kinds, choices in (("sequence_parallel", (bool, np.bool_), (False, True)),
                                     ("overlap_moe_expert_parallel_comm", (bool, np.bool_),
                                      (False, True)),
                                     ("tp_comm_overlap", (bool, np.bool_), (False, True)),
                                     ("dp_overlap", (bool, np.bool_), (False, True)),
                                     ("zero_stages", (int, np.integer), ZERO_STAGES)):
            values = getattr(self, name)
            if values is None:
                continue
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            if not values:
                errs.append(FieldError(f"sweep.{name}", "must name at least one value"))
            for v in values:
                ok = isinstance(v, kinds) and (name != "zero_stages" or not isinstance(v, bool))
                if not ok or v not in choices:
                    errs.append(FieldError(f"sweep.{name}", f"{v!r} is not one of "
                                           f"{', '.join(str(c).lower() for c in choices)}"))
        if self.num_gpus is not None and self.max_gpus is not None:
            errs.append(FieldError("sweep.num_gpus", "give either num_gpus (exact) or max_gpus, not both"))
        if (self.num_gpus is None and self.max_gpus is None and self.data_parallel is None
                and self.max_data_parallel is None):
            errs.append(FieldError("sweep.max_gpus", "no GPU budget: give num_gpus, max_gpus, "
                                   "data_parallel or max_data_parallel"))
        return errs

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (sequences as lists)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, (list, tuple, range)):
                v = list(v)
            elif isinstance(v, np.integer):
                v = int(v)
            out[name] = v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SweepSpace":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ConfigError
            Not a dict, or an unknown key.
        """
        if not isinstance(data, dict):
            raise ConfigError([FieldError("sweep", "must be a JSON object")])
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError([FieldError(f"sweep.{k}", "unknown field") for k in unknown])
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**kw)

def divisors(n: int) -> list[int]:
    """Divisors of ``n`` in increasing order (O(sqrt n))."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]

def micro_batch_sizes_of(global_batch_size: int) -> list[int]:
    """The micro-batch sizes a space without them tries, before memory stops them: every
    divisor of the global batch B, in increasing order (Megatron runs any b with
    B % (d*b) == 0; B = 1,536 on d = 32 allows b = 3, which no power of two reaches)."""
    return divisors(global_batch_size)


def as_list(values: Any) -> list:
    """``values`` as a list: a string or a non-iterable as a list of one, any other iterable
    listed (a space's attribute given as one value or several)."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        return [values]
    return list(values)


def one_stage_schedule(schedules: Sequence[str]) -> str:
    """The schedule a sweep keeps for single-stage plans (p = 1), where all schedules run the
    same order: Megatron's 1F1B (:func:`core.schedules.megatron_schedule`) when among
    ``schedules``, else the first."""
    megatron = pipeline_schedules.megatron_schedule(None)
    return megatron if megatron in schedules else schedules[0]


def cp_candidates(session: Session, space: SweepSpace) -> list[int]:
    """The context-parallel sizes a sweep of ``space`` tries: the given ones, or the powers of
    two ``cp`` with ``seq_length`` divisible by ``2*cp`` (Megatron-Core's causal split) up to
    the budget's largest GPU count (1 alone when the budget bounds no GPU count)."""
    if space.context_parallel is not None:
        return sorted(set(as_list(space.context_parallel)))
    if space.hold_session_values:
        return [session.plan.context_parallel]
    counts = space.gpu_counts()
    most = max(counts) if counts else space.max_gpus
    s = session.model.seq_length
    out, cp = [1], 2
    while most is not None and cp <= most and s % (2 * cp) == 0:
        # the model's own rules (the attention kernel, sliding windows ...), the other sizes
        # at 1: a size they refuse is in no plan
        probe = Session(session.model, probe_plan(session.plan, context_parallel=cp,
                                                  sequence_parallel=False),
                        session.cluster, session.cost)
        if not any(e.field == "plan.context_parallel" for e in validate(probe)):
            out.append(cp)
        cp *= 2
    return out

def enumerate_plans(session: Session, space: SweepSpace, *, cancel: Any = None,
                    phase: PhaseFn | None = None,
                    verdicts: PlanVerdicts | None = None) -> list[ParallelPlan]:
    """Every valid plan of ``space`` for the session's model, batch size, precision and cluster.

    A plan is emitted iff :func:`core.plan.rules.validate` accepts the session with
    that plan and it is within the budget. Candidates that certainly break a
    rule (``B % (d*b) != 0``, the schedule's own rules of
    :func:`core.schedules.schedule_errors`) are pruned before validation, and
    candidates are validated with ``sections=("plan",)`` (the model, cluster and
    cost are checked once, first).

    Parameters
    ----------
    session : Session
        Supplies the model, cluster, cost inputs and the plan fields the space does
        not sweep (``global_batch_size``, ``precision``, overlap ...).
    space : SweepSpace
    cancel : threading.Event or callable returning bool, optional
        Checked before each (t, p, cp, d, ep, b, schedule, v) combination's plans are built
        (a few milliseconds at most): :class:`~core.studies.sweep.cancel.SweepCancelled`.
    phase : callable ``(phase, done, total) -> None``, optional
        Told the enumeration's progress (:class:`~core.studies.sweep.phase.PhaseTicker`,
        phase ``"enumerate"``): ``done`` of ``total`` (t, p, cp) combinations.
    verdicts : PlanVerdicts, optional
        :func:`core.studies.sweep.variants.sweep_verdicts` of this same session, shared by
        several enumerations (what one learns, the next need not); default: made here.

    Returns
    -------
    list of ParallelPlan
        Ordered by t, p, cp, d, ep, b, schedule, recompute, sequence parallel, ZeRO stage (the orders
        of their candidate lists).

    Raises
    ------
    ConfigError
        The space breaks a rule (:meth:`SweepSpace.errors`) or the session breaks
        a rule not about the plan (model, cluster, cost).
    SweepCancelled
        ``cancel`` was set.
    """
    check_enumerable(session, space)
    c = _Choices.of(session, space)
    if verdicts is None:
        verdicts = sweep_verdicts(session)
    if verdicts is None:  # every candidate breaks a rule of a field the sweep does not set
        return []
    m, base, B = session.model, session.plan, session.plan.global_batch_size
    ok = value_check(base)  # the sizes' values alone, each once (a candidate's fields)
    eps = [ep for ep in c.eps if ok("expert_parallel", ep)]
    bs = [b for b in c.bs if ok("micro_batch_size", b)]
    schedule_broken: dict[tuple, bool] = {}  # the schedule's rules of (schedule, p, m, v)
    plans: list[ParallelPlan] = []
    outer = [(t, p, cp) for t in c.ts for p in c.ps for cp in c.cps]
    ticker = PhaseTicker("enumerate", len(outer), cancel, phase)
    for step, (t, p, cp) in enumerate(outer):
        ticker.tick(step)
        # uneven (first, last) stages: the base's at its own p, Megatron-style (the slot flags
        # off) where neither the layers nor any slot count split over p (pipeline_splits);
        # (None, None): even
        splits = [(f, l) for f, l in c.uneven.get(p, [(None, None)])
                  if ok("first_stage_layers", f) and ok("last_stage_layers", l)]
        if not (ok("tensor_parallel", t) and ok("pipeline_parallel", p)
                and ok("context_parallel", cp) and splits):
            continue
        ds = [d for d in c.data_parallel_sizes(space, t * p * cp, B) if ok("data_parallel", d)]
        # sequence parallelism without tensor parallelism and ZeRO without a group to shard
        # over (d*cp = 1: ZeRO shards over the data- and context-parallel ranks,
        # core.plan.parallel.zero_shard_size) change nothing (Megatron turns sequence
        # parallelism off at t = 1): one plan each
        if c.sps is None:  # Megatron-Core's choice: on with t > 1 (where s divides by t)
            sps_t = [t > 1 and m.seq_length % t == 0]
        else:
            sps_t = c.sps[:1] if t == 1 else c.sps
        # one stage has no pipeline: every schedule runs Megatron's no-pipelining order, so
        # keep one of them (1F1B when swept)
        scheds_p = c.scheds if p > 1 else [one_stage_schedule(c.scheds)]
        # the (schedule, v) of p whose values pass alone, in order, each with the (embedding,
        # loss) slot flags of its plans (the session's, those its layers need, or off)
        sched_vs = [(sched, [(v, c.split_flags(sched, p, v))
                             for v in c.virtual_sizes(space, sched, p)
                             if ok("virtual_pipeline_stages", v)])
                    for sched in scheds_p if ok("schedule", sched)]
        for d, ep in ((d, ep) for d in ds for ep in eps):
            zs_d = single_rank_zero_stages(c.zs, base) if d * cp == 1 else c.zs
            for b in bs:
                if B % (d * b):  # validate's rule B % (d*b) == 0, before building plans
                    continue
                for sched, vs in sched_vs:
                    for v, flag_sets in vs:
                        # the schedule's own rules (part of validate), before building plans
                        extra = sum(map(bool, flag_sets[0]))  # the slots they add
                        k = (sched, p, B // (d * b), v, extra)
                        broken = schedule_broken.get(k)
                        if broken is None:
                            broken = schedule_broken[k] = bool(pipeline_schedules.schedule_errors(
                                sched, p, B // (d * b), v,
                                m.num_layers if c.layout_n is None else None, extra))
                        if broken:
                            continue
                        yield_interpreter()
                        ticker.tick(step)
                        for flags in flag_sets:
                            for split in splits:
                                plans += size_variants(session, c, verdicts,
                                                       (t, p, cp, ep, d, b, sched, v), sps_t,
                                                       zs_d, flags, split)
    ticker.finish(len(outer))
    return plans


def check_enumerable(session: Session, space: SweepSpace) -> None:
    """Raise :class:`ConfigError` with every rule the space breaks and every rule the session
    breaks not about the plan (model, cluster, cost), and a custom pipeline layout that does
    not parse (every plan keeps it)."""
    errs = [e for e in validate(session) if not e.field.startswith("plan.")] + space.errors()
    errs += recompute_layers_errors(session, space)
    layout = pipeline_layout_text(session.plan)
    if layout is not None:  # kept in every plan: a layout that cannot parse fits none
        try:
            expand_pipeline_layout(layout)
        except ValueError as exc:
            errs.append(FieldError("plan.pipeline_model_parallel_layout", f"{layout!r} {exc}"))
    if errs:
        raise ConfigError(errs)


def recompute_layers_errors(session: Session, space: SweepSpace) -> list[FieldError]:
    """The rules :attr:`SweepSpace.recompute_num_layers` breaks with ``session``
    (``sweep.recompute_num_layers``): a count above the model's layers (no model chunk holds
    them: Megatron-LM's block method counts the layers of a chunk), or counts given while the
    space tries no full recomputation (``recompute`` without ``full``: no plan would take
    them). Values that are not counts are :meth:`SweepSpace.errors`'."""
    if space.recompute_num_layers is None or space.errors():
        return []
    errs = []
    L = session.model.num_layers
    above = [v for v in as_list(space.recompute_num_layers)
             if v != RECOMPUTE_ALL_LAYERS and v > L]
    if above:
        errs.append(FieldError("sweep.recompute_num_layers", f"{above[0]} is more than the "
                               f"model's {L} layers (model.num_layers): give 1 to {L} layers "
                               f"per model chunk, or {RECOMPUTE_ALL_LAYERS!r}"))
    if "full" not in as_list(space.recompute):
        errs.append(FieldError("sweep.recompute_num_layers", "recomputed layers apply under "
                               "full recomputation only, which the sweep does not try "
                               f"(recompute {', '.join(as_list(space.recompute))}): add full "
                               "to recompute"))
    return errs


@dataclass
class _Choices:
    """The candidate values of each field :func:`enumerate_plans` sweeps (lists, in the order
    tried), and what the loops need of the session: ``sps`` None is Megatron-Core's choice
    (on with t > 1); ``dpos`` [None] holds the session's data-parallel overlaps; ``cpcs`` the
    context-parallel exchanges of the plans with cp > 1, each a (``cp_comm_type``,
    ``cp_a2a_size``) pair."""

    ts: list
    ps: list
    cps: list
    eps: list
    etps: list
    bs: list
    scheds: list
    rcs: list
    rnls: list
    vs: list
    sps: list | None
    zs: list
    tpos: list
    dpos: list
    ovs: list
    disps: list
    cpcs: list
    ces: list
    layout_n: int | None
    num_layers: int
    counts: tuple | None
    d_allowed: set | None
    d_divisors: list
    extra_slots: int
    split_options: list
    uneven: dict
    own_split_p: int | None
    mla: bool
    delay: bool
    base_values: dict
    make: Callable[[dict], ParallelPlan]
    plain: bool
    variants_of: dict = dataclasses.field(default_factory=dict)
    overlap_variants_of: dict = dataclasses.field(default_factory=dict)  # size_variants memos
    flags_of: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, session: Session, space: SweepSpace) -> "_Choices":
        """The choices of ``space`` for ``session``.

        Raises
        ------
        ConfigError
            The expert all-to-all overlap asked on, or a token dispatcher other than the
            session's, for a dense model, the session's
            ``delay_wgrad_compute`` without that overlap, or the a2a+p2p exchange asked
            without the session's ``cp_a2a_size``.
        """
        m, base = session.model, session.plan
        ts, ps = tp_pp_candidates(session, space)
        # sequence parallelism: the space's values, or Megatron-Core's choice (on with t > 1)
        hold = space.hold_session_values
        sps = (list(dict.fromkeys(bool(v) for v in as_list(space.sequence_parallel)))
               if space.sequence_parallel is not None else [base.sequence_parallel] if hold
               else None)
        zs = (list(dict.fromkeys(int(v) for v in as_list(space.zero_stages)))
              if space.zero_stages is not None else [base.zero_stage] if hold
              else list(ZERO_STAGES))
        tpos = (list(dict.fromkeys(bool(v) for v in as_list(space.tp_comm_overlap)))
                if space.tp_comm_overlap is not None else [bool(base.tp_comm_overlap)] if hold
                else [True])
        dpos = (list(dict.fromkeys(bool(v) for v in as_list(space.dp_overlap)))
                if space.dp_overlap is not None else [None] if hold else [True])
        # the expert all-to-all overlap: the space's values; or off and on (on where allowed) for
        # a mixture-of-experts model; or the base's, held
        ovs = (list(dict.fromkeys(bool(v) for v in as_list(space.overlap_moe_expert_parallel_comm)))
               if space.overlap_moe_expert_parallel_comm is not None
               else [base.overlap_moe_expert_parallel_comm is True] if hold or not m.is_moe
               else [False, True])
        # the token dispatchers of the plans with expert parallelism (ep > 1)
        disps = (list(dict.fromkeys(as_list(space.moe_token_dispatcher_type)))
                 if space.moe_token_dispatcher_type is not None
                 else [base.moe_token_dispatcher_type] if hold or not m.is_moe
                 else list(MOE_DISPATCHERS))
        cpcs = _cp_exchanges(base, space)
        # the recomputed layers of the full plans: those asked, or the session's
        rnls = (recompute_layer_counts(space.recompute_num_layers)
                if space.recompute_num_layers is not None else [base.recompute_num_layers])
        if not m.is_moe:
            if space.overlap_moe_expert_parallel_comm is not None and True in ovs:
                raise ConfigError([FieldError(
                    "sweep.overlap_moe_expert_parallel_comm", "on needs a mixture-of-experts "
                    "model (model.num_experts): a dense model has no EP all-to-all")])
            other = [d for d in disps if d != base.moe_token_dispatcher_type]
            if space.moe_token_dispatcher_type is not None and other:
                raise ConfigError([FieldError(
                    "sweep.moe_token_dispatcher_type", f"{', '.join(other)} "
                    "(--moe-token-dispatcher) needs a mixture-of-experts model "
                    "(model.num_experts): a dense model dispatches no tokens to experts")])
            ovs = [False]
        if base.delay_wgrad_compute is True and True not in ovs:  # what validate says of the file
            raise ConfigError([FieldError("plan.delay_wgrad_compute", "delay_wgrad_compute needs "
                                          "overlap_moe_expert_parallel_comm (Megatron-Core: it "
                                          "must be enabled when enabling delay_wgrad_compute)")])
        # the cross-entropy: the space's choices, or te (held), or the base's, held
        ces = ([CROSS_ENTROPY_FUSIONS[v] for v in dict.fromkeys(as_list(space.cross_entropy_fusion))]
               if space.cross_entropy_fusion is not None
               else [(base.cross_entropy_loss_fusion, base.cross_entropy_fusion_impl)] if hold
               else [CROSS_ENTROPY_FUSIONS[DEFAULT_CROSS_ENTROPY_FUSION]])
        return cls(
            ts=ts, ps=ps, cps=cp_candidates(session, space),
            eps=(sorted(set(as_list(space.expert_parallel))) if space.expert_parallel is not None
                 else divisors(m.num_experts) if m.is_moe else [1]),
            # the expert tensor-parallel sizes: for a mixture-of-experts model the session's,
            # t (unset: Megatron-Core's default) and 1 (Megatron-Bridge's MoE recipes); held
            etps=(list(dict.fromkeys((base.expert_tensor_parallel, None, 1)))
                  if m.is_moe and not hold else [base.expert_tensor_parallel]),
            bs=(sorted(set(as_list(space.micro_batch_sizes)))
                if space.micro_batch_sizes is not None
                else micro_batch_sizes_of(base.global_batch_size)),
            scheds=list(dict.fromkeys(as_list(space.schedules))),
            rcs=list(dict.fromkeys(as_list(space.recompute))),
            rnls=rnls,
            vs=(sorted(set(as_list(space.virtual_pipeline_stages)))
                if space.virtual_pipeline_stages is not None else list(range(2, 9))),
            sps=sps, zs=zs, tpos=tpos, dpos=dpos, ovs=ovs, disps=disps, cpcs=cpcs, ces=ces,
            layout_n=layout_stages(base), num_layers=m.num_layers,
            counts=space.gpu_counts(),
            d_allowed=(set(as_list(space.data_parallel)) if space.data_parallel is not None
                       else None),
            d_divisors=divisors(base.global_batch_size),  # d must divide B (d*b divides B)
            extra_slots=pipeline_split_slots(m.num_layers, base) - m.num_layers,  # embedding, loss
            split_options=split_flag_options(base),
            uneven=pipeline_splits(session, ps),
            own_split_p=(base.pipeline_parallel if base.first_stage_layers is not None
                         or base.last_stage_layers is not None else None),
            mla=bool(getattr(m, "multi_latent_attention", False)),
            delay=base.delay_wgrad_compute is True,
            base_values={f: getattr(base, f) for f in PLAN_FIELDS}, make=plan_maker(base),
            # every variant of one size as size_variants sets it, unchanged: no recomputed layers
            # to cap, the expert all-to-all overlap the base's (one value, as the base's)
            plain=(rnls == [None] and len(ovs) == 1 and not ovs[0]
                   and not (ovs[0] != base.overlap_moe_expert_parallel_comm
                            or (base.delay_wgrad_compute is True and ovs[0])
                            != base.delay_wgrad_compute)))

    def data_parallel_sizes(self, space: SweepSpace, tp: int, B: int) -> list[int]:
        """The d tried with ``tp`` GPUs per data-parallel replica (t*p*cp): within the budget,
        dividing the global batch ``B``, among those given."""
        if self.counts is not None:
            ds = sorted({n // tp for n in self.counts if n % tp == 0})
        elif space.max_gpus is not None:
            ds = [d for d in self.d_divisors if d * tp <= space.max_gpus]
        else:
            ds = list(self.d_divisors)
        return [d for d in ds if B % d == 0
                and (self.d_allowed is None or d in self.d_allowed)
                and (space.max_data_parallel is None or d <= space.max_data_parallel)]

    def split_flags(self, sched: str, p: int, v: int | None) -> list:
        """The (embedding, loss) slot flags of the plans of ``p`` stages under ``sched`` with
        ``v`` (:func:`split_flags_for` over the schedule's ``p*chunks`` virtual stages): the
        session's, those the layers need, or off where only the layers split; at a p with
        uneven first / last stages (:attr:`uneven`; Megatron-Core refuses both together) the
        session's alone at its own p, off at the others (:func:`uneven_split_flags`)."""
        k = (sched, p, v)
        out = self.flags_of.get(k)
        if out is None:
            if p == self.own_split_p:
                out = self.split_options[0][1]
            elif p in self.uneven:
                out = [uneven_split_flags(self.split_options)]
            else:
                schedule = pipeline_schedules.get(sched)
                chunks = schedule.chunks(v)
                out = split_flags_for(self.num_layers, self.split_options, p * chunks,
                                      schedule.uses_virtual_stages and chunks > 1)
            out = self.flags_of[k] = out
        return out

    def virtual_sizes(self, space: SweepSpace, sched: str, p: int) -> list:
        """The v tried under schedule ``sched`` at ``p`` stages (None: the schedule has no
        virtual stages); with a custom layout of n virtual stages only v = n/p."""
        virtual = pipeline_schedules.get(sched).uses_virtual_stages
        n = self.layout_n
        if n is None:
            return self.vs if virtual else [None]
        if virtual:  # the layout's v = n/p, when it is one of those asked
            return [n // p] if (n // p >= 2 and (space.virtual_pipeline_stages is None
                                                 or n // p in self.vs)) else []
        return [None] if p == n else []


def _cp_exchanges(base: ParallelPlan, space: SweepSpace) -> list[tuple[str, int | None]]:
    """The (``cp_comm_type``, ``cp_a2a_size``) pairs a sweep of ``space`` tries on the plans
    with cp > 1 (:attr:`SweepSpace.cp_comm_type`): the space's exchanges, or
    :data:`DEFAULT_CP_COMM_TYPES`, each with no all-to-all group size but a2a+p2p, which keeps
    the session's (the rules leave out the plans whose cp it does not divide); the session's
    pair, as it is, with ``hold_session_values``.

    Raises
    ------
    ConfigError
        a2a+p2p named and the session sets no ``cp_a2a_size`` (field ``sweep.cp_comm_type``).
    """
    if space.cp_comm_type is None and space.hold_session_values:
        return [(base.cp_comm_type, base.cp_a2a_size)]
    # by default the session's own exchange too (a torchtitan session's all-gather)
    kinds = (list(dict.fromkeys(as_list(space.cp_comm_type))) if space.cp_comm_type is not None
             else list(dict.fromkeys((*DEFAULT_CP_COMM_TYPES, base.cp_comm_type))))
    if "a2a+p2p" in kinds and base.cp_a2a_size is None:
        raise ConfigError([FieldError(
            "sweep.cp_comm_type", "a2a+p2p (--cp-comm-types) needs the all-to-all group size of "
            "the session's plan, which the sweep keeps: set the session's exchange to it too "
            "(--set plan.cp_comm_type=a2a+p2p --set plan.cp_a2a_size=A; Megatron-Core "
            "--hierarchical-context-parallel-sizes A P), or leave a2a+p2p out")])
    return [(k, base.cp_a2a_size if k == "a2a+p2p" else None) for k in kinds]


def in_budget(space: SweepSpace, plan: ParallelPlan) -> bool:
    """Whether ``plan``'s GPU count and data-parallel size are within ``space``'s budget."""
    counts = space.gpu_counts()
    return ((counts is None or plan.num_gpus in counts)
            and (space.max_gpus is None or plan.num_gpus <= space.max_gpus)
            and (space.max_data_parallel is None or plan.data_parallel <= space.max_data_parallel))


def index_of_plan(plans: list[ParallelPlan], plan: ParallelPlan) -> int | None:
    """Row of ``plan`` in ``plans`` (every field equal), or None."""
    # a few fields' tuples compared in C (itertools) first: a sweep's million plans in a
    # fraction of a second; every field of the rows they leave
    few = map(_FEW_FIELDS(plan).__eq__, map(_FEW_FIELDS, plans))
    key = plan_key(plan)
    return next((i for i in itertools.compress(itertools.count(), few)
                 if plan_key(plans[i]) == key), None)


#: The fields :func:`index_of_plan` compares first: those that differ most between a sweep's plans
_FEW_FIELDS = operator.attrgetter("data_parallel", "micro_batch_size", "tensor_parallel",
                                  "pipeline_parallel")



def layout_stages(plan: ParallelPlan) -> int | None:
    """Virtual stages of ``plan``'s custom pipeline layout (``pipeline_model_parallel_layout``),
    None without one (or when it does not parse: validation names that)."""
    text = pipeline_layout_text(plan)
    if text is None:
        return None
    try:
        return len(expand_pipeline_layout(text))
    except ValueError:
        return None


def tp_pp_candidates(session: Session, space: SweepSpace) -> tuple[list[int], list[int]]:
    """The tensor- and pipeline-parallel sizes a sweep of ``space`` tries: the given ones, or
    t the divisors of the node's GPUs (and multiples of it up to the heads with
    ``tensor_parallel_across_nodes``), p the even splits of the layer slots, the session's
    and those one or two more slots of :func:`split_flag_options` make, the base's own p
    when its first / last stages are uneven, and the powers of two from 4 that divide the
    layers (with the session's slot flags off where no slot count splits: Llama 3 70B's 80
    layers with the loss's slot on p = 4, 8, 16) or split them unevenly
    (:func:`pipeline_splits`: DeepSeek-V3's 61 layers on p = 4, 8, 16, the flags off); a
    custom pipeline layout of ``n`` virtual stages keeps the p that divide ``n``."""
    m, base, g = session.model, session.plan, session.cluster.gpus_per_node
    if space.tensor_parallel is not None:
        ts = sorted(set(as_list(space.tensor_parallel)))
    else:
        ts = divisors(g)
        if space.tensor_parallel_across_nodes:
            ts += [k * g for k in range(2, m.num_attention_heads // g + 1)]
    uneven = base.first_stage_layers is not None or base.last_stage_layers is not None
    slots = pipeline_split_slots(m.num_layers, base)
    ps = (sorted(set(as_list(space.pipeline_parallel))) if space.pipeline_parallel is not None
          else sorted(set().union(*(divisors(slots + extra)[:-1 if extra else None]
                                    for extra, _ in split_flag_options(base) if extra >= 0))
                      | ({base.pipeline_parallel} if uneven else set())))
    layout_n = layout_stages(base)
    if layout_n is not None:
        ps = [p for p in (ps if space.pipeline_parallel is not None else divisors(layout_n))
              if layout_n % p == 0]
    elif space.pipeline_parallel is None:  # and the powers of two that divide the layers (the
        # slot flags off where no slot count splits) or split them unevenly
        more = [1 << k for k in range(2, m.num_layers.bit_length())]
        ps = sorted(set(ps) | {p for p in more if m.num_layers % p == 0}
                    | set(pipeline_splits(session, more)))
    return ts, ps

def budget_text(space: SweepSpace) -> str:
    """The GPU budget of ``space`` in words ('exactly 8 GPUs; d <= 4')."""
    parts = []
    if space.num_gpus is not None:
        parts.append(f"exactly {', '.join(map(str, space.gpu_counts()))} GPUs")
    if space.max_gpus is not None:
        parts.append(f"at most {space.max_gpus:,} GPUs")
    if space.max_data_parallel is not None:
        parts.append(f"d <= {space.max_data_parallel}")
    return "; ".join(parts)



# --------------------------------------------------------------------------- batch solver
