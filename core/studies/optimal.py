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
So :func:`compute_optimal` sizes candidate GPT models around the rule's
answer, finds each one's fastest plan that fits on exactly ``G`` GPUs with a
plan sweep (:func:`core.studies.sweep.run_sweep`) of the space ``vtrain sweep`` searches
by default (:meth:`core.studies.sweep.SweepSpace.default_for`: the plans a Megatron-Core
user would try, sequence parallelism, ZeRO stages, cp and the overlaps too), trains it for
the tokens that plan processes in ``T`` days, and ranks the candidates by ``L(N, D)``.

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

__all__ = ["CHINCHILLA", "chinchilla_loss", "chinchilla_optimal", "gpt_shape", "format_params",
           "no_plan_explanation", "no_rule_candidate_note", "Candidate",
           "OptimalResult", "compute_optimal", "days_for_flops", "study_inputs",
           "candidate_session"]

#: Parametric loss fit: Besiroglu et al. 2024's refit of Hoffmann et al. 2022's Approach 3.
CHINCHILLA = {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
#: Largest budget :func:`compute_optimal` takes: GPUs, days, candidate size ratio, candidates.
MAX_GPUS, MAX_DAYS, MAX_SPREAD, MAX_CANDIDATES = 1_000_000, 3650, 1000.0, 100
#: Head dimension h / a of the generated shapes (GPT-3 175B, MT-NLG: 128).
HEAD_DIM = 128
#: Width-to-depth ratio h / L of the generated shapes (GPT-3 175B: 12288 / 96 = 128).
ASPECT_RATIO = 128


def chinchilla_loss(n_params: float | np.ndarray, tokens: float | np.ndarray) -> float | np.ndarray:
    """Fitted pre-training loss ``E + A/N^alpha + B/D^beta`` in nats per token (Hoffmann et al.
    2022, Eq. 2, with :data:`CHINCHILLA`'s parameters). Raises ValueError for a non-positive N or D."""
    n, d = np.asarray(n_params, float), np.asarray(tokens, float)
    if np.any(n <= 0) or np.any(d <= 0):
        raise ValueError("parameters and tokens must be positive")
    c = CHINCHILLA
    out = c["E"] + c["A"] / n ** c["alpha"] + c["B"] / d ** c["beta"]
    return float(out) if out.ndim == 0 else out


def chinchilla_optimal(flops: float) -> tuple[float, float]:
    """``(N_opt, D_opt)`` minimizing :func:`chinchilla_loss` under ``6 N D = flops``
    (Hoffmann et al. 2022, Eq. 4). Raises ValueError for ``flops <= 0``."""
    if not flops > 0:
        raise ValueError("the compute budget must be positive")
    c = CHINCHILLA
    a, b = c["alpha"], c["beta"]
    g = (a * c["A"] / (b * c["B"])) ** (1.0 / (a + b))
    n = g * (flops / 6.0) ** (b / (a + b))
    return n, flops / 6.0 / n


def gpt_shape(n_params: float, seq_length: int = 2048, vocab_size: int = 50257,
              name: str | None = None) -> ModelConfig:
    """A GPT model of about ``n_params`` parameters with GPT-3's proportions and sizes that
    split well.

    Width ``h ≈ (ASPECT_RATIO N / 12)^(1/3)`` (so ``h ≈ ASPECT_RATIO * L`` and
    ``12 L h^2 ≈ N``), rounded to a multiple of ``8 * HEAD_DIM`` so that the
    ``a = h / HEAD_DIM`` heads divide by every tensor-parallel size up to 8;
    ``L`` a multiple of 8 (16 from 64 layers up), so that 2 to 8 (16) pipeline stages split
    it, that brings the total,
    embeddings included, closest to ``n_params``. GPT-3 175B comes out as
    L=96, h=12288, a=96. Raises ValueError for ``n_params <= 0``.
    """
    if not n_params > 0:
        raise ValueError("n_params must be positive")
    step = 8 * HEAD_DIM
    h = max(step, step * round((ASPECT_RATIO * n_params / 12.0) ** (1 / 3) / step))

    def model(layers: int) -> ModelConfig:
        return ModelConfig("", layers, h, h // HEAD_DIM, None, seq_length, vocab_size)

    per_layer = num_parameters(model(2)) - num_parameters(model(1))
    rest = num_parameters(model(1)) - per_layer
    target = (n_params - rest) / per_layer
    grain = 16 if target >= 64 else 8
    layers = max(8, grain * round(target / grain))
    out = model(layers)
    out.name = name or f"{format_params(num_parameters(out))} (L={layers}, h={h})"
    return out


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
    def tokens_per_parameter(self) -> float:
        """Training tokens per parameter (Chinchilla's optimum is about 20)."""
        return self.tokens / self.n_params


@dataclass
class OptimalResult:
    """What :func:`compute_optimal` found.

    Attributes
    ----------
    num_gpus, days : the budget
    assumed_mfu : float
        MFU the Chinchilla rule's FLOP budget assumes.
    budget_flops : float
        ``num_gpus * peak * days * 86400 * assumed_mfu``.
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
    dimensions : list of dict
        What the candidates' sweeps swept and held, and why, as one sweep's
        (:func:`core.studies.sweep.merge_dimensions` of their
        :attr:`~core.studies.sweep.SweepResult.dimensions`).
    """

    num_gpus: int
    days: float
    assumed_mfu: float
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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (what ``vtrain optimal --json`` prints)."""
        def cand(c: Candidate) -> dict[str, Any]:
            m = c.model
            return {"name": m.name, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                    "num_attention_heads": m.num_attention_heads, "n_params": c.n_params,
                    "plan": c.plan, "tokens_per_s": _num(c.tokens_per_s), "mfu": _num(c.mfu),
                    "tokens": _num(c.tokens), "tokens_per_parameter": _num(c.tokens_per_parameter),
                    "loss": _num(c.loss), "reason": c.reason,
                    "within_calibration": c.within_calibration,
                    "calibration_departures": c.calibration_departures}
        return {"num_gpus": self.num_gpus, "days": self.days, "assumed_mfu": self.assumed_mfu,
                "peak_flops_per_gpu": self.peak_flops, "budget_flops": self.budget_flops,
                "rule_params": self.rule_params, "rule_tokens": self.rule_tokens,
                "rule_index": self.rule_index, "best": self.best,
                "candidates": [cand(c) for c in self.candidates], "warnings": self.warnings,
                "hold_session_values": self.hold_session_values, "no_tight": self.no_tight,
                "dimensions": self.dimensions}


def candidate_session(session: Session, result: "OptimalResult", k: int | None = None
                      ) -> Session:
    """A new session of candidate ``k`` of ``result`` (default :attr:`OptimalResult.best`, the
    lowest-loss candidate): ``session``'s cluster, price and every field the study held (the
    session the study ran on), the candidate's model and its fastest plan (every field of its
    sweep row, :class:`~core.plan.parallel.ParallelPlan`), and as the token budget
    (``cost.training_tokens``) the tokens that plan trains in the budget's days, so that
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
    (L = 8, h = 1,024: every smaller size rounds to it) or between candidates that
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
    if n_rule < sizes[0] and (smallest.num_layers, smallest.hidden_size) == (8, 8 * HEAD_DIM):
        return text + " (no GPT shape is smaller than L=8, h=1024)."
    return text + "; more --candidates or a smaller --spread puts one nearer."


def _num(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def _check_budget(num_gpus: int, days: float, assumed_mfu: float, num_candidates: int,
                  spread: float) -> None:
    """Check :func:`compute_optimal`'s budget arguments.

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


def days_for_flops(session: Session, num_gpus: int, flops: float, assumed_mfu: float = 0.4,
                   store=None) -> float:
    """The wall-clock days whose budget is ``flops``: the inverse of :func:`compute_optimal`'s
    rule ``C = num_gpus * peak * days * 86,400 * assumed_mfu`` (``peak`` in FLOP/s per GPU,
    :func:`core.sim.costing.mfu_peak_flops` of the session's plan on ``store``, default the
    session's profile), so that ``compute_optimal(session, num_gpus, days_for_flops(...))``
    studies a budget of ``flops`` FLOPs (``vtrain optimal --flops C``).

    Parameters
    ----------
    flops : float
        The FLOP budget ``C`` (Chinchilla's ``6 N D``), positive and finite.

    Raises
    ------
    ConfigError
        ``flops`` not a positive finite number, or ``num_gpus`` / ``assumed_mfu`` out of
        range, or the days it takes beyond :data:`MAX_DAYS` (each named as the CLI option)."""
    errs = []
    if not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops > 0):
        errs.append(FieldError("--flops", f"{flops!r} must be a positive number of FLOPs"))
    _check_budget_errors(errs, num_gpus, assumed_mfu)
    if errs:
        raise ConfigError(errs)
    from core.sim.costing import mfu_peak_flops
    from core.sim.simulate import session_profile
    peak = mfu_peak_flops(store or session_profile(session), session.plan)
    days = flops / (num_gpus * peak * 86400.0 * assumed_mfu)
    if not 0 < days <= MAX_DAYS:
        raise ConfigError([FieldError("--flops", f"{flops:g} FLOPs take {days:.3g} days on "
                                                 f"{num_gpus:,} GPUs at {peak / 1e12:.1f} TFLOP/s "
                                                 f"and MFU {assumed_mfu:g}; the study takes "
                                                 f"above 0 and at most {MAX_DAYS:,} days: give "
                                                 "more or fewer --gpus")])
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
    """GPT shapes (:func:`gpt_shape`, at ``m``'s sequence length, vocabulary and its padding,
    run with ``m``'s attention kernel: the kernel is how the session trains, not the model's
    shape) of ``num_candidates`` sizes geometric from ``n_rule / sqrt(spread)`` to
    ``n_rule * sqrt(spread)`` parameters; neighbouring sizes that round to one shape are kept
    once."""
    sizes = n_rule * spread ** np.linspace(-0.5, 0.5, num_candidates)
    models: list[ModelConfig] = []
    for n in sizes:  # neighbouring sizes can round to one shape: keep it once
        shape = dataclasses.replace(gpt_shape(n, m.seq_length, m.vocab_size),
                                    make_vocab_size_divisible_by=m.make_vocab_size_divisible_by,
                                    attention_kernel=m.attention_kernel)
        if not models or (shape.num_layers, shape.hidden_size) != (models[-1].num_layers,
                                                                   models[-1].hidden_size):
            models.append(shape)
    return models


def _candidate(session: Session, model: ModelConfig, space: Any, store: Any, cancel: Any,
               seconds: float, out: OptimalResult,
               dimensions: list[list[dict[str, Any]]] | None = None,
               notice: Callable[[str], None] | None = None, no_tight: bool = False) -> Candidate:
    """``model``'s :class:`Candidate`: its fastest plan of the sweep ``space`` on ``session``
    with ``model`` (:func:`core.studies.sweep.run_sweep`; its pruning keeps the fastest plan
    exact, not the best plan of each value, ``best_by=False``), the tokens it trains in
    ``seconds`` and their Chinchilla loss; without a plan (a refused model, none on exactly
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
    tokens = tps * seconds
    iteration = s.plan.global_batch_size * model.seq_length  # tokens of one iteration, B x s
    if tokens < iteration:  # no step of training: the loss fit says nothing (1e108 at 1e-300 days)
        return Candidate(model, n, res.plan_row(i), tps, float(res.mfu[i]), tokens, math.nan,
                         f"less than one iteration in the budget ({iteration / tps:.3g} s for "
                         f"{iteration:,} tokens)")
    return Candidate(model, n, res.plan_row(i), tps, float(res.mfu[i]), tokens,
                     chinchilla_loss(n, tokens))


def study_inputs(session: Session) -> dict[str, Any]:
    """What :func:`compute_optimal` reads of ``session``, as plain JSON
    ``{section: {field: value}}``: the model fields the candidates' shapes keep (sequence
    length, vocabulary, its padding, the attention kernel), the whole cluster, the price per
    GPU-hour (the budget's cost) and every plan field the candidates' sweeps do not choose
    (the global batch, precision ...). Two sessions with equal inputs give one study; compare
    them with :func:`core.studies.sweep.saved.changed_inputs`."""
    from core.studies.sweep import SweepSpace
    from core.studies.sweep.saved import saved_inputs

    doc = saved_inputs(session, SweepSpace.default_for(session))
    doc["model"] = {k: doc["model"][k] for k in ("seq_length", "vocab_size",
                                                 "make_vocab_size_divisible_by",
                                                 "attention_kernel")}
    doc["cost"] = {"price_per_gpu_hour_usd": doc["cost"]["price_per_gpu_hour_usd"]}
    return doc


def compute_optimal(session: Session, num_gpus: int, days: float, *, assumed_mfu: float = 0.4,
                    num_candidates: int = 9, spread: float = 8.0, store=None,
                    progress: Callable[[int, int, str], None] | None = None,
                    cancel: Any = None, hold_session_values: bool = False,
                    notice: Callable[[str], None] | None = None,
                    no_tight: bool = False) -> OptimalResult:
    """The model that trains to the lowest Chinchilla loss on ``num_gpus`` GPUs in ``days`` days.

    Parameters
    ----------
    session : Session
        Cluster, global batch size, sequence length, vocabulary, precision and
        profile, and every plan field the sweep does not choose; its model is not used, nor
        the plan fields the sweep chooses.
    num_gpus : int
        GPUs of the budget (at most :data:`MAX_GPUS`); every plan uses exactly this many.
    days : float
        Wall-clock budget (at most :data:`MAX_DAYS`).
    assumed_mfu : float
        Utilization the rule's FLOP budget assumes, in (0, 1].
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

    Raises
    ------
    ConfigError
        A budget argument out of range (named as the CLI option), or ``days`` shorter than
        one iteration (B x s tokens) of every candidate's fastest plan (``--days``); a
        candidate that trains less than one iteration has no loss and says so in its reason.
    core.studies.sweep.SweepCancelled
        ``cancel`` was set.
    """
    from core.sim.simulate import session_profile
    from core.studies.sweep import SweepSpace, merge_dimensions

    _check_budget(num_gpus, days, assumed_mfu, num_candidates, spread)
    store = store or session_profile(session)
    from core.sim.costing import mfu_peak_flops  # MFU's peak (BF16 for FP8, TF32 with tf32)
    peak = mfu_peak_flops(store, session.plan)
    seconds = days * 86400.0
    flops = num_gpus * peak * seconds * assumed_mfu
    n_rule, d_rule = chinchilla_optimal(flops)
    models = _candidate_models(session.model, n_rule, num_candidates, spread)
    params = np.array([num_parameters(x) for x in models], float)
    closest = int(np.argmin(np.abs(np.log(params / n_rule))))
    rule_index = closest if abs(math.log(params[closest] / n_rule)) <= math.log(2.0) else None
    out = OptimalResult(num_gpus, float(days), float(assumed_mfu), peak, flops, n_rule, d_rule,
                        rule_index, hold_session_values=bool(hold_session_values),
                        no_tight=bool(no_tight))
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
                                         dimensions, notice, no_tight))
    out.dimensions = merge_dimensions(dimensions)
    if progress:
        progress(len(models), len(models), "")
    losses = np.array([c.loss for c in out.candidates])
    if np.isfinite(losses).any():
        out.best = int(np.nanargmin(losses))
    planned = [c for c in out.candidates if c.plan is not None]
    if out.best is None and planned:  # every plan that runs trains less than one iteration
        shortest = min((session.plan.global_batch_size * c.model.seq_length) / c.tokens_per_s
                       for c in planned)
        raise ConfigError([FieldError("--days", f"{days:g} days is shorter than one iteration "
                                      f"of every candidate's fastest plan (the shortest takes "
                                      f"{shortest:.3g} s, {shortest / 86400:.3g} days)")])
    return out
