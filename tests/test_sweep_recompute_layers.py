"""``vtrain sweep --recompute-num-layers all|N[,N...]`` (``SweepSpace.recompute_num_layers``):
the recomputed layers per model chunk the full-recomputation plans take.

Found with a DeepSpeed / Hugging Face Trainer session: the import's suggested sweep kept
recompute to none and full, but full still came with the sweep's partial recomputations
(Megatron-LM's ``--recompute-method block --recompute-num-layers N``, the fewest layers per
chunk that fit), which a framework that checkpoints every block cannot run, and no option
kept full recomputation to every layer.

GPT-3 1.3B (24 layers) on p = 2: a stage holds 12 layers; interleaved v = 2, 3, 4, 6 give
model chunks of 6, 4, 3 and 2 layers (Megatron's block method recomputes the first N layers
of each chunk, every layer of a chunk of N or fewer).
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from core.cli import main
from core.io.session import save_session
from core.plan.cluster import ClusterConfig
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.studies.sweep import SweepSpace, enumerate_plans, run_sweep, unused_values


def _session() -> Session:
    return Session(MODEL_PRESETS["GPT-3 1.3B"],
                   ParallelPlan(tensor_parallel=1, pipeline_parallel=2, data_parallel=1,
                                micro_batch_size=1, global_batch_size=12, recompute="full",
                                precision="bf16"),
                   ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8))


def _space(**kw) -> SweepSpace:
    return SweepSpace(**{**dict(num_gpus=2, tensor_parallel=(1,), pipeline_parallel=(2,),
                                micro_batch_sizes=(1,), recompute=("full", "none"),
                                schedules=("1f1b",)), **kw})


def _layers(plans) -> dict[str, set]:
    out: dict[str, set] = {}
    for p in plans:
        out.setdefault(p.recompute, set()).add(p.recompute_num_layers)
    return out


def test_the_swept_counts_are_those_asked():
    s = _session()
    # the default: every layer and the fewest that fit (1 on an 80 GB A100 here)
    assert _layers(run_sweep(s, _space(), workers=1).plans) == {"full": {None, 1},
                                                                 "none": {None}}
    r = run_sweep(s, _space(recompute_num_layers=("all", 2, 5)), workers=1)
    assert _layers(r.plans) == {"full": {None, 2, 5}, "none": {None}}
    dim = next(d for d in r.dimensions if d["field"] == "recompute_num_layers")
    assert (dim["values"], dim["why"]) == ([2, 5, None], "the values given")
    # counts alone: no every-layer plan beside them, no fewest-that-fit count
    r = run_sweep(s, _space(recompute_num_layers=(3,)), workers=1)
    assert _layers(r.plans)["full"] == {3}
    # every layer alone: no partial recomputation
    r = run_sweep(s, _space(recompute_num_layers=("all",)), workers=1)
    assert _layers(r.plans) == {"full": {None}, "none": {None}}
    assert r.index_of(s.plan) is not None  # the session's own plan, every layer
    # a session that sets a count: kept by default, replaced by those asked
    four = Session(s.model, dataclasses.replace(s.plan, recompute_num_layers=4), s.cluster)
    assert _layers(enumerate_plans(four, _space()))["full"] == {4}
    assert _layers(enumerate_plans(four, _space(recompute_num_layers=("all",))))["full"] == {None}
    assert _layers(enumerate_plans(four, _space(recompute_num_layers=(2, 4))))["full"] == {2, 4}


def test_a_count_at_or_above_a_chunk_is_every_layer_once():
    """Interleaved chunks of 6, 4, 3, 2 layers: 3 is kept on v = 2, 3 and is every layer
    (None, once beside "all") on v = 4, 6, as Megatron's block method runs it."""
    s = _session()
    sp = _space(schedules=["interleaved"], recompute=["full"])
    got = {(p.virtual_pipeline_stages, p.recompute_num_layers)
           for p in enumerate_plans(s, dataclasses.replace(sp, recompute_num_layers=(3,)))}
    assert got == {(2, 3), (3, 3), (4, None), (6, None)}
    both = enumerate_plans(s, dataclasses.replace(sp, recompute_num_layers=("all", 3)))
    assert sorted(((p.virtual_pipeline_stages, p.recompute_num_layers) for p in both),
                  key=str) == sorted([(2, 3), (2, None), (3, 3), (3, None), (4, None),
                                      (6, None)], key=str)  # no duplicate at v = 4, 6
    r = run_sweep(s, dataclasses.replace(sp, recompute_num_layers=(3,)), workers=1)
    dim = next(d for d in r.dimensions if d["field"] == "recompute_num_layers")
    assert dim["values"] == [3, None]
    assert dim["why"].startswith("the values given; every layer (-) on the plans whose model "
                                 "chunks hold no more layers than a count given")
    # 12 (a whole stage) and more: every layer on every plan, said under the results
    r = run_sweep(s, _space(recompute=["full"], recompute_num_layers=(2, 12)), workers=1)
    assert _layers(r.plans)["full"] == {2, None}
    assert [(e.field, e.message.split(",")[0]) for e in unused_values(s, r.space, r)] == [
        ("--recompute-num-layers 12", "every full-recomputation plan's model chunks hold that "
                                      "many layers or fewer")]


def test_the_space_checks_round_trips_and_excludes():
    s = _session()
    sp = _space(recompute_num_layers=("all", 2))
    assert SweepSpace.from_dict(json.loads(json.dumps(sp.to_dict()))) == sp
    assert sp.to_dict()["recompute_num_layers"] == ["all", 2]
    for bad in ((0,), (-1,), ("two",), (True,), ()):
        errs = _space(recompute_num_layers=bad).errors()
        assert [e.field for e in errs] == ["sweep.recompute_num_layers"], bad
    with pytest.raises(ConfigError, match="25 is more than the model's 24 layers"):
        enumerate_plans(s, _space(recompute_num_layers=(25,)))
    with pytest.raises(ConfigError, match="under full recomputation only"):
        enumerate_plans(s, _space(recompute=["none"], recompute_num_layers=(2,)))
    four = dataclasses.replace(s.plan, recompute_num_layers=4)
    assert sp.excludes(four) == ("its recomputed layers per model chunk 4 are not among the "
                                 "sweep's all, 2")
    assert sp.excludes(s.plan) is None
    assert sp.excludes(dataclasses.replace(s.plan, recompute="none")) is None


@pytest.fixture()
def session_file(tmp_path):
    path = tmp_path / "s.json"
    save_session(_session(), path)
    return [str(path), "--gpus", "2", "--tensor-parallel", "1", "--pipeline-parallel", "2",
            "--micro-batch-sizes", "1", "--schedules", "1f1b", "--workers", "1"]


@pytest.mark.parametrize("value", ["0", "-1", "25", "two", "2.5", "all,"])
def test_the_cli_refuses_bad_counts_by_name(session_file, value, capsys):
    assert main(["sweep", *session_file, f"--recompute-num-layers={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vtrain: error: --recompute-num-layers: ")
    if value != "all,":
        assert (f"{value!r}: give all (every layer) or a number of layers per model chunk "
                "from 1 to the model's 24 (model.num_layers)") in err
    assert main(["sweep", *session_file, "--recompute", "none,selective",
                 "--recompute-num-layers", "2"]) == 2
    assert "add full to --recompute" in capsys.readouterr().err


def test_the_cli_sweeps_the_counts_asked(session_file, capsys, tmp_path):
    plans = tmp_path / "plans.csv"
    assert main(["sweep", *session_file, "--recompute-num-layers", "ALL,2",
                 "--recompute", "full", "--json", "--out", str(plans)]) == 0
    doc = json.loads(capsys.readouterr().out)
    dim = next(d for d in doc["dimensions"] if d["field"] == "recompute_num_layers")
    assert (dim["values"], dim["why"]) == ([2, None], "the values given")
    import csv
    assert {r["recompute_num_layers"] for r in csv.DictReader(plans.open())} == {"2", ""}
