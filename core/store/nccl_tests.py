"""Read collective timings in the nccl-tests layouts.

Two forms are accepted:

* nccl-tests' own stdout (``all_reduce_perf -b 1M -e 1G ...``): ``#`` comment
  lines, the device lines ``#  Rank  0 Group  0 Pid ... device  0 [...]`` (their
  count is the group size) and data rows ``size count type redop root time
  algbw busbw #wrong time algbw busbw #wrong`` with times in microseconds.
  The operation is taken from the ``# Collective test starting: NAME`` line
  or the file name (``all_reduce``, ``all_gather``, ``reduce_scatter``,
  ``sendrecv``).
* the CSV form the vTrain authors released: header ``size(B), count, type,
  time(ns), busbw(GB/s), time(ns), busbw(GB/s)`` (out-of-place, then in-place),
  times in nanoseconds; the group size comes from a ``_<N>gpu`` file name.

The out-of-place time is used. ``nbytes`` is the whole buffer, as nccl-tests
reports ``size``.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.store.profile_store import STORE_BOUNDS
from core.util.inputs import DecimalUnderflowError, decimal_number

__all__ = ["RING_STEPS", "BUS_BANDWIDTH_FACTOR", "CollectiveCurve", "read_nccl_tests", "NcclTestsError"]

_KIND_NAMES = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
               "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "sendrecv": "send_recv", "send_recv": "send_recv"}

#: Message steps of each collective kind on a ring of ``n`` GPUs (the latency term).
RING_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1,
              "reduce_scatter": lambda n: n - 1, "send_recv": lambda n: 1,
              "all_to_all": lambda n: n - 1}
#: Bus-bandwidth factor of each kind (nccl-tests' PERFORMANCE.md: busbw = algbw * factor;
#: all-to-all (n-1)/n, the share of a rank's buffer that leaves it).
BUS_BANDWIDTH_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                         "reduce_scatter": lambda n: (n - 1) / n, "send_recv": lambda n: 1.0,
                         "all_to_all": lambda n: (n - 1) / n}


class NcclTestsError(ValueError):
    """The file is not nccl-tests output, or its operation or group size cannot be told."""


@dataclass
class CollectiveCurve:
    """One measured curve: ``nbytes`` and ``time_s`` are float arrays of shape (k,), sorted by size."""

    kind: str
    group_size: int
    nbytes: np.ndarray
    time_s: np.ndarray


def _kind_from(text: str) -> str | None:
    low = text.lower()
    for name, kind in _KIND_NAMES.items():
        if name in low:
            return kind
    return None


def _group_from_name(path: Path) -> int | None:
    m = re.search(r"(\d+)\s*gpus?", path.stem.lower())
    return int(m.group(1)) if m else None


def _check_point(path: Path, line: int | None, size: float, time_s: float) -> None:
    """Refuse a data row whose size or time is not finite or outside the store's bounds."""
    where = f"{path}: line {line}" if line else f"{path}"
    blo, bhi, _ = STORE_BOUNDS["nbytes"]
    tlo, thi, _ = STORE_BOUNDS["time_s"]
    if not (math.isfinite(size) and blo <= size <= bhi):
        raise NcclTestsError(f"{where}: size {size!r} bytes is not from {blo:g} to {bhi:g}")
    if not (math.isfinite(time_s) and tlo <= time_s <= thi):
        raise NcclTestsError(f"{where}: time {time_s!r} s is not from {tlo:g} to {thi:g} s")


def read_nccl_tests(path: str | Path, kind: str | None = None, group_size: int | None = None
                    ) -> CollectiveCurve:
    """Read one nccl-tests result file (see module doc for the layouts).

    Parameters
    ----------
    path : path
    kind, group_size : optional
        What the file does not say (the authors' CSV, or output without the device lines or
        the ``# Collective test starting`` line); a value that disagrees with the file's own
        device lines or collective is refused (a 4-GPU curve stored as an 8-GPU one).

    Raises
    ------
    NcclTestsError
        Unreadable, non-regular or too large file, no data rows, a size or time that is not
        finite or outside :data:`core.store.profile_store.STORE_BOUNDS`, or the operation or
        group size cannot be determined (or is out of bounds, given or read), or disagrees
        with ``kind`` or ``group_size`` given, or a size measured twice (two runs in one file).
    """
    from core.util.inputs import read_text

    path = Path(path)
    given_group = group_size is not None  # out of bounds is refused as such, not as unknown
    text = read_text(path, NcclTestsError, "text")
    lines = text.splitlines()
    first = lines[0].strip().lower() if lines else ""
    sizes: list[float] = []
    times: list[float] = []
    if first.startswith("size(b)"):
        try:
            for i, row in enumerate(csv.reader(lines[1:]), start=2):
                if not row:
                    continue
                try:
                    sizes.append(decimal_number(row[0]))
                    times.append(decimal_number(row[3]) * 1e-9)
                except DecimalUnderflowError as exc:  # 1e-400: never read as 0.0
                    raise NcclTestsError(f"{path}: line {i}: {exc}") from None
                except (ValueError, IndexError):
                    raise NcclTestsError(f"{path}: line {i}: expected size(B),count,type,time(ns),"
                                         f"... got {','.join(row)[:80]!r}") from None
                _check_point(path, i, sizes[-1], times[-1])
        except csv.Error as exc:
            raise NcclTestsError(f"{path}: not a readable CSV file ({exc})") from None
        kind = kind or _kind_from(path.stem)
        group_size = group_size if group_size is not None else _group_from_name(path)
    else:
        ranks = 0
        ran = None  # the collective the file says ran
        for number, line in enumerate(lines, start=1):
            s = line.strip()
            if not s:
                continue
            if s.startswith("#"):
                if re.match(r"#\s*Rank\s+\d+", s):
                    ranks += 1
                m = re.search(r"Collective test starting:\s*(\S+)", s)
                if m and ran is None:
                    ran = _kind_from(m.group(1))
                continue
            tok = s.split()
            if len(tok) < 8 or not tok[0].isdigit():
                continue
            # size count type redop root time algbw busbw ... (older versions lack root)
            time_idx = 5 if len(tok) >= 13 else 4
            try:
                size, time_s = decimal_number(tok[0]), decimal_number(tok[time_idx]) * 1e-6
            except DecimalUnderflowError as exc:  # 1e-400: never read as 0.0, nor skipped
                raise NcclTestsError(f"{path}: line {number}: {exc}") from None
            except ValueError:
                continue
            sizes.append(size)
            times.append(time_s)
            _check_point(path, number, size, time_s)
        if kind is not None and ran is not None and kind != ran:
            raise NcclTestsError(f"{path}: the file is a {ran} run ('# Collective test "
                                 f"starting'), not {kind}: --kind is for a file that does not "
                                 "say; leave it out")
        if given_group and ranks and group_size != ranks:
            raise NcclTestsError(f"{path}: the file is a run on {ranks} GPUs (its '#  Rank' "
                                 f"device lines), not {group_size}: --group-size is for a file "
                                 "that does not say; leave it out")
        kind = kind or ran or _kind_from(path.stem)
        group_size = group_size if group_size is not None else ranks or _group_from_name(path)
    if not sizes:
        raise NcclTestsError(f"{path}: no nccl-tests data rows found")
    if kind is None:
        raise NcclTestsError(f"{path}: cannot tell the collective; name it in the file name "
                             f"(e.g. all_reduce_8gpu.txt) or pass it explicitly")
    if not given_group and (not group_size or group_size < 2):
        raise NcclTestsError(f"{path}: cannot tell the number of GPUs; put it in the file name "
                             f"(e.g. a100_allreduce_8gpu.csv) or pass it explicitly")
    glo, ghi, _ = STORE_BOUNDS["group_size"]
    if not glo <= group_size <= ghi:
        raise NcclTestsError(f"{path}: group size {group_size:,} is not from {glo} to {ghi:,} GPUs")
    nb = np.array(sizes)
    ts = np.array(times)
    order = np.argsort(nb, kind="stable")
    nb, ts = nb[order], ts[order]
    twice = np.flatnonzero(np.diff(nb) == 0)
    if twice.size:  # two runs in one file: which time was meant is unknown
        size = nb[twice[0]]
        raise NcclTestsError(f"{path}: size {size:.0f} bytes is measured twice ("
                             f"{ts[twice[0]]:.3g} s and {ts[twice[0] + 1]:.3g} s); one run per file")
    keep = np.concatenate([[True], np.diff(nb) > 0]) & (nb > 0) & (ts > 0)
    return CollectiveCurve(kind, int(group_size), nb[keep], ts[keep])


def fit_curve(curve: CollectiveCurve, num_knots: int = 12) -> CollectiveCurve:
    """A piecewise log-log linear fit of ``curve`` with ``num_knots`` knots.

    The knots are log-spaced between the smallest and largest size; the knot
    times are the least-squares fit of ``log(time)`` by the hat functions of
    the knots (linear interpolation in log-log space, which is exactly how the
    profile store interpolates a curve). Use it to keep a model of a
    measurement instead of the raw rows.

    Raises
    ------
    NcclTestsError
        Fewer measured sizes than knots.
    """
    x = np.log(curve.nbytes)
    y = np.log(curve.time_s)
    if num_knots < 2:
        raise NcclTestsError(f"{curve.kind} on {curve.group_size} GPUs: {num_knots} knots: a "
                             "piecewise fit needs at least 2")
    if x.size < num_knots:
        raise NcclTestsError(f"{curve.kind} on {curve.group_size} GPUs: {x.size} sizes are too "
                             f"few for {num_knots} knots")
    knots = np.linspace(x[0], x[-1], num_knots)
    idx = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, num_knots - 2)
    w = (x - knots[idx]) / (knots[idx + 1] - knots[idx])
    basis = np.zeros((x.size, num_knots))
    basis[np.arange(x.size), idx] = 1 - w
    basis[np.arange(x.size), idx + 1] = w
    coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
    return CollectiveCurve(curve.kind, curve.group_size, np.exp(knots), np.exp(coef))


__all__ += ["fit_curve"]
