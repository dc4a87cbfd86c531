"""Checks, before Qt starts, that the window can open on this desktop (no Qt import here).

Qt 6's X11 platform plugin (``xcb``) links against XCB utility libraries
that many Linux installations lack (Debian 12 without ``libxcb-icccm4`` and
``libxcb-keysyms1``; Ubuntu without ``libxcb-cursor0``). Qt then aborts the
process (SIGABRT, exit 134) with "could not load the Qt platform plugin
xcb", which names no library. :func:`check_desktop` finds the missing
libraries by loading each one the plugin needs (``dlopen``, cheap and exact)
and says which system packages provide them on the common distributions;
it also catches an X11 platform without a display.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["XCB_LIBRARIES", "DISTRIBUTIONS", "qt_platform", "missing_libraries",
           "install_commands", "check_desktop"]

#: Shared libraries Qt 6's xcb platform plugin (and its libQt6XcbQpa) loads, with the package
#: that provides each on Debian/Ubuntu, Fedora/RHEL, Arch and openSUSE (``ldd libqxcb.so``).
XCB_LIBRARIES: dict[str, dict[str, str]] = {
    "libxcb-cursor.so.0": {"debian": "libxcb-cursor0", "fedora": "xcb-util-cursor",
                           "arch": "xcb-util-cursor", "suse": "libxcb-cursor0"},
    "libxcb-icccm.so.4": {"debian": "libxcb-icccm4", "fedora": "xcb-util-wm",
                          "arch": "xcb-util-wm", "suse": "libxcb-icccm4"},
    "libxcb-keysyms.so.1": {"debian": "libxcb-keysyms1", "fedora": "xcb-util-keysyms",
                            "arch": "xcb-util-keysyms", "suse": "libxcb-keysyms1"},
    "libxcb-image.so.0": {"debian": "libxcb-image0", "fedora": "xcb-util-image",
                          "arch": "xcb-util-image", "suse": "libxcb-image0"},
    "libxcb-render-util.so.0": {"debian": "libxcb-render-util0", "fedora": "xcb-util-renderutil",
                                "arch": "xcb-util-renderutil", "suse": "libxcb-render-util0"},
    "libxcb-util.so.1": {"debian": "libxcb-util1", "fedora": "xcb-util", "arch": "xcb-util",
                         "suse": "libxcb-util1"},
    "libxkbcommon-x11.so.0": {"debian": "libxkbcommon-x11-0", "fedora": "libxkbcommon-x11",
                              "arch": "libxkbcommon-x11", "suse": "libxkbcommon-x11-0"},
    "libxkbcommon.so.0": {"debian": "libxkbcommon0", "fedora": "libxkbcommon",
                          "arch": "libxkbcommon", "suse": "libxkbcommon0"},
    "libxcb-randr.so.0": {"debian": "libxcb-randr0", "fedora": "libxcb", "arch": "libxcb",
                          "suse": "libxcb-randr0"},
    "libxcb-shape.so.0": {"debian": "libxcb-shape0", "fedora": "libxcb", "arch": "libxcb",
                          "suse": "libxcb-shape0"},
    "libxcb-xfixes.so.0": {"debian": "libxcb-xfixes0", "fedora": "libxcb", "arch": "libxcb",
                           "suse": "libxcb-xfixes0"},
    "libxcb-sync.so.1": {"debian": "libxcb-sync1", "fedora": "libxcb", "arch": "libxcb",
                         "suse": "libxcb-sync1"},
    "libxcb-shm.so.0": {"debian": "libxcb-shm0", "fedora": "libxcb", "arch": "libxcb",
                        "suse": "libxcb-shm0"},
    "libxcb-render.so.0": {"debian": "libxcb-render0", "fedora": "libxcb", "arch": "libxcb",
                           "suse": "libxcb-render0"},
    "libxcb-xkb.so.1": {"debian": "libxcb-xkb1", "fedora": "libxcb", "arch": "libxcb",
                        "suse": "libxcb-xkb1"},
    "libxcb.so.1": {"debian": "libxcb1", "fedora": "libxcb", "arch": "libxcb", "suse": "libxcb1"},
    "libX11-xcb.so.1": {"debian": "libx11-xcb1", "fedora": "libX11-xcb", "arch": "libx11",
                        "suse": "libX11-xcb1"},
    "libX11.so.6": {"debian": "libx11-6", "fedora": "libX11", "arch": "libx11",
                    "suse": "libX11-6"},
    "libGL.so.1": {"debian": "libgl1", "fedora": "libglvnd-glx", "arch": "libglvnd",
                   "suse": "libGL1"},
    "libEGL.so.1": {"debian": "libegl1", "fedora": "libglvnd-egl", "arch": "libglvnd",
                    "suse": "libEGL1"},
    "libfontconfig.so.1": {"debian": "libfontconfig1", "fedora": "fontconfig",
                           "arch": "fontconfig", "suse": "libfontconfig1"},
    "libfreetype.so.6": {"debian": "libfreetype6", "fedora": "freetype", "arch": "freetype2",
                         "suse": "libfreetype6"},
    "libdbus-1.so.3": {"debian": "libdbus-1-3", "fedora": "dbus-libs", "arch": "dbus",
                       "suse": "libdbus-1-3"},
    "libglib-2.0.so.0": {"debian": "libglib2.0-0", "fedora": "glib2", "arch": "glib2",
                         "suse": "libglib-2_0-0"},
}

#: Distribution families: key, names shown, install command, ``/etc/os-release`` IDs.
DISTRIBUTIONS = (
    ("debian", "Debian, Ubuntu", "sudo apt-get install", ("debian", "ubuntu", "linuxmint", "pop")),
    ("fedora", "Fedora, RHEL", "sudo dnf install", ("fedora", "rhel", "centos", "rocky", "almalinux")),
    ("arch", "Arch", "sudo pacman -S", ("arch", "manjaro", "endeavouros")),
    ("suse", "openSUSE", "sudo zypper install", ("opensuse", "suse", "sles", "opensuse-leap",
                                                 "opensuse-tumbleweed")),
)


def qt_platform(env: Mapping[str, str] | None = None, platform: str | None = None) -> str:
    """The Qt platform plugin the window will try first (``'xcb'``, ``'wayland'``, ...).

    ``QT_QPA_PLATFORM`` (its first entry, options after ``:`` dropped) when
    set; otherwise, on Linux, ``wayland`` in a Wayland session
    (``XDG_SESSION_TYPE=wayland``) and ``xcb`` elsewhere, as Qt 6 chooses;
    ``''`` on other systems (not checked).
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen.split(";")[0].split(":")[0].strip()
    if not platform.startswith("linux"):
        return ""
    return "wayland" if env.get("XDG_SESSION_TYPE", "") == "wayland" else "xcb"


def _dlopen(name: str) -> None:
    ctypes.CDLL(name)


def _xcb_plugin() -> Path | None:
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return path if path.exists() else None


def missing_libraries(load: Callable[[str], None] = _dlopen,
                      plugin: Path | None | bool = True) -> list[str]:
    """Shared libraries of :data:`XCB_LIBRARIES` that cannot be loaded, in table order.

    ``load(name)`` raises ``OSError`` for a missing library (``ctypes.CDLL``
    by default). When every listed library loads, the xcb plugin itself is
    loaded too (``plugin``: its path; True to find PySide6's) and a library
    it still lacks is named from the loader's message.
    """
    missing = []
    for name in XCB_LIBRARIES:
        try:
            load(name)
        except OSError:
            missing.append(name)
    if missing or plugin is False:
        return missing
    path = _xcb_plugin() if plugin is True else plugin
    if path is None:
        return missing
    try:
        load(str(path))
    except OSError as exc:
        found = re.search(r"(lib[\w.+-]+\.so(?:\.\d+)*)", str(exc))
        missing.append(found.group(1) if found and found.group(1) != Path(path).name
                       else f"(a library of {Path(path).name}: {exc})")
    return missing


def _os_release_ids(path: str = "/etc/os-release") -> set[str]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return set()
    ids: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids.update(value.strip().strip('"').split())
    return ids


def install_commands(missing: list[str], os_ids: set[str] | None = None) -> list[str]:
    """One install line per distribution family for the ``missing`` libraries, this system's
    family first and marked."""
    os_ids = _os_release_ids() if os_ids is None else os_ids
    lines = []
    for key, names, command, ids in DISTRIBUTIONS:
        packages = list(dict.fromkeys(XCB_LIBRARIES[m][key] for m in missing if m in XCB_LIBRARIES))
        if not packages:
            continue
        here = bool(os_ids & set(ids))
        line = f"  {command} {' '.join(packages)}    ({names}{'; this system' if here else ''})"
        lines.insert(0, line) if here else lines.append(line)
    return lines


_NO_WINDOW = ("Without a window: `vtrain simulate FILE` prints the report; "
              "`QT_QPA_PLATFORM=offscreen vtrain gui FILE --screenshot out.png` draws the window "
              "to a picture.")


def check_desktop(env: Mapping[str, str] | None = None,
                  load: Callable[[str], None] = _dlopen, platform: str | None = None,
                  os_ids: set[str] | None = None) -> str | None:
    """Why the window cannot open here (a message for the user), or None when it can.

    Only the X11 platform (``xcb``) is checked: a display (``DISPLAY``; without one the
    message says so first, naming any missing libraries too), then its libraries. Other
    platforms (offscreen, wayland, ...) pass.
    """
    env = os.environ if env is None else env
    if qt_platform(env, platform) != "xcb":
        return None
    missing = missing_libraries(load)
    if not env.get("DISPLAY"):  # first: installing libraries does not give a display
        also = (f" On a desktop it will also need system libraries that are missing here: "
                f"{', '.join(missing)} (README.md, \"The desktop window on Linux\")."
                if missing else "")
        return ("the window cannot start: no X display (DISPLAY is not set). Run it in a "
                "desktop session, or over `ssh -X`." + also + " " + _NO_WINDOW)
    if missing:
        lines = [f"the window cannot start: Qt's X11 platform plugin (xcb) needs system "
                 f"libraries that are missing: {', '.join(missing)}.",
                 "Install them with one of:", *install_commands(missing, os_ids),
                 "(README.md, \"The desktop window on Linux\", lists them all.)", _NO_WINDOW]
        return "\n".join(lines)
    return None


def _main(argv: list[str]) -> int:
    """``python -m vtrain_gui.desktop_check [--packages FAMILY]``: the check's message (exit 2
    when the window cannot start), or the packages of one family (``debian``, ``fedora``,
    ``arch``, ``suse``) that provide the libraries missing here (an empty line when none), for
    scripts that install them."""
    if len(argv) == 2 and argv[0] == "--packages":
        families = {key for key, *_ in DISTRIBUTIONS}
        if argv[1] not in families:
            print(f"unknown family {argv[1]!r}; one of {', '.join(sorted(families))}",
                  file=sys.stderr)
            return 2
        missing = missing_libraries(plugin=False)
        print(" ".join(dict.fromkeys(XCB_LIBRARIES[m][argv[1]] for m in missing)))
        return 0
    if argv:
        print("usage: python -m vtrain_gui.desktop_check [--packages FAMILY]", file=sys.stderr)
        return 2
    problem = check_desktop()
    print(problem or f"the window can start here (platform {qt_platform() or 'default'})")
    return 2 if problem else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
