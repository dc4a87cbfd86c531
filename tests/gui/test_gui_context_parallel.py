"""Explore tab: context-parallel sizes are a sweep setting (default: the command line's, the
powers of two up to the budget), saved with the session."""

from __future__ import annotations

from core.io.session import load_any
from core.studies.sweep import SweepSpace
from tests.conftest import EXAMPLES
from vtrain_gui.sweep_settings import SweepSettingsPanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def test_context_parallel_sizes_round_trip_and_are_checked(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    s = load_any(SMALL)
    panel.reset(s)
    assert panel.space().context_parallel is None  # the command line's default
    s.sweep = {"space": SweepSpace(max_gpus=8, context_parallel=(1, 2)).to_dict(),
               "deadline_days": None}
    panel.reset(s)
    assert panel.context_parallel.text() == "1, 2"
    assert panel.space().context_parallel == (1, 2)
    qtbot.keyClicks(panel.context_parallel, ", 4")
    assert panel.space().context_parallel == (1, 2, 4)
    assert panel.settings()["space"]["context_parallel"] == [1, 2, 4]
    panel.context_parallel.setText("0")
    panel.context_parallel.textEdited.emit("0")
    assert [e.field for e in panel.errors()] == ["sweep.context_parallel"]


def test_the_cost_panel_names_the_exposed_exchange_of_a_cp_plan_only(qtbot):
    import dataclasses

    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.sim.simulate import simulate
    from vtrain_gui.cost_panel import CostPanel
    from vtrain_gui.formatting import duration_formatter

    panel = CostPanel()
    qtbot.addWidget(panel)
    panel.show()
    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=65536, num_layers=4)
    plan = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                        global_batch_size=2, recompute="selective", context_parallel=4)
    cluster = ClusterConfig(gpu="H100-SXM5-80GB", inter_node_bandwidth_gbits_per_s=100.0)
    r = simulate(Session(model=model, plan=plan, cluster=cluster)).report
    assert r.cp_comm_s > 0 and r.cp_hidden_s > 0
    panel.set_report(r)
    name, value = panel._cp_row
    from core.sim.labels import TIME_TERMS, capitalized
    assert name.isVisible() and name.text().endswith(capitalized(TIME_TERMS["cp_comm"]))
    # in the panel's unit, the iteration time's (1.585 s): "0.445 s", not "445.29 ms"
    assert value.text().startswith(f"{r.cp_comm_s:.3f} s (")
    assert value.text().startswith(duration_formatter(r.iteration_time_s)(r.cp_comm_s))
    plain = simulate(Session(model=model, plan=dataclasses.replace(plan, context_parallel=1),
                             cluster=cluster)).report
    panel.set_report(plain)
    assert not name.isVisible() and not value.isVisible()


def test_the_cost_panel_gives_the_causal_mfu_beside_eq3s_at_long_sequences(qtbot):
    """At 64k tokens Eq. 3's MFU (the whole s x s square) is well above the causal count, and
    the panel says both; at 2k tokens it gives Eq. 3's alone."""
    import dataclasses

    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.sim.simulate import simulate
    from vtrain_gui.cost_panel import CostPanel
    from vtrain_gui.formatting import format_fraction

    panel = CostPanel()
    qtbot.addWidget(panel)
    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=65536, num_layers=4)
    plan = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                        global_batch_size=2, recompute="selective", context_parallel=4)
    r = simulate(Session(model=model, plan=plan, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))).report
    assert r.mfu_causal < 0.97 * r.mfu
    panel.set_report(r)
    text = panel._values["mfu"].text()
    assert text == f"{format_fraction(r.mfu)} ({format_fraction(r.mfu_causal)} causal)"
    short = simulate(Session(model=dataclasses.replace(model, seq_length=2048),
                             plan=dataclasses.replace(plan, context_parallel=1),
                             cluster=ClusterConfig(gpu="H100-SXM5-80GB"))).report
    panel.set_report(short)
    assert "causal" not in panel._values["mfu"].text()
