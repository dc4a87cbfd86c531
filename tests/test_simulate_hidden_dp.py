"""``vtrain simulate``'s "Per stage (mean)" line and ``--json`` name the data-parallel
collectives hidden under compute (``overlap_grad_reduce``'s reduce-scatters,
``overlap_param_gather``'s all-gathers) beside the hidden TP collectives, as ``vtrain diff``
shows them; before, only the hidden TP collectives were named there."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.cli import main
from core.io.session import save_session
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.graph_types import KINDS
from core.sim.simulate import simulate
from core.studies.diff import time_terms


def _session(overlap: bool) -> Session:
    model = dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], seq_length=2048)
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=4,
                        micro_batch_size=1, global_batch_size=32, recompute="none",
                        zero_stage=1, overlap_grad_reduce=overlap, overlap_param_gather=overlap)
    return Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


def test_hidden_dp_collectives_are_the_overlapped_dp_tasks():
    on, off = simulate(_session(True)), simulate(_session(False))
    g = on.graph
    dp = (g.kind == KINDS.index("dp_comm")) & np.asarray(g.overlapped, bool)
    # the overlapped DP tasks' seconds, mean over the 2 stages
    want = float(g.duration_s[dp].sum()) / 2
    assert want > 0
    assert on.report.dp_hidden_s == pytest.approx(want, rel=1e-12)
    # what vtrain diff shows as overlapped DP collectives
    assert on.report.dp_hidden_s == pytest.approx(time_terms(on)[2]["dp_comm"], rel=1e-12)
    assert off.report.dp_hidden_s == 0.0 and "dp_comm" not in time_terms(off)[2]
    assert on.report.to_dict()["dp_hidden_s"] == on.report.dp_hidden_s


def test_simulate_text_and_json_name_the_hidden_dp_collectives(tmp_path, capsys):
    cfg = tmp_path / "s.json"
    save_session(_session(True), cfg)
    r = simulate(_session(True)).report
    assert main(["simulate", str(cfg)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = out[out.index("Per stage (mean)"):]
    line = line[:line.index("bubble")]
    assert f"hidden DP collectives {r.dp_hidden_s:,.3f} s" in line
    assert main(["simulate", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dp_hidden_s"] == pytest.approx(r.dp_hidden_s, rel=1e-12)
