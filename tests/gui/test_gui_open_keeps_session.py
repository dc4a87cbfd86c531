"""A failed File > Open changes nothing; integer fields hold every size the core accepts.

The handed case ``../shared/cases/gui_dataloss_vocab_2p31.json``: a valid
session was open, this file (a 2^31 vocabulary) was opened, the open failed
half-way (``QSpinBox`` stops at 2^31 - 1), the editor held the new file's
values under the previous file's path and Ctrl+S overwrote the previous file.
"""

from __future__ import annotations

import json
import shutil

import pytest
from PySide6 import QtCore
from PySide6.QtCore import Qt

from core.plan.session import Session
from core.io.session import load_any
from tests.conftest import EXAMPLES, case_file
from vtrain_gui.int_spin import INT64_MAX, IntSpinBox
from core.studies.sweep import SweepSpace
from vtrain_gui.sweep_settings import _divisors

EXAMPLE = EXAMPLES / "gpt3_1.3b_single_node.json"


def _bad_session(tmp_path, name: str, section: str, field: str, value) -> object:
    doc = json.loads(EXAMPLE.read_text())
    doc[section][field] = value
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _assert_unchanged(window, path, on_disk: bytes, edited: dict) -> None:
    assert window.path == path
    assert window.isWindowModified()
    assert window.windowTitle() == f"vTrain — {path.name}[*]"
    assert window.session().to_dict() == edited
    assert path.read_bytes() == on_disk


def test_handed_case_never_overwrites_the_previous_file(window, opened, tmp_path, message_boxes):
    """Open the case after a valid session, then save as Ctrl+S would: the previous file is
    unchanged on disk, and the editor shows either the previous session (open refused) or the
    case's values exactly, under the case's own path."""
    case = tmp_path / "case.json"
    shutil.copy(case_file("gui_dataloss_vocab_2p31.json"), case)
    on_disk, edited = opened.read_bytes(), window.session().to_dict()
    ok = window.open_path(case)
    if ok:
        assert window.path == case and not window.isWindowModified()
        assert window.session().model.vocab_size == 2**31
        assert window.editor.field_widget("model.vocab_size").value() == 2**31
        assert window.editor.field_widget("model.vocab_size").text() == "2,147,483,648 tokens"
        assert window.session().notes == "this file failed to open"
    else:
        assert len(message_boxes.of_kind("critical")) == 1
        _assert_unchanged(window, opened, on_disk, edited)
    window.action_save.trigger()  # Ctrl+S
    if ok:
        assert opened.read_bytes() == on_disk
        assert load_any(case, validate=False).to_dict() == window.session().to_dict()
    else:  # the readers refuse 2^31 (above the vocabulary bound): Ctrl+S saves the previous
        # session's own edit to its own path, never the case's values
        assert load_any(opened, validate=False).to_dict() == edited


@pytest.mark.parametrize("name, section, field, value, words", [
    ("vocab_2p64.json", "model", "vocab_size", 2**64, "model.vocab_size"),
    ("price_1e300.json", "cost", "price_per_gpu_hour_usd", 1e300, "cost.price_per_gpu_hour_usd"),
    ("nvlink_denormal.json", "cluster", "intra_node_bandwidth_gbytes_per_s", 5e-324,
     "cluster.intra_node_bandwidth_gbytes_per_s"),
    ("layers_text.json", "model", "num_layers", "24", "model.num_layers"),
])
def test_a_file_the_window_cannot_show_is_refused_whole(window, opened, tmp_path, message_boxes,
                                                       name, section, field, value, words):
    on_disk, edited = opened.read_bytes(), window.session().to_dict()
    bad = _bad_session(tmp_path, name, section, field, value)
    assert not window.open_path(bad)
    (_, title, text), = message_boxes.of_kind("critical")
    assert title == "Cannot open file" and words in text and name in text
    _assert_unchanged(window, opened, on_disk, edited)
    assert window.save_to(opened)  # Save writes the session shown, to its own file
    assert load_any(opened).to_dict() == edited


def test_unreadable_files_change_nothing(window, opened, tmp_path, message_boxes):
    on_disk, edited = opened.read_bytes(), window.session().to_dict()
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "vtrain-session", "version": 1, "model": {')
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2, 3]")
    for path in (broken, listed, tmp_path / "missing.json"):
        assert not window.open_path(path)
        _assert_unchanged(window, opened, on_disk, edited)
    assert len(message_boxes.of_kind("critical")) == 3


def test_a_view_failing_half_way_puts_the_previous_session_back(window, opened, tmp_path,
                                                                monkeypatch, message_boxes):
    """Whatever breaks while the tabs show a new file, the previous session comes back."""
    on_disk, edited = opened.read_bytes(), window.session().to_dict()
    other = tmp_path / "other.json"
    shutil.copy(EXAMPLES / "gpt3_175b.json", other)
    real_reset = window.studies.reset

    def failing_reset(session: Session):
        if session.model.name != Session.from_dict(edited).model.name:
            raise RuntimeError("a view failed")
        return real_reset(session)

    monkeypatch.setattr(window.studies, "reset", failing_reset)
    assert not window.open_path(other)
    (_, _, text), = message_boxes.of_kind("critical")
    assert "a view failed" in text and "previous session is kept" in text
    _assert_unchanged(window, opened, on_disk, edited)
    assert window.editor.field_widget("cost.price_per_gpu_hour_usd").value() == 3.25


# --------------------------------------------------------------------------- integer fields

def test_integer_fields_hold_what_the_core_accepts(window):
    for path, value in (("model.vocab_size", 2**31), ("cost.training_tokens", None),
                        ("model.num_layers", 2**40), ("plan.global_batch_size", 2**33 + 1)):
        if value is None:
            continue
        window.editor.set_field(path, value)
        w = window.editor.field_widget(path)
        assert isinstance(w, IntSpinBox) and w.value() == value
        section, name = path.split(".")
        assert getattr(getattr(window.session(), section), name) == value


def test_typing_a_large_number_and_zero(window, qtbot):
    vocab = window.editor.field_widget("model.vocab_size")
    vocab.setFocus()
    vocab.lineEdit().selectAll()
    qtbot.keyClicks(vocab.lineEdit(), "4294967296")
    assert window.session().model.vocab_size == 2**32
    assert vocab.text() == "4294967296 tokens"  # the number as typed, the unit kept
    vocab.editingFinished.emit()
    assert vocab.text() == "4,294,967,296 tokens"

    b = window.editor.field_widget("plan.micro_batch_size")
    b.setFocus()
    b.lineEdit().selectAll()
    qtbot.keyClicks(b.lineEdit(), "0")
    b.editingFinished.emit()
    # 0 stays 0 (never silently 1) and the rule says why it is not allowed
    assert b.value() == 0 and window.session().plan.micro_batch_size == 0
    assert "positive" in window.editor.error_text("plan.micro_batch_size")
    assert not window.editor.is_valid()


def test_int_spin_box_refuses_text_and_keeps_its_range(qtbot):
    w = IntSpinBox()
    qtbot.addWidget(w)
    w.setRange(1, INT64_MAX)
    w.setSuffix(" GPUs")
    w.setGroupSeparatorShown(True)
    seen = []
    w.valueChanged.connect(seen.append)
    w.setValue(2**62)
    assert w.text() == f"{2**62:,} GPUs" and seen == [2**62]
    w.setValue(2**70)  # clamped like QSpinBox
    assert w.value() == INT64_MAX
    w.setValue(-5)
    assert w.value() == 1
    w.lineEdit().selectAll()
    qtbot.keyClicks(w.lineEdit(), "12a")  # the letter is refused as typed
    assert w.value() == 12 and w.text() == "12 GPUs"
    qtbot.keyClick(w.lineEdit(), Qt.Key.Key_Up)
    assert w.value() == 13
    with pytest.raises(TypeError):
        w.setValue(1.5)


def test_divisor_hints_never_grow_with_the_value():
    assert _divisors(1) == [1]
    for n in range(1, 2000):
        assert _divisors(n) == [k for k in range(1, n + 1) if n % k == 0]
    assert _divisors(2**31) == [2**k for k in range(32)]
    assert _divisors(2**32 + 2) == [] and _divisors(2**63) == []  # named in words instead
    assert _divisors(0) == [] and _divisors(True) == [] and _divisors(-4) == []


def test_a_huge_layer_count_keeps_the_explore_hint_short(window):
    window.editor.set_field("model.num_layers", 2**31)
    text = window.explore.settings_panel.pipeline_parallel.placeholderText()
    # the sizes the layer-slot flags reach too (L+1, L+2 slots), still one short line
    assert text.startswith("divisors of L=2147483648, +1, +2 (") and len(text) < 50
    window.editor.set_field("model.num_layers", 2**62)
    assert window.explore.settings_panel.pipeline_parallel.placeholderText() == \
        "divisors of the layer count"


def test_sweep_settings_beyond_the_fields_are_named_not_clipped(window, tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    doc["sweep"] = {"space": {"max_data_parallel": 2**40}, "deadline_days": None}
    ok = tmp_path / "big_d.json"
    ok.write_text(json.dumps(doc))
    assert window.open_path(ok)
    assert window.explore.settings_panel.max_data_parallel.value() == 2**40
    doc["sweep"] = {"space": {}, "deadline_days": 1e300}
    far = tmp_path / "far_deadline.json"
    far.write_text(json.dumps(doc))
    assert window.open_path(far)
    assert "deadline_days" in window.explore.settings_panel.error_label.text()
    QtCore.QCoreApplication.processEvents()


def test_the_explore_hint_names_the_sizes_the_layer_slots_reach(window):
    """MT-NLG's 105 layers: the sweep also tries p = 2 and 53 (106 slots, the loss's flag set
    where the layers need it); the hint listed the divisors of 105 only."""
    window.editor.set_field("model.num_layers", 105)
    panel = window.explore.settings_panel
    # and p = 4, 8, 16 with uneven first / last stages (the sweep's 13 sizes)
    assert panel.pipeline_parallel.placeholderText() == \
        "divisors of L=105, +1, +2 + uneven (13 sizes)"
    tip = panel.pipeline_parallel.toolTip()
    assert "1, 2, 3, 5, 7, 15, 21, 35, 53, 105; and 4, 8, 16 with uneven first / last" in tip
    from core.studies.sweep.space import tp_pp_candidates
    session = window.editor.session()
    assert tp_pp_candidates(session, SweepSpace())[1] == [1, 2, 3, 4, 5, 7, 8, 15, 16, 21, 35,
                                                          53, 105]
    window.editor.set_field("model.num_layers", 32)   # even everywhere: no uneven size
    assert panel.pipeline_parallel.placeholderText() == "divisors of L=32, +1, +2 (9 sizes)"


def test_the_explore_hint_names_the_sizes_a_slot_flag_turns_off_at(window):
    """80 layers with the loss's slot: 81 or 82 slots split over no p of 4, 8, 16, the layers
    do; the sweep tries them with the flags off, and the hint counts them (no "+-1" size)."""
    window.editor.set_field("model.num_layers", 80)
    window.editor.set_field("plan.account_for_loss_in_pipeline_split", True)
    panel = window.explore.settings_panel
    from core.studies.sweep.space import tp_pp_candidates
    ps = tp_pp_candidates(window.editor.session(), SweepSpace())[1]
    assert ps == [1, 2, 3, 4, 8, 9, 16, 27, 41, 81]
    assert panel.pipeline_parallel.placeholderText() == \
        f"divisors of L+1=81, +1 + flags off ({len(ps)} sizes)"
    assert "4, 8, 16 with the embedding / loss slot flags off" in panel.pipeline_parallel.toolTip()
