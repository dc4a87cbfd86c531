"""ConfigEditor: generated form, edits, inline validation, presets."""

from __future__ import annotations

import pytest
from PySide6 import QtWidgets

from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from vtrain_gui.editor import ConfigEditor


@pytest.fixture
def editor(qtbot):
    w = ConfigEditor()
    qtbot.addWidget(w)
    w.show()
    w.set_session(Session())
    return w


def test_round_trip_without_edits(editor):
    s = Session()
    s.cost.training_tokens = 123_456_789_012.0  # finer than the form's display
    s.notes = "hello"
    editor.set_session(s)
    assert editor.session().to_dict() == s.to_dict()


def test_every_field_has_a_widget_with_help_tooltip(editor):
    import dataclasses

    from core.plan.cluster import ClusterConfig, CostConfig
    from core.plan.model_config import ModelConfig
    from core.plan.parallel import ParallelPlan
    for section, cls in (("model", ModelConfig), ("plan", ParallelPlan),
                         ("cluster", ClusterConfig), ("cost", CostConfig)):
        for f in dataclasses.fields(cls):
            w = editor.field_widget(f"{section}.{f.name}")
            assert f.metadata["help"] in w.toolTip()
            if f.metadata.get("choices"):
                assert isinstance(w, QtWidgets.QComboBox)
                items = [w.itemText(i) for i in range(w.count())]
                if "None" in str(f.type):  # the first item stands for None (the default)
                    assert items[0].startswith("default")
                    items = items[1:]
                assert items == list(f.metadata["choices"])


def test_edit_emits_session_changed_with_the_new_value(editor, qtbot):
    with qtbot.waitSignal(editor.session_changed, timeout=1000) as blocker:
        editor.field_widget("plan.data_parallel").setValue(2)
    assert blocker.args[0].plan.data_parallel == 2
    assert editor.session().plan.data_parallel == 2
    assert editor.is_valid()
    assert "World size" in editor.findChild(QtWidgets.QLabel, "derived").text()
    assert "256" in editor.findChild(QtWidgets.QLabel, "derived").text()  # 8*16*2


def test_typing_into_a_field(editor, qtbot):
    box = editor.field_widget("plan.micro_batch_size")
    box.setFocus()
    box.selectAll()
    with qtbot.waitSignal(editor.session_changed, timeout=1000):
        qtbot.keyClicks(box, "2")
    assert editor.session().plan.micro_batch_size == 2


def test_invalid_value_shows_the_message_next_to_the_field(editor, qtbot):
    with qtbot.waitSignal(editor.session_changed, timeout=1000) as blocker:
        editor.field_widget("plan.tensor_parallel").setValue(5)
    assert blocker.args[0].plan.tensor_parallel == 5
    assert not editor.is_valid()
    text = editor.error_text("plan.tensor_parallel")
    assert "num_attention_heads=96 is not divisible by tensor_parallel_size=5" in text
    assert editor.error_label("plan.tensor_parallel").isVisible()
    assert editor.error_text("plan.pipeline_parallel") == ""
    assert "problem" in editor.summary_text()
    editor.field_widget("plan.tensor_parallel").setValue(4)
    assert editor.is_valid()
    assert editor.error_text("plan.tensor_parallel") == ""
    assert not editor.error_label("plan.tensor_parallel").isVisible()


def test_preset_replaces_the_model(editor, qtbot):
    combo = editor.findChild(QtWidgets.QComboBox, "preset")
    assert combo.currentText() == "GPT-3 175B"
    index = combo.findText("GPT-3 13B")
    with qtbot.waitSignal(editor.session_changed, timeout=1000) as blocker:
        combo.activated.emit(index)
    assert blocker.args[0].model == MODEL_PRESETS["GPT-3 13B"]
    assert editor.field_widget("model.num_layers").value() == 40
    editor.field_widget("model.num_layers").setValue(41)
    assert combo.currentText() == "Custom"


def test_optional_and_scaled_fields(editor):
    ffn = editor.field_widget("model.ffn_hidden_size")
    ffn.setValue(1000)
    assert editor.session().model.ffn_hidden_size == 1000
    ffn.setValue(0)
    assert editor.session().model.ffn_hidden_size is None
    assert ffn.text() == ffn.specialValueText()
    tokens = editor.field_widget("cost.training_tokens")
    assert "billion" in tokens.suffix()
    tokens.setValue(100.0)
    assert editor.session().cost.training_tokens == pytest.approx(100e9)
    path = editor.field_widget("cluster.profile_path")
    path.setText("x.h5")
    path.textEdited.emit("x.h5")
    assert editor.session().cluster.profile_path == "x.h5"
    path.textEdited.emit("")
    assert editor.session().cluster.profile_path is None


def test_memory_margin_in_percent_as_the_memory_chart_names_it(editor):
    """The form read "Memory margin 0.10" beside "below the 10 % margin"; a percentage typed
    is stored as the share it is, exactly (7 % is 0.07, not 0.07000000000000001)."""
    margin = editor.field_widget("cluster.memory_reserve_fraction")
    assert margin.suffix() == " %" and margin.text() == "10.00 %"
    for shown in range(0, 91):
        margin.setValue(float(shown))
        assert editor.session().cluster.memory_reserve_fraction == shown / 100


def test_unknown_choice_from_a_file_is_shown_and_flagged(editor):
    s = Session()
    s.plan.schedule = "zb-h2"
    editor.set_session(s)
    assert editor.field_widget("plan.schedule").currentText() == "zb-h2"
    assert "not one of" in editor.error_text("plan.schedule")


def test_set_session_does_not_emit(editor, qtbot):
    with qtbot.assertNotEmitted(editor.session_changed):
        editor.set_session(Session())


def test_unit_suffix_agrees_with_the_number(editor):
    b = editor.field_widget("plan.micro_batch_size")
    b.setValue(1)
    assert b.suffix() == " sequence"
    b.setValue(2)
    assert b.suffix() == " sequences"
    p = editor.field_widget("plan.pipeline_parallel")
    p.setValue(1)
    assert p.text().endswith("1 stage")


def test_every_preset_loads_into_the_form(editor):
    """Each preset fills the form and round-trips through it, the MoE ones (Mixtral 8x7B,
    Qwen3-30B-A3B) too; no preset breaks a model rule."""
    from core.plan.rules import validate
    combo = editor.findChild(QtWidgets.QComboBox, "preset")
    for name in ("Mixtral 8x7B", "Qwen3-30B-A3B", "Llama 3 8B", "Llama 3 70B", "Llama 3.1 405B"):
        assert combo.findText(name) >= 0
    for name, preset in MODEL_PRESETS.items():
        editor.set_model_preset(name)
        assert editor.session().model == preset
        assert combo.currentText() == name
        assert not [e for e in validate(editor.session()) if e.field.startswith("model.")]
        assert not editor.error_text("model.num_experts")
    editor.set_model_preset("Qwen3-30B-A3B")
    assert editor.field_widget("model.kv_channels").value() == 128


def test_fields_without_effect_are_greyed_with_the_reason(editor):
    """A Llama model greys out the MoE and MLA fields; DeepSeek-V3 enables them; the values
    stay in the session either way."""
    editor.set_model_preset("Llama 3 8B")
    w = editor.field_widget("model.kv_lora_rank")
    assert not w.isEnabled()
    assert "multi-head latent attention" in w.toolTip()
    assert not editor.field_widget("model.moe_top_k").isEnabled()
    assert not editor.field_widget("plan.expert_parallel").isEnabled()
    assert not editor.field_widget("plan.fp8_recipe").isEnabled()  # BF16 default
    assert not editor.field_widget("plan.tf32").isEnabled()  # no fp32 matmuls in BF16
    assert "fp32 training" in editor.field_widget("plan.tf32").toolTip()
    editor.set_field("plan.precision", "fp32")
    assert editor.field_widget("plan.tf32").isEnabled()
    editor.set_field("plan.tf32", True)
    assert editor.session().plan.tf32 is True
    editor.set_field("plan.precision", "bf16")
    assert editor.field_widget("model.num_experts").isEnabled()
    assert editor.session().model.kv_lora_rank == MODEL_PRESETS["Llama 3 8B"].kv_lora_rank
    editor.set_model_preset("DeepSeek-V3")
    assert editor.field_widget("model.kv_lora_rank").isEnabled()
    assert editor.field_widget("model.moe_top_k").isEnabled()
    assert editor.field_widget("plan.expert_parallel").isEnabled()


def test_a_greyed_field_with_an_error_stays_editable(editor):
    """fp8_recipe set under BF16 breaks a rule: the user must be able to clear it."""
    editor.set_field("plan.fp8_recipe", "mxfp8")
    assert editor.error_text("plan.fp8_recipe")
    assert editor.field_widget("plan.fp8_recipe").isEnabled()
    editor.set_field("plan.precision", "fp8")
    assert editor.field_widget("plan.fp8_recipe").isEnabled()


def test_cp_exchange_items_say_which_framework_each_is(editor):
    """PyTorch's allgather and Transformer Engine's all_gather are different exchanges: each
    item of the CP exchange list says whose it is and whether it overlaps (tester: two values a
    letter apart)."""
    from PySide6 import QtCore

    from core.plan.parallel import CP_COMM_TYPES
    w = editor.field_widget("plan.cp_comm_type")
    tips = {w.itemText(i): w.itemData(i, QtCore.Qt.ItemDataRole.ToolTipRole)
            for i in range(w.count())}
    assert set(tips) == set(CP_COMM_TYPES) and all(tips.values())
    assert "torchtitan" in tips["allgather"] and "under the first" in tips["allgather"]
    assert "Transformer Engine" in tips["all_gather"] and "not overlapped" in tips["all_gather"]


def test_tp_saved_input_is_shown_with_each_frameworks_tip_and_edited(editor):
    """plan.tp_saved_input: labelled "TP linears save", each choice's tooltip says whose it is
    (Megatron-Core's shard, torchtitan's gathered input); choosing gathered reaches the
    session."""
    from PySide6 import QtCore

    w = editor.field_widget("plan.tp_saved_input")
    tips = {w.itemText(i): w.itemData(i, QtCore.Qt.ItemDataRole.ToolTipRole)
            for i in range(w.count())}
    assert list(tips) == ["sequence_shard", "gathered"]
    assert "Megatron-Core" in tips["sequence_shard"] and "s/t" in tips["sequence_shard"]
    assert "torchtitan" in tips["gathered"] and "all s tokens" in tips["gathered"]
    labels = [lab.text() for lab in editor.findChildren(QtWidgets.QLabel)]
    assert any(t.startswith("TP linears save") for t in labels)
    assert editor.session().plan.tp_saved_input == "sequence_shard"
    w.setCurrentIndex(1)
    assert editor.session().plan.tp_saved_input == "gathered"


def test_the_layer_family_says_dense_is_the_gpt_layer_moe_included(editor):
    """model.family "dense" is Megatron-Core's GPT layer, MoE and MLA included (a DeepSeek-V3
    session read "Family: dense"): the row is labelled as the layer's family and each choice's
    tooltip is its note from MODEL_FAMILIES."""
    from PySide6 import QtCore

    from core.plan.model_config import MODEL_FAMILIES
    w = editor.field_widget("model.family")
    tips = {w.itemText(i): w.itemData(i, QtCore.Qt.ItemDataRole.ToolTipRole)
            for i in range(w.count())}
    assert tips == MODEL_FAMILIES and "MoE" in tips["dense"]
    labels = [lab.text() for lab in editor.findChildren(QtWidgets.QLabel)]
    assert any(t.startswith("Layer family") for t in labels)


def test_cuda_graph_fields_are_edited_and_checked(editor):
    """The CUDA graph fields (plan.cuda_graph_impl, plan.cuda_graph_modules): a list of
    Megatron's implementations; the modules greyed out until Transformer Engine's graphs are
    chosen, and refused by name with the rule's message where the simulator does not model
    them."""
    from core.plan.parallel import CUDA_GRAPH_IMPLS
    w = editor.field_widget("plan.cuda_graph_impl")
    assert [w.itemText(i) for i in range(w.count())] == list(CUDA_GRAPH_IMPLS)
    assert not editor.field_widget("plan.cuda_graph_modules").isEnabled()  # default: none
    editor.set_field("plan.recompute", "selective")
    editor.set_field("plan.cuda_graph_impl", "transformer_engine")
    assert editor.field_widget("plan.cuda_graph_modules").isEnabled()
    editor.set_field("plan.cuda_graph_modules", "attn,mlp")
    assert editor.session().plan.cuda_graph_modules == "attn,mlp"
    assert editor.error_text("plan.cuda_graph_modules") == ""
    editor.set_field("plan.cuda_graph_modules", "attn,mamba")
    assert "mamba is not modelled" in editor.error_text("plan.cuda_graph_modules")
    editor.set_field("plan.cuda_graph_modules", "attn")
    assert editor.is_valid(), editor.summary_text()


def test_the_vocabulary_padding_field_is_shown_and_kept(editor):
    """``model.make_vocab_size_divisible_by`` (DeepSeek-V3 launches: 3232) has a widget with
    the session's value and comes back from the form unchanged."""
    import dataclasses
    s = Session()
    s.model = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], make_vocab_size_divisible_by=3232)
    editor.set_session(s)
    assert editor.field_widget("model.make_vocab_size_divisible_by").value() == 3232
    assert editor.session().model.make_vocab_size_divisible_by == 3232


def test_choosing_a_gpu_kind_takes_its_node_unless_the_user_set_one(editor):
    """A GB200 NVL72 rack is a node of 72 GPUs (core.plan.cluster.GPU_NVLINK_DOMAIN): choosing
    it while the node is an HGX board's 8 takes 72; back to H100 takes 8 again; a node size
    the user typed (4) stays when the kind changes."""
    editor.set_field("cluster.gpu", "GB200-NVL72")
    assert editor.session().cluster.gpus_per_node == 72
    assert editor._bindings["cluster.gpus_per_node"].widget.value() == 72
    editor.set_field("cluster.gpu", "H100-SXM5-80GB")
    assert editor.session().cluster.gpus_per_node == 8
    editor.set_field("cluster.gpus_per_node", 4)
    editor.set_field("cluster.gpu", "GB200-NVL72")
    assert editor.session().cluster.gpus_per_node == 4


def test_choosing_a_gpu_kind_takes_its_network_when_it_was_the_old_kinds(editor):
    """A session of 8-GPU H100 nodes with their reference network written out (3,200 Gb/s:
    8 NICs of 400 Gb/s, as `vtrain import` and the published-runs sessions write it) moved to
    GB200 kept 3,200 Gb/s for a 72-GPU rack (44 Gb/s per GPU; Llama 3.1 405B on 1,024 GPUs
    10.8 % slower than on the rack's 28,800). The network follows the node as its size does;
    a network the user typed keeps its share per GPU (the field is the whole node's)."""
    from core.plan.cluster import GPU_NIC_GBITS_PER_GPU, node_network_gbits_per_s

    editor.set_field("cluster.gpu", "H100-SXM5-80GB")
    editor.set_field("cluster.inter_node_bandwidth_gbits_per_s", 3200.0)
    assert node_network_gbits_per_s(editor.session().cluster) == 8 * 400.0
    editor.set_field("cluster.gpu", "GB200-NVL72")
    cluster = editor.session().cluster
    assert cluster.gpus_per_node == 72
    rack = 72 * GPU_NIC_GBITS_PER_GPU["GB200-NVL72"]
    assert cluster.inter_node_bandwidth_gbits_per_s == rack == 28_800.0
    widget = editor.field_widget("cluster.inter_node_bandwidth_gbits_per_s")
    assert widget.value() == rack  # shown, as the session holds it
    editor.set_field("cluster.gpu", "H100-SXM5-80GB")  # and back
    assert editor.session().cluster.inter_node_bandwidth_gbits_per_s == 3200.0
    editor.set_field("cluster.inter_node_bandwidth_gbits_per_s", 1600.0)  # the user's own
    editor.set_field("cluster.gpu", "GB200-NVL72")  # its 200 Gb/s per GPU, for 72 GPUs
    assert editor.session().cluster.inter_node_bandwidth_gbits_per_s == 14_400.0
    editor.set_field("cluster.gpu", "B200-180GB")  # and back to 8: the same share
    assert editor.session().cluster.inter_node_bandwidth_gbits_per_s == 1600.0
    editor.set_field("cluster.inter_node_bandwidth_gbits_per_s", None)  # the kind's reference
    editor.set_field("cluster.gpu", "B200-180GB")
    assert editor.session().cluster.inter_node_bandwidth_gbits_per_s is None


def test_several_errors_under_one_field_are_shown_whole(qtbot):
    """t=3 with Llama 3 70B breaks four divisibility rules at once: the messages under the field
    wrap to many lines in the form's narrow field column, and the row is as tall as they are
    (they were cut off at the top and bottom, drawn over the field above)."""
    from PySide6 import QtCore

    editor = ConfigEditor()
    scroll = QtWidgets.QScrollArea()
    scroll.setWidget(editor)
    scroll.setWidgetResizable(True)
    scroll.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    qtbot.addWidget(scroll)
    scroll.resize(editor.sizeHint().width() + 24, 800)  # as the Plan tab sizes it
    scroll.show()
    session = Session()
    session.model = MODEL_PRESETS["Llama 3 70B"]
    editor.set_session(session)
    qtbot.waitExposed(scroll)
    qtbot.wait(50)  # laid out without errors first, as a window before the edit
    editor.field_widget("plan.tensor_parallel").setValue(3)
    label = editor.error_label("plan.tensor_parallel")
    assert len(label.text().split("\n")) == 4  # heads, query groups, MLP size, node size

    below = editor.field_widget("plan.pipeline_parallel")

    def whole() -> bool:
        needed = label.fontMetrics().boundingRect(
            QtCore.QRect(0, 0, label.width(), 100_000),
            int(QtCore.Qt.TextFlag.TextWordWrap), label.text()).height()
        bottom = label.mapTo(editor, QtCore.QPoint(0, label.height())).y()
        return (label.height() >= needed
                and bottom <= below.mapTo(editor, QtCore.QPoint(0, 0)).y())

    qtbot.waitUntil(whole, timeout=2000)
    editor.field_widget("plan.tensor_parallel").setValue(8)  # fixed: the row shrinks back
    assert label.isHidden() and label.minimumHeight() == 0


def test_precision_aware_optimizer_fields_grey_until_it_is_on(editor):
    """The state dtypes and te_master_weights are greyed while the precision-aware optimizer is
    off (their values do nothing then); on, they are edited; on without the distributed
    optimizer the switch shows Megatron-Core's rule; a low dtype left after switching it off is
    refused by name and stays editable until set back."""
    fields = ("plan.te_master_weights", "plan.main_params_dtype", "plan.exp_avg_dtype",
              "plan.exp_avg_sq_dtype")
    assert all(not editor.field_widget(f).isEnabled() for f in fields)
    editor.set_field("plan.use_precision_aware_optimizer", True)
    assert all(editor.field_widget(f).isEnabled() for f in fields)
    editor.set_field("plan.zero_stage", 0)
    assert "needs the distributed optimizer" in editor.error_text(
        "plan.use_precision_aware_optimizer")
    editor.set_field("plan.zero_stage", 1)
    editor.set_field("plan.exp_avg_dtype", "bf16")
    editor.set_field("plan.exp_avg_sq_dtype", "fp8")
    p = editor.session().plan
    assert (p.use_precision_aware_optimizer, p.exp_avg_dtype, p.exp_avg_sq_dtype) == (
        True, "bf16", "fp8")
    assert editor.error_text("plan.exp_avg_dtype") == ""
    editor.set_field("plan.use_precision_aware_optimizer", False)
    # the untouched ones grey again; a dtype left below fp32 stays editable (as a recipe
    # left without FP8) with the rule by name, until it is set back
    assert not editor.field_widget("plan.main_params_dtype").isEnabled()
    assert not editor.field_widget("plan.te_master_weights").isEnabled()
    assert editor.field_widget("plan.exp_avg_dtype").isEnabled()
    assert "needs use_precision_aware_optimizer" in editor.error_text("plan.exp_avg_dtype")
    editor.set_field("plan.exp_avg_dtype", "fp32")
    editor.set_field("plan.exp_avg_sq_dtype", "fp32")
    assert not editor.field_widget("plan.exp_avg_dtype").isEnabled() and editor.is_valid()


def test_the_torchtitan_fields_are_greyed_where_they_change_nothing(editor):
    """fp8_impl without FP8, tp_saved_input without TP and SP, fsdp_fp32_params outside ZeRO-3
    of 16-bit weights (torchtitan's importer sets the last two at every degree): greyed with the
    reason, enabled where they apply."""
    w = editor.field_widget("plan.fsdp_fp32_params")
    assert not w.isEnabled() and "plan.zero_stage 3" in w.toolTip()
    assert not editor.field_widget("plan.fp8_impl").isEnabled()
    assert not editor.field_widget("plan.tp_saved_input").isEnabled()
    editor.set_field("plan.zero_stage", 3)
    assert editor.field_widget("plan.fsdp_fp32_params").isEnabled()
    editor.set_field("plan.precision", "fp32")
    assert not editor.field_widget("plan.fsdp_fp32_params").isEnabled()
    editor.set_field("plan.precision", "fp8")
    assert editor.field_widget("plan.fsdp_fp32_params").isEnabled()
    assert editor.field_widget("plan.fp8_impl").isEnabled()
    editor.set_field("plan.tensor_parallel", 2)
    editor.set_field("plan.sequence_parallel", True)
    assert editor.field_widget("plan.tp_saved_input").isEnabled()
