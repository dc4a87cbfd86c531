"""torchtitan's float8 linears (plan.fp8_impl torchao) keep no persistent FP8 weight copy and
save their inputs as they arrive.

torchao 0.18.0, torchao/float8/float8_linear.py: ``Float8Linear.from_float`` keeps the module's
high-precision ``weight`` as the parameter; ``matmul_with_hp_or_float8_args`` saves that weight
for the backward and casts it with ``hp_tensor_to_float8_dynamic`` in the forward and again in
the backward. Transformer Engine (Megatron-LM) instead keeps FP8 copies of each linear weight
(and its transpose on Hopper: 2 bytes per weight) across micro-batches.
"""

from __future__ import annotations

import dataclasses

import pytest

from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.torchtitan_import import read_torchtitan_config
from core.model.memory import fp8_weights_per_gpu, state_bytes_of
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from tests.test_torchtitan_import import LLAMA3_405B

LLAMA3_8B = MODEL_PRESETS["Llama 3 8B"]
# Llama 3 8B's linear weights per layer: QKV h(a + 2g)d, projection a d h, SwiGLU 3 h f
LINEAR = 32 * (4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336)


def _weights(**kw) -> float:
    plan = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                        micro_batch_size=1, global_batch_size=8, precision="fp8",
                        fp8_recipe="tensorwise", **kw)
    return float(state_bytes_of(LLAMA3_8B, plan, True)[0][0])


def test_the_linear_weights_closed_form():
    plan = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                        micro_batch_size=1, global_batch_size=8, precision="fp8")
    assert fp8_weights_per_gpu(LLAMA3_8B, plan)[0] == LINEAR == 6_979_321_856


@pytest.mark.parametrize("zero,gather,te_extra,torchao_extra", [
    (0, False, 2 * LINEAR, 0),          # TE: weight and transpose in FP8 beside the BF16 weight
    (3, False, 2 * LINEAR / 8, 0),      # sharded over d = 8 as the weights are
    (3, True, 2 * LINEAR / 8, 0),
    # ZeRO-1 with the FP8 all-gather: TE keeps the compute weights in FP8 only (2 - 2 bytes);
    # torchao's gathered weights are float8: 1 byte instead of BF16's 2
    (1, True, 0, -LINEAR),
])
def test_torchao_float8_keeps_no_fp8_weight_copies(zero, gather, te_extra, torchao_extra):
    kw = dict(zero_stage=zero, fp8_param_gather=gather, overlap_param_gather=zero == 3)
    te = _weights(**kw)
    torchao = _weights(fp8_impl="torchao", **kw)
    bf16 = float(state_bytes_of(LLAMA3_8B, ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=8, micro_batch_size=1,
        global_batch_size=8, precision="bf16", **kw), True)[0][0])
    assert te - bf16 == pytest.approx(te_extra, rel=1e-12, abs=1)
    assert torchao - bf16 == pytest.approx(torchao_extra, rel=1e-12, abs=1)
    assert te - torchao == pytest.approx(te_extra - torchao_extra, rel=1e-12, abs=1)


def test_torchtitan_float8_sets_it_and_the_megatron_export_refuses_it():
    plan = read_torchtitan_config(LLAMA3_405B, num_gpus=512, gpu="H100-SXM5-80GB").session.plan
    assert plan.precision == "fp8" and plan.fp8_impl == "torchao"
    fp8 = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                       micro_batch_size=1, global_batch_size=8, precision="fp8",
                       fp8_recipe="tensorwise", fp8_impl="torchao")
    with pytest.raises(MegatronArgsError, match="plan.fp8_impl 'torchao'"):
        export_arguments(Session(model=LLAMA3_8B, plan=fp8))
    words = export_arguments(Session(model=LLAMA3_8B, plan=dataclasses.replace(
        fp8, fp8_impl="transformer_engine")))
    assert words[words.index("--fp8-recipe") + 1] == "tensorwise"


def test_the_label_names_it_in_fp8_plans_only():
    base = ParallelPlan(precision="fp8")
    assert dataclasses.replace(base, fp8_impl="torchao").label() == \
        base.label() + " fp8_impl=torchao"
    bf16 = dataclasses.replace(base, precision="bf16")
    assert dataclasses.replace(bf16, fp8_impl="torchao").label() == bf16.label()


# --------------------------------------------------------------------------- saved inputs
# torchao 0.18.0 float8/float8_linear.py, matmul_with_hp_or_float8_args.forward:
# ``ctx.save_for_backward(input_hp, weight_hp_t)`` before either is cast: the input as it
# arrives (BF16 without tensor parallelism; float8 under torchtitan's float8 tensor
# parallelism, whose Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput
# cast it first) and the weight parameter itself. Transformer Engine saves its FP8 copy.

SMALL = dataclasses.replace(LLAMA3_8B, hidden_size=1024, num_attention_heads=16,
                            num_query_groups=4, ffn_hidden_size=3584, seq_length=2048,
                            kv_channels=None, name="small Llama")


def _per_layer(model, t=1, **kw) -> float:
    from core.model.memory import activation_bytes_per_layer
    plan = ParallelPlan(tensor_parallel=t, sequence_parallel=t > 1, pipeline_parallel=1,
                        data_parallel=1, micro_batch_size=2, global_batch_size=2,
                        recompute="none", **kw)
    return activation_bytes_per_layer(model, plan)


@pytest.mark.parametrize("model", [SMALL, LLAMA3_8B], ids=["small", "llama3_8b"])
def test_torchao_saves_bf16_linear_inputs_without_tp(model):
    """Korthikanti et al. 2022 Table 2 (t = 1, no recomputation) for a Llama layer
    (FlashAttention, grouped-query heads g, SwiGLU, no dropout masks): BF16 keeps
    ``sbh (8 + 4 + 4g/a + 6f/h)``: the ``10`` less the two masks (the norms' inputs 2 + 2 and
    outputs 2 + 2, the outputs being QKV's and fc1's inputs), Q, K, V and the projection's
    input, fc1's ``2f`` output and the ``f`` product (fc2's input), 2 bytes each.
    Transformer Engine's FP8 saves QKV's, fc1's and fc2's inputs as 1-byte copies:
    ``sbh (6 + 4 + 4g/a + 5f/h)`` (tensorwise: the projection saves its BF16 input).
    torchao saves them as they arrive, BF16: exactly BF16's bytes."""
    s, b, h, a, g, f = (model.seq_length, 2, model.hidden_size, model.num_attention_heads,
                        model.num_query_groups, model.ffn_hidden_size)
    sbh = s * b * h
    bf16 = sbh * (8 + 4 + 4 * g / a + 6 * f / h)
    te = sbh * (6 + 4 + 4 * g / a + 5 * f / h)
    assert _per_layer(model, precision="bf16") == pytest.approx(bf16, rel=1e-12)
    assert _per_layer(model, precision="fp8", fp8_recipe="tensorwise") == \
        pytest.approx(te, rel=1e-12)
    torchao = _per_layer(model, precision="fp8", fp8_recipe="tensorwise", fp8_impl="torchao")
    assert torchao == pytest.approx(bf16, rel=1e-12)
    # the difference: one byte per element of QKV's input (h), fc1's (h) and fc2's (f)
    assert torchao - te == pytest.approx(sbh * (2 + f / h), rel=1e-12)
    if model is LLAMA3_8B:  # s b h = 8192 x 2 x 4096; g/a = 1/4, f/h = 3.5
        assert (bf16 / sbh, te / sbh) == (34.0, 28.5)


def test_torchao_under_float8_tensor_parallelism_saves_float8_inputs():
    """t = 2, sequence-parallel (Table 2's ``sbh/t`` row): torchtitan's float8 tensor
    parallelism casts every linear's input to float8 before the matmul, which saves that copy
    (1 byte), the projection's included, beside FlashAttention's BF16 output it keeps anyway:
    ``sbh/t (6 + 4 + 4g/a + 5f/h + 1)``, Transformer Engine's tensorwise less the one byte
    of the projection's input (TE saves its original BF16 input, the same tensor as the
    attention's output)."""
    m = SMALL
    s, b, h, a, g, f, t = (m.seq_length, 2, m.hidden_size, m.num_attention_heads,
                           m.num_query_groups, m.ffn_hidden_size, 2)
    sbh = s * b * h
    te = sbh / t * (6 + 4 + 4 * g / a + 5 * f / h)
    assert _per_layer(m, t, precision="fp8", fp8_recipe="tensorwise") == \
        pytest.approx(te, rel=1e-12)
    assert _per_layer(m, t, precision="fp8", fp8_recipe="tensorwise", fp8_impl="torchao") == \
        pytest.approx(te + sbh / t, rel=1e-12)


def test_torchtitan_float8_import_counts_bf16_saved_inputs_end_to_end():
    """torchtitan's llama3_8b.toml with float8 (its commented converters line), no activation
    checkpointing and 13,312-token sequences on 8 H100s (FSDP 8, TP 1): every one of the 32
    layers keeps ``(2 + f/h) s b h`` bytes more than Transformer Engine's FP8 would
    (5.5 s b h at f/h = 3.5), and the verdict is "does not fit" where TE's counting said
    "tight"."""
    from core.io.torchtitan_import import load_toml, session_from_torchtitan
    from core.sim.simulate import simulate, stage_memory
    from tests.test_torchtitan_import import LLAMA3_8B as TOML
    raw = load_toml(TOML)
    raw["model"]["converters"] = ["float8"]
    raw["activation_checkpoint"] = {"mode": "none"}
    raw.setdefault("compile", {})["enable"] = True  # compiled: the fused SwiGLU's 6f/h
    raw["training"]["seq_len"] = 13312
    s = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB").session
    assert (s.plan.precision, s.plan.fp8_impl, s.plan.recompute, s.plan.tensor_parallel,
            s.plan.micro_batch_size) == ("fp8", "torchao", "none", 1, 1)
    te = dataclasses.replace(s, plan=dataclasses.replace(s.plan, fp8_impl="transformer_engine"))
    more = stage_memory(s)[0].activations_bytes - stage_memory(te)[0].activations_bytes
    assert more == pytest.approx(32 * 5.5 * 13312 * 1 * 4096, rel=1e-12)
    assert simulate(s).report.memory_verdict == "does not fit"
    assert simulate(te).report.memory_verdict == "tight"


@pytest.mark.parametrize("change,needle", [
    (dict(fp8_recipe="mxfp8"), "fp8_impl='torchao' with fp8_recipe='mxfp8' is not modelled"),
    (dict(fp8_recipe="delayed"), "fp8_impl='torchao' with fp8_recipe='delayed' is not modelled"),
])
def test_torchao_with_another_recipe_is_refused_by_name(change, needle):
    from core.plan.fields import NOT_MODELLED
    from core.plan.sharding_rules import sharding_precision_errors
    plan = ParallelPlan(precision="fp8", fp8_impl="torchao", **change)
    errs = sharding_precision_errors(plan)
    assert [(e.field, e.rule) for e in errs] == [("plan.fp8_impl", NOT_MODELLED)]
    assert needle in errs[0].message
    assert sharding_precision_errors(dataclasses.replace(plan, fp8_recipe="tensorwise")) == []


def test_torchao_with_experts_or_latent_attention_is_refused_by_name():
    from core.plan.presets import MODEL_PRESETS as P
    from core.plan.rules import _model_plan_errors
    plan = ParallelPlan(precision="fp8", fp8_impl="torchao")
    moe = next(m for m in P.values() if m.is_moe and not m.multi_latent_attention)
    mla = next(m for m in P.values() if m.multi_latent_attention)
    msgs = [e.message for e in _model_plan_errors(moe, plan) if e.field == "plan.fp8_impl"]
    assert len(msgs) == 1 and "mixture-of-experts model is not modelled" in msgs[0]
    msgs = [e.message for e in _model_plan_errors(mla, plan) if e.field == "plan.fp8_impl"]
    assert any("multi-head latent attention is not modelled" in m for m in msgs)
    assert not [e for e in _model_plan_errors(moe, dataclasses.replace(
        plan, fp8_impl="transformer_engine")) if e.field == "plan.fp8_impl"]


def test_session_files_round_trip_and_default_without_the_field(tmp_path):
    """A session file written before the field (none in it) reads Transformer Engine's; a
    torchao session saves and loads as torchao; the field is greyed out outside FP8."""
    import json
    from core.io.session import load_session, save_session
    from core.plan.rules import inactive_fields
    s = Session(model=LLAMA3_8B, plan=ParallelPlan(precision="fp8", fp8_impl="torchao"))
    path = tmp_path / "s.json"
    save_session(s, path)
    doc = json.loads(path.read_text())
    assert doc["plan"]["fp8_impl"] == "torchao"
    assert load_session(path).plan.fp8_impl == "torchao"
    del doc["plan"]["fp8_impl"]
    path.write_text(json.dumps(doc))
    assert load_session(path).plan.fp8_impl == "transformer_engine"
    doc["plan"]["fp8_impl"] = "deepspeed"
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="fp8_impl"):
        load_session(path)
    assert "plan.fp8_impl" in inactive_fields(dataclasses.replace(
        s, plan=dataclasses.replace(s.plan, precision="bf16")))
    assert "plan.fp8_impl" not in inactive_fields(s)


def test_a_session_with_the_retired_fp8_weight_copies_is_told_the_field_that_replaced_it(tmp_path):
    """Sessions written between fbd514e and f239df2 (the day's shipped examples too) hold
    plan.fp8_weight_copies; it is refused naming plan.fp8_impl and each value's meaning (was
    'unknown field', nothing else), and never read as fp8_impl."""
    import json

    from core.io.session import SessionFileError, load_session, save_session
    path = tmp_path / "s.json"
    save_session(Session(), path)
    doc = json.loads(path.read_text())
    doc["plan"]["fp8_weight_copies"] = False
    path.write_text(json.dumps(doc))
    with pytest.raises(SessionFileError) as err:
        load_session(path)
    assert str(err.value) == f"{path}: plan.fp8_weight_copies: " + ("unknown field: replaced by plan.fp8_impl (fp8_weight_copies false was "
                         "torchtitan's float8: fp8_impl \"torchao\"; true was Transformer "
                         "Engine's: \"transformer_engine\"); write that field instead")
