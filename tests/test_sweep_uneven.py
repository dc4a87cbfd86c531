"""Uneven pipeline splits in the sweep (Megatron-Core's --decoder-first/last-pipeline-num-layers):
where p splits the layers unevenly, ceil(L/p) layers on each middle stage and the rest on the
first and last; and the note on the best plans Megatron-LM cannot run."""
from __future__ import annotations

import dataclasses

import pytest

from core.io.megatron.export import megatron_blockers
from core.io.session import load_any
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.simulate import simulate
from core.studies.sweep import SweepSpace, run_sweep
from core.plan.layout import uneven_splits
from core.studies.sweep.space import enumerate_plans
from core.studies.sweep.splits import pipeline_splits
from tests.conftest import EXAMPLES


def test_uneven_splits_closed_form():
    # DeepSeek-V3's 61 layers: 8 stages of ceil(61/8) = 8 in the middle, 13 left for the ends
    assert uneven_splits(61, 8) == [(7, 6), (8, 5)]
    assert uneven_splits(61, 16) == [(3, 2), (4, 1)]   # 14 x 4 = 56 in the middle
    assert uneven_splits(61, 4) == [(15, 14), (16, 13)]
    assert uneven_splits(61, 32) == []                  # 30 x 2 = 60: one layer for two ends
    assert uneven_splits(24, 7) == [(2, 2)]             # (4, 0) leaves the last stage none
    assert uneven_splits(61, 2) == []                   # no middle stage
    for L, p in ((61, 8), (61, 16), (24, 7), (126, 16)):
        for first, last in uneven_splits(L, p):
            assert first + last + (p - 2) * -(-L // p) == L


def _dsv3(**plan) -> Session:
    base = dict(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                global_batch_size=1024, recompute="full", precision="bf16",
                cross_entropy_loss_fusion=False, cross_entropy_fusion_impl="native")
    return Session(MODEL_PRESETS["DeepSeek-V3"], ParallelPlan(**{**base, **plan}),
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


def test_a_custom_layout_keeps_the_even_splits_only():
    s = _dsv3()
    assert set(pipeline_splits(s, [4, 8, 16])) == {4, 8, 16}
    layout = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, pipeline_parallel=16, pipeline_model_parallel_layout="Et|(tt|)*30mL"))
    assert pipeline_splits(layout, [4, 8, 16]) == {}     # the layout places every layer
    plans = enumerate_plans(layout, SweepSpace(max_gpus=1024, micro_batch_sizes=(1,),
                                               recompute=("full",), schedules=("1f1b",),
                                               expert_parallel=(8,), zero_stages=(1,)))
    assert plans and all(pl.first_stage_layers is None and pl.last_stage_layers is None
                         and pl.pipeline_model_parallel_layout == "Et|(tt|)*30mL"
                         for pl in plans)
    own = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, pipeline_parallel=8, data_parallel=1, first_stage_layers=9,
        last_stage_layers=4, tensor_parallel=1, expert_parallel=8))
    assert pipeline_splits(own, [8])[8] == [(9, 4)]      # the session's own at its p


def _flags(pl: ParallelPlan) -> tuple:
    return pl.account_for_embedding_in_pipeline_split, pl.account_for_loss_in_pipeline_split


def test_a_session_slot_flag_is_turned_off_where_no_slot_count_splits():
    """A session with the loss's slot (Megatron-Bridge's recipes set it) had no plan at p = 4,
    8, 16 for 61 layers (62 or 63 slots split over none of them; Megatron-Core refuses the
    flags with uneven stages): those plans now have the flags off and uneven first / last
    stages, as a Megatron-Core user runs them; where the slots split (p = 2: 62, p = 3: 63
    with both flags) the plans keep the flags and get no uneven stages."""
    s = _dsv3(account_for_loss_in_pipeline_split=True)
    assert pipeline_splits(s, [2, 3, 4, 8, 16]) == {4: [(15, 14), (16, 13)],
                                                    8: [(7, 6), (8, 5)],
                                                    16: [(3, 2), (4, 1)]}
    space = SweepSpace(num_gpus=(128, 192), micro_batch_sizes=(1,), recompute=("full",),
                       expert_parallel=(8,), schedules=("1f1b", "interleaved"),
                       zero_stages=(1,), cross_entropy_fusion=("native",))
    plans = enumerate_plans(s, space)
    got: dict[int, set] = {}
    for pl in plans:
        got.setdefault(pl.pipeline_parallel, set()).add(
            (*_flags(pl), pl.first_stage_layers, pl.last_stage_layers))
    assert got[2] == {(False, True, None, None)}                  # 62 slots over 2
    assert got[3] == {(True, True, None, None)}                   # 63 slots over 3
    assert got[8] == {(False, False, 7, 6), (False, False, 8, 5)}
    assert got[16] == {(False, False, 3, 2), (False, False, 4, 1)}
    for p in (8, 16):
        pl = next(pl for pl in plans if pl.pipeline_parallel == p)
        session = dataclasses.replace(s, plan=pl)
        assert validate(session) == [] and megatron_blockers(session) == []
    # on 256 GPUs the fastest plan has the flag off and uneven stages, equals simulate, and
    # Megatron-LM runs it; the dimensions name the flag as swept
    res = run_sweep(s, dataclasses.replace(space, num_gpus=(256,), schedules=("1f1b",)))
    best = res.session_for(res.fastest)
    assert best.plan.pipeline_parallel >= 4 and _flags(best.plan) == (False, False)
    assert (best.plan.first_stage_layers, best.plan.last_stage_layers) in uneven_splits(
        61, best.plan.pipeline_parallel)
    assert res.iteration_time_s[res.fastest] == pytest.approx(
        simulate(best).report.iteration_time_s, rel=1e-9)
    assert megatron_blockers(best) == []
    dims = {d["field"]: d for d in res.to_dict()["dimensions"]}
    loss = dims["account_for_loss_in_pipeline_split"]
    assert loss["swept"] and sorted(loss["values"]) == [False, True]


def test_a_session_slot_flag_is_turned_off_where_only_the_layers_split():
    """Llama 3 70B with the loss's slot: 81 or 82 slots split over no p of 4, 8, 16, the 80
    layers do: the plans there have the flags off and an even split (interleaved too), no
    uneven stages; p = 2 keeps the flag (both: 82 slots)."""
    s = dataclasses.replace(_dsv3(account_for_loss_in_pipeline_split=True),
                            model=MODEL_PRESETS["Llama 3 70B"])
    assert pipeline_splits(s, [2, 4, 8, 16]) == {}
    plans = enumerate_plans(s, SweepSpace(num_gpus=(64,), micro_batch_sizes=(1,),
                                          recompute=("full",), schedules=("1f1b", "interleaved"),
                                          zero_stages=(1,)))
    got: dict[tuple, set] = {}
    for pl in plans:
        got.setdefault((pl.pipeline_parallel, pl.schedule), set()).add(
            (*_flags(pl), pl.first_stage_layers, pl.last_stage_layers))
    off = {(False, False, None, None)}
    assert got[(2, "1f1b")] == {(True, True, None, None)}
    assert got[(4, "1f1b")] == got[(8, "1f1b")] == got[(16, "1f1b")] == off
    assert got[(4, "interleaved")] == got[(8, "interleaved")] == off
    pl = next(pl for pl in plans if pl.pipeline_parallel == 8)
    assert validate(dataclasses.replace(s, plan=pl)) == []
    # a space without plans there does not blame p = 4 (81 slots do not split over it, the
    # 80 layers do, with the flag off)
    from core.studies.sweep.explain import no_plan_errors
    errs = no_plan_errors(s, SweepSpace(num_gpus=64, pipeline_parallel=[4],
                                        schedules=["interleaved"], virtual_pipeline_stages=[3]))
    assert errs and not any(e.field.startswith("--pipeline-parallel") for e in errs)


def test_a_pipeline_size_the_layers_do_not_divide_is_swept_with_first_and_last_stages():
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")   # 24 layers
    res = run_sweep(s, SweepSpace(pipeline_parallel=[7], max_gpus=8, micro_batch_sizes=[1, 2]))
    assert res.num_plans > 0
    assert {(pl.first_stage_layers, pl.last_stage_layers) for pl in res.plans} == {(2, 2)}
    i = res.fastest
    sim = simulate(res.session_for(i))
    assert validate(res.session_for(i)) == []
    assert res.iteration_time_s[i] == pytest.approx(sim.report.iteration_time_s, rel=1e-9)


def test_deepseek_v3_gets_deep_pipelines_and_megatron_lm_plans():
    """61 layers split evenly over p = 1 and 2 only (62 slots): on 256 GPUs the sweep tried no
    deeper pipeline; with Megatron-style uneven stages p = 4, 8 and 16 come in, and among the
    plans Megatron-LM runs the fastest is a deep one, faster than every even split."""
    s = _dsv3()
    space = dict(num_gpus=256, cross_entropy_fusion=["native"], zero_stages=[0, 1],
                 schedules=["1f1b", "interleaved"])
    res = run_sweep(s, SweepSpace(**space))
    ps = {pl.pipeline_parallel for pl in res.plans}
    assert {1, 2, 4, 8, 16} <= ps
    for pl in res.plans:
        if pl.pipeline_parallel in (4, 8, 16):
            assert (pl.first_stage_layers, pl.last_stage_layers) in uneven_splits(
                61, pl.pipeline_parallel)
    best = res.session_for(res.fastest)
    assert best.plan.pipeline_parallel >= 4 and megatron_blockers(best) == []
    even = [i for i, pl in enumerate(res.plans)
            if pl.pipeline_parallel <= 2 and res.feasible[i]
            and res.iteration_time_s[i] == res.iteration_time_s[i]]
    # 15.95 s (t=4 p=16 etp=1, 4 + 4 x 14 + 1 layers) against 19.00 s (t=8 p=1 d=32 ep=256
    # etp=1); before the sweep tried etp=1: 17.51 s (t=1 p=16) against 31.48 s (t=4 p=2)
    assert even and res.iteration_time_s[res.fastest] < 0.85 * min(res.iteration_time_s[even])
    assert res.iteration_time_s[res.fastest] == pytest.approx(
        simulate(best).report.iteration_time_s, rel=1e-9)
    assert res.megatron_lm() == {}   # it runs both best plans


def test_the_sweep_says_when_megatron_lm_cannot_run_its_best_plan():
    s = _dsv3()
    assert megatron_blockers(s) == []
    res = run_sweep(s, SweepSpace(num_gpus=256, pipeline_parallel=[1], micro_batch_sizes=[4]))
    got = res.megatron_lm()
    assert got and "fastest" in got
    best = res.session_for(res.fastest)
    assert got["fastest"] == megatron_blockers(best) != []
    assert res.to_dict()["megatron_lm"] == got
    # a session Megatron-LM does not run (Transformer Engine's cross-entropy): nothing to keep to
    te = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te"))
    assert megatron_blockers(te) != []
    assert run_sweep(te, SweepSpace(num_gpus=256, pipeline_parallel=[1],
                                    micro_batch_sizes=[4])).megatron_lm() is None


def test_the_pipeline_dimension_says_where_its_uneven_sizes_come_from():
    """p = 4, 8, 16 divide neither 61 nor 62 or 63: the dimension's words named only the
    divisors (vtrain sweep --json, the Explore tab's summary, the command line's help)."""
    res = run_sweep(_dsv3(), SweepSpace(num_gpus=128, micro_batch_sizes=[1], recompute=["full"],
                                        zero_stages=[1], expert_parallel=[8],
                                        cross_entropy_fusion=["native"], schedules=["1f1b"]))
    dim = next(d for d in res.to_dict()["dimensions"] if d["field"] == "pipeline_parallel")
    assert {4, 8, 16} <= set(dim["values"])
    assert "powers of two from 4 that split the layers unevenly" in dim["why"]


def test_no_plan_at_an_uneven_p_under_multi_chunk_schedules_says_why():
    """--pipeline-parallel 8 --schedules interleaved for 61 layers: the sweep tries p = 8 with
    uneven first / last stages, which the interleaved schedule does not take; the reason given
    was the even split's ("61 is not divisible by 8"), which 1F1B's plans at p = 8 do not
    break."""
    from core.studies.sweep.explain import no_plan_errors
    s = _dsv3()
    for scheds in (["interleaved"], ["zb-v", "interleaved"]):
        space = SweepSpace(num_gpus=256, pipeline_parallel=[8], schedules=scheds)
        text = "; ".join(e.message for e in no_plan_errors(s, space))
        assert "splits the 61 layers unevenly" in text and "not divisible" not in text
    assert run_sweep(s, SweepSpace(num_gpus=256, pipeline_parallel=[8], schedules=["1f1b"],
                                   micro_batch_sizes=[1], recompute=["full"], zero_stages=[1],
                                   expert_parallel=[8])).num_plans > 0
    text = "; ".join(e.message for e in no_plan_errors(s, SweepSpace(
        num_gpus=256, pipeline_parallel=[32], schedules=["interleaved"])))
    assert "num_layers=61 is not divisible by pipeline_parallel_size=32" in text  # no split


def test_the_megatron_lm_note_suggests_what_the_sweeps_own_options_need():
    """The note under "Best plans" gave the same three options whatever the sweep asked: with
    --recompute selective_op (and those three already given) the best plans were torchtitan's
    per-op recomputation, and it still said the three options keep the sweep to plans
    Megatron-LM runs."""
    from core.cli.sweep import megatron_lm_options
    from core.io.megatron.export import MEGATRON_LM_SWEEP_OPTIONS
    assert megatron_lm_options(SweepSpace()) == MEGATRON_LM_SWEEP_OPTIONS   # the default space
    kept = dict(cross_entropy_fusion=["native"], zero_stages=[0, 1],
                schedules=["1f1b", "interleaved"])
    assert megatron_lm_options(SweepSpace(**kept)) == ""
    assert megatron_lm_options(SweepSpace(**kept, recompute=["selective_op"])) == \
        "--recompute none,selective,full"
    assert megatron_lm_options(SweepSpace(**kept, recompute=["selective_op", "full"],
                                          cp_comm_type=["p2p", "allgather"])) == \
        "--recompute full --cp-comm-types p2p"
    assert megatron_lm_options(SweepSpace(cross_entropy_fusion=["off", "te"], zero_stages=[1, 3],
                                          schedules=["zb-v"])) == \
        "--cross-entropy-fusion off --schedules 1f1b,interleaved"  # every ZeRO stage runs
    # and each suggestion is one Megatron-LM runs the best plans of: Llama 3 8B, selective_op
    s = dataclasses.replace(_dsv3(), model=MODEL_PRESETS["Llama 3 8B"])
    space = SweepSpace(max_gpus=16, micro_batch_sizes=[1], **kept, recompute=["selective_op"])
    res = run_sweep(s, space)
    assert res.megatron_lm()
    fixed = run_sweep(s, dataclasses.replace(space, recompute=["none", "selective", "full"]))
    assert fixed.megatron_lm() == {}


def test_the_megatron_lm_note_gives_each_plan_its_own_reasons():
    """Two best plans refused for different reasons: each named with its own (the note joined
    every reason after both plans, so an interleaved cheapest plan read as refused for zb-h1);
    one reason shared by both is said once."""
    import types
    from rich.console import Console
    from core.cli.sweep import _print_megatron_lm
    from core.studies.sweep import SweepSpace

    def note(refused):
        console = Console(record=True, width=400)
        fake = types.SimpleNamespace(megatron_lm=lambda: refused,
                                     space=SweepSpace(hold_session_values=True),
                                     session=types.SimpleNamespace(plan=None))
        _print_megatron_lm(fake, console)
        return console.export_text().strip().split(": --", 1)[0]  # without the options
    assert note({"fastest": ["schedule zb-h1"], "cheapest": ["te is disabled"]}) == (
        "Megatron-LM cannot run the fastest plan (schedule zb-h1) nor the cheapest plan (te is "
        "disabled), though it runs the session's (other frameworks run it)")
    assert note({"fastest": ["te is disabled"], "cheapest": ["te is disabled"]}) == (
        "Megatron-LM cannot run the fastest and the cheapest plan (te is disabled), though it "
        "runs the session's (other frameworks run it)")
