"""Tests of the HDF5 profile store (core/store/profile_store.py)."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from core.store.format import SCHEMA_VERSION, ProfileStoreError
from core.store.profile_store import Lookup, ProfileStore


def _store(method: str = "measured") -> ProfileStore:
    return ProfileStore(
        "A100-SXM4-80GB",
        {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
        80 * 2**30, 2.039e12,
        {"method": method, "date": "2024-05-01", "torch_version": "2.3.0", "num_repeats": 20,
         "parameters": {"gemm_efficiency_max": 0.8, "shapes": [1, 2]}},
        op_model={"gemm_efficiency_max": 0.8, "kernel_overhead_s": 5e-6},
    )


def _power_law(b, c=1e-3, k=0.75):
    return c * np.asarray(b, dtype=np.float64) ** k


@pytest.fixture
def full_store() -> ProfileStore:
    st = _store()
    b = np.array([1, 2, 4, 8, 1, 2, 4, 8])
    st.add_op_table("attention_fwd", {"b": b, "s": np.full(8, 2048), "h": np.full(8, 12288),
                                      "a": np.full(8, 96), "t": np.repeat([1, 8], 4),
                                 "dtype": np.array(["bf16"] * 8)},
                    _power_law(b) / np.repeat([1, 8], 4), axis="b")
    st.add_op_table("optimizer_step", {"n": np.array([10**6, 10**8, 10**9]),
                                       "dtype": np.array(["fp32"] * 3)},
                    np.array([1e-4, 5e-3, 4e-2]), axis="n")
    x = 2.0 ** np.arange(10, 30, 2)
    for n in (2, 8):
        st.add_collective("all_reduce", n, x, 1e-5 + x / 100e9 * n / 4)
    st.add_collective("send_recv", 2, x[::-1], (4e-6 + x / 50e9)[::-1])
    return st


# ------------------------------------------------------------------- round trip
def test_save_open_round_trip(tmp_path, full_store):
    path = tmp_path / "a100.h5"
    full_store.save(path)
    assert full_store.path == path
    got = ProfileStore.open(path)
    assert got.path == path
    for name in ("device_name", "peak_flops", "memory_bytes", "memory_bandwidth_bytes_per_s",
                 "provenance", "op_model"):
        assert getattr(got, name) == getattr(full_store, name), name
    assert got.provenance["parameters"] == {"gemm_efficiency_max": 0.8, "shapes": [1, 2]}
    assert type(got.provenance["num_repeats"]) is int
    assert got.op_names() == full_store.op_names() == ["attention_fwd", "optimizer_step"]
    for op in full_store.op_names():
        keys0, t0, axis0 = full_store.op_table(op)
        keys1, t1, axis1 = got.op_table(op)
        assert axis1 == axis0 and list(keys1) == list(keys0)
        for c in keys0:
            assert keys1[c].dtype == keys0[c].dtype, c
            np.testing.assert_array_equal(keys1[c], keys0[c])
        np.testing.assert_array_equal(t1, t0)
    assert got.collective_kinds() == {"all_reduce": [2, 8], "send_recv": [2]}
    for kind, sizes in full_store.collective_kinds().items():
        for n in sizes:
            for a, b in zip(got.collective_curve(kind, n), full_store.collective_curve(kind, n)):
                np.testing.assert_array_equal(a, b)
    assert got.op_time("attention_fwd", {"b": 3, "s": 2048, "h": 12288, "a": 96, "t": 8, "dtype": "bf16"}) \
        == full_store.op_time("attention_fwd", {"b": 3, "s": 2048, "h": 12288, "a": 96, "t": 8, "dtype": "bf16"})
    assert "A100-SXM4-80GB" in got.summary() and "measured" in got.summary()
    assert "2024-05-01" in got.summary()


def test_file_layout_carries_encoding_attributes(tmp_path, full_store):
    path = tmp_path / "a100.h5"
    full_store.save(path)
    with h5py.File(path, "r") as f:
        assert f.attrs["encoding-type"] == "vtrain-profile-store"
        assert f.attrs["encoding-version"] == 1
        assert f["peak_flops"].attrs["bf16"] == 312e12
        g = f["ops/attention_fwd"]
        assert g.attrs["encoding-type"] == "op-table" and g.attrs["axis"] == "b"
        assert g["b"].dtype == np.int64 and h5py.check_string_dtype(g["dtype"].dtype)
        assert f["collectives/all_reduce/8"].attrs["encoding-type"] == "collective-curve"
        f.visititems(lambda name, obj: None if isinstance(obj, h5py.Dataset)
                     else _assert_encoded(name, obj))


def _assert_encoded(name, group):
    assert "encoding-type" in group.attrs and "encoding-version" in group.attrs, name


# --------------------------------------------------------------------- op_time
def test_op_time_exact_hit(full_store):
    got = full_store.op_time("attention_fwd", {"b": 4, "s": 2048, "h": 12288, "a": 96, "t": 1, "dtype": "bf16"})
    assert got == Lookup(float(_power_law(4)), False, "table")


def test_op_time_log_log_interpolation():
    st = _store()
    st.add_op_table("mlp_fwd", {"b": np.array([2, 8]), "h": np.array([4096, 4096])},
                    np.array([1.0, 4.0]), axis="b")
    got = st.op_time("mlp_fwd", {"b": 4, "h": 4096, "extra": "ignored"})
    assert got.time_s == pytest.approx(2.0, rel=1e-12)
    assert (got.extrapolated, got.source) == (False, "table")


def test_op_time_extrapolates_power_law(full_store):
    key = {"b": 16, "s": 2048, "h": 12288, "a": 96, "t": 1, "dtype": "bf16"}
    got = full_store.op_time("attention_fwd", key)
    assert got.time_s == pytest.approx(float(_power_law(16)), rel=1e-12)
    assert (got.extrapolated, got.source) == (True, "extrapolated")
    below = full_store.op_time("optimizer_step", {"n": 10**5, "dtype": "fp32"})
    assert below.extrapolated and below.time_s < 1e-4


def test_op_time_single_point_scales_proportionally():
    st = _store()
    st.add_op_table("adam_step", {"n": np.array([1000])}, np.array([2e-3]), axis="n")
    assert st.op_time("adam_step", {"n": 3000}) == Lookup(pytest.approx(6e-3), True, "extrapolated")


def test_op_time_no_match_returns_none(full_store):
    assert full_store.op_time("attention_fwd", {"b": 4, "s": 4096, "h": 12288, "a": 96, "t": 1,
                                           "dtype": "bf16"}) is None
    assert full_store.op_time("attention_fwd", {"b": 4, "s": 2048, "h": 12288, "a": 96, "t": 1,
                                           "dtype": "fp16"}) is None
    assert full_store.op_time("unknown_op", {"b": 4}) is None


def test_op_time_missing_key_column(full_store):
    with pytest.raises(KeyError, match="dtype"):
        full_store.op_time("attention_fwd", {"b": 4, "s": 2048, "h": 12288, "a": 96, "t": 1})


def test_add_op_table_validates():
    st = _store()
    with pytest.raises(ValueError, match="length"):
        st.add_op_table("x", {"b": np.array([1, 2])}, np.array([1.0]), axis="b")
    with pytest.raises(ValueError, match="positive"):
        st.add_op_table("x", {"b": np.array([1, 2])}, np.array([1.0, -1.0]), axis="b")
    with pytest.raises(ValueError, match="positive"):
        st.add_op_table("x", {"b": np.array([1, 2])}, np.array([1.0, np.inf]), axis="b")
    with pytest.raises(ValueError, match="duplicate"):
        st.add_op_table("x", {"b": np.array([1, 1])}, np.array([1.0, 2.0]), axis="b")
    with pytest.raises(ValueError, match="integers or strings"):
        st.add_op_table("x", {"b": np.array([1.5, 2])}, np.array([1.0, 2.0]), axis="b")
    st.add_op_table("x", {"b": np.array([1, 2])}, np.array([1.0, 2.0]), axis="b")
    st.add_op_table("x", {"b": np.array([4])}, np.array([3.0]), axis="b")  # replaces
    assert st.op_names() == ["x"] and st.op_time("x", {"b": 4}).time_s == 3.0


# ------------------------------------------------------------------ collectives
def test_collective_trivial_cases(full_store):
    assert full_store.collective_time("all_reduce", 1, 1e9) == Lookup(0.0, False, "table")
    assert full_store.collective_time("all_gather", 4, 0) == Lookup(0.0, False, "table")


def test_collective_interpolation_power_law():
    st = _store()
    x = np.array([1e3, 1e5, 1e7])
    st.add_collective("all_gather", 4, x, 2e-9 * x**0.9)
    for nbytes in (1e3, 3.3e4, 1e6, 1e7):
        got = st.collective_time("all_gather", 4, nbytes)
        assert got.time_s == pytest.approx(2e-9 * nbytes**0.9, rel=1e-12)
        assert (got.extrapolated, got.source) == (False, "table")


def test_collective_alpha_beta_fit_outside_range():
    st = _store()
    alpha, beta = 7e-6, 1 / 150e9
    x = 2.0 ** np.arange(10, 24)
    st.add_collective("reduce_scatter", 8, x, alpha + beta * x)
    for nbytes in (8.0, 2.0**30):
        got = st.collective_time("reduce_scatter", 8, nbytes)
        assert got.time_s == pytest.approx(alpha + beta * nbytes, rel=1e-9)
        assert (got.extrapolated, got.source) == (True, "fit")


def test_collective_ring_model_for_missing_group_size():
    st = _store()
    alpha, bus_bw = 3e-6, 180e9
    x = 2.0 ** np.arange(12, 32, 3)
    for n in (2, 4, 8):
        st.add_collective("all_reduce", n, x, alpha * 2 * (n - 1) + x * 2 * (n - 1) / n / bus_bw)
    got_alpha, got_bw = st.ring_model("all_reduce")
    assert got_alpha == pytest.approx(alpha, rel=1e-6)
    assert got_bw == pytest.approx(bus_bw, rel=1e-6)
    nbytes = 3e8
    got = st.collective_time("all_reduce", 6, nbytes)
    assert got.time_s == pytest.approx(alpha * 10 + nbytes * (10 / 6) / bus_bw, rel=1e-6)
    assert (got.extrapolated, got.source) == (True, "fit")


def test_collective_missing_kind(full_store):
    with pytest.raises(KeyError, match="all_gather.*all_reduce"):
        full_store.collective_time("all_gather", 4, 1e6)
    with pytest.raises(KeyError, match="unknown collective kind"):
        full_store.collective_time("broadcast", 4, 1e6)


def test_add_collective_validates():
    st = _store()
    with pytest.raises(ValueError, match="distinct"):
        st.add_collective("all_reduce", 2, np.array([1.0, 1.0]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="kind"):
        st.add_collective("gather", 2, np.array([1.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="group_size"):
        st.add_collective("all_reduce", 1, np.array([1.0]), np.array([1.0]))


def test_constructor_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        _store(method="guessed")


# ------------------------------------------------------------------------ files
@pytest.mark.parametrize("target", ["file", "replace"])
def test_failed_save_keeps_old_file(tmp_path, monkeypatch, full_store, target):
    path = tmp_path / "a100.h5"
    _store().save(path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    if target == "file":
        monkeypatch.setattr(h5py, "File", boom)  # profile_store imports h5py when it writes
    else:
        monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        full_store.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["a100.h5"]
    monkeypatch.undo()
    assert ProfileStore.open(path).op_names() == []


def test_open_missing_unreadable_or_foreign_files_give_one_message(tmp_path):
    """Errors must not tell whether an arbitrary path exists or what it holds."""
    (tmp_path / "notes.h5").write_text("not hdf5\n")
    (tmp_path / "folder.h5").mkdir()
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)  # opening it for reading must not block
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f.create_dataset("x", data=[1])
    for name in ("nope.h5", "notes.h5", "folder.h5", "fifo.h5", "plain.h5"):
        with pytest.raises(ProfileStoreError) as err:
            ProfileStore.open(tmp_path / name)
        assert str(err.value) == f"{tmp_path / name}: not a readable vTrain profile store"


def test_open_newer_version(tmp_path):
    path = tmp_path / "future.h5"
    _store().save(path)
    with h5py.File(path, "a") as f:
        f.attrs["encoding-version"] = SCHEMA_VERSION + 1
    with pytest.raises(ProfileStoreError, match=f"version {SCHEMA_VERSION + 1} is newer") as err:
        ProfileStore.open(path)
    assert "future.h5" in str(err.value)


def test_open_wrong_encoding_type_and_missing_attribute(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = 1
    with pytest.raises(ProfileStoreError, match="not a readable vTrain profile store"):
        ProfileStore.open(path)
    path3 = tmp_path / "nodevice.h5"
    _store().save(path3)
    with h5py.File(path3, "a") as f:
        del f.attrs["device_name"]
    with pytest.raises(ProfileStoreError, match="device_name"):
        ProfileStore.open(path3)


def test_open_unknown_group_encoding(tmp_path, full_store):
    path = tmp_path / "a100.h5"
    full_store.save(path)
    with h5py.File(path, "a") as f:
        f["ops/attention_fwd"].attrs["encoding-type"] = "op-table-sparse"
    with pytest.raises(ProfileStoreError, match="/ops/attention_fwd.*op-table-sparse"):
        ProfileStore.open(path)


@pytest.mark.parametrize("name, value, ok", [
    ("all_to_all_efficiency", 0.65, True), ("all_to_all_efficiency", 0.0, False),
    ("all_to_all_efficiency", -1.0, False), ("all_to_all_efficiency", 1.5, False),
    ("flex_all_to_all_efficiency", 1.0, True), ("flex_all_to_all_efficiency", 0.0, False),
    ("flex_all_to_all_efficiency", 2.0, False),
    ("fp8_gemm_efficiency", 1.03, True), ("fp8_gemm_efficiency", 0.0, False),
    ("fp8_gemm_efficiency", 2.5, False),
])
def test_a_stores_communication_and_fp8_efficiencies_are_range_checked(name, value, ok):
    """An all-to-all efficiency (NCCL's or DeepEP / HybridEP's) is a share of a link's rate,
    above 0 and at most 1; the FP8 GEMM efficiency a share of the BF16 curve's, above 0 and at
    most 2. A store outside them is refused naming the parameter (an efficiency of 0 divided
    by zero, a negative one gave negative times)."""
    def make():
        return ProfileStore("H100-SXM5-80GB", {"bf16": 989e12}, 80 * 2**30, 3.35e12,
                            {"method": "analytic"}, op_model={name: value})
    if ok:
        assert make().op_model[name] == value
    else:
        with pytest.raises(ValueError, match=rf"op_model\['{name}'\]"):
            make()


def test_an_unknown_op_model_parameter_is_refused_naming_the_closest():
    """A misspelled parameter (``gemm_eficiency_max``) was stored and never read: the op model
    silently took the default 0.8 for the parameter the file meant to set."""
    with pytest.raises(ValueError) as exc:
        ProfileStore("H100-SXM5-80GB", {"bf16": 989e12}, 80 * 2**30, 3.35e12,
                     {"method": "analytic"}, op_model={"gemm_eficiency_max": 0.6})
    msg = str(exc.value)
    assert msg.startswith("op_model['gemm_eficiency_max'] is not a parameter of the op model "
                          "(did you mean 'gemm_efficiency_max'?)")
    from core.model.ops import DEFAULT_OP_MODEL
    from core.store.profile_store import OP_MODEL_BOUND
    assert set(OP_MODEL_BOUND) == set(DEFAULT_OP_MODEL)  # every parameter the model reads


def _edited_store(tmp_path, name: str, edit) -> str:
    import shutil
    from tests.conftest import ROOT
    path = tmp_path / name
    shutil.copy(ROOT / "profiles" / "A100-SXM4-80GB.h5", path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return str(path)


def test_an_op_table_the_simulator_would_misuse_is_refused_at_open(tmp_path, capsys):
    """A store file's op table was taken as it came: a misspelled op ('attention_fxd') was never
    looked up (its op silently took the analytic model), a table with an extra key column 'q'
    opened and then failed every lookup ("op 'attention_fwd' lookup needs key columns ['q']",
    naming no file), and a table without its 'h' column opened and gave the time of one hidden
    size for every other (below: h=1536 took h=1024's). Each is refused at open, naming the
    file, the table and the column."""
    # what a table without 'h' did: its rows match any h
    keys = {"b": np.array([1]), "s": np.array([1024]), "f": np.array([4096]), "t": np.array([1]),
            "dtype": np.array(["fp16"])}
    st = _store()
    st.add_op_table("mlp_fwd", keys, np.array([2e-4]), axis="b")
    assert st.op_time("mlp_fwd", {**{k: v[0].item() for k, v in keys.items()}, "h": 1536}).time_s == 2e-4

    from core.cli import main
    cases = [
        ("misspelled.h5", lambda f: f.move("ops/attention_fwd", "ops/attention_fxd"),
         "/ops/attention_fxd: unknown op 'attention_fxd', not one of attention_fwd, attention_bwd, "),
        ("extra.h5", lambda f: f["ops/attention_fwd"].create_dataset("q", data=np.zeros(902, np.int64)),
         "/ops/attention_fwd: key column 'q' is not a key of attention_fwd (its keys: b, s, h, "),
        ("no_h.h5", lambda f: f.__delitem__("ops/mlp_fwd/h"),
         "/ops/mlp_fwd: missing key column 'h' of mlp_fwd: its rows would be taken for every h"),
    ]
    for name, edit, words in cases:
        path = _edited_store(tmp_path, name, edit)
        with pytest.raises(ProfileStoreError) as err:
            ProfileStore.open(path)
        assert str(err.value).startswith(f"{path}: {words}")
        assert main(["profile", "show", path]) == 2
        assert capsys.readouterr().err == f"vtrain: error: {err.value}\n"
    assert "did you mean attention_fwd?" in str(pytest.raises(
        ProfileStoreError, ProfileStore.open, str(tmp_path / "misspelled.h5")).value)
    # a family column a table lacks is GPT's value (the shipped A100 tables have no 'act')
    ok = ProfileStore.open(_edited_store(tmp_path, "ok.h5", lambda f: None))
    assert "act" not in ok.op_table("mlp_fwd")[0] and len(ok.op_table("mlp_fwd")[1]) == 902


def test_a_cached_image_of_a_misused_op_table_is_refused_too():
    """The parsed-store cache (core.store.image) holds images of stores parsed before a rule:
    an image goes through the file's op-table rules, so a cached image is never a way round
    them (the cache then parses the file, which names the fault)."""
    st = _store()
    st.add_op_table("mlp_fw", {"b": np.array([1, 2])}, np.array([1e-3, 2e-3]), axis="b")
    with pytest.raises(ProfileStoreError, match="/ops/mlp_fw: unknown op 'mlp_fw'"):
        ProfileStore.from_image(st.to_image())
