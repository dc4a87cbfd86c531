"""The default space's cross-entropy (Transformer Engine's fused kernels, held): what the
summary says of it, and that the session's own plan, added to a sweep of another
cross-entropy, brings no plans of its own cross-entropy with it.

A trial user's Llama 3 70B session (cross-entropy off, t=8 full recomputation on 8 GPUs) swept
on 8 GPUs showed ``cross_entropy_loss_fusion [False, True]``: the partial recomputation of
the session's own plan (added to be simulated) was a swept plan with the session's
cross-entropy. Its Llama 3 8B sweep's held line said ``ce_fusion y (the only valid value ...);
ce_impl te (the only valid value ...)``, where native is valid: the default space holds one
value. And ``--pick fastest --out X.json`` wrote a plan that ``vtrain export megatron-args``
then refused (rule cross-entropy-te) without a word at the pick."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from core.cli import main
from core.io.session import save_session
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.studies.sweep import SweepSpace, run_sweep

TINY = ModelConfig("tiny", num_layers=4, hidden_size=64, num_attention_heads=8,
                   ffn_hidden_size=None, seq_length=32, vocab_size=1000)


def _session(model: ModelConfig = TINY, **plan) -> Session:
    return Session(model, dataclasses.replace(
        ParallelPlan(1, 1, 1, 1, 8, "1f1b", "none", "bf16"), **plan),
        ClusterConfig(gpus_per_node=4),
        CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e9))


def test_the_session_plan_added_brings_no_partial_recomputation_of_its_own():
    # the session's plan recomputes every layer of its one stage (4 layers) with the
    # cross-entropy off; the default space holds te, so the plan is added (not enumerated)
    s = _session(recompute="full")
    res = run_sweep(s, SweepSpace(num_gpus=1, micro_batch_sizes=(1,), schedules=("1f1b",)))
    own = res.index_of(s.plan)
    assert own is not None
    off = [i for i in range(res.num_plans) if res.plans[i].cross_entropy_loss_fusion is False]
    assert off == [own]  # was [own, the own plan recomputing 1 layer]
    # the space's full plans still get their partial recomputations (1 layer of 4 fits)
    assert any(res.plans[i].recompute_num_layers == 1 and res.plans[i].cross_entropy_fusion_impl
               == "te" for i in range(res.num_plans))
    dims = {d["field"]: d for d in res.dimensions}
    assert dims["cross_entropy_loss_fusion"]["values"] == [True]
    assert dims["cross_entropy_fusion_impl"]["values"] == ["te"]


def test_the_held_cross_entropy_says_the_default_holds_it_not_that_it_is_the_only_valid():
    s = _session()
    res = run_sweep(s, SweepSpace(num_gpus=2, micro_batch_sizes=(1,), schedules=("1f1b",)))
    dims = {d["field"]: d for d in res.dimensions}
    assert dims["cross_entropy_loss_fusion"]["why"] == (
        "held at the default, not the session's n: on (Megatron-Bridge's recipes)")
    assert dims["cross_entropy_fusion_impl"]["why"].startswith(
        "held at the default, not the session's native: te, Transformer Engine's kernels")
    # the session holding te itself: the default's value, the session's too
    s_te = _session(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te")
    res = run_sweep(s_te, SweepSpace(num_gpus=2, micro_batch_sizes=(1,), schedules=("1f1b",)))
    dims = {d["field"]: d for d in res.dimensions}
    assert dims["cross_entropy_fusion_impl"]["why"].startswith(
        "held at the default, the session's too: te")
    # one value given: the value given; two choices that share the fusion flag: given too
    res = run_sweep(s, SweepSpace(num_gpus=2, micro_batch_sizes=(1,), schedules=("1f1b",),
                                  cross_entropy_fusion=("native", "te")))
    dims = {d["field"]: d for d in res.dimensions}
    assert (dims["cross_entropy_loss_fusion"]["values"], dims["cross_entropy_loss_fusion"]["why"]
            ) == ([True], "the value given")
    assert dims["cross_entropy_fusion_impl"]["values"] == ["native", "te"]
    assert dims["micro_batch_size"]["why"] == "the value given"
    # a value the rules leave alone of several the default tries is still "the only valid"
    assert dims["expert_parallel"]["why"].startswith("the only valid value; default: ")


def test_a_picked_plan_megatron_lm_refuses_is_said_at_the_pick_and_the_options_export(
        tmp_path, capsys):
    cfg, out = tmp_path / "s.json", tmp_path / "x.json"
    save_session(_session(), cfg)
    base = ["sweep", str(cfg), "--gpus", "2", "--micro-batch-sizes", "1", "--workers", "1",
            "--pick", "fastest", "--out", str(out)]
    assert main(base) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Megatron-LM cannot run the picked plan (--cross-entropy-fusion-impl te is "
            "disabled; use native): vtrain export megatron-args refuses it; "
            "--cross-entropy-fusion native --schedules 1f1b,interleaved keeps the sweep to "
            "plans it runs") in text
    assert json.loads(out.read_text())["plan"]["cross_entropy_fusion_impl"] == "te"
    assert main(["export", "megatron-args", str(out)]) == 2
    assert "cross-entropy-te" in capsys.readouterr().err
    # the options said: the picked plan exports, and the pick says nothing
    assert main(base + ["--cross-entropy-fusion", "native",
                        "--schedules", "1f1b,interleaved"]) == 0
    assert "Megatron-LM cannot run" not in capsys.readouterr().out
    plan = json.loads(out.read_text())["plan"]
    assert (plan["cross_entropy_loss_fusion"], plan["cross_entropy_fusion_impl"]) == (
        True, "native")
    assert main(["export", "megatron-args", str(out)]) == 0
    assert "--cross-entropy-fusion-impl native" in capsys.readouterr().out


def test_the_best_plan_of_a_value_is_one_where_the_field_acts():
    """The best plan of ``cp_comm p2p`` was a plan without context parallelism (t=4 p=1 d=64,
    no cp: its exchange is the session's, unused), and of ``sp n`` a plan at t = 1. Each value
    of the exchange, the dispatcher and sequence parallelism now has the best of the plans
    where the field acts (cp > 1, ep > 1, t > 1), and the others are the value "-" (None), as
    v is without the interleaved schedule; pruning keeps the same groups (exact: the
    exhaustive sweep's answers)."""
    from core.studies.sweep.result import best_row
    s = _session(dataclasses.replace(TINY, attention_kernel="flash"))  # ring attention: TE's
    space = SweepSpace(num_gpus=4, micro_batch_sizes=(1,), schedules=("1f1b",),
                       recompute=("none",), zero_stages=(1,))
    res = run_sweep(s, space)
    best = res.best_by()
    n = res.num_plans
    cp = np.array([res.plans[i].context_parallel for i in range(n)])
    t = np.array([res.plans[i].tensor_parallel for i in range(n)])
    exch = np.array([res.plans[i].cp_comm_type for i in range(n)], dtype=object)
    assert set(cp.tolist()) >= {1, 2} and set(t.tolist()) >= {1, 2}

    def fastest(mask):
        i = best_row(res.training_days, res.cost_usd, res.feasible & mask,
                     res.max_memory_per_gpu_bytes)
        return None if i is None else res.plans[i].label()

    rows = {r["value"]: r["plan"] for r in best["cp_comm_type"]}
    assert set(rows) == {"a2a", "p2p", None}
    for value in ("a2a", "p2p"):
        assert rows[value]["context_parallel"] > 1 and rows[value]["cp_comm_type"] == value
        assert res.plans[res.index_of(ParallelPlan(**{k: rows[value][k] for k in
                                                     ParallelPlan.__dataclass_fields__}))
                         ].label() == fastest((cp > 1) & (exch == value))
    assert rows[None]["context_parallel"] == 1
    assert res.plans[res.index_of(ParallelPlan(**{k: rows[None][k] for k in
                                                 ParallelPlan.__dataclass_fields__}))
                     ].label() == fastest(cp == 1)
    sp_rows = {r["value"]: r["plan"] for r in best["sequence_parallel"]}
    assert set(sp_rows) == {True, None}  # on wherever t > 1; "-" at t = 1 (was "n")
    assert sp_rows[True]["tensor_parallel"] > 1 and sp_rows[None]["tensor_parallel"] == 1
    # the exhaustive sweep's answers: the same best plan of each value
    full = run_sweep(s, space, prune=False).best_by()
    for name in ("cp_comm_type", "sequence_parallel"):
        assert [(r["value"], r["plan"]["training_days"]) for r in best[name]] == [
            (r["value"], r["plan"]["training_days"]) for r in full[name]]


def test_pruning_groups_the_values_as_the_best_plans_do():
    """The branch and bound keeps a plan unless each of its values has a faster plan
    (:func:`core.studies.sweep.bound.value_codes`): a plan without context parallelism must not
    count as one of the ring exchange, or the best ring plan (cp > 1) could be pruned
    because a cp = 1 plan holding p2p is faster."""
    from core.studies.sweep.bound import value_codes
    from core.studies.sweep.plan_rows import plan_column_arrays
    from core.studies.sweep.result import BEST_BY_FIELDS
    base = ParallelPlan(1, 1, 1, 1, 8, "1f1b", "none", "bf16")
    plans = [dataclasses.replace(base, data_parallel=2),                       # cp 1, p2p held
             dataclasses.replace(base, context_parallel=2, cp_comm_type="p2p"),
             dataclasses.replace(base, context_parallel=2, cp_comm_type="a2a"),
             dataclasses.replace(base, tensor_parallel=2, sequence_parallel=True,
                                 data_parallel=1)]
    for columns in (plan_column_arrays(plans), None):
        codes = dict(zip(BEST_BY_FIELDS, value_codes(plans, np.full(4, 2), False,
                                                     columns=columns)))
        exch = codes["cp_comm_type"].tolist()
        assert exch[0] != exch[1] and exch[1] != exch[2] and exch[0] == exch[3]
        sp = codes["sequence_parallel"].tolist()  # off at t = 1: "-", not the value n
        assert sp[0] == sp[1] == sp[2] != sp[3]
