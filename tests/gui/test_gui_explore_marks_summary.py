"""The Explore summary names a plan once when it is the fastest, the cheapest and the cheapest
within the deadline: Mixtral 8x7B on 8 B200s with a 60-day deadline listed the same two-line
plan three times, and at 1,280 x 800 the plot lost its time axis's title to them."""

from __future__ import annotations

import numpy as np

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.studies.sweep import SweepSpace, run_sweep
from vtrain_gui.explore import ExploreTab
from vtrain_gui.formatting import format_number_short


def test_one_plan_with_three_marks_is_named_once(qtbot):
    # on one GPU the cost is the time times one price: the fastest plan is the cheapest
    session = Session(MODEL_PRESETS["GPT-3 1.3B"],
                      ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                                   micro_batch_size=1, global_batch_size=8),
                      ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8))
    result = run_sweep(session, SweepSpace(max_gpus=1), deadline_days=1000.0)
    assert result.fastest == result.cheapest == result.cheapest_within_deadline is not None
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(session)
    tab.settings_panel.deadline.setValue(1000.0)
    tab.set_result(result)
    text = tab.summary_text
    i = result.fastest
    plan = f"({result.plans[i].label()}, 1 GPU)"
    assert text.count(plan) == 1  # named once ...
    line = next(part for part in text.split("<br>") if plan in part)
    for label in ("fastest", "cheapest", f"cheapest within {format_number_short(1000.0)} days"):  # ... with its marks
        assert f'<a href="plan:{i}">{label}</a>' in line
    assert line.index(">fastest<") < line.index(">cheapest<") < line.index(">cheapest within")
    assert np.isfinite(result.training_days[i])


def test_gpu_counts_read_in_the_singular_for_one():
    from vtrain_gui.formatting import format_gpus
    assert [format_gpus(n) for n in (1, 2, 1024)] == ["1 GPU", "2 GPUs", "1,024 GPUs"]
