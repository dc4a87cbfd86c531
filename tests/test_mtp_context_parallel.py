"""Multi-token prediction with context parallelism (Megatron-Core 0.16.1).

Under cp > 1 each MTP layer rolls four tensors per micro-batch with ``roll_tensor(...,
cp_group)``: the input ids and position ids (``MultiTokenPredictionLayer._get_embeddings``,
``transformer/multi_token_prediction.py`` lines 705, 712), the labels and the loss mask
(``GPTModel._postprocess``, ``models/gpt/gpt_model.py`` lines 626, 633). Each call sends one
``(b,)`` boundary column per load-balanced chunk to a neighbouring cp rank and waits for the
exchange (``roll_tensor``, line 127): charged as one cp ring send/recv step of ``b`` elements
per call (``cp_mtp_roll``), blocking the MTP layer's forward; nothing in the backward.
"""

from __future__ import annotations

import dataclasses

import pytest

from core.cli import main
from core.io.session import save_session
from core.model import model_math as mm
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim import stage_comm
from core.sim.comm import INTER_NODE_LATENCY_S, CommModel
from core.sim.simulate import graph_size_estimate, session_profile, simulate
from core.sim.stages import stage_times
from core.sim.template_builder import stage_templates
from core.sim.templates import SOURCE_INDEX, stage_structure

#: a DeepSeek-V3 of 4 layers (the first dense, the others MoE) at 16K tokens, its one MTP layer
V3 = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], num_layers=4, moe_first_dense_layers=1,
                         seq_length=16384)


def _session(cp: int = 2, t: int = 2, b: int = 1, model=V3, **kw) -> Session:
    plan = dict(tensor_parallel=t, pipeline_parallel=1, data_parallel=2, micro_batch_size=b,
                global_batch_size=4 * b * 2, recompute="selective",
                recompute_modules="core_attn", sequence_parallel=t > 1, expert_parallel=8,
                expert_tensor_parallel=1, context_parallel=cp, cp_comm_type="p2p")
    plan.update(kw)
    return Session(model=model, plan=ParallelPlan(**plan),
                   cluster=ClusterConfig(gpu="H100-SXM5-80GB"))


def test_four_roll_calls_per_mtp_layer_of_b_elements():
    # input ids, position ids, labels: int64; loss mask: float32 (GPTDataset.__getitem__)
    assert mm.mtp_cp_roll_bytes(1) == (8.0, 8.0, 8.0, 4.0)
    assert mm.mtp_cp_roll_bytes(3) == (24.0, 24.0, 24.0, 12.0)


@pytest.mark.parametrize("cp,n_mtp", [(2, 1), (4, 2), (1, 1)])
def test_one_roll_task_per_mtp_layer_forward_none_in_backward(cp, n_mtp):
    s = _session(cp=cp, model=dataclasses.replace(V3, mtp_num_layers=n_mtp))
    fwd, bwd, wgd = stage_templates(stage_structure(s, 0))
    src = SOURCE_INDEX["cp_mtp_roll"]
    assert int((fwd.src == src).sum()) == (n_mtp if cp > 1 else 0)
    assert int((bwd.src == src).sum()) == 0 and int((wgd.src == src).sum()) == 0
    # no MTP layer, no roll
    fwd0 = stage_templates(stage_structure(_session(cp=cp, model=dataclasses.replace(
        V3, mtp_num_layers=0)), 0))[0]
    assert int((fwd0.src == src).sum()) == 0


@pytest.mark.parametrize("b", [1, 4])
def test_roll_seconds_are_the_cp_send_recv_of_each_call(b):
    s = _session(b=b)
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    expected = sum(comm.cp_send_recv(n) for n in (8.0 * b, 8.0 * b, 8.0 * b, 4.0 * b))
    assert expected > 0
    times = stage_times(s, store).op_times_s
    assert times["cp_mtp_roll"] == expected
    sc = stage_comm.StageComm(s, store, None, [], ())
    assert sc.cp_mtp_roll() == expected


def test_roll_across_nodes_is_latency_plus_bytes_at_the_gpus_network_share():
    s = _session(t=8)  # t * cp = 16 ranks: each cp group spans two 8-GPU nodes
    s.cluster.inter_node_bandwidth_gbits_per_s = 400.0
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    assert not comm.cp_ring_in_node()
    bw = s.cluster.inter_node_bandwidth_gbits_per_s * 1e9 / 8 / s.cluster.gpus_per_node
    bw *= comm.p2p_efficiency
    expected = sum(INTER_NODE_LATENCY_S + n / bw for n in (8.0, 8.0, 8.0, 4.0))
    assert stage_times(s, store).op_times_s["cp_mtp_roll"] == pytest.approx(expected, rel=1e-12)


def test_zero_at_cp_1_and_without_mtp():
    s = _session(cp=1)
    store = session_profile(s)
    assert "cp_mtp_roll" not in stage_times(s, store).op_times_s
    assert stage_comm.StageComm(s, store, None, [], ()).cp_mtp_roll() == 0.0
    s0 = _session(model=dataclasses.replace(V3, mtp_num_layers=0))
    assert "cp_mtp_roll" not in stage_times(s0, session_profile(s0)).op_times_s


def test_mtp_with_cp_validates_and_the_roll_lies_on_the_critical_path(monkeypatch):
    """p = 1: every micro-batch's forward runs on the one stage's compute stream, so the
    iteration is longer by m rolls, all of it counted as exposed cp communication (the ring of
    this plan hides itself entirely)."""
    s = _session()
    assert validate(s) == []
    r = simulate(s)
    assert len(r.graph.duration_s) <= graph_size_estimate(s)
    roll = stage_times(s, session_profile(s)).op_times_s["cp_mtp_roll"]
    m = s.plan.num_microbatches
    monkeypatch.setattr(stage_comm.StageComm, "cp_mtp_roll", lambda self: 0.0)
    r0 = simulate(s)
    assert r0.report.cp_comm_s == 0.0
    assert r.report.cp_comm_s == pytest.approx(m * roll, rel=1e-9)
    added = r.report.iteration_time_s - r0.report.iteration_time_s
    assert added == pytest.approx(m * roll, rel=1e-6)


def test_cli_simulates_deepseek_v3_with_mtp_and_cp(tmp_path, capsys):
    path = tmp_path / "v3_mtp_cp2.json"
    save_session(_session(cp=2), path)
    assert main(["simulate", str(path)]) == 0
    assert main(["simulate", str(path), "--set", "plan.context_parallel=4",
                 "--set", "plan.data_parallel=1"]) == 0
