"""A torchtitan user's sweep: ``vtrain import torchtitan`` names the ``vtrain sweep`` options that
keep the default space (Megatron-Core's: Transformer Engine's fused cross-entropy, Megatron's
selective recomputation, zero-bubble schedules, the all-to-all context-parallel exchange ...) to
what torchtitan runs, with its per-op recomputation in the space, as ``vtrain import deepspeed``
does for DeepSpeed (core.io.deepspeed_import.sweep_options).

Found by a trial user: the default sweep of an imported Llama 3 8B FSDP2 + TP2 + float8 job on
16 H200s picked ``ce_fusion ce_impl=te`` plans, tried Megatron's ``selective`` recomputation,
``cp_comm=a2a`` and ZB-H1, and left out the job's own plan: "its recomputation selective_op is
not among the sweep's none, selective, full".
"""
from __future__ import annotations

import csv
import dataclasses
import shlex

from core.cli import main
from core.io.torchtitan_import import RECOMPUTE_OPTIONS, read_torchtitan_config, sweep_options
from tests.conftest import ROOT

LLAMA3_8B = ROOT / "tests" / "data" / "torchtitan" / "llama3_8b.toml"


def test_sweep_options_by_session():
    s = read_torchtitan_config(LLAMA3_8B, num_gpus=8).session
    assert RECOMPUTE_OPTIONS == ("none", "selective_op", "full")
    common = ("--cross-entropy-fusion off --recompute none,selective_op,full "
              "--recompute-num-layers all --schedules 1f1b,gpipe,interleaved "
              "--virtual-pipeline-stages 2 --cp-comm-types allgather,p2p")
    assert sweep_options(s) == common + " --tp-comm-overlap n"
    # PyTorch's async TP (the session's backend, held by the sweep) is torchtitan's: kept
    async_tp = dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, tensor_parallel=2, sequence_parallel=True, tp_comm_overlap=True,
        tp_comm_overlap_backend="symmetric_memory"))
    assert sweep_options(async_tp) == common
    moe = dataclasses.replace(s, model=dataclasses.replace(s.model, num_experts=8))
    assert moe.model.is_moe
    assert sweep_options(moe).endswith(" --tp-comm-overlap n --moe-token-dispatcher alltoall "
                                       "--overlap-moe-expert-parallel-comm n")


def test_the_import_names_the_options_and_they_keep_the_sweep_to_torchtitan(tmp_path, capsys):
    out = tmp_path / "tt.json"
    assert main(["import", "torchtitan", str(LLAMA3_8B), "--num-gpus", "8", "--gpu", "H100",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    options = sweep_options(read_torchtitan_config(LLAMA3_8B, num_gpus=8).session)
    assert f"a sweep kept to what torchtitan runs: vtrain sweep {out} {options}" in printed
    plans = tmp_path / "plans.csv"
    assert main(["sweep", str(out), *shlex.split(options), "--workers", "1",
                 "--out", str(plans)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(plans.open()))
    assert rows
    for r in rows:
        assert r["cross_entropy_loss_fusion"] == "False"
        assert r["recompute"] in RECOMPUTE_OPTIONS and r["recompute_num_layers"] == ""
        assert r["schedule"] in ("1f1b", "gpipe", "interleaved")
        assert r["virtual_pipeline_stages"] in ("", "2")
        assert r["cp_comm_type"] in ("allgather", "p2p") or r["context_parallel"] == "1"
        assert r["tp_comm_overlap"] == "False"
    assert "selective_op" in {r["recompute"] for r in rows}
    # the session's own plan (d = 8, b = 1, per-op recomputation, ZeRO-3) is among them
    assert any((r["data_parallel"], r["micro_batch_size"], r["recompute"], r["zero_stage"],
                r["tensor_parallel"]) == ("8", "1", "selective_op", "3", "1") for r in rows)
    # the default sweep leaves it out (what the user met)
    assert main(["sweep", str(out), "--workers", "1", "--tensor-parallel", "1",
                 "--pipeline-parallel", "1", "--context-parallel", "1"]) == 0
    assert "its recomputation selective_op is not among the sweep's" in capsys.readouterr().out
