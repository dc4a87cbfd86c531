"""Helpers shared by the subcommands of ``vtrain`` (:mod:`core.cli`).

Subcommand modules import from here, never from :mod:`core.cli` itself, so the
package has no import cycle.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from ..config import ConfigError, CostConfig, FieldError, check_value
from ..session import load_any

__all__ = ["UsageError", "field_error", "session_from_args", "check_number", "fmt_bytes", "GiB"]

GiB = 2**30


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def field_error(field: str, msg: str) -> ConfigError:
    """A :class:`~core.config.ConfigError` for one ``field`` (an option or a file) and its rule."""
    return ConfigError([FieldError(field, msg)])


def fmt_bytes(n: float) -> str:
    """``n`` bytes as GiB with one decimal, e.g. ``"1.5 GiB"``."""
    return f"{n / GiB:,.1f} GiB"


def session_from_args(args: argparse.Namespace, validate: bool = True):
    """Load ``args.path`` (checking the configuration rules with ``validate``) and apply
    ``--profile``, ``--tokens`` and ``--price-per-gpu-hour``."""
    session = load_any(args.path, validate=validate)
    if getattr(args, "profile", None):
        session.cluster.profile_path = str(Path(args.profile).resolve())
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


def check_number(option: str, value: float | None, allow_zero: bool = False) -> None:
    """Raise ConfigError naming ``option`` unless ``value`` is None or a finite number above 0
    (at or above 0 with ``allow_zero``)."""
    if value is None:
        return
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        kind = "non-negative" if allow_zero else "positive"
        raise ConfigError([FieldError(option, f"{value!r} must be a {kind} finite number")])


def study_progress(json_output: bool):
    """A ``progress(done, total, name)`` callback for the studies (``optimal``, ``schedule``)
    that prints one dim line per model swept to a terminal's stderr; None with ``--json`` or
    when stderr is not a terminal."""
    from ..console import Console, esc
    err = Console(stderr=True)
    if json_output or not err.is_terminal:
        return None

    def progress(done: int, total: int, name: str) -> None:
        if name:
            err.print(f"[dim]{done + 1}/{total}: sweeping plans of {esc(name)}[/]", highlight=False)
    return progress
