"""torchtitan's tensor parallelism saves the column-parallel linears' all-gathered input
(plan.tp_saved_input gathered); Megatron-Core's sequence parallelism saves the s/t shard.

torchtitan 0.2.0, models/llama3/infra/parallelize.py, ``apply_tp``: ``attention_norm`` and
``ffn_norm`` are ``SequenceParallel()`` (their inputs, and RMSNorm's saved input, are the
``s/t`` shard); ``attention`` and ``feed_forward`` get ``PrepareModuleInput(input_layouts=
(Shard(1), ...), desired_input_layouts=(Replicate(), ...))``, whose ``_prepare_input_arg``
(torch 2.13 torch/distributed/tensor/parallel/style.py) redistributes the norm's output to a
replicated DTensor, all ``s`` tokens on every rank; ``wq``/``wk``/``wv`` and ``w1``/``w3`` are
``ColwiseParallel()`` (input already ``Replicate()``: no redistribution), whose ``F.linear`` on
that DTensor saves it for the weight gradient (one tensor shared by the three projections,
one by w1 and w3). ``wo``/``w2`` are ``RowwiseParallel(output_layouts=Shard(1))``: their inputs
are the local ``1/t`` of the heads / of ``f``, as in Megatron-Core; SDPA keeps Q, K, V and its
output for ``a/t`` heads. With float8 tensorwise TP, ``PrepareFloat8ModuleInput`` casts the
shard to float8 before the all-gather (torchao 0.18.0 float8/float8_tensor_parallel.py), and
Float8Linear saves the gathered float8 input (1 byte).
"""

from __future__ import annotations

import dataclasses

import pytest

from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.model.memory import activation_bytes_per_layer
from core.plan.fields import NOT_MODELLED
from core.plan.parallel import ParallelPlan, tp_saves_gathered_input
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session

LLAMA3_8B = MODEL_PRESETS["Llama 3 8B"]
# FlashAttention, GQA (g = 4 of a = 16), SwiGLU (f/h = 3.5), no dropout masks
SMALL = dataclasses.replace(LLAMA3_8B, hidden_size=1024, num_attention_heads=16,
                            num_query_groups=4, ffn_hidden_size=3584, seq_length=2048,
                            kv_channels=None, name="small Llama")
S, B, H, A, G, F, T = 2048, 2, 1024, 16, 4, 3584, 2
SBH = S * B * H


def _plan(saved: str, t: int = T, **kw) -> ParallelPlan:
    kw.setdefault("recompute", "none")
    return ParallelPlan(tensor_parallel=t, sequence_parallel=t > 1, pipeline_parallel=1,
                        data_parallel=1, micro_batch_size=B, global_batch_size=B,
                        tp_saved_input=saved, **kw)


def test_bf16_layer_bytes_closed_form():
    """Megatron-Core (Table 2 with SP, a Llama layer): ``sbh/t (8 + 4 + 4g/a + 6f/h)``, the 8
    being the norms' inputs (2 + 2) and outputs (2 + 2, QKV's and fc1's inputs). torchtitan:
    the two outputs are kept all-gathered, ``2 sbh`` each, the rest as Megatron's:
    ``4 sbh + sbh/t (4 + 4 + 4g/a + 6f/h)``; at t = 2 that is ``2 sbh`` more."""
    megatron = SBH / T * (8 + 4 + 4 * G / A + 6 * F / H)
    torchtitan = 4 * SBH + SBH / T * (4 + 4 + 4 * G / A + 6 * F / H)
    assert activation_bytes_per_layer(SMALL, _plan("sequence_shard", precision="bf16")) == \
        pytest.approx(megatron, rel=1e-12)
    got = activation_bytes_per_layer(SMALL, _plan("gathered", precision="bf16"))
    assert got == pytest.approx(torchtitan, rel=1e-12)
    assert got - megatron == pytest.approx(2 * SBH, rel=1e-12)
    # g/a = 1/4, f/h = 3.5: Megatron 34/2 = 17 sbh, torchtitan 4 + 30/2 = 19 sbh (8 MiB more)
    assert (megatron / SBH, got / SBH) == (17.0, 19.0) and got - megatron == 8 * 2 ** 20


def test_float8_tp_saves_1_byte_gathered_inputs():
    """torchao float8 under torchtitan's float8 TP: every linear's input float8 (the
    projection's copy beside FlashAttention's BF16 output: +1), QKV's and fc1's gathered at
    1 byte: ``2 sbh + sbh/t (4 + 4 + 4g/a + 5f/h + 1)``, 1 sbh more than the shard at t = 2.
    Transformer Engine's FP8 with gathered inputs would be the same 1-byte copies."""
    kw = dict(precision="fp8", fp8_recipe="tensorwise", fp8_impl="torchao")
    shard = SBH / T * (6 + 4 + 4 * G / A + 5 * F / H + 1)
    gathered = 2 * SBH + SBH / T * (4 + 4 + 4 * G / A + 5 * F / H + 1)
    assert activation_bytes_per_layer(SMALL, _plan("sequence_shard", **kw)) == \
        pytest.approx(shard, rel=1e-12)
    got = activation_bytes_per_layer(SMALL, _plan("gathered", **kw))
    assert got == pytest.approx(gathered, rel=1e-12)
    assert got - shard == pytest.approx(SBH, rel=1e-12)


@pytest.mark.parametrize("t,sp,recompute", [(1, False, "none"), (2, False, "none"),
                                            (2, True, "full"), (2, True, "selective_op")])
def test_nothing_changes_where_nothing_is_gathered_or_kept(t, sp, recompute):
    """At t = 1 nothing is gathered; without sequence parallelism every rank keeps the whole
    input either way; full recomputation keeps the block's sequence-sharded input and
    per-op checkpointing does not keep the gathered inputs (not in its save list)."""
    def at(saved):
        plan = ParallelPlan(tensor_parallel=t, sequence_parallel=sp, pipeline_parallel=1,
                            data_parallel=1, micro_batch_size=B, global_batch_size=B,
                            recompute=recompute, tp_saved_input=saved)
        return activation_bytes_per_layer(SMALL, plan)
    assert at("gathered") == at("sequence_shard") > 0


def test_torchtitan_import_sets_it_and_the_memory_grows_end_to_end():
    """torchtitan's llama3_8b.toml at TP 2, FSDP 4, no activation checkpointing, 24,576-token
    sequences on 8 H100s: each of the 32 layers keeps ``2 s b h`` bytes more than Megatron's
    sequence-parallel row (QKV's and fc1's inputs, 2 bytes x (s - s/t) x h each), the output
    layer ``s b h`` more, 6.1 GiB in all, and the verdict is "does not fit" where the shard's counting said "tight"."""
    from core.io.torchtitan_import import load_toml, session_from_torchtitan
    from core.sim.simulate import simulate, stage_memory
    from tests.test_torchtitan_import import LLAMA3_8B as TOML
    raw = load_toml(TOML)
    raw["activation_checkpoint"] = {"mode": "none"}
    raw["training"]["seq_len"] = 24576
    raw.setdefault("compile", {})["enable"] = True  # compiled: the fused SwiGLU's 6f/h
    raw["parallelism"].update(tensor_parallel_degree=2, data_parallel_shard_degree=4)
    s = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB").session
    assert (s.plan.tensor_parallel, s.plan.sequence_parallel, s.plan.tp_saved_input,
            s.plan.micro_batch_size) == (2, True, "gathered", 1)
    mg = dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp_saved_input="sequence_shard"))
    more = stage_memory(s)[0].activations_bytes - stage_memory(mg)[0].activations_bytes
    # 32 layers x 2 sbh, and the output layer's gathered input beside the final norm's input
    # shard for the one micro-batch whose loss awaits its backward: 3 sbh instead of 2 sbh
    sbh = 24576 * 1 * 4096
    assert more == 32 * 2 * sbh + sbh == 6 * 2 ** 30 + 96 * 2 ** 20
    assert simulate(s).report.memory_verdict == "does not fit"
    assert simulate(mg).report.memory_verdict == "tight"
    # TP 1: nothing gathered, but the field says what torchtitan's TP saves all the same, so
    # that a sweep of the session over t keeps it (was sequence_shard: the sweep's t = 2 plans
    # were counted with Megatron-Core's s/t shard, 6.1 GiB low here)
    raw["parallelism"].update(tensor_parallel_degree=1, data_parallel_shard_degree=8)
    t1 = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB").session
    assert t1.plan.tp_saved_input == "gathered" and not tp_saves_gathered_input(t1.plan)
    assert "tp_saved_input" not in t1.plan.label()
    swept = dataclasses.replace(t1, plan=dataclasses.replace(
        t1.plan, tensor_parallel=2, sequence_parallel=True, data_parallel=4))
    assert stage_memory(swept)[0].activations_bytes == stage_memory(s)[0].activations_bytes


def test_a_sweep_of_a_tp1_torchtitan_session_keeps_the_gathered_inputs(tmp_path, capsys):
    """vtrain sweep of the released llama3_8b.toml (TP 1, FSDP 8) over t = 2: every swept
    plan saves torchtitan's gathered inputs (they were sequence_shard: Megatron-Core's memory
    for a torchtitan job, silently)."""
    import csv

    from core.cli import main
    from tests.test_torchtitan_import import LLAMA3_8B as TOML
    out = tmp_path / "tt.json"
    assert main(["import", "torchtitan", str(TOML), "--num-gpus", "8", "--gpu", "H100",
                 "--out", str(out)]) == 0
    plans = tmp_path / "plans.csv"
    assert main(["sweep", str(out), "--recompute", "none,selective_op,full",
                 "--recompute-num-layers", "all", "--schedules", "1f1b",
                 "--cross-entropy-fusion", "off", "--tp-comm-overlap", "n",
                 "--tensor-parallel", "2", "--pipeline-parallel", "1", "--context-parallel", "1",
                 "--workers", "1", "--out", str(plans)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(plans.open()))
    assert rows and {(r["tensor_parallel"], r["sequence_parallel"], r["tp_saved_input"])
                     for r in rows} == {("2", "True", "gathered")}


def test_the_megatron_export_refuses_it():
    plan = _plan("gathered", precision="bf16")
    assert tp_saves_gathered_input(plan)
    with pytest.raises(MegatronArgsError, match="plan.tp_saved_input 'gathered'"):
        export_arguments(Session(model=LLAMA3_8B, plan=plan))
    words = export_arguments(Session(model=LLAMA3_8B, plan=dataclasses.replace(
        plan, tp_saved_input="sequence_shard")))
    assert "--sequence-parallel" in words


def test_experts_latent_attention_and_megatron_selective_are_refused_by_name():
    from core.plan.rules import _model_plan_errors
    P = MODEL_PRESETS
    moe = next(m for m in P.values() if m.is_moe and not m.multi_latent_attention)
    mla = dataclasses.replace(next(m for m in P.values() if m.multi_latent_attention),
                              num_experts=None)  # a dense MLA model (the MoE rule is first)
    assert not mla.is_moe
    for model, recompute, needle in [
            (moe, "none", "a mixture-of-experts model"),
            (mla, "none", "multi-head latent attention"),
            (LLAMA3_8B, "selective", "recompute='selective'")]:
        errs = [e for e in _model_plan_errors(model, _plan("gathered", recompute=recompute))
                if e.field == "plan.tp_saved_input"]
        assert [e.rule for e in errs] == [NOT_MODELLED], model.name
        assert f"tp_saved_input='gathered' with {needle}" in errs[0].message
        # under full recomputation (the block's sharded input) the gathered inputs are not kept
        assert not [e for e in _model_plan_errors(model, _plan("gathered", recompute="full"))
                    if e.field == "plan.tp_saved_input"]
    assert not [e for e in _model_plan_errors(LLAMA3_8B, _plan("gathered"))
                if e.field == "plan.tp_saved_input"]


def test_label_and_session_files(tmp_path):
    """Labelled with tensor and sequence parallelism only; saved and loaded; a file without the
    field reads Megatron's sequence_shard; greyed out without TP + SP."""
    import json
    from core.io.session import load_session, save_session
    from core.plan.rules import inactive_fields
    p = _plan("gathered")
    assert p.label() == _plan("sequence_shard").label() + " tp_saved_input=gathered"
    assert _plan("gathered", t=1).label() == _plan("sequence_shard", t=1).label()
    s = Session(model=LLAMA3_8B, plan=p)
    path = tmp_path / "s.json"
    save_session(s, path)
    doc = json.loads(path.read_text())
    assert doc["plan"]["tp_saved_input"] == "gathered"
    assert load_session(path).plan.tp_saved_input == "gathered"
    del doc["plan"]["tp_saved_input"]
    path.write_text(json.dumps(doc))
    assert load_session(path).plan.tp_saved_input == "sequence_shard"
    doc["plan"]["tp_saved_input"] = "replicated"
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="tp_saved_input"):
        load_session(path)
    assert "plan.tp_saved_input" not in inactive_fields(s)
    assert "plan.tp_saved_input" in inactive_fields(dataclasses.replace(
        s, plan=dataclasses.replace(p, tensor_parallel=1, sequence_parallel=False)))


def test_the_output_layer_saves_its_gathered_input():
    """torchtitan's ``norm`` is ``SequenceParallel()`` and ``output``
    ``ColwiseParallel(input_layouts=Shard(1))``: the norm keeps its ``s/t`` input, the output
    layer the all-gathered norm output, ``s b h e (1/t + 1)``; Megatron-Core's
    ``ColumnParallelLinear`` keeps the shard: ``2 s b h e / t`` (Korthikanti Sec. 4.1). BF16
    under float8 too (the converter's filter_fqns leaves the output layer out)."""
    from core.model.memory import final_norm_activation_bytes
    for precision in ("bf16", "fp8"):
        kw = dict(precision=precision, fp8_impl="torchao") if precision == "fp8" else \
            dict(precision=precision)
        assert final_norm_activation_bytes(SMALL, _plan("sequence_shard", **kw)) == \
            2 * SBH * 2 / T
        assert final_norm_activation_bytes(SMALL, _plan("gathered", **kw)) == \
            SBH * 2 * (1 / T + 1) == 3 * SBH
    # at t = 1 nothing is gathered: the norm's input and output, 2 s b h e
    assert final_norm_activation_bytes(SMALL, _plan("gathered", t=1)) == 2 * SBH * 2


def test_a_moe_flavour_at_tp_2_without_checkpointing_is_refused_by_the_degree():
    """qwen3 30B-A3B at TP 2 with activation checkpointing off: the MoE layers' gathered inputs
    are not modelled, refused by name under the TOML key that sets the field; with full
    checkpointing (the block's sharded input) it imports."""
    from core.io.torchtitan_import import session_from_torchtitan
    from core.plan.fields import ConfigError
    from tests.test_torchtitan_import import _llama3_8b
    raw = _llama3_8b(tensor_parallel_degree=2, data_parallel_shard_degree=8,
                     expert_parallel_degree=4)
    raw["model"].update(name="qwen3", flavor="30B-A3B")
    raw["training"]["seq_len"] = 4096
    raw["activation_checkpoint"] = {"mode": "none"}
    raw.setdefault("compile", {})["enable"] = True  # compiled: the fused SwiGLU's 6f/h
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=16)
    e = err.value.errors[0]
    assert e.field == "config.toml: parallelism.tensor_parallel_degree"
    assert e.message.startswith("tp_saved_input='gathered' with a mixture-of-experts model")
    raw["activation_checkpoint"] = {"mode": "full"}
    assert session_from_torchtitan(raw, num_gpus=16).session.plan.tp_saved_input == "gathered"
