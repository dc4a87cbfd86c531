"""The compute-optimal study: Chinchilla's closed forms, model shapes, the study and its CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.cli import main
from core.plan.fields import ConfigError
from core.plan.presets import MODEL_PRESETS
from core.studies.optimal import CHINCHILLA, chinchilla_loss, chinchilla_optimal, compute_optimal, gpt_shape
from core.io.session import load_any
from core.model.counts import num_parameters
from tests.conftest import EXAMPLES


def test_chinchilla_optimum_minimizes_the_loss_on_its_compute_budget():
    flops = 3.3e23
    n, d = chinchilla_optimal(flops)
    assert 6 * n * d == pytest.approx(flops, rel=1e-12)
    # on the constraint 6ND = C, moving N either way raises the loss
    for f in (0.9, 0.99, 1.01, 1.1):
        assert chinchilla_loss(n * f, d / f) > chinchilla_loss(n, d)
    # the refit's optimum is the familiar ~20 tokens per parameter
    assert 15 < d / n < 25
    # closed form: d/dN of L(N, C/(6N)) = 0  <=>  alpha A / N^alpha = beta B / D^beta
    c = CHINCHILLA
    assert c["alpha"] * c["A"] / n ** c["alpha"] == pytest.approx(c["beta"] * c["B"] / d ** c["beta"],
                                                                   rel=1e-9)


def test_chinchilla_rejects_non_positive_inputs():
    with pytest.raises(ValueError):
        chinchilla_optimal(0.0)
    with pytest.raises(ValueError):
        chinchilla_loss(-1.0, 1e9)


def test_gpt_shape_reproduces_gpt3_175b_and_splits_well():
    m = gpt_shape(175e9)
    ref = MODEL_PRESETS["GPT-3 175B"]
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (
        ref.num_layers, ref.hidden_size, ref.num_attention_heads)
    for n in np.geomspace(1e9, 1e12, 13):
        s = gpt_shape(n)
        assert s.num_attention_heads % 8 == 0 and s.num_layers % (16 if s.num_layers >= 64 else 8) == 0
        assert s.hidden_size == 128 * s.num_attention_heads
        assert abs(math.log(num_parameters(s) / n)) < math.log(1.6)


def test_compute_optimal_ranks_candidates_by_loss_of_what_their_best_plan_trains():
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    r = compute_optimal(session, 8, 2.0, num_candidates=5, spread=4.0)
    fit = [c for c in r.candidates if c.plan is not None]
    assert len(fit) >= 3 and r.best is not None
    sizes = [c.n_params for c in r.candidates]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    for c in fit:
        assert c.plan["num_gpus"] == 8 and c.plan["fits_in_memory"]
        assert c.tokens == pytest.approx(c.tokens_per_s * 2.0 * 86400, rel=1e-12)
        assert c.loss == pytest.approx(chinchilla_loss(c.n_params, c.tokens), rel=1e-12)
        # MFU counts 6N FLOPs per token plus attention and the output layer: a little above
        # 6 N tokens/s over the GPUs' peak, never below
        assert 1.0 <= c.mfu / (6 * c.n_params * c.tokens_per_s / (8 * r.peak_flops)) < 1.3
    assert r.candidates[r.best].loss == min(c.loss for c in fit)
    assert r.budget_flops == pytest.approx(8 * r.peak_flops * 2.0 * 86400 * 0.4, rel=1e-12)
    n_rule = r.candidates[r.rule_index].n_params
    assert abs(math.log(n_rule / r.rule_params)) == min(abs(math.log(c.n_params / r.rule_params))
                                                        for c in r.candidates)


def test_cli_json_and_table(capsys):
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["num_gpus"] == 8 and doc["days"] == 2.0 and doc["best"] is not None
    assert doc["cost_usd"] == pytest.approx(8 * 2 * 24 * doc["price_per_gpu_hour_usd"])
    best = doc["candidates"][doc["best"]]
    assert best["plan"]["num_gpus"] == 8 and best["loss"] == min(
        c["loss"] for c in doc["candidates"] if c["loss"] is not None)
    assert main(["optimal", path, "--gpus", "8", "--days", "2", "--candidates", "5"]) == 0
    out = capsys.readouterr().out
    assert "lowest loss" in out and "Chinchilla rule" in out
    # the switches the candidates' sweeps keep from the file are named (they change the result)
    kept = out.splitlines()[1]
    assert kept.startswith("each plan keeps CONFIG's switches: precision=bf16 ")
    assert "zero_stage=0" in kept and "overlap_grad_reduce=off" in kept


@pytest.mark.parametrize("args, needle", [
    (["--gpus", "0", "--days", "2"], "--gpus"),
    (["--gpus", "8", "--days", "-1"], "--days"),
    (["--gpus", "8", "--days", "2", "--assumed-mfu", "1.5"], "--assumed-mfu"),
    (["--gpus", "8", "--days", "2", "--spread", "1"], "--spread"),
])
def test_cli_bad_budget_exits_2_naming_the_option(args, needle, capsys):
    assert main(["optimal", str(EXAMPLES / "gpt3_1.3b_single_node.json"), *args]) == 2
    assert needle in capsys.readouterr().err


def test_a_budget_below_the_smallest_shape_names_no_rule_candidate():
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    r = compute_optimal(session, 1, 0.001)
    assert r.rule_params < 2e7 and r.rule_index is None
    assert len(r.candidates) == 1 and r.candidates[0].model.num_layers == 8  # all round to L=8, h=1024
    assert "training_days" not in (r.candidates[0].plan or {})


@pytest.mark.parametrize("kw, needle", [({"days": 1e300}, "--days"), ({"spread": 1e30}, "--spread"),
                                        ({"num_gpus": 10**9}, "--gpus")])
def test_budgets_beyond_the_bounds_are_refused(kw, needle):
    args = {"num_gpus": 8, "days": 1.0, **kw}
    with pytest.raises(ConfigError, match=needle):
        compute_optimal(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"), args.pop("num_gpus"),
                        args.pop("days"), **args)
