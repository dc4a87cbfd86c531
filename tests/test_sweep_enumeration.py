"""The sweep's enumeration is exact: the memoized checks (core.plan.verdicts) and the plans built
without dataclasses.replace give the plans, in the order, of the enumeration that validated
every candidate (kept here as the reference), on spaces of every kind: dense, interleaved
with uneven stages and recomputed layers, context parallel (every exchange named), expert
parallel with the expert all-to-all overlap, zero-bubble schedules, held session values, a
custom pipeline layout, numpy sizes; and PlanVerdicts answers validate's question on random plans, valid or not."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan, plan_key
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import ep_overlap_errors, validate
from core.plan.session import Session
from core.plan.verdicts import PlanVerdicts
from core.schedules import get as schedules_get, schedule_errors
from core.plan.layout import capped_recompute_layers
from core.plan.fields import check_value
from core.studies.sweep.space import (SweepSpace, _Choices, check_enumerable, enumerate_plans,
                                      one_stage_schedule)
from core.studies.sweep.variants import (CHECKED_SWEPT_FIELDS, SWEPT_FIELDS, overlap_choices,
                                         sweep_verdicts)


def _reference_enumerate(session: Session, space: SweepSpace) -> list[ParallelPlan]:
    """The enumeration before its checks were memoized: every candidate built by
    dataclasses.replace and validated alone (its swept fields one by one, then
    validate(sections=())), in the same loops."""
    check_enumerable(session, space)
    c = _Choices.of(session, space)
    base_fields = {f.name: f for f in dataclasses.fields(session.plan)}
    if any(check_value(n, f, getattr(session.plan, n)) for n, f in base_fields.items()
           if n not in SWEPT_FIELDS):
        return []

    def checks(plan):  # each swept field's value alone
        return all(check_value(n, base_fields[n], getattr(plan, n)) is None
                   for n in CHECKED_SWEPT_FIELDS)
    m, B = session.model, session.plan.global_batch_size
    out: list[ParallelPlan] = []
    for t in c.ts:
        for p in c.ps:
            for cp in c.cps:
                ds = c.data_parallel_sizes(space, t * p * cp, B)
                sps_t = ([t > 1 and m.seq_length % t == 0] if c.sps is None
                         else c.sps[:1] if t == 1 else c.sps)
                scheds_p = c.scheds if p > 1 else [one_stage_schedule(c.scheds)]
                splits = _reference_uneven_splits(session, p)
                for d, ep in ((d, ep) for d in ds for ep in c.eps):
                    zs_d = c.zs[:1] if d * cp == 1 else c.zs
                    for b in c.bs:
                        if B % (d * b):
                            continue
                        for sched in scheds_p:
                            for v in c.virtual_sizes(space, sched, p):
                                flag_sets = (_reference_split_flags(session, sched, p, v)
                                             if splits == [(None, None)]
                                             else [_own_flags(session)] if _own_p(session, p)
                                             else [(False, False)])
                                if schedule_errors(sched, p, B // (d * b), v,
                                                   m.num_layers if c.layout_n is None else None,
                                                   sum(flag_sets[0])):
                                    continue
                                for flags in flag_sets:
                                    for split in splits:
                                        out += _reference_variants(
                                            session, c, checks, (t, p, cp, ep, d, b, sched, v),
                                            sps_t, zs_d, flags, split)
    return out


def _own_flags(session):
    base = session.plan
    return (base.account_for_embedding_in_pipeline_split, base.account_for_loss_in_pipeline_split)


def _own_p(session, p):
    """Whether p is the session's own and it sets uneven first / last stages."""
    base = session.plan
    return p == base.pipeline_parallel and (base.first_stage_layers is not None
                                            or base.last_stage_layers is not None)


def _supersets(own):
    """The (embedding, loss) flags a sweep may add to the session's ``own``: a true one kept
    true; one more where the session sets none: the loss's."""
    return [(e, lo) for e in (False, True) for lo in (False, True)
            if (e, lo) != own and e >= own[0] and lo >= own[1]
            and not (own == (False, False) and (e, lo) == (True, False))]


def _reference_uneven_splits(session, p):
    """The (first, last) stage layers of the plans of p: the session's at its own p when it
    sets them; else, where the session sets no custom layout and over p split evenly neither
    its layer slots (L + its flags) nor the slots of more flags (two slots or more per stage
    with slots added) nor, when it sets a flag, the L layers alone, Megatron-style uneven
    stages (the flags off): ceil(L/p) layers on each of the p - 2 middle stages (one fewer
    where that leaves no pair), the rest on the first and last, 1 <= last <= first <=
    ceil(L/p), those whose first and last differ by one at most, then the one with ceil(L/p)
    on the first; (None, None) otherwise (an even split)."""
    base, L = session.plan, session.model.num_layers
    if _own_p(session, p):
        return [(base.first_stage_layers, base.last_stage_layers)]
    if base.pipeline_model_parallel_layout:
        return [(None, None)]
    own = _own_flags(session)
    counts = [(L + sum(own), 0)] + [(L + sum(f), sum(f) - sum(own)) for f in _supersets(own)]
    counts += [(L, -sum(own))] if any(own) else []
    if any(n % p == 0 and (extra <= 0 or n // p >= 2) for n, extra in counts):
        return [(None, None)]
    k = -(-L // p)
    pairs = []
    for middle in ((k, k - 1) if p >= 3 and k > 1 else (k,) if p >= 3 else ()):
        rest = L - (p - 2) * middle
        pairs = [(f, rest - f) for f in range(1, k + 1) if 1 <= rest - f <= f]
        if pairs:
            break
    out = [fl for fl in pairs if fl[0] - fl[1] <= 1] + [fl for fl in pairs if fl[0] == k
                                                       and fl[0] - fl[1] > 1]
    return out or [(None, None)]


def _reference_split_flags(session, sched, p, v):
    """The (embedding, loss) flags of the plans of (sched, p, v): the session's where its
    layer slots split over the p*chunks virtual stages (or it has a custom layout, or uneven
    first / last stages at its own p); else every way of setting more flags (a true one kept
    true; one more where the session sets none: the loss's) that adds the fewest slots and
    splits, two slots or more per virtual stage (one under the interleaved schedule with two or
    more chunks per rank, whose other chunks hold layers); else both off where the session
    sets one and the L layers split; the session's when none does."""
    base, L = session.plan, session.model.num_layers
    own = (base.account_for_embedding_in_pipeline_split, base.account_for_loss_in_pipeline_split)
    chunks = schedules_get(sched).chunks(v)
    n = p * chunks
    least = 1 if schedules_get(sched).uses_virtual_stages and chunks > 1 else 2
    if ((L + sum(own)) % n == 0 or base.pipeline_model_parallel_layout
            or (p == base.pipeline_parallel and (base.first_stage_layers is not None
                                                  or base.last_stage_layers is not None))):
        return [own]
    more = sorted((f for f in _supersets(own) if (L + sum(f)) % n == 0
                   and (L + sum(f)) // n >= least), key=sum)
    if more:
        return [f for f in more if sum(f) == sum(more[0])]
    return [(False, False)] if any(own) and L % n == 0 else [own]


def _reference_variants(session, c, checks, sizes, sps_t, zs_d, flags, split=(None, None)):
    t, p, cp, ep, d, b, sched, v = sizes
    m, cl, base = session.model, session.cluster, session.plan
    out = []
    disps = c.disps if ep > 1 else [base.moe_token_dispatcher_type]
    cpcs = c.cpcs if cp > 1 else [(base.cp_comm_type, base.cp_a2a_size)]
    # the expert tensor-parallel sizes: at t > 1 one of each size (unset is t), the first kept
    etps = c.etps[:1]
    if t > 1:
        etps, sizes_seen = [], set()
        for e in c.etps:
            if (t if e is None else e) not in sizes_seen:
                sizes_seen.add(t if e is None else e)
                etps.append(e)
    for rc, (cpc, a2a), disp, etp, (ce, impl) in (
            (rc, x, disp, etp, ce) for rc in c.rcs for x in cpcs for disp in disps
            for etp in etps for ce in c.ces):
        for sp, z, tpo, og, op in overlap_choices(
                sps_t, zs_d, c.tpos, c.dpos, t, d * cp,
                1 < t <= cl.gpus_per_node and not c.mla,
                (base.overlap_grad_reduce, base.overlap_param_gather)):
            plan = dataclasses.replace(
                base, tensor_parallel=t, pipeline_parallel=p, context_parallel=cp,
                expert_parallel=ep, data_parallel=d, micro_batch_size=b, schedule=sched,
                virtual_pipeline_stages=v, recompute=rc, sequence_parallel=sp, zero_stage=z,
                recompute_num_layers=(base.recompute_num_layers if rc == "full" else None),
                first_stage_layers=split[0], last_stage_layers=split[1],
                recompute_modules=(base.recompute_modules if rc == "selective" else None),
                tp_comm_overlap=tpo, overlap_grad_reduce=og, overlap_param_gather=op,
                moe_token_dispatcher_type=disp, expert_tensor_parallel=etp,
                cp_comm_type=cpc, cp_a2a_size=a2a,
                cross_entropy_loss_fusion=ce,
                cross_entropy_fusion_impl=impl, account_for_embedding_in_pipeline_split=flags[0],
                account_for_loss_in_pipeline_split=flags[1])
            if plan.recompute_num_layers is not None:
                plan = capped_recompute_layers(plan, m.num_layers, m.mtp_num_layers or 0)
            for ov in c.ovs:
                cand = plan
                if (ov != plan.overlap_moe_expert_parallel_comm
                        or (c.delay and ov) != plan.delay_wgrad_compute):
                    cand = dataclasses.replace(plan, overlap_moe_expert_parallel_comm=ov,
                                               delay_wgrad_compute=c.delay and ov)
                if ov and ep_overlap_errors(m, cand):
                    if False in c.ovs:
                        continue
                    cand = dataclasses.replace(cand, overlap_moe_expert_parallel_comm=False,
                                               delay_wgrad_compute=False)
                if checks(cand) and not validate(
                        Session(m, cand, cl, session.cost), sections=(), model_checked=True):
                    out.append(cand)
    return out


def _session(model: str, gpu: str = "H100-SXM5-80GB", seq: int | None = None, **plan) -> Session:
    m = MODEL_PRESETS[model]
    if seq is not None:
        m = dataclasses.replace(m, seq_length=seq)
    kw = dict(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
              global_batch_size=512)
    kw.update(plan)
    return Session(m, ParallelPlan(**kw), ClusterConfig(gpu=gpu, gpus_per_node=8))


CASES = {
    "dense": (_session("GPT-3 13B"), SweepSpace(max_gpus=128, micro_batch_sizes=(1, 2, 4))),
    "interleaved, uneven, recomputed layers": (
        _session("Llama 3 8B", pipeline_parallel=4, first_stage_layers=7,
                 recompute_num_layers=3, recompute_modules="core_attn,mlp"),
        SweepSpace(max_gpus=64, micro_batch_sizes=(1, 2), schedules=("1f1b", "interleaved"),
                   sequence_parallel=(False, True), tp_comm_overlap=(False, True))),
    "context parallel": (_session("Llama 3 8B", seq=32768, global_batch_size=64),
                         SweepSpace(max_gpus=128, micro_batch_sizes=(1,))),
    "context parallel, every exchange named": (
        _session("Llama 3 8B", seq=65536, global_batch_size=64, cp_comm_type="a2a+p2p",
                 cp_a2a_size=2),
        SweepSpace(max_gpus=64, micro_batch_sizes=(1,), recompute=("selective", "full"),
                   cp_comm_type=("p2p", "a2a", "a2a+p2p", "all_gather", "allgather"))),
    "expert parallel, all-to-all overlap": (
        _session("Qwen3-30B-A3B", global_batch_size=256, delay_wgrad_compute=True,
                 overlap_moe_expert_parallel_comm=True),
        SweepSpace(max_gpus=16, micro_batch_sizes=(2,), expert_parallel=(1, 2, 8),
                   recompute=("selective", "full"), overlap_moe_expert_parallel_comm=(False, True))),
    "expert parallel, overlap on only": (
        _session("Mixtral 8x7B", seq=4096, global_batch_size=128),
        SweepSpace(max_gpus=32, micro_batch_sizes=(1,),
                   overlap_moe_expert_parallel_comm=(True,), recompute=("none", "full"))),
    "zero bubble, overlaps both ways": (
        _session("GPT-3 6.7B", overlap_grad_reduce=True),
        SweepSpace(max_gpus=64, micro_batch_sizes=(1, 4), schedules=("zb-h1", "zb-v", "gpipe"),
                   zero_stages=(0, 3), dp_overlap=(False, True), tp_comm_overlap=(False, True),
                   sequence_parallel=(False, True))),
    "held session values": (
        _session("Llama 2 7B", sequence_parallel=True, zero_stage=1, tp_comm_overlap=True,
                 overlap_grad_reduce=True),
        SweepSpace(max_data_parallel=16, micro_batch_sizes=(1, 2), hold_session_values=True)),
    "custom layout, MLA, MTP": (
        _session("DeepSeek-V3", global_batch_size=1024, pipeline_parallel=16,
                 pipeline_model_parallel_layout="Et|(tt|)*30mL"),
        SweepSpace(max_gpus=1024, micro_batch_sizes=(1,), recompute=("selective", "full"))),
    "numpy sizes, one exact count": (
        _session("GPT-3 2.7B", precision="fp16"),
        SweepSpace(num_gpus=(32,), tensor_parallel=(np.int64(2), 4, 1),
                   micro_batch_sizes=(1, np.int64(2)), zero_stages=(0, 1))),
    "126 layers: embedding / loss slots where the layers need them": (
        _session("Llama 3.1 405B", global_batch_size=64),
        SweepSpace(max_gpus=1024, micro_batch_sizes=(1,), recompute=("full",),
                   schedules=("1f1b", "interleaved", "zb-v"))),
    "the session's embedding slot kept, the loss's added where needed": (
        _session("Llama 3.1 405B", global_batch_size=64,
                 account_for_embedding_in_pipeline_split=True),
        SweepSpace(max_gpus=1024, micro_batch_sizes=(1,), recompute=("full",),
                   schedules=("1f1b", "interleaved"), virtual_pipeline_stages=(2, 4))),
    "61 layers: uneven first / last stages where p splits them unevenly": (
        _session("DeepSeek-V3", global_batch_size=64),
        SweepSpace(max_gpus=128, micro_batch_sizes=(1,), recompute=("full",),
                   expert_parallel=(1, 8), schedules=("1f1b", "interleaved", "zb-h1"),
                   zero_stages=(1,))),
    "61 layers, the session's loss slot: off with uneven stages where no slot count splits": (
        _session("DeepSeek-V3", global_batch_size=64, account_for_loss_in_pipeline_split=True),
        SweepSpace(max_gpus=128, micro_batch_sizes=(1,), recompute=("full",),
                   expert_parallel=(8,), schedules=("1f1b", "interleaved"), zero_stages=(1,))),
    "80 layers, the session's loss slot: off where only the layers split": (
        _session("Llama 3 70B", global_batch_size=64, account_for_loss_in_pipeline_split=True),
        SweepSpace(max_gpus=64, tensor_parallel=(4, 8), micro_batch_sizes=(1,),
                   recompute=("full",), schedules=("1f1b", "interleaved"), zero_stages=(1,))),
    "105 layers: the session's own first / last at its p, Megatron-style at the others": (
        _session("MT-NLG 530B", global_batch_size=64, pipeline_parallel=8, first_stage_layers=9,
                 last_stage_layers=12, tensor_parallel=8),
        SweepSpace(max_gpus=512, tensor_parallel=(8,), micro_batch_sizes=(1,),
                   recompute=("full",), schedules=("1f1b", "interleaved"), zero_stages=(1,))),
    "expert tensor-parallel sizes: the session's 2, t and 1": (
        _session("Qwen3-30B-A3B", global_batch_size=64, expert_tensor_parallel=2),
        SweepSpace(max_gpus=16, tensor_parallel=(1, 2, 4), micro_batch_sizes=(1,),
                   recompute=("none",), schedules=("1f1b",), zero_stages=(1,))),
    "a held field breaks a rule": (_session("GPT-3 1.3B", moe_imbalance_factor=2.0),
                                   SweepSpace(max_gpus=16)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_enumeration_equals_the_reference(name):
    session, space = CASES[name]
    want = [plan_key(p) for p in _reference_enumerate(session, space)]
    got_plans = enumerate_plans(session, space)
    assert [plan_key(p) for p in got_plans] == want
    assert all(type(p) is ParallelPlan and not hasattr(p, "__dict__") for p in got_plans)
    assert len({id(p) for p in got_plans}) == len(got_plans)  # no plan shared
    if name != "a held field breaks a rule":
        assert want, "a space with plans"


def test_one_verdict_cache_for_several_enumerations():
    """One sweep_verdicts for every b (run_sweep's b by b) and every space of a session gives
    each enumeration its own plans."""
    session = _session("Llama 3 8B", seq=16384, global_batch_size=128)
    verdicts = sweep_verdicts(session)
    for space in (SweepSpace(max_gpus=64, micro_batch_sizes=(b,)) for b in (1, 2, 4)):
        want = [plan_key(p) for p in _reference_enumerate(session, space)]
        assert [plan_key(p) for p in enumerate_plans(session, space, verdicts=verdicts)] == want
    space = SweepSpace(max_gpus=32, micro_batch_sizes=(1, 2), sequence_parallel=(False, True),
                       schedules=("gpipe", "interleaved"))
    want = [plan_key(p) for p in _reference_enumerate(session, space)]
    assert [plan_key(p) for p in enumerate_plans(session, space, verdicts=verdicts)] == want


def _random_plan(rng: random.Random) -> ParallelPlan:
    """A random plan, each field its first value here four times in five (a valid plan
    now and then), else any."""
    def pick(values):
        return values[0] if rng.random() < 0.8 else rng.choice(values)
    return ParallelPlan(
        tensor_parallel=pick([1, 2, 4, 8, 16, 3]), pipeline_parallel=pick([1, 2, 4, 8, 5]),
        data_parallel=pick([1, 2, 3, 4, 8]), micro_batch_size=pick([1, 2, 4]),
        global_batch_size=pick([64, 96, 128]), schedule=pick(["1f1b", "gpipe", "interleaved",
                                                              "zb-h1", "zb-v"]),
        recompute=pick(["none", "selective", "full", "selective_op"]),
        precision=pick(["bf16", "fp16", "fp8", "fp32"]),
        virtual_pipeline_stages=pick([None, 2, 3, 4]),
        sequence_parallel=pick([False, True]), recompute_num_layers=pick([None, 1, 2, 40]),
        zero_stage=pick([0, 1, 2, 3]), overlap_grad_reduce=pick([False, True]),
        overlap_param_gather=pick([False, True]), tp_comm_overlap=pick([False, True]),
        first_stage_layers=pick([None, None, 3]), context_parallel=pick([1, 2, 4]),
        cp_comm_type=pick(["p2p", "a2a", "a2a+p2p", "all_gather"]),
        cp_a2a_size=pick([None, 2]), expert_parallel=pick([1, 2, 4]),
        expert_tensor_parallel=pick([None, 1]), recompute_modules=pick([None, "core_attn,mlp",
                                                                        "moe", "mla_up_proj"]),
        data_parallel_shard_size=pick([None, 2]), fp8_param_gather=pick([False, True]),
        overlap_moe_expert_parallel_comm=pick([False, True]),
        delay_wgrad_compute=pick([False, True]), fp8_recipe=pick([None, "mxfp8"]),
        grad_reduce_dtype=pick([None, "bf16", "fp16"]))


@pytest.mark.parametrize("model", ["Llama 3 8B", "Qwen3-30B-A3B", "DeepSeek-V3"])
def test_plan_verdicts_equal_validate_on_random_plans(model):
    """valid and valid_among against validate(sections=(), model_checked=True) on 3,000 random
    plans, most of them invalid (every rule group breaks on some), checked in random order so
    that the verdicts are learnt and recalled in every order."""
    m = dataclasses.replace(MODEL_PRESETS[model], seq_length=4096)
    cl = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8)
    rng = random.Random(7)
    plans = [_random_plan(rng) for _ in range(3000)]
    want = [not validate(Session(m, p, cl), sections=(), model_checked=True) for p in plans]
    assert 0 < sum(want) < len(want)
    verdicts = PlanVerdicts(m, cl)
    assert [verdicts.valid(p) for p in plans] == want
    # variants of one set of sizes: every field but a few fixed to one plan's
    varying = ("recompute", "sequence_parallel", "zero_stage", "tp_comm_overlap",
               "overlap_grad_reduce", "overlap_param_gather", "recompute_modules")
    among = PlanVerdicts(m, cl)
    for k in range(0, len(plans), 10):
        base = plans[k]
        group = [dataclasses.replace(base, **{f: getattr(q, f) for f in varying})
                 for q in plans[k:k + 10]]
        truth = [not validate(Session(m, q, cl), sections=(), model_checked=True)
                 for q in group]
        assert among.valid_among(group, varying) == truth
        assert among.valid_among(group, varying) == truth  # recalled


def test_zero_stages_are_swept_at_d_1_with_context_parallelism():
    """ZeRO shards over the data- and context-parallel ranks (d*cp, zero_shard_size): at d = 1
    with cp = 8 the default space tries every stage, and ZeRO-3 puts Llama 2 7B at 32k tokens on
    8 GPUs where ZeRO 0 does not fit (the new user's case: "cp 8: none of its plans fits");
    at d*cp = 1 one stage stays (ZeRO changes nothing)."""
    from core.studies.sweep import run_sweep
    model = dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], seq_length=32768)
    session = Session(model, ParallelPlan(1, 1, 8, 1, 8, "1f1b", "none", "bf16"),
                      ClusterConfig(gpu="H100-SXM5-80GB"))
    space = SweepSpace(num_gpus=8, tensor_parallel=(1,), pipeline_parallel=(1,),
                       context_parallel=(1, 8), micro_batch_sizes=(1,), recompute=("none",))
    plans = enumerate_plans(session, space)
    at: dict[tuple[int, int], set[int]] = {}
    for pl in plans:
        at.setdefault((pl.data_parallel, pl.context_parallel), set()).add(pl.zero_stage)
    at = {k: sorted(v) for k, v in at.items()}
    assert at[(1, 8)] == [0, 1, 2, 3] and at[(8, 1)] == [0, 1, 2, 3]
    r = run_sweep(session, space, workers=1)
    cp8 = [i for i, pl in enumerate(r.plans) if pl.context_parallel == 8]
    fits = {r.plans[i].zero_stage: bool(r.fits_in_memory[i]) for i in cp8}
    assert not fits[0] and fits[3]


def test_interleaved_plans_may_give_the_embedding_and_the_loss_a_virtual_stage_each():
    """Megatron-Bridge's Llama 3.1 405B recipes on B200 and GB200 run t4 p16 v8 with both
    layer-slot flags: 126 layers + 2 = 128 slots over 128 virtual stages, one each. Under the
    interleaved schedule the ranks of the embedding's and the loss's chunks hold layers in
    their other chunks, so the sweep tries it (it required two slots per virtual stage, and
    its best plan was 1 % slower than NVIDIA's); without interleaving a stage of the
    embedding alone would be GPUs without a layer, and ZB-V puts the first and last chunks on
    one rank: two slots there still."""
    from core.studies.sweep.splits import slots_split
    assert slots_split(128, 128, 2, interleaved=True)
    assert not slots_split(128, 128, 2) and not slots_split(128, 128, 2, interleaved=False)
    assert slots_split(128, 64, 2)  # two per virtual stage: either way
    s = Session(MODEL_PRESETS["Llama 3.1 405B"],
                ParallelPlan(tensor_parallel=4, pipeline_parallel=16, data_parallel=2,
                             micro_batch_size=1, global_batch_size=768, recompute="none",
                             precision="bf16", sequence_parallel=True, zero_stage=1),
                ClusterConfig(gpu="B200-180GB", gpus_per_node=8))
    plans = enumerate_plans(s, SweepSpace(num_gpus=128, tensor_parallel=[4],
                                          pipeline_parallel=[16], schedules=["interleaved"],
                                          recompute=["none"], micro_batch_sizes=[1]))
    v8 = [pl for pl in plans if pl.virtual_pipeline_stages == 8]
    assert v8 and all(pl.account_for_embedding_in_pipeline_split
                      and pl.account_for_loss_in_pipeline_split for pl in v8)
