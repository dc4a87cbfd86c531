"""Synthetic 1F1B iterations for GUI tests and the timeline benchmark (no core simulator needed).

The numbers are made up but shaped like the real thing: per stage a compute
stream of layer forward/backward/recompute tasks with tensor-parallel
all-reduces between them, a communication stream with pipeline transfers,
and a data-parallel all-reduce plus optimizer step at the end, so the 1F1B
warm-up and cool-down leave pipeline bubbles.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from core.plan.session import Session
from core.sim.graph_types import KINDS, ExecutionGraph, Schedule
from core.sim.report import Report, StageMemory
from core.sim.simulate import SimulationResult

K = {name: i for i, name in enumerate(KINDS)}


def one_f_one_b_order(p: int, m: int, s: int) -> list[tuple[str, int]]:
    """Block order of stage ``s`` under 1F1B: warm-up forwards, steady 1F1B, cool-down backwards."""
    warm = min(p - s - 1, m)
    order = [("F", j) for j in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", j) for j in range(m - warm, m)]
    return order


def synthetic_iteration(p: int = 4, m: int = 8, layers_per_stage: int = 2, layer_fwd_s: float = 2e-3,
                        p2p_s: float = 3e-4, dp_s: float = 5e-3) -> tuple[ExecutionGraph, Schedule]:
    """Build a graph and its schedule with ``~6*p*m*layers_per_stage`` tasks."""
    f_blk = layers_per_stage * layer_fwd_s
    b_blk = layers_per_stage * layer_fwd_s * 3.0  # recompute + backward (2x)
    orders = [one_f_one_b_order(p, m, s) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}
    pos = [0] * p
    free = [0.0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pos[s] >= len(orders[s]):
                continue
            op, j = orders[s][pos[s]]
            if op == "F":
                dep = 0.0 if s == 0 else done.get(("F", s - 1, j), None)
                dep = dep if dep is None or s == 0 else dep + p2p_s
            else:
                dep = done.get(("F", s, j)) if s == p - 1 else done.get(("B", s + 1, j))
                dep = dep if dep is None or s == p - 1 else dep + p2p_s
            if dep is None:
                continue
            start = max(free[s], dep)
            free[s] = start + (f_blk if op == "F" else b_blk)
            done[(op, s, j)] = free[s]
            pos[s] += 1
            progressed = True
        assert progressed
    cols: dict[str, list] = {k: [] for k in ("start", "dur", "kind", "stream", "stage", "mb", "layer")}

    def add(start, dur, kind, stream, stage, mb, layer):
        for key, v in zip(cols, (start, dur, K[kind], stream, stage, mb, layer)):
            cols[key].append(v)

    for (op, s, j), end in done.items():
        t = end - (f_blk if op == "F" else b_blk)
        first_layer = s * layers_per_stage
        layers = range(first_layer, first_layer + layers_per_stage)
        for layer in (layers if op == "F" else reversed(layers)):
            steps = ([("forward", 0.8), ("tp_comm", 0.2)] if op == "F" else
                     [("recompute", 0.8), ("tp_comm", 0.2), ("backward", 1.6), ("tp_comm", 0.4)])
            for kind, frac in steps:
                d = frac * layer_fwd_s
                add(t, d, kind, 0, s, j, layer)
                t += d
        if op == "F" and s < p - 1:
            add(end, p2p_s, "pp_p2p", 1, s, j, -1)
        if op == "B" and s > 0:
            add(end, p2p_s, "pp_p2p", 1, s, j, -1)
    for s in range(p):
        # the stream runs one task at a time: the all-reduce after the last backward's send
        # (at once, the timeline draws them on two lanes, "comm" and "comm (2)")
        t = free[s] + (p2p_s if s > 0 else 0.0)
        add(t, dp_s, "dp_comm", 1, s, -1, -1)
        add(t + dp_s, dp_s * 0.5, "optimizer", 0, s, -1, -1)
    start = np.array(cols["start"], dtype=np.float64)
    dur = np.array(cols["dur"], dtype=np.float64)
    graph = ExecutionGraph(
        duration_s=dur, kind=np.array(cols["kind"], np.int8), stream=np.array(cols["stream"], np.int8),
        stage=np.array(cols["stage"], np.int32), microbatch=np.array(cols["mb"], np.int32),
        layer=np.array(cols["layer"], np.int32), src=np.empty(0, np.int64), dst=np.empty(0, np.int64),
        num_stages=p)
    end = start + dur
    return graph, Schedule(start_s=start, end_s=end, iteration_time_s=float(end.max()))


def synthetic_report(p: int = 4, m: int = 8, iteration_time_s: float = 1.0, fits: bool = True,
                     warnings: list[str] | None = None) -> Report:
    """A report with plausible, made-up figures for ``p`` stages: stage 0 needs 65 GiB of the
    GPU's 80 GB (74.5 GiB) when ``fits``, 100 GiB when not."""
    gib = 2.0**30
    memory = [StageMemory(stage=s, weights_bytes=10 * gib, gradients_bytes=10 * gib,
                          optimizer_bytes=30 * gib,
                          activations_bytes=(15 if fits else 60) * gib * (p - s) / p)
              for s in range(p)]
    return Report(
        num_gpus=8 * p * 4, num_microbatches=m, iteration_time_s=iteration_time_s,
        tokens_per_s=1_234_567.8, num_parameters=174_604_836_864,
        num_active_parameters=174_604_836_864, model_flops_per_iteration=1.0e18,
        mfu=0.4321, hfu=0.5432,
        bubble_fraction=(p - 1) / (m + p - 1), compute_s=0.7 * iteration_time_s,
        comm_s=0.1 * iteration_time_s, bubble_s=0.2 * iteration_time_s,
        stage_compute_s=[0.7 * iteration_time_s] * p, stage_comm_s=[0.1 * iteration_time_s] * p,
        stage_idle_s=[0.2 * iteration_time_s] * p, num_iterations=95367.4, training_days=34.56,
        gpu_hours=1_234_567.0, cost_usd=2_469_134.0, memory=memory,
        memory_capacity_bytes=80e9, max_memory_per_gpu_bytes=max(x.total_bytes for x in memory),
        fits_in_memory=fits, profile={"source": "synthetic", "device": "A100-SXM4-80GB"},
        warnings=list(warnings or []))


def synthetic_result(session: Session | None = None, p: int | None = None, m: int = 8,
                     layers_per_stage: int = 2) -> SimulationResult:
    """A full :class:`SimulationResult`; ``p`` defaults to the session's pipeline size (capped)."""
    session = session or Session()
    p = p or min(session.plan.pipeline_parallel, 8)
    graph, schedule = synthetic_iteration(p=p, m=m, layers_per_stage=layers_per_stage)
    report = synthetic_report(p=p, m=m, iteration_time_s=schedule.iteration_time_s)
    return SimulationResult(session=session, graph=graph, schedule=schedule, report=report)


def plot_points(days: np.ndarray, cost: np.ndarray, fits: np.ndarray | None = None,
                num_gpus: int = 8) -> SimpleNamespace:
    """The fields of a sweep result the Explore plot reads (``SweepPlot.set_result``): each
    plan's training days and cost, all fitting unless ``fits`` says otherwise."""
    n = days.size
    fits = np.ones(n, bool) if fits is None else fits
    return SimpleNamespace(num_plans=n, training_days=days, cost_usd=cost, fits_in_memory=fits,
                           feasible=fits, num_gpus=np.full(n, num_gpus), reason=[""] * n)


def shown(qtbot, widget, width: int, height: int):
    """``widget`` given to ``qtbot``, resized to ``width`` x ``height`` pixels, shown and exposed
    (laid out and painted once); returns it."""
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget
