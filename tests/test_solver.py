"""The vectorized critical-path solver against plain reference solvers."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES, SHARED
from core.sim.pipeline_graph import StageProgram, build_pipeline_graph
from core.io.session import load_any
from core.sim.simulate import simulate
from core.sim.solver import CycleError, earliest_times, earliest_times_levels, merge_chains

SOLVERS = [earliest_times, earliest_times_levels]


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


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(60))
def test_random_dags_match_reference(seed, solver):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    dur, src, dst = random_dag(rng, n, float(rng.uniform(0.0, 0.2)))
    start, end = solver(dur, src, dst)
    ref_start, ref_end = reference_times(dur, src, dst)
    np.testing.assert_allclose(start, ref_start, rtol=0, atol=1e-12)
    np.testing.assert_allclose(end, ref_end, rtol=0, atol=1e-12)
    assert end.max() == pytest.approx(longest_path_length(dur, src, dst), abs=1e-9)


@pytest.mark.parametrize("solver", SOLVERS)
def test_duplicate_edges_and_isolated_tasks(solver):
    dur = np.array([1.0, 2.0, 3.0, 4.0])
    src = np.array([0, 0, 1])
    dst = np.array([1, 1, 2])
    start, end = solver(dur, src, dst)
    assert start.tolist() == [0.0, 1.0, 3.0, 0.0]
    assert end.tolist() == [1.0, 3.0, 6.0, 4.0]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("src,dst,stuck", [
    ([0, 1, 2], [1, 2, 0], 3),           # a ring of single-successor links: no chain has a head
    ([3, 0, 1, 2], [0, 1, 2, 0], 3),     # the ring entered from outside: a chain whose end feeds its head
    ([0, 1, 1], [1, 1, 2], 2),           # a self-loop
    ([0, 1, 2, 2], [1, 2, 1, 3], 3),     # a two-task cycle and the task after it
    ([0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0], 6),  # longer rings: pointer jumping never
    ([0, 1, 2, 3, 4], [1, 2, 3, 0, 5], 4),        # reaches a head (4 = a power of two)
    ([0, 1, 2], [1, 0, 2], 3),                    # rings of two, and a self-loop beside one
])
def test_cycle_is_reported(solver, src, dst, stuck):
    n = max(src + dst) + 1
    with pytest.raises(CycleError, match=f"cycle \\({stuck} of {n} tasks"):
        solver(np.ones(n), np.array(src), np.array(dst))


@pytest.mark.parametrize("solver", SOLVERS)
def test_edge_out_of_range(solver):
    with pytest.raises(ValueError, match="0..1"):
        solver(np.ones(2), np.array([0]), np.array([5]))


@pytest.mark.parametrize("solver", SOLVERS)
def test_empty_graphs(solver):
    start, end = solver(np.zeros(0), np.zeros(0, int), np.zeros(0, int))
    assert start.shape == end.shape == (0,)
    start, end = solver(np.array([2.0, 3.0]), np.zeros(0, int), np.zeros(0, int))
    assert start.tolist() == [0.0, 0.0] and end.tolist() == [2.0, 3.0]


# --------------------------------------------------------------------------- chain merging

def test_merge_chains_groups_links_in_path_order():
    # 5 -> 2 -> 7 is a chain (each link the only out-edge of its source and in-edge of its
    # target); 0 fans out to 5 and 3; 3 and 7 join at 4; 1, 6 are alone (1 -> 6 has a twin edge).
    src = np.array([0, 0, 5, 2, 3, 7, 1, 1])
    dst = np.array([5, 3, 2, 7, 4, 4, 6, 6])
    ch = merge_chains(8, src, dst)
    chains = [ch.order[a:b].tolist() for a, b in zip(ch.head, list(ch.head[1:]) + [8])]
    assert sorted(chains) == [[0], [1], [3], [4], [5, 2, 7], [6]]
    for i, members in enumerate(chains):
        assert (ch.chain[members] == i).all()
    cross = sorted(zip(ch.src.tolist(), ch.dst.tolist()))
    by_task = {tuple(c)[0]: i for i, c in enumerate(chains)}
    expect = sorted((ch.chain[u], ch.chain[v]) for u, v in
                    [(0, 5), (0, 3), (3, 4), (7, 4), (1, 6), (1, 6)])
    assert cross == expect and by_task[5] == ch.chain[7]


def test_merge_chains_fast_path_for_consecutive_links():
    ch = merge_chains(6, np.array([0, 1, 2, 2, 4]), np.array([1, 2, 3, 4, 5]))
    assert ch.order is None  # every link is u -> u+1: chains are runs of indices
    assert ch.head.tolist() == [0, 3, 4] and ch.chain.tolist() == [0, 0, 0, 1, 2, 2]
    assert sorted(zip(ch.src.tolist(), ch.dst.tolist())) == [(0, 1), (0, 2)]


@st.composite
def chained_dags(draw):
    """A random DAG whose nodes are expanded into chains, numbered consecutively or shuffled."""
    k = draw(st.integers(1, 25))
    pairs = draw(st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1)), max_size=3 * k))
    lengths = draw(st.lists(st.integers(1, 6), min_size=k, max_size=k))
    heads = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    tails = heads + np.array(lengths) - 1
    n = int(sum(lengths))
    src = [u for h, ln in zip(heads, lengths) for u in range(h, h + ln - 1)]
    dst = [u + 1 for u in src]
    for a, b in pairs:
        if a != b:
            a, b = min(a, b), max(a, b)
            src.append(int(tails[a]))
            dst.append(int(heads[b] + draw(st.integers(0, lengths[b] - 1))))  # may land mid-chain
    durations = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1e3)), min_size=n, max_size=n))
    src, dst, dur = np.array(src, np.int64), np.array(dst, np.int64), np.array(durations)
    if draw(st.booleans()):
        perm = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(n)
        src, dst = perm[src], perm[dst]
        dur_p = np.empty(n)
        dur_p[perm] = dur
        dur = dur_p
    edge_order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(src.size)
    return dur, src[edge_order], dst[edge_order]


@settings(max_examples=300, deadline=None)
@given(chained_dags())
def test_chain_merging_matches_level_solver_on_random_graphs(g):
    dur, src, dst = g
    start, end = earliest_times(dur, src, dst)
    ref_start, ref_end = earliest_times_levels(dur, src, dst)
    scale = max(1.0, float(dur.sum()))
    np.testing.assert_allclose(start, ref_start, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(end, ref_end, rtol=0, atol=1e-13 * scale)
    ch = merge_chains(len(dur), src, dst)
    order = np.arange(len(dur)) if ch.order is None else ch.order
    # inside a chain each task starts exactly when the one before it ends (to rounding)
    same = ch.chain[order[1:]] == ch.chain[order[:-1]]
    np.testing.assert_allclose(start[order[1:]][same], end[order[:-1]][same], rtol=0, atol=1e-13 * scale)


SHIPPED = sorted(EXAMPLES.glob("*.json")) + sorted((SHARED / "configs").glob("*.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
@pytest.mark.parametrize("recompute", ["file", "none"])
def test_chain_merging_matches_level_solver_on_shipped_examples(path, recompute):
    session = load_any(path)
    if recompute == "none":
        session.plan.recompute = "none"
    g = simulate(session).graph
    start, end = earliest_times(g.duration_s, g.src, g.dst)
    ref_start, ref_end = earliest_times_levels(g.duration_s, g.src, g.dst)
    T = float(ref_end.max())
    np.testing.assert_allclose(start, ref_start, rtol=0, atol=1e-11 * T)
    np.testing.assert_allclose(end, ref_end, rtol=0, atol=1e-11 * T)
    ch = merge_chains(g.num_tasks, g.src, g.dst)
    assert ch.num_chains < g.num_tasks / 4  # each stage's program order is a few long chains


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
