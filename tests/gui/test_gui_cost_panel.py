"""CostPanel shows the report's figures and memory against capacity."""

from __future__ import annotations

import pytest

from synthetic import synthetic_report
from vtrain_gui.cost_panel import CostPanel
from vtrain_gui.formatting import format_usd, format_usd_short


@pytest.fixture
def panel(qtbot):
    w = CostPanel()
    qtbot.addWidget(w)
    w.resize(1000, 420)
    w.show()
    return w


def test_figures_are_formatted(panel):
    report = synthetic_report(p=4, warnings=["profile extrapolated for h=20480"])
    panel.set_report(report)
    assert panel.report is report
    assert panel.value_text("cost_usd") == "$2,469,134"
    assert panel.value_text("gpu_hours") == "1,234,567"
    assert panel.value_text("tokens_per_s") == "1,234,568 tokens/s"
    assert panel.value_text("mfu") == "43.2 %"
    assert panel.value_text("hfu") == "54.3 %"
    assert panel.value_text("num_parameters") == "174.60 B"
    assert panel.value_text("iteration_time") == "1.000 s"
    assert panel.value_text("compute") == "0.700 s"  # the unit of the iteration time
    assert panel.value_text("training_days") == "34.6 days"
    assert "synthetic" in panel.value_text("profile")
    assert "extrapolated" in panel.warnings_text
    assert panel.fit_text.startswith("Fits")


def test_memory_that_does_not_fit_is_flagged_in_red(panel):
    panel.set_report(synthetic_report(p=4, fits=False))
    assert panel.fit_text.startswith("Does not fit")
    assert "C62828" in panel._fit_label.styleSheet()
    assert panel._capacity_line.isVisible()
    assert panel._capacity_line.value() == pytest.approx(80e9 / 2**30)
    heights = panel._bars[-1].opts["height"]  # activations, one bar per stage
    assert len(heights) == 4


def test_clear(panel):
    panel.set_report(synthetic_report())
    panel.clear()
    assert panel.report is None
    assert panel.value_text("cost_usd") == "–"


def test_real_report(panel, real_simulate):
    from core.io.session import load_any
    from tests.conftest import EXAMPLES

    report = real_simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json")).report
    panel.set_report(report)
    assert panel.value_text("cost_usd") == format_usd(report.cost_usd)
    # the run with failures: its expected days and, as vtrain simulate prints it, its cost (the
    # GPU-hours of the expected time at the plan's price)
    g = report.run
    price = report.cost_usd / report.gpu_hours
    cost = format_usd(g.expected_time_s * report.num_gpus / 3600 * price)
    assert f", {cost}, goodput " in panel.value_text("run_days")
    # one node expects well under one interruption: the tooltip gives it, not "0 expected"
    assert 0 < g.expected_interruptions < 1
    assert f", {g.expected_interruptions:.3g} expected;" in panel._values["run_days"].toolTip()
    # the energy vtrain simulate prints (with failures: it read the figure without them);
    # the tooltip says so and gives the one without them
    from core.util.text import format_energy
    e = report.energy
    assert e.energy_kwh > e.energy_kwh_without_failures
    assert panel.value_text("gpu_hours").endswith(
        f" · {format_energy(e.energy_kwh)}, {format_usd(e.energy_cost_usd)} of energy")
    price = e.energy_cost_usd / e.energy_kwh
    without = e.energy_kwh_without_failures
    assert (f"Energy of the run with failures, as vtrain simulate prints it (without them "
            f"{format_energy(without)}, {format_usd(without * price)})"
            in panel._values["gpu_hours"].toolTip())
    panel.grab()


def test_no_checkpoint_run_says_none_saved(panel, real_simulate):
    """reliability.checkpoint_interval_iterations 2^40 (a launch without --save, Bridge's
    checkpoint.save null) saves nothing: the tooltip says so, not "every N iterations"."""
    from core.io.session import load_any
    from tests.conftest import EXAMPLES

    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.reliability.checkpoint_interval_iterations = 2 ** 40
    panel.set_report(real_simulate(s).report)
    tip = panel._values["run_days"].toolTip()
    assert "checkpoints 0.0 d (none saved: a failure restarts the run)" in tip
    assert "iterations," not in tip


def test_error_band_of_time_days_and_dollars(panel, real_simulate):
    from core.store.profiles_gen import generate_store
    from core.io.session import load_any
    from tests.conftest import EXAMPLES

    report = real_simulate(load_any(EXAMPLES / "gpt3_175b.json")).report
    panel.set_report(report)
    iv = report.interval
    lo, hi = iv.band(report.cost_usd)
    d_lo, d_hi = iv.band(report.training_days)
    assert panel.value_text("run_band") == (f"{d_lo:,.1f} – {d_hi:,.1f} days, "
                                            f"{format_usd_short(lo)} – {format_usd_short(hi)}")
    assert f"cost {format_usd(lo)} – {format_usd(hi)}" in panel._values["run_band"].toolTip()
    assert panel.value_text("iteration_band").count(" s") == 2
    assert panel.value_text("band_note") == "from 65 cross-validated multi-node runs"
    assert "90% of runs like this one" in panel._values["band_note"].toolTip()
    # in the calibration range by GPU count and model size, but without recomputation where
    # the A100 store was calibrated on full-recompute runs only: the note warns, the tooltip
    # names the feature
    import dataclasses
    s = load_any(EXAMPLES / "gpt3_175b.json")
    none = real_simulate(dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none"))).report
    panel.set_report(none)
    assert [d.feature for d in none.interval.departures] == ["recompute"]
    # its band the hull with the store's 30 feature-transfer residuals' (65 + 30)
    assert none.interval.in_calibration_range and none.interval.num_residuals == 95
    assert none.interval.group == "multi_node+feature_transfer"
    assert none.interval.low_factor < iv.low_factor and none.interval.high_factor > iv.high_factor
    assert "feature-transfer residuals' band" in panel._values["band_note"].toolTip()
    # in range: it is not said to be outside the calibration range (it was)
    assert panel.value_text("band_note") == "⚠ beyond the calibration runs' features (hover for why)"
    assert "recompute none" in panel._values["band_note"].toolTip()
    # outside the calibration range: the note says so in orange, the tooltip says why
    mt = real_simulate(load_any(EXAMPLES / "mtnlg_530b.json")).report
    panel.set_report(mt)
    assert panel.value_text("band_note").startswith("⚠ outside the calibration range")
    assert "beyond" not in panel.value_text("band_note")
    assert "Outside the calibration range: 3,360 GPUs" in panel._values["band_note"].toolTip()
    assert "B35C00" in panel._values["band_note"].styleSheet()
    # a store without residuals: no band, and why
    from core.sim.simulate import simulate
    plain = simulate(load_any(EXAMPLES / "gpt3_175b.json"),
                     generate_store("A100-SXM4-80GB", date="2026-01-01")).report
    panel.set_report(plain)
    assert panel.value_text("iteration_band") == "none" == panel.value_text("run_band")
    assert "no cross-validated residuals" in panel.value_text("band_note")
    assert "holds no cross-validated residuals" in panel._values["band_note"].toolTip()


def test_memory_inside_the_margin_is_tight_and_names_it(panel):
    """Issue 27: the synthetic plan needs 65 GiB of 100 GiB; with a 40 % margin it is tight
    (65 > 60), with a 30 % margin it fits (65 <= 70), and no margin takes memory away; over
    the capacity with the allocator's cache only (the simulator's fit, without the reserve),
    it is tight and says so."""
    import dataclasses
    report = synthetic_report(p=4)
    assert report.max_memory_per_gpu_bytes == 65 * 2**30
    tight = dataclasses.replace(report, memory_capacity_bytes=100 * 2**30,
                                memory_reserve_fraction=0.4)
    panel.set_report(tight)
    assert panel.fit_text.startswith("Tight: at most 65.0 GiB of 100.0 GiB per GPU, inside "
                                     "the 40 % ")
    assert "cluster.memory_reserve_fraction" in panel._fit_label.toolTip()  # the field, on hover
    assert panel.no_fit_text == ""
    assert "(tight&nbsp;within&nbsp;40&nbsp;%)" in panel._memory_legend.text()  # never split
    assert panel._capacity_line.value() == pytest.approx(100.0)  # the capacity, not 60 %
    cached = dataclasses.replace(report, memory_capacity_bytes=64.5 * 2**30, fits_in_memory=True)
    panel.set_report(cached)
    assert panel.fit_text == ("Tight: at most 65.0 GiB of 64.5 GiB per GPU with the allocator's "
                              "cache; fits only once PyTorch frees it")
    assert panel.no_fit_text == ""
    panel.set_report(dataclasses.replace(tight, memory_reserve_fraction=0.3))
    assert panel.fit_text.startswith("Fits: at most 65.0 GiB of 100.0 GiB per GPU")


def test_a_run_shorter_than_a_day_shows_its_days(panel):
    """A 1,000-step run takes minutes: its days read "0.0" in the window (the command line
    printed them with three decimals already), now the same text as the command line's."""
    import dataclasses

    from core.cli.common import fmt_days
    from vtrain_gui.formatting import format_day_count
    report = dataclasses.replace(synthetic_report(p=4), training_days=0.0433)
    panel.set_report(report)
    assert panel.value_text("training_days") == "0.043 days" == f"{fmt_days(0.0433)} days"
    assert format_day_count(float("nan")) == "–" and format_day_count(298.51) == "298.5"


def test_a_short_runs_gpu_hours_are_not_zero(panel):
    """0.421 GPU-hours beside a nonzero cost read "0" (a whole count); now "0.421", the command
    line's text (core.util.text.format_amount)."""
    import dataclasses

    from core.util.text import format_amount
    report = dataclasses.replace(synthetic_report(p=4), gpu_hours=0.4213)
    panel.set_report(report)
    assert panel.value_text("gpu_hours") == "0.421" == format_amount(0.4213)


def test_capacity_legend_keeps_its_dashes_with_its_text_at_the_narrowest(panel):
    """At the chart's narrowest (a 1,280 x 800 window on GB200: 233 px for the legend) the
    capacity item did not fit on one line and Qt broke it after the red dashes, leaving them
    alone on a line above "capacity 186.0 GiB ...". The dashes and "capacity" share a line."""
    import dataclasses

    from PySide6 import QtGui

    report = dataclasses.replace(synthetic_report(p=4), memory_capacity_bytes=186 * 2**30,
                                 memory_reserve_fraction=0.1)
    panel.set_report(report)
    legend = panel._memory_legend
    for width in (200, 233, 260, 400):
        doc = QtGui.QTextDocument()
        doc.setDefaultFont(legend.font())
        doc.setHtml(legend.text())
        doc.setTextWidth(width)
        doc.documentLayout()  # lays it out
        block = doc.lastBlock()
        layout = block.layout()
        lines = [block.text()[layout.lineAt(i).textStart():
                              layout.lineAt(i).textStart() + layout.lineAt(i).textLength()]
                 for i in range(layout.lineCount())]
        dashes = next(line for line in lines if "\u2013" in line)
        assert "capacity" in dashes, (width, lines)


@pytest.mark.parametrize("iteration_s, exposed_s, hidden_s, text", [
    (0.02, 0.0, 0.01398, "0.00 ms (13.98 ms hidden)"),    # was "0.000 s (13.98 ms hidden)"
    (3.0, 2.5, 0.01398, "2.500 s (0.014 s hidden)"),
    (4e-4, 3e-4, 2e-5, "300.00 µs (20.00 µs hidden)"),
    (0.5, 0.25, 0.0, "250.00 ms"),
    (1.0, 0.25, 0.0, "0.250 s"),  # beside a 1.000 s iteration
])
def test_exposed_and_hidden_communication_are_printed_in_one_unit(panel, iteration_s, exposed_s,
                                                                  hidden_s, text):
    """The TP/DP, CP and EP rows print the exposed time and the hidden part in the unit of the
    panel's durations (the largest's), so they read side by side."""
    import dataclasses

    report = dataclasses.replace(synthetic_report(p=4, iteration_time_s=iteration_s),
                                 comm_s=exposed_s, tp_hidden_s=hidden_s,
                                 cp_comm_s=exposed_s, cp_hidden_s=hidden_s,
                                 ep_comm_s=exposed_s, ep_hidden_s=hidden_s)
    panel.set_report(report)
    assert [panel.value_text(k) for k in ("cp_comm", "ep_comm")] == [text] * 2
    # the TP/DP row names whose part ran hidden (the TP collectives' here), "hidden" first
    assert panel.value_text("comm") == (
        text.replace("(", "(hidden TP ").replace(" hidden)", ")") if hidden_s else text)
    if hidden_s:  # 0.00 ms exposed: "(hidden TP 13.98 ms)", not "(TP 13.98 ms hidden)"
        assert panel.value_text("comm").split(" (")[1].startswith("hidden TP ")


def test_every_duration_of_the_panel_is_in_one_unit(panel):
    """Qwen3-30B-A3B on 64 H100 (ep=16): the time per iteration's column read "Compute 2.301 s"
    beside "Exposed EP all-to-all 130.37 ms (391.11 ms hidden)", "Exposed TP/DP collectives
    0.00 ms", "Pipeline bubble 0.000 s"; Llama 3 8B's band "649.37 ms – 1.017 s". Every
    duration of the panel is now in the unit of the largest, seconds with three decimals as
    vtrain simulate prints them."""
    import dataclasses

    from core.store.interval import PredictionInterval

    report = dataclasses.replace(
        synthetic_report(p=1, iteration_time_s=2.441), compute_s=2.301, comm_s=0.0,
        tp_hidden_s=0.0, dp_hidden_s=0.2171, ep_comm_s=0.13037, ep_hidden_s=0.39111,
        bubble_s=0.0, overlap_wait_s=0.01045, imbalance_s=0.0, pp_comm_s=0.0)
    panel.set_report(report)
    assert [panel.value_text(k) for k in ("iteration_time", "compute", "comm", "ep_comm",
                                          "bubble", "overlap_wait", "imbalance", "pp_comm")] == [
        "2.441 s", "2.301 s", "0.000 s (hidden DP 0.217 s)", "0.130 s (0.391 s hidden)",
        "0.000 s", "0.010 s", "0.000 s", "0.000 s"]
    # an iteration under a second whose band passes one: the band and the figures in seconds
    band = PredictionInterval(coverage=0.9, low_s=0.64937, high_s=1.0172,
                              low_factor=0.64937 / 0.816, high_factor=1.0172 / 0.816,
                              group="multi_node", num_residuals=27, in_calibration_range=True)
    short = dataclasses.replace(synthetic_report(p=1, iteration_time_s=0.816), interval=band,
                                compute_s=0.64, overlap_wait_s=0.011)
    panel.set_report(short)
    assert panel.value_text("iteration_band") == "0.649 s – 1.017 s"
    assert panel.value_text("iteration_time") == "0.816 s"
    assert panel.value_text("compute") == "0.640 s"
    assert panel.value_text("overlap_wait") == "0.011 s"
    # a short iteration with a short band: milliseconds throughout
    fast = dataclasses.replace(short, iteration_time_s=0.5, compute_s=0.35, overlap_wait_s=0.0,
                               interval=dataclasses.replace(band, low_s=0.4, high_s=0.6,
                                                            low_factor=0.8, high_factor=1.2))
    panel.set_report(fast)
    assert panel.value_text("iteration_band") == "400.00 ms – 600.00 ms"
    assert panel.value_text("compute") == "350.00 ms"


def test_tp_dp_row_shows_the_reports_hidden_tp_and_dp_collectives(panel):
    """A ZeRO-1 plan that overlaps its gradient reduce-scatters and parameter all-gathers
    (and its TP collectives): the "Exposed TP/DP collectives" row shows the report's
    ``tp_hidden_s`` and ``dp_hidden_s``, named as ``vtrain simulate``'s "Per stage (mean)"
    line names them (hidden TP collectives, hidden DP collectives); before, the DP part was
    not shown and the TP part was not named."""
    import dataclasses

    from core.cli.simulate import _per_stage_text
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.sim.simulate import simulate
    from vtrain_gui.formatting import format_durations

    model = dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], seq_length=2048)
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=4,
                        micro_batch_size=1, global_batch_size=32, recompute="none",
                        zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True,
                        sequence_parallel=True, tp_comm_overlap=True)
    session = Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    result = simulate(session)
    r = result.report
    assert r.tp_hidden_s > 0 and r.dp_hidden_s > 0
    panel.set_report(r)
    exposed, tp, dp = format_durations(r.comm_s, r.tp_hidden_s, r.dp_hidden_s)
    # each hidden part named hidden, as the CLI's line: "0.247 s (TP 0.244 s, DP 6.987 s
    # hidden)" read as 0.244 s of TP collectives exposed
    assert panel.value_text("comm") == f"{exposed} (hidden TP {tp}, hidden DP {dp})"
    tip = panel._values["comm"].toolTip()
    assert f"hidden TP collectives {tp}, hidden DP collectives {dp}" in tip
    # the CLI's line names the same two parts
    cli = _per_stage_text(session, r)
    assert f"hidden TP collectives {r.tp_hidden_s:,.3f} s" in cli
    assert f"hidden DP collectives {r.dp_hidden_s:,.3f} s" in cli
    # without the overlaps nothing is hidden: the plain exposed time, no tooltip
    off = simulate(dataclasses.replace(session, plan=dataclasses.replace(
        plan, overlap_grad_reduce=False, overlap_param_gather=False, tp_comm_overlap=False)))
    assert off.report.dp_hidden_s == 0 and off.report.tp_hidden_s == 0
    panel.set_report(off.report)
    assert "hidden" not in panel.value_text("comm") and panel._values["comm"].toolTip() == ""


def _settle() -> None:
    from PySide6 import QtCore, QtWidgets
    for _ in range(5):
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.LayoutRequest)
        QtWidgets.QApplication.processEvents()


def test_figures_take_one_line_each_when_wide_and_wrap_when_narrow(panel, real_simulate):
    """Wide, the figures take the width of their lines and the memory chart the rest; at the
    panel's minimum the chart has its own and the names and values wrap, each whole (the
    figures' minimum was their longest name beside their longest value, 503 pixels)."""
    from core.io.session import load_any
    from tests.conftest import EXAMPLES

    panel.set_report(real_simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json")).report)
    grid = panel._figures.layout()
    labels = [item.widget() for item in (grid.itemAt(i) for i in range(grid.count()))
              if type(item.widget()).__name__ == "_FigureLabel" and not item.widget().isHidden()]
    assert len(labels) == 2 * 19
    scroll, chart = panel._figures_scroll, panel.memory_plot.parentWidget()
    panel.resize(1400, 600)
    _settle()
    assert scroll.width() == scroll.sizeHint().width()
    assert chart.width() == 1400 - scroll.width() - panel.layout().spacing()
    for label in labels:  # one line each: as tall at its width as with all the width there is
        assert label.heightForWidth(label.width()) == label.heightForWidth(10_000), label.text()
        assert label.heightForWidth(label.width()) <= label.height()
    least = panel.minimumSizeHint().width()
    assert least < 503 + 143  # the figures' old minimum beside the chart's
    panel.resize(least, 600)
    _settle()
    assert chart.width() == chart.minimumSizeHint().width()
    assert scroll.width() == scroll.minimumWidth() < scroll.sizeHint().width()
    wrapped = [label.text() for label in labels
               if label.heightForWidth(label.width()) > label.heightForWidth(10_000)]
    assert "With failures" not in wrapped and any(t.startswith("2.9 days (2.9–2.9)")
                                                 for t in wrapped)
    for label in labels:
        assert label.heightForWidth(label.width()) <= label.height(), label.text()


def test_a_plan_only_above_the_throughput_ceiling_says_so(panel, real_simulate):
    """A plan in the calibration range, every feature calibrated (the A100 store: full
    recomputation, unfused attention), predicted at 60 % MFU, above every A100 bf16 run: the
    note says it is predicted faster than every calibration run, not that it is outside the
    calibration range (which it is not); the tooltip names the ceiling run. At 30 % MFU it is
    within the calibration."""
    import dataclasses
    from core.io.session import load_any
    from core.model.counts import model_flops_per_iteration
    from core.store.interval import session_interval
    from core.store.profile_store import ProfileStore
    from tests.conftest import EXAMPLES, ROOT

    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="full"))
    report = real_simulate(s).report
    store = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    flops = model_flops_per_iteration(s.model, s.plan) / s.plan.num_gpus
    for mfu, note in ((0.6, "⚠ predicted faster than every calibration run (hover for why)"),
                      (0.3, None)):
        iv = session_interval(s, flops / (mfu * store.peak_flops["bf16"]), store)
        assert iv.available and iv.in_calibration_range
        assert [d.feature for d in iv.departures] == (["throughput"] if note else [])
        panel.set_report(dataclasses.replace(report, interval=iv))
        if note:
            assert panel.value_text("band_note") == note
            assert "above every calibration run of A100-SXM4-80GB" in \
                panel._values["band_note"].toolTip()
        else:
            assert panel.value_text("band_note").startswith("from ")
