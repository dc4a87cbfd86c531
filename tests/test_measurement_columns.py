"""Faults a new user met feeding measured runs to `vtrain validate` (the trial's a100_runs.csv
and mem_own.csv): a virtual pipeline size of 1 refused though it is the measured-memory data's
"not interleaved"; a distributed_optimizer column told to convert a published-runs file
instead of the field it maps to (zero_stage=1); one bad column reported per round."""

from __future__ import annotations

import json

import pytest

from core.accuracy.measured import MeasurementFileError, read_measurements
from core.cli import main as vtrain
from core.io.session import SESSION_FORMAT, SESSION_VERSION

#: The trial's own file (mem_own.csv): Megatron-LM's CI GPT 7B-class memory tests on A100
#: (../shared/data/measured-memory/README.md, source 3), as session columns; row 1 TP4/PP1
#: with MBS 2, row 2 TP1/PP4 with MBS 1 and 8 virtual stages.
HEADER = ("gpu,gpus_per_node,num_layers,hidden_size,num_attention_heads,num_query_groups,"
          "ffn_hidden_size,activation,normalization,seq_length,vocab_size,global_batch_size,"
          "micro_batch_size,tensor_parallel,pipeline_parallel,data_parallel,"
          "virtual_pipeline_stages,sequence_parallel,recompute,zero_stage,precision,"
          "tied_embeddings,measured_memory_gib,memory_scale")
TP4 = "A100-SXM4-80GB,8,32,4096,32,8,,gelu,layernorm,8192,131073,8,2,4,1,2,{v},n,none,1,bf16,n,54.19,max_allocated"
PP4 = "A100-SXM4-80GB,8,32,4096,32,8,,gelu,layernorm,8192,131073,8,1,1,4,2,8,n,none,1,bf16,n,56.33,max_allocated"
RUN_COLUMNS = ("measured_iteration_time_s, measured_memory_gib, memory_scale, source, "
               "assumptions, notes, recipe")
RULE = ("neither a session field (model, plan, cluster or cost; docs/accuracy.md) nor one of "
        + RUN_COLUMNS)


def _memory_errors(path, capsys) -> list[float]:
    assert vtrain(["validate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return [r["memory_error_percent"] for r in out["rows"]]


def test_one_virtual_stage_is_not_interleaved(tmp_path, capsys):
    """virtual_pipeline_stages=1 was refused ("must be at least 2"), though the measured-memory
    data (and the published-runs layout) write 1 for "not interleaved" and Megatron-LM runs a
    virtual pipeline size of 1 as the plain schedule (validate_args sets it to None, as `vtrain
    import megatron-args` reads it). It reads as an empty cell: the same session, the same
    memory; 0 is refused with what to write."""
    empty, one = tmp_path / "empty.csv", tmp_path / "one.csv"
    empty.write_text(f"{HEADER}\n{TP4.format(v='')}\n{PP4}\n")
    one.write_text(f"{HEADER}\n{TP4.format(v='1')}\n{PP4}\n")
    a, b = read_measurements(empty), read_measurements(one)
    assert [m.session.to_dict() for m in a] == [m.session.to_dict() for m in b]
    assert (b[0].session.plan.virtual_pipeline_stages, b[0].session.plan.schedule) == (None, "1f1b")
    assert (b[1].session.plan.virtual_pipeline_stages, b[1].session.plan.schedule) == (8, "interleaved")
    errors = _memory_errors(one, capsys)
    assert errors == _memory_errors(empty, capsys)
    # the trial's figures (A100, untied as the CI model_config.yaml runs them)
    assert errors == pytest.approx([-1.57, 1.86], abs=0.01)
    zero = tmp_path / "zero.csv"
    zero.write_text(f"{HEADER}\n{TP4.format(v='0')}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(zero)
    assert str(exc.value) == (
        f"{zero}: row 1 (line 2), column 'virtual_pipeline_stages': virtual_pipeline_stages=0 "
        "must be at least 2 (1 is no interleaving, as Megatron-LM runs it: leave it empty (null))")


def test_a_session_document_says_how_to_write_no_interleaving(tmp_path):
    """A session (JSON lines, a session file) keeps null for no interleaving; 1 is refused
    with that fix in the message, not a bare "must be at least 2"."""
    csv_path = tmp_path / "one.csv"
    csv_path.write_text(f"{HEADER}\n{TP4.format(v='')}\n")
    (m,) = read_measurements(csv_path)
    doc = {"format": SESSION_FORMAT, "version": SESSION_VERSION, **m.session.to_dict()}
    doc["plan"]["virtual_pipeline_stages"] = 1
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({"session": doc, "measured_memory_gib": 54.19,
                                "memory_scale": "max_allocated"}) + "\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value).endswith(
        "virtual_pipeline_stages=1 must be at least 2 (1 is no interleaving, as Megatron-LM "
        "runs it: leave it empty (null))")


def test_distributed_optimizer_column_is_told_its_field(tmp_path, capsys):
    """A distributed_optimizer column was told to convert a "published-runs layout" file with
    scripts/curate_runs.py; it is told the field and value it maps to (docs/accuracy.md:
    Megatron's distributed optimizer is ZeRO stage 1, zero_stage=1)."""
    path = tmp_path / "do.csv"
    path.write_text(f"{HEADER.replace('zero_stage', 'distributed_optimizer')}\n"
                    f"{TP4.format(v='').replace(',none,1,', ',none,y,')}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    msg = str(exc.value)
    assert msg == (f"{path}: column 'distributed_optimizer' is {RULE}; Megatron's distributed "
                   "optimizer is ZeRO stage 1: give a column zero_stage, 1 where "
                   "distributed_optimizer is y and 0 where n")
    assert "published-runs" not in msg and "curate_runs" not in msg
    assert vtrain(["validate", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_every_bad_column_of_the_header_at_once(tmp_path, capsys):
    """The measured-memory file's own columns (num_gpus, framework, distributed_optimizer,
    measured_peak_memory_gib) took one round each; all are named in one message, each with
    what to write, and the conversion of the published-runs layout for the column that has no
    session field (framework)."""
    path = tmp_path / "many.csv"
    header = ("num_gpus,framework," + HEADER.replace("zero_stage", "distributed_optimizer")
              .replace("measured_memory_gib", "measured_peak_memory_gib"))
    path.write_text(f"{header}\n8,mcore,{TP4.format(v='').replace(',none,1,', ',none,y,')}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (
        f"{path}: columns 'num_gpus', 'framework', 'distributed_optimizer', "
        f"'measured_peak_memory_gib' are {RULE}; 'num_gpus': leave it out: the GPU count is "
        "tensor_parallel x pipeline_parallel x context_parallel x data_parallel; "
        "'distributed_optimizer': Megatron's distributed optimizer is ZeRO stage 1: give a "
        "column zero_stage, 1 where distributed_optimizer is y and 0 where n; "
        "'measured_peak_memory_gib': name it measured_memory_gib (GiB); a file of the "
        "published-runs layout, whose free-text notes decide the model and plan, which vtrain "
        "does not read, converts to JSON lines of sessions under named assumptions with "
        "`python scripts/curate_runs.py FILE > runs.jsonl` (a source checkout; "
        "docs/accuracy.md, 'Measurement file layouts')")
    assert vtrain(["validate", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_every_bad_cell_of_a_row_at_once(tmp_path, capsys):
    """A row with an unreadable integer, an unreadable flag, a value beyond its field's bound
    and an empty required cell is refused once, naming the four columns in the file's order;
    a row with one bad cell keeps the one-column message."""
    path = tmp_path / "bad.csv"
    bad = (TP4.format(v="1").replace(",8,2,4,1,2,", ",8,2x,4,1,2,")
           .replace(",n,none,1,bf16,", ",maybe,none,7,bf16,").replace(",131073,", ",,"))
    path.write_text(f"{HEADER}\n{PP4}\n{bad}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (
        f"{path}: row 2 (line 3): column 'vocab_size': empty, and a measured run has no default "
        "for it (docs/accuracy.md, 'Session defaults'); column 'micro_batch_size': '2x' is not "
        "an integer; column 'sequence_parallel': 'maybe' is not true or false; column "
        "'zero_stage': zero_stage=7 must be at most 3")
    assert vtrain(["validate", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    path.write_text(f"{HEADER}\n{TP4.format(v='1').replace(',none,1,', ',none,7,')}\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: row 1 (line 2), column 'zero_stage': zero_stage=7 must "
                              "be at most 3")
