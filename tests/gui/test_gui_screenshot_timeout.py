"""``vtrain gui --screenshot``'s time limit and the Explore progress while a sweep's result is
built (a user's trial: a GB200 sweep's bar read "1,654,707 / 1,654,707 plans" while the status
said "Simulating…", and the picture gave up after a fixed 5 minutes "waiting for the
simulation", which had finished: the sweep was still running)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.cli import main
from tests.conftest import EXAMPLES, ROOT
from vtrain_gui.app import SCREENSHOT_TIMEOUT_MS, _ScreenshotTaker
from vtrain_gui.explore import ExploreTab

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def test_the_progress_is_busy_while_the_result_is_built(qtbot):
    tab = ExploreTab()
    qtbot.addWidget(tab)
    run = tab.runner.latest_run_id
    tab._on_sweep_progress(run, 1_000, 1_654_707)
    assert (tab.progress_bar.value(), tab.progress_bar.maximum()) == (1_000, 1_654_707)
    assert tab.progress_bar.text() == "1,000 / 1,654,707 plans"
    assert tab.status_text.startswith("Simulating")
    # every plan done, the result not yet built: not a full bar, a busy one
    tab._on_sweep_progress(run, 1_654_707, 1_654_707)
    assert tab.progress_bar.maximum() == tab.progress_bar.minimum() == 0
    assert "1,654,707" in tab.status_text and not tab.status_text.startswith("Simulating")


def test_gui_help_names_the_limit(capsys):
    with pytest.raises(SystemExit):
        main(["gui", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--timeout SECONDS" in text and f"default {SCREENSHOT_TIMEOUT_MS / 1000:g}" in text
    assert main(["gui", "--timeout", "0", "--screenshot", "x.png"]) == 2


def test_the_message_names_what_was_waited_for(window, qtbot, real_simulate, tmp_path):
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.open_path(SMALL, as_template=True)
    taker = _ScreenshotTaker(window, str(tmp_path / "x.png"), None, explore=True,
                             timeout_ms=600_000)
    taker._timeout.stop()
    window.explore.sweep_finished.disconnect(taker._on_sweep_finished)  # no picture here
    assert taker.waiting_for() == "the simulation"
    taker._on_result_shown(None)  # the simulation shown: the sweep starts
    assert window.explore.runner.busy
    assert taker.waiting_for().startswith("the sweep (")
    window.explore.cancel()
    qtbot.waitUntil(lambda: not window.explore.runner.busy, timeout=30_000)


def test_a_screenshot_past_its_limit_says_what_it_waited_for(tmp_path, real_simulate):
    out = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui", str(SMALL), "--explore",
                           "--screenshot", str(out), "--timeout", "0.001"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 3, proc.stderr
    # what it waits for at 1 ms depends on the machine's load: the simulation, else the next step
    assert "waiting for the " in proc.stderr and "--timeout" in proc.stderr, proc.stderr
