"""The Perfetto trace's slices are named by what they run (``core.io.trace``).

A trial user's MoE trace (``vtrain simulate S.json --trace-out t.json``) named every compute
slice ``forward`` or ``backward``, with only the micro-batch and layer in ``args``: micro-batch
0's layer 0 had two ``forward`` slices (3.54 ms and 7.07 ms, its attention and MLP) that
nothing told apart. A slice is now named by the op the simulator times (the profile store's
op names, ``core.sim.graph_types.OPS``), its ``cat`` is ``compute`` or ``communication``, and
its ``args`` name the task kind, stage, virtual stage, micro-batch, layer and phase; the
durations are the simulator's, so they still sum to the report's terms.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from core.cli.common import apply_sets
from core.io.session import load_any
from core.io.trace import event_name, trace_events
from core.sim.graph_types import OPS
from core.sim.simulate import simulate
from tests.conftest import EXAMPLES
from tests.test_moe import _session as mixtral_session

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, t=2 p=2 d=2


def _slices(result) -> list[dict]:
    return [e for e in trace_events(result.graph, result.schedule)["traceEvents"]
            if e["ph"] == "X"]


def test_event_names():
    assert event_name("forward", OPS.index("attention_fwd")) == "attention_fwd"
    assert event_name("forward", OPS.index("experts_fwd")) == "experts_fwd"
    assert event_name("ep_all_to_all", OPS.index("ep_dispatch")) == "ep_dispatch"
    assert event_name("recompute", OPS.index("attention_core_fwd")) == \
        "attention_core_fwd (recompute)"
    assert event_name("wgrad", OPS.index("mlp_bwd")) == "mlp_bwd (wgrad)"
    assert event_name("cp_p2p", OPS.index("cp_send_recv")) == "cp_exchange"
    assert event_name("tp_comm", -1) == "tp_comm"  # a graph without ops: the kind


def test_an_moe_layer_is_named_op_by_op_and_sums_to_the_report():
    """Mixtral 8x7B (32 layers) on p=4 with two virtual stages each (4 layers a virtual stage),
    ep=8, d=8: 8 micro-batches of 1 (global batch 64)."""
    result = simulate(mixtral_session(schedule="interleaved", virtual_pipeline_stages=2))
    x = _slices(result)
    assert len(x) == result.graph.num_tasks
    assert not {"forward", "backward"} & {e["name"] for e in x}
    assert {e["cat"] for e in x} == {"compute", "communication"}
    # micro-batch 0's layer 4 forward: the second virtual stage, on stage 1
    layer4 = sorted((e for e in x if e["args"].get("microbatch") == 0
                     and e["args"].get("layer") == 4 and e["args"].get("phase") == "F"),
                    key=lambda e: e["ts"])
    assert [(e["name"], e["cat"]) for e in layer4] == [
        ("attention_fwd", "compute"), ("router_fwd", "compute"), ("moe_permute_fwd", "compute"),
        ("ep_dispatch", "communication"), ("experts_fwd", "compute"),
        ("ep_combine", "communication"), ("moe_unpermute_fwd", "compute")]
    assert {(e["pid"], e["args"]["stage"], e["args"]["virtual_stage"]) for e in layer4} == {
        (1, 1, 1)}
    assert [e["args"]["kind"] for e in layer4] == [
        "forward", "forward", "forward", "ep_all_to_all", "forward", "ep_all_to_all", "forward"]
    # every layer's virtual stage is its 4-layer chunk, c*p + i on stage i
    for e in x:
        a = e["args"]
        if "layer" in a:
            assert a["virtual_stage"] == a["layer"] // 4 and a["stage"] == a["virtual_stage"] % 4
    # a compute slice is told apart from every other by its name and args
    keys = Counter((e["name"], e["args"]["stage"], e["args"].get("virtual_stage"),
                    e["args"].get("microbatch"), e["args"].get("layer"), e["args"].get("phase"))
                   for e in x if e["cat"] == "compute")
    assert max(keys.values()) == 1
    # per stage, the compute slices sum to the report's compute, the all-to-alls to its
    # expert-parallel communication (each duration written to the nanosecond)
    compute, ep = defaultdict(float), defaultdict(float)
    for e in x:
        if e["cat"] == "compute":
            compute[e["pid"]] += e["dur"]
        if e["args"]["kind"] == "ep_all_to_all":
            ep[e["pid"]] += e["dur"]
    report = result.report
    for stage in range(4):
        n = sum(e["pid"] == stage for e in x)
        assert abs(compute[stage] - report.stage_compute_s[stage] * 1e6) <= n * 5e-4
        assert abs(ep[stage] - report.stage_ep_comm_s[stage] * 1e6) <= n * 5e-4
    assert abs(sum(compute.values()) / 4 - report.compute_s * 1e6) <= len(x) * 5e-4
    # each op's slices are the graph's tasks of that op, one for one
    ops = Counter(OPS[o] for o in result.graph.op.tolist() if o >= 0)
    names = Counter(e["name"] for e in x)
    assert names["experts_fwd"] == ops["experts_fwd"] == 8 * 32
    assert names["ep_dispatch"] == ops["ep_dispatch"] == 2 * 8 * 32  # forward and backward


def test_recomputation_and_weight_gradients_are_named_apart():
    """GPT-3 1.3B with selective recomputation under ZB-H1: the recomputed attention core and
    the W halves of the split backward are named apart from the forward and the B halves."""
    result = simulate(apply_sets(load_any(SMALL), ["plan.schedule=zb-h1",
                                                   "plan.recompute=selective"]))
    x = _slices(result)
    by_name = defaultdict(set)
    for e in x:
        by_name[e["name"]].add((e["args"]["kind"], e["args"].get("phase")))
    assert by_name["attention_fwd"] == {("forward", "F")}
    assert by_name["attention_core_fwd (recompute)"] == {("recompute", "B")}
    assert by_name["mlp_bwd"] == {("backward", "B")}
    assert by_name["mlp_bwd (wgrad)"] == {("wgrad", "W")}
    assert by_name["tp_all_reduce"] == {("tp_comm", "F"), ("tp_comm", "B")}
    # 24 layers over 2 stages, 32 micro-batches: one recomputed core per layer and micro-batch
    assert Counter(e["name"] for e in x)["attention_core_fwd (recompute)"] == 24 * 32
    report = result.report
    for stage in range(2):
        dur = sum(e["dur"] for e in x if e["pid"] == stage and e["cat"] == "compute")
        n = sum(e["pid"] == stage for e in x)
        assert abs(dur - report.stage_compute_s[stage] * 1e6) <= n * 5e-4
