"""A sweep kept to what Megatron-LM runs, for a session that gathers its parameters in FP8.

Found by trying the product as a Megatron-Bridge user: the run_config.yaml of an FP8 Llama 3 70B
recipe (fp8_param_gather true, as ``bf16_with_fp8_current_scaling_mixed`` sets it) imported, the
export refused its TE cross-entropy and named ``vtrain sweep FILE --cross-entropy-fusion native
--schedules 1f1b,interleaved``; that sweep's fastest plan was ZeRO-3 (Megatron-FSDP) with the FP8
gather held from the session, which the export refused again ("FP8 parameter gathers under
Megatron-FSDP are not modelled") without saying what would run.
"""
from __future__ import annotations

import dataclasses

import pytest

from core.cli.sweep import megatron_lm_options
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.export import (MEGATRON_LM_SWEEP_OPTIONS, megatron_lm_sweep_options,
                                     refuse_megatron_rules)
from core.io.megatron.from_session import export_arguments
from core.io.session import load_any
from core.plan.parallel import ParallelPlan
from core.studies.sweep.space import SweepSpace
from tests.conftest import EXAMPLES


def _fp8_session(**plan):
    """GPT-3 1.3B on 8 GPUs in FP8 with the FP8 parameter gather (ZeRO-1, Megatron-LM's
    native cross-entropy): a plan Megatron-LM runs."""
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.cluster.gpu = "H100-SXM5-80GB"
    fields = dict(precision="fp8", fp8_recipe="tensorwise", zero_stage=1, fp8_param_gather=True,
                  overlap_grad_reduce=True, overlap_param_gather=True,
                  cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native")
    s.plan = dataclasses.replace(s.plan, **{**fields, **plan})
    return s


def test_the_sweep_keeps_zero_1_for_an_fp8_gather_plan():
    plain = ParallelPlan(1, 1, 8, 1, 256, "1f1b", "none", "bf16")
    assert megatron_lm_options(SweepSpace(), plain) == MEGATRON_LM_SWEEP_OPTIONS
    fp8 = _fp8_session().plan
    assert megatron_lm_options(SweepSpace(), fp8) == \
        "--cross-entropy-fusion native --zero-stages 1 --schedules 1f1b,interleaved"
    assert megatron_lm_options(SweepSpace(zero_stages=[1, 3]), fp8) == \
        "--cross-entropy-fusion native --zero-stages 1 --schedules 1f1b,interleaved"
    assert megatron_lm_options(SweepSpace(zero_stages=[1]), fp8) == MEGATRON_LM_SWEEP_OPTIONS


def test_the_exports_refusals_name_what_runs():
    s = _fp8_session()
    export_arguments(s)  # ZeRO-1 with the FP8 gather: Megatron-LM runs it
    assert megatron_lm_sweep_options(s) == MEGATRON_LM_SWEEP_OPTIONS + " --zero-stages 1"
    z3 = _fp8_session()
    z3.plan = dataclasses.replace(z3.plan, zero_stage=3)
    with pytest.raises(MegatronArgsError) as err:
        export_arguments(z3)
    msg = str(err.value)
    assert "FP8 parameter gathers under Megatron-FSDP are not modelled; Megatron-LM runs it " \
           "with plan.fp8_param_gather false, at ZeRO-1" in msg
    assert "--zero-stages 1" in msg and "plan.overlap_param_gather false (torch FSDP2)" in msg
    # the remedies named run: ZeRO-3 without the overlapped gather exports as torch FSDP2
    fsdp2 = dataclasses.replace(z3.plan, overlap_param_gather=False)
    z3.plan = fsdp2
    args = export_arguments(z3)
    assert "--use-torch-fsdp2" in args and "--fp8-param-gather" in args
    # a TE cross-entropy refusal names the sweep with --zero-stages 1 for such a session
    te = _fp8_session(cross_entropy_fusion_impl="te")
    with pytest.raises(MegatronArgsError) as err:
        refuse_megatron_rules(te, export_arguments(te))
    assert f"vtrain sweep FILE {MEGATRON_LM_SWEEP_OPTIONS} --zero-stages 1 --pick fastest" in \
        str(err.value)


def test_the_sweeps_note_names_zero_1_for_the_sessions_fp8_gather():
    """The note under a sweep whose best plans Megatron-LM cannot run passes the session's plan
    (its held fields) to :func:`megatron_lm_options`."""
    import types
    from rich.console import Console
    from core.cli.sweep import _print_megatron_lm
    console = Console(record=True, width=400)
    fake = types.SimpleNamespace(megatron_lm=lambda: {"fastest": ["te is disabled"]},
                                 space=SweepSpace(), session=_fp8_session())
    _print_megatron_lm(fake, console)
    assert console.export_text().strip().endswith(
        ": --cross-entropy-fusion native --zero-stages 1 --schedules 1f1b,interleaved keeps the "
        "sweep to plans it runs")
