"""Weight-gradient accumulation: gradient accumulation fusion, FSDP and the separate kernel.

Megatron-LM's default ``gradient_accumulation_fusion`` has the linear layers' weight-gradient
GEMMs add into the fp32 ``main_grad`` (Transformer Engine ``fuse_wgrad_accumulation``,
Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication``); the embedding and the MoE
router's gate, plain parameters, are added by the data-parallel backward hook
(``param.main_grad.add_(param.grad)``); ``--no-gradient-accumulation-fusion`` adds every weight
gradient by a kernel of its own; FSDP (zero_stage 3) reduce-scatters each micro-batch's
gradients and adds none (:func:`core.plan.parallel.wgrad_accumulation`). Each kernel reads the
gradient and the buffer and writes the buffer: 6 bytes per 16-bit parameter.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.accuracy.measured import read_measurements
from core.io.megatron.export import export_script
from core.io.megatron.from_session import export_arguments
from core.io.megatron.to_session import import_file
from core.io.session import load_any, load_session, session_to_json
from core.model.kernels import op_key as model_op_key
from core.model.ops import analytic_op_time, op_kernels
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan, wgrad_accumulation
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.op_times import lookup_op_times
from core.sim.simulate import session_profile, simulate
from core.store.profiles_gen import generate_store
from core.studies.sweep.bound import bound_plan, fill_lower_bounds
from tests.conftest import EXAMPLES, SHARED
from tests.test_recompute_modules import moe_session

GPT = MODEL_PRESETS["GPT-3 1.3B"]  # h 2048, a 16, f 8192, L 24, V 50257


def _session(**plan) -> Session:
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=2,
                global_batch_size=8, schedule="1f1b", recompute="none", precision="bf16")
    return Session(GPT, ParallelPlan(**{**base, **plan}),
                   ClusterConfig(gpu="H100-SXM5-80GB"), CostConfig(2.0, 1e9))


def _acc(op: str, key: dict) -> float:
    """Bytes of the op's ``wgrad_accumulate`` kernels (0 when none runs)."""
    return sum(k.bytes for k in op_kernels(op, key) if k.name == "wgrad_accumulate")


@pytest.mark.parametrize("zero, fusion, mode", [
    (0, True, "fused"), (1, True, "fused"), (2, True, "fused"), (0, False, "separate"),
    (1, False, "separate"), (3, True, "none"), (3, False, "none")])
def test_the_mode_follows_the_fusion_and_the_zero_stage(zero, fusion, mode):
    pl = ParallelPlan(zero_stage=zero, gradient_accumulation_fusion=fusion)
    assert wgrad_accumulation(pl) == mode
    assert model_op_key(GPT, pl)["wacc"] == mode


def test_megatron_default_is_fused():
    assert ParallelPlan().gradient_accumulation_fusion is True
    assert wgrad_accumulation(ParallelPlan()) == "fused"


@pytest.mark.parametrize("t", [1, 2])
def test_dense_kernels_closed_form(t):
    """Separate: 6 bytes per parameter of QKV + projection, fc1 + fc2, the output layer and the
    embedding (each V/t x h); fused: the embedding's only; none: nothing."""
    h, f, V = 2048, 8192, 50304 if t == 1 else 50432
    key = model_op_key(GPT, ParallelPlan(tensor_parallel=t, data_parallel=1))
    assert key["V"] == V
    sep, fused, none = ({**key, "wacc": m} for m in ("separate", "fused", "none"))
    assert _acc("attention_bwd", sep) == 6 * (h * 3 * h // t + h * h // t)
    assert _acc("mlp_bwd", sep) == 6 * (h * f // t + h * f // t)
    assert _acc("output_bwd", sep) == _acc("embedding_bwd", sep) == 6 * V * h // t
    for op in ("attention_bwd", "mlp_bwd", "output_bwd"):
        assert _acc(op, fused) == _acc(op, none) == 0
        assert not any(k.name == "wgrad_accumulate" for k in op_kernels(op, fused))
    assert _acc("embedding_bwd", fused) == 6 * V * h // t  # a plain parameter: the DDP hook
    assert _acc("embedding_bwd", none) == 0
    # the rest of each backward is unchanged
    for op in ("attention_bwd", "mlp_bwd", "output_bwd", "embedding_bwd"):
        rest = [k for k in op_kernels(op, sep) if k.name != "wgrad_accumulate"]
        assert rest == [k for k in op_kernels(op, none)]


def test_moe_kernels_closed_form():
    """The router's gate (h x E) is a plain parameter: added under fusion too; the experts'
    grouped linears and the shared experts are Transformer Engine linears."""
    s = moe_session()
    key = model_op_key(s.model, s.plan)
    h, E, fe, local = s.model.hidden_size, s.model.num_experts, 512, 8 // 4
    sep, fused, none = ({**key, "wacc": m} for m in ("separate", "fused", "none"))
    assert _acc("router_bwd", sep) == _acc("router_bwd", fused) == 6 * h * E
    assert _acc("router_bwd", none) == 0
    assert _acc("experts_bwd", sep) == 6 * local * (h * 2 * fe + h * fe)  # SwiGLU fc1, fc2
    assert _acc("experts_bwd", fused) == _acc("experts_bwd", none) == 0


def test_op_times_scale_the_tables_rows():
    """The tables hold ``separate`` (no wacc column): a fused plan's mlp_bwd is the row scaled
    by the analytic ratio, which on an analytic store is the analytic time of the fused key;
    the difference is the kernel's roofline time: 6 (2 h f) bytes at the store's bandwidth and
    memory efficiency, plus one kernel overhead."""
    store = generate_store("H100-SXM5-80GB")
    fused, sep = _session(), _session(gradient_accumulation_fusion=False)
    tf, ts = lookup_op_times(fused, store).times, lookup_op_times(sep, store).times
    key = model_op_key(fused.model, fused.plan)
    assert tf["mlp_bwd"] == pytest.approx(analytic_op_time("mlp_bwd", key, store), rel=1e-12)
    p = store.op_model
    kernel_s = (6 * 2 * 2048 * 8192 / (store.memory_bandwidth_bytes_per_s * p["memory_efficiency"])
                + p["kernel_overhead_s"])
    assert ts["mlp_bwd"] - tf["mlp_bwd"] == pytest.approx(kernel_s, rel=1e-9)
    assert tf["embedding_bwd"] == pytest.approx(ts["embedding_bwd"], rel=1e-12)
    assert tf["mlp_fwd"] == ts["mlp_fwd"]


def test_single_gpu_iteration_difference_is_the_kernels_times():
    """One GPU, 1F1B: the iteration is m times each op's time plus the optimizer step, so the
    fusion saves m (L (attention + MLP) + output layer) accumulation kernels."""
    store = generate_store("H100-SXM5-80GB")
    fused, sep = _session(), _session(gradient_accumulation_fusion=False)
    tf, ts = lookup_op_times(fused, store).times, lookup_op_times(sep, store).times
    m, L = 4, GPT.num_layers
    want = m * (L * (ts["attention_bwd"] - tf["attention_bwd"] + ts["mlp_bwd"] - tf["mlp_bwd"])
                + ts["output_bwd"] - tf["output_bwd"])
    got = simulate(sep, store).report.iteration_time_s - simulate(fused, store).report.iteration_time_s
    assert want > 0 and got == pytest.approx(want, rel=1e-6)


def test_fsdp_lower_bound_keeps_zero_3():
    """The sweep's lower bound of an FSDP plan is its own compute stream at ZeRO 3 with its
    overlaps (at ZeRO 0 it would carry the embedding's accumulation, which FSDP does not run;
    without the overlaps its gathers would be exposed where the plan hides them) and stays
    under its time."""
    s = _session(data_parallel=4, global_batch_size=16, zero_stage=3, overlap_grad_reduce=True,
                 overlap_param_gather=True)
    store = generate_store("H100-SXM5-80GB")
    assert bound_plan(s.plan, s.model) == dataclasses.replace(s.plan, data_parallel=1)
    assert bound_plan(dataclasses.replace(s.plan, zero_stage=1), s.model).zero_stage == 0
    lower = np.full(1, np.nan)
    fill_lower_bounds(lower, [s.plan], np.arange(1), s.model, s.cluster, s.cost, store, {}, None)
    assert 0 < lower[0] <= simulate(s, store).report.iteration_time_s


def test_fsdp_sweeps_prune_exactly():
    """A breaker's case: Mixtral-like MoE plans at ZeRO 3 (expert parallelism keeps d in the
    bound, so FSDP's gathers are in it): every plan's bound under its time, and the pruned
    sweep's answers those of the exhaustive one (the bound at ZeRO 3 without the overlaps
    pruned the fastest plan: 16.58 s reported for 15.66 s)."""
    from core.sim.stages import stage_busy_times
    from core.studies.sweep import SweepSpace, run_sweep
    from core.studies.sweep.bound import _lower_bounds
    from tests.test_sweep_prune import answers
    s = moe_session(data_parallel=8, global_batch_size=32)
    space = SweepSpace(num_gpus=8, zero_stages=(3,), micro_batch_sizes=(1,),
                       recompute=("full", "selective"), schedules=("1f1b",))
    full = run_sweep(s, space, prune=False)
    store, checked = session_profile(s), 0
    for pl, t in zip(full.plans, full.iteration_time_s):
        if not np.isfinite(t):
            continue
        st = stage_busy_times(Session(s.model, bound_plan(pl, s.model), s.cluster, s.cost),
                              store)
        assert _lower_bounds(*st, np.array([float(pl.num_microbatches)]), None)[0] <= t * (
            1 + 1e-12), pl.label()
        checked += 1
    assert checked > 20
    assert answers(run_sweep(s, space)) == answers(full)


def test_a_session_without_the_field_loads_fused(tmp_path):
    doc = json.loads((EXAMPLES / "gpt3_175b.json").read_text())
    # the example is the vTrain authors' Megatron-DeepSpeed run: no fusion
    assert doc["plan"].pop("gradient_accumulation_fusion") is False
    (tmp_path / "old.json").write_text(json.dumps(doc))
    s = load_session(tmp_path / "old.json")
    assert s.plan.gradient_accumulation_fusion is True
    doc["plan"]["gradient_accumulation_fusion"] = False
    s.plan = dataclasses.replace(s.plan, gradient_accumulation_fusion=False)
    assert session_to_json(s) == (EXAMPLES / "gpt3_175b.json").read_text()


@pytest.mark.parametrize("name", ["gpt3_175b_512gpu_t8_d4_p16.json",
                                  "mtnlg_530b_3360gpu_t8_d12_p35.json"])
def test_the_authors_configs_read_without_fusion(name):
    """The vTrain authors' configs describe Megatron-DeepSpeed runs."""
    path = SHARED / "configs" / name
    if not path.exists():
        pytest.skip("needs ../shared/data/vtrain-a100")
    assert load_any(path).plan.gradient_accumulation_fusion is False


def test_not_a_boolean_is_refused():
    s = _session(gradient_accumulation_fusion=1)
    assert any(e.field == "plan.gradient_accumulation_fusion" for e in validate(s))


def test_megatron_launch_round_trip(tmp_path):
    s = _session(data_parallel=8, global_batch_size=64)
    assert "--no-gradient-accumulation-fusion" not in export_arguments(s)
    off = dataclasses.replace(s, plan=dataclasses.replace(s.plan, gradient_accumulation_fusion=False))
    args = export_arguments(off)
    assert args.count("--no-gradient-accumulation-fusion") == 1
    script = tmp_path / "run.sh"
    script.write_text(export_script(off))
    assert import_file(script).session.plan.gradient_accumulation_fusion is False
    # FSDP2: the switch Megatron requires, written once; the field keeps its default
    fsdp = dataclasses.replace(s, model=dataclasses.replace(s.model, tied_embeddings=False),
                               plan=dataclasses.replace(s.plan, zero_stage=3))
    args = export_arguments(fsdp)
    assert args.count("--no-gradient-accumulation-fusion") == 1 and "--use-torch-fsdp2" in args
    script.write_text(export_script(fsdp))
    assert import_file(script).session.plan.gradient_accumulation_fusion is True


@pytest.mark.skipif(not (SHARED / "measured_single_node.csv").exists(),
                    reason="needs ../shared/data/vtrain-a100")
def test_the_authors_megatron_deepspeed_runs_add_each_gradient():
    """DeepSpeed's engine owns the gradients: no fused accumulation into main_grad."""
    for name in ("measured_single_node.csv", "measured_multi_node.csv"):
        runs = read_measurements(SHARED / name)
        assert runs and all(r.session.plan.gradient_accumulation_fusion is False for r in runs)
        assert {wgrad_accumulation(r.session.plan) for r in runs} == {"separate"}


def test_the_editor_greys_the_field_out_under_fsdp():
    from core.plan.rules import inactive_fields
    assert "plan.gradient_accumulation_fusion" not in inactive_fields(_session(zero_stage=1))
    assert inactive_fields(_session(zero_stage=3))["plan.gradient_accumulation_fusion"] == (
        "needs ZeRO 0-2 (plan.zero_stage: FSDP reduce-scatters each micro-batch's gradients)")


def test_the_label_names_the_fusion_off_where_it_matters():
    assert "no-grad_acc_fusion" in _session(gradient_accumulation_fusion=False).plan.label()
    assert "grad_acc_fusion" not in _session().plan.label()  # the default
    fsdp = _session(zero_stage=3, data_parallel=4, gradient_accumulation_fusion=False).plan
    assert "grad_acc_fusion" not in fsdp.label(full=True)
