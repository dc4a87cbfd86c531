"""Frames per second of the timeline when panning and zooming a large iteration.

Usage::

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_timeline.py [--tasks 200000] [--real]

Builds a synthetic 1F1B iteration with about ``--tasks`` tasks (or, with
``--real``, simulates the shipped MT-NLG 530B example when the core simulator
is available), shows :class:`vtrain_gui.timeline.TimelineWidget` at 1600x900
and times synchronous repaints (``viewport().repaint()``) after each change
of the view range. Prints ``tasks=N pan_fps=X zoom_fps=Y`` (plus a
zoomed-out-pan figure and the rectangles drawn per frame).
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
from PySide6 import QtWidgets  # noqa: E402

from vtrain_gui.timeline import TimelineWidget  # noqa: E402


def build_iteration(num_tasks: int, real: bool):
    """Return ``(graph, schedule, source)``."""
    if real:
        from core.session import load_any
        from core.simulate import simulate

        session = load_any(ROOT / "resources" / "examples" / "mtnlg_530b.json")
        try:
            result = simulate(session)
            return result.graph, result.schedule, "simulate(mtnlg_530b.json)"
        except NotImplementedError:
            print("core.simulate is not implemented yet; using a synthetic iteration")
    from synthetic import synthetic_iteration

    p, layers = 16, 16
    m = max(1, round(num_tasks / (6.1 * p * layers)))
    graph, schedule = synthetic_iteration(p=p, m=m, layers_per_stage=layers)
    return graph, schedule, f"synthetic 1F1B p={p} m={m} layers/stage={layers}"


def frames_per_second(app, widget: TimelineWidget, ranges: list[tuple[float, float]]) -> float:
    """Apply each x range, repaint synchronously, return frames per second."""
    viewport = widget.plot.viewport()
    for x0, x1 in ranges[:5]:  # warm-up
        widget.view_box.setXRange(x0, x1, padding=0)
        app.processEvents()
        viewport.repaint()
    t0 = time.perf_counter()
    for x0, x1 in ranges:
        widget.view_box.setXRange(x0, x1, padding=0)
        app.processEvents()
        viewport.repaint()
    return len(ranges) / (time.perf_counter() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--real", action="store_true", help="simulate the MT-NLG example")
    args = parser.parse_args()

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    graph, schedule, source = build_iteration(args.tasks, args.real)
    widget = TimelineWidget()
    widget.resize(1600, 900)
    widget.show()
    t0 = time.perf_counter()
    widget.set_data(graph, schedule)
    app.processEvents()
    widget.plot.viewport().repaint()
    load_s = time.perf_counter() - t0
    T = schedule.iteration_time_s
    n = args.frames

    # pan a 10 % window across the iteration, zoom from all to 0.1 % and back,
    # and pan the fully zoomed-out view (worst case: every bar is sub-pixel)
    pan = [(x, x + 0.1 * T) for x in np.linspace(0.0, 0.9 * T, n)]
    widths = np.geomspace(T, 1e-3 * T, n // 2)
    zoom = [(0.5 * T - w / 2, 0.5 * T + w / 2) for w in np.concatenate([widths, widths[::-1]])]
    pan_all = [(x, x + T) for x in np.linspace(-0.01 * T, 0.01 * T, n)]
    pan_fps = frames_per_second(app, widget, pan)
    zoom_fps = frames_per_second(app, widget, zoom)
    pan_all_fps = frames_per_second(app, widget, pan_all)
    rects = widget.gantt.last_paint_num_rects
    print(f"source: {source}; load+first paint {load_s * 1e3:.0f} ms; "
          f"rects in last zoomed-out frame {rects}")
    print(f"tasks={graph.num_tasks} pan_fps={pan_fps:.1f} zoom_fps={zoom_fps:.1f} "
          f"pan_zoomed_out_fps={pan_all_fps:.1f}")
    widget.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
