"""The check before Qt starts: missing XCB libraries and a missing display are named, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from vtrain_gui.desktop_check import (DISTRIBUTIONS, XCB_LIBRARIES, check_desktop,
                                      install_commands, missing_libraries, qt_platform)


def _loader(missing: set[str], plugin_error: str | None = None):
    calls = []

    def load(name: str) -> None:
        calls.append(name)
        if name in missing:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        if name.endswith("libqxcb.so") and plugin_error:
            raise OSError(plugin_error)
    load.calls = calls
    return load


def test_platform_is_the_one_qt_would_choose():
    assert qt_platform({}, "linux") == "xcb"
    assert qt_platform({"XDG_SESSION_TYPE": "x11"}, "linux") == "xcb"
    assert qt_platform({"XDG_SESSION_TYPE": "wayland"}, "linux") == "wayland"
    assert qt_platform({"QT_QPA_PLATFORM": "offscreen"}, "linux") == "offscreen"
    assert qt_platform({"QT_QPA_PLATFORM": "xcb:nomitshm;wayland"}, "linux") == "xcb"
    assert qt_platform({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux") == "wayland"
    assert qt_platform({}, "darwin") == "" and qt_platform({}, "win32") == ""


def test_the_libraries_debian_12_lacked_are_named_with_their_packages():
    load = _loader({"libxcb-icccm.so.4", "libxcb-keysyms.so.1"})
    assert missing_libraries(load, plugin=False) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    lines = install_commands(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"], {"debian"})
    assert lines[0] == ("  sudo apt-get install libxcb-icccm4 libxcb-keysyms1    "
                        "(Debian, Ubuntu; this system)")
    assert "  sudo dnf install xcb-util-wm xcb-util-keysyms    (Fedora, RHEL)" in lines
    assert "  sudo pacman -S xcb-util-wm xcb-util-keysyms    (Arch)" in lines
    assert "  sudo zypper install libxcb-icccm4 libxcb-keysyms1    (openSUSE)" in lines
    # Ubuntu names itself by ID_LIKE=debian; its usual gap is libxcb-cursor0
    assert install_commands(["libxcb-cursor.so.0"], {"ubuntu", "debian"})[0].startswith(
        "  sudo apt-get install libxcb-cursor0 ")
    # several libraries of one package are one package
    assert install_commands(["libxcb-randr.so.0", "libxcb-shm.so.0"], {"fedora"})[0] == \
        "  sudo dnf install libxcb    (Fedora, RHEL; this system)"


def test_every_library_has_a_package_in_every_family():
    for name, packages in XCB_LIBRARIES.items():
        assert set(packages) == {key for key, *_ in DISTRIBUTIONS}, name


def test_a_library_only_the_plugin_knows_is_named_from_the_loader():
    load = _loader(set(), plugin_error="libxcb-xinput.so.0: cannot open shared object file")
    plugin = ROOT / "libqxcb.so"
    assert missing_libraries(load, plugin=plugin) == ["libxcb-xinput.so.0"]
    assert load.calls[-1] == str(plugin)
    assert missing_libraries(_loader(set()), plugin=plugin) == []


def test_check_names_the_display_then_libraries():
    lacking = _loader({"libxcb-icccm.so.4"})
    text = check_desktop({"DISPLAY": ":0"}, lacking, "linux", {"debian"})
    assert "missing: libxcb-icccm.so.4." in text and "apt-get install libxcb-icccm4" in text
    assert "vtrain simulate" in text and "--screenshot" in text
    text = check_desktop({}, _loader(set()), "linux", set())
    assert text.startswith("the window cannot start: no X display (DISPLAY is not set)")
    assert check_desktop({"DISPLAY": ":0"}, _loader(set()), "linux", set()) is None
    # no display and missing libraries: the display first (installing them would not help)
    text = check_desktop({}, lacking, "linux", {"debian"})
    assert text.startswith("the window cannot start: no X display (DISPLAY is not set)")
    assert "also need system libraries that are missing here: libxcb-icccm.so.4" in text


def test_other_platforms_load_nothing():
    load = _loader(set(XCB_LIBRARIES))
    assert check_desktop({"QT_QPA_PLATFORM": "offscreen"}, load, "linux") is None
    assert check_desktop({"XDG_SESSION_TYPE": "wayland"}, load, "linux") is None
    assert check_desktop({}, load, "darwin") is None
    assert load.calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb platform is Linux's")
def test_vtrain_gui_exits_2_with_a_message_instead_of_aborting(tmp_path):
    """X11 without a display (and perhaps without the libraries): exit 2, never SIGABRT."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["QT_QPA_PLATFORM"] = "xcb"
    env["HOME"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("vtrain gui: the window cannot start: ")
    assert "Traceback" not in proc.stderr


def test_readme_lists_the_packages_of_every_family():
    readme = (ROOT / "README.md").read_text()
    for key, names, command, _ in DISTRIBUTIONS:
        row = next(line for line in readme.splitlines() if line.startswith(f"| {names} |"))
        for soname, packages in XCB_LIBRARIES.items():
            assert f" {packages[key]} " in row.replace("`", " "), (names, soname)
        assert command in row
