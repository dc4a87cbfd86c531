"""A sweep's candidates of one size (t, p, cp, ep, d, b, schedule, v): their variants
(recomputation, context-parallel exchange, MoE dispatcher, expert tensor-parallel size,
cross-entropy, sequence parallelism, ZeRO stage, overlaps) built as plans
(:func:`size_variants`) and checked (:func:`sweep_verdicts`: each swept value alone, then
validate's cross-field rules, memoized by :class:`core.plan.verdicts.PlanVerdicts`).
:mod:`core.studies.sweep.space` loops over the sizes; which sizes a space tries does not
belong here.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable

from core.plan.fields import check_value
from core.plan.layout import capped_recompute_layers
from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.plan.rules import ep_overlap_errors
from core.plan.session import Session
from core.plan.verdicts import PlanVerdicts

__all__ = ["SWEPT_FIELDS", "CHECKED_SWEPT_FIELDS", "SIZE_SWEPT_FIELDS", "VARIANT_FIELDS",
           "CP_VARIANT_FIELDS", "sweep_verdicts", "value_check", "plan_maker", "size_variants",
           "expert_tensor_sizes", "overlap_choices"]

#: The plan fields a sweep sets; every other field is the session plan's
SWEPT_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                "data_parallel", "micro_batch_size", "schedule", "virtual_pipeline_stages",
                "recompute", "sequence_parallel", "zero_stage", "recompute_num_layers",
                "tp_comm_overlap", "recompute_modules", "first_stage_layers",
                "last_stage_layers", "account_for_embedding_in_pipeline_split",
                "account_for_loss_in_pipeline_split", "moe_token_dispatcher_type",
                "cp_comm_type", "cp_a2a_size", "cross_entropy_fusion_impl",
                "cross_entropy_loss_fusion", "expert_tensor_parallel",
                "overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
                "overlap_grad_reduce", "overlap_param_gather")
#: Those whose values enumerate_plans checks per plan (the overlap flags it sets are bools)
CHECKED_SWEPT_FIELDS = SWEPT_FIELDS[:-4]
#: Those :func:`size_variants` sets per plan of one (t, p, cp, ep, d, b, schedule, v)
VARIANT_FIELDS = ("recompute", "sequence_parallel", "zero_stage", "recompute_num_layers",
                  "tp_comm_overlap", "recompute_modules", "overlap_grad_reduce",
                  "overlap_param_gather", "overlap_moe_expert_parallel_comm",
                  "delay_wgrad_compute", "moe_token_dispatcher_type",
                  "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
                  "expert_tensor_parallel")
#: Those of the plans with context parallelism (cp > 1), whose exchange is a variant too (at
#: cp = 1 every variant keeps the session's: the rules' verdicts then read one value)
CP_VARIANT_FIELDS = VARIANT_FIELDS + ("cp_comm_type", "cp_a2a_size")
#: Those of them the same in every variant of one (t, p, cp, ep, d, b, schedule, v)
SIZE_SWEPT_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel",
                     "expert_parallel", "data_parallel", "micro_batch_size", "schedule",
                     "virtual_pipeline_stages", "first_stage_layers", "last_stage_layers",
                     "account_for_embedding_in_pipeline_split",
                     "account_for_loss_in_pipeline_split")


def sweep_verdicts(session: Session) -> PlanVerdicts | None:
    """The validity checks :func:`core.studies.sweep.space.enumerate_plans` runs on the
    candidates of ``session``'s sweeps: the values of the fields a sweep sets, each alone,
    then validate's cross-field rules (the model, cluster and cost are checked once, by
    :func:`core.studies.sweep.space.check_enumerable`), each memoized by the fields it reads
    (:class:`core.plan.verdicts.PlanVerdicts`); one may serve every enumeration of the same
    session (a sweep's, b by b). None when a field the sweep does not set breaks a rule: no
    candidate is valid."""
    checks = _fields_check(session.plan)
    if checks is None:
        return None
    return PlanVerdicts(session.model, session.cluster, extra=checks)


def value_check(base: ParallelPlan) -> Callable[[str, Any], bool]:
    """Whether a value alone passes the rules of a plan field (:func:`check_value`: type,
    bounds, choices), as ``value_ok(name, value)``, memoized by name, type and value."""
    plan_fields = {f.name: f for f in dataclasses.fields(base)}
    seen: dict[tuple, bool] = {}

    def value_ok(name: str, value: Any) -> bool:
        k = (name, type(value), value)
        ok = seen.get(k)
        if ok is None:
            ok = seen[k] = check_value(name, plan_fields[name], value) is None
        return ok

    return value_ok


def _fields_check(base: ParallelPlan) -> tuple[Callable[[ParallelPlan], bool], ...] | None:
    """``validate(sections=("plan",))`` checks each plan field alone (check_value) and then the
    cross-field rules. The fields the enumeration does not set keep the base plan's values:
    they are checked once here (None: one breaks a rule, so every candidate does). The sizes
    (:data:`SIZE_SWEPT_FIELDS`) are checked value by value in the loops of
    :func:`core.studies.sweep.space.enumerate_plans`; the function returned tells whether a candidate's other swept fields break a rule
    alone (True: one does), for :class:`core.plan.verdicts.PlanVerdicts`, which checks it
    ahead of validate's cross-field rules (sections=()), so that those run only on plans
    whose fields pass: what validate(sections=("plan",)) returns for them."""
    if any(check_value(f.name, f, getattr(base, f.name)) for f in dataclasses.fields(base)
           if f.name not in SWEPT_FIELDS):
        return None
    value_ok = value_check(base)
    names = tuple(n for n in CHECKED_SWEPT_FIELDS if n not in SIZE_SWEPT_FIELDS)

    def fields_broken(plan: ParallelPlan) -> bool:
        return not all(value_ok(n, getattr(plan, n)) for n in names)

    return (fields_broken,)


def plan_maker(base: ParallelPlan) -> Callable[[dict], ParallelPlan]:
    """A function of a dict of every field's value to the plan with them: what
    ``dataclasses.replace(base, **values)`` returns, without its copy of ``base``'s fields per
    plan (ParallelPlan's ``__init__`` only stores its arguments: no ``__post_init__``), for a
    ``base`` of exactly :class:`ParallelPlan` (a subclass goes through ``dataclasses.replace``).
    ``values`` must name every field (about 3 us per plan: ParallelPlan keeps its fields in
    slots, so the dict is not kept)."""
    cls = type(base)
    if cls is not ParallelPlan or hasattr(cls, "__post_init__"):
        return lambda values: dataclasses.replace(base, **values)

    def make(values: dict) -> ParallelPlan:
        return cls(**values)

    return make


def expert_tensor_sizes(etps: list, t: int) -> list:
    """The expert tensor-parallel sizes (``plan.expert_tensor_parallel``) tried at ``t``, of the
    space's ``etps`` (the session's first): with t > 1 one of each size they give, the first
    kept (unset is ``t``: Megatron-Core's ``--expert-tensor-parallel-size`` defaults to the
    tensor-parallel size); the session's alone at t = 1 (where unset and 1 are one plan)."""
    if t == 1:
        return etps[:1]
    first: dict = {}
    for v in etps:
        first.setdefault(t if v is None else v, v)
    return list(first.values())


def dispatcher_at_ep1(dispatcher: str, etp: int) -> str:
    """The token dispatcher a swept plan with ``expert_parallel = 1`` runs, of the session's
    ``dispatcher``, at expert tensor-parallel size ``etp``: ``flex`` needs ``etp * ep > 1``
    (Megatron-Core 0.16 ``MoEFlexTokenDispatcher.__init__`` asserts "Flex token dispatcher
    requires TPxEP > 1"; :func:`core.plan.rules.moe_errors` refuses it), so with ``etp = 1``
    the plan takes ``alltoall``, the dispatcher Megatron-Core runs there (modelled: at
    ``ep = 1`` its all-to-all is a copy-free no-op, ``all_to_all`` returns its input on a
    one-rank group, and it still permutes the tokens by expert and sorts the chunks of its
    ``E`` local experts, ``sort_chunks_by_idxs``); otherwise the session's."""
    return "alltoall" if dispatcher == "flex" and etp == 1 else dispatcher


def size_variants(session: Session, c: Any, verdicts: PlanVerdicts,
                  sizes: tuple, sps_t: list, zs_d: list, split_flags: tuple | None = None,
                  split: tuple = (None, None)) -> list[ParallelPlan]:
    """The valid plans of one ``sizes`` = (t, p, cp, ep, d, b, schedule, v) under the choices
    ``c`` (:class:`core.studies.sweep.space._Choices`): each recomputation, each
    context-parallel exchange (with cp > 1: ``c.cpcs``' (``cp_comm_type``, ``cp_a2a_size``);
    at cp = 1 the session's), each MoE token dispatcher (with ep > 1; at ep = 1 the session's
    or, where flex cannot run, all-to-all: :func:`dispatcher_at_ep1`), each expert
    tensor-parallel size (:func:`expert_tensor_sizes`), each cross-entropy
    choice, each (sequence parallel, ZeRO, overlaps) choice (:func:`overlap_choices`) and
    each expert all-to-all overlap, in that order; those that break a rule (an all-to-all
    exchange whose heads do not split over cp ...) are left out. ``verdicts``: the swept
    fields' checks and validate's cross-field rules
    (:meth:`core.plan.verdicts.PlanVerdicts.valid_among`: those that read none of
    :data:`VARIANT_FIELDS`, with cp > 1 :data:`CP_VARIANT_FIELDS`, checked once).
    ``split_flags``: the plans' (``account_for_embedding_in_pipeline_split``,
    ``account_for_loss_in_pipeline_split``), default the session's
    (:func:`core.studies.sweep.splits.split_flags_for`); ``split``: their (``first_stage_layers``,
    ``last_stage_layers``), (None, None) for an even split."""
    t, p, cp, ep, d, b, sched, v = sizes
    cl, base = session.cluster, session.plan
    make = c.make
    # uneven first / last stages (the base's at its own p, Megatron-style where p splits the
    # layers unevenly: core.studies.sweep.splits.pipeline_splits); (None, None): even
    first, last = split
    group = dict(c.base_values, tensor_parallel=t, pipeline_parallel=p, context_parallel=cp,
                 expert_parallel=ep, data_parallel=d, micro_batch_size=b, schedule=sched,
                 virtual_pipeline_stages=v, first_stage_layers=first, last_stage_layers=last)
    if split_flags is not None:
        (group["account_for_embedding_in_pipeline_split"],
         group["account_for_loss_in_pipeline_split"]) = split_flags
    # what overlap_choices reads of the sizes (its other arguments are c's): the variants'
    # fields, built once per value of it
    etps = expert_tensor_sizes(c.etps, t)
    how = (tuple(sps_t), tuple(zs_d), d * cp > 1, 1 < t <= cl.gpus_per_node and not c.mla,
           ep > 1, cp > 1, tuple(etps), t == 1)
    varying = CP_VARIANT_FIELDS if cp > 1 else VARIANT_FIELDS
    known = c.variants_of.get(how)
    if known is None:
        overlaps = overlap_choices(sps_t, zs_d, c.tpos, c.dpos, t, d * cp, how[3],
                                   (base.overlap_grad_reduce, base.overlap_param_gather))
        # the dispatchers tried with expert parallelism; at ep = 1 no token leaves its rank
        # (the session's, or all-to-all where flex cannot run: dispatcher_at_ep1)
        disps = c.disps if ep > 1 else [base.moe_token_dispatcher_type]
        # the context-parallel exchanges tried with cp > 1; at cp = 1 there is none to choose
        cpcs = c.cpcs if cp > 1 else [(base.cp_comm_type, base.cp_a2a_size)]
        fields = [{"recompute": rc, "sequence_parallel": sp, "zero_stage": z,
                   "recompute_num_layers": rnl,
                   "tp_comm_overlap": tpo,
                   # the base's recomputed modules under selective
                   "recompute_modules": base.recompute_modules if rc == "selective" else None,
                   "overlap_grad_reduce": og, "overlap_param_gather": op,
                   "moe_token_dispatcher_type": (disp if ep > 1 else dispatcher_at_ep1(
                       disp, t if etp is None else etp)),
                   "expert_tensor_parallel": etp,
                   "cp_comm_type": cpc, "cp_a2a_size": a2a_size,
                   "cross_entropy_loss_fusion": ce, "cross_entropy_fusion_impl": impl}
                  for rc in c.rcs for rnl in (c.rnls if rc == "full" else [None])
                  for cpc, a2a_size in cpcs for disp in disps
                  for etp in etps for ce, impl in c.ces
                  for sp, z, tpo, og, op in overlaps]
        known = c.variants_of[how] = [fields, None]
    fields, rows = known
    if c.plain:  # each variant as set: their fields' values the same for every size
        cands = list(map(make, [{**group, **f} for f in fields]))
        if rows is None:
            rows = known[1] = verdicts.rows_of(cands, varying)
    elif c.rnls == [None]:  # no layers to cap: the variants of the sizes
        # the overlap's rules read (and of how) are the same, built once; and whether the
        # overlap pairs anything (one stage and one micro-batch: it is left out)
        key = (how, *(group[f] for f in _EP_OVERLAP_RULE_FIELDS if f in group
                      and f not in CP_VARIANT_FIELDS), _overlap_pairs_nothing(group))
        known = c.overlap_variants_of.get(key)
        if known is None:
            parts = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
                     *(fields[0] if fields else ()))
            known = c.overlap_variants_of[key] = [
                [{f: d[f] for f in parts}
                 for d in _with_overlaps(session.model, c, [{**group, **f} for f in fields])],
                None]
        cands = list(map(make, [{**group, **f} for f in known[0]]))
        if known[1] is None:
            known[1] = verdicts.rows_of(cands, varying)
        rows = known[1]
    else:
        cands, rows = _variant_plans(session, c, group, fields), None
    # model, cluster and cost were checked above
    return list(itertools.compress(cands, verdicts.valid_among(cands, varying, rows)))


def _variant_plans(session: Session, c: Any, group: dict, fields: list[dict]
                   ) -> list[ParallelPlan]:
    """The candidates of :func:`size_variants` in general: each of ``fields`` (a recomputation
    and an :func:`overlap_choices`) on ``group`` (the sizes), its recomputed layers capped,
    with each expert all-to-all overlap where the plan allows it (:func:`_with_overlaps`).
    Plans are built by :func:`plan_maker` (no ``__init__`` per plan)."""
    m, make = session.model, c.make
    values = []
    for f in fields:
        plan = make({**group, **f})
        if plan.recompute_num_layers is not None:
            plan = capped_recompute_layers(plan, m.num_layers, m.mtp_num_layers or 0)
        values.append(dict(zip(PLAN_FIELDS, plan_key(plan))))
    if len(c.rnls) > 1:  # counts capped to every layer (a chunk of N layers or fewer): once
        values = list({tuple(v.values()): v for v in values}.values())
    return list(map(make, _with_overlaps(m, c, values)))


def _with_overlaps(model, c: Any, values: list[dict]) -> list[dict]:
    """Each plan of ``values`` (dicts of every plan field) with each expert all-to-all
    overlap of ``c.ovs`` where the plan allows it: off, and on (with
    ``delay_wgrad_compute`` when the session delays it) where the overlap's rules
    (:func:`core.plan.rules.ep_overlap_errors`) pass, else off when off is not tried already;
    the rules asked once per combination of the fields they read
    (:data:`_EP_OVERLAP_RULE_FIELDS`). On is not tried beside off where it cannot differ from
    off (:func:`_overlap_pairs_nothing`: one stage and one micro-batch, nothing to pair):
    the two plans would have the same figures and memory and both reach a front.
    New dicts, in that order."""
    out = []
    allowed: dict[tuple, bool] = {}
    for plan in values:
        for ov in c.ovs:
            cand = plan
            if (ov != plan["overlap_moe_expert_parallel_comm"]
                    or (c.delay and ov) != plan["delay_wgrad_compute"]):
                cand = {**plan, "overlap_moe_expert_parallel_comm": ov,
                        "delay_wgrad_compute": c.delay and ov}
            if ov:
                key = tuple(cand[name] for name in _EP_OVERLAP_RULE_FIELDS)
                ok = allowed.get(key)
                if ok is None:
                    ok = allowed[key] = not ep_overlap_errors(model, c.make(dict(cand)))
                if ok and False in c.ovs and _overlap_pairs_nothing(cand):
                    continue  # the same plan as without it, tried already
                if not ok:
                    if False in c.ovs:
                        continue  # tried without already
                    cand = {**cand, "overlap_moe_expert_parallel_comm": False,
                            "delay_wgrad_compute": False}
            out.append(dict(cand))
    return out


def _overlap_pairs_nothing(plan: dict) -> bool:
    """Whether ``overlap_moe_expert_parallel_comm`` changes nothing in the plan of these
    fields (a dict of every plan field): one pipeline stage and one micro-batch. Megatron-Core's
    combined 1F1B without pipelining runs each forward beside the backward of the previous
    micro-batch, so with one micro-batch nothing pairs
    (:func:`core.model.memory.ep_overlap_paired_share` 0): the all-to-alls stay whole
    (:func:`core.sim.stages.ep_overlap_exposed`), no activation is added
    (:func:`core.model.memory.ep_overlap_in_flight`: no warm-up forward without pipelining,
    no paired layer) and the iteration and memory are the plan's without it
    (tests/test_ep_overlap.py). With pipelining the overlap adds a warm-up forward, so it
    always differs."""
    if plan["pipeline_parallel"] != 1:
        return False
    m = plan["global_batch_size"] // (plan["data_parallel"] * plan["micro_batch_size"])
    return m == 1


#: The plan fields :func:`core.plan.rules.ep_overlap_errors` reads (with the model): plans
#: equal in these get the same verdict (tests/test_sweep_prune.py compares with each plan's).
_EP_OVERLAP_RULE_FIELDS = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
                           "expert_parallel", "pipeline_parallel", "schedule", "recompute",
                           "recompute_modules", "precision")


def overlap_choices(sps: list[bool], zs: list[int], tpos: list[bool], dpos: list,
                    t: int, dp_ranks: int, tp_overlap_allowed: bool,
                    base_overlaps: tuple[bool, bool] = (False, False)) -> list[tuple]:
    """``(sequence_parallel, zero_stage, tp_comm_overlap, overlap_grad_reduce,
    overlap_param_gather)`` of the plans of one (t, d*cp): each overlap asked on only where
    Megatron supports it (the TP overlap with sequence parallelism inside a node; the
    gradient-reduce overlap with a data-parallel group, the parameter-gather overlap with a
    sharded optimizer too), each distinct combination once."""
    out = {}
    for sp in sps:
        for z in zs:
            for tpo in tpos:
                for dpo in dpos:
                    if dpo is None:  # the session's flags, as they are
                        og, op = base_overlaps
                    else:
                        og = dpo and dp_ranks > 1
                        op = bool(og and z >= 1)
                    out[(sp, z, bool(tpo and sp and tp_overlap_allowed), og, op)] = None
    return list(out)
