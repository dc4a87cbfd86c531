"""``vtrain import deepspeed``: the values DeepSpeed itself refuses, or that we cannot model,
are refused by name (checked in the PyPI sdists of DeepSpeed 0.16.9 and 0.19.8:
``runtime/zero/config.py``, ``runtime/precision_config.py``, ``runtime/zero/stage_1_and_2.py``,
``runtime/config.py``), and the import says where each parallel size came from."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from core.cli import main
from core.io.deepspeed_import import model_from_name, parallel_note, session_from_deepspeed
from core.plan.fields import ConfigError

ZERO2 = ROOT / "tests" / "data" / "deepspeed" / "zero2_bf16.json"
KW = {"num_gpus": 16, "gpu": "H100-SXM5-80GB", "recompute": "full"}


def _cfg(zero: dict | None = None, fp16: dict | None = None, **top) -> dict:
    """zero2_bf16.json (ZeRO-2, bf16, micro-batch 4, 8 steps, 16 GPUs: B = 512) with
    ``zero_optimization`` keys replaced, and with ``fp16`` the fp16 section instead of bf16."""
    cfg = json.loads(ZERO2.read_text())
    cfg["zero_optimization"].update(zero or {})
    if fp16 is not None:
        del cfg["bf16"]
        cfg["fp16"] = fp16
    cfg.update(top)
    return cfg


def _imp(cfg: dict, **kw):
    model = model_from_name("Llama 3 8B", seq_length=4096)[0]
    return session_from_deepspeed(cfg, model, "ds_config.json", **{**KW, **kw})


def _refused(cfg: dict) -> tuple[str, str]:
    with pytest.raises(ConfigError) as err:
        _imp(cfg)
    assert len(err.value.errors) == 1
    e = err.value.errors[0]
    return e.field.removeprefix("ds_config.json: "), e.message


# --- where t, p and d come from ---------------------------------------------------------------

def test_the_import_says_where_t_p_and_d_come_from():
    """A DeepSpeed JSON cannot set t or p (pipeline parallelism is a PipelineModule in the
    script; Megatron-DeepSpeed's sizes are launch arguments): t = p = 1 is DeepSpeed's meaning,
    said in a note with d's source (--num-gpus), and that there is no option for t or p."""
    imp = _imp(_cfg(train_batch_size=768), num_gpus=24)
    p = imp.session.plan
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (1, 1, 24)
    note = parallel_note(24)
    assert imp.notes[0] == note
    assert note.startswith("t = 1, p = 1, d = 24 (--num-gpus): a DeepSpeed config cannot set "
                           "tensor or pipeline parallelism")
    for words in ("PipelineModule", "--tensor-model-parallel-size",
                  "--pipeline-model-parallel-size", "no option for t or p"):
        assert words in note


def test_a_pipeline_section_is_still_refused_by_name():
    key, msg = _refused(_cfg(pipeline={"activation_checkpoint_interval": 1}))
    assert key == "pipeline" and "PipelineModule" in msg


# --- ZeRO bucket sizes and thresholds ---------------------------------------------------------

@pytest.mark.parametrize("key, value, words", [
    # 0.19.8 runtime/zero/config.py line 113: reduce_bucket_size int, gt=0; 0.16.9 ge=0 and
    # stage_1_and_2.py report_ipg_memory_usage divides by it
    ("reduce_bucket_size", 0, "0 must be at least 1 (DeepSpeedZeroConfig.reduce_bucket_size: "
                              "an int, gt=0 in 0.19.8"),
    ("reduce_bucket_size", -5, "-5 must be at least 1"),
    ("reduce_bucket_size", 2.5e8 + 0.5, "must be a whole number"),
    ("reduce_bucket_size", True, "true must be a whole number"),
    ("reduce_bucket_size", "5e8", '"5e8" must be a whole number'),
    # line 132: allgather_bucket_size int, ge=0
    ("allgather_bucket_size", -1, "-1 must be at least 0 (DeepSpeedZeroConfig."
                                  "allgather_bucket_size: an int, ge=0)"),
    ("allgather_bucket_size", 1.5, "1.5 must be a whole number"),
    # stage_1_and_2.py: assert allgather_bucket_size % nccl_start_alignment_factor (2) == 0
    ("allgather_bucket_size", 200_000_001, "200,000,001 must be even at ZeRO stage 2"),
    ("sub_group_size", -1, "DeepSpeedZeroConfig.sub_group_size: an int, ge=0"),
    ("stage3_max_live_parameters", 1e9 + 0.5,
     "(DeepSpeedZeroConfig.max_live_parameters: an int, ge=0)"),
    ("stage3_param_persistence_threshold", -1, "must be at least 0"),
])
def test_zero_sizes_deepspeed_refuses_are_refused_by_name(key, value, words):
    field, msg = _refused(_cfg({key: value}))
    assert field == f"zero_optimization.{key}"
    assert words in msg, msg


def test_prefetch_bucket_size_is_a_whole_number():
    """Was: any number of at least 0 (5.5 taken); DeepSpeedZeroConfig.prefetch_bucket_size is
    an int, ge=0 (line 222)."""
    field, msg = _refused(_cfg({"stage": 3, "stage3_prefetch_bucket_size": 5.5}))
    assert field == "zero_optimization.stage3_prefetch_bucket_size"
    assert msg.startswith("5.5 must be a whole number")


@pytest.mark.parametrize("zero", [
    {"reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8},   # JSON 5e8: a whole number
    {"reduce_bucket_size": 1, "allgather_bucket_size": 0},      # 0: not read (all_gather_into_tensor)
    {"stage": 3, "allgather_bucket_size": 3},                   # the even rule is ZeRO-1/2's
    {"reduce_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},  # HF fills in
])
def test_zero_sizes_deepspeed_takes_are_listed(zero):
    imp = _imp(_cfg(zero))
    assert imp.session.plan.global_batch_size == 512
    assert all(f"zero_optimization.{k}" in imp.approximated for k in zero if k != "stage")


def test_deprecated_allgather_size_is_checked_as_allgather_bucket_size():
    """``"zero_optimization": true``: stage 1, its all-gather bucket the top-level
    allgather_size (runtime/zero/config.py read_zero_config_deprecated)."""
    cfg = {"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True},
           "zero_optimization": True}
    assert _imp({**cfg, "allgather_size": 5e8}).session.plan.zero_stage == 1
    field, msg = _refused({**cfg, "allgather_size": 3})
    assert field == "allgather_size" and "3 must be even at ZeRO stage 1" in msg
    field, msg = _refused({**cfg, "allgather_size": 10 ** 40 + 1})  # by its digit count
    assert msg.startswith("an integer of 41 digits must be even at ZeRO stage 1"), msg


# --- fp16 loss scaling ------------------------------------------------------------------------

@pytest.mark.parametrize("fp16, key, words", [
    # 0.19.8 runtime/precision_config.py DeepSpeedFP16Config._validate_loss_scale: checked
    # with fp16 on or off
    ({"enabled": True, "loss_scale": -1}, "loss_scale", "-1 must be a finite number of at least 0"),
    ({"enabled": False, "loss_scale": -128}, "loss_scale", "-128 must be a finite number"),
    ({"enabled": True, "loss_scale": True}, "loss_scale", "true must be a finite number"),
    ({"enabled": True, "initial_scale_power": 16.5}, "initial_scale_power",
     "16.5 must be a whole number"),
    ({"enabled": True, "hysteresis": 1.5}, "hysteresis", "(DeepSpeedFP16Config: an int)"),
    # _validate_dynamic_loss_scale_params: fp16 on, loss_scale 0
    ({"enabled": True, "loss_scale_window": 0}, "loss_scale_window",
     "0 must be above 0 with dynamic loss scaling"),
    ({"enabled": True, "loss_scale": 0, "min_loss_scale": -1}, "min_loss_scale",
     "-1 must be above 0 with dynamic loss scaling"),
    # vtrain's rule (DeepSpeed does not bound it): 2**power from 1 to 2**127
    ({"enabled": True, "initial_scale_power": 128}, "initial_scale_power",
     "128 must be from 0 to 127 (vtrain's rule; DeepSpeed does not bound it)"),
    ({"enabled": True, "initial_scale_power": -1}, "initial_scale_power", "-1 must be from 0 to 127"),
    # 1e300 is a whole number: its 301 digits were printed with thousands separators
    ({"enabled": True, "initial_scale_power": 1e300}, "initial_scale_power",
     "an integer of 301 digits must be from 0 to 127"),
    # a static scale above 2**127: the fp32 loss overflows at every step and a static scaler
    # never lowers it (1e308 was imported as a run that trains)
    ({"enabled": True, "loss_scale": 1e308}, "loss_scale", "1e+308 must be at most 2**127"),
    ({"enabled": True, "loss_scale": 2.0 ** 127 * 1.5}, "loss_scale", "must be at most 2**127"),
])
def test_fp16_scaling_values_are_refused_by_name(fp16, key, words):
    field, msg = _refused(_cfg(fp16=fp16))
    assert field == f"fp16.{key}"
    assert words in msg, msg


@pytest.mark.parametrize("fp16", [
    {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
     "hysteresis": 2, "min_loss_scale": 1},                       # DeepSpeed's documented form
    {"enabled": True, "initial_scale_power": 0}, {"enabled": True, "initial_scale_power": 127},
    {"enabled": True, "loss_scale": 1024.0, "initial_scale_power": 200,
     "loss_scale_window": 0},                                     # static: the dynamic keys unused
    {"enabled": False, "initial_scale_power": 200, "min_loss_scale": 0},  # fp16 off: unused
    {"enabled": True, "loss_scale": 2.0 ** 127, "initial_scale_power": 16},  # largest static
    {"enabled": False, "loss_scale": 1e308, "initial_scale_power": 16},      # fp16 off: unused
    {"enabled": True, "loss_scale": "auto", "initial_scale_power": "auto"},  # dropped: defaults
])
def test_fp16_scaling_values_deepspeed_takes_are_listed(fp16):
    imp = _imp(_cfg(fp16=fp16))
    assert imp.session.plan.precision == ("fp16" if fp16["enabled"] else "fp32")
    assert "fp16.initial_scale_power" in imp.ignored


# --- the batch triple (refused before this change too; the rule is DeepSpeed's) -------------

@pytest.mark.parametrize("top, key, words", [
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps",
     "0 must be a positive integer"),
    # runtime/config.py _batch_assertion: 256 != 4 * 8 * 16
    ({"train_batch_size": 256}, "train_batch_size",
     "256 is not train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps (8) * the 16 "
     "data-parallel GPUs = 512"),
])
def test_batch_values_deepspeed_refuses(top, key, words):
    field, msg = _refused(_cfg(**top))
    assert field == key and words in msg


# --- the command line -------------------------------------------------------------------------

def test_a_refused_value_is_one_line_exit_2_from_the_cli(tmp_path, capsys):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(_cfg({"reduce_bucket_size": 0})))
    out = tmp_path / "out.json"
    rc = main(["import", "deepspeed", str(path), "--model", "Llama 3 8B", "--num-gpus", "16",
               "--recompute", "full", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"vtrain: error: {path}: zero_optimization.reduce_bucket_size: 0 must "
                          "be at least 1")
