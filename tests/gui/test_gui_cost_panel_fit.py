"""The Plan tab's figures fit under the timeline at 1,600 x 1,000 whatever the report says:
warnings, a plan that does not fit in memory, a long profile line. Long texts take one line
each (cut with "…", whole on hover), so the figures' height does not depend on the panel's
width or on how many warnings there are, and the check does not depend on timing."""

from __future__ import annotations

import dataclasses

from PySide6 import QtCore, QtWidgets

from synthetic import synthetic_report
from tests.conftest import EXAMPLES
from vtrain_gui.cost_panel import CostPanel

LONG = ("all_reduce of 1349.9 MiB on 2 GPUs: beyond the measured sizes (1 MiB to 1024 MiB), "
        "extrapolated with that curve's latency-bandwidth fit")


def _settle() -> None:
    """Run the pending layouts (deterministic: no waiting on the clock)."""
    for _ in range(5):
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.LayoutRequest)
        QtWidgets.QApplication.processEvents()


def test_figures_fit_at_1600_by_1000_with_warnings_and_no_fit_flag(window, qtbot, real_simulate):
    window.resize(1600, 1000)
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(EXAMPLES / "mtnlg_530b.json", as_template=True)
    _settle()
    panel, scroll = window.cost_panel, window.cost_panel._figures_scroll
    plain = panel.report
    heights = {}
    for n_warnings, fits in ((0, True), (1, True), (6, True), (6, False)):
        # the worst a report can bring: many long warnings and the does-not-fit flag
        report = dataclasses.replace(plain, warnings=[f"{i}: {LONG}" for i in range(n_warnings)],
                                     fits_in_memory=fits)
        window._on_simulation_finish(window.runner.latest_request_id, dataclasses.replace(
            window._result, report=report), 0.1)
        _settle()
        assert scroll.verticalScrollBar().maximum() == 0, (n_warnings, fits)  # nothing cut off
        assert scroll.height() >= panel.figures_height()
        assert window.timeline.height() >= 350
        heights[(n_warnings, fits)] = panel.figures_height()
    # one line for the warnings however many; one for the flag
    assert heights[(1, True)] == heights[(6, True)] > heights[(0, True)]
    assert heights[(6, False)] - heights[(6, True)] < 30
    assert panel.warnings_text.count("⚠") == 6  # all of them kept, shown on hover
    assert panel._warnings.toolTip().count("<li>") == 6
    assert "(+5 more" in panel._warnings.text()


def test_long_lines_are_cut_to_the_width_not_wrapped(qtbot):
    panel = CostPanel()
    qtbot.addWidget(panel)
    report = dataclasses.replace(synthetic_report(p=4, fits=False), warnings=[LONG, LONG])
    panel.show()
    heights = []
    for width in (1400, 700):
        panel.resize(width, 700)
        panel.set_report(report)
        _settle()
        heights.append(panel.figures_height())
        shown = panel._warnings.text()
        assert shown.endswith("(+1 more, hover)")
        assert panel._warnings.fontMetrics().horizontalAdvance(shown) <= panel._warnings.width()
    assert heights[0] == heights[1]  # the height does not depend on the width
    assert "…" in panel._warnings.text()
    assert panel.warnings_text == f"⚠ {LONG}\n⚠ {LONG}"
    assert panel.no_fit_text.startswith("⚠ Does not fit in GPU memory")
    assert "enough memory" in panel._no_fit_flag.toolTip()


def test_fit_line_shows_a_need_just_over_the_capacity_above_it(qtbot):
    """80 GiB + 1 MiB of 80 GiB: the Plan tab's memory line reads 80.001 GiB needed, 80.000 GiB
    on the GPU (:func:`core.sim.report.gib_texts`), never "80.0 GiB needed per GPU, 80.0 GiB
    on the GPU" for a plan that does not fit."""
    from core.model.stage_memory import StageMemory
    panel = CostPanel()
    qtbot.addWidget(panel)
    cap, need = 80 * 2**30, 80 * 2**30 + 2**20
    base = synthetic_report(p=2)
    report = dataclasses.replace(
        base, memory=[StageMemory(s, need, 0.0, 0.0, 0.0) for s in range(2)],
        memory_capacity_bytes=cap, max_memory_per_gpu_bytes=need, fits_in_memory=False)
    panel.set_report(report)
    assert panel.fit_text == "Does not fit: 80.001 GiB needed per GPU, 80.000 GiB on the GPU"


def test_a_moe_models_parameters_line_leaves_the_memory_chart_its_width(qtbot):
    """A user's trial: Mixtral's "Model parameters" line (total, active without and with the
    input embedding) widened the figures and squeezed the memory chart to a third of a dense
    plan's width. The line is cut to the width the figures have; the whole text on hover."""
    panel = CostPanel()
    qtbot.addWidget(panel)
    panel.resize(950, 450)
    panel.show()
    dense = synthetic_report(p=1)
    moe = dataclasses.replace(dense, num_parameters=46_702_792_704,
                              num_active_parameters=12_750_000_000,
                              num_active_parameters_with_embedding=12_890_000_000)
    widths = {}
    for name, report in (("dense", dense), ("moe", moe)):
        panel.set_report(report)
        _settle()
        widths[name] = panel.memory_plot.width()
    assert widths["moe"] == widths["dense"]
    assert widths["moe"] > 0.35 * panel.width()
    full = ("46.70 B (12.75 B active without the input embedding, 12.89 B with it; "
            "MFU counts their GEMMs)")
    # the total and the active count (without the input embedding, as vtrain simulate heads
    # its line) whole on screen; the whole line on hover (it was cut: "... 3.35 ...")
    assert panel.value_text("num_parameters") == "46.70 B (12.75 B active)"
    label = panel._values["num_parameters"]
    assert label.toolTip() == full
    assert label.text() == "46.70 B (12.75 B active)"
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.width()
    panel.set_report(dense)  # a dense model: the total alone, no tooltip
    assert panel.value_text("num_parameters") == "174.60 B"
    assert label.toolTip() == ""


def test_what_would_make_the_plan_fit_shows_under_the_verdict(qtbot):
    """What would make a plan that does not fit fit (core.studies.fit_changes, the window's
    second worker: test_gui_fit_changes_runner.py): the memory panel shows the fastest change,
    all on hover, and a new report clears it."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from vtrain_gui.workers import _default_fit_changes, _default_simulate
    s = Session(MODEL_PRESETS["Llama 3 70B"],
                ParallelPlan(tensor_parallel=8, pipeline_parallel=2, data_parallel=4,
                             micro_batch_size=1, global_batch_size=128, recompute="none",
                             sequence_parallel=True, zero_stage=0),
                ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    result = _default_simulate(s)
    assert result.report.memory_verdict == "does not fit"
    assert result.fit_changes is None  # the simulation job no longer searches (a second job)
    result.fit_changes = _default_fit_changes(result.session, None)
    panel = CostPanel()
    qtbot.addWidget(panel)
    panel.set_report(result.report)
    panel.set_fit_changes(result.fit_changes)
    first = result.fit_changes.rows[0]
    ratio = first.iteration_time_s / result.fit_changes.iteration_time_s - 1
    assert panel.fit_changes_text.startswith(
        f"To fit in memory: zero_stage 0 -> 1 ({first.max_memory_per_gpu_bytes / 2**30:.1f} GiB, "
        f"fits, {ratio:+.1%} time)")
    assert panel._fit_changes.toolTip().count("<li>") == len(result.fit_changes.rows) >= 3
    panel.set_report(result.report)
    assert panel.fit_changes_text == ""
    fits = _default_simulate(dataclasses.replace(s, plan=result.fit_changes.rows[0].plan))
    assert fits.report.memory_verdict == "fits" and fits.fit_changes is None
    assert _default_fit_changes(fits.session, None).rows == []  # nothing to change


def test_use_it_puts_the_changed_plan_in_the_editor_and_it_fits(window, qtbot, real_simulate,
                                                                oom_session_file):
    with qtbot.waitSignals([window.result_shown, window.fit_changes_shown], timeout=60_000):
        assert window.open_path(oom_session_file)
    panel = window.cost_panel
    assert panel.report.memory_verdict == "does not fit"
    assert panel.fit_changes_text.startswith("To fit in memory: zero_stage 0 -> 1")
    button = panel.findChild(QtWidgets.QToolButton, "use_fit_change")
    assert button.isVisible()
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        button.click()
    assert window.editor.session().plan.zero_stage == 1
    assert window.isWindowModified()
    assert panel.report.memory_verdict == "fits"
    assert panel.fit_changes_text == "" and not button.isVisible()


def test_use_it_never_applies_a_change_found_for_an_earlier_configuration(window, qtbot,
                                                                           real_simulate,
                                                                           oom_session_file):
    """The changes were found for the simulated session: once the editor holds another one
    (an edit not simulated yet, or one that breaks a rule), "Use it" must not overwrite the
    editor's plan with that older plan (its global batch, precision, sizes: the user's edits
    silently undone) or pair it with another model."""
    with qtbot.waitSignals([window.result_shown, window.fit_changes_shown], timeout=60_000):
        assert window.open_path(oom_session_file)
    panel = window.cost_panel
    button = panel.findChild(QtWidgets.QToolButton, "use_fit_change")
    assert button.isVisible() and panel.fit_changes_text
    # an edit not simulated yet (the debounce pause): the button is there, the change is not
    # applied
    window.editor.field_widget("plan.global_batch_size").setValue(256)
    assert not window.results_stale and button.isVisible() and button.isEnabled()
    button.click()
    assert window.editor.session().plan.global_batch_size == 256
    assert window.editor.session().plan.zero_stage == 0
    assert "changed" in window.status_text
    # an edit that breaks a rule: the results (and the changes) are of the last valid session
    window.editor.field_widget("plan.global_batch_size").setValue(130)
    assert window.results_stale and not button.isEnabled()
    edited = window.editor.session()
    panel.fit_change_chosen.emit(panel._fit_plan)  # as a click would
    assert window.editor.session().plan == edited.plan
    assert window.editor.session().plan.global_batch_size == 130
    with qtbot.waitSignals([window.result_shown, window.fit_changes_shown], timeout=60_000):
        window.editor.field_widget("plan.global_batch_size").setValue(128)
    assert button.isEnabled() and button.isVisible()
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        button.click()
    assert window.editor.session().plan.zero_stage == 1


def test_nothing_fits_on_the_plans_gpus_shows_the_fewest_gpus_that_fit(qtbot):
    """Llama 3.1 405B on 8 H100s: no change fits on its 8 GPUs; the "To fit" line says the
    fewest GPUs that fit (core.studies.fit_changes.fewest_gpus: 128), "Use it" takes that plan;
    on 1 GPU (a cap of 64 GPUs, below the 87 its model states need) the line says so."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from vtrain_gui.workers import _default_fit_changes, _default_simulate

    def session(t: int) -> Session:
        return Session(MODEL_PRESETS["Llama 3.1 405B"],
                       ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=1,
                                    micro_batch_size=1, global_batch_size=16, recompute="none",
                                    sequence_parallel=t > 1, zero_stage=0),
                       ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    panel = CostPanel()
    qtbot.addWidget(panel)
    chosen = []
    panel.fit_change_chosen.connect(chosen.append)
    result = _default_simulate(session(8))
    fit = _default_fit_changes(result.session, None)
    assert fit.rows == [] and fit.fewest_gpus.num_gpus == 96
    panel.set_report(result.report)
    panel.set_fit_changes(fit)
    assert panel.fit_changes_state == "found"
    assert panel.fit_changes_text == (
        "To fit in memory: none on 8 GPUs; 96 GPUs (this plan has 8) with t=8 p=12 d=1 b=1 "
        "1f1b recompute=full sp zero=1 first_layers=8 last_layers=8, tight: 82.3 of 80.0 GiB, "
        "fits only without the allocator's cache; 88 do not; the model states alone need at "
        "least 87 GPUs")
    assert ("Fewest GPUs that fit</b> (counts tried: the plan&#x27;s 8 times 1, 2, 4, ... up to "
            "96, then every 8 in between; memory only, not timed)") in panel._fit_changes.toolTip()
    button = panel.findChild(QtWidgets.QToolButton, "use_fit_change")
    assert not button.isHidden()
    button.click()
    assert chosen == [fit.fewest_gpus.plan]
    one = _default_simulate(session(1))
    fit1 = _default_fit_changes(one.session, None)
    panel.set_report(one.report)
    panel.set_fit_changes(fit1)
    assert panel.fit_changes_text == (
        "To fit in memory: nothing tried fits; nothing fits on up to 64 GPUs of H100-SXM5-80GB "
        "(64 times this plan's 1): the model states alone need at least 87 GPUs")
    assert button.isHidden()


def test_the_to_fit_line_wraps_onto_three_lines_in_a_narrow_chart(qtbot):
    """At 1,280 px the memory chart is ~200 px wide: "To fit in memory: n…" said nothing. The
    line wraps onto up to three lines, the last cut, each within the label, all on hover."""
    from PySide6 import QtWidgets
    from vtrain_gui.cost_panel import CostPanel

    panel = CostPanel()
    qtbot.addWidget(panel)
    panel.resize(780, 440)
    panel.show()
    panel.set_report(synthetic_report(p=1, fits=False))
    message = ("the search stopped: " + "a long reason of many words " * 12).strip()
    panel.set_fit_changes_failed(message)
    label = panel.findChild(QtWidgets.QLabel, "fit_changes")
    qtbot.waitUntil(lambda: label.width() > 0 and "\n" in label.text(), timeout=5000)
    lines = label.text().split("\n")
    assert 1 < len(lines) <= 3
    assert lines[0].startswith("Could not look for changes that fit:")
    assert lines[-1].endswith("…")
    metrics = label.fontMetrics()
    assert all(metrics.horizontalAdvance(line) <= label.contentsRect().width() for line in lines)
    assert label.height() >= len(lines) * metrics.lineSpacing()
    assert message in label.toolTip()
    assert panel.fit_changes_text.endswith(message.split()[-1])
