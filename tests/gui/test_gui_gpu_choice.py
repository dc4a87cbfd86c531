"""The Explore tab's GPU choice: a price sheet loaded, its kinds swept in the background, one
colour per kind, the combined front, a legend and the hover text of each point."""

from __future__ import annotations

import numpy as np

from core.studies.gpu_choice import choose_gpus
from tests.test_gpu_choice import HEADER, tiny_session
from vtrain_gui.explore import ExploreTab
from vtrain_gui.gpu_choice_view import GpuChoicePanel, point_text


def test_load_sweeps_every_kind_and_plots_one_colour_each_with_the_front(qtbot, tmp_path):
    sheet = tmp_path / "prices.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,0.3,8,,list,2026-01\n"
                              "H100-SXM5-80GB,2.9,4,,list,2026-01\n")
    calls = []

    def choose(session, sh, **kw):
        calls.append(sh.labels)
        return choose_gpus(session, sh, **kw)

    panel = GpuChoicePanel(choose=choose)
    qtbot.addWidget(panel)
    panel.set_session(tiny_session())
    # before a sheet: what the chart would show, not empty axes with made-up ticks
    assert panel.plot_view.is_empty and "Load price sheet" in panel.plot_view.message_text
    with qtbot.waitSignal(panel.choice_finished, timeout=120_000):
        assert panel.load(sheet)
    c = panel.choice
    assert not panel.plot_view.is_empty
    assert calls == [["A100-SXM4-80GB", "H100-SXM5-80GB"]]
    assert panel.legend_labels() == ["A100-SXM4-80GB  $0.30/GPU-h", "H100-SXM5-80GB  $2.90/GPU-h",
                                     "combined front"]
    items = panel.scatter_items()
    for r, item in enumerate(items):  # every point of the kind, in log10 coordinates
        ks = np.flatnonzero(c.row == r)
        x, y = item.getData()
        assert np.allclose(10 ** x, c.expected_days[ks]) and np.allclose(10 ** y,
                                                                         c.expected_cost_usd[ks])
    k = int(c.front[0])
    text = point_text(c, k)
    assert c.point(k)["plan"] in text and c.point(k)["gpu"] in text
    assert panel._tip(0.0, 0.0, k) == text
    assert "fewest days" in panel.status.text()
    panel.shutdown()


def test_a_refused_sheet_starts_nothing(qtbot, tmp_path):
    sheet = tmp_path / "prices.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,free,8,,,\n")
    panel = GpuChoicePanel(choose=lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    qtbot.addWidget(panel)
    assert not panel.load(sheet)
    assert "row 2: price_per_gpu_hour_usd" in panel.status.text()
    assert not panel.runner.busy and panel.choice is None
    assert panel.plot_view.is_empty


def test_the_explore_tab_has_the_gpu_choice_beside_its_plans(qtbot):
    tab = ExploreTab()
    qtbot.addWidget(tab)
    names = [tab.plans_tabs.tabText(i) for i in range(tab.plans_tabs.count())]
    assert names == ["Plans", "GPU choice"]
    s = tiny_session()
    tab.set_session(s)
    assert tab.gpu_choice._session.model == s.model
    assert tab.shutdown()
