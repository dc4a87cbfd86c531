"""What would make a plan fit (core.studies.fit_changes): the changed plans are valid, their
memory and time are the simulator's own, the fastest comes first, and the CLI prints them."""
from __future__ import annotations

import dataclasses
import json

import pytest

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.simulate import memory_verdict, session_profile, simulate, stage_memory
from core.studies import fit_changes as fc


def _session(model: str = "Llama 3 70B", **plan) -> Session:
    base = dict(tensor_parallel=8, pipeline_parallel=2, data_parallel=4, micro_batch_size=1,
                global_batch_size=128, schedule="1f1b", recompute="none", precision="bf16",
                sequence_parallel=True, zero_stage=0)
    return Session(MODEL_PRESETS[model], ParallelPlan(**{**base, **plan}),
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


def _verdict(s: Session) -> str:
    r = simulate(s).report
    return r.memory_verdict


def test_a_plan_that_fits_gets_nothing_to_change():
    s = _session(zero_stage=1)
    assert _verdict(s) == "fits"
    got = fc.fit_changes(s)
    assert got.verdict == "fits" and got.rows == [] and got.tried == 0


def test_each_change_is_valid_fits_and_has_the_simulators_memory_and_time():
    s = _session()  # Llama 3 70B, t8 p2 d4, no distributed optimizer: 109 GiB per GPU
    assert _verdict(s) == "does not fit"
    got = fc.fit_changes(s)
    assert got.verdict == "does not fit"
    assert got.iteration_time_s == pytest.approx(simulate(s).report.iteration_time_s, rel=1e-9)
    assert got.rows, "the distributed optimizer alone makes it fit"
    store = session_profile(s)
    for row in got.rows:
        changed = dataclasses.replace(s, plan=row.plan)
        assert validate(changed) == []
        assert row.changes == tuple((f.name, getattr(s.plan, f.name), getattr(row.plan, f.name))
                                    for f in dataclasses.fields(ParallelPlan)
                                    if getattr(s.plan, f.name) != getattr(row.plan, f.name))
        rep = simulate(changed).report
        assert rep.memory_verdict == row.verdict and row.verdict in ("fits", "tight")
        need, _, _ = memory_verdict(stage_memory(changed, store), float(store.memory_bytes))
        assert row.max_memory_per_gpu_bytes == need == rep.max_memory_per_gpu_bytes
        assert row.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-9)
        assert row.num_gpus == 64 and row.levers == 1
    # fits before tight, then the fastest first; ZeRO-1 is the cheapest lever here
    keys = [(r.verdict != "fits", r.iteration_time_s) for r in got.rows]
    assert keys == sorted(keys)
    assert got.rows[0].changes == (("zero_stage", 0, 1),)
    texts = [r.text for r in got.rows]
    assert "zero_stage 0 -> 1" in texts
    assert "pipeline_parallel 2 -> 4, data_parallel 4 -> 2" in texts


def test_two_changes_only_when_no_single_one_fits():
    # Llama 3 70B on 32 GPUs, t8 p2 d2 with micro-batch 2 and no recomputation: neither ZeRO
    # nor recomputation alone is enough
    s = _session(data_parallel=2, micro_batch_size=4, global_batch_size=64)
    assert _verdict(s) == "does not fit"
    for lever in fc.LEVERS:
        for new in lever(s.plan, s):
            if not validate(dataclasses.replace(s, plan=new)):
                assert _verdict(dataclasses.replace(s, plan=new)) == "does not fit"
    got = fc.fit_changes(s)
    assert got.rows and all(r.levers >= 2 and len(r.changes) >= r.levers for r in got.rows)
    assert any(r.levers == 2 and r.verdict == "fits" for r in got.rows)
    # a third change only where it grows a tight two-change plan into one that fits faster than
    # every two-change plan that fits
    two = min(r.iteration_time_s for r in got.rows if r.levers == 2 and r.verdict == "fits")
    assert all(r.iteration_time_s < two and r.verdict == "fits"
               for r in got.rows if r.levers == 3)
    assert all(r.num_gpus == s.plan.num_gpus for r in got.rows)
    for r in got.rows:
        assert _verdict(dataclasses.replace(s, plan=r.plan)) == r.verdict


def test_a_tight_plan_is_offered_only_plans_outside_the_margin():
    s = _session()
    margin = dataclasses.replace(s.cluster, memory_reserve_fraction=0.3)  # 56 GiB and up: tight
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, zero_stage=1), cluster=margin)
    assert _verdict(s) == "tight"
    got = fc.fit_changes(s)
    assert got.verdict == "tight" and got.rows
    assert all(r.verdict == "fits" for r in got.rows)


def test_the_pipeline_lever_sets_the_split_flags_megatron_needs():
    # Llama 3.1 405B: its 126 layers do not split over 4 or 8 stages, its 128 slots (with the
    # embedding and the loss counted as layers) do; 126 split over 2
    s = _session("Llama 3.1 405B", pipeline_parallel=2, data_parallel=4, global_batch_size=64)
    assert not s.plan.account_for_embedding_in_pipeline_split
    new = fc._pipeline(s.plan, s)[0]
    assert (new.pipeline_parallel, new.data_parallel) == (4, 2)
    assert new.account_for_embedding_in_pipeline_split and new.account_for_loss_in_pipeline_split
    assert validate(dataclasses.replace(s, plan=new)) == []
    s8 = _session("Llama 3.1 405B", pipeline_parallel=4, data_parallel=2, global_batch_size=64)
    new = fc._pipeline(s8.plan, s8)[0]
    assert new.pipeline_parallel == 8
    assert new.account_for_embedding_in_pipeline_split and new.account_for_loss_in_pipeline_split
    assert validate(dataclasses.replace(s8, plan=new)) == []


def test_a_parallel_size_moves_by_any_factor_and_only_megatron_plans_are_offered():
    """Llama 3 70B on 64 H100s at t8 p1 d8 without the distributed optimizer or recomputation
    (178 GiB): p=2 does not fit, p=4 d=2 does for a few per cent, far cheaper than ZeRO-3; a
    plan Megatron-LM runs is offered only plans it runs (it has no ZeRO-2)."""
    from core.io.megatron.export import megatron_refusal
    s = _session(pipeline_parallel=1, data_parallel=8, global_batch_size=512)
    assert megatron_refusal(s) is None
    got = fc.fit_changes(s)
    assert got.rows[0].changes == (("pipeline_parallel", 1, 4), ("data_parallel", 8, 2))
    assert got.rows[0].levers == 1 and got.rows[0].verdict == "fits"
    assert got.rows[0].iteration_time_s < 1.1 * got.iteration_time_s
    assert "Megatron-LM" in got.held
    for r in got.rows:
        assert megatron_refusal(dataclasses.replace(s, plan=r.plan)) is None
        assert r.plan.zero_stage != 2
    p2 = dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_parallel=2,
                                                         data_parallel=4))
    assert _verdict(p2) == "does not fit"


def test_cli_prints_the_changes_and_json_carries_them(tmp_path, capsys):
    from core.cli import main
    from core.io.session import save_session
    path = tmp_path / "oom.json"
    save_session(_session(), path)
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "To fit in memory" in out and "zero_stage 0 -> 1" in out
    assert main(["simulate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["fit_changes"]["changes"][0]
    assert first["changes"] == [{"field": "zero_stage", "from": 0, "to": 1}]
    assert first["verdict"] == "fits" and first["num_gpus"] == 64
    save_session(_session(zero_stage=1), path)
    assert main(["simulate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fit_changes"] is None


def test_no_change_makes_a_graph_simulate_refuses():
    # Llama 3 8B on 8 GPUs, B = 524288 at b = 8: 65,536 micro-batches simulate (1.7 M tasks);
    # at b = 1 the graph would have 13 M tasks, more than simulate holds (MAX_GRAPH_TASKS)
    from core.sim.simulate import graph_too_large
    s = _session("Llama 3 8B", tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                 micro_batch_size=8, global_batch_size=524288, sequence_parallel=False)
    assert not graph_too_large(s.model, s.plan)
    one = dataclasses.replace(s.plan, micro_batch_size=1)
    assert graph_too_large(s.model, one)
    got = fc.fit_changes(s)
    assert got.verdict == "does not fit" and got.rows
    for row in got.rows:
        assert not graph_too_large(s.model, row.plan), row.text


def test_a_new_pipeline_size_is_split_as_megatron_core_users_split_it():
    """61 layers: p 1 -> 2 with the loss's layer slot (62), p 1 -> 4 and 8 with uneven first and
    last stages (core.studies.sweep.space.uneven_splits); the session's own first / last stages
    belong to its own p and never travel to another."""
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 70B"], num_layers=61)
    s = Session(m, ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=8,
                                micro_batch_size=1, global_batch_size=128, recompute="none",
                                sequence_parallel=True, zero_stage=0),
                ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    got = {pl.pipeline_parallel: pl for pl in fc._pipeline(s.plan, s)}
    assert got[2].account_for_loss_in_pipeline_split and got[2].first_stage_layers is None
    assert (got[4].first_stage_layers, got[4].last_stage_layers) == (15, 14)
    assert (got[8].first_stage_layers, got[8].last_stage_layers) == (7, 6)
    for pl in got.values():
        assert validate(dataclasses.replace(s, plan=pl)) == []
    own = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, pipeline_parallel=4, data_parallel=2, first_stage_layers=16,
        last_stage_layers=13))
    assert validate(own) == []
    eight = fc._pipeline(own.plan, own)[0]
    assert (eight.pipeline_parallel, eight.first_stage_layers, eight.last_stage_layers) == (8, 7, 6)
    # a session with the loss's slot: kept at p = 2 (62 slots), off with the uneven stages of
    # p = 4 and 8 (Megatron-Core refuses both together)
    flagged = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, account_for_loss_in_pipeline_split=True))
    got = {pl.pipeline_parallel: pl for pl in fc._pipeline(flagged.plan, flagged)}
    assert got[2].account_for_loss_in_pipeline_split and got[2].first_stage_layers is None
    for p, split in ((4, (15, 14)), (8, (7, 6))):
        assert (got[p].first_stage_layers, got[p].last_stage_layers) == split
        assert not (got[p].account_for_loss_in_pipeline_split
                    or got[p].account_for_embedding_in_pipeline_split)
    for pl in got.values():
        assert validate(dataclasses.replace(flagged, plan=pl)) == []


def test_a_set_cancel_stops_the_search_before_its_next_plan():
    """``cancel`` (an event or a callable) is checked before each plan sized or timed: set from
    the start, nothing is sized; set after the k-th check, the search stops there."""
    import threading

    from core.studies.sweep.cancel import SweepCancelled
    s = _session()
    ev = threading.Event()
    ev.set()
    with pytest.raises(SweepCancelled):
        fc.fit_changes(s, cancel=ev)
    calls = []

    def after_five() -> bool:
        calls.append(1)
        return len(calls) > 5

    with pytest.raises(SweepCancelled):
        fc.fit_changes(s, cancel=after_five)
    assert len(calls) == 6  # the sixth check raised: no further plan was looked at


def test_one_change_more_on_a_tight_plan_is_offered_where_it_beats_the_plans_that_fit():
    """GPT-3 175B without recomputation (347 GiB): one change fits only with full recomputation
    (+33 % time) or tightly with micro-batch 1; micro-batch 1 and sequence parallelism fits
    (59.9 GiB) faster than both. The two-change rows are offered above the one-change row
    that fits, as they are faster; none slower than it is."""
    from core.io.session import load_any
    from tests.conftest import ROOT
    s = load_any(ROOT / "resources" / "examples" / "gpt3_175b.json")
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none"))
    got = fc.fit_changes(s)
    one = [r for r in got.rows if r.levers == 1 and r.verdict == "fits"]
    assert [r.text for r in one] == ["recompute none -> full"]
    two = [r for r in got.rows if r.levers == 2]
    assert two and all(r.verdict == "fits" and r.iteration_time_s < one[0].iteration_time_s
                       for r in two)
    assert got.rows[0].text == "micro_batch_size 6 -> 1, sequence_parallel false -> true"
    fits = [r for r in got.rows if r.verdict == "fits"]
    assert [r.iteration_time_s for r in fits] == sorted(r.iteration_time_s for r in fits)
    for r in got.rows[:2]:
        assert simulate(dataclasses.replace(s, plan=r.plan)).report.memory_verdict == r.verdict


# --------------------------------------------------------------------------- fewest GPUs

def _llama405_on_8() -> Session:
    """Llama 3.1 405B on one node of 8 H100s, t8 p1 d1 B16, no ZeRO, no recomputation (950 GiB
    per GPU): nothing a few changes away fits on 8 GPUs."""
    return _session("Llama 3.1 405B", pipeline_parallel=1, data_parallel=1, global_batch_size=16)


def _store_with_memory(session: Session, memory_bytes: float):
    """The session's profile as far as memory reads it (the FP8 peaks), with another GPU
    memory, bytes."""
    from types import SimpleNamespace
    return SimpleNamespace(memory_bytes=float(memory_bytes),
                           peak_flops=session_profile(session).peak_flops)


def test_the_model_states_bound_is_the_closed_form():
    """No fewer GPUs than N = ceil(P * 18 B / (capacity - fixed)) hold the model states: bf16
    weights (2 B), fp32 main gradients (4 B) and Adam's master weights and two moments (12 B),
    each held at least once over the N GPUs, beside each GPU's GEMM workspaces (64 MiB), CUDA
    context (0.75 GiB) and one NCCL communicator (16 channels x 2 peers x 4 MiB = 128 MiB)."""
    import math

    from core.model.counts import num_parameters
    gib = 2**30
    fixed = 64 * 2**20 + 0.75 * gib + 128 * 2**20
    s = _llama405_on_8()
    assert num_parameters(s.model) == 405_853_388_800
    assert fc.state_lower_bound_gpus(s, 80 * gib) == math.ceil(
        405_853_388_800 * 18 / (80 * gib - fixed)) == 87          # 86.05
    s70 = _session()
    assert num_parameters(s70.model) == 70_553_706_496
    assert fc.state_lower_bound_gpus(s70, 80 * gib) == 15          # 14.96
    # fp32: 4 + 4 + 8 bytes per parameter
    fp32 = dataclasses.replace(s70, plan=dataclasses.replace(s70.plan, precision="fp32"))
    assert fc.state_lower_bound_gpus(fp32, 80 * gib) == math.ceil(
        70_553_706_496 * 16 / (80 * gib - fixed)) == 14            # 13.30
    # a model whose states and one process fit on one GPU: 1 (no NCCL communicator there)
    small = Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
        global_batch_size=8), ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    assert fc.state_lower_bound_gpus(small, 80 * gib) == 1
    # fixed terms alone beyond the GPU: no count holds it
    assert fc.state_lower_bound_gpus(s, 0.9 * gib) is None


def test_fewest_gpus_for_405b_on_8_h100s_is_96_and_88_do_not_fit():
    """Nothing on 8 GPUs fits. Doubling, 128 is the first count that fits (t8 d16 with FSDP,
    which Megatron-LM runs without pipelining, full recomputation, micro-batch 1 at 63.1 GiB);
    every plan built on 64 needs more than 80 GiB (the model states alone need 87 GPUs). The
    whole hosts in between (72 and 80 below the bound, then 88, 96, ...) come next: 96 GPUs
    as t8 p12 with ZeRO-1 and 8 layers on the first and last stages (126 = 8 + 10 x 11 + 8)
    are tight (82.3 GiB, over 80 only with the allocator's cache), the simulator's own
    memory; 88 do not fit. Outside the margin the fewest is 120 (t8 p15, 68.6 GiB)."""
    from core.io.megatron.export import megatron_refusal
    s = _llama405_on_8()
    got = fc.fit_changes(s)
    assert got.verdict == "does not fit" and got.rows == []
    few = got.fewest_gpus
    assert few is not None and few.reason == ""
    assert (few.num_gpus, few.session_gpus, few.max_gpus, few.lower_bound_gpus,
            few.below_gpus, few.step_gpus) == (96, 8, 512, 87, 88, 8)
    pl = few.plan
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.context_parallel, pl.data_parallel,
            pl.micro_batch_size, pl.recompute, pl.zero_stage, pl.sequence_parallel,
            pl.first_stage_layers, pl.last_stage_layers) == (
        8, 12, 1, 1, 1, "full", 1, True, 8, 8)
    assert pl.num_gpus == 96 and pl.global_batch_size == 16
    changed = dataclasses.replace(s, plan=pl)
    assert validate(changed) == [] and megatron_refusal(changed) is None
    rep = simulate(changed).report
    assert few.verdict == rep.memory_verdict == "tight"
    assert few.max_memory_per_gpu_bytes == rep.max_memory_per_gpu_bytes
    assert few.max_memory_per_gpu_bytes / 2**30 == pytest.approx(82.28, abs=0.01)
    # the doubled count: 128 GPUs as t8 d16 with ZeRO-3 fit at 63.2 GiB (the logits freed
    # before the last layer's recomputation: the larger of the two, not both; 63.11 before the
    # embedding's int64 ids, 8 s, and the final norm's bf16 input and output, 2 s h / t with
    # sequence parallelism, were counted, with the allocator's 3.3 % reserve on them)
    store = session_profile(s)
    at128 = [p for p in fc._fewest_gpus_plans(s, 128, True, None)
             if (p.pipeline_parallel, p.data_parallel, p.zero_stage) == (1, 16, 3)]
    assert len(at128) == 1
    need, fits, _ = memory_verdict(stage_memory(dataclasses.replace(s, plan=at128[0]), store),
                                   float(store.memory_bytes))
    edges = (8 * 8192 + 2 * 8192 * 16384 * 2 / 8) * 1.033
    assert fits and need / 2**30 == pytest.approx(63.11 + edges / 2**30, abs=0.01)
    # below: 64 and 88 GPUs, and every plan built there does not fit
    for n in (64, 88):
        plans = fc._fewest_gpus_plans(s, n, True, None)
        assert len(plans) >= 1 and all(p.num_gpus == n for p in plans)
        for p in plans:
            need, fits, _ = memory_verdict(stage_memory(dataclasses.replace(s, plan=p), store),
                                           float(store.memory_bytes))
            assert not fits, p.label()
    assert few.text == ("96 GPUs (this plan has 8) with t=8 p=12 d=1 b=1 1f1b recompute=full "
                        "sp zero=1 first_layers=8 last_layers=8, tight: 82.3 of 80.0 GiB, fits "
                        "only without the allocator's cache; 88 do not; the model states alone "
                        "need at least 87 GPUs")
    assert few.counts_text == ("the plan's 8 times 1, 2, 4, ... up to 96, then every 8 in "
                               "between")
    roomy = fc.fewest_gpus(s, want=("fits",))
    assert (roomy.num_gpus, roomy.below_gpus, roomy.plan.pipeline_parallel) == (120, 112, 15)
    assert roomy.max_memory_per_gpu_bytes / 2**30 == pytest.approx(68.64, abs=0.01)


def test_fewest_gpus_step_is_whole_hosts_at_most_sixteen_counts():
    """Between 64 and 128 H100s every host of 8; between 2,048 and 4,096 every 128 (16 hosts,
    16 counts); below a host every GPU; GB200 compute trays of 4 inside a rack of 72."""
    h100 = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8)
    gb200 = ClusterConfig(gpu="GB200-NVL72", gpus_per_node=72)
    assert fc.fewest_gpus_step(h100, 64, 128) == 8
    assert fc.fewest_gpus_step(h100, 2048, 4096) == 128
    assert fc.fewest_gpus_step(h100, 2, 4) == 1
    assert fc.fewest_gpus_step(gb200, 36, 72) == 4
    assert fc.fewest_gpus_step(gb200, 144, 288) == 12
    # Llama 3 70B on 8 A100s: 16 GPUs (tight), no whole host between 8 and 16: none tried
    s = Session(MODEL_PRESETS["Llama 3 70B"], ParallelPlan(
        tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
        global_batch_size=1024), ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8))
    few = fc.fewest_gpus(s)
    assert (few.num_gpus, few.below_gpus, few.step_gpus, few.verdict) == (16, 8, 0, "tight")
    assert few.counts_text == "the plan's 8 times 1, 2, 4, ... up to 16"


def test_fewest_gpus_finds_a_pipeline_size_that_is_not_a_power_of_two():
    """GPT-3 175B (96 layers) on 8 A100s: doubling gives 64; in between, 40 GPUs as t8 p5 with
    18 layers on the first and last stages (96 = 18 + 3 x 20 + 18) are tight, 32 do not fit
    (the model states alone need 38)."""
    s = Session(MODEL_PRESETS["GPT-3 175B"], ParallelPlan(
        tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
        global_batch_size=1536), ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8))
    few = fc.fewest_gpus(s)
    pl = few.plan
    assert (few.num_gpus, few.below_gpus, few.lower_bound_gpus, few.verdict) == (40, 32, 38,
                                                                                "tight")
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel, pl.first_stage_layers,
            pl.last_stage_layers) == (8, 5, 1, 18, 18)
    assert simulate(dataclasses.replace(s, plan=pl)).report.memory_verdict == "tight"


def _dsv3_gb200(**plan) -> Session:
    """DeepSeek-V3 on GB200 NVL72 racks as ``vtrain import preset`` writes it (t=8 on 8 GPUs,
    full recomputation, B=8) without sequence parallelism, the distributed optimizer and the
    DDP overlaps (the preset's plan before 2026-12-05: Megatron-LM's defaults; with the DDP
    overlaps on, Megatron-LM also takes ZeRO-3 at ep > 1), with ``plan`` changed."""
    from core.io.start_plan import default_plan
    from core.plan.cluster import GPU_NVLINK_DOMAIN
    m = MODEL_PRESETS["DeepSeek-V3"]
    pl = dataclasses.replace(default_plan(m), sequence_parallel=False, zero_stage=0,
                             overlap_grad_reduce=False, overlap_param_gather=False,
                             global_batch_size=8)  # the preset's B before 2026-12-05
    pl = dataclasses.replace(pl, **plan)
    return Session(m, pl, ClusterConfig(gpu="GB200-NVL72",
                                        gpus_per_node=GPU_NVLINK_DOMAIN["GB200-NVL72"]))


def test_fewest_gpus_sizes_every_expert_parallel_size_and_zero_stage():
    """DeepSeek-V3 on 8 GB200s: on 64 GPUs the search sizes every expert-parallel size (the
    first version took the largest ep's plan only) at the highest ZeRO stage each passes:
    ep=1 with ZeRO-3 comes closest but needs 198.0 GiB (196.5 at cp=8), since FSDP gathers a whole MoE
    layer with its 256 experts (1.41 B parameters at t=8), and nothing there fits; 72 GPUs
    as t8 p9 with the embedding and loss slots (63 = 9 x 7) are tight. And from a ZeRO-3
    session on 64 GPUs, the plans outside the margin need pipelining, where Megatron-LM
    refuses ZeRO-3 and takes ZeRO-1: not "nothing fits up to 4,096" (the search tried only
    the session's ZeRO stage and above) but 128 doubled, and in between 88 (t8 p11, 4 layers
    on the first stage and 3 on the last, 153.2 GiB), 84 do not."""
    s = _dsv3_gb200()
    store = session_profile(s)
    at64 = fc._fewest_gpus_plans(s, 64, True, None)
    assert {p.expert_parallel for p in at64 if p.pipeline_parallel == 1} == {1, 2, 4, 8}
    z3 = [p for p in at64 if p.zero_stage == 3]
    # ep=1 only, at every context-parallel size (MLA and MTP with cp are modelled since
    # 2026-12-04): splitting the tokens barely moves a need set by the gathered MoE layer
    assert [(p.expert_parallel, p.context_parallel) for p in z3] == [(1, 1), (1, 2), (1, 4),
                                                                     (1, 8)]
    needs = []
    for p in z3:
        need, fits, _ = memory_verdict(stage_memory(dataclasses.replace(s, plan=p), store),
                                       float(store.memory_bytes))
        assert not fits
        needs.append(need / 2**30)
    assert needs[0] == pytest.approx(198.0, abs=0.05)
    assert needs == sorted(needs, reverse=True) and needs[-1] == pytest.approx(196.5, abs=0.05)
    few = fc.fewest_gpus(s)
    assert (few.num_gpus, few.verdict, few.below_gpus) == (72, "tight", 68)
    pl = few.plan
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel, pl.expert_parallel,
            pl.zero_stage, pl.account_for_embedding_in_pipeline_split,
            pl.account_for_loss_in_pipeline_split) == (8, 9, 1, 1, 1, True, True)
    assert few.max_memory_per_gpu_bytes / 2**30 == pytest.approx(183.4, abs=0.05)
    z3_session = _dsv3_gb200(data_parallel=8, zero_stage=3, sequence_parallel=True)
    assert _verdict(z3_session) == "does not fit"
    few = fc.fewest_gpus(z3_session, want=("fits",))
    assert few is not None and (few.num_gpus, few.verdict, few.below_gpus) == (88, "fits", 84)
    assert few.plan.zero_stage == 1 and few.plan.pipeline_parallel == 11
    assert few.max_memory_per_gpu_bytes / 2**30 == pytest.approx(153.2, abs=0.05)
    assert few.max_memory_per_gpu_bytes == simulate(
        dataclasses.replace(z3_session, plan=few.plan)).report.max_memory_per_gpu_bytes


def test_fewest_gpus_moves_a_step_when_the_gpu_is_one_byte_smaller():
    """At a GPU memory equal to the least that one plan of 96 GPUs requires (the need without
    the allocator's reserve, what decides the fit) 96 GPUs fit; one byte less and no plan of
    96 does, so the answer is the next host: 104."""
    s = _llama405_on_8()
    plans = fc._fewest_gpus_plans(s, 96, True, None)
    required = min(max(m.required_bytes for m in stage_memory(dataclasses.replace(s, plan=p)))
                   for p in plans)
    at = fc.fewest_gpus(s, _store_with_memory(s, required))
    assert at.num_gpus == 96 and at.verdict == "tight"  # within the 10 % margin
    below = fc.fewest_gpus(s, _store_with_memory(s, required - 1))
    assert (below.num_gpus, below.below_gpus) == (104, 96)
    assert below.verdict in ("fits", "tight") and "; 96 do not;" in below.text
    # outside the margin only (a tight plan's question): a larger count
    roomy = fc.fewest_gpus(s, _store_with_memory(s, required), want=("fits",))
    assert roomy.num_gpus == 120 and roomy.verdict == "fits"


def test_fewest_gpus_says_by_name_when_even_the_cap_does_not_fit():
    # on 1 GPU the cap is 64 GPUs, below the 87 the model states alone need: nothing is sized
    s = _session("Llama 3.1 405B", tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                 global_batch_size=16, sequence_parallel=False)
    few = fc.fit_changes(s).fewest_gpus
    assert few.num_gpus is None and few.plan is None and few.tried == 0
    assert (few.max_gpus, few.lower_bound_gpus) == (64, 87)
    assert few.reason == few.text == ("nothing fits on up to 64 GPUs of H100-SXM5-80GB (64 times this plan's 1): "
                                      "the model states alone need at least 87 GPUs")
    # a 16 GiB GPU: the bound (452) is under the cap (512) but no plan of 512 GPUs fits
    s8 = _llama405_on_8()
    few = fc.fewest_gpus(s8, _store_with_memory(s8, 16 * 2**30))
    assert few.num_gpus is None and few.lower_bound_gpus == 452 and few.max_gpus == 512
    assert few.tried > 0
    assert few.reason.startswith("nothing fits in memory on up to 512 GPUs of H100-SXM5-80GB "
                                 "(64 times this plan's 8) with the model states sharded")
    # the cap is at most 2**17 GPUs
    big = _session("Llama 3.1 405B", pipeline_parallel=1, data_parallel=4096,
                   global_batch_size=4096)
    few = fc.fewest_gpus(big, _store_with_memory(big, 1.0 * 2**30))
    assert few.max_gpus == 2**17 and few.num_gpus is None


def test_fewest_gpus_only_when_nothing_on_the_plans_gpus_fits_and_it_is_cancellable(
        monkeypatch):
    from core.studies.sweep.cancel import SweepCancelled
    assert fc.fit_changes(_session()).fewest_gpus is None  # ZeRO-1 on 64 GPUs fits
    s = _llama405_on_8()
    with pytest.raises(SweepCancelled):
        fc.fewest_gpus(s, cancel=lambda: True)
    calls = []

    def after(n: int):
        def cancel() -> bool:
            calls.append(1)
            return len(calls) > n
        return cancel

    assert fc.fewest_gpus(s, cancel=after(10**6)).num_gpus == 96
    total = len(calls)  # checked before each plan built and each sized
    assert total > 10
    calls.clear()
    with pytest.raises(SweepCancelled):
        fc.fewest_gpus(s, cancel=after(total - 1))
    assert len(calls) == total
    # fit_changes hands its cancel on
    seen = []
    real = fc.fewest_gpus
    monkeypatch.setattr(fc, "fewest_gpus",
                        lambda *a, **k: seen.append(k["cancel"]) or real(*a, **k))
    ev = after(10**6)
    assert fc.fit_changes(s, cancel=ev).fewest_gpus.num_gpus == 96
    assert seen == [ev]


def test_cli_prints_the_fewest_gpus_and_json_carries_them(tmp_path, capsys):
    from core.cli import main
    from core.io.session import save_session
    path = tmp_path / "405b.json"
    save_session(_llama405_on_8(), path)
    assert main(["simulate", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("Fewest GPUs that fit: 96 GPUs (this plan has 8) with t=8 p=12 d=1 b=1 1f1b "
            "recompute=full sp zero=1 first_layers=8 last_layers=8, tight: 82.3 of 80.0 GiB, "
            "fits only without the allocator's cache; 88 do not; the model states alone need "
            "at least 87 GPUs (counts tried: the plan's 8 times 1, 2, 4, ... up to 96, then "
            "every 8 in between; t and cp doubled, every p that divides the count; memory "
            "only, not timed)") in out
    assert main(["simulate", str(path), "--json"]) == 0
    few = json.loads(capsys.readouterr().out)["fit_changes"]["fewest_gpus"]
    assert (few["num_gpus"], few["tensor_parallel"], few["pipeline_parallel"],
            few["data_parallel"], few["micro_batch_size"], few["recompute"],
            few["zero_stage"], few["verdict"]) == (96, 8, 12, 1, 1, "full", 1, "tight")
    assert few["max_memory_per_gpu_gib"] == pytest.approx(82.28, abs=0.01)
    assert (few["lower_bound_gpus"], few["max_gpus"], few["reason"], few["below_gpus"],
            few["step_gpus"]) == (87, 512, "", 88, 8)
    save_session(_session(), path)  # something on its 64 GPUs fits: not looked for
    assert main(["simulate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fit_changes"]["fewest_gpus"] is None
