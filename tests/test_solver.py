"""The vectorized critical-path solver against plain reference solvers."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from core.graph import StageProgram, build_pipeline_graph
from core.solver import CycleError, earliest_times


def reference_times(dur, src, dst):
    """Plain Python: topological order by networkx, then one relaxation pass."""
    g = nx.DiGraph()
    g.add_nodes_from(range(len(dur)))
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    start = np.zeros(len(dur))
    for v in nx.topological_sort(g):
        preds = list(g.predecessors(v))
        start[v] = max((start[u] + dur[u] for u in preds), default=0.0)
    return start, start + dur


def longest_path_length(dur, src, dst):
    """networkx dag_longest_path_length on the node-split graph (weights on edges)."""
    g = nx.DiGraph()
    n = len(dur)
    for v in range(n):
        g.add_edge(("in", v), ("out", v), weight=float(dur[v]))
    for u, v in zip(src.tolist(), dst.tolist()):
        g.add_edge(("out", u), ("in", v), weight=0.0)
    return nx.dag_longest_path_length(g, weight="weight")


def random_dag(rng, n, p_edge):
    perm = rng.permutation(n)
    iu, ju = np.triu_indices(n, 1)
    keep = rng.random(iu.size) < p_edge
    src, dst = perm[iu[keep]], perm[ju[keep]]
    dur = rng.exponential(1.0, n) * (rng.random(n) > 0.1)  # some zero-length tasks
    return dur, src, dst


@pytest.mark.parametrize("seed", range(60))
def test_random_dags_match_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    dur, src, dst = random_dag(rng, n, float(rng.uniform(0.0, 0.2)))
    start, end = earliest_times(dur, src, dst)
    ref_start, ref_end = reference_times(dur, src, dst)
    np.testing.assert_allclose(start, ref_start, rtol=0, atol=1e-12)
    np.testing.assert_allclose(end, ref_end, rtol=0, atol=1e-12)
    assert end.max() == pytest.approx(longest_path_length(dur, src, dst), abs=1e-9)


def test_duplicate_edges_and_isolated_tasks():
    dur = np.array([1.0, 2.0, 3.0, 4.0])
    src = np.array([0, 0, 1])
    dst = np.array([1, 1, 2])
    start, end = earliest_times(dur, src, dst)
    assert start.tolist() == [0.0, 1.0, 3.0, 0.0]
    assert end.tolist() == [1.0, 3.0, 6.0, 4.0]


def test_cycle_is_reported():
    with pytest.raises(CycleError, match="cycle"):
        earliest_times(np.ones(3), np.array([0, 1, 2]), np.array([1, 2, 0]))


def test_edge_out_of_range():
    with pytest.raises(ValueError, match="0..1"):
        earliest_times(np.ones(2), np.array([0]), np.array([5]))


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 3), (4, 4), (3, 7)])
def test_small_pipelines_match_reference(schedule, p, m):
    rng = np.random.default_rng(p * 100 + m)
    programs = [StageProgram.from_tasks(
        [(0, 0, rng.uniform(0.5, 1.5), 0), (6, 1, rng.uniform(0, 0.2), 0)],
        [(1, 0, rng.uniform(1, 3), 0)],
        send_fwd_s=rng.uniform(0, 0.3), send_bwd_s=rng.uniform(0, 0.3),
        dp_comm_s=rng.uniform(0, 1), optimizer_s=rng.uniform(0, 1)) for _ in range(p)]
    g = build_pipeline_graph(programs, m, schedule)
    start, end = earliest_times(g.duration_s, g.src, g.dst)
    ref_start, _ = reference_times(g.duration_s, g.src, g.dst)
    np.testing.assert_allclose(start, ref_start, atol=1e-12)
