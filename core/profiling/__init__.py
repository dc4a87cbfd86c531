"""Profiling the local device with torch: the only package of vtrain that imports torch.

Importing this package does not import torch; the functions below do, when
called. Install torch with the ``profile`` extra (``pip install -e '.[profile]'``,
a CPU build: ``pip install torch==2.13.0``).

Qt-free entry points (the CLI and the GUI's Profiles view call these; both
report progress through a callback and stop on a cancel token, see
:mod:`core.profiling.progress`):

* :func:`run_profile` — measure op tables into a store (``vtrain profile run``).
* :func:`run_collectives` — measure collective curves into a store
  (``vtrain profile collectives``).
* :func:`torch_status` — whether profiling can run here, and why not.
* :func:`shapes_from_session`, :func:`default_shapes`, :func:`load_shapes` —
  what to profile (e.g. the shapes of the session open in the editor).

Listing stores and their provenance needs no torch: :func:`core.store.profiles.list_stores`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Iterable, Sequence

from core.profiling.progress import (CancelToken, CollectiveRunResult, ProfileProgress, ProfileRunResult,
                       ProgressCallback)
from core.profiling.shapes import (ShapeFileError, ShapeGroup, default_shapes, load_shapes, merge_groups,
                     shape_from_dict, shapes_from_session)

__all__ = ["ProfilingUnavailable", "torch_status", "run_profile", "run_collectives",
           "ProfileProgress", "ProfileRunResult", "CollectiveRunResult", "ProgressCallback",
           "CancelToken", "ShapeGroup", "ShapeFileError", "load_shapes", "shape_from_dict",
           "default_shapes", "shapes_from_session", "merge_groups", "INSTALL_HINT"]

INSTALL_HINT = "pip install torch==2.13.0 (or: pip install -e '.[profile]')"


class ProfilingUnavailable(RuntimeError):
    """torch (or torch.distributed) is not installed; the message says how to install it."""


def torch_status() -> tuple[bool, str]:
    """``(available, text)``: whether torch imports here, its version or why not.

    Cheap when torch is missing (no import attempted); imports torch otherwise.
    """
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as exc:
        return False, f"torch cannot be found ({exc}); {INSTALL_HINT}"
    if spec is None:
        return False, f"torch is not installed; {INSTALL_HINT}"
    try:
        import torch
    except Exception as exc:  # a broken install: report, do not crash the caller
        return False, f"torch does not import ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return True, f"torch {torch.__version__}, {cuda} CUDA device(s)"


def _require_torch() -> None:
    ok, why = torch_status()
    if not ok:
        raise ProfilingUnavailable(why)


def run_profile(out: str | Path, device: str = "cpu",
                shapes: Iterable[ShapeGroup] | None = None, *, threads: int | None = None,
                progress: ProgressCallback | None = None, cancel: CancelToken | None = None,
                kernels: bool | None = None, merge: bool = True,
                timing: dict[str, Any] | None = None, keep_memory: bool = True
                ) -> ProfileRunResult:
    """Measure the op tables of ``shapes`` on ``device`` into the store ``out``.

    See :func:`core.profiling.runner.profile_ops` for the parameters. The store
    file is valid after every finished shape group, also when the run is
    cancelled (``cancel.is_set()``) or interrupted (``KeyboardInterrupt``).
    On a CPU with ``keep_memory`` (default) the calling process's malloc keeps
    freed memory from then on (:func:`core.profiling.device.keep_freed_memory`).

    Raises
    ------
    ProfilingUnavailable
        torch is not installed.
    ValueError
        Bad device, or ``out`` holds another device's store.
    """
    _require_torch()
    from core.profiling.runner import profile_ops
    return profile_ops(out, device, shapes, threads=threads, progress=progress, cancel=cancel,
                       kernels=kernels, merge=merge, timing=timing, keep_memory=keep_memory)


def run_collectives(world_size: int, backend: str = "gloo", *, out: str | Path | None = None,
                    sizes: Sequence[int] | None = None, kinds: Sequence[str] | None = None,
                    progress: ProgressCallback | None = None, cancel: CancelToken | None = None,
                    timing: dict[str, Any] | None = None) -> CollectiveRunResult:
    """Measure collective curves over ``world_size`` local processes (optionally into ``out``).

    See :func:`core.profiling.collectives.measure_collectives` for the parameters.

    Raises
    ------
    ProfilingUnavailable
        torch is not installed.
    ValueError, RuntimeError
        Bad arguments; a worker failed.
    """
    _require_torch()
    from core.store.profile_store import COLLECTIVE_KINDS
    from core.profiling.collectives import measure_collectives
    return measure_collectives(world_size, backend, sizes=sizes,
                               kinds=tuple(kinds) if kinds else COLLECTIVE_KINDS, out=out,
                               progress=progress, cancel=cancel, timing=timing)
