"""An empty state's message taller than its page scrolls instead of being cut: the Explore
tab's "No plan fits in GPU memory" for Llama 3 70B on 8 H100s lost its last lines (the plan
that fits on 16 GPUs) at 1,280 x 800."""

from __future__ import annotations

from PySide6 import QtWidgets

from synthetic import shown
from vtrain_gui.empty_state import EmptyStack


def test_a_long_message_can_be_read_whole(qtbot, qapp):
    words = " ".join(f"word{i}" for i in range(300))
    stack = shown(qtbot, EmptyStack(QtWidgets.QWidget(), f"<p><b>Title</b></p><p>{words} LAST</p>"), 600, 200)
    qapp.processEvents()
    label = stack.findChild(QtWidgets.QLabel, "empty_state")
    need = label.heightForWidth(label.width())
    assert need > 200  # the message is taller than the page
    assert label.height() >= need  # laid out whole: nothing cut
    scroll = stack.findChild(QtWidgets.QScrollArea, "empty_scroll")
    bar = scroll.verticalScrollBar()
    assert bar.maximum() > 0  # ... and reachable by scrolling
    bar.setValue(bar.maximum())
    qapp.processEvents()
    bottom = label.mapTo(scroll.viewport(), label.rect().bottomLeft()).y()
    assert bottom <= scroll.viewport().height()


def test_a_short_message_is_centred_without_a_scroll_bar(qtbot, qapp):
    stack = shown(qtbot, EmptyStack(QtWidgets.QWidget(), "<p><b>No sweep yet</b></p>"), 600, 400)
    qapp.processEvents()
    scroll = stack.findChild(QtWidgets.QScrollArea, "empty_scroll")
    assert scroll.verticalScrollBar().maximum() == 0
    label = stack.findChild(QtWidgets.QLabel, "empty_state")
    top = label.mapTo(scroll.viewport(), label.rect().topLeft()).y()
    assert 60 < top < 200  # in the upper middle: stretches 1 above, 2 below
