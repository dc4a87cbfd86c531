"""Beyond one iteration: failures, restarts and checkpoints of a whole training run (goodput).

A run of ``W`` seconds of work (iterations times the iteration time) is cut by checkpoints
into segments; failures strike as a Poisson process of rate ``1/M`` (``M`` the mean time
between interruptions: one over the per-GPU rate times the world size); a failure loses the
segment's progress and costs a restart of ``R`` seconds, during which failures may strike too;
training resumes from the last checkpoint. The model is Daly's (2006, "A higher order estimate
of the optimum checkpoint interval for restart dumps", Future Generation Computer Systems 22,
Eq. 13 and Sec. 3): a segment of ``x`` seconds (work ``tau`` and the save ``C``) takes in
expectation

    E[x] = M e^{R/M} (e^{x/M} - 1),

exactly (a first attempt, then attempts of ``R + x`` that must each run without a failure).
The run's expected time is the sum over its segments: ``floor(n/k)`` segments of ``k``
iterations and one of the remaining ones (the last save, at the end, included), with ``k`` the
checkpoint interval in iterations. Daly's ``T = M e^{R/M}(e^{(tau+C)/M} - 1) W / tau`` is this
sum when ``tau`` divides ``W``.

The interval, when not given, is Daly's higher-order optimum (2006, Eq. 37)

    tau = sqrt(2 C M) [1 + (C / 2M)^(1/2) / 3 + (C / 2M) / 9] - C   for C < 2M,  else M,

whose first term is Young's (1974, "A first order approximation to the optimum checkpoint
interval", CACM 17(9)) ``sqrt(2 C M)``; it is rounded to whole iterations (Megatron-LM's
``--save-interval``).

The spread (10th and 90th percentiles) comes from a vectorized Monte Carlo of this very model
with a fixed seed (:func:`sample_run_times`): per group of equal segments, the segments that fail
at least once are binomial, their further failures negative binomial, and each failure wastes a
truncated exponential share of its attempt; exact up to :data:`EXACT_DRAWS` draws, above which
the sum of each sample's wasted times is drawn from its normal limit (central limit theorem: then
thousands of failures per sample). The mean comes from the closed form; tests check the two
against an event-by-event simulation.

Checkpoint cost ``C``: a synchronous save stalls training while the node writes its share
(:func:`checkpoint_size`, bytes per node over ``checkpoint_write_gbytes_per_s_per_node``); an
asynchronous one (Megatron-LM ``--async-save``, PyTorch DCP ``async_save``) only while each GPU
copies its share to host memory (over ``host_copy_gbytes_per_s_per_gpu``), the write goes on in
the background, so the interval is at least the write's time (a save waits for the previous one).
A failure during the background write loses that save too: a second-order effect (the write
takes seconds against hours between failures) this model leaves out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EXACT_DRAWS",
    "MAX_FAILURES_EXPONENT",
    "SPREAD_SAMPLES",
    "SPREAD_SEED",
    "CheckpointSize",
    "Goodput",
    "checkpoint_bytes_per_parameter",
    "checkpoint_size",
    "daly_interval_s",
    "goodput",
    "run_goodput",
    "sample_run_times",
    "segment_expected_s",
    "young_interval_s",
]

#: Monte Carlo samples of the run's time for its 10th-90th percentile spread, and their seed
#: (fixed: the same session always reports the same spread).
SPREAD_SAMPLES = 2000
SPREAD_SEED = 20240731
#: Most truncated-exponential draws the spread's Monte Carlo makes exactly; beyond, each
#: sample's sum of wasted times is drawn from its normal limit (see the module doc).
EXACT_DRAWS = 4_000_000
#: Largest ``(R + x) / M`` (restart and segment over the mean time between interruptions) a run
#: may have: a segment then takes about e^30 = 1e13 attempts, a run that never finishes (and
#: beyond it the counts of failures leave int64). Such a session is refused naming the rate.
MAX_FAILURES_EXPONENT = 30.0


# ----------------------------------------------------------------------------- checkpoint size

def checkpoint_bytes_per_parameter(plan) -> float:
    """Bytes a checkpoint holds per parameter of ``plan``: the weights in the training dtype,
    and the optimizer state Megatron-LM saves, fp32 main weights (mixed precision only) and
    Adam's two fp32 moments (the distributed optimizer's ``param``, ``exp_avg``,
    ``exp_avg_sq``); not the gradients. bf16, fp16 and fp8 (BF16 weights,
    :func:`core.plan.parallel.tensor_dtype`) 14, fp32 12.

    Under the precision-aware optimizer Megatron-Core 0.16.1 saves the state through
    ``_get_main_param_and_optimizer_states`` (``distrib_optimizer.py:883-908``, every
    sharding type's save): where Transformer Engine's ``FusedAdam`` holds the master weights
    (:func:`core.model.memory.optimizer_holds_master_weights`) each state is
    ``get_unscaled_state``, fp32 whatever dtype it is held in (TE 2.20
    ``fused_adam.py:310-356``), but for the int16 remainders of fp32 master weights over BF16
    weights, saved as they are: BF16 weights 2 + 2 + 4 + 4 = 12, not the 8 bytes held; fp16
    or fp32 ones (over fp16 or fp32 weights too) 4. Otherwise Megatron-Core's fp32 master
    weights and the optimizer's own state tensors, the moments in their dtypes
    (:func:`core.model.memory.optimizer_state_bytes`): Megatron-Bridge's BF16 recipes with
    BF16 moments 2 + 4 + 2 + 2 = 10.

    A model FSDP2 shards in fp32 (``plan.fsdp_fp32_params``, torchtitan: the parameters are
    fp32, cast to 16 bits only when gathered) saves its fp32 parameters and Adam's moments
    (torchtitan's ``CheckpointManager`` saves the model's and the optimizer's state dicts):
    4 + 4 + 4 = 12, whatever the ZeRO stage.
    """
    from core.plan.parallel import tensor_dtype
    from core.model.base import DTYPE_BYTES
    from core.model.memory import optimizer_holds_master_weights, optimizer_state_bytes
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    master, m, v, _ = optimizer_state_bytes(plan)
    if getattr(plan, "fsdp_fp32_params", False) and not plan.use_precision_aware_optimizer:
        return 4.0 + m + v
    if optimizer_holds_master_weights(plan):
        return e + (2.0 if master == 2.0 and plan.main_params_dtype == "fp32" else 4.0) + 8.0
    return e + master + m + v


@dataclass
class CheckpointSize:
    """One checkpoint of a plan, bytes.

    ``total_bytes``: the whole model's state once; ``per_gpu_bytes``: the most one GPU writes;
    ``per_node_bytes``: the most one node writes (its GPUs' shares); ``stage_bytes``: the state
    of each pipeline stage, shape (p,).
    """

    total_bytes: float
    per_gpu_bytes: float
    per_node_bytes: float
    stage_bytes: list[float]


def checkpoint_size(model, plan, gpus_per_host: int) -> CheckpointSize:
    """The checkpoint of ``plan`` as its memory model holds the state.

    Each stage holds :func:`core.model.counts.params_per_gpu` parameters per GPU, split over
    ``t`` (routed experts over ``ep * etp``, :func:`core.model.counts.expert_params_per_gpu`) and
    replicated over the data-parallel (and context-parallel) ranks; the stage's state is those
    parameters once times :func:`checkpoint_bytes_per_parameter`. Megatron-Core's distributed
    checkpoint saves fully in parallel (``--ckpt-fully-parallel-save``, the default): every
    GPU of a stage writes an equal share, so a GPU writes the stage's state over the stage's
    GPUs, and a node its GPUs' shares under Megatron's rank order (tp fastest, then cp, dp, pp
    outermost: a node holds consecutive ranks, so part or all of one stage, or whole and part
    stages when a stage does not fill it); the per-node figure is the most any node writes
    (never more than the checkpoint). A node here is a host of ``gpus_per_host`` GPUs, the
    machine whose storage link writes (:func:`core.plan.cluster.gpus_per_host`: a GB200
    NVL72 compute tray of 4, not its rack of 72).
    A tied embedding's copy on the last stage counts, as the memory model holds it.
    """
    from core.model.counts import expert_params_per_gpu, params_per_gpu
    from core.model.moe import expert_tensor_parallel
    per_param = checkpoint_bytes_per_parameter(plan)
    experts = expert_params_per_gpu(model, plan)
    dense = params_per_gpu(model, plan) - experts
    stage = (dense * plan.tensor_parallel
             + experts * plan.expert_parallel * expert_tensor_parallel(plan)) * per_param  # (p,)
    gpus_per_stage = plan.num_gpus // plan.pipeline_parallel
    per_gpu = float(stage.max()) / gpus_per_stage
    # Megatron's rank order (tp fastest, then cp, dp, pp outermost): rank r writes
    # stage[r // gpus_per_stage] / gpus_per_stage; node n holds ranks n*g .. n*g+g-1. The
    # written bytes below rank x are ``before(x)``; a node writes before(end) - before(start).
    n, g = plan.num_gpus, min(gpus_per_host, plan.num_gpus)
    ahead = np.concatenate([[0.0], np.cumsum(stage)])
    padded = np.append(stage, 0.0)

    def before(x):
        s = x // gpus_per_stage
        return ahead[s] + padded[s] * (x % gpus_per_stage) / gpus_per_stage

    starts = np.arange(0, n, g)
    per_node = min(float((before(np.minimum(starts + g, n)) - before(starts)).max()),
                   float(stage.sum()))
    return CheckpointSize(total_bytes=float(stage.sum()), per_gpu_bytes=per_gpu,
                          per_node_bytes=per_node, stage_bytes=stage.tolist())


# ----------------------------------------------------------------------------- intervals

def young_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """Young's (1974) optimum work between checkpoints, ``sqrt(2 C M)``, seconds."""
    return math.sqrt(2.0 * checkpoint_s * mtbi_s)


def daly_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """Daly's (2006, Eq. 37) higher-order optimum, seconds: ``sqrt(2CM) [1 + sqrt(C/2M)/3 +
    (C/2M)/9] - C`` for ``C < 2M``, else ``M``."""
    C, M = checkpoint_s, mtbi_s
    if C >= 2.0 * M:
        return M
    r = C / (2.0 * M)
    return math.sqrt(2.0 * C * M) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - C


def segment_expected_s(x_s: float | np.ndarray, mtbi_s: float, restart_s: float
                       ) -> float | np.ndarray:
    """Expected wall time of a segment of ``x_s`` seconds that must run without a failure,
    failures Poisson of mean interval ``mtbi_s``, each followed by a restart of ``restart_s``
    that may fail too (Daly 2006, Eq. 13): ``M e^{R/M} (e^{x/M} - 1)``."""
    if not math.isfinite(mtbi_s):
        return x_s
    return mtbi_s * math.exp(restart_s / mtbi_s) * np.expm1(np.asarray(x_s, float) / mtbi_s)


# ----------------------------------------------------------------------------- the run

@dataclass
class Goodput:
    """Expected time of a whole run with failures and checkpoints (see the module doc).

    Times in seconds, GPU-hours, USD; ``None`` where no failure ever happens (a zero rate).
    ``checkpoint_s + restart_s + lost_work_s + work_s == expected_time_s`` (term by term:
    the saves that complete, the restarts including those cut short by a failure, and the work
    and partial saves lost to failures).
    """

    #: mean time between interruptions of the job, 1 / (rate per GPU-hour * GPUs); None: never
    mtbi_s: float | None
    checkpoint_bytes: float
    checkpoint_bytes_per_node: float
    #: training stalled per save (sync: the node's share over its write bandwidth; async: the
    #: copy to host memory) and the write's own time (equal for a sync save)
    checkpoint_save_s: float
    checkpoint_write_s: float
    async_save: bool
    #: iterations between saves and their work, seconds; how it was chosen ("given", "Daly")
    checkpoint_interval_iterations: int
    checkpoint_interval_s: float
    checkpoint_interval_rule: str
    #: the optima before rounding to whole iterations (None without failures)
    young_interval_s: float | None
    daly_interval_s: float | None
    num_checkpoints: int
    work_s: float
    expected_time_s: float
    #: 10th and 90th percentiles of the run's time (Monte Carlo, :func:`sample_run_times`)
    p10_time_s: float
    p90_time_s: float
    expected_interruptions: float
    checkpoint_s: float
    restart_s: float
    lost_work_s: float
    goodput: float
    gpu_hours_checkpoints: float
    gpu_hours_failures: float
    cost_usd_checkpoints: float
    cost_usd_failures: float

    @property
    def expected_training_days_with_failures(self) -> float:
        """:attr:`expected_time_s` in days."""
        return self.expected_time_s / 86400.0

    def to_dict(self) -> dict:
        """Plain dict of the fields, with the days of the expected time and spread."""
        import dataclasses
        d = dataclasses.asdict(self)
        d.update(expected_training_days_with_failures=self.expected_time_s / 86400.0,
                 training_days_p10=self.p10_time_s / 86400.0,
                 training_days_p90=self.p90_time_s / 86400.0)
        return d


def _segments(num_iterations: int, interval_iterations: int, iteration_time_s: float,
              checkpoint_s: float) -> list[tuple[float, int]]:
    """``(seconds, count)`` of the run's segments: ``n // k`` of ``k`` iterations and one of the
    rest, each ending with a save."""
    full, rest = divmod(num_iterations, interval_iterations)
    out = [(interval_iterations * iteration_time_s + checkpoint_s, full)] if full else []
    if rest:
        out.append((rest * iteration_time_s + checkpoint_s, 1))
    return out


def _truncated_exp_moments(a: float, M: float) -> tuple[float, float]:
    """Mean and variance of an exponential of mean ``M`` conditioned on falling below ``a``."""
    z = a / M
    if z < 1e-4:  # series: uniform on (0, a) to first order
        return a / 2.0 - a * z / 12.0, a * a / 12.0
    mean = M - a / math.expm1(z)
    var = M * M - a * a * math.exp(z) / math.expm1(z) ** 2
    return mean, max(var, 0.0)


def _wasted(rng: np.random.Generator, counts: np.ndarray, a: float, M: float) -> np.ndarray:
    """Per sample, the sum of ``counts[i]`` truncated exponentials on (0, a) (mean ``M``)."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(len(counts))
    if total <= EXACT_DRAWS:
        u = rng.random(total)
        vals = -M * np.log1p(-u * -np.expm1(-a / M))  # inverse CDF of the truncated law
        ids = np.repeat(np.arange(len(counts)), counts)
        return np.bincount(ids, weights=vals, minlength=len(counts))
    mean, var = _truncated_exp_moments(a, M)
    return counts * mean + np.sqrt(counts * var) * rng.standard_normal(len(counts))


def sample_run_times(segments: list[tuple[float, int]], mtbi_s: float, restart_s: float,
                     num_samples: int = SPREAD_SAMPLES, seed: int = SPREAD_SEED) -> np.ndarray:
    """Monte Carlo draws of the run's wall time, shape (num_samples,), seconds.

    Per group of ``count`` segments of ``x`` seconds: the segments whose first attempt fails
    are Binomial(count, 1 - e^{-x/M}); each then retries attempts of ``R + x`` until one runs
    without a failure, the further failures NegativeBinomial(failed, e^{-(R+x)/M}); every failure
    wastes the time its attempt ran, an exponential truncated at the attempt's length; every
    failed segment pays one completed restart ``R``.
    """
    rng = np.random.default_rng(seed)
    total = np.zeros(num_samples)
    for x, count in segments:
        total += x * count
        if not math.isfinite(mtbi_s):
            continue
        p_fail = -math.expm1(-x / mtbi_s)
        failed = rng.binomial(count, p_fail, num_samples)
        q = math.exp(-(restart_s + x) / mtbi_s)
        more = np.zeros(num_samples, np.int64)
        has = failed > 0
        if has.any():
            more[has] = rng.negative_binomial(failed[has], q)
        total += failed * restart_s + _wasted(rng, failed, x, mtbi_s) \
            + _wasted(rng, more, restart_s + x, mtbi_s)
    return total


def goodput(*, iteration_time_s: float, num_iterations: int, num_gpus: int, reliability,
            size: CheckpointSize, price_per_gpu_hour_usd: float,
            num_samples: int = SPREAD_SAMPLES) -> Goodput:
    """The run's expected time, spread and losses (module doc; docs/goodput.md).

    Parameters
    ----------
    iteration_time_s : float
        Seconds per iteration (positive).
    num_iterations : int
        Iterations of the run (at least 1).
    num_gpus : int
        World size; the job's failure rate is the per-GPU rate times it.
    reliability : core.plan.cluster.ReliabilityConfig
    size : CheckpointSize
        :func:`checkpoint_size` of the plan.
    price_per_gpu_hour_usd : float
    num_samples : int
        Monte Carlo samples of the spread.
    """
    rel = reliability
    T, n = float(iteration_time_s), int(num_iterations)
    W = n * T
    rate_per_s = rel.failure_rate_per_gpu_hour * num_gpus / 3600.0
    M = 1.0 / rate_per_s if rate_per_s > 0 else math.inf
    R = float(rel.restart_time_s)
    write_s = size.per_node_bytes / (rel.checkpoint_write_gbytes_per_s_per_node * 1e9)
    C = size.per_gpu_bytes / (rel.host_copy_gbytes_per_s_per_gpu * 1e9) if rel.async_save \
        else write_s
    young = daly = None
    from core.plan.cluster import NO_CHECKPOINT_INTERVAL
    never = rel.checkpoint_interval_iterations is not None and \
        int(rel.checkpoint_interval_iterations) >= NO_CHECKPOINT_INTERVAL
    if never:  # no save at all: one segment of the whole run, a failure restarts it
        k, rule = n, "no checkpoint"
    elif rel.checkpoint_interval_iterations is not None:
        k, rule = int(rel.checkpoint_interval_iterations), "given"
    elif math.isfinite(M):
        young, daly = young_interval_s(C, M), daly_interval_s(C, M)
        k, rule = max(1, round(daly / T)), "Daly"
    else:  # no failures: save once, at the end
        k, rule = n, "no failures"
    if rel.async_save and not never:  # a save waits for the previous one's background write
        k = max(k, math.ceil(write_s / T))
    k = min(k, n)
    segs = _segments(n, k, T, 0.0 if never else C)
    longest = max(x for x, _ in segs) + R
    if longest / M > MAX_FAILURES_EXPONENT:
        from core.plan.fields import ConfigError, FieldError
        raise ConfigError([FieldError("reliability.failure_rate_per_gpu_hour", (
            f"failure_rate_per_gpu_hour={rel.failure_rate_per_gpu_hour:g} on {num_gpus:,} GPUs "
            f"interrupts the job every {M:,.3g} s, against {longest:,.3g} s of restart, work and "
            f"save between checkpoints: the run would never finish (e^{longest / M:,.0f} "
            "attempts per segment)" + (
                "; reliability.checkpoint_interval_iterations 2^40 saves no checkpoint (Megatron-"
                "LM without --save): give --save and an interval, or a smaller interval"
                if never else
                "; reliability.checkpoint_interval_iterations 2^40 - 1 saves only at the end "
                "(Megatron-LM's --save without --save-interval, or with 0): give an interval "
                "(--save-interval N), or a smaller interval"
                if rel.checkpoint_interval_iterations == NO_CHECKPOINT_INTERVAL - 1 else "")))])
    num_ckpt = 0 if never else sum(c for _, c in segs)
    checkpoint = num_ckpt * C
    if math.isfinite(M):
        expected = float(sum(c * segment_expected_s(x, M, R) for x, c in segs))
        # expected failures per segment: (1 - p) / q; each is followed by a restart attempt
        # that runs min(R, failure) in expectation, M (1 - e^{-R/M})
        failures = sum(c * -math.expm1(-x / M) * math.exp((R + x) / M) for x, c in segs)
        restart = failures * M * -math.expm1(-R / M)
        draws = sample_run_times(segs, M, R, num_samples)
        p10, p90 = (float(v) for v in np.percentile(draws, [10, 90]))
        lost = max(expected - W - checkpoint - restart, 0.0)
    else:  # no failure ever: the work and the saves, in closed form (the sum over segments
        # left a rounding residue of ~1e-9 GPU-hours as "failures")
        failures = restart = lost = 0.0
        expected = W + checkpoint
        p10 = p90 = expected
    hours = num_gpus / 3600.0
    return Goodput(
        mtbi_s=M if math.isfinite(M) else None, checkpoint_bytes=size.total_bytes,
        checkpoint_bytes_per_node=size.per_node_bytes, checkpoint_save_s=C,
        checkpoint_write_s=write_s, async_save=bool(rel.async_save),
        checkpoint_interval_iterations=k, checkpoint_interval_s=k * T,
        checkpoint_interval_rule=rule, young_interval_s=young, daly_interval_s=daly,
        num_checkpoints=num_ckpt, work_s=W, expected_time_s=expected, p10_time_s=p10,
        p90_time_s=p90, expected_interruptions=failures, checkpoint_s=checkpoint,
        restart_s=restart, lost_work_s=lost, goodput=W / expected,
        gpu_hours_checkpoints=checkpoint * hours, gpu_hours_failures=(restart + lost) * hours,
        cost_usd_checkpoints=checkpoint * hours * price_per_gpu_hour_usd,
        cost_usd_failures=(restart + lost) * hours * price_per_gpu_hour_usd)


def run_goodput(session, report, num_samples: int = SPREAD_SAMPLES) -> Goodput:
    """:func:`goodput` of a simulated session (its report's iteration time and iterations)."""
    from core.plan.cluster import processes_per_host
    size = checkpoint_size(session.model, session.plan,
                           processes_per_host(session.cluster, session.plan.num_gpus))
    return goodput(iteration_time_s=report.iteration_time_s,
                   num_iterations=report.num_iterations, num_gpus=report.num_gpus,
                   reliability=session.reliability, size=size,
                   price_per_gpu_hour_usd=session.cost.price_per_gpu_hour_usd,
                   num_samples=num_samples)
