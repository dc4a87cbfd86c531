"""Configuration models, validation messages and the authors' config format."""

from __future__ import annotations

import json

import pytest

from core.io.vtrain_json import read_vtrain_config
from core.plan.fields import ConfigError
from core.plan.model_config import ModelConfig, padded_vocab_size
from core.plan.parallel import ParallelPlan
from core.plan.rules import validate
from core.plan.session import Session
from core.model.counts import num_parameters
from tests.conftest import shared_file


def errors_of(session):
    return {(e.field, e.message) for e in validate(session)}


def test_default_session_is_valid():
    assert validate(Session()) == []


def test_heads_not_divisible_by_tensor_parallel_names_both_fields():
    s = Session(plan=ParallelPlan(tensor_parallel=5, pipeline_parallel=16, data_parallel=4))
    s.cluster.gpus_per_node = 10
    msgs = [e.message for e in validate(s) if e.field == "plan.tensor_parallel"]
    assert "num_attention_heads=96 is not divisible by tensor_parallel_size=5" in msgs


def test_layers_batch_and_node_rules():
    s = Session(plan=ParallelPlan(tensor_parallel=12, pipeline_parallel=7, data_parallel=5,
                                  micro_batch_size=2, global_batch_size=1536))
    fields = {e.field for e in validate(s)}
    assert fields == {"plan.pipeline_parallel", "plan.global_batch_size", "plan.tensor_parallel"}
    text = " ".join(e.message for e in validate(s))
    assert "num_layers=96 is not divisible by pipeline_parallel_size=7" in text
    assert "global_batch_size=1536 is not divisible by micro_batch_size*data_parallel_size=2*5=10" in text
    assert "tensor_parallel_size=12 spans nodes unevenly: it must be a multiple of gpus_per_node=8" in text


def test_tensor_parallel_across_whole_nodes_is_allowed():
    s = Session(plan=ParallelPlan(tensor_parallel=16, pipeline_parallel=8, data_parallel=4))
    assert validate(s) == []


def test_non_positive_and_enum_values():
    s = Session(model=ModelConfig(num_layers=0), plan=ParallelPlan(schedule="zero-bubble"))
    fields = {e.field for e in validate(s)}
    assert {"model.num_layers", "plan.schedule"} <= fields


def test_padded_vocab_matches_megatron():
    assert padded_vocab_size(50257, 1) == 50304
    assert padded_vocab_size(50257, 8) == 51200
    assert padded_vocab_size(51200, 8) == 51200


def test_num_parameters_gpt3_175b():
    # 175B: 96 layers of 12h^2 plus embeddings; Brown et al. report 175.0B.
    n = num_parameters(ModelConfig())
    assert 174.5e9 < n < 175.5e9


def test_read_authors_config_mtnlg():
    s = read_vtrain_config(shared_file("configs", "mtnlg_530b_3360gpu_t8_d12_p35.json"))
    assert (s.plan.tensor_parallel, s.plan.data_parallel, s.plan.pipeline_parallel) == (8, 12, 35)
    assert s.plan.num_gpus == 3360 and s.plan.num_microbatches == 160
    assert s.model.name == "MT-NLG 530B" and s.model.seq_length == 2048
    assert s.plan.recompute == "full" and s.plan.schedule == "1f1b"
    assert s.cluster.inter_node_bandwidth_gbits_per_s == 800.0
    assert s.cluster.intra_node_bandwidth_gbytes_per_s == 150.0
    assert s.cluster.gpu == "A100-SXM4-80GB" and s.cluster.gpus_per_node == 8


def authors_config_error(tmp_path, **changes) -> ConfigError:
    """The error of reading the authors' GPT-3 175B config with ``changes`` applied."""
    raw = json.loads(shared_file("configs", "gpt3_175b_512gpu_t8_d4_p16.json").read_text())
    raw.update(changes)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as info:
        read_vtrain_config(path)
    return info.value


def test_authors_config_num_gpus_mismatch_is_an_error(tmp_path):
    err = authors_config_error(tmp_path, num_gpus=1024)
    assert "num_gpus=1024 disagrees with tensor_parallel_size*pipeline_parallel_size*" \
           "data_parallel_size=8*16*4=512" in str(err)


@pytest.mark.parametrize("value", ["eight", 8.0, True, -8, None])
def test_authors_config_non_integer_tensor_parallel_names_the_key(tmp_path, value):
    err = authors_config_error(tmp_path, tensor_parallel_size=value)
    # one error, on the file's own key (the value as JSON writes it), and no num_gpus
    # product built from a string
    assert [str(e) for e in err.errors] == [
        f"tensor_parallel_size: tensor_parallel_size={json.dumps(value)} must be a positive integer"]


@pytest.mark.parametrize("bucket", [True, False])
def test_authors_config_gradient_bucketing_is_the_overlapped_reduction(tmp_path, bucket):
    raw = json.loads(shared_file("configs", "gpt3_175b_512gpu_t8_d4_p16.json").read_text())
    raw["use_gradient_bucket"] = bucket
    path = tmp_path / "bucket.json"
    path.write_text(json.dumps(raw))
    assert read_vtrain_config(path).plan.overlap_grad_reduce is bucket


def test_authors_config_unknown_and_missing_keys(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"tensor_parallel_size": 1, "colour": "red"}))
    with pytest.raises(ConfigError) as info:
        read_vtrain_config(path)
    fields = {e.field for e in info.value.errors}
    assert "colour" in fields and "num_layers" in fields


def test_session_from_dict_rejects_wrong_types():
    with pytest.raises(ConfigError, match="plan.tensor_parallel: must be of type int"):
        Session.from_dict({"plan": {"tensor_parallel": "8"}})
    with pytest.raises(ConfigError, match="model.depth: unknown field"):
        Session.from_dict({"model": {"depth": 3}})


def test_inactive_fields_name_what_enables_them():
    """Fields without effect on the session, each with the field that would enable it."""
    import dataclasses

    from core.plan.presets import MODEL_PRESETS
    from core.plan.rules import inactive_fields
    from core.plan.session import Session
    s = Session()
    s.model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"])
    off = inactive_fields(s)
    assert off["model.kv_lora_rank"] == ("needs multi-head latent attention "
                                         "(model.multi_latent_attention)")
    assert off["plan.expert_parallel"].endswith("(model.num_experts)")
    assert off["plan.virtual_pipeline_stages"] == "needs the interleaved schedule (plan.schedule)"
    assert "model.num_experts" not in off and "plan.tensor_parallel" not in off
    s.model = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"])
    s.plan.schedule, s.plan.precision, s.plan.recompute = "interleaved", "fp8", "full"
    off = inactive_fields(s)
    for path in ("model.kv_lora_rank", "model.moe_top_k", "plan.expert_parallel",
                 "plan.virtual_pipeline_stages", "plan.fp8_recipe", "plan.recompute_num_layers"):
        assert path not in off
    assert "plan.recompute_modules" in off  # full, not selective


def test_sequence_parallel_needs_the_sequence_divisible_by_t():
    """Megatron-Core scatters the sequence over the t ranks (tester: s = 4095 at t = 2 ran)."""
    from core.plan.parallel import ParallelPlan
    from core.plan.rules import validate
    from core.plan.session import Session
    s = Session(plan=ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=4,
                                  sequence_parallel=True))
    s.model.seq_length = 4095
    errs = [e for e in validate(s) if e.field == "plan.sequence_parallel"]
    assert len(errs) == 1 and "seq_length=4095 is not divisible by tensor_parallel_size=2" \
        in errs[0].message
    s.model.seq_length = 4096
    assert not [e for e in validate(s) if e.field == "plan.sequence_parallel"]
    s.plan.sequence_parallel, s.model.seq_length = False, 4095
    assert not [e for e in validate(s) if e.field == "plan.sequence_parallel"]


def test_an_uneven_layer_split_names_megatrons_embedding_and_loss_slots():
    """Llama 3.1 405B's 126 layers do not split over p = 16, but Megatron-Core runs it so,
    counting the embedding and the loss as layers (--account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split: 128 slots); the message names the two fields, and
    only when they would split (126 + 1 or + 2 slots over p)."""
    from core.plan.presets import MODEL_PRESETS
    m = MODEL_PRESETS["Llama 3.1 405B"]
    s = Session(model=m, plan=ParallelPlan(tensor_parallel=8, pipeline_parallel=16,
                                           data_parallel=8, global_batch_size=64))
    msg = " ".join(e.message for e in validate(s) if e.field == "plan.pipeline_parallel")
    assert "num_layers=126 is not divisible by pipeline_parallel_size=16" in msg
    assert ("account_for_embedding_in_pipeline_split" in msg
            and "account_for_loss_in_pipeline_split" in msg and "128" in msg)
    s.plan.account_for_embedding_in_pipeline_split = True
    s.plan.account_for_loss_in_pipeline_split = True
    assert not [e for e in validate(s) if e.field == "plan.pipeline_parallel"]
    s = Session(model=m, plan=ParallelPlan(tensor_parallel=8, pipeline_parallel=5,
                                           data_parallel=8, global_batch_size=64))
    msg = " ".join(e.message for e in validate(s) if e.field == "plan.pipeline_parallel")
    assert "pipeline_parallel_size=5" in msg and "account_for" not in msg  # 126..128: none / 5


def test_on_gpu_kind_moves_the_reference_node_and_keeps_a_node_of_ones_own():
    """core.plan.cluster.on_gpu_kind: the old kind's reference node (8 GPUs, 8 x 400 Gb/s for
    H100) becomes the new kind's (72 GPUs, 72 x 400 Gb/s for a GB200 NVL72 rack; 8 x 800 for
    B300); a node size or network of one's own stays; the input is not changed."""
    from core.plan.cluster import ClusterConfig, node_network_gbits_per_s, on_gpu_kind

    h100 = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8,
                         inter_node_bandwidth_gbits_per_s=3200.0)
    rack = on_gpu_kind(h100, "GB200-NVL72")
    assert (rack.gpus_per_node, rack.inter_node_bandwidth_gbits_per_s) == (72, 28_800.0)
    assert h100.gpu == "H100-SXM5-80GB" and h100.inter_node_bandwidth_gbits_per_s == 3200.0
    b300 = on_gpu_kind(h100, "B300-288GB")
    assert (b300.gpus_per_node, b300.inter_node_bandwidth_gbits_per_s) == (8, 6400.0)
    empty = on_gpu_kind(ClusterConfig(gpu="H100-SXM5-80GB"), "GB200-NVL72")
    assert empty.inter_node_bandwidth_gbits_per_s is None
    assert node_network_gbits_per_s(empty) == node_network_gbits_per_s(rack)
    own = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=4,
                        inter_node_bandwidth_gbits_per_s=1600.0)  # 4 x 400: its own node
    moved = on_gpu_kind(own, "GB200-NVL72")
    assert (moved.gpus_per_node, moved.inter_node_bandwidth_gbits_per_s) == (4, 1600.0)
    # a network of one's own on the reference node's size keeps its share per GPU as the node
    # grows to the rack (800 Gb/s for 8 A100s, 100 per GPU: 7,200 for 72), or to a size given
    a100 = ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8,
                         inter_node_bandwidth_gbits_per_s=800.0)
    rack = on_gpu_kind(a100, "GB200-NVL72")
    assert (rack.gpus_per_node, rack.inter_node_bandwidth_gbits_per_s) == (72, 7200.0)
    four = on_gpu_kind(a100, "GB200-NVL72", gpus_per_node=4)
    assert (four.gpus_per_node, four.inter_node_bandwidth_gbits_per_s) == (4, 400.0)
    assert on_gpu_kind(a100, "H100-SXM5-80GB").inter_node_bandwidth_gbits_per_s == 800.0
