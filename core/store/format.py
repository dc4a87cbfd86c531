"""The profile store's HDF5 file format (schema version 2): reading, writing and the checks
that make reading an untrusted file safe.

What belongs here: the layout of a store file (``docs/profile_store.md``): encoding-typed
groups, dict groups of attributes, op tables, collective curves and residual tables; the
audit run before any value is read (no external or soft links, external storage, virtual
datasets, unknown filters, or datasets of an unexpected dtype or size), the h5py loader that
empties HDF5's plugin folders (:func:`load_h5py`), and the typed readers that name the part
and the rule of any invalid value (:class:`ProfileStoreError`). The store itself
(:class:`core.store.profile_store.ProfileStore`: lookups) is built through the class given
to :func:`read_store` / :func:`parse_store`, so this module does not import it.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.model.keys import FAMILY_KEY_DEFAULTS, OP_KEYS
from core.store.residuals import FEATURE_GROUPS, ResidualTable, repeated_row
from core.util.text import did_you_mean

if TYPE_CHECKING:  # annotations only: h5py is loaded through load_h5py(), plugins switched off
    import h5py

__all__ = ["SCHEMA_VERSION", "NOT_A_STORE", "MAX_OBJECTS", "MAX_DEPTH", "MAX_DATASET_ELEMENTS",
           "ALLOWED_FILTERS", "ProfileStoreError", "is_number", "load_h5py", "read_store_bytes",
           "audit", "store_bytes", "write_store", "read_store", "parse_store", "check_op_columns"]

SCHEMA_VERSION = 2
_ROOT_TYPE = "vtrain-profile-store"
_ENC_TYPE, _ENC_VERSION = "encoding-type", "encoding-version"
_JSON_KEYS = "json-keys"  # attribute listing the dict-group attributes that hold JSON text
_RESERVED = (_ENC_TYPE, _ENC_VERSION, _JSON_KEYS)
# encoding-type -> newest encoding-version this build reads
_GROUP_VERSIONS = {_ROOT_TYPE: SCHEMA_VERSION, "dict": 1, "op-table": 1, "collective-curve": 1,
                   "residual-table": 5}


#: The one message for a path that is not a readable store (missing, unreadable, not a
#: regular file, not HDF5, not a vTrain store): errors must not tell whether a path exists.
NOT_A_STORE = "not a readable vTrain profile store"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Most objects (groups and datasets), deepest path and largest dataset a store may have
#: (the shipped stores have about 100 objects, depth 4 and datasets of a few hundred rows).
MAX_OBJECTS = 100_000
MAX_DEPTH = 8
MAX_DATASET_ELEMENTS = 10_000_000
#: Filters a store's datasets may use, by HDF5 filter id: the ones h5py always has (HDF5's
#: deflate (gzip), shuffle and Fletcher-32, and h5py's own LZF, registered as 32000). Any
#: other id would make HDF5 look for a plugin library when a chunk is read.
ALLOWED_FILTERS = {1: "gzip", 2: "shuffle", 3: "fletcher32", 32000: "lzf"}


class ProfileStoreError(ValueError):
    """A profile store file cannot be read; the message names the file and the problem."""


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (python or numpy), not a bool or a string."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)))



def store_bytes(store: Any) -> bytes:
    """``store`` (a :class:`~core.store.profile_store.ProfileStore`) as the bytes of an HDF5
    file, built in memory.

    Saving writes these bytes with plain file I/O: the HDF5 library never writes to
    the disk, so a full disk or a failed write is an ``OSError`` naming the file and
    never leaves the library in a state that crashes the process later.
    """
    h5py = load_h5py()  # on first use only: a cached store needs no HDF5

    buf = io.BytesIO()
    with h5py.File(buf, "w", track_order=True) as f:
        write_store(f, store)
    return buf.getvalue()


def write_store(f: h5py.File, store: Any) -> None:
    """Write ``store`` into the open HDF5 file ``f`` (the layout of docs/profile_store.md)."""
    h5py = load_h5py()
    # the oldest version that holds everything: a store without residuals is a version-1 file
    version = SCHEMA_VERSION if store.residuals is not None else 1
    f.attrs.update({_ENC_TYPE: _ROOT_TYPE, _ENC_VERSION: np.int64(version),
                    "device_name": store.device_name,
                    "memory_bytes": store.memory_bytes,
                    "memory_bandwidth_bytes_per_s": store.memory_bandwidth_bytes_per_s})
    for name, d in (("peak_flops", store.peak_flops), ("provenance", store.provenance),
                    ("op_model", store.op_model)):
        _write_dict(f.create_group(name, track_order=True), d)
    ops = _write_dict(f.create_group("ops", track_order=True), {})
    for op, keys, time_s, axis in store.op_tables():
        g = ops.create_group(op, track_order=True)
        g.attrs.update({_ENC_TYPE: "op-table", _ENC_VERSION: np.int64(1), "axis": axis})
        for c, v in keys.items():
            if v.dtype.kind == "U":
                g.create_dataset(c, data=v.astype(object), dtype=h5py.string_dtype("utf-8"))
            else:
                g.create_dataset(c, data=v)
        g.create_dataset("time_s", data=time_s)
    coll = _write_dict(f.create_group("collectives", track_order=True), {})
    for kind, curves in store.curves().items():
        kg = _write_dict(coll.create_group(kind, track_order=True), {})
        for n, (x, t) in sorted(curves.items()):
            g = kg.create_group(str(n))
            g.attrs.update({_ENC_TYPE: "collective-curve", _ENC_VERSION: np.int64(1)})
            g.create_dataset("bytes", data=x)
            g.create_dataset("time_s", data=t)
    if store.residuals is not None:
        _write_residuals(f.create_group("residuals", track_order=True), store.residuals)


def parse_store(path: Path, data: bytes, cls: Any) -> Any:
    """The store (an instance of ``cls``) of the HDF5 file bytes ``data`` read from ``path``
    (audited, checked).

    Raises
    ------
    ProfileStoreError
        Not a store, or a corrupted or invalid one (the message names the file).
    """
    h5py = load_h5py()  # on first use only: a cached store needs no HDF5

    try:
        with h5py.File(io.BytesIO(data), "r") as f:
            if f.attrs.get(_ENC_TYPE) != _ROOT_TYPE:
                raise ProfileStoreError(f"{path}: {NOT_A_STORE}")
            audit(f)
            store = read_store(f, cls)
    except ProfileStoreError as exc:
        raise ProfileStoreError(str(exc) if str(exc).startswith(str(path))
                                else f"{path}: {exc}") from None
    except (OSError, KeyError, ValueError, TypeError, RuntimeError, AttributeError,
            IndexError, OverflowError, RecursionError) as exc:
        raise ProfileStoreError(f"{path}: corrupted profile store: "
                                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                ) from None
    return store



def read_store(f: h5py.File, cls: Any) -> Any:
    """The store in the audited HDF5 file ``f``, built as ``cls(...)`` with its
    ``add_op_table`` and ``add_collective`` (which check every value).

    Raises
    ------
    ProfileStoreError
        A missing or mistyped part, or an invalid value (named by its path in the file).
    """
    load_h5py()  # the plugin search list emptied again before any chunk is read
    _check(f, _ROOT_TYPE)
    a = f.attrs
    for name in ("device_name", "memory_bytes", "memory_bandwidth_bytes_per_s"):
        if name not in a:
            raise ProfileStoreError(f"missing root attribute {name!r}")
    for name in ("peak_flops", "provenance", "op_model", "ops", "collectives"):
        if name not in f:
            raise ProfileStoreError(f"missing group /{name}")
    device = a["device_name"]
    device = device.decode("utf-8", "replace") if isinstance(device, bytes) else device
    if not isinstance(device, str) or not 0 < len(device) <= 200:
        raise ProfileStoreError("root attribute 'device_name' must be a name of 1 to 200 "
                                "characters")
    sizes = {name: _number_attr(f, name) for name in ("memory_bytes", "memory_bandwidth_bytes_per_s")}
    numbers = {}
    for name in ("peak_flops", "op_model"):
        numbers[name] = _read_dict(f[name])
        for k, v in numbers[name].items():
            if not is_number(v):
                raise ProfileStoreError(f"/{name}: attribute {k!r} is {_type_name(v)} "
                                        f"{v!r:.60}, expected a number")
    provenance = _read_dict(f["provenance"])
    try:
        store = cls(device, numbers["peak_flops"], sizes["memory_bytes"],
                    sizes["memory_bandwidth_bytes_per_s"], provenance, numbers["op_model"])
    except ValueError as exc:
        raise ProfileStoreError(str(exc)) from None
    _check(f["ops"], "dict")
    for op, g in f["ops"].items():
        _check(g, "op-table")
        if "axis" not in g.attrs or "time_s" not in g:
            raise ProfileStoreError(f"{g.name}: missing 'axis' attribute or 'time_s' dataset")
        axis = g.attrs["axis"]
        if not isinstance(axis, str):
            raise ProfileStoreError(f"{g.name}: attribute 'axis' is {_type_name(axis)}, "
                                    "expected a string")
        _typed_dataset(g["time_s"], "float")
        check_op_columns(g.name, op, [c for c in g if c != "time_s"])
        keys = {c: _typed_dataset(ds, "key") for c, ds in g.items() if c != "time_s"}
        try:
            store.add_op_table(op, keys, g["time_s"][()], axis)
        except ValueError as exc:
            raise ProfileStoreError(f"{g.name}: {exc}") from None
    _check(f["collectives"], "dict")
    for kind, kg in f["collectives"].items():
        _check(kg, "dict")
        for n, g in kg.items():
            _check(g, "collective-curve")
            if not (n.isascii() and n.isdigit() and str(int(n)) == n):
                raise ProfileStoreError(f"{g.name}: group name {n!r} is not a decimal rank count")
            for name in ("bytes", "time_s"):
                if name not in g:
                    raise ProfileStoreError(f"{g.name}: missing dataset {name!r}")
                _typed_dataset(g[name], "float")
            try:
                store.add_collective(kind, int(n), g["bytes"][()], g["time_s"][()])
            except (ValueError, KeyError) as exc:
                raise ProfileStoreError(f"{g.name}: {exc}") from None
    if "residuals" in f:  # schema 2, optional
        store.residuals = _read_residuals(f["residuals"])
    return store



def check_op_columns(where: str, op: str, columns: list[str]) -> None:
    """Refuse an op table of a store file that the simulator would use wrongly or never:
    an op that is not one of :data:`core.model.keys.OP_KEYS` (a misspelled table is never
    looked up: its op silently took the analytic model), a key column that is not one of the
    op's (no lookup could match its rows), or a missing key column other than a model-family
    column (:data:`core.model.keys.FAMILY_KEY_DEFAULTS`, which a table written before it
    existed lacks, meaning GPT's value): rows without ``h``, ``t`` or ``dtype`` match every
    value of it, one shape's time taken for another's.

    Raises
    ------
    ProfileStoreError
        Naming the table's path, the op or column and the rule."""
    if op not in OP_KEYS:
        raise ProfileStoreError(f"{where}: unknown op {op!r}, not one of "
                                f"{', '.join(OP_KEYS)}{did_you_mean(op, OP_KEYS)}")
    keys = OP_KEYS[op]
    extra = [c for c in columns if c not in keys]
    if extra:
        raise ProfileStoreError(f"{where}: key column {extra[0]!r} is not a key of {op} (its "
                                f"keys: {', '.join(keys)}): no lookup could match its rows")
    missing = [c for c in keys if c not in columns and c not in FAMILY_KEY_DEFAULTS]
    if missing:
        raise ProfileStoreError(f"{where}: missing key column {missing[0]!r} of {op}: its rows "
                                f"would be taken for every {missing[0]} (one shape's time for "
                                "another's)")


def load_h5py() -> Any:
    """The h5py module, with HDF5's plugin folders emptied for this process.

    Before h5py is first imported, ``HDF5_PLUGIN_PATH`` is set empty and
    ``HDF5_PLUGIN_PRELOAD`` to ``"::"`` (HDF5's value for "load no plugin"); after any import
    (h5py may have been imported first by someone else) the plugin search path is cleared
    with ``h5py.h5pl``. A store's filters are audited before any chunk is read
    (:data:`ALLOWED_FILTERS`), so HDF5 never needs a plugin; this keeps any library in a
    plugin folder from being loaded even if a check missed one. (The installed h5py has no
    binding of ``H5PLset_loading_state``.)
    """
    if "h5py" not in sys.modules:
        os.environ["HDF5_PLUGIN_PATH"] = ""
        os.environ["HDF5_PLUGIN_PRELOAD"] = "::"
    import h5py

    while h5py.h5pl.size():
        h5py.h5pl.remove(0)
    return h5py


def _type_name(value: Any) -> str:
    """A short name of ``value``'s type for messages ("a boolean", "a string"...)."""
    if isinstance(value, (bool, np.bool_)):
        return "a boolean"
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return "a string"
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    return f"a {type(value).__name__}"


def _number_attr(node: Any, name: str) -> float:
    """Attribute ``name`` of ``node`` as a float; ProfileStoreError naming it unless it is a
    stored int or float (not a string, boolean or array)."""
    value = node.attrs[name]
    value = value.item() if isinstance(value, np.generic) else value
    if not is_number(value):
        raise ProfileStoreError(f"{node.name}: attribute {name!r} is {_type_name(value)} "
                                f"{value!r:.60}, expected a number")
    return float(value)


#: dtype rule of each role of a dataset: ``float`` times, sizes and measured values
#: (float32 or float64: float16 holds 3 significant digits and tops out at 65504), ``int``
#: counts (signed or unsigned integers), ``str`` names (HDF5 strings), ``key`` an op-table key
#: column (integers or strings; floats are not keys).
_DTYPE_RULES = {"float": "float32 or float64", "int": "integers", "str": "strings",
                "key": "integers or strings"}


def _typed_dataset(ds: Any, role: str) -> np.ndarray:
    """The values of dataset ``ds`` of ``role`` (a key of :data:`_DTYPE_RULES`): strings
    decoded as UTF-8 to a str array; ProfileStoreError naming the dataset and the expected
    dtype when it has another."""
    h5py = load_h5py()
    if not isinstance(ds, h5py.Dataset):
        raise ProfileStoreError(f"{ds.name}: expected a dataset of {_DTYPE_RULES[role]}, "
                                f"got {type(ds).__name__}")
    dtype = ds.dtype
    is_str = h5py.check_string_dtype(dtype) is not None
    ok = {"float": dtype.kind == "f" and dtype.itemsize in (4, 8),
          "int": dtype.kind in "iu" and not is_str,
          "str": is_str,
          "key": is_str or dtype.kind in "iu"}[role]
    if not ok:
        got = "strings" if is_str else str(dtype)
        raise ProfileStoreError(f"{ds.name}: dataset of {got}, expected {_DTYPE_RULES[role]}")
    if is_str:
        return np.asarray(ds.asstr()[()], dtype=str)
    return ds[()]


def _check(node: h5py.Group, expected: str) -> None:
    """Dispatch check: ``node`` must carry ``expected`` encoding-type at a known version."""
    where = node.name
    etype, ever = node.attrs.get(_ENC_TYPE), node.attrs.get(_ENC_VERSION)
    if etype is None or ever is None:
        raise ProfileStoreError(f"{where}: missing '{_ENC_TYPE}' or '{_ENC_VERSION}' attribute"
                                + (" (not a vTrain profile store)" if where == "/" else ""))
    if etype != expected:
        raise ProfileStoreError(f"{where}: encoding-type {etype!r}, expected {expected!r}")
    ever = ever.item() if isinstance(ever, np.generic) else ever
    if not isinstance(ever, int) or isinstance(ever, bool):
        raise ProfileStoreError(f"{where}: attribute {_ENC_VERSION!r} is {_type_name(ever)}, "
                                "expected an integer")
    newest = _GROUP_VERSIONS[expected]
    if int(ever) > newest:
        raise ProfileStoreError(f"{where}: {expected} encoding-version {int(ever)} is newer than "
                                f"this program supports (version {newest}); update vtrain")
    if int(ever) < 1:
        raise ProfileStoreError(f"{where}: unknown {expected} encoding-version {int(ever)}")


#: dtype role (:data:`_DTYPE_RULES`) of each residual column; the others are floats.
_RESIDUAL_ROLES = {"set": "str", "file": "str", "row": "int", "num_gpus": "int",
                   "gpus_per_node": "int", "gpu": "str", "family": "str", "precision": "str",
                   "recompute": "str", "schedule": "str", "micro_batch_size": "int",
                   "seq_length": "int", "cp": "int", "ep": "int", "attention_kernel": "str",
                   "tp_comm_overlap": "str", "fsdp": "str", "zero_stage": "str",
                   "overlap_grad_reduce": "str", "overlap_param_gather": "str"}
_STR_COLUMNS = tuple(c for c, role in _RESIDUAL_ROLES.items() if role == "str")


def _write_residuals(g: h5py.Group, table: Any) -> None:
    """Write a :class:`core.store.interval.ResidualTable` as a "residual-table" group: encoding
    version 1 without the feature columns, 2 with the first group of
    :data:`core.store.residuals.FEATURE_GROUPS`, 3 with the first two, 4 with the third too
    (the model FLOPs per GPU, a float column), 5 with the fourth too (the ZeRO stage and the
    data-parallel overlaps) (this build reads all five; a build that reads up to version 4
    refuses version 5 by name)."""
    h5py = load_h5py()  # on first use only: a cached store needs no HDF5

    version = 1 + sum(getattr(table, group[0]) is not None for group in FEATURE_GROUPS)
    g.attrs.update({_ENC_TYPE: "residual-table", _ENC_VERSION: np.int64(version),
                    "procedure": str(table.procedure)})
    for c in table.columns:
        v = getattr(table, c)
        if c in _STR_COLUMNS:
            g.create_dataset(c, data=v.astype(object), dtype=h5py.string_dtype("utf-8"))
        else:
            g.create_dataset(c, data=v)


def _read_residuals(g: h5py.Group) -> Any:
    """Inverse of :func:`_write_residuals`; ProfileStoreError naming the group when invalid,
    or when a row repeats an earlier one's (set, file, row)
    (:func:`core.store.residuals.repeated_row`)."""
    _check(g, "residual-table")
    missing = [c for c in ResidualTable.COLUMNS if c not in g]
    if missing:
        raise ProfileStoreError(f"{g.name}: missing column(s) {', '.join(missing)}")
    cols = {c: _typed_dataset(g[c], _RESIDUAL_ROLES.get(c, "float")) for c in ResidualTable.COLUMNS}
    version = int(g.attrs[_ENC_VERSION])
    for since, group in enumerate(FEATURE_GROUPS, start=2):  # each group: all or none
        if version < since:
            break
        feats = [c for c in group if c in g]
        if feats and len(feats) != len(group):
            raise ProfileStoreError(f"{g.name}: missing feature column(s) "
                                    f"{', '.join(c for c in group if c not in g)}")
        cols.update({c: _typed_dataset(g[c], _RESIDUAL_ROLES.get(c, "float")) for c in feats})
    procedure = g.attrs.get("procedure", "")
    if not isinstance(procedure, str):
        raise ProfileStoreError(f"{g.name}: attribute 'procedure' is {_type_name(procedure)}, "
                                "expected a string")
    try:
        table = ResidualTable(**cols, procedure=procedure)
    except (ValueError, TypeError) as exc:
        raise ProfileStoreError(f"{g.name}: {exc}") from None
    again = repeated_row(table)
    if again is not None:
        raise ProfileStoreError(f"{g.name}: {again}")
    return table


def _write_dict(g: h5py.Group, d: dict[str, Any]) -> h5py.Group:
    """Store ``d`` as attributes of a "dict" group; non-scalar values as JSON text."""
    g.attrs.update({_ENC_TYPE: "dict", _ENC_VERSION: np.int64(1)})
    json_keys = []
    for k, v in d.items():
        if k in _RESERVED or "/" in k:
            raise ValueError(f"{g.name}: key {k!r} is reserved or invalid")
        if isinstance(v, str):
            g.attrs[k] = str(v)  # plain str: h5py cannot write str subclasses (torch's version)
        elif isinstance(v, (bool, int, float, np.generic)):
            g.attrs[k] = v
        else:
            g.attrs[k] = json.dumps(v)
            json_keys.append(k)
    if json_keys:
        g.attrs[_JSON_KEYS] = json.dumps(json_keys)
    return g


def _read_dict(g: h5py.Group) -> dict[str, Any]:
    """Inverse of :func:`_write_dict`: scalar attributes (str, bool, int, float) and JSON text
    (bounded nesting, finite numbers); any other attribute is refused."""
    _check(g, "dict")
    json_keys = _parse_attr_json(g, _JSON_KEYS, g.attrs.get(_JSON_KEYS, "[]"))
    if not isinstance(json_keys, list) or not all(isinstance(k, str) for k in json_keys):
        raise ProfileStoreError(f"{g.name}: attribute {_JSON_KEYS!r} must be a JSON list of names")
    out = {}
    for k, v in g.attrs.items():
        if k in _RESERVED:
            continue
        v = v.item() if isinstance(v, np.generic) else v
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if k in json_keys:
            out[k] = _parse_attr_json(g, k, v)
        elif isinstance(v, (str, bool, int)):
            out[k] = v
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ProfileStoreError(f"{g.name}: attribute {k!r} is {v!r}, not a finite number")
            out[k] = v
        else:
            raise ProfileStoreError(f"{g.name}: attribute {k!r} is not a scalar "
                                    f"(got {type(v).__name__})")
    return out


def _parse_attr_json(g: h5py.Group, key: str, text: Any) -> Any:
    from core.util.inputs import parse_json
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise ProfileStoreError(f"{g.name}: attribute {key!r} must be JSON text")
    return parse_json(text, f"{g.name}: attribute {key!r}", ProfileStoreError)


def read_store_bytes(path: Path) -> bytes:
    """The bytes of a store file; :data:`NOT_A_STORE` for anything that is not a readable
    regular HDF5 file (missing, unreadable, a folder, a FIFO, another kind of file)."""
    from core.util.inputs import read_bytes

    class _Unreadable(Exception):
        pass

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        raise ProfileStoreError(f"{path}: {NOT_A_STORE}") from None
    try:
        st = os.fstat(fd)
        head = os.read(fd, len(_HDF5_SIGNATURE)) if stat.S_ISREG(st.st_mode) else b""
    except OSError:
        head = b""
    finally:
        os.close(fd)
    if head != _HDF5_SIGNATURE:
        raise ProfileStoreError(f"{path}: {NOT_A_STORE}")
    try:
        return read_bytes(path, _Unreadable, "store")
    except _Unreadable as exc:
        raise ProfileStoreError(str(exc)) from None


def audit(f: h5py.File) -> None:
    """Refuse what a store must not hold before any value is read: external links (a link
    to another file), soft links, external raw storage and virtual datasets (data in other
    files), filters other than :data:`ALLOWED_FILTERS` (an unknown one makes HDF5 load
    plugin libraries), committed datatypes, datasets of an unexpected dtype or of more than
    :data:`MAX_DATASET_ELEMENTS` elements, more than :data:`MAX_OBJECTS` objects or paths
    deeper than :data:`MAX_DEPTH` (a hard-link cycle ends there)."""
    h5py = load_h5py()  # on first use only: a cached store needs no HDF5

    count = 0
    stack: list[h5py.Group] = [f]
    while stack:
        g = stack.pop()
        for name in list(g.keys()):
            where = f"{g.name.rstrip('/')}/{name}"
            link = g.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise ProfileStoreError(f"{where}: an external link to another file "
                                        f"({link.filename!r}); a store must not pull in other files")
            if isinstance(link, h5py.SoftLink):
                raise ProfileStoreError(f"{where}: a soft link ({link.path!r}); a store holds "
                                        "only its own groups and datasets")
            count += 1
            if count > MAX_OBJECTS:
                raise ProfileStoreError(f"more than {MAX_OBJECTS:,} objects")
            if where.count("/") > MAX_DEPTH:
                raise ProfileStoreError(f"{where}: nested deeper than {MAX_DEPTH} groups")
            obj = g[name]
            if isinstance(obj, h5py.Group):
                stack.append(obj)
            elif isinstance(obj, h5py.Dataset):
                _audit_filters(obj, where)
                if obj.external:
                    raise ProfileStoreError(f"{where}: dataset stored in external files "
                                            f"{[e[0] for e in obj.external]}; a store must not "
                                            "pull in other files")
                if obj.is_virtual:
                    raise ProfileStoreError(f"{where}: a virtual dataset (data in other files); "
                                            "a store must not pull in other files")
                if obj.ndim != 1:
                    raise ProfileStoreError(f"{where}: dataset of shape {obj.shape}, expected 1-D")
                if obj.size > MAX_DATASET_ELEMENTS:
                    raise ProfileStoreError(f"{where}: dataset of {obj.size:,} elements, more than "
                                            f"{MAX_DATASET_ELEMENTS:,}")
                kind = obj.dtype.kind
                if not (kind in "iuf" or h5py.check_string_dtype(obj.dtype) is not None):
                    raise ProfileStoreError(f"{where}: dataset of dtype {obj.dtype}, expected "
                                            "numbers or strings")
            else:
                raise ProfileStoreError(f"{where}: unexpected object {type(obj).__name__}")


def _audit_filters(ds: Any, where: str) -> None:
    """Refuse dataset ``ds`` (at path ``where``) if its filter pipeline holds a filter other
    than :data:`ALLOWED_FILTERS`, naming the filter's id and stored name. Only the dataset's
    creation property list is read (no chunk), so HDF5 never looks for a filter plugin."""
    plist = ds.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        fid, _flags, _values, name = plist.get_filter(i)
        if fid not in ALLOWED_FILTERS:
            text = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
            text = "".join(c if c.isprintable() else "?" for c in text)[:60]
            raise ProfileStoreError(
                f"{where}: filter {fid}{f' ({text})' if text else ''} in the dataset's filter "
                f"pipeline; a store may use only {', '.join(ALLOWED_FILTERS.values())}")
