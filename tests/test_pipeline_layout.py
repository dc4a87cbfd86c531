"""Megatron-Core's custom pipeline layout (``--pipeline-model-parallel-layout``,
``plan.pipeline_model_parallel_layout``): parsing, rules, the per-stage layers that graph,
memory and sweep use, empty virtual stages, and the round trips."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.model import model_math
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.layout import (expand_pipeline_layout, layout_summary, stage_layer_counts,
                              virtual_stage_layer_counts)
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.graph import build_graph
from core.sim.stages import stage_times
from core.sim.graph_types import OPS
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.to_session import import_file
from core.io.megatron.export import export_script
from core.io.session import load_session, save_session
from core.sim.simulate import open_profile, profile_path, simulate
from core.studies.sweep import SweepSpace, enumerate_plans, no_plan_errors, run_sweep

FIELD = "plan.pipeline_model_parallel_layout"
DSV3 = "Et|(tt|)*30mL"


def llama(layers=16):
    return dataclasses.replace(MODEL_PRESETS["Llama 3.1 405B"], num_layers=layers)


def plan(p, layout=None, v=None, schedule=None, **kw):
    return ParallelPlan(tensor_parallel=8, pipeline_parallel=p, data_parallel=kw.pop("d", 1),
                        micro_batch_size=1, global_batch_size=kw.pop("global_batch_size", 4 * p),
                        schedule=schedule or ("interleaved" if v else "1f1b"),
                        virtual_pipeline_stages=v, recompute=kw.pop("recompute", "full"),
                        precision="bf16", pipeline_model_parallel_layout=layout, **kw)


def session(model, pl):
    return Session(model, pl, ClusterConfig(gpu="H100-SXM5-80GB"), CostConfig(2.0, 8192 * 1000.0))


def layout_errors(model, pl):
    return [e.message for e in validate(session(model, pl)) if e.field == FIELD]


# --------------------------------------------------------------------------- parsing

def test_deepseek_v3_layout_expands_to_32_virtual_stages():
    stages = expand_pipeline_layout(DSV3)
    assert len(stages) == 32
    assert stages[0] == "Et" and stages[1:31] == ("tt",) * 30 and stages[31] == "mL"
    assert [s.count("t") for s in stages] == [1] + [2] * 30 + [0]
    assert [i for i, s in enumerate(stages) if "E" in s] == [0]
    assert [i for i, s in enumerate(stages) if "m" in s or "L" in s] == [31]
    # 61 layers, p=8 v=4 (row 8 of the published runs): virtual stage k is chunk k//8 of stage k%8
    model = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=1)
    pl = plan(8, DSV3, v=4)
    assert virtual_stage_layer_counts(61, pl) == [1] + [2] * 30 + [0]
    assert stage_layer_counts(61, pl) == [7] + [8] * 6 + [6]
    assert not layout_errors(model, pl)


@pytest.mark.parametrize("text,stages", [
    ("Et*3|t*3|t*2L", ("Ettt", "ttt", "ttL")),
    ("E, t t | t*2 , L", ("Ett", "ttL")),             # Megatron drops commas; spaces ignored
    ("E|((t|)*2)*2L", ("E", "t", "t", "t", "t", "L")),    # nested groups
    ("Et||tL", ("Et", "", "tL")),                         # an empty virtual stage
    ("E|t*12|*2t*2L", ("E", "tttttttttttt", "", "ttL")),  # '|' repeated
])
def test_expansion(text, stages):
    assert expand_pipeline_layout(text) == stages


@pytest.mark.parametrize("text,needle", [
    ("Et|tx|L", "unknown symbol 'x' at character 5"),
    ("Et|(tt|*2L", "unmatched '('"),
    ("Et|tt)|L", "unmatched ')' at character 6"),
    ("Et|*|L", "'*' at character 4 must be followed by a count"),
    ("Et|t*0|L", "must be followed by a count >= 1"),
    ("*2Et|L", "'*' at character 1 must follow a symbol"),
    ("tE|tL", "virtual stage 0 'tE' lists its symbols out of order"),
    ("Et|Lt", "virtual stage 1 'Lt' lists its symbols out of order"),
    ("((t*1000)*1000)*1000", "expands to more than 100,000 symbols"),
    ("  ", "is empty"),
])
def test_grammar_errors_name_the_rule(text, needle):
    with pytest.raises(ValueError, match=None) as exc:
        expand_pipeline_layout(text)
    assert needle in str(exc.value)


@pytest.mark.parametrize("layout,v,needle", [
    ("Et*8|t*8L", None, "has 2 virtual stages; it needs pipeline_parallel_size*virtual_pipeline_"
                        "stages = 4*1 = 4"),
    ("Et*4|t*4|t*4|t*4L", 2, "has 4 virtual stages; it needs pipeline_parallel_size*virtual_"
                             "pipeline_stages = 4*2 = 8"),
    ("t*4|Et*4|t*4|t*4L", None, "must hold exactly one E (embedding), in the first virtual stage"),
    ("Et*4|t*4|t*4L|t*4", None, "must hold exactly one L (loss), in the last virtual stage"),
    ("Et*4|t*4|t*4L|t*4L", None, "must hold exactly one L (loss), in the last virtual stage (Megatron-Core's "
                                  "rule); it has 2"),
    ("Et*4|t*4|t*4|t*3L", None, "has 15 transformer layers (t); the model has num_layers=16"),
    ("Et*4|t*4|t*4|t*4mL", None, "has 1 MTP layers (m); the model has mtp_num_layers=0"),
    ("Et*4|t*4|(t*4|", None, "unmatched '('"),
])
def test_rule_errors_name_the_field(layout, v, needle):
    errs = layout_errors(llama(), plan(4, layout, v=v))
    assert any(needle in e for e in errs), errs


def test_mtp_layers_only_with_the_loss():
    model = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=1)
    errs = layout_errors(model, plan(4, "Et*16|t*15|t*15m|t*15L"))
    assert any("MTP layers (m) outside the last virtual stage (the loss's) are not modelled" in e
               for e in errs), errs
    assert not layout_errors(model, plan(4, "Et*16|t*15|t*15|t*15mL"))


@pytest.mark.parametrize("extra", [dict(first_stage_layers=5),
                                   dict(account_for_embedding_in_pipeline_split=True),
                                   dict(account_for_loss_in_pipeline_split=True)])
def test_not_combined_with_the_other_split_fields(extra):
    errs = layout_errors(llama(), plan(4, "Et*5|t*4|t*4|t*3L", **extra))
    assert any("cannot be combined with first_stage_layers / last_stage_layers / account_for_"
               in e for e in errs), errs


def test_blank_layout_is_megatrons_split():
    for blank in (None, "", "   "):
        pl = plan(4, blank)
        assert virtual_stage_layer_counts(16, pl) == [4, 4, 4, 4]
        assert layout_summary(16, pl) is None


# --------------------------------------------------------------------------- counts everyone uses

def test_layer_counts_and_summary():
    pl = plan(4, "Et|tt|t*4|t*3|t*3|t*2||tL", v=2)
    assert virtual_stage_layer_counts(16, pl) == [1, 2, 4, 3, 3, 2, 0, 1]
    assert stage_layer_counts(16, pl) == [1 + 3, 2 + 2, 4 + 0, 3 + 1]
    assert model_math.stage_chunk_layers(llama(), pl) == [
        [range(0, 1), range(10, 13)], [range(1, 3), range(13, 15)],
        [range(3, 7), range(15, 15)], [range(7, 10), range(15, 16)]]
    assert layout_summary(16, pl) == "8 virtual stages: 1, 2, 4, 2 x 3, 2, 0, 1 layers"
    mtp = dataclasses.replace(plan(8, DSV3, v=4))
    assert layout_summary(61, mtp) == ("32 virtual stages: 1, 30 x 2, 0 layers; 1 MTP layer "
                                       "with the loss")


def test_parameters_and_memory_per_stage_closed_form():
    """Uneven 1F1B layout on 4 stages: 5, 4, 4, 3 layers."""
    m, pl = llama(), plan(4, "Et*5|t*4|t*4|t*3L", global_batch_size=16, recompute="selective")
    counts = [5, 4, 4, 3]
    n = model_math.params_per_gpu(m, pl)
    sharded, replicated = model_math.family_of(m).layer_parameters(m)
    per_layer = sharded / 8 + replicated
    first, last = model_math.edge_params_per_gpu(m, 8, 4)
    np.testing.assert_allclose(n, [5 * per_layer + first, 4 * per_layer, 4 * per_layer,
                                   3 * per_layer + last], rtol=1e-12)
    mem = model_math.stage_memory(m, pl)
    keep = model_math.activation_bytes_per_layer(m, pl)
    for i in (1, 2):  # 1F1B: min(p - i, m) micro-batches in flight, each through the layers
        assert mem[i].activations_bytes == pytest.approx(counts[i] * keep * (4 - i), rel=1e-12)
    # weights: bf16 copies of the stage's parameters
    assert mem[1].weights_bytes == pytest.approx(2 * n[1], rel=1e-12)
    assert mem[3].weights_bytes == pytest.approx(2 * n[3], rel=1e-12)


def test_even_layout_equals_no_layout():
    """A layout that spells out Megatron's own split changes nothing."""
    m = llama()
    for layout, v in (("Et*4|t*4|t*4|t*4L", None), ("Et*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2L", 2)):
        a = simulate(session(m, plan(4, layout, v=v, global_batch_size=8))).report
        b = simulate(session(m, plan(4, None, v=v, global_batch_size=8))).report
        assert a.iteration_time_s == b.iteration_time_s
        assert a.max_memory_per_gpu_bytes == b.max_memory_per_gpu_bytes


def test_layout_equals_the_embedding_and_loss_slots():
    """Llama 3.1 405B, 126 layers, p=8 v=8 with the account-for flags is [1, 2 x62, 1]: the
    same layout spelt out gives the same iteration and memory."""
    m = MODEL_PRESETS["Llama 3.1 405B"]
    flags = plan(8, None, v=8, global_batch_size=16, account_for_embedding_in_pipeline_split=True,
                 account_for_loss_in_pipeline_split=True)
    lay = plan(8, "Et|(tt|)*62tL", v=8, global_batch_size=16)
    assert virtual_stage_layer_counts(126, lay) == virtual_stage_layer_counts(126, flags)
    a, b = simulate(session(m, lay)).report, simulate(session(m, flags)).report
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    assert a.max_memory_per_gpu_bytes == pytest.approx(b.max_memory_per_gpu_bytes, rel=1e-12)


# --------------------------------------------------------------------------- empty virtual stages

@pytest.mark.parametrize("schedule,v,layout", [
    ("1f1b", None, "Et*8||t*4|t*4L"), ("gpipe", None, "Et*8||t*4|t*4L"),
    ("zb-h1", None, "Et*8||t*4|t*4L"), ("interleaved", 2, "Et*4|||t*4|t*4|||t*4L"),
    ("1f1b", None, "E|t*8|t*8|L"),
])
def test_graph_with_an_empty_virtual_stage_simulates(schedule, v, layout):
    m = llama()
    s = session(m, plan(4, layout, v=v, schedule=schedule, global_batch_size=8))
    assert not validate(s)
    store = open_profile(profile_path(s))
    st = stage_times(s, store)
    counts = np.array(virtual_stage_layer_counts(16, s.plan)).reshape(v or 1, 4).T  # (p, v)
    # an empty chunk (no layer, no embedding, no loss) runs in no time
    empty = (counts == 0)
    empty[0, 0] = empty[-1, -1] = False
    assert empty.any() or layout.startswith("E|")
    assert (st.fwd_s[empty] == 0).all() and (st.bwd_s[empty] == 0).all()
    graph, _ = build_graph(s, store)
    passes = graph.op == OPS.index("pass_through")
    assert passes.any() == bool(empty.any())
    assert (graph.duration_s[passes] == 0).all()
    r = simulate(s).report
    assert np.isfinite(r.iteration_time_s) and r.iteration_time_s > 0
    mem = model_math.stage_memory(m, s.plan)
    for i in np.flatnonzero(counts.sum(axis=1) == 0):  # a stage without layers or edges
        if 0 < i < 3:  # no tensors (its process still has a context, workspaces, NCCL)
            assert mem[i].allocated_bytes - mem[i].workspace_bytes == 0
    # the pipeline still runs every micro-batch through every virtual stage: the transfers stay
    assert (graph.kind == 7).sum() == 2 * (4 * (v or 1) - 1) * s.plan.num_microbatches


def test_sweep_of_a_layout_plan_equals_simulate():
    m = llama()
    s = session(m, plan(4, "Et|tt|t*4|t*3|t*3|t*2||tL", v=2, d=2, global_batch_size=16))
    result = run_sweep(s, SweepSpace(hold_session_values=True, tensor_parallel=[8], micro_batch_sizes=[1],
                                     recompute=["full"], max_gpus=8 * 16), prune=False)
    assert result.num_plans > 0
    for i in range(result.num_plans):
        pl = result.session_for(i).plan
        assert pl.pipeline_model_parallel_layout == s.plan.pipeline_model_parallel_layout
        r = simulate(result.session_for(i)).report
        assert result.iteration_time_s[i] == pytest.approx(r.iteration_time_s, rel=1e-9)
        assert result.max_memory_per_gpu_bytes[i] == r.max_memory_per_gpu_bytes


def test_sweep_keeps_the_layout_and_its_virtual_stages():
    m = llama()
    s = session(m, plan(4, "Et|tt|t*4|t*3|t*3|t*2||tL", v=2, d=2, global_batch_size=16))
    plans = enumerate_plans(s, SweepSpace(hold_session_values=True, tensor_parallel=[8], micro_batch_sizes=[1],
                                          recompute=["full"], max_gpus=8 * 64))
    got = {(p.pipeline_parallel, p.virtual_pipeline_stages, p.schedule) for p in plans}
    assert got == {(2, 4, "interleaved"), (4, 2, "interleaved"), (8, None, "1f1b"),
                   (8, None, "gpipe"), (8, None, "zb-h1")}
    assert all(p.pipeline_model_parallel_layout == s.plan.pipeline_model_parallel_layout
               for p in plans)
    space = SweepSpace(tensor_parallel=[8], pipeline_parallel=[3], micro_batch_sizes=[1],
                       recompute=["full"], max_gpus=8 * 64)
    assert not enumerate_plans(s, space)
    msgs = [e.message for e in no_plan_errors(s, space)]
    assert any("only plans with pipeline_parallel*virtual_pipeline_stages = 8 are tried" in x
               for x in msgs), msgs


# --------------------------------------------------------------------------- round trips

def test_session_file_round_trip(tmp_path):
    s = session(llama(), plan(4, "Et|tt|t*4|t*3|t*3|t*2||tL", v=2, d=2, global_batch_size=16))
    path = tmp_path / "layout.json"
    save_session(s, path)
    assert '"pipeline_model_parallel_layout": "Et|tt|t*4|t*3|t*3|t*2||tL"' in path.read_text()
    assert load_session(path) == s


@pytest.mark.parametrize("layout,v", [("Et*5|t*4|t*4|t*3L", None),
                                      ("Et|tt|t*4|t*3|t*3|t*2||tL", 2)])
def test_megatron_arguments_round_trip(tmp_path, layout, v):
    s = session(llama(), plan(4, layout, v=v, d=2, global_batch_size=16))
    text = export_script(s)
    assert f"--pipeline-model-parallel-layout '{layout}'" in text
    assert "--num-virtual-stages-per-pipeline-rank" not in text  # Megatron derives v
    script = tmp_path / "run.sh"
    script.write_text(text)
    back = import_file(script, name=s.model.name).session
    assert back.plan == s.plan and back.model == s.model


def test_megatron_import_refusals(tmp_path):
    s = session(llama(), plan(4, "Et*5|t*4|t*4|t*3L", d=2, global_batch_size=16))
    text = export_script(s)
    script = tmp_path / "run.sh"
    for bad, needle in (
            (text.replace("--pipeline-model-parallel-layout 'Et*5|t*4|t*4|t*3L'",
                          "--pipeline-model-parallel-layout 'Et*5|t*4|t*4L'"),
             "has 3 virtual stages, not a multiple of --pipeline-model-parallel-size 4"),
            (text.replace("--pipeline-model-parallel-layout 'Et*5|t*4|t*4|t*3L'",
                          "--pipeline-model-parallel-layout 'Et*5|t*4|t*4|t*3L' "
                          "--num-virtual-stages-per-pipeline-rank 2"),
             "gives 1 virtual stages per rank (4 over p=4); --num-virtual-stages-per-pipeline-"
             "rank gives 2"),
            (text.replace("--pipeline-model-parallel-layout 'Et*5|t*4|t*4|t*3L'",
                          "--pipeline-model-parallel-layout 'Et*5|t*4|t*4|t*3L' "
                          "--decoder-first-pipeline-num-layers 5"),
             "cannot be combined with --decoder-first-pipeline-num-layers"),
            (text.replace("'Et*5|t*4|t*4|t*3L'", "'Et*5|t*4|(t*4|t*3L'"), "unmatched '('")):
        script.write_text(bad)
        with pytest.raises(MegatronArgsError) as exc:
            import_file(script, name=s.model.name)
        assert needle in str(exc.value)


# --------------------------------------------------------------------------- fuzzing

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="EtmL|()*0123456789, x", max_size=40))
def test_any_text_expands_or_is_refused_by_name(text):
    try:
        stages = expand_pipeline_layout(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert all(set(s) <= set("EtmL") for s in stages)
    assert sum(map(len, stages)) <= 100_000


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=2, max_size=12))
def test_written_counts_come_back(counts):
    """A layout written from any per-virtual-stage counts (E first, L last) gives them back."""
    text = "E" + "|".join("t" * c if c < 3 else f"t*{c}" for c in counts) + "L"
    p = len(counts)
    pl = plan(p, text, global_batch_size=p)
    assert virtual_stage_layer_counts(sum(counts), pl) == counts
    assert stage_layer_counts(sum(counts), pl) == counts


def test_sweep_refuses_a_layout_that_cannot_parse():
    from core.plan.fields import ConfigError
    s = session(llama(), plan(4, "Et*4|(t*4|t*4|t*4L", d=2, global_batch_size=16))
    with pytest.raises(ConfigError) as exc:
        enumerate_plans(s, SweepSpace(tensor_parallel=[8], micro_batch_sizes=[1], max_gpus=64))
    assert "plan.pipeline_model_parallel_layout: 'Et*4|(t*4|t*4|t*4L' unmatched '('" in str(exc.value)
