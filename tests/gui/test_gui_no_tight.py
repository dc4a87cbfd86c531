"""The window's equivalent of ``vtrain sweep --no-tight``: "fits outside the margin only" where a
sweep starts (the Explore tab's settings, saved with the session) and where the GPU choice
starts; the summary counts the front's tight plans, or those left out, in the command line's
words; a saved sweep reads back as filtered; the Explore front keeps the least memory of ties."""

from __future__ import annotations

import json

import numpy as np

from core.cli import main
from core.cli.common import NO_TIGHT_HELP, tight_front_text
from core.io.session import load_any
from core.studies.gpu_choice import choose_gpus
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES
from tests.test_gpu_choice import HEADER
from vtrain_gui.explore import ExploreTab
from vtrain_gui.gpu_choice_view import GpuChoicePanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
SPACE = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4, 8), schedules=("1f1b",),
                   recompute=("none", "full"))


def _tight_session(no_tight: bool | None):
    """GPT-3 1.3B with half the GPU as margin (its fastest plan, about 49.6 of 80 GiB, is
    tight) and the sweep settings of :data:`SPACE`, with ``no_tight`` when not None."""
    session = load_any(SMALL)
    session.cluster.memory_reserve_fraction = 0.5
    session.sweep = {"space": SPACE.to_dict(), "deadline_days": None, "workers": 1}
    if no_tight is not None:
        session.sweep["no_tight"] = no_tight
    return session


def _cli_note(capsys, *more: str) -> str:
    """The line vtrain sweep prints under its front for the same session and space."""
    args = ["sweep", str(SMALL), "--max-gpus", "8", "--micro-batch-sizes", "1,2,4,8",
            "--schedules", "1f1b", "--recompute",
            "none,full", "--set", "cluster.memory_reserve_fraction=0.5", "--workers", "1", *more]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    return out


def test_explore_no_tight_sweeps_as_the_command_line_and_saves_it(qtbot, capsys):
    session = _tight_session(True)
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.reset(session)
    box = tab.settings_panel.no_tight
    assert box.isChecked() and "(--no-tight)" in box.text()
    assert box.toolTip().startswith("Keep only plans whose memory verdict is")
    assert NO_TIGHT_HELP[1:] in box.toolTip()  # the command line's help, word for word
    with qtbot.waitSignal(tab.sweep_finished, timeout=120_000) as blocker:
        assert tab.run()
    got = blocker.args[0]
    want = run_sweep(session, SPACE, no_tight=True)
    assert got.no_tight and got.num_tight_left_out == want.num_tight_left_out > 0
    assert got.plans[got.fastest] == want.plans[want.fastest]
    assert got.memory_verdict[got.fastest] == "fits"
    note = tight_front_text(0, 0, want.num_tight_left_out)
    assert note in " ".join(tab.summary_text.split())
    assert note in _cli_note(capsys, "--no-tight")  # the command line prints the same line
    assert np.array_equal(tab.front_mask(), got.pareto)  # nothing filtered: the sweep's front
    # saved with the session: the settings and the sweep, read back as filtered
    saved = json.loads(json.dumps(tab.settings()))
    assert saved["no_tight"] is True and saved["result"]["no_tight"] is True
    assert saved["result"]["num_tight_left_out"] == want.num_tight_left_out
    again = ExploreTab()
    qtbot.addWidget(again)
    reopened = load_any(SMALL)
    reopened.cluster.memory_reserve_fraction = 0.5
    reopened.sweep = saved
    again.reset(reopened)
    assert again.settings_panel.no_tight.isChecked()
    assert again.result.no_tight and again.result.num_tight_left_out == want.num_tight_left_out
    assert note in " ".join(again.summary_text.split())
    # unticked, the next sweep keeps the tight plans and counts those on its front
    box.setChecked(False)
    assert "no_tight" not in tab.settings()
    with qtbot.waitSignal(tab.sweep_finished, timeout=120_000) as blocker:
        assert tab.run()
    plain = blocker.args[0]
    assert not plain.no_tight and plain.memory_verdict[plain.fastest] == "tight"
    note = tight_front_text(plain.num_tight_on_front, int(plain.pareto.sum()), None)
    assert plain.num_tight_on_front > 0
    assert note in " ".join(tab.summary_text.split())
    assert note in _cli_note(capsys)
    tab.runner.shutdown()
    again.runner.shutdown()


def test_settings_without_no_tight_read_as_false_and_a_bad_value_is_named(qtbot):
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.reset(_tight_session(None))  # a file saved before the option
    # the filter is not the option, and says which is
    assert "tight plans (inside the margin) stay" in tab.fits_only.toolTip()
    assert "(--no-tight)" in tab.fits_only.toolTip()
    assert not tab.settings_panel.no_tight.isChecked()
    assert "no_tight" not in tab.settings_panel.execution()
    tab.settings_panel.no_tight.setChecked(True)
    assert tab.settings_panel.execution()["no_tight"] is True
    tab.reset(_tight_session("yes"))
    errors = tab.settings_panel.error_label.text()
    assert "sweep.no_tight" in errors and "must be true or false" in errors
    assert not tab.settings_panel.no_tight.isChecked()


def test_explore_front_keeps_the_least_memory_of_tied_plans(qtbot):
    """ZeRO-1 and ZeRO-2 at one micro-batch per iteration (64 GPUs): the same days and dollars;
    the Explore front and its fastest mark are ZeRO-2's, as vtrain sweep's."""
    session = load_any(SMALL)
    result = run_sweep(session, SweepSpace(max_gpus=64, tensor_parallel=(1,),
                                           micro_batch_sizes=(4,), schedules=("1f1b",),
                                           recompute=("none",), zero_stages=(1, 2)), workers=1)
    at = {int(pl.zero_stage): i for i, pl in enumerate(result.plans)
          if pl.num_gpus == 64 and pl.pipeline_parallel == 1}
    assert result.training_days[at[1]] == result.training_days[at[2]]
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(session)
    tab.set_result(result)
    front = tab.front_mask()
    assert front[at[2]] and not front[at[1]]
    assert tab.marks()["fastest"] == at[2] == result.fastest
    assert np.array_equal(front, result.pareto)


def test_gpu_choice_no_tight_leaves_the_tight_plans_out(qtbot, tmp_path):
    sheet = tmp_path / "prices.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,1.5,8,,test,2026-01-01\n")
    calls = []

    def choose(session, sh, **kw):
        calls.append(kw.get("no_tight", False))
        return choose_gpus(session, sh, space_for=lambda row: SPACE, **kw)

    session = _tight_session(None)
    panel = GpuChoicePanel(choose=choose)
    qtbot.addWidget(panel)
    panel.set_session(session)
    assert not panel.no_tight.isChecked()
    assert NO_TIGHT_HELP[1:] in panel.no_tight.toolTip()
    with qtbot.waitSignal(panel.choice_finished, timeout=120_000):
        assert panel.load(sheet)
    plain = panel.choice
    assert plain.num_tight_on_front > 0
    assert tight_front_text(plain.num_tight_on_front, int(plain.front.size), None) in (
        panel.status.text())
    panel.no_tight.setChecked(True)
    with qtbot.waitSignal(panel.choice_finished, timeout=120_000):
        assert panel.load(sheet)
    kept = panel.choice
    assert calls == [False, True]
    assert kept.no_tight and kept.num_tight_on_front == 0 and kept.num_tight_left_out > 0
    assert kept.point(kept.best_by_days)["memory_verdict"] == "fits"
    assert tight_front_text(0, 0, kept.num_tight_left_out) in panel.status.text()
    panel.shutdown()


def test_studies_compute_optimal_no_tight_as_vtrain_optimal(qtbot):
    """The Studies tab's compute-optimal study with "fits outside the margin only": the
    candidates' plans of compute_optimal(no_tight=True) (vtrain optimal --no-tight), none
    marked ~, the command line's line in the summary; settings saved before the box read as
    unticked."""
    from core.cli.common import NO_TIGHT_OPTIMAL_HELP, NO_TIGHT_OPTIMAL_NOTE
    from core.studies.optimal import compute_optimal
    from vtrain_gui.studies import OPTIMAL_COLUMNS, StudiesTab
    session = _tight_session(None)
    session.sweep = None
    tab = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(tab)
    panel = tab.optimal
    assert not panel.no_tight.isChecked()
    assert NO_TIGHT_OPTIMAL_HELP[1:] in panel.no_tight.toolTip()
    panel.gpus.setValue(8)
    panel.days.setValue(2.0)
    panel.candidates.setValue(3)
    panel.spread.setValue(2.0)
    panel.no_tight.setChecked(True)
    assert panel.settings()["no_tight"] is True
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    want = compute_optimal(session, 8, 2.0, num_candidates=3, spread=2.0, no_tight=True)
    got = panel.result
    assert got.no_tight and [c.plan for c in got.candidates] == [c.plan for c in want.candidates]
    gib = OPTIMAL_COLUMNS.index("GiB")
    for k, c in enumerate(want.candidates):
        if c.plan is not None:
            assert not panel.table.item(k, gib).text().endswith("~")
    assert NO_TIGHT_OPTIMAL_NOTE in panel.summary.text()
    saved = tab.current_settings()
    assert saved["optimal"]["no_tight"] is True
    older = session.copy()
    older.studies = {"optimal": {k: v for k, v in saved["optimal"].items() if k != "no_tight"}}
    assert tab.reset(older) == []
    assert not panel.no_tight.isChecked()
    tab.shutdown()
