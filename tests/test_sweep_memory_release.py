"""What a sweep holds per plan, kept small: the lower bounds keep no templates, equal stage
structures are one object, the bound memo is released before the simulation, and the text
columns and memory verdicts are object arrays of shared str (``docs/sweep_parallel.md``,
"Memory"). The figures are checked elsewhere against the per-plan code
(``tests/test_sweep_memory_bound.py``); here, what is held."""

from __future__ import annotations

import numpy as np

from core.sim.report import MEMORY_VERDICTS, memory_verdict, memory_verdict_column
from core.sim.simulate import session_profile
from core.sim.template_builder import stage_templates
from core.studies.sweep import SweepSpace, enumerate_plans, run_sweep
from core.studies.sweep.bound import fill_lower_bounds
from core.studies.sweep.result import plan_column_arrays
from tests.test_sweep_prune import gpt3_small

SPACE = dict(max_gpus=8, context_parallel=(1,), micro_batch_sizes=(1, 2),
             schedules=("1f1b", "interleaved", "zb-h1"))


def _bounded():
    session = gpt3_small()
    plans = enumerate_plans(session, SweepSpace(**SPACE))
    store = session_profile(session)
    cache: dict = {}
    lower = np.full(len(plans), np.nan)
    stage_templates.cache_clear()
    fill_lower_bounds(lower, plans, np.arange(len(plans)), session.model, session.cluster,
                      session.cost, store, cache, None)
    return plans, lower, cache


def test_lower_bounds_keep_no_templates_and_share_equal_structures():
    """The bounds read the templates' source counts alone: none stays in the templates' cache
    (a dense model: no EP all-to-all overlap); each layout's stage structures equal to another
    layout's are the same object."""
    plans, lower, cache = _bounded()
    assert np.isfinite(lower).all() and len(plans) > 100
    assert stage_templates.cache_info().currsize == 0
    structs = [st for k, v in cache.items() if k[0] == "layout shape reads"
               for shape in v.seen.values() for chunks in shape.structs.values() for st in chunks]
    assert len(structs) > len(set(structs)) > 1  # some are equal across layouts ...
    assert len({id(st) for st in structs}) == len(set(structs))  # ... and those are one object


def test_bound_memo_released_before_the_simulation(monkeypatch):
    """The lower bounds' memo (layouts, counts, op times) is empty when the simulation
    starts; the sweep's answers are those of a sweep that kept it (the memo is a function
    of its keys)."""
    import core.studies.sweep.run as run
    seen: dict = {}
    fill, codes = run.fill_lower_bounds, run.value_codes

    def fill_spy(lower, plans, rows, model, cluster, cost, store, cache, *a, **kw):
        fill(lower, plans, rows, model, cluster, cost, store, cache, *a, **kw)
        seen.update(cache=cache, after_bounds=len(cache))

    def codes_spy(*a, **kw):
        seen["at_simulation"] = len(seen["cache"])
        return codes(*a, **kw)

    session = gpt3_small()
    space = SweepSpace(**SPACE)
    monkeypatch.setattr(run, "fill_lower_bounds", fill_spy)
    monkeypatch.setattr(run, "value_codes", codes_spy)
    got = run_sweep(session, space)
    assert seen["after_bounds"] > 100 and seen["at_simulation"] == 0
    monkeypatch.undo()

    class Kept(dict):
        def clear(self):  # the memo kept through the simulation, as before the release
            pass

    init = run._Runner.__init__

    def init_kept(self, *a, **kw):
        init(self, *a, **kw)
        self.lookup_cache = Kept()

    monkeypatch.setattr(run._Runner, "__init__", init_kept)
    kept = run_sweep(session, space)
    assert got.fastest == kept.fastest and got.cheapest == kept.cheapest
    assert np.array_equal(got.iteration_time_s, kept.iteration_time_s, equal_nan=True)
    assert np.array_equal(got.lower_bound_s, kept.lower_bound_s, equal_nan=True)


def test_memory_verdict_column_is_shared_str_objects():
    """8 bytes a plan: the three verdicts' own str objects, compared elementwise as text."""
    need = np.array([10.0, 75.0, 90.0, np.nan]) * 2**30
    col = memory_verdict_column(need, 80.0 * 2**30, 0.1)
    assert col.dtype == object and col.itemsize == 8
    assert col.tolist() == [memory_verdict(float(x), 80.0 * 2**30, 0.1) for x in need]
    assert col.tolist() == ["fits", "tight", "does not fit", "does not fit"]
    assert all(v is MEMORY_VERDICTS[MEMORY_VERDICTS.index(v)] for v in col.tolist())
    assert (col == "tight").tolist() == [False, True, False, False]


def test_text_plan_columns_hold_one_str_per_distinct_text():
    session = gpt3_small()
    plans = enumerate_plans(session, SweepSpace(**SPACE))
    col = plan_column_arrays(plans)["schedule"]
    assert col.dtype == object and col.tolist() == [pl.schedule for pl in plans]
    assert len({id(v) for v in col.tolist()}) == len(set(col.tolist())) == 3
    assert (col == "zb-h1").sum() == sum(pl.schedule == "zb-h1" for pl in plans) > 0
