"""Price sheets: which GPU kinds can be rented, at what price per GPU-hour, and how many.

A price sheet is a CSV file (UTF-8, a header row, comma separated) read by
:func:`read_price_sheet` for ``vtrain sweep SESSION --gpus-from prices.csv`` and the
Explore tab's GPU choice (:mod:`core.studies.gpu_choice`). Columns (docs/gpu_choice.md):

``gpu`` (required)
    A GPU kind of :data:`core.plan.cluster.GPU_KINDS` (other tools' names such as
    ``H100 SXM`` are read through :func:`core.plan.cluster.gpu_kind`), or the path of a
    profile store (``.h5``, relative to the sheet's folder) for a kind of your own.
``price_per_gpu_hour_usd`` (required)
    Price of one GPU for one hour, USD; positive.
``max_gpus`` (required)
    Most GPUs of this kind available; a positive integer.
``gpus_per_node`` (optional)
    GPUs in one node (NVLink domain); default the kind's (:data:`GPU_NVLINK_DOMAIN`, 8 for a
    store of your own). At most the kind's NVLink domain.
``source``, ``date`` (optional)
    Where the price comes from and when (``YYYY-MM-DD`` or ``YYYY-MM``); shown, never used.

A row whose first cell starts with ``#`` is a comment; blank rows are skipped. Bad input
is refused with :class:`core.plan.fields.ConfigError`, each error naming the file, row
(the line number of the CSV record) and column and the rule broken (the command line's exit
status 2). Only reading belongs here; the sweeps over the sheet are in
:mod:`core.studies.gpu_choice`.
"""

from __future__ import annotations

import csv
import io
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.plan.cluster import GPU_KINDS, GPU_NVLINK_DOMAIN, gpu_kind
from core.plan.fields import BOUNDS, ConfigError, FieldError
from core.util.inputs import DecimalUnderflowError, decimal_number, read_text

__all__ = ["PRICE_COLUMNS", "REQUIRED_COLUMNS", "MAX_PRICE_ROWS", "PriceRow", "PriceSheet",
           "read_price_sheet", "parse_price_sheet"]

#: Every column a price sheet may have, in the documented order.
PRICE_COLUMNS = ("gpu", "price_per_gpu_hour_usd", "max_gpus", "gpus_per_node", "source", "date")
#: The columns a price sheet must have.
REQUIRED_COLUMNS = ("gpu", "price_per_gpu_hour_usd", "max_gpus")
#: Most rows a sheet may have: each row is a whole sweep.
MAX_PRICE_ROWS = 64
_DATE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?$")


def _calendar_date(text: str) -> bool:
    """Whether ``text`` (``YYYY-MM-DD``, matched by ``_DATE``) is a day that exists
    (:class:`datetime.date`: ``2024-02-29`` does, ``2025-02-29`` and ``2025-04-31`` do not)."""
    import datetime
    try:
        datetime.date(int(text[:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class PriceRow:
    """One offer of a price sheet.

    Attributes
    ----------
    gpu : str
        The GPU kind (a :data:`GPU_KINDS` name, or the stem of a store of your own).
    price_per_gpu_hour_usd : float
        USD per GPU-hour.
    max_gpus : int
        Most GPUs available (the sweep's budget).
    gpus_per_node : int or None
        GPUs per node given by the sheet; None: the kind's NVLink domain.
    source, date : str
        As written ("" when left out).
    row : int
        Line number of the record in the file (the header is line 1).
    profile_path : str or None
        The store of a kind of your own (absolute path), else None.
    """

    gpu: str
    price_per_gpu_hour_usd: float
    max_gpus: int
    gpus_per_node: int | None = None
    source: str = ""
    date: str = ""
    row: int = 0
    profile_path: str | None = None

    def to_dict(self) -> dict:
        """JSON-able dict of the fields."""
        return {"gpu": self.gpu, "price_per_gpu_hour_usd": self.price_per_gpu_hour_usd,
                "max_gpus": self.max_gpus, "gpus_per_node": self.gpus_per_node,
                "source": self.source, "date": self.date, "row": self.row,
                "profile_path": self.profile_path}


@dataclass
class PriceSheet:
    """The rows of a price sheet and the file they come from (``path``, "" when parsed from
    text)."""

    rows: list[PriceRow]
    path: str = ""
    labels: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.labels:
            self.labels = row_labels(self.rows)

    def to_dict(self) -> dict:
        """JSON-able dict: ``path`` and ``rows`` (each with its ``label``)."""
        return {"path": self.path, "rows": [dict(r.to_dict(), label=lab)
                                            for r, lab in zip(self.rows, self.labels)]}


def row_labels(rows: list[PriceRow]) -> list[str]:
    """A name per row: its GPU kind, followed by `` @ $price`` when the sheet offers the kind
    more than once (and `` (row N)`` when the price repeats too)."""
    kinds = [r.gpu for r in rows]
    out = []
    for r in rows:
        label = r.gpu
        if kinds.count(r.gpu) > 1:
            label = f"{r.gpu} @ ${r.price_per_gpu_hour_usd:g}"
            if sum(1 for q in rows if q.gpu == r.gpu
                   and q.price_per_gpu_hour_usd == r.price_per_gpu_hour_usd) > 1:
                label += f" (row {r.row})"
        out.append(label)
    return out


def read_price_sheet(path: str | Path) -> PriceSheet:
    """Read the price sheet at ``path`` (module doc).

    Raises
    ------
    ConfigError
        The file cannot be read, or a row breaks a rule (every error names
        ``FILE: row N: COLUMN``).
    """
    text = read_text(path, _file_error(str(path)), "csv")
    return parse_price_sheet(text, str(path), base=Path(path).resolve().parent)


class _SheetFileError(ConfigError):
    """A price sheet that cannot be read at all (its message already names the file)."""


def _file_error(path: str) -> type:
    """An exception class :func:`core.util.inputs.read_text` can raise with one message: a
    :class:`ConfigError` whose one error is the file."""

    class _Err(_SheetFileError):
        def __init__(self, message: str) -> None:
            super().__init__([FieldError(path, message.removeprefix(f"{path}: ")
                                         .removeprefix(f"{path} "))])
    return _Err


def _number(text: str, column: str, where: str, errors: list[FieldError], *, integer: bool,
            bounds) -> float | int | None:
    """The number in ``text`` within ``bounds`` (a :class:`core.plan.fields.Bound` or a pair),
    or None (an error added to ``errors``)."""
    lo, hi = (bounds.lo, bounds.hi) if hasattr(bounds, "lo") else bounds
    try:  # decimal digits only: float() reads "1_5" as 15
        value = decimal_number(text)
    except DecimalUnderflowError as exc:  # 1e-400: never read as 0.0
        errors.append(FieldError(f"{where}: {column}", str(exc)))
        return None
    except ValueError:
        errors.append(FieldError(f"{where}: {column}", f"{text!r} is not a number"))
        return None
    if not math.isfinite(value):
        errors.append(FieldError(f"{where}: {column}", f"{text!r} must be a finite number"))
        return None
    if 0.0 < abs(value) < sys.float_info.min:  # named here, with the file and row
        errors.append(FieldError(f"{where}: {column}", f"{text!r} is a subnormal number (under "
                                                       "2.2e-308 in magnitude)"))
        return None
    if integer:
        if value != int(value):
            errors.append(FieldError(f"{where}: {column}", f"{text!r} must be a whole number"))
            return None
        value = int(value)
    if not lo <= value <= hi:
        errors.append(FieldError(f"{where}: {column}", f"{text!r} must be between {lo:,g} and "
                                                       f"{hi:,g}"))
        return None
    return value


def _kind(text: str, where: str, base: Path | None, errors: list[FieldError]
          ) -> tuple[str, str | None, int] | None:
    """``(kind, profile_path, nvlink_domain)`` of the ``gpu`` cell, or None (error added)."""
    if text.lower().endswith((".h5", ".hdf5")):
        p = Path(text).expanduser()
        if not p.is_absolute() and base is not None:
            p = base / p
        if not p.is_file():
            errors.append(FieldError(f"{where}: gpu", f"{text!r}: no profile store at {p}"))
            return None
        return p.stem, str(p), max(GPU_NVLINK_DOMAIN.values())
    kind = gpu_kind(text)
    if kind not in GPU_KINDS:
        errors.append(FieldError(f"{where}: gpu", f"{text!r} is no GPU kind: give one of "
                                 f"{', '.join(GPU_KINDS)} or a profile store (.h5)"))
        return None
    return kind, None, GPU_NVLINK_DOMAIN[kind]


def _row(cells: dict[str, str], where: str, line: int, base: Path | None,
         errors: list[FieldError]) -> PriceRow | None:
    """One record's :class:`PriceRow`, or None when it breaks a rule (errors added)."""
    n0 = len(errors)
    for col in REQUIRED_COLUMNS:
        if not cells.get(col):
            errors.append(FieldError(f"{where}: {col}", "is empty: every row needs it"))
    if len(errors) > n0:
        return None
    kind = _kind(cells["gpu"], where, base, errors)
    price = _number(cells["price_per_gpu_hour_usd"], "price_per_gpu_hour_usd", where, errors,
                    integer=False, bounds=BOUNDS["price"])
    if price is not None and price <= 0:
        errors.append(FieldError(f"{where}: price_per_gpu_hour_usd",
                                 f"{cells['price_per_gpu_hour_usd']!r} must be positive"))
    max_gpus = _number(cells["max_gpus"], "max_gpus", where, errors, integer=True,
                       bounds=(1, 1_000_000))
    per_node = None
    if cells.get("gpus_per_node"):
        per_node = _number(cells["gpus_per_node"], "gpus_per_node", where, errors, integer=True,
                           bounds=BOUNDS["gpus_per_node"])
        if per_node is not None and kind is not None and per_node > kind[2]:
            errors.append(FieldError(f"{where}: gpus_per_node", (
                f"{per_node} is more than the {kind[2]} GPUs of {kind[0]}'s NVLink domain")))
    date = cells.get("date", "")
    if date and not _DATE.match(date):
        errors.append(FieldError(f"{where}: date", f"{date!r} must be YYYY-MM-DD or YYYY-MM"))
    elif len(date) == 10 and not _calendar_date(date):  # the pattern lets 2025-02-30 through
        errors.append(FieldError(f"{where}: date", f"{date!r} is no day of the calendar "
                                                   "(YYYY-MM-DD)"))
    if len(errors) > n0:
        return None
    return PriceRow(gpu=kind[0], price_per_gpu_hour_usd=float(price), max_gpus=int(max_gpus),
                    gpus_per_node=per_node, source=cells.get("source", ""), date=date,
                    row=line, profile_path=kind[1])


def parse_price_sheet(text: str, where: str = "price sheet", base: Path | None = None
                      ) -> PriceSheet:
    """Parse the CSV ``text`` of a price sheet; ``where`` names it in errors, ``base`` is the
    folder relative store paths start from (None: the working folder).

    Raises
    ------
    ConfigError
        Every broken rule at once: an unknown, missing or repeated column, a record with more
        cells than the header, a bad value (named ``WHERE: row N: COLUMN``), no rows, or
        more than :data:`MAX_PRICE_ROWS`.
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    errors: list[FieldError] = []
    header: list[str] | None = None
    rows: list[PriceRow] = []
    try:
        for record in reader:
            line = reader.line_num
            if not record or not any(c.strip() for c in record) or record[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip().lower() for c in record]
                unknown = [c for c in header if c not in PRICE_COLUMNS]
                missing = [c for c in REQUIRED_COLUMNS if c not in header]
                repeated = sorted({c for c in header if header.count(c) > 1})
                for c in unknown:
                    errors.append(FieldError(f"{where}: row {line}: {c or '(empty)'}",
                                             "unknown column: the columns are "
                                             + ", ".join(PRICE_COLUMNS)))
                for c in missing:
                    errors.append(FieldError(f"{where}: row {line}: {c}", "missing column"))
                for c in repeated:
                    errors.append(FieldError(f"{where}: row {line}: {c}", "column given twice"))
                if errors:
                    raise ConfigError(errors)
                continue
            if len(record) > len(header):
                errors.append(FieldError(f"{where}: row {line}", (
                    f"{len(record)} cells, more than the header's {len(header)} columns")))
                continue
            cells = {c: v.strip() for c, v in zip(header, record)}
            row = _row(cells, f"{where}: row {line}", line, base, errors)
            if row is not None:
                rows.append(row)
    except csv.Error as exc:
        errors.append(FieldError(f"{where}: row {reader.line_num}", f"not CSV: {exc}"))
    if header is None and not errors:
        errors.append(FieldError(where, "no header row (" + ", ".join(PRICE_COLUMNS) + ")"))
    elif not rows and not errors:
        errors.append(FieldError(where, "no price rows after the header"))
    if len(rows) > MAX_PRICE_ROWS:
        errors.append(FieldError(where, f"{len(rows)} rows, more than {MAX_PRICE_ROWS} (each row "
                                        "is a whole sweep)"))
    if errors:
        raise ConfigError(errors)
    return PriceSheet(rows=rows, path=where)
