"""CUDA graphs (``plan.cuda_graph_impl``, ``plan.cuda_graph_modules``; core.model.cuda_graphs):
a captured op takes its device time alone, no host time per op call (docs/simulator.md "CUDA
graphs"); the fields' rules, sessions, the Megatron-LM import and export, the report's memory
caveat."""

from __future__ import annotations

import dataclasses

import pytest

from core.accuracy.calibrate import apply_fit
from core.accuracy.shared_fit import analytic_bases
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.io.session import load_session, save_session
from core.model.cuda_graphs import captured_ops, is_captured
from core.model.kernels import op_key
from core.model.ops import (device_key, kernel_arrays, kernel_class, kernel_fp8, kernel_peak_flops,
                            kernel_times, op_kernels)
from core.plan.fields import NOT_MODELLED
from core.plan.rules import validate
from core.sim.op_times import lookup_op_times
from core.sim.simulate import simulate
from tests.test_host_time import HOST_S, _qwen3_30b_session

TE_MOE = "attn,moe_router,moe_preprocess"


def _with(session, **plan):
    s = session.copy()
    s.plan = dataclasses.replace(s.plan, **plan)
    return s


@pytest.fixture(scope="module")
def qwen():
    """Qwen3-30B-A3B, t = p = 1, ep 8, 8 micro-batches, no recomputation, and the analytic H100
    store with the modern stores' host time per op call (0.5 ms, no per-kernel launch time):
    its router and token permutations are host-bound."""
    s = _qwen3_30b_session()
    base = analytic_bases()(s)
    store = apply_fit(base, {**base.op_model, "op_overhead_s": HOST_S, "kernel_launch_s": 0.0})
    host_free = apply_fit(base, {**base.op_model, "op_overhead_s": 0.0, "kernel_launch_s": 0.0})
    return s, store, host_free


def _device_s(session, store, op: str) -> float:
    """The sum of ``op``'s kernels' roofline times (core.model.ops; no host time)."""
    key = device_key(op_key(session.model, session.plan), store.peak_flops)
    ks = op_kernels(op, key)
    return float(kernel_times(*kernel_arrays(ks), kernel_peak_flops(ks, "bf16", store.peak_flops),
                              store.memory_bandwidth_bytes_per_s, store.op_model, kernel_fp8(ks),
                              kernel_class(ks)).sum())


def test_captured_ops_take_their_device_time_only(qwen):
    """Transformer Engine's attn + moe_router + moe_preprocess graphs (all-to-all dispatcher):
    the router and the permutation, host-bound eagerly (0.5 ms), take their kernels' time; the
    experts and the un-permutation, outside the graphs, keep the host time where it is longer."""
    s, store, _ = qwen
    eager = lookup_op_times(s, store).times
    graphs = lookup_op_times(_with(s, cuda_graph_impl="transformer_engine",
                                   cuda_graph_modules=TE_MOE), store).times
    for op in ("router_fwd", "router_bwd", "moe_permute_fwd", "moe_permute_bwd"):
        dev = _device_s(s, store, op)
        assert dev < HOST_S and eager[op] == HOST_S, op
        assert graphs[op] == pytest.approx(dev, rel=1e-12), op
    assert eager["moe_unpermute_fwd"] == graphs["moe_unpermute_fwd"] == HOST_S  # not captured
    assert eager["experts_bwd"] == graphs["experts_bwd"]
    assert eager["attention_fwd"] == pytest.approx(graphs["attention_fwd"], rel=1e-12)  # device-bound


def test_iteration_is_faster_by_exactly_the_removed_host_time(qwen):
    """One stage, no overlap: the iteration is the sum of its ops and collectives, so the graphs
    save m * L * sum over the captured ops of (eager - device) seconds, to 1e-9."""
    s, store, _ = qwen
    g = _with(s, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE)
    eager, graphs = lookup_op_times(s, store).times, lookup_op_times(g, store).times
    captured = captured_ops(g.plan)
    assert captured == {"attention_fwd", "attention_bwd", "router_fwd", "router_bwd",
                        "shared_experts_fwd", "shared_experts_bwd", "moe_permute_fwd",
                        "moe_permute_bwd"}
    per_layer = sum(eager[op] - graphs[op] for op in captured if op in eager)
    assert per_layer > 2 * HOST_S  # most of the router's and the permutations' host time
    m, L = s.plan.num_microbatches, s.model.num_layers
    t_eager = simulate(s, store).report.iteration_time_s
    t_graphs = simulate(g, store).report.iteration_time_s
    assert t_eager - t_graphs == pytest.approx(m * L * per_layer, rel=1e-9)


def test_full_iteration_removes_all_host_time(qwen):
    """A full-iteration graph times every op of the forward and backward at its device time:
    the iteration of a store without host time, the optimizer step (outside the graph) being
    device-bound here."""
    s, store, host_free = qwen
    full = _with(s, cuda_graph_impl="full_iteration")
    assert captured_ops(full.plan) is None
    assert not is_captured("optimizer_step", None) and is_captured("attention_core_fwd", None)
    t_full = simulate(full, store).report.iteration_time_s
    assert t_full == pytest.approx(simulate(s, host_free).report.iteration_time_s, rel=1e-12)
    assert t_full < simulate(s, store).report.iteration_time_s


def test_flex_dispatcher_preprocess_captures_no_op(qwen):
    """With the flex dispatcher (DeepEP / HybridEP) the dispatch preprocessing is routing
    metadata only: the permutation, after the dispatch, stays eager."""
    s, store, _ = qwen
    flex = _with(s, moe_token_dispatcher_type="flex", cuda_graph_impl="transformer_engine",
                 cuda_graph_modules=TE_MOE)
    assert "moe_permute_fwd" not in captured_ops(flex.plan)
    assert lookup_op_times(flex, store).times["moe_permute_fwd"] == HOST_S


def test_report_says_memory_does_not_count_the_graphs_pools(qwen):
    s, store, _ = qwen
    plain = simulate(s, store).report
    graphs = simulate(_with(s, cuda_graph_impl="full_iteration"), store).report
    assert not any("CUDA graphs" in w for w in plain.warnings)
    assert any("CUDA graphs" in w and "memory" in w for w in graphs.warnings)
    assert graphs.memory == plain.memory  # not modelled: the figure is the same, with the caveat


def _errors(session) -> dict[str, list]:
    out: dict[str, list] = {}
    for e in validate(session):
        out.setdefault(e.field, []).append(e)
    return out


def _dense(s):
    d = s.copy()
    d.model = dataclasses.replace(s.model, num_experts=None, moe_ffn_hidden_size=None)
    d.plan = dataclasses.replace(s.plan, expert_parallel=1)
    return d


def test_rules_of_the_fields(qwen):
    """Invalid (Megatron-Core 0.19.2 TransformerConfig.__post_init__ refuses them): modules with
    full_iteration, unknown modules, moe_preprocess without moe_router under transformer_engine,
    MoE modules without MoE layers, mlp without dense layers, local's mlp without attn beside
    MoE layers, per-layer graphs under full recomputation, transformer_engine's moe_router with
    the recompute module moe and its mlp under the expert all-to-all overlap, an unknown
    implementation. Not modelled (refused by name): moe, mamba, a graph of a whole MoE layer."""
    s, _, _ = qwen
    dense = _dense(s)
    mixed = s.copy()  # one dense layer first, the others MoE
    mixed.model = dataclasses.replace(s.model, moe_first_dense_layers=1)
    assert not validate(mixed)
    assert not validate(_with(dense, cuda_graph_impl="local"))
    assert not validate(_with(dense, cuda_graph_impl="transformer_engine"))
    assert not validate(_with(s, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE))
    for mods in ("attn", "mlp", "attn,mlp"):  # local takes modules too
        assert not validate(_with(dense, cuda_graph_impl="local", cuda_graph_modules=mods))
    assert not validate(_with(s, cuda_graph_impl="local", cuda_graph_modules="moe_preprocess"))
    assert not validate(_with(mixed, cuda_graph_impl="transformer_engine",
                              cuda_graph_modules="attn,mlp,moe_router"))
    cases = [  # (plan changes, session, field, rule, a word the message names)
        (dict(cuda_graph_impl="full_iteration", cuda_graph_modules="attn"), dense,
         "plan.cuda_graph_modules", "", "full_iteration"),
        (dict(cuda_graph_modules="attn,bogus"), s, "plan.cuda_graph_modules", "", "bogus"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="attn,bogus"), s,
         "plan.cuda_graph_modules", "", "bogus"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="moe_preprocess"), s,
         "plan.cuda_graph_modules", "", "moe_router"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="full_iteration"), s,
         "plan.cuda_graph_modules", "", "full_iteration"),
        (dict(cuda_graph_impl="eager"), s, "plan.cuda_graph_impl", "", "eager"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="attn,moe_router"), dense,
         "plan.cuda_graph_modules", "", "without MoE layers"),
        (dict(cuda_graph_impl="local", cuda_graph_modules="moe_router"), dense,
         "plan.cuda_graph_modules", "", "without MoE layers"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="attn,mlp"), s,
         "plan.cuda_graph_modules", "", "dense layers"),
        (dict(cuda_graph_impl="local", cuda_graph_modules="mlp"), mixed,
         "plan.cuda_graph_modules", "", "create_mcore_cudagraph_manager"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE,
              recompute="selective", recompute_modules="moe"), s,
         "plan.cuda_graph_modules", "", "recompute module moe"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="attn,mlp,moe_router",
              overlap_moe_expert_parallel_comm=True), mixed,
         "plan.cuda_graph_modules", "", "overlap_moe_expert_parallel_comm"),
        (dict(cuda_graph_impl="local", recompute="full"), dense, "plan.cuda_graph_impl", "",
         "full recomputation"),
        (dict(cuda_graph_impl="transformer_engine", recompute="full", cuda_graph_modules="attn"),
         dense, "plan.cuda_graph_impl", "", "full_iteration"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="attn,moe"), s,
         "plan.cuda_graph_modules", NOT_MODELLED, "moe"),
        (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules="mamba"), s,
         "plan.cuda_graph_modules", NOT_MODELLED, "mamba"),
        (dict(cuda_graph_impl="transformer_engine"), s, "plan.cuda_graph_impl", NOT_MODELLED, "MoE"),
        (dict(cuda_graph_impl="local", cuda_graph_modules="attn"), s, "plan.cuda_graph_impl",
         NOT_MODELLED, "MoE"),
    ]
    for change, base, field, rule, word in cases:
        errs = _errors(_with(base, **change)).get(field, [])
        assert any(e.rule == rule and word in e.message for e in errs), (change, errs)
    # the same plans without the offending part are taken
    assert not validate(_with(s, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE,
                              recompute="selective", recompute_modules="moe_act"))
    assert not validate(_with(mixed, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE,
                              overlap_moe_expert_parallel_comm=True))
    # a full-iteration graph captures the recomputation with the rest
    assert not validate(_with(dense, cuda_graph_impl="full_iteration", recompute="full"))


def test_local_graphs_capture_whole_layers_of_the_modules(qwen):
    """cuda_graph_impl local with modules (Megatron-Core TransformerLayer.
    create_mcore_cudagraph_manager): a dense layer with attn or mlp named is graphed whole,
    attention and MLP; with only MoE modules no GPT layer is graphed, so nothing is captured and
    the iteration is the eager one. Transformer Engine captures the named modules only."""
    s, store, _ = qwen
    dense = _dense(s)
    whole = {"attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd"}
    assert captured_ops(_with(dense, cuda_graph_impl="local").plan) == whole
    for mods in ("attn", "mlp", "attn,mlp"):
        assert captured_ops(_with(dense, cuda_graph_impl="local", cuda_graph_modules=mods).plan) == whole
    assert captured_ops(_with(dense, cuda_graph_impl="transformer_engine",
                              cuda_graph_modules="attn").plan) == {"attention_fwd", "attention_bwd"}
    assert captured_ops(_with(dense, cuda_graph_impl="transformer_engine",
                              cuda_graph_modules="mlp").plan) == {"mlp_fwd", "mlp_bwd"}
    moe_only = _with(s, cuda_graph_impl="local", cuda_graph_modules="moe_router,moe_preprocess")
    assert not validate(moe_only)
    assert captured_ops(moe_only.plan) == frozenset()
    assert (simulate(moe_only, store).report.iteration_time_s
            == simulate(s, store).report.iteration_time_s)


def test_modules_without_an_implementation_are_inactive_not_refused(qwen, tmp_path, capsys):
    """cuda_graph_impl none with modules set: Megatron ignores --cuda-graph-modules without an
    implementation that uses it, so the modules are inactive (greyed in the editor, kept),
    not refused; the plan times as eager (tester: `--set plan.cuda_graph_impl=none` was
    refused until the modules were cleared too)."""
    from core.cli import main
    from core.plan.rules import inactive_fields
    s, store, _ = qwen
    graphs = _with(s, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE)
    off = _with(graphs, cuda_graph_impl="none")
    assert validate(off) == []
    assert "plan.cuda_graph_modules" in inactive_fields(off)
    assert "plan.cuda_graph_modules" not in inactive_fields(graphs)
    assert captured_ops(off.plan) == frozenset()  # nothing captured
    assert (simulate(off, store).report.iteration_time_s
            == simulate(_with(s, cuda_graph_impl="none", cuda_graph_modules=None),
                        store).report.iteration_time_s)
    assert "--cuda-graph-modules" not in export_arguments(off)
    path = tmp_path / "g.json"
    save_session(_with(load_session("resources/examples/gpt3_1.3b_single_node.json"),
                       cuda_graph_impl="transformer_engine", cuda_graph_modules="attn"), path)
    assert main(["simulate", str(path), "--set", "plan.cuda_graph_impl=none", "--json"]) == 0
    capsys.readouterr()


def test_session_round_trip(qwen, tmp_path):
    s, _, _ = qwen
    g = _with(s, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE)
    path = tmp_path / "s.json"
    save_session(g, path)
    back = load_session(path)
    assert (back.plan.cuda_graph_impl, back.plan.cuda_graph_modules) == ("transformer_engine", TE_MOE)
    assert back.to_dict() == g.to_dict()
    assert "cuda_graph=transformer_engine" in back.plan.label()


_LAUNCH = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
           "--num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
           "--global-batch-size 8 --vocab-size 32000 --bf16 ")


def _imported(flags: str):
    return session_from_launch(read_launch(_LAUNCH + flags + "\n", "run.sh"), num_gpus=8).session.plan


@pytest.mark.parametrize("flags, impl, modules", [
    ("", "none", None),
    ("--cuda-graph-impl transformer_engine --cuda-graph-modules attn mlp", "transformer_engine",
     "attn,mlp"),
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn", "transformer_engine", "attn"),
    ("--enable-cuda-graph", "local", None),
    ("--external-cuda-graph", "transformer_engine", None),
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope full", "transformer_engine", None),
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", "full_iteration", None),
    ("--cuda-graph-impl local --cuda-graph-modules attn", "local", "attn"),
    ("--cuda-graph-impl full_iteration --cuda-graph-warmup-steps 2", "full_iteration", None),
])
def test_megatron_import_of_the_flags(flags, impl, modules):
    plan = _imported(flags)
    assert (plan.cuda_graph_impl, plan.cuda_graph_modules) == (impl, modules)


@pytest.mark.parametrize("flags, word", [
    ("--cuda-graph-impl cudagraph", "cudagraph"),
    ("--enable-cuda-graph --cuda-graph-impl transformer_engine", "--enable-cuda-graph"),
])
def test_megatron_import_refuses_bad_flags(flags, word):
    with pytest.raises(MegatronArgsError) as err:
        _imported(flags)
    assert word in str(err.value)


def test_megatron_export_round_trip():
    """The export writes Megatron-LM's current flags; importing them gives the plan back."""
    for impl, mods in (("none", None), ("local", None), ("full_iteration", None),
                       ("transformer_engine", "attn,mlp"), ("local", "attn,mlp")):
        session = session_from_launch(read_launch(_LAUNCH + "\n", "run.sh"), num_gpus=8).session
        session.plan = dataclasses.replace(session.plan, cuda_graph_impl=impl, cuda_graph_modules=mods)
        words = export_arguments(session)
        assert ("--cuda-graph-impl" in words) == (impl != "none")
        back = _imported(" ".join(w for w in words if w.startswith("--cuda") or w in ("attn", "mlp")
                                  or w in ("local", "full_iteration", "transformer_engine")))
        assert (back.cuda_graph_impl, back.cuda_graph_modules) == (impl, mods)


def test_a_measured_store_is_refused_by_name(qwen):
    """A measured store's op times are eager calls, host time included: their device time alone
    is not in it, so a plan with graphs on it is refused, naming the store and the field; the
    same plan without graphs looks its ops up."""
    from core.sim.simulate import open_profile
    from tests.conftest import ROOT
    store = open_profile(ROOT / "tests" / "data" / "profile_store_v1.h5")
    assert store.provenance["method"] == "measured"
    s = _qwen3_30b_session()
    dense = s.copy()
    dense.model = dataclasses.replace(s.model, num_experts=None, moe_ffn_hidden_size=None)
    dense.plan = dataclasses.replace(s.plan, expert_parallel=1)
    assert lookup_op_times(dense, store).times
    with pytest.raises(KeyError) as err:
        lookup_op_times(_with(dense, cuda_graph_impl="local"), store)
    assert "fixture-gpu" in str(err.value) and "cuda_graph_impl" in str(err.value)


def test_a_sweep_holds_the_sessions_graphs(qwen):
    """A sweep never chooses the graphs: every plan holds the session's; under per-layer graphs
    full recomputation is left out (refused by the rules), the other modes are tried."""
    from core.studies.sweep import SweepSpace, enumerate_plans
    s, _, _ = qwen
    g = _with(s, cuda_graph_impl="transformer_engine", cuda_graph_modules=TE_MOE)
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[1, 2],
                       micro_batch_sizes=[1], recompute=["none", "selective", "full"])
    plans = enumerate_plans(g, space)
    assert plans and all((pl.cuda_graph_impl, pl.cuda_graph_modules)
                         == ("transformer_engine", TE_MOE) for pl in plans)
    assert {pl.recompute for pl in plans} == {"none", "selective"}
    full = enumerate_plans(_with(s, cuda_graph_impl="full_iteration"), space)
    assert "full" in {pl.recompute for pl in full}


def test_the_calibrations_linearized_rows_follow_the_graphs(qwen):
    """The calibration's linearized row of a run with graphs predicts what the simulator gives
    (its kernel form, which holds every op's host time, gives way to the simulator's lookups)."""
    from core.accuracy.calibrate import linearize, predict_linearized
    s, store, _ = qwen
    base = analytic_bases()(s)
    for impl, mods in (("transformer_engine", TE_MOE), ("full_iteration", None)):
        g = _with(s, cuda_graph_impl=impl, cuda_graph_modules=mods)
        row = linearize(g, base, store.op_model)
        assert predict_linearized([row], store.op_model)[0] == pytest.approx(
            simulate(g, store).report.iteration_time_s, rel=1e-6)
