"""Compute-optimal model size for a fixed GPU budget: the vTrain paper's third study.

Given a cluster of ``G`` GPUs for ``T`` days, which model trains to the lowest
loss? The Chinchilla rule (Hoffmann et al. 2022) answers for a budget of
FLOPs ``C``: it minimizes the fitted loss

    L(N, D) = E + A / N**alpha + B / D**beta          (Hoffmann et al. 2022, Eq. 2)

under ``C = 6 N D`` (Kaplan et al. 2020), giving

    N_opt = G_c * (C / 6) ** (beta / (alpha + beta)),
    D_opt = (C / 6) / N_opt,       G_c = (alpha A / (beta B)) ** (1 / (alpha + beta))

(Hoffmann et al. 2022, Eq. 4). The parameters are Besiroglu et al. 2024's
refit of Hoffmann et al.'s data ("Chinchilla Scaling: A replication
attempt", Eq. 4: E = 1.8172, A = 482.01, B = 2085.43, alpha = 0.3478,
beta = 0.3658), whose optimum is the familiar ~20 tokens per parameter; the
original Approach 3 fit (E = 1.69, A = 406.4, B = 410.7, alpha = 0.34,
beta = 0.28) puts it near 90, at odds with the paper's own Approaches 1 and 2.

A GPU budget gives ``C`` only through an assumed utilization:
``C = G * peak * T * MFU``. The MFU a model really reaches depends on its
shape and on the best plan for it on this cluster, which is what the
simulator knows (the compute-optimal study of Bang et al. 2024: under a
wall-clock budget the best model is not the one the FLOP budget suggests).
So :func:`compute_optimal` sizes candidate models around the rule's
answer, shaped like the session's model (:func:`shape_like`: only depth and width change;
a mixture-of-experts or latent-attention model is refused, :func:`check_template`), finds each one's fastest plan that fits on exactly ``G`` GPUs with a
plan sweep (:func:`core.studies.sweep.run_sweep`) of the space ``vtrain sweep`` searches
by default (:meth:`core.studies.sweep.SweepSpace.default_for`: the plans a Megatron-Core
user would try, sequence parallelism, ZeRO stages, cp and the overlaps too), trains it for
the tokens that plan processes in ``T`` days, and ranks the candidates by ``L(N, D)``.
Given a FLOP budget ``C`` instead (``flops``), no utilization is assumed: each candidate
trains on ``C / (6 N)`` tokens (whole iterations, not above ``C``) in the days its plan takes.

The loss is a fit of Hoffmann et al.'s data, models of 70 M to 16 B parameters trained on
5 B to 500 B tokens (:data:`CHINCHILLA_DATA`): a candidate outside it has its loss
extrapolated (:attr:`Candidate.outside_fit`, "loss extrapolated" in its note), and one whose
loss is above ``ln V`` of its vocabulary, a uniform guess (:func:`ln_vocab`), is beyond what the
fit says (:attr:`Candidate.loss_above_ln_vocab`). The candidates are ranked all the same (the
vTrain study's models of 70 B and more are all beyond the data); :func:`fit_range_note` says
which lie outside, and when every candidate is above ``ln V`` that the lowest loss ranks
nothing (no candidate above it can be the lowest while one is below).

Parameters ``N`` count every weight (embeddings included, as
:meth:`core.plan.model_config.ModelConfig.num_parameters`); tokens ``D`` are training
tokens.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from core.plan.fields import ConfigError, FieldError
from core.plan.model_config import ModelConfig
from core.plan.session import Session
from core.util.text import format_params
from core.model.counts import num_parameters
from core.studies.scaling_law import (CHINCHILLA, CHINCHILLA_DATA, CHINCHILLA_DATA_SOURCE,
                                      OUTSIDE_FIT, chinchilla_loss, chinchilla_optimal,
                                      ln_vocab, outside_fit_range)

__all__ = ["CHINCHILLA", "chinchilla_loss", "chinchilla_optimal", "gpt_shape", "format_params",
           "shape_like", "gpt_template", "check_template", "shape_family", "template_summary",
           "template_text", "days_for_gpu_hours", "check_budget",
           "no_plan_explanation", "no_rule_candidate_note", "Candidate",
           "OptimalResult", "compute_optimal", "check_flops", "study_inputs",
           "candidate_session", "candidate_shapes", "left_out_sizes", "left_out_note",
           "CHINCHILLA_DATA", "CHINCHILLA_DATA_SOURCE", "OUTSIDE_FIT", "outside_fit_range",
           "ln_vocab", "candidate_fit_note", "fit_range_note", "LOSS_EXTRAPOLATED"]

#: A candidate's note when its (N, D) lies outside :data:`CHINCHILLA_DATA`.
LOSS_EXTRAPOLATED = "loss extrapolated"
#: Largest budget :func:`compute_optimal` takes: GPUs, days, candidate size ratio, candidates.
MAX_GPUS, MAX_DAYS, MAX_SPREAD, MAX_CANDIDATES = 1_000_000, 3650, 1000.0, 100
#: Head dimension h / a of the generated shapes (GPT-3 175B, MT-NLG: 128).
HEAD_DIM = 128
#: Width-to-depth ratio h / L of the generated shapes (GPT-3 175B: 12288 / 96 = 128).
ASPECT_RATIO = 128


#: Multiple of the candidates' MLP width when the template gives one (Llama's ``multiple_of``,
#: 256 in Meta's Llama 2 and 3 code).
FFN_MULTIPLE = 256


def check_template(template: ModelConfig) -> None:
    """Refuse a session model that the study cannot take as its candidates' template.

    Chinchilla's loss law (Hoffmann et al. 2022, Eq. 2; Besiroglu et al. 2024's refit) is
    fitted on dense transformers with multi-head attention: their ``N`` is every weight, each
    used by every token. A mixture-of-experts model (``model.num_experts``) uses a fraction of
    its weights per token, and multi-head latent attention (``model.multi_latent_attention``)
    has latent ranks with no size rule here; the study would have to study dense models of
    another family instead, so it refuses both by name.

    Raises
    ------
    ConfigError
        ``model.num_experts`` set, or ``model.multi_latent_attention`` true (one error each).
    """
    law = ("the compute-optimal study's loss law (Chinchilla: Hoffmann et al. 2022, refit by "
           "Besiroglu et al. 2024) is fitted on dense models with multi-head attention")
    errs = []
    if template.num_experts:
        errs.append(FieldError("model.num_experts", f"{template.num_experts} experts: {law}, "
                               "every weight used by every token; a mixture-of-experts model "
                               "is outside it, and the study does not replace it by dense "
                               "candidates of another family: open a dense model's session"))
    if template.multi_latent_attention is True:
        errs.append(FieldError("model.multi_latent_attention",
                               f"true: {law}, and the latent ranks (q_lora_rank, kv_lora_rank) "
                               "have no rule for other model sizes; the study does not replace "
                               "it by "
                               "candidates of another family: open a session of a model with "
                               "multi-head or grouped-query attention"))
    if errs:
        raise ConfigError(errs)


def shape_family(template: ModelConfig) -> str:
    """The family word of ``template``'s layer, for candidate names: its ``family`` when not
    ``dense`` (``gemma2``), ``GPT`` for a GeLU, LayerNorm, learned-position layer (Megatron-LM's
    GPT), ``Llama`` for a SwiGLU, RMSNorm, RoPE one (Touvron et al. 2023), else its
    ``activation/normalization/position_embedding``."""
    if template.family != "dense":
        return template.family
    parts = (template.activation, template.normalization, template.position_embedding)
    return {("gelu", "layernorm", "learned"): "GPT",
            ("swiglu", "rmsnorm", "rope"): "Llama"}.get(parts, "/".join(parts))


def _query_groups(template: ModelConfig, heads: int) -> int | None:
    """The candidates' query groups for ``heads`` heads: None (multi-head) when the template
    has none or one per head; else the template's when they divide ``heads``, else the
    divisor of ``heads`` nearest to it (the smaller on a tie)."""
    g = template.num_query_groups
    if g is None or g == template.num_attention_heads:
        return None if g is None else heads
    if heads % g == 0:
        return g
    return min((k for k in range(1, heads + 1) if heads % k == 0), key=lambda k: (abs(k - g), k))


def shape_like(template: ModelConfig, n_params: float, name: str | None = None) -> ModelConfig:
    """A model of about ``n_params`` parameters shaped like ``template``: only its depth and
    width change, in sizes that split well.

    Width: the ``h`` whose model at ``h / L = ASPECT_RATIO`` (GPT-3's proportions) has
    ``n_params`` parameters in all, ``rest(h) + per_layer(h) h / ASPECT_RATIO = N`` with the
    template's own counts (:func:`core.model.counts.num_parameters`: the embeddings and final
    norm besides the layers, so that a large vocabulary does not widen a small model: a Llama 3
    8B template at 1.85 B has h = 2,048, L = 24, not h = 3,072, L = 8, which
    ``(ASPECT_RATIO N / 12)^(1/3)`` of the whole N gave), rounded to a multiple of ``8 d`` with ``d`` the
    template's head size (:attr:`~core.plan.model_config.ModelConfig.head_dim`: kv_channels, or
    h/a), so that the ``a = h / d`` heads divide by every tensor-parallel size up to 8; ``L`` a
    multiple of 8 (16 from 64 layers up), so that 2 to 8 (16) pipeline stages split it, that
    brings the total (:func:`core.model.counts.num_parameters`, embeddings included) closest to
    ``n_params``; at least L = 8, h = 8 d.

    Kept from the template: the head size (``kv_channels`` stays set when the template sets
    it), the query groups ``g`` (grouped-query attention) when the new head count divides by
    them, else the divisor of the head count nearest to ``g`` (multi-head attention stays
    multi-head), the MLP width ratio ``ffn_hidden_size / hidden_size`` rounded to a multiple of
    :data:`FFN_MULTIPLE` (Llama's ``multiple_of``; an unset ffn_hidden_size, 4h, stays unset),
    and every other field (activation, normalization, position embedding, biases, tied
    embeddings, QK-norm, sequence length, vocabulary, attention kernel, dropout ...). A GPT-3
    template (heads of 128) gives :func:`gpt_shape`'s shapes; a Llama 3 8B template at
    N = 8.03 B gives Llama 3 8B's own L = 32, h = 4096, a = 32, g = 8, ffn = 14336. The name
    is ``"<N> <family>-style (L=.., h=..)"`` (:func:`shape_family`) unless ``name`` is given.

    Raises
    ------
    ValueError
        ``n_params <= 0``.
    ConfigError
        The template is a mixture-of-experts or latent-attention model (:func:`check_template`).
    """
    if not n_params > 0:
        raise ValueError("n_params must be positive")
    check_template(template)
    d = template.head_dim
    step = 8 * d

    def model(layers: int, h: int) -> ModelConfig:
        heads = h // d
        ffn = (None if template.ffn_hidden_size is None else
               max(FFN_MULTIPLE, FFN_MULTIPLE * round(template.ffn_hidden_size
                                                      / template.hidden_size * h / FFN_MULTIPLE)))
        return dataclasses.replace(template, name="", num_layers=layers, hidden_size=h,
                                   num_attention_heads=heads, ffn_hidden_size=ffn,
                                   num_query_groups=_query_groups(template, heads),
                                   kv_channels=d if template.kv_channels else None)

    def counts(h: int) -> tuple[int, int]:  # parameters per layer, and besides the layers
        one, two = num_parameters(model(1, h)), num_parameters(model(2, h))
        return two - one, one - (two - one)

    def at_aspect(a: int) -> float:  # total parameters at h = a d, L = h / ASPECT_RATIO
        per_layer, rest = counts(a * d)
        return rest + per_layer * a * d / ASPECT_RATIO

    # the width whose model at h / L = ASPECT_RATIO has n_params in all, embeddings included:
    # between the head counts lo and hi = lo + 1 whose totals bracket n_params (bisection; the
    # total grows with the width), interpolated
    lo, hi = 0, 8
    while at_aspect(hi) < n_params:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at_aspect(mid) < n_params else (lo, mid)
    below = at_aspect(lo) if lo else 0.0
    width = d * (lo + (n_params - below) / (at_aspect(hi) - below))
    h = max(step, step * round(width / step))
    per_layer, rest = counts(h)
    target = (n_params - rest) / per_layer
    grain = 16 if target >= 64 else 8
    layers = max(8, grain * round(target / grain))
    out = model(layers, h)
    out.name = name or (f"{format_params(num_parameters(out))} {shape_family(template)}-style "
                        f"(L={layers}, h={h})")
    return out


def gpt_template(seq_length: int = 2048, vocab_size: int = 50257) -> ModelConfig:
    """Megatron-LM's GPT at GPT-3 175B's shape (Brown et al. 2020, Table 2.1: heads of 128):
    :func:`gpt_shape`'s template."""
    return ModelConfig("GPT-3 175B", 96, 12288, 96, None, seq_length, vocab_size)


def gpt_shape(n_params: float, seq_length: int = 2048, vocab_size: int = 50257,
              name: str | None = None) -> ModelConfig:
    """A GPT model of about ``n_params`` parameters with GPT-3's proportions and sizes that
    split well: :func:`shape_like` of :func:`gpt_template` (heads of :data:`HEAD_DIM`).

    Width: the ``h`` whose GPT model at ``h / L = ASPECT_RATIO`` has ``n_params`` parameters,
    embeddings included (:func:`shape_like`), rounded to a multiple of ``8 * HEAD_DIM``, so
    that the ``a = h / HEAD_DIM`` heads divide by every tensor-parallel size up to 8; ``L`` a
    multiple of 8 (16 from 64 layers up) that brings the total, embeddings included, closest
    to ``n_params``. GPT-3 175B comes out as L=96, h=12288, a=96. Raises ValueError for
    ``n_params <= 0``.
    """
    return shape_like(gpt_template(seq_length, vocab_size), n_params, name)


def template_summary(template: ModelConfig) -> dict[str, Any]:
    """What the candidates keep of ``template`` (:func:`shape_like`), as plain JSON: its name,
    family word (:func:`shape_family`), head size ``head_dim`` (channels), query groups
    (None: one per head), MLP width ratio ``ffn_ratio`` (None: 4, the unset default), its
    activation, normalization, position embedding, tied embeddings, linear biases and
    QK-norm."""
    return {"name": template.name, "family": shape_family(template),
            "head_dim": template.head_dim,
            "num_query_groups": (None if template.num_query_groups in
                                 (None, template.num_attention_heads)
                                 else template.num_query_groups),
            "ffn_ratio": (None if template.ffn_hidden_size is None else
                          template.ffn_hidden_size / template.hidden_size),
            "activation": template.activation, "normalization": template.normalization,
            "position_embedding": template.position_embedding,
            "tied_embeddings": template.tied_embeddings,
            "add_bias_linear": template.add_bias_linear, "qk_layernorm": template.qk_layernorm}


def template_text(template: dict[str, Any]) -> str:
    """One line for people of :func:`template_summary`'s ``template``: ``"shaped like the
    session's Llama 3 8B (Llama-style: heads of 128 channels, 8 query groups, MLP 3.5 h,
    swiglu, rmsnorm, rope, untied embeddings, no linear biases); only L and h change"``."""
    t = template
    parts = [f"heads of {t['head_dim']} channels",
             f"{t['num_query_groups']} query groups" if t["num_query_groups"] else
             "multi-head attention",
             f"MLP {t['ffn_ratio']:.4g} h" if t["ffn_ratio"] is not None else "MLP 4 h",
             t["activation"], t["normalization"], t["position_embedding"],
             "tied embeddings" if t["tied_embeddings"] else "untied embeddings",
             "linear biases" if t["add_bias_linear"] else "no linear biases"]
    if t["qk_layernorm"]:
        parts.append("QK-norm")
    name = f"'s {t['name']}" if t["name"] else "'s model"
    return (f"shaped like the session{name} ({t['family']}-style: {', '.join(parts)}); only L "
            "and h change")


@dataclass
class Candidate:
    """One candidate model and the best it does on the budget.

    ``plan`` is None when no plan of it fits on the GPUs (``reason`` says why);
    then ``tokens``, ``loss`` and the plan figures are NaN. :attr:`within_calibration` and
    :attr:`calibration_departures` read the plan's row of its sweep. The fastest plan is
    chosen whether or not it is within calibration.
    """

    model: ModelConfig
    n_params: int
    plan: dict[str, Any] | None
    tokens_per_s: float
    mfu: float
    tokens: float
    loss: float
    reason: str = ""
    #: Days the plan trains its tokens: the budget's days, or with a FLOP budget the tokens
    #: over the plan's tokens/s (NaN without a plan).
    days: float = math.nan

    @property
    def within_calibration(self) -> bool | None:
        """Whether the profile was calibrated on plans like the chosen one
        (:attr:`core.studies.sweep.SweepResult.within_calibration`); None without a plan."""
        return None if self.plan is None else self.plan["within_calibration"]

    @property
    def calibration_departures(self) -> str:
        """The chosen plan's features no calibration run had
        (:attr:`core.studies.sweep.SweepResult.calibration_departures`); "" when none."""
        return "" if self.plan is None else self.plan["calibration_departures"]

    @property
    def outside_fit(self) -> list[str]:
        """Where the candidate's ``(n_params, tokens)`` lies outside the data of Chinchilla's
        loss fit (:func:`outside_fit_range`): its loss is extrapolated when not empty; ``[]``
        for a candidate with no loss."""
        if not math.isfinite(self.loss):
            return []
        return outside_fit_range(self.n_params, self.tokens)

    @property
    def loss_above_ln_vocab(self) -> bool | None:
        """Whether the fitted loss is above ``ln V`` of the model's vocabulary
        (:func:`ln_vocab`): worse than a uniform guess, so the fit says nothing of it; None
        for a candidate with no loss."""
        if not math.isfinite(self.loss):
            return None
        return self.loss > ln_vocab(self.model.vocab_size)

    @property
    def tokens_per_parameter(self) -> float:
        """Training tokens per parameter (Chinchilla's optimum is about 20)."""
        return self.tokens / self.n_params


@dataclass
class OptimalResult:
    """What :func:`compute_optimal` found.

    Attributes
    ----------
    num_gpus, days : the budget (days None with a FLOP budget, :attr:`flops`)
    assumed_mfu : float or None
        MFU the Chinchilla rule's FLOP budget assumes (None with a FLOP budget).
    budget_flops : float
        The rule's ``C``: ``num_gpus * peak * days * 86400 * assumed_mfu``, or the FLOP budget.
    rule_params, rule_tokens : float
        Chinchilla's ``N_opt`` and ``D_opt`` for ``budget_flops``.
    candidates : list of Candidate
        Smallest first, one per distinct shape (sizes below the smallest shape,
        L=8 and h=1024, all round to it).
    rule_index : int or None
        The candidate closest to the rule's ``N_opt`` (in log size), or None
        when none is within a factor of 2 of it.
    best : int or None
        Index of the candidate with the lowest loss (None when no candidate fits).
    hold_session_values : bool
        Whether the sweeps held the session's switches (``SweepSpace.hold_session_values``)
        instead of searching ``vtrain sweep``'s default space.
    no_tight : bool
        Whether the sweeps left their tight plans out (``vtrain optimal --no-tight``): each
        candidate's plan then fits outside the memory margin.
    template : dict
        What the candidates keep of the session's model (:func:`template_summary`); empty
        for a result built without one.
    dimensions : list of dict
        What the candidates' sweeps swept and held, and why, as one sweep's
        (:func:`core.studies.sweep.merge_dimensions` of their
        :attr:`~core.studies.sweep.SweepResult.dimensions`).
    requested_sizes : list of float
        The ``num_candidates`` sizes asked for, in parameters (geometric over ``spread``).
    size_candidates : list of int
        For each requested size, the index of the candidate it is shaped as: sizes that round
        to one shape are one candidate (:func:`left_out_sizes`).
    flops : float or None
        The FLOP budget when the study was given one (``vtrain optimal --flops``): each
        candidate then trains on ``flops / (6 N)`` tokens, whole iterations, and its own days;
        ``days`` and ``assumed_mfu`` are None. None for a budget of days.
    """

    num_gpus: int
    days: float | None
    assumed_mfu: float | None
    peak_flops: float
    budget_flops: float
    rule_params: float
    rule_tokens: float
    rule_index: int | None
    candidates: list[Candidate] = field(default_factory=list)
    best: int | None = None
    warnings: list[str] = field(default_factory=list)
    hold_session_values: bool = False
    dimensions: list[dict[str, Any]] = field(default_factory=list)
    no_tight: bool = False
    template: dict[str, Any] = field(default_factory=dict)
    requested_sizes: list[float] = field(default_factory=list)
    size_candidates: list[int] = field(default_factory=list)
    flops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (what ``vtrain optimal --json`` prints): each candidate with
        its ``outside_fit_range`` (:attr:`Candidate.outside_fit`) and ``loss_above_ln_vocab``;
        ``loss_fit_data`` the data the loss was fitted on (:data:`CHINCHILLA_DATA`, its
        ``source``) and ``ln_vocab_size`` the candidates' ``ln V`` (None without a
        candidate)."""
        def cand(c: Candidate) -> dict[str, Any]:
            m = c.model
            return {"name": m.name, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                    "num_attention_heads": m.num_attention_heads,
                    "num_query_groups": m.num_query_groups, "kv_channels": m.kv_channels,
                    "ffn_hidden_size": m.ffn_hidden_size, "n_params": c.n_params,
                    "plan": c.plan, "tokens_per_s": _num(c.tokens_per_s), "mfu": _num(c.mfu),
                    "tokens": _num(c.tokens), "tokens_per_parameter": _num(c.tokens_per_parameter),
                    "loss": _num(c.loss), "days": _num(c.days), "reason": c.reason,
                    "within_calibration": c.within_calibration,
                    "calibration_departures": c.calibration_departures,
                    "outside_fit_range": c.outside_fit,
                    "loss_above_ln_vocab": c.loss_above_ln_vocab}
        return {"num_gpus": self.num_gpus, "days": self.days, "assumed_mfu": self.assumed_mfu,
                "peak_flops_per_gpu": self.peak_flops, "budget_flops": self.budget_flops,
                "rule_params": self.rule_params, "rule_tokens": self.rule_tokens,
                "rule_index": self.rule_index, "best": self.best,
                "candidates": [cand(c) for c in self.candidates], "warnings": self.warnings,
                "hold_session_values": self.hold_session_values, "no_tight": self.no_tight,
                "dimensions": self.dimensions, "template": self.template,
                "flops": self.flops, "requested_sizes": self.requested_sizes,
                "size_candidates": self.size_candidates, "left_out": left_out_sizes(self),
                "loss_fit_data": {"n_params": list(CHINCHILLA_DATA["n_params"]),
                                  "tokens": list(CHINCHILLA_DATA["tokens"]),
                                  "source": CHINCHILLA_DATA_SOURCE},
                "ln_vocab_size": (ln_vocab(self.candidates[0].model.vocab_size)
                                  if self.candidates else None)}


def left_out_sizes(result: "OptimalResult") -> list[dict[str, Any]]:
    """The requested sizes that are not candidates of their own, as plain JSON: each
    ``{"size": parameters asked for, "candidate": index of the candidate it is shaped as,
    "why": "below the smallest shape" | "same shape"}``. A size rounds to the shape of the
    size before it when the rounding of ``h`` (to 8 head sizes) and of ``L`` (to 8 or 16)
    gives both one shape (:func:`shape_like`); "below the smallest shape" when that shape is
    the smallest, L = 8 and h = 8 head sizes, and the size is below its parameters. The
    first size of each shape is its candidate and is not listed."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for size, k in zip(result.requested_sizes, result.size_candidates):
        if k in seen:
            c = result.candidates[k]
            smallest = (c.model.num_layers, c.model.hidden_size) == (8, 8 * c.model.head_dim)
            out.append({"size": size, "candidate": k,
                        "why": "below the smallest shape" if smallest and size < c.n_params
                        else "same shape"})
        seen.add(k)
    return out


def left_out_note(result: "OptimalResult") -> str:
    """For people, the requested sizes that are no candidate of their own
    (:func:`left_out_sizes`) and the candidates with no plan: ``"1 of 9 candidate sizes is no
    row of its own: 1.1B rounds to the shape of 978M (L=8, h=2048) (h a multiple of 8 head
    sizes, L of 8, or 16 from 64 layers: a larger --spread reaches other shapes); 1 of the 8
    shapes has no plan (its note says why)."``; "" when every size is a candidate with a
    plan."""
    left = left_out_sizes(result)
    no_plan = sum(c.plan is None for c in result.candidates)
    parts = []
    if left:
        groups: dict[int, list[dict[str, Any]]] = {}
        for x in left:
            groups.setdefault(x["candidate"], []).append(x)
        said = []
        for k, xs in groups.items():
            c = result.candidates[k]
            names = [format_params(x["size"]) for x in xs]
            listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            below = sum(x["why"] == "below the smallest shape" for x in xs)
            text = (f"{listed} {'rounds' if len(xs) == 1 else 'round'} to the shape of "
                    f"{format_params(c.n_params)} (L={c.model.num_layers}, "
                    f"h={c.model.hidden_size})")
            if below:
                text += (f", {'it' if len(xs) == 1 else f'{below} of them'} below it, the smallest "
                         f"{shape_family(c.model)}-style shape")
            said.append(text)
        n = len(result.requested_sizes)
        parts.append(f"{len(left)} of {n} candidate sizes {'is' if len(left) == 1 else 'are'} "
                     f"no row of {'its' if len(left) == 1 else 'their'} own: "
                     + "; ".join(said)
                     + " (h a multiple of 8 head sizes, L of 8, or 16 from 64 layers: a larger "
                       "--spread reaches other shapes)")
    if no_plan:
        shapes = len(result.candidates)
        which = ("the only shape has" if shapes == 1 else
                 f"{no_plan} of the {shapes} shapes {'has' if no_plan == 1 else 'have'}")
        parts.append(f"{which} no plan ({'its' if no_plan == 1 else 'their'} note says why)")
    return "; ".join(parts) + "." if parts else ""


def candidate_fit_note(candidate: Candidate) -> str:
    """A candidate's short note on its loss, for its row: ``"loss above ln V = 10.83: the fit
    says nothing here"`` when the loss is above ``ln V`` (:attr:`Candidate.loss_above_ln_vocab`),
    else ``"loss extrapolated"`` (:data:`LOSS_EXTRAPOLATED`) when it lies outside the fit's
    data (:attr:`Candidate.outside_fit`), else ``""`` (inside, or no loss)."""
    if candidate.loss_above_ln_vocab:
        return (f"loss above ln V = {ln_vocab(candidate.model.vocab_size):.2f}: the fit says "
                "nothing here")
    return LOSS_EXTRAPOLATED if candidate.outside_fit else ""


def fit_range_note(result: "OptimalResult") -> str:
    """For people, under the table: the data the loss was fitted on and which candidates lie
    outside it, ``"Loss is Chinchilla's fit of models of 70M-16B parameters on 5B-500B tokens
    (Hoffmann et al. 2022): 7 of 9 candidates lie outside it (N above 16B), their loss
    extrapolated."``, the ways named (``N below 70M``, ``N above 16B``, ``D below 5B``, ``D
    above 500B``) with how many each when not all; then the candidates whose loss is above ``ln
    V`` (:func:`ln_vocab`), and when the lowest loss is (every candidate's then is) that it ranks
    nothing. Counts the candidates with a loss; "" when none has one."""
    with_loss = [c for c in result.candidates if math.isfinite(c.loss)]
    if not with_loss:
        return ""
    (n_lo, n_hi), (d_lo, d_hi) = CHINCHILLA_DATA["n_params"], CHINCHILLA_DATA["tokens"]
    text = (f"Loss is Chinchilla's fit of models of {format_params(n_lo)}-{format_params(n_hi)} "
            f"parameters on {format_params(d_lo)}-{format_params(d_hi)} tokens "
            f"({CHINCHILLA_DATA_SOURCE}): ")
    total = len(with_loss)
    tail = "" if total == len(result.candidates) else " with a loss"
    cands = "candidates" + tail

    def who(k: int) -> str:  # k of the candidates with a loss, and its verb
        if total == 1:
            return f"the only candidate{tail} lies"
        if k == total:
            return f"{'both' if total == 2 else f'all {total}'} {cands} lie"
        return f"{k} of {total} {cands} {'lies' if k == 1 else 'lie'}"

    outside = [c for c in with_loss if c.outside_fit]
    if not outside:
        text += f"{who(total)} inside it."
    else:
        words = {"n_params_below": f"N below {format_params(n_lo)}",
                 "n_params_above": f"N above {format_params(n_hi)}",
                 "tokens_below": f"D below {format_params(d_lo)}",
                 "tokens_above": f"D above {format_params(d_hi)}"}
        ways = []
        for way in OUTSIDE_FIT:
            k = sum(way in c.outside_fit for c in outside)
            if k:
                ways.append(words[way] if k == len(outside) else f"{words[way]} for {k}")
        text += (f"{who(len(outside))} outside it ({', '.join(ways)}), "
                 f"{'its' if len(outside) == 1 else 'their'} loss extrapolated.")
    above = [c for c in with_loss if c.loss_above_ln_vocab]
    if above:
        v = with_loss[0].model.vocab_size
        text += (f" {who(len(above)).capitalize()} above ln V = {ln_vocab(v):.2f} in loss (a "
                 f"uniform guess over the {v:,}-token vocabulary): the fit says nothing there")
        text += (", and the lowest loss ranks nothing." if len(above) == total else
                 "; the lowest loss is below it.")
    return text


def candidate_session(session: Session, result: "OptimalResult", k: int | None = None
                      ) -> Session:
    """A new session of candidate ``k`` of ``result`` (default :attr:`OptimalResult.best`, the
    lowest-loss candidate): ``session``'s cluster, price and every field the study held (the
    session the study ran on), the candidate's model and its fastest plan (every field of its
    sweep row, :class:`~core.plan.parallel.ParallelPlan`), and as the token budget
    (``cost.training_tokens``) the tokens that plan trains in the budget's days (with a FLOP
    budget, its ``C / 6N`` tokens in whole iterations, and its own :attr:`Candidate.days`), so that
    simulating the session gives the study's iteration time, tokens/s, days (``result.days``)
    and cost (``vtrain optimal --out``). The session's saved sweep and pinned plan (of its
    own model) are left out.

    Raises
    ------
    ValueError
        ``k`` names no candidate, or the candidate has no plan (its reason says why) or no
        loss (less than one iteration in the budget); ``k`` None and no candidate has a loss.
    """
    from core.plan.parallel import ParallelPlan
    if k is None:
        k = result.best
        if k is None:
            raise ValueError("no candidate has a plan that trains in the budget: nothing to save")
    if not 0 <= k < len(result.candidates):
        raise ValueError(f"candidate {k} is not among the study's {len(result.candidates)}")
    c = result.candidates[k]
    if c.plan is None or not math.isfinite(c.loss):
        raise ValueError(f"candidate {c.model.name} has no plan that trains in the budget: "
                         f"{c.reason}")
    s = session.copy()
    s.model = dataclasses.replace(c.model)
    s.plan = ParallelPlan(**{f.name: c.plan[f.name] for f in dataclasses.fields(ParallelPlan)})
    s.cost = dataclasses.replace(s.cost, training_tokens=float(c.tokens))
    s.sweep = s.compare = None  # the last sweep and the pinned plan were of another model
    return s


def no_plan_explanation(result: "OptimalResult", global_batch_size: int) -> str:
    """Why no candidate has a plan, for people: the GPU-count rule when no candidate has a
    plan on exactly this many GPUs, else a pointer to the per-candidate reasons."""
    if {c.reason for c in result.candidates} == {"no plan on exactly this many GPUs"}:
        return (f"No candidate has a plan on exactly {result.num_gpus:,} GPUs: a plan needs t*p*d "
                f"GPUs with t dividing a node and d*b dividing the global batch "
                f"({global_batch_size}); try another GPU count or global batch.")
    return "No candidate has a plan that fits on exactly these GPUs (see each candidate's note)."


def no_rule_candidate_note(result: "OptimalResult") -> str:
    """Why ``result`` names no candidate as the rule's size (``rule_index`` None), for people:
    the candidate nearest the rule's ``N_opt`` in log size, with its own shape (L, h) and how
    many times smaller or larger it is, and where ``N_opt`` lies: below the smallest shape
    (L = 8, h = 8 head sizes, 1,024 for GPT-3's heads: every smaller size rounds to it) or between candidates that
    ``--candidates`` / ``--spread`` spaced more than a factor of 2 from it (2 candidates
    over the default spread of 8 sit sqrt(8) = 2.8 times below and above it). "" when a
    candidate is the rule's size or there is none."""
    if result.rule_index is not None or not result.candidates:
        return ""
    n_rule = result.rule_params
    sizes = np.array([c.n_params for c in result.candidates], float)
    k = int(np.argmin(np.abs(np.log(sizes / n_rule))))
    c = result.candidates[k]
    ratio = c.n_params / n_rule
    how = f"{ratio:.3g} times larger" if ratio >= 1 else f"{1 / ratio:.3g} times smaller"
    text = (f"The rule's N_opt ({format_params(n_rule)}) is not within a factor of 2 of any "
            f"candidate shape: the nearest, {format_params(c.n_params)} "
            f"(L={c.model.num_layers}, h={c.model.hidden_size}), is {how}")
    smallest = result.candidates[0].model
    if n_rule < sizes[0] and (smallest.num_layers, smallest.hidden_size) == (
            8, 8 * smallest.head_dim):
        return text + (f" (no {shape_family(smallest)} shape is smaller than L=8, "
                       f"h={smallest.hidden_size}).")
    return text + "; more --candidates or a smaller --spread puts one nearer."


def _num(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def check_budget(num_gpus: int, days: float, assumed_mfu: float, num_candidates: int,
                 spread: float) -> None:
    """Check :func:`compute_optimal`'s budget arguments (``days`` in days), as it does first;
    ``vtrain optimal`` calls it before it prints anything (its small-batch warning was printed
    for ``--gpus 1000001`` before the refusal of that count).

    Raises
    ------
    ConfigError
        Every argument out of range, named as the CLI option."""
    errs = []
    if not (isinstance(num_gpus, int) and 0 < num_gpus <= MAX_GPUS):
        errs.append(FieldError("--gpus", f"{num_gpus!r} must be an integer from 1 to {MAX_GPUS:,}"))
    if not (isinstance(days, (int, float)) and math.isfinite(days) and 0 < days <= MAX_DAYS):
        errs.append(FieldError("--days", f"{days!r} must be a number above 0 and at most {MAX_DAYS:,}"))
    if not (isinstance(assumed_mfu, (int, float)) and 0 < assumed_mfu <= 1):
        errs.append(FieldError("--assumed-mfu", f"{assumed_mfu!r} must be in (0, 1]"))
    if not (isinstance(num_candidates, int) and 2 <= num_candidates <= MAX_CANDIDATES):
        errs.append(FieldError("--candidates", f"{num_candidates!r} must be an integer from 2 to "
                                               f"{MAX_CANDIDATES}"))
    if not (isinstance(spread, (int, float)) and math.isfinite(spread) and 1 < spread <= MAX_SPREAD):
        errs.append(FieldError("--spread", f"{spread!r} must be above 1 and at most {MAX_SPREAD:g}"))
    if errs:
        raise ConfigError(errs)


def check_flops(num_gpus: int, flops: float, peak: float) -> None:
    """Check a FLOP budget (``vtrain optimal --flops C``) for :func:`compute_optimal`: a
    positive finite number whose days on ``num_gpus`` GPUs of ``peak`` FLOP/s each (the MFU
    peak, :func:`core.sim.costing.mfu_peak_flops`) at full utilization, ``C / (GPUs x peak x
    86,400)``, are at most :data:`MAX_DAYS`: no plan trains it in fewer (its MFU is at most 1,
    and 6 N counts fewer FLOPs than the MFU's).

    Raises
    ------
    ConfigError
        ``flops`` not a positive finite number, or beyond the days (``--flops``), ``num_gpus``
        out of range (``--gpus``)."""
    errs = []
    if not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops > 0):
        errs.append(FieldError("--flops", f"{flops!r} must be a positive, finite number of FLOPs"))
    _check_budget_errors(errs, num_gpus, 0.5)
    if errs:
        raise ConfigError(errs)
    least = flops / (num_gpus * peak * 86400.0)
    if least > MAX_DAYS:
        raise ConfigError([FieldError("--flops", f"{flops:g} FLOPs take at least {least:.3g} "
                                                 f"days on {num_gpus:,} GPUs at their peak "
                                                 f"{peak / 1e12:.1f} TFLOP/s; the study takes "
                                                 f"at most {MAX_DAYS:,} days: give more --gpus")])


def days_for_gpu_hours(num_gpus: int, gpu_hours: float) -> float:
    """The wall-clock days that ``num_gpus`` GPUs take to spend ``gpu_hours`` GPU-hours:
    ``gpu_hours / (num_gpus * 24)`` (``vtrain optimal --gpu-hours H``; 2e6 H100-hours on 2,048
    GPUs are 40.7 days).

    Raises
    ------
    ConfigError
        ``gpu_hours`` not a positive finite number (``--gpu-hours``), ``num_gpus`` out of range
        (``--gpus``), or the days beyond :data:`MAX_DAYS` (``--gpu-hours``)."""
    errs = []
    if not (isinstance(gpu_hours, (int, float)) and math.isfinite(gpu_hours) and gpu_hours > 0):
        errs.append(FieldError("--gpu-hours", f"{gpu_hours!r} must be a positive, finite number of "
                                              "GPU-hours"))
    if not (isinstance(num_gpus, int) and 0 < num_gpus <= MAX_GPUS):
        errs.append(FieldError("--gpus", f"{num_gpus!r} must be an integer from 1 to {MAX_GPUS:,}"))
    if errs:
        raise ConfigError(errs)
    days = gpu_hours / (num_gpus * 24.0)
    if not 0 < days <= MAX_DAYS:
        raise ConfigError([FieldError("--gpu-hours", f"{gpu_hours:g} GPU-hours take {days:.3g} "
                                                     f"days on {num_gpus:,} GPUs; the study "
                                                     f"takes above 0 and at most {MAX_DAYS:,} "
                                                     "days: give more or fewer --gpus")])
    return days


def _check_budget_errors(errs: list, num_gpus: int, assumed_mfu: float) -> None:
    """Append to ``errs`` the FieldErrors of an out-of-range ``num_gpus`` or ``assumed_mfu``."""
    if not (isinstance(num_gpus, int) and 0 < num_gpus <= MAX_GPUS):
        errs.append(FieldError("--gpus", f"{num_gpus!r} must be an integer from 1 to {MAX_GPUS:,}"))
    if not (isinstance(assumed_mfu, (int, float)) and 0 < assumed_mfu <= 1):
        errs.append(FieldError("--assumed-mfu", f"{assumed_mfu!r} must be in (0, 1]"))


def small_batch_note(session: Session, num_gpus: int) -> str:
    """A warning when ``session``'s global batch keeps the data-parallel size below the number
    of nodes of ``num_gpus`` GPUs (``B < N / gpus_per_node``): every plan then needs
    ``t*p*cp >= N / B`` with ``t`` at most a node, so pipelines and context parallelism take
    what data parallelism would (GPT-3's batch was 1,536 sequences, Llama 3's 16 M tokens); ""
    otherwise."""
    B, node = session.plan.global_batch_size, session.cluster.gpus_per_node
    if B * node >= num_gpus:
        return ""
    return (f"the global batch of {B:,} sequences allows data parallelism up to {B:,}: every "
            f"plan of {num_gpus:,} GPUs needs t*p*cp >= {-(-num_gpus // B):,}, so the candidates' "
            "MFU is that of deep pipelines; --set plan.global_batch_size=N for a pretraining "
            "batch (GPT-3: 1,536 sequences; Llama 3: 16 M tokens)")


def _candidate_models(m: ModelConfig, n_rule: float, num_candidates: int, spread: float
                      ) -> list[ModelConfig]:
    """The models of :func:`candidate_shapes` (``m``, ``n_rule``, ``num_candidates``,
    ``spread``). Raises ConfigError as it does."""
    return candidate_shapes(m, n_rule, num_candidates, spread)[1]


def candidate_shapes(m: ModelConfig, n_rule: float, num_candidates: int, spread: float
                     ) -> tuple[list[float], list[ModelConfig], list[int]]:
    """``(sizes, models, which)``: the ``num_candidates`` sizes asked for, in parameters, the
    distinct models they are shaped as, and for each size the index of its model in
    ``models``. Models shaped like ``m`` (:func:`shape_like`: its family, head size, query groups and
    MLP ratio, at its sequence length, vocabulary and its padding, run with its attention
    kernel) of ``num_candidates`` sizes geometric from ``n_rule / sqrt(spread)`` to
    ``n_rule * sqrt(spread)`` parameters; neighbouring sizes that round to one shape are kept
    once (``which`` says which sizes they are: :func:`left_out_sizes`).

    Raises
    ------
    ConfigError
        ``m`` is a mixture-of-experts or latent-attention model (:func:`check_template`)."""
    sizes = n_rule * spread ** np.linspace(-0.5, 0.5, num_candidates)
    models: list[ModelConfig] = []
    which: list[int] = []
    for n in sizes:  # neighbouring sizes can round to one shape: keep it once
        shape = shape_like(m, n)
        if not models or (shape.num_layers, shape.hidden_size) != (models[-1].num_layers,
                                                                   models[-1].hidden_size):
            models.append(shape)
        which.append(len(models) - 1)
    return [float(x) for x in sizes], models, which


def _candidate(session: Session, model: ModelConfig, space: Any, store: Any, cancel: Any,
               seconds: float, out: OptimalResult,
               dimensions: list[list[dict[str, Any]]] | None = None,
               notice: Callable[[str], None] | None = None, no_tight: bool = False,
               flops: float | None = None) -> Candidate:
    """``model``'s :class:`Candidate`: its fastest plan of the sweep ``space`` on ``session``
    with ``model`` (:func:`core.studies.sweep.run_sweep`; its pruning keeps the fastest plan
    exact, not the best plan of each value, ``best_by=False``), the tokens it trains in
    ``seconds`` (with a FLOP budget ``flops``: the whole iterations of ``B x s`` tokens whose
    ``6 N`` FLOPs per token stay within ``flops``, in the days its plan takes for them) and
    their Chinchilla loss; without a plan (a refused model, none on exactly
    these GPUs or none that fits) the reason and NaNs. The sweep's new warnings are added to
    ``out``, its dimensions appended to ``dimensions`` (when given); a large sweep's note
    (its time estimate) goes to ``notice`` as it starts, labelled with the model's name;
    ``no_tight``: the sweep leaves its tight plans out (``run_sweep``'s).

    Raises
    ------
    core.studies.sweep.SweepCancelled
        ``cancel`` was set."""
    from core.studies.sweep import run_sweep

    s = session.copy()
    s.model = model
    n = num_parameters(model)
    try:
        res = run_sweep(s, space, store=store, cancel=cancel, best_by=False, no_tight=no_tight,
                        notice=None if notice is None else
                        (lambda text: notice(f"{model.name}: {text}")))
    except ConfigError as exc:
        return Candidate(model, n, None, math.nan, math.nan, math.nan, math.nan, str(exc))
    out.warnings += [w for w in res.warnings if w not in out.warnings]
    if dimensions is not None and res.dimensions:
        dimensions.append(res.dimensions)
    i = res.fastest
    if i is None:
        reason = ("no plan on exactly this many GPUs" if res.num_plans == 0
                  else res.why_none(np.ones(res.num_plans, bool)))
        return Candidate(model, n, None, math.nan, math.nan, math.nan, math.nan, reason)
    tps = float(res.tokens_per_s[i])
    iteration = s.plan.global_batch_size * model.seq_length  # tokens of one iteration, B x s
    if flops is not None:  # C / 6N tokens, whole iterations, not above C; days from the plan
        tokens = float(math.floor(flops / (6.0 * n) / iteration) * iteration)
        if tokens < iteration:
            return Candidate(model, n, res.plan_row(i), tps, float(res.mfu[i]), 0.0, math.nan,
                             f"less than one iteration in the budget (6 N B s = "
                             f"{6.0 * n * iteration:.3g} FLOPs for {iteration:,} tokens)")
        return Candidate(model, n, res.plan_row(i), tps, float(res.mfu[i]), tokens,
                         chinchilla_loss(n, tokens), days=tokens / tps / 86400.0)
    tokens = tps * seconds
    if tokens < iteration:  # no step of training: the loss fit says nothing (1e108 at 1e-300 days)
        return Candidate(model, n, res.plan_row(i), tps, float(res.mfu[i]), tokens, math.nan,
                         f"less than one iteration in the budget ({iteration / tps:.3g} s for "
                         f"{iteration:,} tokens)", days=seconds / 86400.0)
    return Candidate(model, n, res.plan_row(i), tps, float(res.mfu[i]), tokens,
                     chinchilla_loss(n, tokens), days=seconds / 86400.0)


def study_inputs(session: Session) -> dict[str, Any]:
    """What :func:`compute_optimal` reads of ``session``, as plain JSON
    ``{section: {field: value}}``: the model's fields but its name and depth (the
    candidates keep its family, head size, query groups, MLP ratio, sequence length,
    vocabulary and attention kernel: :func:`shape_like`), the whole cluster, the price per
    GPU-hour (the budget's cost) and every plan field the candidates' sweeps do not choose
    (the global batch, precision ...). Two sessions with equal inputs give one study; compare
    them with :func:`core.studies.sweep.saved.changed_inputs`."""
    from core.studies.sweep import SweepSpace
    from core.studies.sweep.saved import saved_inputs

    doc = saved_inputs(session, SweepSpace.default_for(session))
    doc["model"] = {k: v for k, v in doc["model"].items() if k not in ("name", "num_layers")}
    doc["cost"] = {"price_per_gpu_hour_usd": doc["cost"]["price_per_gpu_hour_usd"]}
    return doc


def compute_optimal(session: Session, num_gpus: int, days: float | None, *,
                    assumed_mfu: float = 0.4,
                    num_candidates: int = 9, spread: float = 8.0, store=None,
                    progress: Callable[[int, int, str], None] | None = None,
                    cancel: Any = None, hold_session_values: bool = False,
                    notice: Callable[[str], None] | None = None,
                    no_tight: bool = False,
                    budget_given: tuple[str, str] | None = None,
                    flops: float | None = None) -> OptimalResult:
    """The model that trains to the lowest Chinchilla loss on ``num_gpus`` GPUs in ``days`` days,
    or on ``flops`` FLOPs.

    A budget of days (GPU time: the vTrain study's, Bang et al. 2024) gives every candidate
    the same days; each trains on the tokens its fastest plan processes in them, and the
    rule's ``C`` is the FLOPs of the days at ``assumed_mfu``. A FLOP budget (``flops``, days
    None) is Chinchilla's own: ``C = flops``, and each candidate trains on ``flops / (6 N)``
    tokens (Kaplan et al. 2020's ``6 N D``, the count the rule and its loss fit use; N its
    parameters), rounded down to whole iterations of ``B x s`` tokens so that ``6 N D`` never
    exceeds ``flops`` (it falls short by less than one iteration's ``6 N B s``), in the days
    its fastest plan takes for them (:attr:`Candidate.days`); no MFU is assumed.

    Parameters
    ----------
    session : Session
        Cluster, global batch size, precision and profile, and every plan field the sweep does
        not choose; its model is the candidates' template (:func:`shape_like`: they keep its
        family, head size, query groups, MLP ratio, sequence length, vocabulary and attention
        kernel; only L and h change). The plan fields the sweep chooses are not used.
    num_gpus : int
        GPUs of the budget (at most :data:`MAX_GPUS`); every plan uses exactly this many.
    days : float or None
        Wall-clock budget (at most :data:`MAX_DAYS`); None with ``flops``.
    assumed_mfu : float
        Utilization the rule's FLOP budget assumes, in (0, 1] (not used with ``flops``).
    num_candidates : int
        Candidate sizes, geometric from ``N_opt / sqrt(spread)`` to ``N_opt * sqrt(spread)``
        (2 to :data:`MAX_CANDIDATES`; sizes that round to the same shape are tried once).
    spread : float
        Ratio of the largest to the smallest candidate size (above 1, at most :data:`MAX_SPREAD`).
    store : ProfileStore, optional
        Default: the session's profile.
    progress : callable ``(done, total, model_name)``, optional
    cancel : threading.Event or callable returning bool, optional
        Passed to each plan sweep (:func:`core.studies.sweep.run_sweep`).
    hold_session_values : bool
        Sweep only the session's own sequence parallelism, ZeRO stage, cp, overlaps and
        fusions (``SweepSpace.hold_session_values``: the study before it searched the default
        space). Default False: each candidate's sweep is ``vtrain sweep``'s default space on
        exactly ``num_gpus`` GPUs (:meth:`~core.studies.sweep.SweepSpace.default_for`).
    notice : callable ``(str) -> None``, optional
        Told, as each candidate's sweep starts, its large-sweep note (``run_sweep``'s
        ``notice``: more than ``LARGE_SWEEP_WORK`` pipeline steps, with the time estimate),
        prefixed with the candidate's name; the note stays in the result's warnings too.
    no_tight : bool
        Leave each candidate's tight plans out (:func:`core.studies.sweep.run_sweep`'s
        ``no_tight``, ``vtrain optimal --no-tight``): each trains with its fastest plan that
        fits outside ``cluster.memory_reserve_fraction``. Default False: a tight plan may be
        the fastest (marked ~).
    budget_given : (option, text), optional
        How the budget was given when not as ``days`` (``("--gpu-hours", "1e-06 GPU-hours")``,
        ``days`` being :func:`days_for_gpu_hours` of it): the error of a budget shorter than
        one iteration names that option and value, not ``--days``, which was not given.
    flops : float, optional
        A FLOP budget instead of ``days`` (``vtrain optimal --flops``): see above; checked by
        :func:`check_flops`.

    Raises
    ------
    ConfigError
        The session's model is a mixture-of-experts or latent-attention model
        (:func:`check_template`, named ``model.num_experts`` / ``model.multi_latent_attention``);
        a budget argument out of range (named as the CLI option: :func:`check_budget`), or
        ``days`` shorter than one iteration (B x s tokens) of every candidate's fastest plan
        (``--days``, or ``budget_given``'s option), or ``flops`` below one iteration of every
        candidate or out of :func:`check_flops`' range (``--flops``), or both or neither of
        ``days`` and ``flops`` (``--days``); a candidate that trains less than one
        iteration has no loss and says so in its reason.
    core.studies.sweep.SweepCancelled
        ``cancel`` was set.
    """
    from core.sim.simulate import session_profile
    from core.studies.sweep import SweepSpace, merge_dimensions

    check_template(session.model)
    if (days is None) == (flops is None):
        raise ConfigError([FieldError("--days", "give a budget of days or of FLOPs (--flops), "
                                                "one of them")])
    check_budget(num_gpus, 1.0 if days is None else days, assumed_mfu, num_candidates, spread)
    store = store or session_profile(session)
    from core.sim.costing import mfu_peak_flops  # MFU's peak (BF16 for FP8, TF32 with tf32)
    peak = mfu_peak_flops(store, session.plan)
    if flops is not None:
        check_flops(num_gpus, flops, peak)
        seconds = math.nan
        budget = float(flops)
    else:
        seconds = days * 86400.0
        budget = num_gpus * peak * seconds * assumed_mfu
    n_rule, d_rule = chinchilla_optimal(budget)
    sizes, models, which = candidate_shapes(session.model, n_rule, num_candidates, spread)
    params = np.array([num_parameters(x) for x in models], float)
    closest = int(np.argmin(np.abs(np.log(params / n_rule))))
    rule_index = closest if abs(math.log(params[closest] / n_rule)) <= math.log(2.0) else None
    out = OptimalResult(num_gpus, None if days is None else float(days),
                        None if flops is not None else float(assumed_mfu), peak, budget, n_rule,
                        d_rule, rule_index, hold_session_values=bool(hold_session_values),
                        no_tight=bool(no_tight), template=template_summary(session.model),
                        requested_sizes=sizes, size_candidates=which,
                        flops=None if flops is None else float(flops))
    note = small_batch_note(session, num_gpus)
    if note:
        out.warnings.append(note)
    # vtrain sweep's default space, on exactly the budget's GPUs
    space = SweepSpace.default_on(session, num_gpus, hold_session_values)
    dimensions: list[list[dict[str, Any]]] = []
    for k, model in enumerate(models):
        if progress:
            progress(k, len(models), model.name)
        out.candidates.append(_candidate(session, model, space, store, cancel, seconds, out,
                                         dimensions, notice, no_tight, out.flops))
    out.dimensions = merge_dimensions(dimensions)
    if progress:
        progress(len(models), len(models), "")
    losses = np.array([c.loss for c in out.candidates])
    if np.isfinite(losses).any():
        out.best = int(np.nanargmin(losses))
    planned = [c for c in out.candidates if c.plan is not None]
    if out.best is None and planned and flops is not None:  # C below one iteration of each
        least = min(6.0 * c.n_params * session.plan.global_batch_size * c.model.seq_length
                    for c in planned)
        raise ConfigError([FieldError("--flops", f"{flops:g} FLOPs is less than one iteration "
                                      f"of every candidate (the smallest takes 6 N B s = "
                                      f"{least:.3g} FLOPs)")])
    if out.best is None and planned:  # every plan that runs trains less than one iteration
        shortest = min((session.plan.global_batch_size * c.model.seq_length) / c.tokens_per_s
                       for c in planned)
        option, budget = budget_given or ("--days", f"{days:g} days")
        if budget_given:
            budget += f" ({days:.3g} days on {num_gpus:,} GPUs)"
        raise ConfigError([FieldError(option, f"{budget} is shorter than one iteration "
                                      f"of every candidate's fastest plan (the shortest takes "
                                      f"{shortest:.3g} s, {shortest / 86400:.3g} days)")])
    return out
