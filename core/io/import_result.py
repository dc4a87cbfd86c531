"""What an importer returns, and how it refuses: shared by the Hugging Face, Megatron-LM and
torchtitan importers.

What belongs here: :class:`ImportResult` (the session an importer read and what it did with
the rest of its input: which keys it used, which it lists as ignored and why, what it
noted), and the one refusal rule the importers share: a key the simulator does not model is
refused by name (:func:`refusal`) unless its value switches it off
(:func:`switched_off_or_refuse`), in which case it is listed with what it would change.
Importer-specific results add their own fields (:class:`core.io.hf_import.HFImport`: the
architecture; :class:`core.io.megatron.to_session.MegatronImport`: the launch and the
neutral and unknown arguments).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.plan.fields import ConfigError, FieldError
from core.util.text import short_repr
from core.plan.session import Session

__all__ = ["ImportResult", "cluster_of_gpu", "global_batch_note", "seq_length_note", "positive_int", "refusal", "switched_off",
           "switched_off_or_refuse"]


@dataclass
class ImportResult:
    """A session read by an importer, and what of its input it does not use.

    Attributes
    ----------
    session : Session
    used : dict of str to str
        Input key -> what it set (the session field, or the check it passed), in the
        input's order.
    ignored : dict of str to str
        Input key -> why it is not modelled (it may change the iteration time) or changes
        nothing, in the order the importer met them.
    notes : list
        What the reader should know about the session (an assumption, how an input whose
        meaning needs saying was read): text, one entry each (the Megatron importer's
        entries are ``(about, text)`` pairs).
    """

    session: Session
    used: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)
    notes: list[Any] = field(default_factory=list)


def global_batch_note(global_batch_size: int) -> str:
    """The note of an import whose input does not give the run's global batch: how many
    sequences the session has (``plan.global_batch_size``, a default, not the run's) and how to
    set the run's. One text for the Hugging Face and torchtitan imports and ``vtrain import
    preset``; the sweep and the iteration time depend on it, so it is never written silently.
    """
    return (f"global batch {global_batch_size:,} sequences: a default, the input does not give "
            "the run's; set it with vtrain simulate/sweep --set plan.global_batch_size=N (e.g. "
            "1024), or in the window")


def seq_length_note(seq_length: int, source: str) -> str:
    """The note of an import that chose the sequence length the session trains at
    (``model.seq_length``, ``seq_length`` tokens) from ``source`` (``"the config's
    max_position_embeddings"``, ``"the preset's"``) rather than from the user: the length and how
    to set another. Memory and the iteration time grow with it, so it is never written
    silently."""
    return (f"sequence length {seq_length:,} tokens: {source}; give --seq-length S to import "
            "another, or set it with vtrain simulate/sweep --set model.seq_length=S, or in the "
            "window")


def cluster_of_gpu(gpu: str | None, base=None):
    """The cluster of GPU kind ``gpu`` (``--gpu``; other tools' names read by
    :func:`core.plan.cluster.gpu_kind`): ``base`` (default: a default
    :class:`core.plan.cluster.ClusterConfig`) on that kind, one node its NVLink domain
    (:data:`core.plan.cluster.GPU_NVLINK_DOMAIN`); ``base`` itself (or the default) when
    ``gpu`` is None. The importers' and the command line's ``--gpu``.

    Raises
    ------
    ConfigError
        ``gpu`` is not a shipped kind (named ``--gpu``, the kinds listed).
    """
    import dataclasses

    from core.plan.cluster import GPU_KINDS, GPU_NVLINK_DOMAIN, ClusterConfig, gpu_kind
    cluster = base if base is not None else ClusterConfig()
    if gpu is None:
        return cluster
    kind = gpu_kind(gpu)
    if kind not in GPU_KINDS:
        raise ConfigError([FieldError("--gpu", f"{short_repr(gpu)}: known kinds are "
                                      + ", ".join(GPU_KINDS))])
    return dataclasses.replace(cluster, gpu=kind, gpus_per_node=GPU_NVLINK_DOMAIN[kind])


def refusal(where: str, key: str, message: str) -> ConfigError:
    """The error that refuses ``key`` of the file ``where`` (the field named ``where: key``)."""
    return ConfigError([FieldError(f"{where}: {key}", message)])


def positive_int(cfg: dict[str, Any], name: str, where: str, required: bool = True) -> int | None:
    """``cfg[name]``, a positive integer (None when absent and not ``required``).

    Raises ConfigError (:func:`refusal`) naming the field when it is missing and required or
    not a positive integer."""
    v = cfg.get(name)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        if name not in cfg:
            raise refusal(where, name, "missing (a positive integer is needed)")
        raise refusal(where, name, f"{short_repr(v)} must be a positive integer")
    return v


def switched_off(value: Any, inert: tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of the ``inert`` values that switch a refused key off (the
    same object, or equal and of the same type: ``0`` does not switch off a key whose off
    value is ``False``)."""
    return any(value is x or (value == x and type(value) is type(x)) for x in inert)


def switched_off_or_refuse(where: str, key: str, value: Any, change: str,
                           inert: tuple[Any, ...]) -> str:
    """Why a refused key is listed when its ``value`` switches it off.

    Parameters
    ----------
    where, key : str
        The file and the key (for the message).
    value : Any
        The key's value in the file.
    change : str
        What the key would change when on (what the simulator does not model).
    inert : tuple
        The values that switch it off (:func:`switched_off`).

    Raises
    ------
    ConfigError
        ``value`` switches it on: refused by name (:func:`refusal`), with what it would change.
    """
    if not switched_off(value, inert):
        raise refusal(where, key, f"{short_repr(value)}: not modelled: {change}")
    return f"{short_repr(value)}: off (when on: {change})"
