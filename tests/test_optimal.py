"""The compute-optimal study: Chinchilla's closed forms, model shapes, the study and its CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from core.cli import main
from core.plan.fields import ConfigError
from core.plan.presets import MODEL_PRESETS
from core.studies.optimal import CHINCHILLA, chinchilla_loss, chinchilla_optimal, compute_optimal, gpt_shape
from core.util.text import format_params
from core.io.session import load_any
from core.model.counts import num_parameters
from tests.conftest import EXAMPLES


def test_chinchilla_optimum_minimizes_the_loss_on_its_compute_budget():
    flops = 3.3e23
    n, d = chinchilla_optimal(flops)
    assert 6 * n * d == pytest.approx(flops, rel=1e-12)
    # on the constraint 6ND = C, moving N either way raises the loss
    for f in (0.9, 0.99, 1.01, 1.1):
        assert chinchilla_loss(n * f, d / f) > chinchilla_loss(n, d)
    # the refit's optimum is the familiar ~20 tokens per parameter
    assert 15 < d / n < 25
    # closed form: d/dN of L(N, C/(6N)) = 0  <=>  alpha A / N^alpha = beta B / D^beta
    c = CHINCHILLA
    assert c["alpha"] * c["A"] / n ** c["alpha"] == pytest.approx(c["beta"] * c["B"] / d ** c["beta"],
                                                                   rel=1e-9)


def test_chinchilla_rejects_non_positive_inputs():
    with pytest.raises(ValueError):
        chinchilla_optimal(0.0)
    with pytest.raises(ValueError):
        chinchilla_loss(-1.0, 1e9)


def test_gpt_shape_reproduces_gpt3_175b_and_splits_well():
    m = gpt_shape(175e9)
    ref = MODEL_PRESETS["GPT-3 175B"]
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (
        ref.num_layers, ref.hidden_size, ref.num_attention_heads)
    for n in np.geomspace(1e9, 1e12, 13):
        s = gpt_shape(n)
        assert s.num_attention_heads % 8 == 0 and s.num_layers % (16 if s.num_layers >= 64 else 8) == 0
        assert s.hidden_size == 128 * s.num_attention_heads
        assert abs(math.log(num_parameters(s) / n)) < math.log(1.6)


def test_compute_optimal_ranks_candidates_by_loss_of_what_their_best_plan_trains():
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    r = compute_optimal(session, 8, 2.0, num_candidates=5, spread=4.0)
    fit = [c for c in r.candidates if c.plan is not None]
    assert len(fit) >= 3 and r.best is not None
    sizes = [c.n_params for c in r.candidates]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    for c in fit:
        assert c.plan["num_gpus"] == 8 and c.plan["fits_in_memory"]
        assert c.tokens == pytest.approx(c.tokens_per_s * 2.0 * 86400, rel=1e-12)
        assert c.loss == pytest.approx(chinchilla_loss(c.n_params, c.tokens), rel=1e-12)
        # MFU counts 6N FLOPs per token plus attention and the output layer: a little above
        # 6 N tokens/s over the GPUs' peak, never below
        assert 1.0 <= c.mfu / (6 * c.n_params * c.tokens_per_s / (8 * r.peak_flops)) < 1.3
    assert r.candidates[r.best].loss == min(c.loss for c in fit)
    assert r.budget_flops == pytest.approx(8 * r.peak_flops * 2.0 * 86400 * 0.4, rel=1e-12)
    n_rule = r.candidates[r.rule_index].n_params
    assert abs(math.log(n_rule / r.rule_params)) == min(abs(math.log(c.n_params / r.rule_params))
                                                        for c in r.candidates)


def test_cli_json_and_table(capsys):
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["num_gpus"] == 8 and doc["days"] == 2.0 and doc["best"] is not None
    assert doc["cost_usd"] == pytest.approx(8 * 2 * 24 * doc["price_per_gpu_hour_usd"])
    best = doc["candidates"][doc["best"]]
    assert best["plan"]["num_gpus"] == 8 and best["loss"] == min(
        c["loss"] for c in doc["candidates"] if c["loss"] is not None)
    # what the candidates' sweeps swept and held: vtrain sweep's default space, ZeRO swept
    dims = {d["field"]: d for d in doc["dimensions"]}
    assert not doc["hold_session_values"]
    assert dims["zero_stage"]["swept"] and dims["zero_stage"]["values"] == [0, 1, 2, 3]
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5",
                 "--hold-session-values", "--json"]) == 0
    held = json.loads(capsys.readouterr().out)
    dims = {d["field"]: d for d in held["dimensions"]}
    assert held["hold_session_values"] and dims["zero_stage"]["values"] == [0]
    assert not dims["zero_stage"]["swept"] and "hold_session_values" in dims["zero_stage"]["why"]
    assert all(c["plan"]["zero_stage"] == 0 for c in held["candidates"] if c["plan"])
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5"]) == 0
    out = capsys.readouterr().out
    assert "lowest loss" in out and "Chinchilla rule" in out
    # the swept and held lines, as vtrain sweep prints them
    flat = " ".join(out.split())
    assert "swept: t 1, 2, 4, 8;" in flat and "zero 0, 1, 2, 3" in flat and "held: " in flat
    assert f"{best['plan']['max_memory_per_gpu_bytes'] / 2 ** 30:.1f}" in out  # GiB


def _as_session(session, c):
    """``session`` with candidate ``c``'s model and plan."""
    from core.plan.parallel import ParallelPlan
    s = session.copy()
    s.model = c.model
    s.plan = ParallelPlan(**{f.name: c.plan[f.name] for f in dataclasses.fields(ParallelPlan)})
    return s


def test_candidates_get_the_plans_a_megatron_core_user_runs_not_the_sessions_switches():
    """The example holds ZeRO 0 without the overlaps or the cross-entropy fusion. The study
    sweeps vtrain sweep's default space: every candidate's fastest plan is a sharded
    (ZeRO >= 1) one with the data-parallel overlaps, faster than the fastest with the
    session's switches held (``hold_session_values``, the study before), as a simulation of
    each plan alone says too; so each trains on more tokens to a lower loss."""
    from core.sim.simulate import simulate
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert session.plan.zero_stage == 0 and not session.plan.overlap_grad_reduce
    free = compute_optimal(session, 8, 2.0, num_candidates=5, spread=4.0)
    held = compute_optimal(session, 8, 2.0, num_candidates=5, spread=4.0,
                           hold_session_values=True)
    assert [c.n_params for c in free.candidates] == [c.n_params for c in held.candidates]
    assert not free.hold_session_values and held.hold_session_values
    for f, h in zip(free.candidates, held.candidates):
        assert h.plan["zero_stage"] == 0 and not h.plan["overlap_grad_reduce"]
        assert f.plan["zero_stage"] >= 1 and f.plan["overlap_grad_reduce"]
        for c in (f, h):  # the study's figures are those of the plan simulated alone
            assert simulate(_as_session(session, c)).report.tokens_per_s == pytest.approx(
                c.tokens_per_s, rel=1e-9)
        assert f.tokens_per_s > 1.03 * h.tokens_per_s and f.loss < h.loss
    assert free.candidates[free.best].loss < held.candidates[held.best].loss


def test_candidates_carry_their_plans_calibration_departures_and_are_marked(capsys, monkeypatch):
    """Each candidate carries its plan's row's within_calibration and departures (the A100
    store's calibration runs all use full recomputation: a plan without it departs), into
    --json too; the table marks the departing plans (still the fastest: not replaced) and
    names their departures under it."""
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    r = compute_optimal(session, 8, 2.0, num_candidates=5, spread=4.0)
    fit = [c for c in r.candidates if c.plan is not None]
    for c in fit:
        assert c.within_calibration is c.plan["within_calibration"]
        assert c.calibration_departures == c.plan["calibration_departures"]
        assert ("recompute" in c.calibration_departures) == (c.plan["recompute"] != "full")
        if c.calibration_departures:
            assert c.within_calibration is False
    departing = [c for c in fit if c.calibration_departures]
    assert departing  # the fastest plans skip recomputation: outside the runs, still chosen
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5",
                 "--spread", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["within_calibration"], c["calibration_departures"]) for c in doc["candidates"]] \
        == [(c.within_calibration, c.calibration_departures) for c in r.candidates]
    monkeypatch.setenv("COLUMNS", "250")  # one line per row
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5",
                 "--spread", "4"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    # ⚠ on every plan outside calibration, by a feature or by its GPU count or model size (as
    # the window's Studies and Explore tables mark it)
    assert [("⚠" in row) for row in rows] == [c.within_calibration is False
                                             for c in r.candidates]
    flat = " ".join(out.split())
    assert all(" ".join(c.calibration_departures.split()) in flat for c in departing)


@pytest.mark.parametrize("args, needle", [
    (["--gpus", "0", "--days", "2"], "--gpus"),
    (["--gpus", "8", "--days", "-1"], "--days"),
    (["--gpus", "8", "--days", "2", "--assumed-mfu", "1.5"], "--assumed-mfu"),
    (["--gpus", "8", "--days", "2", "--spread", "1"], "--spread"),
])
def test_cli_bad_budget_exits_2_naming_the_option(args, needle, capsys):
    assert main(["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), *args]) == 2
    assert needle in capsys.readouterr().err


def test_a_budget_below_the_smallest_shape_names_no_rule_candidate():
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    r = compute_optimal(session, 1, 0.001)
    assert r.rule_params < 2e7 and r.rule_index is None
    assert len(r.candidates) == 1 and r.candidates[0].model.num_layers == 8  # all round to L=8, h=1024
    assert "training_days" not in (r.candidates[0].plan or {})


def test_sizes_that_round_to_a_shape_already_tried_are_said_as_data_and_under_the_table(capsys):
    """The trial asked for 9 candidates and got 5 rows with no word of the other 4: sizes that
    round to the shape of the size before them (h to 8 head sizes, L to 8) are tried once.
    --json gives the sizes asked for, the candidate each became and each left-out size with
    why; the table says it under it. On the GPT-3 1.3B example, 1 GPU for 0.001 days
    (N_opt 8.6 M), all 9 sizes are below the smallest GPT shape, L = 8, h = 1,024 (154 M)."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "1", "--days", "0.001", "--hold-session-values"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sizes = doc["requested_sizes"]
    assert len(sizes) == 9 and len(doc["candidates"]) == 1 and doc["size_candidates"] == [0] * 9
    assert sizes == pytest.approx(list(doc["rule_params"] * 8.0 ** np.linspace(-0.5, 0.5, 9)))
    c = doc["candidates"][0]
    assert (c["num_layers"], c["hidden_size"]) == (8, 1024) and max(sizes) < c["n_params"]
    assert doc["left_out"] == [{"size": x, "candidate": 0, "why": "below the smallest shape"}
                               for x in sizes[1:]]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    names = [format_params(x) for x in sizes[1:]]
    assert (f"8 of 9 candidate sizes are no row of their own: {', '.join(names[:-1])} and "
            f"{names[-1]} round to the shape of {format_params(c['n_params'])} (L=8, h=1024), 8 "
            "of them below it, the smallest GPT-style shape") in out
    # a study whose sizes are all their own shapes says nothing
    from core.studies.optimal import OptimalResult, left_out_note, left_out_sizes
    r = OptimalResult(8, 1.0, 0.4, 312e12, 1e20, 1e9, 2e10, None, requested_sizes=[1e9, 2e9],
                      size_candidates=[0, 1])
    assert left_out_sizes(r) == [] and left_out_note(r) == ""


@pytest.mark.parametrize("kw, needle", [({"days": 1e300}, "--days"), ({"spread": 1e30}, "--spread"),
                                        ({"num_gpus": 10**9}, "--gpus")])
def test_budgets_beyond_the_bounds_are_refused(kw, needle):
    args = {"num_gpus": 8, "days": 1.0, **kw}
    with pytest.raises(ConfigError, match=needle):
        compute_optimal(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"), args.pop("num_gpus"),
                        args.pop("days"), **args)


def test_merged_dimensions_read_as_one_sweeps():
    """A field each sweep held at its only valid value, but at different values, is swept
    (without "the only valid value"); one held at one value stays held with its why; values
    are the union, sorted; micro-batch sizes stopped at different b say so once."""
    from core.studies.sweep import merge_dimensions
    why = "the only valid value; default: the divisors of the GPUs per node"

    def dims(t, zero_why, stopped):
        return [{"field": "tensor_parallel", "swept": False, "values": [t], "why": why,
                 "left_out": []},
                {"field": "zero_stage", "swept": False, "values": [0], "why": zero_why,
                 "left_out": []},
                {"field": "micro_batch_size", "swept": True, "values": [1, t], "why": "default",
                 "left_out": [], "stopped": stopped}]
    t, zero, b = merge_dimensions([dims(4, "held", "stopped at b = 8"),
                                   dims(2, "held", "stopped at b = 4")])
    assert t == {"field": "tensor_parallel", "swept": True, "values": [2, 4],
                 "why": "default: the divisors of the GPUs per node", "left_out": []}
    assert zero == {"field": "zero_stage", "swept": False, "values": [0], "why": "held",
                    "left_out": []}
    assert b["values"] == [1, 2, 4] and b["swept"] and b["stopped"].startswith("each model's")
    assert merge_dimensions([dims(4, "held", "x")])[2]["stopped"] == "x"
    assert merge_dimensions([]) == []


def test_the_table_gives_each_plans_memory_and_marks_a_tight_one():
    """The GiB column is the plan's memory per GPU (its sweep row's), ``~`` when tight, as in
    ``vtrain sweep``'s table."""
    from core.cli.optimal import _memory_cell
    row = {"max_memory_per_gpu_bytes": 81.7 * 2 ** 30, "memory_verdict": "tight"}
    assert _memory_cell(row) == "[yellow]81.7~[/]"
    assert _memory_cell({**row, "memory_verdict": "fits"}) == "81.7"


def test_candidates_run_the_sessions_attention_kernel():
    """The attention kernel is how the session trains: a FlashAttention session's candidates
    are timed with FlashAttention (they ran unfused, 2.4x slower at s = 8192), an unfused
    session's unfused. They are shaped like the session's model (SwiGLU for a Llama session;
    they were GPT shapes, GeLU, until the candidates followed the session's model)."""
    from core.studies.optimal import _candidate_models
    m = MODEL_PRESETS["Llama 3 70B"]
    for kernel in ("flash", "unfused"):
        models = _candidate_models(dataclasses.replace(m, attention_kernel=kernel), 70e9, 3, 4.0)
        assert len(models) == 3 and {x.attention_kernel for x in models} == {kernel}
        assert {x.activation for x in models} == {"swiglu"}  # the template's, not GPT's


def test_a_batch_too_small_for_the_gpus_is_said_and_set_changes_it(capsys):
    """A global batch below the budget's nodes keeps d below them: every plan of 64 GPUs with
    B = 4 needs t*p*cp >= 16 (the trial's Llama session had B = 8 on 1,024 GPUs: 2 % MFU with
    no word why); --set changes the batch as on simulate and sweep."""
    from core.studies.optimal import small_batch_note
    from core.io.session import load_any
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    s = load_any(path)  # B = 256 on nodes of 8
    assert small_batch_note(s, 2048) == "" and small_batch_note(s, 2049) != ""
    assert main(["optimal", path, "--gpus", "64", "--days", "1", "--candidates", "2",
                 "--set", "plan.global_batch_size=4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["warnings"][0] == (
        "the global batch of 4 sequences allows data parallelism up to 4: every plan of 64 GPUs "
        "needs t*p*cp >= 16, so the candidates' MFU is that of deep pipelines; --set "
        "plan.global_batch_size=N for a pretraining batch (GPT-3: 1,536 sequences; Llama 3: "
        "16 M tokens)")
    assert all(c["plan"] is None or c["plan"]["data_parallel"] <= 4 for c in doc["candidates"])


def test_no_rule_candidate_note_names_the_nearest_shape_not_the_smallest_one():
    """Two candidates over the default spread of 8 sit sqrt(8) = 2.83 times below and above
    N_opt, so neither is the rule's size; the note named "the smallest is 913M: L=8, h=1024"
    though that candidate is L=16, h=2048 (the shape L=8, h=1024 is 154M). It names the
    nearest candidate, its own shape and the factor, and says L=8, h=1024 only below it."""
    from core.studies.optimal import (Candidate, OptimalResult, _candidate_models,
                                      no_rule_candidate_note)
    m = load_any(EXAMPLES / "gpt3_175b.json").model

    def result(n_rule, k):
        models = _candidate_models(m, n_rule, k, 8.0)
        r = OptimalResult(64, 1.0, 0.4, 312e12, 6.9e20, n_rule, 50e9, None)
        r.candidates = [Candidate(x, num_parameters(x), None, *[math.nan] * 4) for x in models]
        return r

    r = result(2.3e9, 2)
    small, large = r.candidates
    assert (small.model.num_layers, small.model.hidden_size) == (16, 2048)
    assert small.n_params / 2.3e9 > 1 / 2.9 and large.n_params / 2.3e9 < 2.9  # both beyond 2x
    near = min(r.candidates, key=lambda c: abs(math.log(c.n_params / 2.3e9)))
    ratio = max(near.n_params / 2.3e9, 2.3e9 / near.n_params)
    note = no_rule_candidate_note(r)
    assert f"(L={near.model.num_layers}, h={near.model.hidden_size})" in note
    assert f"{ratio:.3g} times" in note and "L=8, h=1024" not in note
    below = result(1e7, 9)  # every size rounds to the smallest shape, 154M
    assert len(below.candidates) == 1
    assert below.candidates[0].n_params == num_parameters(gpt_shape(1e7, m.seq_length, m.vocab_size))
    note = no_rule_candidate_note(below)
    ratio = below.candidates[0].n_params / 1e7
    assert f"(L=8, h=1024), is {ratio:.3g} times larger" in note
    assert note.endswith("(no GPT shape is smaller than L=8, h=1024).")
    r.rule_index = 0
    assert no_rule_candidate_note(r) == ""


def test_cli_names_the_nearest_candidate_when_none_is_the_rules_size(capsys):
    """8 GPUs for a day: N_opt = 791M; two candidates over a spread of 8 are 255M (L=16,
    h=1024) and 1.97B (L=16, h=3072), both beyond a factor of 2 of it."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "8", "--days", "1", "--candidates", "2",
                 "--hold-session-values", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rule_index"] is None
    near = min(doc["candidates"], key=lambda c: abs(math.log(c["n_params"] / doc["rule_params"])))
    ratio = max(near["n_params"] / doc["rule_params"], doc["rule_params"] / near["n_params"])
    assert main(["optimal", path, "--gpus", "8", "--days", "1", "--candidates", "2",
                 "--hold-session-values"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"the nearest, {near['name'].split()[0]} (L={near['num_layers']}, "
            f"h={near['hidden_size']}), is {ratio:.3g} times") in out
    assert "L=8, h=1024" not in out


def test_the_header_names_the_node_network_and_the_peak_the_budget_uses(capsys):
    """The header named the GPU kind only: --set cluster.gpu=H100-SXM5-80GB on the vTrain
    examples keeps its own 800 Gb/s per node (a quarter of a DGX H100's), which nothing said;
    and the peak behind C = GPUs x peak x seconds x MFU was not given (the GPT-3 1.3B example
    has the same 800 Gb/s per node)."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "8", "--days", "1", "--candidates", "2",
            "--hold-session-values", "--set", "cluster.gpu=H100-SXM5-80GB"]
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["peak_flops_per_gpu"] == 989e12  # the H100 data sheet's dense BF16
    assert doc["budget_flops"] == 8 * 989e12 * 86400 * 0.4
    assert main(args) == 0
    head = " ".join(capsys.readouterr().out.split())
    assert head.startswith("Compute-optimal model for 8 x H100-SXM5-80GB (8 per node, 800 Gb/s "
                           "per node; peak 989.0 TFLOP/s per GPU) for 1 day ($")  # was "1 days"


def test_a_budget_shorter_than_one_iteration_is_refused_not_given_a_loss(capsys):
    # --days 1e-300 printed "lowest loss 1.16e108" for 8.35e-290 tokens, exit 0
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    with pytest.raises(ConfigError) as err:
        compute_optimal(session, 8, 1e-300)
    assert err.value.errors[0].field == "--days"
    assert "shorter than one iteration" in err.value.errors[0].message
    assert main(["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
                 "--days", "1e-300", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("vtrain: error: --days: 1e-300 days is shorter")
    # a budget of a few iterations: every candidate that trains has a finite loss of its tokens
    result = compute_optimal(session, 8, 1e-4)
    for c in result.candidates:
        if c.plan is not None and math.isfinite(c.loss):
            assert c.tokens >= session.plan.global_batch_size * session.model.seq_length
            assert c.loss == pytest.approx(chinchilla_loss(c.n_params, c.tokens))
        elif c.plan is not None:
            assert c.reason.startswith("less than one iteration in the budget")


@pytest.mark.parametrize("option, value, start", [
    # 1e-6 GPU-hours on 8 GPUs: 1e-6 / (8 x 24) days
    ("--gpu-hours", "1e-6", f"1e-06 GPU-hours ({1e-6 / (8 * 24):.3g} days on 8 GPUs) is shorter "
                            "than one iteration"),
    # 1 FLOP: below 6 N B s of every candidate (no days: a FLOP budget assumes no MFU)
    ("--flops", "1", "1 FLOPs is less than one iteration of every candidate (the smallest takes "
                     "6 N B s = "),
])
def test_a_budget_below_one_iteration_is_refused_naming_the_option_given(capsys, option, value,
                                                                           start):
    """A --gpu-hours or --flops budget shorter than one iteration was refused as "--days:
    5.20833e-09 days is shorter ...", an option the command was not given; it names the option
    and value typed (the GPU-hours with the days they are)."""
    assert main(["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
                 option, value, "--candidates", "2", "--hold-session-values"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vtrain: error: {option}: {start}"), err
    assert "--days" not in err


def test_a_gpu_count_out_of_range_is_refused_before_any_warning(capsys):
    """--gpus 1000001 with a batch of 256 printed the small-batch warning (t*p*cp >= 3,907)
    before refusing the count; the count is refused first, alone (MAX_GPUS = 1,000,000)."""
    from core.studies.optimal import MAX_GPUS
    assert MAX_GPUS == 1_000_000
    assert main(["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "1000001",
                 "--days", "1"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "vtrain: error: --gpus: 1000001 must be an integer from 1 to 1,000,000\n"


def test_the_table_names_a_block_of_recomputed_layers(capsys):
    """A candidate whose fastest plan recomputes only the first layers of each model chunk
    (plan.recompute_num_layers, Megatron-LM's --recompute-method block) reads "full (block,
    N)" in the recomp column, not "full" (every layer recomputed): GPT-3 175B's 1,024-GPU
    budget gives its 18.4 B candidate 4 of 40 layers."""
    path = str(EXAMPLES / "gpt3_175b.json")
    assert main(["optimal", path, "--gpus", "1024", "--days", "30", "--json"]) == 0
    cands = json.loads(capsys.readouterr().out)["candidates"]
    blocks = [c["plan"]["recompute_num_layers"] for c in cands
              if c["plan"] and c["plan"]["recompute_num_layers"]]
    assert blocks == [4]
    assert main(["optimal", path, "--gpus", "1024", "--days", "30"]) == 0
    out = capsys.readouterr().out
    assert "full (block, 4)" in out


def test_a_flop_budget_trains_every_candidate_on_that_many_flops(capsys):
    """--flops C was turned into days at an assumed MFU of 40 % and every candidate trained for
    those days, so a plan at 60 % MFU spent 1.24 C (the trial: 1.24e22 of 1e22). Each
    candidate now trains on C / 6N tokens (Kaplan et al.'s 6 N D, the count of the rule and
    its loss fit), rounded down to whole iterations of B x s tokens: 6 N D <= C, short of it
    by less than one iteration's 6 N B s; its days are its tokens over its plan's tokens/s;
    no MFU is assumed (--assumed-mfu with --flops is refused, not ignored)."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    C = 2e20
    args = ["optimal", path, "--gpus", "8", "--flops", "2e20", "--candidates", "3",
            "--hold-session-values", "--set", "cluster.gpu=H100-SXM5-80GB", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["budget_flops"] == doc["flops"] == C
    assert doc["days"] is None and doc["assumed_mfu"] is None and doc["cost_usd"] is None
    iteration = 256 * 2048  # the example's B x s
    trained = [c for c in doc["candidates"] if c["loss"] is not None]
    assert len(trained) == 3
    for c in trained:
        spent = 6 * c["n_params"] * c["tokens"]
        assert c["tokens"] % iteration == 0
        assert c["tokens"] == math.floor(C / (6 * c["n_params"]) / iteration) * iteration
        assert C - 6 * c["n_params"] * iteration < spent <= C
        assert spent == pytest.approx(C, rel=1e-3)
        assert c["days"] == pytest.approx(c["tokens"] / c["tokens_per_s"] / 86400, rel=1e-12)
        assert c["cost_usd"] == pytest.approx(8 * c["days"] * 24 * doc["price_per_gpu_hour_usd"])
        assert c["loss"] == pytest.approx(chinchilla_loss(c["n_params"], c["tokens"]), rel=1e-12)
    assert len({round(c["days"], 6) for c in trained}) == 3  # each its own days
    assert doc["best"] == min(range(3), key=lambda k: doc["candidates"][k]["loss"])
    n_opt, d_opt = chinchilla_optimal(2e20)
    assert doc["rule_params"] == pytest.approx(n_opt) and 6 * n_opt * d_opt == pytest.approx(2e20)
    # one budget, not two; and a budget that is no number of FLOPs is refused by name
    for both_or_none, needle in ((["--flops", "1e20", "--days", "1"], "not allowed with"),
                                 ([], "one of the arguments --days --flops --gpu-hours is "
                                      "required")):
        with pytest.raises(SystemExit) as exit_:
            main(["optimal", path, "--gpus", "8", *both_or_none])
        assert exit_.value.code == 2 and needle in capsys.readouterr().err
    assert main(["optimal", path, "--gpus", "8", "--flops", "0"]) == 2
    assert capsys.readouterr().err.startswith("vtrain: error: --flops: 0.0 must be a positive")
    # the days at full utilization (989 TFLOP/s, no plan is faster) beyond 3,650
    assert main(["optimal", path, "--gpus", "8", "--flops", "1e30", "--set",
                 "cluster.gpu=H100-SXM5-80GB"]) == 2
    assert (f"--flops: 1e+30 FLOPs take at least {1e30 / (8 * 989e12 * 86400):.3g} days on 8 "
            "GPUs") in capsys.readouterr().err
    assert main(["optimal", path, "--gpus", "8", "--flops", "1e20", "--assumed-mfu", "0.5"]) == 2
    assert capsys.readouterr().err.startswith(
        "vtrain: error: --assumed-mfu: 0.5 with --flops: a FLOP budget assumes no MFU")


def test_a_batch_too_small_for_the_gpus_is_said_before_the_sweeps(capsys):
    """The trial (B = 8 on 2,048 H100s: 2 min of sweeps, 5 % MFU) got the small-batch warning
    only under the table, after the sweeps; docs/study_compute_optimal.md says the study warns
    first. The table run says it on stderr before any sweep, and still under the table."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "64", "--days", "1", "--candidates", "2",
                 "--set", "plan.global_batch_size=4"]) == 0
    cap = capsys.readouterr()
    note = ("warning: the global batch of 4 sequences allows data parallelism up to 4: every "
            "plan of 64 GPUs needs t*p*cp >= 16")
    assert " ".join(cap.err.split()).startswith(note)
    assert note in " ".join(cap.out.split())
    # a batch the GPUs' nodes can split says nothing early; --json keeps stderr quiet
    assert main(["optimal", path, "--gpus", "8", "--days", "1", "--candidates", "2"]) == 0
    assert "global batch" not in capsys.readouterr().err
    assert main(["optimal", path, "--gpus", "64", "--days", "1", "--candidates", "2",
                 "--set", "plan.global_batch_size=4", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_the_lowest_loss_line_gives_the_flops_each_named_candidate_spends(capsys):
    """A researcher with --flops 1e23 read C = 1e23 and then a 39.8B model on 608B tokens:
    1.45e23 FLOPs, since each candidate trained for days at its own plan's MFU. The
    lowest-loss line prints 6 N D of the candidates it names (Chinchilla's count, N the
    parameters, D the tokens of the JSON's candidate): C now, to whole iterations, with the
    days its plan takes and their cost; the table has a days column."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "8", "--flops", "2e20", "--candidates", "2",
            "--hold-session-values"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["candidates"][doc["best"]]
    spent = 6.0 * best["n_params"] * best["tokens"]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = out[out.index("Lowest loss:"):]
    usd = 8 * best["days"] * 24 * doc["price_per_gpu_hour_usd"]
    assert (f"tokens (6 N D = {spent:.3g} FLOPs, in {best['days']:.3g} days (${usd:,.0f})) at "
            f"{best['mfu']:.1%} MFU") in line
    assert spent == pytest.approx(2e20, rel=1e-3) and spent <= 2e20
    assert "for 2e+20 FLOPs (each candidate's days at $2.00/GPU-hour)" in out
    assert "Chinchilla rule (loss fit of Besiroglu et al. 2024) for the FLOP budget: C = 2e+20" in out
    assert "┃ tokens ┃ days ┃" in out


def test_a_candidates_large_sweep_is_said_as_it_starts(capsys, monkeypatch):
    """The trial's study (2,048 H100s, B = 2,048: 2 min 14 s) printed "large sweep: ... about 3
    minutes" under the table, after the wait; vtrain sweep says it before it runs. Each
    candidate's sweep now says it on stderr as it starts, labelled with the candidate, and the
    table keeps it under the table; --json keeps stderr quiet."""
    import core.studies.sweep.bound as bound
    monkeypatch.setattr(bound, "LARGE_SWEEP_WORK", 0)  # every sweep is "large"
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "2"]
    assert main([*args, "--json"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    doc = json.loads(cap.out)
    names = [c["name"] for c in doc["candidates"] if c["plan"] is not None]
    assert names and any(w.startswith("large sweep: the ") for w in doc["warnings"])
    assert main(args) == 0
    cap = capsys.readouterr()
    early = [" ".join(x.split()) for x in cap.err.split("warning: ")[1:]]
    assert [w.split(": large sweep: the ")[0] for w in early] == names
    assert all("pipeline steps to simulate" in w for w in early)
    assert "large sweep: the " in cap.out  # and under the table, as before


def test_out_writes_the_lowest_loss_candidate_as_a_session_that_simulates_to_its_figures(
        capsys, tmp_path):
    """A user had the study name the lowest-loss model and plan but no way to keep it:
    ``--out S.json`` writes it (model, plan, the file's cluster and price, and as token budget
    the tokens it trains in the budget's days), and ``vtrain simulate S.json`` gives the
    study's iteration time, tokens/s and MFU for it, and the budget's days within the one
    iteration simulate rounds up to."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    out = tmp_path / "best.json"
    args = ["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "2",
            "--hold-session-values", "--out", str(out)]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["candidates"][doc["best"]]
    saved = load_any(out)
    assert (saved.model.num_layers, saved.model.hidden_size) == (best["num_layers"],
                                                                  best["hidden_size"])
    assert saved.cost.training_tokens == pytest.approx(best["tokens"], rel=1e-12)
    assert saved.cluster.gpu == "A100-SXM4-80GB" and saved.plan.num_gpus == 8
    assert main(["simulate", str(out), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time_s"] == pytest.approx(best["plan"]["iteration_time_s"], rel=1e-9)
    assert sim["tokens_per_s"] == pytest.approx(best["tokens_per_s"], rel=1e-9)
    assert sim["mfu"] == pytest.approx(best["mfu"], rel=1e-9)
    iteration_tokens = saved.plan.global_batch_size * saved.model.seq_length
    assert sim["training_days"] == pytest.approx(
        math.ceil(best["tokens"] / iteration_tokens) * sim["iteration_time_s"] / 86400, rel=1e-9)
    assert 2.0 <= sim["training_days"] <= 2.0 + sim["iteration_time_s"] / 86400
    # the Megatron-LM launch of the saved session runs the iterations simulate counts: its
    # --train-samples, run as train_samples // B iterations, were round(tokens / s), the
    # fractional iteration's floor, one fewer than simulate's ceiling
    from core.io.megatron.from_session import export_arguments
    n = math.ceil(best["tokens"] / iteration_tokens)
    assert n - 1 < best["tokens"] / iteration_tokens < n  # not a whole number of iterations
    assert sim["num_iterations"] == n
    exported = export_arguments(saved)
    B = saved.plan.global_batch_size
    assert int(exported[exported.index("--train-samples") + 1]) == n * B
    # the table says which candidate it wrote
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"the lowest-loss candidate ({best['name'].split(' ')[0]}, its plan" in text
    assert str(out) in text


def test_out_writes_nothing_when_no_candidate_has_a_plan(capsys, tmp_path):
    """No candidate with a plan (1 GPU cannot hold a plan of a 256-sequence batch that fits):
    --out is refused by name, exit 2, and no file is written."""
    from core.studies.optimal import OptimalResult, candidate_session
    empty = OptimalResult(8, 1.0, 0.4, 1.0, 1.0, 1.0, 1.0, None)
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    with pytest.raises(ValueError, match="no candidate has a plan"):
        candidate_session(session, empty)
    out = tmp_path / "sub" / "best.json"  # a folder that does not exist: refused before the study
    assert main(["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
                 "--days", "2", "--out", str(out)]) == 2
    assert "--out" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("budget, shown", [
    (["--days", "9.05674321"], "for 9.05674321 days"),  # typed: as typed
    (["--days", "30"], "for 30 days"),
    (["--days", "1"], "for 1 day"),  # was "for 1 days": one day is singular
    (["--days", "1.5"], "for 1.5 days"),
    (["--gpu-hours", "192"], "for 192 GPU-hours, 1 day"),  # 192 / (8 x 24) = 1 day
])
def test_the_header_prints_typed_days_as_typed_and_computed_days_to_3_figures(
        budget, shown, capsys):
    """The header printed "for 9.05674 days" (six figures of a computed number, and a typed
    value rounded); computed days take 3 significant figures (days_text)."""
    from core.cli.optimal import days_text
    from core.util.text import days_phrase
    assert days_text(9.05674321) == "9.06" and days_text(1234.5) == "1,234"
    assert [days_phrase(t) for t in ("1", "1.5", "0.5", "2", "1.0")] == [
        "1 day", "1.5 days", "0.5 days", "2 days", "1.0 days"]
    assert days_text(0.012345) == "0.0123"
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "8", *budget, "--candidates", "2",
                 "--hold-session-values", "--set", "cluster.gpu=H100-SXM5-80GB"]) == 0
    header = " ".join(capsys.readouterr().out.split())
    assert shown + " ($" in header


@pytest.mark.parametrize("as_json", [False, True])
def test_out_without_a_candidate_prints_the_study_then_refuses_with_why(as_json, tmp_path,
                                                                        capsys):
    """On 7 GPUs no candidate has a plan (t*p*d = 7 with t dividing the node of 8 and d*b
    dividing B = 256: none). With --out the study's tables (or its --json) were never printed,
    only "--out ...: no candidate has a plan that trains in the budget", which hid the
    GPU-count rule the study gives; now the study is printed, then --out is refused (exit
    2) with the rule, and nothing is written."""
    out = tmp_path / "best.json"
    args = ["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "7", "--days",
            "1", "--candidates", "2", "--hold-session-values", "--out", str(out)]
    assert main([*args, "--json"] if as_json else args) == 2
    cap = capsys.readouterr()
    rule = ("No candidate has a plan on exactly 7 GPUs: a plan needs t*p*d GPUs with t "
            "dividing a node and d*b dividing the global batch (256)")
    if as_json:
        doc = json.loads(cap.out)
        assert doc["num_gpus"] == 7 and doc["best"] is None and len(doc["candidates"]) == 2
    else:
        assert rule in " ".join(cap.out.split())
    err = " ".join(cap.err.split())
    assert f"--out {out}: no candidate has a plan that trains in the budget" in err
    assert rule in err and not out.exists()


def test_no_tight_trains_each_candidate_with_its_fastest_plan_outside_the_margin(capsys):
    """``vtrain optimal --no-tight`` (``compute_optimal(no_tight=True)``): with half the GPU as
    margin some candidates' fastest plans are tight; left out, each candidate trains with the
    fastest plan of its sweep whose verdict is "fits" (``run_sweep(no_tight=True)``'s, exact),
    no faster than before; --json and the table say so."""
    from core.studies.sweep import SweepSpace, run_sweep
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    session.cluster.memory_reserve_fraction = 0.5
    plain = compute_optimal(session, 8, 2.0, num_candidates=3, spread=2.0)
    kept = compute_optimal(session, 8, 2.0, num_candidates=3, spread=2.0, no_tight=True)
    assert not plain.no_tight and kept.no_tight
    tight = [k for k, c in enumerate(plain.candidates)
             if c.plan is not None and c.plan["memory_verdict"] == "tight"]
    assert tight  # the margin matters here
    space = SweepSpace.default_on(session, 8, False)
    for k, (a, b) in enumerate(zip(plain.candidates, kept.candidates)):
        assert b.plan is None or b.plan["memory_verdict"] == "fits"
        if b.plan is None:
            continue
        assert b.tokens_per_s <= a.tokens_per_s
        s = session.copy()
        s.model = b.model
        res = run_sweep(s, space, best_by=False, no_tight=True)
        assert res.plan_row(res.fastest) == b.plan
    assert any(kept.candidates[k].plan != plain.candidates[k].plan for k in tight)
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "3", "--spread", "2",
            "--set", "cluster.memory_reserve_fraction=0.5"]
    assert main([*args, "--no-tight", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["no_tight"] is True
    assert [c["plan"] for c in doc["candidates"]] == [c.plan for c in kept.candidates]
    assert main([*args, "--no-tight"]) == 0
    from core.cli.common import NO_TIGHT_OPTIMAL_NOTE
    assert NO_TIGHT_OPTIMAL_NOTE in " ".join(capsys.readouterr().out.split())
    assert main(args) == 0
    assert NO_TIGHT_OPTIMAL_NOTE not in " ".join(capsys.readouterr().out.split())


def _old_gpt_shape(n_params, seq_length=2048, vocab_size=50257):
    """``gpt_shape`` as it was before the candidates followed the session's model (heads of
    128, h a multiple of 1,024 near (128 N / 12)^(1/3), L a multiple of 8 or 16): the
    reference the GPT template must reproduce."""
    from core.plan.model_config import ModelConfig
    h = max(1024, 1024 * round((128 * n_params / 12.0) ** (1 / 3) / 1024))

    def model(layers):
        return ModelConfig("", layers, h, h // 128, None, seq_length, vocab_size)
    per_layer = num_parameters(model(2)) - num_parameters(model(1))
    target = (n_params - (num_parameters(model(1)) - per_layer)) / per_layer
    grain = 16 if target >= 64 else 8
    return model(max(8, grain * round(target / grain)))


def test_a_gpt_template_gives_exactly_the_gpt_shapes_of_before():
    """The candidates of a GPT session (the examples' GPT-3 1.3B and 175B, heads of 128) are
    the GPT-3-proportioned shapes of before, field for field but the name, at every size of
    the existing tests' budgets and beyond; gpt_shape is the GPT template's shape_like. One
    size moved when the width stopped counting the embeddings as layers (h from h / L = 128
    with every weight counted): 4.47 B, L = 24, h = 4,096 (h / L = 171) is now L = 40,
    h = 3,072 (77), its width 3,580 rounding down to a multiple of 1,024, not up."""
    from core.studies.optimal import _candidate_models, gpt_template, shape_like
    for example in ("gpt3_1.3b_single_node.json", "gpt3_175b.json"):
        m = load_any(EXAMPLES / example).model
        for n in np.geomspace(1e7, 2e12, 29):
            old = _old_gpt_shape(n, m.seq_length, m.vocab_size)
            new = shape_like(m, n)
            if f"{n:.3g}" == "4.47e+09":
                assert (old.num_layers, old.hidden_size, new.num_layers, new.hidden_size) == (
                    24, 4096, 40, 3072)
                continue
            assert dataclasses.replace(new, name="") == dataclasses.replace(
                old, make_vocab_size_divisible_by=m.make_vocab_size_divisible_by,
                attention_kernel=m.attention_kernel)
            assert new.name == (f"{format_params(num_parameters(new))} GPT-style "
                                f"(L={old.num_layers}, h={old.hidden_size})")
            g = gpt_shape(n, m.seq_length, m.vocab_size)
            assert dataclasses.replace(g, name="") == dataclasses.replace(old, name="")
            assert g == shape_like(gpt_template(m.seq_length, m.vocab_size), n)
        # the study's candidates: 8 GPUs for 2 days (N_opt 1.13 B), spread 4, as the tests above
        for n_rule in (1.13e9, 5.4e10, 1e7):
            got = _candidate_models(m, n_rule, 5, 4.0)
            sizes = n_rule * 4.0 ** np.linspace(-0.5, 0.5, 5)
            want = list(dict.fromkeys((x.num_layers, x.hidden_size, x.num_attention_heads)
                                      for x in map(_old_gpt_shape, sizes)))
            if n_rule == 1.13e9:  # 1.6 B was (16, 3072), h / L = 192, as 2.26 B: now its own
                assert want == [(8, 2048, 16), (16, 2048, 16), (24, 2048, 16), (16, 3072, 24)]
                want.insert(3, (32, 2048, 16))
            assert [(x.num_layers, x.hidden_size, x.num_attention_heads) for x in got] == want


def test_a_llama_3_8b_template_gives_llama_shapes_and_its_own_shape_at_its_size():
    """A Llama 3 8B session (heads of 128, 8 query groups, SwiGLU MLP of 14,336 = 3.5 h,
    RMSNorm, RoPE, untied; Meta's config) got GPT-3 shapes (GeLU 4 h, 32 KV heads). At its own
    size, N = 8.03 B, the closed forms give back its shape: h = 4,096 is the width whose
    model at h / L = 128 (L = 32) has N parameters in all, rest + per layer x h / 128 = N
    exactly, a = h / 128 = 32, g = 8 (32 divides by
    it), ffn = 256 * round(3.5 h / 256) = 14,336, L = 8 * round((N - rest) / per layer / 8) =
    32 with 218,112,000 parameters per layer (2 h^2 + 2 h (8 * 128) + 3 h ffn + 2 h) and
    1,050,677,248 besides (2 V h + h, untied): the very model."""
    from core.studies.optimal import _candidate_models, shape_like
    m = MODEL_PRESETS["Llama 3 8B"]
    n = num_parameters(m)
    assert n == 8_030_261_248
    h = 4096
    per_layer = 2 * h * h + 2 * h * 8 * 128 + 3 * h * 14336 + 2 * h
    rest = 2 * 128256 * h + h
    assert (per_layer, rest) == (218_112_000, 1_050_677_248)
    assert rest + per_layer * h / 128 == n  # Llama 3 8B is at h / L = 128 exactly
    assert 8 * round((n - rest) / per_layer / 8) == 32
    x = shape_like(m, n)
    assert (x.num_layers, x.hidden_size, x.num_attention_heads, x.num_query_groups,
            x.ffn_hidden_size) == (32, 4096, 32, 8, 14336) == (
        m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
        m.ffn_hidden_size)
    assert num_parameters(x) == n and x.name == "8.03B Llama-style (L=32, h=4096)"
    assert dataclasses.replace(x, name=m.name) == m  # every other field is the template's
    # other sizes: the template's family, heads of 128, 8 groups, ffn 3.5 h to 256, within
    # a few % of the size (h's rounding to 1,024 moves it most at the small end)
    for target in np.geomspace(4e9, 5e11, 12):
        y = shape_like(m, target)
        assert (y.activation, y.normalization, y.position_embedding, y.tied_embeddings,
                y.add_bias_linear) == ("swiglu", "rmsnorm", "rope", False, False)
        assert y.hidden_size == 128 * y.num_attention_heads and y.num_attention_heads % 8 == 0
        assert y.num_query_groups == 8 and y.kv_channels is None
        assert y.ffn_hidden_size == 256 * round(3.5 * y.hidden_size / 256)
        assert abs(num_parameters(y) / target - 1) < 0.12
    # 12 B: h = 5,120 (40 heads, 8 groups), ffn 17,920, L = 32: 12.13 B
    y = shape_like(m, 12e9)
    assert (y.num_layers, y.hidden_size, y.num_attention_heads, y.num_query_groups,
            y.ffn_hidden_size, num_parameters(y)) == (32, 5120, 40, 8, 17920, 12_134_978_560)
    # the study's candidates at the budget whose N_opt is the model's size: the middle one
    models = _candidate_models(m, float(n), 3, 4.0)
    assert [(z.num_layers, z.hidden_size) for z in models][1] == (32, 4096)


def test_the_width_follows_h_over_l_of_128_with_the_embeddings_counted():
    """A trial on a Llama 3 8B session (8 H200s, 1 day: N_opt 1.43 B) found its lowest-loss
    candidate at L = 8, h = 3,072 (h / L = 384), far from the documented h ~ 128 L: the width
    was (128 N / 12)^(1/3) of the whole N, 0.79 B of whose 1.85 B are the untied embeddings
    (2 x 128,256 x h), so the layers got what was left. The width is now the one whose model
    at h / L = 128 has N in all: rest(h) + per_layer(h) h / 128 = N (rest: 2 V h + h,
    per_layer: 2 h^2 + 2 h (8 x 128) + 3 h ffn + 2 h, Llama 3 8B's counts), about 2,280 for
    1.85 B, rounded to 2,048; then L = 24 (h / L = 85)."""
    from core.studies.optimal import shape_like
    m = MODEL_PRESETS["Llama 3 8B"]

    def at_aspect(h):  # the closed form, ffn = 3.5 h to 256
        ffn = 256 * round(3.5 * h / 256)
        return 2 * 128256 * h + h + (2 * h * h + 2 * h * 8 * 128 + 3 * h * ffn + 2 * h) * h / 128
    assert at_aspect(2240) < 1.85e9 < at_aspect(2304)  # the width is about 2,280: 2,048
    y = shape_like(m, 1.85e9)
    assert (y.num_layers, y.hidden_size) == (24, 2048)
    assert num_parameters(y) == 2 * 128256 * 2048 + 2048 + 24 * (
        2 * 2048 ** 2 + 2 * 2048 * 1024 + 3 * 2048 * 7168 + 2 * 2048)
    # from 1 B to 1 T parameters the aspect stays within a factor of 2 of 128 (it reached 384)
    for n in np.geomspace(1e9, 1e12, 31):
        z = shape_like(m, n)
        assert 64 <= z.hidden_size / z.num_layers <= 256, (n, z.name)


def test_query_groups_that_do_not_divide_the_heads_take_the_nearest_divisor():
    """A template with 12 query groups at 48 heads (h = 6,144): a 7 B candidate has h =
    4,096, 32 heads, which 12 does not divide; the divisors of 32 nearest 12 are 8 and 16, and
    the smaller is taken. Multi-head attention written out (g = a) stays multi-head; a head size
    given as kv_channels stays given."""
    from core.studies.optimal import shape_like
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], hidden_size=6144,
                            num_attention_heads=48, num_query_groups=12, ffn_hidden_size=21504)
    y = shape_like(m, 7e9)
    assert (y.hidden_size, y.num_attention_heads, y.num_query_groups) == (4096, 32, 8)
    mha = shape_like(dataclasses.replace(m, num_query_groups=48), 7e9)
    assert mha.num_query_groups == mha.num_attention_heads == 32
    q3 = shape_like(dataclasses.replace(m, hidden_size=5120, num_attention_heads=64,
                                        num_query_groups=8, kv_channels=64,
                                        ffn_hidden_size=17408), 5e9)
    # heads of 64: h a multiple of 512, a = h / 64, kv_channels 64 kept; ffn 3.4 h to 256
    assert q3.kv_channels == 64 and q3.hidden_size % 512 == 0
    assert q3.num_attention_heads == q3.hidden_size // 64
    assert q3.ffn_hidden_size == 256 * round(17408 / 5120 * q3.hidden_size / 256)


def _session_with(tmp_path, preset, **changes):
    """The GPT-3 1.3B example session with ``preset``'s model (``changes`` applied), saved."""
    from core.io.session import save_session
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.model = dataclasses.replace(MODEL_PRESETS[preset], **changes)
    path = tmp_path / f"{preset.replace(' ', '_')}.json"
    save_session(s, path)
    return s, str(path)


def test_the_cli_studies_llama_shapes_and_says_which_template(tmp_path, capsys):
    """A Llama 3 8B session at the FLOP budget whose N_opt is 8.03 B (C = 6 N (N / G)^(beta /
    alpha)... solved by inverting Eq. 4) has the rule's candidate L = 32, h = 4,096, 32 heads,
    8 groups, ffn 14,336 (--json gives each candidate's groups and ffn, and the template); the
    header says which model the shapes follow."""
    from core.studies.optimal import CHINCHILLA as c
    session, path = _session_with(tmp_path, "Llama 3 8B", seq_length=2048)
    n = num_parameters(session.model)
    a, b = c["alpha"], c["beta"]
    g = (a * c["A"] / (b * c["B"])) ** (1 / (a + b))
    flops = 6 * (n / g) ** ((a + b) / b)
    assert chinchilla_optimal(flops)[0] == pytest.approx(n, rel=1e-9)
    args = ["optimal", path, "--gpus", "8", "--flops", f"{flops:.17g}", "--candidates", "3",
            "--spread", "4", "--hold-session-values"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rule = doc["candidates"][doc["rule_index"]]
    assert (rule["num_layers"], rule["hidden_size"], rule["num_attention_heads"],
            rule["num_query_groups"], rule["ffn_hidden_size"], rule["n_params"]) == (
        32, 4096, 32, 8, 14336, n)
    assert rule["name"] == "8.03B Llama-style (L=32, h=4096)"
    assert all(x["num_query_groups"] == 8 and x["ffn_hidden_size"] == 256 * round(
        3.5 * x["hidden_size"] / 256) for x in doc["candidates"])
    assert doc["template"] == {
        "name": "Llama 3 8B", "family": "Llama", "head_dim": 128, "num_query_groups": 8,
        "ffn_ratio": 3.5, "activation": "swiglu", "normalization": "rmsnorm",
        "position_embedding": "rope", "tied_embeddings": False, "add_bias_linear": False,
        "qk_layernorm": False}
    assert doc["budget_given"] == {"option": "--flops", "value": float(f"{flops:.17g}")}
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("Candidates shaped like the session's Llama 3 8B (Llama-style: heads of 128 "
            "channels, 8 query groups, MLP 3.5 h, swiglu, rmsnorm, rope, untied embeddings, no "
            "linear biases); only L and h change") in out


@pytest.mark.parametrize("preset, fields", [
    ("Mixtral 8x7B", ["model.num_experts"]),
    ("DeepSeek-V3", ["model.num_experts", "model.multi_latent_attention"]),
])
def test_a_moe_or_latent_attention_session_is_refused_by_name(preset, fields, tmp_path, capsys):
    """A Mixtral 8x7B session was studied as dense GPT-3 shapes (exit 0, no word): the loss law
    is fitted on dense models. The study refuses the session by the field and the rule: the
    core with a ConfigError, the CLI with exit 2 naming the file, before any sweep."""
    from core.studies.optimal import check_template
    session, path = _session_with(tmp_path, preset)
    with pytest.raises(ConfigError) as err:
        compute_optimal(session, 8, 2.0)
    assert [e.field for e in err.value.errors] == fields
    assert "fitted on dense models" in err.value.errors[0].message
    assert "Hoffmann et al. 2022" in err.value.errors[0].message
    with pytest.raises(ConfigError):
        check_template(session.model)
    check_template(MODEL_PRESETS["Llama 3 8B"])  # a dense model passes
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    err_text = " ".join(cap.err.split())
    assert err_text.startswith(f"vtrain: error: {path}: {fields[0]}: ")
    assert all(f"{f}: " in err_text for f in fields)
    assert "fitted on dense models" in err_text


def test_a_gpu_hour_budget_is_studied_as_the_days_it_takes(capsys):
    """2e6 H100-hours on 2,048 GPUs are 2e6 / (2,048 x 24) = 40.69 days: --gpu-hours H gives
    the days H / (GPUs x 24), excludes --days and --flops, is printed as typed with its days,
    and --json says which budget was given; a budget that is no number of hours, or more days
    than the study takes, is refused by name."""
    from core.studies.optimal import days_for_gpu_hours
    assert days_for_gpu_hours(2048, 2e6) == pytest.approx(40.690104, rel=1e-6)
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "8", "--gpu-hours", "384", "--candidates", "2",
            "--hold-session-values"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["days"] == 384 / (8 * 24) == 2.0
    assert doc["budget_given"] == {"option": "--gpu-hours", "value": 384.0}
    assert doc["cost_usd"] == pytest.approx(384 * doc["price_per_gpu_hour_usd"])
    assert main([*args[:4], "--days", "2", *args[6:], "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["budget_given"] == {"option": "--days", "value": 2.0}
    assert [x["tokens"] for x in same["candidates"]] == [x["tokens"] for x in doc["candidates"]]
    assert main(args) == 0
    assert "for 384 GPU-hours, 2 days ($" in " ".join(capsys.readouterr().out.split())
    for other in (["--days", "1"], ["--flops", "1e20"]):
        with pytest.raises(SystemExit) as exit_:
            main(["optimal", path, "--gpus", "8", "--gpu-hours", "384", *other])
        assert exit_.value.code == 2 and "not allowed with" in capsys.readouterr().err
    assert main(["optimal", path, "--gpus", "8", "--gpu-hours", "0"]) == 2
    assert capsys.readouterr().err.startswith("vtrain: error: --gpu-hours: 0.0 must be a "
                                              "positive, finite number of GPU-hours")
    assert main(["optimal", path, "--gpus", "8", "--gpu-hours", "1e9"]) == 2
    assert "--gpu-hours: 1e+09 GPU-hours take 5.21e+06 days" in capsys.readouterr().err


def test_a_candidate_outside_the_loss_fits_data_is_flagged_where_it_lies():
    """Chinchilla's loss was fitted on models of 70 M to 16 B parameters trained on 5 B to 500
    B tokens (Hoffmann et al. 2022, abstract; Besiroglu et al. 2024 refit the same points);
    the study reported losses far outside them with no word. Each candidate now says where it
    lies outside (bounds inclusive), as data."""
    from core.studies.optimal import (CHINCHILLA_DATA, Candidate, OptimalResult,
                                      candidate_fit_note, outside_fit_range)
    assert CHINCHILLA_DATA == {"n_params": (7e7, 1.6e10), "tokens": (5e9, 5e11)}
    assert outside_fit_range(1e11, 2e12) == ["n_params_above", "tokens_above"]
    assert outside_fit_range(5e7, 1e10) == ["n_params_below"]
    assert outside_fit_range(1e9, 1e9) == ["tokens_below"]
    assert outside_fit_range(1e9, 2e10) == [] == outside_fit_range(7e7, 5e9)
    assert outside_fit_range(1.6e10, 5e11) == []
    with pytest.raises(ValueError):
        outside_fit_range(0.0, 1e10)

    def cand(n, d):
        return Candidate(gpt_shape(n), int(n), None, 1.0, 0.5, d, chinchilla_loss(n, d))
    big, small, inside = cand(1e11, 2e12), cand(5e7, 1e10), cand(1e9, 2e10)
    assert (big.outside_fit, small.outside_fit, inside.outside_fit) == (
        ["n_params_above", "tokens_above"], ["n_params_below"], [])
    assert [candidate_fit_note(c) for c in (big, small, inside)] == [
        "loss extrapolated", "loss extrapolated", ""]
    assert big.loss_above_ln_vocab is False and small.loss == pytest.approx(
        1.8172 + 482.01 / 5e7 ** 0.3478 + 2085.43 / 1e10 ** 0.3658)
    no_loss = Candidate(gpt_shape(1e11), int(1e11), None, *[math.nan] * 4, "no plan")
    assert no_loss.outside_fit == [] and no_loss.loss_above_ln_vocab is None
    r = OptimalResult(8, 1.0, 0.4, 312e12, 1e20, 1e9, 2e10, None,
                      candidates=[small, inside, big, no_loss])
    doc = r.to_dict()
    assert [c["outside_fit_range"] for c in doc["candidates"]] == [
        ["n_params_below"], [], ["n_params_above", "tokens_above"], []]
    assert [c["loss_above_ln_vocab"] for c in doc["candidates"]] == [False, False, False, None]
    assert doc["loss_fit_data"] == {"n_params": [7e7, 1.6e10], "tokens": [5e9, 5e11],
                                    "source": "Hoffmann et al. 2022"}
    assert doc["ln_vocab_size"] == pytest.approx(math.log(50257))


def test_the_footer_says_how_many_candidates_lie_outside_the_fits_data():
    """The vTrain study's large models all lie beyond the fit's 16 B parameters: they are
    still ranked (the study's purpose), and the footer says their loss is extrapolated."""
    from core.studies.optimal import Candidate, OptimalResult, fit_range_note
    head = ("Loss is Chinchilla's fit of models of 70M-16B parameters on 5B-500B tokens "
            "(Hoffmann et al. 2022): ")

    def result(points):
        r = OptimalResult(8, 1.0, 0.4, 312e12, 1e20, 1e9, 2e10, None)
        r.candidates = [Candidate(gpt_shape(n), int(n), None, 1.0, 0.5, d,
                                  chinchilla_loss(n, d) if d == d else math.nan)
                        for n, d in points]
        return r
    beyond = [(n, 1e12) for n in (7e10, 1e11, 2e11)]
    assert fit_range_note(result(beyond)) == head + (
        "all 3 candidates lie outside it (N above 16B, D above 500B), their loss extrapolated.")
    mixed = [(1e9, 2e10), (2e9, 2e10)] + [(n, 4e11) for n in (2e10, 4e10, 8e10, 1.6e11, 3e11)]
    assert fit_range_note(result(mixed)) == head + (
        "5 of 7 candidates lie outside it (N above 16B), their loss extrapolated.")
    assert fit_range_note(result([(1e9, 2e10), (3e9, math.nan)])) == head + (
        "the only candidate with a loss lies inside it.")
    assert fit_range_note(result([(1e9, 2e10), (5e7, 1e10)])) == head + (
        "1 of 2 candidates lies outside it (N below 70M), its loss extrapolated.")
    assert fit_range_note(result([(3e9, math.nan)])) == ""


def test_a_loss_above_ln_v_is_marked_and_ranks_nothing(capsys, monkeypatch):
    """A breaker's --flops 1e15 reported a loss of 15.59 nats for the lowest-loss candidate:
    above ln(50,257) = 10.82, a uniform guess over GPT-2's vocabulary, i.e. the fit far
    outside its data. The candidate is marked, the footer and the lowest-loss line say that
    every candidate is above ln V, so the lowest ranks nothing; --json flags it."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    args = ["optimal", path, "--gpus", "8", "--flops", "1e15", "--candidates", "3"]
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ln_v = math.log(50257)
    assert doc["ln_vocab_size"] == pytest.approx(ln_v)
    (c,) = doc["candidates"]  # every size rounds to the smallest GPT shape, 154M
    assert c["n_params"] == 154380288 and doc["best"] == 0
    assert c["loss"] == pytest.approx(chinchilla_loss(c["n_params"], c["tokens"]), rel=1e-12)
    assert c["loss"] > ln_v and c["loss_above_ln_vocab"] is True
    assert c["outside_fit_range"] == ["tokens_below"]  # 1.05 M tokens; 154 M is inside
    monkeypatch.setenv("COLUMNS", "400")  # the table's note cell on one line
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "│ lowest loss, loss above ln V = 10.82: the fit says nothing here │" in out
    assert ("Loss is Chinchilla's fit of models of 70M-16B parameters on 5B-500B tokens "
            "(Hoffmann et al. 2022): the only candidate lies outside it (D below 5B), its loss "
            "extrapolated. The only candidate lies above ln V = 10.82 in loss (a uniform guess "
            "over the 50,257-token vocabulary): the fit says nothing there, and the lowest loss "
            "ranks nothing.") in out
    assert (f"loss {c['loss']:.4f}, above ln V = 10.82 as the only candidate's: the fit says "
            "nothing here.") in out


def test_candidates_below_and_above_ln_v_the_lowest_is_below_and_both_are_said():
    """Of candidates some above ln V and some below, the lowest loss is one below (a loss
    above ln V is never the lowest while one is below it); the footer says how many are
    above."""
    from core.studies.optimal import Candidate, OptimalResult, candidate_fit_note, fit_range_note
    lo = Candidate(gpt_shape(1e9), int(1e9), None, 1.0, 0.5, 2e10, chinchilla_loss(1e9, 2e10))
    hi = Candidate(gpt_shape(2e9), int(2e9), None, 1.0, 0.5, 1e5, chinchilla_loss(2e9, 1e5))
    assert hi.loss > math.log(50257) > lo.loss
    r = OptimalResult(8, 1.0, 0.4, 312e12, 1e20, 1e9, 2e10, None, candidates=[lo, hi], best=0)
    assert candidate_fit_note(hi) == "loss above ln V = 10.82: the fit says nothing here"
    assert fit_range_note(r).endswith(
        "1 of 2 candidates lies outside it (D below 5B), its loss extrapolated. 1 of 2 "
        "candidates lies above ln V = 10.82 in loss (a uniform guess over the 50,257-token "
        "vocabulary): the fit says nothing there; the lowest loss is below it.")
