"""The profile store's image format: a compact copy of a parsed store (no HDF5), and the
on-disk cache of images.

What belongs here: :func:`to_image` / :func:`from_image` (the layout: :data:`IMAGE_MAGIC`, a
JSON header and the arrays' raw little-endian bytes; no pickle), the cache of images keyed by
the SHA-256 of a store file's bytes (:func:`image_cache_dir`, :func:`cached_image`,
:func:`cache_image`) and the images shipped beside the stores (:data:`SHIPPED_IMAGES`). A
store is built through the class given to :func:`from_image`, so this module does not import
:mod:`core.store.profile_store`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from core.store.format import check_op_columns
from core.store.residuals import ResidualTable, repeated_row
from core.util.atomic import atomic_target

__all__ = ["IMAGE_MAGIC", "IMAGE_VERSION", "IMAGE_CACHE_SIZE", "MAX_IMAGE_BYTES",
           "image_cache_dir", "SHIPPED_IMAGES", "image_name", "cached_image", "cache_image",
           "to_image", "from_image"]

#: First bytes of :func:`to_image`; its version (a change of layout invalidates
#: the cached images, which are keyed by it too).
IMAGE_MAGIC = b"vtrain-store-image\n"
IMAGE_VERSION = 1
#: Most parsed-store images kept in the cache folder (:func:`image_cache_dir`); older ones
#: are removed.
IMAGE_CACHE_SIZE = 32


def image_cache_dir() -> Path | None:
    """Folder of the cached images of parsed stores: ``$VTRAIN_CACHE_DIR/profile-stores``, else
    ``$XDG_CACHE_HOME/vtrain/profile-stores`` or ``~/.cache/vtrain/profile-stores``; None
    when ``VTRAIN_CACHE_DIR`` is set but empty (no cache).

    Reading an HDF5 store costs about 0.1 s (h5py's import and its per-object overhead);
    a cached image, keyed by the SHA-256 of the store file's bytes (so any change of the
    file is a new key), is read in a few milliseconds and checked as a store is.
    """
    env = os.environ.get("VTRAIN_CACHE_DIR")
    if env is not None:
        return Path(os.path.expanduser(env)) / "profile-stores" if env.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vtrain" / "profile-stores"


#: Images of the shipped stores (``profiles/*.h5``), named like the cache's: the first run
#: after installing needs no HDF5 either (``scripts/store_images.py`` writes them; a test
#: checks that they match the stores).
SHIPPED_IMAGES = Path(__file__).resolve().parents[2] / "profiles" / "images"


def image_name(digest: str) -> str:
    """File name of the image of a store file whose bytes have SHA-256 ``digest`` (hex)."""
    return f"{digest}.v{IMAGE_VERSION}.img"


def _image_path(digest: str) -> Path | None:
    folder = image_cache_dir()
    return None if folder is None else folder / image_name(digest)




def cached_image(digest: str, cls: Any) -> Any:
    """The store (built as ``cls``) of the cached (else shipped) image for a store file of
    SHA-256 ``digest``; None when the cache is off, there is none or it cannot be used
    (unreadable, of another version, invalid: it is then ignored, and the caller parses the
    store and rewrites it)."""
    path = _image_path(digest)
    if path is None:
        return None
    for candidate in (path, SHIPPED_IMAGES / image_name(digest)):
        try:
            with open(candidate, "rb") as fh:
                data = fh.read(MAX_IMAGE_BYTES + 1)
            if len(data) <= MAX_IMAGE_BYTES:
                return from_image(data, cls)
        except Exception:  # noqa: BLE001 -- a cache: any fault means "parse the store"
            continue
    return None


def cache_image(digest: str, store: Any) -> None:
    """Write ``store``'s image for ``digest`` atomically (best effort: a folder that cannot be
    written means no cache); keep the newest :data:`IMAGE_CACHE_SIZE` images."""
    path = _image_path(digest)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_target(path) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(to_image(store))
        images = sorted(path.parent.glob("*.img"), key=lambda q: q.stat().st_mtime)
        for old in images[:-IMAGE_CACHE_SIZE]:
            old.unlink()
    except (OSError, ValueError, TypeError):
        pass



#: Largest cached image read (a store file is at most ``MAX_BYTES["store"]``; its image is smaller).
MAX_IMAGE_BYTES = 512 * 2**20


def to_image(store: Any) -> bytes:
    """The store as a compact image (no HDF5): what :func:`from_image` reads back.

    Layout: :data:`IMAGE_MAGIC`, the length of a JSON header (8 bytes, little
    endian), the header (UTF-8; scalars, dicts, string key columns and the layout
    of the arrays) and the arrays' raw little-endian bytes. It holds everything
    the store holds, in the same order; no pickle. Used for the on-disk cache of
    parsed stores (:meth:`~core.store.profile_store.ProfileStore.open`) and to send a store to sweep workers.
    """
    blobs: list[bytes] = []
    offset = 0

    def put(a: np.ndarray) -> dict[str, Any]:
        nonlocal offset
        if a.dtype.kind in "US":
            values, codes = np.unique(a, return_inverse=True)
            return {"str": values.tolist(), "codes": put(codes.reshape(-1).astype("<i8"))}
        a = np.ascontiguousarray(a, "<i8" if a.dtype.kind in "iub" else "<f8")
        ref = {"dtype": a.dtype.str, "offset": offset, "count": int(a.size)}
        blobs.append(a.tobytes())
        offset += a.nbytes
        return ref

    header: dict[str, Any] = {
        "version": IMAGE_VERSION, "device_name": store.device_name,
        "peak_flops": dict(store.peak_flops), "memory_bytes": store.memory_bytes,
        "memory_bandwidth_bytes_per_s": store.memory_bandwidth_bytes_per_s,
        "provenance": store.provenance, "op_model": store.op_model,
        "ops": [{"op": op, "axis": axis, "keys": [[c, put(v)] for c, v in keys.items()],
                 "time_s": put(time_s)} for op, keys, time_s, axis in store.op_tables()],
        "collectives": [{"kind": kind, "curves": [[n, put(x), put(t)] for n, (x, t) in c.items()]}
                        for kind, c in store.curves().items()],
        "residuals": None if store.residuals is None else {
            "procedure": str(store.residuals.procedure),
            "columns": [[c, put(np.asarray(getattr(store.residuals, c)))]
                        for c in store.residuals.columns]},
    }
    text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    return IMAGE_MAGIC + len(text).to_bytes(8, "little") + text + b"".join(blobs)


def from_image(data: bytes, cls: Any) -> Any:
    """Inverse of :func:`to_image`: the store built as ``cls``; every value goes through the
    same checks as a store read from HDF5 (the constructor, ``add_op_table``,
    ``add_collective``).

    Raises
    ------
    ValueError
        Not an image of this version, truncated, or holding invalid values.
    """
    if not data.startswith(IMAGE_MAGIC):
        raise ValueError("not a profile store image")
    start = len(IMAGE_MAGIC) + 8
    size = int.from_bytes(data[len(IMAGE_MAGIC):start], "little")
    try:
        header = json.loads(data[start:start + size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"profile store image header: {exc}") from None
    if not isinstance(header, dict) or header.get("version") != IMAGE_VERSION:
        raise ValueError("profile store image of another version")
    body = memoryview(data)[start + size:]

    def get(ref: dict[str, Any]) -> np.ndarray:
        if "str" in ref:
            return np.asarray(ref["str"], dtype=str)[get(ref["codes"])]
        dtype = np.dtype(ref["dtype"])
        if dtype.str not in ("<i8", "<f8"):
            raise ValueError(f"profile store image: dtype {ref['dtype']!r}")
        count, off = int(ref["count"]), int(ref["offset"])
        if off < 0 or count < 0 or off + count * 8 > len(body):
            raise ValueError("profile store image is truncated")
        return np.frombuffer(body, dtype, count, off).copy()

    store = cls(header["device_name"], header["peak_flops"], header["memory_bytes"],
                header["memory_bandwidth_bytes_per_s"], header["provenance"],
                header["op_model"])
    for entry in header["ops"]:  # the file's rules on op tables, for an image cached before them
        check_op_columns(f"/ops/{entry['op']}", entry["op"], [c for c, _ in entry["keys"]])
        store.add_op_table(entry["op"], {c: get(ref) for c, ref in entry["keys"]},
                           get(entry["time_s"]), entry["axis"])
    for entry in header["collectives"]:
        for n, x, t in entry["curves"]:
            store.add_collective(entry["kind"], int(n), get(x), get(t))
    res = header["residuals"]
    if res is not None:
        store.residuals = ResidualTable(**{c: get(ref) for c, ref in res["columns"]},
                                        procedure=res["procedure"])
        again = repeated_row(store.residuals)  # an image cached before the rule: the store
        if again is not None:                  # is parsed again, and refused by name
            raise ValueError(f"profile store image: /residuals: {again}")
    return store
