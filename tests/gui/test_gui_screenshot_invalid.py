"""``vtrain gui S.json --screenshot OUT.png`` with a session that breaks a rule: exit status 2,
one line naming the file, the field and the rule as ``vtrain simulate`` does, and the picture
of the window with the fields marked in red written (the line says where)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6 import QtGui

from tests.conftest import EXAMPLES, ROOT


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})


@pytest.mark.parametrize(("section", "field", "value"), [("plan", "tensor_parallel", 3),
                                                          ("cluster", "gpu", "H100-SXM")])
def test_screenshot_of_an_invalid_session_names_file_and_field(tmp_path, section, field, value):
    doc = json.loads((EXAMPLES / "mtnlg_530b.json").read_text())
    doc[section][field] = value
    session = tmp_path / "bad.json"
    session.write_text(json.dumps(doc))
    _check_same_as_simulate(session, tmp_path / "shot.png", f"{section}.{field}")


def test_an_authors_config_is_named_with_its_own_keys(tmp_path):
    """A vTrain authors'-format config: its keys (``tensor_parallel_size``), as ``simulate``
    names them, not the session fields the window shows."""
    from tests.test_bounds_s3 import AUTHORS
    config = tmp_path / "authors.json"
    config.write_text(json.dumps({**AUTHORS, "tensor_parallel_size": 3, "num_gpus": 12}))
    _check_same_as_simulate(config, tmp_path / "shot.png", "tensor_parallel_size")


def _check_same_as_simulate(session, out, field: str) -> None:
    proc = _run("gui", str(session), "--screenshot", str(out))

    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("vtrain")]
    assert len(lines) == 1, proc.stderr
    # the same text as ``simulate`` (after its "vtrain: error: "): file, field, rule, all problems
    sim = _run("simulate", str(session))
    assert sim.returncode == 2
    sim_text = sim.stderr.strip().split(": ", 2)[2]
    assert sim_text.startswith(f"{session}: {field}: ")
    assert sim_text in lines[0]
    # the picture of the window showing the problems is written, and the line names it
    assert str(out) in lines[0]
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1600, 1000)


def test_help_says_what_an_invalid_session_writes():
    proc = _run("gui", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "exit status 2" in text


def test_study_settings_the_window_cannot_use_end_the_picture_with_exit_2(tmp_path):
    """``simulate`` does not read ``studies`` (the session is valid); the window shows its
    defaults for settings it cannot use, so the picture is not of the file's settings: exit
    status 2 and one line naming the file, each setting and its rule (it exited 0, silent)."""
    doc = json.loads((EXAMPLES / "mtnlg_530b.json").read_text())
    doc["studies"] = {"optimal": {"num_gpus": -5, "assumed_mfu": 7.0, "budget": "weeks"},
                      "schedule": {"bogus": 1}}
    session = tmp_path / "studies.json"
    session.write_text(json.dumps(doc))
    assert _run("simulate", str(session)).returncode == 0
    out = tmp_path / "shot.png"
    proc = _run("gui", str(session), "--screenshot", str(out), "--tab", "studies")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("vtrain")]
    assert lines == [
        f"vtrain gui: {session}: studies.optimal.num_gpus: -5 must be a whole number from 1 to "
        "1,000,000; studies.optimal.assumed_mfu: 7.0 must be a number from 0.01 to 1 (a "
        "fraction: 0.4 is 40 %); studies.optimal.budget: 'weeks' must be one of days, "
        "gpu_hours; studies.schedule.bogus: is not a setting of this study (they are trace, "
        "gpus, backfill, min_efficiency, hold_session_values) (study settings not used; "
        f"{out} pictures the window with the Studies tab's defaults for them)"], proc.stderr
    assert QtGui.QImage(str(out)).size().toTuple() == (1600, 1000)
