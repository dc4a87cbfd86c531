"""Required model fields: every reader requires them, no field silently takes another
family's default, and docs/simulator.md states the same rule as the fields' metadata."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from core.cli import main
from core.io.vtrain_json import vtrain_config_from_dict
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import ConfigError, field_kind
from core.plan.model_config import GPT_SHAPE_FIELDS, ModelConfig, model_from_fields
from core.plan.parallel import ParallelPlan
from core.plan.presets import GPT_FAMILY, LLAMA_FAMILY, MODEL_PRESETS
from core.plan.session import Session
from core.io.hf_import import session_from_hf_config
from core.io.megatron.arguments import MEGATRON_MODEL_DEFAULTS
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.studies.scheduler import jobs_from_list
from core.io.session import SessionFileError, session_from_document, session_to_json
from tests.conftest import ROOT, case_file

# fields added later, not required: a file without ``family`` holds a dense model (the Gemma
# families' round trip is in tests/test_gemma.py), without ``make_vocab_size_divisible_by``
# one padded as Megatron-LM pads by default (tests/test_vocab_padding.py), without the dropout
# probabilities one trained with Megatron-LM's 0.1 (the published runs' sessions predate them),
# without the bias fields of Hugging Face's attention_bias / mlp_bias / lm_head_bias none of
# those biases
OPTIONAL_MODEL_FIELDS = {"family", "make_vocab_size_divisible_by", "hidden_dropout",
                         "attention_dropout", "add_proj_bias", "add_mlp_bias", "add_output_bias",
                         "bias_activation_fusion"}
# every other model field
MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig)
                if f.name not in OPTIONAL_MODEL_FIELDS]
FAMILIES = ("Llama 3 8B", "Mixtral 8x7B", "DeepSeek-V3", "GPT-OSS 120B", "GPT-3 175B")


def _required(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("required")}


def _full_doc(preset: str) -> dict:
    """A session document as the writer writes it (every field), for ``preset``."""
    plan = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                        micro_batch_size=1, global_batch_size=8, recompute="full",
                        precision="bf16")
    session = Session(model=dataclasses.replace(MODEL_PRESETS[preset]), plan=plan,
                      cluster=ClusterConfig(gpu="H100-SXM5-80GB"), cost=CostConfig())
    return json.loads(session_to_json(session))


# --------------------------------------------------------------------------- docs <-> metadata

def _docs_bullet(start: str) -> str:
    text = (ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")
    m = re.search(r"^\* " + re.escape(start) + r"(.*?)(?=^\* |^\|)", text, re.S | re.M)
    assert m, f"docs/simulator.md has no bullet starting {start!r}"
    return " ".join(m.group(1).split())


def test_docs_required_statement_is_the_metadata():
    """The docs' sentence on required fields, read field by field, is the metadata."""
    text = _docs_bullet("Required in a session file:")
    # "every model field but `family`, `make_vocab_size_divisible_by`, ..." <=> every other
    # ModelConfig field is marked required
    but = text.split("every model field but", 1)[1].split("(", 1)[0]
    assert set(re.findall(r"`(\w+)`", but)) == OPTIONAL_MODEL_FIELDS
    assert _required(ModelConfig) == set(MODEL_FIELDS)
    # "the plan's `a`, `b` ... and `z`." lists exactly the plan's required fields
    plan_part = text.split("the plan's", 1)[1].split(".", 1)[0]
    assert set(re.findall(r"`(\w+)`", plan_part)) == _required(ParallelPlan)
    # cluster and cost fields have defaults: none is required
    assert "Missing `cluster` and `cost` sections or fields take the defaults" in text
    assert not _required(ClusterConfig) and not _required(CostConfig)
    # the fields the docs say may be null are optional in their annotation
    for name in re.findall(r"`(\w+)` null", text):
        assert field_kind(next(f for f in dataclasses.fields(ModelConfig) if f.name == name))[1]


def test_docs_first_release_shape_is_gpt_shape_fields():
    text = _docs_bullet("Files of the first release")
    listed = re.findall(r"`(\w+)`", text.split("(`ffn_hidden_size` may", 1)[0])
    assert tuple(listed) == GPT_SHAPE_FIELDS
    assert set(GPT_FAMILY) == set(MODEL_FIELDS) - set(GPT_SHAPE_FIELDS) | OPTIONAL_MODEL_FIELDS


# --------------------------------------------------------------------------- session files

@pytest.mark.parametrize("preset", FAMILIES)
def test_full_sessions_read_back_as_written(preset):
    doc = _full_doc(preset)
    assert session_from_document(doc).model == MODEL_PRESETS[preset]


@pytest.mark.parametrize("preset", FAMILIES)
def test_each_deleted_model_field_is_refused_naming_it(preset):
    """No one-field deletion from a full session gives another model: each is refused."""
    doc = _full_doc(preset)
    for name in MODEL_FIELDS:
        broken = json.loads(json.dumps(doc))
        del broken["model"][name]
        with pytest.raises(SessionFileError) as info:
            session_from_document(broken, "s.json")
        assert f"model.{name}: missing" in str(info.value), name


def test_every_missing_field_is_named_at_once():
    doc = _full_doc("Llama 3 8B")
    gone = ["activation", "normalization", "num_query_groups", "kv_channels"]
    for name in gone:
        del doc["model"][name]
    with pytest.raises(SessionFileError) as info:
        session_from_document(doc, "s.json")
    text = str(info.value)
    assert "\n" not in text and text.startswith("s.json: model: missing")
    assert all(name in text for name in gone)


def test_nullable_fields_must_be_present_but_may_be_null():
    doc = _full_doc("Llama 3 8B")
    doc["model"]["kv_channels"] = None
    doc["model"]["window_size"] = None
    assert session_from_document(doc).model == MODEL_PRESETS["Llama 3 8B"]
    del doc["model"]["window_size"]
    with pytest.raises(SessionFileError):
        session_from_document(doc)


def test_pinned_plan_needs_every_model_field_too():
    doc = _full_doc("Mixtral 8x7B")
    pinned = {k: json.loads(json.dumps(doc[k])) for k in ("model", "plan", "cluster", "cost")}
    del pinned["model"]["num_experts"]
    doc["compare"] = {"pinned": pinned}
    with pytest.raises(SessionFileError) as info:
        session_from_document(doc)
    assert "compare.pinned.model.num_experts" in str(info.value)


def test_case_llama_missing_family_fields_is_refused(capsys):
    path = case_file("s3/silent_llama_missing_family_fields.json")
    assert main(["simulate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and str(path) in err
    for name in ("num_query_groups", "activation", "normalization", "position_embedding",
                 "tied_embeddings", "add_bias_linear", "attention_kernel", "kv_channels"):
        assert name in err


def test_first_release_gpt_shape_files_read_as_gpt():
    shape = {"name": "GPT-3 1.3B", "num_layers": 24, "hidden_size": 2048,
             "num_attention_heads": 16, "seq_length": 2048, "vocab_size": 50257}
    doc = {"format": "vtrain-session", "version": 1, "model": dict(shape),
           "plan": {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 1,
                    "micro_batch_size": 1, "global_batch_size": 8, "recompute": "full",
                    "precision": "bf16"}}
    assert session_from_document(doc).model == MODEL_PRESETS["GPT-3 1.3B"]  # ffn left out: 4h
    doc["model"]["ffn_hidden_size"] = 8192
    assert session_from_document(doc).model.ffn == 8192
    del doc["model"]["num_layers"]  # the shape is still required
    with pytest.raises(SessionFileError) as info:
        session_from_document(doc)
    assert "model.num_layers: missing" in str(info.value)
    doc["model"].update(num_layers=24, activation="swiglu")  # a family field: give them all
    with pytest.raises(SessionFileError) as info:
        session_from_document(doc)
    assert "normalization" in str(info.value) and "num_query_groups" in str(info.value)


def test_shipped_examples_give_every_model_field():
    for path in sorted((ROOT / "resources" / "examples").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert set(doc["model"]) == set(MODEL_FIELDS) | {
            "hidden_dropout", "attention_dropout", "add_proj_bias", "add_mlp_bias",
            "add_output_bias", "bias_activation_fusion"}, path.name


# --------------------------------------------------------------------------- other readers

def test_model_from_fields_needs_every_field():
    values = {**GPT_FAMILY, **dict(zip(GPT_SHAPE_FIELDS, ("m", 2, 64, 4, None, 128, 1000)))}
    assert model_from_fields(values) == ModelConfig("m", 2, 64, 4, None, 128, 1000)
    for name in MODEL_FIELDS:
        with pytest.raises(TypeError):
            model_from_fields({k: v for k, v in values.items() if k != name})


def test_presets_state_their_family():
    for preset in ("Llama 3 8B", "Mixtral 8x7B", "Qwen3-30B-A3B", "DeepSeek-V3", "GPT-OSS 20B"):
        m = MODEL_PRESETS[preset]
        assert (m.activation, m.normalization, m.position_embedding, m.tied_embeddings,
                m.attention_kernel) == ("swiglu", "rmsnorm", "rope", False, "flash")
    assert all(getattr(MODEL_PRESETS["GPT-3 175B"], k) == v for k, v in GPT_FAMILY.items())


def test_authors_json_is_gpt_and_refuses_what_it_cannot_model():
    raw = {"tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 1,
           "global_batch_size": 8, "micro_batch_size": 1, "num_layers": 24, "hidden_size": 2048,
           "num_attention_heads": 16, "max_length": 2048}
    model = vtrain_config_from_dict(dict(raw)).model
    assert all(getattr(model, k) == v for k, v in GPT_FAMILY.items())
    with pytest.raises(ConfigError) as info:  # a family key the format cannot express
        vtrain_config_from_dict({**raw, "num_query_groups": 8})
    assert [e.field for e in info.value.errors] == ["num_query_groups"]
    for key in raw:  # every required key of the format is required
        with pytest.raises(ConfigError) as info:
            vtrain_config_from_dict({k: v for k, v in raw.items() if k != key})
        assert [e.field for e in info.value.errors] == [key]


def test_job_trace_shape_needs_sequence_and_vocabulary():
    job = {"arrival_h": 0, "global_batch_size": 8, "tokens": 1e9, "requested_gpus": 8,
           "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
           "seq_length": 2048, "vocab_size": 50257}
    assert jobs_from_list([job])[0].model == dataclasses.replace(
        MODEL_PRESETS["GPT-3 1.3B"], name="L=24 h=2048")
    for key in ("seq_length", "vocab_size"):
        with pytest.raises(ConfigError) as info:
            jobs_from_list([{k: v for k, v in job.items() if k != key}])
        assert [e.field for e in info.value.errors] == [f"trace[0].{key}"]


def test_hf_import_takes_llama_family_not_gpt_defaults():
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
           "max_position_embeddings": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu",
           "tie_word_embeddings": False}
    model = session_from_hf_config(cfg, name="Llama 3 8B").session.model
    assert model == MODEL_PRESETS["Llama 3 8B"]
    for k, v in LLAMA_FAMILY.items():
        assert getattr(model, k) == v, k


def test_megatron_launch_takes_megatrons_defaults_and_its_flags():
    base = ("python pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 128 --micro-batch-size 1 --vocab-size 1000 --attention-backend unfused")
    gpt = session_from_launch(read_launch(base, "a.sh"), num_gpus=1).session.model
    assert all(getattr(gpt, k) == v for k, v in MEGATRON_MODEL_DEFAULTS.items())
    llama = session_from_launch(read_launch(
        base + " --swiglu --normalization RMSNorm --position-embedding-type rope "
        "--untie-embeddings-and-output-weights --disable-bias-linear --group-query-attention "
        "--num-query-groups 2", "b.sh"), num_gpus=1).session.model
    assert (llama.activation, llama.normalization, llama.position_embedding,
            llama.tied_embeddings, llama.add_bias_linear, llama.num_query_groups) == (
        "swiglu", "rmsnorm", "rope", False, False, 2)
