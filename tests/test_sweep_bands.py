"""The sweep's error bands (core/studies/sweep/result.py ``_plan_bands``, core/store/interval.py
``interval_factors``), evaluated once per distinct band key, against each plan's own
:func:`core.store.interval.interval_for`.

Every plan's band factors, in-range flag and departures must be, bit for bit, those of its
own ``interval_for`` with its own features; and plans with the same
:func:`core.store.interval.band_key` must get the same band (factors, group, residuals,
conditions, like runs). Checked on dense, MoE with ep, context-parallel and FP8 sweeps, with
single- and multi-node GPU counts, against the shipped stores' residuals (H100: feature
columns, no scale-transfer rows; A100: feature columns and scale-transfer rows), the H100
residuals without the feature columns (a store written before them), a crafted table whose
like runs are few (the standardized band) and no residuals at all (an analytic store).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.store.calibration_range import features_of
from core.store.interval import band_key, interval_factors, interval_for, layer_parameters
from core.store.profile_store import ProfileStore
from core.studies.sweep import SweepSpace, enumerate_plans
from core.studies.sweep.result import _plan_bands
from tests.test_calibration_range import _crafted, _strip
from tests.test_sweep_memory_bound import fp8_session, gpt3_small, moe_session

_ROOT = Path(__file__).resolve().parent.parent


def _h100_dense() -> Session:
    s = gpt3_small()
    s.cluster = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8)
    return s


def _gpt_big() -> Session:
    """GPT-3 175B on H100s: GPU counts far beyond the calibration runs."""
    model = MODEL_PRESETS["GPT-3 175B"]
    plan = ParallelPlan(8, 8, 4, 1, 512, "1f1b", "full", "bf16")
    return Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8), CostConfig())


SWEEPS = {
    "dense-a100": (gpt3_small, dict(num_gpus=(4, 8, 16, 64), context_parallel=(1,),
                                    micro_batch_sizes=(1, 2), zero_stages=(0, 1, 3))),
    "dense-h100-cp": (_h100_dense, dict(num_gpus=(8, 32), context_parallel=(1, 2, 4),
                                        micro_batch_sizes=(1, 2), zero_stages=(0,))),
    "moe-ep": (moe_session, dict(num_gpus=(8, 16), pipeline_parallel=(1, 2),
                                 micro_batch_sizes=(1, 2), zero_stages=(0, 1))),
    "fp8": (fp8_session, dict(max_gpus=16, context_parallel=(1, 2), micro_batch_sizes=(1, 4),
                              zero_stages=(0,))),
    "gpt-175b-many-gpus": (_gpt_big, dict(num_gpus=(64, 2048, 8192), tensor_parallel=(8,),
                                          context_parallel=(1,), micro_batch_sizes=(1,),
                                          zero_stages=(0,), recompute=("full", "selective"))),
}


def _tables() -> dict:
    h100 = ProfileStore.open(_ROOT / "profiles" / "H100-SXM5-80GB.h5").residuals
    a100 = ProfileStore.open(_ROOT / "profiles" / "A100-SXM4-80GB.h5").residuals
    assert h100.has_features and a100.has_features
    return {"h100": h100, "a100": a100, "h100-no-features": _strip(h100), "crafted": _crafted(),
            "none": None}


@pytest.fixture(scope="module", params=sorted(SWEEPS))
def sweep(request):
    make, kw = SWEEPS[request.param]
    session = make()
    plans = enumerate_plans(session, SweepSpace(**kw))
    assert len(plans) >= 20, "too few plans to compare"
    return session, plans


@pytest.mark.parametrize("which", ["h100", "a100", "h100-no-features", "crafted", "none"])
def test_plan_bands_are_each_plans_own_interval(sweep, which):
    session, plans = sweep
    table = _tables()[which]
    gpn, params = session.cluster.gpus_per_node, layer_parameters(session.model)
    num_gpus = np.array([pl.num_gpus for pl in plans], np.int64)
    low, high, inside, departures = _plan_bands(plans, session.model, session.cluster, table,
                                                num_gpus, 0.9)
    with_features = table is not None and table.has_features
    by_key: dict = {}
    for i, pl in enumerate(plans):
        f = features_of(session.model, session.cluster, pl)
        iv = interval_for(table, 1.0, pl.num_gpus, gpn, params, 0.9,
                          features=f if with_features else None)
        want_lo = iv.low_factor if iv.available else math.nan
        want_hi = iv.high_factor if iv.available else math.nan
        assert np.array_equal([low[i], high[i]], [want_lo, want_hi], equal_nan=True), pl.label()
        assert bool(inside[i]) == bool(iv.in_calibration_range)
        assert departures[i] == (iv.departure_text if with_features else "")
        # the band key decides the whole band, but for the notes
        same = dataclasses.replace(iv, note="", departures=())
        got = by_key.setdefault(band_key(table, pl.num_gpus, gpn, params, f), same)
        assert got == same, pl.label()
    # interval_factors with one features dict per plan (no index): the same arrays
    if with_features:
        feats = [features_of(session.model, session.cluster, pl) for pl in plans]
        again = interval_factors(table, num_gpus, gpn, params, 0.9, features=feats)
        for a, b in zip(again, (low, high, inside)):
            assert np.array_equal(a, b, equal_nan=True)


def test_sweeps_cover_both_node_classes_and_the_range_edges():
    """The cases above reach single- and multi-node plans, in and out of the calibration range
    of the shipped stores, bands and no bands (else the comparison would prove little)."""
    tables = _tables()
    seen = set()
    for name in ("dense-a100", "gpt-175b-many-gpus"):
        make, kw = SWEEPS[name]
        session = make()
        plans = enumerate_plans(session, SweepSpace(**kw))
        g = np.array([pl.num_gpus for pl in plans], np.int64)
        for which in ("h100", "a100"):
            low, _, inside, _ = _plan_bands(plans, session.model, session.cluster,
                                            tables[which], g, 0.9)
            seen |= {(bool(a), bool(b)) for a, b in zip(np.isfinite(low), inside)}
    assert {(True, True), (False, False), (True, False)} <= seen


def test_sweeps_reach_plans_that_differ_only_in_tp_overlap_or_fsdp():
    """The features the sweep's plan columns must tell apart (not in
    ``_FEATURE_FREE_PLAN_FIELDS``) though nothing else of the band does: the dense A100 sweep has
    plans with and without TP overlap and FSDP (ZeRO 3), which against the A100 store's runs
    (none overlapped or sharded) depart, one clause each, and ZeRO 1 plans, which do not."""
    make, kw = SWEEPS["dense-a100"]
    session = make()
    plans = enumerate_plans(session, SweepSpace(**kw))
    table = _tables()["a100"]
    _, _, _, departures = _plan_bands(plans, session.model, session.cluster, table,
                                      np.array([pl.num_gpus for pl in plans], np.int64), 0.9)
    seen = {(pl.zero_stage, pl.tp_comm_overlap,
             "FSDP on" in d, "TP overlap on" in d) for pl, d in zip(plans, departures)}
    assert seen == {(0, False, False, False), (1, False, False, False), (3, False, True, False),
                    (0, True, False, True), (1, True, False, True), (3, True, True, True)}


def test_interval_factors_keep_the_shape_and_empty_input():
    table = _tables()["a100"]
    g = np.array([[8, 64], [1024, 8]])
    lo, hi, inside = interval_factors(table, g, 8, 1e10, 0.9)
    assert lo.shape == hi.shape == inside.shape == (2, 2)
    assert lo[0, 0] == lo[1, 1] and inside[0, 0] == inside[1, 1]
    one = interval_for(table, 1.0, 1024, 8, 1e10, 0.9)
    assert (lo[1, 0], hi[1, 0], inside[1, 0]) == (one.low_factor, one.high_factor,
                                                  bool(one.in_calibration_range))
    empty = interval_factors(table, np.zeros(0, np.int64), 8, 1e10, 0.9)
    assert [a.shape for a in empty] == [(0,), (0,), (0,)]


def test_plan_figures_flops_and_bands_are_each_plans_own(sweep):
    """plan_figures evaluates the FLOPs once per plan fields but d and b: each plan's own
    model and hardware FLOPs, bit for bit; its bands are _plan_bands' of the store's residuals."""
    from core.model import model_math
    from core.sim.simulate import session_profile
    from core.studies.sweep.result import plan_figures
    session, plans = sweep
    store = session_profile(session)
    num_gpus = np.array([pl.num_gpus for pl in plans], np.int64)
    cols, flops, hw, low, high, inside, note, deps = plan_figures(
        plans, session.model, store, session.cluster, num_gpus, 0.9)
    assert flops.tolist() == [model_math.model_flops_per_iteration(session.model, pl)
                              for pl in plans]
    assert hw.tolist() == [model_math.hardware_flops_per_iteration(session.model, pl)
                           for pl in plans]
    want = _plan_bands(plans, session.model, session.cluster, store.residuals, num_gpus, 0.9)
    for a, b in zip((low, high, inside), want[:3]):
        assert np.array_equal(a, b, equal_nan=True)
    assert deps == want[3] and note == ""
    assert cols["data_parallel"].tolist() == [pl.data_parallel for pl in plans]


def test_plan_column_arrays_are_the_fields_values(sweep):
    """Each column (filled from one value where the field has one) is the array of the
    plans' values, with the dtype of their one type (object when mixed, and for text)."""
    from core.plan.parallel import PLAN_FIELDS
    from core.studies.sweep.result import plan_column_arrays
    _, plans = sweep
    cols = plan_column_arrays(plans)
    for name in PLAN_FIELDS:
        values = [getattr(pl, name) for pl in plans]
        kinds = {type(v) for v in values}
        dtype = {frozenset({bool}): bool, frozenset({int}): np.int64}.get(frozenset(kinds))
        want = np.array(values, dtype=dtype or object)  # text: object, one str per text
        assert cols[name].dtype == want.dtype and cols[name].tolist() == want.tolist(), name
        assert [type(v) for v in cols[name].tolist()] == [type(v) for v in want.tolist()]
