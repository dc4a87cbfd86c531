"""Profiling with torch (core/profiling): measured stores the simulator reads, interrupted runs,
collective curves over gloo. Skipped when torch is not installed."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.model.ops import ALL_OPS, OP_KEYS, OPTIMIZER_OP, full_op_key
from core.store.profile_store import ProfileStore
from tests.conftest import ROOT

TINY = {"s": 16, "h": 32, "a": 2, "vocab_size": 200, "t": [1, 2], "b": [1, 2], "layers": [1, 2]}
FAST = {"warmup": 1, "min_repeats": 2, "max_repeats": 3, "target_s": 0.005}


def _torch():
    return pytest.importorskip("torch", reason="profiling needs torch (pip install torch==2.13.0)")


def _session(store_path, t=1, b=2, num_layers=2, recompute="none") -> Session:
    return Session(
        model=ModelConfig("tiny", num_layers, 32, 2, None, 16, 200),
        plan=ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=1,
                          micro_batch_size=b, global_batch_size=4 * b, schedule="1f1b",
                          recompute=recompute, precision="fp32"),
        cluster=ClusterConfig(gpu="local-cpu", gpus_per_node=2, intra_node_bandwidth_gbytes_per_s=10.0,
                              profile_path=str(store_path)),
        cost=CostConfig(1.0, 1e9))


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    _torch()
    from core.profiling import run_profile, shape_from_dict
    out = tmp_path_factory.mktemp("prof") / "tiny.h5"
    events = []
    result = run_profile(out, "cpu", shape_from_dict(TINY), threads=1, progress=events.append,
                         timing=FAST)
    return out, result, events


def test_tiny_profile_run_writes_a_store_the_simulator_reads(tiny_store):
    from core.sim.simulate import simulate
    out, result, events = tiny_store
    assert not result.cancelled and result.groups_done == result.groups_total == 2
    store = ProfileStore.open(out)
    p = store.provenance
    assert p["method"] == "measured" and p["torch_version"] and p["date"] and p["threads"] == 1
    assert store.device_name and store.peak_flops["fp32"] > 0 and store.memory_bytes > 0
    assert store.memory_bandwidth_bytes_per_s > 0
    assert events[-1].done == events[-1].total and events[-1].groups_saved == 2
    for t in (1, 2):
        for recompute in ("none", "full"):
            r = simulate(_session(out, t=t, recompute=recompute)).report
            assert r.iteration_time_s > 0
            assert not [w for w in r.warnings if "not in the" in w or "extrapolated" in w], r.warnings
            assert r.profile["method"] == "measured" and r.profile["torch_version"]
            assert r.profile["device"] == store.device_name


def test_keys_cover_every_shape_parameter(tiny_store):
    out, _, _ = tiny_store
    store = ProfileStore.open(out)
    assert set(store.op_names()) == set(ALL_OPS)
    for op in ALL_OPS:
        keys, times, axis = store.op_table(op)
        assert tuple(keys) == OP_KEYS[op] or set(keys) == set(OP_KEYS[op])
        assert axis == ("n" if op == OPTIMIZER_OP else "b")
        assert np.all(times > 0)
        if op != OPTIMIZER_OP:
            assert sorted(set(keys["t"].tolist())) == [1, 2]
            assert sorted(set(keys["b"].tolist())) == [1, 2]
            assert set(keys["dtype"].tolist()) == {"fp32"}
    # V is Megatron's padded vocabulary per t: 200 -> 256 (t=1), 256 (t=2)
    keys, _, _ = store.op_table("output_fwd")
    assert set(keys["V"].tolist()) == {256}
    keys, _, _ = store.op_table(OPTIMIZER_OP)
    assert len(keys["n"]) == 4  # layers {1, 2} x t {1, 2}


def test_exact_shape_lookup_equals_table(tiny_store):
    from core.sim.op_times import lookup_op_times
    out, _, _ = tiny_store
    store = ProfileStore.open(out)
    ops = lookup_op_times(_session(out, t=2, b=1), store)
    # the store's key columns include the model family's, GPT's values for a profiled layer
    key = full_op_key("attention_fwd", dict(b=1, s=16, h=32, a=2, f=128, t=2, V=256, dtype="fp32"))
    assert (key["g"], key["norm"], key["attn"]) == (2, "layernorm", "unfused")
    assert ops.times["attention_fwd"] == store.op_time("attention_fwd", key).time_s
    assert not ops.warnings


def test_unprofiled_shape_falls_back_with_warning(tiny_store):
    from core.sim.simulate import simulate
    out, _, _ = tiny_store
    s = _session(out)
    s.model.hidden_size, s.model.num_attention_heads = 64, 4
    r = simulate(s).report
    assert any("analytic model used" in w for w in r.warnings)
    s = _session(out, b=8)
    r = simulate(s).report
    assert any("extrapolated" in w for w in r.warnings)


def test_cancel_and_interrupt_leave_a_readable_store(tmp_path):
    _torch()
    from core.profiling import run_profile, shape_from_dict
    shapes = shape_from_dict(TINY)
    # Ctrl-C (KeyboardInterrupt) raised from the progress callback after the first group is saved
    out = tmp_path / "interrupted.h5"

    def interrupt(p):
        if p.groups_saved == 1 and "b=" in p.message:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_profile(out, "cpu", shapes, threads=1, progress=interrupt, timing=FAST)
    store = ProfileStore.open(out)
    keys, _, _ = store.op_table("attention_fwd")
    assert set(keys["t"].tolist()) == {1}  # the finished group only
    assert len(store.provenance["shapes"]) == 1
    # a cancel token set mid-way: returns cancelled, the file keeps what was saved
    out2 = tmp_path / "cancelled.h5"
    cancel = threading.Event()

    def cancel_after_first_step(p):
        if p.done >= 2:
            cancel.set()
    result = run_profile(out2, "cpu", shapes, threads=1, progress=cancel_after_first_step,
                         cancel=cancel, timing=FAST)
    assert result.cancelled and result.groups_done == 0
    store = ProfileStore.open(out2)
    assert store.provenance["method"] == "measured" and store.op_names() == []


def test_interrupt_before_any_group_leaves_device_only_store(tmp_path, monkeypatch):
    _torch()
    from core.profiling import run_profile, runner, shape_from_dict

    def boom(self, b, check=lambda: None):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner.GroupBench, "time_ops", boom)
    out = tmp_path / "s.h5"
    with pytest.raises(KeyboardInterrupt):
        run_profile(out, "cpu", shape_from_dict(TINY), threads=1, timing=FAST)
    assert ProfileStore.open(out).op_names() == []


def test_merge_keeps_rows_and_collectives(tmp_path):
    _torch()
    from core.profiling import run_profile, shape_from_dict
    out = tmp_path / "m.h5"
    run_profile(out, "cpu", shape_from_dict({**TINY, "t": 1, "b": 1, "layers": [1]}), threads=1,
                timing=FAST)
    st = ProfileStore.open(out)
    st.add_collective("all_reduce", 2, np.array([1e3, 1e6]), np.array([1e-5, 1e-3]))
    st.save(out)
    run_profile(out, "cpu", shape_from_dict({**TINY, "t": 1, "b": 2, "layers": [1]}), threads=1,
                timing=FAST)
    st = ProfileStore.open(out)
    keys, _, _ = st.op_table("mlp_bwd")
    assert sorted(keys["b"].tolist()) == [1, 2]
    assert st.collective_kinds() == {"all_reduce": [2]}


def test_layer_shard_shapes_follow_megatron():
    torch = _torch()
    from core.profiling.layers import AttentionShard, GPTModel, MLPShard
    from core.sim.op_times import params_per_gpu
    attn, mlp = AttentionShard(64, 4, 2, 8), MLPShard(64, 256, 2)
    assert attn.qkv_weight.shape == (96, 64) and attn.proj_weight.shape == (64, 32)
    assert mlp.fc1_weight.shape == (128, 64) and mlp.fc2_weight.shape == (64, 128)
    x = torch.randn(8, 3, 64)  # (s, b, h)
    assert attn(x).shape == (8, 3, 64)
    assert mlp(x, attn(x), attn.proj_bias).shape == (8, 3, 64)
    model = GPTModel(2, 32, 2, 128, 16, 256)
    n = sum(p.numel() for p in model.parameters())
    assert n == params_per_gpu(_session("unused"))[0]  # tied embedding counted once
    ids = torch.randint(0, 256, (2, 16))
    loss = model(ids, ids)
    loss.backward()
    assert loss.item() > 0 and model.layers[0].attention.qkv_weight.grad is not None


def test_shapes_file_and_sessions(tmp_path):
    from core.profiling.shapes import ShapeFileError, load_shapes
    from core.io.session import save_session
    save_session(_session("x.h5", t=2, b=4, num_layers=2), tmp_path / "sess.json")
    f = tmp_path / "shapes.json"
    f.write_text('[{"s": 16, "h": 32, "a": 2, "vocab_size": 200, "t": [1, 2], "b": [1]}, '
                 '"sess.json"]')
    groups = load_shapes(f)
    assert [(g.t, g.b, g.V) for g in groups] == [(1, (1,), 256), (2, (1, 4), 256)]
    f.write_text('[{"s": 16, "h": 30, "a": 4}]')
    with pytest.raises(ShapeFileError, match="item 0.*not divisible"):
        load_shapes(f)


def test_cli_and_core_do_not_import_torch():
    code = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] == 'torch':
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import core.cli, core.store.profiles, core.cli.profile, core.profiling
core.cli.build_parser().parse_args(['profile', 'run', '--out', 'x.h5'])
ok, why = core.profiling.torch_status()
assert not ok or 'blocked' in why, why
print('ok')
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_list_stores_shows_provenance(tiny_store, tmp_path):
    from core.store.profiles import list_stores
    out, _, _ = tiny_store
    (tmp_path / "broken.h5").write_text("not hdf5")
    infos = list_stores([out.parent, tmp_path])
    mine = next(i for i in infos if i.path == out)
    assert mine.method == "measured" and mine.torch_version and mine.threads == 1
    assert mine.num_op_rows["attention_fwd"] == 4 and not mine.shipped
    broken = next(i for i in infos if i.path.name == "broken.h5")
    assert broken.error
    shipped = list_stores()
    assert any(i.shipped and i.method == "calibrated" for i in shipped)


def test_cli_profile_run_and_show(tmp_path, capsys):
    _torch()
    from core.cli import main
    shapes = tmp_path / "shapes.json"
    shapes.write_text('[{"s": 16, "h": 32, "a": 2, "vocab_size": 128, "b": [1], "layers": [1]}]')
    out = tmp_path / "cli.h5"
    assert main(["profile", "run", "--device", "cpu", "--out", str(out), "--shapes", str(shapes),
                 "--threads", "1"]) == 0
    assert ProfileStore.open(out).op_names()
    assert main(["profile", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "measured" in text and "torch_version" in text
    assert main(["profile", "run", "--device", "tpu", "--out", str(out)]) == 2
    assert main(["profile", "collectives", "--world-size", "1"]) == 2


def test_gloo_collectives_world_size_2_stored_positive(tmp_path):
    _torch()
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo not available in this torch build")
    from core.profiling import run_collectives
    out = tmp_path / "coll.h5"
    # Real timings on a shared machine: neighbouring sizes are not reliably ordered (CI once
    # measured all_gather at 1 MiB slower than at 8 MiB, scheduler wake-up latency), so only the
    # 32x span between the smallest and the largest size is asserted to cost more. The minimum
    # over repetitions: other processes only add time.
    sizes = [1 << 20, 1 << 23, 1 << 25]
    # A curve the store refuses because its time fell with the size (another process took the
    # CPU in the middle sizes; the full suite once had send_recv so) is measured again, up to
    # twice: the store's refusal is right, the test wants the curves of a quiet moment
    for attempt in range(3):
        result = run_collectives(2, "gloo", out=out, sizes=sizes,
                                 timing={"warmup": 2, "min_repeats": 5, "max_repeats": 15,
                                         "target_s": 0.02, "statistic": "min"})
        noisy = [k for k, why in result.rejected.items()
                 if "falls as the size grows" in why]
        if not noisy:
            break
    assert set(result.curves) | set(result.skipped) | set(result.rejected) == {
        "all_reduce", "all_gather", "reduce_scatter", "send_recv"}
    assert "all_reduce" in result.curves and "send_recv" in result.curves
    store = ProfileStore.open(out)
    for kind in result.curves:
        x, t = store.collective_curve(kind, 2)
        assert x.tolist() == sizes
        assert t.tolist() == pytest.approx(result.curves[kind][1], rel=1e-12)  # round trip
        assert np.all(np.isfinite(t)) and np.all(t > 0), (kind, t)
        assert t[-1] > t[0], (kind, t)
    assert store.provenance["collectives"]["all_reduce/2"]["backend"] == "gloo"
    assert store.collective_time("all_reduce", 2, 1 << 22).source == "table"


def test_a_curve_the_store_refuses_is_reported_and_the_other_kinds_go_on(tmp_path):
    """A measured curve whose time falls as the size grows (another process competing for the
    CPU) is not stored and is named with why; a later kind is still measured and saved (the run
    stopped at the first such curve, losing the kinds after it)."""
    _torch()
    from core.profiling.collectives import _CollectiveRun
    store = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    out = tmp_path / "coll.h5"
    run = _CollectiveRun(2, "gloo", 6, 3, store, out, None, None)
    run.on_result(("curve", "all_reduce", [1024, 2048, 4096], [1e-3, 5e-4, 2e-3]))
    assert run.curves == {} and list(run.rejected) == ["all_reduce"]
    assert "time_s falls as the size grows" in run.rejected["all_reduce"]
    run.on_result(("curve", "all_gather", [1024, 2048, 4096], [1e-4, 2e-4, 4e-4]))
    assert list(run.curves) == ["all_gather"]
    x, t = ProfileStore.open(out).collective_curve("all_gather", 2)
    assert x.tolist() == [1024, 2048, 4096] and t.tolist() == [1e-4, 2e-4, 4e-4]


def test_profile_show_prints_peaks_and_calibration_provenance(capsys):
    from core.cli import main
    assert main(["profile", "show", str(ROOT / "profiles" / "A100-SXM4-80GB.h5")]) == 0
    out = capsys.readouterr().out
    assert "peak GFLOP/s: bf16 312,000" in out
    assert "parameters: gemm_efficiency_max=" in out
    assert "measured_multi_node.csv: n=65, mape_percent=" in out


def test_session_shapes_follow_the_stages_layer_counts():
    """The profiled layer counts are the stages' own: an even split, uneven first / last stages,
    a custom pipeline layout (its largest and smallest stage)."""
    import dataclasses

    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.profiling import shapes_from_session
    m = MODEL_PRESETS["GPT-3 1.3B"]  # 24 layers
    even = ParallelPlan(tensor_parallel=1, pipeline_parallel=4, data_parallel=1,
                        micro_batch_size=1, global_batch_size=8)
    assert shapes_from_session(Session(m, even)).layers == (6,)
    uneven = dataclasses.replace(even, first_stage_layers=3, last_stage_layers=9)
    assert shapes_from_session(Session(m, uneven)).layers == (3, 6, 9)
    layout = dataclasses.replace(even, pipeline_model_parallel_layout="Et*2|t*10|t*10|t*2L")
    assert shapes_from_session(Session(m, layout)).layers == (2, 10)


def test_provenance_lines_name_a_short_list_and_count_a_long_one():
    """`vtrain profile show`: a calibrated store's fitted parameters (a short list of names) print
    by name, so a reader sees whether the flex all-to-all efficiency was fitted; a long list or
    one of records prints as its length."""
    from core.cli.profile import provenance_lines
    lines = provenance_lines({"fitted_parameters": ["gemm_efficiency_max",
                                                    "flex_all_to_all_efficiency"],
                              "sizes": list(range(40)), "rows": [{"a": 1}], "none": []})
    assert lines == ["fitted_parameters: gemm_efficiency_max, flex_all_to_all_efficiency",
                     "sizes: (40 entries)", "rows: (1 entry)", "none: (0 entries)"]
