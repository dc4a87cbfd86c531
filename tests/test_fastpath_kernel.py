"""The compiled fast path (core.sim.fastpath_kernel) gives the numpy sweeps' iteration times bit for
bit, on random stage times of every schedule (with ready times and chunk tails; the interleaved
schedule's sends overlapped in some plans), and both equal the general solver on the coarse
graph."""

from __future__ import annotations

import numpy as np
import pytest

from core.sim import fastpath_kernel
from core.sim.fastpath import pipeline_iteration_times
from tests.test_sweep import general_solver_time

needs_numba = pytest.mark.skipif(not fastpath_kernel.available(), reason="Numba is not installed")


def _random_case(rng, schedule):
    p = int(rng.integers(1, 7)) if schedule != "interleaved" else int(rng.integers(2, 6))
    v = int(rng.integers(2, 4)) if schedule == "interleaved" else 2 if schedule == "zb-v" else 1
    m = p * int(rng.integers(1, 4)) if schedule == "interleaved" else int(rng.integers(1, 12))
    n = int(rng.integers(1, 5))
    per_chunk = [rng.uniform(0.1, 3, (p, v, n)), rng.uniform(0.1, 5, (p, v, n)),
                 rng.uniform(0.0, 2, (p, v, n))]
    per_stage = [rng.uniform(0, 1, (p, n)) * (rng.random() < 0.7), rng.uniform(0, 1, (p, n)),
                 rng.uniform(0, 2, (p, n)) * (rng.random() < 0.7), rng.uniform(0, 1, (p, n))]
    ready = rng.uniform(0, 4, (p, v, n)) if rng.random() < 0.5 else None
    tail = (np.where(rng.random((p, v, n)) < 0.5, rng.uniform(-1, 3, (p, v, n)), -np.inf)
            if rng.random() < 0.5 else None)
    # Megatron-LM overlaps the interleaved schedule's sends (per plan: some do, some not)
    overlap = rng.random(n) < 0.6 if schedule == "interleaved" else False
    return p, v, m, n, per_chunk, per_stage, ready, tail, overlap


@needs_numba
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved", "zb-h1", "zb-v"])
def test_compiled_pass_equals_numpy_sweeps_bit_for_bit(schedule):
    rng = np.random.default_rng(23)
    split = schedule in ("zb-h1", "zb-v")
    for _ in range(60):
        p, v, m, n, per_chunk, per_stage, ready, tail, overlap = _random_case(rng, schedule)
        kw = dict(wgrad_s=per_chunk[2] if split else None, ready_s=ready, chunk_tail_s=tail,
                  overlap_p2p=overlap)
        a = pipeline_iteration_times(schedule, m, per_chunk[0], per_chunk[1], *per_stage,
                                     compiled=False, **kw)
        b = pipeline_iteration_times(schedule, m, per_chunk[0], per_chunk[1], *per_stage,
                                     compiled=True, **kw)
        assert np.array_equal(a, b), (schedule, p, v, m, a, b)


@needs_numba
@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "interleaved", "zb-v"])
def test_compiled_pass_equals_the_general_solver(schedule):
    rng = np.random.default_rng(5)
    split = schedule in ("zb-h1", "zb-v")
    for _ in range(20):
        p, v, m, n, per_chunk, per_stage, _, _, overlap = _random_case(rng, schedule)
        got = pipeline_iteration_times(schedule, m, per_chunk[0], per_chunk[1], *per_stage,
                                       wgrad_s=per_chunk[2] if split else None, compiled=True,
                                       overlap_p2p=overlap)
        for j in range(n):
            want = general_solver_time(schedule, p, v, m, per_chunk, per_stage, j,
                                       bool(np.broadcast_to(overlap, (n,))[j]))
            assert got[j] == pytest.approx(want, rel=1e-12)


def test_without_numba_the_numpy_sweeps_run(monkeypatch):
    monkeypatch.setattr(fastpath_kernel, "available", lambda: False)
    ones = np.ones((3, 2))
    T = pipeline_iteration_times("1f1b", 4, ones, 2 * ones, 0 * ones, 0 * ones, 0 * ones, 0 * ones,
                                 compiled=True)
    assert T.tolist() == [(4 + 3 - 1) * 3.0] * 2  # (m + p - 1)(tf + tb)


@pytest.mark.parametrize("compiled", [False, True])
def test_interleaved_with_m_not_a_multiple_of_p_is_refused_not_solved(compiled):
    """Megatron's rule (m % p == 0 for the interleaved order) refused by name by the fast path
    itself: the order would schedule micro-batches that do not exist, and the solver used to
    wait for them forever. The legal m = 4 still solves: (m*v + p - 1)*(F + B) = 27 s, the
    interleaved schedule's closed form without transfers."""
    if compiled and not fastpath_kernel.available():
        pytest.skip("numba not installed")
    p, v = 2, 2
    F, B, z = np.ones((p, v, 1)), 2 * np.ones((p, v, 1)), np.zeros((p, 1))
    assert pipeline_iteration_times("interleaved", 4, F, B, z, z, z, z,
                                    compiled=compiled).tolist() == [27.0]
    with pytest.raises(ValueError, match=r"m=global_batch_size/.*=3 to be a multiple of "
                                         r"pipeline_parallel_size=2"):
        pipeline_iteration_times("interleaved", 3, F, B, z, z, z, z, compiled=compiled)


def test_interleaved_work_orders_refuse_m_not_a_multiple_of_p():
    """The graph's path reads the same orders: refused there too, naming the rule."""
    from core import schedules
    with pytest.raises(ValueError, match="multiple of pipeline_parallel_size=4"):
        schedules.work_orders("interleaved", 4, 6, 2)
    with pytest.raises(ValueError, match="multiple of pipeline_parallel_size=4"):
        schedules.work_order("interleaved", 4, 6, 0, 2)
    assert schedules.work_orders("interleaved", 4, 8, 2)[0].shape == (4, 32)


def test_zb_v_with_many_micro_batches_takes_the_compiled_pass_by_default(monkeypatch):
    """ZB-V's numpy sweeps grow with m (about 2*m updates per stage: p = 8, m = 1,024 took
    0.7 s for one plan, 2.3 s at m = 2,048, against a few ms under 1F1B), so by default its
    large batches take the compiled pass, as other schedules' do from COMPILED_MIN_ELEMENTS
    elements (what made core.studies.fit_changes take 27 s for Llama 3 70B at B = 65,536)."""
    from core.sim import fastpath

    class Compiled(Exception):
        pass

    def spy(*args, **kwargs):
        raise Compiled

    monkeypatch.setattr(fastpath_kernel, "available", lambda: True)
    monkeypatch.setattr(fastpath_kernel, "loaded", lambda: False)
    monkeypatch.setattr(fastpath, "_solve_compiled", spy)
    p, m = 8, 1024
    one, per_chunk = np.ones((p, 1)), np.ones((p, 2, 1))
    with pytest.raises(Compiled):
        pipeline_iteration_times("zb-v", m, per_chunk, 2 * per_chunk, *[0.05 * one] * 2,
                                 0 * one, 0 * one, wgrad_s=per_chunk)
    # a small ZB-V batch and 1F1B at this m still take the numpy sweeps (no Numba import)
    pipeline_iteration_times("zb-v", 16, per_chunk, 2 * per_chunk, *[0.05 * one] * 2,
                             0 * one, 0 * one, wgrad_s=per_chunk)
    pipeline_iteration_times("1f1b", m, one, 2 * one, *[0.05 * one] * 2, 0 * one, 0 * one)
