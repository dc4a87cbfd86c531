"""The loss's fused cross-entropy (plan.cross_entropy_loss_fusion, plan.cross_entropy_fusion_impl;
Megatron-Core --cross-entropy-loss-fusion / --cross-entropy-fusion-impl): the output op's bytes
per logit, the logits' memory, the Megatron import and export, and the published rows."""

from __future__ import annotations

import dataclasses

import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.op_times import op_key
from core.io.megatron.to_session import import_file
from core.io.megatron.export import export_script
from core.model.keys import cross_entropy_fusion
from core.model.kernels import op_kernels
from core.model.memory import stage_memory


def _session(**plan) -> Session:
    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=4096)
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=4, micro_batch_size=1,
                      global_batch_size=32, sequence_parallel=True, **plan)
    return Session(model, pl, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8), CostConfig())


def _ce_bytes_per_logit(session: Session, op: str) -> float:
    key = op_key(session)
    cells = key["b"] * key["s"] * key["V"] // key["t"]
    return sum(k.bytes for k in op_kernels(op, key, session.model)
               if k.name.startswith("ce_") or k.name == "logits_to_fp32") / cells


@pytest.mark.parametrize("fusion, impl, want, fwd, bwd", [
    # Megatron's default: .float() copy (2 + 4), max 4, subtract 8, exp 8, sum 4, divide 8;
    # backward: scale in place 8, copy back to bf16 (4 + 2)
    (False, "native", "unfused", 38, 14),
    # native fused: copy with the max (2 + 4), subtract-exp-sum (8), divide (8)
    (True, "native", "native", 22, 14),
    # Transformer Engine: statistics pass (2), loss and gradient in place (2 + 2); scale (2 + 2)
    (True, "te", "te", 6, 4),
    (False, "te", "unfused", 38, 14),  # the implementation without the fusion: ignored
])
def test_bytes_per_logit_of_each_cross_entropy(fusion, impl, want, fwd, bwd):
    s = _session(cross_entropy_loss_fusion=fusion, cross_entropy_fusion_impl=impl)
    assert cross_entropy_fusion(s.plan) == want and op_key(s)["ce"] == want
    assert _ce_bytes_per_logit(s, "output_fwd") == pytest.approx(fwd)
    assert _ce_bytes_per_logit(s, "output_bwd") == pytest.approx(bwd)


def test_te_keeps_the_gradient_in_the_logits_place():
    """Activation memory of the last stage: (2 + 4) bytes per logit for Megatron's (the logits
    and their fp32 softmax), 2 with Transformer Engine's (the gradient computed in the forward)."""
    plain, te = _session(), _session(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te")
    key = op_key(plain)
    logits = key["b"] * key["s"] * key["V"] / key["t"]
    a0 = stage_memory(plain.model, plain.plan)[-1].activations_bytes
    a1 = stage_memory(te.model, te.plan)[-1].activations_bytes
    assert a0 - a1 == pytest.approx(4 * logits)


def test_fused_cross_entropy_is_faster_and_validated():
    from core.sim.simulate import simulate
    base = simulate(_session()).report.iteration_time_s
    te = simulate(_session(cross_entropy_loss_fusion=True,
                           cross_entropy_fusion_impl="te")).report.iteration_time_s
    native = simulate(_session(cross_entropy_loss_fusion=True)).report.iteration_time_s
    assert te < native < base
    bad = _session(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="triton")
    assert [e.field for e in validate(bad)] == ["plan.cross_entropy_fusion_impl"]


def test_megatron_arguments_round_trip(tmp_path):
    # te: current Megatron-LM refuses it, so the export does (tests/test_megatron_export.py)
    s = _session(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native")
    script = export_script(s)
    assert "--cross-entropy-loss-fusion" in script and "--cross-entropy-fusion-impl native" in script
    path = tmp_path / "run.sh"
    path.write_text(script)
    back = import_file(path, name=s.model.name).session
    assert (back.plan.cross_entropy_loss_fusion, back.plan.cross_entropy_fusion_impl) == (True, "native")
    # an older Megatron's launch (Megatron-Bridge's recipes run te): the Megatron-LM of
    # arguments.json disables te, but a launch written for an earlier version started, so the
    # import reads it (rule cross-entropy-te is the export's only)
    path.write_text(script.replace("-impl native", "-impl te"))
    back = import_file(path, name=s.model.name).session
    assert (back.plan.cross_entropy_loss_fusion, back.plan.cross_entropy_fusion_impl) == (True, "te")
    plain = tmp_path / "plain.sh"
    plain.write_text(export_script(_session()))
    assert import_file(plain).session.plan.cross_entropy_loss_fusion is False


def test_an_implementation_megatron_does_not_offer_is_an_invalid_choice(tmp_path):
    from core.io.megatron.arguments import MegatronArgsError
    script = export_script(_session(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native"))
    path = tmp_path / "run.sh"
    path.write_text(script.replace("--cross-entropy-fusion-impl native", "--cross-entropy-fusion-impl triton"))
    with pytest.raises(MegatronArgsError, match=r"--cross-entropy-fusion-impl 'triton': invalid "
                                                r"choice \(choose from native, te\)"):
        import_file(path)
