"""Point-and-click form for a :class:`core.plan.session.Session`, generated from the dataclass fields.

Each field's label, unit suffix and tooltip come from the field's metadata
(``unit``, ``help``, ``choices``). Every edit writes the one field it concerns
into the editor's session (fields not edited keep their exact values), runs
:func:`core.plan.rules.validate`, shows each error message in red under the field
it names, and emits :attr:`ConfigEditor.session_changed`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from PySide6 import QtCore, QtWidgets
from PySide6.QtCore import Signal, Slot

from core.plan.cluster import ClusterConfig, CostConfig, ReliabilityConfig
from core.plan.fields import FieldError
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import inactive_fields, validate
from core.plan.session import Session
from core.model.counts import num_parameters
from core.sim.labels import KIND_NAMES

from .formatting import format_count
from .int_spin import INT64_MAX, IntSpinBox
from .wrapped_label import WrappedLabel

__all__ = ["ConfigEditor", "FieldSpec", "field_specs", "FLOAT_FIELD_MAX"]

#: Largest number a floating-point field shows (in the unit shown); a file with a larger one
#: is refused by name rather than shown clipped.
FLOAT_FIELD_MAX = 1e15

#: Section name -> (dataclass, group title), in the form's order: the parallel plan and the
#: cluster first, so that a planner sees them without scrolling past the model's 35 fields.
_SECTIONS = (
    ("plan", ParallelPlan, "Parallel plan"),
    ("cluster", ClusterConfig, "Cluster"),
    ("model", ModelConfig, "Model"),
    ("cost", CostConfig, "Cost"),
    ("reliability", ReliabilityConfig, "Reliability (failures and checkpoints)"),
)

#: Short labels; the long explanation is the field's ``help`` (tooltip).
_LABELS = {
    "model.name": "Name",
    # "dense" is the family of Megatron-Core's GPT layer, MoE and MLA included: the label says
    # what is chosen (the layer), each choice's tooltip what it holds (MODEL_FAMILIES)
    "model.family": "Layer family",
    "model.num_layers": "Layers L",
    "model.hidden_size": "Hidden size h",
    "model.num_attention_heads": "Attention heads a",
    "model.ffn_hidden_size": "MLP hidden size",
    "model.seq_length": "Sequence length s",
    "model.vocab_size": "Vocabulary V",
    "model.make_vocab_size_divisible_by": "Vocabulary padded to multiple of",
    "model.num_query_groups": "Query groups g",
    "model.kv_channels": "Head size (kv channels)",
    "model.tied_embeddings": "Tied output layer",
    "model.add_bias_linear": "Linear biases",
    "model.add_qkv_bias": "QKV bias",
    "model.add_proj_bias": "Projection bias",
    "model.add_mlp_bias": "MLP bias",
    "model.add_output_bias": "Output-layer bias",
    "model.qk_layernorm": "QK-norm",
    "model.num_experts": "Experts E",
    "model.moe_top_k": "Experts per token (top-k)",
    "model.moe_ffn_hidden_size": "Expert MLP hidden size",
    "model.num_shared_experts": "Shared experts",
    "model.moe_layer_frequency": "MoE layer every",
    "model.moe_first_dense_layers": "First dense layers",
    "model.moe_router_num_groups": "Router groups (MoE)",
    "model.moe_router_group_topk": "Groups per token (MoE)",
    "model.multi_latent_attention": "Multi-head latent attention",
    "model.q_lora_rank": "Query latent rank (MLA)",
    "model.kv_lora_rank": "Key/value latent rank (MLA)",
    "model.qk_head_dim": "Query/key head size (MLA)",
    "model.qk_pos_emb_head_dim": "Rotary head size (MLA)",
    "model.v_head_dim": "Value head size (MLA)",
    "model.mtp_num_layers": "Multi-token prediction layers",
    "model.softmax_type": "Softmax (sinks)",
    "model.activation_func_clamp_value": "Gated MLP clamp",
    "model.glu_linear_offset": "Gated MLP linear offset",
    "model.bias_activation_fusion": "Fused MLP activation",
    "model.hidden_dropout": "Hidden dropout",
    "model.attention_dropout": "Attention dropout",
    "plan.tensor_parallel": "Tensor parallel t",
    "plan.pipeline_parallel": "Pipeline parallel p",
    "plan.data_parallel": "Data parallel d",
    "plan.micro_batch_size": "Micro-batch size b",
    "plan.global_batch_size": "Global batch size B",
    "plan.schedule": "Pipeline schedule",
    "plan.recompute": "Activation recomputation",
    "plan.precision": "Precision",
    "plan.virtual_pipeline_stages": "Virtual stages v",
    "plan.sequence_parallel": "Sequence parallel",
    "plan.recompute_num_layers": "Recomputed layers",
    "plan.zero_stage": "ZeRO stage",
    "plan.overlap_grad_reduce": "Overlap grad reduce",
    "plan.overlap_param_gather": "Overlap param gather",
    "plan.tp_comm_overlap": f"Overlap {KIND_NAMES['tp_comm']}",
    "plan.tp_comm_overlap_backend": "TP overlap backend",
    "plan.fsdp_fp32_params": "FSDP2 fp32 shards",
    "plan.gradient_accumulation_fusion": "Grad accumulation fusion",
    "plan.overlap_p2p_comm": f"Overlap {KIND_NAMES['pp_p2p']}",
    "plan.grad_reduce_dtype": "Gradient dtype",
    "plan.fp8_recipe": "FP8 recipe",
    "plan.fp8_impl": "FP8 implementation",
    "plan.tp_saved_input": "TP linears save",
    "plan.tf32": "TF32 matmuls (fp32)",
    "plan.first_stage_layers": "First stage layers",
    "plan.last_stage_layers": "Last stage layers",
    "plan.account_for_embedding_in_pipeline_split": "Embedding in split",
    "plan.account_for_loss_in_pipeline_split": "Loss in split",
    "plan.context_parallel": "Context parallel cp",
    "plan.cp_comm_type": KIND_NAMES["cp_p2p"],
    "plan.cp_a2a_size": "CP all-to-all group",
    "plan.expert_parallel": "Expert parallel ep",
    "plan.expert_tensor_parallel": "Expert tensor parallel",
    "plan.moe_token_dispatcher_type": "Token dispatcher (MoE)",
    "plan.moe_imbalance_factor": "MoE routing imbalance",
    "plan.overlap_moe_expert_parallel_comm": f"Overlap {KIND_NAMES['ep_all_to_all']}",
    "plan.delay_wgrad_compute": "Delay expert wgrad",
    "plan.data_parallel_shard_size": "Shard group (HSDP)",
    "plan.fp8_param_gather": "FP8 param all-gather",
    "plan.pipeline_model_parallel_layout": "Pipeline layout",
    "plan.cuda_graph_impl": "CUDA graphs",
    "plan.cuda_graph_modules": "CUDA graph modules",
    "plan.use_precision_aware_optimizer": "Precision-aware optimizer",
    "plan.te_master_weights": "TE holds master weights",
    "plan.main_params_dtype": "Master weights dtype",
    "plan.exp_avg_dtype": "Adam m dtype",
    "plan.exp_avg_sq_dtype": "Adam v dtype",
    "cluster.memory_reserve_fraction": "Memory margin",
    "cluster.gpu": "GPU",
    "cluster.gpus_per_node": "GPUs per node",
    "cluster.intra_node_bandwidth_gbytes_per_s": "NVLink bandwidth",
    "cluster.inter_node_bandwidth_gbits_per_s": "Network per node",
    "cluster.profile_path": "Profile store",
    "cost.price_per_gpu_hour_usd": "Price",
    "cost.training_tokens": "Training tokens",
    "cost.price_per_kwh_usd": "Electricity price",
    "cost.power_usage_effectiveness": "PUE",
    "reliability.failure_rate_per_gpu_hour": "Failure rate",
    "reliability.restart_time_s": "Restart time",
    "reliability.checkpoint_write_gbytes_per_s_per_node": "Checkpoint write per host",
    "reliability.async_save": "Asynchronous save",
    "reliability.host_copy_gbytes_per_s_per_gpu": "Copy to host per GPU",
    "reliability.checkpoint_interval_iterations": "Checkpoint interval",
}

#: Fields shown in another unit: path -> (factor the stored value is divided by, unit shown).
_DISPLAY_SCALE = {"cost.training_tokens": (1e9, "billion tokens"),
                  "reliability.failure_rate_per_gpu_hour": (1e-6, "per million GPU-hours"),
                  # a share, in percent as the memory chart names it ("below the 10 % margin")
                  "cluster.memory_reserve_fraction": (0.01, "%")}
#: Tooltips of a choice field's items where the values alone do not tell them apart
#: (PyTorch's allgather and Transformer Engine's all_gather are different exchanges).
_CHOICE_TIPS = {"plan.cp_comm_type": {
    "p2p": "Ring attention: K/V blocks passed around the cp ranks, overlapped with the attention "
           "steps (Megatron-Core --cp-comm-type p2p, the default)",
    "allgather": "PyTorch context_parallel's all-gather rotation (torchtitan): K/V gathered "
                 "under the first attention step, their gradients passed around the ring",
    "a2a": "All-to-all (DeepSpeed-Ulysses; --cp-comm-type a2a): heads split over the cp ranks, "
           "not overlapped",
    "a2a+p2p": "All-to-all inside groups of 'CP all-to-all group' ranks, the ring between the "
               "groups (--cp-comm-type a2a+p2p)",
    "all_gather": "Megatron-Core / Transformer Engine all-gather (--cp-comm-type all_gather): "
                  "K/V gathered before attention and their gradients reduce-scattered after "
                  "it, not overlapped (the Llama 3 paper's)"}}
_CHOICE_TIPS["plan.tp_comm_overlap_backend"] = {
    "userbuffers": "Transformer Engine's userbuffers (Megatron-Core --tp-comm-overlap): every "
                   "all-gather and reduce-scatter of a layer pipelined with its GEMM",
    "symmetric_memory": "PyTorch's async TP (torchtitan's enable_async_tensor_parallel): the "
                        "backward's reduce-scatters after the QKV and fc1 input gradients stay "
                        "exposed"}
_CHOICE_TIPS["plan.fp8_impl"] = {
    "transformer_engine": "Transformer Engine (Megatron-Core): FP8 copies of the linear weights "
                          "kept across micro-batches, linear inputs saved in FP8 (1 byte)",
    "torchao": "torchao's Float8Linear (torchtitan's float8 converter): no FP8 weight copies, "
               "the weights cast inside every GEMM; linear inputs saved as they arrive (BF16 "
               "without tensor parallelism)"}
_CHOICE_TIPS["plan.tp_saved_input"] = {
    "sequence_shard": "Megatron-Core's sequence parallelism: QKV and fc1 save the norm output's "
                      "s/t shard and all-gather it again in the backward",
    "gathered": "torchtitan's tensor parallelism: QKV and fc1 (w1/w3) save the all-gathered "
                "input, all s tokens on every rank"}
#: Text an optional number shows at its minimum (0), which stands for None.
_NONE_TEXT = {"model.ffn_hidden_size": "default (4·h)",
              "model.num_query_groups": "one per head (a)",
              "model.kv_channels": "h/a (MLA: qk + rotary head size)",
              "model.num_experts": "none (dense model)",
              "model.moe_ffn_hidden_size": "MLP hidden size",
              "model.q_lora_rank": "none (no query compression)",
              "model.moe_router_num_groups": "none (no group limit)",
              "model.moe_router_group_topk": "none (no group limit)",
              "model.activation_func_clamp_value": "no clamp",
              "plan.expert_tensor_parallel": "t",
              "plan.cp_a2a_size": "none (a2a+p2p only)",
              "plan.virtual_pipeline_stages": "none (not interleaved)",
              "cluster.intra_node_bandwidth_gbytes_per_s": "from the profile store",
              "cluster.inter_node_bandwidth_gbits_per_s": "GPU's reference node (1 NIC/GPU)",
              "plan.recompute_num_layers": "all",
              "plan.first_stage_layers": "even split",
              "plan.last_stage_layers": "even split",
              "plan.grad_reduce_dtype": "default (Megatron)",
              "plan.fp8_recipe": "default (tensorwise)",
              "plan.data_parallel_shard_size": "all d (no HSDP)",
              "reliability.checkpoint_interval_iterations": "Young/Daly optimum"}
#: Decimals of floating-point spin boxes.
_DECIMALS = {"cost.price_per_gpu_hour_usd": 3, "cost.training_tokens": 3,
             "cost.price_per_kwh_usd": 3, "reliability.failure_rate_per_gpu_hour": 3}
#: Singular of the plural units integer fields carry, for a value of 1 ("1 stage").
_SINGULAR = {"sequences": "sequence", "stages": "stage", "replicas": "replica", "GPUs": "GPU",
             "tokens": "token", "layers": "layer"}


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """How one dataclass field is edited: dotted ``path``, Python type and metadata."""

    path: str
    section: str
    name: str
    type_name: str  # "int", "float", "str", "bool"
    optional: bool
    unit: str
    help: str
    choices: tuple[str, ...] | None
    minimum: float | None = None
    maximum: float | None = None
    #: what each choice is (the field's ``choice_notes``), shown as the choice's tooltip
    choice_notes: dict | None = None

    @property
    def label(self) -> str:
        """Short label of the field."""
        return _LABELS.get(self.path, self.name.replace("_", " ").capitalize())


def field_specs(section: str, cls: type) -> list[FieldSpec]:
    """The editable fields of dataclass ``cls`` stored under ``section`` of a session."""
    specs = []
    for f in dataclasses.fields(cls):
        type_str = str(f.type)
        parts = [p.strip() for p in type_str.split("|")]
        optional = "None" in parts
        base = next(p for p in parts if p != "None")
        specs.append(FieldSpec(
            path=f"{section}.{f.name}", section=section, name=f.name, type_name=base,
            optional=optional, unit=f.metadata.get("unit", ""), help=f.metadata.get("help", ""),
            choices=tuple(f.metadata["choices"]) if "choices" in f.metadata else None,
            minimum=f.metadata.get("min"), maximum=f.metadata.get("max"),
            choice_notes=f.metadata.get("choice_notes")))
    return specs


class _FieldBinding(QtCore.QObject):
    """Binds one input widget to one session field; reports user edits to the editor."""

    edited = Signal(str, object)  # field path, new stored value

    def __init__(self, spec: FieldSpec, parent: QtWidgets.QWidget) -> None:
        super().__init__(parent)
        self.spec = spec
        self.scale, unit = _DISPLAY_SCALE.get(spec.path, (1.0, spec.unit))
        self.widget = self._make_widget(spec, unit, parent)
        self.widget.setToolTip(spec.help + (f" [{spec.unit}]" if spec.unit else ""))
        self.widget.setObjectName(spec.path)
        self.error_label = WrappedLabel(parent=parent)
        self.error_label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.error_label.setObjectName(f"error:{spec.path}")
        self.error_label.setStyleSheet("color: #C62828;")
        self.error_label.setVisible(False)
        self._updating = False
        #: the form's label of this field (turns red with the error)
        self.row_label: QtWidgets.QLabel | None = None

    # ------------------------------------------------------------------ widgets
    def _make_widget(self, spec: FieldSpec, unit: str, parent: QtWidgets.QWidget) -> QtWidgets.QWidget:
        suffix = f" {unit}" if unit else ""
        if spec.choices is not None:
            w = QtWidgets.QComboBox(parent)
            if spec.optional:  # the first item stands for None
                w.addItem(_NONE_TEXT.get(spec.path, "default"))
            w.addItems(list(spec.choices))
            tips = {**(spec.choice_notes or {}), **_CHOICE_TIPS.get(spec.path, {})}
            for value, tip in tips.items():
                w.setItemData(w.findText(value), tip, QtCore.Qt.ItemDataRole.ToolTipRole)
            w.currentTextChanged.connect(self._on_combo_text_change)
            return w
        if spec.type_name == "int":
            # 64-bit: every size the core accepts; 0 is typed as it is (the rules then say
            # why it is not allowed) instead of being turned silently into 1
            w = IntSpinBox(parent)
            w.setRange(0, INT64_MAX)
            if spec.optional:
                w.setSpecialValueText(_NONE_TEXT.get(spec.path, "default"))
            w.setSuffix(suffix)
            if unit in _SINGULAR:
                w.setUnits(f" {_SINGULAR[unit]}", suffix)
            w.setGroupSeparatorShown(True)
            w.setKeyboardTracking(True)
            w.valueChanged.connect(self._on_int_value_change)
            return w
        if spec.type_name == "float":
            w = QtWidgets.QDoubleSpinBox(parent)
            w.setDecimals(_DECIMALS.get(spec.path, 2))
            # a field that may be negative says so with its own minimum (glu_linear_offset)
            w.setRange(min(0.0, spec.minimum or 0.0), FLOAT_FIELD_MAX)
            if spec.optional:
                w.setSpecialValueText(_NONE_TEXT.get(spec.path, "default"))
            w.setSuffix(suffix)
            w.setGroupSeparatorShown(True)
            w.valueChanged.connect(self._on_float_value_change)
            return w
        if spec.type_name == "bool":
            w = QtWidgets.QCheckBox(parent)
            w.toggled.connect(self._on_check_toggle)
            return w
        w = QtWidgets.QLineEdit(parent)
        if spec.optional:
            w.setPlaceholderText("(shipped profile for the GPU)" if spec.name == "profile_path"
                                 else "(Megatron's split; e.g. Et*4|t*4|t*4|t*3L)"
                                 if spec.name == "pipeline_model_parallel_layout" else "(none)")
        w.textEdited.connect(self._on_text_edit)
        return w

    def set_value(self, value: Any) -> None:
        """Show ``value`` (the stored value) without reporting an edit."""
        self._updating = True
        try:
            w = self.widget
            if isinstance(w, QtWidgets.QComboBox):
                if value is None and self.spec.optional:
                    w.setCurrentIndex(0)
                    return
                idx = w.findText(str(value))
                if idx < 0:  # an unknown value loaded from a file: show it, validate will complain
                    w.addItem(str(value))
                    idx = w.count() - 1
                w.setCurrentIndex(idx)
            elif isinstance(w, IntSpinBox):
                w.setValue(int(value) if value is not None else 0)
            elif isinstance(w, QtWidgets.QDoubleSpinBox):
                w.setValue(float(value) / self.scale if value is not None else 0.0)
            elif isinstance(w, QtWidgets.QCheckBox):
                w.setChecked(bool(value))
            else:
                w.setText("" if value is None else str(value))
        finally:
            self._updating = False

    def display_problem(self, value: Any) -> str | None:
        """Why the field cannot show the stored ``value`` as it is (None when it can).

        A value the widget would clip, round to zero or fail on is a problem:
        the window must never show one number while the session holds another.
        """
        w, spec = self.widget, self.spec
        if value is None:
            return None if spec.optional else "is missing"
        if isinstance(w, QtWidgets.QComboBox) or isinstance(w, QtWidgets.QLineEdit):
            return None if isinstance(value, str) else f"{value!r} is not text"
        if isinstance(w, QtWidgets.QCheckBox):
            return None if isinstance(value, bool) else f"{value!r} is not true or false"
        if isinstance(w, IntSpinBox):
            if isinstance(value, bool) or not isinstance(value, int):
                return f"{value!r} is not a whole number"
            if not w.minimum() <= value <= w.maximum():
                return (f"{value:,} is outside what the field holds "
                        f"({w.minimum():,} to {w.maximum():,})")
            return None
        if isinstance(w, QtWidgets.QDoubleSpinBox):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{value!r} is not a number"
            shown = float(value) / self.scale
            if not math.isfinite(shown) or not w.minimum() <= shown <= w.maximum():
                return (f"{value!r} is outside what the field shows "
                        f"({w.minimum():g} to {w.maximum() * self.scale:g})")
            if value != 0 and round(shown, w.decimals()) == 0:
                return f"{value!r} is too small to show (it would read as 0)"
        return None

    def set_error(self, messages: list[str]) -> None:
        """Show ``messages`` under the field (hide the label when empty)."""
        self.error_label.setText("\n".join(messages))
        self.error_label.setVisible(bool(messages))
        if self.row_label is not None:
            self.row_label.setStyleSheet("color: #C62828; font-weight: bold;" if messages else "")

    def set_inactive(self, reason: str | None) -> None:
        """Grey the field out with ``reason`` in its tooltip (``None``: the field takes effect).

        The value stays and is saved; the editor greys only fields without an error (an
        error is the user's to fix)."""
        self.widget.setEnabled(reason is None)
        tip = self.spec.help + (f" [{self.spec.unit}]" if self.spec.unit else "")
        if reason is not None:
            tip += f"\n(No effect here: {reason}.)"
        self.widget.setToolTip(tip)
        if self.row_label is not None:
            self.row_label.setEnabled(reason is None)
            self.row_label.setToolTip(tip)

    # ------------------------------------------------------------------ handlers
    def _report(self, value: Any) -> None:
        if not self._updating:
            self.edited.emit(self.spec.path, value)

    @Slot(str)
    def _on_combo_text_change(self, text: str) -> None:
        none = self.spec.optional and self.widget.currentIndex() == 0
        self._report(None if none else text)

    @Slot(object)
    def _on_int_value_change(self, value: int) -> None:
        self._report(None if (self.spec.optional and value == 0) else int(value))

    @Slot(float)
    def _on_float_value_change(self, value: float) -> None:
        self._report(None if (self.spec.optional and value == 0.0) else self._stored(value))

    def _stored(self, shown: float) -> float:
        """The stored value of ``shown`` (in the unit shown): divided by the inverse of a
        scale below 1 (7 % is 0.07, where 7 * 0.01 is 0.07000000000000001)."""
        if self.scale < 1:
            inverse = round(1 / self.scale)
            if inverse * self.scale == 1.0:
                return float(shown) / inverse
        return float(shown) * self.scale

    @Slot(bool)
    def _on_check_toggle(self, checked: bool) -> None:
        self._report(bool(checked))

    @Slot(str)
    def _on_text_edit(self, text: str) -> None:
        self._report(None if (self.spec.optional and not text.strip()) else text)


class ConfigEditor(QtWidgets.QWidget):
    """Form for model, parallel plan, cluster and cost of a session.

    Signals
    -------
    session_changed(Session)
        After every user edit, with a copy of the edited session (valid or not).
    validity_changed(bool)
        When the session becomes valid or invalid.
    """

    session_changed = Signal(object)
    validity_changed = Signal(bool)

    _CUSTOM = "Custom"

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = Session()
        self._errors: list[FieldError] = []
        self._bindings: dict[str, _FieldBinding] = {}

        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self._summary = QtWidgets.QLabel()
        self._summary.setWordWrap(True)
        self._summary.setObjectName("summary")
        layout.addWidget(self._summary)

        for section, cls, title in _SECTIONS:
            box = QtWidgets.QGroupBox(title, self)
            form = QtWidgets.QFormLayout(box)
            form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            form.setContentsMargins(8, 6, 8, 6)
            form.setVerticalSpacing(4)
            if section == "model":
                self._preset = QtWidgets.QComboBox(box)
                self._preset.setObjectName("preset")
                self._preset.addItem(self._CUSTOM)
                self._preset.addItems(list(MODEL_PRESETS))
                self._preset.setToolTip("Replace the model shape by a published one")
                self._preset.activated.connect(self._on_preset_activate)
                form.addRow("Preset", self._preset)
            for spec in field_specs(section, cls):
                binding = _FieldBinding(spec, box)
                binding.edited.connect(self._on_field_edit)
                self._bindings[spec.path] = binding
                cell = QtWidgets.QWidget(box)
                cell_layout = QtWidgets.QVBoxLayout(cell)
                cell_layout.setContentsMargins(0, 0, 0, 0)
                cell_layout.setSpacing(1)
                if spec.path == "cluster.profile_path":
                    row = QtWidgets.QHBoxLayout()
                    row.setContentsMargins(0, 0, 0, 0)
                    row.addWidget(binding.widget, 1)
                    browse = QtWidgets.QToolButton(cell)
                    browse.setText("…")
                    browse.setToolTip("Choose a profile store (.h5)")
                    browse.clicked.connect(self._on_browse_profile_click)
                    row.addWidget(browse)
                    cell_layout.addLayout(row)
                else:
                    cell_layout.addWidget(binding.widget)
                cell_layout.addWidget(binding.error_label)
                label = QtWidgets.QLabel(spec.label, box)
                label.setToolTip(binding.widget.toolTip())
                binding.row_label = label
                form.addRow(label, cell)
            if section == "plan":
                self._derived = QtWidgets.QLabel(box)
                self._derived.setObjectName("derived")
                self._derived.setWordWrap(True)
                self._derived.setStyleSheet("color: #404040;")
                form.addRow(self._derived)
            layout.addWidget(box)

        notes_box = QtWidgets.QGroupBox("Notes", self)
        notes_layout = QtWidgets.QVBoxLayout(notes_box)
        notes_layout.setContentsMargins(8, 6, 8, 6)
        self._notes = QtWidgets.QPlainTextEdit(notes_box)
        self._notes.setObjectName("notes")
        self._notes.setPlaceholderText("Free text saved with the session")
        self._notes.setFixedHeight(60)
        self._notes.textChanged.connect(self._on_notes_change)
        notes_layout.addWidget(self._notes)
        layout.addWidget(notes_box)
        layout.addStretch(1)
        self._updating = False
        self.set_session(self._session)

    # ------------------------------------------------------------------ API
    def set_session(self, session: Session) -> None:
        """Show ``session`` (a copy is kept); does not emit :attr:`session_changed`."""
        self._session = session.copy()
        self._updating = True
        try:
            for path, binding in self._bindings.items():
                section, name = path.split(".")
                binding.set_value(getattr(getattr(self._session, section), name))
            self._notes.setPlainText(self._session.notes)
        finally:
            self._updating = False
        self._refresh()

    def display_problems(self, session: Session) -> list[FieldError]:
        """Fields of ``session`` this form cannot show as they are (empty when it can show all).

        Checked before :meth:`set_session` by whoever must not show a file half-way.
        """
        problems = []
        for path, binding in self._bindings.items():
            section, name = path.split(".")
            message = binding.display_problem(getattr(getattr(session, section), name))
            if message:
                problems.append(FieldError(path, message))
        if not isinstance(session.notes, str):
            problems.append(FieldError("notes", "is not text"))
        return problems

    def session(self) -> Session:
        """A copy of the session as edited."""
        return self._session.copy()

    def errors(self) -> list[FieldError]:
        """The rules the edited session breaks (empty when valid)."""
        return list(self._errors)

    def is_valid(self) -> bool:
        """Whether the edited session breaks no rule."""
        return not self._errors

    def field_widget(self, path: str) -> QtWidgets.QWidget:
        """The input widget of field ``path`` such as ``'plan.tensor_parallel'``."""
        return self._bindings[path].widget

    def error_text(self, path: str) -> str:
        """The error text shown under field ``path`` ('' when none)."""
        label = self._bindings[path].error_label
        return label.text() if not label.isHidden() else ""

    def error_label(self, path: str) -> QtWidgets.QLabel:
        """The red label under field ``path``."""
        return self._bindings[path].error_label

    def summary_text(self) -> str:
        """The summary line above the form."""
        return self._summary.text()

    def set_model_preset(self, name: str) -> None:
        """Replace the model by preset ``name`` of :data:`core.plan.presets.MODEL_PRESETS` (an edit)."""
        preset = MODEL_PRESETS[name]
        self._session.model = dataclasses.replace(preset)
        self._updating = True
        try:
            for path, binding in self._bindings.items():
                section, field_name = path.split(".")
                if section == "model":
                    binding.set_value(getattr(self._session.model, field_name))
        finally:
            self._updating = False
        self._edited()

    def set_field(self, path: str, value: Any) -> None:
        """Set field ``path`` (e.g. ``'cluster.profile_path'``) to the stored ``value`` as a user
        edit would: the field shows it, the session is validated, :attr:`session_changed` follows.

        Raises
        ------
        KeyError
            ``path`` is not a field of the form.
        """
        binding = self._bindings[path]
        binding.set_value(value)
        self._on_field_edit(path, value)

    # ------------------------------------------------------------------ handlers
    @Slot(str, object)
    def _on_field_edit(self, path: str, value: Any) -> None:
        section, name = path.split(".")
        if path == "cluster.gpu":
            self._follow_node(value)
        setattr(getattr(self._session, section), name, value)
        self._edited()

    def _follow_node(self, gpu: Any) -> None:
        """A GPU kind chosen while the GPUs per node and the network per node are the old
        kind's reference node (8 GPUs, 3,200 Gb/s on HGX H100 boards) takes the new kind's
        (72 GPUs, 28,800 Gb/s for a GB200 NVL72 rack; :func:`core.plan.cluster.on_gpu_kind`);
        values the user set to something else stay."""
        from core.plan.cluster import NODE_FIELDS, on_gpu_kind
        if not isinstance(gpu, str):
            return
        followed = on_gpu_kind(self._session.cluster, gpu)
        for name in NODE_FIELDS:
            value = getattr(followed, name)
            if value == getattr(self._session.cluster, name):
                continue
            setattr(self._session.cluster, name, value)
            binding = self._bindings.get(f"cluster.{name}")
            if binding is not None:
                binding.set_value(value)  # shown without reporting an edit

    @Slot(int)
    def _on_preset_activate(self, index: int) -> None:
        name = self._preset.itemText(index)
        if name in MODEL_PRESETS:
            self.set_model_preset(name)

    @Slot()
    def _on_notes_change(self) -> None:
        if self._updating:
            return
        self._session.notes = self._notes.toPlainText()
        self._edited()

    @Slot()
    def _on_browse_profile_click(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(
            self, "Choose a profile store", "", "Profile stores (*.h5 *.hdf5);;All files (*)")
        if path:
            self.set_field("cluster.profile_path", path)

    # ------------------------------------------------------------------ internals
    def _edited(self) -> None:
        self._refresh()
        self.session_changed.emit(self.session())

    def _refresh(self) -> None:
        was_valid = not self._errors
        self._errors = validate(self._session)
        by_field: dict[str, list[str]] = {}
        for err in self._errors:
            by_field.setdefault(err.field, []).append(err.message)
        inactive = inactive_fields(self._session)
        for path, binding in self._bindings.items():
            binding.set_error(by_field.get(path, []))
            binding.set_inactive(None if path in by_field else inactive.get(path))
        if self._errors:
            n = len(self._errors)
            lines = "".join(f"<li>{_html(e.field)}: {_html(e.message)}</li>" for e in self._errors)
            self._summary.setText(f"<b>{n} problem{'s' if n > 1 else ''}</b> — fix the fields "
                                  f"marked in red:<ul style='margin-left:-20px'>{lines}</ul>")
            self._summary.setStyleSheet("color: #C62828;")
        else:
            # the rules only: whether the plan fits in memory is the report's verdict
            self._summary.setText("Configuration is valid (every rule holds; whether it fits in "
                                  "memory: the memory panel).")
            self._summary.setStyleSheet("color: #2E7D32;")
        self._update_derived()
        self._update_preset()
        if was_valid != (not self._errors):
            self.validity_changed.emit(not self._errors)

    def _update_derived(self) -> None:
        plan, model = self._session.plan, self._session.model
        try:
            params = format_count(num_parameters(model, plan.tensor_parallel) / 1e9, 1)
            cp = "·cp" if plan.context_parallel != 1 else ""
            text = (f"World size t·p{cp}·d = <b>{format_count(plan.num_gpus)}</b> GPUs<br>"
                    f"Micro-batches per iteration m = B/(d·b) = "
                    f"<b>{format_count(plan.num_microbatches)}</b><br>"
                    f"Parameters ≈ <b>{params} billion</b>")
            if model.is_moe:
                from core.model.counts import (num_active_parameters,
                    num_active_parameters_with_embedding)
                active = format_count(num_active_parameters(model, plan.tensor_parallel) / 1e9, 1)
                with_emb = format_count(num_active_parameters_with_embedding(
                    model, plan.tensor_parallel) / 1e9, 1)
                text += (f" ({active} billion active per token without the input embedding, "
                         f"{with_emb} with it)")
            size = plan.data_parallel_shard_size
            if size and plan.zero_stage >= 1 and plan.data_parallel % size == 0:
                from core.plan.parallel import zero_replicas, zero_shard_size
                text += (f"<br>Hybrid sharding: shards over <b>{zero_shard_size(plan)}</b> ranks, "
                         f"<b>{zero_replicas(plan)}</b> replicas")
        except (ZeroDivisionError, TypeError, ValueError):
            text = "World size and micro-batches: enter positive sizes"
        try:
            from core.plan.layout import layout_summary
            summary = layout_summary(model.num_layers, plan)
        except (TypeError, ValueError):  # the field's own error says what is wrong
            summary = None
        if summary:
            text += f"<br>Pipeline layout: {summary}"
        self._derived.setText(text)

    def _update_preset(self) -> None:
        model = self._session.model
        name = self._CUSTOM
        preset = MODEL_PRESETS.get(model.name)
        if preset is not None and dataclasses.asdict(preset) == dataclasses.asdict(model):
            name = model.name
        self._preset.setCurrentText(name)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
