"""Helpers shared by the subcommands of ``vtrain`` (:mod:`core.cli`).

Subcommand modules import from here, never from :mod:`core.cli` itself, so the
package has no import cycle.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from contextlib import contextmanager

from core.plan.cluster import CostConfig
from core.plan.fields import BOUNDS, ConfigError, FieldError, check_value
from core.io.session import load_any
from core.util.text import format_days

__all__ = ["UsageError", "field_error", "session_from_args", "apply_sets", "SET_HELP",
           "decimal_arg", "integer_arg", "workers_arg",
           "check_number", "fmt_bytes", "GiB", "verdict_markup", "check_outputs",
           "session_inputs", "row_progress", "GPU_HELP", "cluster_of_gpu", "plan_fit_note",
           "SignalCancel", "cancel_on_signals", "NO_TIGHT_HELP", "NO_TIGHT_OPTIMAL_HELP", "NO_TIGHT_OPTIMAL_NOTE",
           "tight_front_text", "tight_front_note", "megatron_lm_options"]

GiB = 2**30


class SignalCancel:
    """A sweep's ``cancel`` set by a signal (:func:`cancel_on_signals`): ``event`` (a
    :class:`threading.Event`) and ``signum``, the signal that set it (None until one does)."""

    def __init__(self) -> None:
        import threading
        self.event = threading.Event()
        self.signum: int | None = None

    def __call__(self, signum: int, _frame: object = None) -> None:
        self.signum = signum
        self.event.set()

    def exit_status(self) -> int:
        """128 plus the signal's number (130 for SIGINT, 143 for SIGTERM), the shell's
        convention for a command ended by a signal."""
        return 128 + int(self.signum or 2)


@contextmanager
def cancel_on_signals():
    """Within the block, SIGINT (Ctrl+C) and SIGTERM set the yielded :class:`SignalCancel`
    instead of ending the process, so a sweep given its ``event`` as ``cancel`` stops within
    0.5 s and shuts its worker processes down (a SIGTERM used to end the command at once and
    leave a worker running). The previous handlers come back after the block. Off the main
    thread (where no handler can be set) nothing is installed."""
    import signal
    import threading
    cancel = SignalCancel()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, cancel)
    try:
        yield cancel
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def field_error(field: str, msg: str) -> ConfigError:
    """A :class:`~core.plan.fields.ConfigError` for one ``field`` (an option or a file) and its rule."""
    return ConfigError([FieldError(field, msg)])


#: ``--gpu`` help of the commands that write a session with a default cluster (import hf, preset).
GPU_HELP = ("GPU kind (default A100-SXM4-80GB; other tools' names such as \"H100 SXM\" are "
            "read too): {}; the node is the kind's NVLink domain (72 GPUs for GB200-NVL72)")


def cluster_of_gpu(text: str, base=None):
    """The cluster of ``--gpu TEXT`` (:func:`core.io.import_result.cluster_of_gpu`): ``base``
    (default: a default :class:`~core.plan.cluster.ClusterConfig`) on that shipped GPU kind
    (:func:`core.plan.cluster.gpu_kind` reads other tools' names), one node its NVLink domain.

    Raises
    ------
    ConfigError
        ``--gpu``: no shipped GPU kind (the message lists them).
    """
    from core.io.import_result import cluster_of_gpu as of_gpu
    return of_gpu(text, base)


def check_outputs(outputs, inputs, folders: bool = False) -> None:
    """Refuse, before anything is read, computed or written, an output path the command could
    not write at the end: every output option of every command calls this first, so no work
    is lost to a typo in a path.

    ``outputs`` are ``(option, path)`` pairs (``("--out", "train.sh")``), ``inputs`` paths;
    a None path (the option not given) is left out. An output is refused when

    - it is empty (``--out ""`` wrote nothing while the command reported success, or failed
      at the end on the folder ``.``);

    - it is an existing folder (a file is written there), or its folder does not exist, is
      not a folder or is not writable -- really: a trial save creates a temporary file
      there and removes it (:func:`core.util.atomic.check_save`), since ``os.access`` says
      yes to root where no file can be made (``/proc``, a read-only file system); with
      ``folders`` (``--out-dir``, made with its parents) the path is a folder to make:
      refused when it is an existing file or the nearest existing folder above it is not
      writable (the same trial there);
    - it is one of the inputs, or two outputs are one file (compared with
      :func:`core.util.atomic.same_file`: through symbolic and hard links).

    Raises
    ------
    ConfigError
        Named ``OPTION PATH``, with the rule it breaks (exit status 2).
    """
    from core.util.atomic import same_file
    for option, path in outputs:
        if path is not None and not str(path):
            raise field_error(option, "an empty path: give a file name")
    outs = [(option, str(path)) for option, path in outputs if path]
    ins = [str(path) for path in inputs if path]
    for option, out in outs:
        msg = _folder_problem(out) if folders else _file_problem(out)
        if msg:
            raise field_error(f"{option} {out}", msg)
    for i, (option, out) in enumerate(outs):
        for inp in ins:
            if same_file(out, inp):
                raise field_error(f"{option} {out}", f"is the input {inp} (one file): writing "
                                                     "it would replace the input; give another file")
        for other, path in outs[i + 1:]:
            if same_file(out, path):
                raise field_error(f"{option} {out}", f"is also the output of {other} {path}: "
                                                     "give two files")


def _file_problem(out: str) -> str | None:
    """Why the file ``out`` cannot be written (its folder missing or read-only, or ``out`` a
    folder), or None."""
    path = os.path.abspath(os.path.expanduser(out))
    if os.path.isdir(path):
        return "is a folder: give a file name"
    folder = os.path.dirname(path)
    if not os.path.exists(folder):
        return f"the folder {folder} does not exist"
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return _trial_problem(path, folder)


def _trial_problem(path: str, folder: str) -> str | None:
    """Why a trial save of ``path`` (:func:`core.util.atomic.check_save`: a temporary file
    really created beside it and removed) fails, or None: ``os.access`` says yes to root
    where no file can be made (``/proc``, a read-only file system), and the save would fail
    only after the work."""
    from core.util.atomic import check_save
    try:
        check_save(path)
    except OSError as exc:
        why = exc.strerror or str(exc)
        return (f"cannot be written: {why} (a trial save before the work failed: a "
                f"temporary file created in the folder {folder} and removed)")
    return None


def _folder_problem(out: str) -> str | None:
    """Why the folder ``out`` (made with its parents) cannot be made or written, or None."""
    path = os.path.abspath(os.path.expanduser(out))
    if os.path.exists(path) and not os.path.isdir(path):
        return "is a file: give a folder"
    above = path
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        return f"{above} is a file, not a folder: the folder cannot be made"
    if not os.access(above, os.W_OK | os.X_OK):
        return f"the folder {above} is not writable"
    # a file made and removed in the nearest existing folder (where the folder is made)
    return _trial_problem(os.path.join(above, ".vtrain-write-check"), above)


def plan_fit_note(session, path) -> str | None:
    """The note of an import whose written session (saved at ``path``) has a plan that does not
    fit in the GPU's memory: the need per GPU of its largest stage, the capacity and the
    command that finds plans that fit (``vtrain sweep PATH``); None when it fits. The verdict
    is simulate's (:func:`core.sim.simulate.memory_verdict` of
    :func:`core.sim.simulate.stage_memory` against the session's profile store's memory), so
    the import and ``vtrain simulate`` never disagree.

    Raises whatever opening the session's profile store raises (a missing or bad store)."""
    from core.sim.report import gib_texts
    from core.sim.simulate import memory_verdict, session_profile, stage_memory
    store = session_profile(session)
    capacity = float(store.memory_bytes)
    need, fits, _ = memory_verdict(stage_memory(session, store), capacity)
    if fits:
        return None
    need_text, cap_text = gib_texts(need, capacity)
    return (f"plan {session.plan.label()} does not fit: it needs {need_text} GiB per GPU, the "
            f"{session.cluster.gpu} has {cap_text} GiB; find plans that fit with "
            f"vtrain sweep {path}")


def session_inputs(session) -> list[str]:
    """The files ``session`` makes a command read besides itself: its profile store, if any."""
    path = getattr(session.cluster, "profile_path", None)
    return [path] if path else []


@contextmanager
def row_progress(what: str, json_output: bool, long_s: float = 10.0):
    """Yield a ``progress(done, total)`` callback for long row-by-row work (``validate``'s
    reading and predicting), shown on stderr while the block runs.

    On a terminal's stderr: a transient rich bar (``what``, rows done of all, time). Elsewhere
    (a pipe, a log): one plain line on stderr every ``long_s`` seconds once the work has run
    that long. With ``json_output`` it yields None and shows nothing (the output is the
    JSON alone).
    """
    import time

    from core.util.console import Console, esc, printable
    if json_output:
        yield None
        return
    err = Console(stderr=True)
    if err.is_terminal:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        with Progress(TextColumn(esc(what)), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            task = bar.add_task(what, total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    start = time.monotonic()
    shown = [start]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - shown[0] >= long_s:
            shown[0] = now
            err.print(f"{printable(what)}: {done:,} of {total:,} rows ({now - start:,.0f} s)",
                      markup=False, highlight=False)
    yield progress


#: Training days as the command line prints them (:func:`core.util.text.format_days`).
fmt_days = format_days


def fmt_bytes(n: float) -> str:
    """``n`` bytes as GiB with one decimal, e.g. ``"1.5 GiB"``."""
    return f"{n / GiB:,.1f} GiB"


#: Help of the ``--set`` option of the commands that read a session.
#: The sections ``--set`` may change (the session's dataclass sections).
_SET_SECTIONS = ("model", "plan", "cluster", "cost", "reliability")

SET_HELP = ("set one field of the session, SECTION.FIELD=VALUE (repeatable), e.g. "
            "--set plan.tensor_parallel=4 --set cluster.gpu=H100-SXM5-80GB; the value is read "
            "as JSON (4, true, null, \"x\") or else as text; a field given twice takes the last "
            "value, as repeated options do; the file is not changed")


def decimal_arg(text: str) -> float:
    """argparse ``type`` of a number option: decimal digits only (``float()`` reads ``1_5`` as
    15), never a subnormal number nor one below that which reads as 0.0 (``1e-400``); NaN and infinity pass, for the option's own check to refuse
    by name."""
    from core.util.inputs import DecimalUnderflowError, decimal_number
    try:
        value = decimal_number(text)
    except DecimalUnderflowError as exc:  # 1e-400: never read as 0.0
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if 0.0 < abs(value) < sys.float_info.min:
        raise argparse.ArgumentTypeError(f"{text!r} is a subnormal number (under 2.2e-308 in "
                                         "magnitude)")
    return value


def path_arg(text: str) -> str:
    """argparse ``type`` of a file or folder option: any path but the empty one (``--profile
    ""`` used the shipped store, ``--into ""`` exported a new script, ``simulate ""`` read the
    folder ``.``)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path: give a file name")
    return text


def integer_arg(text: str) -> int:
    """argparse ``type`` of a whole-number option: ASCII digits only (``int()`` reads ``1_000``
    as 1000 and other scripts' digits too); the option's own check bounds it."""
    import re
    t = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,4000}", t, re.ASCII):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    return int(t)


def apply_sets(session, sets: list[str] | None, option: str = "--set"):
    """``session`` with each ``SECTION.FIELD=VALUE`` of ``sets`` applied (a new session);
    ``option`` is the command-line option that gave them (``--set``, ``vtrain diff``'s
    ``--set-b``), which the errors and the session's ``source`` name.

    The value is JSON when it parses (``4``, ``1.5``, ``true``, ``null``, ``"text"``), else
    the text itself. Every value is checked as a session file's would be (type, bounds,
    choices: :meth:`core.plan.session.Session.from_dict`); the configuration rules are the
    caller's to check.

    Raises
    ------
    ConfigError
        A malformed ``--set``, an unknown section or field, or a value of the wrong type, out
        of bounds or not among the choices (named ``OPTION SECTION.FIELD``, ``--set
        plan.tensor_parallel``).
    """
    from core.plan.session import Session
    from core.util.inputs import parse_json_or_text
    if not sets:
        return session
    doc = session.to_dict()
    named: dict[str, str] = {}
    for item in sets:
        path, eq, text = item.partition("=")
        section, dot, name = path.strip().partition(".")
        if not eq or not dot or not name or section not in _SET_SECTIONS:
            raise ConfigError([FieldError(f"{option} {item}", "give SECTION.FIELD=VALUE with "
                                          "SECTION one of " + ", ".join(_SET_SECTIONS))])
        try:
            value = parse_json_or_text(text, ValueError)
        except ValueError as exc:
            raise field_error(f"{option} {section}.{name}", str(exc)) from None
        if (section, name) == ("cluster", "gpu") and isinstance(value, str):
            from core.plan.cluster import gpu_kind
            value = gpu_kind(value)  # other tools' names ("H800", "H100 SXM"), as --gpu reads them
        doc[section][name] = value
        named[f"{section}.{name}"] = f"{option} {path.strip()}"
    _follow_node(session, doc, named)
    try:
        out = Session.from_dict(doc)
    except ConfigError as exc:
        raise ConfigError([FieldError(named.get(e.field, e.field), e.message, rule=e.rule)
                           for e in exc.errors]) from None
    # later errors name the file as changed (sweeps check the session after this)
    out.source = (f"{session.source} with " + " ".join(f"{option} {x}" for x in sets)
                  if session.source else None)
    out.key_names = None  # --set speaks the session's field names
    return out


def _follow_node(session, doc: dict, named: dict[str, str]) -> None:
    """A GPU kind ``--set`` gives takes the new kind's node where the session had the old
    kind's (:func:`core.plan.cluster.on_gpu_kind`, as the editor does): the GPUs per node of
    its NVLink domain (8 on HGX boards, 72 for a GB200 NVL72 rack) and the network per node of
    its NICs; a value the session set to something else, or ``--set`` gives too, stays."""
    from core.plan.cluster import GPU_NVLINK_DOMAIN, NODE_FIELDS, on_gpu_kind
    new_gpu = doc["cluster"].get("gpu")
    if "cluster.gpu" not in named or not isinstance(new_gpu, str) or \
            new_gpu not in GPU_NVLINK_DOMAIN:
        return
    old = session.cluster
    named_size = doc["cluster"].get("gpus_per_node") if "cluster.gpus_per_node" in named else None
    moved = on_gpu_kind(old, new_gpu, named_size if isinstance(named_size, int)
                        and not isinstance(named_size, bool) and named_size > 0 else None)
    for name in NODE_FIELDS:
        if f"cluster.{name}" not in named and getattr(moved, name) != getattr(old, name):
            doc["cluster"][name] = getattr(moved, name)


def check_profile_option(path: str, option: str = "--profile", opener=None):
    """The store ``--profile`` (or ``option``) names, opened with ``opener`` (default
    :func:`core.sim.simulate.open_profile`, cached: the simulation reuses it; a calibration
    passes ``ProfileStore.open`` for a copy of its own); refused naming that option
    (ConfigError, exit 2): a missing file said so, an unreadable one with the store reader's
    message. The user gave this path on the command line, so whether it exists is told; a path
    a session file names is not (:func:`core.sim.simulate.session_profile`)."""
    from core.sim.simulate import open_profile
    from core.store.format import ProfileStoreError
    if not os.path.exists(path):
        raise field_error(option, f"{path}: no such file")
    try:
        return (opener or open_profile)(path)
    except ProfileStoreError as exc:
        raise field_error(option, str(exc)) from None


def session_from_args(args: argparse.Namespace, validate: bool = True,
                      note_gpu_count: bool = False):
    """Load ``args.path`` (checking the configuration rules with ``validate``) and apply
    ``--set`` (:func:`apply_sets`), ``--profile``, ``--tokens`` and ``--price-per-gpu-hour``;
    with ``note_gpu_count`` (a command that runs the session's own plan), a note on standard
    error when ``--set`` changed its GPU count."""
    sets = getattr(args, "set", None)
    profile = getattr(args, "profile", None)
    if profile:  # part of the cluster before the rules: a GPU kind without a shipped store passes
        check_profile_option(profile)
        profile = os.path.abspath(profile)  # links kept: messages name the path given
    session = load_any(args.path, validate=validate and not sets, profile_path=profile or None)
    if sets:
        from core.plan.rules import check
        before = getattr(session.plan, "num_gpus", None)
        old_cluster = session.cluster
        session = apply_sets(session, sets)
        given = {s.split("=", 1)[0].strip() for s in sets}
        for name, what in (("gpus_per_node", "its NVLink domain as the node: {new:,g} GPUs "
                                              "(was {old:,g})"),
                           ("inter_node_bandwidth_gbits_per_s", "its node's network: {new:,g} "
                                                                "Gb/s (was {old:,g}, the old "
                                                                "kind's node)")):
            old, new = getattr(old_cluster, name), getattr(session.cluster, name)
            if new != old and f"cluster.{name}" not in given:  # moved by the GPU kind
                from core.plan.cluster import has_reference_network
                from core.util.text import printable
                if name != "gpus_per_node" and not has_reference_network(old_cluster):
                    what = ("the node's network at the same share per GPU: {new:,g} Gb/s for "
                            f"{session.cluster.gpus_per_node:,} GPUs (was {{old:,g}} for "
                            f"{old_cluster.gpus_per_node:,})")
                print(printable(f"note: --set cluster.gpu={session.cluster.gpu} takes "
                                + what.format(new=new, old=old)
                                + f"; --set cluster.{name}=N for another"), file=sys.stderr)
        if note_gpu_count:
            _note_gpu_count(before, session.plan, sets)
        if profile:
            session.cluster.profile_path = profile
        if validate:
            try:
                check(session)
            except ConfigError as exc:  # named "FILE with --set ..." (apply_sets' source)
                raise session.in_its_terms(exc) from None
    for option, name in (("--tokens", "training_tokens"),
                         ("--price-per-gpu-hour", "price_per_gpu_hour_usd")):
        value = getattr(args, option[2:].replace("-", "_"), None)
        if value is None:
            continue
        f = next(f for f in dataclasses.fields(CostConfig) if f.name == name)
        msg = check_value(option, f, value)  # the field's own type and bounds, named by option
        if msg:
            raise ConfigError([FieldError(option, msg)])
        setattr(session.cost, name, value)
    return session


def _note_gpu_count(before: int | None, plan, sets: list[str]) -> None:
    """A note on standard error when ``--set`` changed the plan's GPU count (t*p*cp*d): a
    changed t with d held halves or doubles the cluster, which the headline alone shows; with
    the d that keeps the count where one does."""
    after = getattr(plan, "num_gpus", None)
    if before is None or after is None or before == after or any(
            s.split("=", 1)[0].strip() == "plan.data_parallel" for s in sets):
        return
    from core.util.text import printable
    rest = after // plan.data_parallel
    d = before // rest
    keep = (f"; --set plan.data_parallel={d} keeps {before:,}" if before % rest == 0
            and plan.global_batch_size % (plan.micro_batch_size * d) == 0 else "")
    print(printable(f"note: --set changes the GPU count from {before:,} to {after:,} "
                    f"(t*p*cp*d, d held at {plan.data_parallel:,}){keep}"), file=sys.stderr)


def list_items(option: str, text: str) -> list[str]:
    """The comma-separated items of an option's value, stripped; an empty item (``1,,2``, a
    trailing comma, an empty value) is refused naming ``option`` (ConfigError, exit 2) rather
    than dropped. Long values are cut in the message."""
    items = [v.strip() for v in text.split(",")]
    if any(not v for v in items):
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise field_error(option, f"{shown!r} has an empty item: give values separated by "
                                  "single commas")
    return items


def check_number(option: str, value: float | None, allow_zero: bool = False) -> None:
    """Raise ConfigError naming ``option`` unless ``value`` is None or a finite number above 0
    (at or above 0 with ``allow_zero``)."""
    if value is None:
        return
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        kind = "non-negative" if allow_zero else "positive"
        raise ConfigError([FieldError(option, f"{value!r} must be a {kind} finite number")])


def workers_arg(text: str | None, local: bool = True, option: str = "--workers") -> int | None:
    """``--workers N``: the number of processes as an int, None when not given.

    Checked here, before any session, price sheet or plan is read, by
    :func:`core.studies.sweep.run.check_workers` (a positive integer, and for processes
    started on this machine, ``local``, at most its cores), the refusal naming ``option``:
    the user typed the option, not a session's ``sweep.workers``.

    Raises
    ------
    ConfigError
        ``text`` not one whole number (ASCII digits), below 1, or, ``local``, above this
        machine's cores; the field is ``option``.
    """
    if text is None:
        return None
    try:
        n = integer_arg(text)
    except argparse.ArgumentTypeError:
        raise ConfigError([FieldError(option, f"{text!r}: give one positive integer")]) from None
    from core.studies.sweep.run import check_workers
    return check_workers(n, local=local, field=option)


def check_seq_length(value: int | None) -> None:
    """Raise ConfigError naming ``--seq-length`` unless ``value`` is None or a sequence length
    within ``model.seq_length``'s bound (:data:`core.plan.fields.BOUNDS` ``seq``): the option,
    not the model field or the input file's key it is written to, is what the user gave."""
    if value is None:
        return
    b = BOUNDS["seq"]
    if value <= 0:
        raise ConfigError([FieldError("--seq-length", f"{value} must be a positive integer")])
    if value > b.hi:
        raise ConfigError([FieldError("--seq-length", f"{value:,} must be at most {int(b.hi):,} "
                                      f"({b.why})")])


def study_progress(json_output: bool):
    """A ``progress(done, total, name)`` callback for the studies (``optimal``, ``schedule``)
    that prints one dim line per model swept to a terminal's stderr; None with ``--json`` or
    when stderr is not a terminal."""
    from core.util.console import Console, esc
    err = Console(stderr=True)
    if json_output or not err.is_terminal:
        return None

    def progress(done: int, total: int, name: str) -> None:
        if name:
            err.print(f"[dim]{done + 1}/{total}: sweeping plans of {esc(name)}[/]", highlight=False)
    return progress


def verdict_markup(verdict: str) -> str:
    """A memory verdict (:func:`core.sim.report.memory_verdict`) as console markup: green fits,
    yellow tight, red DOES NOT FIT."""
    return {"fits": "[green]fits[/]", "tight": "[yellow]tight[/]"}.get(
        verdict, "[red]DOES NOT FIT[/]")


#: What ``--no-tight`` (``run_sweep``'s ``no_tight``) does: ``vtrain sweep --help`` and the
#: window's "fits outside the margin only" box say it in these words.
NO_TIGHT_HELP = ("keep only plans whose memory verdict is \"fits\": leave out the tight ones "
                 "(inside cluster.memory_reserve_fraction of the GPU's memory, or over it only "
                 "with the allocator's cache), unsimulated, so the front, the fastest and "
                 "cheapest plans, --pick and, with --gpus-from, the combined front are chosen "
                 "among plans that fit outside the margin (without it tight plans count as "
                 "fitting, marked ~, and the front says how many of its plans are tight)")


#: What ``vtrain optimal --no-tight`` does (the Studies tab's box says it in these words).
NO_TIGHT_OPTIMAL_HELP = ("leave out each candidate's tight plans (inside "
                         "cluster.memory_reserve_fraction of the GPU's memory, or over it only "
                         "with the allocator's cache), unsimulated, as vtrain sweep --no-tight: "
                         "each candidate trains with its fastest plan that fits outside the "
                         "margin (without it a tight plan may be the fastest, marked ~)")

#: The line under ``vtrain optimal``'s table (and in the Studies tab) for a study run with
#: ``--no-tight``.
NO_TIGHT_OPTIMAL_NOTE = ("--no-tight: each candidate's tight plans were left out (not "
                         "simulated); every plan shown fits outside the margin")


def tight_front_text(on_front: int, front: int, left_out: int | None) -> str:
    """The line under a front that says whether tight plans were kept (plain text):
    ``"3 of 12 front plans are tight (~): --no-tight keeps only plans that fit outside the
    margin"`` when ``on_front`` (of ``front``) are, ``"--no-tight: 5 tight plans left out (not
    simulated); every plan shown fits outside the margin"`` when ``left_out`` (a count; None
    for a sweep run without ``no_tight``) is given, "" otherwise. ``vtrain sweep`` (with and
    without ``--gpus-from``) and the window print it."""
    if left_out is not None:
        return (f"--no-tight: {left_out:,} tight plan{'s' if left_out != 1 else ''} left out "
                "(not simulated); every plan shown fits outside the margin")
    if not on_front:
        return ""
    return (f"{on_front:,} of {front:,} front plan{'s' if front != 1 else ''} "
            f"{'are' if on_front != 1 else 'is'} tight (~): --no-tight keeps only plans that "
            "fit outside the margin")


def tight_front_note(on_front: int, front: int, left_out: int | None) -> str:
    """:func:`tight_front_text` in rich markup: the count of tight front plans in yellow
    (``vtrain sweep``, with and without ``--gpus-from``)."""
    from core.util.console import esc
    text = esc(tight_front_text(on_front, front, left_out))
    if left_out is None and on_front:
        head, sep, tail = text.partition(" (~)")
        return f"[yellow]{head}[/]{sep}{tail}"
    return text


def megatron_lm_options(space, plan=None) -> str:
    """The sweep options that keep a sweep of ``space`` to what Megatron-LM's arguments run
    (:data:`core.io.megatron.export.MEGATRON_LM_SWEEP_OPTIONS` from the default space): each of
    the space's choices Megatron-LM has no argument for left out -- Transformer Engine's
    cross-entropy, the GPipe and zero-bubble schedules, torchtitan's per-op recomputation and
    PyTorch's all-gather exchange -- where the space has it (the default space: the first
    two); empty when it has none of them. Every ZeRO stage has an argument (ZeRO-2 and ZeRO-3
    as Megatron-FSDP or FSDP2), but ZeRO-2 runs only with the overlaps on (Megatron-FSDP
    overlaps its reduce-scatters whatever the launch says): with ``--dp-overlap`` off among
    the space's, ZeRO-2 is left out. With ``plan`` (the session's, whose other fields the
    sweep holds) gathering its parameters in FP8 (``plan.fp8_param_gather``), only ZeRO-1 is
    kept: ZeRO-2 and ZeRO-3 export as Megatron-FSDP, whose FP8 gathers the export refuses
    (:func:`core.io.megatron.from_session.export_arguments`), and ZeRO-0 has no FP8 gather. Another plan Megatron-LM still
    refuses (FSDP2 with pipeline parallelism) is named by its own message."""
    from core.plan.parallel import RECOMPUTE_MODES, ZERO_STAGES
    from core.studies.sweep.space import DEFAULT_CP_COMM_TYPES, as_list
    hold = space.hold_session_values  # None: the session's, which Megatron-LM runs
    no_overlap = space.dp_overlap is not None and False in list(as_list(space.dp_overlap))
    fp8_gather = bool(plan is not None and getattr(plan, "fp8_param_gather", False))
    out = []
    for option, given, default, refused, fallback in (
            ("--cross-entropy-fusion", space.cross_entropy_fusion, ["te"], {"te"}, ["native"]),
            ("--zero-stages", space.zero_stages, list(ZERO_STAGES),
             {0, 2, 3} if fp8_gather else {2} if no_overlap else set(),
             [1] if fp8_gather else [0, 1, 3]),
            ("--schedules", space.schedules, [], {"gpipe", "zb-h1", "zb-v"},
             ["1f1b", "interleaved"]),
            ("--recompute", space.recompute, [], {"selective_op"}, list(RECOMPUTE_MODES)),
            ("--cp-comm-types", space.cp_comm_type, [], {"allgather"},
             list(DEFAULT_CP_COMM_TYPES))):
        values = list(as_list(given)) if given is not None else [] if hold else default
        if any(v in refused for v in values):
            kept = [v for v in values if v not in refused] or fallback
            out.append(f"{option} {','.join(map(str, kept))}")
    return " ".join(out)
