"""The simulator's memo caches name stores, models and templates by identity: each such key
keeps its object in the cache (core.sim.stage_comm.pinned), so a cache that outlives one
store never answers for another allocated at the freed address."""

from __future__ import annotations

import dataclasses
import gc

import numpy as np

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.simulate import session_profile
from core.sim.stages import stage_times


def _session(gpu: str) -> Session:
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2,
                        micro_batch_size=1, global_batch_size=16, recompute="none",
                        precision="bf16")
    return Session(MODEL_PRESETS["GPT-3 1.3B"], plan, ClusterConfig(gpu=gpu, gpus_per_node=8),
                   CostConfig())


def _figures(st) -> list[np.ndarray]:
    return [np.asarray(getattr(st, f.name), float) for f in dataclasses.fields(st)
            if isinstance(getattr(st, f.name), np.ndarray)]


def test_a_cache_keeps_the_stores_it_names_and_answers_for_each_store_its_own():
    cache: dict = {}
    a100 = session_profile(_session("A100-SXM4-80GB"))
    first = stage_times(_session("A100-SXM4-80GB"), a100, cache)
    assert any(v is a100 for v in cache.values())  # pinned: its id cannot be reused
    del a100
    gc.collect()
    s = _session("H100-SXM5-80GB")
    h100 = session_profile(s)
    cached, fresh = stage_times(s, h100, cache), stage_times(s, h100, None)
    for x, y in zip(_figures(cached), _figures(fresh), strict=True):
        np.testing.assert_array_equal(x, y)
    # the H100 is faster: the cache did not hand back the A100's times
    assert float(np.sum(cached.fwd_s)) < float(np.sum(first.fwd_s))
