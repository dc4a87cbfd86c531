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
