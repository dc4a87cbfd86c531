"""``vtrain import bridge`` (core/cli/import_bridge.py, core/io/bridge_import.py): Megatron-Bridge
0.6.2 performance recipes by name into sessions, the recipe table listed, refused recipes
exiting 2 with their reason; a checkpoint's run_config.yaml into a session through Megatron-LM's
argument mapping, refusals and bad files naming the file and the YAML path."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.cli import main
from core.plan.fields import ConfigError
from tests.conftest import ROOT


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_recipe_round_trip_through_simulate(tmp_path, capsys):
    """llama3_8b_pretrain_8gpu_h100_bf16_config (perf_recipes/llama/h100/llama3.py:33): 8
    H100s, t1 p1 cp2 (d = 8 / 2 = 4), b1, B128, bf16, seq 8192; Llama 3 8B has 8.03 B
    parameters (8,030,261,248: Meta's model card rounds to 8.03 B)."""
    out = tmp_path / "l8.json"
    rc, text, err = _run(capsys, "import", "bridge", "--recipe",
                         "llama3_8b_pretrain_8gpu_h100_bf16_config", "-o", str(out))
    assert rc == 0, err
    assert "llama/h100/llama3.py:33" in text
    doc = json.loads(out.read_text())
    plan = doc["plan"]
    assert (plan["tensor_parallel"], plan["pipeline_parallel"], plan["context_parallel"],
            plan["data_parallel"], plan["micro_batch_size"], plan["global_batch_size"],
            plan["precision"]) == (1, 1, 2, 4, 1, 128, "bf16")
    assert doc["cluster"]["gpu"] == "H100-SXM5-80GB" and doc["model"]["seq_length"] == 8192
    assert doc["notes"] == ("Megatron-Bridge performance recipe "
                            "llama3_8b_pretrain_8gpu_h100_bf16_config (megatron/bridge/"
                            "perf_recipes/llama/h100/llama3.py:33, Megatron-Bridge 0.6.2)")
    rc, text, err = _run(capsys, "simulate", str(out), "--json")
    assert rc == 0, err
    result = json.loads(text)
    assert result["num_parameters"] == 8_030_261_248
    assert result["num_gpus"] == 8 and result["num_microbatches"] == 128 // 4


@pytest.mark.parametrize("name, words", [
    ("llama3_8b_pretrain_8gpu_b200_nvfp4_config",
     "llama/b200/llama3.py:155, Megatron-Bridge 0.6.2) is not simulated: NVFP4: the recipe "
     "trains in NVFP4"),
    ("llama3_70b_pretrain_64gpu_b200_fp8cs_config",
     "is not simulated: CPU activation offloading: the recipe offloads the activations of 5 "
     "of the layers to CPU memory (cpu_offloading_num_layers=5"),
])
def test_refused_recipe_exits_2_with_its_reason(name, words, tmp_path, capsys):
    out = tmp_path / "never.json"
    rc, text, err = _run(capsys, "import", "bridge", "--recipe", name, "-o", str(out))
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert err.startswith(f"vtrain: error: --recipe: {name} (megatron/bridge/perf_recipes/")
    assert words in err


def test_unknown_recipe_suggests_the_closest(tmp_path, capsys):
    rc, _, err = _run(capsys, "import", "bridge", "--recipe", "llama3_8b_pretrain_8gpu_h100_bf16",
                      "-o", str(tmp_path / "x.json"))
    assert rc == 2
    assert "(did you mean llama3_8b_pretrain_8gpu_h100_bf16_config," in err
    assert "vtrain import bridge --list shows the 119" in err


def test_list_filters_by_gpu_and_model(capsys):
    """The four H100 Llama3-8B recipes of the table (llama/h100/llama3.py)."""
    rc, text, err = _run(capsys, "import", "bridge", "--list", "--gpu", "H100", "--model",
                         "Llama 3 8B")
    assert rc == 0, err
    lines = text.splitlines()
    assert lines[0].split() == ["recipe", "GPU", "model", "GPUs", "prec", "t", "p", "v", "cp",
                                "ep", "b", "B", "vtrain"]
    assert [ln.split()[0] for ln in lines[1:-1]] == [
        "llama3_8b_pretrain_8gpu_h100_bf16_config", "llama3_8b_pretrain_8gpu_h100_fp8cs_config",
        "llama3_8b_pretrain_64gpu_h100_bf16_config", "llama3_8b_pretrain_64gpu_h100_fp8cs_config"]
    assert lines[1].split()[1:] == ["H100-SXM5-80GB", "Llama3-8B", "8", "bf16", "1", "1", "1",
                                    "2", "1", "1", "128", "modelled"]
    assert lines[-1].startswith("4 recipes of Megatron-Bridge 0.6.2 (4 modelled, 0 refused")


def test_list_all_counts_the_refused(capsys):
    """All 119 recipes; those refused are the ones recipe_session refuses."""
    from core.accuracy.bridge_sessions import recipe_sessions
    refused = sum(r.session is None for r in recipe_sessions())
    rc, text, _ = _run(capsys, "import", "bridge", "--list")
    assert rc == 0
    assert text.splitlines()[-1].startswith(
        f"119 recipes of Megatron-Bridge 0.6.2 ({119 - refused} modelled, {refused} refused")
    assert "llama3_8b_pretrain_8gpu_b200_nvfp4_config" in text and "refused: NVFP4" in text


@pytest.mark.parametrize("argv, words", [
    ((), "give one of --list, --recipe NAME or RUN_CONFIG.yaml"),
    (("--list", "--recipe", "x"), "(got --list, --recipe)"),
    (("--recipe", "llama3_8b_pretrain_8gpu_h100_bf16_config"), "--out SESSION.json is required"),
    (("--list", "--gpu", "MI300X"), "--gpu: no recipe of --gpu 'MI300X'"),
])
def test_usage_errors_exit_2(argv, words, capsys):
    rc, _, err = _run(capsys, "import", "bridge", *argv)
    assert rc == 2 and words in err


# -- run_config.yaml ----------------------------------------------------------------------

RUN_CONFIG = ROOT / "tests" / "data" / "bridge" / "llama3_8b_run_config.yaml"
H100 = "H100-SXM5-80GB"


def _doc() -> dict:
    return yaml.safe_load(RUN_CONFIG.read_text())


def _write(tmp_path, doc) -> str:
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return str(path)


def test_run_config_round_trip_is_the_recipes_session(tmp_path, capsys):
    """The fixture is llama3_8b_pretrain_8gpu_h100_bf16_config's run_config.yaml: imported
    with --gpu H100 --gpus 8 its plan and model are the --recipe import's (the recipe table,
    read independently from the same source), and simulate reports Llama 3 8B's
    8,030,261,248 parameters and the same iteration time."""
    out, rec = tmp_path / "rc.json", tmp_path / "recipe.json"
    rc, text, err = _run(capsys, "import", "bridge", str(RUN_CONFIG), "--gpu", "H100",
                         "--num-gpus", "8", "-o", str(out))
    assert rc == 0, err
    assert "used model.num_query_groups: --num-query-groups: model.num_query_groups" in text
    assert "ignored train.manual_gc: not modelled; may change the iteration time" in text
    assert _run(capsys, "import", "bridge", "--recipe", "llama3_8b_pretrain_8gpu_h100_bf16_config",
                "-o", str(rec))[0] == 0
    a, b = json.loads(out.read_text()), json.loads(rec.read_text())
    assert a["plan"] == b["plan"] and a["cluster"] == b["cluster"]
    assert a["notes"] == f"Megatron-Bridge run_config.yaml {RUN_CONFIG} (model GPTModelProvider)"
    shape = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
             "num_query_groups", "vocab_size", "seq_length", "activation", "normalization",
             "tied_embeddings", "add_bias_linear")
    assert {k: a["model"][k] for k in shape} == {k: b["model"][k] for k in shape} == {
        "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
        "num_attention_heads": 32, "num_query_groups": 8, "vocab_size": 128256,
        "seq_length": 8192, "activation": "swiglu", "normalization": "rmsnorm",
        "tied_embeddings": False, "add_bias_linear": False}
    results = []
    for path in (out, rec):
        rc, text, err = _run(capsys, "simulate", str(path), "--json")
        assert rc == 0, err
        results.append(json.loads(text))
    assert results[0]["num_parameters"] == 8_030_261_248
    assert results[0]["iteration_time_s"] == results[1]["iteration_time_s"]
    # train.train_iters 50 (_benchmark_common): 50 iterations of B*s = 128 * 8192 tokens
    assert a["cost"]["training_tokens"] == 50 * 128 * 8192
    # docs/bridge.md: --recipe keeps a new session's budget and checkpoint defaults; the file
    # says 50 iterations and checkpoint.save null (_benchmark_common, perf_recipes/_common.py)
    assert b["cost"]["training_tokens"] == 300e9
    assert a["reliability"]["checkpoint_interval_iterations"] == 2 ** 40
    assert b["reliability"]["checkpoint_interval_iterations"] is None


def _refusal(tmp_path, change) -> str:
    from core.io.bridge_import import RunConfigError, read_run_config
    doc = _doc()
    change(doc)
    path = _write(tmp_path, doc)
    with pytest.raises((RunConfigError, ConfigError)) as err:
        read_run_config(path, gpu=H100, num_gpus=8)
    text = str(err.value)
    assert text.startswith(f"{path}: ")
    return text[len(path) + 2:]


@pytest.mark.parametrize("change, message", [
    (lambda d: d["model"].update(fp8_dot_product_attention=True, cpu_offloading=True),
     "model.cpu_offloading: True: not modelled (CPU offloading of activations or weights is "
     "not modelled); model.fp8_dot_product_attention: True: not modelled (FP8 attention is not "
     "modelled)"),  # every refused key at once, in the file's order
    (lambda d: d["model"].update(fp4="e2m1"),
     "model.fp4: 'e2m1': not modelled (FP4 (NVFP4) training is not modelled)"),
    (lambda d: d.update(peft={"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 16}),
     "peft: not modelled (parameter-efficient fine-tuning (LoRA, DoRA: frozen base weights, "
     "adapter weights and their optimizer state) is not modelled)"),
    (lambda d: d["model"].update(_target_="megatron.bridge.models.t5_provider.T5ModelProvider"),
     "model._target_: megatron.bridge.models.t5_provider.T5ModelProvider: not modelled (an "
     "encoder-decoder (T5) model; only a GPT decoder is modelled)"),
    (lambda d: d["model"].update(
        _target_="megatron.bridge.models.gemma.gemma2_provider.Gemma2ModelProvider"),
     "model._target_: megatron.bridge.models.gemma.gemma2_provider.Gemma2ModelProvider: not "
     "modelled (a provider subclass adds fields of its own"),
    (lambda d: d["model"].pop("_target_"),
     "model._target_: missing: the provider class (GPTModelProvider ...)"),
    (lambda d: d["model"].update(gated_linear_unit=False),
     "model.activation_func: silu with gated_linear_unit false: not modelled"),
    (lambda d: d["dataset"].update(seq_length=4096),
     "dataset.seq_length: 4096 disagrees with model.seq_length (8192)"),
    (lambda d: d["mixed_precision"].update(bf16=False),
     "mixed_precision.bf16: False disagrees with model.bf16 (True): MixedPrecisionConfig.setup "
     "copies its fields"),
    (lambda d: (d["ddp"].update(fp8_param_gather=True),
                d["mixed_precision"].update(fp8_param_gather=True)),
     "model.fp8_param: False disagrees with ddp.fp8_param_gather (True)"),
    # refused by the Megatron-LM mapping: the option named with the YAML path it came from
    (lambda d: d["model"].update(num_layers=0),
     "--num-layers [model.num_layers] 0 must be at least 1"),
    # a configuration rule of the session: the YAML paths that set the field
    (lambda d: d["model"].update(num_attention_heads=30),
     "model.num_query_groups: num_attention_heads=30 is not divisible by num_query_groups=8 "
     "(set by --group-query-attention [model.num_query_groups], --num-query-groups "
     "[model.num_query_groups])"),
])
def test_run_config_refusals_name_the_yaml_path(change, message, tmp_path):
    assert message in _refusal(tmp_path, change)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["model"].update(num_layers="32"), "model.num_layers: '32' must be an integer"),
    (lambda d: d["model"].update(sequence_parallel="yes"),
     "model.sequence_parallel: 'yes' must be true or false"),
    (lambda d: d["model"].update(num_layers=True), "model.num_layers: True must be an integer"),
    (lambda d: d["model"].update(hidden_dropout="none"),
     "model.hidden_dropout: 'none' must be a number"),
    (lambda d: d["model"].update(vocab_size=[128256]), "model.vocab_size: [128256] must be an "
     "integer"),
    (lambda d: d["train"].update(global_batch_size={"a": 1}),
     "train.global_batch_size: a mapping where a value is expected"),
    (lambda d: d.update(model=[1, 2]),
     "model: a mapping (a ConfigContainer section) is expected, got a list"),
    (lambda d: d.pop("train"), "train: missing: a ConfigContainer has a model and a train section"),
])
def test_run_config_wrong_types_name_the_yaml_path(change, message, tmp_path):
    assert _refusal(tmp_path, change) == message


_FIXTURE = RUN_CONFIG.read_text()


def _edit(old: str, new: str) -> str:
    assert old in _FIXTURE
    return _FIXTURE.replace(old, new, 1)


_LAUGHS = "".join(f"  {chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n"
                  for i in range(8))


@pytest.mark.parametrize("text, message", [
    ("model:\n  num_layers: 32\n   hidden_size: 4096\n",
     "not YAML: line 3 column 15: mapping values are not allowed"),
    ("- model\n- train\n", "a run_config.yaml is a mapping (ConfigContainer.to_yaml writes "
     "one), got a list"),
    ("", "a run_config.yaml is a mapping (ConfigContainer.to_yaml writes one), got nothing (an "
     "empty document)"),
    # safe_load keeps the last of a key given twice: t = 2 was read, silently
    (_edit("  tensor_model_parallel_size: 1\n", "  tensor_model_parallel_size: 1\n"
           "  tensor_model_parallel_size: 2\n"),
     "model.tensor_model_parallel_size: given twice in one mapping (lines 148 and 149); a key "
     "is given once (which value was meant is unknown)"),
    (_FIXTURE + "train:\n  train_iters: 5\n", "train: given twice in one mapping (lines 198 "
     "and 206)"),
    # YAML 1.1: no is false, 010 is 8 layers, 3e-4 a string (read as 0.0003 by megatron-args)
    (_edit("sequence_parallel: false", "sequence_parallel: no"),
     "model.sequence_parallel (line 145): no is false to YAML 1.1"),
    (_edit("num_layers: 32", "num_layers: 010"), "model.num_layers (line 125): 010 is an "
     "integer to YAML 1.1 (PyYAML) written in octal"),
    (_edit("hf_model_id: meta-llama/Meta-Llama-3-8B", "hf_model_id: NO"),
     "model.hf_model_id (line 114): NO is false to YAML 1.1"),
    (_edit("lr: 0.0003", "lr: 3e-4"), "optimizer.lr (line 169): 3e-4 is text to YAML 1.1"),
    (_edit("lr: 0.0003", "lr: .inf"), "optimizer.lr (line 169): Infinity (.inf) must be a "
     "finite number"),
    (_edit("train_iters: 50", "train_iters: " + "9" * 5000), "train.train_iters (line 205): "
     "an integer of 5,000 digits is beyond the range of any number"),  # was a ValueError
    (_edit("  tensor_model_parallel_size: 1\n", "  <<: {tensor_model_parallel_size: 4}\n"
           "  tensor_model_parallel_size: 1\n"), "model (line 148): a '<<' merge key is not read"),
    (_edit("mixed_precision:\n", "mixed_precision:\n  1: 2\n"),  # was an AttributeError
     "mixed_precision (line 63): a key (1) is not a string"),
    (_FIXTURE + "---\n", "line 206: a second YAML document (---): a file holds one"),
    # model.junk's repr would expand 9**9 lists: the import never ended
    ("laughs:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + _LAUGHS + _edit(
        "  wgrad_deferral_limit: -1\n", "  wgrad_deferral_limit: -1\n  junk: *i\n"),
     "laughs.f (line 7): more than 100,000 values with its aliases expanded"),
    # a message showed the value whole: 10 MiB on one line
    (_edit("normalization: RMSNorm", "normalization: " + "x" * 2**20),
     "model.normalization: 'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxx': 1,048,576 characters, more than the 4,096 of any value of a Megatron-LM "
     "argument"),
    (_edit("  wgrad_deferral_limit: -1\n", "  wgrad_deferral_limit: -1\n  junk: ["
           + ", ".join(["123456789"] * 9000) + "]\n"),
     "model.junk: [123456789, 123456789, 123456789, 123456789, 123456789, 123456789, ...]: "
     "not a field of Megatron-Bridge 0.6.2's model section"),
    ("a: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n", "line 1: YAML nested more than 64 levels "
     "deep"),  # was a RecursionError
])
def test_bad_yaml_exits_2_naming_the_file(text, message, tmp_path, capsys):
    path = _write(tmp_path, text)
    out = tmp_path / "never.json"
    rc, _, err = _run(capsys, "import", "bridge", path, "--gpu", "H100", "--gpus", "8", "-o",
                      str(out))
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert err.strip().startswith(f"vtrain: error: {path}: {message}")
    assert len(err.strip().splitlines()) == 1 and len(err) < 1000


def test_fixture_spellings_are_read(tmp_path):
    """What safe_dump writes is read: .inf at optimizer.grad_norm_skip_threshold (its default,
    float('inf')), a byte-order mark, ~ for null."""
    from core.io.bridge_import import read_run_config
    base = read_run_config(RUN_CONFIG, gpu=H100, num_gpus=8).session
    text = "\ufeff" + _edit("  weight_decay: 0.1\n", "  weight_decay: 0.1\n"
                                                     "  grad_norm_skip_threshold: .inf\n")
    text = text.replace("recompute_granularity: null", "recompute_granularity: ~")
    import dataclasses
    got = read_run_config(_write(tmp_path, text), gpu=H100, num_gpus=8).session
    assert dataclasses.replace(got, notes=base.notes) == base


def test_run_config_needs_gpu_and_gpus(tmp_path, capsys):
    rc, _, err = _run(capsys, "import", "bridge", str(RUN_CONFIG), "--gpus", "8", "-o",
                      str(tmp_path / "x.json"))
    assert rc == 2 and "give --gpu KIND: a run_config.yaml keeps neither the GPU kind nor the " \
                       "world size" in err


def test_policy_rules_name_fields_and_megatron_options():
    """Every rule of resources/bridge_run_config.json is about a field of its section's
    dataclass (read from the Megatron-Bridge 0.6.2 / Megatron-Core 0.19.2 sources), and every
    option it maps to is Megatron-LM's: a misspelt rule would never apply."""
    from core.io.bridge_import import _megatron_dests, load_policy
    pol = load_policy()
    options = {o for a in _megatron_dests().values() for o in a["options"]}
    for path, rule in pol["keys"].items():
        section, key = path.split(".", 1)
        fields = pol["fields"][section] if section != "model" else {
            **pol["fields"]["model"], **pol["fields"]["model/mla"]}
        assert key == "_target_" or key in fields, path
        if "argument" in rule:
            assert rule["argument"] in options, path
        if "same_as" in rule:
            other, okey = rule["same_as"].split(".", 1)
            assert okey in pol["fields"][other], path
    assert set(pol["sections"]) >= {"model", "train", "ddp", "optimizer", "dataset",
                                    "mixed_precision", "peft"}


def _yaml_default(default):
    """A field's default (resources/bridge_run_config.json ``fields``) as to_yaml writes it:
    dtypes, enums and functions as their ``_target_`` mappings, a computed one as null."""
    if not (isinstance(default, dict) and "expr" in default):
        return default
    expr = default["expr"] or ""
    if expr.startswith("torch.") and "(" not in expr:
        return {"_target_": expr, "_call_": False}
    if expr.startswith("AttnBackend."):
        return {"_target_": "megatron.core.transformer.enums.AttnBackend", "_call_": True,
                "_args_": [5], "_name_": expr.split(".")[1]}
    if expr.startswith("F."):
        return {"_target_": "torch.nn.functional." + expr[2:], "_call_": False}
    return None


def test_every_field_at_its_default_changes_nothing(tmp_path):
    """A real run_config.yaml has every field of each dataclass (to_dict writes them all): the
    fixture's values over every other field at its Megatron-Bridge 0.6.2 default, with
    mixed_precision copied into model, optimizer and ddp as MixedPrecisionConfig.setup does,
    import to the same session as the fixture. Without reading a modelled field at both
    defaults as not given, ddp.num_distributed_optimizer_instances 1 set the plan's
    data_parallel_shard_size (dp_shard=4); a computed default (initial_loss_scale 2**32) was
    read as the string '2 ** 32' and refused the integer."""
    from core.io.bridge_import import load_policy, read_run_config
    pol, base = load_policy(), _doc()
    full = dict(base)
    for sec in ("model", "ddp", "optimizer", "train", "dataset", "mixed_precision", "dist",
                "comm_overlap"):
        full[sec] = {**{k: _yaml_default(v) for k, v in pol["fields"][sec].items()},
                     **base.get(sec, {})}
    for sec in ("model", "optimizer", "ddp"):
        full[sec].update({k: v for k, v in full["mixed_precision"].items()
                          if k in full[sec] and not k.startswith("_")})
    assert len(full["model"]) > 300
    a = read_run_config(_write(tmp_path, full), gpu=H100, num_gpus=8)
    b = read_run_config(RUN_CONFIG, gpu=H100, num_gpus=8)
    assert a.session.plan == b.session.plan and a.session.model == b.session.model
    # the Megatron-LM arguments that table lists (--ddp-bucket-size 128 MiB and
    # --wgrad-deferral-limit -1 as CommOverlapConfig.setup writes them), and the kernel
    # switch GPTModelProvider leaves off where Megatron-LM turns it on (the Llama bridge
    # turns it on, models/llama/llama_bridge.py:67-69); bias_activation_fusion is modelled
    # (the fixture gives the Llama bridge's true)
    assert set(a.ignored) == {"train.manual_gc", "train.manual_gc_interval",
                              "model.moe_token_dispatcher_type", "model.fp8_recipe",
                              "ddp.bucket_size", "model.wgrad_deferral_limit",
                              "model.persist_layer_norm"}
    assert a.session.model.bias_activation_fusion is True


def test_moe_and_mla_providers(tmp_path):
    """Mixture-of-experts fields (TransformerConfig's num_moe_experts is Megatron-LM's
    --num-experts) and the MLAModelProvider's _target_ (read as --multi-latent-attention, its
    q_lora_rank / kv_lora_rank fields as the arguments of the same names)."""
    from core.io.bridge_import import read_run_config
    doc = _doc()
    doc["model"].update(num_moe_experts=8, moe_router_topk=2, moe_ffn_hidden_size=14336,
                        expert_model_parallel_size=2, moe_grouped_gemm=True)
    s = read_run_config(_write(tmp_path, doc), gpu=H100, num_gpus=8).session
    assert (s.model.num_experts, s.model.moe_top_k, s.model.moe_ffn_hidden_size,
            s.plan.expert_parallel) == (8, 2, 14336, 2)
    doc = _doc()
    doc["model"].update(_target_="megatron.bridge.models.mla_provider.MLAModelProvider",
                        q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                        qk_pos_emb_head_dim=64, v_head_dim=128, num_query_groups=32)
    s = read_run_config(_write(tmp_path, doc), gpu=H100, num_gpus=8).session
    assert (s.model.multi_latent_attention, s.model.q_lora_rank, s.model.kv_lora_rank,
            s.model.qk_pos_emb_head_dim) == (True, 1536, 512, 64)


def _read(tmp_path, change, num_gpus=8):
    from core.io.bridge_import import read_run_config
    doc = _doc()
    change(doc)
    return read_run_config(_write(tmp_path, doc), gpu=H100, num_gpus=num_gpus)


def test_every_cost_field_is_classified():
    """Every field of the sections that bear on one iteration's time and memory (model, MLA,
    ddp, optimizer, train, dist) is a Megatron-LM argument's dest or has a rule in
    resources/bridge_run_config.json (no effect with why / read as an option / refused when
    set): none falls through to the refusal of an unclassified field. 40 did before (model
    batch_p2p_comm, variable_seq_lengths ...; ddp num_buckets ...; optimizer
    store_param_remainders ...), listed as 'not a Megatron-LM argument' and never refused."""
    from core.io.bridge_import import _megatron_dests, load_policy
    pol, dests = load_policy(), _megatron_dests()
    loose = [f"{s.split('/')[0]}.{k}" for s in ("model", "model/mla", "ddp", "optimizer", "train",
                                                 "dist")
             for k in pol["fields"][s]
             if k not in dests and f"{s.split('/')[0]}.{k}" not in pol["keys"]]
    assert loose == []
    for path, rule in pol["keys"].items():  # each classification says why
        assert set(rule) & {"special", "argument", "same_as"} or rule.get("why"), path


@pytest.mark.parametrize("change, message", [
    (lambda d: d["model"].update(variable_seq_lengths=True),
     "model.variable_seq_lengths: True: not modelled (micro-batches of different sequence "
     "lengths are not modelled (each is seq_length tokens))"),
    (lambda d: d["model"].update(deallocate_pipeline_outputs=False),
     "model.deallocate_pipeline_outputs: False: not modelled (pipeline stages that keep the "
     "outputs they sent"),
    (lambda d: d["optimizer"].update(use_precision_aware_optimizer=True,
                                     store_param_remainders=False),
     "optimizer.store_param_remainders: False: not modelled (whole FP32 master weights"),
    (lambda d: d["model"].update(a_field_of_bridge_0_7=3),
     "model.a_field_of_bridge_0_7: 3: not a field of Megatron-Bridge 0.6.2's model section "
     "(another version's?): what it changes in the cost is not known"),
    (lambda d: d.update(dist={"enable_megatron_core_experimental": True}),
     "dist.enable_megatron_core_experimental: True: not modelled (Megatron-Core's experimental"),
])
def test_unmodelled_cost_fields_are_refused_by_path(change, message, tmp_path):
    assert message in _refusal(tmp_path, change)


def test_rules_of_one_setting_and_listed_fields(tmp_path):
    """A rule with only_if applies with that setting only (an FSDP field without FSDP, the
    TP overlap's parts without the overlap: no effect, listed so); an unknown key at null or
    false turns nothing on; dist is read through Megatron-LM's arguments."""
    imp = _read(tmp_path, lambda d: (
        d["ddp"].update(megatron_fsdp_cuda_graph_mode=True),
        d["model"].update(tp_comm_overlap_disable_fc1=True, a_field_of_bridge_0_7=False),
        d["optimizer"].update(store_param_remainders=False),
        d.update(dist={"use_tp_pp_dp_mapping": True})))
    assert {"ddp.megatron_fsdp_cuda_graph_mode", "model.tp_comm_overlap_disable_fc1",
            "optimizer.store_param_remainders"} <= set(imp.neutral)
    assert imp.ignored["dist.use_tp_pp_dp_mapping"] == (  # p = 1: the two rank orders are one
        "no effect with p = 1 and d = 4 (the order tp-cp-ep-pp-dp is the default "
        "tp-cp-ep-dp-pp when p or d is 1)")
    assert "--use-tp-pp-dp-mapping" in imp.arguments
    # the unknown key at false is listed as not read (docs/bridge.md), not dropped unseen (a
    # misspelt key looked read); at null too
    assert imp.ignored["model.a_field_of_bridge_0_7"] == (
        "false: not a field of Megatron-Bridge 0.6.2's model section (another version's?); not "
        "read (null or false turns nothing on)")
    null = _read(tmp_path, lambda d: (d["ddp"].update(a_field_of_bridge_0_7=None),
                                      d["comm_overlap"].update(a_field_of_bridge_0_7=None)))
    assert null.ignored["ddp.a_field_of_bridge_0_7"].startswith("null: not a field of "
                                                                "Megatron-Bridge 0.6.2's ddp")
    assert null.ignored["comm_overlap.a_field_of_bridge_0_7"].startswith(
        "null: not a field of Megatron-Bridge 0.6.2's CommOverlapConfig")
    # the bias-and-activation fusion, whose Bridge default (off) is not Megatron-LM's (on):
    # read as --no-bias-swiglu-fusion when off (the SwiGLU fixture: the unfused activation,
    # 8f/h saved, not 6f/h), fused when on (the Llama provider's); left out, Bridge's false
    off = _read(tmp_path, lambda d: d["model"].update(bias_activation_fusion=False))
    on = _read(tmp_path, lambda d: d["model"].update(bias_activation_fusion=True))
    gone = _read(tmp_path, lambda d: d["model"].pop("bias_activation_fusion"))
    assert (off.session.model.bias_activation_fusion, on.session.model.bias_activation_fusion,
            gone.session.model.bias_activation_fusion) == (False, True, False)
    assert "model.bias_activation_fusion" not in off.ignored | on.ignored
    assert any(p == "model.bias_activation_fusion" and "not given" in n for p, n in gone.notes)
    bad = _refusal(tmp_path, lambda d: d["model"].update(bias_activation_fusion="yes"))
    assert "model.bias_activation_fusion" in bad and "must be true or false" in bad


def test_comm_overlap_checked_as_bridge_does(tmp_path):
    """CommOverlapConfig (training/comm_overlap.py): tp_comm_overlap with t = 1 or without
    sequence parallelism is turned off with a warning (lines 441-450) - off in the session
    too, with a note, even where the model section says on; with t = 2 and sequence
    parallelism it is on. The data-parallel size it was given must be the --num-gpus one."""
    imp = _read(tmp_path, lambda d: (d["comm_overlap"].update(tp_comm_overlap=True),
                                     d["model"].update(tp_comm_overlap=True)))
    assert imp.session.plan.tp_comm_overlap is False
    assert ("comm_overlap.tp_comm_overlap", "true, turned off as Megatron-Bridge does with t = 1 "
            "< 2 (CommOverlapConfig._get_model_comm_overlap_cfgs, training/comm_overlap.py:"
            "441-450, a warning): no tensor-parallel communication overlap") in imp.notes
    imp = _read(tmp_path, lambda d: (
        d["comm_overlap"].update(tp_comm_overlap=True, data_parallel_size=2),
        d["model"].update(tensor_model_parallel_size=2, sequence_parallel=False)))
    assert imp.session.plan.tp_comm_overlap is False
    assert "with sequence_parallel false" in dict(imp.notes)["comm_overlap.tp_comm_overlap"]
    imp = _read(tmp_path, lambda d: (
        d["comm_overlap"].update(tp_comm_overlap=True, data_parallel_size=2),
        d["model"].update(tensor_model_parallel_size=2, sequence_parallel=True,
                          tp_comm_overlap=True)))
    assert imp.session.plan.tp_comm_overlap is True
    assert (imp.session.plan.tensor_parallel, imp.session.plan.data_parallel) == (2, 2)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["comm_overlap"].update(data_parallel_size=2),
     "comm_overlap.data_parallel_size: 2, but --num-gpus 8 over t*p*cp = 1*1*2 is 4: the file "
     "was written by a run on 4 GPUs (ConfigContainer.set_data_parallel_size, "
     "training/config.py:1029-1041)"),
    (lambda d: d["ddp"].update(bucket_size=None),
     "ddp.bucket_size: None, but CommOverlapConfig.setup (training/comm_overlap.py:604-643) "
     "writes 134217728 there from the comm_overlap section (data-parallel size 4): the file "
     "was edited; make them agree"),
    (lambda d: d["comm_overlap"].update(overlap_grad_reduce=False),
     "ddp.overlap_grad_reduce: True, but CommOverlapConfig.setup"),
    (lambda d: d["model"].update(batch_p2p_comm=True),
     "model.batch_p2p_comm: True, but CommOverlapConfig.setup (training/comm_overlap.py:"
     "604-643) writes False there"),
    (lambda d: d["comm_overlap"].update(overlap_moe_expert_parallel_comm=True),
     "comm_overlap.overlap_moe_expert_parallel_comm: True: not run (Megatron-Bridge asserts "
     "expert_model_parallel_size > 1, num_moe_experts > 1: CommOverlapConfig."
     "_get_model_comm_overlap_cfgs, training/comm_overlap.py:478-517)"),
    (lambda d: d["comm_overlap"].update(delay_wgrad_compute=True),
     "comm_overlap.delay_wgrad_compute: True: not run (Megatron-Bridge asserts "
     "'overlap_moe_expert_parallel_comm is required for delay_wgrad_compute'"),
    (lambda d: (d["model"].update(pipeline_model_parallel_size=2, context_parallel_size=1,
                                  virtual_pipeline_model_parallel_size=2, overlap_p2p_comm=True,
                                  batch_p2p_comm=True),
                d["comm_overlap"].update(data_parallel_size=None)),
     "model.overlap_p2p_comm: True with model.batch_p2p_comm True: not run (Megatron-Core's "
     "interleaved schedule raises"),
])
def test_comm_overlap_refusals(change, message, tmp_path):
    assert message in _refusal(tmp_path, change)


def test_checkpoints_reach_the_goodput_settings(tmp_path):
    """checkpoint.save null: Megatron-Bridge saves nothing (train.py:1418-1423, 746-755), read
    as an interval beyond any run (as megatron-args reads --save-interval 0); with a
    directory, save_interval is --save-interval and async_save --async-save; a null interval
    saves once at the end. Before, the section was not read (the session's Daly optimum)."""
    from core.plan.cluster import ReliabilityConfig
    top = next(f.metadata["max"] for f in __import__("dataclasses").fields(ReliabilityConfig)
               if f.name == "checkpoint_interval_iterations")
    imp = _read(tmp_path, lambda d: None)
    assert imp.session.reliability.checkpoint_interval_iterations == top == 2 ** 40
    assert dict(imp.notes)["checkpoint.save"].startswith("null: Megatron-Bridge saves no checkpoint")
    imp = _read(tmp_path, lambda d: d["checkpoint"].update(save="/ckpt", async_save=True))
    rel = imp.session.reliability
    assert (rel.checkpoint_interval_iterations, rel.async_save) == (500, True)
    assert imp.used["checkpoint.save_interval"] == ("--save-interval: "
                                                    "reliability.checkpoint_interval_iterations")
    # a directory and a null interval: one save, at the end (train.py:746-755 saves when
    # save_interval != 0 and is None or not a divisor); that is 2**40 - 1, which the goodput
    # counts as one save, where 2**40 is none (it was 2**40, "no checkpoint", beside a note
    # saying "one at the end")
    imp = _read(tmp_path, lambda d: d["checkpoint"].update(save="/ckpt", save_interval=None))
    assert imp.session.reliability.checkpoint_interval_iterations == top - 1
    assert "one at the end of the run" in dict(imp.notes)["checkpoint.save_interval"]
    assert imp.used["checkpoint.save"].endswith("one save, at the end")
    # a directory and an interval of 0: no save at all, the final one needs save_interval != 0
    imp = _read(tmp_path, lambda d: d["checkpoint"].update(save="/ckpt", save_interval=0))
    assert imp.session.reliability.checkpoint_interval_iterations == top
    assert dict(imp.notes)["checkpoint.save_interval"].startswith(
        "0: no checkpoint, periodic or at the end")
    assert "checkpoint.save_interval: 'x' must be an integer" in _refusal(
        tmp_path, lambda d: d["checkpoint"].update(save_interval="x"))


def test_cli_refuses_a_run_config_of_other_gpus_exit_2(tmp_path, capsys):
    """The fixture's comm_overlap.data_parallel_size 4 is 8 GPUs at t*p*cp = 2: with --num-gpus
    16 the file is another run's; exit status 2, nothing written, the file and the YAML path
    named."""
    out = tmp_path / "never.json"
    rc, _, err = _run(capsys, "import", "bridge", str(RUN_CONFIG), "--gpu", "H100",
                      "--num-gpus", "16", "-o", str(out))
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert err.strip() == (
        f"vtrain: error: {RUN_CONFIG}: comm_overlap.data_parallel_size: 4, but --num-gpus 16 "
        "over t*p*cp = 1*1*2 is 8: the file was written by a run on 8 GPUs "
        "(ConfigContainer.set_data_parallel_size, training/config.py:1029-1041)")


@pytest.mark.parametrize("key", ["tensor_model_parallel_size", "pipeline_model_parallel_size",
                                 "context_parallel_size"])
def test_a_parallel_size_of_0_is_refused(key, tmp_path):
    """context_parallel_size 0 divided num_gpus by zero (ZeroDivisionError, exit 1)."""
    assert _refusal(tmp_path, lambda d: d["model"].update({key: 0})) == \
        f"model.{key}: 0 must be at least 1"


_VALUE_LINES = [i for i, line in enumerate(_FIXTURE.splitlines())
                if line.startswith("  ") and not line.startswith("   ") and ": " in line
                and not line.endswith(":")]
_PIECES = ["0", "1", "-1", "2", "8", "true", "false", "null", "[]", "{}", "[1, 2]", "''", "abc",
           "{_target_: torch.bfloat16}", "{_target_: x.y, _name_: z}", "1.5", "-0.5", "full",
           "9999999999999999999", "1.0e+300", "selective", "[full]", "{a: 1}", "[[1]]",
           "alltoall", "RMSNorm", "none", "{_target_: 1}", "{_name_: auto}", "[null]"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(_VALUE_LINES), st.sampled_from(_PIECES)), min_size=1,
                max_size=4))
def test_fuzz_run_config_values_import_or_refuse(tmp_path_factory, edits):
    """One to four values of the fixture replaced by others of every type and sign: the import
    gives a session or refuses (RunConfigError, ConfigError) naming the file; never another
    exception (a parallel size 0 divided by zero)."""
    from core.io.bridge_import import RunConfigError, read_run_config
    lines = _FIXTURE.splitlines()
    for i, piece in edits:
        lines[i] = f"{lines[i].split(':')[0]}: {piece}"
    path = tmp_path_factory.mktemp("fuzz") / "run_config.yaml"
    path.write_text("\n".join(lines) + "\n")
    try:
        read_run_config(path, gpu=H100, num_gpus=8)
    except (RunConfigError, ConfigError) as exc:
        assert str(path) in str(exc)


def _null_defaults() -> list[str]:
    """The YAML paths read as a modelled Megatron-LM argument whose Megatron-Bridge 0.6.2
    default is a value, not null (resources/bridge_run_config.json ``fields``)."""
    from core.io.bridge_import import _megatron_dests, load_policy
    from core.io.bridge_values import field_default
    pol, dests = load_policy(), _megatron_dests()
    out = []
    for section in ("model", "train", "ddp", "optimizer", "dist"):
        fields = pol["fields"][section]
        for key in fields:
            rule = pol["keys"].get(f"{section}.{key}", {})
            arg = dests.get(key) if not rule else next(
                (a for a in dests.values() if rule.get("argument") in a["options"]), None)
            known, default = field_default(fields, key)
            if arg and arg["effect"] == "modelled" and known and default is not None \
                    and "special" not in rule:
                out.append(f"{section}.{key}")
    return out


def test_null_where_the_default_is_a_value_is_refused(tmp_path):
    """A field read as a modelled Megatron-LM argument whose default is a value, given null
    (an edit: to_yaml writes the value the run used), is refused naming its path. Before, null
    was read as "not given", Megatron-LM's default: share_embeddings_and_output_weights null
    made the fixture's untied Llama 3 8B tied (0.53 B parameters fewer), normalization null
    LayerNorm, position_embedding_type null learned positions, add_bias_linear null biases,
    tensor_model_parallel_size null t = 1; each imported with exit status 0."""
    paths = _null_defaults()
    assert {"model.share_embeddings_and_output_weights", "model.normalization",
            "model.position_embedding_type", "model.add_bias_linear",
            "model.tensor_model_parallel_size", "ddp.use_distributed_optimizer"} <= set(paths)
    assert _refusal(tmp_path, lambda d: d["model"].update(
        share_embeddings_and_output_weights=None)) == (
        "model.share_embeddings_and_output_weights: null, where Megatron-Bridge 0.6.2's default "
        "is true and ConfigContainer.to_yaml writes the value the run used: what Megatron-Core "
        "runs with null is not known (a switch tested for truth is off, a size fails); write "
        "the value")
    for path in paths:  # every such field, each refused by its path
        section, key = path.split(".")
        message = _refusal(tmp_path, lambda d: d.setdefault(section, {}).update({key: None}))
        assert path in message, (path, message)
    # a field whose default is null stays readable at null (the fixture's recompute_method,
    # fp8, virtual_pipeline_model_parallel_size ...)
    assert _read(tmp_path, lambda d: d["model"].update(moe_ffn_hidden_size=None)).session.plan \
        .tensor_parallel == 1


@pytest.mark.parametrize("method, layers", [(None, None), ("block", None), ("uniform", "absent")])
def test_full_recomputation_without_method_or_layers_is_refused(method, layers, tmp_path,
                                                                capsys):
    """recompute_granularity full with recompute_method or recompute_num_layers null: Megatron-
    Core's TransformerConfig.__post_init__ raises (the model section is a TransformerConfig),
    so the run never starts. Before, it was read as full recomputation of every layer (exit
    status 0) though vtrain import megatron-args refuses the same arguments."""
    def change(d):
        d["model"].update(recompute_granularity="full", recompute_method=method,
                          recompute_num_layers=layers)
        if layers == "absent":
            del d["model"]["recompute_num_layers"]
    message = _refusal(tmp_path, change)
    shown = "not given" if layers == "absent" else "null"
    assert (f"model.recompute_granularity: 'full', model.recompute_num_layers: {shown}: not run "
            "(Megatron-Core raises \"When using recompute_granularity: full recompute_num_layers "
            "must be between 1 and num_layers_per_pipeline_rank\", megatron/core/transformer/"
            "transformer_config.py TransformerConfig.__post_init__; rule "
            "recompute-full-num-layers)") in message
    assert ("rule recompute-full-method" in message) == (method is None)
    doc = _doc()
    change(doc)
    out = tmp_path / "never.json"
    rc, _, err = _run(capsys, "import", "bridge", _write(tmp_path, doc), "--gpu", "H100",
                      "--num-gpus", "8", "-o", str(out))
    assert rc == 2 and not out.exists() and len(err.strip().splitlines()) == 1
    # with both, the file is read: the first 3 layers of each chunk recomputed
    plan = _read(tmp_path, lambda d: d["model"].update(
        recompute_granularity="full", recompute_method="block", recompute_num_layers=3)
    ).session.plan
    assert (plan.recompute, plan.recompute_num_layers) == ("full", 3)


@pytest.mark.parametrize("how", ["null", "absent"])
def test_ffn_hidden_size_null_is_megatron_cores_4h(how, tmp_path):
    """ffn_hidden_size null or left out: Megatron-Core's TransformerConfig.__post_init__ sets
    it to 4 * hidden_size = 16,384, gated or not. Before, the fixture's SwiGLU model got
    Megatron-LM's validate_args rule, int(4 * 4096 * 2/3 / 64) * 64 = 10,880, which Megatron-
    Bridge does not run: another model, silently."""
    def change(d):
        if how == "null":
            d["model"]["ffn_hidden_size"] = None
        else:
            del d["model"]["ffn_hidden_size"]
    imp = _read(tmp_path, change)
    assert imp.session.model.ffn_hidden_size == 4 * 4096 == 16_384
    assert imp.session.model.activation == "swiglu"
    assert dict(imp.notes)["model.ffn_hidden_size"].startswith(
        f"{'null' if how == 'null' else 'not given'}: 4 x hidden_size = 16,384")
    assert _read(tmp_path, lambda d: None).session.model.ffn_hidden_size == 14_336


def test_activation_func_null_is_refused(tmp_path):
    """activation_func null: Megatron-Core builds no MLP without a function. Before, it was
    read as GeLU (the default when the key is left out) and, gated, refused as 'gelu with
    gated_linear_unit true', naming a function the file does not give."""
    assert _refusal(tmp_path, lambda d: d["model"].update(activation_func=None)).startswith(
        "model.activation_func: null, where Megatron-Bridge 0.6.2's default is gelu")


def test_a_long_recipe_name_is_shown_cut(tmp_path, capsys):
    """--recipe of 100,000 characters: one short line. Before, the whole name was echoed (a
    100 KB error line)."""
    rc, _, err = _run(capsys, "import", "bridge", "--recipe", "a" * 100_000, "-o",
                      str(tmp_path / "x.json"))
    assert rc == 2 and len(err) < 400
    assert err.startswith(f"vtrain: error: --recipe: {'a' * 60!r}... (100,000 characters) is "
                          "not a pretraining performance recipe of Megatron-Bridge 0.6.2")


@pytest.mark.parametrize("option, value, what", [("--model", "", "model"),
                                                 ("--model", " - ", "model"),
                                                 ("--gpu", "", "GPU kind")])
def test_a_list_filter_that_names_nothing_is_refused(option, value, what, capsys):
    """--list --model '' (or ' - ', which model_key reads as ''): before, the filter was taken
    as not given and all 119 recipes were listed, exit status 0."""
    rc, out, err = _run(capsys, "import", "bridge", "--list", option, value)
    assert rc == 2 and out == ""
    assert err == (f"vtrain: error: {option}: {value!r} names no {what} (no letter or digit): "
                   "give one, or leave the option out to list every recipe\n")


def test_megatron_core_rules_read_checked_values(tmp_path):
    """The Megatron-Core rules read the values after the Megatron-LM mapping has checked them:
    a dtype mapping under model.num_layers (read as the word bf16) is refused by the mapping.
    With the rules applied first it reached them as text (TypeError)."""
    assert _refusal(tmp_path, lambda d: d["model"].update(
        num_layers={"_target_": "torch.bfloat16", "_call_": False})) == \
        "--num-layers [model.num_layers] 'bf16' must be a positive integer"


@pytest.mark.parametrize("section, key, flag", [
    ("model", "cross_entropy_loss_fusion", "--cross-entropy-loss-fusion"),
    ("ddp", "data_parallel_sharding_strategy", "--data-parallel-sharding-strategy")])
def test_a_switch_left_out_is_bridges_default(section, key, flag, tmp_path):
    """A modelled switch or choice the file leaves out whose Megatron-Bridge default differs
    from Megatron-LM's is read at Bridge's (which builds the dataclass with it), noted: the
    same session as the fixture, which gives it at that default. Before, it was Megatron-LM's
    default: cross_entropy_loss_fusion left out made the session's unfused cross entropy
    (plan.cross_entropy_loss_fusion false) though Bridge runs it fused (default true)."""
    import dataclasses
    base = _read(tmp_path, lambda d: None)
    assert _doc()[section][key] in (True, "no_shard")  # the fixture gives Bridge's default
    imp = _read(tmp_path, lambda d: d[section].pop(key))
    assert dataclasses.replace(imp.session, notes=base.session.notes) == base.session
    assert imp.session.plan.cross_entropy_loss_fusion is True
    assert dict(imp.notes)[f"{section}.{key}"].startswith(
        "not given: Megatron-Bridge 0.6.2's default, ")
    assert flag in imp.arguments


def test_a_key_left_out_that_setup_writes_is_what_setup_writes(tmp_path):
    """A model / ddp / optimizer key the file leaves out that CommOverlapConfig.setup writes
    (training/comm_overlap.py:604-643, whatever the section says) is read at setup's value,
    noted. Before, Megatron-LM's default: ddp.overlap_grad_reduce left out (distributed
    optimizer, d = 4: setup writes true) was a plan without the gradient reduce overlap, and
    model.overlap_p2p_comm left out with 2 virtual stages (setup writes true) one without the
    pipeline send / receive overlap."""
    import dataclasses
    base = _read(tmp_path, lambda d: None).session
    imp = _read(tmp_path, lambda d: d["ddp"].pop("overlap_grad_reduce"))
    assert imp.session.plan.overlap_grad_reduce is True
    assert dataclasses.replace(imp.session, notes=base.notes) == base
    assert dict(imp.notes)["ddp.overlap_grad_reduce"].startswith(
        "not given: True, as CommOverlapConfig.setup writes it")

    def interleaved(d, keep):
        d["model"].update(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                          overlap_p2p_comm=True, batch_p2p_comm=False)
        d["ddp"].update(align_param_gather=True)
        d["comm_overlap"].update(data_parallel_size=None)
        if not keep:
            del d["model"]["overlap_p2p_comm"]
    given = _read(tmp_path, lambda d: interleaved(d, True), num_gpus=16).session
    left = _read(tmp_path, lambda d: interleaved(d, False), num_gpus=16)
    assert given.plan.overlap_p2p_comm is True and given.plan.virtual_pipeline_stages == 2
    assert dataclasses.replace(left.session, notes=given.notes) == given
    assert dict(left.notes)["model.overlap_p2p_comm"].startswith("not given: true")


def test_a_key_left_out_that_mixed_precision_copies_in_is_its_value(tmp_path):
    """A model / optimizer / ddp field left out that mixed_precision gives is the mixed_precision
    value (MixedPrecisionConfig.setup copies its fields in, training/mixed_precision.py:113-
    159), noted where it is not the section's default. Before, Megatron-LM's default:
    ddp.grad_reduce_in_fp32 left out, with mixed_precision.grad_reduce_in_fp32 false, made a
    plan reducing gradients in fp32 (Megatron-LM forces it for bf16) where the run reduced them
    in bf16; model.bf16 and optimizer.bf16 left out were refused as fp32 training."""
    import dataclasses
    base = _read(tmp_path, lambda d: None).session
    assert base.plan.grad_reduce_dtype == "bf16" and base.plan.precision == "bf16"
    imp = _read(tmp_path, lambda d: d["ddp"].pop("grad_reduce_in_fp32"))
    assert imp.session.plan.grad_reduce_dtype == "bf16"
    assert dataclasses.replace(imp.session, notes=base.notes) == base
    imp = _read(tmp_path, lambda d: (d["model"].pop("bf16"), d["optimizer"].pop("bf16")))
    assert dataclasses.replace(imp.session, notes=base.notes) == base
    assert dict(imp.notes)["model.bf16"] == (
        "not given: mixed_precision.bf16, True (MixedPrecisionConfig.setup copies its fields "
        "into model, optimizer and ddp)")
    # the caller's document is not changed
    doc = _doc()
    del doc["ddp"]["grad_reduce_in_fp32"]
    from core.io.bridge_import import session_from_run_config
    session_from_run_config(doc, "run_config.yaml", gpu=H100, num_gpus=8)
    assert "grad_reduce_in_fp32" not in doc["ddp"]


@pytest.mark.parametrize("interval", [500, None])
def test_an_empty_checkpoint_directory_is_refused(interval, tmp_path):
    """checkpoint.save '': before, with save_interval 500 it was read as --save '' (no
    checkpoint at all, 2**40) and with save_interval null as one save at the end (2**40 - 1):
    two answers for one directory that names none; now refused by path."""
    assert _refusal(tmp_path, lambda d: d["checkpoint"].update(
        save="", save_interval=interval)) == (
        "checkpoint.save: '' names no directory: give the directory, or null for no checkpoint "
        "(whether Megatron-Bridge saves to '' is not known)")


@pytest.mark.parametrize("key, value, message", [
    ("ffn_hidden_size", "14_336", "model.ffn_hidden_size: '14_336' must be an integer"),
    ("ffn_hidden_size", "14336", "model.ffn_hidden_size: '14336' must be an integer"),
    ("ffn_hidden_size", 14336.0, "model.ffn_hidden_size: 14336.0 must be an integer"),
    ("kv_channels", "128", "model.kv_channels: '128' must be an integer"),
])
def test_a_number_field_without_a_default_takes_the_yaml_number_only(tmp_path, key, value,
                                                                      message):
    """A field whose Megatron-Core default is None (ffn_hidden_size, kv_channels) is checked
    against the Megatron-LM argument's type=int, as one with an integer default is: a string
    is text to the run config's dataclasses, not a number (argparse's int() of a launch's word
    does not apply). '14336' was read as 14336, and since the launch reader takes int()'s
    forms, '14_336' too."""
    assert _refusal(tmp_path, lambda d: d["model"].update({key: value})) == message
    # the number itself reads
    from core.io.bridge_import import read_run_config
    doc = _doc()
    doc["model"][key] = int(float(value))
    read_run_config(_write(tmp_path, doc), gpu=H100, num_gpus=8)
