"""Why a sweep found no plan, or left a value it was given unused, in words.

The command line and the Explore tab print these under a sweep (:func:`no_plan_errors` when
the space yields no plan; :func:`unused_values` for values given that no valid plan uses):
each value given for t, p, b, cp or ep probed alone against the configuration rules
(:func:`value_errors`), and the exact GPU counts no product of the sizes tried makes. Messages
only; enumeration is :mod:`core.studies.sweep.space`'s.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from core import schedules as pipeline_schedules
from core.plan.fields import FieldError
from core.plan.session import Session
from core.plan.layout import pipeline_split_slots
from core.plan.parallel import RECOMPUTE_MODES, SWEEP_SCHEDULES
from core.plan.rules import probe_plan, validate
from core.studies.sweep.result import SweepResult
from core.studies.sweep.space import (DEFAULT_MICRO_BATCH_SIZES, SweepSpace, as_list, budget_text,
                                      cp_candidates, divisors, layout_stages,
                                      micro_batch_sizes_of, one_stage_schedule, tp_pp_candidates)
from core.studies.sweep.splits import (SPLIT_FLAG_FIELDS, pipeline_splits, slots_split,
                                       split_flag_options, split_flags_for, uneven_split_flags)

__all__ = ["no_plan_errors", "value_errors", "unused_values", "left_out_values"]


def _gpu_count_errors(session: Session, space: SweepSpace) -> list[FieldError]:
    """Each exact GPU count of ``space`` that no product t*p*cp*d of the sizes tried makes,
    with d a divisor of the global batch (a count like 100 for a 48-layer model and a batch of
    256)."""
    if space.num_gpus is None:
        return []
    ts, ps = tp_pp_candidates(session, space)
    cps = cp_candidates(session, space)
    B = session.plan.global_batch_size
    made = {t * p * cp * d for t in ts for p in ps for cp in cps for d in divisors(B)}
    return [FieldError(f"--gpus {n}", f"no t*p*cp*d makes {n} GPUs with t in "
                       f"{{{', '.join(map(str, ts))}}}, p in {{{', '.join(map(str, ps))}}}, cp in "
                       f"{{{', '.join(map(str, cps))}}} and d a divisor of the global batch {B}")
            for n in space.gpu_counts() if n not in made]


def no_plan_errors(session: Session, space: SweepSpace) -> list[FieldError]:
    """Why a sweep of ``space`` found no plan, as :class:`core.plan.fields.FieldError` s (the command
    line's and the Explore tab's message): the budget, then the rules each value given for t, p,
    b or cp breaks on its own (the others at 1), and each virtual-stage count v no
    pipeline-parallel size tried can hold."""
    return ([FieldError("sweep", f"no valid plan for {session.model.name} with global batch "
                                 f"{session.plan.global_batch_size} in this budget "
                                 f"({budget_text(space)})")] + _why_no_plan(session, space))


def _why_no_plan(session: Session, space: SweepSpace) -> list[FieldError]:
    """The rules the values given break on their own (:func:`value_errors`), each virtual-stage
    count v no pipeline-parallel size tried can hold, and the all-to-all exchanges' rules when
    only they were asked for; when none, why no plan takes each value given
    (:func:`_value_reasons`: the GPU counts it cannot make, the rule its plans break), else the
    exact GPU counts no product of the sizes makes."""
    out = []
    n = layout_stages(session.plan)
    if n is not None:
        # the layout's own rules first (its layer count, its symbols' order ...)
        own = [e for e in validate(session) if e.field == "plan.pipeline_model_parallel_layout"]
        out += own
    if n is not None and not own:
        out.append(FieldError("sweep", f"the session's pipeline_model_parallel_layout has {n} "
                              f"virtual stages: only plans with pipeline_parallel*"
                              f"virtual_pipeline_stages = {n} are tried (p one of "
                              f"{', '.join(map(str, divisors(n)))}; v = {n}/p under the "
                              f"interleaved schedule, p = {n} under the others)"))
    later = _virtual_and_exchange_errors(session, space, n)
    # the other values given: the rules they break alone, else why no plan of the budget takes
    # each
    given = {option: set(as_list(getattr(space, attr))) - {
                v for e, vs in later if e.field.startswith(option + " ") for v in vs}
             for option, attr, name in (*_PROBED, *_COMBINED)
             if getattr(space, attr) is not None and not (n is not None and name in _LAYOUT_SETS)
             and frozenset(as_list(getattr(space, attr))) != _NOT_GIVEN.get(option)}
    given = {o: vs for o, vs in given.items() if vs}
    alone = value_errors(session, space, given, skip_pipeline=n is not None)
    if alone or later:  # a value wrong on its own leaves the others no plan: it is the reason
        return out + alone + [e for e, _ in later]
    counts = _gpu_count_errors(session, space)
    if counts and len(counts) == len(space.gpu_counts()):
        # no product of the sizes makes any count: the counts, and each t, p or cp given that
        # makes none of them
        fields = {option: name for option, _, name in _PROBED}
        worlds: dict[tuple[str, str], list] = {}
        for option, vs in given.items():
            for v in sorted(vs, key=str):
                why = _world_reason(session, space, fields.get(option, ""), v)
                if why:
                    worlds.setdefault((option, why), []).append(v)
        return out + [FieldError(f"{option} {', '.join(map(str, vs))}", why)
                      for (option, why), vs in worlds.items()] + counts
    # why no plan of the budget takes each value given
    return out + _value_reasons(session, space, given, skip_pipeline=n is not None) + counts


def _virtual_and_exchange_errors(session: Session, space: SweepSpace, n: int | None
                                 ) -> list[tuple[FieldError, set]]:
    """Each virtual-stage count v given that no pipeline-parallel size tried can hold, and the
    all-to-all exchanges' rules when only they were asked for; each with the values it names."""
    out = []
    # the virtual-stage counts the user gave (the default 2..8 are tried quietly)
    if (any(pipeline_schedules.get(s).uses_virtual_stages for s in as_list(space.schedules)
            if s in pipeline_schedules.names()) and n is None
            and space.virtual_pipeline_stages is not None):
        L = pipeline_split_slots(session.model.num_layers, session.plan)  # + embedding, loss slots
        # the slot counts a plan may have: the session's, one or two more where the layers
        # need the embedding / loss flags, the layers alone with the session's flags off
        # (split_flag_options)
        slots = [(L + extra, extra) for extra, _ in split_flag_options(session.plan)]
        what = (f"num_layers={L}" if L == session.model.num_layers else
                f"num_layers + embedding + loss = {L} layer slots")
        more = [str(n) for n, extra in slots if extra > 0]
        if more:
            what += f" (or {' or '.join(more)} slots with the embedding / loss)"
        if any(extra < 0 for _, extra in slots):
            what += f" or num_layers={session.model.num_layers} with those flags off"
        ps = [p for p in (space.pipeline_parallel or range(2, max(n for n, _ in slots) + 1))
              if p >= 2 and any(slots_split(n, p, extra) for n, extra in slots)]
        for v in space.virtual_pipeline_stages:
            if not any(slots_split(n, p * v, extra, v > 1) for p in ps for n, extra in slots):
                out.append((FieldError(f"--virtual-pipeline-stages {v}", (
                    f"the interleaved schedule needs {what} divisible by "
                    f"pipeline_parallel*virtual_pipeline_stages; no pipeline-parallel size tried "
                    f"({', '.join(map(str, ps)) or 'none >= 2'}) gives that with v={v}")), {v}))
    # the context-parallel exchanges the user gave: their rules depend on t and cp together
    named = [k for k in as_list(space.cp_comm_type or ()) if k in ("a2a", "a2a+p2p")]
    if named and "p2p" not in as_list(space.cp_comm_type):
        out.append((FieldError(f"--cp-comm-types {','.join(as_list(space.cp_comm_type))}", (
            "with cp > 1 the all-to-all exchanges have rules of their own: a2a needs the query "
            "heads and the query groups of a tensor-parallel rank divisible by cp, a2a+p2p "
            "the session's cp_a2a_size dividing cp; "
            "p2p, the ring, has none")), set(as_list(space.cp_comm_type))))
    return out


#: The sweep options whose values :func:`value_errors` probes: option, SweepSpace attribute,
#: plan field.
_PROBED = (("--tensor-parallel", "tensor_parallel", "tensor_parallel"),
           ("--pipeline-parallel", "pipeline_parallel", "pipeline_parallel"),
           ("--micro-batch-sizes", "micro_batch_sizes", "micro_batch_size"),
           ("--context-parallel", "context_parallel", "context_parallel"),
           ("--expert-parallel", "expert_parallel", "expert_parallel"),
           ("--recompute", "recompute", "recompute"),
           ("--cp-comm-types", "cp_comm_type", "cp_comm_type"))

#: The values a sweep tries when an option of :data:`_PROBED` is not given, where they are a
#: list (the others' defaults are derived from the session): the values left out of these are
#: the dimensions' ``left_out`` (:func:`left_out_values`; recompute), not "values given".
_LISTED_DEFAULTS = {"--recompute": frozenset(RECOMPUTE_MODES),
                    "--schedules": frozenset(SWEEP_SCHEDULES)}

#: The values of a space that no one gave (the defaults of :class:`SweepSpace`'s lists).
_NOT_GIVEN = {**_LISTED_DEFAULTS, "--micro-batch-sizes": frozenset(DEFAULT_MICRO_BATCH_SIZES)}

#: Sweep options whose values no rule speaks of alone (a schedule or v means something only with
#: p): explained with the sizes they run with (:func:`_combination_reason`).
_COMBINED = (("--schedules", "schedules", "schedule"),
             ("--virtual-pipeline-stages", "virtual_pipeline_stages", "virtual_pipeline_stages"))

#: The plan fields a custom pipeline layout decides (their values are not probed with one).
_LAYOUT_SETS = ("pipeline_parallel", "virtual_pipeline_stages")

#: How a value is named in a reason: plan field -> its symbol (``p=7``).
_SYMBOL = {"tensor_parallel": "t", "pipeline_parallel": "p", "context_parallel": "cp",
           "data_parallel": "d", "micro_batch_size": "b", "expert_parallel": "ep",
           "virtual_pipeline_stages": "v"}

#: Size combinations :func:`_combination_reason` validates at most for one value.
_MAX_PROBES = 400

#: The reason of a value given that no plan takes when no rule of the sizes it runs with names one.
NO_COMBINATION = ("in no valid plan of this budget (no combination with the other sizes tried "
                  "passes the configuration rules)")


def _named(name: str, v) -> str:
    """``p=7``, ``schedule=zb-v``."""
    return f"{_SYMBOL.get(name, name)}={v}"


def _pipeline_fields(session: Session, p: int, chunks: int = 1, interleaved: bool = False
                     ) -> tuple[dict, list | None]:
    """The stage fields of the plans of ``p`` stages (``chunks`` model chunks each;
    ``interleaved``: the interleaved schedule's round-robin chunks) a sweep makes: the
    (embedding, loss) slot flags (:func:`split_flags_for`), or, where the layers split
    unevenly (:func:`pipeline_splits`), the first (first, last) stage layers with the flags
    off but at the session's own p; and those uneven splits (None: even)."""
    options = split_flag_options(session.plan)
    room = dict(zip(SPLIT_FLAG_FIELDS, split_flags_for(session.model.num_layers, options,
                                                       p * chunks, interleaved)[0]))
    split = pipeline_splits(session, [p]).get(p)
    if split:
        own = (p == session.plan.pipeline_parallel
               and split[0] == (session.plan.first_stage_layers, session.plan.last_stage_layers))
        room = dict(first_stage_layers=split[0][0], last_stage_layers=split[0][1],
                    **({} if own else dict(zip(SPLIT_FLAG_FIELDS, uneven_split_flags(options)))))
    return room, split


def _sizes_tried(session: Session, space: SweepSpace) -> dict[str, list]:
    """The values a sweep of ``space`` tries of each size and of the schedule and v (the
    enumeration's lists, :func:`core.studies.sweep.space.enumerate_plans`); d: the divisors of
    the global batch the budget's d bounds allow."""
    m, B = session.model, session.plan.global_batch_size
    ts, ps = tp_pp_candidates(session, space)
    listed = {"expert_parallel": space.expert_parallel, "micro_batch_size": space.micro_batch_sizes,
              "virtual_pipeline_stages": space.virtual_pipeline_stages}
    out = {"tensor_parallel": ts, "pipeline_parallel": ps,
           "context_parallel": cp_candidates(session, space),
           "data_parallel": [d for d in divisors(B) if (
               space.data_parallel is None or d in as_list(space.data_parallel))
               and (space.max_data_parallel is None or d <= space.max_data_parallel)],
           "expert_parallel": divisors(m.num_experts) if m.is_moe else [1],
           "micro_batch_size": micro_batch_sizes_of(B),
           "schedule": list(dict.fromkeys(as_list(space.schedules))),
           "virtual_pipeline_stages": list(range(2, 9))}
    out.update({k: sorted(set(as_list(v))) for k, v in listed.items() if v is not None})
    return out


def _world_reason(session: Session, space: SweepSpace, name: str, v) -> str | None:
    """Why a t, p or cp of ``v`` is in no plan of the budget's GPU counts: no ``t*p*cp*d``
    with it (the other sizes tried, d a divisor of the global batch) is one of the exact
    counts, or the fewest is above the largest; None when one is (or for another field)."""
    if name not in ("tensor_parallel", "pipeline_parallel", "context_parallel") or \
            not isinstance(v, int) or isinstance(v, bool) or v < 1:
        return None
    tried = _sizes_tried(session, space)
    tried[name] = [v]
    ds = tried["data_parallel"]
    worlds = sorted({t * p * cp * d for t in tried["tensor_parallel"]
                     for p in tried["pipeline_parallel"] for cp in tried["context_parallel"]
                     for d in ds})
    if not worlds:
        return None
    others = ", ".join(f"{_SYMBOL[f]} in {{{', '.join(map(str, tried[f]))}}}"
                       for f in ("tensor_parallel", "pipeline_parallel", "context_parallel")
                       if f != name)
    B = session.plan.global_batch_size
    made = f"t*p*cp*d with {others} and d " + (
        f"a divisor of the global batch {B}" if len(ds) == len(divisors(B)) else
        f"one of {', '.join(map(str, ds))} (the divisors of the global batch {B} the budget "
        "allows)")
    counts = space.gpu_counts()
    if counts and not set(worlds) & set(counts):
        shown = ", ".join(map(str, worlds[:8])) + (", ..." if len(worlds) > 8 else "")
        return (f"no plan with {_named(name, v)} has {' or '.join(map(str, counts))} GPUs: "
                f"{made} gives {shown}")
    if space.max_gpus is not None and worlds[0] > space.max_gpus:
        return (f"a plan with {_named(name, v)} takes at least {worlds[0]:,} GPUs ({made}), "
                f"more than the budget's {space.max_gpus:,}")
    return None


def _combination_reason(session: Session, space: SweepSpace, name: str, v) -> str | None:
    """The rule that refuses most of the plans of the budget with ``name`` = ``v`` (the sizes,
    schedules and v tried, each other field as the rules' probe sets it,
    :func:`core.plan.rules.probe_plan`), counted, with one such plan; or why none is tried
    with it (one pipeline stage runs one schedule; no schedule tried has virtual stages);
    None when no combination breaks a rule."""
    tried = _sizes_tried(session, space)
    scheds = tried["schedule"]
    known = [sc for sc in scheds if sc in pipeline_schedules.names()]
    if name == "virtual_pipeline_stages" and not any(
            pipeline_schedules.get(sc).uses_virtual_stages for sc in known):
        return (f"no schedule tried ({', '.join(scheds)}) has virtual stages: v is tried only "
                "with the interleaved schedule")
    if name in tried:
        tried[name] = [v]
    counts = space.gpu_counts()
    m = session.model
    tally: dict[tuple[str, str], list] = {}
    own, own_tally = f"plan.{name}", {}  # the rules of the value's own field, every plan's
    probes = one_stage = unsplit = 0
    for t, p, cp, d in itertools.product(*(tried[f] for f in (
            "tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel"))):
        world = t * p * cp * d
        if (counts and world not in counts) or (space.max_gpus is not None
                                                and world > space.max_gpus):
            continue
        for ep, b, sched in itertools.product(tried["expert_parallel"],
                                              tried["micro_batch_size"], tried["schedule"]):
            if p == 1 and sched != one_stage_schedule(scheds):
                one_stage += 1  # one stage: every schedule runs the same order
                continue
            virtual = sched in known and pipeline_schedules.get(sched).uses_virtual_stages
            for vv in (tried["virtual_pipeline_stages"] if virtual else [None]):
                if name == "virtual_pipeline_stages" and vv is None:
                    continue
                chunks = pipeline_schedules.get(sched).chunks(vv) if sched in known else 1
                room, _ = (_pipeline_fields(session, p, chunks, virtual and chunks > 1)
                           if p > 1 else ({}, None))
                if vv is not None and space.virtual_pipeline_stages is None and \
                        pipeline_split_slots(m.num_layers, probe_plan(session.plan, **{
                            **room, "pipeline_parallel": p, "schedule": sched,
                            "virtual_pipeline_stages": vv})) % (p * vv):
                    unsplit += 1
                    continue  # not a default v of this p: the sweep tries only those that split
                probe = session.copy()
                probe.plan = probe_plan(session.plan, **{
                    **room, "tensor_parallel": t, "pipeline_parallel": p,
                    "context_parallel": cp, "data_parallel": d, "expert_parallel": ep,
                    "micro_batch_size": b, "schedule": sched, "virtual_pipeline_stages": vv,
                    **({} if name in tried else {name: v})})
                errs = validate(probe)
                if errs:
                    # one rule per field and kind, whatever sizes its message names (p=2 and
                    # p=4 break "layers divisible by p*v" alike): its first message and plans
                    first = errs[0]
                    where = (f"t={t} p={p} cp={cp} d={d} b={b}" + (f" ep={ep}" if m.is_moe
                                                                     else "")
                             + f" {sched}" + (f" v={vv}" if vv else ""))
                    tally.setdefault((first.field, first.rule), [first.message, []])[1].append(
                        where)
                    # the value's own field's rules, wherever they come in the list (another
                    # size's rule may come first, e.g. before cp_comm_type='allgather' with MLA)
                    for key in {(e.field, e.rule) for e in errs if e.field == own}:
                        own_tally.setdefault(key, [next(
                            e.message for e in errs if (e.field, e.rule) == key), []])[1].append(
                            where)
                probes += 1
                if probes >= _MAX_PROBES:
                    break
            if probes >= _MAX_PROBES:
                break
        if probes >= _MAX_PROBES:
            break
    if not probes and unsplit:
        return (f"no virtual-stage count v of 2 to 8 splits the {m.num_layers} layers (or one "
                "or two more layer slots) evenly over the p*v virtual stages of the p tried "
                f"({', '.join(map(str, tried['pipeline_parallel']))}): the schedules with "
                "virtual stages have no plan in this budget (give --virtual-pipeline-stages, "
                "or another p)")
    if not probes:
        if name == "schedule" and one_stage:
            return (f"every plan of this budget has one pipeline stage (p=1), where every "
                    f"schedule runs the same order: the sweep keeps {one_stage_schedule(scheds)}")
        sizes = ", ".join(f"{_SYMBOL[f]} in {{{', '.join(map(str, tried[f]))}}}" for f in (
            "tensor_parallel", "pipeline_parallel", "context_parallel"))
        return (f"no plan with {_named(name, v)} is in this budget ({budget_text(space)}): no "
                f"t*p*cp*d with {sizes} and d a divisor of the global batch the budget allows "
                "makes its GPU count")
    if not tally:
        return None
    # a rule of the value's own field that every plan with it breaks is the reason, whichever
    # rule the validation reports first; else the rule reported first in the most plans
    every = [mw for mw in own_tally.values() if len(mw[1]) == probes]
    message, where = every[0] if every else max(tally.values(), key=lambda mw: len(mw[1]))
    return (f"{message} (in {len(where)} of the {probes} size combinations of this budget with "
            f"{_named(name, v)}{'' if probes < _MAX_PROBES else ' probed'}, e.g. {where[0]})")


def _value_reasons(session: Session, space: SweepSpace, wanted: dict[str, set],
                   skip_pipeline: bool = False) -> list[FieldError]:
    """Why no plan takes each value of ``wanted`` (``{option: values}``, options of
    :data:`_PROBED` and :data:`_COMBINED`), the first that speaks: the rules it breaks alone
    (:func:`value_errors`), the budget's GPU counts no t*p*cp*d with it makes
    (:func:`_world_reason`), the rule most of its plans break (:func:`_combination_reason`),
    else :data:`NO_COMBINATION`. One :class:`FieldError` per option and reason, its values
    named together."""
    groups = _value_groups(session, space, wanted, skip_pipeline)
    named = {(option, v) for (option, _), vs in groups.items() for v in vs}
    fields = {option: name for option, _, name in (*_PROBED, *_COMBINED)}
    for option in wanted:
        for v in sorted(wanted[option], key=str):
            if (option, v) in named:
                continue
            name = fields[option]
            why = (_world_reason(session, space, name, v)
                   or _combination_reason(session, space, name, v) or NO_COMBINATION)
            groups.setdefault((option, why), []).append(v)
    return [FieldError(f"{option} {', '.join(map(str, vs))}", message)
            for (option, message), vs in groups.items()]


def _value_groups(session: Session, space: SweepSpace, values: dict[str, set] | None = None,
                  skip_pipeline: bool = False) -> dict[tuple[str, str], list]:
    """``{(option, message): [values]}``: the rules each value given for t, p, b, cp or ep
    breaks on its own (see :func:`value_errors`)."""
    grouped: dict[tuple[str, str], list] = {}
    counts = space.gpu_counts()
    most = max(counts) if counts else space.max_gpus  # the budget's largest world size
    for option, attr, name in _PROBED:
        if skip_pipeline and name == "pipeline_parallel":
            continue
        given = getattr(space, attr) or ()
        if values is not None:
            given = [v for v in given if v in values.get(option, ())]
        for v in given:
            if most is not None and isinstance(v, int) and v > most and name != \
                    "micro_batch_size":
                grouped.setdefault((option, f"more GPUs than the budget allows (at most "
                                            f"{most:,})"), []).append(v)
                continue
            # an expert-parallel group lives inside the data-parallel ranks: probe ep with
            # d = ep (and a batch of one micro-batch per rank) so only ep's own rules speak
            room = (dict(data_parallel=v, global_batch_size=v)
                    if name == "expert_parallel" and isinstance(v, int) and v > 0 else {})
            if name == "pipeline_parallel" and isinstance(v, int) and not isinstance(v, bool) \
                    and v >= 1:
                # the slot flags of its 1F1B plans (the session's, those the slots need, or
                # off where only the layers split), or the first / last stages of a p that
                # splits the layers unevenly, which no schedule of several model chunks takes
                room, split = _pipeline_fields(session, v)
                if split:
                    multi = [sc for sc in as_list(space.schedules)
                             if sc in pipeline_schedules.names()
                             and (pipeline_schedules.get(sc).uses_virtual_stages
                                  or pipeline_schedules.get(sc).fixed_chunks > 1)]
                    if multi and len(multi) == len(as_list(space.schedules)):
                        grouped.setdefault((option, (
                            f"splits the {session.model.num_layers} layers unevenly: its plans "
                            "have uneven first / last stages (Megatron-Core's --decoder-first/"
                            "last-pipeline-num-layers), which are not modelled with the "
                            f"{', '.join(multi)} schedule{'s' if len(multi) > 1 else ''} "
                            "(several model chunks per stage); try 1f1b")), []).append(v)
                        continue
            for message in _probe_messages(session, space, name, v, room):
                grouped.setdefault((option, message), []).append(v)
    return grouped


def _probe_messages(session: Session, space: SweepSpace, name: str, v, room: dict) -> list[str]:
    """The messages of the rules a plan with ``name = v`` (the other sizes at 1, ``room``'s
    fields set) breaks in every variant the sweep tries of it: for a mixture-of-experts
    model's t > 1 the expert tensor-parallel size t (unset) and 1, and sequence parallelism as
    the sweep sets it (on at t > 1 unless ``--sequence-parallel`` says otherwise), since a rule
    one variant alone breaks (etp = t: the experts' width divisible by t) leaves the value to
    the other; when the variants break disjoint rules, those of the first (etp = 1)."""
    variants = [{}]
    if name == "tensor_parallel" and isinstance(v, int) and not isinstance(v, bool) and v > 1:
        sps = ([True] if space.sequence_parallel is None
               else list(dict.fromkeys(bool(x) for x in as_list(space.sequence_parallel))))
        if space.hold_session_values:
            sps = [session.plan.sequence_parallel]
        etps = ([1, None] if session.model.is_moe and not space.hold_session_values
                else [session.plan.expert_tensor_parallel])
        variants = [{"expert_tensor_parallel": e, "sequence_parallel": sp}
                    for e in etps for sp in sps]
    found = []
    for extra in variants:
        probe = session.copy()
        probe.plan = probe_plan(session.plan, **{**room, name: v})
        # probe_plan keeps the plan's own value where a change is None: set these as given
        probe.plan = dataclasses.replace(probe.plan, **extra)
        if name == "recompute" and v != "selective":  # as the sweep's variants set them
            probe.plan = dataclasses.replace(probe.plan, recompute_modules=None)
        found.append(list(dict.fromkeys(e.message for e in validate(probe))))
    common = [m for m in found[0] if all(m in other for other in found[1:])]
    return common if common or not all(found) else found[0]


def value_errors(session: Session, space: SweepSpace, values: dict[str, set] | None = None,
                 skip_pipeline: bool = False) -> list[FieldError]:
    """The rules each value given for t, p, b, cp or ep breaks on its own (the other sizes at
    1, :func:`core.plan.rules.probe_plan`; the session's model), one
    :class:`core.plan.fields.FieldError` per option and message, the values that break it named
    together (``--micro-batch-sizes 1, 2, 4``); a value above the budget's GPUs is named so.
    ``values`` restricts the probe to some values per option (``{"--expert-parallel": {3}}``);
    ``skip_pipeline`` leaves p out (a custom pipeline layout decides it)."""
    return [FieldError(f"{option} {', '.join(map(str, vs))}", message)
            for (option, message), vs in
            _value_groups(session, space, values, skip_pipeline).items()]


def unused_values(session: Session, space: SweepSpace, result: SweepResult
                  ) -> list[FieldError]:
    """Values given for t, p, b, cp or ep that no valid plan of ``result`` uses, each with the
    rule it breaks on its own (:func:`value_errors`), or, when it breaks none alone, that no
    combination with the other sizes in this budget is valid; and the exact GPU counts no
    valid plan has; empty when every given value appears. The command line and the Explore
    tab print them under the results, so that a value is never dropped without a word."""
    out: list[FieldError] = []
    counts = space.gpu_counts()
    if counts and len(counts) > 1:  # exact counts no valid plan has
        used = set(np.asarray(result.num_gpus).tolist())
        why = {e.field: e.message for e in _gpu_count_errors(session, space)}
        out += [FieldError(f"--gpus {n}", why.get(f"--gpus {n}", "no valid plan has this many "
                                                  "GPUs (no combination with the sizes tried "
                                                  "passes the configuration rules)"))
                for n in counts if n not in used]
    unused: dict[str, set] = {}
    for option, attr, name in (*_PROBED, *_COMBINED):
        given = getattr(space, attr)
        if not given or name not in result.plan_columns:
            continue
        if frozenset(given) == _LISTED_DEFAULTS.get(option):
            continue  # the default: left_out_values names what it leaves out
        seen = set(np.asarray(result.plan_columns[name]).tolist())
        missing = {v for v in given if v not in seen}
        if missing:
            unused[option] = missing
    out += _variant_reasons(space, result, unused)
    out += _recompute_layer_reasons(space, result)
    return out + _value_reasons(session, space, unused)


def _recompute_layer_reasons(space: SweepSpace, result: SweepResult) -> list[FieldError]:
    """The counts given to ``--recompute-num-layers`` (:attr:`SweepSpace.recompute_num_layers`)
    that no plan of ``result`` takes: no valid plan recomputes fully, or every full plan's model
    chunks hold that many layers or fewer, so that it recomputes them all (Megatron's block
    method; :func:`core.plan.layout.capped_recompute_layers`: the every-layer plan)."""
    from core.studies.sweep.space import recompute_layer_counts
    given = [n for n in recompute_layer_counts(space.recompute_num_layers or ())
             if n is not None]
    columns = result.plan_columns
    if not given or "recompute_num_layers" not in columns or "recompute" not in columns:
        return []
    full = np.asarray(columns["recompute"]) == "full"
    seen = set(np.asarray(columns["recompute_num_layers"], dtype=object)[full].tolist())
    why = ("no valid plan of this sweep recomputes fully" if not full.any() else
           "every full-recomputation plan's model chunks hold that many layers or fewer, so "
           "it recomputes them all (Megatron's block method): those plans recompute every "
           "layer (-)")
    return [FieldError(f"--recompute-num-layers {n}", why) for n in given if n not in seen]


#: Sweep options whose values are variants of the plans with one size above 1 (option, the
#: plan field it sweeps (the space's attribute of that name), the size's plan field, its
#: symbol, what the values are).
_VARIANTS = (("--cp-comm-types", "cp_comm_type", "context_parallel", "cp",
              "context-parallel exchanges"),
             ("--moe-token-dispatcher", "moe_token_dispatcher_type", "expert_parallel", "ep",
              "MoE token dispatchers"))


def _variant_reasons(space: SweepSpace, result: SweepResult,
                     unused: dict[str, set]) -> list[FieldError]:
    """The values given for an exchange (``--cp-comm-types``) or a token dispatcher
    (``--moe-token-dispatcher``) that no plan takes because no valid plan has the size they
    vary (cp > 1, ep > 1): named with that reason (and taken out of ``unused``), not with a
    rule of some other size combination; the dispatcher, not a probed option, is checked here
    too."""
    out = []
    for option, name, size, sym, what in _VARIANTS:
        given = as_list(getattr(space, name) or ())
        if not given or size not in result.plan_columns:
            continue
        sizes = np.asarray(result.plan_columns[size])
        if (sizes > 1).any():
            continue  # some plan has the size: the values' own rules speak (_value_reasons)
        missing = set(unused.pop(option, ()))
        if name in result.plan_columns:
            seen = set(np.asarray(result.plan_columns[name]).tolist())
            missing |= {v for v in given if v not in seen}
        if missing:
            tried = sorted(set(sizes.tolist()))
            out.append(FieldError(
                f"{option} {', '.join(sorted(map(str, missing)))}",
                f"{what} apply to the plans with {sym} > 1 only, and no valid plan of this "
                f"sweep has one ({sym} tried: {', '.join(map(str, tried)) or 'none'})"))
    return out


def left_out_values(session: Session, space: SweepSpace, field: str, taken) -> list[dict]:
    """The default values ``space`` lists for the plan field ``field`` (those of
    :data:`_LISTED_DEFAULTS`: recompute; values the user gave are :func:`unused_values`')
    that no plan takes (``taken``: the values the plans take) and that a rule rules out on
    its own (:func:`value_errors`: e.g. full recomputation under
    the session's per-layer CUDA graphs), each ``{"value": v, "why": the rule's message}``;
    empty for another field. The sweep's dimensions carry them, so a value tried is never
    dropped without a word."""
    option = next((o for o, _, name in _PROBED if name == field), None)
    if option is None:
        return []
    given = getattr(space, next(a for o, a, _ in _PROBED if o == option)) or ()
    if frozenset(as_list(given)) != _LISTED_DEFAULTS.get(option):
        return []  # values the user gave: unused_values names those left out, once
    missing = [v for v in as_list(given) if v not in set(taken)]
    if not missing:
        return []
    groups = _value_groups(session, space, {option: set(missing)})
    out = []
    for (_, message), vs in groups.items():
        out += [{"value": v, "why": message} for v in vs]
    return sorted(out, key=lambda d: str(d["value"]))
