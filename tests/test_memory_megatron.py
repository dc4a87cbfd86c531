"""Our per-GPU memory model against Megatron-LM's own estimate (megatron-core 0.19.2,
``megatron/training/theoretical_memory_usage.py``, re-implemented in
``benchmarks/bench_memory_megatron.py``; megatron is not imported): the re-implementation
against the source's closed forms, and every term of ours against it, each difference the
named one (docs/simulator.md, "Memory model against Megatron-LM's estimate")."""

from __future__ import annotations


import pytest

from core.plan.presets import MODEL_PRESETS
from tests.conftest import ROOT, load_module

bmm = load_module(ROOT / "benchmarks" / "bench_memory_megatron.py")
Case = bmm.Case

GPT3 = MODEL_PRESETS["GPT-3 175B"]


def _meg(case: Case) -> tuple[dict, dict]:
    model, plan = MODEL_PRESETS[case.model], case.plan()
    args = bmm.megatron_args(model, plan)
    return (bmm.megatron_weight_and_optimizer(args),
            bmm.megatron_activations(args, plan.num_microbatches))


def test_reimplementation_gives_the_source_closed_forms():
    # GPT-3 175B, t8 p8 d4 v2, distributed optimizer: lines 248-255 and 296, 317-355, 379
    h, s, L, V = 12288, 2048, 96, 51200  # V' = 50257 padded to a multiple of 128 * 8
    w, a = _meg(Case("GPT-3 175B", 8, 8, 4, 2, 256, True))
    params = ((L // 8) * 12 * h * h + V * h) / 8 + (L * 4 * h + 2 * h) / 8
    assert params == 2_797_145_088
    assert w["params"] == params and w["bytes_per_parameter"] == 6 + 12 / 4
    assert w["bytes"] == params * 9
    act = (s * h * 34 * L + 8 * s * 8 + s * h * 8) * (1 + 7 / 16) / 8
    assert act == 14_795_955_200
    assert a["bytes"] == pytest.approx(act, rel=1e-15)
    assert a["in_flight"] == 8 + 7 / 2
    # 1F1B with m = 4 < p = 8: line 361 scales by m/p
    _, a = _meg(Case("GPT-3 175B", 8, 8, 4, None, 16, True))
    assert a["in_flight"] == 4 and a["bytes"] == pytest.approx(act / 1.4375 / 2, rel=1e-15)
    # p = 1: the output layer's input and fp32 logits, 4sbh(1 + V'/h)/t (lines 368-376)
    _, a = _meg(Case("Llama 3 8B", 2, 1, 4, None, 32, True))
    assert a["output"] == 2 * 8192 * (4096 + 128256) == 2_168_455_168
    # 18 bytes per parameter without the distributed optimizer
    w, _ = _meg(Case("GPT-3 175B", 8, 8, 4, None, 256, False))
    assert w["bytes_per_parameter"] == 18


def test_state_differs_only_by_the_named_terms():
    for case in bmm.CASES:
        r = bmm.compare(case)
        meg, us = r["meg_w"], r["ours"]
        model = MODEL_PRESETS[case.model]
        h, t, p = model.hidden_size, case.t, case.p
        assert us["bytes_per_parameter"] == meg["bytes_per_parameter"]
        # weights + gradients + optimizer: the parameters times the bytes, and the placeholders
        assert us["state"] == pytest.approx(
            us["params"] * us["bytes_per_parameter"] + us["placeholder"], rel=1e-12)
        final_norm = (2 if model.normalization == "layernorm" else 1) * h
        extra = 0.0
        if model.position_embedding == "learned":  # 'p': positions s*h, biases
            layers = model.num_layers // p
            extra = model.seq_length * h + layers * (3 * h / t + h + 4 * h / t + h)
        # Megatron spreads the final norm over the stages (line 254); ours has it on the last
        shared = final_norm / p if p > 1 else 0.0
        assert us["params"] - meg["params"] == pytest.approx(extra - shared, abs=1e-3)


def test_gpt_activations_equal_megatron_but_the_embedding_count():
    # GPT-3 175B (GeLU 4h, MHA, dropout 0.1): Korthikanti's 34 sbh/t per layer in both; the
    # first stage's in-flight count equal for 1F1B (m >= p and m < p) and interleaved (m >= 2p)
    s, h, t = 2048, 12288, 8
    for case in bmm.CASES:
        if case.model != "GPT-3 175B" or "M" in case.why:
            continue
        r = bmm.compare(case)
        meg, us = r["meg_a"], r["ours"]
        assert us["per_layer"] == pytest.approx(meg["per_layer"], rel=1e-15)
        assert us["in_flight"] == pytest.approx(meg["in_flight"], rel=1e-15)
        assert us["layers"] == pytest.approx(meg["layers"], rel=1e-12)
        # the embedding's input ids and dropout mask (lines 330-339): Megatron 8sb + sbh per
        # micro-batch all over t, times its layers' factor (p (1 + (p-1)/(p v)) interleaved);
        # ours the ids whole on every rank, 8sb + sbh/t, times the first chunk's micro-batches
        # in flight: min(p, m) for 1F1B, 2p interleaved with m >= 2p (the chunk-0 forwards of
        # stage 0 before its first chunk-0 backward)
        emb = 8 * s + s * h / t
        assert meg["embedding"] == pytest.approx((8 * s + s * h) * meg["in_flight"] / t, rel=1e-15)
        count = 2 * case.p if case.v else min(case.p, r["m"])
        assert us["embedding"] == pytest.approx(emb * count, rel=1e-15)
        assert us["rest"] == 0.0  # stage 0 is not the loss stage: no final norm, no logits
        assert us["activations"] == pytest.approx(meg["bytes"] - meg["embedding"]
                                                  + us["embedding"], rel=1e-12)


@pytest.mark.parametrize("p, v, m", [(2, 2, 4), (4, 2, 8), (4, 5, 16), (8, 2, 64), (8, 3, 16),
                                     (8, 6, 72), (16, 3, 32)])
def test_interleaved_first_stage_is_megatrons_factor(p, v, m):
    # Megatron: L (1 + (p-1)/(p v)) layers' activations on the first stage (lines 343-355), i.e.
    # p + (p-1)/v times its L/p layers; ours from Megatron-Core's interleaved order
    from core.model.memory import schedule_in_flight
    assert schedule_in_flight("interleaved", p, m, v)[0] == pytest.approx(p * (1 + (p - 1) / (p * v)),
                                                                         rel=1e-15)


def test_interleaved_with_m_equal_p_holds_p_not_megatrons_factor():
    # 'M': with m = p every item is warm-up (megatron-core schedules.py:949-951), so the first
    # stage holds all p micro-batches of every chunk: p stage units; the estimate, p + (p-1)/v
    r = bmm.compare(Case("GPT-3 175B", 8, 8, 4, 2, 32, True, "pgM"))
    assert r["m"] == 8
    assert r["ours"]["in_flight"] == 8.0 and r["meg_a"]["in_flight"] == 8 + 7 / 2


@pytest.mark.parametrize("name, per_layer", [("Llama 3 70B", 33.5), ("Llama 3 8B", 34.0)])
def test_llama_layer_term(name, per_layer):
    # 'L': Megatron's 18 + 4f/h (line 317) plus SwiGLU's 2f/h more (the 2f-wide fc1 output),
    # less K and V at g of a heads (4 -> 4g/a) and the two dropout masks (hidden_dropout 0)
    model = MODEL_PRESETS[name]
    h, f, a, g = (model.hidden_size, model.ffn_hidden_size, model.num_attention_heads,
                  model.num_query_groups)
    assert 18 + 4 * f / h + 2 * f / h - (4 - 4 * g / a) - 2 == per_layer
    for case in bmm.CASES:
        if case.model == name:
            r = bmm.compare(case)
            unit = model.seq_length * h / case.t
            assert r["meg_a"]["per_layer"] / unit == 18 + 4 * f / h
            assert r["ours"]["per_layer"] / unit == pytest.approx(per_layer, rel=1e-15)
            assert r["ours"]["in_flight"] == pytest.approx(r["meg_a"]["in_flight"], rel=1e-15)


def test_one_stage_logits():
    # 'O': ours keeps the BF16 logits beside their fp32 copy at the loss, 6 s b V'/t, and the
    # final norm's input and output, 4 s b h/t as Megatron's lines 370-376; the difference is
    # the logits' alone
    r = bmm.compare(Case("Llama 3 8B", 2, 1, 4, None, 32, True, "gLO"))
    s, h, V, t = 8192, 4096, 128256, 2
    assert r["ours"]["rest"] == pytest.approx(s * V / t * 6 + 4 * s * h / t, rel=1e-12)
    assert r["meg_a"]["output"] == pytest.approx(s * V / t * 4 + 4 * s * h / t, rel=1e-15)
    assert r["ours"]["rest"] - r["meg_a"]["output"] == pytest.approx(2 * s * V / t, rel=1e-12)
    # the embedding: no dropout mask (the preset's hidden_dropout is 0), the ids 8sb on each rank
    assert r["ours"]["embedding"] == 8 * s


def test_every_difference_above_two_percent_is_named():
    for case in bmm.CASES:
        r = bmm.compare(case)
        codes = set(case.why)
        assert codes <= set(bmm.WHY)
        if abs(r["state_diff"]) > 2:
            assert codes & {"p", "g"}, case
        if abs(r["act_diff"]) > 2:
            assert codes & {"L", "M", "O"}, case
