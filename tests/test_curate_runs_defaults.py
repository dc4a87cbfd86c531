"""scripts/curate_runs.py, which `vtrain validate` names for a measured-memory-style CSV, filled
fields no column holds without saying so: GPT's tied embeddings for every row of
../shared/data/measured-memory/measured_memory.csv, whose README says every row is untied
(SimuMax's Llama 3 launchers and Megatron-LM's CI model_config.yaml both untie them). Each such
field is now a column, a named assumption, or refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.cli import main
from tests.conftest import ROOT

MEMORY_CSV = ROOT.parent / "shared" / "data" / "measured-memory" / "measured_memory.csv"
SCRIPT = ROOT / "scripts" / "curate_runs.py"
#: The rows of Megatron-LM's CI memory tests (README source 3): H100 TP4/PP1, H100 TP1/PP4,
#: A100 TP4/PP1, A100 TP1/PP4.
CI_ROWS = (17, 18, 19, 20)

pytestmark = pytest.mark.skipif(not MEMORY_CSV.exists(),
                                reason=f"shared data not present: {MEMORY_CSV}")


def _curate(tmp_path, *extra: str) -> tuple[list[dict], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(MEMORY_CSV), *extra],
                          capture_output=True, text=True, cwd=ROOT)
    out = tmp_path / "memory.jsonl"
    out.write_text(done.stdout)
    return [json.loads(line) for line in done.stdout.splitlines()], done


def _assumed(rec: dict, name: str) -> str | None:
    found = [a for a in rec["assumptions"] if a.startswith(f"{name}:")]
    return found[0] if found else None


def _memory_errors(tmp_path, capsys) -> dict[int, float]:
    assert main(["validate", str(tmp_path / "memory.jsonl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return {r["row"]: r["memory_error_percent"] for r in out["rows"]
            if r["memory_error_percent"] is not None}


def test_tying_is_stated_or_refused(tmp_path, capsys):
    """Without a tied_embeddings column the Llama-style rows (SimuMax, SwiGLU + RMSNorm) are
    untied by the named family policy (they were tied, GPT's default, unnamed), and the GPT
    rows of Megatron-LM's CI are refused by name: Megatron-LM ties by default
    (--untie-embeddings-and-output-weights is a store_true flag, default false, in
    ../shared/data/megatron-lm/arguments.json) but these runs untie (their model_config.yaml,
    the data's README)."""
    recs, done = _curate(tmp_path)
    assert done.returncode == 0, done.stderr
    by_row = {r["row"]: r for r in recs}
    for row in range(1, 17):
        r = by_row[row]
        assert r["skip_reason"] is None and r["session"]["model"]["tied_embeddings"] is False
        assert _assumed(r, "untied-llama-family")
    for row in CI_ROWS:
        assert by_row[row]["skip_reason"].startswith(
            "the file has no tied_embeddings column and the row is not Llama-style")
        assert by_row[row]["skip_reason"].endswith("--set tied_embeddings=n")
        assert "tied_embeddings" not in _assumed(by_row[row], "defaults-without-column")
    args = json.loads((ROOT.parent / "shared" / "data" / "megatron-lm" / "arguments.json")
                      .read_text())["arguments"]
    (untie,) = [a for a in args if a["dest"] == "untie_embeddings_and_output_weights"]
    assert (untie["action"], untie["default"]) == ("_StoreTrueAction", False)


def test_the_shared_rows_with_the_right_tying(tmp_path, capsys):
    """--set tied_embeddings=n (the README: untied for every row) is named in each row; the
    CI rows' memory error is then the benchmark's (benchmarks/bench_memory.py, which unties
    them too): MAPE 1.28 %, against 2.57 % with the tied output layer the script gave them."""
    recs, done = _curate(tmp_path, "--set", "tied_embeddings=n")
    assert done.returncode == 0, done.stderr
    assert all(r["skip_reason"] is None and r["session"]["model"]["tied_embeddings"] is False
               for r in recs) and len(recs) == 20
    assert all(r["assumptions"][0] == "column-from-command-line: a column the file does not "
               "have, stated for every row on the command line (--set COLUMN=VALUE): each row "
               "read as if it had that cell (tied_embeddings=n)" for r in recs)
    errors = _memory_errors(tmp_path, capsys)
    untied = [errors[row] for row in CI_ROWS]
    assert untied == pytest.approx([0.22, 1.46, -1.58, 1.86], abs=0.01)
    assert sum(map(abs, untied)) / 4 == pytest.approx(1.28, abs=0.01)
    assert sum(map(abs, errors.values())) / 20 == pytest.approx(1.18, abs=0.01)
    _curate(tmp_path, "--set", "tied_embeddings=y")
    tied = _memory_errors(tmp_path, capsys)
    assert sum(abs(tied[row]) for row in CI_ROWS) / 4 == pytest.approx(2.57, abs=0.01)
    # TP4/PP1 (rows 17, 19): tying drops the output layer's shard, V padded to 128 x t
    # (131,584) x h / t parameters at 2 (bf16) + 4 (fp32 gradient) + 12 / d (fp32 master and
    # Adam's two moments, ZeRO-1 over d = 2) bytes each; TP1/PP4 (rows 18, 20): the last stage
    # holds a copy of the word embeddings to tie, the output layer's size: no change
    measured = {17: 53.22, 19: 54.19}
    shard_gib = 131_584 * 4096 / 4 * (2 + 4 + 12 / 2) / 2**30
    assert shard_gib == pytest.approx(1.5059, abs=1e-4)
    for row, gib in measured.items():
        assert (errors[row] - tied[row]) / 100 * gib == pytest.approx(shard_gib, rel=1e-9)
    assert (tied[18], tied[20]) == (errors[18], errors[20])


def test_every_field_without_a_column_is_named(tmp_path):
    """The fields a row takes without a column are named in its assumptions, each with its
    value: the general layout's column defaults the file lacks, and the model and plan
    fields no column holds, by origin (Megatron-LM's defaults, the session's)."""
    recs, _ = _curate(tmp_path, "--set", "tied_embeddings=n")
    ci = recs[16]
    assert ci["row"] == 17
    assert _assumed(ci, "general-layout-default").endswith("(fsdp=n, overlap_grad_reduce=n)")
    named = _assumed(ci, "defaults-without-column")
    detail = named[named.index("(the session's: ") + 1:-1]
    session_part, megatron_part = detail.split("; Megatron-LM's: ")
    assert megatron_part.split(", ") == [
        'position_embedding="learned"', "add_bias_linear=true",
        "qk_layernorm=false", "kv_channels=null", "num_experts=null",
        "multi_latent_attention=false", "mtp_num_layers=0", "window_size=null",
        'softmax_type="vanilla"', "bias_activation_fusion=true", "hidden_dropout=0.1",
        "attention_dropout=0.1"]
    assert session_part.removeprefix("the session's: ").split(", ") == [
        "make_vocab_size_divisible_by=128",
        "add_output_bias=false", 'family="dense"', "gradient_accumulation_fusion=true",
        "overlap_param_gather=false", "grad_reduce_dtype=null", "first_stage_layers=null",
        "last_stage_layers=null", "account_for_embedding_in_pipeline_split=false",
        "account_for_loss_in_pipeline_split=false", "context_parallel=1",
        "data_parallel_shard_size=null", "cross_entropy_loss_fusion=false",
        "pipeline_model_parallel_layout=null", 'cuda_graph_impl="none"',
        "use_precision_aware_optimizer=false", 'tp_comm_overlap_backend="userbuffers"']
    # FSDP2's fp32 shards change nothing outside ZeRO-3 (inactive_fields): not an assumption
    assert "fsdp_fp32_params" not in named
    # nor do the QKV, O and MLP bias switches beside Megatron's add_bias_linear (every linear
    # has its bias already: inactive_fields)
    assert not {"add_qkv_bias", "add_proj_bias", "add_mlp_bias"} & {
        x.split("=")[0] for x in detail.replace("; ", ", ").split(", ")}
    # a field a column states is not listed; one another policy set keeps that policy's name
    assert "tied_embeddings" not in named and "attention_kernel" not in named
    assert _assumed(ci, "fused-attention-framework")
    llama = recs[0]
    assert "position_embedding" not in _assumed(llama, "defaults-without-column")
    assert _assumed(llama, "llama-family")


def test_set_refuses_a_column_the_file_has(tmp_path):
    _, done = _curate(tmp_path, "--set", "activation=swiglu")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"curate_runs: error: --set activation: {MEMORY_CSV} has a column "
                           "'activation'; its cells state it (edit them, or leave out --set)\n")
    _, done = _curate(tmp_path, "--set", "tied=n")
    assert done.returncode == 2 and done.stderr.startswith(
        "curate_runs: error: --set tied: not a column of the general layout (activation, ")
    _, done = _curate(tmp_path, "--set", "tied_embeddings")
    assert done.returncode == 2 and "give COLUMN=VALUE" in done.stderr


@pytest.mark.parametrize("pair,message", [
    # a value no row can read: refused once by the command line's option (was: exit 0, every
    # row skipped, or -- a number column -- no row written at all, and nothing said)
    ("context_parallel=abc", "--set context_parallel='abc': 'abc' is not a number"),
    ("expert_parallel=1e400", "--set expert_parallel='1e400': '1e400' is not a finite number"),
    ("tied_embeddings=maybe", "--set tied_embeddings='maybe': expected y or n (tied / untied)"),
    ("fsdp=maybe", "--set fsdp='maybe': expected y or n (yes/no, true/false, on/off, "
                   "enabled/disabled, 1/0)"),
])
def test_a_set_value_no_row_can_read_is_refused_once(tmp_path, pair, message):
    recs, done = _curate(tmp_path, "--set", pair)
    assert (done.returncode, recs) == (2, [])
    assert done.stderr.strip() == f"curate_runs: error: {message}"


def test_an_empty_set_value_is_refused():
    """--set tied_embeddings= stated an empty cell for every row: a non-Llama row's refusal
    ('tied embeddings not stated') became the tied-megatron-default assumption."""
    from scripts.curate_runs import main as curate
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert curate([str(MEMORY_CSV), "--set", "tied_embeddings="]) == 2
    assert err.getvalue().strip() == ("curate_runs: --set 'tied_embeddings=': give a value (an "
                                      "empty cell states nothing: leave out --set)")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert curate([str(MEMORY_CSV), "--set", "tied_embeddings=n", "--set",
                       "tied_embeddings=y"]) == 2
    assert err.getvalue().strip() == "curate_runs: --set 'tied_embeddings=y': give each column once"


def test_rows_left_out_of_the_json_lines_are_named(tmp_path):
    """A row with an unreadable number builds no plan, and to_jsonl writes none for it: the
    script now says which rows it left out, on stderr (was silent: 2 rows in, 1 out)."""
    csv_path = tmp_path / "runs.csv"
    head = ("gpu,num_gpus,gpus_per_node,num_layers,hidden_size,num_attention_heads,seq_length,"
            "global_batch_size,micro_batch_size,tensor_parallel,pipeline_parallel,data_parallel,"
            "measured_iteration_time_s,tied_embeddings")
    csv_path.write_text(f"{head}\nA100,8,8,24,2048,16,2048,512,4,abc,1,8,1.5,n\n"
                        "A100,8,8,24,2048,16,2048,512,4,1,1,8,1.5,n\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(csv_path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0
    assert [json.loads(x)["row"] for x in done.stdout.splitlines()] == [2]
    assert done.stderr.strip() == (f"curate_runs: 1 of 2 rows of {csv_path} not written (no plan "
                                   "could be built of them): row 1: column 'tensor_parallel': "
                                   "'abc' is not a number")
