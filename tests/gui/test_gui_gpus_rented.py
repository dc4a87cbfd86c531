"""The editor's GPU list holds the kinds people rent (H800, A800, H20, GH200, B300)."""

from __future__ import annotations

from core.plan.cluster import GPU_KINDS
from core.plan.session import Session
from vtrain_gui.editor import ConfigEditor

RENTED = ("H800-SXM5-80GB", "A800-SXM4-80GB", "H20-96GB", "GH200-96GB", "B300-288GB")


def test_editor_lists_and_selects_the_rented_kinds(qtbot):
    editor = ConfigEditor()
    qtbot.addWidget(editor)
    editor.set_session(Session())
    box = editor.field_widget("cluster.gpu")
    items = [box.itemText(i) for i in range(box.count())]
    assert items == list(GPU_KINDS) and set(RENTED) <= set(items)
    for kind in RENTED:
        box.setCurrentIndex(items.index(kind))
        assert editor.session().cluster.gpu == kind
        assert editor.is_valid(), kind  # the default plan (8 GPUs, one node) fits each kind
