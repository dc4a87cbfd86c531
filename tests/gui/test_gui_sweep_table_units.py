"""The Explore tab's plan table reads in one unit per column, and says why a plan has no
error band (a trial user's faults: "658.47 ms" above "1.259 s"; "none" with no reason)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtCore import Qt

from vtrain_gui.sweep_table import TABLE_COLUMNS, SweepTableModel


@pytest.fixture(scope="module")
def h200_sweep():
    """Llama 3 8B at 2,048 tokens on H200 up to 16 GPUs: iterations from 0.2 s to 1.5 s, and
    plans on 2 and 4 GPUs, outside the store's calibration range, simulated without a band."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.studies.sweep import run_sweep
    from core.studies.sweep.space import SweepSpace

    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=2048)
    plan = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                        micro_batch_size=1, global_batch_size=16, recompute="none")
    s = Session(model, plan, ClusterConfig(gpu="H200-SXM-141GB", gpus_per_node=8))
    return run_sweep(s, SweepSpace(max_gpus=16, schedules=["1f1b"], recompute=["none"],
                                   tensor_parallel=[1], pipeline_parallel=[1]))


def _column(model: SweepTableModel, attr: str, role=Qt.ItemDataRole.DisplayRole) -> list:
    col = [c.attr for c in TABLE_COLUMNS].index(attr)
    return [model.data(model.index(row, col), role) for row in range(model.rowCount())]


def test_the_iteration_and_band_columns_each_read_in_one_unit(h200_sweep):
    r = h200_sweep
    t = r.iteration_time_s[np.isfinite(r.iteration_time_s)]
    assert t.min() < 1.0 < t.max()  # milliseconds and seconds, were both printed
    model = SweepTableModel()
    model.set_result(r)
    times = [x for x in _column(model, "iteration_time_s") if x != "–"]
    assert {x.split(" ")[1] for x in times} == {"s"}
    i = int(np.flatnonzero(np.isfinite(r.iteration_time_s) & (r.iteration_time_s < 1.0))[0])
    assert _column(model, "iteration_time_s")[model.row_of(i)] == f"{r.iteration_time_s[i]:.3f} s"
    bands = [x.removesuffix(" ⚠") for x in _column(model, "iteration_band") if x != "none"]
    assert bands and {x.split(" ")[-1] for x in bands} == {"s"}
    j = int(np.flatnonzero(np.isfinite(r.interval_high_s) & (r.interval_high_s < 1.0))[0])
    assert _column(model, "iteration_band")[model.row_of(j)].removesuffix(" ⚠") == (
        f"{r.interval_low_s[j]:.2f} – {r.interval_high_s[j]:.2f} s")


def test_a_plan_without_a_band_says_why_as_vtrain_simulate_does(h200_sweep):
    """A simulated plan on 2 GPUs has no band; the cell's tooltip gives vtrain simulate's
    reason for the plan (here: outside the calibration range, no scale-transfer residuals);
    a plan not simulated says it has no predicted time and why."""
    from core.sim.simulate import simulate

    r = h200_sweep
    model = SweepTableModel()
    model.set_result(r)
    i = int(np.flatnonzero(np.isfinite(r.iteration_time_s) & ~np.isfinite(r.interval_low_s))[0])
    assert _column(model, "iteration_band")[model.row_of(i)] == "none"
    tip = _column(model, "iteration_band", Qt.ItemDataRole.ToolTipRole)[model.row_of(i)]
    note = simulate(r.session_for(i)).report.interval.note
    assert "no error band: " in note
    assert tip == note[0].upper() + note[1:] == r.band_note(i)[0].upper() + r.band_note(i)[1:]
    k = int(np.flatnonzero(~r.fits_in_memory)[0])
    assert r.band_note(k) == f"no error band: the plan has no predicted time ({r.reason[k]})"
    assert r.reason[k].startswith("does not fit")
    banded = int(np.flatnonzero(np.isfinite(r.interval_low_s))[0])
    assert r.band_note(banded) == ""


def test_fits_and_front_are_whole_at_1366_by_768(window, qapp, h200_sweep):
    """Columns as wide as this sweep's values (a few dollars need no room for $888,888,888)
    and the verdict answered yes / tight / no: at 1,366 x 768 "fits" read "fi" at the view's
    edge; now every column through "front" is whole, and every value of the first rows fits
    its column."""
    from PySide6 import QtCore, QtGui

    from vtrain_gui.sweep_table import COLUMN_INDEX

    r = h200_sweep
    window.show_tab("explore")
    window.explore.set_session(r.session)
    window.explore.set_result(r)
    for _ in range(3):
        window.resize(1366, 768)
        qapp.processEvents()
    table = window.explore.table
    header, view = table.horizontalHeader(), table.viewport().width()
    for c in range(COLUMN_INDEX["front"] + 1):
        if table.isColumnHidden(c):
            continue
        left = header.sectionViewportPosition(c)
        assert 0 <= left and left + header.sectionSize(c) <= view, (
            TABLE_COLUMNS[c].header, left, header.sectionSize(c), view)
    model = table.model()
    fits = _column(model, "memory_verdict")
    assert set(fits) == {"yes", "tight", "no"}  # "does not fit" was 88 px wide
    for c, col in enumerate(TABLE_COLUMNS):
        if table.isColumnHidden(c) or col.attr == "reason":
            continue
        for row in range(min(model.rowCount(), 40)):
            index = model.index(row, c)
            font = model.data(index, QtCore.Qt.ItemDataRole.FontRole) or table.font()
            text = model.data(index, QtCore.Qt.ItemDataRole.DisplayRole)
            assert QtGui.QFontMetrics(font).horizontalAdvance(text) + 6 <= table.columnWidth(c), (
                col.header, text, table.columnWidth(c))
