"""Session files: exact round trips, clear errors, atomic saves."""

from __future__ import annotations

import json
import os

import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.io.session import (SESSION_VERSION, SessionFileError, load_any, load_session, save_session,
                          session_to_json)
from tests.conftest import EXAMPLES


def odd_session():
    return Session(MODEL_PRESETS["MT-NLG 530B"],
                   ParallelPlan(4, 5, 3, 2, 48, "gpipe", "none", "fp16"),
                   ClusterConfig("H100-SXM5-80GB", 4, 123.456, 1600.5, None),
                   CostConfig(0.1 + 0.2, 1.2345678901234567e12), notes="ünïcode ✓\nline two")


def test_round_trip_is_exact(tmp_path):
    s = odd_session()
    path = tmp_path / "a.json"
    save_session(s, path)
    back = load_session(path)
    assert back == s
    assert back.cost.price_per_gpu_hour_usd == 0.1 + 0.2  # float bits preserved
    save_session(back, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_examples_load(tmp_path):
    for path in EXAMPLES.glob("*.json"):
        s = load_any(path)
        assert session_to_json(s) == path.read_text()


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not a valid JSON file"),
    ('{"format": "something-else", "version": 1}', "not a vTrain session file"),
    ('{"format": "vtrain-session", "version": 99}', "version 99 is newer than this program supports"),
    ('{"format": "vtrain-session", "version": "1"}', "\"version\" must be an integer"),
    ('{"format": "vtrain-session", "version": 1, "model": {}, "plan": {"tensor_parallel": -1.5}}',
     "plan.tensor_parallel"),
    ('{"format": "vtrain-session", "version": 1, "plan": {}}', "missing section 'model'"),
    ('{"format": "vtrain-session", "version": 1}', "missing sections 'model', 'plan'"),
])
def test_bad_files_give_clear_errors(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SessionFileError) as info:
        load_session(path)
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(SessionFileError, match="cannot read"):
        load_session(tmp_path / "nope.json")


def test_failed_save_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    save_session(Session(), path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        save_session(odd_session(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_written_version_is_current(tmp_path):
    doc = json.loads(session_to_json(Session()))
    assert doc["format"] == "vtrain-session" and doc["version"] == SESSION_VERSION


def test_sweep_settings_are_optional_and_round_trip(tmp_path):
    from core.studies.sweep import SweepSpace

    # version 1 files without a "sweep" section load as sweep=None and are written back unchanged
    plain = odd_session()
    assert plain.sweep is None
    assert "sweep" not in json.loads(session_to_json(plain))

    s = odd_session()
    space = SweepSpace(num_gpus=(1024, 3360), tensor_parallel=(2, 8), micro_batch_sizes=(1, 2),
                       schedules=("1f1b",), max_data_parallel=30)
    s.sweep = {"space": space.to_dict(), "deadline_days": 0.1 + 0.2}
    path = tmp_path / "sweep.json"
    save_session(s, path)
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["sweep"]["space"]["num_gpus"] == [1024, 3360]
    back = load_session(path)
    assert back == s and back.sweep is not s.sweep
    assert back.sweep["deadline_days"] == 0.1 + 0.2
    assert SweepSpace.from_dict(back.sweep["space"]) == SweepSpace.from_dict(space.to_dict())
    save_session(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    assert back.copy() == back

    path.write_text(json.dumps({**doc, "sweep": [1, 2]}))
    with pytest.raises(SessionFileError, match="sweep"):
        load_session(path)
    path.write_text(json.dumps({**doc, "sweep": None}))
    assert load_session(path).sweep is None


def test_study_settings_are_optional_and_round_trip(tmp_path):
    plain = odd_session()
    assert plain.studies is None and "studies" not in json.loads(session_to_json(plain))
    s = odd_session()
    s.studies = {"optimal": {"num_gpus": 512, "days": 0.1 + 0.2},
                 "schedule": {"trace": "jobs.json", "backfill": True}}
    path = tmp_path / "studies.json"
    save_session(s, path)
    back = load_session(path)
    assert back == s and back.studies is not s.studies
    assert back.studies["optimal"]["days"] == 0.1 + 0.2
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "studies": "fast"}))
    with pytest.raises(SessionFileError, match="studies: must be a JSON object or null"):
        load_session(path)


def test_save_into_a_missing_folder_names_the_target(tmp_path):
    target = tmp_path / "no-such-folder" / "s.json"
    with pytest.raises(OSError) as info:
        save_session(Session(), target)
    assert info.value.filename == str(target)  # not the hidden temporary file beside it


def test_save_onto_a_folder_names_the_folder_and_leaves_nothing(tmp_path):
    with pytest.raises(IsADirectoryError) as info:
        save_session(Session(), tmp_path)
    assert info.value.filename == str(tmp_path)
    assert list(tmp_path.parent.glob(f".{tmp_path.name}.*")) == []


def test_pinned_plan_round_trips_and_is_checked(tmp_path):
    """Session.compare holds the Compare tab's plan A: saved, read back, refused by field."""
    import json

    from core.plan.fields import ConfigError
    from core.plan.parallel import ParallelPlan
    from core.plan.session import Session
    from core.io.session import SessionFileError, load_session, save_session, session_to_json
    a = Session(plan=ParallelPlan(tensor_parallel=2, data_parallel=4))
    s = Session().with_pinned(a)
    assert set(s.compare["pinned"]) == {"model", "plan", "cluster", "cost"}
    path = tmp_path / "s.json"
    save_session(s, path)
    back = load_session(path)
    assert back.pinned().plan == a.plan and back.pinned().compare is None
    assert back.to_dict() == s.to_dict()
    assert "compare" not in json.loads(session_to_json(Session()))  # absent when unpinned
    doc = json.loads(path.read_text())
    doc["compare"]["pinned"]["plan"]["tensor_parallel"] = "two"
    path.write_text(json.dumps(doc))
    with pytest.raises(SessionFileError, match=r"compare\.pinned\.plan\.tensor_parallel"):
        load_session(path)
    for bad, rule in (({"pinned": {"plan": {}}}, r"compare\.pinned\.model: missing section"),
                      ({"pinned": {"model": {}, "plan": {}, "sweep": {}}},
                       r"compare\.pinned\.sweep: unknown section"),
                      ({"plan": {}}, r"compare: must be")):
        with pytest.raises(ConfigError, match=rule):
            Session.from_dict({**Session().to_dict(), "compare": bad})


def test_diff_of_one_file_without_a_pin_is_refused(tmp_path, capsys):
    from core.cli import main
    from core.plan.session import Session
    from core.io.session import save_session
    path = tmp_path / "s.json"
    save_session(Session(), path)
    assert main(["diff", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "no pinned plan" in err


def test_a_cluster_without_gpus_per_node_takes_the_gpus_nvlink_domain():
    """A hand-written cluster section naming a GB200 NVL72 but not ``gpus_per_node`` is one
    72-GPU rack per node (core.plan.cluster.GPU_NVLINK_DOMAIN), not the field's HGX default
    of 8; an H100 keeps 8, an unknown kind the default, and a given value is kept (also in
    the Compare tab's pinned plan)."""
    base = Session().to_dict()

    def nodes(cluster: dict) -> int:
        return Session.from_dict({**base, "cluster": cluster}).cluster.gpus_per_node

    assert nodes({"gpu": "GB200-NVL72"}) == 72
    assert nodes({"gpu": "H100-SXM5-80GB"}) == 8
    assert nodes({"gpu": "GB200-NVL72", "gpus_per_node": 4}) == 4
    assert nodes({"gpu": "MI300X"}) == 8
    assert nodes({}) == 8
    pinned = {"model": base["model"], "plan": base["plan"], "cluster": {"gpu": "GB200-NVL72"}}
    s = Session.from_dict({**base, "compare": {"pinned": pinned}})
    assert s.pinned().cluster.gpus_per_node == 72
