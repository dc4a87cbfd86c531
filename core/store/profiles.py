"""Which profile stores exist and where they came from (no torch, no Qt).

The GUI's Profiles view and scripts list stores with :func:`list_stores`:
the shipped ones (``profiles/*.h5``) and the user's (:func:`user_profiles_dir`,
where a profile of the local device is written by default). Each entry says
the device, how the numbers were obtained (measured on which device, when,
with which torch; analytic; calibrated) and what the store holds. A file
that cannot be read is listed with its error instead of being skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from core.store.format import ProfileStoreError
from core.store.profile_store import ProfileStore
from core.util.text import file_name_part

__all__ = ["PROFILES_DIR", "StoreInfo", "list_stores", "store_info", "user_profiles_dir",
           "default_profile_path", "method_text"]

#: The shipped profile stores, one ``<GPU kind>.h5`` per kind (the repository's ``profiles/``).
PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"


def user_profiles_dir() -> Path:
    """Folder for the user's own stores: ``$VTRAIN_PROFILES_DIR``, else
    ``$XDG_DATA_HOME/vtrain/profiles`` (``~/.local/share/vtrain/profiles``). Not created here."""
    env = os.environ.get("VTRAIN_PROFILES_DIR")
    if env:
        return Path(os.path.expanduser(env))
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "vtrain" / "profiles"


def default_profile_path(device: str) -> Path:
    """Where a profile of the local ``device`` (``"cpu"``, ``"cuda:0"``) goes by default:
    ``<user_profiles_dir>/local-<device>.h5`` (``:`` replaced by ``-``, the rest made a file
    name by :func:`core.util.text.file_name_part`)."""
    return user_profiles_dir() / f"{file_name_part('local-' + device.replace(':', '-'))}.h5"


@dataclass
class StoreInfo:
    """What a list of stores shows about one file.

    Attributes
    ----------
    path : Path
    shipped : bool
        The file is one of the stores shipped in ``profiles/``.
    device_name, method, date, source : str
        Device kind; ``measured`` / ``analytic`` / ``calibrated``; provenance
        date and source ("" when unknown or unreadable).
    torch_version, cuda_version : str
        For measured stores ("" otherwise).
    threads : int or None
        CPU threads of a measured CPU profile.
    summary : str
        :meth:`ProfileStore.summary`, or the error.
    num_op_rows : dict[str, int]
        Op -> table rows.
    collectives : dict[str, list[int]]
        Kind -> group sizes with a curve.
    provenance : dict
        The full provenance mapping.
    peak_flops : dict[str, float]
        Dense peak FLOP/s per dtype (``fp8`` included where the device has it).
    memory_bytes, memory_bandwidth_bytes_per_s : float
        HBM capacity (bytes) and bandwidth (bytes/s); 0 when unreadable.
    error : str or None
        Why the file could not be read (other fields then empty).
    """

    path: Path
    shipped: bool
    device_name: str = ""
    method: str = ""
    date: str = ""
    source: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    threads: int | None = None
    summary: str = ""
    num_op_rows: dict[str, int] = field(default_factory=dict)
    collectives: dict[str, list[int]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    peak_flops: dict[str, float] = field(default_factory=dict)
    memory_bytes: float = 0.0
    memory_bandwidth_bytes_per_s: float = 0.0
    error: str | None = None

    def device_line(self) -> str:
        """``peak TFLOP/s bf16 989, fp8 1,979, ...; HBM 80.0 GiB at 3,350 GB/s`` ("" if unread)."""
        if not self.peak_flops:
            return ""
        peaks = ", ".join(f"{k} {v / 1e12:,.4g}" for k, v in self.peak_flops.items())
        return (f"peak TFLOP/s {peaks}; HBM {self.memory_bytes / 2**30:,.1f} GiB at "
                f"{self.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s")


def method_text(provenance: dict[str, Any]) -> str:
    """How a store's numbers were made, as the report and the window name it: its provenance
    ``method`` (measured, analytic, calibrated), and for a store calibrated with no run of its
    own GPU kind in the data (``rows_of_this_kind`` 0: it takes the parameters fitted on other
    kinds, :func:`core.accuracy.shared_fit.transferred_store`) "calibrated on other GPU kinds'
    runs"."""
    method = str(provenance.get("method", ""))
    if method == "calibrated" and provenance.get("rows_of_this_kind") == 0:
        return "calibrated on other GPU kinds' runs"
    return method


def store_info(path: str | Path, shipped: bool = False) -> StoreInfo:
    """Read one store's :class:`StoreInfo` (the file is opened, read and closed)."""
    path = Path(path)
    try:
        store = ProfileStore.open(path)
    except ProfileStoreError as exc:
        return StoreInfo(path, shipped, summary=str(exc), error=str(exc))
    p = store.provenance
    threads = p.get("threads")
    return StoreInfo(
        path=path, shipped=shipped, device_name=store.device_name, method=str(p.get("method", "")),
        date=str(p.get("date", "")), source=str(p.get("source", "")),
        torch_version=str(p.get("torch_version", "")), cuda_version=str(p.get("cuda_version", "")),
        threads=int(threads) if isinstance(threads, (int, float)) else None,
        summary=store.summary(),
        num_op_rows={op: len(store.op_table(op)[1]) for op in store.op_names()},
        collectives=store.collective_kinds(), provenance=dict(p),
        peak_flops=dict(store.peak_flops), memory_bytes=store.memory_bytes,
        memory_bandwidth_bytes_per_s=store.memory_bandwidth_bytes_per_s)


def list_stores(dirs: Iterable[str | Path] | None = None) -> list[StoreInfo]:
    """Every ``*.h5`` store in ``dirs`` (default: shipped ``profiles/``, then
    :func:`user_profiles_dir`), sorted by folder then name. Missing folders are skipped."""
    folders = [Path(d) for d in dirs] if dirs is not None else [PROFILES_DIR, user_profiles_dir()]
    out: list[StoreInfo] = []
    seen: set[Path] = set()
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.h5")):
            try:
                real = path.resolve()
            except (OSError, RuntimeError):  # a symlink loop: listed as itself, opened as none
                real = path.absolute()
            if real in seen:
                continue
            seen.add(real)
            out.append(store_info(path, shipped=real.parent == PROFILES_DIR.resolve()))
    return out
