"""Messages that say what to give: a list for a comma-separated field names the string it
means, and layers that do not split over p name the uneven first / last stages (and the
custom layout) that split them, computed by core.plan.layout.uneven_splits."""

from __future__ import annotations

import dataclasses

import pytest

from core.cli import main
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from tests.conftest import EXAMPLES

EXAMPLE = str(EXAMPLES / "gpt3_1.3b_single_node.json")


@pytest.mark.parametrize("field,value,string", [
    ("recompute_modules", '["mla_up_proj","mlp"]', '"mla_up_proj,mlp"'),
    ("cuda_graph_modules", '["attn"]', '"attn"'),
])
def test_a_list_for_a_comma_separated_field_names_the_string(capsys, field, value, string):
    assert main(["simulate", EXAMPLE, "--set", f"plan.{field}={value}"]) == 2
    shown = value.replace('","', '", "')
    assert capsys.readouterr().err.strip().endswith(
        f"--set plan.{field}: must be of type str or null, got {shown}: the names as one "
        f"comma-separated string, e.g. {string}")


def test_a_list_in_a_session_file_names_the_string_too():
    plan = dataclasses.asdict(ParallelPlan())
    with pytest.raises(ConfigError) as exc:
        Session.from_dict({"plan": {**plan, "recompute_modules": ["core_attn", "mlp"]}})
    assert [(e.field, e.message) for e in exc.value.errors] == [(
        "plan.recompute_modules", 'must be of type str or null, got ["core_attn", "mlp"]: the '
        'names as one comma-separated string, e.g. "core_attn,mlp"')]
    # a number is no list of names: the type alone
    with pytest.raises(ConfigError) as exc:
        Session.from_dict({"plan": {**plan, "tensor_parallel": [1, 2]}})
    assert exc.value.errors[0].message == "must be of type int, got [1, 2]"


def _pipeline_message(model: str, p: int, **plan) -> str:
    s = Session(model=MODEL_PRESETS[model], plan=ParallelPlan(
        tensor_parallel=8, pipeline_parallel=p, data_parallel=1, global_batch_size=64, **plan))
    return " ".join(e.message for e in validate(s) if e.field == "plan.pipeline_parallel")


def test_layers_that_do_not_split_name_the_first_and_last_stages_that_do():
    """DeepSeek-V3's 61 layers on p = 16: 14 middle stages of ceil(61/16) = 4 layers and the 5
    left on the first and last (3 and 2); the fields, and the custom layout with its MTP layer,
    then split them."""
    assert _pipeline_message("DeepSeek-V3", 16) == (
        "num_layers=61 is not divisible by pipeline_parallel_size=16; plan.first_stage_layers=3 "
        "and plan.last_stage_layers=2 split it (3, 14 x 4, 2 layers; Megatron-Core's "
        "--decoder-first/last-pipeline-num-layers), as does "
        "plan.pipeline_model_parallel_layout=Et*3|(t*4|)*14t*2mL")
    assert MODEL_PRESETS["DeepSeek-V3"].mtp_num_layers == 1
    assert _pipeline_message("DeepSeek-V3", 16, first_stage_layers=3, last_stage_layers=2) == ""
    assert _pipeline_message("DeepSeek-V3", 16,
                             pipeline_model_parallel_layout="Et*3|(t*4|)*14t*2mL") == ""
    # Llama 3.1 405B, 126 layers on p = 16: the slot flags (128 slots) and the uneven stages
    msg = _pipeline_message("Llama 3.1 405B", 16)
    assert ("126 + 2 = 128 layer slots split over it" in msg
            and "plan.first_stage_layers=7 and plan.last_stage_layers=7" in msg
            and "Et*7|(t*8|)*14t*7L" in msg)
    # 61 layers on p = 32 leave one layer for both ends, and one fewer on the middle stages
    # (30 x 1) leaves 31 for two stages of at most 2: no uneven split to name
    assert _pipeline_message("DeepSeek-V3", 32) == (
        "num_layers=61 is not divisible by pipeline_parallel_size=32")


@pytest.mark.parametrize("p, plan", [(16, {}), (8, dict(schedule="interleaved",
                                                         virtual_pipeline_stages=2))])
def test_the_layout_hint_places_the_models_mtp_layers_and_the_layout_it_prints_simulates(p, plan):
    """New-user trial: DeepSeek-V3 (61 layers, mtp_num_layers=1) at p = 16 was told "with an m
    before the L per MTP layer" beside a layout without it, which the validator refuses (its
    m count must equal mtp_num_layers). The session's mtp_num_layers gives the count: the
    layout printed holds that many m with the loss, passes pipeline_layout_errors as printed
    and simulates; a model without MTP layers gets none and no aside."""
    from core.plan.cluster import ClusterConfig, CostConfig
    from core.plan.layout import pipeline_layout_errors
    from core.sim.simulate import simulate
    model = MODEL_PRESETS["DeepSeek-V3"]
    assert (model.num_layers, model.mtp_num_layers) == (61, 1)
    session = Session(model=model, plan=ParallelPlan(
        tensor_parallel=8, pipeline_parallel=p, data_parallel=16 // p * 8, expert_parallel=8,
        global_batch_size=256, sequence_parallel=True, **plan),
        cluster=ClusterConfig("H100-SXM5-80GB", 8), cost=CostConfig())
    msgs = [e.message for e in validate(session)]
    assert not any("MTP layer" in m for m in msgs)
    (hint,) = [m for m in msgs if "plan.pipeline_model_parallel_layout=" in m]
    printed = hint.rsplit("plan.pipeline_model_parallel_layout=", 1)[1]
    assert printed == "Et*3|(t*4|)*14t*2mL"  # 3 + 14 x 4 + 2 = 61 t, one m before the L
    assert pipeline_layout_errors(printed, 61, 1, p, 16 // p) == []
    assert pipeline_layout_errors(printed.replace("m", ""), 61, 1, p, 16 // p)  # the old hint's
    session.plan.pipeline_model_parallel_layout = printed
    assert validate(session) == []
    report = simulate(session).report
    assert report.num_gpus == 1024 and report.iteration_time_s > 0
    # a model without MTP layers: no m, no aside
    dense = Session(model=dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], num_layers=61),
                    plan=dataclasses.replace(session.plan, pipeline_model_parallel_layout=None,
                                             expert_parallel=1))
    (msg,) = [e.message for e in validate(dense)
              if "pipeline_model_parallel_layout=" in e.message]
    assert msg.endswith("plan.pipeline_model_parallel_layout=Et*3|(t*4|)*14t*2L")


def test_layers_that_leave_the_ends_none_take_one_fewer_on_the_middle_stages():
    """50 layers on p = 16: 14 middle stages of ceil(50/16) = 4 hold 56, more than all; of 3
    they hold 42 and the first and last take 4 each (no stage above 4, as in any split). The
    hint names it and the plan it names passes (the sweep's space builds it:
    tests/test_sweep_enumeration.py)."""
    from core.plan.layout import uneven_splits
    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], num_layers=50)
    plan = ParallelPlan(tensor_parallel=8, pipeline_parallel=16, data_parallel=1,
                        global_batch_size=64)
    msgs = [e.message for e in validate(Session(model=model, plan=plan))
            if e.field == "plan.pipeline_parallel"]
    assert msgs == ["num_layers=50 is not divisible by pipeline_parallel_size=16; "
                    "plan.first_stage_layers=4 and plan.last_stage_layers=4 split it (4, 14 x 3, "
                    "4 layers; Megatron-Core's --decoder-first/last-pipeline-num-layers), as does "
                    "plan.pipeline_model_parallel_layout=Et*4|(t*3|)*14t*4L"]
    split = dataclasses.replace(plan, first_stage_layers=4, last_stage_layers=4)
    assert validate(Session(model=model, plan=split)) == []
    assert uneven_splits(50, 16) == [(4, 4)] and uneven_splits(10, 8) == [(2, 2)]


def test_interleaved_layers_that_do_not_split_name_the_layout_of_p_times_v_stages():
    """61 layers on p = 8 with v = 2: Megatron-Core has no first / last stage layers under
    interleaving, so the hint names the custom layout over the 16 virtual stages (3, 14 x 4, 2),
    which then simulates; it named first / last (refused with interleaving) and an 8-stage
    layout (refused: it needs p*v = 16)."""
    plan = dict(schedule="interleaved", virtual_pipeline_stages=2)
    msg = _pipeline_message("DeepSeek-V3", 8, **plan)
    assert "first_stage_layers" not in msg
    assert ("the 16 virtual stages (3, 14 x 4, 2 layers) split it with "
            "plan.pipeline_model_parallel_layout=Et*3|(t*4|)*14t*2mL") in msg
    assert _pipeline_message("DeepSeek-V3", 8, pipeline_model_parallel_layout="Et*3|(t*4|)*14t*2mL",
                             **plan) == ""


def test_zb_v_gets_no_layout_hint_it_would_refuse():
    """ZB-V places its two chunks per stage itself and refuses a custom layout: 30 layers on p=4
    under ZB-V name the 32 slots of the embedding and loss, never a layout."""
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], num_layers=30)
    s = Session(model=m, plan=ParallelPlan(tensor_parallel=8, pipeline_parallel=4, data_parallel=1,
                                           global_batch_size=64, schedule="zb-v"))
    msg = " ".join(e.message for e in validate(s) if e.field == "plan.pipeline_parallel")
    assert "30 + 2 = 32 layer slots split over it" in msg
    assert "pipeline_model_parallel_layout" not in msg and "first_stage_layers" not in msg


def test_layers_that_split_over_p_but_not_p_times_v_name_the_layout_that_does():
    """36 layers on p = 4 with v = 2: 9 per stage, not a whole number per virtual stage; the
    custom layout over the 8 virtual stages (3, 6 x 5, 3) splits them and validates."""
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], num_layers=36)
    plan = dict(tensor_parallel=8, pipeline_parallel=4, data_parallel=1, global_batch_size=64,
                schedule="interleaved", virtual_pipeline_stages=2)
    s = Session(model=m, plan=ParallelPlan(**plan))
    (msg,) = [e.message for e in validate(s) if e.field == "plan.virtual_pipeline_stages"]
    assert msg.endswith("; the 8 virtual stages (3, 6 x 5, 3 layers) split it with "
                        "plan.pipeline_model_parallel_layout=Et*3|(t*5|)*6t*3L")
    s.plan.pipeline_model_parallel_layout = "Et*3|(t*5|)*6t*3L"
    assert validate(s) == []
