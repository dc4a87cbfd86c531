"""``vtrain calibrate --trace``: a store's op model fitted to a profiler trace's per-class times.

The traces here are synthetic: written from the simulator's own per-class predictions under
known parameters (:func:`core.accuracy.trace_fit.predicted_classes`), as PyTorch profiler
Chrome traces of two pipeline stages, then read back through the trace reader and fitted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.accuracy.trace_fit import (CANDIDATES, fit_trace, predicted_classes,
                                     trace_calibrated_store)
from core.cli import main
from core.cli.common import apply_sets
from core.io.kineto import choose_step, read_traces
from core.io.kineto_classes import measure_step
from core.io.session import load_any
from core.model.ops import effective_op_model
from core.store.profile_store import ProfileStore
from tests.conftest import EXAMPLES, ROOT

SESSION = EXAMPLES / "gpt3_1.3b_single_node.json"  # t=2 p=2 d=2: ranks 0 and 4 are stages 0, 1
BASE = ROOT / "profiles" / "H100-SXM5-80GB.h5"
SETS = ["cluster.gpu=H100-SXM5-80GB"]
#: The run's "true" parameters, away from the base store's.
TRUE = {"gemm_efficiency_max": 0.58, "memory_efficiency": 0.52, "kernel_overhead_s": 6.5e-6,
        "collective_overhead_s": 2.5e-5}
#: A host event's name per class (what resources/trace_classes.json files as that class).
EVENT = {"gemm": ("cpu_op", "aten::mm"),
         "attention": ("cpu_op", "aten::_scaled_dot_product_flash_attention"),
         "norm_elementwise": ("cpu_op", "aten::add"),
         "optimizer": ("user_annotation", "Optimizer.step#AdamW.step"),
         "all_reduce": ("user_annotation", "nccl:all_reduce"),
         "all_gather": ("user_annotation", "nccl:all_gather"),
         "reduce_scatter": ("user_annotation", "nccl:reduce_scatter")}


def _session():
    return apply_sets(load_any(SESSION), SETS)


def write_trace(folder: Path, seconds_by_stage: dict[int, dict[str, float]], plan) -> list[Path]:
    """One host-event trace per stage (its first rank), each class one event of its seconds,
    back to back inside ``ProfilerStep#1``."""
    paths = []
    per_stage = plan.num_gpus // plan.pipeline_parallel
    for stage, sums in seconds_by_stage.items():
        rank = stage * per_stage
        t, events = 1000.0, []
        for cls, s in sums.items():
            if s <= 0 or cls not in EVENT:
                continue
            cat, name = EVENT[cls]
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": t,
                           "dur": s * 1e6, "args": {}})
            t += s * 1e6
        events.insert(0, {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                          "pid": 1, "tid": 1, "ts": 999.0, "dur": t - 999.0 + 1.0, "args": {}})
        path = folder / f"synthetic_rank{rank}.json"
        path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events}))
        paths.append(path)
    return paths


def _synthetic(folder: Path, true: dict, classes=None) -> tuple[list[Path], ProfileStore]:
    session, base = _session(), ProfileStore.open(BASE)
    pred = predicted_classes(session, base, {**effective_op_model(base.op_model), **true})
    keep = classes or list(pred)
    by_stage = {st: {c: float(pred[c][st]) for c in keep}
                for st in range(session.plan.pipeline_parallel)}
    return write_trace(folder, by_stage, session.plan), base


def _fit(paths):
    trace = read_traces(paths)
    m = measure_step(trace, choose_step(trace))
    return fit_trace(m, _session(), ProfileStore.open(BASE))


def test_fit_recovers_known_parameters_within_2_percent(tmp_path):
    paths, base = _synthetic(tmp_path, TRUE)
    result = _fit(paths)
    assert set(TRUE) <= set(result.fitted)
    for name, value in TRUE.items():
        assert result.op_model[name] == pytest.approx(value, rel=0.02), name
    # what the trace cannot determine stays the base's, and says why
    own = effective_op_model(base.op_model)
    for name, why in result.not_determined.items():
        assert result.op_model[name] == own[name] and why
    assert "gemm_half_size" in result.not_determined  # one GEMM figure per stage
    assert "inter_node_efficiency" in result.not_determined  # one node: no inter-node traffic
    assert set(result.fitted) | set(result.not_determined) >= set(CANDIDATES)
    for ob in result.observations:  # the fitted model reproduces every class
        assert ob.after_s == pytest.approx(ob.measured_s, rel=1e-3)


def test_a_class_missing_from_the_trace_leaves_its_parameter_as_it_was(tmp_path):
    # a run that differs from the base in its GEMM efficiency alone, traced without norms
    paths, base = _synthetic(tmp_path, {"gemm_efficiency_max": 0.58},
                             classes=["gemm", "all_reduce"])
    result = _fit(paths)
    own = effective_op_model(base.op_model)
    assert result.op_model["gemm_efficiency_max"] == pytest.approx(0.58, rel=0.02)
    assert "memory_efficiency" in result.not_determined
    assert result.op_model["memory_efficiency"] == own["memory_efficiency"]
    assert any("norm_elementwise: not measured" in line for line in result.left_out)


def test_calibrated_store_times_with_the_fit_and_says_what_was_left(tmp_path):
    paths, base = _synthetic(tmp_path, TRUE)
    result = _fit(paths)
    store = trace_calibrated_store(base, result, [p.name for p in paths])
    out = tmp_path / "fitted.h5"
    store.save(out)
    back = ProfileStore.open(out)
    for name in result.fitted:
        assert back.op_model[name] == pytest.approx(result.op_model[name], rel=1e-12)
    prov = back.provenance
    assert set(prov["not_determined"]) == set(result.not_determined)
    assert set(prov["fitted_parameters"]) == set(result.fitted)
    # the new store predicts the synthetic trace's classes
    again = predicted_classes(_session(), back)
    for ob in result.observations:
        assert again[ob.cls][ob.stage] == pytest.approx(ob.measured_s, rel=1e-3)


def test_cli_calibrate_trace_writes_the_store(tmp_path, capsys):
    paths, _ = _synthetic(tmp_path, TRUE)
    out = tmp_path / "new.h5"
    rc = main(["calibrate", "--trace", *map(str, paths), "--session", str(SESSION),
               "--set", SETS[0], "--store", str(BASE), "--out", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    for name, value in TRUE.items():
        assert doc["fitted"][name]["fitted"] == pytest.approx(value, rel=0.02)
    assert ProfileStore.open(out).op_model["memory_efficiency"] == pytest.approx(
        TRUE["memory_efficiency"], rel=0.02)
    assert np.isfinite([o["predicted_after_s"] for o in doc["observations"]]).all()


def test_cli_calibrate_trace_refuses_missing_options(tmp_path, capsys):
    paths, _ = _synthetic(tmp_path, TRUE)
    rc = main(["calibrate", "--trace", str(paths[0]), "--store", str(BASE),
               "--out", str(tmp_path / "x.h5")])
    assert rc == 2 and "--session" in capsys.readouterr().err
    rc = main(["calibrate", "--session", str(SESSION), "--store", str(BASE)])
    assert rc == 2


def test_cli_calibrate_trace_refuses_kernel_classes(tmp_path, capsys):
    """--kernel-classes fits the grouped expert GEMM and FlashAttention efficiencies; a trace's
    classes cannot determine them (the fit lists both as never fitted), so with --trace the
    option is refused naming both options (exit 2), not silently ignored, and nothing is
    written."""
    from core.accuracy.trace_fit import CANDIDATES
    assert not {"grouped_gemm_efficiency", "flash_attention_efficiency"} & CANDIDATES.keys()
    paths, _ = _synthetic(tmp_path, TRUE)
    out = tmp_path / "new.h5"
    rc = main(["calibrate", "--trace", *map(str, paths), "--session", str(SESSION),
               "--set", SETS[0], "--store", str(BASE), "--out", str(out), "--kernel-classes"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "--kernel-classes" in err and "--trace" in err and "Traceback" not in err
