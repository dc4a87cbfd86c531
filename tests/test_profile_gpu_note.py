"""A profile store of another GPU kind than cluster.gpu (``--profile``) is named on every
command that reports figures, not only on ``simulate``: the sweep, the compute-optimal study and
the shared-cluster study headed their reports with the cluster's GPU (A100) while their times,
MFU peak and memory capacity were the store's (H100)."""

from __future__ import annotations

import json

from core.cli import main
from core.io.session import load_any
from core.sim.simulate import PROFILES_DIR, open_profile, profile_gpu_note
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES

H100 = str(PROFILES_DIR / "H100-SXM5-80GB.h5")
NOTE = ("the profile is of H100-SXM5-80GB, not of cluster.gpu A100-SXM4-80GB: times, MFU and "
        "memory capacity are H100-SXM5-80GB's")


def _trace(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps([{"name": "j", "arrival_h": 0, "model": "GPT-3 1.3B",
                                 "global_batch_size": 64, "tokens": 1e9, "requested_gpus": 8}]))
    return str(path)


def test_the_note_is_none_for_the_clusters_own_store():
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")  # A100
    assert profile_gpu_note(open_profile(H100), s.cluster) == NOTE
    assert profile_gpu_note(open_profile(PROFILES_DIR / "A100-SXM4-80GB.h5"), s.cluster) is None


def test_a_sweep_on_another_gpus_store_says_so_first():
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    space = SweepSpace(num_gpus=[8], tensor_parallel=[8], pipeline_parallel=[1],
                       micro_batch_sizes=[4], schedules=["1f1b"], recompute=["full"])
    res = run_sweep(s, space, store=open_profile(H100))
    assert res.warnings[0] == NOTE and res.profile["device"] == "H100-SXM5-80GB"
    mine = run_sweep(s, space)
    assert not any("the profile is of" in w for w in mine.warnings)


def test_the_compute_optimal_study_names_the_store_its_budget_uses(capsys):
    """C = 8 GPUs x 989.4 TFLOP/s (the H100 store's peak, not the A100's 312) x 86,400 s x 0.4."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "8", "--days", "1", "--candidates", "2",
                 "--hold-session-values", "--profile", H100, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    peak = open_profile(H100).peak_flops["bf16"]
    assert doc["budget_flops"] == 8 * peak * 86400 * 0.4
    assert NOTE in doc["warnings"]


def test_the_shared_cluster_study_names_its_store_and_the_mismatch(tmp_path, capsys):
    trace = _trace(tmp_path)
    assert main(["schedule", trace, "--gpus", "8", "--policies", "requested", "--json",
                 "--profile", H100]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"] == "H100-SXM5-80GB" and doc["warnings"][0] == NOTE
    assert main(["schedule", trace, "--gpus", "8", "--policies", "requested",
                 "--profile", H100]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "profile: H100-SXM5-80GB" in out and f"warning: {NOTE}" in out
    assert main(["schedule", trace, "--gpus", "8", "--policies", "requested", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"] == "A100-SXM4-80GB"
    assert not any("the profile is of" in w for w in doc["warnings"])


def test_the_shared_cluster_study_passes_on_its_sweeps_warnings(tmp_path, capsys):
    """The jobs' sweeps warned (here: GB200 nodes of 8 GPUs, below its NVLink domain of 72, in
    a 16-GPU plan) and the study dropped every warning."""
    from core.io.session import save_session
    from core.plan.session import Session
    s = Session()
    s.cluster.gpu, s.cluster.gpus_per_node = "GB200-NVL72", 8
    cluster = tmp_path / "gb200.json"
    save_session(s, cluster)
    trace = tmp_path / "one.json"
    trace.write_text(json.dumps([{"name": "j", "arrival_h": 0, "num_layers": 2,
                                  "hidden_size": 256, "num_attention_heads": 4,
                                  "seq_length": 256, "vocab_size": 1000,
                                  "global_batch_size": 16, "tokens": 1e8,
                                  "requested_gpus": 16}]))
    assert main(["schedule", str(trace), "--gpus", "16", "--policies", "requested",
                 "--cluster", str(cluster), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(w.startswith("cluster.gpus_per_node=8 is below the GB200-NVL72's NVLink domain "
                            "of 72 GPUs") for w in doc["warnings"])
    assert main(["schedule", str(trace), "--gpus", "16", "--policies", "requested",
                 "--cluster", str(cluster)]) == 0
    assert "warning: cluster.gpus_per_node=8 is below" in " ".join(capsys.readouterr().out.split())
