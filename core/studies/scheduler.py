"""A multi-tenant GPU cluster running a queue of training jobs: the vTrain paper's second study.

A cluster scheduler decides how many GPUs each training job gets. Users
usually ask for a round number and the scheduler grants it; but a job's
throughput does not grow in proportion to its GPUs (pipeline bubbles,
communication, memory limits on small counts), so the same cluster finishes
the same jobs sooner when each job gets a count where its GPUs are used well.
The simulator predicts each job's best throughput at every GPU count (one plan
sweep per job: :func:`throughput_table`), which is what a scheduler needs to
make that choice (Bang et al., MICRO 2024, the multi-tenant cluster study).

:func:`run_schedule` replays a job trace on a cluster of ``G`` GPUs with one
of these policies (first come, first served, no preemption; a job runs from
its start to its end on a fixed GPU count):

``requested``
    Every job gets the GPUs it asked for, and waits until that many are free.
``efficient``
    Every job gets the largest count, at most its request, at which its
    predicted tokens/s per GPU is at least ``min_efficiency`` (default 80 %)
    of its best over all counts (usually at the smallest count that fits); it
    waits until that many are free. Requests beyond the point where adding
    GPUs stops paying are cut.
``adaptive``
    As ``efficient``, but when that count is not free it starts at once on
    the largest free count of at least half of it.

A job with no plan that fits on its request runs on the nearest count below
it that has one (above it when none below has), and is listed in
:attr:`ScheduleResult.adjusted`.

With ``backfill`` a later job may start ahead of a waiting head job when it
fits in the free GPUs (simple backfilling, which can delay the head job).

Metrics: job completion time (finish minus arrival), queueing delay, makespan
and GPU utilization (allocated GPU-hours over ``G`` times the makespan).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from core.plan.fields import BOUNDS, MAX_STRING_LENGTH, ConfigError, FieldError
from core.plan.model_config import ModelConfig, model_from_fields
from core.plan.presets import GPT_FAMILY, MODEL_PRESETS, unknown_preset
from core.plan.session import Session

__all__ = ["POLICIES", "Job", "read_jobs", "jobs_from_list", "gpu_counts", "throughput_table",
           "target_index", "JobRun", "ScheduleResult", "run_schedule", "schedule_study",
           "study_inputs", "JobRow", "job_rows", "schedule_notes"]

POLICIES = ("requested", "efficient", "adaptive")
#: Latest arrival a trace may have, hours (about 114 years: later ones lose hour precision).
MAX_ARRIVAL_H = 1e6
#: Most jobs a trace may hold (each costs one plan sweep per distinct model and batch).
MAX_JOBS = 10_000
#: Bounds of a job's numbers: the session fields' (:data:`core.plan.fields.BOUNDS`).
_JOB_BOUNDS = {"global_batch_size": BOUNDS["global_batch"], "tokens": BOUNDS["tokens"],
               "requested_gpus": BOUNDS["parallel"]}


@dataclass
class Job:
    """One training job of a trace.

    ``arrival_h`` hours after the trace starts; ``tokens`` to train;
    ``requested_gpus`` the count its owner asked for; ``model`` and
    ``global_batch_size`` fix its plans.
    """

    name: str
    arrival_h: float
    model: ModelConfig
    global_batch_size: int
    tokens: float
    requested_gpus: int


_JOB_KEYS = {"name", "arrival_h", "model", "num_layers", "hidden_size", "num_attention_heads",
             "seq_length", "vocab_size", "global_batch_size", "tokens", "requested_gpus"}


def jobs_from_list(items: Any, source: str = "trace") -> list[Job]:
    """Jobs from a parsed JSON list of objects with the keys ``name`` (optional),
    ``arrival_h``, ``model`` (a preset name, e.g. ``"GPT-3 13B"``) or the shape of a GPT model
    (``num_layers``, ``hidden_size``, ``num_attention_heads``, ``seq_length`` and
    ``vocab_size``, all required; the family fields are GPT's, :data:`core.plan.presets.GPT_FAMILY`),
    ``global_batch_size``, ``tokens`` and ``requested_gpus``.

    Raises
    ------
    ConfigError
        Naming ``source[i].key`` and the rule it breaks.
    """
    if not isinstance(items, list) or not items:
        raise ConfigError([FieldError(source, "must be a non-empty JSON list of jobs")])
    errs: list[FieldError] = []
    jobs = []
    names: dict[str, int] = {}
    for i, it in enumerate(items):
        where = f"{source}[{i}]"
        if not isinstance(it, dict):
            errs.append(FieldError(where, "must be a JSON object"))
            continue
        errs += [FieldError(f"{where}.{k}", "unknown key") for k in sorted(set(it) - _JOB_KEYS)]
        n_err = len(errs)
        arrival = _job_number(it, where, "arrival_h", errs, allow_zero=True)
        if isinstance(arrival, (int, float)) and arrival > MAX_ARRIVAL_H:
            errs.append(FieldError(f"{where}.arrival_h", f"{arrival!r} is more than "
                                   f"{MAX_ARRIVAL_H:,.0f} hours after the trace starts"))
        batch = _job_number(it, where, "global_batch_size", errs, integer=True)
        tokens = _job_number(it, where, "tokens", errs)
        gpus = _job_number(it, where, "requested_gpus", errs, integer=True)
        name = _job_name(it, i, where, source, names, errs)
        model = _job_model(it, where, errs)
        if model is None:
            continue
        if len(errs) == n_err:  # the model's own rules, and the batch (any plan splits it by d*b)
            errs += _job_rule_errors(model, batch, where)
        jobs.append(Job(name if isinstance(name, str) else str(name), arrival, model, batch,
                        tokens, gpus))
    if errs:
        raise ConfigError(errs)
    return jobs


def _job_number(it: dict[str, Any], where: str, key: str, errs: list[FieldError],
                integer: bool = False, allow_zero: bool = False) -> Any:
    """The job's ``key`` as given; an error for it appended to ``errs`` when it is missing, not
    a positive (``allow_zero``: non-negative) number (``integer``: integer) or outside its
    :data:`_JOB_BOUNDS` bounds."""
    v = it.get(key)
    ok = (isinstance(v, int) and not isinstance(v, bool)) if integer else (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    if v is None:
        errs.append(FieldError(f"{where}.{key}", "missing"))
    elif not ok or v < 0 or (v == 0 and not allow_zero):
        kind = "integer" if integer else "number"
        errs.append(FieldError(f"{where}.{key}", f"{v!r} must be a "
                               f"{'non-negative' if allow_zero else 'positive'} {kind}"))
    elif key in _JOB_BOUNDS and not _JOB_BOUNDS[key].lo <= v <= _JOB_BOUNDS[key].hi:
        b = _JOB_BOUNDS[key]  # below: 1e-300 tokens was a job that takes no time
        rule = f"at most {b.hi:,.0f}" if v > b.hi else f"at least {b.lo:,g}"
        errs.append(FieldError(f"{where}.{key}", f"{v!r} must be {rule} ({b.why})"))
    return v


def _job_name(it: dict[str, Any], i: int, where: str, source: str, names: dict[str, int],
              errs: list[FieldError]) -> Any:
    """The job's ``name`` (default ``job<i>``), recorded in ``names`` (name -> index); an error
    appended to ``errs`` when it is not a non-empty string of at most
    :data:`MAX_STRING_LENGTH` characters or repeats an earlier job's."""
    name = it.get("name", f"job{i}")
    if not isinstance(name, str) or not name or len(name) > MAX_STRING_LENGTH:
        errs.append(FieldError(f"{where}.name", f"{str(name)[:40]!r} must be a non-empty string "
                               f"of at most {MAX_STRING_LENGTH:,} characters"))
    elif name in names:
        errs.append(FieldError(f"{where}.name", f"{name!r} is also the name of "
                               f"{source}[{names[name]}]; names must be unique"))
    else:
        names[name] = i
    return name


def _job_model(it: dict[str, Any], where: str, errs: list[FieldError]) -> ModelConfig | None:
    """The job's model: a copy of the preset ``model`` or a GPT model of the shape keys (the
    family fields GPT's); None, with the errors appended to ``errs``, for an unknown preset or a
    missing or bad shape key (a preset and shape keys together are an error too)."""
    shape_keys = sorted(set(it) & {"num_layers", "hidden_size", "num_attention_heads",
                                   "seq_length", "vocab_size"})
    if "model" in it:
        if shape_keys:
            errs.append(FieldError(f"{where}.model", f"give a preset or {', '.join(shape_keys)}, "
                                   "not both"))
        preset = it["model"]
        model = MODEL_PRESETS.get(preset) if isinstance(preset, str) else None
        if model is None:
            errs.append(FieldError(f"{where}.model", unknown_preset(preset)))
            return None
        return ModelConfig(**{**model.__dict__})
    # a GPT shape (the trace's keys cannot name another family): every shape key the
    # model requires must be there, the family fields take GPT's values
    shape = [_job_number(it, where, k, errs, integer=True)
             for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length",
                       "vocab_size")]
    if any(not isinstance(v, int) for v in shape):
        return None
    return model_from_fields({
        **GPT_FAMILY, "name": f"L={shape[0]} h={shape[1]}", "ffn_hidden_size": None,
        **dict(zip(("num_layers", "hidden_size", "num_attention_heads", "seq_length",
                    "vocab_size"), shape))})


def _job_rule_errors(model: ModelConfig, batch: Any, where: str) -> list[FieldError]:
    """The session rules (:func:`core.plan.rules.validate`) ``model`` breaks with global batch
    ``batch`` on one GPU (any plan splits the batch by ``d*b``), named ``<where>.<field>``;
    the cluster's and the cost's rules are not the trace's."""
    from core.plan.parallel import ParallelPlan
    from core.plan.rules import validate

    probe = Session(model=model, plan=ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
        global_batch_size=batch, schedule="1f1b", recompute="full"))
    return [FieldError(f"{where}.{e.field.split('.')[-1]}", e.message, rule=e.rule)
            for e in validate(probe) if not e.field.startswith(("cluster", "cost"))]


def read_jobs(path: str) -> list[Job]:
    """Jobs of a JSON trace file (see :func:`jobs_from_list`).

    Raises
    ------
    ConfigError
        The file is unreadable, not JSON, holds more than :data:`MAX_JOBS` jobs, is a vtrain
        session (said so, with ``--cluster``, where a session goes) or breaks a rule of
        :func:`jobs_from_list`.
    """
    from pathlib import Path

    from core.util.inputs import read_json_file

    class _Unreadable(Exception):
        pass

    try:
        items = read_json_file(path, _Unreadable)
    except _Unreadable as exc:
        raise ConfigError([FieldError(str(path), f"not a readable JSON job trace: "
                                      f"{str(exc)[len(str(path)) + 2:]}")]) from None
    from core.io.session import SESSION_FORMAT
    if isinstance(items, dict) and items.get("format") == SESSION_FORMAT:
        # a session given where the trace goes: say what each is, and where a session goes
        raise ConfigError([FieldError(Path(path).name, (
            f"is a vtrain session (\"format\": \"{SESSION_FORMAT}\"), not a job trace: a job "
            "trace is a JSON list of jobs, each with arrival_h, model (a preset name) or the "
            "model's shape, global_batch_size, tokens and requested_gpus "
            "(docs/study_scheduler.md; resources/traces/jobs_trace.json is one); a session gives "
            "the jobs' cluster, profile and precision: vtrain schedule TRACE.json --gpus N "
            f"--cluster {path}"))])
    if isinstance(items, list) and len(items) > MAX_JOBS:
        raise ConfigError([FieldError(Path(path).name, f"{len(items):,} jobs are more than "
                                      f"{MAX_JOBS:,}")])
    return jobs_from_list(items, source=Path(path).name)


def gpu_counts(total_gpus: int, gpus_per_node: int, extra: Sequence[int] = ()) -> list[int]:
    """Candidate allocations: one node times powers of two up to ``total_gpus``, the powers of
    two below one node, and ``extra`` counts (requests) up to ``total_gpus``; sorted.

    Raises ValueError unless ``total_gpus`` and ``gpus_per_node`` are positive."""
    if total_gpus < 1 or gpus_per_node < 1:
        raise ValueError(f"need positive GPU counts, got total_gpus={total_gpus}, "
                         f"gpus_per_node={gpus_per_node}")
    counts = {c for c in (2 ** k for k in range(0, 31)) if c <= min(gpus_per_node, total_gpus)}
    c = gpus_per_node
    while c <= total_gpus:
        counts.add(c)
        c *= 2
    counts.update(x for x in extra if 0 < x <= total_gpus)
    return sorted(counts)


def throughput_table(jobs: Sequence[Job], session: Session, counts: Sequence[int], *,
                     store=None, progress: Callable[[int, int, str], None] | None = None,
                     cancel: Any = None, warnings: list[str] | None = None,
                     hold_session_values: bool = False
                     ) -> tuple[np.ndarray, list[list[dict | None]]]:
    """Best predicted tokens/s of every job at every GPU count.

    One plan sweep per distinct (model, global batch) over exactly ``counts``
    GPUs; per count, the fastest plan that fits in memory. Each sweep is ``vtrain sweep``'s
    default space (:meth:`core.studies.sweep.SweepSpace.default_for`: every schedule,
    recomputation, sequence parallelism, ZeRO stage, cp, overlap and fusion a Megatron-Core
    user has), or with ``hold_session_values`` only the session's own switches
    (:data:`core.studies.sweep.dimensions.KEPT_SWITCHES`; t, p, d, b, schedule and
    recomputation swept: about 18 times faster, and up to a fifth slower plans on the shipped
    trace).

    Returns
    -------
    tokens_per_s : float array, shape (len(jobs), len(counts))
        0 where no plan fits.
    plans : list (per job) of lists (per count) of plan dicts or None

    ``progress(done, total, name)`` is called before each job's sweep; ``cancel`` is passed
    to the sweeps (:class:`core.studies.sweep.SweepCancelled` when it is set); the sweeps'
    distinct warnings are appended to ``warnings`` when it is given.
    """
    from core.sim.simulate import session_profile
    from core.studies.sweep import SweepSpace, run_sweep

    store = store or session_profile(session)  # opened once for every job
    cache: dict[tuple, tuple[np.ndarray, list]] = {}
    out = np.zeros((len(jobs), len(counts)))
    plans: list[list[dict | None]] = []
    for j, job in enumerate(jobs):
        # every model field but the name (the family fields change the times too)
        key = (dataclasses.astuple(dataclasses.replace(job.model, name="")), job.global_batch_size)
        if key not in cache:
            if progress:
                progress(j, len(jobs), job.name)
            s = session.copy()
            s.model = job.model
            s.plan.global_batch_size = job.global_batch_size
            if hold_session_values:
                space = SweepSpace(num_gpus=list(counts), hold_session_values=True)
            else:
                space = SweepSpace.default_on(s, list(counts))
            # only each count's fastest plan is read: the branch and bound keeps those exact
            # (and the front) and prunes the rest (about 2x faster than every value's best)
            res = run_sweep(s, space, store=store, cancel=cancel, best_by="num_gpus")
            if warnings is not None:
                warnings += [w for w in res.warnings if w not in warnings]
            tps = np.zeros(len(counts))
            best: list[dict | None] = [None] * len(counts)
            for k, n in enumerate(counts):
                idx = np.flatnonzero((res.num_gpus == n) & res.feasible)
                if idx.size:
                    i = int(idx[np.argmax(res.tokens_per_s[idx])])
                    tps[k], best[k] = float(res.tokens_per_s[i]), res.plan_row(i)
            cache[key] = (tps, best)
        out[j], row = cache[key][0], cache[key][1]
        plans.append(list(row))
    return out, plans


@dataclass
class JobRun:
    """What happened to one job: start and end (hours), GPUs and the plan it ran with."""

    job: Job
    start_h: float
    end_h: float
    gpus: int
    tokens_per_s: float
    plan: dict | None

    @property
    def within_calibration(self) -> bool | None:
        """Whether the plan it ran with is inside what the profile was calibrated on (GPU
        count, model size and every feature:
        :attr:`core.studies.sweep.SweepResult.within_calibration`); None without a plan."""
        return None if self.plan is None else self.plan["within_calibration"]

    @property
    def calibration_departures(self) -> str:
        """What of the plan it ran with none of the profile's calibration runs had (features,
        the throughput ceiling: :attr:`core.studies.sweep.SweepResult.calibration_departures`);
        "" when none or without a plan."""
        return "" if self.plan is None else self.plan["calibration_departures"]

    @property
    def jct_h(self) -> float:
        """Job completion time: end minus arrival, hours."""
        return self.end_h - self.job.arrival_h

    @property
    def wait_h(self) -> float:
        """Queueing delay: start minus arrival, hours."""
        return self.start_h - self.job.arrival_h


@dataclass
class ScheduleResult:
    """One policy's replay of a trace. ``runs`` follow the trace order; ``unrunnable`` names
    jobs with no plan that fits on any allowed count (they are left out of the metrics);
    ``adjusted`` lists ``(job, requested, granted)`` for jobs that ran on another count than
    they asked for because no plan fits there (``requested``), or on more than they asked
    for because no plan fits at or below it (``efficient``, ``adaptive``)."""

    policy: str
    total_gpus: int
    runs: list[JobRun] = field(default_factory=list)
    unrunnable: list[str] = field(default_factory=list)
    adjusted: list[tuple[str, int, int]] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """``mean_jct_h``, ``median_jct_h``, ``mean_wait_h``, ``makespan_h`` (first arrival to last
        end), ``utilization`` (allocated GPU-hours / (GPUs * makespan)), ``gpu_hours``; None
        where undefined (no job ran; a zero makespan has no utilization)."""
        if not self.runs:
            return {k: None for k in ("mean_jct_h", "median_jct_h", "mean_wait_h",
                                      "makespan_h", "utilization", "gpu_hours")}
        jct = np.array([r.jct_h for r in self.runs])
        wait = np.array([r.wait_h for r in self.runs])
        first = min(r.job.arrival_h for r in self.runs)
        span = max(r.end_h for r in self.runs) - first
        gpu_h = float(sum(r.gpus * (r.end_h - r.start_h) for r in self.runs))
        return {"mean_jct_h": float(jct.mean()), "median_jct_h": float(np.median(jct)),
                "mean_wait_h": float(wait.mean()), "makespan_h": float(span),
                "utilization": gpu_h / (self.total_gpus * span) if span > 0 else None,
                "gpu_hours": gpu_h}


def target_index(job: Job, counts: np.ndarray, tps: np.ndarray, min_efficiency: float) -> int:
    """The ``efficient`` policy's count for ``job``: index into ``counts`` (shape (k,), with
    ``tps`` the job's tokens/s there, 0 where no plan fits) of the largest count at most the
    request whose tokens/s per GPU is at least ``min_efficiency`` of the job's best tokens/s
    per GPU over all counts; the count with a plan nearest below the request when none
    qualifies, and the smallest count with a plan when none is at most the request (the
    job is then raised above its request: :attr:`ScheduleResult.adjusted`)."""
    ok = tps > 0
    per_gpu = np.where(ok, tps / counts, 0.0)
    cap = ok & (counts <= job.requested_gpus)
    if not cap.any():
        return int(np.flatnonzero(ok)[0])
    good = np.flatnonzero(cap & (per_gpu >= min_efficiency * per_gpu[ok].max()))
    return int(good[-1]) if good.size else int(np.flatnonzero(cap)[-1])


@dataclass
class JobRow:
    """One job of the jobs table (what ``vtrain schedule`` and the window's study show): at the
    job's request, its predicted tokens/s per GPU as a share of its best over all counts
    (``share_at_request``, None where no plan fits there); at the ``efficient`` policy's count
    (:func:`target_index`: ``efficient_gpus``, None when no plan fits on any count) that share,
    the tokens/s and the plan (a :meth:`core.studies.sweep.SweepResult.plan_row` dict, which
    carries ``within_calibration``, ``calibration_departures`` and the error band
    ``interval_low_s`` / ``interval_high_s`` of its iteration time, seconds)."""

    job: Job
    share_at_request: float | None
    efficient_gpus: int | None
    efficient_share: float | None
    tokens_per_s: float | None
    plan: dict | None

    @property
    def within_calibration(self) -> bool | None:
        """:attr:`JobRun.within_calibration` of the plan at the efficient count."""
        return None if self.plan is None else self.plan["within_calibration"]

    @property
    def calibration_departures(self) -> str:
        """:attr:`JobRun.calibration_departures` of the plan at the efficient count."""
        return "" if self.plan is None else self.plan["calibration_departures"]


def job_rows(jobs: Sequence[Job], counts: Sequence[int], tokens_per_s: np.ndarray,
             plans: list[list[dict | None]] | None, min_efficiency: float) -> list[JobRow]:
    """The jobs table: one :class:`JobRow` per job, in trace order, from
    :func:`throughput_table`'s ``tokens_per_s`` (shape (len(jobs), len(counts)), 0 where no plan
    fits) and ``plans`` (None: the rows have no plan); ``counts`` must hold every request."""
    counts_a = np.asarray(counts, np.int64)
    out = []
    for j, job in enumerate(jobs):
        ok = tokens_per_s[j] > 0
        if not ok.any():
            out.append(JobRow(job, None, None, None, None, None))
            continue
        per = np.where(ok, tokens_per_s[j] / counts_a, 0.0)
        best = per[ok].max()
        req = int(np.flatnonzero(counts_a == job.requested_gpus)[0])
        k = target_index(job, counts_a, tokens_per_s[j], min_efficiency)
        out.append(JobRow(job, float(per[req] / best) if ok[req] else None, int(counts_a[k]),
                          float(per[k] / best), float(tokens_per_s[j, k]),
                          plans[j][k] if plans else None))
    return out


def schedule_notes(results: Sequence[ScheduleResult]) -> list[str]:
    """What the policies' replays leave to say, one sentence each: the jobs no plan fits on any
    count, and every job that ran on another count than it asked for (per policy)."""
    notes = []
    if results and results[0].unrunnable:
        notes.append(f"No plan fits on any count for {', '.join(results[0].unrunnable)}; "
                     "left out of every policy.")
    for r in results:
        notes += [f"{r.policy}: {name} asked for {asked} GPUs; no plan fits "
                  f"{'there' if r.policy == 'requested' else 'at or below that'}, so it ran "
                  f"on {got}." for name, asked, got in r.adjusted]
    return notes


def _requested_index(job: Job, counts: np.ndarray, tps: np.ndarray) -> int:
    """The request's index; when no plan fits there, the nearest count below it with a plan,
    else the smallest above."""
    ok = tps > 0
    k = int(np.flatnonzero(counts == job.requested_gpus)[0])
    if ok[k]:
        return k
    below = np.flatnonzero(ok & (counts < job.requested_gpus))
    return int(below[-1]) if below.size else int(np.flatnonzero(ok)[0])


def _choice(policy: str, job: Job, counts: np.ndarray, tps: np.ndarray, free: int,
            min_efficiency: float) -> int | None:
    """Index into ``counts`` to start ``job`` with now, or None to wait."""
    if policy == "requested":
        k = _requested_index(job, counts, tps)
        return k if counts[k] <= free else None
    k = target_index(job, counts, tps, min_efficiency)
    if counts[k] <= free:
        return k
    if policy == "adaptive":  # start now on at least half the target rather than wait
        now = np.flatnonzero((tps > 0) & (counts <= free) & (2 * counts >= counts[k]))
        if now.size:
            return int(now[-1])
    return None


def _policy_errors(policies: Sequence[str], min_efficiency: Any) -> list[FieldError]:
    """The errors of :func:`run_schedule`'s policy arguments: a policy not in
    :data:`POLICIES`, ``min_efficiency`` not a number in (0, 1]."""
    errs = [FieldError("--policy", f"{p!r} is not one of {', '.join(POLICIES)}")
            for p in policies if p not in POLICIES]
    if isinstance(min_efficiency, bool) or not isinstance(min_efficiency, (int, float)) or \
            not 0 < min_efficiency <= 1:
        errs.append(FieldError("--min-efficiency", f"{min_efficiency!r} must be in (0, 1]"))
    return errs


def run_schedule(jobs: Sequence[Job], tokens_per_s: np.ndarray, counts: Sequence[int],
                 total_gpus: int, policy: str, *, plans: list[list[dict | None]] | None = None,
                 backfill: bool = False, min_efficiency: float = 0.8) -> ScheduleResult:
    """Replay ``jobs`` on ``total_gpus`` GPUs under ``policy`` (see the module doc).

    Parameters
    ----------
    jobs : sequence of Job
    tokens_per_s : float array, shape (len(jobs), len(counts))
        From :func:`throughput_table`; 0 where a job has no plan at that count.
    counts : sequence of int
        The allowed allocations; must contain every job's ``requested_gpus`` for the
        ``requested`` policy.
    total_gpus : int
    policy : str
        One of :data:`POLICIES`.
    plans : optional, the plan dicts of :func:`throughput_table` (kept on each run)
    backfill : bool
    min_efficiency : float
        ``adaptive``: the least tokens/s per GPU, relative to the job's best, it accepts.

    Raises
    ------
    ConfigError
        Unknown policy, a request that is not among ``counts`` or above ``total_gpus``,
        or ``min_efficiency`` outside (0, 1].
    """
    counts_a = np.asarray(counts, np.int64)
    errs = _policy_errors([policy], min_efficiency)
    for job in jobs:
        if job.requested_gpus > total_gpus:
            errs.append(FieldError(f"{job.name}.requested_gpus", f"{job.requested_gpus} is more "
                                   f"than the cluster's {total_gpus} GPUs"))
        elif policy == "requested" and job.requested_gpus not in counts_a:
            errs.append(FieldError(f"{job.name}.requested_gpus",
                                   f"{job.requested_gpus} is not among the counts {list(counts_a)}"))
    if errs:
        raise ConfigError(errs)
    result = ScheduleResult(policy, total_gpus)
    order = sorted(range(len(jobs)), key=lambda j: (jobs[j].arrival_h, j))
    runnable = [j for j in order if (tokens_per_s[j] > 0).any()]
    result.unrunnable = [jobs[j].name for j in order if j not in runnable]
    queue: list[int] = []
    running: list[tuple[float, int, int]] = []  # heap of (end_h, job, gpus)
    free = total_gpus
    pending = list(runnable)  # not yet arrived, by arrival
    now = jobs[pending[0]].arrival_h if pending else 0.0
    runs: dict[int, JobRun] = {}
    while pending or queue or running:
        while running and running[0][0] <= now:
            free += heapq.heappop(running)[2]
        while pending and jobs[pending[0]].arrival_h <= now:
            queue.append(pending.pop(0))
        pos = 0
        while pos < len(queue):  # first come, first served; later jobs only with backfill
            j = queue[pos]
            k = _choice(policy, jobs[j], counts_a, tokens_per_s[j], free, min_efficiency)
            if k is None:
                if not backfill:
                    break
                pos += 1
                continue
            g, tps = int(counts_a[k]), float(tokens_per_s[j, k])
            end = now + jobs[j].tokens / tps / 3600.0
            runs[j] = JobRun(jobs[j], now, end, g, tps, plans[j][k] if plans else None)
            if g > jobs[j].requested_gpus or (policy == "requested" and g != jobs[j].requested_gpus):
                result.adjusted.append((jobs[j].name, jobs[j].requested_gpus, g))
            heapq.heappush(running, (end, j, g))
            free -= g
            queue.pop(pos)
        nxt = min(jobs[pending[0]].arrival_h if pending else math.inf,
                  running[0][0] if running else math.inf)
        if nxt == math.inf:
            if queue:  # pragma: no cover - every job fits on an empty cluster
                raise RuntimeError("scheduler stalled with an empty cluster")
            break
        now = nxt
    result.runs = [runs[j] for j in range(len(jobs)) if j in runs]
    return result


def study_inputs(session: Session) -> dict[str, Any]:
    """What :func:`schedule_study` reads of ``session``, as plain JSON ``{section: {field:
    value}}``: the whole cluster and the plan fields every job's sweep holds (precision,
    sequence parallelism, ZeRO stage, the overlaps ...; not the global batch, each job brings
    its own, nor the model). Compare two with :func:`core.studies.sweep.saved.changed_inputs`."""
    from core.studies.sweep import SweepSpace
    from core.studies.sweep.saved import saved_inputs

    doc = saved_inputs(session, SweepSpace(num_gpus=[1], hold_session_values=True))
    del doc["model"], doc["cost"], doc["plan"]["global_batch_size"]
    return doc


def schedule_study(jobs: Sequence[Job], session: Session, total_gpus: int, *,
                   policies: Sequence[str] = POLICIES, backfill: bool = False,
                   min_efficiency: float = 0.8, source: str = "trace", store=None,
                   progress: Callable[[int, int, str], None] | None = None, cancel: Any = None,
                   warnings: list[str] | None = None, hold_session_values: bool = False
                   ) -> tuple[list[int], np.ndarray, list[list[dict | None]], list[ScheduleResult]]:
    """The whole study: candidate counts (:func:`gpu_counts`), the throughput table
    (:func:`throughput_table`, its sweeps holding the session's switches only with
    ``hold_session_values``) and one :func:`run_schedule` per policy, on ``session``'s cluster
    (the sweeps' warnings appended to ``warnings`` when given).

    Returns ``(counts, tokens_per_s, plans, results)`` (``plans``: :func:`throughput_table`'s,
    each carrying its calibration departures; :func:`job_rows` makes the jobs table of them).

    Raises
    ------
    ConfigError
        A request above ``total_gpus`` (named ``source[i].requested_gpus``), an unknown policy
        or ``min_efficiency`` outside (0, 1], all before any sweep, or what
        :func:`run_schedule` raises.
    """
    too_big = [FieldError(f"{source}[{i}].requested_gpus",
                          f"{j.requested_gpus} is more than the cluster's {total_gpus} GPUs")
               for i, j in enumerate(jobs) if j.requested_gpus > total_gpus]
    errs = too_big + _policy_errors(policies, min_efficiency)
    if errs:
        raise ConfigError(errs)
    counts = gpu_counts(total_gpus, session.cluster.gpus_per_node, [j.requested_gpus for j in jobs])
    tps, plans = throughput_table(jobs, session, counts, store=store, progress=progress,
                                  cancel=cancel, warnings=warnings,
                                  hold_session_values=hold_session_values)
    results = [run_schedule(jobs, tps, counts, total_gpus, p, plans=plans, backfill=backfill,
                            min_efficiency=min_efficiency) for p in policies]
    return counts, tps, plans, results
