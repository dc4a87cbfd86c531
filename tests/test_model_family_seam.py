"""A new model family is one registration (issue 28: the layer spec drives the formulas).

A family registered here, in a test module only, with the plan's name list given its entry
(the one line ``core.plan.model_config.MODEL_FAMILIES`` needs), validates, saves, counts,
times and simulates with no other edit: its formulas are its components' composed by its
layer spec (closed forms below against the dense model of the same shape).
"""

from __future__ import annotations

import dataclasses

import pytest

from core.io.session import load_session, save_session
from core.model import model_math as mm
from core.model.families import family_of
from core.model.kernels import op_key
from core.model.keys import FAMILY_KEY
from core.model.softcap import SOFTCAP_FLOPS
from core.model.spec import FAMILIES, ModelFamily, register_family
from core.plan import model_config
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session


@pytest.fixture
def registered(monkeypatch):
    """Register families for one test: the plan's name entry and the family's registration."""
    names = []

    def register(family: ModelFamily) -> ModelFamily:
        monkeypatch.setitem(model_config.MODEL_FAMILIES, family.name, "a test family")
        names.append(family.name)
        return register_family(family)
    yield register
    for name in names:
        FAMILIES.pop(name, None)


def _pair(name: str):
    """Llama 2 7B (RMSNorm, SwiGLU, FlashAttention) as ``name`` and as dense, and a plan."""
    dense = dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], seq_length=2048)
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=1,
                      micro_batch_size=1, global_batch_size=4, sequence_parallel=True)
    return dataclasses.replace(dense, family=name), dense, pl


def _names(kernels):
    return [k.name for k in kernels]


def test_a_family_registered_in_a_test_module_needs_no_other_edit(registered, tmp_path):
    fam = registered(ModelFamily("sandwich", post_attention_norm=True, post_mlp_norm=True,
                                 attention_softcap=True))
    m, dense, pl = _pair("sandwich")
    s = Session(model=m, plan=pl)
    assert validate(s) == [] and family_of(m) is fam
    spec = mm.layer_spec(m)
    assert (spec.norm.per_layer, spec.attention.logit_softcap, spec.embedding_scale,
            spec.final_logit_softcap) == (4, True, False, False)
    # parameters: two RMSNorms (h each) more per layer
    h, L = m.hidden_size, m.num_layers
    assert mm.num_parameters(m) == mm.num_parameters(dense) + 2 * h * L
    # op key names the family; its kernels are the dense ones with the components'
    key, dkey = op_key(m, pl), op_key(dense, pl)
    assert key[FAMILY_KEY] == "sandwich" and FAMILY_KEY not in dkey
    att, att_d = mm.op_kernels("attention_fwd", key), mm.op_kernels("attention_fwd", dkey)
    assert _names(att) == _names(att_d) + ["post_attn_rmsnorm"]
    flash = {k.name: k for k in att}["flash_attn"]
    flash_d = {k.name: k for k in att_d}["flash_attn"]
    assert flash.flops == flash_d.flops * (1 + SOFTCAP_FLOPS[0] / (4 * m.head_dim))
    mlp = _names(mm.op_kernels("mlp_fwd", key))
    assert mlp[-2:] == ["post_mlp_rmsnorm", "bias_dropout_add"]
    for op in ("embedding_fwd", "output_fwd", "output_bwd", "embedding_bwd"):
        assert mm.op_kernels(op, key) == mm.op_kernels(op, dkey)  # no scale, no logit cap
    # activation memory: the post-norms' inputs (2 sbh bytes each, /t under sp), FlashAttention
    # keeps no score tensor
    extra = mm.activation_bytes_per_layer(m, pl, "none") - mm.activation_bytes_per_layer(
        dense, pl, "none")
    assert extra == 2 * 2 * 2048 * 1 * h / 2
    from core.sim.simulate import simulate
    assert simulate(s).report.iteration_time_s > simulate(
        Session(model=dense, plan=pl)).report.iteration_time_s
    path = tmp_path / "s.json"
    save_session(s, path)
    assert load_session(path).model == m


def test_a_family_without_components_shares_the_dense_ops(registered):
    """A family that adds no kernels keeps the dense op keys (no family entry) and times."""
    registered(ModelFamily("plain"))
    m, dense, pl = _pair("plain")
    assert op_key(m, pl) == op_key(dense, pl)
    from core.sim.simulate import simulate
    assert simulate(Session(model=m, plan=pl)).report.iteration_time_s == simulate(
        Session(model=dense, plan=pl)).report.iteration_time_s


def test_registration_needs_the_plan_name_and_a_new_name(registered):
    with pytest.raises(ValueError):
        register_family(ModelFamily("unlisted"))  # not among model.family's choices
    with pytest.raises(ValueError):
        register_family(ModelFamily("dense"))  # registered already
    m, _, pl = _pair("unlisted")
    assert [e.field for e in validate(Session(model=m, plan=pl))] == ["model.family"]


def test_activations_registered_are_the_field_choices():
    from core.model.mlp import ACTIVATION_KINDS
    assert set(ACTIVATION_KINDS) == set(model_config.ACTIVATIONS)
    assert {a: k.timed_as for a, k in ACTIVATION_KINDS.items()} == {
        "gelu": "gelu", "swiglu": "swiglu", "squared_relu": "gelu", "geglu": "swiglu"}
    assert [a for a, k in ACTIVATION_KINDS.items() if k.gated] == ["swiglu", "geglu"]
