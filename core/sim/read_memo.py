"""A function of a plan memoized by the plan fields it is seen to read: what a sweep's stage
layouts (:func:`core.sim.stages._layout_shape`) share between plans that differ only in fields
the layout does not read (the MoE dispatcher, the context-parallel exchange, the ZeRO stage of
a bound plan ...), with the same answer.

The reads are learnt as :class:`core.plan.verdicts.PlanVerdicts` learns a rule's: the function
runs on a copy of the plan that records the fields read (``reading_copy``), and a later plan
that agrees on every field read so far (values and types) takes the answer remembered. A
plan's answer depends only on the fields its run read (the run is deterministic), and those
are among the fields compared, so the answer is the one the function would give.
"""

from __future__ import annotations

from typing import Any, Callable

from core.plan.parallel import PLAN_FIELDS, ParallelPlan
from core.plan.verdicts import fields_getter, reading_copy

__all__ = ["ReadMemo"]


class ReadMemo:
    """``fn(plan)`` memoized by the fields of ``plan`` it reads.

    ``unkeyed``: fields read without being compared (not recorded): the caller keeps apart the
    plans whose answers they could change (the layout shapes of plans that differ in ``d`` and
    ``b``, which change none of it but whether gradients are reduced, part of the caller's own
    key). ``fn`` must read the plan only through its attributes (``reading_copy``'s records),
    and its answer must not keep the copy it is given.
    """

    __slots__ = ("fn", "unkeyed", "fields", "key", "seen")

    def __init__(self, fn: Callable[..., Any], unkeyed: frozenset[str] = frozenset()
                 ) -> None:
        self.fn, self.unkeyed = fn, frozenset(unkeyed)
        self.fields: frozenset[str] = frozenset()
        self.key: Callable[[ParallelPlan], tuple] = lambda plan: ()
        self.seen: dict[tuple, Any] = {}

    def __call__(self, plan: ParallelPlan, *args: Any) -> Any:
        """``fn(plan, *args)``: remembered for a plan that agrees on the fields read, else run on a
        recording copy of ``plan`` (``args`` are not compared: the caller keeps a memo per
        value of theirs that could change the answer; the fields grow with those it reads first; the answers
        remembered under fewer fields are dropped)."""
        values = self.key(plan)
        mkey = (values, tuple(map(type, values)))
        hit = self.seen.get(mkey, self)
        if hit is not self:
            return hit
        copy, reads = reading_copy(plan, self.fields | self.unkeyed)
        out = self.fn(copy, *args)
        if reads:
            self.fields = self.fields.union(reads)
            self.key = fields_getter([f for f in PLAN_FIELDS if f in self.fields])
            self.seen = {}
            values = self.key(plan)
            mkey = (values, tuple(map(type, values)))
        self.seen[mkey] = out
        return out
