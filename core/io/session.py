"""Versioned session files (JSON, never pickle) with atomic saves.

A session file is one JSON object::

    {"format": "vtrain-session", "version": 1,
     "model": {...}, "plan": {...}, "cluster": {...}, "cost": {...}, "reliability": {...},
     "notes": "",
     "sweep": {"space": {...}, "deadline_days": ..., "result": {...}},
     "studies": {"optimal": {...}, "schedule": {...}}}

``reliability`` (failures, restarts and checkpoints, :class:`core.plan.cluster.ReliabilityConfig`)
is optional: a file without it takes the documented defaults (docs/goodput.md); the writer
always writes it. ``sweep`` (the Explore tab's sweep settings) and ``studies`` (the Studies
tab's settings) are optional in version 1 and written only when set, so files
without them load and save unchanged. The writer writes every model field; a
reader requires them all, except in the first release's version-1 files, whose
model section holds only the GPT shape (name, L, h, a, f, s, V) and is read as a
GPT model (docs/simulator.md, "Inputs").

Readers dispatch on ``version``; a newer version than this build knows is a
clear error. Saving writes a temporary file in the same folder and renames it
over the target, so a crash never leaves a half-written session.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from core.util.atomic import atomic_target
from core.io.vtrain_json import looks_like_vtrain_config, vtrain_config_from_dict
from core.plan.fields import ConfigError, FieldError
from core.plan.rules import check
from core.plan.session import Session
from core.util.inputs import read_json_file, strict_dumps

__all__ = ["SESSION_FORMAT", "SESSION_VERSION", "SessionFileError", "save_session",
           "load_session", "load_any", "session_to_json", "atomic_write_text"]

SESSION_FORMAT = "vtrain-session"
SESSION_VERSION = 1


class SessionFileError(ValueError):
    """A session or config file cannot be read; the message names the file and the problem."""


def session_to_json(session: Session) -> str:
    """Serialize to the session JSON text (stable key order, trailing newline)."""
    doc: dict[str, Any] = {"format": SESSION_FORMAT, "version": SESSION_VERSION}
    doc.update(session.to_dict())
    return strict_dumps(doc, "session", indent=2) + "\n"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    with atomic_target(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def save_session(session: Session, path: str | Path) -> None:
    """Save ``session`` to ``path`` atomically. Raises ``OSError`` if the folder is not writable.

    A ``cluster.profile_path`` inside the target's folder is written relative to it (the
    reader resolves it against the file's folder), so a folder of sessions and stores can
    be moved as a whole; others are written as they are.
    """
    path = Path(path)
    store = session.cluster.profile_path
    if store and Path(store).is_absolute():
        folder = Path(os.path.abspath(path)).parent
        try:
            rel = Path(store).relative_to(folder)
        except ValueError:
            rel = None
        if rel is not None:
            session = session.copy()
            session.cluster.profile_path = rel.as_posix()
    atomic_write_text(path, session_to_json(session))


def load_session(path: str | Path) -> Session:
    """Read a session file.

    A relative ``cluster.profile_path`` is resolved against the session file's folder
    (never the working folder), so the file means the same wherever it is opened from.

    Raises
    ------
    SessionFileError
        The file is missing, not a regular file, too large, not JSON, nested too deeply,
        not a session file, of a newer version, lacks a required field, or holds invalid
        fields (the message names the file and lists them).
    """
    path = Path(path)
    session = session_from_document(read_json(path, SessionFileError), str(path), path.parent)
    session.source = str(path)
    return session


def read_json(path: str | Path, error: type[Exception] = SessionFileError,
              encoding: str = "utf-8-sig") -> Any:
    """Parse the JSON file at ``path`` (:func:`core.util.inputs.read_json_file`: regular files of
    bounded size, bounded nesting, finite numbers only).

    Raises
    ------
    error
        The file cannot be read or is not such JSON; the message names the file.
    """
    return read_json_file(path, error)


#: Sections a session file must have (cluster, cost and sweep fall back to defaults).
#: Inside a section, the fields whose metadata says ``required`` must be given
#: (:func:`core.plan.model_config.missing_required`): every model field (``null`` where it may be empty:
#: ``ffn_hidden_size`` null is 4h), and the plan's t, p, d, b, B, recompute and precision
#: (schedule defaults to Megatron-LM's 1F1B); a first-release file's model section of only
#: the GPT shape (:data:`core.plan.model_config.GPT_SHAPE_FIELDS`) is a GPT model. Cluster and cost
#: fields have documented defaults (docs/simulator.md, "Inputs").
REQUIRED_SECTIONS = ("model", "plan")


def session_from_document(doc: Any, where: str = "session", base: str | Path | None = None
                          ) -> Session:
    """Convert a parsed session document, checking format, version, required fields, types
    and bounds. With ``base`` (the file's folder), a relative ``cluster.profile_path`` is made
    absolute against it."""
    if not isinstance(doc, dict) or doc.get("format") != SESSION_FORMAT:
        raise SessionFileError(f"{where}: not a vTrain session file (missing \"format\": "
                               f"\"{SESSION_FORMAT}\")")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SessionFileError(f"{where}: \"version\" must be an integer, got {version!r}")
    if version > SESSION_VERSION:
        raise SessionFileError(f"{where}: session file version {version} is newer than this "
                               f"program supports (version {SESSION_VERSION}); update vtrain")
    if version < 1:
        raise SessionFileError(f"{where}: unknown session file version {version}")
    body = {k: v for k, v in doc.items() if k not in ("format", "version")}
    missing = [name for name in REQUIRED_SECTIONS if name not in body]
    if missing:  # a default model or plan would be simulated without the user asking for it
        from core.util.text import did_you_mean
        known = [f.name for f in dataclasses.fields(Session)]
        hints = {k: did_you_mean(k, known) for k in body if k not in known}
        typos = "".join(f"; {k}: unknown section{h}" for k, h in sorted(hints.items(), key=str)
                        if h)
        raise SessionFileError(f"{where}: missing section{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(repr(m) for m in missing)}; a session names its "
                               f"model and its parallel plan{typos}")
    try:
        session = Session.from_dict(body, require=True)
    except ConfigError as exc:
        raise SessionFileError(f"{where}: {exc}") from None
    path = session.cluster.profile_path
    if base is not None and path and not Path(os.path.expanduser(path)).is_absolute():
        session.cluster.profile_path = str(Path(os.path.abspath(Path(base) / path)))
    pinned = (session.compare or {}).get("pinned", {}).get("cluster")
    path = pinned.get("profile_path") if isinstance(pinned, dict) else None
    if base is not None and isinstance(path, str) and path \
            and not Path(os.path.expanduser(path)).is_absolute():  # the pinned plan's store alike
        pinned["profile_path"] = str(Path(os.path.abspath(Path(base) / path)))
    return session


#: The importer for another tool's file that a user may give where a session belongs, by the
#: file's suffix (the file is not read for it): named when such a file is not JSON.
_IMPORTER_BY_SUFFIX = {
    ".sh": "a Megatron-LM launch script? vtrain import megatron-args turns it into a session",
    ".bash": "a Megatron-LM launch script? vtrain import megatron-args turns it into a session",
    ".sbatch": "a Megatron-LM launch script? vtrain import megatron-args turns it into a session",
    ".slurm": "a Megatron-LM launch script? vtrain import megatron-args turns it into a session",
    ".toml": "a torchtitan job config? vtrain import torchtitan turns it into a session",
    ".yaml": "a Megatron-Bridge run_config.yaml? vtrain import bridge turns it into a session "
             "(with --gpu KIND --num-gpus N, which the file does not keep)",
    ".yml": "a Megatron-Bridge run_config.yaml? vtrain import bridge turns it into a session "
            "(with --gpu KIND --num-gpus N, which the file does not keep)",
}


def load_any(path: str | Path, *, validate: bool = True, profile_path: str | None = None
             ) -> Session:
    """Read a session file or a vTrain authors'-format config, detected from its content.

    With ``validate`` the configuration rules are checked too. ``profile_path`` (an absolute
    path: the command line's ``--profile``) replaces the file's ``cluster.profile_path`` before
    they are, so a GPU kind without a shipped store passes the rules with that store.

    Raises
    ------
    SessionFileError
        Unreadable file or a file of neither format.
    ConfigError
        The file parses but breaks configuration rules.
    """
    path = Path(path)
    try:
        doc = read_json(path)
    except SessionFileError as exc:
        hint = _IMPORTER_BY_SUFFIX.get(path.suffix.lower())
        if hint is None or "not a valid JSON file" not in str(exc):
            raise
        raise SessionFileError(f"{exc}; {hint}") from None
    try:
        if isinstance(doc, dict) and "format" in doc:
            session = session_from_document(doc, str(path), path.parent)
            if profile_path:
                session.cluster.profile_path = profile_path
            if validate:
                check(session)
        elif looks_like_vtrain_config(doc):
            session = vtrain_config_from_dict(doc, source=str(path), check_rules=validate,
                                              profile_path=profile_path or None)
        else:
            session = None
    except ConfigError as exc:
        raise exc.in_file(path) from None
    if session is not None:
        session.source = str(path)  # named in later errors (e.g. its profile store's)
        return session
    hf = isinstance(doc, dict) and ("architectures" in doc or "model_type" in doc)
    raise SessionFileError(f"{path}: neither a vTrain session file nor a vTrain config "
                           f"(no \"format\" or \"tensor_parallel_size\" key)"
                           + ("; it has a Hugging Face config's architectures / model_type: "
                              "vtrain import hf turns it into a session" if hf else ""))


__all__ += ["session_from_document", "FieldError", "read_json"]
