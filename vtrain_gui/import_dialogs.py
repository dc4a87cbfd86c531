"""File > Import: other tools' files into a new untitled session, through the command line's
readers.

What belongs here: the import sources the window offers (:data:`SOURCES`: a Hugging Face
``config.json``, a Megatron-LM launch script, a torchtitan job config, a DeepSpeed config with
its model, a Megatron-Bridge performance recipe (picked from a list, :class:`RecipeDialog`) or
checkpoint ``run_config.yaml``, the vTrain authors' JSON; the same as ``vtrain import hf |
megatron-args | torchtitan | deepspeed | bridge`` and the authors' files
``vtrain simulate`` reads), :func:`read_import` (one file read by the core reader the command
line calls, with the options the command line takes as flags; nothing is parsed here), the
dialog that asks for those options when the file does not say (:class:`ImportOptionsDialog`),
the dialog that shows the importer's notes before the session is opened
(:class:`ImportReviewDialog`), and :class:`ImportMenu`, the menu entries and the flow that
joins them. A refusal is the importer's one-line message in an error dialog; the open session
is untouched until the user accepts the notes.
"""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path
from typing import Callable

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Slot

from core.plan.cluster import GPU_KINDS, ClusterConfig, gpu_kind
from core.plan.fields import ConfigError, FieldError
from core.plan.session import Session
from core.io.megatron.arguments import MegatronArgsError
from core.io.session import SessionFileError
from core.util.text import printable

__all__ = ["ImportSource", "SOURCES", "OPTIONS", "ImportOptions", "Imported", "read_import",
           "ImportOptionsDialog", "ImportReviewDialog", "RecipeDialog", "ImportMenu"]

#: What a reader raises for a file it refuses or cannot read (the command line's bad input).
IMPORT_ERRORS = (ConfigError, MegatronArgsError, SessionFileError, OSError, ValueError,
                 RecursionError, MemoryError)


def _add_buttons(dialog: QtWidgets.QDialog, layout: QtWidgets.QBoxLayout, text: str,
                 on_accept) -> QtWidgets.QPushButton:
    """Cancel and the default button ``text`` at the foot of ``dialog``'s ``layout``: Enter
    presses ``text`` (``on_accept``), never Cancel; returns the ``text`` button."""
    buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Cancel)
    buttons.button(QtWidgets.QDialogButtonBox.StandardButton.Cancel).setAutoDefault(False)
    button = buttons.addButton(text, QtWidgets.QDialogButtonBox.ButtonRole.AcceptRole)
    button.setDefault(True)
    buttons.accepted.connect(on_accept)
    buttons.rejected.connect(dialog.reject)
    layout.addWidget(buttons)
    return button


@dataclasses.dataclass(frozen=True)
class ImportSource:
    """One kind of file File > Import reads.

    Attributes
    ----------
    key : str
        ``"hf"``, ``"megatron"``, ``"torchtitan"``, ``"deepspeed"``, ``"bridge_recipe"`` (no
        file: a recipe picked from a list, :class:`RecipeDialog`), ``"bridge"`` or ``"vtrain"``.
    menu_text : str
        The File > Import entry.
    what : str
        The file, in words (dialog titles).
    command : str
        The command line that reads it the same way.
    file_filter : str
        The file dialog's filter.
    options : tuple of str
        The :class:`ImportOptions` fields asked for (the command's flags).
    tooltip : str
    required : tuple of str
        The options the command requires (the file never says them): their fields read
        "required" when empty, and the reader refuses the import without them.
    unset : dict of str to str
        What an option's field reads when left empty, where that is not "from the file" (the
        command's default, for a file that never says it).
    """

    key: str
    menu_text: str
    what: str
    command: str
    file_filter: str
    options: tuple[str, ...]
    tooltip: str
    required: tuple[str, ...] = ()
    unset: dict[str, str] = dataclasses.field(default_factory=dict)


#: The sources of File > Import, in menu order.
SOURCES: dict[str, ImportSource] = {s.key: s for s in (
    ImportSource("hf", "&Hugging Face config…", "Hugging Face config", "vtrain import hf",
                 "Hugging Face config (*.json);;All files (*)", ("gpu", "seq_length"),
                 "A model's config.json (Llama, Mistral, Mixtral, Qwen, DeepSeek, GPT-OSS, Gemma, "
                 "Phi, OLMo, Nemotron ...) with a default plan on one node"),
    ImportSource("megatron", "&Megatron-LM launch script…", "Megatron-LM launch",
                 "vtrain import megatron-args",
                 "Launch scripts and argument lists (*.sh *.sbatch *.slurm *.txt *.log);;"
                 "All files (*)",
                 ("gpu", "num_gpus", "gpus_per_node", "nodes", "vocab_size", "variables",
                  "allow_unknown"),
                 "A torchrun/srun/sbatch launch of pretrain_gpt.py, an argument list, or "
                 "Megatron-LM's printed argument dump: the model and the plan it runs"),
    ImportSource("torchtitan", "&torchtitan job config…", "torchtitan job config",
                 "vtrain import torchtitan", "torchtitan job configs (*.toml);;All files (*)",
                 ("gpu", "num_gpus"),
                 "A torchtitan train_configs/*.toml: model flavour, parallel degrees, "
                 "checkpointing, float8"),
    ImportSource("deepspeed", "&DeepSpeed config…", "DeepSpeed config",
                 "vtrain import deepspeed", "DeepSpeed configs (*.json);;All files (*)",
                 ("model", "num_gpus", "gpus_per_node", "gpu", "seq_length", "recompute",
                  "micro_batch_size", "gradient_accumulation_steps", "train_batch_size",
                  "precision"),
                 "A DeepSpeed config JSON (ds_config.json; DeepSpeed alone, or under Hugging "
                 "Face Trainer / accelerate) with the model it trains: ZeRO data parallelism "
                 "over every GPU, the batch, bf16 / fp16, the ZeRO stage and its overlap",
                 required=("model", "num_gpus"),
                 unset={"gpu": f"{ClusterConfig().gpu} (default)",
                        "gpus_per_node": "the GPU kind's NVLink domain",
                        "seq_length": "the model's", "recompute": "the lightest that fits"}),
    ImportSource("bridge_recipe", "Megatron-Bridge &recipe…", "Megatron-Bridge performance recipe",
                 "vtrain import bridge --recipe", "", (),
                 "One of Megatron-Bridge 0.6.2's 119 pretraining performance recipes (Llama 3, "
                 "Qwen3, DeepSeek-V3, GPT-OSS on H100, B200, GB200), picked from a list: its "
                 "model, plan, precision and GPUs; those it runs unmodelled (NVFP4, FP8 "
                 "attention, CPU offloading ...) are refused with the reason"),
    ImportSource("bridge", "Megatron-Bridge r&un_config.yaml…", "Megatron-Bridge run_config.yaml",
                 "vtrain import bridge",
                 "Megatron-Bridge run configs (*.yaml *.yml);;All files (*)",
                 ("gpu", "num_gpus", "gpus_per_node"),
                 "The ConfigContainer a Megatron-Bridge checkpoint keeps (run_config.yaml): the "
                 "model provider, parallel sizes, batch, precision and overlaps, read through "
                 "Megatron-LM's argument mapping; the GPU kind and count are not in it",
                 required=("gpu", "num_gpus"),
                 unset={"gpus_per_node": "the GPU kind's NVLink domain"}),
    ImportSource("vtrain", "&vTrain JSON…", "vTrain JSON config", "vtrain simulate CONFIG.json",
                 "vTrain configs (*.json);;All files (*)", (),
                 "A configuration in the vTrain authors' JSON format (the paper's artifact)"),
)}


#: Option (an :class:`ImportOptions` field) -> (label, the command line's flag, tooltip).
OPTIONS: dict[str, tuple[str, str, str]] = {
    "model": ("Model", "--model", "The model the DeepSpeed config trains (the file does not "
              "name it): a Hugging Face config.json (or its folder; Browse…) or a preset's "
              "name. Required"),
    "gpu": ("GPU kind", "--gpu", "GPU kind of the cluster; as the file says (else "
            f"{ClusterConfig().gpu}) unless one is picked"),
    "num_gpus": ("GPUs (world size)", "--num-gpus", "World size, when the file does not give "
                 "it (or to override it; a Megatron-Bridge run_config.yaml never does)"),
    "gpus_per_node": ("GPUs per node", "--gpus-per-node", "GPUs per node, the NVLink domain "
                      "(default: the launcher's processes per host, a GB200 NVL72 host's 4 "
                      "being a rack of 72; else the GPU kind's NVLink domain)"),
    "nodes": ("Nodes", "--nodes", "Nodes, when the script takes them from its environment "
              "(with the GPUs per node: the world size)"),
    "vocab_size": ("Vocabulary size", "--vocab-size", "The tokenizer's vocabulary size, when "
                   "the launch does not give --vocab-size and its tokenizer keeps it in its "
                   "files (HuggingFaceTokenizer, SentencePieceTokenizer ...)"),
    "seq_length": ("Sequence length", "--seq-length", "Sequence length to train at "
                   "(default: max_position_embeddings)"),
    "variables": ("Script variables", "--var", "Values of the script's environment or its "
                  "positional parameters, one NAME=VALUE a line (NNODES=4, 1=/data/ckpt). The "
                  "script is read, never run: a variable it sets itself wins"),
    "allow_unknown": ("List unknown arguments", "--allow-unknown", "List arguments that are "
                      "not Megatron-LM's as ignored (with a close match) instead of refusing "
                      "them: a fork's or another script's own arguments"),
    "recompute": ("Activation recomputation", "--recompute", "none or full (full: Hugging "
                  "Face's gradient_checkpointing, each layer run again in the backward); "
                  "default: the lightest with which the plan fits (noted), as the DeepSpeed "
                  "config does not say"),
    "micro_batch_size": ("Micro-batch size", "--micro-batch-size", "train_micro_batch_size_per"
                         "_gpu when the file says \"auto\" (the Trainer's "
                         "per_device_train_batch_size); a value the file gives must agree"),
    "gradient_accumulation_steps": ("Gradient accumulation steps",
                                    "--gradient-accumulation-steps",
                                    "gradient_accumulation_steps when the file says \"auto\" "
                                    "(the Trainer's); a value the file gives must agree"),
    "train_batch_size": ("Train batch size", "--train-batch-size", "train_batch_size when the "
                         "file says \"auto\" (micro-batch x accumulation steps x GPUs); a "
                         "value the file gives must agree"),
    "precision": ("Precision", "--precision", "bf16.enabled and fp16.enabled when the file "
                  "says \"auto\" (the Trainer's --bf16 / --fp16); a value the file gives must "
                  "agree"),
}

#: The choices of the options picked from a list (the command line's ``choices``); the first
#: entry, None, leaves it to the file (or the command's default).
_CHOICES: dict[str, tuple[str | None, ...]] = {
    "recompute": (None, "none", "full"),
    "precision": (None, "bf16", "fp16", "fp32"),
}


@dataclasses.dataclass
class ImportOptions:
    """What the command line takes as flags when the file does not say (None: as the file
    says). ``variables`` are ``--var`` items, ``NAME=VALUE`` each."""

    gpu: str | None = None
    num_gpus: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    seq_length: int | None = None
    vocab_size: int | None = None
    variables: list[str] = dataclasses.field(default_factory=list)
    allow_unknown: bool = False
    model: str | None = None
    recompute: str | None = None
    micro_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    train_batch_size: int | None = None
    precision: str | None = None


@dataclasses.dataclass
class Imported:
    """A file read by an importer: the session and what the reader should know about it.

    Attributes
    ----------
    session : Session
    summary : str
        One line: the model, its parameters, the plan and the cluster.
    sections : list of (str, list of str)
        Headed lists: the importer's notes (assumptions), the input it ignored and why, what
        it used; empty lists are left out.
    """

    session: Session
    summary: str
    sections: list[tuple[str, list[str]]]


def read_import(source: str, path: str | Path, options: ImportOptions | None = None) -> Imported:
    """Read ``path`` with the core reader of ``source`` (a key of :data:`SOURCES`), as the
    command line does with the flags of ``options`` (for ``bridge_recipe``, ``path`` is the
    recipe's function name).

    Raises
    ------
    ConfigError, MegatronArgsError, SessionFileError, OSError, ValueError
        The reader's refusal (its message names the file, the key and the rule).
    """
    opts = options or ImportOptions()
    readers = {"hf": _read_hf, "megatron": _read_megatron, "torchtitan": _read_torchtitan,
               "deepspeed": _read_deepspeed, "bridge_recipe": _read_bridge_recipe,
               "bridge": _read_bridge, "vtrain": _read_vtrain}
    session, sections = readers[source](Path(path), opts)
    return Imported(session, _summary(session), [(h, rows) for h, rows in sections if rows])


def _read_hf(path: Path, opts: ImportOptions):
    """``vtrain import hf`` (core/cli/import_hf.py): :func:`core.io.hf_import.read_hf_config`,
    then the GPU kind's cluster and the rules checked."""
    from core.cli.common import cluster_of_gpu
    from core.io.hf_import import read_hf_config
    from core.io.start_plan import start_recompute
    from core.plan.rules import check
    imp = read_hf_config(path, seq_length=opts.seq_length)
    if opts.gpu:
        imp.session.cluster = cluster_of_gpu(opts.gpu, imp.session.cluster)
        check(imp.session)
    imp.session, recompute_note = start_recompute(imp.session, expert_parallel=True)
    return imp.session, [("Notes", [*imp.notes, recompute_note]),
                         (f"Ignored ({imp.architecture}: no effect on the cost)",
                          [f"{k}: {why}" for k, why in imp.ignored.items()])]


def _read_megatron(path: Path, opts: ImportOptions):
    """``vtrain import megatron-args``: :func:`core.io.megatron.to_session.import_checked`."""
    from core.io.megatron.to_session import import_checked, parse_variables
    variables = parse_variables(opts.variables)
    res = import_checked(path, num_gpus=opts.num_gpus, gpus_per_node=opts.gpus_per_node,
                         gpu=gpu_kind(opts.gpu) if opts.gpu else None,
                         allow_unknown=opts.allow_unknown, nodes=opts.nodes, variables=variables,
                         vocab_size=opts.vocab_size)
    s = res.session
    notes = [f"read from: {res.launch.launcher}"]
    if s.cluster.inter_node_bandwidth_gbits_per_s is None and s.plan.num_gpus > \
            s.cluster.gpus_per_node:
        notes.append("network: Megatron's arguments do not give it; the GPU's reference node "
                     "(set cluster.inter_node_bandwidth_gbits_per_s for yours)")
    notes += [f"attention: {s.model.attention_kernel} ({note})" if about == "attention"
              else f"{about}: {note}" for about, note in res.notes]
    notes += [f"script: {note}" for note in res.launch.notes]
    return s, [("Notes", notes),
               ("Ignored (may change the iteration time)",
                [f"{arg}: {why}" for arg, why in res.ignored.items()]),
               ("Not used (no effect on the iteration time)", list(res.neutral)),
               ("Used", [f"{arg}: {what}" for arg, what in res.used.items()])]


def _read_torchtitan(path: Path, opts: ImportOptions):
    """``vtrain import torchtitan``: :func:`core.io.torchtitan_import.read_torchtitan_config`."""
    from core.io.torchtitan_import import read_torchtitan_config
    imp = read_torchtitan_config(path, num_gpus=opts.num_gpus,
                                 gpu=gpu_kind(opts.gpu) if opts.gpu else None)
    return imp.session, [("Notes", list(imp.notes)),
                         ("No effect", [f"{k}: {why}" for k, why in imp.ignored.items()]),
                         ("Used", [f"{k}: {what}" for k, what in imp.used.items()])]


def _read_deepspeed(path: Path, opts: ImportOptions):
    """``vtrain import deepspeed`` (core/cli/imports.py ``_deepspeed``): the model
    (:func:`core.io.deepspeed_import.model_from_name`), then
    :func:`core.io.deepspeed_import.read_deepspeed_config` with the options; ``--model`` and
    ``--num-gpus`` are required, as the command's flags are (refused by name when missing)."""
    from core.cli.common import check_seq_length, cluster_of_gpu
    from core.io.deepspeed_import import model_from_name, read_deepspeed_config
    if not opts.model:
        raise ConfigError([FieldError("--model", "required: the model the DeepSpeed config "
                                      "trains (a Hugging Face config.json or its folder, or a "
                                      "preset's name); the config does not name it")])
    if opts.num_gpus is None:
        raise ConfigError([FieldError("--num-gpus", "required: the world size (the "
                                      "launcher's), the data-parallel size; the config does "
                                      "not give it")])
    check_seq_length(opts.seq_length)
    gpu = cluster_of_gpu(opts.gpu).gpu if opts.gpu else None
    model, model_ignored, model_notes = model_from_name(opts.model, seq_length=opts.seq_length)
    auto = {"--micro-batch-size": opts.micro_batch_size,
            "--gradient-accumulation-steps": opts.gradient_accumulation_steps,
            "--train-batch-size": opts.train_batch_size, "--precision": opts.precision}
    imp = read_deepspeed_config(path, model, num_gpus=opts.num_gpus,
                                gpus_per_node=opts.gpus_per_node, gpu=gpu,
                                recompute=opts.recompute,
                                options={k: v for k, v in auto.items() if v is not None})
    return imp.session, [("Notes", [*model_notes, *imp.notes]),
                         ("Approximated (may change the iteration time a little)",
                          [f"{k}: {what}" for k, what in imp.approximated.items()]),
                         ("No effect", [f"{k}: {why}" for k, why in imp.ignored.items()]),
                         ("Model: ignored (no effect on the cost)",
                          [f"{k}: {why}" for k, why in model_ignored.items()]),
                         ("Used", [f"{k}: {what}" for k, what in imp.used.items()])]


def _read_bridge_recipe(path: Path, opts: ImportOptions):
    """``vtrain import bridge --recipe NAME`` (core/cli/import_bridge.py): the recipe's session
    (:func:`core.accuracy.bridge_sessions.recipe_session`), its source in the session's notes;
    a recipe the simulator refuses raises its cause and reason."""
    from core.cli.import_bridge import recipe_import
    session, lines = recipe_import(str(path))
    return session, [("Notes", lines)]


def _read_bridge(path: Path, opts: ImportOptions):
    """``vtrain import bridge RUN_CONFIG.yaml``: :func:`core.io.bridge_import.read_run_config`;
    ``--gpu`` and ``--num-gpus`` are required, as the command's flags are."""
    from core.cli.common import cluster_of_gpu
    from core.io.bridge_import import read_run_config
    if not opts.gpu:
        raise ConfigError([FieldError("--gpu", "required: a run_config.yaml does not keep the "
                                      "GPU kind")])
    if opts.num_gpus is None:
        raise ConfigError([FieldError("--num-gpus", "required: a run_config.yaml does not keep "
                                      "the world size")])
    imp = read_run_config(path, gpu=cluster_of_gpu(opts.gpu).gpu, num_gpus=opts.num_gpus,
                          gpus_per_node=opts.gpus_per_node)
    return imp.session, [("Notes", [f"{about}: {note}" for about, note in imp.notes]),
                         ("Ignored (may change the iteration time)",
                          [f"{k}: {why}" for k, why in imp.ignored.items()]),
                         ("Not used (no effect on the iteration time)", list(imp.neutral)),
                         ("Used", [f"{k}: {what}" for k, what in imp.used.items()])]


def _read_vtrain(path: Path, opts: ImportOptions):
    """The authors' JSON: :func:`core.io.vtrain_json.read_vtrain_config` (what ``vtrain
    simulate`` reads such a file with)."""
    from core.io.vtrain_json import read_vtrain_config
    return read_vtrain_config(path), []


def _summary(session: Session) -> str:
    """``"Llama 3 8B: 8.03 B parameters; plan t=8 ... on 8 A100-SXM4-80GB"``."""
    from core.model.counts import num_active_parameters, num_parameters
    m, plan = session.model, session.plan
    active = (f" ({num_active_parameters(m) / 1e9:,.2f} B active)" if m.is_moe else "")
    return (f"{m.name}: {num_parameters(m) / 1e9:,.2f} B parameters{active}; plan "
            f"{plan.label()} on {plan.num_gpus:,} × {session.cluster.gpu}")


def error_text(exc: BaseException) -> str:
    """The reader's message on one line, as the command line prints it after ``vtrain: error:``
    (a message of more than :data:`~vtrain_gui.formatting.MAX_MESSAGE_CHARS` characters with
    its middle left out: :func:`~vtrain_gui.formatting.message_text`)."""
    from .formatting import message_text
    return message_text(printable(" ".join(str(exc).split("\n"))))


class ImportOptionsDialog(QtWidgets.QDialog):
    """Asks for the options of a source (:attr:`ImportSource.options`) that the file may not
    say; Import reads the file with them (``read``) and closes only when it is read: a refusal
    shows its message and the dialog stays, to change the options or cancel.

    ``read(options)`` returns the :class:`Imported` file or None after showing why not.
    """

    def __init__(self, source: ImportSource, path: Path,
                 read: Callable[[ImportOptions], Imported | None],
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Import {source.what}")
        self._read = read
        self.imported: Imported | None = None
        self.fields: dict[str, QtWidgets.QWidget] = {}
        layout = QtWidgets.QVBoxLayout(self)
        intro = QtWidgets.QLabel(
            f"<b>{html.escape(path.name)}</b><br>What the file does not say; leave a field as "
            f"it is to take it from the file (<code>{html.escape(source.command)}</code> takes "
            "these as flags).")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QtWidgets.QFormLayout()
        for name in source.options:
            label, flag, tip = OPTIONS[name]
            widget = self._field(name)
            widget.setToolTip(f"{tip} ({flag})")
            unset = "required" if name in source.required else source.unset.get(name)
            if unset and isinstance(widget, QtWidgets.QSpinBox):
                widget.setSpecialValueText(unset)
            elif unset and isinstance(widget, QtWidgets.QComboBox):
                widget.setItemText(0, unset)  # the first entry, None: left to the default
            self.fields[name] = widget
            form.addRow(f"{label} ({flag})" if name != "allow_unknown" else "", widget)
        layout.addLayout(form)
        self.import_button = _add_buttons(self, layout, "Import", self._on_import_click)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        if self.fields:  # type into the first field; Enter imports
            next(iter(self.fields.values())).setFocus()

    @staticmethod
    def _field(name: str) -> QtWidgets.QWidget:
        """The editor of one option: a GPU list, a count (0: from the file), the variables'
        lines, a check box."""
        if name == "gpu":
            box = QtWidgets.QComboBox()
            box.addItem(f"as the file says (else {ClusterConfig().gpu})", None)
            for kind in GPU_KINDS:
                box.addItem(kind, kind)
            return box
        if name == "variables":
            text = QtWidgets.QPlainTextEdit()
            text.setPlaceholderText("NNODES=4\n1=/data/ckpt")
            text.setFixedHeight(80)
            return text
        if name == "allow_unknown":
            return QtWidgets.QCheckBox(f"{OPTIONS[name][0]} ({OPTIONS[name][1]})")
        if name == "model":
            return _ModelField()
        if name in _CHOICES:
            box = QtWidgets.QComboBox()
            for value in _CHOICES[name]:
                box.addItem(value or "as the file says", value)
            return box
        spin = QtWidgets.QSpinBox()
        spin.setRange(0, 10_000_000 if name in ("seq_length", "vocab_size") else 1_000_000)
        spin.setSpecialValueText("from the file")
        spin.setGroupSeparatorShown(True)
        return spin

    def options(self) -> ImportOptions:
        """The options as set (None for a field left to the file)."""
        opts = ImportOptions()
        for name, w in self.fields.items():
            if isinstance(w, _ModelField):
                value = w.text() or None
            elif isinstance(w, QtWidgets.QComboBox):
                value = w.currentData()
            elif isinstance(w, QtWidgets.QPlainTextEdit):
                value = [ln.strip() for ln in w.toPlainText().splitlines() if ln.strip()]
            elif isinstance(w, QtWidgets.QCheckBox):
                value = w.isChecked()
            else:
                value = w.value() or None
            setattr(opts, name, value)
        return opts

    @Slot()
    def _on_import_click(self) -> None:
        self.imported = self._read(self.options())
        if self.imported is not None:
            self.accept()


class _ModelField(QtWidgets.QWidget):
    """``--model``: a preset's name picked from the list or typed, or the path of a Hugging
    Face ``config.json`` (typed, or Browse…)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        from core.plan.presets import MODEL_PRESETS
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.box = QtWidgets.QComboBox()
        self.box.setEditable(True)
        self.box.setInsertPolicy(QtWidgets.QComboBox.InsertPolicy.NoInsert)
        self.box.addItems(list(MODEL_PRESETS))
        self.box.setCurrentIndex(-1)
        self.box.lineEdit().setPlaceholderText("a preset, or a Hugging Face config.json")
        self.box.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding,
                               QtWidgets.QSizePolicy.Policy.Fixed)
        self.box.setMinimumWidth(self.box.fontMetrics().horizontalAdvance(
            self.box.lineEdit().placeholderText()) + 40)
        self.browse = QtWidgets.QPushButton("Browse…")
        self.browse.setAutoDefault(False)
        self.browse.clicked.connect(self._on_browse_click)
        row.addWidget(self.box, 1)
        row.addWidget(self.browse)

    def setFocus(self) -> None:  # noqa: N802 - Qt API
        self.box.setFocus()

    def text(self) -> str:
        """The model as given (stripped; '' when none)."""
        return self.box.currentText().strip()

    def set_text(self, text: str) -> None:
        self.box.setEditText(text)

    @Slot()
    def _on_browse_click(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(
            self, "Model: a Hugging Face config.json", str(Path.home()),
            "Hugging Face config (*.json);;All files (*)")
        if path:
            self.set_text(path)


class ImportReviewDialog(QtWidgets.QDialog):
    """The imported session in one line and the importer's notes (assumptions, ignored input
    and why, what it used), to read before opening it; Open accepts."""

    def __init__(self, imported: Imported, path: Path, source: ImportSource,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Import {path.name}")
        self.resize(760, 520)
        layout = QtWidgets.QVBoxLayout(self)
        self.summary = QtWidgets.QLabel(f"<b>{html.escape(imported.summary)}</b><br>read from "
                                        f"the {html.escape(source.what)} {html.escape(str(path))}")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary)
        self.notes = QtWidgets.QTextBrowser()
        self.notes.setHtml(self.notes_html(imported))
        layout.addWidget(self.notes, 1)
        self.open_button = _add_buttons(self, layout, "Open as new session", self.accept)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        self.open_button.setFocus()  # Enter opens; the notes scroll with the mouse

    @staticmethod
    def notes_html(imported: Imported) -> str:
        """The sections as HTML: a heading and a list each (escaped)."""
        if not imported.sections:
            return "<p>The importer has nothing to note: every key of the file set a field.</p>"
        parts = []
        for heading, rows in imported.sections:
            items = "".join(f"<li>{html.escape(r)}</li>" for r in rows)
            parts.append(f"<h4>{html.escape(heading)} ({len(rows)})</h4><ul>{items}</ul>")
        return "".join(parts)

    def text(self) -> str:
        """The notes as plain text (what the user reads)."""
        return self.notes.toPlainText()


class RecipeDialog(QtWidgets.QDialog):
    """File > Import > Megatron-Bridge recipe: the recipe table (``vtrain import bridge
    --list``: :func:`core.cli.import_bridge.recipe_rows`) filtered by GPU kind and model; Import
    reads the selected recipe (``read``, as :class:`ImportOptionsDialog` does) and closes only
    when it is read: a refused recipe shows its reason and the dialog stays."""

    #: the plan's sizes next to the name (the name already says the model, GPU kind, GPU
    #: count and precision, which the filters also select); the verdict after them, its
    #: column at most :data:`VERDICT_WIDTH` wide (a refusal's cause in full in its tooltip)
    COLUMNS = ("recipe", "t", "p", "v", "cp", "ep", "b", "B", "vtrain", "GPUs", "precision",
               "GPU", "model")
    #: the verdict column's widest, pixels
    VERDICT_WIDTH = 200

    def __init__(self, read: Callable[[str], Imported | None],
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        from core.accuracy.bridge_recipes import BRIDGE_VERSION
        from core.cli.import_bridge import recipe_rows
        self.setWindowTitle("Import Megatron-Bridge recipe")
        self._read = read
        self.imported: Imported | None = None
        self.rows = recipe_rows()
        layout = QtWidgets.QVBoxLayout(self)
        intro = QtWidgets.QLabel(
            f"The pretraining performance recipes of {html.escape(BRIDGE_VERSION)} "
            "(<code>vtrain import bridge --recipe NAME</code>). A refused recipe runs what the "
            "simulator does not model; its row says why.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        filters = QtWidgets.QHBoxLayout()
        self.gpu_filter, self.model_filter = QtWidgets.QComboBox(), QtWidgets.QComboBox()
        for box, key, label in ((self.gpu_filter, "gpu", "GPU kind"),
                                (self.model_filter, "model", "Model")):
            box.addItem("all", None)
            for value in dict.fromkeys(r[key] for r in self.rows):
                box.addItem(value, value)
            box.currentIndexChanged.connect(self._filter)
            filters.addWidget(QtWidgets.QLabel(label))
            filters.addWidget(box)
        filters.addStretch(1)
        layout.addLayout(filters)
        self.table = QtWidgets.QTableWidget(len(self.rows), len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        muted = self.palette().color(QtGui.QPalette.ColorGroup.Disabled,
                                     QtGui.QPalette.ColorRole.Text)
        for i, r in enumerate(self.rows):
            verdict = "modelled" if r["refused"] is None else f"refused: {r['refused']}"
            values = (r["function"], r["t"], r["p"], r["v"], r["cp"], r["ep"], r["b"], r["B"],
                      verdict, r["gpus"], r["precision"], r["gpu"], r["model"])
            for j, v in enumerate(values):
                item = QtWidgets.QTableWidgetItem(str(v))
                if isinstance(v, int):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setToolTip(f"{r['function']} (megatron/bridge/perf_recipes/{r['source']})"
                                + (f": {verdict}" if r["refused"] is not None else ""))
                if r["refused"] is not None:
                    item.setForeground(muted)
                self.table.setItem(i, j, item)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.resizeColumnsToContents()
        verdict_col = self.COLUMNS.index("vtrain")
        self.table.setColumnWidth(verdict_col, min(self.table.columnWidth(verdict_col),
                                                   self.VERDICT_WIDTH))
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        # wide enough to show every column (up to the screen)
        width = sum(self.table.columnWidth(j) for j in range(len(self.COLUMNS))) + 60
        screen = self.screen().availableGeometry().width() if self.screen() else 1600
        self.resize(min(width, screen - 40), 600)
        self.table.itemDoubleClicked.connect(lambda _item: self._on_import_click())
        layout.addWidget(self.table, 1)
        self.import_button = _add_buttons(self, layout, "Import", self._on_import_click)

    def visible_recipes(self) -> list[str]:
        """The function names of the rows the filters show, in order."""
        return [r["function"] for i, r in enumerate(self.rows) if not self.table.isRowHidden(i)]

    def select(self, name: str) -> None:
        """Select the recipe ``name``'s row."""
        i = next(i for i, r in enumerate(self.rows) if r["function"] == name)
        self.table.selectRow(i)

    def selected(self) -> str | None:
        """The selected recipe's function name; None when none is selected or the filters
        hide its row (Import read a recipe of another GPU kind than the table showed)."""
        rows = [r.row() for r in self.table.selectionModel().selectedRows()
                if not self.table.isRowHidden(r.row())]
        return self.rows[rows[0]]["function"] if rows else None

    @Slot()
    def _filter(self) -> None:
        gpu, model = self.gpu_filter.currentData(), self.model_filter.currentData()
        for i, r in enumerate(self.rows):
            self.table.setRowHidden(i, bool((gpu and r["gpu"] != gpu) or
                                            (model and r["model"] != model)))
        if self.selected() is None:  # the selected row filtered out: nothing is selected
            self.table.clearSelection()

    @Slot()
    def _on_import_click(self) -> None:
        name = self.selected()
        if name is None:
            QtWidgets.QMessageBox.information(self, "No recipe", "Select a recipe to import.")
            return
        self.imported = self._read(name)
        if self.imported is not None:
            self.accept()


class ImportMenu(QtCore.QObject):
    """File > Import's entries (one per :data:`SOURCES`) and the flow: a file, the options the
    file may not say, the importer's notes, then the session opened untitled in ``window``
    (a :class:`~vtrain_gui.main_window.MainWindow`: ``maybe_save`` and ``open_session``)."""

    def __init__(self, window: QtWidgets.QMainWindow, menu: QtWidgets.QMenu) -> None:
        super().__init__(window)
        self._window = window
        self.actions = {}
        for source in SOURCES.values():
            action = menu.addAction(source.menu_text)
            action.setToolTip(f"{source.tooltip} ({source.command})")
            action.setData(source.key)
            self.actions[source.key] = action
        menu.setToolTipsVisible(True)
        menu.triggered.connect(self._on_menu_trigger)

    def read(self, source: str, path: str | Path,
             options: ImportOptions | None = None) -> Imported | None:
        """:func:`read_import`; on a refusal shows the reader's message in an error dialog and
        returns None."""
        try:
            return read_import(source, path, options)
        except IMPORT_ERRORS as exc:
            QtWidgets.QMessageBox.critical(self._window, f"Cannot import {Path(path).name}",
                                           error_text(exc))
            return None

    def import_path(self, source: str, path: str | Path,
                    options: ImportOptions | None = None) -> bool:
        """Read ``path`` as ``source`` with ``options``, show its notes, and open it as a new
        untitled session when the user accepts; False (the session on screen untouched) on a
        refusal, a cancel, or unsaved changes the user keeps."""
        imported = self.read(source, path, options)
        return imported is not None and self.review_and_open(source, Path(path), imported)

    def review_and_open(self, source: str, path: Path, imported: Imported) -> bool:
        """Show the notes (:class:`ImportReviewDialog`); on Open, ask to save unsaved changes,
        then open the session untitled."""
        dialog = ImportReviewDialog(imported, path, SOURCES[source], self._window)
        try:
            if dialog.exec() != QtWidgets.QDialog.DialogCode.Accepted:
                return False
        finally:
            dialog.deleteLater()
        if not self._window.maybe_save():
            return False
        self._window.open_session(imported.session)
        self._window.statusBar().showMessage(f"Imported {path.name}: {imported.summary}", 15000)
        return True

    def pick_recipe(self) -> bool:
        """File > Import > Megatron-Bridge recipe: :class:`RecipeDialog`, then the notes and
        the session opened as an import of a file is; False on a cancel."""
        dialog = RecipeDialog(lambda name: self.read("bridge_recipe", name), self._window)
        try:
            if dialog.exec() != QtWidgets.QDialog.DialogCode.Accepted:
                return False
            name = dialog.selected()
        finally:
            dialog.deleteLater()
        return self.review_and_open("bridge_recipe", Path(name), dialog.imported)

    @Slot(QtGui.QAction)
    def _on_menu_trigger(self, action: QtGui.QAction) -> None:
        source = SOURCES[action.data()]
        if source.key == "bridge_recipe":  # no file: a recipe picked from the table
            self.pick_recipe()
            return
        path, _ = QtWidgets.QFileDialog.getOpenFileName(
            self._window, f"Import {source.what}", str(Path.home()), source.file_filter)
        if not path:
            return
        if not source.options:
            self.import_path(source.key, path)
            return
        dialog = ImportOptionsDialog(source, Path(path),
                                     lambda opts: self.read(source.key, path, opts), self._window)
        try:
            if dialog.exec() != QtWidgets.QDialog.DialogCode.Accepted:
                return
        finally:
            dialog.deleteLater()
        self.review_and_open(source.key, Path(path), dialog.imported)
