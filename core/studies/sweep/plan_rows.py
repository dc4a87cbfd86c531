"""A sweep's plans held as columns: one array per plan field, a plan built only when asked.

:class:`PlanRows` is the list of a sweep's plans (``SweepResult.plans``, the batches, the
bounds) kept as the plan columns of :func:`plan_column_arrays` (a field of one value broadcast,
no bytes per plan; the others about 8 bytes per plan each) rather than one
:class:`~core.plan.parallel.ParallelPlan` per plan (408 bytes, plus 8 for the list): ``rows[i]``
builds row ``i``'s plan (about 3 us), equal to the plan the enumeration made.
:func:`plan_column_arrays` makes the columns, :func:`concat_plan_columns` joins those of several
lists of plans, :func:`row_of_plan` finds a plan among the columns, :func:`plan_keys` reads rows
as :func:`~core.plan.parallel.plan_key` tuples without building their plans. Nothing here
simulates.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.pace import yield_interpreter

__all__ = ["PlanRows", "plan_column_arrays", "concat_plan_columns", "row_of_plan", "plan_keys",
           "is_broadcast"]

#: Plans whose fields :func:`plan_column_arrays` transposes at once, and rows
#: :func:`plan_keys` and :class:`PlanRows` read at once (a few milliseconds per C call, so that
#: the window's thread gets the interpreter between them).
_COLUMN_CHUNK = 4096


def is_broadcast(column: np.ndarray) -> bool:
    """Whether ``column`` (an (n,) array, n > 1) is one value broadcast to every row
    (``np.broadcast_to``: stride 0, no bytes per row)."""
    return column.ndim == 1 and column.shape[0] > 1 and column.strides[0] == 0


def _broadcast(value: Any, dtype: Any, n: int) -> np.ndarray:
    """``value`` (of ``dtype``) read-only in each of ``n`` rows, no bytes per row."""
    one = np.empty((), dtype)
    one[()] = value  # a tuple as one value, not an array
    return np.broadcast_to(one, (n,))


def _typed(values: list, kinds: set) -> tuple[Any, list]:
    """The dtype of a plan column whose values are of the types ``kinds``: bool or int64 when
    every value is one, object otherwise (text too: equal texts made one str object, 8 bytes
    a plan, as numpy text would take 4 bytes a character of the longest)."""
    if kinds == {bool}:
        return bool, values
    if kinds == {int}:
        return np.int64, values
    if kinds == {str}:
        shared: dict = {}
        return object, [shared.setdefault(v, v) for v in values]
    return object, values


def plan_column_arrays(plans: Sequence[ParallelPlan], cancel: Any = None) -> dict[str, np.ndarray]:
    """One array per plan field: int64 or bool when every value is one, object otherwise (text
    too: equal texts one str object, 8 bytes a plan).
    A field of one value of one type (most of a sweep's) is that value broadcast
    to every plan (``np.broadcast_to``: read-only, no bytes per plan) rather than converted
    value by value: the same values. Each plan's fields are read as one tuple (:func:`plan_key`)
    and transposed :data:`_COLUMN_CHUNK` plans at a time (one C call per plan rather than one
    per plan and field); each chunk's field is kept as one value where the chunk's plans share
    it (most fields), else as an object array (8 bytes a plan), and the arrays are typed at the
    end. ``cancel`` is checked every few chunks and before each field
    (:class:`~core.studies.sweep.cancel.SweepCancelled`)."""
    if isinstance(plans, PlanRows):
        return dict(plans.columns)
    n = len(plans)
    # per field: its chunks, each ("one", value, count) or ("many", object array)
    parts: dict[str, list[tuple]] = {name: [] for name in PLAN_FIELDS}
    kinds: dict[str, set] = {name: set() for name in PLAN_FIELDS}
    for start in range(0, n, _COLUMN_CHUNK):
        if not start % (16 * _COLUMN_CHUNK):
            check_cancelled(cancel)
        yield_interpreter()
        rows = list(map(plan_key, plans[start:start + _COLUMN_CHUNK]))
        for name, column in zip(PLAN_FIELDS, zip(*rows)):
            first = column[0]
            kind = set(map(type, column))
            kinds[name] |= kind
            if len(kind) == 1 and column.count(first) == len(column):
                parts[name].append(("one", first, len(column)))
            else:
                arr = np.empty(len(column), object)
                arr[:] = column
                parts[name].append(("many", arr))
    out = {}
    for name in PLAN_FIELDS:
        check_cancelled(cancel)
        pieces, kind = parts.pop(name), kinds.pop(name)
        if len(kind) == 1 and all(p[0] == "one" for p in pieces) and all(
                p[1] == pieces[0][1] for p in pieces):  # one type: equal is the same value
            dtype, _ = _typed([], kind)
            out[name] = _broadcast(pieces[0][1], dtype, n)
            continue
        values = list(itertools.chain.from_iterable(
            itertools.repeat(p[1], p[2]) if p[0] == "one" else p[1].tolist() for p in pieces))
        del pieces
        dtype, values = _typed(values, kind)
        out[name] = np.array(values, dtype=dtype) if dtype is not object else _objects(values)
    return out


def _objects(values: list) -> np.ndarray:
    """``values`` as a 1-D object array (a tuple value stays one value)."""
    arr = np.empty(len(values), object)
    arr[:] = values
    return arr


def concat_plan_columns(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The :func:`plan_column_arrays` of the plans of several lists one after another, from
    each list's (the same arrays: a field of one value of one type in every plan broadcast,
    else int64 or bool where every value is one, else object with equal texts one str
    object)."""
    parts = [p for p in parts if p and len(next(iter(p.values()))) > 0] or list(parts[:1])
    if not parts:
        return {}
    if len(parts) == 1:
        return dict(parts[0])
    n = sum(len(next(iter(p.values()))) for p in parts)
    out = {}
    for name in PLAN_FIELDS:
        cols = [p[name] for p in parts]
        firsts = [c.flat[0] for c in cols]
        if all(c.dtype == cols[0].dtype for c in cols) and all(
                c.size == 1 or is_broadcast(c) for c in cols):
            same = (firsts[0].item() if isinstance(firsts[0], np.generic) else firsts[0])
            rest = [f.item() if isinstance(f, np.generic) else f for f in firsts[1:]]
            if all(type(v) is type(same) and v == same for v in rest):
                out[name] = _broadcast(same, cols[0].dtype, n)
                continue
        if all(c.dtype == cols[0].dtype for c in cols) and cols[0].dtype != object:
            out[name] = np.concatenate(cols)
            continue
        values = list(itertools.chain.from_iterable(c.tolist() for c in cols))
        kind = set(map(type, values))
        dtype, values = _typed(values, kind)
        if len(kind) == 1 and values.count(values[0]) == len(values):
            out[name] = _broadcast(values[0], dtype, n)
        else:
            out[name] = np.array(values, dtype=dtype) if dtype is not object else _objects(values)
    return out


def row_of_plan(columns: dict[str, np.ndarray], plan: ParallelPlan, last: bool = False
                ) -> int | None:
    """The first (``last``: the last) row whose every field equals ``plan``'s as a dict key of
    :func:`plan_key` tuples would (``==``, which numpy's comparison of a number or text column
    with a number or text is), or None: the plan columns (:func:`plan_column_arrays`) narrowed
    field by field, with no index of every plan kept (1.2 million plans: about 500 MB of key
    tuples); about 10 ms per 100,000 plans."""
    rows: np.ndarray | None = None  # None: every row
    for name, value in zip(PLAN_FIELDS, plan_key(plan)):
        col = np.asarray(columns[name])
        part = col if rows is None else col[rows]
        kind = col.dtype.kind
        numeric = isinstance(value, int) or isinstance(value, float) and math.isfinite(value)
        if (kind in "biuf" and numeric) or (kind == "U" and isinstance(value, str)):
            same = np.asarray(part == value, bool)
        else:  # an object column, or a value of another type: Python's ==, row by row
            same = np.fromiter((v == value for v in part.tolist()), bool, part.size)
        rows = np.flatnonzero(same) if rows is None else rows[same]
        if not rows.size:
            return None
    if rows is None:
        return None
    return int(rows[-1] if last else rows[0])


def plan_keys(plans: Sequence[ParallelPlan], rows: Iterable[int]) -> Iterator[tuple]:
    """The :func:`plan_key` tuple of each plan of ``rows`` (ints, in that order): from the
    columns of a :class:`PlanRows` :data:`_COLUMN_CHUNK` rows at a time (no plan built), else
    from each plan."""
    if not isinstance(plans, PlanRows):
        for i in rows:
            yield plan_key(plans[i])
        return
    idx = np.fromiter(rows, np.int64)
    for start in range(0, idx.size, _COLUMN_CHUNK):
        yield from plans.keys(idx[start:start + _COLUMN_CHUNK])


def plans_at(plans: Sequence[ParallelPlan], rows: Iterable[int]) -> Iterator[ParallelPlan]:
    """The plans of ``rows`` (ints, in that order), one after another: ``plans[i] for i in
    rows``, of a :class:`PlanRows` built from :func:`plan_keys` (its columns read
    :data:`_COLUMN_CHUNK` rows at a time, not field by field per row: the same plans, with the
    same field values; one chunk's keys held at a time)."""
    if not isinstance(plans, PlanRows):
        yield from (plans[i] for i in rows)
        return
    make = plans.maker
    for key in plan_keys(plans, rows):
        yield make(dict(zip(PLAN_FIELDS, key)))


class PlanRows(Sequence):
    """A sweep's plans as columns (:func:`plan_column_arrays`), read as a sequence of
    :class:`~core.plan.parallel.ParallelPlan`: ``rows[i]`` builds row ``i``'s plan (``make``:
    :func:`core.studies.sweep.variants.plan_maker` of the session's plan, about 3 us), equal to
    the plan the columns were read from; a slice or :meth:`take` is a :class:`PlanRows` of
    those rows (views where the columns allow). Equal to a sequence of the same plans, in
    order. Holds no plan: about 8 bytes per plan per field whose plans differ (a field of one
    value is broadcast)."""

    __slots__ = ("columns", "_make", "_n", "_varying", "_fixed")

    def __init__(self, columns: dict[str, np.ndarray], make: Callable[[dict], ParallelPlan]
                 ) -> None:
        self.columns = columns
        self._make = make
        self._n = len(next(iter(columns.values()))) if columns else 0
        self._fixed: dict[str, Any] = {}
        self._varying: list[str] = []
        for name in PLAN_FIELDS:
            col = columns[name]
            if self._n and (self._n == 1 or is_broadcast(col)):
                v = col.flat[0]
                self._fixed[name] = v.item() if isinstance(v, np.generic) else v
            else:
                self._varying.append(name)

    @property
    def maker(self) -> Callable[[dict], ParallelPlan]:
        """The function of a dict of every field's value to its plan that builds the rows
        (``make``)."""
        return self._make

    def __len__(self) -> int:
        return self._n

    def keys(self, idx: np.ndarray) -> list[tuple]:
        """The :func:`plan_key` tuples of rows ``idx`` (int (k,)), without building their
        plans."""
        k = len(idx)
        cols = [itertools.repeat(self._fixed[name], k) if name in self._fixed
                else self.columns[name][idx].tolist() for name in PLAN_FIELDS]
        # each repeat is as long as idx: with every field fixed (one plan, or plans alike in
        # every field), zip of unbounded repeats never ended
        return list(zip(*cols)) if k else []

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self.take(np.arange(self._n)[i])
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"plan rows are indexed by int or slice, not {type(i).__name__}")
        j = int(i) + (self._n if i < 0 else 0)
        if not 0 <= j < self._n:
            raise IndexError(f"plan row {i} out of range ({self._n} plans)")
        values = dict(self._fixed)
        for name in self._varying:
            v = self.columns[name][j]
            values[name] = v.item() if isinstance(v, np.generic) else v
        return self._make({name: values[name] for name in PLAN_FIELDS})

    def __iter__(self) -> Iterator[ParallelPlan]:
        make = self._make
        for start in range(0, self._n, _COLUMN_CHUNK):
            for key in self.keys(np.arange(start, min(start + _COLUMN_CHUNK, self._n))):
                yield make(dict(zip(PLAN_FIELDS, key)))

    def take(self, idx: Any) -> "PlanRows":
        """The rows ``idx`` (int (k,)) as plan rows of their own."""
        idx = np.asarray(idx, np.int64).reshape(-1)
        return PlanRows({name: (_broadcast(self._fixed[name], col.dtype, idx.size)
                                if name in self._fixed else col[idx])
                         for name, col in self.columns.items()}, self._make)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PlanRows({self._n} plans)"
