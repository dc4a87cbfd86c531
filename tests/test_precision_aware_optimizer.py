"""The precision-aware optimizer (Megatron-Core --use-precision-aware-optimizer): its state
bytes against Megatron-Core 0.16.1's and Transformer Engine's source, its rules, the optimizer
step's traffic, and the Megatron-LM import and export."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.export import export_script
from core.io.megatron.from_session import export_arguments
from core.io.megatron.to_session import import_file
from core.model.memory import (bytes_per_parameter, grad_copy_bytes_per_parameter,
                               optimizer_holds_master_weights, optimizer_state_bytes,
                               optimizer_step_scratch_bytes, optimizer_step_traffic,
                               stage_memory_arrays)
from core.sim.goodput import checkpoint_bytes_per_parameter
from core.model.counts import params_per_gpu
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session

GiB = 2**30


def _pao(**kw) -> ParallelPlan:
    base = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=4, micro_batch_size=1,
                global_batch_size=64, recompute="full", zero_stage=1,
                use_precision_aware_optimizer=True, exp_avg_dtype="bf16",
                exp_avg_sq_dtype="bf16")
    base.update(kw)
    return ParallelPlan(**base)


@pytest.mark.parametrize("plan,want", [
    # without it: fp32 master weights, two fp32 moments, the fp32 copy of 16-bit gradients
    (ParallelPlan(precision="bf16"), (4, 4, 4, 0)),  # fp32 main gradients: their own copy
    (ParallelPlan(precision="bf16", grad_reduce_dtype="bf16"), (4, 4, 4, 4)),
    (ParallelPlan(precision="fp32"), (0, 4, 4, 0)),
    # a Megatron-LM BF16 launch: TE holds the master weights as the 16 bits BF16 lacks
    (_pao(), (2, 2, 2, 0)),
    (_pao(grad_reduce_dtype="bf16"), (2, 2, 2, 0)),  # decoupled_grad: no fp32 copy
    # Megatron-Bridge's BF16 configs (fp8_recipe tensorwise): Megatron-Core's fp32 master
    # weights and copy, the moments alone in BF16 (DeepSeek-V3: 4 + 2 + 2 + 4 = 12, not 16)
    (_pao(te_master_weights=False, grad_reduce_dtype="bf16"), (4, 2, 2, 4)),
    # FP8 with current or MX scaling: Megatron-Core keeps fp32 master weights whatever the field
    (_pao(precision="fp8", fp8_recipe="mxfp8", grad_reduce_dtype="bf16"), (4, 2, 2, 4)),
    (_pao(precision="fp8", fp8_recipe="tensorwise"), (4, 2, 2, 0)),
    # delayed scaling: TE's FusedAdam casts in its kernel, so it holds them
    (_pao(precision="fp8", fp8_recipe="delayed"), (2, 2, 2, 0)),
    # fp16 master weights (TE holds them: main_params_dtype not fp32); fp16 weights keep no
    # remainders (store_param_remainders needs BF16 weights)
    (_pao(main_params_dtype="fp16"), (2, 2, 2, 4)),  # + their fp32 scratch in the step
    (_pao(precision="fp16"), (4, 2, 2, 0)),
    # fp8 / fp16 moments: unscaled to fp32 scratch for the step (4 + 4, step-only)
    (_pao(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp16"), (2, 1, 2, 8)),
    # one BF16 moment beside an fp32 one is not the fused case: its scratch, 4
    (_pao(exp_avg_sq_dtype="fp32"), (2, 2, 4, 4)),
    # fp32 weights: TE still allocates a master_param per parameter (fused_adam.py:465-471)
    (_pao(precision="fp32"), (4, 2, 2, 0)),
    (_pao(precision="fp32", main_params_dtype="fp16"), (2, 2, 2, 4)),
    (_pao(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32"), (2, 4, 4, 0)),
])
def test_state_bytes_per_parameter(plan, want):
    """Megatron-Core 0.16.1: the distributed optimizer keeps fp32 main params unless
    ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` (distrib_optimizer.py:378), then TE's
    FusedAdam holds them (int16 remainders with BF16 weights, distrib_optimizer.py:801) and
    the gradient is the 16-bit buffer itself (:2411); the moments in their dtypes
    (optimizer/__init__.py:365-370)."""
    assert optimizer_state_bytes(plan) == tuple(float(x) for x in want)
    d = plan.data_parallel * plan.context_parallel
    w, g, o = bytes_per_parameter(plan)
    assert o == pytest.approx(sum(want) / d if plan.zero_stage else sum(want))
    assert grad_copy_bytes_per_parameter(plan) == pytest.approx(
        want[3] / d if plan.zero_stage else want[3])


def test_stage_memory_moves_by_the_closed_form():
    """Llama 3 8B at t=2, d=4 (ZeRO-1): the optimizer state is params/GPU x 6/4 bytes with
    BF16 moments and remainders, against 12/4 without; nothing else moves."""
    model = MODEL_PRESETS["Llama 3 8B"]
    plain = _pao(use_precision_aware_optimizer=False, exp_avg_dtype="fp32",
                 exp_avg_sq_dtype="fp32")
    aware = _pao()
    a, b = stage_memory_arrays(model, plain), stage_memory_arrays(model, aware)
    n = params_per_gpu(model, plain)
    assert np.allclose(a[2], n * 12 / 4) and np.allclose(b[2], n * 6 / 4)
    for i in (0, 1, 3):
        assert np.array_equal(a[i], b[i])
    assert (a[2] - b[2])[0] / GiB == pytest.approx(n[0] * 1.5 / GiB)


@pytest.mark.parametrize("plan,bytes_moved", [
    (_pao(use_precision_aware_optimizer=False, exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32"), 32),
    (_pao(), 32 - 4 - 4 - 2),  # moments 2+2 bytes each way; remainders 2+2 plus the BF16 read
    (_pao(te_master_weights=False), 32 - 4 - 4),
    # fp16 master weights are unscaled to fp32 and scaled back: 40 bytes against fp32's 8
    (_pao(main_params_dtype="fp16"), 32 - 4 - 4 + 32),
    # fp8 moments: 1+4 dequantize, 8 kernel, 4 aminmax, 4+1 quantize = 22 each, not 8
    (_pao(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8"), 32 + 14 + 14 - 2),
    # one BF16 moment without the other: 2+4 + 8 + 4+2 + 2+2 = 24 (fp32 one 8)
    (_pao(exp_avg_sq_dtype="fp32"), 32 + 16 - 2),
    (_pao(exp_avg_dtype="fp16", exp_avg_sq_dtype="fp16", te_master_weights=False), 32 + 64),
    (_pao(precision="fp32"), 28 - 4 - 4),
    (_pao(precision="fp32", main_params_dtype="fp16"), 28 - 4 - 4 + 32),
])
def test_optimizer_step_traffic(plan, bytes_moved):
    """The step's bytes per parameter against ADAM_BYTES_PER_PARAM (32 mixed, 28 fp32)."""
    full = 28 if plan.precision == "fp32" else 32
    assert optimizer_step_traffic(plan) == pytest.approx(bytes_moved / full)


def test_holds_master_weights_reads_the_recipe_megatron_core_reads():
    assert optimizer_holds_master_weights(_pao())
    assert not optimizer_holds_master_weights(_pao(te_master_weights=False))
    assert not optimizer_holds_master_weights(_pao(use_precision_aware_optimizer=False))
    assert not optimizer_holds_master_weights(_pao(precision="fp8", fp8_recipe="blockwise"))
    assert optimizer_holds_master_weights(_pao(precision="fp8", fp8_recipe="delayed"))
    assert optimizer_holds_master_weights(_pao(precision="fp8", fp8_recipe="mxfp8",
                                               main_params_dtype="fp16"))


def _session(plan: ParallelPlan) -> Session:
    return Session(model=dataclasses.replace(MODEL_PRESETS["Llama 3 8B"]), plan=plan,
                   cluster=ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


@pytest.mark.parametrize("changes,field,needle", [
    (dict(zero_stage=0), "plan.use_precision_aware_optimizer", "needs the distributed optimizer"),
    (dict(zero_stage=3), "plan.use_precision_aware_optimizer", "not modelled"),
    (dict(zero_stage=2), "plan.use_precision_aware_optimizer", "not modelled"),
    (dict(use_precision_aware_optimizer=False), "plan.exp_avg_dtype", "needs use_precision_aware"),
    (dict(main_params_dtype="fp16", te_master_weights=False), "plan.te_master_weights",
     "master weights below fp32"),
])
def test_rules(changes, field, needle):
    errs = [e for e in validate(_session(_pao(**changes))) if e.field == field]
    assert errs and needle in errs[0].message, validate(_session(_pao(**changes)))


def test_valid_plan_has_no_errors():
    assert validate(_session(_pao())) == []


_LAUNCH = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
           "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
           "--micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 2 --bf16 "
           "--tokenizer-type NullTokenizer --vocab-size 32000 ")


def _write(tmp_path, text):
    path = tmp_path / "run.sh"
    path.write_text(text + "\n")
    return path


def test_megatron_import_reads_the_state_dtypes(tmp_path):
    res = import_file(_write(tmp_path, _LAUNCH + "--use-distributed-optimizer "
                             "--use-precision-aware-optimizer --exp-avg-dtype bf16 "
                             "--exp-avg-sq-dtype fp8 --main-params-dtype fp16"))
    p = res.session.plan
    assert (p.use_precision_aware_optimizer, p.main_params_dtype, p.exp_avg_dtype,
            p.exp_avg_sq_dtype, p.te_master_weights) == (True, "fp16", "bf16", "fp8", True)
    # and back: the exported launch imports to the same plan
    back = import_file(_write(tmp_path, export_script(res.session))).session.plan
    assert back == p
    assert "--use-precision-aware-optimizer" in export_arguments(res.session)


def test_main_grads_bf16_needs_the_bf16_gradient_buffer(tmp_path):
    pao = _LAUNCH + "--use-distributed-optimizer --use-precision-aware-optimizer "
    with pytest.raises(MegatronArgsError, match="--main-grads-dtype: bf16 without "
                       "--grad-reduce-in-bf16"):
        import_file(_write(tmp_path, pao + "--main-grads-dtype bf16"))
    p = import_file(_write(tmp_path, pao + "--main-grads-dtype bf16 --grad-reduce-in-bf16")
                    ).session.plan
    assert (p.use_precision_aware_optimizer, p.grad_reduce_dtype) == (True, "bf16")


@pytest.mark.parametrize("extra,rule", [
    ("--exp-avg-dtype bf16", "can only be fp32 when not using precision-aware optimizer"),
    ("--use-precision-aware-optimizer", "only supported with distributed optimizer"),
])
def test_megatron_core_assertions_refuse_the_launch(tmp_path, extra, rule):
    with pytest.raises(MegatronArgsError, match=rule):
        import_file(_write(tmp_path, _LAUNCH + extra))


def test_export_writes_the_recipe_that_keeps_megatron_core_master_weights():
    """Megatron-LM's --fp8-recipe defaults to delayed, which leaves the master weights to TE;
    a BF16 plan saying otherwise (Megatron-Bridge's) exports --fp8-recipe tensorwise, which
    Megatron-LM gives the optimizer's config without FP8 too. FP8 with delayed scaling has
    no such launch."""
    args = export_arguments(_session(_pao(te_master_weights=False)))
    assert args[args.index("--fp8-recipe") + 1] == "tensorwise" and "--fp8-format" not in args
    with pytest.raises(MegatronArgsError, match="plan.te_master_weights false with FP8 delayed"):
        export_arguments(_session(_pao(te_master_weights=False, precision="fp8",
                                       fp8_recipe="delayed")))
    # FP8 with MX scaling keeps Megatron-Core's master weights whatever the field says
    args = export_arguments(_session(_pao(te_master_weights=False, precision="fp8",
                                          fp8_recipe="mxfp8")))
    assert "--use-precision-aware-optimizer" in args


def test_a_bf16_launchs_recipe_is_not_listed_as_having_no_effect(tmp_path):
    """--fp8-recipe tensorwise without --fp8-format (the export's BF16 launch with Megatron-Core's
    master weights): with the precision-aware optimizer it decides plan.te_master_weights, so
    the import says so in a note; it was listed as ignored, "without --fp8-format it has no
    effect", while the memory moved. Without that optimizer it has none and is listed so."""
    pao = _LAUNCH + "--use-distributed-optimizer --use-precision-aware-optimizer "
    res = import_file(_write(tmp_path, pao + "--fp8-recipe tensorwise"))
    assert (res.session.plan.precision, res.session.plan.te_master_weights) == ("bf16", False)
    assert "--fp8-recipe" not in res.ignored
    assert dict(res.notes)["--fp8-recipe"].endswith("the master weights are Megatron-Core's "
                                                    "fp32 ones (plan.te_master_weights false)")
    assert import_file(_write(tmp_path, pao)).session.plan.te_master_weights is True
    plain = import_file(_write(tmp_path, _LAUNCH + "--fp8-recipe tensorwise"))
    assert plain.ignored["--fp8-recipe"] == "without --fp8-format it has no effect"
    # the export's launch for such a plan reads back without the contradiction
    back = import_file(_write(tmp_path, export_script(_session(_pao(te_master_weights=False)))))
    assert back.session.plan.te_master_weights is False and "--fp8-recipe" not in back.ignored


def test_step_scratch_is_held_at_the_peak_only_beyond_the_activations():
    """TE's fp32 scratch of fp8 moments (8 bytes per parameter, sharded over d) lives in the
    step alone (fused_adam.py:616-912): the optimizer column holds it only where it exceeds the
    stage's activations, as the fp32 gradient copy (optimizer_at_peak)."""
    model = MODEL_PRESETS["Llama 3 8B"]
    bf16, fp8 = _pao(), _pao(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8")
    assert optimizer_step_scratch_bytes(bf16) == 0 and optimizer_step_scratch_bytes(fp8) == 8
    n = params_per_gpu(model, fp8)
    assert np.allclose(grad_copy_bytes_per_parameter(fp8) * n, n * 8 / 4)
    a, b = stage_memory_arrays(model, bf16), stage_memory_arrays(model, fp8)
    acts = b[3]
    # full recompute, one sequence: 5.1 GiB of activations (4.935 before the final norm's bf16
    # input and output, 2 s h without sequence parallelism, and the embedding's int64 ids, 8 s,
    # were counted), less than the 7.5 GiB of scratch
    assert acts[0] / GiB == pytest.approx(4.935 + (2 * 8192 * 4096 * 2 + 8 * 8192) / GiB,
                                          abs=1e-3) and n[0] * 2 / GiB > 7.4
    # held: 2 + 1 + 1 bytes over 4 ranks, and the scratch beyond the activations
    assert np.allclose(b[2], n * 4 / 4 + (n * 8 / 4 - acts))
    assert np.allclose(a[2], n * 6 / 4)
    # no recomputation: the activations exceed the scratch, which hides under them
    bf16, fp8 = _pao(recompute="none"), _pao(recompute="none", exp_avg_dtype="fp8",
                                             exp_avg_sq_dtype="fp8")
    a, b = stage_memory_arrays(model, bf16), stage_memory_arrays(model, fp8)
    assert np.all(b[3] > n * 8 / 4)
    assert np.allclose(b[2], n * 4 / 4) and np.allclose(a[2] - b[2], n * 2 / 4)


def test_step_scratch_of_a_mixture_of_experts_is_that_of_the_larger_optimizer():
    """Megatron-Core steps the dense and the expert parameters' optimizers one after the other
    (ChainedOptimizer.step: every prepare_grads, then each step_with_ready_grads), so TE's fp32
    scratch of fp8 moments is held for one of them at a time, the larger; the fp32 gradient
    copies (16-bit gradients reduced in BF16) of both are made before either steps and live
    together."""
    from core.model.counts import expert_params_per_gpu
    from core.model.memory import expert_data_parallel, state_bytes_of
    model = MODEL_PRESETS["Mixtral 8x7B"]
    plan = _pao(tensor_parallel=1, data_parallel=8, expert_parallel=8, exp_avg_dtype="fp8",
                exp_avg_sq_dtype="fp8", grad_reduce_dtype="bf16",
                te_master_weights=False)
    assert validate(Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB",
                                                       gpus_per_node=8))) == []
    experts = expert_params_per_gpu(model, plan)
    dense = params_per_gpu(model, plan) - experts
    de = expert_data_parallel(plan)
    assert de == 1 and dense[0] > 0 and experts[0] > dense[0]
    _, _, opt, transient = state_bytes_of(model, plan, True)
    # Megatron-Core's fp32 master weights and copies, fp8 moments, over d = 8 (dense) and the
    # expert data-parallel size 1; scratch 8 bytes each, of the experts' optimizer alone
    want_transient = dense * 4 / 8 + experts * 4 / de + experts * 8 / de
    assert np.allclose(transient, want_transient)
    assert np.allclose(opt, dense * (4 + 1 + 1 + 4) / 8 + experts * (4 + 1 + 1 + 4) / de
                       + experts * 8 / de)


@pytest.mark.parametrize("plan,want", [
    # TE holds the master weights: get_unscaled_state saves the moments in fp32 and the
    # remainders as int16 (distrib_optimizer.py:883-908): 2 + 2 + 4 + 4
    (_pao(), 12),
    (_pao(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8"), 12),
    (_pao(main_params_dtype="fp16"), 2 + 4 + 8),  # fp16 master weights unscaled to fp32
    (_pao(precision="fp32"), 4 + 4 + 8),
    # Megatron-Core's master weights: its fp32 param and the optimizer's tensors as held
    (_pao(te_master_weights=False, grad_reduce_dtype="bf16"), 2 + 4 + 2 + 2),
    (_pao(precision="fp8", fp8_recipe="mxfp8"), 2 + 4 + 2 + 2),
    (_pao(use_precision_aware_optimizer=False, exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32"),
     14),
])
def test_checkpoint_bytes_per_parameter(plan, want):
    assert checkpoint_bytes_per_parameter(plan) == want


def test_megatron_fsdp_with_it_is_refused(tmp_path):
    with pytest.raises(MegatronArgsError, match="with --use-megatron-fsdp: Megatron-FSDP"):
        import_file(_write(tmp_path, _LAUNCH + "--use-megatron-fsdp --use-distributed-optimizer "
                           "--data-parallel-sharding-strategy optim "
                           "--use-precision-aware-optimizer"))


def test_sweep_keeps_zero_1_at_one_data_parallel_rank():
    """At d*cp = 1 the sweep keeps one ZeRO stage; a session with the precision-aware
    optimizer keeps 1 (0 breaks its rule), so 4 GPUs at t=2 p=2 still give a plan."""
    from core.studies.sweep.space import single_rank_zero_stages
    assert single_rank_zero_stages([0, 1, 2, 3], _pao()) == [1]
    assert single_rank_zero_stages([0, 1, 2, 3], _pao(use_precision_aware_optimizer=False,
                                                      exp_avg_dtype="fp32",
                                                      exp_avg_sq_dtype="fp32")) == [0]
    assert single_rank_zero_stages([0, 2, 3], ParallelPlan(fp8_param_gather=True,
                                                           precision="fp8")) == [2]
    assert single_rank_zero_stages([0, 2, 3], _pao()) == [0]  # no 1 asked: left to the rules
    from core.studies.sweep import SweepSpace, enumerate_plans
    s = _session(_pao(tensor_parallel=2, pipeline_parallel=2, data_parallel=2))
    plans = enumerate_plans(s, SweepSpace(num_gpus=4, tensor_parallel=[2],
                                          pipeline_parallel=[2], micro_batch_sizes=[1],
                                          recompute=["full"], schedules=["1f1b"]))
    assert plans and all(p.data_parallel == 1 and p.zero_stage == 1
                         and p.use_precision_aware_optimizer for p in plans)


_PAO_DEFAULTS = dict(use_precision_aware_optimizer=False, te_master_weights=True,
                     main_params_dtype="fp32", exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32")


def test_other_imports_and_old_sessions_leave_it_off(tmp_path):
    """torchtitan (no precision-aware optimizer: torch.optim's AdamW, fp32 state), a Hugging
    Face model's starting plan and a session file written before the fields all read as the
    defaults, and the optimizer state is the 12 bytes of fp32 Adam with BF16 weights."""
    import json
    from pathlib import Path
    from core.io.start_plan import default_plan
    from core.io.torchtitan_import import load_toml, session_from_torchtitan
    from core.io.session import load_session, save_session
    toml = Path(__file__).resolve().parent / "data" / "torchtitan" / "llama3_8b.toml"
    plans = [session_from_torchtitan(load_toml(toml), str(toml), num_gpus=8).session.plan,
             default_plan(MODEL_PRESETS["Llama 3 8B"])]
    path = tmp_path / "old.json"
    save_session(_session(_pao(use_precision_aware_optimizer=False, exp_avg_dtype="fp32",
                               exp_avg_sq_dtype="fp32")), path)
    doc = json.loads(path.read_text())
    for name in _PAO_DEFAULTS:
        doc["plan"].pop(name)
    path.write_text(json.dumps(doc))
    plans.append(load_session(path).plan)
    for p in plans:
        assert {k: getattr(p, k) for k in _PAO_DEFAULTS} == _PAO_DEFAULTS
        assert optimizer_state_bytes(p)[:3] == ((4.0, 4.0, 4.0) if p.precision != "fp32"
                                                else (0.0, 4.0, 4.0))


@pytest.mark.parametrize("extra,te_master,state", [
    # Megatron-LM's --fp8-recipe (default delayed) reaches the optimizer's config in BF16 too
    ("", True, (2, 2, 2, 0)),
    ("--fp8-recipe delayed", True, (2, 2, 2, 0)),
    # another recipe: Megatron-Core's fp32 master weights (and, with bf16 gradients, the copy)
    ("--fp8-recipe tensorwise", False, (4, 2, 2, 0)),
    ("--fp8-recipe mxfp8 --grad-reduce-in-bf16", False, (4, 2, 2, 4)),
    # master weights below fp32 are TE's whatever the recipe
    ("--fp8-recipe tensorwise --main-params-dtype fp16", True, (2, 2, 2, 4)),
])
def test_megatron_import_reads_the_recipe_the_optimizer_gets(tmp_path, extra, te_master, state):
    launch = (_LAUNCH + "--use-distributed-optimizer --use-precision-aware-optimizer "
              "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 " + extra)
    s = import_file(_write(tmp_path, launch)).session
    assert s.plan.precision == "bf16" and s.plan.te_master_weights is te_master
    assert optimizer_state_bytes(s.plan) == tuple(float(x) for x in state)
    assert validate(s) == []
    # exported (--fp8-recipe tensorwise where Megatron-Core holds them) and back, the same plan
    args = export_arguments(s)
    assert ("--fp8-recipe" in args) is (not te_master)
    assert import_file(_write(tmp_path, export_script(s))).session.plan == s.plan


def test_a_plain_launch_keeps_the_field_at_its_default(tmp_path):
    s = import_file(_write(tmp_path, _LAUNCH + "--use-distributed-optimizer "
                           "--fp8-recipe tensorwise")).session
    assert (s.plan.use_precision_aware_optimizer, s.plan.te_master_weights) == (False, True)
