"""A sweep's result saved with its session, read back, and marked stale when the inputs changed.

A session file's ``sweep`` section (:attr:`core.plan.session.Session.sweep`) holds the Explore
tab's settings and, under ``"result"``, the last sweep in a compact form
(:func:`saved_sweep`): the inputs it was computed from (model, cluster, cost and the plan
fields the space does not choose), the space, the counts, the dimensions swept and held, the
profile store's provenance and the rows of the Pareto front, the fastest, cheapest and
deadline plans and the session's own plan -- not every plan (a sweep of a million plans would
not fit in a session file). :func:`restore_sweep` turns it back into a
:class:`~core.studies.sweep.result.SweepResult` of those rows; :func:`stale_reasons` says which
session fields changed since. Nothing here simulates.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

from core.plan.fields import ConfigError, FieldError
from core.plan.parallel import PLAN_FIELDS, ParallelPlan
from core.plan.session import Session
from core.studies.sweep.result import SweepResult, plan_column_arrays
from core.studies.sweep.space import SweepSpace

__all__ = ["SAVED_VERSION", "saved_sweep", "restore_sweep", "stale_reasons", "saved_inputs",
           "changed_inputs"]

#: Version of :func:`saved_sweep`'s document (its ``"version"``).
SAVED_VERSION = 1

#: The float columns of a saved row, restored as float64 arrays (None -> NaN).
_FLOAT_COLUMNS = ("iteration_time_s", "interval_low_s", "interval_high_s", "tokens_per_s", "mfu",
                  "hfu", "training_days", "gpu_hours", "cost_usd", "max_memory_per_gpu_bytes")


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists): saved and current inputs compare."""
    return json.loads(json.dumps(value))


def saved_inputs(session: Session, space: SweepSpace) -> dict[str, Any]:
    """What a sweep of ``space`` depends on in ``session``: its ``model``, ``cluster`` and
    ``cost`` sections and the ``plan`` fields the space does not choose
    (:meth:`SweepSpace.swept_fields`: the global batch, precision ...), as plain JSON."""
    swept = set(space.swept_fields())
    return _plain({"model": dataclasses.asdict(session.model),
                   "cluster": dataclasses.asdict(session.cluster),
                   "cost": dataclasses.asdict(session.cost),
                   "plan": {f: getattr(session.plan, f) for f in PLAN_FIELDS if f not in swept}})


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per field that differs between two ``{section: {field: value}}`` documents
    (:func:`saved_inputs`, or a study's inputs), ``"cluster.gpu: 'A100-SXM4-80GB' ->
    'H100-SXM5-80GB'"``, sections and fields in order; empty when they are equal."""
    out = []
    for section in dict.fromkeys([*old, *new]):
        a, b = old.get(section, {}), new.get(section, {})
        out += [f"{section}.{key}: {a.get(key)!r} -> {b.get(key)!r}"
                for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    return out


def saved_sweep(result: SweepResult) -> dict[str, Any]:
    """The compact form of ``result`` for a session file's ``sweep["result"]`` (plain JSON).

    Keys: ``version`` (:data:`SAVED_VERSION`), ``inputs`` (:func:`saved_inputs`),
    ``config_plan`` (the session's own plan, every field), ``space``
    (:meth:`SweepSpace.to_dict`), ``deadline_days``, ``num_plans``, ``num_feasible``,
    ``num_pruned``, ``wall_s``, ``profile``, ``dimensions``, ``memory_capacity_bytes`` (the
    GPU's, bytes; None when unknown), ``warnings``,
    ``interval_coverage``, ``interval_note``, ``no_tight`` (whether the sweep left its tight
    plans out, :func:`~core.studies.sweep.run_sweep`'s ``no_tight``, ``--no-tight``) and
    ``num_tight_left_out`` (how many), ``rows`` (:meth:`SweepResult.rows` of the Pareto
    front, fastest first, then the fastest, cheapest, deadline and session plans not on it)
    and ``marks`` (``fastest``, ``cheapest``, ``cheapest_within_deadline``, ``config``: their
    positions in ``rows``, or None). Computed once per result and kept (the window's sweep
    worker asks for it off the GUI thread): callers copy it before changing it.
    """
    kept = result.__dict__.get("_saved_sweep")
    if kept is not None:  # a result does not change once its sweep returned
        return kept
    own = result.index_of(result.session.plan)
    marks = {"fastest": result.fastest, "cheapest": result.cheapest,
             "cheapest_within_deadline": result.cheapest_within_deadline, "config": own}
    rows = list(dict.fromkeys([*result.pareto_indices().tolist(),
                               *(i for i in marks.values() if i is not None)]))
    where = {i: k for k, i in enumerate(rows)}
    doc = _plain({
        "version": SAVED_VERSION, "inputs": saved_inputs(result.session, result.space),
        "config_plan": dataclasses.asdict(result.session.plan),
        "space": result.space.to_dict(), "deadline_days": result.deadline_days,
        "num_plans": result.num_plans, "num_feasible": result.num_feasible,
        "num_pruned": int(np.count_nonzero(result.pruned)), "wall_s": result.wall_s,
        "profile": result.profile, "dimensions": result.dimensions,
        "memory_capacity_bytes": (result.memory_capacity_bytes
                                  if math.isfinite(result.memory_capacity_bytes) else None),
        "warnings": list(result.warnings), "interval_coverage": result.interval_coverage,
        "interval_note": result.interval_note, "no_tight": bool(result.no_tight),
        "num_tight_left_out": result.num_tight_left_out, "rows": result.rows(rows),
        "marks": {k: (None if i is None else where[int(i)]) for k, i in marks.items()}})
    result.__dict__["_saved_sweep"] = doc
    return doc


def _session_of(doc: dict[str, Any]) -> Session:
    """The session a saved sweep was computed from (its own plan, ``config_plan``)."""
    inputs = doc["inputs"]
    return Session.from_dict({"model": inputs["model"], "plan": doc["config_plan"],
                              "cluster": inputs["cluster"], "cost": inputs["cost"]})


def restore_sweep(doc: Any) -> SweepResult:
    """The :class:`SweepResult` of a saved sweep (:func:`saved_sweep`): its rows only, its
    ``session`` the inputs it was computed from (and the session's own plan then); ``saved`` holds the counts of the whole
    sweep (``num_plans``, ``num_feasible``, ``num_pruned``, ``wall_s``, and with ``no_tight``
    ``num_tight_left_out``) and ``no_tight`` whether it left its tight plans out (a document saved before it was
    recorded reads False, 0 left out: such sweeps kept their tight plans).

    Raises
    ------
    ConfigError
        ``doc`` is not a saved sweep of this version (field ``sweep.result``), or its inputs
        or space break a rule.
    """
    try:
        if not isinstance(doc, dict) or doc.get("version") != SAVED_VERSION:
            raise ValueError(f"not a saved sweep of version {SAVED_VERSION}")
        session = _session_of(doc)
        space = SweepSpace.from_dict(doc["space"])
        rows = doc["rows"]
        # a plan field newer than the saved rows (absent from them) is the session plan's,
        # which a session file without it reads at the field's default
        plans = [ParallelPlan(**{**dataclasses.asdict(session.plan),
                                 **{f: r[f] for f in PLAN_FIELDS if f in r}}) for r in rows]
        col = {c: np.array([math.nan if r[c] is None else float(r[c]) for r in rows], np.float64)
               for c in _FLOAT_COLUMNS}
        marks = doc["marks"]
        verdict = (np.array([str(r["memory_verdict"]) for r in rows], "<U12")
                   if all("memory_verdict" in r for r in rows) else None)
        # rows saved before fits_in_memory was the verdict's answer said False for a plan too
        # large to simulate: the verdict, where saved, is the answer
        fits = (verdict != "does not fit" if verdict is not None
                else np.array([bool(r["fits_in_memory"]) for r in rows], bool))
        result = SweepResult(
            session=session, space=space, plans=plans, plan_columns=plan_column_arrays(plans),
            num_microbatches=np.array([r["num_microbatches"] for r in rows], np.int64),
            num_gpus=np.array([r["num_gpus"] for r in rows], np.int64),
            iteration_time_s=col["iteration_time_s"], tokens_per_s=col["tokens_per_s"],
            mfu=col["mfu"], hfu=col["hfu"], training_days=col["training_days"],
            gpu_hours=col["gpu_hours"], cost_usd=col["cost_usd"],
            max_memory_per_gpu_bytes=col["max_memory_per_gpu_bytes"],
            fits_in_memory=fits,
            reason=[str(r["reason"]) for r in rows],
            pareto=np.array([bool(r["on_pareto_front"]) for r in rows], bool),
            fastest=marks["fastest"], cheapest=marks["cheapest"],
            deadline_days=doc["deadline_days"],
            cheapest_within_deadline=marks["cheapest_within_deadline"],
            wall_s=float(doc["wall_s"]), warnings=list(doc["warnings"]),
            profile=dict(doc["profile"]), interval_low_s=col["interval_low_s"],
            interval_high_s=col["interval_high_s"],
            in_calibration_range=np.array([bool(r["in_calibration_range"]) for r in rows], bool),
            calibration_departures=[str(r.get("calibration_departures") or "") for r in rows],
            memory_verdict=verdict,
            memory_capacity_bytes=float(doc.get("memory_capacity_bytes") or math.nan),
            interval_coverage=float(doc["interval_coverage"]),
            interval_note=str(doc["interval_note"]), dimensions=list(doc["dimensions"]))
        no_tight = doc.get("no_tight", False)
        left_out = doc.get("num_tight_left_out", 0)
        if not isinstance(no_tight, bool):
            raise ValueError(f"no_tight must be true or false, not {no_tight!r}")
        if isinstance(left_out, bool) or not isinstance(left_out, int) or left_out < 0:
            raise ValueError(f"num_tight_left_out must be a whole number >= 0, not {left_out!r}")
        result.no_tight = no_tight
        result.saved = {k: doc[k] for k in ("num_plans", "num_feasible", "num_pruned", "wall_s")}
        if no_tight:  # the whole sweep's count: the rows saved do not hold the plans left out
            result.saved["num_tight_left_out"] = left_out
        result.pruned = np.zeros(len(rows), bool)  # the rows saved were all simulated
    except ConfigError as exc:
        raise ConfigError([FieldError(f"sweep.result ({e.field})", e.message, rule=e.rule)
                           for e in exc.errors]) from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError([FieldError("sweep.result", f"not understood ({exc})")]) from None
    return result


def _field_defaults(cls: type) -> dict[str, Any]:
    """The default of each field of dataclass ``cls`` that has one, as plain JSON."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return _plain(out)


def stale_reasons(doc: dict[str, Any], session: Session, profile: dict[str, Any] | None = None
                  ) -> list[str]:
    """Why a saved sweep (:func:`saved_sweep`) is no longer a sweep of ``session``: one line per
    session field that changed since (``"model.num_layers: 105 -> 96"``), and the profile
    store when ``profile`` (the current store's, as :attr:`SweepResult.profile`) is given and
    differs; empty when it still is (the plan fields the sweep chooses may differ).

    Raises
    ------
    ConfigError
        ``doc`` has no readable inputs or space (field ``sweep.result``).
    """
    try:
        saved = doc["inputs"]
        now = saved_inputs(session, SweepSpace.from_dict(doc["space"]))
    except (KeyError, TypeError, ConfigError) as exc:
        raise ConfigError([FieldError("sweep.result", f"not understood ({exc})")]) from None
    out = []
    for section in ("model", "cluster", "cost", "plan"):
        old, new = saved.get(section, {}), now[section]
        defaults = _field_defaults(type(getattr(session, section)))
        for key in sorted(set(old) | set(new)):
            if key not in old and new.get(key) == defaults.get(key, ...):
                continue  # a field newer than the saved sweep, at its default: nothing changed
            if section == "plan" and key in old and key not in new:
                # a field the sweep chooses now and held then (a dimension newer than the save)
                out.append(f"plan.{key}: held at {old[key]!r} by the saved sweep, chosen by "
                           "the sweep now")
            elif old.get(key) != new.get(key):
                out.append(f"{section}.{key}: {old.get(key)!r} -> {new.get(key)!r}")
    if profile is not None and _plain(profile) != doc.get("profile"):
        was, now_p = doc.get("profile") or {}, _plain(profile)
        out.append(f"profile store: {was.get('device')} {was.get('path', '')} -> "
                   f"{now_p.get('device')} {now_p.get('path', '')}")
    return out
