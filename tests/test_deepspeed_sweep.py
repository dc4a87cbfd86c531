"""A DeepSpeed user's sweep: ``vtrain import deepspeed`` names the ``vtrain sweep`` options that
keep the default space (Megatron-Core's: tensor and pipeline parallelism, Transformer Engine's
fused cross-entropy ...) to what DeepSpeed without Megatron runs, and those options give only
such plans.

Found by trying the product as a Hugging Face Trainer + DeepSpeed user: the plain sweep of an
imported ZeRO-3 session of Llama 3 8B on 16 H100s picked t=1 p=1 d=16 with ``ce_fusion
ce_impl=te`` (Transformer Engine's fused cross-entropy, which a Trainer run has not) and listed
t = 2..8, p = 2..16 and cp plans among the best for each value, and said only that Megatron-LM
could not run them.
"""
from __future__ import annotations

import csv
import json
import shlex

from core.cli import main
from core.io.deepspeed_import import sweep_options
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "deepspeed"
HF_ZERO3 = DATA / "hf_trainer_zero3.json"  # Hugging Face Trainer's ZeRO-3 example, "auto"s


def test_sweep_options_by_precision():
    assert sweep_options("bf16") == ("--tensor-parallel 1 --pipeline-parallel 1 "
                                     "--context-parallel 1 --cross-entropy-fusion off "
                                     "--recompute none,full --recompute-num-layers all "
                                     "--zero-stages 1,2,3")
    assert sweep_options("fp16") == ("--tensor-parallel 1 --pipeline-parallel 1 "
                                     "--context-parallel 1 --cross-entropy-fusion off "
                                     "--recompute none,full --recompute-num-layers all")


def test_the_import_names_the_options_and_they_keep_the_sweep_to_deepspeed(tmp_path, capsys):
    out = tmp_path / "ds.json"
    assert main(["import", "deepspeed", str(HF_ZERO3), "--model", "Llama 3 8B", "--num-gpus",
                 "8", "--gpu", "H100", "--seq-length", "4096", "--micro-batch-size", "1",
                 "--gradient-accumulation-steps", "4", "--precision", "bf16",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    options = sweep_options("bf16")
    assert f"a sweep kept to what DeepSpeed runs: vtrain sweep {out} {options}" in printed
    plans = tmp_path / "plans.csv"
    assert main(["sweep", str(out), *shlex.split(options), "--workers", "1",
                 "--out", str(plans)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(plans.open()))
    assert rows
    for r in rows:
        assert (r["tensor_parallel"], r["pipeline_parallel"], r["context_parallel"]) == \
            ("1", "1", "1")
        assert int(r["tensor_parallel"]) * int(r["data_parallel"]) == int(r["num_gpus"])
        assert r["cross_entropy_loss_fusion"] == "False"
        assert r["recompute"] in ("none", "full") and r["zero_stage"] in ("1", "2", "3")
        assert r["schedule"] == "1f1b" and r["sequence_parallel"] == "False"
        # full recomputation of every layer only (Hugging Face's gradient_checkpointing): no
        # partial block recomputation, which the sweep adds under full by default
        assert r["recompute_num_layers"] == ""
    assert {r["recompute"] for r in rows} == {"none", "full"}
    # without that option the same sweep has partial recomputations (what it keeps out)
    partial = tmp_path / "partial.csv"
    assert main(["sweep", str(out), *shlex.split(options.replace(
        " --recompute-num-layers all", "")), "--workers", "1", "--out", str(partial)]) == 0
    capsys.readouterr()
    assert {r["recompute_num_layers"] for r in csv.DictReader(partial.open())} - {""}
    # the session's own plan (ZeRO-3, d = 8, B = 32) is among them
    assert any((r["data_parallel"], r["zero_stage"], r["global_batch_size"]) == ("8", "3", "32")
               for r in rows)
    assert json.loads(out.read_text())["plan"]["zero_stage"] == 3


def test_every_unsupplied_auto_is_named_in_one_refusal():
    """Hugging Face Trainer's ZeRO-3 example has "auto" for the micro-batch, the accumulation
    steps and both precision switches: the import refused the first alone, then (given it) the
    next, then the next: three runs to learn three options. Now one message names them all; a
    single missing one keeps its own message."""
    import pytest
    from core.io.deepspeed_import import model_from_name, session_from_deepspeed
    from core.plan.fields import ConfigError
    cfg = json.loads(HF_ZERO3.read_text())
    model = model_from_name("Llama 3 8B", seq_length=4096)[0]

    def refused(**options):
        with pytest.raises(ConfigError) as err:
            session_from_deepspeed(cfg, model, "ds_config.json", num_gpus=8, recompute="full",
                                   options=options)
        assert len(err.value.errors) == 1
        e = err.value.errors[0]
        return f"{e.field}: {e.message}"
    assert refused() == (
        "ds_config.json: train_micro_batch_size_per_gpu: 'auto', and so are "
        "gradient_accumulation_steps, bf16.enabled and fp16.enabled (Hugging Face Trainer's "
        "placeholders, filled in from its own arguments): give --micro-batch-size, "
        "--gradient-accumulation-steps and --precision with the values the Trainer fills in, "
        "or the values in the file")
    assert "and so is gradient_accumulation_steps (" in refused(**{"--precision": "bf16"})
    one = refused(**{"--precision": "bf16", "--micro-batch-size": 1})
    assert "gradient_accumulation_steps: 'auto' (Hugging Face Trainer's placeholder" in one
    assert "and so" not in one
    s = session_from_deepspeed(cfg, model, "ds_config.json", num_gpus=8, recompute="full",
                               options={"--precision": "bf16", "--micro-batch-size": 1,
                                        "--gradient-accumulation-steps": 4}).session
    assert (s.plan.micro_batch_size, s.plan.global_batch_size, s.plan.precision) == \
        (1, 32, "bf16")
