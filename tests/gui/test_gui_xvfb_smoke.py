"""The real window on a real X server (Xvfb, Qt's xcb platform), beside the offscreen tests.

Runs ``tests/gui/xvfb_smoke.py`` (start, simulate, every tab, a small sweep,
save, reopen, close) and ``vtrain gui --screenshot`` under Xvfb. Skips, with
the reason, where Xvfb or the XCB libraries are not installed; CI installs
them (scripts/test.sh, as root with CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from PySide6 import QtGui

from tests.conftest import EXAMPLES, ROOT
from vtrain_gui.desktop_check import missing_libraries

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="Xvfb and Qt's xcb platform are Linux's")


@pytest.fixture(scope="module")
def xvfb():
    """A private X server: ``{'DISPLAY': ':N'}`` for the environment of a client."""
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb is not installed (Debian/Ubuntu: apt-get install xvfb; "
                    "scripts/test.sh installs it under CI as root)")
    missing = missing_libraries()
    if missing:
        pytest.skip("Qt's xcb platform lacks system libraries: " + ", ".join(missing)
                    + " (see README, \"The desktop window on Linux\")")
    read, write = os.pipe()
    proc = subprocess.Popen([binary, "-displayfd", str(write), "-screen", "0", "1600x1000x24",
                             "-nolisten", "tcp"], pass_fds=(write,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()  # written once the server accepts clients
        if not number.isdigit():
            proc.kill()
            pytest.skip(f"Xvfb did not start: {proc.communicate(timeout=10)[1].decode()[-300:]}")
        yield {"DISPLAY": f":{number}"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env(xvfb: dict, home) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE")}
    return {**env, **xvfb, "QT_QPA_PLATFORM": "xcb", "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config")}


def test_the_window_runs_on_a_real_x_server(xvfb, tmp_path, real_simulate):
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "gui" / "xvfb_smoke.py"),
                           str(tmp_path)], cwd=ROOT, env=_env(xvfb, tmp_path),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for line in ("window shown on xcb", "simulated:", "tab plan: drawn", "tab explore: drawn",
                 "tab profiles: drawn", "tab studies: drawn", "sweep:", "saved saved.json",
                 "reopened: same session", "closed"):
        assert line in proc.stdout, out
    assert "Traceback" not in out and "QPainter" not in out


def test_vtrain_gui_starts_through_its_command(xvfb, tmp_path, real_simulate):
    """The command a user types, on the xcb platform: desktop check, window, simulation."""
    out = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui",
                           str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--screenshot", str(out)],
                          cwd=ROOT, env=_env(xvfb, tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1600, 1000)
