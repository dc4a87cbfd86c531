"""A sweep of an MLA model given ``--cp-comm-types allgather`` (PyTorch's context_parallel, not
modelled with multi-head latent attention) names that rule as the reason no plan takes the
value, in every plan with cp > 1, even where another size's rule (the expert groups inside
t*cp*d) comes first in the validation's list: before, the reason was the rule reported first
in the most plans, here the expert-parallel one, which refuses only some of them."""

from __future__ import annotations

import dataclasses

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.studies.sweep import SweepSpace, no_plan_errors, run_sweep, unused_values

#: DeepSeek-V3 of 4 layers (1 dense, 3 MoE) at 16K tokens, no MTP
V3 = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=0, num_layers=4,
                         moe_first_dense_layers=1, seq_length=16384)
MLA_RULE = ("cp_comm_type='allgather' (PyTorch's context_parallel) with multi-head latent "
            "attention is not modelled: MLA with context parallelism is modelled through "
            "Transformer Engine's p2p, all_gather, a2a and a2a+p2p")


def _session() -> Session:
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=4,
                        micro_batch_size=1, global_batch_size=8, sequence_parallel=True,
                        recompute="full", expert_parallel=8, expert_tensor_parallel=1)
    return Session(model=V3, plan=plan, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))


def _space(kinds: list[str]) -> SweepSpace:
    return SweepSpace(num_gpus=32, tensor_parallel=[2], pipeline_parallel=[2, 4],
                      context_parallel=[2], micro_batch_sizes=[1], expert_parallel=[16, 32],
                      cp_comm_type=kinds, zero_stages=[1], schedules=["1f1b"],
                      recompute=["full"])


def test_allgather_alone_names_the_mla_rule_in_every_plan():
    errs = {e.field: e.message for e in no_plan_errors(_session(), _space(["allgather"]))}
    # t=2 cp=2 at 32 GPUs: p=2 d=4 (t*cp*d=16) and p=4 d=2 (8) with ep 16 and 32; ep=32 and
    # ep=16 at p=4 break the expert groups' rule (etp*ep must divide t*cp*d) before the MLA
    # rule (3 of the 4 plans: the rule reported first in the most), but every plan breaks
    # the MLA rule, so it is the reason
    assert errs["--cp-comm-types allgather"] == (
        f"{MLA_RULE} (in 4 of the 4 size combinations of this budget with "
        "cp_comm_type=allgather, e.g. t=2 p=2 cp=2 d=4 b=1 ep=16 1f1b)")


def test_allgather_beside_p2p_is_named_with_the_mla_rule():
    s, space = _session(), _space(["p2p", "allgather"])
    result = run_sweep(s, space, workers=1)
    assert set(result.plan_columns["cp_comm_type"]) == {"p2p"}
    notes = {e.field: e.message for e in unused_values(s, space, result)}
    assert notes["--cp-comm-types allgather"] == (
        f"{MLA_RULE} (in 4 of the 4 size combinations of this budget with "
        "cp_comm_type=allgather, e.g. t=2 p=2 cp=2 d=4 b=1 ep=16 1f1b)")


def test_sweep_where_nothing_fits_names_the_plan_needing_the_least_memory(tmp_path, capsys):
    """DeepSeek-V3 (671 B) on 8 H100s: no plan fits; the sweep names the plan of least memory
    (a context-parallel one here), its figure the smallest of the written plans' (the CSV)."""
    import csv

    from core.cli import main
    from core.io.session import save_session
    s = Session(model=dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], seq_length=32768),
                plan=ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                  micro_batch_size=1, global_batch_size=8, recompute="full"),
                cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    path, out = tmp_path / "ds.json", tmp_path / "plans.csv"
    save_session(s, path)
    assert main(["sweep", str(path), "--gpus", "8", "--workers", "1", "--context-parallel",
                 "1,2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = list(csv.DictReader(out.open()))
    assert rows and not any(r["fits_in_memory"] == "True" for r in rows)
    least = min(rows, key=lambda r: float(r["max_memory_per_gpu_bytes"]))
    gib = float(least["max_memory_per_gpu_bytes"]) / 2**30
    line = next(ln for ln in text.splitlines() if ln.startswith("the plan needing the least"))
    assert line.startswith(f"the plan needing the least memory: {gib:,.1f} GiB per GPU of 80.0 (")
    assert f"cp={least['context_parallel']}" in line and line.endswith(", 8 GPUs)")
    assert 1000 < gib < 2000  # 671 B parameters' weights and Adam state over 8 GPUs
