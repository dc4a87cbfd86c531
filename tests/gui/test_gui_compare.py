"""The Compare tab: a pinned plan against the editor's, timelines on one time axis and the
difference as a waterfall whose bars are core.studies.diff's terms."""

from __future__ import annotations

import dataclasses
import html

import pytest

from core.studies.diff import diff_results, plan_label
from vtrain_gui.compare import FASTER_COLOR, SLOWER_COLOR, TABLE_ROWS, TOTAL_COLOR


def _tiny_session():
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    return Session(model=MODEL_PRESETS["GPT-3 1.3B"],
                   plan=ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2,
                                     micro_batch_size=1, global_batch_size=8))


def test_empty_state_until_a_plan_is_pinned(window, qtbot, real_simulate):
    window.show_tab("compare")
    assert window.current_tab() == "compare"
    assert window.compare.is_empty
    assert "Pin plan for comparison" in window.compare.view.message_text
    assert window.compare.diff is None
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.set_session(_tiny_session())
        window.simulate_now()
    assert window.compare.is_empty  # a result alone does not make a comparison
    assert window.action_pin.isEnabled() and not window.action_unpin.isEnabled()


def test_pin_change_plan_compare(window, qtbot, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.set_session(_tiny_session())
        window.simulate_now()
    window.action_pin.trigger()
    pinned = window.compare.pinned
    assert pinned is not None and window.action_unpin.isEnabled()
    a_label = plan_label(pinned.session)

    b_session = _tiny_session()
    b_session.plan.pipeline_parallel, b_session.plan.data_parallel = 1, 4
    with qtbot.waitSignal(window.result_shown, timeout=60_000) as blocker:
        window.editor.set_session(b_session)
        window.simulate_now()
    b = blocker.args[0]
    tab = window.compare
    assert not tab.is_empty
    assert tab.label_a.text().startswith(
        f"A (pinned): GPT-3 1.3B, {pinned.report.num_gpus:,} x {pinned.session.cluster.gpu}, "
        f"{a_label}")
    assert tab.label_b.text().startswith(
        f"B (editor): GPT-3 1.3B, {b.report.num_gpus:,} x {b.session.cluster.gpu}, "
        f"{plan_label(b.session)}")
    assert tab.beyond_plan_note.isHidden()  # only the plans differ
    assert plan_label(b.session) != a_label
    # both timelines show their iteration, on one linked time axis
    assert tab.timeline_a.num_tasks == pinned.graph.num_tasks > 0
    assert tab.timeline_b.num_tasks == b.graph.num_tasks > 0
    item_a, item_b = tab.timeline_a.plot.getPlotItem(), tab.timeline_b.plot.getPlotItem()
    assert item_b.getViewBox().linkedView(0) is item_a.getViewBox()
    # the lane labels differ (A's pipeline has PP send/recv lanes) but both plots start at the
    # same x: pyqtgraph aligns linked views by screen position, which hid B's first seconds
    window.show_tab("compare")
    qtbot.waitUntil(lambda: tab.timeline_a.label_width > 0 and tab.timeline_b.label_width > 0,
                    timeout=10_000)
    assert tab.timeline_a.label_width != tab.timeline_b.label_width
    wide = max(tab.timeline_a.label_width, tab.timeline_b.label_width)
    assert item_a.getAxis("left").width() == item_b.getAxis("left").width() == wide
    assert item_a.getViewBox().sceneBoundingRect().left() == pytest.approx(
        item_b.getViewBox().sceneBoundingRect().left(), abs=0.5)
    item_a.getViewBox().setXRange(0.001, 0.002, padding=0.0)
    x0, x1 = item_b.getViewBox().viewRange()[0]
    assert x0 == pytest.approx(0.001, rel=1e-6) and x1 == pytest.approx(0.002, rel=1e-6)

    # the waterfall's bars are core.studies.diff's terms that either plan has (as vtrain diff
    # prints them), then the total difference
    expected = diff_results(pinned, b)
    shown = expected.shown_terms()
    assert tab.bar_names() == [*shown, "total"]
    assert set(expected.terms) - set(shown) <= {"overlap_wait", "rest", "cp_comm", "ep_comm"}
    heights = tab.bar_heights()
    assert heights[:-1] == pytest.approx([expected.terms[t] for t in shown], abs=1e-12)
    assert heights[-1] == pytest.approx(expected.difference_s, abs=1e-12)
    assert expected.difference_s == pytest.approx(
        b.report.iteration_time_s - pinned.report.iteration_time_s, rel=1e-12)
    # each bar starts where the ones before it end; the last one lands on the total
    bottoms = tab.bar_bottoms()
    assert bottoms[0] == 0.0 and bottoms[-1] == 0.0
    assert bottoms[-2] + heights[-2] == pytest.approx(heights[-1], abs=1e-9)
    for h, c in zip(heights[:-1], tab.bar_colors()[:-1]):
        if h > 0:
            assert c == SLOWER_COLOR
        elif h < 0:
            assert c == FASTER_COLOR
    assert tab.bar_colors()[-1] == TOTAL_COLOR
    # the table holds both plans' iteration time, memory per GPU, cost
    from vtrain_gui.formatting import format_usd
    gib = pinned.report.max_memory_per_gpu_bytes / 2**30
    assert tab.cell_text("Memory per GPU (max)", 0) == f"{gib:,.1f} GiB"
    assert tab.cell_text("Memory per GPU (max)", 1) == \
        f"{b.report.max_memory_per_gpu_bytes / 2**30:,.1f} GiB"
    assert tab.cell_text("GPU memory", 0) == tab.cell_text("GPU memory", 1) == "80.0 GiB"
    assert tab.cell_text("Cost", 0) == format_usd(pinned.report.cost_usd)
    assert tab.cell_text("Cost", 1) == format_usd(b.report.cost_usd)
    assert tab.cell_text("Fits in memory", 0).startswith(pinned.report.memory_verdict)

    window.unpin_plan()
    assert tab.is_empty and tab.pinned is None


def test_pinned_plan_keeps_its_session(window, qtbot, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.set_session(_tiny_session())
        window.simulate_now()
    assert window.pin_plan()
    assert window.compare.pinned.session is not window.result.session
    assert dataclasses.asdict(window.compare.pinned.session.plan) == \
        dataclasses.asdict(window.result.session.plan)


def test_explore_pins_the_plan_in_the_editor(window, qtbot, real_simulate):
    assert not window.pin_plan()  # nothing simulated yet: nothing to pin
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.set_session(_tiny_session())
        window.simulate_now()
    window.show_tab("explore")
    window.explore.pin_button.click()
    assert window.compare.pinned is not None
    assert plan_label(window.compare.pinned.session) == plan_label(window.result.session)
    assert not window.compare.is_empty  # A is pinned and B (the same plan) is there
    assert window.compare.bar_heights()[-1] == 0.0


def test_the_pin_is_saved_and_reopened_with_the_session(window, qtbot, real_simulate, tmp_path):
    """Save writes the pinned plan A into the session (compare.pinned); opening the file pins
    it again with the same result; `vtrain diff FILE` compares it with the file's plan."""
    from core.io.session import load_session
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.set_session(_tiny_session())
        window.simulate_now()
    assert window.pin_plan() and window.isWindowModified()
    a = window.compare.pinned
    b_session = _tiny_session()
    b_session.plan.pipeline_parallel, b_session.plan.data_parallel = 1, 4
    window.editor.set_session(b_session)
    path = tmp_path / "pinned.json"
    assert window.save_to(path)
    saved = load_session(path)
    assert saved.pinned().plan == a.session.plan
    assert saved.plan.pipeline_parallel == 1
    window.unpin_plan()
    assert window.compare.pinned is None
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(path)
    again = window.compare.pinned
    assert again is not None and window.action_unpin.isEnabled()
    assert again.report.iteration_time_s == a.report.iteration_time_s
    assert not window.isWindowModified()

    from core.cli import main
    import json
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diff", str(path), "--json"]) == 0
    d = json.loads(out.getvalue())
    assert d["difference_s"] == pytest.approx(
        window.result.report.iteration_time_s - a.report.iteration_time_s, rel=1e-9)


def test_compare_tab_marks_a_plan_that_does_not_fit(qtbot):
    """Case s3/compare_unfit_plan_shown_better.json: the editor's plan is faster and cheaper but
    needs 94.7 GiB (the whole process) of the GPU's 80.0 GiB; the tab says so in its column.
    Plan A (p = 105) needs 75.7 GiB, 4.2 of it its first stage's 105 embeddings in flight
    (ids and dropout mask): inside the 10 % margin, tight; with a margin of 50 % too, named on
    hover."""
    from core.io.session import load_any
    from core.sim.simulate import simulate
    from tests.conftest import case_file
    from vtrain_gui.compare import CompareTab

    session = load_any(case_file("s3/compare_unfit_plan_shown_better.json"))
    tab = CompareTab()
    qtbot.addWidget(tab)
    a, b = simulate(session.pinned()), simulate(session)
    tab.set_pinned(a)
    tab.set_current(b)
    assert b.report.memory_verdict == "does not fit" and a.report.memory_verdict != "does not fit"
    need_b = b.report.max_memory_per_gpu_bytes / 2**30
    assert tab.cell_text("Fits in memory", 1) == f"does not fit ({need_b:,.1f} of 80.0 GiB)"
    need_a = a.report.max_memory_per_gpu_bytes / 2**30
    assert 72.0 < need_a <= 80.0  # inside the 10 % margin
    assert tab.cell_text("Fits in memory", 0) == f"tight ({need_a:,.1f} of 80.0 GiB)"

    import dataclasses
    def wide(s):  # the same plan with a margin of 50 % (the pin keeps its own cluster)
        return dataclasses.replace(s, cluster=dataclasses.replace(
            s.cluster, memory_reserve_fraction=0.5))
    a, b = simulate(wide(session.pinned())), simulate(wide(session))
    tab.set_pinned(a)
    tab.set_current(b)
    need_a = a.report.max_memory_per_gpu_bytes / 2**30
    assert 40.0 < need_a <= 80.0 and a.report.fits_in_memory
    assert tab.cell_text("Fits in memory", 0) == f"tight ({need_a:,.1f} of 80.0 GiB)"
    assert tab.cell_text("Fits in memory", 1) == f"does not fit ({need_b:,.1f} of 80.0 GiB)"  # none freed
    tip = tab.table.item(TABLE_ROWS.index("Fits in memory"), 0).toolTip()
    assert tip.startswith(f"tight: {need_a:,.1f} of 80.0 GiB, inside the 50 % margin")


def test_explore_preview_title_marks_a_plan_that_does_not_fit(qtbot):
    """The Explore tab's preview line of the editor's plan (case
    s3/compare_unfit_plan_shown_better.json: 94.7 of 80.0 GiB) carries the verdict with its
    figures beside the days and dollars, as the Compare tab does; a plan that fits outside the
    margin (plan A, 75.7 GiB, with no margin) has no mark."""
    from core.io.session import load_any
    from core.sim.simulate import simulate
    from tests.conftest import case_file
    from vtrain_gui.plan_preview import PlanPreview

    session = load_any(case_file("s3/compare_unfit_plan_shown_better.json"))
    preview = PlanPreview()
    qtbot.addWidget(preview)
    b = simulate(session)
    preview.show_simulation(b)
    assert b.report.memory_verdict == "does not fit"
    import html
    assert html.escape(b.report.memory_verdict_text) in preview.title.text()
    import dataclasses
    pinned = session.pinned()
    a = simulate(dataclasses.replace(pinned, cluster=dataclasses.replace(
        pinned.cluster, memory_reserve_fraction=0.0)))
    preview.show_simulation(a)
    assert a.report.memory_verdict == "fits"
    assert "fit" not in preview.title.text().replace("Timeline of the plan", "")


def test_compare_verdict_of_a_need_just_over_the_capacity_shows_it_above():
    """80 GiB + 1 MiB of 80 GiB: the Compare tab's cell reads 80.001 of 80.000 GiB, never
    "does not fit (80.0 of 80.0 GiB)" (:func:`core.sim.report.gib_texts`)."""
    from vtrain_gui.compare import _verdict_text
    cap = 80.0 * 2**30
    plan = {"memory_verdict": "does not fit", "max_memory_per_gpu_bytes": cap + 2**20,
            "memory_capacity_bytes": cap}
    assert _verdict_text(plan) == "does not fit (80.001 of 80.000 GiB)"


def test_verdict_text_says_when_a_tight_plan_needs_the_cache_freed():
    """A plan over the GPU's memory only with the allocator's cache is tight, and its cell says
    the need is with the cache (the tooltip has the verdict's whole text)."""
    from vtrain_gui.compare import _verdict_text
    gib = 2**30
    plan = {"memory_verdict": "tight", "max_memory_per_gpu_bytes": 80.3 * gib,
            "memory_capacity_bytes": 80.0 * gib}
    assert _verdict_text(plan) == "tight (80.3 of 80.0 GiB with the cache)"
    assert _verdict_text({**plan, "max_memory_per_gpu_bytes": 78.2 * gib}) == \
        "tight (78.2 of 80.0 GiB)"


def test_a_comparison_beyond_the_plan_says_so_and_names_each_model(qtbot):
    """Trial s11: a GPT-3 1.3B plan pinned, MT-NLG 530B opened: the waterfall is not the plans'
    difference alone, and the tab says what else differs as `vtrain diff` does."""
    from core.io.session import load_any
    from core.sim.simulate import simulate
    from core.studies.diff import beyond_plan, beyond_plan_text
    from tests.conftest import EXAMPLES
    from vtrain_gui.compare import CompareTab

    a = simulate(_tiny_session())
    b = simulate(load_any(EXAMPLES / "mtnlg_530b.json"))
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.set_pinned(a)
    tab.set_current(b)
    note = tab.beyond_plan_note
    assert not note.isHidden()
    items = beyond_plan(a.session, b.session)
    assert items[0] == {"field": "model", "a": "GPT-3 1.3B", "b": b.session.model.name}
    text = note.text()
    assert "A and B differ beyond the plan" in text
    assert html.escape(beyond_plan_text(items)) in text
    assert tab.label_a.text().startswith(f"A (pinned): GPT-3 1.3B, {a.report.num_gpus:,} x ")
    assert tab.label_b.text().startswith(f"B (editor): {b.session.model.name}, ")
    tab.set_current(simulate(_tiny_session()))  # the same inputs again: no note
    assert tab.beyond_plan_note.isHidden()


def test_memory_rows_are_in_gib_with_each_gpus_capacity(qtbot):
    """Trial s10 (Llama 70B pinned on H100, then on GB200), on GPT-3 1.3B: memory per GPU, its
    difference and each GPU's memory (a row of its own, as `vtrain diff` prints it) in GiB."""
    from core.sim.simulate import simulate
    from vtrain_gui.compare import CompareTab

    a_session = _tiny_session()
    b_session = _tiny_session()
    b_session.cluster.gpu = "GB200-NVL72"
    a, b = simulate(a_session), simulate(b_session)
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.set_pinned(a)
    tab.set_current(b)
    need_a = a.report.max_memory_per_gpu_bytes / 2**30
    need_b = b.report.max_memory_per_gpu_bytes / 2**30
    assert tab.cell_text("Memory per GPU (max)", 0) == f"{need_a:,.1f} GiB"
    assert tab.cell_text("Memory per GPU (max)", 1) == f"{need_b:,.1f} GiB"
    delta = round(need_b - need_a, 1) + 0.0
    assert tab.cell_text("Memory per GPU (max)", 2) == (
        ("+" if delta > 0 else "−" if delta < 0 else "") + f"{abs(delta):,.1f} GiB")
    cap_a = a.report.memory_capacity_bytes / 2**30
    cap_b = b.report.memory_capacity_bytes / 2**30
    assert tab.cell_text("GPU memory", 0) == f"{cap_a:,.1f} GiB"
    assert tab.cell_text("GPU memory", 1) == f"{cap_b:,.1f} GiB"
    assert tab.cell_text("GPU memory", 2).endswith(" GiB")
    assert cap_b > cap_a and "cluster.gpu A100-SXM4-80GB / GB200-NVL72" in tab.beyond_plan_note.text()
    tab.set_current(simulate(a_session))  # the same plan: a zero difference, never "−0.0"
    assert tab.cell_text("Memory per GPU (max)", 2) == "0.0 GiB"
    assert tab.cell_text("GPU memory", 2) == "0.0 GiB"


def test_a_long_plan_title_wraps_instead_of_widening_the_window(qtbot):
    """A modern plan's title (Llama 3.1 405B on 1,024 H100s with cp, FP8 and the overlaps) is
    wider than a screen on one line: it made the window 1,983 px wide when asked for 1,600. The
    titles wrap, whole, within the tab's width."""
    from PySide6 import QtCore

    from core.sim.simulate import simulate
    from vtrain_gui.compare import CompareTab

    session = _tiny_session()
    session.plan = dataclasses.replace(
        session.plan, virtual_pipeline_stages=2, schedule="interleaved", sequence_parallel=True,
        zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True,
        precision="fp8", fp8_recipe="tensorwise", cross_entropy_loss_fusion=True)
    session.cluster = dataclasses.replace(session.cluster, gpu="H100-SXM5-80GB")
    a = simulate(session)
    b_session = session.copy()
    b_session.plan = dataclasses.replace(session.plan, micro_batch_size=2)
    b = simulate(b_session)
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.resize(1000, 900)
    tab.show()
    tab.set_pinned(a)
    tab.set_current(b)
    label = tab.label_b
    one_line = label.fontMetrics().horizontalAdvance(label.text())
    assert one_line > 1000  # longer than the tab is wide
    assert tab.minimumSizeHint().width() < 1000
    qtbot.waitUntil(lambda: tab.width() == 1000 and label.width() <= 1000)
    needed = label.fontMetrics().boundingRect(
        QtCore.QRect(0, 0, label.contentsRect().width(), 100_000),
        int(QtCore.Qt.TextFlag.TextWordWrap), label.text()).height()
    qtbot.waitUntil(lambda: label.contentsRect().height() >= needed)  # every line shown


def test_the_table_shows_whole_figures_in_a_laptop_window(qtbot):
    """In a 1,280 px window the table's longer row names ("Memory per GPU (max)", as vtrain diff
    says) left the stretched columns too narrow: "$1,682,122" showed as "$1,682,…" and the cost's
    difference broke after its sign. Every figure is whole in its column."""
    from PySide6 import QtWidgets

    from synthetic import synthetic_result
    from vtrain_gui.compare import CompareTab

    a, b = synthetic_result(p=4), synthetic_result(p=4)
    b.report = dataclasses.replace(b.report, cost_usd=1_431_184.0)
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.resize(1280, 760)
    tab.show()
    tab.set_pinned(a)
    tab.set_current(b)
    assert tab.cell_text("Cost", 2) == "−$1,037,950"
    table = tab.findChild(QtWidgets.QTableWidget)
    qtbot.waitUntil(lambda: table.columnWidth(0) > 0, timeout=5000)
    tab.grab()
    fm = table.fontMetrics()
    for r, row in enumerate(TABLE_ROWS):
        if row == "Fits in memory":
            continue  # a verdict's figures may wrap
        for c in range(3):
            text = table.item(r, c).text()
            assert fm.horizontalAdvance(text) <= table.columnWidth(c), (row, c, text)


def test_a_plan_that_does_not_fit_says_so_in_its_title(qtbot):
    """Llama 3 70B t8 p1 on 8 H100s against t8 p4 d2 on 64: B's title read "11.720 s per
    iteration" and the waterfall's total made it 1.3 s faster, with nothing by them saying it
    needs 156 GiB of 80 (only the table's "Fits in memory" row did). The title of a plan that
    does not fit (or is tight) ends with the verdict and its figures, in the verdict's colour,
    as the Explore preview's title does."""
    from synthetic import synthetic_report, synthetic_result
    from vtrain_gui.compare import CompareTab
    from vtrain_gui.formatting import VERDICT_COLORS

    a, b = synthetic_result(p=4), synthetic_result(p=4)
    b.report = synthetic_report(p=4, fits=False)
    assert a.report.memory_verdict == "fits" and b.report.memory_verdict == "does not fit"
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.show()
    tab.set_pinned(a)
    tab.set_current(b)
    text_a, text_b = tab.label_a.text(), tab.label_b.text()
    assert "per iteration" in text_a and "fit" not in text_a.split("per iteration")[1]
    verdict = html.escape(b.report.memory_verdict_text)
    assert verdict.startswith("does not fit: 110.0 of 74.5 GiB")
    assert text_b.endswith(f'per iteration — <span style="color:{VERDICT_COLORS["does not fit"]};">'
                           f"{verdict}</span>")
    # the plain text shown (the label is rich text): the title, then the verdict
    from PySide6 import QtGui
    doc = QtGui.QTextDocument()
    doc.setHtml(text_b)
    assert doc.toPlainText().endswith(f"per iteration — {b.report.memory_verdict_text}")


def test_a_plan_on_another_gpus_store_says_so_in_its_title(qtbot):
    """A pinned plan on H100-SXM5-80GB whose cluster.profile_path is the shipped A100 store:
    its title read "8 x H100-SXM5-80GB" beside A100 times, and the banner named H100 / A100 as
    the difference beyond the plan, with nothing saying both ran on the A100's profile. The
    title says so in the words vtrain simulate and vtrain diff warn with; the other does not."""
    from core.io.session import load_any
    from core.sim.simulate import PROFILES_DIR, simulate
    from tests.conftest import EXAMPLES
    from vtrain_gui.compare import CompareTab

    a_session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    a_session.cluster.gpu = "H100-SXM5-80GB"
    a_session.cluster.profile_path = str(PROFILES_DIR / "A100-SXM4-80GB.h5")
    a, b = simulate(a_session), simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    note = ("the profile is of A100-SXM4-80GB, not of cluster.gpu H100-SXM5-80GB: times, MFU "
            "and memory capacity are A100-SXM4-80GB's")
    assert a.report.warnings[0] == note
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.show()
    tab.set_pinned(a)
    tab.set_current(b)
    from PySide6 import QtGui
    doc = QtGui.QTextDocument()
    doc.setHtml(tab.label_a.text())
    assert doc.toPlainText().endswith(f"per iteration — {note}")
    doc.setHtml(tab.label_b.text())
    assert doc.toPlainText().endswith("per iteration")


def test_each_plans_warnings_are_under_its_title(qtbot):
    """The report's warnings of each plan (here the all-reduces of the 1.3B example's gradients,
    1,349.9 and 1,365.9 MiB, beyond the measured 1 to 1,024 MiB) were not shown on the Compare
    tab, while vtrain diff prints them ("warning: A: ..."): a line under each title shows the
    first with "(+N more, hover)", the tooltip all of them. The other GPU's store is said in
    the title and not again; a plan without warnings has no line."""
    from PySide6 import QtGui
    from core.io.session import load_any
    from core.sim.simulate import PROFILES_DIR, simulate
    from tests.conftest import EXAMPLES
    from vtrain_gui.compare import CompareTab

    a = simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    b_session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    b_session.cluster.gpu = "H100-SXM5-80GB"
    b_session.cluster.profile_path = str(PROFILES_DIR / "A100-SXM4-80GB.h5")
    b = simulate(b_session)
    extrapolated = [f"all_reduce of {mib} MiB on 2 GPUs: beyond the measured sizes (1 MiB to "
                    "1024 MiB), extrapolated with that curve's latency-bandwidth fit"
                    for mib in ("1349.9", "1365.9")]
    assert a.report.warnings == extrapolated
    note = ("the profile is of A100-SXM4-80GB, not of cluster.gpu H100-SXM5-80GB: times, MFU "
            "and memory capacity are A100-SXM4-80GB's")
    assert b.report.warnings == [note, *extrapolated]
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.resize(1366, 900)
    tab.show()
    tab.set_pinned(a)
    tab.set_current(b)
    for line, name in ((tab.warnings_a, "A"), (tab.warnings_b, "B")):
        assert line.isVisible()
        assert line.full_text() == f"⚠ {extrapolated[0]} (+1 more, hover)"
        doc = QtGui.QTextDocument()
        doc.setHtml(line.toolTip())
        assert doc.toPlainText().split("\n") == [f"Warnings of {name}", *extrapolated]
    assert note not in tab.warnings_b.toolTip()  # the title says it
    doc = QtGui.QTextDocument()
    doc.setHtml(tab.label_b.text())
    assert doc.toPlainText().endswith(f"per iteration — {note}")
    # a plan without warnings: no line (GPT-3 175B's example)
    big = simulate(load_any(EXAMPLES / "gpt3_175b.json"))
    assert big.report.warnings == []
    tab.set_current(big)
    assert tab.warnings_b.isHidden() and tab.warnings_b.full_text() == ""
    assert tab.warnings_a.isVisible()



def test_the_waterfall_shows_its_total_in_a_1024_pixel_window(window, qtbot, real_simulate):
    """At 1,024 x 768 the table left the waterfall 584 px, and its one-line title (616 px) made
    the plot 670 px wide: the view cut its right side, the total's bar (the difference
    itself) and the title's end with it. Every bar, the total's included, is in view."""
    from PySide6 import QtCore

    from tests.conftest import EXAMPLES
    assert window.open_path(EXAMPLES / "gpt3_1.3b_single_node.json")
    qtbot.waitUntil(lambda: window.result is not None, timeout=60_000)
    a = window.result
    assert window.pin_plan()
    window.editor.field_widget("plan.micro_batch_size").setValue(2)
    window.simulate_now()
    qtbot.waitUntil(lambda: window.result is not None and window.result is not a,
                    timeout=60_000)
    b = window.result
    window.resize(1024, 768)
    window.show_tab("compare")
    tab = window.compare
    waterfall = tab.waterfall
    for _ in range(3):
        qtbot.wait(20)
    assert (window.width(), window.height()) == (1024, 768)
    # what the table leaves of 1,024 px (617 since its iteration row reads in one unit, its
    # difference in seconds beside seconds): narrower than the 670 px the one-line title took
    assert waterfall.width() < 640
    item = waterfall.getPlotItem()
    assert item.minimumWidth() <= waterfall.viewport().width()
    assert item.sceneBoundingRect().right() <= waterfall.viewport().width()
    names = tab.bar_names()
    assert names[-1] == "total" and tab.bar_heights()[-1] == pytest.approx(
        b.report.iteration_time_s - a.report.iteration_time_s)
    # the total's bar, right edge (its x + half the 0.7 width), inside the view
    box = item.getViewBox()
    right = box.mapViewToScene(QtCore.QPointF(len(names) - 1 + 0.35, 0.0))
    left = box.mapViewToScene(QtCore.QPointF(-0.35, 0.0))
    assert 0 <= left.x() < right.x() <= waterfall.viewport().width()


def test_a_difference_that_reads_zero_has_no_sign_in_any_row(qtbot):
    """Llama 3 8B (torchtitan) on 16 and on 64 GPUs: 0.009 days each, the days read "0.0" and
    their difference "−0.0"; days now read as everywhere else ("0.009") and a difference that
    reads zero has no sign, in every row (core.util.text.signed, as vtrain diff)."""
    from core.sim.simulate import simulate
    from vtrain_gui.compare import CompareTab

    a = simulate(_tiny_session())
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.set_pinned(a)
    tab.set_current(a)
    tab._flush()  # drawn: the table below is filled by hand
    d = tab._diff.to_dict()
    d["a"]["training_days"], d["b"]["training_days"] = 0.00930, 0.00926
    d["training_days_difference"] = -4e-5
    d["cost_difference_usd"] = -0.4
    d["difference_s"] = -2e-3
    d["memory_difference_bytes"] = -2**20

    class Diff:
        def to_dict(self):
            return d
    tab._fill_table(Diff())
    assert [tab.cell_text("Training days", c) for c in range(3)] == ["0.009", "0.009", "0.0"]
    assert tab.cell_text("Cost", 2) == "$0"
    # not zero: its sign; in the unit of the iterations (one row, one unit)
    seconds = a.report.iteration_time_s
    assert [tab.cell_text("Iteration time", c) for c in range(3)] == (
        [f"{seconds:.3f} s"] * 2 + ["−0.002 s"] if seconds >= 1 else
        [f"{seconds * 1e3:.2f} ms"] * 2 + ["−2.00 ms"])
    assert tab.cell_text("Memory per GPU (max)", 2) == "0.0 GiB"
    d["training_days_difference"] = -0.004
    d["difference_s"] = 0.0
    tab._fill_table(Diff())
    assert tab.cell_text("Training days", 2) == "−0.004"
    assert tab.cell_text("Iteration time", 2) == ("0.000 s" if seconds >= 1 else "0.00 ms")
