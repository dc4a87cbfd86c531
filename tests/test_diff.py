"""vtrain diff: the difference of two plans' iteration times, term by term (core/studies/diff.py)."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from core.studies.diff import TERMS, diff_plans, time_terms
from core.io.session import load_any, save_session
from core.sim.simulate import simulate
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def _variant(**plan):
    s = load_any(SMALL)
    for k, v in plan.items():
        setattr(s.plan, k, v)
    return s


PAIRS = {
    "overlapped data-parallel communication": (
        {}, {"zero_stage": 1, "overlap_grad_reduce": True, "overlap_param_gather": True,
             "sequence_parallel": True}),
    "t and p": ({}, {"tensor_parallel": 4, "pipeline_parallel": 1, "data_parallel": 2}),
    "recompute": ({"recompute": "none"}, {"recompute": "full"}),
    "gpipe": ({"schedule": "1f1b"}, {"schedule": "gpipe"}),
    "micro-batch": ({"micro_batch_size": 4}, {"micro_batch_size": 1}),
    "interleaved": ({"pipeline_parallel": 4, "data_parallel": 1},
                    {"pipeline_parallel": 4, "data_parallel": 1, "schedule": "interleaved",
                     "virtual_pipeline_stages": 2}),
}


@pytest.mark.parametrize("name", PAIRS)
def test_terms_sum_to_the_difference(name):
    a, b = (_variant(**kw) for kw in PAIRS[name])
    d = diff_plans(a, b)
    ta, tb = simulate(a).report.iteration_time_s, simulate(b).report.iteration_time_s
    assert d.difference_s == pytest.approx(tb - ta, rel=1e-12)
    assert sum(d.terms.values()) == pytest.approx(d.difference_s, rel=1e-9, abs=1e-12)
    for terms, t in ((d.terms_a, ta), (d.terms_b, tb)):
        assert sum(terms.values()) == pytest.approx(t, rel=1e-12)
        assert list(terms)[:len(TERMS) - 1] == list(TERMS[:-1]) and list(terms)[-1] == "rest"
        # the report's terms sum to T: nothing is left but rounding
        assert abs(terms["rest"]) < 1e-9 * t
        assert all(v >= 0 for k, v in terms.items() if k != "rest")


def test_same_plan_has_no_difference():
    d = diff_plans(load_any(SMALL), load_any(SMALL))
    assert d.difference_s == 0 and all(v == 0 for v in d.terms.values())


def test_recomputation_is_its_own_term_and_compute_is_unchanged():
    a, b = _variant(recompute="none"), _variant(recompute="full")
    d = diff_plans(a, b)
    assert d.terms_a["recomputation"] == 0 and d.terms_b["recomputation"] > 0
    assert d.terms["forward_backward"] == pytest.approx(0, abs=1e-12)
    # the recomputed forward costs what the forward of the layers costs: mean over stages of
    # the recompute tasks' busy time
    res = simulate(b)
    g = res.graph
    from core.sim.graph_types import KINDS
    rec = g.kind == KINDS.index("recompute")
    assert d.terms_b["recomputation"] == pytest.approx(g.duration_s[rec].sum() / b.plan.pipeline_parallel)


def test_interleaving_shows_as_less_bubble_and_more_pipeline_transfers():
    """v = 2 chunks per stage: the bubble term falls toward half of 1F1B's ((p-1)/(v*m) of the
    ideal time against (p-1)/m, Narayanan et al. 2021; the embedding and output make chunks
    unequal, so not exactly half) and, with blocking transfers, the pipeline term grows (v times
    the transfers); Megatron-LM's default overlaps the steady state's, which then cost less than
    the blocking ones."""
    a, b = (_variant(**kw) for kw in PAIRS["interleaved"])
    blocking = _variant(**PAIRS["interleaved"][1], overlap_p2p_comm=False)
    d = diff_plans(a, blocking)
    assert d.terms["bubble"] == pytest.approx(d.b.report.bubble_s - d.a.report.bubble_s)
    assert 0.45 < d.terms_b["bubble"] / d.terms_a["bubble"] < 0.6
    assert d.terms["pp_comm"] > 0
    assert d.terms["forward_backward"] == pytest.approx(0, abs=1e-12)
    over = diff_plans(blocking, b)
    assert over.terms["pp_comm"] < 0 and over.terms["forward_backward"] == pytest.approx(0, abs=1e-12)


def test_per_stage_terms():
    res = simulate(_variant())
    terms, stages, overlapped = time_terms(res)
    assert overlapped == {}
    p = res.session.plan.pipeline_parallel
    assert len(stages["forward_backward"]) == p
    assert sum(stages["forward_backward"]) / p == pytest.approx(terms["forward_backward"])


def test_cli_json_and_table(tmp_path, capsys):
    a, b = (_variant(**kw) for kw in PAIRS["t and p"])
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save_session(a, pa)
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum(doc["terms"].values()) == pytest.approx(doc["difference_s"], rel=1e-9)
    assert doc["difference_s"] == pytest.approx(doc["b"]["iteration_time_s"] - doc["a"]["iteration_time_s"])
    assert doc["memory_difference_bytes"] == pytest.approx(
        doc["b"]["max_memory_per_gpu_bytes"] - doc["a"]["max_memory_per_gpu_bytes"])
    assert doc["a"]["label"].startswith("t=2 p=2 d=2")
    assert main(["diff", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    from core.sim.labels import TIME_TERMS
    assert TIME_TERMS["tp_comm"] in out and TIME_TERMS["bubble"] in out
    assert "not attributed" not in out  # a term neither plan has is left out
    assert main(["diff", str(pa), str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_overlapped_communication_is_left_out_and_given_apart():
    a, b = (_variant(**kw) for kw in PAIRS["overlapped data-parallel communication"])
    d = diff_plans(a, b)
    g = d.b.graph
    from core.sim.graph_types import KINDS
    dp = g.kind == KINDS.index("dp_comm")
    hidden = dp & g.overlapped
    assert hidden.any()
    p = b.plan.pipeline_parallel
    assert d.overlapped_b["dp_comm"] == pytest.approx(g.duration_s[hidden].sum() / p)
    assert d.terms_b["dp_comm"] == pytest.approx(g.duration_s[dp & ~g.overlapped].sum() / p)
    assert d.overlapped_a == {}
    assert sum(d.terms.values()) == pytest.approx(d.difference_s, rel=1e-9, abs=1e-12)


def test_diff_names_the_overlapped_cp_exchange_of_any_type(tmp_path, capsys):
    from core.cli import main
    from core.io.session import save_session
    from tests.test_context_parallel import _session
    a = _session(seq=65536, cp=4, t=2, B=2, gpu="H100-SXM5-80GB", cp_comm_type="a2a+p2p",
                 cp_a2a_size=2)
    b = _session(seq=65536, cp=4, t=2, B=2, gpu="H100-SXM5-80GB")
    a.model.num_layers = b.model.num_layers = 4
    save_session(a, tmp_path / "a.json")
    save_session(b, tmp_path / "b.json")
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "CP exchange" in out and "cp p2p" not in out


def test_diff_names_what_differs_beyond_the_plan(tmp_path, capsys):
    """Two files of different models, GPUs and token budgets: the table splits the time into
    plan terms and gives days and cost, yet said nothing of the model, GPU or budget that
    differ (Llama 3 70B's 15T tokens against a 300B-token MoE read as a faster plan)."""
    a = load_any(SMALL)
    b = load_any(SMALL)
    b.model.num_layers = 12
    b.model.name = "half"
    b.cluster.gpu = "H100-SXM5-80GB"
    b.cost.training_tokens = a.cost.training_tokens / 10
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save_session(a, pa)
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fields = [d["field"] for d in doc["beyond_plan"]]
    assert fields == ["model", "cluster.gpu", "cost.training_tokens"]
    assert doc["beyond_plan"][1] == {"field": "cluster.gpu", "a": "A100-SXM4-80GB",
                                     "b": "H100-SXM5-80GB"}
    assert main(["diff", str(pa), str(pb)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "differ beyond the plan" in out and "cluster.gpu" in out and "half" in out
    # the same model, cluster and budget: nothing named
    save_session(_variant(recompute="none"), pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["beyond_plan"] == []
    assert main(["diff", str(pa), str(pb)]) == 0
    assert "beyond the plan" not in capsys.readouterr().out


def test_a_model_name_alone_is_no_difference(tmp_path, capsys):
    # an exported and re-imported launch names the model after the file: the same model
    a, b = load_any(SMALL), load_any(SMALL)
    b.model.name = "renamed"
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save_session(a, pa)
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["beyond_plan"] == []
    b.model.num_layers = 12
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["beyond_plan"][0]["field"] == "model"


def test_an_empty_field_and_the_value_it_means_are_one_model(tmp_path, capsys):
    """The recipe's Llama 3 70B (the preset: kv_channels and num_query_groups as given) against
    the sweep's best of the same model imported from a run_config.yaml (kv_channels 128):
    ``vtrain diff`` said "A and B differ beyond the plan: model Llama 3 70B / Meta-Llama-3-70B"
    for an empty kv_channels (h/a) against the number it means. Now only a real difference
    is named."""
    a, b = load_any(SMALL), load_any(SMALL)
    assert a.model.kv_channels is None
    b.model.name = "imported"
    b.model.kv_channels = a.model.hidden_size // a.model.num_attention_heads
    b.model.num_query_groups = a.model.num_attention_heads
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save_session(a, pa)
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["beyond_plan"] == []
    b.model.kv_channels = 2 * b.model.kv_channels  # a head size h/a does not give
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["beyond_plan"] == [
        {"field": "model", "a": a.model.name, "b": "imported"}]


def test_a_run_shorter_than_a_day_shows_its_days(tmp_path, capsys):
    """A 1,000-step run (a launch's --train-iters, a torchtitan steps) takes minutes: its days
    printed "0.0" in simulate, the sweep table and diff, telling plans apart by nothing."""
    from core.cli.common import fmt_days
    assert fmt_days(0.0433) == "0.043" and fmt_days(0.5) == "0.5" and fmt_days(298.51) == "298.5"
    assert fmt_days(0.0) == "0.0" and fmt_days(1234.56) == "1,234.6"
    a = load_any(SMALL)
    a.cost.training_tokens = 1000 * a.plan.global_batch_size * a.model.seq_length  # 1,000 steps
    pa = tmp_path / "a.json"
    save_session(a, pa)
    assert main(["simulate", str(pa)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("Training"))
    assert "0.0 days" not in line and "1,000 iterations" in line
    assert main(["simulate", str(pa), "--json"]) == 0
    days = json.loads(capsys.readouterr().out)["training_days"]
    assert 0.001 < days < 0.1 and fmt_days(days) in line
    assert main(["diff", str(pa), str(pa)]) == 0
    assert fmt_days(days) in capsys.readouterr().out


def test_a_misspelled_field_names_the_closest_one(capsys):
    """`--set plan.tensor_paralel=4` (and the same key in a session file) said only "unknown
    field"; the closest field name is suggested when one is close, none otherwise."""
    assert main(["simulate", str(SMALL), "--set", "plan.tensor_paralel=4"]) == 2
    err = capsys.readouterr().err
    assert "plan.tensor_paralel: unknown field; did you mean tensor_parallel?" in err
    assert main(["simulate", str(SMALL), "--set", "plan.zzz=4"]) == 2
    err = capsys.readouterr().err
    assert "plan.zzz: unknown field" in err and "did you mean" not in err


def test_values_whose_short_forms_agree_are_shown_exactly():
    """The breaker: 26,000,000,000 and 25,999,998,976 training tokens both read 2.6e+10."""
    from core.studies.diff import beyond_plan_text

    def text(a, b):
        return beyond_plan_text([{"field": "f", "a": a, "b": b}])
    assert text(26e9, 25999998976.0) == "f 26,000,000,000 / 25,999,998,976"
    assert text(26e9, 13e9) == "f 2.6e+10 / 1.3e+10"  # short where they read apart
    assert text(0.1, 0.10000001) == "f 0.1 / 0.10000001"
    assert text(4, 5) == "f 4 / 5"
    assert beyond_plan_text([]) == ""
    # an empty field read "None" (Python's word): "cluster.profile_path None / x.h5"
    assert text(None, 800.0) == "f empty / 800"
    assert text(True, False) == "f true / false"


def test_cli_a_plan_against_itself_prints_no_signed_zero(capsys):
    """Every difference of a plan against itself prints unsigned zero, in every column: the
    new-user trials saw -0.000 s, then +0.000 s and training days "-0.0" beside two equal
    0.009."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["diff", path, path]) == 0
    out = capsys.readouterr().out
    assert "│ 0.000 s (0.0%) │" in out.replace("[bold]", "")
    rows = {ln.split("│")[1].strip(): ln.split("│")[-2].strip()
            for ln in out.splitlines() if ln.count("│") == 5}
    assert rows["memory per GPU (max)"] == "0.0 GiB"
    assert rows["training days"] == "0.0" and rows["cost"] == "$0"
    assert rows["forward + backward"] == "0.000 s"
    assert "+0.0" not in out and "-0.0" not in out and "-$0" not in out


def test_a_difference_that_rounds_to_zero_has_no_sign():
    """The "B - A" column's formatter: a sign only when the printed number is not zero
    (torchtitan Llama 3 8B on 16 and 64 GPUs: 0.009 days each, the difference printed
    "-0.0")."""
    from core.cli.common import fmt_days
    from core.cli.diff import _s, signed

    assert signed(-4e-5, fmt_days) == "0.0"
    assert signed(4e-5, fmt_days) == "0.0"
    assert signed(-0.004, fmt_days) == "-0.004"
    assert signed(2.35, fmt_days) == "+2.4" and signed(-2.35, fmt_days) == "-2.4"
    assert signed(-0.0004, _s) == "0.000 s" and signed(0.0006, _s) == "+0.001 s"
    assert signed(-0.4, lambda x: f"${x:,.0f}") == "$0"
    assert signed(-1234.6, lambda x: f"${x:,.0f}") == "-$1,235"
    assert signed(-0.0004, lambda x: f"{x:.1%}") == "0.0%"
    assert signed(0.0, _s) == "0.000 s"


def test_tight_over_capacity_names_the_cache_not_the_margin(tmp_path, capsys):
    """A plan over the GPU's memory only with the allocator's cache (GPT-3 1.3B at 3,968
    tokens on A100: 82.3 of 80.0 GiB, 79.7 without the cache) is tight for that reason alone:
    the line says so and does not point at the margin's setting."""
    a = _variant()
    a.model.seq_length = 3968
    b = _variant(recompute="full")
    b.model.seq_length = 3968
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save_session(a, pa)
    save_session(b, pb)
    ra = simulate(a).report
    assert ra.memory_verdict == "tight" and ra.max_memory_per_gpu_bytes > ra.memory_capacity_bytes
    assert main(["diff", str(pa), str(pb)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("A tight"))
    assert "fits only without the allocator's cache" in line
    assert "memory_reserve_fraction" not in line


def test_diff_gives_each_plans_warnings_as_simulate_does(tmp_path, capsys):
    """A plan simulated on another GPU's store (cluster.gpu H100-SXM5-80GB, cluster.profile_path
    the shipped A100 store): ``vtrain simulate`` warns that its times are the A100's, ``vtrain
    diff`` printed the H100 against the A100 as the difference beyond the plan and said nothing
    of it, nor of the collectives extrapolated beyond the measured sizes. Each plan's warnings
    (the report's, as simulate prints them) are printed under its letter and given in --json."""
    from core.sim.simulate import PROFILES_DIR
    s = load_any(SMALL)
    s.cluster.gpu = "H100-SXM5-80GB"
    s.cluster.profile_path = str(PROFILES_DIR / "A100-SXM4-80GB.h5")
    path = tmp_path / "h100_on_a100_store.json"
    save_session(s, path)
    note = ("the profile is of A100-SXM4-80GB, not of cluster.gpu H100-SXM5-80GB: times, MFU "
            "and memory capacity are A100-SXM4-80GB's")
    ra, rb = simulate(load_any(SMALL)), simulate(load_any(path))
    assert rb.report.warnings[0] == note and note not in ra.report.warnings
    assert main(["diff", str(SMALL), str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"]["warnings"] == ra.report.warnings
    assert doc["b"]["warnings"] == rb.report.warnings
    assert main(["diff", str(SMALL), str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # as rich wraps it
    for name, r in (("A", ra), ("B", rb)):
        for w in r.report.warnings:
            assert f"warning: {name}: {w}" in out
    assert f"warning: A: {note}" not in out


def test_a_path_to_the_shipped_store_is_no_difference(tmp_path, capsys):
    """A session naming the shipped A100 store in cluster.profile_path against the example
    (profile_path null: the same store): the diff said "A and B differ beyond the plan:
    cluster.profile_path .../A100-SXM4-80GB.h5 / None" of two identical plans. A store of
    another file is still named."""
    import shutil

    from core.sim.simulate import PROFILES_DIR
    b = load_any(SMALL)
    b.cluster.profile_path = str(PROFILES_DIR / "A100-SXM4-80GB.h5")
    path = tmp_path / "named_store.json"
    save_session(b, path)
    assert main(["diff", str(SMALL), str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["beyond_plan"] == [] and doc["difference_s"] == 0.0
    copy = tmp_path / "copy.h5"
    shutil.copyfile(PROFILES_DIR / "A100-SXM4-80GB.h5", copy)
    b.cluster.profile_path = str(copy)
    save_session(b, path)
    assert main(["diff", str(SMALL), str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["beyond_plan"] == [{"field": "cluster.profile_path", "a": None, "b": str(copy)}]


def test_an_empty_network_field_and_its_value_are_no_difference(tmp_path, capsys):
    """cluster.inter_node_bandwidth_gbits_per_s empty is the GPU's reference node: 8 A100s x
    200 Gb/s = 1,600 Gb/s (core.plan.cluster.GPU_NIC_GBITS_PER_GPU). Against a session giving
    1,600, the diff said they differ beyond the plan ("None / 1600"); against 800 they do."""
    a, b = load_any(SMALL), load_any(SMALL)
    a.cluster.inter_node_bandwidth_gbits_per_s = None
    b.cluster.inter_node_bandwidth_gbits_per_s = 8 * 200.0
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    save_session(a, pa)
    save_session(b, pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["beyond_plan"] == [] and doc["difference_s"] == 0.0
    assert main(["diff", str(pa), str(SMALL), "--json"]) == 0  # the example's 800 Gb/s
    assert json.loads(capsys.readouterr().out)["beyond_plan"] == [
        {"field": "cluster.inter_node_bandwidth_gbits_per_s", "a": None, "b": 800.0}]


def test_set_b_compares_a_with_a_changed_in_one_field(tmp_path, capsys):
    """``vtrain diff A --set-b plan.tensor_parallel=4 --set-b plan.data_parallel=1`` is the
    diff of A and a file B that differs in those fields alone: the same difference, to the
    bit; B.json given with --set-b is changed, A never; the header names the change."""
    b_file = tmp_path / "b.json"
    save_session(_variant(tensor_parallel=4, pipeline_parallel=2, data_parallel=1), b_file)
    assert main(["diff", str(SMALL), str(b_file), "--json"]) == 0
    files = json.loads(capsys.readouterr().out)
    sets = ["--set-b", "plan.tensor_parallel=4", "--set-b", "plan.data_parallel=1"]
    assert main(["diff", str(SMALL), *sets, "--json"]) == 0
    changed = json.loads(capsys.readouterr().out)
    assert changed["difference_s"] == files["difference_s"] != 0.0
    assert changed["terms"] == files["terms"]
    a, b = load_any(SMALL), load_any(b_file)
    assert changed["difference_s"] == pytest.approx(
        simulate(b).report.iteration_time_s - simulate(a).report.iteration_time_s, rel=1e-12)
    # B.json with --set-b: B changed (back to A's t and d), A not: no difference
    assert main(["diff", str(SMALL), str(b_file), "--set-b", "plan.tensor_parallel=2",
                 "--set-b", "plan.data_parallel=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["difference_s"] == 0.0
    assert main(["diff", str(SMALL), *sets]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"B {SMALL} with --set-b plan.tensor_parallel=4 --set-b plan.data_parallel=1: t=4 "
            "p=2 d=1") in out


@pytest.mark.parametrize("item, message", [
    ("plan.tensor_paralel=8", "vtrain: error: --set-b plan.tensor_paralel: unknown field; did "
                              "you mean tensor_parallel?"),
    ("plan.tensor_parallel=x", "vtrain: error: --set-b plan.tensor_parallel: must be of type "
                               "int"),
    ("tensor_parallel=8", "vtrain: error: --set-b tensor_parallel=8: give SECTION.FIELD=VALUE"),
    ("plan.tensor_parallel=3", "with --set-b plan.tensor_parallel=3: plan.tensor_parallel: "
                               "num_attention_heads=16 is not divisible by tensor_parallel_size=3"),
])
def test_a_bad_set_b_is_refused_naming_set_b(item, message, capsys):
    """--set-b's errors are --set's (core.cli.common.apply_sets), named --set-b; a change that
    breaks a rule names the file with the change; exit status 2, no traceback."""
    assert main(["diff", str(SMALL), "--set-b", item]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_abbreviated_option_is_refused_not_taken_as_the_longer_one(capsys):
    """A trial user's ``vtrain diff A.json --set X`` was taken by argparse as ``--set-b X`` (its
    only option starting ``--set``): plan B changed alone, with only the header to say so.
    Options are never abbreviated (core.cli._Parser, allow_abbrev=False, as Megatron-LM's
    parser): exit 2, the prefix named; the full name still works, and other commands too."""
    a = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    with pytest.raises(SystemExit) as exit_:
        main(["diff", a, "--set", "plan.micro_batch_size=2", "--json"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --set plan.micro_batch_size=2" in capsys.readouterr().err
    assert main(["diff", a, "--set-b", "plan.micro_batch_size=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["b"]["label"] != ""
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", a, "--js"])  # --json abbreviated
    assert exit_.value.code == 2
    assert "unrecognized arguments: --js" in capsys.readouterr().err


def test_plans_that_differ_only_in_fields_without_effect_say_which(tmp_path, capsys):
    """Two plans that differ only in plan.tp_saved_input without sequence parallelism (or
    fp8_impl in BF16, fsdp_fp32_params outside ZeRO-3) read the same label and the same figures:
    vtrain diff names the fields (was: two identical lines and a zero difference, nothing said);
    one the label shows (tp_saved_input with SP at t = 2) is not listed, its label says it."""
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    a = _variant(sequence_parallel=False)
    save_session(a, pa)
    save_session(_variant(sequence_parallel=False, tp_saved_input="gathered", fp8_impl="torchao",
                          fsdp_fp32_params=True), pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["idle_plan_differences"] == [
        {"field": "plan.fsdp_fp32_params", "a": False, "b": True},
        {"field": "plan.fp8_impl", "a": "transformer_engine", "b": "torchao"},
        {"field": "plan.tp_saved_input", "a": "sequence_shard", "b": "gathered"}]
    assert doc["a"]["label"] == doc["b"]["label"] and doc["difference_s"] == 0
    assert main(["diff", str(pa), str(pb)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("The plans also differ in fields that change nothing here (left out of the labels): "
            "plan.fsdp_fp32_params false / true; plan.fp8_impl transformer_engine / torchao; "
            "plan.tp_saved_input sequence_shard / gathered") in out
    save_session(_variant(sequence_parallel=True), pa)
    save_session(_variant(sequence_parallel=True, tp_saved_input="gathered"), pb)
    assert main(["diff", str(pa), str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["idle_plan_differences"] == []
    assert doc["b"]["label"].endswith("tp_saved_input=gathered")
