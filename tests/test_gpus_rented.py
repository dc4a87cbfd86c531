"""The GPU kinds people rent: H800 and A800 (NVLink cut to 400 GB/s), H20, GH200, B300.

Figures are the data sheets' (sources in each spec file's ``sources``); none of these kinds
is measured by a published run, so their stores take the calibrated parameters of their
architecture (the A100's for the A800, the shared Hopper/Blackwell fit for the others).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.cli import main
from core.sim.comm import CommModel
from core.plan.cluster import (GPU_FP8_DTYPES, GPU_KINDS, GPU_NIC_GBITS_PER_GPU, GPU_NVLINK_DOMAIN,
                               ClusterConfig, gpu_kind)
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.store.gpu_spec import shipped_specs
from core.store.profile_store import ProfileStore
from core.store.profiles_gen import generate_store
from core.io.session import load_session
from core.sim.simulate import open_profile, simulate
from tests.conftest import ROOT

GiB = 2**30
RENTED = ("H800-SXM5-80GB", "A800-SXM4-80GB", "H20-96GB", "GH200-96GB", "B300-288GB")
#: The kinds whose stores take the shared fit of the Hopper and Blackwell kinds.
SHARED_FIT = ("H800-SXM5-80GB", "H20-96GB", "GH200-96GB", "B300-288GB")
#: Data sheet per kind: dense BF16 and FP8 TFLOP/s (None: no FP8), HBM GB (read as GiB), HBM
#: TB/s, NVLink GB/s both directions, NVLink domain, NIC Gb/s per GPU.
DATA_SHEET = {
    # H800 SXM data sheet: the H100 SXM5's compute and HBM, NVLink 400 GB/s
    "H800-SXM5-80GB": (989, 1979, 80, 3.35, 400, 8, 400),
    # A800 SXM4 data sheet: the A100 SXM4's compute and HBM, NVLink 400 GB/s, no FP8
    "A800-SXM4-80GB": (312, None, 80, 2.039, 400, 8, 200),
    # HGX H20 product brief (as reported): 148 BF16, 296 FP8 dense, 96 GB HBM3 at 4.0 TB/s
    "H20-96GB": (148, 296, 96, 4.0, 900, 8, 400),
    # GH200 data sheet (96 GB HBM3 variant); DGX GH200: 256 superchips per NVLink domain
    "GH200-96GB": (989, 1979, 96, 4.0, 900, 256, 400),
    # HGX B300: 36 / 72 PFLOP/s BF16 / FP8 sparse for 8 GPUs; 288 GB at 8 TB/s; DGX B300 800 Gb/s
    "B300-288GB": (2250, 4500, 288, 8, 1800, 8, 800),
}


def _store(kind: str) -> ProfileStore:
    return ProfileStore.open(ROOT / "profiles" / f"{kind}.h5")


# --------------------------------------------------------------------------- specs and stores

@pytest.mark.parametrize("kind", RENTED)
def test_spec_and_store_hold_the_data_sheet_figures(kind):
    bf16, fp8, hbm, bw, nvl, domain, nic = DATA_SHEET[kind]
    spec = shipped_specs()[kind]
    store = _store(kind)
    assert kind in GPU_KINDS and store.device_name == kind
    for s in (spec, store):
        assert s.peak_flops["bf16"] == s.peak_flops["fp16"] == bf16 * 1e12
        assert s.peak_flops.get("fp8") == (None if fp8 is None else fp8 * 1e12)
        assert s.memory_bytes == hbm * GiB
        assert s.memory_bandwidth_bytes_per_s == pytest.approx(bw * 1e12, rel=1e-15)
    assert spec.nvlink_bytes_per_s == nvl * 1e9 / 2  # one direction: half the data sheet's total
    assert (spec.gpus_per_nvlink_domain, spec.nic_bits_per_s) == (domain, nic * 1e9)
    # the tables of core.plan.cluster agree with the spec file
    assert GPU_NVLINK_DOMAIN[kind] == domain and GPU_NIC_GBITS_PER_GPU[kind] == nic
    assert set(GPU_FP8_DTYPES[kind]) == set(spec.peak_flops) & {"fp8", "mxfp8"}
    assert set(spec.sources) == {"peak_tflops", "memory", "nvlink", "nic"}
    # small like the other shipped stores
    assert (ROOT / "profiles" / f"{kind}.h5").stat().st_size < 2 * 2**20


def test_h800_and_a800_nvlink_is_400_gb_s_below_their_full_parts():
    specs = shipped_specs()
    for cut, full, full_gb_s in (("H800-SXM5-80GB", "H100-SXM5-80GB", 900),
                                 ("A800-SXM4-80GB", "A100-SXM4-80GB", 600)):
        assert specs[cut].nvlink_bytes_per_s == 200e9  # 400 GB/s both ways
        assert specs[full].nvlink_bytes_per_s == full_gb_s * 1e9 / 2 > specs[cut].nvlink_bytes_per_s
        # the same compute and HBM as the full part
        assert specs[cut].peak_flops == specs[full].peak_flops
        assert specs[cut].memory_bytes == specs[full].memory_bytes
        assert specs[cut].memory_bandwidth_bytes_per_s == specs[full].memory_bandwidth_bytes_per_s
    # the store's 8-GPU ring all-reduce: alpha*2(n-1) + bytes*2(n-1)/n / (NVLink one way * eff)
    spec = specs["H800-SXM5-80GB"]
    x, t = _store("H800-SXM5-80GB").collective_curve("all_reduce", 8)
    np.testing.assert_allclose(t, 2e-6 * 14 + x * 14 / 8 / (200e9 * 0.8), rtol=1e-12)
    assert spec.nvlink_efficiency == 0.8 and spec.collective_latency_s == 2e-6


@pytest.mark.parametrize("kind", SHARED_FIT)
def test_shared_fit_kinds_take_the_hopper_blackwell_parameters(kind):
    """Not measured: the shared fit of the measured kinds (the H100's store holds it), applied
    to the kind's own analytic store, and the provenance says no run of it was used. The stores
    come from a later run of the same fit (scripts/generate_profiles.sh), which reproduced the
    shipped parameters to about 1e-9 (the least-squares solver's last digits)."""
    store, h100 = _store(kind), _store("H100-SXM5-80GB")
    assert store.op_model == pytest.approx(h100.op_model, rel=1e-8)
    # the bounds the fit holds (GEMM 0.65, HBM 0.4: core.accuracy.shared_fit.SHARED_BOUNDS) exactly
    for name in ("gemm_efficiency_max", "memory_efficiency", "gemm_half_size"):
        assert store.op_model[name] == h100.op_model[name]
    p = store.provenance
    assert p["method"] == "calibrated" and p["rows_of_this_kind"] == 0
    assert f"no run of {kind}" in p["note"]
    assert p["shared_fit"] == h100.provenance["shared_fit"]  # the same 30 runs
    base = p["base_provenance"]
    assert base == generate_store(kind, date=base["date"]).provenance
    assert base["method"] == "analytic" and base["spec_file"] == f"{kind}.json"


def test_a800_takes_the_a100_calibration_without_its_shape_factors_or_band():
    store, a100 = _store("A800-SXM4-80GB"), _store("A100-SXM4-80GB")
    assert store.op_model == a100.op_model
    p = store.provenance
    assert p["method"] == "calibrated" and p["rows_of_this_kind"] == 0
    assert p["num_shape_factors"] == 0 and a100.provenance["num_shape_factors"] > 0
    assert p["parameters_from"] == a100.summary()
    assert store.residuals is None and a100.residuals is not None
    base = p["base_provenance"]
    assert base == generate_store("A800-SXM4-80GB", date=base["date"]).provenance


def test_profile_generate_parameters_from(tmp_path, capsys):
    out = tmp_path / "a800.h5"
    assert main(["profile", "generate", "--gpu", "A800", "--parameters-from",
                 str(ROOT / "profiles" / "A100-SXM4-80GB.h5"), "--out", str(out)]) == 0
    fresh, shipped = ProfileStore.open(out), _store("A800-SXM4-80GB")
    assert fresh.op_model == shipped.op_model and fresh.op_names() == shipped.op_names()
    for op in shipped.op_names():
        np.testing.assert_allclose(fresh.op_table(op)[1], shipped.op_table(op)[1], rtol=1e-12)
    # an analytic store has no fitted parameters to give
    analytic = tmp_path / "analytic.h5"
    generate_store("A100-SXM4-80GB").save(analytic)
    capsys.readouterr()
    assert main(["profile", "generate", "--gpu", "A800", "--parameters-from", str(analytic),
                 "--out", str(tmp_path / "x.h5")]) == 2
    err = capsys.readouterr().err
    assert "--parameters-from" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.h5").exists()


# --------------------------------------------------------------------------- simulating

def _llama3_8b(kind: str) -> Session:
    """Llama 3 8B, t=8 on one node of 8 (b=1, B=8, full recomputation, bf16)."""
    return Session(MODEL_PRESETS["Llama 3 8B"], ParallelPlan(8, 1, 1, 1, 8, "1f1b", "full", "bf16"),
                   ClusterConfig(kind, 8))


@pytest.fixture(scope="module")
def reports():
    return {k: simulate(_llama3_8b(k)).report
            for k in RENTED + ("H100-SXM5-80GB", "A100-SXM4-80GB", "B200-180GB")}


@pytest.mark.parametrize("kind", RENTED)
def test_llama3_8b_t8_simulates_on_each_kind(kind, reports):
    r = reports[kind]
    assert r.profile["device"] == kind and r.num_gpus == 8
    assert r.iteration_time_s > 0 and r.fits_in_memory and r.comm_s > 0
    assert r.memory_capacity_bytes == DATA_SHEET[kind][2] * GiB
    assert not any("the profile is of" in w for w in r.warnings)


def test_h800_tensor_parallel_is_slower_than_h100_at_equal_compute(reports):
    """Same compute (same peaks, same fitted parameters): the compute time is equal; d=1, p=1,
    so comm_s is the tensor-parallel all-reduces, which run on 400 instead of 900 GB/s: longer,
    by at most the bandwidth ratio 900/400 (the per-step latency is the same)."""
    h800, h100 = reports["H800-SXM5-80GB"], reports["H100-SXM5-80GB"]
    assert h800.compute_s == pytest.approx(h100.compute_s, rel=1e-12)
    assert 1.5 < h800.comm_s / h100.comm_s <= 900 / 400
    assert h800.iteration_time_s > h100.iteration_time_s
    # one all-reduce of a layer's output (b s h bf16 bytes) through the comm model
    nbytes = 1 * 8192 * 4096 * 2
    t = {k: CommModel(open_profile(ROOT / "profiles" / f"{k}.h5"), _llama3_8b(k).plan,
                      _llama3_8b(k).cluster).tp_all_reduce(nbytes) for k in ("H800-SXM5-80GB",
                                                                             "H100-SXM5-80GB")}
    assert 1.5 < t["H800-SXM5-80GB"] / t["H100-SXM5-80GB"] <= 900 / 400


def test_a800_tensor_parallel_is_slower_than_a100(reports):
    assert reports["A800-SXM4-80GB"].comm_s > reports["A100-SXM4-80GB"].comm_s


def test_the_other_kinds_against_their_reference_parts(reports):
    h100 = reports["H100-SXM5-80GB"]
    # H20: a seventh of the H100's BF16 peak with more HBM bandwidth: compute slower, by less
    # than the peak ratio 989/148
    ratio = reports["H20-96GB"].compute_s / h100.compute_s
    assert 2 < ratio < 989 / 148
    # GH200: the H100's peaks with 4.0 instead of 3.35 TB/s: faster, by less than that ratio
    ratio = h100.compute_s / reports["GH200-96GB"].compute_s
    assert 1 < ratio < 4.0 / 3.35
    # B300: the B200's BF16 peak and HBM bandwidth (FP4 is what Blackwell Ultra raises)
    b300, b200 = reports["B300-288GB"], reports["B200-180GB"]
    assert b300.compute_s == pytest.approx(b200.compute_s, rel=1e-12)
    assert b300.memory_capacity_bytes == 288 * GiB > b200.memory_capacity_bytes


def test_fp8_plans_are_refused_on_the_a800_only():
    from core.plan.rules import validate
    for kind in RENTED:
        s = _llama3_8b(kind)
        s.plan.precision = "fp8"
        errs = validate(s)
        assert bool(errs) == (kind == "A800-SXM4-80GB"), (kind, errs)


def test_gh200_nodes_fit_inside_its_256_gpu_nvlink_domain():
    from core.plan.rules import validate
    s = _llama3_8b("GH200-96GB")
    for g in (1, 4, 8, 256):  # one superchip per node (rented), quad nodes, ..., a DGX GH200
        s.cluster.gpus_per_node = g
        s.cluster.inter_node_bandwidth_gbits_per_s = 400.0 * g
        assert not [e for e in validate(s) if e.field == "cluster.gpus_per_node"], g
    s.cluster.gpus_per_node = 512
    assert [e.field for e in validate(s)] == ["cluster.gpus_per_node"]


# --------------------------------------------------------------------------- names and commands

@pytest.mark.parametrize("name, kind", [
    ("H800", "H800-SXM5-80GB"), ("NVIDIA H800 80GB HBM3", "H800-SXM5-80GB"),
    ("H800 SXM5", "H800-SXM5-80GB"), ("DGX H800", "H800-SXM5-80GB"),
    ("A800", "A800-SXM4-80GB"), ("A800-SXM4-80GB", "A800-SXM4-80GB"), ("A800 80GB", "A800-SXM4-80GB"),
    ("H20", "H20-96GB"), ("HGX H20 96GB", "H20-96GB"), ("NVIDIA H20", "H20-96GB"),
    ("GH200", "GH200-96GB"), ("GH200 Grace Hopper Superchip 96GB HBM3", "GH200-96GB"),
    ("B300", "B300-288GB"), ("HGX B300", "B300-288GB"), ("B300 288GB", "B300-288GB"),
    # other variants keep their names (refused by validation)
    ("A800 40GB", "A800 40GB"), ("H20 141GB", "H20 141GB"), ("GH200 144GB", "GH200 144GB"),
    ("GB300", "GB300"), ("H800 PCIe", "H800 PCIe"),
])
def test_gpu_names_of_other_tools(name, kind):
    assert gpu_kind(name) == kind


def test_simulate_set_cluster_gpu(capsys):
    from tests.conftest import EXAMPLES
    assert main(["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--set",
                 "cluster.gpu=H800-SXM5-80GB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"]["device"] == "H800-SXM5-80GB"


@pytest.mark.parametrize("name,kind", [("H800", "H800-SXM5-80GB"), ("GH200", "GH200-96GB"),
                                       ("H100 SXM", "H100-SXM5-80GB")])
def test_simulate_set_cluster_gpu_reads_other_tools_names(name, kind, capsys):
    # README: "--gpu and --set cluster.gpu= take them, and other tools' names (H800, GH200)";
    # --set refused them ("has no shipped profile") while --gpu read them
    from tests.conftest import EXAMPLES
    assert main(["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--set",
                 f"cluster.gpu={name}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"]["device"] == kind


@pytest.mark.parametrize("kind", RENTED)
def test_import_preset_gpu(kind, tmp_path):
    out = tmp_path / "s.json"
    assert main(["import", "preset", "Llama 3 8B", "--gpu", kind, "--out", str(out)]) == 0
    s = load_session(out)
    assert (s.cluster.gpu, s.cluster.gpus_per_node) == (kind, GPU_NVLINK_DOMAIN[kind])


#: Llama 3 8B's config.json on the Hugging Face Hub (meta-llama/Meta-Llama-3-8B), the fields the
#: import reads.
LLAMA3_8B_HF = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16",
}


def test_import_hf_takes_gpu_like_the_other_imports(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA3_8B_HF))
    plain, rented = tmp_path / "plain.json", tmp_path / "h20.json"
    assert main(["import", "hf", str(cfg), "--out", str(plain)]) == 0
    assert main(["import", "hf", str(cfg), "--gpu", "H20", "--out", str(rented)]) == 0
    a, b = load_session(plain), load_session(rented)
    assert a.cluster.gpu == "A100-SXM4-80GB"
    assert (b.cluster.gpu, b.cluster.gpus_per_node) == ("H20-96GB", 8)
    assert b.model == a.model and b.plan == a.plan  # only the cluster changes
    assert main(["import", "hf", str(cfg), "--gpu", "GH200", "--out", str(rented)]) == 0
    assert load_session(rented).cluster.gpus_per_node == 256
    # a kind that is not shipped: one line naming --gpu, exit 2, nothing written
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    assert main(["import", "hf", str(cfg), "--gpu", "B100", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--gpu" in err and "B100" in err and len(err.strip().splitlines()) == 1
    assert not bad.exists()
