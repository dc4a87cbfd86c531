"""The embedding and the loss as layer slots of the pipeline split (Megatron-Core's
``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.model import model_math
from core import schedules
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.layout import stage_layer_counts, virtual_stage_layer_counts
from core.plan.parallel import ParallelPlan, plan_key
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.stages import stage_times
from core.sim.op_times import virtual_stage_layers
from core.io.megatron.to_session import import_file
from core.io.megatron.export import export_script
from core.sim.simulate import open_profile, profile_path, simulate
from core.studies.sweep import SweepSpace, enumerate_plans

FLAGS = dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)


def plan(p, v=None, **kw):
    sched = "interleaved" if v else "1f1b"
    return ParallelPlan(tensor_parallel=8, pipeline_parallel=p, data_parallel=1, micro_batch_size=1,
                        global_batch_size=kw.pop("global_batch_size", 2 * p), schedule=sched,
                        recompute="full", precision="bf16", virtual_pipeline_stages=v,
                        **{**FLAGS, **kw})


def megatron_layers(L, p, v, emb, loss):
    """Megatron-Core's layers of each virtual stage, transcribed from
    ``transformer_block.get_num_layers_to_build`` and ``get_transformer_layer_offset``
    (the even split with the embedding / loss slots): ``[(offset, count)]`` for virtual
    stage k = vp_stage*p + rank."""
    slots = L + emb + loss
    assert slots % p == 0
    per_rank = slots // p
    per_virtual = per_rank // (v or 1)
    out = []
    for vp_stage in range(v or 1):
        for rank in range(p):
            n = per_virtual
            if emb and vp_stage == 0 and rank == 0:
                n -= 1
            if loss and vp_stage == (v or 1) - 1 and rank == p - 1:
                n -= 1
            if v:
                offset = vp_stage * (slots // v) + rank * per_virtual
            else:
                offset = rank * per_rank
            if emb and not (rank == 0 and (vp_stage == 0 or not v)) and offset > 0:
                offset -= 1  # Megatron: the embedding slot holds no layer
            out.append((offset, n))
    return out


# --------------------------------------------------------------------------- layer counts

def test_llama_405b_on_8_stages_of_8_chunks():
    counts = virtual_stage_layer_counts(126, plan(8, 8))
    assert counts == [1] + [2] * 62 + [1]
    assert stage_layer_counts(126, plan(8, 8)) == [15] + [16] * 6 + [15]
    # Megatron-Bridge's other 405B layout: p=16 v=4 -> 128/64 = 2 slots per virtual stage
    assert virtual_stage_layer_counts(126, plan(16, 4)) == [1] + [2] * 62 + [1]


@pytest.mark.parametrize("v,counts", [
    (None, [11] + [12] * 6 + [11]),
    (2, [5] + [6] * 14 + [5]),
    (4, [2] + [3] * 30 + [2]),
])
def test_qwen3_235b_on_8_stages(v, counts):
    assert virtual_stage_layer_counts(94, plan(8, v)) == counts
    assert sum(counts) == 94
    assert stage_layer_counts(94, plan(8, v)) == [11] + [12] * 6 + [11]


def test_one_flag_at_a_time_and_one_stage():
    emb = dict(account_for_loss_in_pipeline_split=False)
    loss = dict(account_for_embedding_in_pipeline_split=False)
    assert stage_layer_counts(127, plan(8, **emb)) == [15] + [16] * 7
    assert stage_layer_counts(127, plan(8, **loss)) == [16] * 7 + [15]
    assert virtual_stage_layer_counts(63, plan(8, 8, **emb)) == [0] + [1] * 63  # Megatron: >= 0
    assert stage_layer_counts(30, plan(1)) == [30]  # both slots on the one stage


@pytest.mark.parametrize("L,p,v,emb,loss", [
    (126, 8, 8, 1, 1), (126, 16, 4, 1, 1), (94, 8, None, 1, 1), (94, 8, 2, 1, 1), (94, 8, 4, 1, 1),
    (127, 8, None, 1, 0), (127, 8, 4, 0, 1), (62, 4, 4, 1, 1), (31, 4, 2, 1, 0), (46, 3, None, 1, 1),
])
def test_bounds_follow_megatron_core(L, p, v, emb, loss):
    pl = plan(p, v, account_for_embedding_in_pipeline_split=bool(emb),
              account_for_loss_in_pipeline_split=bool(loss))
    s = Session(dataclasses.replace(MODEL_PRESETS["Llama 3.1 405B"], num_layers=L), pl)
    bounds = virtual_stage_layers(s)
    ref = megatron_layers(L, p, v, emb, loss)
    assert [(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])] == ref
    assert bounds[-1] == L


def test_flags_off_keep_the_even_split():
    pl = dataclasses.replace(plan(8, 8), account_for_embedding_in_pipeline_split=False,
                             account_for_loss_in_pipeline_split=False)
    assert virtual_stage_layer_counts(128, pl) == [2] * 64
    assert stage_layer_counts(96, dataclasses.replace(pl, schedule="1f1b",
                                                      virtual_pipeline_stages=None)) == [12] * 8


# --------------------------------------------------------------------------- validation

def _errors(model, pl):
    return {e.field: e.message for e in validate(Session(model, pl))}


def test_refusals_name_the_field_and_megatrons_rule():
    m = MODEL_PRESETS["Llama 3.1 405B"]  # 126 layers
    only_emb = dict(account_for_loss_in_pipeline_split=False)
    errs = _errors(m, plan(8, **only_emb))  # 127 slots on 8 stages
    assert "127 layer slots are not divisible by pipeline_parallel_size=8" in \
        errs["plan.account_for_embedding_in_pipeline_split"]
    assert "(num_layers + embedding + loss)" in errs["plan.account_for_embedding_in_pipeline_split"]
    errs = _errors(m, plan(4, 16))  # 128 slots on 64... 4*16 = 64 divides; 4*32 = 128 too
    assert not errs
    errs = _errors(m, plan(8, 3, global_batch_size=16))  # 128 slots, p*v = 24
    assert "128 layer slots are not divisible by pipeline_parallel_size*virtual_pipeline_stages" \
           "=8*3=24" in errs["plan.virtual_pipeline_stages"]
    assert "% (p * v) == 0" in errs["plan.virtual_pipeline_stages"]
    errs = _errors(m, plan(8, first_stage_layers=15))
    assert "cannot be set with account_for_embedding_in_pipeline_split" in \
        errs["plan.account_for_embedding_in_pipeline_split"]
    errs = _errors(m, dataclasses.replace(plan(8), account_for_loss_in_pipeline_split="yes"))
    assert "must be true or false" in errs["plan.account_for_loss_in_pipeline_split"]
    # without the flags 126 layers do not split over 8 stages (nor 64 virtual stages)
    off = dict(account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False)
    assert "plan.pipeline_parallel" in _errors(m, plan(8, **off))
    assert "plan.virtual_pipeline_stages" in _errors(m, plan(8, 8, **off))


def test_label_names_the_flags():
    assert plan(8, 8).label().endswith("v=8 emb_split loss_split")
    assert "split" not in dataclasses.replace(
        plan(8), account_for_embedding_in_pipeline_split=False,
        account_for_loss_in_pipeline_split=False).label()


# --------------------------------------------------------------------------- simulation

def _llama(p, v, **kw):
    pl = dataclasses.replace(plan(p, v, global_batch_size=4 * p, **kw), sequence_parallel=True,
                             recompute="selective")
    return Session(MODEL_PRESETS["Llama 3.1 405B"], pl, ClusterConfig(gpu="H100-SXM5-80GB"),
                   CostConfig())


@pytest.mark.parametrize("v", [None, 8])
def test_stage_times_count_the_layers_of_each_chunk(v):
    s = _llama(8, v)
    st = stage_times(s, open_profile(profile_path(s)))
    # the middle stages' chunks hold 16 / v layers, the first and last chunk one fewer
    per = 16 // (v or 1)
    layer = st.fwd_s[1, 0] / per
    even = _llama(9, 7, **{k: False for k in FLAGS})  # 126 = 9*7*2: no slot, same layer shapes
    st_even = stage_times(even, open_profile(profile_path(even)))
    embedding = st_even.fwd_s[0, 0] - st_even.fwd_s[1, 0]  # 2 layers each; stage 0 adds the embedding
    assert st.fwd_s[0, 0] == pytest.approx((per - 1) * layer + embedding, rel=1e-9)
    if v:
        assert st.fwd_s[0, 1] == pytest.approx(st.fwd_s[1, 1], rel=1e-12)  # 2 layers, no edge
        np.testing.assert_allclose(st.fwd_s[1:-1], st.fwd_s[1, 0], rtol=1e-12)  # all 2 layers
        np.testing.assert_allclose(st.fwd_s[-1, :-1], st.fwd_s[1, 0], rtol=1e-12)
        assert st.fwd_s[-1, -1] < st.fwd_s[-1, 0] + layer  # 1 layer + output layer and loss


@pytest.mark.parametrize("v", [None, 8])
def test_iteration_simulates_with_the_flags(v):
    s = _llama(8, v)
    r = simulate(s).report
    assert np.isfinite(r.iteration_time_s) and r.iteration_time_s > 0
    # 1F1B: every stage's forward holds 16 slots; interleaved: the same 126 layers run
    assert r.model_flops_per_iteration == pytest.approx(
        model_math.model_flops_per_iteration(s.model, s.plan))


def test_memory_per_stage_follows_the_layers():
    s = _llama(8, None)
    m, pl = s.model, s.plan
    n = model_math.params_per_gpu(m, pl)
    sharded, replicated = model_math.family_of(m).layer_parameters(m)
    per_layer = sharded / 8 + replicated
    first, last = model_math.edge_params_per_gpu(m, 8, 8)
    assert n[1] == pytest.approx(16 * per_layer)
    assert n[0] == pytest.approx(15 * per_layer + first)
    assert n[-1] == pytest.approx(15 * per_layer + last)
    mem = model_math.stage_memory(m, pl)
    keep = model_math.activation_bytes_per_layer(m, pl)
    assert mem[1].activations_bytes == pytest.approx(16 * keep * (8 - 1))  # 1F1B: p - i in flight
    # the first stage also keeps the embedding's int64 ids of its 8 micro-batches in flight (no
    # dropout mask: the preset's hidden_dropout is 0)
    assert mem[0].activations_bytes == pytest.approx(15 * keep * 8 + 8 * 8 * 8192)


def test_interleaved_in_flight_weighs_each_chunk_by_its_layers():
    p, v, m = 8, 8, 16
    counts = virtual_stage_layer_counts(126, plan(p, v))
    for i in (0, 1, p - 1):
        layers = tuple(counts[c * p + i] for c in range(v))
        order = schedules.work_order("interleaved", p, m, i, v)
        held, peak = 0, 0
        for ph, c in zip(order.phase.tolist(), order.chunk.tolist()):  # reference: walk the order
            held += layers[c] if ph == schedules.PHASE_F else -layers[c] if ph == schedules.PHASE_B else 0
            peak = max(peak, held)
        got = schedules.in_flight_microbatches("interleaved", p, m, i, v, layers)
        assert got * sum(layers) == pytest.approx(peak)
    s = _llama(8, 8)
    mem = model_math.stage_memory(s.model, s.plan)
    keep = model_math.activation_bytes_per_layer(s.model, s.plan)
    assert mem[0].activations_bytes < 15 / 16 * mem[1].activations_bytes * (
        schedules.in_flight_microbatches("interleaved", 8, s.plan.num_microbatches, 0, 8)
        / schedules.in_flight_microbatches("interleaved", 8, s.plan.num_microbatches, 1, 8))
    assert mem[1].activations_bytes == pytest.approx(
        16 * keep * schedules.in_flight_microbatches("interleaved", 8, s.plan.num_microbatches, 1, 8))


def test_recomputed_layers_per_chunk():
    pl = dataclasses.replace(plan(8, 8), recompute_num_layers=2)
    m = MODEL_PRESETS["Llama 3.1 405B"]
    # chunk 0 of stage 0 and chunk 7 of stage 7 hold one layer: one recomputed there
    assert model_math.recomputed_layers(m, pl).tolist() == [15] + [16] * 6 + [15]


# --------------------------------------------------------------------------- Megatron arguments

BRIDGE_405B = """torchrun --nnodes 64 --nproc-per-node 8 pretrain_gpt.py \\
    --num-layers 126 --hidden-size 16384 --num-attention-heads 128 --ffn-hidden-size 53248 \\
    --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm \\
    --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \\
    --seq-length 8192 --max-position-embeddings 8192 --vocab-size 128256 \\
    --tokenizer-type NullTokenizer --use-flash-attn \\
    --micro-batch-size 1 --global-batch-size 512 \\
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --context-parallel-size 2 \\
    --num-layers-per-virtual-pipeline-stage 2 \\
    --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split \\
    --sequence-parallel --use-distributed-optimizer --bf16 --train-samples 1000
"""


def test_bridge_launch_imports_the_flags(tmp_path):
    path = tmp_path / "llama405b.sh"
    path.write_text(BRIDGE_405B)
    res = import_file(path)
    pl = res.session.plan
    assert pl.account_for_embedding_in_pipeline_split and pl.account_for_loss_in_pipeline_split
    # 128 slots / (8 stages * 2 per virtual stage) = 8 chunks
    assert (pl.schedule, pl.virtual_pipeline_stages, pl.data_parallel) == ("interleaved", 8, 4)
    assert not validate(res.session)
    off = path.with_name("off.sh")
    off.write_text(BRIDGE_405B.replace("--account-for-embedding-in-pipeline-split "
                                       "--account-for-loss-in-pipeline-split", ""))
    with pytest.raises(Exception, match="126 layers do not split into 8 stages of chunks of 2"):
        import_file(off)


@pytest.mark.parametrize("L,p,v,emb,loss", [(126, 8, 8, True, True), (94, 8, None, True, True),
                                            (94, 8, 4, True, True), (127, 8, None, True, False),
                                            (127, 4, 2, False, True)])
def test_round_trip_through_megatron_arguments(tmp_path, L, p, v, emb, loss):
    m = dataclasses.replace(MODEL_PRESETS["Llama 3.1 405B"], num_layers=L)
    pl = dataclasses.replace(plan(p, v, account_for_embedding_in_pipeline_split=emb,
                                  account_for_loss_in_pipeline_split=loss, global_batch_size=8 * p),
                             data_parallel=2)
    s = Session(m, pl, ClusterConfig(gpu="H100-SXM5-80GB"), CostConfig(2.0, 8192 * 1000.0))
    assert not validate(s)
    script = tmp_path / "run.sh"
    text = export_script(s)
    script.write_text(text)
    assert ("--account-for-embedding-in-pipeline-split" in text) == emb
    assert ("--account-for-loss-in-pipeline-split" in text) == loss
    back = import_file(script, name=m.name).session
    assert back.plan == s.plan and back.model == s.model


# --------------------------------------------------------------------------- sweep

def test_sweep_keeps_the_sessions_flags_and_tries_the_slots_divisors():
    m = dataclasses.replace(MODEL_PRESETS["Llama 3.1 405B"], num_layers=94)
    base = dataclasses.replace(plan(8), data_parallel=1, global_batch_size=32)
    s = Session(m, base, ClusterConfig(gpu="H100-SXM5-80GB"), CostConfig())
    space = SweepSpace(tensor_parallel=[8], micro_batch_sizes=[1], schedules=["1f1b", "interleaved"],
                       recompute=["full"], virtual_pipeline_stages=[2, 4], max_gpus=8 * 96)
    plans = enumerate_plans(s, space)
    assert {pl.pipeline_parallel for pl in plans} <= {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96}
    assert {(pl.pipeline_parallel, pl.virtual_pipeline_stages) for pl in plans
            if pl.schedule == "interleaved"} >= {(8, 2), (8, 4), (4, 4), (16, 2)}
    assert all(pl.account_for_embedding_in_pipeline_split and pl.account_for_loss_in_pipeline_split
               for pl in plans)
    assert 8 in {pl.pipeline_parallel for pl in plans}  # 94 = 8*11.75: only with the slots


def _session_of(model, **kw):
    base = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                        micro_batch_size=1, global_batch_size=kw.pop("global_batch_size", 1024),
                        **kw)
    return Session(model, base, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
                   CostConfig())


def _flags(pl):
    return (pl.account_for_embedding_in_pipeline_split, pl.account_for_loss_in_pipeline_split)


def test_sweep_sets_the_flags_where_126_layers_need_them():
    """Llama 3.1 405B, 126 layers: p = 4, 8, 16, ... only with both flags (128 slots, as
    NVIDIA's recipes run it); the (p, v) whose layers split keep the session's flags (off);
    not where a stage would hold the embedding or the loss alone (p = 127 or 128), but under
    the interleaved schedule a virtual stage may (p16 v8: one slot each, NVIDIA's B200 and
    GB200 recipes; the ranks hold layers in their other chunks); no plan twice."""
    s = _session_of(MODEL_PRESETS["Llama 3.1 405B"])
    plans = enumerate_plans(s, SweepSpace(max_gpus=1024, micro_batch_sizes=(1,),
                                          tensor_parallel=(8,)))
    # 4,020 before the flags were set where needed; 7,491 before ZeRO 1-3 were swept at d = 1
    # with cp > 1 (ZeRO shards over d*cp: 1,944 plans); 9,381 (1,890) before one layer slot
    # per virtual stage (p16 v8) was made
    assert len(plans) == 9582
    assert sum(pl.data_parallel == 1 and pl.context_parallel > 1 and pl.zero_stage > 0
               for pl in plans) == 1944
    assert len(set(map(plan_key, plans))) == len(plans)
    by_pv = {}
    for pl in plans:
        by_pv.setdefault((pl.pipeline_parallel, pl.virtual_pipeline_stages), set()).add(_flags(pl))
    for (p, v), flags in by_pv.items():
        n = p * (v or 1)
        if 126 % n == 0:
            assert flags == {(False, False)}, (p, v)
        else:
            assert 128 % n == 0 and 128 // n >= (1 if v else 2) and flags == {(True, True)}, (p, v)
    assert {(8, None), (16, None), (8, 2), (8, 4), (8, 8), (4, 8), (16, 2), (16, 4),
            (16, 8)} <= set(by_pv)
    assert not {127, 128} & {p for p, _ in by_pv}


def test_sweep_keeps_a_flag_the_session_sets():
    """The session counts the embedding (127 slots): every 1F1B plan keeps it; where 127 does
    not split the loss's slot is added (128), never the embedding's dropped (126: only where
    neither 127 nor 128 splits, tests/test_sweep_uneven.py)."""
    s = _session_of(MODEL_PRESETS["Llama 3.1 405B"], account_for_embedding_in_pipeline_split=True)
    plans = enumerate_plans(s, SweepSpace(max_gpus=1024, micro_batch_sizes=(1,),
                                          tensor_parallel=(8,), schedules=("1f1b",)))
    assert all(pl.account_for_embedding_in_pipeline_split for pl in plans)
    assert {pl.pipeline_parallel for pl in plans if pl.account_for_loss_in_pipeline_split} == \
        {2, 4, 8, 16, 32, 64}
    # p = 127: the session's 127 slots split, one per stage (its choice)
    assert {pl.pipeline_parallel for pl in plans} == {1, 2, 4, 8, 16, 32, 64, 127}


def test_sweep_of_layers_that_split_adds_no_plan():
    """Llama 3 70B, 80 layers, on exactly 512 GPUs: every (p, v) tried splits the layers (81
    and 82 slots split over no power of two a plan of 512 GPUs has), so the plans and their
    count are those of the sweep before the flags were set where needed (12,312; the
    context-parallel exchange held at the ring, as then: a2a adds 3,312 plans with cp > 1), and
    the 1,656 ZeRO 1-3 plans at d = 1 with cp > 1 swept since (ZeRO shards over d*cp)."""
    s = _session_of(MODEL_PRESETS["Llama 3 70B"])
    plans = enumerate_plans(s, SweepSpace(num_gpus=(512,), micro_batch_sizes=(1, 2),
                                          cp_comm_type=("p2p",)))
    assert len(plans) == 12312 + 1656
    assert sum(pl.data_parallel == 1 and pl.context_parallel > 1 and pl.zero_stage > 0
               for pl in plans) == 1656
    assert not any(any(_flags(pl)) for pl in plans)


def _run_126(**space):
    from core.studies.sweep import run_sweep
    s = _session_of(dataclasses.replace(MODEL_PRESETS["Llama 3.1 405B"], seq_length=8192),
                    global_batch_size=256)
    return run_sweep(s, SweepSpace(**{**dict(tensor_parallel=(8,), micro_batch_sizes=(1,),
                                                 recompute=("none", "full"),
                                                 hold_session_values=True), **space}),
                     prune=False)


def test_sweep_rows_of_the_added_flags_equal_simulate():
    """The 126-layer plans of p = 8 and 16 (both flags, 1F1B and interleaved) that the sweep
    adds: their iteration time, memory and cost are those of ``vtrain simulate`` (the batch
    solver, the memory prefilter and the stage times read the flags of each plan)."""
    from tests.test_sweep import check_against_simulate
    result = _run_126(num_gpus=(1024,), pipeline_parallel=(8, 16),
                      schedules=("1f1b", "interleaved"), virtual_pipeline_stages=(2, 4, 8),
                      zero_stages=(1,), sequence_parallel=(True,), context_parallel=(1, 2))
    assert result.num_plans > 0
    assert set(result.pipeline_parallel.tolist()) == {8, 16}
    assert result.account_for_embedding_in_pipeline_split.all()
    assert result.account_for_loss_in_pipeline_split.all()
    # 23 fit (19 before the Llama preset trained without dropout masks, 20 of 28 before p16 v8,
    # one layer slot per virtual stage, was made: 3 of its 4 fit): one of them only once
    # the allocator frees its cache (tight, over the capacity with the reserve:
    # docs/simulator.md, the memory verdict)
    assert result.num_plans == 32 and result.fits_in_memory.sum() == 23
    over = result.fits_in_memory & (result.max_memory_per_gpu_bytes > result.memory_capacity_bytes)
    assert over.sum() == 1 and (result.memory_verdict[over] == "tight").all()
    assert {(p, sched) for p, sched, fits in zip(result.pipeline_parallel.tolist(),
                                                 result.schedule.tolist(),
                                                 result.fits_in_memory.tolist()) if fits} == \
        {(8, "1f1b"), (8, "interleaved"), (16, "1f1b"), (16, "interleaved")}
    check_against_simulate(result, range(result.num_plans))
    dims = {d["field"]: d for d in result.dimensions}
    for f in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        assert not dims[f]["swept"] and dims[f]["values"] == [True]
        assert dims[f]["note"].startswith("set where the layers need it")


def test_sweep_tries_each_flag_alone_for_one_more_slot_and_says_so(capsys):
    """23 layers: L + 1 = 24 slots split over p = 2, 3, 4, 6, 8 with the loss's slot (the
    last stage's, the faster), L + 2 = 25 over p = 5 with both; p = 1 and 23 split without;
    each row equals simulate; the dimensions and the command line name the flags."""
    from tests.test_sweep import check_against_simulate
    from core.studies.sweep import run_sweep
    from core.cli.sweep import print_dimensions
    from rich.console import Console
    m = dataclasses.replace(MODEL_PRESETS["GPT-3 1.3B"], num_layers=23)
    s = Session(m, ParallelPlan(2, 1, 1, 1, 32, "1f1b", "full", "bf16"), ClusterConfig(),
                CostConfig(2.0, 1e9))
    result = run_sweep(s, SweepSpace(hold_session_values=True, max_gpus=16,
                                     tensor_parallel=(2,), micro_batch_sizes=(1,),
                                     schedules=("1f1b",)), prune=False)
    got = {}
    for p, e, lo in zip(result.pipeline_parallel.tolist(),
                        result.account_for_embedding_in_pipeline_split.tolist(),
                        result.account_for_loss_in_pipeline_split.tolist()):
        got.setdefault(p, set()).add((e, lo))
    both, each, none = {(True, True)}, {(False, True)}, {(False, False)}
    assert got == {1: none, 2: each, 3: each, 4: each, 5: both, 6: each, 8: each}
    check_against_simulate(result, range(result.num_plans))
    dims = {d["field"]: d for d in result.dimensions}
    assert dims["account_for_embedding_in_pipeline_split"]["swept"]
    assert "L + 1 or L + 2" in dims["account_for_loss_in_pipeline_split"]["why"]
    console = Console(width=2000, force_terminal=False, color_system=None)
    print_dimensions(result.dimensions, result.session.plan, console)
    out = capsys.readouterr().out
    assert "emb_split n, y (set where the layers need it" in out
    assert "loss_split n, y (set where the layers need it" in out
