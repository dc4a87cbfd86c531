"""The Explore tab's header lines about a sweep: what it swept and held (and why), its phase,
whether it is still a sweep of the session and, if not, which fields changed.

Qt-free text (rich text for a ``QLabel``) built from a :class:`core.studies.sweep.SweepResult`'s
``dimensions`` (:func:`core.studies.sweep.sweep_dimensions`) and from a sweep's phase
(:data:`core.studies.sweep.phase.PHASES`). Used by :class:`vtrain_gui.explore.ExploreTab`;
nothing that draws belongs here.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any

import numpy as np

from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_field_title
from core.plan.session import Session
from core.studies.sweep import SweepSpace, held_dimensions
from core.studies.sweep.dimensions import value_text

__all__ = ["dimensions_html", "no_points_html", "PHASE_TEXT", "same_inputs", "stale_text"]

#: What the progress bar and status line call each phase of a sweep.
PHASE_TEXT = {"enumerate": "Enumerating plans", "memory": "Memory of each plan",
              "bound": "Lower bound of each plan", "simulate": "Simulating plans"}


def dimensions_html(dimensions: list[dict[str, Any]], plan: ParallelPlan | None = None) -> str:
    """``"swept: t 1, 2, 4; ...<br>held: SP y (why); ..."`` (rich text, escaped) of a sweep's
    ``dimensions``: every swept plan field with its values, and each held field of
    :data:`core.studies.sweep.BEST_BY_FIELDS` with its value and why it is held, and, given
    the session's ``plan``, any field held away from its value
    (:func:`core.studies.sweep.held_dimensions`; as the command line prints them; a swept field's ``stopped``, where the micro-batch sizes
    stopped, and any field's ``left_out`` values with the rule that rules each out, too);
    empty without dimensions."""
    swept = [d for d in dimensions if d["swept"]]
    held = held_dimensions(dimensions, plan)

    def left_out(d: dict[str, Any]) -> str:  # the values a rule rules out, with the rule
        return "".join(f" <span style='color:gray'>({html.escape(value_text(x['value']))} "
                       f"left out: {html.escape(x['why'])})</span>"
                       for x in d.get("left_out", ()))

    lines = []
    if swept:
        lines.append("<b>swept</b>: " + "; ".join(
            html.escape(f"{plan_field_title(d['field'])} "
                        f"{', '.join(value_text(v) for v in d['values'])}")
            + (f" <span style='color:gray'>({html.escape(d['stopped'])})</span>"
               if d.get("stopped") else "")
            + (f" <span style='color:gray'>({html.escape(d['note'])})</span>"
               if d.get("note") else "") + left_out(d) for d in swept))
    if held:
        lines.append("<b>held</b>: " + "; ".join(
            html.escape(f"{plan_field_title(d['field'])} {value_text(d['values'][0])}")
            + f" <span style='color:gray'>({html.escape(d['why'])})</span>" + left_out(d)
            for d in held))
    return "<br>".join(lines)


def stale_text(changed: list[str]) -> str:
    """The stale-sweep warning, naming the session fields ``changed``
    (:func:`core.studies.sweep.stale_reasons`, the first four)."""
    text = ("The model, cluster, cost, batch size or precision changed since this sweep: "
            "press Run to update it. Picking a plan loads the swept inputs.")
    if changed:
        text += f" Changed: {'; '.join(changed[:4])}{' …' if len(changed) > 4 else ''}."
    return text


def same_inputs(a: Session, b: Session, space: SweepSpace | None = None) -> bool:
    """Whether a sweep of ``a`` is also a sweep of ``b``: model, cluster, cost and every plan
    field the sweep does not choose (B, precision, overlap ...) equal."""
    swept = set((space or SweepSpace()).swept_fields())
    return (dataclasses.asdict(a.model) == dataclasses.asdict(b.model)
            and dataclasses.asdict(a.cluster) == dataclasses.asdict(b.cluster)
            and dataclasses.asdict(a.cost) == dataclasses.asdict(b.cost)
            and all(getattr(a.plan, f) == getattr(b.plan, f) for f in PLAN_FIELDS if f not in swept))


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:,.1f}&nbsp;GiB"  # kept on one line


def no_points_html(result: Any, shown: np.ndarray, fewest: Any = None) -> str | None:
    """What the plot says in place of empty axes when none of the plans ``shown`` (bool mask
    over ``result``'s plans) has a point: why, and what to try; None when one has.

    ``result`` is a :class:`core.studies.sweep.SweepResult`; ``fewest`` the fewest GPUs at
    which the session's model fits (:func:`core.studies.fit_changes.fewest_gpus`, a
    ``FewestGpus``: its ``text``), None when not known. Rich text, escaped."""
    shown = np.asarray(shown, bool)
    if result.num_plans and (shown & result.feasible).any():
        return None
    if result.num_plans == 0:
        return ("<p style='font-size:13pt'><b>No valid plan in this space</b></p>"
                "<p>The status on the left says why.</p>")
    fits = np.asarray(result.fits_in_memory, bool)
    if not fits.any():
        need = np.asarray(result.max_memory_per_gpu_bytes, float)
        ok = np.flatnonzero(np.isfinite(need))
        gpus = np.asarray(result.num_gpus)
        counts = (f"{int(gpus.min()):,}" if gpus.min() == gpus.max()
                  else f"{int(gpus.min()):,} to {int(gpus.max()):,}")
        kind = html.escape(str(result.session.cluster.gpu))
        text = (f"<p style='font-size:13pt'><b>No plan fits in GPU memory</b></p>"
                f"<p>None of the {result.num_plans:,} plans on {counts} {kind} GPUs fits in a "
                f"GPU's {_gib(result.memory_capacity_bytes)}")
        if ok.size:
            i = int(ok[np.argmin(need[ok])])
            text += (f": the smallest needs {_gib(need[i])} per GPU "
                     f"({html.escape(result.plans[i].label())})")
        text += (".</p><p>Try more GPUs (<b>GPUs</b> on the left), or a GPU kind with more "
                 "memory (Plan tab).")
        if fewest is not None and getattr(fewest, "text", ""):
            label = "Fewest GPUs that fit" if fewest.num_gpus is not None else "Fewest GPUs"
            text += f"<br>{label}: {html.escape(fewest.text)}."
        return text + " The table below lists each plan's memory.</p>"
    if not (fits & np.asarray(result.feasible, bool)).any():
        first = int(np.flatnonzero(fits)[0])
        why = html.escape(str(result.reason[first]))
        return (f"<p style='font-size:13pt'><b>No plan that fits was simulated</b></p>"
                f"<p>{int(fits.sum()):,} plans fit in memory, none has figures"
                + (f": {why}" if why else "") + ". The table below gives each plan's reason.</p>")
    return ("<p style='font-size:13pt'><b>No plan shown has figures</b></p>"
            f"<p>The filters above hide the {result.num_feasible:,} plans simulated.</p>")
