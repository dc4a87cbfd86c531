"""`vtrain calibrate --profile P --out X` on small files: fewer rows than folds, parameters the
rows cannot determine, and the fitted / held split with bound hits (a trial's faults 1-3)."""

import json

import numpy as np
import pytest

from core.accuracy.calibrate import linearize, parameter_sensitivity
from core.accuracy.fit_params import FIT_PARAMS
from core.accuracy.shared_fit import bound_hits, parameters_at_bound
from core.cli import main
from core.model.ops import DEFAULT_OP_MODEL
from core.plan.session import ClusterConfig, CostConfig, ModelConfig, ParallelPlan, Session
from core.store.profile_store import ProfileStore
from core.store.profiles_gen import generate_store

_COLUMNS = ("name,gpu,gpus_per_node,num_layers,hidden_size,num_attention_heads,seq_length,"
            "vocab_size,micro_batch_size,global_batch_size,tensor_parallel,pipeline_parallel,"
            "data_parallel,precision,recompute,attention_kernel,measured_iteration_time_s")


def _csv(path, rows):
    """A measurement file of a tiny GPT on one A100 per row: ``rows`` of (h, b, seconds)."""
    lines = [f"tiny,A100-SXM4-80GB,8,4,{h},8,512,50257,{b},{4 * b},1,1,1,fp16,full,unfused,{t}"
             for h, b, t in rows]
    path.write_text(_COLUMNS + "\n" + "\n".join(lines) + "\n")
    return str(path)


#: Base values the single-GPU rows carry no information on, set away from FIT_START.
_BASE_HELD = {"inter_node_efficiency": 0.55, "p2p_overhead_s": 3e-5, "collective_overhead_s": 7e-6}


@pytest.fixture(scope="module")
def base_path(tmp_path_factory):
    store = generate_store("A100-SXM4-80GB", date="2026-01-01")
    store.op_model = {**DEFAULT_OP_MODEL, **(store.op_model or {}), **_BASE_HELD}
    path = tmp_path_factory.mktemp("base") / "base.h5"
    store.save(path)
    return path


def _session(t: int, p: int, d: int, gpus_per_node: int) -> Session:
    return Session(ModelConfig("tiny", 4, 512, 8, None, 512, 50257),
                   ParallelPlan(t, p, d, 1, 8 * d, "1f1b", "full", "fp16"),
                   ClusterConfig("A100-SXM4-80GB", gpus_per_node, None, 200.0), CostConfig())


def test_sensitivity_is_zero_exactly_where_the_rows_carry_no_traffic():
    base = generate_store("A100-SXM4-80GB", date="2026-01-01")
    names = ["gemm_efficiency_max", "inter_node_efficiency", "p2p_overhead_s"]
    op_model = {**DEFAULT_OP_MODEL, "inter_node_efficiency": 0.8, "p2p_overhead_s": 1e-5}
    one_node = [linearize(_session(1, 1, 1, 8), base, op_model)]
    sens = parameter_sensitivity(one_node, names, op_model)
    assert sens.shape == (1, 3) and abs(sens[0, 0]) > 1e-3
    assert sens[0, 1] == 0 and sens[0, 2] == 0
    # data parallel over two nodes of two GPUs, and two pipeline stages: each moves its rows
    spread = [linearize(_session(1, 1, 4, 2), base, op_model),
              linearize(_session(1, 2, 1, 8), base, op_model)]
    assert np.all(np.abs(parameter_sensitivity(spread, names, op_model)).max(axis=0) > 1e-6)


def test_one_row_and_fewer_rows_than_folds_calibrate_without_an_internal_error(tmp_path, capsys,
                                                                              base_path):
    one = _csv(tmp_path / "one.csv", [(512, 1, 0.05)])
    out = tmp_path / "one.h5"
    assert main(["calibrate", one, "--profile", str(base_path), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["folds"] == {"one.csv": 0} and doc["cross_validation"] == {}
    assert ProfileStore.open(out).residuals is None  # no out-of-sample residual, no band
    two = _csv(tmp_path / "two.csv", [(512, 1, 0.05), (512, 2, 0.09)])
    assert main(["calibrate", two, "--profile", str(base_path), "--out", str(out), "--json",
                 "--folds", "5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["folds"] == {"two.csv": 2} and doc["cross_validation"]["two.csv"]["n"] == 2
    residuals = ProfileStore.open(out).residuals
    assert residuals is not None and len(residuals) == 2


def test_the_store_records_its_rows_and_a_fit_they_cannot_pin(tmp_path, capsys, base_path):
    """The store's provenance has the rows fitted (num_rows) and, with fewer rows than fitted
    parameters, says the fit is one among many (underdetermined), which `vtrain profile show`
    prints: the console's warning alone left the store of one row looking like any other."""
    out = tmp_path / "s.h5"
    one = _csv(tmp_path / "one.csv", [(512, 1, 0.05)])
    assert main(["calibrate", one, "--profile", str(base_path), "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    k = len(json.loads(captured.out)["fitted_parameters"])
    prov = ProfileStore.open(out).provenance
    assert k > 1 and prov["num_rows"] == 1
    assert prov["underdetermined"] == (f"1 rows for {k} fitted parameters: the rows cannot pin "
                                       "them all; the fitted values are one fit among many that "
                                       "match the rows")
    assert prov["underdetermined"] in " ".join(captured.err.split())
    assert main(["profile", "show", str(out)]) == 0
    assert f"underdetermined: 1 rows for {k} fitted" in capsys.readouterr().out
    many = _csv(tmp_path / "many.csv", [(256 * (1 + i % 4), 1 + i // 4, 0.03 * (1 + i))
                                        for i in range(k)])
    assert main(["calibrate", many, "--profile", str(base_path), "--out", str(out), "--json",
                 "--folds", "0"]) == 0
    assert len(json.loads(capsys.readouterr().out)["fitted_parameters"]) <= k
    prov = ProfileStore.open(out).provenance
    assert prov["num_rows"] == k and "underdetermined" not in prov


def test_parameters_the_rows_do_not_determine_keep_the_base_values(tmp_path, capsys, base_path):
    """Single-GPU rows: no collective, no pipeline transfer, no inter-node traffic; those three
    keep the base store's values (they used to take the fit's start, FIT_START)."""
    csv = _csv(tmp_path / "runs.csv", [(512, 1, 0.05), (512, 2, 0.09), (1024, 1, 0.12)])
    out = tmp_path / "out.h5"
    assert main(["calibrate", csv, "--profile", str(base_path), "--out", str(out), "--folds", "0",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    store = ProfileStore.open(out)
    for name, value in _BASE_HELD.items():
        assert doc["parameters"][name] == value and store.op_model[name] == value, name
        assert name not in doc["fitted_parameters"] and name in doc["held_parameters"], name
        assert name in store.provenance["not_determined"], name
        assert name not in store.provenance["fitted_parameters"], name
    assert set(doc["fitted_parameters"]) == set(FIT_PARAMS) - set(_BASE_HELD)
    # every parameter is either fitted or held, never both
    assert set(doc["fitted_parameters"]) | set(doc["held_parameters"]) == set(doc["parameters"])
    assert not set(doc["fitted_parameters"]) & set(doc["held_parameters"])
    # the store's source is the base store fitted to the data, not the file written
    assert "base.h5" in store.provenance["source"] and "runs.csv" in store.provenance["source"]
    assert "out.h5" not in store.summary()


def test_bound_hits_are_marked_as_profile_show_finds_them(tmp_path, capsys, base_path):
    """Runs far faster than the model can be at any efficiency: the GEMM efficiency ends at its
    upper bound, and the JSON says so as `vtrain profile show` does."""
    csv = _csv(tmp_path / "fast.csv", [(512, 1, 1e-4), (512, 2, 1.5e-4), (1024, 1, 2e-4)])
    out = tmp_path / "fast.h5"
    assert main(["calibrate", csv, "--profile", str(base_path), "--out", str(out), "--folds", "0",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    prov = ProfileStore.open(out).provenance
    assert doc["at_bound"]["gemm_efficiency_max"]["bound"] == "upper"
    assert doc["at_bound"] == json.loads(json.dumps(bound_hits(prov)))
    assert set(doc["at_bound"]) <= set(doc["fitted_parameters"])
    assert len(parameters_at_bound(prov)) == len(doc["at_bound"])
    # the tables: the bound hit is marked on its row of the fitted parameters
    assert main(["calibrate", csv, "--profile", str(base_path), "--out", str(out), "--folds",
                 "0"]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if "gemm_efficiency_max" in line)
    assert "upper" in row
    held_at = text.index("inter_node_efficiency")
    assert text.index("gemm_efficiency_max") < held_at  # held listed after the fitted


@pytest.mark.parametrize("folds", ["1", "-1"])
def test_a_fold_count_that_holds_nothing_out_is_refused_naming_the_option(tmp_path, capsys,
                                                                         base_path, folds):
    csv = _csv(tmp_path / "runs.csv", [(512, 1, 0.05), (512, 2, 0.09)])
    out = tmp_path / "out.h5"
    assert main(["calibrate", csv, "--profile", str(base_path), "--out", str(out), "--folds",
                 folds]) == 2
    err = capsys.readouterr().err
    assert "--folds" in err and "internal error" not in err and not out.exists()


def test_the_profiles_gpu_kind_is_the_rows_store_and_another_kind_is_warned(tmp_path, capsys,
                                                                           base_path):
    """--profile is the store of every row, as on validate: rows of a GPU kind without a
    shipped store are fitted with it (they were skipped: "no usable rows"); rows of another
    kind than the store's are fitted with it and warned of on standard error."""
    from core.store.gpu_spec import GPU_SPECS_DIR
    spec = json.loads((GPU_SPECS_DIR / "H100-SXM5-80GB.json").read_text())
    spec["name"] = "My-GPU"
    (tmp_path / "my.json").write_text(json.dumps(spec))
    store = tmp_path / "my.h5"
    assert main(["profile", "generate", "--spec", str(tmp_path / "my.json"), "--out",
                 str(store)]) == 0
    rows = _csv(tmp_path / "my.csv", [(512, 1, 0.05), (512, 2, 0.09)])
    mine = tmp_path / "mine.csv"
    mine.write_text(open(rows).read().replace("A100-SXM4-80GB", "My-GPU"))
    capsys.readouterr()
    assert main(["calibrate", str(mine), "--profile", str(store), "--out",
                 str(tmp_path / "fit.h5"), "--folds", "0"]) == 0
    assert "another GPU's figures" not in capsys.readouterr().err
    assert main(["calibrate", rows, "--profile", str(store), "--out", str(tmp_path / "fit2.h5"),
                 "--folds", "0"]) == 0
    assert (f"warning: {rows}: rows of A100-SXM4-80GB fitted with the store of My-GPU "
            "(--profile): another GPU's figures") in capsys.readouterr().err.splitlines()


def test_validate_says_what_the_stores_calibration_left_open(tmp_path, capsys, base_path):
    """`vtrain validate --profile` with a store fitted to fewer rows than parameters said
    nothing of it (calibrate and `profile show` do): the figures looked like any store's. The
    report names the store's `underdetermined` note and the parameters its rows did not
    determine (kept at the base store's values), text and --json (`profile_fit`)."""
    out = tmp_path / "one.h5"
    one = _csv(tmp_path / "one.csv", [(512, 1, 0.05)])
    assert main(["calibrate", one, "--profile", str(base_path), "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    prov = ProfileStore.open(out).provenance
    assert prov["underdetermined"].startswith("1 rows for ") and prov["not_determined"]
    other = _csv(tmp_path / "other.csv", [(1024, 2, 0.2), (512, 2, 0.1)])
    assert main(["validate", other, "--profile", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile_fit"] == [{"store": "one.h5", "device": "A100-SXM4-80GB", "rows": [1, 2],
                                   "underdetermined": prov["underdetermined"],
                                   "not_determined": prov["not_determined"]}]
    assert main(["validate", other, "--profile", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (f"profile one.h5 is underdetermined: {prov['underdetermined']} (2 rows predicted "
            "with it)") in text
    name, why = next(iter(prov["not_determined"].items()))
    assert ("profile one.h5: parameters its calibration rows did not determine, at its base "
            f"store's values: {name} ({why})") in text
    # a store whose rows pinned every parameter and determined all: nothing said
    assert main(["validate", other, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile_fit"] == []


def test_calibrate_reports_no_r2_for_one_row(tmp_path, capsys, base_path):
    """The in-sample table of a one-row fit printed R^2 "nan"; it says "n/a (one row)", as
    `vtrain validate` does (and --json has null)."""
    one = _csv(tmp_path / "one.csv", [(512, 1, 0.05)])
    out = str(tmp_path / "s.h5")
    assert main(["calibrate", one, "--profile", str(base_path), "--out", out]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if "all rows, in-sample" in line)
    assert "n/a (one row)" in row and "nan" not in row
    assert main(["calibrate", one, "--profile", str(base_path), "--out", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["in_sample"]["r2"] is None
