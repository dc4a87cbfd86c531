"""``vtrain import deepspeed`` against DeepSpeed's own source (checked in the sdists of
DeepSpeed 0.19.8 and 0.16.9 from PyPI; the line numbers are 0.19.8's unless said): every key
DeepSpeed's config models define has a rule, the older names and forms DeepSpeed still reads
are read as it reads them, the values it refuses are refused, and hostile files end in one
line naming the file and the key, exit status 2, never a traceback."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from core.cli import main
from core.io.deepspeed_import import (load_rules, model_from_name, read_deepspeed_config,
                                      session_from_deepspeed)
from core.io.session import SessionFileError
from core.plan.fields import ConfigError

ZERO2 = ROOT / "tests" / "data" / "deepspeed" / "zero2_bf16.json"
H100 = "H100-SXM5-80GB"
KW = {"num_gpus": 16, "gpu": H100, "recompute": "full"}


def _llama():
    return model_from_name("Llama 3 8B", seq_length=4096)[0]


def _zero2() -> dict:
    return json.loads(ZERO2.read_text())


def _imp(cfg: dict, **kw):
    return session_from_deepspeed(cfg, _llama(), "ds_config.json", **{**KW, **kw})


def _refused(cfg: dict, **kw):
    with pytest.raises(ConfigError) as err:
        _imp(cfg, **kw)
    assert len(err.value.errors) == 1
    return err.value.errors[0]


# DeepSpeedZeroConfig's fields (runtime/zero/config.py lines 95-377) and the aliases it takes
# for them (populate_by_name=True, runtime/config_utils.py line 109): all are read by DeepSpeed.
ZERO_FIELDS = [
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
    "use_multi_rank_bucket_allreduce", "allgather_partitions", "allgather_bucket_size",
    "overlap_comm", "compute_grad_norm", "load_from_fp32_weights", "elastic_checkpoint",
    "offload_param", "offload_optimizer", "zenflow", "sub_group_size", "cpu_offload_param",
    "cpu_offload_use_pin_memory", "cpu_offload", "prefetch_bucket_size",
    "stage3_prefetch_bucket_size", "param_persistence_threshold",
    "stage3_param_persistence_threshold", "model_persistence_threshold",
    "stage3_model_persistence_threshold", "max_live_parameters", "stage3_max_live_parameters",
    "max_reuse_distance", "stage3_max_reuse_distance", "gather_16bit_weights_on_model_save",
    "stage3_gather_16bit_weights_on_model_save", "module_granularity_threshold",
    "stage3_module_granularity_threshold", "use_all_reduce_for_fetch_params",
    "stage3_use_all_reduce_for_fetch_params", "allgather_sequential",
    "stage3_allgather_sequential", "stage3_gather_fp16_weights_on_model_save",
    "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients", "parameter_alignment",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients", "memory_efficient_linear", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
    "save_muon_momentum_buffer_in_memory", "leaf_module",
    # 0.16.9's (removed in 0.19.8, runtime/config.py lines 119-130)
    "mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param"]
# DeepSpeedBF16Config (runtime/precision_config.py lines 46-68), DeepSpeedFP16Config (105-160)
BF16_FIELDS = ["enabled", "immediate_grad_update", "check_grad_overflow",
               "bf16_master_weights_and_grads", "bf16_optimizer_states"]
FP16_FIELDS = ["enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
               "hysteresis", "consecutive_hysteresis", "min_loss_scale",
               "fp16_master_weights_and_grads"]
# The top-level keys runtime/config.py _initialize_params (lines 482-588) and
# _do_warning_check (717) read, with the monitors (monitor/config.py line 13)
TOP_KEYS = [
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "managed_gradient_accumulation", "steps_per_print", "dump_state", "disable_python_gc",
    "disable_allgather", "communication_data_type", "seq_parallel_communication_data_type",
    "prescale_gradients", "gradient_predivide_factor", "gradient_allreduce_op",
    "zero_optimization", "activation_checkpointing", "comms_logger", "tensorboard", "wandb",
    "csv_monitor", "comet", "gradient_clipping", "fp16", "bf16", "bfloat16", "torch_autocast",
    "optimizer", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "scheduler",
    "flops_profiler", "wall_clock_breakdown", "memory_breakdown", "autotuning",
    "use_data_before_expert_parallelism", "hybrid_engine", "pipeline", "data_efficiency",
    "checkpoint", "data_types", "aio", "dataloader_drop_last", "log_level", "datastates",
    "weight_quantization", "compile", "timers", "tensor_parallel", "expert_parallel",
    "vocabulary_size", "sequence_parallel_size",
    # removed in 0.19.8 (runtime/config.py lines 81-118), read by 0.16.9
    "nebula", "compression_training", "amp", "quantize_training", "sparse_gradients",
    "eigenvalue", "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning",
    "progressive_layer_drop"]


def _has_rule(name: str) -> bool:
    rules = load_rules()
    prefix = name.rsplit(".", 1)[0] + ".*" if "." in name else None
    return name in rules or (prefix in rules) or any(k.startswith(name + ".") for k in rules)


def test_every_key_deepspeeds_config_models_define_has_a_rule():
    """Before: bf16.immediate_grad_update, bf16.check_grad_overflow, zero_optimization.
    cpu_offload_param (the policy had "cpu_offload_params", a name DeepSpeed never read),
    compute_grad_norm, prefetch_bucket_size, gradient_allreduce_op, the bfloat16 section and
    30 more were refused as "not a DeepSpeed config key the importer knows"."""
    missing = [f"zero_optimization.{k}" for k in ZERO_FIELDS
               if not _has_rule(f"zero_optimization.{k}")]
    missing += [f"{s}.{k}" for s in ("bf16", "bfloat16") for k in BF16_FIELDS
                if not _has_rule(f"{s}.{k}")]
    missing += [f"fp16.{k}" for k in FP16_FIELDS if not _has_rule(f"fp16.{k}")]
    missing += [k for k in TOP_KEYS if not _has_rule(k)]
    assert missing == []
    assert "zero_optimization.cpu_offload_params" not in load_rules()


def test_bfloat16_is_read_as_the_bf16_section():
    """runtime/precision_config.py lines 31-38 (0.16.9: runtime/config.py 168-172): DeepSpeed
    reads "bfloat16" when there is no "bf16"; it was refused as an unknown key."""
    cfg = _zero2()
    cfg["bfloat16"] = cfg.pop("bf16")
    imp = _imp(cfg)
    p = imp.session.plan
    assert (p.precision, p.grad_reduce_dtype, p.zero_stage) == ("bf16", "bf16", 2)
    assert imp.used["bfloat16.enabled"].startswith("true: plan.precision")
    # bf16 given too: DeepSpeed reads bf16 and never looks at bfloat16
    cfg["bf16"] = {"enabled": False}
    imp = _imp(cfg)
    assert imp.session.plan.precision == "fp32"
    assert "bfloat16.enabled" not in imp.used and imp.ignored["bfloat16"].startswith("not read")
    # and its refusals name the key of the file
    cfg = {"train_micro_batch_size_per_gpu": 4, "bfloat16": {"enabled": True}}
    err = _refused(cfg)
    assert err.field == "ds_config.json: zero_optimization.stage"
    assert err.message.startswith("0 with bfloat16.enabled: DeepSpeed 0.16 runs its "
                                  "BF16_Optimizer")


@pytest.mark.parametrize("value, stage", [(True, 1), (False, 0)])
def test_zero_optimization_as_a_boolean_is_the_deprecated_form(value, stage):
    """runtime/zero/config.py lines 60-78: "zero_optimization": true is stage 1, false stage 0
    (read_zero_config_deprecated); it was refused ("true must be an object")."""
    cfg = _zero2()
    cfg["zero_optimization"] = value
    if stage == 0:
        del cfg["bf16"]
    imp = _imp(cfg)
    assert imp.session.plan.zero_stage == stage
    assert f"zero_optimization {str(value).lower()}: DeepSpeed's deprecated form, stage " \
           f"{stage}" in imp.notes


def test_an_optimizer_section_without_type_is_the_scripts_optimizer():
    """runtime/config.py lines 288-299: get_optimizer_name is None without "type", and
    DeepSpeed builds no optimizer (params unread); it was refused "optimizer.type: missing
    (DeepSpeed needs the optimizer's type)"."""
    cfg = _zero2()
    del cfg["optimizer"]["type"]
    imp = _imp(cfg)
    assert imp.session.plan.zero_stage == 2
    assert any(n.startswith("optimizer section without a type: DeepSpeed builds no optimizer")
               for n in imp.notes)


@pytest.mark.parametrize("value, ok", [("bf16", True), ("BF16", True), ("bfloat16", False),
                                       ("torch.bfloat16", False), ("half", False)])
def test_communication_data_type_takes_deepspeeds_three_names(value, ok):
    """runtime/config.py lines 216-230: lower-cased, then fp32, fp16 or bf16, else ValueError.
    "bfloat16" and "half" were accepted (DtypeEnum's names, another function's)."""
    cfg = _zero2()
    cfg["communication_data_type"] = value
    if ok:
        assert _imp(cfg).session.plan.grad_reduce_dtype == "bf16"
    else:
        err = _refused(cfg)
        assert err.field == "ds_config.json: communication_data_type"
        assert err.message == (f'"{value}": one of fp32, fp16, bf16 (DeepSpeed\'s '
                               "get_communication_data_type takes these three, any case)")


@pytest.mark.parametrize("value, ok", [("bf16", True), ("bfloat16", True),
                                       ("torch.bfloat16", True), ("BF16", False),
                                       ("bfloat", False)])
def test_grad_accum_dtype_takes_dtypeenum_names_as_written(value, ok):
    """runtime/config.py lines 144-149 (DtypeEnum; engine.py line 1809 DtypeEnum(value)):
    bf16, bfloat16, torch.bfloat16, case as written; "bfloat" (not a DtypeEnum name) and
    "BF16" were accepted."""
    cfg = _zero2()
    cfg["data_types"] = {"grad_accum_dtype": value}
    if ok:
        assert _imp(cfg).session.plan.grad_reduce_dtype == "bf16"
    else:
        err = _refused(cfg)
        assert err.field == "ds_config.json: data_types.grad_accum_dtype"
        assert err.message.startswith(f'"{value}": one of fp32, float32')


def test_cpu_offload_param_is_refused_by_its_name():
    """runtime/zero/config.py line 188: the deprecated key is cpu_offload_param (true: the
    parameters offloaded to the CPU). The policy named "cpu_offload_params", so the real key
    was refused as unknown even at false."""
    cfg = _zero2()
    cfg["zero_optimization"].update(stage=3, cpu_offload_param=True)
    err = _refused(cfg)
    assert err.field == "ds_config.json: zero_optimization.cpu_offload_param"
    assert err.message.startswith("true: not modelled: the parameters moved to the CPU")
    cfg["zero_optimization"]["cpu_offload_param"] = False
    assert _imp(cfg).session.plan.zero_stage == 3
    cfg["zero_optimization"]["cpu_offload_params"] = False
    assert "is not a DeepSpeed config key" in _refused(cfg).message


def test_auto_in_zero_keys_is_deepspeeds_default():
    """runtime/config_utils.py line 56: DeepSpeedConfigModel drops "auto" values, so
    zero_optimization.stage "auto" is 0 and overlap_comm "auto" the stage's default (true at
    stage 3 only, runtime/zero/config.py lines 383-387); both were refused."""
    cfg = _zero2()
    del cfg["bf16"]
    cfg["zero_optimization"]["overlap_comm"] = "auto"
    imp = _imp(cfg)
    assert imp.session.plan.zero_stage == 2 and not imp.session.plan.overlap_grad_reduce
    cfg["zero_optimization"]["stage"] = 3
    imp = _imp(cfg)
    assert imp.session.plan.overlap_grad_reduce and imp.session.plan.overlap_param_gather
    assert ("zero_optimization.overlap_comm 'auto': true, DeepSpeed's default at stage 3 "
            "(its config model drops \"auto\")") in imp.notes
    cfg["zero_optimization"]["stage"] = "auto"
    imp = _imp(cfg)
    assert imp.session.plan.zero_stage == 0 and not imp.session.plan.overlap_grad_reduce


def test_prefetch_bucket_size_field_name_is_its_alias():
    """runtime/zero/config.py line 222: prefetch_bucket_size, alias
    stage3_prefetch_bucket_size; DeepSpeed takes either, not both."""
    cfg = _zero2()
    del cfg["bf16"]
    cfg["zero_optimization"].update(stage=3, overlap_comm=True, prefetch_bucket_size=0)
    p = _imp(cfg).session.plan
    assert p.overlap_grad_reduce and not p.overlap_param_gather
    cfg["zero_optimization"]["stage3_prefetch_bucket_size"] = 50_000_000
    err = _refused(cfg)
    assert err.field == "ds_config.json: zero_optimization.prefetch_bucket_size"


@pytest.mark.parametrize("change, key, words", [
    (lambda c: c["bf16"].update(bf16_master_weights_and_grads=True),
     "bf16.bf16_master_weights_and_grads", "bf16 master weights"),
    (lambda c: c["bf16"].update(bf16_optimizer_states=True), "bf16.bf16_optimizer_states",
     "bf16 Adam moments"),
    (lambda c: c["zero_optimization"].update(stage3_use_all_reduce_for_fetch_params=True),
     "zero_optimization.stage3_use_all_reduce_for_fetch_params", "all-reduce"),
    (lambda c: c["zero_optimization"].update(zenflow={"topk_ratio": 0.1}),
     "zero_optimization.zenflow", "ZenFlow"),
    (lambda c: c.update(gradient_allreduce_op="sum"), "gradient_allreduce_op", "summed"),
    (lambda c: c.update(managed_gradient_accumulation=False), "managed_gradient_accumulation",
     "the training script"),
    (lambda c: c.update(compile={"deepcompile": True}), "compile.deepcompile", "DeepCompile"),
    (lambda c: c.update(data_types={"param_dtype": "fp32"}), "data_types.param_dtype",
     "parameters' dtype"),
])
def test_newer_keys_that_change_the_run_are_refused_by_name(change, key, words):
    cfg = _zero2()
    change(cfg)
    err = _refused(cfg)
    assert err.field == f"ds_config.json: {key}" and words in err.message


def test_newer_keys_at_their_defaults_are_listed():
    """The same keys at DeepSpeed's defaults (runtime/precision_config.py lines 51-68,
    runtime/zero/config.py lines 143, 179, 273-279, 317, 365; constants.py lines 79, 264)."""
    cfg = _zero2()
    cfg["bf16"].update(immediate_grad_update=False, check_grad_overflow=True,
                       bf16_master_weights_and_grads=False, bf16_optimizer_states=False)
    cfg["zero_optimization"].update(compute_grad_norm=True, zenflow=None,
                                    stage3_use_all_reduce_for_fetch_params=False,
                                    stage3_allgather_sequential=False, parameter_alignment=False,
                                    enable_sanity_checks=False)
    cfg.update(managed_gradient_accumulation=True, gradient_allreduce_op="mean",
               compile={"deepcompile": False}, timers={"throughput": {"enabled": True}})
    imp = _imp(cfg)
    assert imp.session.plan.zero_stage == 2
    assert imp.ignored["gradient_allreduce_op"].startswith('"mean": the modelled setting')
    assert "zero_optimization.parameter_alignment" in imp.approximated


@pytest.mark.parametrize("triple, expected", [
    # runtime/config.py _set_batch_related_parameters (lines 607-652), 16 GPUs
    ({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4}, (4, 512)),  # GA 8
    ({"train_batch_size": 512, "gradient_accumulation_steps": 8}, (4, 512)),     # micro 4
    ({"train_batch_size": 512}, (32, 512)),                                       # GA 1
    ({"train_micro_batch_size_per_gpu": 4}, (4, 64)),                             # GA 1
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8}, (4, 512)),
])
def test_batch_triple_is_derived_as_deepspeed_derives_it(triple, expected):
    cfg = {**triple, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    p = _imp(cfg).session.plan
    assert (p.micro_batch_size, p.global_batch_size) == expected


def test_batch_triple_floors_then_checks_as_deepspeed():
    """train_batch_size 520, micro 4, 16 GPUs: DeepSpeed floors GA to 520 // 4 // 16 = 8 (line
    621-622), then its assertion (lines 602-605) fails: 520 != 4 * 8 * 16 = 512."""
    cfg = {"train_batch_size": 520, "train_micro_batch_size_per_gpu": 4,
           "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    err = _refused(cfg)
    assert err.field == "ds_config.json: train_batch_size"
    assert err.message.startswith("520 is not train_micro_batch_size_per_gpu (4) * "
                                  "gradient_accumulation_steps (8) * the 16 data-parallel GPUs "
                                  "= 512")


HOSTILE = [
    ("empty", b"", "empty"),
    ("bom", b"\xef\xbb\xbf", "empty"),
    ("list", b"[1, 2]", "must be a JSON object"),
    ("string", b'"ds"', "must be a JSON object"),
    ("comment", b'{"train_micro_batch_size_per_gpu": 4 // four\n}', "a comment"),
    ("duplicate", b'{"train_micro_batch_size_per_gpu": 4, "train_micro_batch_size_per_gpu": 8}',
     "train_micro_batch_size_per_gpu: given twice"),
    ("huge", b'{"train_micro_batch_size_per_gpu": 1' + b"0" * 500 + b"}",
     "train_micro_batch_size_per_gpu"),
    ("inf", b'{"train_micro_batch_size_per_gpu": 1e400}', "train_micro_batch_size_per_gpu"),
    ("nan", b'{"train_micro_batch_size_per_gpu": NaN}', "train_micro_batch_size_per_gpu"),
    ("string number", b'{"train_micro_batch_size_per_gpu": "8"}',
     'train_micro_batch_size_per_gpu: "8" must be a positive integer'),
    ("float stage", b'{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 2.5}}',
     "zero_optimization.stage: 2.5: one of 0, 1, 2, 3"),
    ("null section", b'{"train_micro_batch_size_per_gpu": 8, "zero_optimization": null}',
     "zero_optimization: null must be an object"),
    ("nested null", b'{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": null}}',
     "zero_optimization.stage: null"),
    ("unknown", b'{"train_micro_batch_size_per_gpu": 8, "zero_optimisation": {}}',
     "zero_optimisation: is not a DeepSpeed config key"),
    ("triple", b'{"train_batch_size": 100, "train_micro_batch_size_per_gpu": 4, '
     b'"gradient_accumulation_steps": 8}', "train_batch_size: 100 is not"),
    ("not utf-8", b'{"train_micro_batch_size_per_gpu": 8, "x\xff": 1}', "not UTF-8"),
    ("deep", b"[" * 5000 + b"]" * 5000, "nested"),
]


@pytest.mark.parametrize("name, data, words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_one_line_exit_2(name, data, words, tmp_path, capsys):
    path = tmp_path / "ds_config.json"
    path.write_bytes(data)
    out = tmp_path / "out.json"
    rc = main(["import", "deepspeed", str(path), "--model", "Llama 3 8B", "--num-gpus", "16",
               "--recompute", "full", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"vtrain: error: {path}: ") and words in err


_KEYS = sorted({k.replace(".*", ".lr") for k in load_rules()})
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 2 ** 70),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.sampled_from(["auto", "none", "cpu", "bf16", "BF16", "adamw", "8", ""]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["enabled", "device", "type",
                                                                   "stage", "x"]), inner,
                                                 max_size=3)), max_leaves=6)


def _nest(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        *path, last = key.split(".")
        node = out
        for part in path:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node[last] = value
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS + ["zero_optimization", "bf16", "optimizer",
                                                "unknown_key"]), _VALUES, max_size=8),
       st.sampled_from([1, 8, 16]))
def test_fuzz_any_config_is_imported_or_refused_by_name(flat, num_gpus):
    """Any mix of known keys with any JSON values: a session, or a ConfigError whose every
    error names the file (or an option) - never another exception."""
    cfg = _nest(flat)
    try:
        _imp(copy.deepcopy(cfg), num_gpus=num_gpus)
    except ConfigError as exc:
        assert exc.errors and all(e.field.startswith(("ds_config.json", "--"))
                                  for e in exc.errors), exc.errors


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode("utf-8")))
def test_fuzz_any_bytes_are_read_or_refused_naming_the_file(data):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ds_config.json"
        path.write_bytes(data)
        try:
            read_deepspeed_config(path, _llama(), **KW)
        except SessionFileError as exc:
            assert str(exc).startswith(str(path))
        except ConfigError as exc:
            assert all(e.field.startswith((str(path), "--")) for e in exc.errors)


def test_precision_option_enables_a_section_the_file_lacks_as_accelerate_does():
    """No bf16 or fp16 section: DeepSpeed alone runs fp32 (runtime/precision_config.py line 46,
    enabled False), but Hugging Face Trainer runs it through accelerate, whose
    DeepSpeedPlugin.set_mixed_precision (accelerate 1.16.0 utils/dataclasses.py lines
    1308-1313) adds {"bf16": {"enabled": true}} for --bf16. --precision bf16 was refused
    ("absent (false), --precision bf16: they disagree"); it is bf16 now, noted."""
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
           "zero_optimization": {"stage": 2}}
    assert _imp(cfg).session.plan.precision == "fp32"
    imp = _imp(cfg, options={"--precision": "bf16"})
    assert (imp.session.plan.precision, imp.session.plan.grad_reduce_dtype) == ("bf16", "bf16")
    assert any(n.startswith("no bf16 section, --precision bf16: bf16") for n in imp.notes)
    assert _imp(cfg, options={"--precision": "fp16"}).session.plan.precision == "fp16"
    # a section the file gives is not overridden: accelerate fills in "auto" only
    err = _refused({**cfg, "bf16": {"enabled": False}}, options={"--precision": "bf16"})
    assert err.field == "ds_config.json: bf16.enabled" and "they disagree" in err.message
    err = _refused({**cfg, "bf16": {}}, options={"--precision": "bf16"})
    assert err.message.startswith("false in the file (absent: false), --precision bf16")


def test_bfloat16_section_agrees_with_precision_bf16():
    """--precision bf16 beside "bfloat16": {"enabled": true} agrees (the option's name is the
    dtype, bf16; the section's older name is bfloat16)."""
    cfg = _zero2()
    cfg["bfloat16"] = cfg.pop("bf16")
    assert _imp(cfg, options={"--precision": "bf16"}).session.plan.precision == "bf16"
    cfg["bfloat16"]["enabled"] = "auto"
    assert _imp(cfg, options={"--precision": "bf16"}).session.plan.precision == "bf16"
