"""A short run's token budget and days read as numbers in the Explore tab, not as 0.

A Megatron-Bridge run_config.yaml of a performance recipe trains 50 iterations (50 x 256 x 8,192
= 104,857,600 tokens, well under a day): the tab's source line said "0 billion tokens" and the
plan table's days column "0.0" for every plan, where ``vtrain simulate`` prints "105M tokens"
and ``vtrain sweep`` 0.012 days.
"""
from __future__ import annotations

from core.io.session import load_any
from core.studies.sweep import SweepSpace, run_sweep
from core.util.text import format_days
from tests.conftest import EXAMPLES
from vtrain_gui.explore import ExploreTab
from vtrain_gui.sweep_table import TABLE_COLUMNS, SweepTableModel

from PySide6.QtCore import Qt

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node


def _short_session():
    session = load_any(SMALL)
    session.cost.training_tokens = 50 * 256 * 2048  # 50 iterations of B=256, s=2,048
    return session


def test_the_source_line_names_a_short_runs_tokens(qtbot):
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(_short_session())
    text = tab._source.text()
    assert "26.2M tokens at $" in text  # 26,214,400 tokens
    assert "0 billion" not in text


def test_the_table_gives_days_under_one_day_with_three_decimals(qtbot):
    session = _short_session()
    r = run_sweep(session, SweepSpace(max_gpus=8, micro_batch_sizes=(1,), schedules=("1f1b",)),
                  prune=False)
    model = SweepTableModel()
    model.set_result(r)
    col = [c.attr for c in TABLE_COLUMNS].index("training_days")
    i = int(r.fastest)
    row = list(model.shown()).index(i)
    days = float(r.training_days[i])
    assert 0 < days < 0.1  # 50 iterations of a 1.3B model on 8 GPUs: minutes
    text = model.data(model.index(row, col), Qt.ItemDataRole.DisplayRole)
    assert text == format_days(days) and text != "0.0"
    assert float(text) == round(days, 3)
