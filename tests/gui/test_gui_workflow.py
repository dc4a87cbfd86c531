"""A user's journey through the window, checking that every tab shows the same numbers for the
same plan as the headless core (and so as ``vtrain simulate``): open a session, change the
tensor-parallel size in the editor, see the timeline and the memory chart follow, run a small
sweep, pin a plan and compare it with another, save, reopen."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyqtgraph as pg
import pytest

from core.io.session import load_any
from core.sim.labels import MEMORY_TERMS
from core.sim.report import gib_texts
from core.sim.simulate import simulate
from core.studies.sweep import SweepSpace
from tests.conftest import EXAMPLES
from vtrain_gui.formatting import format_duration, format_fraction

#: GPT-3 1.3B on 8 GPUs (t=2 p=2 d=2, b=4, B=256), with a sweep of a few dozen plans.
SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
SWEEP = {"space": SweepSpace(max_gpus=8, micro_batch_sizes=(4,), schedules=("1f1b",)).to_dict(),
         "deadline_days": 5.0}


def _memory_bars(window) -> dict[str, np.ndarray]:
    """Heights (GiB) of the memory chart's stacked bars by memory term name, per stage."""
    bars = [i for i in window.cost_panel.memory_plot.getPlotItem().items
            if isinstance(i, pg.BarGraphItem)]
    return {name: np.asarray(bar.opts["height"], float)
            for name, bar in zip(MEMORY_TERMS.values(), bars)}


def _assert_plan_tab_shows(window, result) -> None:
    """The Plan tab's timeline, figures and memory chart are those of ``result``, which the
    headless core gives again for the same session."""
    again = simulate(result.session).report
    assert again.iteration_time_s == pytest.approx(result.report.iteration_time_s, rel=1e-12)
    assert window.timeline.num_tasks == result.graph.num_tasks
    panel = window.cost_panel
    assert panel.value_text("iteration_time") == format_duration(again.iteration_time_s)
    assert panel.value_text("mfu").startswith(format_fraction(again.mfu))
    heights = _memory_bars(window)
    for attr, name in MEMORY_TERMS.items():
        assert heights[name] == pytest.approx([getattr(m, attr) / 2**30 for m in again.memory],
                                              rel=1e-12), name
    need, cap = gib_texts(again.max_memory_per_gpu_bytes, again.memory_capacity_bytes)
    assert f"{need} GiB" in panel.fit_text or f"{need} of" in panel.fit_text


def test_open_change_t_sweep_compare_save_reopen(window, qtbot, tmp_path, real_simulate):
    doc = json.loads(SMALL.read_text())
    doc["sweep"] = SWEEP
    path = tmp_path / "journey.json"
    path.write_text(json.dumps(doc))
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as opened:
        assert window.open_path(path)
    first = opened.args[0]
    _assert_plan_tab_shows(window, first)
    assert first.session.plan.tensor_parallel == 2

    # t = 2 -> 4 in the editor: 16 GPUs, the timeline and the memory chart follow
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as changed:
        window.editor.field_widget("plan.tensor_parallel").setValue(4)
    second = changed.args[0]
    assert second.session.plan.tensor_parallel == 4 and second.report.num_gpus == 16
    _assert_plan_tab_shows(window, second)
    # a quarter-size shard of each layer's weights: less memory per GPU for weights
    assert second.report.memory[0].weights_bytes < first.report.memory[0].weights_bytes

    # pin it, go back to t = 2: the Compare tab shows both plans with the Plan tab's numbers
    assert window.pin_plan()
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as back:
        window.editor.field_widget("plan.tensor_parallel").setValue(2)
    third = back.args[0]
    window.show_tab("compare")
    tab = window.compare
    assert tab.cell_text("Iteration time", 0) == format_duration(second.report.iteration_time_s)
    assert tab.cell_text("Iteration time", 1) == format_duration(third.report.iteration_time_s)
    for col, res in ((0, second), (1, third)):
        need, _ = gib_texts(res.report.max_memory_per_gpu_bytes, res.report.memory_capacity_bytes)
        assert tab.cell_text("Memory per GPU (max)", col) == f"{need} GiB"
    assert sum(tab.bar_heights()[:-1]) == pytest.approx(
        third.report.iteration_time_s - second.report.iteration_time_s, abs=1e-9)

    # a small sweep: the editor's plan is in it with the same time, MFU and memory
    window.show_tab("explore")
    with qtbot.waitSignal(window.explore.sweep_finished, timeout=60_000) as swept:
        assert window.explore.run()
    result = swept.args[0]
    i = result.index_of(third.session.plan)
    assert i is not None
    assert result.iteration_time_s[i] == pytest.approx(third.report.iteration_time_s, rel=1e-9)
    assert result.mfu[i] == pytest.approx(third.report.mfu, rel=1e-9)
    assert result.max_memory_per_gpu_bytes[i] == pytest.approx(
        third.report.max_memory_per_gpu_bytes, rel=1e-9)

    # save and reopen: the plan, the pinned plan and the sweep settings come back
    out = tmp_path / "saved.json"
    assert window.save_to(out)
    saved = load_any(out)
    assert saved.plan == third.session.plan
    assert saved.pinned().plan == second.session.plan
    window.new_session()
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as reopened:
        assert window.open_path(out)
    assert reopened.args[0].report.iteration_time_s == pytest.approx(
        third.report.iteration_time_s, rel=1e-12)
    assert window.compare.pinned is not None
    assert window.compare.pinned.session.plan == dataclasses.replace(second.session.plan)
    assert window.session().sweep == saved.sweep
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)
