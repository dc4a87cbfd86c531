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
