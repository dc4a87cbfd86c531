"""Values given for a variant of some plans only -- a context-parallel exchange
(``--cp-comm-types``, plans with cp > 1) or an MoE token dispatcher (``--moe-token-dispatcher``,
plans with ep > 1) -- are never dropped without a word: when no plan of the sweep has cp > 1 (or
ep > 1) they are named under "Values given but in no valid plan" with that reason (not a
layer-divisibility rule of some interleaved combination, as before), and a dispatcher other than
the session's for a dense model is refused by name, as the expert all-to-all overlap is."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.studies.sweep import SweepSpace, run_sweep, unused_values
from tests.conftest import EXAMPLES

DENSE = EXAMPLES / "gpt3_1.3b_single_node.json"
BASE = ["--gpus", "8", "--zero-stages", "1", "--micro-batch-sizes", "1", "--workers", "1"]


def test_exchange_given_with_cp_1_only_is_named_with_its_reason(capsys):
    assert main(["sweep", str(DENSE), *BASE, "--cp-comm-types", "a2a", "--context-parallel",
                 "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unused_values"] == [{
        "values": "--cp-comm-types a2a",
        "reason": "context-parallel exchanges apply to the plans with cp > 1 only, and no valid "
                  "plan of this sweep has one (cp tried: 1)"}]
    # the text says the same
    assert main(["sweep", str(DENSE), *BASE, "--cp-comm-types", "a2a", "--context-parallel",
                 "1"]) == 0
    out = capsys.readouterr().out
    assert "--cp-comm-types a2a: context-parallel exchanges apply to the plans with cp > 1" in out
    assert "not divisible" not in out.split("Values given")[1]


def test_exchange_used_by_some_plan_is_not_named(capsys):
    assert main(["sweep", str(DENSE), *BASE, "--cp-comm-types", "p2p", "--context-parallel",
                 "1,2", "--set", "model.attention_kernel=flash", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unused_values"] == []


def test_dispatcher_for_a_dense_model_is_refused_by_name(capsys):
    assert main(["sweep", str(DENSE), *BASE, "--moe-token-dispatcher", "flex"]) == 2
    err = capsys.readouterr().err
    assert "sweep.moe_token_dispatcher_type" in err and "flex" in err
    assert "mixture-of-experts" in err and "Traceback" not in err
    # the session's own (alltoall) changes nothing and is accepted
    assert main(["sweep", str(DENSE), *BASE, "--moe-token-dispatcher", "alltoall",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unused_values"] == []


def test_dispatcher_given_with_ep_1_only_is_named_with_its_reason():
    model = dataclasses.replace(MODEL_PRESETS["GPT-OSS 20B"], seq_length=2048)
    session = Session(model, ParallelPlan(1, 1, 8, 1, 64, "1f1b", "none", "bf16"),
                      ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
                      CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e11))
    space = SweepSpace(num_gpus=(8,), expert_parallel=(1,), context_parallel=(1,),
                       pipeline_parallel=(1,), micro_batch_sizes=(1,), zero_stages=(1,),
                       moe_token_dispatcher_type=("flex",), schedules=("1f1b",),
                       recompute=("full",))
    result = run_sweep(session, space)
    assert result.num_plans > 0
    why = {e.field: e.message for e in unused_values(session, space, result)}
    assert why == {"--moe-token-dispatcher flex":
                   "MoE token dispatchers apply to the plans with ep > 1 only, and no valid "
                   "plan of this sweep has one (ep tried: 1)"}


def test_dense_dispatcher_refusal_from_the_library():
    from core.io.session import load_any
    session = load_any(DENSE)
    with pytest.raises(ConfigError) as info:
        run_sweep(session, SweepSpace(num_gpus=(8,), context_parallel=(1,),
                                      moe_token_dispatcher_type=("flex",)))
    assert [e.field for e in info.value.errors] == ["sweep.moe_token_dispatcher_type"]


def test_no_plan_reason_counts_only_the_default_virtual_stages_the_sweep_tries(tmp_path, capsys):
    """Without --virtual-pipeline-stages the sweep tries the v of 2 to 8 whose p*v split the
    layers; the reason a value is in no plan counts only those: GPT-3 13B (40 layers), p=4,
    global batch 6 (m = 6 micro-batches, not a multiple of 4) -- the micro-batch rule, not "40
    layers not divisible by 4*3" of a v=3 the sweep never tries (20 of the 28 combinations
    before). With no such v at all (32 layers, p=3), that is the reason."""
    cfg = str(tmp_path / "g13.json")
    assert main(["import", "preset", "GPT-3 13B", "--gpu", "H100-SXM5-80GB", "--out", cfg]) == 0
    capsys.readouterr()
    assert main(["sweep", cfg, "--gpus", "8", "--set", "plan.global_batch_size=6",
                 "--schedules", "interleaved", "--pipeline-parallel", "4",
                 "--tensor-parallel", "2", "--zero-stages", "1", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "to be a multiple of pipeline_parallel_size=4" in err
    assert "4*3=12" not in err and "in 8 of the 8 size combinations" in err
    assert main(["sweep", str(DENSE), "--gpus", "3", "--set", "plan.global_batch_size=12",
                 "--set", "model.num_layers=32", "--schedules", "interleaved",
                 "--pipeline-parallel", "3", "--tensor-parallel", "1", "--zero-stages", "1",
                 "--context-parallel", "1", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert ("--schedules interleaved: no virtual-stage count v of 2 to 8 splits the 32 layers"
            in err)


def _moe_session(**model_changes) -> Session:
    model = dataclasses.replace(MODEL_PRESETS["Mixtral 8x7B"], **model_changes)
    return Session(model, ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                                       micro_batch_size=1, global_batch_size=16,
                                       precision="bf16"),
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


def test_tensor_parallel_reasons_hold_for_every_expert_tensor_parallel_size_tried():
    """A mixture-of-experts sweep tries each t > 1 with etp = t (unset) and etp = 1 (with
    sequence parallelism): a t only the first breaks (the experts' width 14,335 divisible by
    etp = 2) is no value left out for a reason, and a t every variant breaks is named with the
    rules all of them break, not with the etp = t one."""
    from core.studies.sweep.explain import value_errors
    s = _moe_session(moe_ffn_hidden_size=14335)
    assert value_errors(s, SweepSpace(num_gpus=8, tensor_parallel=[2])) == []
    msgs = [e.message for e in value_errors(s, SweepSpace(num_gpus=6, tensor_parallel=[3]))]
    assert "num_attention_heads=32 is not divisible by tensor_parallel_size=3" in msgs
    assert not any("expert_tensor_parallel" in m for m in msgs), msgs
    # held to the session's values (etp unset = t) the experts' rule is the reason
    held = [e.message for e in value_errors(
        s, SweepSpace(num_gpus=8, tensor_parallel=[2], hold_session_values=True))]
    assert any("expert_tensor_parallel=2" in m for m in held), held


def test_ep_1_plans_of_a_flex_session_run_alltoall_where_flex_cannot_run():
    """Megatron-Core 0.16.1 ``MoEFlexTokenDispatcher.__init__`` asserts ``tp_size * ep_size > 1``
    (the expert tensor-parallel and expert-parallel groups: "Flex token dispatcher requires TPxEP
    > 1"): a sweep of a flex session keeps flex at ep = 2 and at ep = 1 with etp = t = 2, and
    gives the ep = 1, etp = 1 plans the alltoall dispatcher, which Megatron-Core runs there (its
    permutation and chunk sort included), instead of plans Megatron-Core cannot start."""
    from core.studies.sweep.variants import dispatcher_at_ep1
    assert [dispatcher_at_ep1(d, etp) for d, etp in
            (("flex", 1), ("flex", 2), ("alltoall", 1), ("alltoall", 4))] == \
        ["alltoall", "flex", "alltoall", "alltoall"]
    model = dataclasses.replace(MODEL_PRESETS["GPT-OSS 20B"], seq_length=2048)
    session = Session(model, ParallelPlan(1, 1, 8, 1, 64, "1f1b", "full", "bf16",
                                          expert_parallel=2, moe_token_dispatcher_type="flex"),
                      ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
                      CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e11))
    space = SweepSpace(num_gpus=(8,), expert_parallel=(1, 2), tensor_parallel=(1, 2),
                       context_parallel=(1,), pipeline_parallel=(1,), micro_batch_sizes=(1,),
                       zero_stages=(1,), schedules=("1f1b",), recompute=("full",),
                       hold_session_values=True)
    result = run_sweep(session, space)
    seen = {(pl.expert_parallel, pl.tensor_parallel, pl.expert_tensor_parallel or
             pl.tensor_parallel, pl.moe_token_dispatcher_type) for pl in result.plans}
    # (ep 2 with t 2 needs sequence parallelism, held off)
    assert seen == {(1, 1, 1, "alltoall"), (1, 2, 2, "flex"), (2, 1, 1, "flex")}


def test_a_sweep_with_flex_plans_says_their_memory_is_a_lower_bound():
    """DeepEP's / HybridEP's buffers are not in the memory per GPU (core.model.moe
    flex_buffer_memory_note): simulate said so, the sweep did not, and a flex plan could be
    picked as fitting. The sweep names the count of flex plans with figures and which of the
    fastest, cheapest and front plans are among them; an alltoall sweep says nothing."""
    from core.model.moe import flex_buffer_memory_note
    model = dataclasses.replace(MODEL_PRESETS["GPT-OSS 20B"], seq_length=2048)

    def sweep(dispatcher):
        session = Session(model, ParallelPlan(1, 1, 8, 1, 64, "1f1b", "full", "bf16",
                                              expert_parallel=2,
                                              moe_token_dispatcher_type=dispatcher),
                          ClusterConfig(gpu="B200-180GB", gpus_per_node=8),
                          CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e11))
        space = SweepSpace(num_gpus=(8,), expert_parallel=(1, 2), tensor_parallel=(1, 2),
                           context_parallel=(1,), pipeline_parallel=(1,), micro_batch_sizes=(1,),
                           zero_stages=(1,), schedules=("1f1b",), recompute=("full",),
                           hold_session_values=True)
        return run_sweep(session, space, prune=False)  # every plan that fits with figures

    result = sweep("flex")
    ok = np.isfinite(result.iteration_time_s) & result.fits_in_memory
    flex_rows = [i for i, pl in enumerate(result.plans)
                 if pl.moe_token_dispatcher_type == "flex" and ok[i]]
    assert flex_rows and ok.sum() > len(flex_rows)  # the alltoall ep = 1 plan too
    head = flex_buffer_memory_note(model, result.plans[flex_rows[0]])
    (note,) = [w for w in result.warnings if w.startswith(head)]
    among = [name for name, row in (("the fastest", result.fastest),
                                    ("the cheapest", result.cheapest)) if row in flex_rows]
    front = sum(int(i) in flex_rows for i in result.pareto)
    among += [f"{front} of the {len(result.pareto)} front plans"] if front else []
    assert note == (f"{head}: {len(flex_rows)} of the {int(ok.sum())} plans with figures use it"
                    + (", among them " + ", ".join(among[:-1])
                       + (" and " if len(among) > 1 else "") + among[-1] if among else "")
                    + "; their memory is a lower bound")
    assert not any("DeepEP" in w for w in sweep("alltoall").warnings)
