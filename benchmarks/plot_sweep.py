"""Scatter plot of a plan sweep (days vs dollars, Pareto front, infeasible plans greyed) to a PNG.

Renders offscreen with pyqtgraph's ImageExporter (``QT_QPA_PLATFORM=offscreen``
is set here when unset), so it runs without a display. By default it repeats
the MT-NLG 530B study of ``docs/study_mtnlg.md`` (space of
``benchmarks/bench_sweep.py``, all schedules and recomputation modes, 270B
tokens at $2/GPU-hour) and writes ``docs/img/mtnlg_sweep.png``.

Run: ``python benchmarks/plot_sweep.py [CONFIG.json] [--out PNG] [--as-trained]``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from bench_sweep import DEFAULT_CONFIG, TOKENS, space  # noqa: E402
from core.io.session import load_any  # noqa: E402
from core.studies.sweep import run_sweep  # noqa: E402


def plot(result, out: Path, title: str, width: int = 1100) -> None:
    """Draw ``result`` (a :class:`core.studies.sweep.SweepResult`) into ``out`` (PNG)."""
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6 import QtGui, QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    win = pg.GraphicsLayoutWidget()
    win.resize(width, int(width * 0.62))
    p = win.addPlot(title=title)
    p.setLogMode(x=True, y=False)  # days span two decades; cost in $M on a linear axis
    p.showGrid(x=True, y=True, alpha=0.25)
    p.setLabel("bottom", "training time (days, log scale)")
    p.setLabel("left", "training cost (million USD)")
    p.addLegend(offset=(-10, 10), labelTextSize="10pt")
    days, cost_m, fits = result.training_days, result.cost_usd / 1e6, result.fits_in_memory
    # PlotDataItems (not bare ScatterPlotItems) so that the log x mode applies to them
    p.plot(days[~fits], cost_m[~fits], pen=None, symbol="o", symbolSize=5, symbolPen=None,
           symbolBrush=pg.mkBrush(150, 150, 150, 120), name="does not fit in GPU memory")
    p.plot(days[fits], cost_m[fits], pen=None, symbol="o", symbolSize=7,
           symbolPen=pg.mkPen(30, 90, 170, 200), symbolBrush=pg.mkBrush(60, 130, 220, 140),
           name="fits in GPU memory")
    front = result.pareto_indices()
    p.plot(days[front], cost_m[front], pen=pg.mkPen(200, 30, 30, width=2), symbol="o", symbolSize=8,
           symbolBrush=pg.mkBrush(220, 40, 40), symbolPen=None, name="Pareto front")
    span = float(np.ptp(cost_m[fits])) if result.num_feasible else 1.0
    # (label, row, colour, label offset: (x factor on days, y offset as a share of the cost range), anchor)
    marks = [("fastest", result.fastest, (0, 130, 60), (1.0, 0.12), (0.1, 1)),
             ("cheapest", result.cheapest, (120, 40, 170), (1.0, 0.12), (0.9, 1))]
    own = result.index_of(result.session.plan)
    if own is not None:
        marks.append(("MT-NLG's plan", own, (220, 110, 0), (1.0, 0.12), (0.5, 1)))
    for label, i, colour, (fx, fy), anchor in marks:
        if i is None:
            continue
        x, y = days[i], cost_m[i]
        lx, ly = x * fx, y + fy * span
        p.plot([x, lx], [y, ly], pen=pg.mkPen(*colour, width=1.5))
        p.plot([x], [y], pen=None, symbol="star", symbolSize=20,
               symbolPen=pg.mkPen("k", width=1), symbolBrush=pg.mkBrush(*colour))
        pl = result.plan(i)
        lines = [label, pl.label(), f"{x:,.1f} d, ${y:,.2f}M"]
        # rich text with a white background keeps the label readable over the dense scatter
        html = ('<div style="background-color: rgba(255, 255, 255, 230); color: rgb(%d, %d, %d);">%s</div>'
                % (*colour, "<br>".join(lines)))
        item = pg.TextItem(html=html, anchor=anchor)
        item.setFont(QtGui.QFont("DejaVu Sans", 10, QtGui.QFont.Weight.Bold))
        item.setPos(math.log10(lx), ly)
        p.addItem(item)
    if result.num_feasible:
        d0, d1 = days[fits].min(), days[fits].max()
        c0, c1 = cost_m[fits].min(), cost_m[fits].max()
        p.setRange(xRange=(math.log10(d0) - 0.2, math.log10(max(d1, d0 * 10)) + 0.1),
                   yRange=(c0 - 0.05 * (c1 - c0), c1 + 0.08 * (c1 - c0)), padding=0)
        ticks = [v * 10**k for k in range(-1, 6) for v in (1, 2, 5)]
        p.getAxis("bottom").setTicks([[(math.log10(v), f"{v:g}") for v in ticks], []])
    app.processEvents()
    out.parent.mkdir(parents=True, exist_ok=True)
    exporter = pg.exporters.ImageExporter(p)
    exporter.parameters()["width"] = width
    exporter.export(str(out))
    win.close()


def sweep_for_plot(session, as_trained: bool = False):
    """Every plan of the MT-NLG study's space simulated (``run_sweep(..., prune=False)``, the
    exhaustive oracle): the scatter shows each plan's days and cost, and a plan the branch and
    bound prunes has none (NaN days), which left the axis range NaN and the script failing
    ("Cannot set range [nan, nan]"). Raises what :func:`core.studies.sweep.run_sweep` raises."""
    return run_sweep(session, space("as-trained" if as_trained else "all"), prune=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "mtnlg_sweep.png"))
    ap.add_argument("--as-trained", action="store_true",
                    help="only 1F1B with full recomputation (default: all schedules and modes)")
    args = ap.parse_args()
    session = load_any(args.config)
    session.cost.training_tokens = TOKENS
    result = sweep_for_plot(session, args.as_trained)
    title = (f"{session.model.name}, B={session.plan.global_batch_size}, {TOKENS / 1e9:.0f}B tokens, "
             f"${session.cost.price_per_gpu_hour_usd:.0f}/GPU-hour: {result.num_plans:,} plans, "
             f"{result.num_feasible:,} fit ({result.profile.get('method', 'unknown')} "
             f"{result.profile.get('device', '')} profile)")
    plot(result, Path(args.out), title)
    print(f"wrote {args.out}: {result.num_plans} plans, {result.num_feasible} fit, "
          f"{int(result.pareto.sum())} on the front")


if __name__ == "__main__":
    main()
