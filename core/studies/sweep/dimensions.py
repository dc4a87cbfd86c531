"""What a sweep swept and what it held, and why: one entry per plan field.

:func:`sweep_dimensions` reads the plans a sweep enumerated (:mod:`core.studies.sweep.space`)
and its space, and says for each plan field whether the plans take several values (swept) or
one (held), which, and where they come from (the options given, or what the default tries).
The command line prints it, ``--json`` has it as ``dimensions`` and the Explore tab shows it.
Nothing that enumerates or simulates belongs here.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from core.plan.parallel import PLAN_FIELDS, RECOMPUTE_MODES, SWEEP_SCHEDULES, ParallelPlan
from core.plan.session import Session
from core.sim.labels import KIND_NAMES
from core.studies.sweep.explain import left_out_values
from core.studies.sweep.result import BEST_BY_FIELDS
from core.studies.sweep.space import (CROSS_ENTROPY_FUSIONS, DEFAULT_CROSS_ENTROPY_FUSION,
                                      SweepSpace, as_list, recompute_layer_counts)
from core.studies.sweep.splits import SPLIT_FLAG_FIELDS
from core.studies.sweep.pace import yield_interpreter

__all__ = ["sweep_dimensions", "held_dimensions", "merge_dimensions", "KEPT_SWITCHES",
           "kept_switches_text", "value_text"]

#: The plan switches a study's sweeps keep at the session's values
#: (``SweepSpace(hold_session_values=True)``: the shared-cluster study, and the compute-optimal
#: study with ``hold_session_values``),
#: named in their output so that a result is read with the plan it assumed; every other field
#: the sweep does not choose (the FP8 recipe, recompute modules ...) is the session's too.
KEPT_SWITCHES = ("precision", "sequence_parallel", "zero_stage", "overlap_grad_reduce",
                 "overlap_param_gather", "tp_comm_overlap", "gradient_accumulation_fusion",
                 "cross_entropy_loss_fusion", "context_parallel")


def value_text(v: Any) -> str:
    """A plan value as the sweep's tables and dimension lines write it: ``y`` / ``n`` for a
    boolean, ``-`` for none, else ``str(v)``."""
    return "-" if v is None else "y" if v is True else "n" if v is False else str(v)


def kept_switches_text(plan: ParallelPlan) -> str:
    """``"precision=bf16 sequence_parallel=off zero_stage=1 ..."``: :data:`KEPT_SWITCHES` of
    ``plan`` (booleans as on/off), the values a study's sweeps hold."""
    def word(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)
    return " ".join(f"{name}={word(getattr(plan, name))}" for name in KEPT_SWITCHES)

#: How the default sweep sets Megatron-Core's embedding / loss layer-slot flags
_SPLIT_FLAG_DEFAULT = ("the session's, and set where the layers need it: on the (p, v) whose "
                       "layers do not split evenly over the p*v virtual stages but L + 1 or "
                       "L + 2 layer slots do (Megatron-Core's --account-for-embedding/loss-in-"
                       "pipeline-split; L + 2: both, L + 1: the loss's); off where the "
                       "session's are on and only the L layers split, or where nothing splits "
                       "and the plans have uneven first / last stages")
#: The note the command line and the Explore tab print with those flags when swept
_SPLIT_FLAG_NOTE = ("set where the layers need it: L + 1 or L + 2 slots split over p*v; off "
                    "where only the layers split or with uneven first / last stages")

_DIMENSION_DEFAULTS = {
    "tensor_parallel": ("tensor_parallel", "the divisors of the GPUs per node"),
    "pipeline_parallel": ("pipeline_parallel", "the divisors of the layer count L and of the "
                                               "L + 1 and L + 2 layer slots with the embedding "
                                               "/ loss counted, and the powers of two from 4 "
                                               "that split the layers unevenly (with uneven "
                                               "first / last stages, the embedding / loss "
                                               "flags off)"),
    "data_parallel": ("data_parallel", "every d the budget and the global batch allow"),
    "micro_batch_size": ("micro_batch_sizes", "every divisor of the global batch while the "
                                              "smallest-memory plan of that b fits"),
    "schedule": ("schedules", "1f1b, gpipe, interleaved and zb-h1 where the model allows them "
                              "(zb-v only when asked)"),
    "virtual_pipeline_stages": ("virtual_pipeline_stages",
                                "2 to 8 with the interleaved schedule, where p*v divides the "
                                "layers (or L + 1 or L + 2 layer slots)"),
    "recompute": ("recompute", "none, selective and full"),
    "context_parallel": ("context_parallel", "the powers of two that split the sequence in 2*cp "
                                             "chunks, up to the budget"),
    "expert_parallel": ("expert_parallel", "the divisors of the expert count (1 for a dense "
                                           "model)"),
    "sequence_parallel": ("sequence_parallel",
                          "on wherever t > 1, off at t = 1: what Megatron-Core users run (the "
                          "same communication volume as the all-reduces it replaces, less "
                          "activation memory); --sequence-parallel n,y tries it off too"),
    "zero_stage": ("zero_stages", "0, 1, 2 and 3 where valid (one stage at d*cp = 1)"),
    "tp_comm_overlap": ("tp_comm_overlap", "on where Megatron supports it (sequence parallel, "
                                           "1 < t <= a node)"),
    "overlap_grad_reduce": ("dp_overlap", "on with data parallelism"),
    "overlap_param_gather": ("dp_overlap", "on with a sharded optimizer (ZeRO >= 1)"),
    "overlap_moe_expert_parallel_comm": ("overlap_moe_expert_parallel_comm",
                                         "off and on where a plan allows it (a "
                                         "mixture-of-experts model; off for a dense one)"),
    "expert_tensor_parallel": (None, "the session's, t (unset: Megatron-Core's default) and "
                                     "1 (Megatron-Bridge's MoE recipes) with t > 1, for a "
                                     "mixture-of-experts model; the session's at t = 1"),
    "moe_token_dispatcher_type": ("moe_token_dispatcher_type",
                                  "alltoall and flex with expert parallelism (ep > 1)"),
    "cp_comm_type": ("cp_comm_type", f"p2p, a2a and the session's {KIND_NAMES['cp_p2p']} "
                                     "with context parallelism (cp > 1; a2a where the heads of a "
                                     "tensor-parallel rank divide by cp), the session's at "
                                     "cp = 1"),
    "cp_a2a_size": (None, "the session's with the a2a+p2p exchange, none with the others"),
    "cross_entropy_loss_fusion": ("cross_entropy_fusion", "on (Megatron-Bridge's recipes)"),
    "cross_entropy_fusion_impl": ("cross_entropy_fusion", "te, Transformer Engine's kernels "
                                                          "(Megatron-Bridge's recipes; "
                                                          "Megatron-LM's arguments refuse te: "
                                                          "--cross-entropy-fusion native for a "
                                                          "plan to export as a Megatron-LM "
                                                          "launch)"),
    "recompute_num_layers": ("recompute_num_layers", "under full recomputation every layer, and the fewest "
                                   "layers per model chunk that fit (Megatron's block "
                                   "method); the session's when it sets them"),
    "recompute_modules": (None, "the session's under selective recomputation"),
    "first_stage_layers": (None, "the session's at its own p; where p splits neither the "
                                 "layers nor the layer slots evenly, ceil(L/p) on each middle "
                                 "stage and the rest on the first and last (halved, or the most "
                                 "on the first), with the embedding / loss flags off"),
    "last_stage_layers": (None, "the session's at its own p; where p splits the layers "
                                "unevenly, the rest after the middle stages and the first"),
    "delay_wgrad_compute": (None, f"the session's with the {KIND_NAMES['ep_all_to_all']} "
                                  "overlap"),
    "account_for_embedding_in_pipeline_split": (None, _SPLIT_FLAG_DEFAULT),
    "account_for_loss_in_pipeline_split": (None, _SPLIT_FLAG_DEFAULT),
}


#: The space's attributes whose default is a list, not None: equal to it, they are the default
#: (the command line passes its default list), not values given.
_LISTED_DEFAULTS = {"schedules": tuple(SWEEP_SCHEDULES), "recompute": tuple(RECOMPUTE_MODES)}


def _as_tuple(values: Any) -> tuple:
    return (values,) if isinstance(values, str) else tuple(values)


#: Plans transposed at a time by :func:`_distinct_values`: a few milliseconds per C call, so
#: that the window's thread gets the interpreter between them.
_CHUNK_PLANS = 4096


def _distinct_values(plans: list[ParallelPlan]) -> dict[str, dict]:
    """Each plan field's distinct values among ``plans`` (dict keys, first seen first): the
    plans' fields read as one tuple per plan and transposed a chunk at a time (one
    ``attrgetter`` call per plan instead of one per plan and field: 296,626 DeepSeek-V3 plans
    in about 1 s instead of 6)."""
    seen: dict[str, dict] = {name: {} for name in PLAN_FIELDS}
    every = operator.attrgetter(*PLAN_FIELDS)
    for start in range(0, len(plans), _CHUNK_PLANS):
        yield_interpreter()
        rows = list(map(every, plans[start:start + _CHUNK_PLANS]))
        for name, column in zip(PLAN_FIELDS, zip(*rows)):
            seen[name].update(dict.fromkeys(column))
    return seen


def _distinct_column_values(columns: dict[str, np.ndarray]) -> dict[str, list]:
    """:func:`_distinct_values` from the plans' columns
    (:func:`core.studies.sweep.result.plan_column_arrays`): a column of one type (int64, bool)
    with numpy, its values back as Python's; an object column (text too) through a dict. The same
    values (in another order: :func:`sweep_dimensions` sorts them)."""
    out = {}
    for name in PLAN_FIELDS:
        yield_interpreter()
        col = columns[name]
        if col.dtype == object:
            out[name] = list(dict.fromkeys(col.tolist()))
        elif col.size and bool((col == col[0]).all()):
            out[name] = [col[0].item()]
        else:
            out[name] = np.unique(col).tolist()
    return out


def sweep_dimensions(session: Session, space: SweepSpace, plans: list[ParallelPlan],
                     columns: dict[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """What a sweep chose and what it held, one dict per plan field (in
    :data:`core.plan.parallel.PLAN_FIELDS`' order): ``field``; ``swept``, True when its plans take
    more than one value; ``values``, the values they take (sorted; JSON-able); ``why``, where
    the values come from (the options given, or what the default tries), or why the field
    is held (the session's value, a field the sweep does not choose; the only value the
    rules leave of several tried; the value given; or the default's one value, "held at the
    default", with the session's: the Transformer Engine cross-entropy); ``left_out``, the values the space lists that a rule rules out on its own, each
    with the rule's message (:func:`core.studies.sweep.explain.left_out_values`: full
    recomputation under per-layer CUDA graphs); ``note``, only for Megatron-Core's embedding /
    loss layer-slot flags when a plan sets one the session does not (``"set where the layers
    need it ..."``), or the session sets it true (``"the session's"``): the command line and
    the Explore tab print the note with them, swept or held. The command line prints them,
    ``--json`` has them as ``dimensions`` and the Explore tab can read
    :attr:`SweepResult.dimensions`. ``columns``: the plans'
    :func:`core.studies.sweep.result.plan_column_arrays`, when known (read instead of the
    plans)."""
    out = []
    distinct = _distinct_values(plans) if columns is None else _distinct_column_values(columns)
    chosen = space.swept_fields()
    for name in PLAN_FIELDS:
        yield_interpreter()
        seen = list(distinct[name]) if plans else [getattr(session.plan, name)]
        values = sorted(seen, key=_value_order)
        attr, default = _DIMENSION_DEFAULTS.get(name, (None, None))
        if default is None:
            why = "the session's value (the sweep does not choose it)"
        elif (space.hold_session_values and name not in chosen
              and name not in SPLIT_FLAG_FIELDS):  # those are set where the layers need them
            why = "the session's value (held: hold_session_values)"
        elif attr is not None and getattr(space, attr, None) is not None and (
                name not in ("data_parallel",) or space.data_parallel is not None) and not (
                attr in _LISTED_DEFAULTS and _as_tuple(getattr(space, attr))
                == _LISTED_DEFAULTS[attr]):
            why = "the values given"
        else:
            why = f"default: {default}"
        note = None
        if name in SPLIT_FLAG_FIELDS:  # the session's unless the layers need it
            if len(values) > 1 or values[0] != getattr(session.plan, name):
                note = _SPLIT_FLAG_NOTE
            else:
                why, note = (("the session's value, kept in every plan", "the session's")
                             if values[0] is True else
                             ("the session's value; no plan's layers need it", None))
        elif (name == "recompute_num_layers" and why == "the values given" and None in values
              and None not in recompute_layer_counts(space.recompute_num_layers)):
            why += ("; every layer (-) on the plans whose model chunks hold no more layers "
                    "than a count given (Megatron's block method recomputes them all)")
        if (len(values) == 1 and default is not None and not why.startswith("the session's")
                and name not in SPLIT_FLAG_FIELDS):
            offered = _values_offered(space, name, attr, why)
            if offered == 1 and why == "the values given":
                why = "the value given"
            elif offered == 1:  # the default holds one value: no rule chose it
                own = getattr(session.plan, name)
                why = ("held at the default, "
                       + ("the session's too" if own == values[0]
                          else f"not the session's {value_text(own)}")
                       + f": {why.removeprefix('default: ')}")
            else:
                why = f"the only valid value; {why}"
        entry = {"field": name, "swept": len(values) > 1, "values": values, "why": why,
                 "left_out": left_out_values(session, space, name, values) if plans else []}
        if note is not None:
            entry["note"] = note
        out.append(entry)
    return out


def _values_offered(space: SweepSpace, name: str, attr: str | None, why: str) -> int | None:
    """How many values ``space`` itself offers the plan field ``name`` (before any rule rules
    one out), where that is known: the values given (``why`` "the values given": those of
    ``space.<attr>``), and the cross-entropy's, given or the default's
    (:data:`~core.studies.sweep.space.DEFAULT_CROSS_ENTROPY_FUSION`, one choice), each choice
    of :data:`~core.studies.sweep.space.CROSS_ENTROPY_FUSIONS` read as its
    (``cross_entropy_loss_fusion``, ``cross_entropy_fusion_impl``). None where the
    default's values depend on the model and the budget (the sizes ...): a single value
    there is the only one the rules leave."""
    if name in ("cross_entropy_loss_fusion", "cross_entropy_fusion_impl"):
        given = space.cross_entropy_fusion
        names = (as_list(given) if given is not None else [DEFAULT_CROSS_ENTROPY_FUSION])
        k = 0 if name == "cross_entropy_loss_fusion" else 1
        return len({CROSS_ENTROPY_FUSIONS[n][k] for n in names if n in CROSS_ENTROPY_FUSIONS})
    if why == "the values given" and attr is not None:
        return len({(type(v), v) for v in as_list(getattr(space, attr))})
    return None


def _value_order(v: Any) -> tuple:
    """Sort key of a dimension's values: by type, None last."""
    return (v is None, str(type(v)), v if v is not None else 0)


def merge_dimensions(sweeps: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The :func:`sweep_dimensions` of several sweeps of one space (one sweep per model: the
    compute-optimal study) as those of one sweep, so that the study says what its sweeps
    swept and held as a sweep does: per field (in the first sweep's order) the values of
    every sweep (sorted), swept when any sweep swept it or the sweeps held it at different
    values, ``why`` of the first sweep that swept it (else the first sweep's, without "the
    only valid value" when the values differ), the ``left_out`` values of every sweep (the
    first rule named for each), the first ``note`` and where the micro-batch sizes
    ``stopped`` (one text when the sweeps stopped at different b). Empty for no sweeps."""
    if not sweeps:
        return []
    out = []
    for k, first in enumerate(sweeps[0]):
        entries = [dims[k] for dims in sweeps]
        assert all(e["field"] == first["field"] for e in entries), "sweeps of other fields"
        values: dict[tuple, Any] = {}
        left_out: dict[tuple, dict] = {}
        for e in entries:
            values.update({(type(v), v): v for v in e["values"]})
            for x in e.get("left_out", ()):
                left_out.setdefault((type(x["value"]), x["value"]), x)
        swept = [e for e in entries if e["swept"]]
        merged = sorted(values.values(), key=_value_order)
        why = (swept[0] if swept else first)["why"]
        if len(merged) > 1:
            why = why.removeprefix("the only valid value; ")
        entry = {"field": first["field"], "swept": bool(swept) or len(merged) > 1,
                 "values": merged, "why": why, "left_out": list(left_out.values())}
        note = next((e["note"] for e in entries if e.get("note")), None)
        if note is not None:
            entry["note"] = note
        stopped = list(dict.fromkeys(e["stopped"] for e in entries if e.get("stopped")))
        if stopped:  # where the micro-batch sizes stopped: one b per model
            entry["stopped"] = stopped[0] if len(stopped) == 1 else (
                "each model's up to the first b whose smallest-memory plan does not fit, or "
                "to the global batch")
        out.append(entry)
    return out


def held_dimensions(dimensions: list[dict[str, Any]], plan: ParallelPlan | None = None
                    ) -> list[dict[str, Any]]:
    """The held entries of :func:`sweep_dimensions`' ``dimensions`` a sweep's summary names
    (the command line's and the Explore tab's "held:" line): those of
    :data:`~core.studies.sweep.result.BEST_BY_FIELDS` but the exchange, the dispatcher and the
    expert tensor-parallel size (variants of cp > 1, ep > 1 and MoE t > 1 plans: held at the
    session's, they say nothing a dense or cp = 1 sweep needs), those with a ``note`` (the
    layer-slot flags) and, given the session's ``plan``, every field held at a value that is
    not the plan's (the te cross-entropy by default), so that "every other plan field is the
    session's" holds."""
    def away(d: dict[str, Any]) -> bool:
        return (plan is not None and len(d["values"]) == 1
                and d["values"][0] != getattr(plan, d["field"], d["values"][0]))

    return [d for d in dimensions if not d["swept"]
            and ((d["field"] in BEST_BY_FIELDS and d["field"] not in _VARIANT_FIELDS)
                 or d.get("note") or away(d))]


#: Fields of BEST_BY_FIELDS that are variants of some plans only (held, named when away).
_VARIANT_FIELDS = frozenset({"cp_comm_type", "moe_token_dispatcher_type",
                             "expert_tensor_parallel"})
