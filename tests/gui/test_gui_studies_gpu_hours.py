"""The Studies tab's compute-optimal study with a budget of GPU-hours, as ``vtrain optimal
--gpu-hours H`` studies it (the days H / (GPUs x 24) of
:func:`core.studies.optimal.days_for_gpu_hours`, its refusals in its words), and its candidates'
table readable in a 1,024 x 768 and a 1,366 x 768 window (it showed one row of 11 squeezed
columns at 1,024 x 768)."""

from __future__ import annotations

import json

import pytest
from PySide6 import QtGui

from core.cli import main
from core.io.session import load_any
from tests.conftest import EXAMPLES
from vtrain_gui.studies import OPTIMAL_COLUMNS, OPTIMAL_HEADERS, SIDE_WIDTH, StudiesTab

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


@pytest.fixture
def tab(qtbot):
    session = load_any(SMALL)
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    yield w
    w.shutdown()


def _cli_error(capsys, *args: str) -> str:
    """What ``vtrain optimal SMALL ARGS`` refuses, without its ``vtrain: error: `` prefix."""
    assert main(["optimal", str(SMALL), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vtrain: error: ")
    return err.removeprefix("vtrain: error: ")


def test_a_gpu_hour_budget_runs_the_core_study_as_the_command_line(tab, qtbot, capsys,
                                                                   monkeypatch):
    import core.studies.optimal as optimal
    days_seen = []
    real = optimal.compute_optimal

    def spy(session, num_gpus, days, **kw):
        days_seen.append((num_gpus, days))
        return real(session, num_gpus, days, **kw)
    monkeypatch.setattr(optimal, "compute_optimal", spy)
    panel = tab.optimal
    panel.gpus.setValue(8)
    panel.candidates.setValue(3)
    panel.spread.setValue(2.0)
    assert panel.by_days.isChecked()  # the default budget: days
    panel.gpu_hours.setValue(500.0)  # typing GPU-hours makes them the budget
    assert panel.by_gpu_hours.isChecked() and not panel.by_days.isChecked()
    settings = panel.settings()
    assert settings["budget"] == "gpu_hours" and settings["gpu_hours"] == 500.0
    assert panel.budget_note.text() == "= 2.6 days on 8 GPUs"  # 500 / (8 x 24) = 2.604
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        assert panel.run() is not None
    assert days_seen == [(8, 500.0 / (8 * 24))]  # the core's call, the days of the budget
    got = panel.result
    assert got.days == 500.0 / 192
    # vtrain optimal --gpu-hours 500 on the same file: the same study, number for number
    assert main(["optimal", str(SMALL), "--gpus", "8", "--gpu-hours", "500", "--candidates",
                 "3", "--spread", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["budget_given"] == {"option": "--gpu-hours", "value": 500.0}
    assert doc["days"] == got.days and doc["budget_flops"] == got.budget_flops
    assert doc["best"] == got.best is not None
    assert [(c["n_params"], c["loss"], c["tokens"], c["plan"]) for c in doc["candidates"]] == [
        (c.n_params, c.loss, c.tokens, c.plan) for c in got.candidates]
    loss = OPTIMAL_COLUMNS.index("loss")
    assert [panel.table.item(k, loss).text() for k in range(panel.table.rowCount())] == [
        f"{c['loss']:.4f}" for c in doc["candidates"]]
    # the summary heads it as the command line's header does: the GPU-hours, then the days
    assert "8 x A100-SXM4-80GB for 500 GPU-hours, 2.6 days</b>" in panel.summary.text()
    assert "($1,000 at $2.00/GPU-hour)" in panel.summary.text()  # 500 GPU-hours at $2


@pytest.mark.parametrize("hours", [1e9, 0.0])
def test_a_gpu_hour_budget_out_of_range_is_refused_in_the_command_lines_words(
        tab, capsys, hours):
    panel = tab.optimal
    panel.gpus.setValue(8)
    panel.gpu_hours.setValue(hours)
    cli = _cli_error(capsys, "--gpus", "8", "--gpu-hours", repr(hours))
    # 1e9: "--gpu-hours: 1e+09 GPU-hours take 5.21e+06 days on 8 GPUs; the study takes above 0
    # and at most 3,650 days: give more or fewer --gpus"; 0: "... must be a positive number"
    assert cli.startswith("--gpu-hours: ")
    assert panel.budget_note.text() == cli  # said under the field as it is typed, in red
    assert "C62828" in panel.budget_note.styleSheet()
    assert panel.run() is None  # not run: the status says why, as the command line
    assert panel.status.text() == cli
    assert panel.result is None and not panel.runner.busy and panel.run_button.isEnabled()
    panel.days.setValue(3.0)  # the days are the budget again: nothing to refuse
    assert panel.by_days.isChecked() and panel.budget_note.isHidden()


def test_the_budget_round_trips_through_the_session_and_a_bad_one_is_named(tab):
    panel = tab.optimal
    s = load_any(SMALL)
    s.studies = {"optimal": {"num_gpus": 2048, "budget": "gpu_hours", "gpu_hours": 2e6}}
    assert tab.reset(s) == []
    assert panel.by_gpu_hours.isChecked() and panel.gpu_hours.value() == 2e6
    assert panel.gpu_hours.text() == "2,000,000 GPU-hours"
    assert panel.budget_note.text() == "= 40.7 days on 2,048 GPUs"  # the docs' example
    assert tab.settings() == s.studies  # unedited: exactly what was loaded
    older = load_any(SMALL)  # saved before the budget choice: days
    older.studies = {"optimal": {"num_gpus": 16, "days": 7.0}}
    assert tab.reset(older) == []
    assert panel.by_days.isChecked() and panel.settings()["budget"] == "days"
    bad = load_any(SMALL)
    bad.studies = {"optimal": {"days": 7.0, "budget": "weeks", "gpu_hours": "many"}}
    assert tab.reset(bad) == ["optimal.budget", "optimal.gpu_hours"]
    assert panel.by_days.isChecked() and panel.gpu_hours.value() == 1024 * 30 * 24
    assert "budget" in panel.status.text()


def test_the_gpu_hours_field_takes_what_the_command_line_takes(tab, qtbot):
    from PySide6 import QtCore
    spin = tab.optimal.gpu_hours
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "2e6")
    qtbot.keyClick(spin, QtCore.Qt.Key.Key_Enter)
    assert spin.value() == 2e6 and spin.text() == "2,000,000 GPU-hours"
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "1,500.5")
    qtbot.keyClick(spin, QtCore.Qt.Key.Key_Enter)
    assert spin.value() == 1500.5 and spin.text() == "1,500.5 GPU-hours"


@pytest.fixture(scope="module")
def nine_candidates():
    """docs/study_compute_optimal.md's study: the 175B example on 1,024 GPUs for 30 days, 9
    candidates from 18.4B to 146B, each with a plan (interleaved ones among them: the widest
    cells; the 1.3B example's on 8 GPUs fit a 1,024-pixel window whole)."""
    from core.studies.optimal import compute_optimal
    session = load_any(EXAMPLES / "gpt3_175b.json")
    result = compute_optimal(session, 1024, 30.0)
    assert len(result.candidates) == 9 and all(c.plan is not None for c in result.candidates)
    assert "interleaved" in {c.plan["schedule"] for c in result.candidates}
    return session, result


def _shown(window, qapp, size, study):
    session, result = study
    window.resize(*size)
    window.show_tab("studies")
    panel = window.studies.optimal
    panel.result, panel.result_session = result, session
    panel.show_result(result)
    panel.results_view.set_empty(False)
    for _ in range(3):
        qapp.processEvents()
    assert (window.width(), window.height()) == size
    return panel


def _assert_columns_hold_their_text(table, best):
    """Every column at least as wide as its header and its cells' text (the best row bold),
    with a cell's padding: Qt cuts a cell's text with "…" inside its focus-frame margin + 1 px
    on each side (QCommonStyle's item text margin); the note column may cut a long reason (its
    tooltip holds it)."""
    from PySide6.QtWidgets import QStyle
    pad = 2 * (table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1)
    bold_font = QtGui.QFont(table.font())
    bold_font.setBold(True)
    plain, bold = QtGui.QFontMetrics(table.font()), QtGui.QFontMetrics(bold_font)
    head = QtGui.QFontMetrics(table.horizontalHeader().font())
    for c, key in enumerate(OPTIMAL_COLUMNS):
        width = table.columnWidth(c)
        header = table.horizontalHeaderItem(c)
        assert header.text() == OPTIMAL_HEADERS[key][0]
        assert header.toolTip() == OPTIMAL_HEADERS[key][1]
        assert head.horizontalAdvance(header.text()) + pad <= width, key
        for r in range(table.rowCount()):
            text = table.item(r, c).text()
            fm = bold if r == best else plain
            if key == "note" and text:
                assert table.item(r, c).toolTip() == text
            if key != "note":
                assert fm.horizontalAdvance(text) + pad <= width, (key, text, width)


def test_the_candidates_table_is_readable_in_a_1366_by_768_window(window, qapp, nine_candidates):
    panel = _shown(window, qapp, (1366, 768), nine_candidates)
    table = panel.table
    _assert_columns_hold_their_text(table, nine_candidates[1].best)
    # every column in view, no sideways scrolling; every candidate's row in view
    assert sum(table.columnWidth(c) for c in range(table.columnCount())) <= table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0
    assert table.rowCount() * table.rowHeight(0) <= table.viewport().height()


def test_the_candidates_table_is_readable_in_a_1024_by_768_window(window, qapp, nine_candidates):
    """It showed one row of 11 squeezed columns: now every row, each column whole; what does
    not fit scrolls sideways under the model-size column, which stays in view."""
    panel = _shown(window, qapp, (1024, 768), nine_candidates)
    table = panel.table
    _, result = nine_candidates
    _assert_columns_hold_their_text(table, result.best)
    rows = table.rowCount()
    assert rows == len(result.candidates)
    assert rows * table.rowHeight(0) <= table.viewport().height()  # was 1 row of 9
    assert table.rowHeight(0) <= table.fontMetrics().height() + 6  # one line each
    # the form keeps its fields whole beside it, narrower than its 330 px before
    form = panel.columns.widget(0)
    assert form.width() == max(SIDE_WIDTH, form.minimumWidth()) < 330
    assert form.widget().width() >= form.widget().minimumSizeHint().width()
    # the frozen column: the model sizes, over the first column, as wide
    frozen = table.frozen
    assert frozen.isVisible() and frozen.width() == table.columnWidth(0) + 1
    model = frozen.model()
    assert [model.index(r, 0).data() for r in range(rows)] == [
        table.item(r, 0).text() for r in range(rows)]
    assert all(frozen.isColumnHidden(c) for c in range(1, table.columnCount()))
    # scrolled to the end: the loss and the note in view, the sizes still beside them
    bar = table.horizontalScrollBar()
    assert bar.maximum() > 0
    bar.setValue(bar.maximum())
    qapp.processEvents()
    loss = OPTIMAL_COLUMNS.index("loss")
    assert table.columnViewportPosition(loss) >= table.columnWidth(0)
    assert (table.columnViewportPosition(loss) + table.columnWidth(loss)
            <= table.viewport().width())
    assert frozen.isVisible() and frozen.geometry().x() <= table.frameWidth()
    # the summary scrolls in what the rows leave of their pane rather than push them down
    area = panel.summary_area
    assert area.height() >= 3 * area.fontMetrics().lineSpacing()
    assert area.verticalScrollBar().maximum() > 0  # the swept / held lines are below


def test_the_summary_shows_whole_where_the_window_has_room(window, qapp, nine_candidates):
    panel = _shown(window, qapp, (1600, 1000), nine_candidates)
    area = panel.summary_area
    assert area.verticalScrollBar().maximum() == 0  # every line of it in view
    assert "swept" in panel.summary.text()
    table = panel.table
    assert table.rowCount() * table.rowHeight(0) <= table.viewport().height()


def _type(qtbot, spin, text: str) -> None:
    from PySide6 import QtCore
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, text)
    qtbot.keyClick(spin, QtCore.Qt.Key.Key_Enter)


@pytest.mark.parametrize("typed, value, shown", [
    ("1e13", 1e13, "10,000,000,000,000 GPU-hours"),  # became 10: the "1e1" typed on the way
    ("-1", -1.0, "-1 GPU-hours"),  # kept the previous value, without a word
    ("1e16", 1e16, "1e+16 GPU-hours")])
def test_a_typed_budget_beyond_the_study_is_kept_and_refused_in_the_command_lines_words(
        tab, qtbot, capsys, typed, value, shown):
    """What the command line refuses with a message, the field keeps as typed and the note
    refuses in the command line's words; out of the field's old range [0, 1e12] it read as
    another number (1e13: 10 GPU-hours, studied as 0.05 days) or the previous one."""
    panel = tab.optimal
    panel.gpus.setValue(8)
    _type(qtbot, panel.gpu_hours, typed)
    assert panel.gpu_hours.value() == value and panel.gpu_hours.text() == shown
    cli = _cli_error(capsys, "--gpus", "8", "--gpu-hours", typed)
    assert panel.budget_note.text() == cli
    assert panel.run() is None and panel.status.text() == cli


def test_a_budget_under_a_hundredth_of_a_gpu_hour_shows_its_digits(tab, qtbot):
    """0.001 GPU-hours read "0 GPU-hours" beside the note "= 5.21e-06 days" (the value kept
    its digits; the text rounded them)."""
    panel = tab.optimal
    panel.gpus.setValue(8)
    _type(qtbot, panel.gpu_hours, "0.001")
    assert panel.gpu_hours.value() == 0.001 and panel.gpu_hours.text() == "0.001 GPU-hours"
    assert panel.budget_note.text() == "= 5.21e-06 days on 8 GPUs"  # 0.001 / (8 x 24)


def test_a_budget_shorter_than_one_iteration_is_refused_naming_the_gpu_hours(tab, qtbot,
                                                                              capsys):
    """The study's refusal of a budget shorter than one iteration names --gpu-hours and the
    GPU-hours given, as vtrain optimal --gpu-hours does; it named --days, which was not
    given ("--days: 5.21e-06 days is shorter ...")."""
    panel = tab.optimal
    panel.gpus.setValue(8)
    panel.candidates.setValue(3)
    panel.spread.setValue(2.0)
    panel.gpu_hours.setValue(0.001)
    with qtbot.waitSignal(panel.runner.failed, timeout=240_000):
        assert panel.run() is not None
    cli = _cli_error(capsys, "--gpus", "8", "--gpu-hours", "0.001", "--candidates", "3",
                     "--spread", "2")
    assert cli.startswith("--gpu-hours: 0.001 GPU-hours (5.21e-06 days on 8 GPUs) is shorter "
                          "than one iteration")
    assert panel.status.text() == cli
    # the worker's study alone (the field aside): the same refusal, by the same option
    from core.plan.fields import ConfigError
    from vtrain_gui.studies import run_optimal_study
    with pytest.raises(ConfigError) as err:
        run_optimal_study(load_any(SMALL), panel.settings(), None, lambda *_: None, None)
    assert str(err.value) == cli


@pytest.fixture(scope="module")
def small_study():
    """The 1.3B example's study on 8 GPUs for 500 GPU-hours: 6 candidates, the best (1.97B)
    neither the first nor the last, its note "lowest loss"; another row "rule's size"."""
    from core.studies.optimal import compute_optimal, days_for_gpu_hours
    session = load_any(SMALL)
    result = compute_optimal(session, 8, days_for_gpu_hours(8, 500.0))
    assert result.best is not None and result.rule_index not in (None, result.best)
    return session, result


@pytest.mark.parametrize("size", [(1024, 768), (1366, 768)])
def test_the_note_column_keeps_its_marks_whole(window, qapp, small_study, size):
    """Qt's stretched last column shrank the note to what the others left: at 1,024 px the
    best row's note read "lowe…" (and "rule's…"). It is at least as wide as its marks (the
    table scrolls sideways for them), and fills the table's width where there is room."""
    panel = _shown(window, qapp, size, small_study)
    _, result = small_study
    table = panel.table
    note = OPTIMAL_COLUMNS.index("note")
    assert table.item(result.best, note).text() == "lowest loss"
    assert table.item(result.rule_index, note).text() == "rule's size"
    bold = QtGui.QFont(table.font())
    bold.setBold(True)
    need = QtGui.QFontMetrics(bold).horizontalAdvance("lowest loss")
    assert table.columnWidth(note) >= need + 4
    total = sum(table.columnWidth(c) for c in range(table.columnCount()))
    bar = table.horizontalScrollBar()
    if size[0] == 1366:  # room for all: the note fills the rest, nothing scrolls
        assert total == table.viewport().width() and bar.maximum() == 0
    else:
        assert total > table.viewport().width() and bar.maximum() == total - table.viewport().width()
