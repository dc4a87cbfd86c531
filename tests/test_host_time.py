"""The host time per op call in the shared fit of the modern GPU kinds
(core.accuracy.shared_fit.SHARED_FIXED, docs/accuracy.md "seventh round"): taken from the A100
store's full fit, not fitted again; an op takes the larger of its device and host times
(core.model.ops.combine_op_time), so a short MoE op (the router) takes the host time and a long
one (the experts' backward) its device time."""

from __future__ import annotations

import pytest

from core.accuracy.calibrate import apply_fit
from core.accuracy.shared_fit import SHARED_FIXED, analytic_bases, shared_fit_kwargs
from core.model.kernels import op_key
from core.model.ops import (analytic_op_time, device_key, kernel_arrays, kernel_class, kernel_fp8,
                            kernel_peak_flops, kernel_times, op_kernels)
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.sim.simulate import open_profile
from tests.conftest import ROOT

HOST_S = SHARED_FIXED["op_overhead_s"]


def _qwen3_30b_session(gpu: str = "H100-SXM5-80GB") -> Session:
    """Qwen3-30B-A3B's shape (Hugging Face config) on 8 GPUs with EP 8, one sequence per GPU."""
    model = ModelConfig("Qwen3-30B-A3B", 48, 2048, 32, 6144, 4096, 151936, num_query_groups=4,
                        activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                        tied_embeddings=False, add_bias_linear=False, attention_kernel="flash",
                        kv_channels=128, qk_layernorm=True, num_experts=128, moe_top_k=8,
                        moe_ffn_hidden_size=768)
    plan = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, micro_batch_size=1,
                        global_batch_size=64, recompute="none", precision="bf16", expert_parallel=8)
    return Session(model, plan, ClusterConfig(gpu=gpu, gpus_per_node=8), CostConfig())


def test_the_host_time_per_op_is_the_a100_fits_and_not_fitted_again():
    """The value is the shipped A100 store's fitted op_overhead_s (its provenance: the full fit
    on the vTrain authors' runs), to 1 %; the shared fit starts there and keeps it."""
    a100 = open_profile(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    assert HOST_S == pytest.approx(a100.op_model["op_overhead_s"], rel=0.01)
    s = _qwen3_30b_session()
    kw = shared_fit_kwargs(analytic_bases(), [s])
    assert kw["start"]["op_overhead_s"] == HOST_S
    assert "op_overhead_s" not in kw["params"] and "kernel_launch_s" not in kw["params"]
    assert kw["start"]["kernel_launch_s"] == 0.0  # the A100 fit's per-launch time: 0


@pytest.mark.parametrize("gpu", ["H100-SXM5-80GB", "B200-180GB"])
def test_an_op_takes_the_larger_of_its_device_time_and_the_host_time(gpu):
    """Closed form: op time = max(sum of its kernels' roofline times, op_overhead_s) (no
    per-kernel launch time). Qwen3-30B-A3B's router forward (a (4096, 2048) x (2048, 128) GEMM,
    the norm, softmax and top-k: tens of microseconds) takes the host's 0.5 ms on both GPUs;
    its experts' backward (16 local experts' grouped GEMMs, ms) keeps its device time."""
    s = _qwen3_30b_session(gpu)
    base = analytic_bases()(s)
    store = apply_fit(base, {**base.op_model, "op_overhead_s": HOST_S, "kernel_launch_s": 0.0})
    # each weight gradient added by a kernel of its own: the B200's experts backward with
    # gradient accumulation fusion (0.48 ms) would take the host's time
    key = device_key({**op_key(s.model, s.plan), "wacc": "separate"}, store.peak_flops)

    def device_s(op: str) -> float:
        ks = op_kernels(op, key)
        return float(kernel_times(*kernel_arrays(ks), kernel_peak_flops(ks, "bf16", store.peak_flops),
                                  store.memory_bandwidth_bytes_per_s, store.op_model, kernel_fp8(ks),
                                  kernel_class(ks)).sum())

    assert device_s("router_fwd") < 0.2 * HOST_S
    assert analytic_op_time("router_fwd", key, store) == HOST_S
    assert device_s("experts_bwd") > HOST_S
    assert analytic_op_time("experts_bwd", key, store) == pytest.approx(device_s("experts_bwd"),
                                                                        rel=1e-12)
    # without the host time (the stores before the seventh round) the router took its device time
    assert analytic_op_time("router_fwd", key, base) == pytest.approx(device_s("router_fwd"),
                                                                      rel=1e-12)
