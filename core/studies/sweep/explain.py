"""Why a sweep found no plan, or left a value it was given unused, in words.

The command line and the Explore tab print these under a sweep (:func:`no_plan_errors` when
the space yields no plan; :func:`unused_values` for values given that no valid plan uses):
each value given for t, p, b, cp or ep probed alone against the configuration rules
(:func:`value_errors`), and the exact GPU counts no product of the sizes tried makes. Messages
only; enumeration is :mod:`core.studies.sweep.space`'s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core import schedules as pipeline_schedules
from core.plan.fields import FieldError
from core.plan.session import Session
from core.plan.layout import pipeline_split_slots
from core.plan.parallel import RECOMPUTE_MODES
from core.plan.rules import probe_plan, validate
from core.studies.sweep.result import SweepResult
from core.studies.sweep.space import (SPLIT_FLAG_FIELDS, SweepSpace, as_list, budget_text,
                                      cp_candidates, divisors, pipeline_splits, slots_split,
                                      split_flag_options, split_flags_for, layout_stages,
                                      tp_pp_candidates, uneven_split_flags)

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
    """The rules each value given for t, p, b, cp or ep breaks on its own (the others at 1,
    :func:`value_errors`), each virtual-stage count v no pipeline-parallel size tried can
    hold, and the all-to-all exchanges' rules when only they were asked for."""
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
    values = value_errors(session, space, skip_pipeline=n is not None)
    # a GPU count no product of the sizes makes, when no size given is wrong on its own (a
    # wrong size makes the count unreachable too: its own rule says more)
    out += values or _gpu_count_errors(session, space)
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
            if not any(slots_split(n, p * v, extra) for p in ps for n, extra in slots):
                out.append(FieldError(f"--virtual-pipeline-stages {v}", (
                    f"the interleaved schedule needs {what} divisible by "
                    f"pipeline_parallel*virtual_pipeline_stages; no pipeline-parallel size tried "
                    f"({', '.join(map(str, ps)) or 'none >= 2'}) gives that with v={v}")))
    # the context-parallel exchanges the user gave: their rules depend on t and cp together
    named = [k for k in as_list(space.cp_comm_type or ()) if k in ("a2a", "a2a+p2p")]
    if named and "p2p" not in as_list(space.cp_comm_type):
        out.append(FieldError(f"--cp-comm-types {','.join(as_list(space.cp_comm_type))}", (
            "with cp > 1 the all-to-all exchanges have rules of their own: a2a needs the query "
            "heads and the query groups of a tensor-parallel rank divisible by cp (and no "
            "multi-head latent attention), a2a+p2p the session's cp_a2a_size dividing cp; "
            "p2p, the ring, has none")))
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
#: the dimensions' ``left_out`` (:func:`left_out_values`), not "values given".
_LISTED_DEFAULTS = {"--recompute": frozenset(RECOMPUTE_MODES)}


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
            probe = session.copy()
            # an expert-parallel group lives inside the data-parallel ranks: probe ep with
            # d = ep (and a batch of one micro-batch per rank) so only ep's own rules speak
            room = (dict(data_parallel=v, global_batch_size=v)
                    if name == "expert_parallel" and isinstance(v, int) and v > 0 else {})
            if name == "pipeline_parallel" and isinstance(v, int) and not isinstance(v, bool) \
                    and v >= 1:
                # the slot flags of its 1F1B plans: the session's, those the slots need, or off
                # where only the layers split (split_flags_for)
                options = split_flag_options(session.plan)
                room = dict(zip(SPLIT_FLAG_FIELDS,
                                split_flags_for(session.model.num_layers, options, v)[0]))
                # a p that splits the layers unevenly: its plans' first / last stages
                # (pipeline_splits), the flags off but at the session's own p, which no
                # schedule of several model chunks takes
                split = pipeline_splits(session, [v]).get(v)
                if split:
                    own = (v == session.plan.pipeline_parallel
                           and split[0] == (session.plan.first_stage_layers,
                                            session.plan.last_stage_layers))
                    room = dict(first_stage_layers=split[0][0], last_stage_layers=split[0][1],
                                **({} if own else dict(zip(SPLIT_FLAG_FIELDS,
                                                           uneven_split_flags(options)))))
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
            probe.plan = probe_plan(session.plan, **{**room, name: v})
            if name == "recompute" and v != "selective":  # as the sweep's variants set them
                probe.plan = dataclasses.replace(probe.plan, recompute_modules=None)
            for e in validate(probe):
                grouped.setdefault((option, e.message), []).append(v)
    return grouped


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
    for option, attr, name in _PROBED:
        given = getattr(space, attr)
        if not given or name not in result.plan_columns:
            continue
        if frozenset(given) == _LISTED_DEFAULTS.get(option):
            continue  # the default: left_out_values names what it leaves out
        seen = set(np.asarray(result.plan_columns[name]).tolist())
        missing = {v for v in given if v not in seen}
        if missing:
            unused[option] = missing
    if not unused:
        return out
    groups = _value_groups(session, space, unused)
    out += [FieldError(f"{option} {', '.join(map(str, vs))}", message)
            for (option, message), vs in groups.items()]
    named = {(option, v) for (option, _), vs in groups.items() for v in vs}
    for option, vs in unused.items():
        rest = sorted(v for v in vs if (option, v) not in named)
        if rest:
            out.append(FieldError(f"{option} {', '.join(map(str, rest))}",
                                  "in no valid plan of this budget (no combination with the "
                                  "other sizes tried passes the configuration rules)"))
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
