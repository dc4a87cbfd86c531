"""The parsed-store cache (core.store.profile_store: images keyed by the store file's SHA-256): an
image holds the whole store, a cached open equals a parsed one, any change of the file is a new
key, a damaged or foreign image is ignored and rewritten, and an empty VTRAIN_CACHE_DIR turns
the cache off."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from core.store import image as store_image
from core.store.profile_store import ProfileStore

ROOT = Path(__file__).resolve().parent.parent
STORES = sorted((ROOT / "profiles").glob("*.h5"))


def assert_same_store(a: ProfileStore, b: ProfileStore) -> None:
    for name in ("device_name", "peak_flops", "memory_bytes", "memory_bandwidth_bytes_per_s",
                 "provenance", "op_model"):
        assert getattr(a, name) == getattr(b, name), name
        assert list(getattr(a, name) if isinstance(getattr(a, name), dict) else []) == \
            list(getattr(b, name) if isinstance(getattr(b, name), dict) else []), name
    assert a.op_names() == b.op_names()
    for op in a.op_names():
        (ka, ta, xa), (kb, tb, xb) = a.op_table(op), b.op_table(op)
        assert xa == xb and list(ka) == list(kb)
        for c in ka:
            assert ka[c].dtype == kb[c].dtype, (op, c)
            np.testing.assert_array_equal(ka[c], kb[c])
        assert ta.dtype == tb.dtype
        np.testing.assert_array_equal(ta, tb)
        assert list(a._ops[op].groups) == list(b._ops[op].groups)
    assert list(a._curves) == list(b._curves)
    for kind in a._curves:
        assert list(a._curves[kind]) == list(b._curves[kind])
        for n in a._curves[kind]:
            for x, y in zip(a.collective_curve(kind, n), b.collective_curve(kind, n)):
                np.testing.assert_array_equal(x, y)
    assert (a.residuals is None) == (b.residuals is None)
    if a.residuals is not None:
        assert a.residuals.procedure == b.residuals.procedure
        for c in a.residuals.COLUMNS:
            x, y = getattr(a.residuals, c), getattr(b.residuals, c)
            assert x.dtype == y.dtype, c
            np.testing.assert_array_equal(x, y)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("VTRAIN_CACHE_DIR", str(folder))
    return folder / "profile-stores"


def own_store(path: Path, source: Path = STORES[0]) -> Path:
    """A copy of a shipped store with other bytes (no shipped image matches it), at ``path``."""
    store = ProfileStore._parse(source, source.read_bytes())
    store.provenance = {**store.provenance, "note": f"a test copy at {path.name}"}
    store.save(path)
    return path


@pytest.mark.parametrize("path", STORES, ids=lambda p: p.name)
def test_image_round_trip_holds_the_whole_store(path, cache):
    store = ProfileStore._parse(path, path.read_bytes())
    again = ProfileStore.from_image(store.to_image())
    assert_same_store(again, store)
    key = {"b": 3, "s": 2048, "h": 12288, "a": 96, "t": 8, "f": 49152, "V": 51200, "dtype": "bf16"}
    for op in store.op_names():
        cols = store.op_table(op)[0]
        if set(cols) <= set(key) | {"n"}:
            k = {**key, "n": 10**8}
            assert again.op_time(op, k) == store.op_time(op, k)


def test_a_cached_open_equals_a_parsed_one_and_skips_hdf5(cache, monkeypatch, tmp_path):
    path = own_store(tmp_path / "a100.h5")  # the calibrated A100 store: residuals too
    first = ProfileStore.open(path)
    images = list(cache.glob("*.img"))
    assert len(images) == 1 and images[0].name.startswith(hashlib.sha256(
        path.read_bytes()).hexdigest())

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(ProfileStore, "_parse", classmethod(no_parse))
    second = ProfileStore.open(path)
    assert second.path == path
    assert_same_store(second, first)


def test_a_changed_store_file_is_a_new_key(cache, tmp_path):
    path = own_store(tmp_path / "store.h5")
    before = ProfileStore.open(path)
    changed = ProfileStore.from_image(before.to_image())
    changed.memory_bytes = before.memory_bytes / 2
    changed.save(path)  # same path, new bytes (mtime may even be equal)
    after = ProfileStore.open(path)
    assert after.memory_bytes == before.memory_bytes / 2
    assert len(list(cache.glob("*.img"))) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "version", "bad value"])
def test_a_damaged_image_is_ignored_and_rewritten(cache, tmp_path, damage):
    path = own_store(tmp_path / "store.h5", STORES[1])
    want = ProfileStore.open(path)
    (image,) = cache.glob("*.img")
    data = image.read_bytes()
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "garbage":
        data = b"\x00" * 100
    elif damage == "version":
        data = data.replace(b'"version":1', b'"version":9', 1)
    else:  # a negative time in the first table: refused by add_op_table's checks
        store = ProfileStore.from_image(data)
        op = store.op_names()[0]
        keys, t, axis = store.op_table(op)
        store._ops[op].time_s = -t
        data = store.to_image()
        with pytest.raises(ValueError):
            ProfileStore.from_image(data)
    image.write_bytes(data)
    got = ProfileStore.open(path)
    assert_same_store(got, want)
    assert ProfileStore.from_image(image.read_bytes()).memory_bytes == want.memory_bytes  # rewritten


def test_empty_cache_dir_setting_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("VTRAIN_CACHE_DIR", "")
    assert store_image.image_cache_dir() is None
    path = tmp_path / "store.h5"
    path.write_bytes(STORES[1].read_bytes())
    assert ProfileStore.open(path).device_name


def test_cache_keeps_the_newest_images(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(store_image, "IMAGE_CACHE_SIZE", 2)
    base = ProfileStore._parse(STORES[1], STORES[1].read_bytes())
    for i in range(4):
        s = ProfileStore.from_image(base.to_image())
        s.memory_bytes = base.memory_bytes + i * 2**20
        s.save(tmp_path / f"s{i}.h5")
        ProfileStore.open(tmp_path / f"s{i}.h5")
    assert len(list(cache.glob("*.img"))) == 2


def test_simulate_needs_no_hdf5_with_the_shipped_images(tmp_path):
    """A fresh cache: the shipped store's image is read (no h5py); with the cache off
    (``VTRAIN_CACHE_DIR=``) the HDF5 file is parsed; the same iteration time either way."""
    import os
    import subprocess
    code = ("import sys; from core.io.session import load_any; from core.sim.simulate import simulate; "
            "r = simulate(load_any('resources/examples/mtnlg_530b.json')); "
            "print(repr(r.report.iteration_time_s), 'h5py' in sys.modules)")
    out = []
    for cache in (str(tmp_path / "c"), ""):
        env = {**os.environ, "VTRAIN_CACHE_DIR": cache}
        out.append(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                                  capture_output=True, text=True, check=True).stdout.split())
    assert out[0][0] == out[1][0]
    assert out[0][1] == "False" and out[1][1] == "True"


def test_every_shipped_store_has_its_current_image():
    """Run ``python scripts/store_images.py`` after changing a store in profiles/."""
    names = {store_image.image_name(hashlib.sha256(p.read_bytes()).hexdigest()): p for p in STORES}
    shipped = {p.name for p in store_image.SHIPPED_IMAGES.glob("*.img")}
    assert shipped == set(names), "profiles/images is stale: run python scripts/store_images.py"
    for name, path in names.items():
        image = ProfileStore.from_image((store_image.SHIPPED_IMAGES / name).read_bytes())
        assert_same_store(image, ProfileStore._parse(path, path.read_bytes()))
