"""The cluster of a session in a launch script's comment, written by the export, read by the import.

Megatron-LM's arguments say nothing of the GPUs' kind or the network, so a session exported to
a launch script and imported back lost them (the GPT-3 175B example: 62.0 s simulated before,
61.3 s after, on the GPU's reference network). ``vtrain export megatron-args`` now writes one
comment line::

    # vtrain: cluster gpu="A100-SXM4-80GB" gpus_per_node=8 intra_node_bandwidth_gbytes_per_s=null inter_node_bandwidth_gbits_per_s=800.0 memory_reserve_fraction=0.1

``key=value`` pairs, one per field of :class:`core.plan.cluster.ClusterConfig`; each value is a
JSON scalar (a number, ``null``, or a string in JSON's ASCII form, so no quote, space or
control character in a GPU name or path can end the value or the comment; the line also goes
through :func:`core.util.text.shell_comment`). ``vtrain import megatron-args`` reads it back
(:func:`apply_cluster_comment`): the comment's fields replace the defaults, an explicit
``--gpu`` / ``--gpus-per-node`` wins over it, and the launcher's processes per node win over
its ``gpus_per_node`` when the two disagree (the script was edited for other nodes).
A malformed comment is refused naming the file, the line and the key (exit status 2).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from core.plan.cluster import ClusterConfig, processes_per_host
from core.plan.session import Session
from core.util.text import shell_comment

__all__ = ["MARK", "cluster_comment", "read_cluster_comment", "apply_cluster_comment"]

#: How the line starts (after ``#`` and spaces).
MARK = "vtrain: cluster"

_FIELDS = {f.name for f in dataclasses.fields(ClusterConfig)}
_LINE = re.compile(r"^[ \t]*#[ \t]*vtrain:[ \t]*cluster(?:[ \t]+(?P<rest>.*))?$")
_PAIR = re.compile(r'[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>"(?:[^"\\]|\\.)*"|[^\s"]+)')
#: What each field's value may be in the comment (bounds are the session rules', checked later).
_KINDS = {"gpu": (str,), "gpus_per_node": (int,), "intra_node_bandwidth_gbytes_per_s":
          (int, float, type(None)), "inter_node_bandwidth_gbits_per_s": (int, float, type(None)),
          "profile_path": (str, type(None)), "memory_reserve_fraction": (int, float)}


def cluster_comment(cluster: ClusterConfig) -> str:
    """The comment line (no line break) that holds ``cluster``'s fields."""
    pairs = [f"{f.name}={json.dumps(getattr(cluster, f.name), ensure_ascii=True)}"
             for f in dataclasses.fields(cluster)]
    return shell_comment(f"{MARK} " + " ".join(pairs))


def read_cluster_comment(text: str, source: str = "launch") -> dict[str, Any] | None:
    """The cluster fields of the last ``# vtrain: cluster`` line of ``text``, or None.

    Raises
    ------
    ValueError
        A pair that is not ``key=JSON`` or a key that is not a cluster field, or a value of
        the wrong kind (named: ``FILE line N: cluster comment: ...``).
    """
    found: dict[str, Any] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.match(line)
        if not m:
            continue
        rest, pos, fields = (m.group("rest") or "").rstrip(), 0, {}
        where = f"{source} line {n}: cluster comment"
        while pos < len(rest):
            p = _PAIR.match(rest, pos)
            if not p:
                raise ValueError(f"{where}: {rest[pos:pos + 40].strip()!r} is not key=value")
            key = p.group("key")
            if key not in _FIELDS:
                raise ValueError(f"{where}: {key} is not a cluster field (the fields are "
                                 f"{', '.join(sorted(_FIELDS))})")
            try:
                value = json.loads(p.group("value"))
            except ValueError:
                raise ValueError(f"{where}: {key}={p.group('value')} is not a JSON value") from None
            if not isinstance(value, _KINDS[key]) or isinstance(value, bool):
                raise ValueError(f"{where}: {key}={p.group('value')} is not a "
                                 f"{' or '.join(k.__name__ for k in _KINDS[key])}")
            fields[key] = value
            pos = p.end()
        found = fields
    return found


def apply_cluster_comment(session: Session, text: str, source: str, *, launcher_nproc:
                          int | None = None, gpu: str | None = None,
                          gpus_per_node: int | None = None) -> tuple[Session, str | None]:
    """``session`` with the cluster of ``text``'s comment, and a note saying what it took.

    ``gpu`` / ``gpus_per_node``: given on the command line, they win over the comment.
    ``launcher_nproc``: the launcher's processes per node; the comment's ``gpus_per_node`` is
    taken only when the launcher agrees (the export runs
    :func:`core.plan.cluster.processes_per_host` per host).
    Raises ValueError for a malformed comment (:func:`read_cluster_comment`).
    """
    fields = read_cluster_comment(text, source)
    if fields is None:
        return session, None
    fields = dict(fields)
    if gpu is not None:
        fields.pop("gpu", None)
    gpn = fields.get("gpus_per_node")
    world = session.plan.num_gpus if hasattr(session.plan, "num_gpus") else None
    agrees = True  # the launcher runs what the export of the comment's cluster runs per host
    if gpn is not None and launcher_nproc is not None and world:
        kind = gpu or fields.get("gpu", session.cluster.gpu)
        agrees = launcher_nproc == processes_per_host(
            dataclasses.replace(session.cluster, gpu=kind, gpus_per_node=gpn), world)
    if gpus_per_node is not None or not agrees:
        fields.pop("gpus_per_node", None)
    cluster = dataclasses.replace(session.cluster, **fields)
    return dataclasses.replace(session, cluster=cluster), (
        "the cluster (" + ", ".join(sorted(fields)) + ") from the '# vtrain: cluster' comment")
