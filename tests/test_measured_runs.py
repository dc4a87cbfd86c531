"""Measured runs (core.accuracy.measured): the JSON-lines sessions of the published runs give
today's figures, the session-column CSV round-trips sessions, a ``recipe`` column fills in
its Megatron-Bridge recipe's settings, bad input is one named error, and runs the memory model
says cannot fit are predicted and reported (docs/accuracy.md, "Measurement file layouts")."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math

import numpy as np
import pytest

from core.accuracy.bridge_recipes import BRIDGE_PERF_RECIPES
from core.accuracy.calibrate import measured_sessions
from core.accuracy.measured import (MeasurementFileError, default_origin, read_measurements,
                                    session_columns, skip_counts)
from core.accuracy.validate import over_capacity, predict_rows
from core.cli import main as vtrain
from core.cli.validate import _predictor
from tests.conftest import ROOT

SESSIONS = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"
FIGURES = ROOT / "tests" / "data" / "published_runs_figures.json"


@pytest.fixture(scope="module")
def published():
    if not SESSIONS.exists():
        pytest.skip(f"shared data not present: {SESSIONS}")
    return read_measurements(SESSIONS)


@pytest.fixture(scope="module")
def frozen():
    return json.loads(FIGURES.read_text())


def _close(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None
                                         and math.isclose(a, b, rel_tol=1e-9))


def test_jsonl_reproduces_the_frozen_figures(published, frozen):
    """Every per-row prediction and band, the summary metrics and the figures by group that
    `vtrain validate` gave on published_runs.csv before the notes parser went
    (tests/data/published_runs_figures.json) come back from the sessions, to 1e-9."""
    res = predict_rows(published, _predictor(None, 0.9))
    rows = frozen["rows"]
    assert [m.row for m in published] == [r["row"] for r in rows]
    for i, (m, r) in enumerate(zip(published, rows)):
        assert (not m.skip_reason) == r["predicted"], m.row
        assert m.measured_iteration_time_s == r["measured_s"]
        assert m.group == r["group"], m.row
        for got, want in ((res.predicted_s[i], r["predicted_s"]),
                          (res.interval_low_s[i], r["interval_low_s"]),
                          (res.interval_high_s[i], r["interval_high_s"])):
            assert _close(None if np.isnan(got) else float(got), want), (m.row, got, want)
    met = res.metrics()
    for key, want in frozen["metrics"].items():
        assert _close(met[key], want) if isinstance(want, float) else met[key] == want, key
    for key, groups in frozen["by_group"].items():
        got = res.by_group(key)
        assert [(g, n) for g, n, _, _ in got] == [(g, n) for g, n, _, _ in groups]
        assert all(_close(a, c) and _close(b, d) for (_, _, a, b), (_, _, c, d) in zip(got, groups))


def test_jsonl_gives_the_calibration_the_same_runs(published, frozen):
    """The shared fit (vtrain calibrate --out-dir, scripts/generate_profiles.sh) takes the
    sessions and measured times of the predicted rows: the same sessions (digests of their
    documents) and times as the CSV's gave, so the same fitted parameters (the fit is
    deterministic; frozen in the fixture's "calibrate")."""
    sessions, measured = measured_sessions(published)
    want = [r for r in frozen["rows"] if r["predicted"]]
    assert len(sessions) == len(want) == sum(frozen["calibrate"]["rows_by_kind"].values())
    for s, t, r in zip(sessions, measured, want):
        doc = s.to_dict()
        for name in ("hidden_dropout", "attention_dropout"):  # added after the freeze, at the
            assert doc["model"].pop(name) == 0.1            # default of a file without them
        for name in ("add_proj_bias", "add_mlp_bias", "add_output_bias"):  # added later too
            assert doc["model"].pop(name) is False
        assert doc["model"].pop("bias_activation_fusion") is True  # added later, fused
        for name, default in (("use_precision_aware_optimizer", False),  # added after the
                              ("te_master_weights", True), ("main_params_dtype", "fp32"),
                              ("exp_avg_dtype", "fp32"), ("exp_avg_sq_dtype", "fp32"),
                              ("tp_comm_overlap_backend", "userbuffers"),
                              ("fsdp_fp32_params", False), ("fp8_impl", "transformer_engine"),
                              ("tp_saved_input", "sequence_shard")):
            assert doc["plan"].pop(name) == default  # freeze, at their defaults
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        assert digest == r["session_sha256"], r["row"]
        assert t == r["measured_s"]


def _write_csv(path, records: list[dict]) -> None:
    cols = list(dict.fromkeys(k for r in records for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, cols)
    w.writeheader()
    w.writerows(records)
    path.write_text(buf.getvalue())


def test_session_columns_round_trip(published, tmp_path):
    """Each published session written as a session-column CSV row (only its non-default
    fields) reads back as the same session, with its time, source and assumption names."""
    runs = [m for m in published if not m.skip_reason]
    records = [{**session_columns(m.session), "measured_iteration_time_s": repr(m.measured_iteration_time_s),
                "source": m.source, "assumptions": "; ".join(a.split(":")[0] for a in m.assumptions)}
               for m in runs]
    path = tmp_path / "runs.csv"
    _write_csv(path, records)
    back = read_measurements(path)
    assert len(back) == len(runs)
    for a, b in zip(runs, back):
        assert b.session.to_dict() == a.session.to_dict(), a.row
        assert b.measured_iteration_time_s == a.measured_iteration_time_s
        assert b.source == a.source and b.group == a.group and not b.skip_reason
        assert b.assumptions == [x.split(":")[0] for x in a.assumptions]


def test_recipe_column_fills_the_recipes_settings(published, tmp_path):
    """A row naming its Megatron-Bridge performance recipe and leaving the recipe's settings
    out (ZeRO-1 included, where the recipe overlaps the parameter all-gather) reads as the
    published session that took them from the same recipe. The rows state
    the token dispatcher and the MTP layers (some sources name them, against the recipe's; a
    model without MTP layers then takes the recipe's layout without them)."""
    recipe_fields = ("recompute", "recompute_modules", "recompute_num_layers", "sequence_parallel",
                     "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                     "fp8_param_gather", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
                     "pipeline_model_parallel_layout")
    cases, records = [], []
    for m in published:
        named = [a for a in m.assumptions if a.startswith("bridge-perf-recipe:")]
        if m.skip_reason or not named:
            continue
        function = named[0].split("(")[-1].split(",")[0].strip()
        # ZeRO-1 too: a recipe that overlaps the parameter all-gather has the distributed
        # optimizer (Megatron-LM requires it)
        cols = {k: v for k, v in session_columns(m.session).items() if k not in recipe_fields
                and not (k == "zero_stage" and v == 1 and m.session.plan.overlap_param_gather)}
        records.append({**cols, "recipe": function, "mtp_num_layers": m.session.model.mtp_num_layers,
                        "moe_token_dispatcher_type": m.session.plan.moe_token_dispatcher_type,
                        "measured_iteration_time_s": m.measured_iteration_time_s})
        cases.append(m)
    assert len(cases) >= 10
    path = tmp_path / "recipes.csv"
    _write_csv(path, records)
    graphs = pao = 0
    for a, b, r in zip(cases, read_measurements(path), records):
        # the recipe's CUDA graphs too, which the published sessions (written before the
        # plan had the fields) leave at none
        recipe = next(x for x in BRIDGE_PERF_RECIPES if x.function == r["recipe"])
        want = a.session.to_dict()
        want["plan"].update(cuda_graph_impl=recipe.cuda_graph_impl,
                            cuda_graph_modules=recipe.cuda_graph_modules)
        # and its precision-aware optimizer (the plan's fields came after them too)
        want["plan"].update(dict(recipe.optimizer))
        pao += bool(recipe.optimizer)
        graphs += recipe.cuda_graph_impl != "none"
        assert b.session.to_dict() == want, a.row
    assert graphs >= 2 and pao >= 2


#: The required columns of a session-column CSV (REQUIRED_COLUMNS) with a GPT's values.
REQUIRED_ROW = {"num_layers": "24", "hidden_size": "2048", "num_attention_heads": "16",
                "seq_length": "1024", "vocab_size": "50257", "micro_batch_size": "1",
                "data_parallel": "1", "precision": "bf16", "gpu": "A100-SXM4-80GB"}


@pytest.mark.parametrize("header,row,where", [
    ("tensor_parallel,measured_iteration_time_s", "two,1.0", "row 1 (line 2), column 'tensor_parallel'"),
    ("precision,measured_iteration_time_s", "fp7,1.0", "row 1 (line 2), column 'precision'"),
    ("sequence_parallel,measured_iteration_time_s", "maybe,1.0", "row 1 (line 2), column 'sequence_parallel'"),
    ("tensor_parallel,notes_of_mine,measured_iteration_time_s", "2,x,1.0", "'notes_of_mine'"),
    ("tensor_parallel,plan.tensor_parallel,measured_iteration_time_s", "2,2,1.0", "same field"),
    ("tensor_parallel", "2", "measured_iteration_time_s"),
    ("recipe,measured_iteration_time_s", "no_such_recipe,1.0", "row 1 (line 2), column 'recipe'"),
    ("measured_memory_gib,memory_scale,measured_iteration_time_s", "10,peak,1.0",
     "row 1 (line 2), column 'memory_scale'"),
])
def test_session_csv_bad_input_is_one_named_error(tmp_path, header, row, where):
    path = tmp_path / "bad.csv"
    # the required columns the case does not name, then the case's
    base = [(c, v) for c, v in REQUIRED_ROW.items() if c not in header.split(",")]
    path.write_text(",".join([c for c, _ in base] + [header]) + "\n"
                    + ",".join([v for _, v in base] + [row]) + "\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(path) in str(exc.value) and where in str(exc.value)
    assert vtrain(["validate", str(path)]) == 2


@pytest.mark.parametrize("line,where", [
    ('{"measured_iteration_time_s": 1.0}', "line 1: missing key 'session'"),
    ('{"session": {"format": "vtrain-session", "version": 1, "model": {}, "plan": {"tensor_parallel": 0}},'
     ' "measured_iteration_time_s": 1.0}', "line 1, key 'session'"),
    ('{"session": {}, "measured_time": 1.0}', "line 1: unknown key 'measured_time'"),
    ('[1, 2]', "line 1: not a JSON object"),
    ('{"session": {}, "measured_iteration_time_s": NaN}', "line 1"),
])
def test_jsonl_bad_input_is_one_named_error(tmp_path, line, where):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert where in str(exc.value)
    assert vtrain(["validate", str(path)]) == 2


def test_jsonl_time_bounds_and_skip_reason(published, tmp_path):
    """A record's time outside 0.1 ms .. a day, or its own skip_reason, skips it by name; the
    others are read as they are."""
    doc = json.loads(SESSIONS.read_text().splitlines()[0])
    lines = [json.dumps({**doc, "measured_iteration_time_s": 1e6}),
             json.dumps({**doc, "row": 2, "skip_reason": "not modelled: a reviewed reason"}),
             json.dumps({k: v for k, v in doc.items() if k != "row"})]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    ms = read_measurements(path)
    assert [m.row for m in ms] == [1, 2, 3]
    assert ms[0].skip_causes == ["measured time out of range"]
    assert ms[1].skip_reason == "not modelled: a reviewed reason"
    assert not ms[2].skip_reason and ms[2].measured_iteration_time_s == doc["measured_iteration_time_s"]
    assert skip_counts(ms) == {"measured time out of range": 1, "not modelled: a reviewed reason": 1}


def test_runs_over_memory_are_predicted_and_reported(tmp_path):
    """A run the memory model says cannot fit (here 175B on 8 GPUs without recomputation) is
    read and predicted, and listed by over_capacity and by validate --json."""
    path = tmp_path / "big.csv"
    path.write_text("num_layers,hidden_size,num_attention_heads,seq_length,vocab_size,"
                    "tensor_parallel,pipeline_parallel,data_parallel,micro_batch_size,"
                    "global_batch_size,recompute,precision,gpu,gpus_per_node,"
                    "measured_iteration_time_s\n"
                    "96,12288,96,2048,50257,8,1,1,1,8,none,bf16,A100-SXM4-80GB,8,30.0\n")
    ms = read_measurements(path)
    assert not ms[0].skip_reason
    over = over_capacity(ms)
    assert [m.row for m, _, _ in over] == [1] and over[0][1] > over[0][2]
    out = io.StringIO()
    from contextlib import redirect_stdout
    with redirect_stdout(out):
        assert vtrain(["validate", str(path), "--json"]) == 0
    doc = json.loads(out.getvalue())
    assert doc["n"] == 1 and [r["row"] for r in doc["memory_over_capacity"]] == [1]


def test_tight_run_over_capacity_only_with_the_cache_is_not_a_miss(published):
    """Published row 16 (Llama 3.1 405B, which ran on GB200's 186 GiB) put on B200s (180 GiB,
    8 to a node) needs more than the GPU's memory only with the caching allocator's reserve
    (181.3 GiB, 175.6 without): simulate calls it tight, so validate does not list it among the
    runs the memory model says cannot fit; on GB200 it lies within the capacity."""
    import dataclasses
    from core.accuracy.validate import row_memory, row_memory_fit
    from core.sim.simulate import simulate
    m = next(m for m in published if m.row == 16)
    need, capacity, fits = row_memory_fit(m)
    assert need < capacity and fits
    b200 = dataclasses.replace(m.session.cluster, gpu="B200-180GB", gpus_per_node=8)
    m = dataclasses.replace(m, session=dataclasses.replace(m.session, cluster=b200))
    need, capacity, fits = row_memory_fit(m)
    assert need > capacity and fits and row_memory(m) == (need, capacity)
    assert simulate(m.session).report.memory_verdict == "tight"
    assert 16 not in [r.row for r, _, _ in over_capacity([*published, m])]


def test_skip_causes_come_from_the_kind_of_rule_not_the_message():
    """A refusal's cause is its rule's kind (``FieldError.rule``) and field: an uneven pipeline
    split, a feature not modelled, an invalid value; the message text is for people only."""

    from core.accuracy.measured import skip_cause
    from core.plan.fields import NOT_MODELLED, UNEVEN_PIPELINE_SPLIT, FieldError
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.rules import validate
    from core.plan.session import Session

    llama = MODEL_PRESETS["Llama 3 8B"]
    s = Session(model=llama, plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=5,
                                               data_parallel=1, global_batch_size=20),
                cluster=ClusterConfig(gpu="H100-SXM5-80GB"))  # 32 layers over 5 stages
    errs = [e for e in validate(s) if e.rule == UNEVEN_PIPELINE_SPLIT]
    assert [skip_cause(e) for e in errs] == ["uneven pipeline split"]
    s = Session(model=MODEL_PRESETS["Mixtral 8x7B"],
                plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                                  global_batch_size=8, recompute="selective_op"),
                cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    refused = [e for e in validate(s) if e.rule == NOT_MODELLED]
    assert refused and all("not modelled" in e.message for e in refused)
    # the same words in a message change nothing: the rule decides
    assert skip_cause(FieldError("plan.tensor_parallel", "is not modelled")) == (
        "invalid plan (plan.tensor_parallel)")
    assert skip_cause(FieldError("plan.context_parallel", "x", rule=NOT_MODELLED)) == (
        "context parallelism")


# --- what a session-column CSV must state, and the defaults it takes -------------------------

#: Llama 3 8B on one 8-GPU H100 node, every column but attention_kernel and pipeline_parallel
#: (tests/data-free: a user's file as the new-user trial wrote it).
LLAMA_HEADER = ("num_layers,hidden_size,num_attention_heads,num_query_groups,ffn_hidden_size,"
                "seq_length,vocab_size,activation,normalization,position_embedding,"
                "tied_embeddings,add_bias_linear,gpu,tensor_parallel,data_parallel,"
                "micro_batch_size,global_batch_size,precision,recompute,sequence_parallel,"
                "zero_stage,measured_iteration_time_s")
LLAMA_ROW = ("32,4096,32,8,14336,8192,128256,swiglu,rmsnorm,rope,false,false,H100-SXM5-80GB,1,8,"
             "1,128,bf16,none,false,1,10.1")


def test_absent_columns_take_megatrons_defaults_and_say_so(tmp_path, capsys):
    """A run without attention_kernel and pipeline_parallel columns is Megatron-LM's default
    (Megatron-Core's auto attention: flash; p = 1: the 8 GPUs t*p*d gives), not the GPT-3
    175B example's (unfused, p = 16 on 128 GPUs); each default is recorded and reported, and
    the prediction equals that of the row stating them."""
    path, stated = tmp_path / "runs.csv", tmp_path / "stated.csv"
    path.write_text(f"{LLAMA_HEADER}\n{LLAMA_ROW}\n{LLAMA_ROW.replace(',128,bf16', ',,bf16')}\n")
    stated.write_text(f"{LLAMA_HEADER},attention_kernel,pipeline_parallel\n{LLAMA_ROW},flash,1\n")
    a, b = read_measurements(path)
    (c,) = read_measurements(stated)
    assert a.session.model.attention_kernel == "flash" and a.session.plan.pipeline_parallel == 1
    assert a.session.plan.num_gpus == 8 and b.session.plan.global_batch_size == 8  # b*d
    assert a.session.to_dict() == c.session.to_dict() and c.defaults == {
        k: v for k, v in a.defaults.items() if k not in ("attention_kernel", "pipeline_parallel")}
    # the defaults that bear on a dense model: no MoE, MLA or windowed-attention sizes (fields
    # without effect, core.plan.rules.inactive_fields)
    megatron = {k: v for k, v in a.defaults.items() if default_origin(k) == "Megatron-LM"}
    assert megatron == {
        "add_qkv_bias": False, "qk_layernorm": False, "kv_channels": None, "num_experts": None,
        "multi_latent_attention": False, "mtp_num_layers": 0, "window_size": None,
        "softmax_type": "vanilla", "activation_func_clamp_value": None, "glu_linear_offset": 0.0,
        "hidden_dropout": 0.1, "attention_dropout": 0.1, "bias_activation_fusion": True,
        "attention_kernel": "flash", "pipeline_parallel": 1, "schedule": "1f1b"}
    # the session defaults that bear on the time are recorded too (the network as the H100's
    # reference node gives it: 8 x 400 Gb/s); labels, the store and the memory margin are not
    assert {k: a.defaults[k] for k in ("gradient_accumulation_fusion", "gpus_per_node",
                                       "inter_node_bandwidth_gbits_per_s", "context_parallel")} \
        == {"gradient_accumulation_fusion": True, "gpus_per_node": 8,
            "inter_node_bandwidth_gbits_per_s": 3200.0, "context_parallel": 1}
    assert not {"name", "profile_path", "memory_reserve_fraction", "price_per_gpu_hour_usd",
                "tensor_parallel", "sequence_parallel", "zero_stage"} & set(a.defaults)
    assert b.defaults == {**a.defaults, "global_batch_size": 8}
    predict = _predictor(None, 0.9)
    assert predict(a.session)[0] == predict(c.session)[0]
    assert vtrain(["validate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["defaults"]["attention_kernel"] == [{"value": "flash", "rows": 2}]
    assert doc["defaults"]["pipeline_parallel"] == [{"value": 1, "rows": 2}]
    assert doc["defaults"]["global_batch_size"] == [{"value": 8, "rows": 1}]
    assert [r["defaults"] for r in doc["rows"]] == [a.defaults, b.defaults]
    assert vtrain(["validate", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "attention_kernel=flash; pipeline_parallel=1; schedule=1f1b; global_batch_size=8 (1 rows)" in text


def test_authors_layouts_take_no_defaults():
    """The vTrain authors' files state every field by their layout: no default is taken."""
    from tests.conftest import shared_file
    for name in ("measured_single_node.csv", "measured_multi_node.csv"):
        path = shared_file(name)
        assert all(m.defaults == {} for m in read_measurements(path)), name


def test_missing_required_columns_are_refused_by_name(tmp_path):
    """The model's shape and vocabulary, b, d, the precision and the GPU have no default: a
    file without their columns, or a row with an empty cell in one, is refused naming them."""
    path = tmp_path / "nopp.csv"
    header = LLAMA_HEADER.replace("gpu,", "").replace("precision,", "")
    path.write_text(f"{header}\n{LLAMA_ROW.replace('H100-SXM5-80GB,', '').replace('bf16,', '')}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: missing columns precision, gpu: a measured run's model "
                              "shape, vocabulary, micro-batch size, data-parallel size, precision "
                              "and GPU have no default (docs/accuracy.md, 'Session defaults')")
    assert vtrain(["validate", str(path)]) == 2
    path.write_text(f"{LLAMA_HEADER}\n{LLAMA_ROW.replace(',128256,', ',,')}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: row 1 (line 2), column 'vocab_size': empty, and a measured run "
                              "has no default for it (docs/accuracy.md, 'Session defaults')")


def test_misspelled_column_gets_the_close_name(tmp_path):
    path = tmp_path / "typo.csv"
    path.write_text(f"{LLAMA_HEADER.replace('hidden_size', 'hiden_size')}\n{LLAMA_ROW}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    # the replace misspells ffn_hidden_size too: both are named in one message, each with its
    # close name (one round of corrections, not two)
    assert str(exc.value) == (
        f"{path}: columns 'hiden_size', 'ffn_hiden_size' are neither a session field (model, "
        "plan, cluster or cost; docs/accuracy.md) nor one of measured_iteration_time_s, "
        "measured_memory_gib, memory_scale, source, assumptions, notes, recipe; 'hiden_size': "
        "did you mean hidden_size?; 'ffn_hiden_size': did you mean ffn_hidden_size?")


def test_no_row_predicted_is_an_error(tmp_path, capsys):
    """A file none of whose rows can be predicted exits 2 with one line naming the file, the
    causes and the first row's reason (t = 3 divides neither the heads nor the node)."""
    path = tmp_path / "t3.csv"
    path.write_text(f"{LLAMA_HEADER}\n{LLAMA_ROW.replace('H100-SXM5-80GB,1,8', 'H100-SXM5-80GB,3,8')}\n")
    assert vtrain(["validate", str(path)]) == 2
    assert vtrain(["validate", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 2 and err[0] == err[1]
    assert err[0].startswith(f"vtrain: error: {path}: no row could be predicted (1 skipped: "
                             "invalid plan (plan.tensor_parallel) 1); row 1 (line 2): invalid plan: "
                             "num_attention_heads=32 is not divisible by tensor_parallel_size=3")


def _row_file(tmp_path, header: str, row: str):
    path = tmp_path / "runs.csv"
    path.write_text(f"{header}\n{row}\n")
    return read_measurements(path)


def test_absent_columns_mean_what_megatron_lm_runs(tmp_path):
    """Megatron-LM's defaults where the launch says nothing, as the import takes them: a SwiGLU
    MLP without ffn_hidden_size is 2/3 of 4h rounded down to 64 (5,440 for h = 2048; the
    session's 4h made the model 31 % larger); virtual stages interleave (Megatron-LM has no
    schedule argument); a mixture of experts without a token dispatcher is skipped by name
    (Megatron-Core's default, allgather, is not modelled; it ran as alltoall unsaid)."""
    head = ("num_layers,hidden_size,num_attention_heads,seq_length,vocab_size,activation,"
            "micro_batch_size,data_parallel,precision,gpu,measured_iteration_time_s")
    (run,) = _row_file(tmp_path, head, "16,2048,16,2048,32000,swiglu,1,8,bf16,H100-SXM5-80GB,1.0")
    assert run.session.model.ffn_hidden_size == 5440 == run.defaults["ffn_hidden_size"]
    (gelu,) = _row_file(tmp_path, head, "16,2048,16,2048,32000,gelu,1,8,bf16,H100-SXM5-80GB,1.0")
    assert gelu.session.model.ffn_hidden_size is None  # 4h
    (v2,) = _row_file(tmp_path, head + ",pipeline_parallel,virtual_pipeline_stages",
                      "16,2048,16,2048,32000,gelu,1,2,bf16,H100-SXM5-80GB,1.0,4,2")
    assert (v2.session.plan.schedule, v2.defaults["schedule"]) == ("interleaved", "interleaved")
    assert gelu.session.plan.schedule == "1f1b"
    (moe,) = _row_file(tmp_path, head + ",num_experts,expert_parallel",
                       "16,2048,16,2048,32000,gelu,1,8,bf16,H100-SXM5-80GB,1.0,8,8")
    assert moe.skip_causes == ["token dispatcher not given"]
    assert "allgather dispatcher, is not modelled" in moe.skip_reason
    (given,) = _row_file(tmp_path, head + ",num_experts,expert_parallel,moe_token_dispatcher_type",
                         "16,2048,16,2048,32000,gelu,1,8,bf16,H100-SXM5-80GB,1.0,8,8,alltoall")
    assert not given.skip_reason


def test_session_columns_read_back_for_every_gpu_node_and_the_notes(tmp_path):
    """A GB200 session on nodes of 8 (not the rack's 72 a row without the column means) and a
    session's notes survive session_columns -> CSV -> read_measurements."""
    from core.plan.cluster import ClusterConfig
    from core.plan.session import Session
    from core.io.session import load_any
    s = load_any(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json")
    for cluster in (ClusterConfig("GB200-NVL72", 8), ClusterConfig("GH200-96GB", 8),
                    ClusterConfig("GB200-NVL72", 72)):
        one = Session(s.model, s.plan, cluster, s.cost, notes=s.notes)
        row = {**session_columns(one), "measured_iteration_time_s": 1.0}
        path = tmp_path / "rt.csv"
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            w.writeheader()
            w.writerow(row)
        (back,) = read_measurements(path)
        assert back.session.cluster == cluster and back.session.notes == s.notes != ""


def test_published_runs_layout_names_the_conversion(tmp_path, capsys):
    """A file of the published-runs layout (its own column names, free-text notes) is refused
    with the way to convert it, not a guess at a close column name; every column of that
    layout is named at once, those a field holds with the mapping."""
    path = tmp_path / "runs.csv"
    path.write_text("source_id,gpu,num_gpus,framework,notes,measured_iteration_time_s\n"
                    "X,H100-SXM5-80GB,8,NeMo,,1.0\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    msg = str(exc.value)
    assert msg == (
        f"{path}: columns 'source_id', 'num_gpus', 'framework' are neither a session field "
        "(model, plan, cluster or cost; docs/accuracy.md) nor one of measured_iteration_time_s, "
        "measured_memory_gib, memory_scale, source, assumptions, notes, recipe; 'source_id': "
        "name it source; 'num_gpus': leave it out: the GPU count is tensor_parallel x "
        "pipeline_parallel x context_parallel x data_parallel; a file of the published-runs "
        "layout, whose free-text notes decide the model and plan, which vtrain does not read, "
        "converts to JSON lines of sessions under named assumptions with `python "
        "scripts/curate_runs.py FILE > runs.jsonl` (a source checkout; docs/accuracy.md, "
        "'Measurement file layouts')")
    assert "did you mean" not in msg
    # a single column of that layout that no field holds keeps the conversion alone
    path.write_text("framework,gpu,measured_iteration_time_s\nNeMo,H100-SXM5-80GB,1.0\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value).endswith(": this is the published-runs layout, whose free-text notes "
                                   "decide the model and plan, which vtrain does not read; "
                                   "convert it to JSON lines of sessions under named assumptions "
                                   "with `python scripts/curate_runs.py FILE > runs.jsonl` (a "
                                   "source checkout), review them, and validate that file "
                                   "(docs/accuracy.md, 'Measurement file layouts')")
    assert vtrain(["validate", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_session_file_is_not_measured_runs(tmp_path, capsys):
    """A session (one JSON document over many lines) given to validate is named as such, with
    what validate reads, not as line 1's JSON parse error."""
    path = ROOT / "resources" / "examples" / "mtnlg_530b.json"
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value).startswith(f"{path}: a session file, not measured runs: vtrain "
                                     "validate and calibrate read JSON lines")
    assert vtrain(["validate", str(path)]) == 2
    # a JSON-lines file whose first record is broken over lines still names its line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{\n"session": 1}\n{"session": 2}\n')
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(bad)
    assert str(exc.value).startswith(f"{bad}: line 1: not a valid JSON file")


def test_a_recipe_of_another_gpu_kind_is_refused(tmp_path, capsys):
    """A ``recipe`` of another GPU kind than the row's was applied silently: its overlaps,
    recomputation and CUDA graphs are the choices Megatron-Bridge made for its own kind
    (the recipe's ``perf_recipes/<family>/<gpu>/`` file). It is refused by name, exit 2; the
    row's kind given by another tool's name ('B200') is read as the kind first."""
    recipe = next(r for r in BRIDGE_PERF_RECIPES if r.key[0] == "B200-180GB"
                  and r.function.startswith("llama3_8b_") and r.refuse is None)
    path = tmp_path / "r.csv"
    row = {**REQUIRED_ROW, "recipe": recipe.function, "measured_iteration_time_s": "1.0"}
    _write_csv(path, [row])
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (
        f"{path}: row 1 (line 2), column 'recipe': {recipe.function} is Megatron-Bridge's recipe "
        f"for B200-180GB ({recipe.source}), and the row's gpu is A100-SXM4-80GB: a recipe's "
        "settings are those of its GPU kind; name a recipe of the row's kind, or leave the cell "
        "empty and give the settings as columns")
    assert vtrain(["validate", str(path)]) == 2
    assert "is Megatron-Bridge's recipe for B200-180GB" in capsys.readouterr().err
    for gpu in ("B200-180GB", "B200"):
        _write_csv(path, [{**row, "gpu": gpu}])
        (m,) = read_measurements(path)
        assert m.session.cluster.gpu == "B200-180GB"
        assert f"bridge-perf-recipe: {recipe.function} ({recipe.source})" in m.assumptions
