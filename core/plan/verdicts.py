"""Whether many plans of one model and cluster are valid, each rule's verdict memoized by the
plan fields it reads: what a plan sweep asks of :func:`core.plan.rules.validate` for every
candidate, at a fraction of its cost, with the same answer.

A sweep's candidates differ in a few fields each (sizes, schedule, recomputation, sequence
parallelism, ZeRO stage, overlaps), and each of validate's rules reads only some of them:
the rules of the ZeRO stage and the overlaps do not read the sizes, the head split reads
only ``t``. :class:`PlanVerdicts` learns the fields each rule reads by running it on a copy
of the plan that records its reads (:class:`_ReadPlan`), and answers a later plan that
agrees on those fields (same types and values) from memory. The rules stay the one source
of truth; nothing here knows what they check. Nothing else belongs here.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any, Callable, Iterable, Sequence

from core.plan.cluster import ClusterConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.plan.rules import plan_rules

__all__ = ["PlanVerdicts", "reading_copy", "fields_getter"]


class _FirstRead:
    """A non-data descriptor of a plan field on :class:`_ReadPlan`: Python looks in the
    instance's dict first, so it runs only while the field is not there, on the field's
    first read; it records the field's name in the instance's ``_reads`` (a set), puts the
    value (from ``_values``) in the instance's dict, where later reads find it, and returns
    it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        state = obj.__dict__
        value = state[self.name] = state["_values"][self.name]
        state["_reads"].add(self.name)
        return value


class _ReadPlan(ParallelPlan):
    """A copy of a plan that records which of its fields are read, those not already in its
    dict (:class:`_FirstRead`; reads through properties such as ``num_gpus`` record the
    fields they read). Copies made of it (``dataclasses.replace``) hold every field and
    record nothing."""


for _name in PLAN_FIELDS:  # shadows the dataclass's class-level defaults
    setattr(_ReadPlan, _name, _FirstRead(_name))


def reading_copy(plan: ParallelPlan, known: frozenset[str]) -> tuple[_ReadPlan, set]:
    """A :class:`_ReadPlan` with ``plan``'s field values, those of ``known`` in its dict (not
    recorded when read), and the set of the other fields read from it (empty)."""
    copy = _ReadPlan.__new__(_ReadPlan)
    values = dict(zip(PLAN_FIELDS, plan_key(plan)))
    state = copy.__dict__
    state.update({f: values[f] for f in known})
    reads: set = set()
    state["_values"], state["_reads"] = values, reads
    return copy, reads


class _Memo:
    """One rule's verdicts: the plan fields it has been seen to read (``fields``, in
    :data:`PLAN_FIELDS` order), a getter of their values and the verdict of each tuple of
    values (and their types) met."""

    __slots__ = ("rule", "fields", "key", "seen", "growths")

    def __init__(self, rule: Callable[[ParallelPlan], Any], growths: list[int]) -> None:
        self.rule = rule
        self.growths = growths  # shared by the rules of one PlanVerdicts: [times grown]
        self.fields: frozenset[str] = frozenset()
        self.key: Callable[[ParallelPlan], tuple] = lambda plan: ()
        self.seen: dict[tuple, bool] = {}

    def verdict(self, plan: ParallelPlan) -> bool:
        """Whether ``plan`` passes the rule: remembered, or learnt (:meth:`learn`)."""
        values = self.key(plan)
        ok = self.seen.get((values, tuple(map(type, values))) if values else ())
        return self.learn(plan) if ok is None else ok

    def learn(self, plan: ParallelPlan) -> bool:
        """Run the rule on a recording copy of ``plan``; remember and return its verdict (True:
        the rule passes). When the rule read a field not read before, the fields grow and
        the verdicts remembered under the old fields are dropped."""
        copy, reads = reading_copy(plan, self.fields)
        ok = not self.rule(copy)
        if reads:  # fields not read before
            self.fields = self.fields.union(reads)
            self.key = fields_getter([f for f in PLAN_FIELDS if f in self.fields])
            self.seen = {}
            self.growths[0] += 1
        values = self.key(plan)
        self.seen[(values, tuple(map(type, values))) if values else ()] = ok
        return ok


class PlanVerdicts:
    """Memoized validity of plans under one model and cluster.

    ``PlanVerdicts(model, cluster).valid(plan)`` equals
    ``not validate(Session(model, plan, cluster, cost), sections=(), model_checked=True)``
    (the cross-field rules; the fields alone and the model are the caller's to check), and
    ``extra`` rules (functions of a plan, truthy when it breaks them) are checked first, in
    order: a sweep's checks of its swept fields' values.

    Exact: each rule (:func:`core.plan.rules.plan_rules`) is a deterministic function of the
    plan's fields, given the model and cluster, and reads the plan only through its
    attributes. The first plan with given values of the fields a rule has been seen to read
    is checked by running the rule on a copy that records its reads; the verdict is kept
    under those values and their types. A later plan with the same values and types of
    those fields makes the rule read the same values in the same order, so it takes the same
    branches and gives the same verdict. When a rule reads a field it had not read before,
    its set of fields grows and what was kept under the smaller set is dropped.

    Parameters
    ----------
    model : ModelConfig
    cluster : ClusterConfig
        Neither may change while this object is used.
    extra : iterable of callables ``plan -> truthy when broken``, optional

    Raises
    ------
    Whatever a rule raises for a plan (as validate would).
    """

    def __init__(self, model: ModelConfig, cluster: ClusterConfig,
                 extra: Iterable[Callable[[ParallelPlan], Any]] = ()) -> None:
        self._growths = [0]
        self._memos = [_Memo(rule, self._growths)
                       for rule in (*extra, *plan_rules(model, cluster))]
        self._varying: dict[tuple, tuple] = {}
        self._rows: dict[tuple, int] = {}
        self._patterns: dict[tuple, list[bool]] = {}
        self._fixed_getters: dict[tuple, Callable] = {}
        self._splits: dict[tuple, tuple] = {}

    def valid(self, plan: ParallelPlan) -> bool:
        """Whether ``plan`` passes every rule, the rules checked in order until one fails."""
        return _all_pass(self._memos, plan)

    def rows_of(self, plans: Sequence[ParallelPlan], varying: Sequence[str]) -> int:
        """A token of the values and types of the fields ``varying`` of ``plans``, plan by
        plan: two lists of plans have the same token iff they agree on those, place by place.
        :meth:`valid_among` takes it for plans that agree so (their values not read again)."""
        names, get_varying = self._vary(varying)
        rows = tuple(map(get_varying, plans))
        key = (rows, tuple(map(type, itertools.chain.from_iterable(rows))))
        return self._rows.setdefault(key, len(self._rows))

    def valid_among(self, plans: Sequence[ParallelPlan], varying: Sequence[str],
                    rows: int | None = None) -> list[bool]:
        """``[self.valid(plan) for plan in plans]`` for plans equal in every field but those
        named in ``varying`` (a sweep's variants of one set of sizes), at the cost of a few
        rules per call rather than per plan. ``rows``: :meth:`rows_of` of plans that agree with
        ``plans`` on the ``varying`` fields (default: of ``plans``).

        The rules seen to read no field in ``varying`` are checked on the first plan, in
        order: such a rule gives every plan the first's verdict (they agree on every field it
        reads), and when it fails, every plan does. The others are checked on each plan, in
        order until one fails, and the list of their verdicts is kept under those rules, the
        fields outside ``varying`` they have been seen to read (after the check: the count of
        the rules' growths names them) with the first plan's values and types, and the token
        of the plans' values of the ``varying`` fields: a later call that agrees on all of
        that gets the same list (each plan agrees with the plan in the same place on every
        field each of those rules read).

        A rule may so run on the first plan after a rule before it in order has refused that
        plan (validate stops after its first two rules when they refuse one: the later ones
        need positive integer sizes); the verdicts are the same, as long as the rules do not
        raise. A sweep checks the sizes' values first."""
        if not plans:
            return []
        names, _ = self._vary(varying)
        split = self._per_plan(plans[0], names)
        if split is None:
            return [False] * len(plans)
        each, ids = split
        if not each:
            return [True] * len(plans)
        if rows is None:
            rows = self.rows_of(plans, varying)
        fixed = self._fixed(each, ids, names)(plans[0])
        key = (ids, self._growths[0], rows, fixed, tuple(map(type, fixed)))
        oks = self._patterns.get(key)
        if oks is not None:
            return oks
        oks = [_all_pass(each, plan) for plan in plans]
        # after the checks: the fields they have read since
        fixed = self._fixed(each, ids, names)(plans[0])
        self._patterns[(ids, self._growths[0], rows, fixed, tuple(map(type, fixed)))] = oks
        return oks

    def _vary(self, varying: Sequence[str]) -> tuple[frozenset[str], Callable]:
        """``varying`` as a set, and a getter of those fields' values (in PLAN_FIELDS order)."""
        found = self._varying.get(tuple(varying))
        if found is None:
            names = frozenset(varying)
            found = self._varying[tuple(varying)] = (names, fields_getter(
                [f for f in PLAN_FIELDS if f in names]))
        return found

    def _fixed(self, memos: list[_Memo], ids: tuple, varying: frozenset[str]) -> Callable:
        """A getter of the values of the fields outside ``varying`` that the rules ``memos``
        (their identities ``ids``) have been seen to read, as they are now."""
        key = (ids, self._growths[0], varying)
        found = self._fixed_getters.get(key)
        if found is None:
            found = self._fixed_getters[key] = fields_getter(
                [f for f in PLAN_FIELDS if f not in varying and any(f in m.fields for m in memos)])
        return found

    def _per_plan(self, plan: ParallelPlan, varying: frozenset[str]
                  ) -> tuple[list[_Memo], tuple] | None:
        """The rules :meth:`valid_among` checks per plan of ``plan``'s variants (over the
        fields ``varying``: those seen to read one of them) and their identities, or None
        when a rule that reads none of them fails on ``plan`` (checked in order)."""
        while True:
            growths = self._growths[0]
            split = self._splits.get((growths, varying))
            if split is None:
                memos = self._memos
                each = [m for m in memos if not m.fields.isdisjoint(varying)]
                split = self._splits[(growths, varying)] = (
                    [m for m in memos if m.fields.isdisjoint(varying)], each,
                    tuple(map(id, each)))
            for memo in split[0]:
                values = memo.key(plan)  # memo.verdict(plan), inline
                ok = memo.seen.get((values, tuple(map(type, values))) if values else ())
                if ok is None:
                    ok = memo.learn(plan)
                if not ok and memo.fields.isdisjoint(varying):
                    return None
            if self._growths[0] == growths:
                return split[1], split[2]
            # a rule read a field it had not read before: split the rules again


def fields_getter(names: Sequence[str]) -> Callable[[ParallelPlan], tuple]:
    """A function of a plan to the tuple of its values of fields ``names`` (in C)."""
    if not names:
        return lambda plan: ()
    # attrgetter of one name returns the value, not a tuple: name it twice
    return operator.attrgetter(*(tuple(names) * 2 if len(names) == 1 else names))


def _all_pass(memos: list[_Memo], plan: ParallelPlan) -> bool:
    """Whether ``plan`` passes the rules of ``memos``, checked in order until one fails."""
    for memo in memos:
        values = memo.key(plan)
        ok = memo.seen.get((values, tuple(map(type, values))) if values else ())
        if ok is None:
            ok = memo.learn(plan)
        if not ok:
            return False
    return True
