"""A value a sweep tries that a held session setting rules out (full recomputation under
per-layer CUDA graphs) is never dropped without a word: a sweep that finds no plan says which
rule, and the swept/held dimensions name the default values left out with the rule
(tester: `--recompute full` printed only "no valid plan ... in this budget")."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.io.session import load_any
from core.plan.rules import validate

EXAMPLE = "resources/examples/gpt3_1.3b_single_node.json"
GRAPHS = ["--set", "plan.cuda_graph_impl=transformer_engine",
          "--set", "plan.cuda_graph_modules=attn", "--set", "plan.recompute=none"]


@pytest.fixture
def graphs():
    s = load_any(EXAMPLE)
    s.plan = dataclasses.replace(s.plan, cuda_graph_impl="transformer_engine",
                                 cuda_graph_modules="attn", recompute="none")
    full = s.copy()
    full.plan = dataclasses.replace(s.plan, recompute="full")
    rule = [e for e in validate(full) if e.field == "plan.cuda_graph_impl"]
    assert len(rule) == 1
    return s, rule[0].message


def test_no_plan_names_the_rule_that_rules_the_recompute_value_out(graphs):
    from core.studies.sweep import SweepSpace, enumerate_plans, no_plan_errors
    s, message = graphs
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[1, 2],
                       micro_batch_sizes=[1], recompute=["full"])
    assert enumerate_plans(s, space) == []
    why = {e.field: e.message for e in no_plan_errors(s, space)}
    assert why.get("--recompute full") == message


def test_the_dimensions_name_a_default_value_left_out_with_its_rule(graphs):
    from core.studies.sweep import SweepSpace, enumerate_plans, sweep_dimensions
    s, message = graphs
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[1, 2],
                       micro_batch_sizes=[1])
    plans = enumerate_plans(s, space)
    dims = {d["field"]: d for d in sweep_dimensions(s, space, plans)}
    assert dims["recompute"]["values"] == ["none", "selective"]
    assert dims["recompute"]["left_out"] == [{"value": "full", "why": message}]
    assert dims["tensor_parallel"]["left_out"] == []
    # without graphs every mode is taken: nothing left out
    plain = load_any(EXAMPLE)
    dims = {d["field"]: d for d in sweep_dimensions(plain, space, enumerate_plans(plain, space))}
    assert dims["recompute"]["values"] == ["full", "none", "selective"]
    assert dims["recompute"]["left_out"] == []


def test_the_command_line_says_why(capsys, graphs):
    from core.cli import main
    _, message = graphs
    assert main(["sweep", EXAMPLE, *GRAPHS, "--recompute", "full", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "--recompute full" in err and message in err
    assert main(["sweep", EXAMPLE, *GRAPHS, "--gpus", "8", "--tensor-parallel", "1",
                 "--micro-batch-sizes", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dims = {d["field"]: d for d in doc["dimensions"]}
    assert dims["recompute"]["left_out"] == [{"value": "full", "why": message}]
    assert not any(u["values"].startswith("--recompute") for u in doc["unused_values"])
    assert main(["sweep", EXAMPLE, *GRAPHS, "--gpus", "8", "--tensor-parallel", "1",
                 "--micro-batch-sizes", "1"]) == 0
    swept = next(line for line in capsys.readouterr().out.splitlines()
                 if line.startswith("swept:"))
    assert "full left out" in swept


def test_the_held_line_names_a_held_value_that_is_not_the_sessions(capsys):
    """The sweep holds the te cross-entropy by default; the example session has the fusion off
    (native): "held:" named neither while the next line said "every other plan field is the
    session's" (a new user then could not export the pick: Megatron-LM refuses te)."""
    from core.cli import main
    assert main(["sweep", EXAMPLE, "--gpus", "8", "--tensor-parallel", "1",
                 "--micro-batch-sizes", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    held = next(line for line in out if line.startswith("held:"))
    assert "ce_fusion y" in held and "ce_impl te" in held
    assert "--cross-entropy-fusion native" in held
    # asked for the session's own choice: nothing held away from the session
    assert main(["sweep", EXAMPLE, "--gpus", "8", "--tensor-parallel", "1",
                 "--micro-batch-sizes", "1", "--cross-entropy-fusion", "off"]) == 0
    out = capsys.readouterr().out.splitlines()
    held = next((line for line in out if line.startswith("held:")), "")
    assert "ce_fusion" not in held and "ce_impl" not in held


# --------------------------------------------------------------------------- every value given
# (tester: --pipeline-parallel 1,2,3,5,7 on 8 GPUs listed 3, 5 and 7 "in no valid plan ...
# (no combination ...)", and --virtual-pipeline-stages 2,5 dropped 5 without a word)

def _made(p: int) -> str:
    """t*p*cp*d with t=1, cp=1 and d a divisor of 256, the first eight."""
    return ", ".join(str(p * d) for d in (1, 2, 4, 8, 16, 32, 64, 128)) + ", ..."


def test_a_pipeline_size_no_gpu_count_takes_names_the_counts_it_makes():
    from core.studies.sweep import SweepSpace, run_sweep, unused_values
    s = load_any(EXAMPLE)
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[1, 2, 3, 7],
                       micro_batch_sizes=[1])
    result = run_sweep(s, space, workers=1)
    assert set(result.plan_columns["pipeline_parallel"].tolist()) == {1, 2}
    assert [(e.field, e.message) for e in unused_values(s, space, result)] == [
        (f"--pipeline-parallel {p}", f"no plan with p={p} has 8 GPUs: t*p*cp*d with t in {{1}}, "
         f"cp in {{1}} and d a divisor of the global batch 256 gives {_made(p)}")
        for p in (3, 7)]


def test_sizes_beyond_a_gpu_bound_and_layers_that_do_not_split():
    from core.studies.sweep import SweepSpace, run_sweep, unused_values
    s = load_any(EXAMPLE)
    # 24 layers: p = 17 has no even and no uneven split (2 on each middle stage is 30, 1 leaves
    # 9 for the two ends, more than 2 each); p = 23 splits as 2 + 21 x 1 + 1
    space = SweepSpace(max_gpus=8, tensor_parallel=[8], pipeline_parallel=[1, 2],
                       micro_batch_sizes=[1])
    notes = unused_values(s, space, run_sweep(s, space, workers=1))
    assert [(e.field, e.message) for e in notes] == [(
        "--pipeline-parallel 2", "a plan with p=2 takes at least 16 GPUs (t*p*cp*d with t in "
        "{8}, cp in {1} and d a divisor of the global batch 256), more than the budget's 8")]
    space = SweepSpace(max_gpus=64, tensor_parallel=[1], pipeline_parallel=[1, 17, 23],
                       micro_batch_sizes=[1])
    notes = unused_values(s, space, run_sweep(s, space, workers=1))
    assert [(e.field, e.message) for e in notes] == [
        ("--pipeline-parallel 17", "num_layers=24 is not divisible by pipeline_parallel_size=17")]


def test_a_micro_batch_and_a_virtual_stage_count_name_the_rule_their_plans_break():
    from core.studies.sweep import SweepSpace, run_sweep, unused_values
    s = load_any(EXAMPLE)
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[2],
                       micro_batch_sizes=[1], schedules=["1f1b", "interleaved"],
                       virtual_pipeline_stages=[2, 5])
    notes = unused_values(s, space, run_sweep(s, space, workers=1))
    assert [(e.field, e.message) for e in notes] == [(
        "--virtual-pipeline-stages 5", "num_layers=24 is not divisible by pipeline_parallel_size*"
        "virtual_pipeline_stages=2*5=10 (Megatron: layers per virtual stage must be whole) (in 1 "
        "of the 1 size combinations of this budget with v=5, e.g. t=1 p=2 cp=1 d=4 b=1 "
        "interleaved v=5)")]
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[2],
                       micro_batch_sizes=[1, 256], schedules=["1f1b"])
    notes = unused_values(s, space, run_sweep(s, space, workers=1))
    assert [(e.field, e.message) for e in notes] == [(
        "--micro-batch-sizes 256", "global_batch_size=256 is not divisible by micro_batch_size*"
        "data_parallel_size=256*4=1024 (in 1 of the 1 size combinations of this budget with "
        "b=256, e.g. t=1 p=2 cp=1 d=4 b=256 1f1b)")]


def test_a_schedule_only_one_stage_plans_could_run_says_so():
    from core.studies.sweep import SweepSpace, run_sweep, unused_values
    s = load_any(EXAMPLE)
    space = SweepSpace(num_gpus=8, tensor_parallel=[1], pipeline_parallel=[1],
                       micro_batch_sizes=[1], schedules=["1f1b", "zb-h1"])
    notes = unused_values(s, space, run_sweep(s, space, workers=1))
    assert [(e.field, e.message) for e in notes] == [(
        "--schedules zb-h1", "every plan of this budget has one pipeline stage (p=1), where every "
        "schedule runs the same order: the sweep keeps 1f1b")]


def test_the_command_line_names_each_value_of_an_empty_sweep_in_text_and_json(capsys):
    from core.cli import main
    args = ["sweep", EXAMPLE, "--gpus", "8", "--tensor-parallel", "1", "--micro-batch-sizes",
            "1", "--pipeline-parallel", "7", "--workers", "1"]
    p7 = ("no plan with p=7 has 8 GPUs: t*p*cp*d with t in {1}, cp in {1} and d a divisor of "
          f"the global batch 256 gives {_made(7)}")
    assert main(args) == 2
    assert f"--pipeline-parallel 7: {p7}" in capsys.readouterr().err
    assert main([*args, "--json"]) == 2
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["num_plans"] == 0
    reasons = {d["values"]: d["reason"] for d in doc["no_plan"]}
    assert reasons["--pipeline-parallel 7"] == p7
    assert reasons["--gpus 8"] == ("no t*p*cp*d makes 8 GPUs with t in {1}, p in {7}, cp in {1} "
                                   "and d a divisor of the global batch 256")
    assert p7 in out.err
    # some plans: the value no plan takes, in the text and in --json
    args[args.index("7")] = "1,2,7"
    assert main(args) == 0
    assert f"  --pipeline-parallel 7: {p7}" in capsys.readouterr().out.splitlines()
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unused_values"] == [{"values": "--pipeline-parallel 7", "reason": p7}]
