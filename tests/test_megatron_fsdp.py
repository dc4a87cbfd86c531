"""Megatron-FSDP in the Megatron-LM import and export (docs/megatron_args.md, "Megatron-FSDP").

``--use-megatron-fsdp`` with ``--data-parallel-sharding-strategy`` no_shard / optim /
optim_grads / optim_grads_params reads as zero_stage 0 / 1 / 2 / 3 with the overlaps
Megatron-FSDP forces on (Megatron-Core 0.16.1, ``megatron_fsdp.py`` ``MegatronFSDP.__init__``);
the export writes ZeRO-2, and ZeRO-3 with the parameter gather overlapped (which FSDP2
refuses), as Megatron-FSDP, and reads back as the same plan; what Megatron-FSDP does that
the simulator does not model is refused by name."""

from __future__ import annotations

import dataclasses

import pytest

from core.cli import main
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.export import (MEGATRON_LM_SWEEP_OPTIONS, export_script, megatron_blockers,
                                     rewrite_script)
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import read_launch
from core.io.megatron.rules import broken_rules, required_environment, violations
from core.io.megatron.to_session import import_file
from core.plan.rules import validate
from core.sim.simulate import simulate
from tests.test_megatron_export import _session


def _strategy(args: list[str]) -> str | None:
    flag = "--data-parallel-sharding-strategy"
    return args[args.index(flag) + 1] if flag in args else None


def _round_trip(session, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(export_script(session))
    return import_file(path)


#: zero_stage -> (the exported sharding, or None for the distributed optimizer; the plan)
OVERLAPPED = {
    1: (None, _session(zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True)),
    2: ("optim_grads", _session(zero_stage=2, overlap_grad_reduce=True,
                                overlap_param_gather=True)),
    3: ("optim_grads_params", _session(zero_stage=3, overlap_grad_reduce=True,
                                       overlap_param_gather=True)),
}


@pytest.mark.parametrize("zero", sorted(OVERLAPPED))
def test_overlapped_zero_plans_round_trip(zero, tmp_path):
    """Session -> launch -> session: the same plan, the same simulated iteration and memory."""
    strategy, session = OVERLAPPED[zero]
    assert validate(session) == []
    args = export_arguments(session)
    assert _strategy(args) == strategy
    assert ("--use-megatron-fsdp" in args) == (strategy is not None)
    assert "--use-distributed-optimizer" in args and "--use-torch-fsdp2" not in args
    assert "--no-gradient-accumulation-fusion" not in args  # the plan's fusion, kept
    back = _round_trip(session, tmp_path).session
    assert back.plan == session.plan
    assert (back.plan.zero_stage, back.plan.overlap_grad_reduce,
            back.plan.overlap_param_gather) == (zero, True, True)
    before, after = simulate(session).report, simulate(back).report
    assert after.iteration_time_s == pytest.approx(before.iteration_time_s, rel=1e-12)
    assert after.max_memory_per_gpu_bytes == before.max_memory_per_gpu_bytes


def test_zero3_without_fusion_round_trips(tmp_path):
    session = _session(zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True,
                       gradient_accumulation_fusion=False)
    assert "--no-gradient-accumulation-fusion" in export_arguments(session)
    assert _round_trip(session, tmp_path).session.plan == session.plan


def test_zero3_without_overlap_stays_fsdp2():
    """Megatron-FSDP would overlap the gather: a plan that does not is FSDP2's, as before."""
    args = export_arguments(_session(zero_stage=3))
    assert "--use-torch-fsdp2" in args and "--use-megatron-fsdp" not in args


def test_the_export_writes_what_megatron_fsdp_needs():
    _, session = OVERLAPPED[3]
    args = export_arguments(session)
    assert args[args.index("--ckpt-format") + 1] == "fsdp_dtensor"
    assert broken_rules(args) == []
    t2 = dataclasses.replace(session, plan=dataclasses.replace(
        session.plan, tensor_parallel=2, data_parallel=4, sequence_parallel=True))
    t2_args = export_arguments(t2)
    # FSDP: CUDA_DEVICE_MAX_CONNECTIONS must not be 1, even with t > 1 on a Hopper GPU
    assert required_environment(t2_args, "H100-SXM5-80GB") == {"CUDA_DEVICE_MAX_CONNECTIONS": None}
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in export_script(t2)
    assert violations(t2_args, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "H100-SXM5-80GB")
    assert violations(t2_args, {}, "H100-SXM5-80GB") == []


# --------------------------------------------------------------------------- import

LAUNCH = r"""#!/bin/bash
torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 \
    --untie-embeddings-and-output-weights \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 1000 --bf16 \
    --use-megatron-fsdp --use-distributed-optimizer --ckpt-format fsdp_dtensor
"""


def _import(tmp_path, extra: str = "", name: str = "fsdp.sh"):
    path = tmp_path / name
    path.write_text(LAUNCH.rstrip("\n") + (" " + extra if extra else "") + "\n")
    return import_file(path)


def test_a_megatron_fsdp_launch_imports_as_zero3_with_its_overlaps(tmp_path):
    """Megatron-LM's default strategy, optim_grads_params, with no overlap switch given."""
    res = _import(tmp_path)
    pl = res.session.plan
    assert (pl.zero_stage, pl.data_parallel, pl.overlap_grad_reduce, pl.overlap_param_gather,
            pl.gradient_accumulation_fusion) == (3, 8, True, True, True)
    noted = dict(res.notes)
    assert "--overlap-grad-reduce" in noted and "--overlap-param-gather" in noted
    assert validate(res.session) == []


@pytest.mark.parametrize("strategy, zero, grad, param", [
    ("no_shard", 0, False, False), ("optim", 1, False, False), ("optim_grads", 2, True, False),
    ("optim_grads_params", 3, True, True)])
def test_each_sharding_strategy_is_a_zero_stage(tmp_path, strategy, zero, grad, param):
    res = _import(tmp_path, f"--data-parallel-sharding-strategy {strategy}")
    pl = res.session.plan
    assert (pl.zero_stage, pl.overlap_grad_reduce, pl.overlap_param_gather) == (zero, grad, param)


def test_no_shard_gathers_nothing(tmp_path):
    res = _import(tmp_path, "--data-parallel-sharding-strategy no_shard --overlap-grad-reduce "
                  "--overlap-param-gather")
    assert (res.session.plan.zero_stage, res.session.plan.overlap_param_gather) == (0, False)
    assert "--overlap-param-gather" in dict(res.notes)


def test_an_old_checkpoint_format_imports_with_a_note(tmp_path):
    """Earlier Megatron-LM versions start Megatron-FSDP with torch_dist: imported, noted."""
    res = _import(tmp_path, "--ckpt-format torch_dist")
    assert res.session.plan.zero_stage == 3
    assert "rule megatron-fsdp-checkpoint-format" in dict(res.notes)


def test_the_strategy_alone_changes_nothing(tmp_path):
    path = tmp_path / "plain.sh"
    path.write_text(LAUNCH.replace("--use-megatron-fsdp --use-distributed-optimizer "
                                   "--ckpt-format fsdp_dtensor",
                                   "--data-parallel-sharding-strategy optim"))
    res = import_file(path)
    assert res.session.plan.zero_stage == 0
    assert "--data-parallel-sharding-strategy" in dict(res.notes)


#: What Megatron-FSDP does that the simulator does not model -> the argument named.
REFUSED = {
    "no_distributed_optimizer": (" --use-distributed-optimizer", "", "--use-megatron-fsdp"),
    "hybrid": ("", "--num-distributed-optimizer-instances 2",
               "--num-distributed-optimizer-instances"),
    "bf16_main_weights": ("", "--megatron-fsdp-main-params-dtype bf16",
                          "--megatron-fsdp-main-params-dtype"),
    "outer_shard": ("", "--outer-dp-sharding-strategy optim", "--outer-dp-sharding-strategy"),
    "fp8_gather": ("", "--fp8-format hybrid --fp8-param-gather", "--fp8-param-gather"),
    "version_2": ("", "--megatron-fsdp-version 2", "--megatron-fsdp-version"),
    "two_fsdps": (" --use-distributed-optimizer", "--use-torch-fsdp2", "--use-torch-fsdp2"),
    "custom_fsdp": ("--use-megatron-fsdp", "", "--use-custom-fsdp"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_is_not_modelled_is_refused_by_name(tmp_path, name, capsys):
    drop, extra, flag = REFUSED[name]
    text = LAUNCH.replace(drop, "--use-custom-fsdp" if name == "custom_fsdp" else "", 1)
    path = tmp_path / f"{name}.sh"
    path.write_text(text.rstrip("\n") + (" " + extra if extra else "") + "\n")
    with pytest.raises(MegatronArgsError, match=flag):
        import_file(path)
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 2
    assert flag in capsys.readouterr().err and not out.exists()


def test_fsdp2_keeping_the_gathered_parameters_is_refused_by_name(tmp_path, capsys):
    """--torch-fsdp2-no-reshard-after-forward (fully_shard(reshard_after_forward=False)) keeps
    every layer's whole weights from its forward to its backward: more memory than the ZeRO-3
    plan counts, refused by name (it was listed as ignored and the plan read as ZeRO-3);
    without FSDP2 it has no effect and is listed so."""
    fsdp2 = LAUNCH.replace("--use-megatron-fsdp --use-distributed-optimizer --ckpt-format "
                           "fsdp_dtensor", "--use-torch-fsdp2 --no-gradient-accumulation-fusion")
    path = tmp_path / "fsdp2.sh"
    path.write_text(fsdp2)
    assert import_file(path).session.plan.zero_stage == 3  # the plan without the switch
    path.write_text(fsdp2.rstrip("\n") + " --torch-fsdp2-no-reshard-after-forward\n")
    with pytest.raises(MegatronArgsError, match="--torch-fsdp2-no-reshard-after-forward: FSDP2 "
                       "keeping each layer's gathered parameters"):
        import_file(path)
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 2
    assert "--torch-fsdp2-no-reshard-after-forward" in capsys.readouterr().err
    assert not out.exists()
    plain = tmp_path / "plain.sh"
    plain.write_text(fsdp2.replace("--use-torch-fsdp2 ", "").rstrip("\n")
                     + " --torch-fsdp2-no-reshard-after-forward\n")
    res = import_file(plain)
    assert res.session.plan.zero_stage == 0
    assert res.ignored["--torch-fsdp2-no-reshard-after-forward"] == ("no effect without "
                                                                    "--use-torch-fsdp2")


# --------------------------------------------------------------------------- export refusals

@pytest.mark.parametrize("plan, field", [
    (dict(zero_stage=2), "plan.overlap_grad_reduce"),
    (dict(zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True,
          data_parallel_shard_size=4), "plan.data_parallel_shard_size"),
    (dict(zero_stage=2, overlap_grad_reduce=True, precision="fp8", fp8_param_gather=True,
          fp8_recipe="delayed"), "plan.fp8_param_gather")])
def test_plans_megatron_fsdp_runs_otherwise_are_refused_naming_the_field(plan, field):
    session = _session(**plan)
    assert validate(session) == []  # the simulator simulates it
    with pytest.raises(MegatronArgsError, match=field):
        export_arguments(session)
    assert any(field in b for b in megatron_blockers(session))


def test_an_overlapped_gather_without_overlapped_reduction_breaks_megatrons_rule():
    session = _session(zero_stage=3, overlap_param_gather=True)
    assert "--use-megatron-fsdp" in export_arguments(session)
    with pytest.raises(MegatronArgsError, match="overlap-param-gather-grad-reduce"):
        export_script(session)


# --------------------------------------------------------------------------- --into, sweep

def test_into_writes_megatron_fsdp_into_a_distributed_optimizer_script(tmp_path):
    """A ZeRO-1 script rewritten for an overlapped ZeRO-3 plan: Megatron-FSDP with its checkpoint
    format added, and it reads back as the plan."""
    zero1, session = OVERLAPPED[1][1], OVERLAPPED[3][1]
    text = export_script(zero1)
    new = rewrite_script(session, text, "train.sh")
    args = read_launch(new, "x").arguments
    assert "--use-megatron-fsdp" in args and args.count("--ckpt-format") == 1
    assert args[args.index("--ckpt-format") + 1] == "fsdp_dtensor"
    path = tmp_path / "new.sh"
    path.write_text(new)
    assert import_file(path).session.plan == session.plan


def test_the_sweep_options_keep_every_zero_stage():
    from core.cli.sweep import megatron_lm_options
    from core.studies.sweep.space import SweepSpace
    assert "--zero-stages" not in MEGATRON_LM_SWEEP_OPTIONS
    assert megatron_lm_options(SweepSpace(zero_stages=[2, 3])) == MEGATRON_LM_SWEEP_OPTIONS
    # without the overlaps Megatron-FSDP forces, ZeRO-2 is left out
    assert megatron_lm_options(SweepSpace(zero_stages=[2, 3], dp_overlap=[False, True])) == \
        "--cross-entropy-fusion native --zero-stages 3 --schedules 1f1b,interleaved"
    assert megatron_lm_options(SweepSpace(dp_overlap=[False])) == \
        "--cross-entropy-fusion native --zero-stages 0,1,3 --schedules 1f1b,interleaved"
