"""The interleaved schedule's micro-batch count, against Megatron-Core's own code.

Megatron-Core 0.16.1, ``megatron/core/pipeline_parallel/schedules.py``,
``forward_backward_pipelining_with_interleaving`` (lines 995-1015) with
N = ``config.microbatch_group_size_per_vp_stage`` (``ModelParallelConfig.__post_init__``:
None -> ``pipeline_model_parallel_size``)::

    if (
        config.microbatch_group_size_per_vp_stage > num_microbatches
        or config.microbatch_group_size_per_vp_stage < pipeline_parallel_size
    ):
        ... raise ValueError(msg)
    final_microbatch_group_size = num_microbatches % config.microbatch_group_size_per_vp_stage
    if 0 < final_microbatch_group_size < pipeline_parallel_size:
        ... raise RuntimeError(msg)

vtrain plans leave N at its default p, so Megatron-Core runs an interleaved plan exactly when
m % p == 0; vtrain refuses the others by name (session rules, so simulate, sweep and the GUI),
and its order for the plans it keeps is ``get_schedule_table`` / ``get_pp_rank_microbatches``'s.
"""

from __future__ import annotations

import pytest

from core import schedules
from core.cli import main
from core.io.session import save_session
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.schedules.base import PHASE_B, PHASE_F
from core.schedules.interleaved import MEGATRON_CORE_MICROBATCH_RULE, megatron_core_refusal
from core.studies.sweep import SweepSpace, run_sweep


def megatron_core_refuses(m: int, p: int, n: int | None = None) -> bool:
    """The two checks above, transcribed (``n`` None: the default, p)."""
    n = p if n is None else n
    if n > m or n < p:
        return True  # ValueError
    final = m % n
    return 0 < final < p  # RuntimeError


def megatron_core_order(p: int, m: int, rank: int, v: int) -> list[tuple[int, int, int]]:
    """(phase, micro-batch, chunk) of ``rank``'s program in Megatron-Core's
    ``forward_backward_pipelining_with_interleaving`` with N = p: ``get_schedule_table`` and
    ``get_pp_rank_microbatches`` transcribed; warm-up forwards ``k``, then forward
    ``k + warm`` and backward ``k`` in turn, then the remaining backwards; a backward runs chunk
    ``v - 1 - model_chunk_id_table[k]`` on the oldest input it holds (``pop(0)``)."""
    n = p
    table = []
    for lo in range(0, m, n):
        hi = m if lo + n >= m else lo + n
        table += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    total = m * v
    warm = min((p - rank - 1) * 2 + (v - 1) * n, total)
    held = [[] for _ in range(v)]  # forwarded micro-batches of each chunk, oldest first
    out = []

    def fwd(k):
        mb, c = table[k]
        held[c].append(mb)
        out.append((PHASE_F, mb, c))

    def bwd(k):
        c = v - 1 - table[k][1]
        out.append((PHASE_B, held[c].pop(0), c))

    for k in range(warm):
        fwd(k)
    for k in range(total - warm):
        fwd(k + warm)
        bwd(k)
    for k in range(total - warm, total):
        bwd(k)
    return out


def test_refused_exactly_where_megatron_core_refuses_with_n_at_its_default():
    checked = refused = 0
    for p in range(2, 9):
        for m in range(1, 4 * p + 1):
            errs = schedules.get("interleaved").order_errors(p, m, 2)
            assert bool(errs) == megatron_core_refuses(m, p), (p, m)
            checked += 1
            refused += bool(errs)
    assert (checked, refused) == (140, 112)  # 4p counts for each of 7 p, 4 multiples kept
    for p in range(2, 9):  # and the import's check with a launch's N
        for m in range(1, 4 * p + 1):
            for n in range(1, m + 3):
                assert (megatron_core_refusal(p, m, n) is not None) == megatron_core_refuses(m, p, n)


def test_the_refusal_names_the_field_megatrons_condition_and_the_value():
    (err,) = schedules.schedule_errors("interleaved", 4, 6, 2, 24)
    assert err == ("plan.global_batch_size",
                   "the interleaved schedule needs the number of micro-batches "
                   "m=global_batch_size/(data_parallel*micro_batch_size)=6 to be a multiple of "
                   "pipeline_parallel_size=4: Megatron-Core (0.16.1, pipeline_parallel/"
                   "schedules.py forward_backward_pipelining_with_interleaving) refuses N > m "
                   "and 0 < m % N < p, with N = --microbatch-group-size-per-virtual-pipeline-"
                   "stage at its default p (here 0 < m % N = 2 < pipeline size 4)")
    (_, fewer) = schedules.schedule_errors("interleaved", 4, 2, 2, 24)[0]
    assert fewer.endswith("(here N=4 > m=2)")  # Megatron-Core's ValueError, not its remainder


def _session(global_batch_size: int, data_parallel: int = 1) -> Session:
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=4, data_parallel=data_parallel,
                        micro_batch_size=1, global_batch_size=global_batch_size,
                        schedule="interleaved", virtual_pipeline_stages=2, recompute="full",
                        precision="bf16")
    return Session(MODEL_PRESETS["GPT-3 1.3B"], plan, ClusterConfig(gpus_per_node=8),
                   CostConfig())


@pytest.mark.parametrize("B,d,m", [(6, 1, 6), (2, 1, 2), (12, 2, 6)])
def test_the_session_rules_refuse_a_count_megatron_refuses(B, d, m):
    s = _session(B, d)
    assert s.plan.num_microbatches == m
    errs = validate(s)
    assert [e.field for e in errs] == ["plan.global_batch_size"]
    assert errs[0].rule == ""  # an invalid plan, not one vtrain does not model
    assert f"micro-batches m=global_batch_size/(data_parallel*micro_batch_size)={m} " \
           in errs[0].message and MEGATRON_CORE_MICROBATCH_RULE in errs[0].message


@pytest.mark.parametrize("B,d", [(4, 1), (8, 2), (8, 1)])  # m = p = 4 (the boundary), 4, 8
def test_a_multiple_of_p_passes_down_to_m_equal_p(B, d):
    assert validate(_session(B, d)) == []


def test_simulate_exits_2_naming_file_and_field(tmp_path, capsys):
    path = tmp_path / "il.json"
    save_session(_session(6), path)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "plan.global_batch_size" in err and "m % N = 2" in err
    assert "Traceback" not in err
    save_session(_session(4), path)
    assert main(["simulate", str(path)]) == 0


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 6, 3), (4, 4, 2), (4, 8, 2), (4, 12, 3),
                                   (3, 9, 4), (8, 8, 2), (8, 16, 4)])
def test_order_is_megatron_cores_schedule_table(p, m, v):
    sched = schedules.get("interleaved")
    for rank in range(p):
        o = sched.order(p, m, rank, v)
        got = list(zip(o.phase.tolist(), o.microbatch.tolist(), o.chunk.tolist()))
        assert got == megatron_core_order(p, m, rank, v), (p, m, v, rank)


def test_the_sweep_proposes_only_the_counts_megatron_runs():
    """GPT-3 1.3B (24 layers), t=2, p=4, B=24 on 8 or 16 GPUs (d = 1, 2) with b = 1, 2, 3:
    m = 24, 12, 8 | 12, 6, 4. Interleaved plans for every (d, b) but (2, 2) (m = 6); 1F1B
    plans for all six."""
    s = _session(24)
    result = run_sweep(s, SweepSpace(hold_session_values=True, num_gpus=(8, 16),
                                     tensor_parallel=(2,), pipeline_parallel=(4,),
                                     micro_batch_sizes=(1, 2, 3),
                                     schedules=("interleaved", "1f1b")), prune=False)
    kept = {}
    for sched, d, b, m in zip(result.schedule, result.data_parallel, result.micro_batch_size,
                              result.num_microbatches):
        assert m == 24 // (d * b)
        kept.setdefault(str(sched), set()).add((int(d), int(b)))
    assert kept["1f1b"] == {(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)}
    assert kept["interleaved"] == {(1, 1), (1, 2), (1, 3), (2, 1), (2, 3)}
    assert kept["interleaved"] == {(d, b) for d, b in kept["1f1b"]
                                   if not megatron_core_refuses(24 // (d * b), 4)}


#: An interleaved launch of 8 GPUs (t=2, p=4, v=2, d=1, b=1): B is m.
LAUNCH = r"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 \
    --micro-batch-size 1 --global-batch-size {B} --train-iters 1000 --bf16 {extra} \
    --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 \
    --tensor-model-parallel-size 2
"""
GROUP = "--microbatch-group-size-per-virtual-pipeline-stage"


def _import(tmp_path, B, n=None):
    from core.io.megatron.to_session import import_checked
    path = tmp_path / f"il_{B}_{n}.sh"
    path.write_text(LAUNCH.format(B=B, extra="" if n is None else f"{GROUP} {n}"))
    return path, (lambda: import_checked(path, gpu="H100-SXM5-80GB"))


def test_a_launch_at_the_default_n_is_refused_by_the_session_rule(tmp_path):
    from core.plan.fields import ConfigError
    path, run = _import(tmp_path, 10)
    with pytest.raises(ConfigError) as info:
        run()
    (e,) = info.value.errors
    assert e.field == "plan.global_batch_size" and "m % N = 2 < pipeline size 4" in e.message
    assert e.message.endswith("(set by --global-batch-size)")
    assert _import(tmp_path, 12)[1]().session.plan.num_microbatches == 12


@pytest.mark.parametrize("B,n,quoted", [
    (12, 3, "The number of contiguous micro-batches in a virtual pipeline stageshould range in "
            "[PP=4 , M=12]"),  # N < p
    (12, 13, "should range in [PP=4 , M=12]"),  # N > m
    (14, 6, "should be 0, or larger than or equal to the pipeline-parallel size, but it is 2")])
def test_a_launch_whose_n_megatron_core_refuses_is_refused_with_its_message(tmp_path, B, n, quoted):
    from core.io.megatron.arguments import MegatronArgsError
    assert megatron_core_refuses(B, 4, n)
    path, run = _import(tmp_path, B, n)
    with pytest.raises(MegatronArgsError) as info:
        run()
    msg = str(info.value)
    assert msg.startswith(f"{path}: {MEGATRON_CORE_MICROBATCH_RULE} refuses m = ") and quoted in msg
    assert f"{GROUP} {n}" in msg and "\n" not in msg


@pytest.mark.parametrize("B,n", [(10, 5), (9, 5)])  # 10 % 5 = 0; 9 % 5 = 4 >= p: Megatron runs
def test_a_count_megatron_core_runs_only_with_n_other_than_p_is_not_modelled(tmp_path, B, n):
    from core.io.megatron.arguments import MegatronArgsError
    assert not megatron_core_refuses(B, 4, n) and megatron_core_refuses(B, 4)
    path, run = _import(tmp_path, B, n)
    with pytest.raises(MegatronArgsError, match="Megatron-Core runs it, but its interleaved "
                       r"order with N != p is not modelled"):
        run()


def test_a_launch_megatron_core_runs_at_a_multiple_of_p_imports_with_what_n_means(tmp_path):
    same = _import(tmp_path, 12, 4)[1]()  # N = p: the default, modelled
    assert GROUP not in same.ignored and dict(same.notes)[GROUP].startswith("4 = p")
    other = _import(tmp_path, 12, 6)[1]()  # N = 6: runs, imported with N = p's order, said so
    assert other.ignored[GROUP].startswith("Megatron-Core runs N = 6 micro-batches")
    assert other.session.plan == same.session.plan


def test_n_without_the_interleaved_schedule_has_no_effect(tmp_path):
    """Only forward_backward_pipelining_with_interleaving reads N: a 1F1B launch (no virtual
    stages) lists it among the arguments of no effect, not as one that may change the time."""
    from core.io.megatron.to_session import import_checked
    path = tmp_path / "one_f_one_b.sh"
    path.write_text(LAUNCH.replace("--num-virtual-stages-per-pipeline-rank 2", "")
                    .format(B=6, extra=f"{GROUP} 2"))
    res = import_checked(path, gpu="H100-SXM5-80GB")
    assert res.session.plan.schedule == "1f1b" and res.session.plan.num_microbatches == 6
    assert GROUP not in res.ignored and GROUP in res.neutral
