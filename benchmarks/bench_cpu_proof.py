"""Proof on this machine: profile + simulator predict real CPU training iterations.

A reference trainer built from the same layer definitions the profiler times
(:mod:`core.profiling.layers`: Megatron-style GPT, word embedding tied to the
output layer, dropout 0.1, AdamW) trains small GPT models on the CPU, single
process, with gradient accumulation over micro-batches and full activation
recomputation (``torch.utils.checkpoint`` per layer) on or off. For each
configuration the benchmark

1. profiles the CPU for the configuration's shapes (``core.profiling.run_profile``:
   op tables at its micro-batch size, optimizer step at its parameter count),
2. predicts the iteration time with ``core.sim.simulate.simulate`` (t = p = d = 1,
   fp32, the measured store via ``cluster.profile_path``),
3. measures real iterations (median of several after warm-up),

prints a table and the final line ``MAPE=x.x% over N configurations``.
With ``--dp`` (default on) it also runs one 2-process data-parallel
configuration over gloo (one thread per process; the store then also holds the
gloo all-reduce curve measured by ``core.profiling.run_collectives``) and
prints it apart from the MAPE.

torch threads are pinned (``torch.set_num_threads``) to the same number while
profiling and training, and both run with glibc's malloc keeping freed memory
(:func:`core.profiling.device.keep_freed_memory`, as a caching allocator).
Other processes competing for the CPU distort both (OpenMP threads that share
cores with other work slow down many times over), so every step (profiling a
shape group, measuring a configuration) waits for the CPU to be idle, watches
how much CPU other processes used meanwhile (/proc/stat), and is repeated
when that exceeds ``--max-other-load``; the table shows the share for each
configuration. Where the machine cannot be
had quiet, ``--threads 1 --clock thread`` times profile and training by the
CPU time of the one torch thread (:func:`time.thread_time`), which other
processes do not inflate (cache sharing aside).

Run: ``python benchmarks/bench_cpu_proof.py [--threads 2] [--store FILE] [--no-dp]``
(about 3-5 minutes on two cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session  # noqa: E402
from core.plan.model_config import padded_vocab_size  # noqa: E402
from core.profiling import run_collectives, run_profile  # noqa: E402
from core.profiling.device import keep_freed_memory  # noqa: E402
from core.profiling.layers import GPTModel, make_optimizer  # noqa: E402
from core.profiling.shapes import merge_groups, shapes_from_session  # noqa: E402
from core.sim.simulate import simulate  # noqa: E402

VOCAB = 8192


@dataclass(frozen=True)
class Config:
    """One training configuration (t = p = 1)."""

    L: int
    h: int
    s: int
    b: int
    m: int
    recompute: bool
    d: int = 1

    @property
    def a(self) -> int:
        return max(1, self.h // 64)  # head size 64

    @property
    def name(self) -> str:
        return (f"L{self.L} h{self.h} s{self.s} b{self.b} m{self.m}"
                + (" rc" if self.recompute else "") + (f" d{self.d}" if self.d > 1 else ""))


CONFIGS = [
    Config(L=4, h=128, s=128, b=4, m=4, recompute=False),
    Config(L=8, h=128, s=256, b=8, m=2, recompute=True),
    Config(L=4, h=256, s=128, b=2, m=4, recompute=False),
    Config(L=4, h=256, s=128, b=2, m=4, recompute=True),
    Config(L=8, h=256, s=256, b=1, m=8, recompute=False),
    Config(L=2, h=384, s=256, b=2, m=2, recompute=True),
    Config(L=4, h=384, s=128, b=1, m=6, recompute=False),
    Config(L=2, h=512, s=128, b=4, m=2, recompute=False),
    Config(L=4, h=512, s=256, b=1, m=4, recompute=True),
    Config(L=2, h=512, s=256, b=2, m=1, recompute=False),
]
DP_CONFIG = Config(L=4, h=256, s=128, b=2, m=4, recompute=False, d=2)


def session_for(cfg: Config, store: Path) -> Session:
    """The simulator's session of ``cfg`` reading the measured store ``store``."""
    return Session(
        model=ModelConfig(cfg.name, cfg.L, cfg.h, cfg.a, None, cfg.s, VOCAB),
        plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=cfg.d,
                          micro_batch_size=cfg.b, global_batch_size=cfg.b * cfg.m * cfg.d,
                          schedule="1f1b", recompute="full" if cfg.recompute else "none",
                          precision="fp32"),
        cluster=ClusterConfig(gpu="local-cpu", gpus_per_node=max(1, cfg.d),
                              profile_path=str(store)),
        cost=CostConfig(0.0, 1e9))


# ---------------------------------------------------------------- the reference trainer

def build(cfg: Config, seed: int = 0):
    """Model, optimizer and ``m`` micro-batches of random tokens for ``cfg``."""
    torch.manual_seed(seed)
    V = padded_vocab_size(VOCAB, 1)
    model = GPTModel(cfg.L, cfg.h, cfg.a, 4 * cfg.h, cfg.s, V, recompute=cfg.recompute).train()
    opt = make_optimizer(model.parameters(), "cpu")
    data = [(torch.randint(0, VOCAB, (cfg.b, cfg.s)), torch.randint(0, VOCAB, (cfg.b, cfg.s)))
            for _ in range(cfg.m)]
    return model, opt, data


def train_iteration(model, opt, data, grad_sync=None) -> None:
    """One iteration: forward/backward of every micro-batch (gradients accumulate), the
    data-parallel gradient all-reduce if any, the optimizer step."""
    m = len(data)
    for ids, labels in data:
        loss = model(ids, labels) / m
        loss.backward()
    if grad_sync is not None:
        grad_sync()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure_training(cfg: Config, warmup: int, iters: int, clock: str = "wall") -> list[float]:
    """Seconds of ``iters`` real iterations after ``warmup`` untimed ones (wall clock, or the
    thread's CPU time with ``clock="thread"``, as the profiler's ``timing["clock"]``)."""
    now = time.thread_time if clock == "thread" else time.perf_counter
    model, opt, data = build(cfg)
    for _ in range(warmup):
        train_iteration(model, opt, data)
    times = []
    for _ in range(iters):
        t0 = now()
        train_iteration(model, opt, data)
        times.append(now() - t0)
    return times


def _dp_worker(rank: int, cfg: Config, port: int, warmup: int, iters: int, clock: str,
               q) -> None:
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
    torch.set_num_threads(1)
    keep_freed_memory()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=cfg.d)
    model, opt, data = build(cfg, seed=0)
    torch.manual_seed(rank + 1)
    data = [(torch.randint(0, VOCAB, (cfg.b, cfg.s)), torch.randint(0, VOCAB, (cfg.b, cfg.s)))
            for _ in range(cfg.m)]
    params = [p for p in model.parameters()]

    def grad_sync() -> None:  # one flat buffer, as Megatron's contiguous gradient buffer
        grads = [p.grad for p in params]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat /= cfg.d
        for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(synced)

    def iteration_wall() -> float:
        dist.barrier()
        t0 = time.perf_counter()
        train_iteration(model, opt, data, grad_sync)
        return time.perf_counter() - t0

    def iteration_hybrid() -> float:
        # compute by this thread's CPU time, the gradient all-reduce by wall time after an
        # untimed barrier (the ranks' compute then ends together, as on a quiet machine)
        c0 = time.thread_time()
        for ids, labels in data:
            (model(ids, labels) / len(data)).backward()
        c1 = time.thread_time()
        dist.barrier()
        w0 = time.perf_counter()
        grad_sync()
        w1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return (c1 - c0) + (w1 - w0) + (time.thread_time() - c1)

    iteration = iteration_hybrid if clock == "thread" else iteration_wall
    for _ in range(warmup):
        iteration()
    times = [iteration() for _ in range(iters)]
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        q.put(float(t.item()))
    dist.destroy_process_group()


def measure_dp(cfg: Config, warmup: int, iters: int, clock: str = "wall") -> float:
    """Median iteration seconds of ``cfg`` over ``cfg.d`` gloo processes (max over ranks).

    ``clock="thread"``: compute by each rank's thread CPU time plus the gradient
    all-reduce by wall time (for a machine shared with other work).
    """
    import torch.multiprocessing as mp
    from core.profiling.collectives import free_port
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(_dp_worker, args=(cfg, free_port(), warmup, iters, clock, q),
                       nprocs=cfg.d, join=True, start_method="spawn")
    return q.get(timeout=10)


# ---------------------------------------------------------------- machine state

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_jiffies() -> float:
    """CPU time all processes used since boot, in clock ticks (/proc/stat)."""
    with open("/proc/stat", encoding="utf-8") as fh:
        v = [float(x) for x in fh.readline().split()[1:]]
    return sum(v) - v[3] - (v[4] if len(v) > 4 else 0.0)  # all but idle and iowait


def _own_jiffies() -> float:
    """CPU time of this process and its reaped children, in clock ticks (/proc/self/stat)."""
    with open("/proc/self/stat", encoding="utf-8") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return sum(float(x) for x in f[11:15])  # utime, stime, cutime, cstime


class OtherLoad:
    """Share of the machine's CPUs that *other* processes used during a ``with`` block.

    ``fraction`` = (busy ticks of all processes - ticks of this process and its
    children) / (wall time * CPUs); 0 where /proc is missing.
    """

    def __enter__(self) -> "OtherLoad":
        try:
            self._b0, self._o0 = _busy_jiffies(), _own_jiffies()
        except OSError:
            self._b0 = None
        self._t0 = time.perf_counter()
        self.fraction = 0.0
        return self

    def __exit__(self, *exc) -> None:
        if self._b0 is None:
            return
        wall = time.perf_counter() - self._t0
        other = (_busy_jiffies() - self._b0) - (_own_jiffies() - self._o0)
        self.fraction = max(0.0, other / _HZ / (wall * (os.cpu_count() or 1)))


def wait_for_idle(max_wait_s: float, threshold: float) -> None:
    """Wait until other processes use less than ``threshold`` of the CPUs over a second
    (at most ``max_wait_s`` seconds)."""
    deadline = time.monotonic() + max_wait_s
    while True:
        with OtherLoad() as load:
            time.sleep(1.0)
        if load.fraction < threshold or time.monotonic() > deadline:
            return


def measured_quietly(what: str, fn, args: argparse.Namespace):
    """Run ``fn()`` until other processes used less than ``--max-other-load`` of the CPUs
    during it (at most ``--attempts`` times); returns ``(result, other_load_fraction)``."""
    for attempt in range(1, args.attempts + 1):
        wait_for_idle(args.max_wait, args.max_other_load)
        with OtherLoad() as load:
            result = fn()
        if load.fraction <= args.max_other_load:
            break
        print(f"  {what}: other processes used {load.fraction:.0%} of the CPUs"
              + ("; measuring again" if attempt < args.attempts else "; keeping this result"),
              flush=True)
    return result, load.fraction


# ---------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--store", type=Path, help="profile store to write (default: a temp file)")
    ap.add_argument("--skip-profile", action="store_true", help="reuse --store as it is")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--dp", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the 2-process gloo data-parallel configuration")
    ap.add_argument("--max-wait", type=float, default=60.0,
                    help="seconds to wait for other processes to leave the CPU idle, per step")
    ap.add_argument("--max-other-load", type=float, default=0.1,
                    help="repeat a step if other processes used more than this share of the CPUs")
    ap.add_argument("--attempts", type=int, default=3, help="tries per step (see --max-other-load)")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall time, or the CPU time of the one torch thread (--threads 1): "
                         "immune to other processes on a shared machine")
    ap.add_argument("--nice", type=int, default=0,
                    help="scheduling priority increment for this process (negative needs root): "
                         "-20 lets the benchmark win the CPU over other work on a shared machine")
    args = ap.parse_args()

    if args.clock == "thread" and args.threads != 1:
        ap.error("--clock thread needs --threads 1")
    if args.nice:
        os.nice(args.nice)  # inherited by the threads and the spawned processes
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    keep_freed_memory()  # as the profiler does: no page-fault costs that depend on history
    t_start = time.perf_counter()
    tmp = tempfile.TemporaryDirectory()
    store = args.store or Path(tmp.name) / "cpu_proof.h5"
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.clock} clock, "
          f"nice {os.nice(0)}, load average {os.getloadavg()[0]:.2f}", flush=True)

    # 1. profile the shapes of every configuration, one shape group at a time
    if not args.skip_profile:
        groups = merge_groups(shapes_from_session(session_for(c, store)) for c in CONFIGS)
        store.unlink(missing_ok=True)
        t0 = time.perf_counter()
        for g in groups:
            measured_quietly(f"profile {g.label()}", lambda g=g: run_profile(
                store, "cpu", [g], threads=args.threads, merge=True,
                timing={"clock": args.clock, "min_repeats": 5, "target_s": 0.4}), args)
        print(f"profiled {len(groups)} shape groups in {time.perf_counter() - t0:.0f} s -> {store}")

    # 2. predict, 3. measure
    rows = []
    for cfg in CONFIGS:
        report = simulate(session_for(cfg, store)).report
        times, other = measured_quietly(f"train {cfg.name}", lambda cfg=cfg: measure_training(
            cfg, args.warmup, args.iters, args.clock), args)
        rows.append((cfg, report.iteration_time_s, statistics.median(times), other,
                     report.warnings))
    prov = report.profile
    print(f"\nprofile: {prov.get('device')} ({prov.get('method')}, {prov.get('date')}, torch "
          f"{prov.get('torch_version')}, {prov.get('threads')} threads)")
    header = (f"{'configuration':<26} {'params':>8} {'predicted s':>12} {'measured s':>11} "
              f"{'error':>7} {'other load':>10}")
    print(header)
    print("-" * len(header))
    errors = []
    for cfg, pred, meas, other, warns in rows:
        err = (pred - meas) / meas
        errors.append(abs(err))
        n = sum(p.numel() for p in GPTModel(cfg.L, cfg.h, cfg.a, 4 * cfg.h, cfg.s,
                                            padded_vocab_size(VOCAB, 1)).parameters())
        print(f"{cfg.name:<26} {n / 1e6:>7.1f}M {pred:>12.4f} {meas:>11.4f} {err:>+7.1%} "
              f"{other:>10.0%}" + (f"  ({len(warns)} warnings: {warns[0]})" if warns else ""))

    if args.dp:
        dp_store = store.with_name(store.stem + "_dp1thread.h5")
        torch.set_num_threads(1)
        groups = [shapes_from_session(session_for(DP_CONFIG, dp_store))]
        measured_quietly("profile (1 thread)", lambda: run_profile(
            dp_store, "cpu", groups, threads=1, merge=False,
            timing={"clock": args.clock, "min_repeats": 5, "target_s": 0.4}), args)
        n_bytes = 4 * sum(p.numel() for p in GPTModel(DP_CONFIG.L, DP_CONFIG.h, DP_CONFIG.a,
                                                      4 * DP_CONFIG.h, DP_CONFIG.s,
                                                      padded_vocab_size(VOCAB, 1)).parameters())
        sizes = sorted({1 << 20, 1 << 22, 1 << 24, 1 << 26, n_bytes})
        measured_quietly("gloo all-reduce", lambda: run_collectives(
            2, "gloo", out=dp_store, sizes=sizes, kinds=["all_reduce"]), args)
        report = simulate(session_for(DP_CONFIG, dp_store)).report
        measured, _ = measured_quietly("train data-parallel", lambda: measure_dp(
            DP_CONFIG, args.warmup, args.iters, args.clock), args)
        err = (report.iteration_time_s - measured) / measured
        print(f"\ndata parallel over gloo, 2 processes x 1 thread, gradient all-reduce of "
              f"{n_bytes / 2**20:.1f} MiB:")
        print(f"{DP_CONFIG.name:<26} {'':>8} {report.iteration_time_s:>12.4f} {measured:>11.4f} "
              f"{err:>+7.1%}  (comm predicted {report.comm_s:.4f} s)")
        torch.set_num_threads(args.threads)

    print(f"\nload average at the end {os.getloadavg()[0]:.2f}; total "
          f"{time.perf_counter() - t_start:.0f} s")
    mape = 100.0 * statistics.mean(errors)
    print(f"MAPE={mape:.1f}% over {len(errors)} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
