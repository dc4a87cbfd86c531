"""Frames per second of the timeline when panning and zooming a large iteration, and how long
showing it blocks the GUI thread.

Usage::

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_timeline.py [--tasks 1000000] [--real]

Builds a synthetic 1F1B iteration with about ``--tasks`` tasks (or, with
``--real``, simulates the shipped MT-NLG 530B example), shows
:class:`vtrain_gui.timeline.widget.TimelineWidget` at 1600x900 and

* **GUI-thread block**: calls ``set_data`` while a 1 ms timer runs in the GUI
  thread's event loop, and runs that loop until the timeline is fully
  prepared (every zoom band; the view painted as it arrives). Prints the
  longest gap between timer ticks (the longest the window could not react)
  and the time until ready.
* **Frames per second**: sets a new x range, then lets the event loop paint
  it (exactly one paint per frame; the paint count is checked) for a pan of a
  10 % window across the iteration, a zoom from the whole iteration to 0.1 %
  and back, and a pan of the zoomed-out view. Prints ``tasks=N pan_fps=X
  zoom_fps=Y pan_zoomed_out_fps=Z``, the slowest frame of each, and the
  rectangles drawn in the last zoomed-out frame.

Runs against older versions of the widget too (without ``is_ready`` the data
counts as ready when ``set_data`` returns), for before/after figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gui"))  # synthetic iteration builder

import numpy as np  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

from vtrain_gui.timeline.widget import TimelineWidget  # noqa: E402


def build_iteration(num_tasks: int, real: bool):
    """Return ``(graph, schedule, source)``."""
    if real:
        from core.io.session import load_any
        from core.sim.simulate import simulate

        result = simulate(load_any(ROOT / "resources" / "examples" / "mtnlg_530b.json"))
        return result.graph, result.schedule, "simulate(mtnlg_530b.json)"
    from synthetic import synthetic_iteration

    p, layers = 16, 16
    m = max(1, round(num_tasks / (6.1 * p * layers)))
    graph, schedule = synthetic_iteration(p=p, m=m, layers_per_stage=layers)
    return graph, schedule, f"synthetic 1F1B p={p} m={m} layers/stage={layers}"


class PaintCounter(QtCore.QObject):
    """Counts paint events of one widget."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt API
        if event.type() == QtCore.QEvent.Type.Paint:
            self.count += 1
        return False


def is_ready(widget: TimelineWidget) -> bool:
    return bool(getattr(widget.gantt, "is_ready", True))


def show_and_measure_block(app, widget: TimelineWidget, graph, schedule) -> tuple[float, float]:
    """``(longest GUI-thread gap s, seconds until fully prepared)`` for ``set_data``."""
    ticks: list[float] = []
    loop = QtCore.QEventLoop()
    timer = QtCore.QTimer()
    timer.setInterval(1)

    def tick() -> None:
        ticks.append(time.perf_counter())
        if is_ready(widget) and ticks[-1] - t0 > 0.05:
            loop.quit()

    timer.timeout.connect(tick)
    timer.start()
    app.processEvents()
    t0 = time.perf_counter()
    ticks.append(t0)
    widget.set_data(graph, schedule)
    loop.exec()
    timer.stop()
    ready_s = ticks[-1] - t0
    return float(np.diff(ticks).max()), ready_s


def frames_per_second(app, widget: TimelineWidget, ranges, counter: PaintCounter
                      ) -> tuple[float, float]:
    """Apply each x range and let the event loop paint it; ``(frames per second, slowest frame s)``."""
    for x0, x1 in ranges[:5]:  # warm-up
        widget.view_box.setXRange(x0, x1, padding=0)
        app.processEvents()
    counter.count = 0
    frames = []
    t0 = time.perf_counter()
    for x0, x1 in ranges:
        f0 = time.perf_counter()
        widget.view_box.setXRange(x0, x1, padding=0)
        app.processEvents()
        frames.append(time.perf_counter() - f0)
    elapsed = time.perf_counter() - t0
    if counter.count != len(ranges):
        print(f"  note: {counter.count} paints for {len(ranges)} frames")
    return len(ranges) / elapsed, max(frames)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--real", action="store_true", help="simulate the MT-NLG example")
    args = parser.parse_args()

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    graph, schedule, source = build_iteration(args.tasks, args.real)
    widget = TimelineWidget()
    widget.resize(1600, 900)
    widget.show()
    app.processEvents()
    counter = PaintCounter()
    widget.plot.viewport().installEventFilter(counter)
    block_s, ready_s = show_and_measure_block(app, widget, graph, schedule)
    T = schedule.iteration_time_s
    n = args.frames

    # pan a 10 % window across the iteration, zoom from all to 0.1 % and back,
    # and pan the fully zoomed-out view (worst case: every bar is sub-pixel)
    pan = [(x, x + 0.1 * T) for x in np.linspace(0.0, 0.9 * T, n)]
    widths = np.geomspace(T, 1e-3 * T, n // 2)
    zoom = [(0.5 * T - w / 2, 0.5 * T + w / 2) for w in np.concatenate([widths, widths[::-1]])]
    pan_all = [(x, x + T) for x in np.linspace(-0.01 * T, 0.01 * T, n)]
    pan_fps, pan_max = frames_per_second(app, widget, pan, counter)
    zoom_fps, zoom_max = frames_per_second(app, widget, zoom, counter)
    pan_all_fps, pan_all_max = frames_per_second(app, widget, pan_all, counter)
    rects = widget.gantt.last_paint_num_rects
    print(f"source: {source}; rects in last zoomed-out frame {rects}")
    print(f"tasks={graph.num_tasks} max_gui_block_ms={block_s * 1e3:.0f} "
          f"ready_after_ms={ready_s * 1e3:.0f}")
    print(f"tasks={graph.num_tasks} pan_fps={pan_fps:.1f} zoom_fps={zoom_fps:.1f} "
          f"pan_zoomed_out_fps={pan_all_fps:.1f} (one paint per frame)")
    print(f"slowest frame ms: pan {pan_max * 1e3:.0f} zoom {zoom_max * 1e3:.0f} "
          f"pan_zoomed_out {pan_all_max * 1e3:.0f}")
    widget.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
