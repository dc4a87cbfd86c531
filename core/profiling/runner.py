"""Measure the op tables of a profile store on the local device (torch).

For every shape group (:class:`~core.profiling.shapes.ShapeGroup`) and micro-batch
size the profiler builds one tensor-parallel rank's modules
(:mod:`core.profiling.layers`), and times, each in isolation with autograd on
and dropout active (training mode):

* ``attention_fwd`` / ``mlp_fwd`` / ``embedding_fwd`` / ``output_fwd``: the
  module's forward (building the autograd graph, as in training);
* ``*_bwd``: ``backward`` of that forward's output with a fixed gradient (the
  forward runs untimed before each repetition); parameter gradients
  accumulate, as with gradient accumulation over micro-batches;
* ``optimizer_step`` (keyed by the parameter count ``n``): the Adam step over
  the parameters of a pipeline stage of 1, 2, 4, 8 ... layers of the shape
  (weights, embedding, final norm; :func:`core.sim.op_times.params_per_gpu`), on fp32
  master weights plus the copy into the half-precision weights when the dtype
  is bf16/fp16.

Each time is the median of repetitions after warm-up (:func:`~core.profiling.
device.time_fn`). The store is rewritten atomically after every finished
group, so an interrupted run (Ctrl-C, a cancel token, a crash) leaves a valid
store with what was finished. Shapes not measured fall back to the store's
analytic model, whose parameters are fitted here to the measured rows.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from core.model.ops import (ALL_OPS, DEFAULT_OP_MODEL, FAMILY_KEY_DEFAULTS, OP_KEYS, OPTIMIZER_OP,
                   analytic_op_time, full_op_key)
from core.store.profile_store import ProfileStore
from core.profiling.device import (KEEP_MEMORY_NOTE, DeviceInfo, keep_freed_memory, parse_device,
                     probe_device, synchronize, time_fn)
from core.profiling.layers import (TORCH_DTYPES, AttentionShard, EmbeddingShard, MLPShard, OutputShard,
                     make_optimizer)
from core.profiling.progress import CancelToken, ProfileProgress, ProfileRunResult, ProgressCallback
from core.profiling.shapes import ShapeGroup, default_shapes

__all__ = ["profile_ops", "GroupBench", "fit_op_model", "kernel_breakdown"]

OpRows = dict[str, dict[tuple, float]]  # op -> {key tuple in OP_KEYS order: time_s}
FWD_BWD_OPS = ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd",
               "embedding_fwd", "embedding_bwd", "output_fwd", "output_bwd")


class _Cancelled(Exception):
    pass


_OOM_ERRORS = (getattr(torch, "OutOfMemoryError", RuntimeError), RuntimeError)


def _is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is a device out-of-memory error (a shape too large: skipped, not fatal)."""
    oom = getattr(torch, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


class GroupBench:
    """The modules and inputs of one shape group on one device, ready to time.

    Parameters
    ----------
    group : ShapeGroup
    device : torch.device
    timing : dict, optional
        Keyword arguments for :func:`~core.profiling.device.time_fn`
        (``warmup``, ``min_repeats``, ``max_repeats``, ``target_s``) and
        ``statistic``: ``"median"`` (default) or ``"min"`` of the repetitions,
        ``clock``: ``"wall"`` (default) or ``"thread"`` (CPU time of the calling
        thread; one CPU thread only).
    """

    def __init__(self, group: ShapeGroup, device: torch.device, timing: dict | None = None):
        g, self.group, self.device = group, group, device
        self.dtype = TORCH_DTYPES[g.dtype]
        self.timing = dict(timing or {})
        statistic = self.timing.pop("statistic", "median")
        if statistic not in ("median", "min"):
            raise ValueError(f"timing statistic {statistic!r}: expected median or min")
        self.statistic = statistics.median if statistic == "median" else min
        if self.timing.get("clock", "wall") == "thread" and torch.get_num_threads() != 1:
            raise ValueError("timing clock 'thread' needs one CPU thread (threads=1)")
        mk = lambda m: m.to(device=device, dtype=self.dtype).train()  # noqa: E731
        self.attention = mk(AttentionShard(g.h, g.a, g.t, g.s))
        self.mlp = mk(MLPShard(g.h, g.f, g.t))
        self.embedding = mk(EmbeddingShard(g.V, g.h, g.s, g.t))
        self.output = mk(OutputShard(g.V, g.h, g.t))

    # ------------------------------------------------------------------ callables
    def callables(self, b: int) -> dict[str, tuple[Callable[[Any], Any], Callable[[], Any] | None]]:
        """op -> ``(fn, setup)`` to time at micro-batch ``b`` (see :func:`time_fn`)."""
        g, dev, dt = self.group, self.device, self.dtype

        def act() -> torch.Tensor:
            return torch.randn(g.s, b, g.h, device=dev, dtype=dt).requires_grad_()  # (s, b, h)

        x, attn_out, grad = act(), act(), torch.randn(g.s, b, g.h, device=dev, dtype=dt)
        ids = torch.randint(0, g.V, (b, g.s), device=dev)                          # (b, s)
        labels = torch.randint(0, g.V, (b, g.s), device=dev)                       # (b, s)
        bias = self.attention.proj_bias

        def fresh(*leaves: torch.Tensor) -> None:
            for leaf in leaves:
                leaf.grad = None  # a layer's input gradient is not accumulated in a model

        def attention():
            fresh(x)
            return self.attention(x)

        def mlp():
            fresh(x, attn_out)
            return self.mlp(x, attn_out, bias)

        def embedding():
            return self.embedding(ids)

        def output():
            fresh(x)
            return self.output(x, labels)

        backward = lambda out: out.backward(grad)  # noqa: E731
        return {
            "attention_fwd": (lambda _: attention(), None),
            "attention_bwd": (backward, attention),
            "mlp_fwd": (lambda _: mlp(), None),
            "mlp_bwd": (backward, mlp),
            "embedding_fwd": (lambda _: embedding(), None),
            "embedding_bwd": (backward, embedding),
            "output_fwd": (lambda _: output(), None),
            "output_bwd": (lambda loss: loss.backward(), output),
        }

    def time_ops(self, b: int, check: Callable[[], None] = lambda: None) -> dict[str, float]:
        """Median seconds of every forward/backward op at micro-batch ``b``.

        ``check`` runs before each op (it raises to stop early).
        """
        out = {}
        with torch.enable_grad():
            for op, (fn, setup) in self.callables(b).items():
                check()
                out[op] = self.statistic(time_fn(fn, self.device, setup=setup, **self.timing))
        for m in (self.attention, self.mlp, self.embedding, self.output):
            m.zero_grad(set_to_none=True)
        return out

    # ------------------------------------------------------------------ optimizer
    def stage_param_shapes(self, num_layers: int) -> list[tuple[int, ...]]:
        """Shapes of one GPU's parameters for a stage of ``num_layers`` layers plus
        embedding and final layer norm (:func:`core.sim.op_times.params_per_gpu` with p=1)."""
        layer = [tuple(p.shape) for p in itertools.chain(self.attention.parameters(),
                                                           self.mlp.parameters())]
        g = self.group
        return layer * num_layers + [(g.V // g.t, g.h), (g.s, g.h), (g.h,), (g.h,)]

    def time_optimizer(self, num_layers: int) -> tuple[int, float]:
        """``(n, median seconds)`` of one optimizer step over a ``num_layers``-layer stage.

        fp32 master weights with gradients; for bf16/fp16 the step also copies
        the master weights into half-precision model weights (mixed precision).
        """
        shapes = self.stage_param_shapes(num_layers)
        master = [torch.zeros(s, device=self.device, dtype=torch.float32).requires_grad_()
                  for s in shapes]
        for p in master:
            p.grad = torch.full_like(p, 1e-3)
        model = ([torch.zeros(s, device=self.device, dtype=self.dtype) for s in shapes]
                 if self.dtype != torch.float32 else None)
        opt = make_optimizer(master, self.device.type)

        foreach_copy = getattr(torch, "_foreach_copy_", None)

        def step(_: Any) -> None:
            opt.step()
            if model is not None:  # master (fp32) -> model (bf16/fp16) weights
                if foreach_copy is not None:
                    foreach_copy(model, master)
                else:
                    for dst, src in zip(model, master):
                        dst.copy_(src)

        n = int(sum(p.numel() for p in master))
        times = time_fn(step, self.device, **{**self.timing, "warmup": max(2, self.timing.get(
            "warmup", 2))})
        return n, self.statistic(times)


def kernel_breakdown(fn: Callable[[Any], Any], setup: Callable[[], Any] | None,
                     device: torch.device, top: int | None = 12,
                     minus: list[list] | None = None) -> list[list]:
    """Per-kernel time of one call, from :mod:`torch.profiler` in a short schedule window.

    Schedule: 1 wait, 1 warm-up, 2 active steps, each ``fn(setup())``. On CUDA
    the device (kernel) self times, on a CPU the operators' self CPU times.

    Parameters
    ----------
    fn, setup : callables
        As for :func:`~core.profiling.device.time_fn`.
    device : torch.device
    top : int or None
        Keep the ``top`` largest entries (None: all).
    minus : list, optional
        A full breakdown (``top=None``) of ``setup`` alone (e.g. the forward
        whose backward ``fn`` runs); its entries are subtracted by name.

    Returns
    -------
    list of [name, self_time_s_per_call, calls_per_call]
        Largest first.
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    setup = setup or (lambda: None)
    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    active = 2
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=active)) as prof:
        for _ in range(4):
            fn(setup())
            synchronize(device)
            prof.step()
    acc: dict[str, list[float]] = {}
    for ev in prof.key_averages():
        if cuda:
            us = getattr(ev, "self_device_time_total", None)
            if us is None:
                us = getattr(ev, "self_cuda_time_total", 0.0)
        else:
            us = ev.self_cpu_time_total
        if us > 0 and not ev.key.startswith("ProfilerStep"):
            row = acc.setdefault(ev.key, [0.0, 0.0])
            row[0] += us / 1e6 / active
            row[1] += ev.count / active
    for name, seconds, calls in minus or []:
        if name in acc:
            acc[name][0] -= seconds
            acc[name][1] -= calls
    rows = [[k, v[0], v[1]] for k, v in acc.items() if v[0] > 0 and v[1] > 0]
    rows.sort(key=lambda r: -r[1])
    return rows if top is None else rows[:top]


# ------------------------------------------------------------------ op model fit

class _Device:
    """Attributes :func:`core.model.ops.analytic_op_time` needs."""

    def __init__(self, peak_flops: dict, bw: float, op_model: dict):
        self.peak_flops, self.memory_bandwidth_bytes_per_s, self.op_model = peak_flops, bw, op_model


def fit_op_model(rows: OpRows, peak_flops: dict[str, float], memory_bandwidth_bytes_per_s: float,
                 kernel_overhead_s: float) -> tuple[dict[str, float], float | None]:
    """Analytic op-model parameters fitted to measured op rows (for unprofiled shapes).

    Grid search of ``gemm_efficiency_max``, ``gemm_half_size`` and
    ``memory_efficiency`` minimizing the mean squared ``log(model / measured)``
    of :func:`core.model.ops.analytic_op_time` over the forward/backward rows (the
    optimizer excluded); ``kernel_overhead_s`` is the measured per-op
    overhead, the other parameters keep :data:`core.model.ops.DEFAULT_OP_MODEL`.
    With fewer than 3 rows, the defaults with the measured overhead.

    Returns
    -------
    op_model : dict[str, float]
    rms_log_error : float or None
        Root-mean-square of ``log(model / measured)`` at the optimum (None without a fit).
    """
    base = {"kernel_overhead_s": float(kernel_overhead_s)}
    samples = []
    for op in FWD_BWD_OPS:
        for key_tuple, t in rows.get(op, {}).items():
            key = dict(zip(OP_KEYS[op], key_tuple))
            if key["dtype"] in peak_flops:
                samples.append((op, key, t))
    if len(samples) < 3:
        return {**DEFAULT_OP_MODEL, **base}, None
    best, best_err = base, float("inf")
    measured = np.log([t for _, _, t in samples])
    for eff, half, mem in itertools.product((0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
                                            (16.0, 64.0, 256.0, 1024.0),
                                            (0.2, 0.4, 0.6, 0.8, 1.0)):
        p = {**base, "gemm_efficiency_max": eff, "gemm_half_size": half, "memory_efficiency": mem}
        dev = _Device(peak_flops, memory_bandwidth_bytes_per_s, p)
        model = np.log([analytic_op_time(op, key, dev) for op, key, _ in samples])
        err = float(np.sum((model - measured) ** 2))
        if err < best_err:
            best, best_err = p, err
    return {**DEFAULT_OP_MODEL, **best}, float(np.sqrt(best_err / len(samples)))


# ------------------------------------------------------------------ the run

def _rows_from_store(store: ProfileStore) -> OpRows:
    rows: OpRows = {}
    for op in store.op_names():
        if op not in OP_KEYS:
            continue
        keys, times, _ = store.op_table(op)
        if set(keys) - set(OP_KEYS[op]) or set(OP_KEYS[op]) - set(keys) - set(FAMILY_KEY_DEFAULTS):
            continue
        n = len(times)
        # a table written before the family columns holds GPT ops: fill in GPT's values
        cols = [keys[c].tolist() if c in keys else
                [full_op_key(op, {k: keys[k][i].item() for k in keys})[c] for i in range(n)]
                for c in OP_KEYS[op]]
        rows[op] = {tuple(c[i] for c in cols): float(t) for i, t in enumerate(times.tolist())}
    return rows


def _make_store(info: DeviceInfo, provenance: dict, rows: OpRows, op_model: dict,
                collectives_from: ProfileStore | None) -> ProfileStore:
    store = ProfileStore(info.name, info.peak_flops, info.memory_bytes,
                         info.memory_bandwidth_bytes_per_s, provenance, op_model)
    for op in ALL_OPS:
        if not rows.get(op):
            continue
        items = sorted(rows[op].items(), key=lambda kv: tuple(str(v) for v in kv[0]))
        cols = {c: np.array([k[i] for k, _ in items]) for i, c in enumerate(OP_KEYS[op])}
        store.add_op_table(op, cols, np.array([t for _, t in items]),
                           axis="n" if op == OPTIMIZER_OP else "b")
    if collectives_from is not None:
        for kind, sizes in collectives_from.collective_kinds().items():
            for n in sizes:
                store.add_collective(kind, n, *collectives_from.collective_curve(kind, n))
    return store


class _Progress:
    """A profile run's progress: ``done`` of ``total`` steps, ``saved`` shape groups, reported
    to the ``progress`` callback (if any) as a :class:`ProfileProgress`."""

    def __init__(self, progress: ProgressCallback | None, total: int):
        self.progress, self.total, self.done, self.saved = progress, total, 0, 0

    def report(self, message: str) -> None:
        """Report the current state with ``message``."""
        if self.progress is not None:
            self.progress(ProfileProgress(self.done, self.total, message, self.saved))


def _set_up_device(dev: torch.device, threads: int | None, keep_memory: bool) -> str | None:
    """Prepare ``dev`` for timing (see :func:`profile_ops`): on a CPU pin ``threads`` and, with
    ``keep_memory``, keep freed memory (:func:`keep_freed_memory`); on CUDA select the device and
    switch TF32 matmuls off. Returns the CPU allocator's provenance note (None on CUDA)."""
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(int(threads))
    allocator = None
    if dev.type == "cpu":
        allocator = (KEEP_MEMORY_NOTE if keep_memory and keep_freed_memory()
                     else "default malloc (freed memory returned to the system)")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = False
    return allocator


def _check_previous(previous: ProfileStore | None, out: Path, dev: torch.device,
                    info: DeviceInfo) -> None:
    """Refuse to merge into ``previous`` (the store in ``out``) when it profiled another device
    or, on a CPU, with another number of threads.

    Raises
    ------
    ValueError
        Naming the difference and what to do."""
    if previous is not None and previous.device_name != info.name:
        raise ValueError(f"{out} holds a profile of {previous.device_name!r}, not of this "
                         f"{info.name!r}; choose another --out")
    if (previous is not None and dev.type == "cpu" and previous.op_names()
            and previous.provenance.get("threads") not in (None, info.threads)):
        raise ValueError(f"{out} was profiled with {previous.provenance['threads']} CPU threads, "
                         f"this run uses {info.threads}; use the same --threads, another --out "
                         f"or --no-merge")


def _provenance(dev: torch.device, info: DeviceInfo, timing: dict | None,
                allocator: str | None) -> dict[str, Any]:
    """The store's provenance of a profile run on ``dev`` (without the shapes and the op model's
    source, added at each save)."""
    return {
        "method": "measured",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": f"vtrain profile run on {dev} ({info.name}) with torch {torch.__version__}",
        "torch_device": str(dev),
        "torch_version": str(torch.__version__),
        "cuda_version": str(torch.version.cuda or "none"),
        "threads": int(info.threads),
        "timing": f"{(timing or {}).get('statistic', 'median')} of repetitions after warm-up, "
                  "device synchronized around each (CUDA events on a GPU); backward timed "
                  "after an untimed forward; clock: "
                  + ("thread CPU time" if (timing or {}).get("clock") == "thread" else "wall"),
        "tp_comm": "excluded (one tensor-parallel rank's shard; the simulator adds all-reduces)",
        "dropout": "hidden 0.1, attention 0.1 (training mode)",
        "kernel_overhead_s": info.kernel_overhead_s,
        **info.details,
        **({"cpu_allocator": allocator} if allocator else {}),
    }


def _time_group_ops(bench: GroupBench, dev: torch.device, where: str, check: Callable[[], None],
                    prog: _Progress) -> tuple[OpRows, list[int]]:
    """Time the ops of ``bench``'s shape group at each of its micro-batch sizes: ``(rows, the
    micro-batch sizes timed)``; a size that runs out of device memory is skipped (and
    reported). One progress step per size."""
    g = bench.group
    new: OpRows = {}
    fitted_b = []
    for b in g.b:
        try:
            for op, t in bench.time_ops(b, check).items():
                new.setdefault(op, {})[tuple(g.key(b)[c] for c in OP_KEYS[op])] = t
            fitted_b.append(b)
            note = ""
        except _OOM_ERRORS as exc:
            if not _is_oom(exc):
                raise
            _free(dev)
            note = " skipped: out of device memory"
        prog.done += 1
        prog.report(f"{where} {g.label()}: b={b}{note}")
    return new, fitted_b


def _group_kernels(bench: GroupBench, b: int, dev: torch.device, check: Callable[[], None]
                   ) -> dict[str, list]:
    """Per-kernel breakdowns (:func:`kernel_breakdown`, the top 12) of ``bench``'s ops at
    micro-batch ``b``, keyed ``"<op> <group label> b=<b>"``; a backward's is net of its
    forward's kernels."""
    new_kernels = {}
    forward: list[list] = []
    with torch.enable_grad():
        for op, (fn, setup) in bench.callables(b).items():
            check()
            # callables come in fwd, bwd pairs; a bwd's setup is that fwd
            full = kernel_breakdown(fn, setup, dev, top=None,
                                    minus=forward if setup is not None else None)
            forward = full if setup is None else []
            new_kernels[f"{op} {bench.group.label()} b={b}"] = full[:12]
    return new_kernels


def _time_group_optimizer(bench: GroupBench, dev: torch.device, where: str,
                          check: Callable[[], None], prog: _Progress, new: OpRows) -> None:
    """Time the optimizer step of each of the group's stage sizes into ``new``
    (:data:`OPTIMIZER_OP` rows keyed ``(parameters, dtype)``); a size that runs out of device
    memory is skipped (and reported). One progress step per size."""
    g = bench.group
    for L in g.layers:
        check()
        try:
            n, t = bench.time_optimizer(L)
            new.setdefault(OPTIMIZER_OP, {})[(n, g.dtype)] = t
            note = f"({n:,} parameters)"
        except _OOM_ERRORS as exc:
            if not _is_oom(exc):
                raise
            _free(dev)
            note = "skipped: out of device memory"
        prog.done += 1
        prog.report(f"{where}: optimizer step, {L} layers {note}")


def profile_ops(out: str | Path, device: str = "cpu", shapes: Iterable[ShapeGroup] | None = None,
                *, threads: int | None = None, progress: ProgressCallback | None = None,
                cancel: CancelToken | None = None, kernels: bool | None = None,
                merge: bool = True, timing: dict | None = None,
                keep_memory: bool = True) -> ProfileRunResult:
    """Profile the ops of ``shapes`` on ``device`` into the store file ``out``.

    Parameters
    ----------
    out : str or Path
        Store file (HDF5). Rewritten atomically after the device probe and after
        every finished shape group.
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    shapes : iterable of ShapeGroup, optional
        Default :func:`~core.profiling.shapes.default_shapes` of the device type.
    threads : int, optional
        CPU intra-op threads (``torch.set_num_threads``); default: torch's current
        setting. Recorded in the provenance; pin the same number when training.
    progress : callable, optional
        Called with a :class:`ProfileProgress` after every step, on this thread.
    cancel : object with ``is_set()``, optional
        Checked before every measurement; when set the run stops, discards the
        unfinished group and returns with ``cancelled=True``.
    kernels : bool, optional
        Record a per-kernel breakdown (torch.profiler) of each op at the group's
        largest micro-batch in the provenance (``kernels``). Default: on CUDA only.
    merge : bool
        If ``out`` already holds a store of the same device, keep its rows (new
        measurements replace equal keys) and its collective curves.
    keep_memory : bool
        On a CPU, call :func:`~core.profiling.device.keep_freed_memory` first
        (for the rest of the process; recorded in the provenance as
        ``cpu_allocator``), so op times do not include page faults that an op
        timed alone pays and the same op inside a model mostly does not.
    timing : dict, optional
        :func:`~core.profiling.device.time_fn` keyword arguments (``warmup``,
        ``min_repeats``, ``max_repeats``, ``target_s``, ``clock``), and
        ``statistic`` (``"median"``, the default, or ``"min"``) of the repetitions.

    Returns
    -------
    ProfileRunResult

    Raises
    ------
    ValueError
        Bad device, or ``out`` holds a store of another device while ``merge``.
    KeyboardInterrupt
        Propagated; the file holds the groups finished before it.
    """
    t_start = time.perf_counter()
    out = Path(out)
    dev = parse_device(device)
    allocator = _set_up_device(dev, threads, keep_memory)
    groups = list(shapes) if shapes is not None else default_shapes(dev.type)
    kernels = (dev.type == "cuda") if kernels is None else kernels
    prog = _Progress(progress, 1 + sum(len(g.b) + len(g.layers) for g in groups))

    def check() -> None:
        if cancel is not None and cancel.is_set():
            raise _Cancelled

    prog.report(f"probing {dev}")
    previous = None
    if out.exists() and merge:
        previous = ProfileStore.open(out)
    dtypes = tuple(sorted({g.dtype for g in groups}))
    info = probe_device(dev, dtypes)
    _check_previous(previous, out, dev, info)
    rows = _rows_from_store(previous) if previous is not None else {}
    shapes_done = list(previous.provenance.get("shapes", [])) if previous is not None else []
    kernel_info: dict[str, Any] = (dict(previous.provenance.get("kernels", {}))
                                   if previous is not None else {})
    if previous is not None:
        info.peak_flops = {**previous.peak_flops, **info.peak_flops}
    provenance = _provenance(dev, info, timing, allocator)

    def save() -> ProfileStore:
        op_model, rms = fit_op_model(rows, info.peak_flops, info.memory_bandwidth_bytes_per_s,
                                     info.kernel_overhead_s)
        prov = dict(provenance, shapes=shapes_done,
                    op_model_source=("fitted to this store's forward/backward rows (grid search, "
                                     f"rms log error {rms:.3f})" if rms is not None else
                                     "defaults with the measured per-op overhead"))
        if kernel_info:
            prov["kernels"] = kernel_info
        store = _make_store(info, prov, rows, op_model, previous)
        store.save(out)
        return store

    prog.done += 1
    store = save()
    prog.report(f"{info.name}: peak {info.peak_flops.get('fp32', 0) / 1e9:,.0f} GFLOP/s fp32, "
                f"{info.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s")
    cancelled, groups_done = False, 0
    try:
        for gi, g in enumerate(groups):
            check()
            where = f"group {gi + 1}/{len(groups)}"
            bench = GroupBench(g, dev, timing)
            new, fitted_b = _time_group_ops(bench, dev, where, check, prog)
            new_kernels = (_group_kernels(bench, fitted_b[-1], dev, check)
                           if kernels and fitted_b else {})
            _time_group_optimizer(bench, dev, where, check, prog, new)
            del bench
            for op, r in new.items():
                rows.setdefault(op, {}).update(r)
            kernel_info.update(new_kernels)
            shapes_done.append(g.to_dict())
            store = save()
            groups_done += 1
            prog.saved = groups_done
            prog.report(f"saved {out} ({groups_done}/{len(groups)} shape groups)")
    except _Cancelled:
        cancelled = True
        prog.report(f"cancelled; {out} holds {groups_done}/{len(groups)} shape groups")
    return ProfileRunResult(out, store, groups_done, len(groups), cancelled,
                            time.perf_counter() - t_start)
