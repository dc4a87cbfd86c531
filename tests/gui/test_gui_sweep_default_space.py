"""The Explore tab sweeps the command line's default space (issue 26): the same SweepSpace as
``vtrain sweep CONFIG`` without options, pruned by branch and bound as the command line, every
phase reporting progress, and its header naming what was swept and held."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.cli import build_parser
from core.cli.sweep import _space_from_args
from core.io.session import load_any
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES
from tests.gui.test_gui_ep_overlap import _moe
from vtrain_gui.sweep_header import dimensions_html
from vtrain_gui.sweep_settings import SweepSettingsPanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def _cli_default(path) -> SweepSpace:
    """The space ``vtrain sweep PATH`` sweeps without options."""
    return _space_from_args(build_parser().parse_args(["sweep", str(path)]), load_any(path))


@pytest.mark.parametrize("name", ["gpt3_1.3b_single_node.json", "gpt3_175b.json",
                                  "mtnlg_530b.json"])
def test_explore_space_is_the_command_line_default(qtbot, name):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    session = load_any(EXAMPLES / name)
    panel.reset(session)
    space = panel.space()
    assert space == _cli_default(EXAMPLES / name) == SweepSpace.default_for(session)
    # the defaults the session used to pin are the command line's (swept, not held)
    assert (space.sequence_parallel, space.zero_stages, space.context_parallel,
            space.micro_batch_sizes) == (None, None, None, None)


def test_moe_default_and_explicit_choices(qtbot, tmp_path):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    s = _moe()
    panel.reset(s)
    assert panel.space() == SweepSpace.default_for(s)
    path = tmp_path / "moe.json"
    from core.io.session import save_session
    save_session(s, path)
    assert panel.space() == _cli_default(path)
    # unticking "default" makes the boxes the values; ticking it again is the default
    panel.sp_default.setChecked(False)
    panel.sp_boxes["off"].setChecked(True)
    panel.zero_default.setChecked(False)
    panel.zero_boxes["2"].setChecked(False)
    panel.zero_boxes["3"].setChecked(False)
    space = panel.space()
    assert space.sequence_parallel == (False, True) and space.zero_stages == (0, 1)
    s.sweep = {"space": space.to_dict(), "deadline_days": None}
    panel.reset(s)
    assert panel.space() == space and not panel.sp_default.isChecked()
    panel.sp_default.setChecked(True)
    panel.zero_default.setChecked(True)
    assert panel.space() == SweepSpace.default_for(s)


def test_window_sweep_prunes_reports_phases_and_names_dimensions(window, qtbot, tmp_path,
                                                                 real_simulate):
    doc = json.loads(SMALL.read_text())
    doc.pop("sweep", None)
    path = tmp_path / "small.json"
    path.write_text(json.dumps(doc))
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(path)
    window.show_tab("explore")
    explore = window.explore
    phases = []
    explore.runner.phase_progress.connect(lambda rid, name, done, total: phases.append(name))
    with qtbot.waitSignal(explore.sweep_finished, timeout=120_000) as blocker:
        assert explore.run()
    result = blocker.args[0]
    session = load_any(path)
    assert result.space == _cli_default(path)
    # branch and bound as the command line: the same answers, plans pruned
    cli = run_sweep(session, _cli_default(path), workers=1)
    assert result.num_plans == cli.num_plans
    assert np.array_equal(result.pruned, cli.pruned) and result.pruned.any()
    assert result.fastest == cli.fastest and result.cheapest == cli.cheapest
    assert np.array_equal(result.pareto_indices(), cli.pareto_indices())
    # every phase reported, in order
    seen = list(dict.fromkeys(phases))
    assert seen == ["enumerate", "memory", "bound", "simulate"]
    # the header names what was swept and held, and why
    assert dimensions_html(result.dimensions) in explore.summary_text
    swept = {d["field"] for d in result.dimensions if d["swept"]}
    assert {"sequence_parallel", "zero_stage", "micro_batch_size"} & swept
    # ... in a box of a few lines that scrolls: at 1,280 x 800 the paragraph took half the
    # tab and left two rows of the table in view
    from PySide6 import QtGui
    from vtrain_gui.explore import DIMENSION_LINES
    window.resize(1280, 800)
    box = explore.dimensions_box
    qtbot.waitUntil(lambda: box.isVisible() and box.width() < 900, timeout=5000)
    line = QtGui.QFontMetrics(box.widget().font()).lineSpacing()
    assert box.height() <= DIMENSION_LINES * line + 4
    assert box.widget().text() == dimensions_html(result.dimensions, result.session.plan)


def test_the_header_names_a_value_left_out_with_its_rule():
    """The Explore tab's swept/held lines say why a default value was left out, as the command
    line does (dimensions' ``left_out``: full recomputation under per-layer CUDA graphs)."""
    import html

    why = ("cuda_graph_impl='transformer_engine' with full recomputation: Megatron-Core supports "
           "full recompute only with the full iteration CUDA graph")
    dims = [{"field": "recompute", "swept": True, "values": ["none", "selective"], "why": "",
             "left_out": [{"value": "full", "why": why}]},
            {"field": "tensor_parallel", "swept": False, "values": [1], "why": "given",
             "left_out": []}]
    text = dimensions_html(dims)
    assert "full left out" in text and html.escape(why) in text
    assert dimensions_html([{**dims[0], "left_out": []}]).count("left out") == 0


def test_the_explore_header_names_a_field_held_away_from_the_session():
    """The Explore header's "held:" line is the command line's (core.studies.sweep
    .held_dimensions): with the session's plan, a field held at another value (the te
    cross-entropy the sweep holds by default) is named; one at the session's value is not."""
    from core.plan.parallel import ParallelPlan
    dims = [{"field": "cross_entropy_fusion_impl", "swept": False, "values": ["te"],
             "why": "default: te", "left_out": []}]
    assert "ce_impl te" in dimensions_html(dims, ParallelPlan())  # the plan's default: native
    assert "held" not in dimensions_html(dims)
    assert "held" not in dimensions_html(dims, ParallelPlan(cross_entropy_loss_fusion=True,
                                                            cross_entropy_fusion_impl="te"))
