"""Case s3/search_llama3_70b_512_h100.json: Llama 3 70B on 512 H100s, seq 8,192, global batch
1,024, imported with sequence parallelism off and ZeRO 0. The default sweep covers the
Megatron-Core plan space (SP, ZeRO, overlaps ...), not the session's values: its fastest
fitting plan is at most 17.9 s per iteration (the plan the issue found by hand, t4 p4 d32 b1
with SP and ZeRO-1, takes 17.9 s), and the output says what was swept and what was held."""

from __future__ import annotations

import json

from tests.conftest import case_file


def test_default_sweep_finds_a_plan_at_least_as_fast_as_the_hand_found_one(capsys):
    from core.cli import main

    path = case_file("s3/search_llama3_70b_512_h100.json")
    assert main(["sweep", str(path), "--gpus", "512", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fastest = doc["fastest"]
    assert fastest["fits_in_memory"] and fastest["num_gpus"] == 512
    assert fastest["iteration_time_s"] <= 17.9
    dims = {d["field"]: d for d in doc["dimensions"]}
    # the session's own values (SP off, ZeRO 0) no longer fix the space
    assert dims["sequence_parallel"]["swept"] or dims["sequence_parallel"]["values"] == [True]
    assert dims["zero_stage"]["swept"] and {0, 1} <= set(dims["zero_stage"]["values"])
    for d in doc["dimensions"]:  # every dimension says why it was swept or held
        assert d["why"]
    # one best plan per value of each swept dimension, each fitting
    for field, rows in doc["best_by"].items():
        for row in rows:
            if row.get("plan") is not None:
                assert row["plan"]["fits_in_memory"], (field, row)
