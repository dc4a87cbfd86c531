"""Drives the real window on a real X server (run by test_gui_xvfb_smoke.py, not by pytest).

``python tests/gui/xvfb_smoke.py WORKDIR`` with ``DISPLAY`` set: start the
window on Qt's xcb platform, simulate the 1.3B example, show every tab, run a
small sweep, edit, save, open another file, reopen the saved one, close.
Prints one line per step; exit status 0 when every step held, 1 (with the
step) when one did not, 2 when the desktop check refused to start.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vtrain_gui.desktop_check import check_desktop  # noqa: E402  (no Qt yet)


def main(workdir: Path) -> int:
    problem = check_desktop()
    if problem:
        print(f"desktop check: {problem}")
        return 2
    from PySide6 import QtCore, QtWidgets
    from PySide6.QtTest import QTest

    import vtrain_gui  # noqa: F401  (binding work-around first)
    from core.io.session import load_any
    from vtrain_gui.main_window import MainWindow
    from vtrain_gui.session_files import examples_dir

    app = QtWidgets.QApplication(["vtrain-smoke"])
    t0 = time.perf_counter()

    def step(text: str) -> None:
        print(f"{time.perf_counter() - t0:6.2f} s  {text}", flush=True)

    def wait_for(what: str, cond, timeout_s: float = 30.0) -> None:
        end = time.perf_counter() + timeout_s
        while not cond():
            if time.perf_counter() > end:
                raise AssertionError(f"timed out waiting for {what}")
            app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
            time.sleep(0.01)

    def check(cond: bool, what: str) -> None:
        if not cond:
            raise AssertionError(what)

    check(app.platformName() == "xcb", f"platform is {app.platformName()!r}, not xcb")
    settings = QtCore.QSettings(str(workdir / "settings.ini"), QtCore.QSettings.Format.IniFormat)
    window = MainWindow(settings=settings)
    window.resize(1600, 1000)
    window.show()
    check(QTest.qWaitForWindowExposed(window, 10_000), "the window was never exposed")
    step(f"window shown on {app.platformName()} ({app.primaryScreen().size().width()}x"
         f"{app.primaryScreen().size().height()})")

    example = workdir / "example.json"
    shutil.copy(examples_dir() / "gpt3_1.3b_single_node.json", example)
    check(window.open_path(example), "the example did not open")
    wait_for("the first simulation", lambda: window.result is not None and not window.runner.busy)
    check(window.last_error is None, f"simulation failed: {window.last_error}")
    step(f"simulated: {window.result.graph.num_tasks:,} tasks, "
         f"{window.result.report.iteration_time_s:.3f} s per iteration")

    for tab in ("plan", "explore", "profiles", "studies"):
        window.show_tab(tab)
        app.processEvents()
        check(window.current_tab() == tab, f"tab {tab} not shown")
        image = window.grab().toImage()
        check(image.width() >= 1000 and image.height() >= 600, f"tab {tab}: empty picture")
        colours = {image.pixel(x, y) for x in range(0, image.width(), 97)
                   for y in range(0, image.height(), 61)}
        check(len(colours) > 3, f"tab {tab} drew nothing")
        step(f"tab {tab}: drawn")

    window.show_tab("explore")
    check(window.explore.run(), f"sweep not started: {window.explore.status_text}")
    wait_for("the sweep", lambda: window.explore.result is not None
             and not window.explore.runner.busy, 60.0)
    result = window.explore.result
    check(result.num_plans > 0, "the sweep found no plan")
    step(f"sweep: {result.num_plans:,} plans, {int(result.pareto.sum())} on the Pareto front")

    window.show_tab("plan")
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(3.5)
    check(window.isWindowModified(), "an edit did not mark the window modified")
    saved = workdir / "saved.json"
    check(window.save_to(saved), "save failed")
    check(not window.isWindowModified(), "still modified after saving")
    edited = window.session().to_dict()
    check(load_any(saved, validate=False).to_dict() == edited, "the saved file differs")
    step(f"saved {saved.name}")

    check(window.open_path(examples_dir() / "gpt3_175b.json", as_template=True),
          "another file did not open")
    wait_for("the other simulation", lambda: not window.runner.busy)
    check(window.open_path(saved), "reopen failed")
    check(window.session().to_dict() == edited, "the reopened session differs")
    check(window.path == saved and not window.isWindowModified(), "reopen: wrong path or flag")
    wait_for("the reopened simulation", lambda: not window.runner.busy
             and window.result.session.cost.price_per_gpu_hour_usd == 3.5)
    step("reopened: same session")

    check(window.close(), "the window refused to close")
    app.processEvents()
    check(not window.isVisible(), "the window is still visible")
    step("closed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(Path(sys.argv[1])))
    except AssertionError as exc:
        print(f"FAILED: {exc}", flush=True)
        sys.exit(1)
