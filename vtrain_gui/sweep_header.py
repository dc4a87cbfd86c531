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

from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_field_title
from core.plan.session import Session
from core.studies.sweep import SweepSpace, held_dimensions
from core.studies.sweep.dimensions import value_text

__all__ = ["dimensions_html", "PHASE_TEXT", "same_inputs", "stale_text"]

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
