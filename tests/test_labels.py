"""One name per quantity: the CLI report, ``vtrain diff`` and the trace read core.sim.labels.

A review found pipeline transfers called "Pipeline sends" (cost panel, simulate), "PP send/recv"
(timeline) and "PP comm" (Compare tab), tensor-parallel communication "TP collective" and
"TP comm", and the diff's "compute" (forward and backward only) beside simulate's "compute" (all
compute-stream work) with different values for the same plan.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.sim.graph_types import KINDS, STREAMS
from core.sim.labels import (DIFF_TERMS, KIND_MEANINGS, KIND_NAMES, MEMORY_TERMS, TIME_TERMS,
                             short_name)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"


def test_every_kind_has_one_name_and_meaning_and_names_are_unique():
    assert set(KIND_NAMES) == set(KINDS) == set(KIND_MEANINGS)
    assert len(set(KIND_NAMES.values())) == len(KINDS)
    assert len(set(TIME_TERMS.values())) == len(TIME_TERMS)
    assert len(set(MEMORY_TERMS.values())) == len(MEMORY_TERMS)
    # the lanes of one kind are named as the kind
    for kind in ("cp_p2p", "ep_all_to_all", "pp_p2p"):
        assert KIND_NAMES[kind] in STREAMS


def test_exposed_terms_are_their_kinds_names():
    assert TIME_TERMS["pp_comm"] == "exposed " + KIND_NAMES["pp_p2p"] == "exposed PP send/recv"
    assert TIME_TERMS["tp_comm"] == "exposed TP collectives"
    assert short_name("tp_comm") == KIND_NAMES["tp_comm"]
    assert short_name("bubble") == TIME_TERMS["bubble"]
    assert short_name("some_new_kind") == "some new kind"


def test_diff_terms_sum_and_compute_splits_as_the_report_says():
    """The diff's terms are named apart from the report's compute: forward + backward,
    recomputation and optimizer step sum to the report's compute_s (same plan, same numbers)."""
    from core.io.session import load_any
    from core.sim.simulate import simulate
    from core.studies.diff import time_terms

    s = load_any(EXAMPLE)
    res = simulate(dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="full")))
    terms, _, _ = time_terms(res)
    assert "compute" not in terms  # the report's name is the report's quantity only
    assert set(DIFF_TERMS) <= set(terms)
    assert set(terms) <= set(TIME_TERMS)
    whole = terms["forward_backward"] + terms["recomputation"] + terms["optimizer"]
    assert whole == pytest.approx(res.report.compute_s, rel=1e-12)
    assert terms["recomputation"] > 0
    assert terms["tp_comm"] + terms["dp_comm"] == pytest.approx(res.report.comm_s, rel=1e-12)
    assert sum(terms.values()) == pytest.approx(res.report.iteration_time_s, rel=1e-12)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # one line per row
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_simulate_and_diff_print_the_same_names_and_numbers():
    """``vtrain simulate``'s per-stage line and ``vtrain diff``'s table name the pipeline term
    alike and give it the same seconds; the memory table says "optimizer state" as the memory
    panel does."""
    sim = _cli("simulate", str(EXAMPLE))
    assert sim.returncode == 0, sim.stderr
    line = next(x for x in sim.stdout.splitlines() if x.startswith("Per stage"))
    pp = re.search(re.escape(TIME_TERMS["pp_comm"]) + r" ([\d.,]+) s", line)
    assert pp is not None
    assert MEMORY_TERMS["optimizer_bytes"] in sim.stdout
    from core.io.session import load_any
    from core.sim.simulate import simulate
    doc = {"pp_comm_s": simulate(load_any(EXAMPLE)).report.pp_comm_s}  # simulate --json's figure
    assert float(pp.group(1)) == pytest.approx(doc["pp_comm_s"], abs=5e-4)
    diff = _cli("diff", str(EXAMPLE), str(EXAMPLE))
    assert diff.returncode == 0, diff.stderr
    row = next(x for x in diff.stdout.splitlines() if TIME_TERMS["pp_comm"] in x)
    assert float(re.findall(r"([\d.,]+) s", row)[0]) == pytest.approx(doc["pp_comm_s"], abs=5e-4)
    for old in ("pipeline sends", "PP comm", "TP comm", "DP comm", "TP collective "):
        assert old not in sim.stdout + diff.stdout


#: Names of time quantities retired for core.sim.labels' (a review found them in the Megatron-LM
#: arguments' help, the plan's rules and field help, and the sweep's notes).
_RETIRED = ("pipeline send", "pipeline transfer", "expert all-to-all", "tensor-parallel all-gather",
            "context-parallel exchange", "PP comm", "TP comm ", "DP comm")


def test_help_and_rule_texts_name_the_quantities_as_the_table_does():
    """The Megatron-LM arguments' help, the "only with ..." reasons of the plan's rules, the
    sweep's notes on its dimensions, the plan fields' help and ``vtrain sweep``'s help say
    "PP send/recv", "EP all-to-all", "TP collectives", "DP collectives" and "CP exchange"."""
    from core.cli import build_parser
    from core.io.megatron.arguments import ARGUMENTS
    from core.plan.parallel import ParallelPlan
    from core.plan.rules import _ENABLED_BY
    from core.studies.sweep.dimensions import _DIMENSION_DEFAULTS

    texts = {f"argument {k}": a.help for k, a in ARGUMENTS.items()}
    texts.update({f"rule {k}": why for k, (_, why) in _ENABLED_BY.items()})
    texts.update({f"sweep {k}": note for k, (_, note) in _DIMENSION_DEFAULTS.items()})
    texts.update({f"plan.{f.name}": f.metadata.get("help", "")
                  for f in dataclasses.fields(ParallelPlan)})
    sweep = next(a for a in build_parser()._subparsers._group_actions[0].choices["sweep"]._actions
                 if "--overlap-moe-expert-parallel-comm" in a.option_strings)
    texts["vtrain sweep --overlap-moe-expert-parallel-comm"] = sweep.help
    stale = {k: old for k, t in texts.items() for old in _RETIRED if old.lower() in t.lower()}
    assert stale == {}
    names = {"argument --no-overlap-p2p-communication": "pp_p2p",
             "argument --overlap-moe-expert-parallel-comm": "ep_all_to_all",
             "argument --tp-comm-overlap": "tp_comm", "argument --overlap-grad-reduce": "dp_comm",
             "argument --cp-comm-type": "cp_p2p", "plan.tp_comm_overlap": "tp_comm",
             "plan.overlap_grad_reduce": "dp_comm", "rule plan.overlap_p2p_comm": "pp_p2p",
             "rule plan.delay_wgrad_compute": "ep_all_to_all",
             "sweep delay_wgrad_compute": "ep_all_to_all", "plan.overlap_p2p_comm": "pp_p2p",
             "plan.overlap_moe_expert_parallel_comm": "ep_all_to_all",
             "vtrain sweep --overlap-moe-expert-parallel-comm": "ep_all_to_all"}
    assert {k: KIND_NAMES[kind] in texts[k] for k, kind in names.items()} == dict.fromkeys(names, True)
