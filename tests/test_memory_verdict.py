"""The memory verdict (fits / tight / does not fit) and where a planner reads it: the report,
``vtrain simulate``, ``vtrain diff`` and the Compare tab (case
s3/compare_unfit_plan_shown_better.json), and NVIDIA's passing Megatron-Bridge recipes
(published rows 2 and 16), which ran.

The rule (issue 27): the modelled need is the whole process, so it is held against the whole
capacity ``C``; the planner's margin ``r`` (cluster.memory_reserve_fraction) takes nothing away,
it only makes a need above ``(1 - r) * C`` "tight". What decides the fit is the need without the
caching allocator's reserve (StageMemory.required_bytes: PyTorch frees its cache before it
fails), so a need above ``C`` only with the reserve is tight, not unfit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from core.sim.report import memory_verdict, memory_verdict_text, memory_verdict_column
from tests.conftest import ROOT, case_file

GiB = 2**30
PUBLISHED = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"

#: (need GiB, capacity GiB, margin, verdict): each boundary just below and just above
BOUNDARIES = [
    (10.0, 80.0, 0.1, "fits"),
    (72.0, 80.0, 0.1, "fits"),                 # exactly (1 - r) * C: not inside the margin
    (72.0 + 1e-6, 80.0, 0.1, "tight"),
    (78.2, 80.0, 0.1, "tight"),
    (80.0, 80.0, 0.1, "tight"),                # exactly C: fits, tight
    (80.0 + 1e-6, 80.0, 0.1, "does not fit"),
    (87.9, 80.0, 0.1, "does not fit"),
    (79.9, 80.0, 0.0, "fits"),                 # no margin: nothing is tight
    (80.0, 80.0, 0.0, "fits"),
    (60.0 + 1e-6, 80.0, 0.25, "tight"),        # another margin moves the tight boundary only
    (60.0, 80.0, 0.25, "fits"),
]


@pytest.mark.parametrize("need_gib, cap_gib, margin, verdict", BOUNDARIES)
def test_memory_verdict_boundaries(need_gib, cap_gib, margin, verdict):
    assert memory_verdict(need_gib * GiB, cap_gib * GiB, margin) == verdict


def test_memory_verdicts_is_the_scalar_rule_elementwise():
    need = np.array([b[0] for b in BOUNDARIES if b[1:3] == (80.0, 0.1)] + [np.nan]) * GiB
    want = [b[3] for b in BOUNDARIES if b[1:3] == (80.0, 0.1)] + ["does not fit"]
    assert memory_verdict_column(need, 80.0 * GiB, 0.1).tolist() == want
    # the scalar rule too: a need without a figure (NaN) does not fit, never "fits"
    assert [memory_verdict(x, 80.0 * GiB, 0.1) for x in need.tolist()] == want


def test_verdict_text_gives_the_need_without_the_cache_when_over_the_capacity():
    """The figure the fit is decided on, where it says how far a plan is from fitting."""
    assert memory_verdict_text(83.3 * GiB, 80.0 * GiB, 0.1, False, 80.7 * GiB) == (
        "does not fit: 83.3 of 80.0 GiB, 80.7 without the allocator's cache")
    assert memory_verdict_text(81.5 * GiB, 80.0 * GiB, 0.1, True, 79.0 * GiB) == (
        "tight: 81.5 of 80.0 GiB, fits only without the allocator's cache (79.0 GiB without it)")
    # under the capacity it adds nothing
    assert memory_verdict_text(78.2 * GiB, 80.0 * GiB, 0.1, True, 75.7 * GiB) == (
        "tight: 78.2 of 80.0 GiB, inside the 10 % margin")


def test_verdict_text_names_the_margin():
    assert memory_verdict_text(78.2 * GiB, 80.0 * GiB, 0.1) == (
        "tight: 78.2 of 80.0 GiB, inside the 10 % margin")
    assert memory_verdict_text(60.0 * GiB, 80.0 * GiB, 0.1) == "fits: 60.0 of 80.0 GiB"
    assert memory_verdict_text(87.9 * GiB, 80.0 * GiB, 0.1) == "does not fit: 87.9 of 80.0 GiB"


def _diff_json(capsys, path) -> dict:
    from core.cli import main
    assert main(["diff", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_diff_marks_the_plan_that_does_not_fit(capsys):
    path = case_file("s3/compare_unfit_plan_shown_better.json")
    doc = _diff_json(capsys, path)
    a, b = doc["a"], doc["b"]
    # B (the session's own plan) is faster and cheaper, but needs 94.7 GiB (89.3 GiB of
    # tensors and 1.2 GiB of Transformer Engine's placeholder weight gradients, plus the process
    # terms: workspaces, allocator reserve, CUDA context, NCCL buffers) of the GPU's 80 GiB, 91.7
    # without the allocator's reserve: it does not fit. Of it 1.37 GiB (1.41 with the reserve)
    # is the first stage's embedding: 35 micro-batches in flight (p = 35) of int64 ids and the
    # dropout mask, s h bytes on every rank without sequence parallelism, 35 (8 s + s h).
    # A (p = 105, one layer per stage) keeps 105 such embeddings on its first stage, 4.1 GiB
    # (4.24 with the reserve): 75.7 GiB, inside the 10 % margin of 80, tight (71.5 GiB and
    # "fits" before the embedding was counted)
    emb = 8 * 2048 + 2048 * 20480
    assert doc["difference_s"] < 0 and doc["cost_difference_usd"] < 0
    assert b["max_memory_per_gpu_bytes"] / GiB == pytest.approx(
        93.3 + 35 * emb * 1.033 / GiB, abs=0.05)
    assert b["memory_capacity_bytes"] == 80 * GiB
    assert b["memory_margin"] == b["memory_reserve_fraction"] == 0.1  # simulate --json's name too
    assert (b["memory_verdict"], b["fits_in_memory"]) == ("does not fit", False)
    assert b["memory_verdict_text"] == ("does not fit: 94.7 of 80.0 GiB, 91.7 without the "
                                        "allocator's cache")
    assert a["max_memory_per_gpu_bytes"] / GiB == pytest.approx(
        71.5 + 105 * emb * 1.033 / GiB, abs=0.05)
    assert 0.9 * a["memory_capacity_bytes"] < a["max_memory_per_gpu_bytes"] \
        <= a["memory_capacity_bytes"]
    assert (a["memory_verdict"], a["fits_in_memory"]) == ("tight", True)

    from core.cli import main
    assert main(["diff", str(path)]) == 0
    out = capsys.readouterr().out
    verdict_line = [line for line in out.splitlines() if line.startswith("B DOES NOT FIT")]
    assert len(verdict_line) == 1
    assert "94.7 GiB" in verdict_line[0] and "80.0 GiB" in verdict_line[0]


def test_simulate_json_carries_the_verdict(capsys):
    from core.cli import main
    path = case_file("s3/compare_unfit_plan_shown_better.json")
    assert main(["simulate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory_verdict"] == "does not fit" and not doc["fits_in_memory"]
    assert doc["memory_verdict_text"] == ("does not fit: 94.7 of 80.0 GiB, 91.7 without the "
                                          "allocator's cache")
    assert "usable_memory_bytes" not in doc  # nothing is taken away from the capacity any more
    # each stage carries the figure the fit is decided on: the whole need less the reserve
    worst = max(doc["memory"], key=lambda m: m["total_bytes"])
    assert worst["total_bytes"] == doc["max_memory_per_gpu_bytes"]
    assert worst["required_bytes"] == pytest.approx(
        worst["total_bytes"] - worst["allocator_reserve_bytes"], rel=1e-12)
    assert worst["required_bytes"] > doc["memory_capacity_bytes"]  # 91.7 GiB of 80


def _published_row(row: int):
    """The resolved session of published row ``row`` (skips without ../shared)."""
    if not PUBLISHED.exists():
        pytest.skip(f"shared data not present: {PUBLISHED}")
    from core.io.session import load_any
    doc = next(d for d in map(json.loads, PUBLISHED.read_text().splitlines()) if d["row"] == row)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"row{row}.json"
        path.write_text(json.dumps(doc["session"]))
        return load_any(path)


@pytest.mark.parametrize("row, need_gb, required_gb, cap_gb, want", [
    # Llama3-70B FP8, t4 p8 d2 v5 on 64 H100 (Megatron-Bridge recipe): 0.28 GB of it is the
    # first stage's embedding, 16 micro-batches (2p, interleaved) of ids 8sb and the dropout
    # mask sbh/t (s 8192, h 8192, t 4), 0.27 GB (0.28 with the allocator's 3.3 % reserve)
    (2, 75.544 + 16 * (8 * 8192 + 8192 * 8192 / 4) * 1.033 / 1e9,
     73.17 + 16 * (8 * 8192 + 8192 * 8192 / 4) / 1e9, 85.9, "fits"),
    (16, 194.70, 188.53, 199.72, "tight"),  # Llama 3.1 405B on 256 GB200
])
def test_passing_bridge_recipes_fit_or_are_tight(row, need_gb, required_gb, cap_gb, want):
    """NVIDIA's published recipes ran: they fit or are tight, never "does not fit". Both reduce
    gradients in bf16, whose fp32 copy exists only in the optimizer step, not beside the
    activations (core.model.memory.grad_copy_bytes_per_parameter): row 2 fits (87.9 % of the
    capacity; 80.5 GB and inside the 10 % margin while the copy counted), row 16's
    whole-process need lies inside the 10 % margin (over the capacity with the caching
    allocator's reserve while the copy counted)."""
    from core.sim.simulate import memory_verdict as stage_verdict
    from core.sim.simulate import session_profile, stage_memory
    from core.sim.report import memory_verdict as verdict
    session = _published_row(row)
    capacity = float(session_profile(session).memory_bytes)
    need, fits, reason = stage_verdict(stage_memory(session), capacity)
    assert session.cluster.memory_reserve_fraction == pytest.approx(0.1)
    memory = stage_memory(session)
    assert need / 1e9 == pytest.approx(need_gb, abs=0.01)
    assert max(sm.required_bytes for sm in memory) / 1e9 == pytest.approx(required_gb, abs=0.01)
    assert capacity / 1e9 == pytest.approx(cap_gb, abs=0.01)
    assert need < capacity and fits and reason == ""
    assert verdict(need, capacity, session.cluster.memory_reserve_fraction, fits) == want


def test_simulate_prints_tight_with_the_margin_named(capsys, tmp_path):
    """Published row 16 (a recipe that ran) through ``vtrain simulate``: tight, the margin
    named, and the report's warning says which stage and why; its JSON carries the same."""
    if not PUBLISHED.exists():
        pytest.skip(f"shared data not present: {PUBLISHED}")
    from core.cli import main
    doc = next(d for d in map(json.loads, PUBLISHED.read_text().splitlines()) if d["row"] == 16)
    path = tmp_path / "row16.json"
    path.write_text(json.dumps(doc["session"]))
    assert main(["simulate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["memory_verdict"], out["fits_in_memory"]) == ("tight", True)
    need = out["max_memory_per_gpu_bytes"] / GiB
    assert out["memory_verdict_text"] == f"tight: {need:.1f} of 186.0 GiB, inside the 10 % margin"
    tight = [w for w in out["warnings"] if w.startswith("tight: stage")]
    assert len(tight) == 1 and "inside the 10 % margin" in tight[0]
    assert not any(w.startswith("does not fit") for w in out["warnings"])
    assert main(["simulate", str(path)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("Memory per GPU "))
    assert f"max {need:.1f} GiB of 186.0 GiB (tight, inside the 10 % margin)" in line


def test_a_need_just_over_the_capacity_never_reads_as_equal_to_it():
    """80 GiB + 1 MiB on an 80 GiB GPU does not fit: every text of the verdict shows the need
    above the capacity (one decimal more until they differ), never "80.0 of 80.0 GiB"."""
    from core.model.stage_memory import StageMemory
    from core.sim.report import gib_texts
    from core.sim.simulate import memory_verdict as plan_verdict, memory_verdict_rows
    cap, need = 80.0 * GiB, 80.0 * GiB + 2**20
    assert gib_texts(need, cap) == ("80.001", "80.000")
    assert gib_texts(87.9 * GiB, cap) == ("87.9", "80.0")       # one decimal where it shows
    assert gib_texts(79.99 * GiB, cap) == ("80.0", "80.0")      # fits (tight): equal is honest
    assert gib_texts(cap + 1.0, cap) == (">80.0", "80.0")       # over by less than 0.0005 GiB
    assert gib_texts(cap, cap) == ("80.0", "80.0")
    assert memory_verdict_text(need, cap, 0.1) == "does not fit: 80.001 of 80.000 GiB"
    _, fits, why = plan_verdict([StageMemory(0, need, 0.0, 0.0, 0.0)], cap)
    assert not fits and why == "does not fit: stage 0 needs 80.001 GiB per GPU, the GPU has 80.000 GiB"
    parts = tuple(np.array([[x]]) for x in (need, 0.0, 0.0, 0.0))
    assert memory_verdict_rows(parts, cap)[2] == [why]


def test_simulate_and_diff_print_a_need_just_over_the_capacity_above_it(capsys, monkeypatch):
    """``vtrain simulate`` and ``vtrain diff`` of a plan whose largest stage needs 80 GiB +
    1 MiB of the A100's 80 GiB (the memory model stubbed to that need): "does not fit" beside
    80.001 of 80.000 GiB, never beside "80.0 GiB of 80.0 GiB"."""
    import core.sim.simulate as sim
    from core.cli import main
    from core.model.stage_memory import StageMemory
    from tests.conftest import EXAMPLES
    small = EXAMPLES / "gpt3_1.3b_single_node.json"
    need = 80 * GiB + 2**20
    monkeypatch.setattr(sim, "stage_memory", lambda session, store=None: [
        StageMemory(i, need, 0.0, 0.0, 0.0) for i in range(session.plan.pipeline_parallel)])
    assert main(["simulate", str(small)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "max 80.001 GiB of 80.000 GiB (DOES NOT FIT" in out
    assert "80.0 GiB of 80.0 GiB" not in out
    assert "needs 80.001 GiB per GPU, the GPU has 80.000 GiB" in out  # the report's warning
    assert main(["diff", str(small), str(small)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "80.001 GiB per GPU of 80.000 GiB" in out
    assert "│ 80.001 GiB │ 80.001 GiB │" in out and "│ 80.000 GiB │ 80.000 GiB │" in out


def _stage(tensors_gib: float, reserve_gib: float):
    from core.model.stage_memory import StageMemory
    return StageMemory(0, tensors_gib * GiB, 0.0, 0.0, 0.0, allocator_reserve_bytes=reserve_gib * GiB,
                       cuda_context_bytes=0.75 * GiB, nccl_buffer_bytes=0.25 * GiB)


@pytest.mark.parametrize("tensors, reserve, fits, verdict", [
    (76.0, 2.5, True, "tight"),        # 79.5 of 80 with the reserve: inside the margin
    (78.0, 2.5, True, "tight"),        # 81.5 with the reserve, 79.0 without: fits, tight
    (79.0, 2.5, True, "tight"),        # 82.5 and 80.0: exactly the capacity without it
    (79.5, 2.5, False, "does not fit"),  # 83.0 and 80.5: over without the reserve too
])
def test_the_fit_is_decided_without_the_allocators_reserve(tensors, reserve, fits, verdict):
    from core.sim.simulate import memory_verdict as stage_verdict, memory_verdict_arrays, tight_note
    from core.model.memory import StageMemoryArrays
    sm = _stage(tensors, reserve)
    assert sm.required_bytes == pytest.approx((tensors + 1.0) * GiB)
    assert sm.total_bytes == pytest.approx((tensors + reserve + 1.0) * GiB)
    need, ok, reason = stage_verdict([sm], 80.0 * GiB)
    assert (need, ok) == (sm.total_bytes, fits) and (reason == "") == fits
    z = np.zeros(1)
    parts = StageMemoryArrays((np.array([tensors * GiB]), z, z, z),
                              {"workspace": z, "allocator_reserve": np.array([reserve * GiB]),
                               "cuda_context": np.array([0.75 * GiB]),
                               "nccl_buffers": np.array([0.25 * GiB])})
    assert memory_verdict_arrays(parts, 80.0 * GiB)[:2] == (pytest.approx(sm.total_bytes), fits)
    assert memory_verdict(need, 80.0 * GiB, 0.1, ok) == verdict
    assert memory_verdict_column(np.array([need]), 80.0 * GiB, 0.1, np.array([ok])).tolist() == [verdict]
    note = tight_note([sm], 80.0 * GiB, 0.1)
    if verdict == "tight" and need > 80.0 * GiB:
        assert note.startswith(f"tight: stage 0 needs {need / GiB:.1f} GiB per GPU with the "
                               "caching allocator's cached blocks, more than the GPU's 80.0 GiB")
        assert f"and {sm.required_bytes / GiB:.1f} GiB without them" in note
        assert memory_verdict_text(need, 80.0 * GiB, 0.1, ok) == (
            f"tight: {need / GiB:.1f} of 80.0 GiB, fits only without the allocator's cache")
    elif verdict == "tight":
        assert "inside the 10 % margin" in note
    else:
        assert note == ""
