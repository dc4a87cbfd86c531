"""Modern GPU kinds: spec files, the stores built from them, GPU names and NVLink domains."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from core.accuracy.shared_fit import SHARED_FIXED
from core.cli import main
from core.sim.comm import CommModel
from core.plan.cluster import GPU_HOST_GPUS, GPU_KINDS, GPU_NVLINK_DOMAIN, ClusterConfig, gpu_kind
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.model.ops import DEFAULT_OP_MODEL
from core.store.gpu_spec import GPU_SPECS_DIR, GpuSpecError, read_gpu_spec, shipped_specs
from core.store.profile_store import ProfileStore
from core.store.profiles_gen import collective_group_sizes, generate_store, store_from_spec
from core.io.session import load_any
from core.sim.simulate import open_profile, simulate
from tests.conftest import EXAMPLES, ROOT

NEW_KINDS = ("H100-SXM5-80GB", "H100-96GB-HBM2e-500W", "H200-SXM-141GB", "B200-180GB",
             "GB200-NVL72")
#: The kinds without a data sheet of their own: the share of the reference peaks is fitted.
FITTED_PEAK_KINDS = ("H100-96GB-HBM2e-500W",)
GiB = 2**30


# --------------------------------------------------------------------------- spec files

def test_every_gpu_kind_has_a_spec_file_a_store_and_its_nvlink_domain():
    specs = shipped_specs()
    assert sorted(specs) == sorted(GPU_KINDS)
    for kind, spec in specs.items():
        assert spec.path.name == f"{kind}.json"
        assert (ROOT / "profiles" / f"{kind}.h5").is_file()
        assert GPU_NVLINK_DOMAIN[kind] == spec.gpus_per_nvlink_domain
        # a host's GPUs are part of one NVLink domain: 8 of 8, 4 of a GB200 rack's 72
        assert GPU_NVLINK_DOMAIN[kind] % GPU_HOST_GPUS[kind] == 0
        assert set(spec.sources) == {"peak_tflops", "memory", "nvlink", "nic"}
    assert sorted(GPU_HOST_GPUS) == sorted(GPU_KINDS)
    assert (GPU_HOST_GPUS["GB200-NVL72"], GPU_HOST_GPUS["GH200-96GB"]) == (4, 1)


def test_spec_figures_are_the_data_sheet_ones_in_base_units():
    """REFERENCE.md 'GPUs' table (dense, per GPU); NVLink per direction is half the total."""
    expect = {  # bf16 TFLOP/s, fp8 TFLOP/s, HBM GiB, HBM TB/s, NVLink GB/s both ways, domain, NIC Gb/s
        "H100-SXM5-80GB": (989, 1979, 80, 3.35, 900, 8, 400),
        # HBM as CUDA reports it on an H200 (benchmarks/data/h200_kernel_classes.json: 150,109,880,320 B)
        "H200-SXM-141GB": (989, 1979, 150_109_880_320 / GiB, 4.8, 900, 8, 400),
        "B200-180GB": (2250, 4500, 180, 8, 1800, 8, 400),
        "GB200-NVL72": (2500, 5000, 186, 8, 1800, 72, 400),
        # no data sheet of its own: the SXM5's peaks and bandwidth, its 96 GB and 400 Gb/s NIC
        "H100-96GB-HBM2e-500W": (989, 1979, 96, 3.35, 900, 8, 400),
    }
    specs = shipped_specs()
    for kind, (bf16, fp8, hbm, bw, nvl, dom, nic) in expect.items():
        s = specs[kind]
        assert s.peak_flops["bf16"] == bf16 * 1e12 and s.peak_flops["fp16"] == bf16 * 1e12
        assert s.peak_flops["fp8"] == fp8 * 1e12
        assert s.memory_bytes == hbm * GiB
        assert s.memory_bandwidth_bytes_per_s == pytest.approx(bw * 1e12, rel=1e-15)
        assert s.nvlink_bytes_per_s == nvl * 1e9 / 2
        assert (s.gpus_per_nvlink_domain, s.nic_bits_per_s) == (dom, nic * 1e9)
    # the A100 spec reproduces the figures the calibrated A100 store was fitted from
    a100 = specs["A100-SXM4-80GB"]
    assert a100.peak_flops == {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}
    assert a100.memory_bandwidth_bytes_per_s == 2.039e12 and a100.nvlink_bytes_per_s == 300e9


# --------------------------------------------------------------------------- shipped stores

@pytest.mark.parametrize("kind", NEW_KINDS)
def test_shipped_store_opens_with_the_spec_peaks_and_provenance(kind):
    spec = read_gpu_spec(GPU_SPECS_DIR / f"{kind}.json")
    store = ProfileStore.open(ROOT / "profiles" / f"{kind}.h5")
    assert store.device_name == kind
    assert store.peak_flops == spec.peak_flops and "fp8" in store.peak_flops
    # data sheets: dense FP8 twice BF16 (rounded: H100 989.4 -> 1,979)
    assert store.peak_flops["fp8"] == pytest.approx(2 * store.peak_flops["bf16"], rel=1e-3)
    assert store.memory_bytes == spec.memory_bytes
    assert store.memory_bandwidth_bytes_per_s == spec.memory_bandwidth_bytes_per_s
    # calibrated on the published runs (docs/accuracy.md) from the spec's analytic store: the
    # parameters not fitted keep the spec's (or the op model's default) values
    p = store.provenance
    assert p["method"] == "calibrated" and "published_runs.sessions.jsonl" in p["data"]
    # every fitted parameter carries the bounds of its fit (vtrain profile show names those at one)
    assert set(p["parameter_bounds"]) == set(p["fitted_parameters"])
    base = p["base_provenance"]
    assert base["method"] == "analytic" and base["spec_file"] == f"{kind}.json"
    assert base["sources"] == spec.sources and "assumed" in base["figures"]
    assert base["gpus_per_nvlink_domain"] == spec.gpus_per_nvlink_domain
    assert base["nic_bits_per_s"] == spec.nic_bits_per_s
    assert p["num_shape_factors"] == 0 and "cross_validation" in p
    fitted = set(p["fitted_parameters"])
    assert fitted and fitted <= set(DEFAULT_OP_MODEL)
    # (the host time per op call: the A100 fit's, core.accuracy.shared_fit.SHARED_FIXED)
    for name, value in {**DEFAULT_OP_MODEL, **spec.op_model, **SHARED_FIXED}.items():
        if name not in fitted:
            assert store.op_model[name] == value, name
    # curves for every group a node of the NVLink domain holds
    assert store.collective_kinds()["all_reduce"] == collective_group_sizes(spec.gpus_per_nvlink_domain)
    # the ring curve at the domain size: alpha*2(n-1) + bytes*2(n-1)/n / (NVLink one way * eff)
    n = spec.gpus_per_nvlink_domain
    x, t = store.collective_curve("all_reduce", n)
    bus = spec.nvlink_bytes_per_s * spec.nvlink_efficiency
    np.testing.assert_allclose(t, spec.collective_latency_s * 2 * (n - 1) + x * 2 * (n - 1) / n / bus,
                               rtol=1e-12)
    assert (ROOT / "profiles" / f"{kind}.h5").stat().st_size < 2 * 2**20


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_shipped_store_is_what_the_spec_file_generates(kind):
    """The shipped (calibrated) store is the spec's analytic store with the fitted parameters:
    its base provenance is the generator's, its tables that model tabulated, its curves the
    spec's."""
    from core.accuracy.calibrate import apply_fit
    shipped = ProfileStore.open(ROOT / "profiles" / f"{kind}.h5")
    base = shipped.provenance["base_provenance"]
    fresh = generate_store(kind, date=base["date"])
    assert base == fresh.provenance
    refit = apply_fit(fresh, shipped.op_model)
    assert shipped.op_names() == refit.op_names()
    for op in refit.op_names():
        np.testing.assert_allclose(shipped.op_table(op)[1], refit.op_table(op)[1], rtol=1e-12)
    assert shipped.collective_kinds() == fresh.collective_kinds()


def test_collective_group_sizes_cover_the_groups_of_a_node():
    assert collective_group_sizes(8) == [2, 4, 8]
    assert collective_group_sizes(72) == [2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 32, 36, 64, 72]
    assert collective_group_sizes(1) == []


# --------------------------------------------------------------------------- simulating

def _session(kind: str) -> Session:
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")  # GPT-3 1.3B, t=2 p=2 d=2
    s.cluster.gpu = kind
    return s


def test_gpt3_1_3b_simulates_on_every_gpu_kind_with_its_own_store():
    for kind in GPU_KINDS:
        r = simulate(_session(kind)).report
        assert r.profile["device"] == kind
        assert r.iteration_time_s > 0 and r.fits_in_memory
        assert not any("the profile is of" in w for w in r.warnings)


def test_same_plan_is_faster_on_newer_gpus(tmp_path):
    a100_analytic = tmp_path / "A100-analytic.h5"
    generate_store("A100-SXM4-80GB").save(a100_analytic)
    s = _session("A100-SXM4-80GB")
    t_a100 = simulate(s, open_profile(a100_analytic)).report.iteration_time_s
    t = {k: simulate(_session(k)).report.iteration_time_s for k in NEW_KINDS}
    assert t["GB200-NVL72"] < t["B200-180GB"] < t["H100-SXM5-80GB"] < t_a100
    # H200: the H100's compute with 4.8 instead of 3.35 TB/s: faster, by less than the bandwidth ratio
    assert t["H200-SXM-141GB"] < t["H100-SXM5-80GB"]
    assert t["H100-SXM5-80GB"] / t["H200-SXM-141GB"] < 4.8 / 3.35
    # B200 has 2.275x the H100's BF16 peak and 2.39x its bandwidth: at most that much faster
    assert 1.5 < t["H100-SXM5-80GB"] / t["B200-180GB"] < 2.39


def test_gb200_node_is_its_72_gpu_nvlink_domain():
    s = Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(8, 1, 9, 4, 288, "1f1b", "none", "bf16"),
                ClusterConfig("GB200-NVL72", 72, None, 28800.0))
    assert validate(s) == []
    for kind in ("H100-SXM5-80GB", "B200-180GB", "A100-SXM4-80GB"):
        other = s.copy()
        other.cluster.gpu = kind
        errs = validate(other)
        assert [e.field for e in errs] == ["cluster.gpus_per_node"]
        assert f"exceeds the NVLink domain of {kind} (8 GPUs)" in errs[0].message
    own = s.copy()
    own.cluster.gpu, own.cluster.profile_path = "H100-SXM5-80GB", str(ROOT / "profiles" / "H100-SXM5-80GB.h5")
    assert validate(own) == []  # a store of one's own: its node size is the user's call

    # the data-parallel all-reduce of 9 ranks stays inside the rack: NVLink ring, no NIC
    store = open_profile(ROOT / "profiles" / "GB200-NVL72.h5")
    nbytes = 2.0**30  # a point of the curve (between points it is log-log interpolated)
    comm = CommModel(store, s.plan, s.cluster)
    bus = 900e9 * 0.8
    assert comm.dp_all_reduce(nbytes) == pytest.approx(2e-6 * 16 + nbytes * 16 / 9 / bus, rel=1e-9)
    assert comm.warnings == []
    # the same plan on 8-GPU nodes of the same GPU: the 9 replicas span 9 nodes, over the NICs
    s8 = s.copy()
    s8.cluster.gpus_per_node, s8.cluster.inter_node_bandwidth_gbits_per_s = 8, 3200.0
    assert CommModel(store, s8.plan, s8.cluster).dp_all_reduce(nbytes) > 2 * comm.dp_all_reduce(nbytes)
    r = simulate(s).report
    assert r.iteration_time_s > 0 and not [w for w in r.warnings if "no measured curve" in w]


# --------------------------------------------------------------------------- names

@pytest.mark.parametrize("name, kind", [
    ("H100-SXM-80GB", "H100-SXM5-80GB"), ("H100-80GB", "H100-SXM5-80GB"), ("h100", "H100-SXM5-80GB"),
    ("H200-SXM-141GB", "H200-SXM-141GB"), ("H200", "H200-SXM-141GB"),
    ("B200-180GB", "B200-180GB"), ("B200", "B200-180GB"),
    ("GB200 (NVL72)", "GB200-NVL72"), ("GB200", "GB200-NVL72"), ("A100-SXM4-80GB", "A100-SXM4-80GB"),
    # as other tables write them: system names, form factor, memory size and type in any order
    ("DGX-H100", "H100-SXM5-80GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("H100 SXM", "H100-SXM5-80GB"), ("H100-SXM5-80GB", "H100-SXM5-80GB"), ("DGX H200", "H200-SXM-141GB"),
    ("H200 SXM 141GB", "H200-SXM-141GB"), ("DGX-B200", "B200-180GB"), ("B200 (180GB)", "B200-180GB"),
    ("DGX-GB200", "GB200-NVL72"), ("GB200 NVL72", "GB200-NVL72"), ("A100 80GB", "A100-SXM4-80GB"),
    ("NVIDIA H100 80 GB HBM3", "H100-SXM5-80GB"), ("GB200 NVL-72", "GB200-NVL72"),
    ("GB200 Grace Blackwell Superchip", "GB200-NVL72"), ("Tesla A100", "A100-SXM4-80GB"),
    ("H100 SXM5 80GB (700 W)", "H100-SXM5-80GB"), ("B200 1000W", "B200-180GB"),  # stock TDPs
    # a parenthesis that only describes the machine is set aside
    ("GB200 NVL72 (4 GPUs per compute tray)", "GB200-NVL72"), ("B200 (HGX, 8 per node)", "B200-180GB"),
    ("H100 SXM5 80GB (DGX H100 reference)", "H100-SXM5-80GB"),
    # GPU counts of a system are not variants; Meta's Grand Teton 96 GB part at 500 W
    ("HGX H100 8-GPU", "H100-SXM5-80GB"), ("8x H100", "H100-SXM5-80GB"),
    ("DGX H100 (8x H100 SXM5)", "H100-SXM5-80GB"),
    ("Grand Teton H100 96GB HBM2e @500W", "H100-96GB-HBM2e-500W"),
])
def test_published_gpu_names_map_to_kinds(name, kind):
    assert gpu_kind(name) == kind


@pytest.mark.parametrize("name", [
    "H100 PCIe", "H100 NVL", "A100-40GB", "H200 NVL", "GB200 NVL36", "H100 (500 W)", "GB300", "H800 PCIe",
    "MI300X", "h100 h200", "GB200 NVL", "H100 superchip", "GH200 144GB",
    # a parenthesis naming a variant (power, memory, form factor) or another GPU is never set aside
    "H100 (500W)", "H100 (PCIe)", "A100 (40GB)", "H100 (vs A100 baseline)", "GB200 (NVL36)",
    "A100 (40G)", "H100 (94G)", "H100 (95 GiB)", "A100 (AWS p4d.24xlarge)", "H100 (H800)",
    "A100 (A800)", "H100 (GH200)", "H100 (DGX H800)", "Grand Teton H100",
])
def test_other_variants_and_families_keep_their_name(name):
    """Another variant of a family (memory, bandwidth, power or NVLink domain), another
    family, or two families in one name: no shipped kind, refused by name downstream."""
    assert gpu_kind(name) == name


@pytest.mark.parametrize("name", [
    "H100-96GB-HBM2e (500 W)", "H100 96GB HBM2e 500W", "H100 SXM5 96 GB 500 W",
    "H100-96GB-HBM2e-500W"])
def test_the_500w_h100_is_its_own_kind(name):
    """The 96 GB HBM2e H100 at 500 W (torchtitan's benchmarks) maps to its own kind, never to
    the SXM5 80 GB; it needs both its memory and its power named."""
    assert gpu_kind(name) == "H100-96GB-HBM2e-500W"


@pytest.mark.parametrize("name", ["H100 96GB", "H100 (500 W)", "H100 96GB HBM3 700W",
                                  "H100 80GB 500W", "H100 96GB 500W PCIe"])
def test_other_h100_variants_keep_their_name(name):
    assert gpu_kind(name) == name


def test_peak_fraction_is_fitted_only_for_the_kinds_without_a_data_sheet():
    specs = shipped_specs()
    assert {k for k, s in specs.items() if s.peak_fraction_fitted} == set(FITTED_PEAK_KINDS)
    for kind in NEW_KINDS:
        store = ProfileStore.open(ROOT / "profiles" / f"{kind}.h5")
        fraction = store.op_model.get("peak_fraction", 1.0)
        if kind in FITTED_PEAK_KINDS:
            # fitted on its 8 published runs (docs/accuracy.md); the 500 W cap sustains less
            assert 0.3 < fraction < 1.0 and "peak_fraction" in store.provenance
            assert "peak_fraction" in store.provenance["fitted_parameters"]
        else:
            assert fraction == 1.0 and "peak_fraction" not in store.provenance["fitted_parameters"]


def test_other_gpu_variants_are_not_aliased_but_refused():
    name = "H100 NVL"  # other memory, bandwidth and power than the SXM5 80 GB
    assert gpu_kind(name) == name
    s = _session("A100-SXM4-80GB")
    s.cluster.gpu = name
    assert [e.field for e in validate(s)] == ["cluster.gpu"]


def test_editor_offers_every_gpu_kind():
    from dataclasses import fields
    choices = {f.name: f.metadata.get("choices") for f in fields(ClusterConfig)}["gpu"]
    assert tuple(choices) == GPU_KINDS


# --------------------------------------------------------------------------- spec errors

def _spec(**changes) -> dict:
    raw = json.loads((GPU_SPECS_DIR / "H100-SXM5-80GB.json").read_text())
    raw["name"] = "My-GPU"
    for k, v in changes.items():
        if v is None:
            raw.pop(k, None)
        else:
            raw[k] = v
    return raw


def _write(tmp_path, raw, name="gpu.json"):
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


@pytest.mark.parametrize("changes, field, rule", [
    ({"memory_gib": None}, "memory_gib", "missing required field"),
    ({"peak_tflops": {"bf16": -1}}, "peak_tflops.bf16", "must be a positive number"),
    ({"peak_tflops": {}}, "peak_tflops", "non-empty object"),
    # a typo of bf16 was kept and never read: a bf16 plan then failed for want of a bf16 peak
    ({"peak_tflops": {"bf61": 989}}, "peak_tflops.bf61", "unknown dtype (known: fp32, tf32, "
                                                         "fp16, bf16, fp8, mxfp8"),
    ({"memory_bandwidth_tbytes_per_s": "fast"}, "memory_bandwidth_tbytes_per_s", "positive number"),
    ({"nvlink_gbytes_per_s_bidirectional": 0}, "nvlink_gbytes_per_s_bidirectional", "positive number"),
    ({"gpus_per_nvlink_domain": 7.5}, "gpus_per_nvlink_domain", "integer from 1 to 576"),
    ({"nic_gbits_per_s": True}, "nic_gbits_per_s", "positive number"),
    ({"efficiencies": {"gemm_efficiency_max": 1.5}}, "efficiencies.gemm_efficiency_max", "(0, 1]"),
    ({"efficiencies": {"warp_speed": 1}}, "efficiencies.warp_speed", "unknown parameter"),
    ({"efficiencies": {"kernel_overhead_s": -1e-6}}, "efficiencies.kernel_overhead_s", "zero or more"),
    ({"sources": {"peak_tflops": "x", "memory": "x", "nvlink": "x"}}, "sources.nic", "missing"),
    ({"name": "a/b"}, "name", "without '/'"),
    ({"format": "vtrain-session"}, "format", "not a GPU spec file"),
    ({"version": 2}, "version", "newer than this program reads"),
    ({"tdp_w": 700}, "tdp_w", "unknown field"),
    ({"peak_fraction_fitted": "yes"}, "peak_fraction_fitted", "true or false"),
    ({"efficiencies": {"peak_fraction": 1.2}}, "efficiencies.peak_fraction", "(0, 1]"),
    # figures in another unit, named by the spec's field and unit (not the store's)
    ({"peak_tflops": {"bf16": 1.3074e15}}, "peak_tflops.bf16",
     "1.3074e+15 is above 100,000 TFLOP/s, beyond any GPU: the field is in TFLOP/s"),
    ({"memory_gib": 192e9}, "memory_gib", "1.92e+11 is above 10,000 GiB, beyond any GPU"),
    ({"memory_bandwidth_tbytes_per_s": 5300}, "memory_bandwidth_tbytes_per_s",
     "5300 is above 1,000 TB/s"),
])
def test_spec_errors_name_the_file_field_and_rule(tmp_path, changes, field, rule):
    path = _write(tmp_path, _spec(**changes))
    with pytest.raises(GpuSpecError) as exc:
        read_gpu_spec(path)
    fields = [e.field for e in exc.value.errors]
    assert f"{path}: {field}" in fields
    assert rule in str(exc.value)


def _write_text(path, text):
    path.write_text(text)
    return path


def test_spec_file_that_is_not_json_or_missing(tmp_path):
    with pytest.raises(GpuSpecError, match=r"gpu\.json: not a valid JSON file"):
        read_gpu_spec(_write(tmp_path, "{not json"))
    with pytest.raises(GpuSpecError, match="absent.json: cannot read: No such file"):
        read_gpu_spec(tmp_path / "absent.json")
    with pytest.raises(GpuSpecError, match="deep.json: JSON nested 100 levels deep"):
        read_gpu_spec(_write_text(tmp_path / "deep.json", "[" * 100 + "]" * 100))
    with pytest.raises(GpuSpecError, match="must be a JSON object"):
        read_gpu_spec(_write(tmp_path, "[1, 2]"))


def test_cli_generates_a_store_from_a_spec_file(tmp_path, capsys):
    raw = _spec(peak_tflops={"bf16": 1000, "fp8": 2000}, gpus_per_nvlink_domain=4)
    spec_path, out = _write(tmp_path, raw), tmp_path / "my.h5"
    assert main(["profile", "generate", "--spec", str(spec_path), "--out", str(out)]) == 0
    store = ProfileStore.open(out)
    assert store.device_name == "My-GPU" and store.peak_flops == {"bf16": 1000e12, "fp8": 2000e12}
    assert store.collective_kinds()["all_gather"] == [2, 4]
    assert "My-GPU" in capsys.readouterr().out
    # a session with that store simulates (bf16, t within the 4-GPU node)
    s = _session("A100-SXM4-80GB")
    s.cluster.gpus_per_node, s.cluster.profile_path = 4, str(out)
    s.plan.data_parallel, s.plan.global_batch_size = 1, 128
    assert simulate(s).report.profile["device"] == "My-GPU"


def test_a_spec_without_efficiencies_says_which_defaults_it_takes(tmp_path, capsys):
    """A spec that gives no efficiencies takes the op model's defaults: generate and `profile
    show` name each with its value (generate said "assumed efficiencies" and show printed an
    empty line); one the spec gives is not listed."""
    from core.store.gpu_spec import assumed_efficiencies
    spec_path, out = _write(tmp_path, _spec(efficiencies=None)), tmp_path / "my.h5"
    assert main(["profile", "generate", "--spec", str(spec_path), "--out", str(out)]) == 0
    listed = ("gemm_efficiency_max 0.8, gemm_half_size 160, memory_efficiency 0.75, "
              "inter_node_efficiency 1, nvlink_efficiency 0.8")
    assert f"not in the spec, the op model's defaults: {listed}" in capsys.readouterr().out
    assert main(["profile", "show", str(out)]) == 0
    assert ("efficiencies not in the spec, the op model's defaults: "
            + listed.replace(" 0", "=0").replace(" 1", "=1")) in capsys.readouterr().out
    values, defaulted = assumed_efficiencies(_spec()["efficiencies"])  # the H100 spec's
    assert (values["gemm_efficiency_max"], values["gemm_half_size"]) == (0.75, 224)
    assert defaulted == ["inter_node_efficiency"] and values["inter_node_efficiency"] == 1.0


def test_cli_spec_error_exits_2_naming_the_field_without_traceback(tmp_path):
    path = _write(tmp_path, _spec(peak_tflops={"bf16": 0}))
    proc = subprocess.run([sys.executable, "-m", "core.cli", "profile", "generate", "--spec", str(path),
                           "--out", str(tmp_path / "x.h5")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"vtrain: error: {path}: peak_tflops.bf16: 0 must be a positive "
                                   "number (TFLOP/s)")
    assert not (tmp_path / "x.h5").exists()


def test_cli_generate_by_gpu_name_and_unknown_name(tmp_path, capsys):
    out = tmp_path / "b200.h5"
    assert main(["profile", "generate", "--gpu", "B200", "--out", str(out)]) == 0
    assert ProfileStore.open(out).peak_flops["fp8"] == 4500e12
    assert main(["profile", "generate", "--gpu", "H100-96GB", "--out", str(out)]) == 2
    assert "no shipped spec; known: A100-SXM4-80GB" in capsys.readouterr().err


def test_a100_store_is_calibrated_and_the_a100_spec_rebuilds_its_analytic_base():
    shipped = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    assert shipped.provenance["method"] == "calibrated"
    base = store_from_spec(read_gpu_spec(GPU_SPECS_DIR / "A100-SXM4-80GB.json"))
    assert base.peak_flops == shipped.peak_flops and base.memory_bytes == shipped.memory_bytes == 80 * GiB
    assert base.memory_bandwidth_bytes_per_s == shipped.memory_bandwidth_bytes_per_s


def test_precision_without_a_peak_is_refused_by_name_everywhere(capsys):
    """The B200 and GB200 specs give no FP32/TF32 figure: an fp32 plan is refused, not guessed."""
    s = _session("B200-180GB")
    s.plan.precision = "fp32"
    with pytest.raises(KeyError, match=r"profile of B200-180GB has no peak FLOP/s for dtype 'fp32'"):
        simulate(s)
    store = open_profile(ROOT / "profiles" / "B200-180GB.h5")
    with pytest.raises(KeyError, match=r"no peak FLOP/s for dtype 'fp32' \(it has bf16, fp16, fp8, mxfp8; "
                                      r"plan.precision and plan.fp8_recipe choose the dtypes\)"):
        store.peak_flops["fp32"]  # as MFU and the studies look it up
    assert store.peak_flops.get("fp32") is None and "fp32" not in store.peak_flops


def test_store_list_shows_each_device_with_its_peaks():
    from core.store.profiles import list_stores
    infos = {i.device_name: i for i in list_stores([ROOT / "profiles"])}
    assert set(infos) == set(GPU_KINDS)
    assert infos["GB200-NVL72"].device_line() == ("peak TFLOP/s bf16 2,500, fp16 2,500, fp8 5,000, "
                                                   "mxfp8 5,000; "
                                                   "HBM 186.0 GiB at 8,000 GB/s")
    assert infos["H200-SXM-141GB"].peak_flops["fp8"] == 1979e12


def test_an_unfitted_store_of_a_part_without_a_data_sheet_warns_and_a_chain_keeps_the_flag():
    """The analytic store of the 500 W H100 holds the SXM5's peaks with peak_fraction 1: a
    simulation on it says so; a store calibrated on a calibrated one still knows the part has
    no data sheet (the flag is found down the chain of base provenances)."""
    from core.store.gpu_spec import fits_peak_fraction
    from core.store.profiles_gen import generate_store
    analytic = generate_store("H100-96GB-HBM2e-500W")
    assert fits_peak_fraction(analytic) and analytic.op_model.get("peak_fraction", 1.0) == 1.0
    s = _session("A100-SXM4-80GB")
    s.cluster.gpu = "H100-96GB-HBM2e-500W"
    r = simulate(s, analytic).report
    assert any("peak_fraction was never fitted" in w for w in r.warnings)
    shipped = ProfileStore.open(ROOT / "profiles" / "H100-96GB-HBM2e-500W.h5")
    assert not any("never fitted" in w for w in simulate(s, shipped).report.warnings)
    chained = type("Store", (), {"provenance": {"method": "calibrated", "base_provenance": {
        "method": "calibrated", "base_provenance": dict(analytic.provenance)}}})()
    assert fits_peak_fraction(chained)
    assert not fits_peak_fraction(ProfileStore.open(ROOT / "profiles" / "H100-SXM5-80GB.h5"))


@pytest.mark.parametrize("change, rule", [
    # a peak or bandwidth whose repr has an exponent was scaled as text ("1e-05e12": exit 1)
    (lambda d: d["peak_tflops"].__setitem__("bf16", 1e-320),
     "peak_tflops.bf16: 1e-320 is a subnormal number (under 2.2e-308 in magnitude): give 0 or a "
     "normal number"),
    # a subnormal NIC bandwidth was written to the store (exit 0)
    (lambda d: d.__setitem__("nic_gbits_per_s", 1e-320),
     "nic_gbits_per_s: 1e-320 is a subnormal number"),
])
def test_spec_figures_that_are_no_normal_number_are_refused_by_field(tmp_path, change, rule):
    raw = json.loads((GPU_SPECS_DIR / "H100-96GB-HBM2e-500W.json").read_text())
    change(raw)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(GpuSpecError) as err:
        read_gpu_spec(path)
    assert str(err.value).startswith(f"{path}: {rule}"), str(err.value)


def test_spec_figures_with_an_exponent_scale_exactly(tmp_path):
    """1e-05 TFLOP/s made "1e-05e12", no number: ValueError, exit 1."""
    from core.store.gpu_spec import _decimal
    assert _decimal(1e-05, 12) == 1e7 and _decimal(2.039, 12) == 2.039e12
    assert _decimal(989, 12) == 989e12 and _decimal(1.5e3, 9) == 1.5e12
