"""Entry point of the desktop application (``vtrain gui [PATH] [--screenshot OUT.png]``).

``run_gui(..., screenshot=OUT, explore=True)`` grabs the Explore tab after a
sweep of the session's saved (or default) sweep settings instead of the Plan tab;
``run_gui(..., screenshot=OUT, tab="profiles")`` grabs the Profiles tab.
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from PySide6 import QtCore, QtWidgets
from PySide6.QtCore import Slot

from core.io.session import SessionFileError, load_any
from core.plan.fields import ConfigError
from core.util.text import printable

from .desktop_check import check_desktop
from .save_image import image_format, save_pixmap

__all__ = ["run_gui", "DEFAULT_EXAMPLE", "SCREENSHOT_SIZE", "OFFSCREEN_NOISE",
           "offscreen_noise_dropped", "image_format"]

#: Example opened when no path is given (looked up in ``resources/examples``).
DEFAULT_EXAMPLE = "mtnlg_530b.json"
#: Window size of ``--screenshot`` images, in pixels.
SCREENSHOT_SIZE = (1600, 1000)
#: Give up on a screenshot when what it waits for (the first simulation, with ``explore`` the
#: sweep too) takes longer than this, by default (``vtrain gui --timeout SECONDS``).
SCREENSHOT_TIMEOUT_MS = 300_000
#: The warning Qt's offscreen platform plugin prints each time a window's size limits change
#: (its QPlatformWindow lacks propagateSizeHints); it says nothing about the picture.
OFFSCREEN_NOISE = "This plugin does not support propagateSizeHints()"


@contextmanager
def offscreen_noise_dropped():
    """Drop Qt's :data:`OFFSCREEN_NOISE` message while the block runs; every other Qt message
    goes where it went before (the handler installed before, or Qt's default output on
    stderr). The handler before is put back on leaving."""
    previous = None

    def handler(mode: QtCore.QtMsgType, context: QtCore.QMessageLogContext, message: str) -> None:
        if message == OFFSCREEN_NOISE:
            return
        if previous is not None:
            previous(mode, context, message)
        else:  # Qt's default handler, as it writes when none is installed
            print(QtCore.qFormatLogMessage(mode, context, message), file=sys.stderr, flush=True)

    previous = QtCore.qInstallMessageHandler(handler)
    try:
        yield
    finally:
        QtCore.qInstallMessageHandler(previous)


class _ScreenshotTaker(QtCore.QObject):
    """Grabs the window once the first simulation finished (or failed), and what would make a
    plan that does not fit fit is on screen, and quits the app.

    With ``explore``, the Explore tab is grabbed after a sweep that starts once the
    first simulation is shown.
    """

    def __init__(self, window, out_path: str, app: QtWidgets.QApplication,
                 explore: bool = False, tab: str | None = None, source: str | None = None,
                 timeout_ms: int = SCREENSHOT_TIMEOUT_MS,
                 size: tuple[int, int] | None = None) -> None:
        super().__init__(window)
        self._window = window
        self._size = size  # asked for (--size): a picture of another size says why
        self._out = out_path
        self._app = app
        self._source = source  # the file opened, named in the message of an invalid session
        self._invalid: str | None = None  # that message, printed once the picture is written
        self._unused = ""  # the study settings of the file not used, with their rules (start)
        self._done = False
        self._explore = explore
        self._tab = tab  # shown before grabbing (not with explore, which shows its own)
        self._swept = False
        self._timeout_ms = int(timeout_ms)
        self.exit_code = 1
        window.result_shown.connect(self._on_result_shown)
        window.simulation_failed.connect(self._on_simulation_failed)
        window.explore.sweep_finished.connect(self._on_sweep_finished)
        window.explore.sweep_failed.connect(self._on_sweep_failed)
        self._timeout = QtCore.QTimer(self)
        self._timeout.setSingleShot(True)
        self._timeout.timeout.connect(self._on_timeout)
        self._timeout.start(self._timeout_ms)

    def start(self) -> None:
        """Finish at once when nothing will be simulated (the session is invalid): exit status
        2 after the picture of the window with the fields marked in red is written."""
        # study settings of the file the Studies tab could not use (it shows its defaults for
        # them): the picture is not of the file's settings, so the run ends with exit status 2
        self._unused = "; ".join(f"{path}: {rule}" for path, rule in
                                 self._window.studies.unused_settings.items())
        if not self._window.runner.busy:
            self._invalid = self._problems_text()
            self._finish(2)

    def _problems_text(self) -> str:
        """``vtrain simulate``'s message about the file opened ("FILE: field: rule; ..."; an
        authors' config's fields named with its own keys), else the window's problems."""
        if self._source:
            try:
                load_any(Path(self._source))  # as ``simulate`` reads it, the rules checked
            except ConfigError as exc:
                return str(exc)
            except (SessionFileError, OSError):  # (read once already: run_gui's check)
                pass
        errors = self._window.editor.errors()
        return (str(ConfigError(errors, self._source)) if errors
                else f"not simulated: {self._window.status_text}")

    @Slot(object)
    def _on_result_shown(self, result) -> None:
        if not self._explore:
            if self._tab:
                self._window.show_tab(self._tab)
            profiles = self._window.profiles
            if self._tab == "profiles" and profiles.torch_available is None:
                profiles.torch_checked.connect(self._on_torch_checked)  # grab with the answer
                profiles.check_torch()
                return
            self._finish(0)
        elif not self._swept:
            self._swept = True
            self._window.show_tab("explore")
            if not self._window.explore.run():
                print(f"vtrain gui: sweep not started: {self._window.explore.status_text}",
                      file=sys.stderr)
                self._finish(2)

    @Slot(bool, str)
    def _on_torch_checked(self, ok: bool, text: str) -> None:
        self._finish(0)

    @Slot(object)
    def _on_sweep_finished(self, result) -> None:
        self._finish(0)

    @Slot(str)
    def _on_sweep_failed(self, message: str) -> None:
        print(f"vtrain gui: sweep failed: {message}", file=sys.stderr)
        self._finish(1)

    @Slot(str)
    def _on_simulation_failed(self, message: str) -> None:
        print(f"vtrain gui: simulation failed: {message}", file=sys.stderr)
        self._finish(1)

    def waiting_for(self) -> str:
        """What the picture waits for now, in words (with its progress where it has one)."""
        window = self._window
        if getattr(self, "_waiting_trace", False):
            return "the measured traces (--trace)"
        if getattr(self, "_waiting_fit", False):
            return "the search for what would make the plan fit in memory"
        if self._swept:
            explore = window.explore
            status = " ".join(explore.status_text.split())
            return "the sweep" + (f" ({status})" if status else "")
        return "the simulation"

    @Slot()
    def _on_timeout(self) -> None:
        limit = self._timeout_ms / 1000
        print(f"vtrain gui: gave up after {limit:,g} s waiting for {self.waiting_for()}; "
              "--timeout SECONDS waits longer", file=sys.stderr)
        self._finish(3)

    @Slot(object)
    def _on_fit_changes_shown(self, fit) -> None:
        self._finish(0)

    @Slot()
    def _on_trace_settled(self) -> None:
        error = self._window.trace_overlay.last_error
        if error:  # refused traces: one line, exit 2, as the command line's bad input
            print(printable(f"vtrain gui: --trace: {' '.join(error.split())}"), file=sys.stderr)
            self._finish(2)
            return
        self._finish(0)

    def _finish(self, code: int) -> None:
        if self._done:
            return
        overlay = self._window.trace_overlay
        if code == 0 and overlay.busy:  # --trace: picture the measured lanes too
            if not getattr(self, "_waiting_trace", False):
                self._waiting_trace = True
                overlay.settled.connect(self._on_trace_settled)
            return
        if code == 0 and self._window.fit_search_pending:  # and what would make it fit
            if not getattr(self, "_waiting_fit", False):
                self._waiting_fit = True
                self._window.fit_changes_shown.connect(self._on_fit_changes_shown)
            return
        self._done = True
        self._timeout.stop()
        self.exit_code = code
        # let layouts and the plots settle before grabbing
        QtCore.QTimer.singleShot(200, self._on_settled)

    def _say_other_size(self) -> None:
        """A window that cannot be as small as ``--size`` asked (its minimum size: what its
        tabs need to show their content) is pictured at its own size; one line on stderr says
        which and why, instead of a picture of another size without a word."""
        if self._size is None:
            return
        shown = (self._window.width(), self._window.height())
        if shown == tuple(self._size):
            return
        least = self._window.minimumSize()
        print(f"vtrain gui: the picture is {shown[0]}x{shown[1]} pixels, not the "
              f"{self._size[0]}x{self._size[1]} of --size: the window cannot be smaller than "
              f"{least.width()}x{least.height()} (the least its tabs need)", file=sys.stderr)

    @Slot()
    def _on_settled(self) -> None:
        from .timeline.widget import TimelineWidget
        for timeline in self._window.findChildren(TimelineWidget):
            # large iterations are laid out in a worker thread: the picture needs the zoom
            # band in view of the timelines on screen, not every band of every timeline (the
            # Compare tab's too: a 6.4-million-task plan took 10 s and 1.4 GB more)
            if timeline.isVisible():
                timeline.wait_view_ready(self._timeout_ms / 1000)
        self._app.processEvents()
        self._say_other_size()
        try:
            save_pixmap(self._window.grab(), self._out)
            written = True
        except OSError as exc:
            print(f"vtrain gui: cannot write {self._out}: {exc.strerror or exc}", file=sys.stderr)
            self.exit_code = self.exit_code or 4
            written = False
        if self._invalid is not None:  # one line, as the other commands' bad input
            shown = (f" (not simulated; {self._out} pictures the window with the problems marked)"
                     if written else " (not simulated)")
            line = " ".join(self._invalid.split("\n"))  # as ``vtrain``'s errors print
            print(printable(f"vtrain gui: {line}{shown}"), file=sys.stderr)
        if self._unused:  # one line too: file, settings, rules
            source = f"{self._source}: " if self._source else ""
            shown = (f"; {self._out} pictures the window with the Studies tab's defaults for them"
                     if written else "")
            print(printable(f"vtrain gui: {source}{self._unused} (study settings not used{shown})"),
                  file=sys.stderr)
            if self.exit_code == 0:
                self.exit_code = 2
        self._window.setWindowModified(False)  # never ask to save when closing for a screenshot
        self._window.close()
        self._app.exit(self.exit_code)


def run_gui(path: str | None = None, screenshot: str | None = None, explore: bool = False,
            tab: str | None = None, traces: list[str] | None = None,
            timeout_s: float | None = None, size: tuple[int, int] | None = None) -> int:
    """Run the GUI; returns the process exit code.

    Parameters
    ----------
    path
        Session file or authors' config to open; None opens the shipped
        example ``resources/examples/mtnlg_530b.json`` as an untitled session.
    screenshot
        If given, wait for the first simulation, save a PNG of the window
        (``size``, by default :data:`SCREENSHOT_SIZE`) to this path and exit: 0 when the simulation succeeded,
        1 when it failed, 2 when the session cannot be opened or the profile
        store it names (``cluster.profile_path``) cannot be read (no picture),
        2 too when the session breaks a rule: the picture then shows the window
        with the fields marked in red, and stderr has one line naming the file,
        the fields and the rules, as ``vtrain simulate`` does; 2 also when
        study settings of the file (``studies``) cannot be used (the picture
        shows the Studies tab's defaults for them, and one line names the file,
        the settings and their rules).
    explore
        With ``screenshot``: after the first simulation, run a sweep of the
        session's sweep settings (defaults: at most the plan's GPUs) in the
        Explore tab and grab that tab once the sweep finished.
    tab
        Tab shown at start (``"plan"``, ``"explore"``, ``"profiles"``); with
        ``screenshot`` (and without ``explore``) the grabbed tab.
    traces
        PyTorch profiler traces (one per rank) overlaid on the Plan tab's timeline
        (:class:`vtrain_gui.trace_overlay.TraceOverlay`); with ``screenshot`` the picture
        waits for them.
    timeout_s
        With ``screenshot``: give up (exit status 3, a line on stderr naming what it waited
        for) when the simulation, the sweep, the traces or the fit search take longer than
        this many seconds altogether; None: :data:`SCREENSHOT_TIMEOUT_MS`.
    size
        With ``screenshot``: the window's (width, height) in pixels; None:
        :data:`SCREENSHOT_SIZE`.
    """
    if screenshot and path:
        # No one is there to dismiss an error dialog: report on stderr and exit instead.
        from core.store.format import ProfileStoreError
        from core.sim.simulate import session_profile
        try:
            # the store the session names is input too: a broken one is the user's to fix
            # (exit 2, one line naming the file, the field and the rule), as ``simulate`` says
            session = load_any(Path(path), validate=False)
            if session.cluster.profile_path:  # (an unknown GPU's store: the window's check says)
                session_profile(session)
        except (SessionFileError, ConfigError, ProfileStoreError, OSError) as exc:
            print(f"vtrain gui: {exc}", file=sys.stderr)
            return 2
    if QtWidgets.QApplication.instance() is None:
        if screenshot and not any(os.environ.get(k) for k in
                                  ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")):
            os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a picture needs no display
        # Qt aborts the process (SIGABRT) when its platform plugin cannot load: say why first
        problem = check_desktop()
        if problem:
            print(f"vtrain gui: {problem}", file=sys.stderr)
            return 2
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("vTrain")
    app.setOrganizationName("vtrain")
    if not screenshot:
        return _show_window(app, path, None, explore, tab, traces)
    timeout_ms = SCREENSHOT_TIMEOUT_MS if timeout_s is None else max(1, round(timeout_s * 1000))
    with offscreen_noise_dropped():  # a picture's run prints only what concerns the user
        return _show_window(app, path, screenshot, explore, tab, traces, timeout_ms,
                            size or SCREENSHOT_SIZE)


def _show_window(app: QtWidgets.QApplication, path: str | None, screenshot: str | None,
                 explore: bool, tab: str | None, traces: list[str] | None,
                 timeout_ms: int = SCREENSHOT_TIMEOUT_MS,
                 size: tuple[int, int] = SCREENSHOT_SIZE) -> int:
    """Open the window on ``path`` (the arguments of :func:`run_gui`) and run ``app``;
    returns the exit status."""
    from .main_window import MainWindow
    from .session_files import examples_dir

    settings = None
    if screenshot:  # a screenshot run leaves the user's recent files alone
        scratch = tempfile.TemporaryDirectory(prefix="vtrain-gui-")
        settings = QtCore.QSettings(str(Path(scratch.name) / "settings.ini"),
                                    QtCore.QSettings.Format.IniFormat)
    window = MainWindow(settings=settings)
    if screenshot:
        window.resize(*size)
    if tab:
        window.show_tab(tab)
    window.show()
    if path:
        opened = window.open_path(path)
    else:
        example = examples_dir() / DEFAULT_EXAMPLE
        opened = example.exists() and window.open_path(example, as_template=True)
        if not example.exists():
            window.new_session()
    if traces:
        window.trace_overlay.load(list(traces))
    if screenshot:
        if path and not opened:
            window.close()
            return 2
        taker = _ScreenshotTaker(window, str(Path(screenshot)), app, explore=explore, tab=tab,
                                 source=str(Path(path)) if path else None, timeout_ms=timeout_ms,
                                 size=size)
        taker.start()
        return app.exec()
    return app.exec()
