"""The activations outside the transformer layers (core.model.memory): the first stage's
embedding input ids and dropout mask, the loss stage's final norm input and output
(Korthikanti et al. 2022, Sec. 4.1; Megatron-Core 0.19.2
``megatron/training/theoretical_memory_usage.py`` lines 330-339 and 370-376), each against
its closed form, and where ``stage_activation_bytes`` puts them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import core.model.memory as mm
from core import schedules
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan

S, H = 2048, 1024


def _model(**kw) -> ModelConfig:
    base = dict(num_layers=8, hidden_size=H, num_attention_heads=8, seq_length=S,
                vocab_size=256_000, hidden_dropout=0.1)
    return ModelConfig(**{**base, **kw})


def _plan(**kw) -> ParallelPlan:
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                global_batch_size=16, recompute="selective")
    return ParallelPlan(**{**base, **kw})


@pytest.mark.parametrize("t, sp, cp, b, dropout, want", [
    # 8 s b int64 ids on every rank, and the 1-byte mask s b h, over t with SP only
    (1, False, 1, 1, 0.1, 8 * S + S * H),
    (4, False, 1, 1, 0.1, 8 * S + S * H),          # no SP: the mask whole on each rank
    (4, True, 1, 1, 0.1, 8 * S + S * H / 4),       # SP: dropout after the scatter
    (4, True, 1, 2, 0.1, 2 * (8 * S + S * H / 4)),  # b = 2
    (2, True, 2, 1, 0.1, 8 * S / 2 + S / 2 * H / 2),  # cp = 2: the rank's s/cp tokens
    (4, True, 1, 1, 0.0, 8 * S),                   # dropout 0: no mask, the ids still
])
def test_embedding_bytes_closed_form(t, sp, cp, b, dropout, want):
    model = _model(hidden_dropout=dropout)
    plan = _plan(tensor_parallel=t, sequence_parallel=sp, context_parallel=cp,
                 micro_batch_size=b, global_batch_size=16 * b)
    assert mm.embedding_activation_bytes(model, plan) == want


@pytest.mark.parametrize("t, sp, precision, mtp, want", [
    # the norm's input and its output (the output layer's input), 2 s b h e, over t with SP
    (1, False, "bf16", 0, 2 * S * H * 2),
    (4, False, "bf16", 0, 2 * S * H * 2),
    (4, True, "bf16", 0, 2 * S * H * 2 / 4),
    (1, False, "fp32", 0, 2 * S * H * 4),
    (1, False, "fp8", 0, 2 * S * H * 2),  # the norm and the output layer stay BF16
    (4, True, "bf16", 2, 3 * 2 * S * H * 2 / 4),  # each MTP layer's final norm too
])
def test_final_norm_bytes_closed_form(t, sp, precision, mtp, want):
    model = _model(mtp_num_layers=mtp)
    plan = _plan(tensor_parallel=t, sequence_parallel=sp, precision=precision)
    assert mm.final_norm_activation_bytes(model, plan) == want


@pytest.mark.parametrize("schedule, p, m, v, want", [
    ("1f1b", 4, 16, 1, 4), ("1f1b", 4, 2, 1, 2), ("1f1b", 1, 8, 1, 1),  # min(p, m)
    ("gpipe", 4, 16, 1, 16), ("gpipe", 1, 8, 1, 1),  # every forward first; no pipeline: 1
    ("zb-h1", 4, 16, 1, 4),
    # interleaved: stage 0's first-chunk forwards before its first first-chunk backward: the
    # warm-up (p-1)*2 + (v-1)*p items run p micro-batches per chunk in turn, and the first
    # chunk-0 backward follows (v-1)p backwards of the later chunks: 2p with m >= 2p
    ("interleaved", 4, 16, 2, 8), ("interleaved", 8, 64, 6, 16), ("interleaved", 4, 4, 2, 4),
])
def test_embedding_in_flight(schedule, p, m, v, want):
    assert schedules.embedding_in_flight(schedule, p, m, v) == want


def test_embedding_in_flight_is_the_first_stage_count_without_interleaving():
    # with one chunk per stage the embedding lives as long as stage 0's layers' activations
    for schedule in ("1f1b", "gpipe", "zb-h1"):
        for p, m in ((2, 8), (4, 4), (4, 3), (8, 32)):
            assert schedules.embedding_in_flight(schedule, p, m) == \
                schedules.in_flight_all(schedule, p, m)[0]


def _without_edges(monkeypatch, model, plan) -> np.ndarray:
    monkeypatch.setattr(mm, "embedding_activation_bytes", lambda *a: 0.0)
    monkeypatch.setattr(mm, "final_norm_activation_bytes", lambda *a: 0.0)
    out = mm.stage_activation_bytes(model, plan)
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("schedule, v", [("1f1b", None), ("interleaved", 2)])
def test_stage_terms_land_on_the_first_and_loss_stages(monkeypatch, recompute, schedule, v):
    """The embedding's terms on stage 0 times its micro-batches in flight, the final norm's on
    the loss stage once (one loss in flight under 1F1B), whatever the recomputation: neither
    is in a checkpointed layer. The vocabulary is large, so the logits outweigh the working set
    of a recomputed layer and the final norm, freed with them, counts whole."""
    model = _model()
    plan = _plan(tensor_parallel=2, sequence_parallel=True, pipeline_parallel=4,
                 data_parallel=1, global_batch_size=16, recompute=recompute,
                 schedule=schedule, virtual_pipeline_stages=v)
    got = mm.stage_activation_bytes(model, plan)
    base = _without_edges(monkeypatch, model, plan)
    emb = (8 * S + S * H / 2) * (8 if v else 4)  # 2p interleaved (m = 16), p = 4 for 1F1B
    norm = 2 * S * H * 2 / 2
    assert got - base == pytest.approx([emb, 0.0, 0.0, norm], rel=1e-15, abs=0.0)


def test_one_stage_holds_both_and_zb_v_puts_both_on_stage_0(monkeypatch):
    model = _model()
    for plan in (_plan(), _plan(pipeline_parallel=2, schedule="zb-v")):
        got = mm.stage_activation_bytes(model, plan)
        base = _without_edges(monkeypatch, model, plan)
        emb_count = schedules.embedding_in_flight(plan.schedule, plan.pipeline_parallel,
                                                  plan.num_microbatches, 2 if plan.schedule == "zb-v"
                                                  else 1)
        want = np.zeros(plan.pipeline_parallel)
        want[0] = (8 * S + S * H) * emb_count + 2 * S * H * 2
        assert got - base == pytest.approx(want, rel=1e-15, abs=0.0)


def test_full_recomputation_frees_the_norm_with_the_logits(monkeypatch):
    """A small vocabulary: the recomputed layer's working set outweighs the logits, and the
    final norm's input and output, freed before the layer runs again, add only what the logits
    and they exceed it by (nothing here)."""
    model = _model(vocab_size=1024)
    plan = _plan(recompute="full")
    got = mm.stage_activation_bytes(model, plan)
    base = _without_edges(monkeypatch, model, plan)
    working = mm.activation_bytes_per_layer(model, plan, "none")
    logits = S * 1024 * (2 + 4)
    norm = 2 * S * H * 2
    assert working > logits + norm
    assert float(got[0] - base[0]) == pytest.approx(8 * S + S * H, rel=1e-15)


def test_rows_equal_single_plans():
    model = _model()
    plans = [_plan(tensor_parallel=2, sequence_parallel=sp, pipeline_parallel=4,
                   recompute=rc, global_batch_size=gb)
             for sp in (False, True) for rc in ("selective", "full") for gb in (4, 32)]
    rows = mm.stage_activation_rows(model, plans, {})
    for row, plan in zip(rows, plans):
        assert np.array_equal(row, mm.stage_activation_bytes(model, plan))


def test_ep_overlap_adds_one_warm_up_embedding():
    # overlap_moe_expert_parallel_comm runs one more warm-up forward with pipelining
    # (ep_overlap_in_flight), at most m
    plan = _plan(pipeline_parallel=4, expert_parallel=2, data_parallel=2, global_batch_size=32,
                 overlap_moe_expert_parallel_comm=True)
    assert mm.ep_overlap_on(plan) and plan.num_microbatches == 16
    assert mm.embedding_in_flight(plan) == 4 + 1
    off = dataclasses.replace(plan, overlap_moe_expert_parallel_comm=False)
    assert mm.embedding_in_flight(off) == 4
    few = dataclasses.replace(plan, global_batch_size=6)  # m = 3 < p: all in flight already
    assert mm.embedding_in_flight(few) == 3


def test_embedding_in_flight_past_the_steady_state_equals_the_full_orders():
    """From the shorter orders of ``steady_microbatches`` (GPipe's closed form): equal, for
    every valid m up to 8 p v, to the running count of the first virtual stage's forwards less
    its backwards over the full order; and quick for millions of micro-batches."""
    import time
    from core.schedules import base
    checked = 0
    for name in base.names():
        sched = base.get(name)
        for p in range(1, 6):
            for v in ([1] if not sched.uses_virtual_stages else [2, 3]):
                ch = sched.chunks(v)
                for m in range(1, 8 * p * ch + 1):
                    if sched.order_errors(p, m, ch):
                        continue
                    phase, _, chunk = base.work_orders(name, p, m, v)
                    stage_of, chunk_of = sched.placement(p, ch)
                    s, c = int(stage_of[0]), int(chunk_of[0])
                    first = chunk[s] == c
                    step = np.where(first & (phase[s] == base.PHASE_F), 1,
                                    np.where(first & (phase[s] == base.PHASE_B), -1, 0))
                    assert schedules.embedding_in_flight(name, p, m, v) == \
                        int(np.cumsum(step).max()), (name, p, v, m)
                    checked += 1
    assert checked > 500
    t0 = time.perf_counter()
    assert schedules.embedding_in_flight("gpipe", 4, 8_388_608) == 8_388_608
    assert schedules.embedding_in_flight("interleaved", 4, 8_388_608, 2) == 8
    assert time.perf_counter() - t0 < 1.0
