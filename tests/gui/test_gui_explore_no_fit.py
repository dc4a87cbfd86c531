"""Explore when no plan fits in memory (a user's trial: Llama-3.1-70B on 8 H100s showed empty
axes with meaningless ticks): the plot says so and what to try, naming the fewest GPUs that
fit when the window found them; the table still lists every plan."""

from __future__ import annotations

import numpy as np
import pytest

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.studies.fit_changes import fewest_gpus
from core.studies.sweep import SweepSpace, run_sweep
from vtrain_gui.explore import ExploreTab


@pytest.fixture(scope="module")
def no_fit():
    """Llama 3 70B, B=8, on at most 8 H100s: no plan fits (the smallest needs ~156 GiB)."""
    session = Session(MODEL_PRESETS["Llama 3 70B"],
                      ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                   micro_batch_size=1, global_batch_size=8),
                      ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    result = run_sweep(session, SweepSpace(max_gpus=8))
    assert result.num_plans > 0 and not result.fits_in_memory.any()
    return session, result


def test_the_plot_says_no_plan_fits_and_what_to_try(qtbot, no_fit):
    session, result = no_fit
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(session)
    tab.set_result(result)

    assert not tab.plans_view.is_empty  # the table lists the plans and their memory
    assert tab.table_model.rowCount() == result.num_plans
    assert tab.plot_view.is_empty
    text = tab.plot_view.message_text
    assert "No plan fits in GPU memory" in text
    least = np.nanmin(result.max_memory_per_gpu_bytes) / 2**30
    assert f"{least:,.1f}&nbsp;GiB" in text and "80.0&nbsp;GiB" in text
    assert f"{result.num_plans:,} plans" in text
    assert "Fewest GPUs" not in text  # not known yet

    fewest = fewest_gpus(session)
    assert fewest.num_gpus is not None and fewest.num_gpus > 8
    tab.set_fewest_gpus(fewest, session)
    assert f"{fewest.num_gpus:,} GPUs" in tab.plot_view.message_text

    # found for another model: not named
    other = session.copy()
    other.model = MODEL_PRESETS["Llama 3 8B"]
    tab.set_fewest_gpus(fewest, other)
    assert f"{fewest.num_gpus:,} GPUs" not in tab.plot_view.message_text

    tab.set_result(None)  # no sweep: the tab's own empty state, the plot's gone
    assert tab.plans_view.is_empty and not tab.plot_view.is_empty


def test_the_plot_shows_points_when_plans_fit_and_says_when_filters_hide_them(qtbot):
    session = Session(MODEL_PRESETS["Llama 3 70B"],
                      ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                   micro_batch_size=1, global_batch_size=8),
                      ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(session)
    result = run_sweep(session, SweepSpace(max_gpus=32))
    assert result.feasible.any() and not result.fits_in_memory[result.num_gpus == 8].any()
    tab.set_result(result)
    assert not tab.plot_view.is_empty
    tab.gpu_filter_mode.setCurrentText("exactly")
    tab.gpu_filter.setValue(8)  # only the 8-GPU plans: none fits
    assert tab.plot_view.is_empty
    assert "filters" in tab.plot_view.message_text


def test_the_editors_plan_that_does_not_fit_is_named_without_empty_figures(qtbot, no_fit):
    """The sweep does not simulate a plan that does not fit: the summary's line for the
    editor's plan read "plan in the editor: – days, – (t=8 ...) — does not fit in memory"."""
    session, result = no_fit
    own = result.index_of(session.plan)
    assert own is not None and not np.isfinite(result.training_days[own])
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(session)
    tab.set_result(result)
    text = tab.summary_text
    line = text[text.index("plan in the editor"):]
    assert "– days" not in line and "days," not in line
    assert (f"plan in the editor</a>: ({result.plans[own].label()}, 8 GPUs) — does not fit in "
            "memory") in line.replace("&nbsp;", " ")
