"""torchtitan's float8 linears keep no persistent FP8 weight copy (plan.fp8_weight_copies false).

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
    torchao = _weights(fp8_weight_copies=False, **kw)
    bf16 = float(state_bytes_of(LLAMA3_8B, ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=8, micro_batch_size=1,
        global_batch_size=8, precision="bf16", **kw), True)[0][0])
    assert te - bf16 == pytest.approx(te_extra, rel=1e-12, abs=1)
    assert torchao - bf16 == pytest.approx(torchao_extra, rel=1e-12, abs=1)
    assert te - torchao == pytest.approx(te_extra - torchao_extra, rel=1e-12, abs=1)


def test_torchtitan_float8_sets_it_and_the_megatron_export_refuses_it():
    plan = read_torchtitan_config(LLAMA3_405B, num_gpus=512, gpu="H100-SXM5-80GB").session.plan
    assert plan.precision == "fp8" and plan.fp8_weight_copies is False
    fp8 = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                       micro_batch_size=1, global_batch_size=8, precision="fp8",
                       fp8_recipe="tensorwise", fp8_weight_copies=False)
    with pytest.raises(MegatronArgsError, match="plan.fp8_weight_copies false"):
        export_arguments(Session(model=LLAMA3_8B, plan=fp8))
    words = export_arguments(Session(model=LLAMA3_8B, plan=dataclasses.replace(
        fp8, fp8_weight_copies=True)))
    assert words[words.index("--fp8-recipe") + 1] == "tensorwise"


def test_the_label_names_it_in_fp8_plans_only():
    base = ParallelPlan(precision="fp8")
    assert dataclasses.replace(base, fp8_weight_copies=False).label() == \
        base.label() + " no-fp8_w_copies"
    bf16 = dataclasses.replace(base, precision="bf16")
    assert dataclasses.replace(bf16, fp8_weight_copies=False).label() == bf16.label()
