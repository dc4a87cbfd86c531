"""The local device: name, memory, measured peak FLOP/s and bandwidth, and a timer.

Timing follows the usual benchmark rules (nanoGPT, Megatron's timers): warm
up first, synchronize the device around wall-clock timing (CUDA events on a
GPU), take the median of the repetitions.
"""

from __future__ import annotations

import ctypes
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["DeviceInfo", "parse_device", "probe_device", "time_fn", "synchronize", "CLOCKS",
           "keep_freed_memory", "KEEP_MEMORY_NOTE",
           "cpu_model_name", "meminfo_total_bytes"]


def cpu_model_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def meminfo_total_bytes() -> float:
    """Physical memory in bytes from ``/proc/meminfo`` (``MemTotal``), else ``os.sysconf``."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024.0  # kB -> bytes
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


#: What :func:`keep_freed_memory` sets, for the provenance.
KEEP_MEMORY_NOTE = ("glibc malloc told to keep freed memory (mallopt M_TRIM_THRESHOLD and "
                    "M_MMAP_THRESHOLD 1 GiB), like torch's CUDA caching allocator")


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory in the process (no trimming, no ``mmap`` for
    large blocks), so CPU timings do not depend on page faults of fresh memory.

    torch's CPU allocator is plain ``malloc``: a large tensor freed and allocated
    again is returned to the kernel and faulted in anew (zeroed pages), and how
    often that happens depends on what else is alive: an op timed alone pays it
    on every call, the same op inside a model much less. A caching allocator
    (torch's on CUDA) does not. This sets ``M_TRIM_THRESHOLD`` and
    ``M_MMAP_THRESHOLD`` to 1 GiB for the rest of the process (memory is then
    not returned to the system). Use it in the profiler and in any training
    run compared with the profile.

    Returns
    -------
    bool
        True if applied (Linux with glibc), False elsewhere.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(libc.mallopt(m_trim_threshold, 1 << 30)) and bool(
        libc.mallopt(m_mmap_threshold, 1 << 30))


def parse_device(spec: str) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"`` as a :class:`torch.device`.

    Raises
    ------
    ValueError
        Another device type, CUDA not available, or no GPU ``N``.
    """
    try:
        dev = torch.device(spec)
    except RuntimeError as exc:
        raise ValueError(f"device {spec!r}: {exc}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"device {spec!r}: only cpu and cuda[:N] are supported")
    if not torch.cuda.is_available():
        raise ValueError(f"device {spec!r}: CUDA is not available in this torch build "
                         f"({torch.__version__})")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {spec!r}: only {torch.cuda.device_count()} GPU(s) visible")
    return torch.device("cuda", index)


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on ``device`` (no-op on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = ("wall", "thread")


def time_fn(fn: Callable[[Any], Any], device: torch.device, *,
            setup: Callable[[], Any] | None = None, warmup: int = 2, min_repeats: int = 3,
            max_repeats: int = 20, target_s: float = 0.25, clock: str = "wall") -> list[float]:
    """Seconds per call of ``fn(setup())``, one entry per timed repetition.

    ``setup`` (untimed, e.g. the forward whose backward is timed) runs before
    every call. After ``warmup`` untimed calls the first timed call sets the
    repetition count: enough to take about ``target_s`` seconds, clamped to
    ``[min_repeats, max_repeats]``. On CUDA each call is bracketed by CUDA
    events recorded on the current stream, and the device is synchronized
    before and after; on a CPU by :func:`time.perf_counter` (``clock="wall"``)
    or by :func:`time.thread_time` (``clock="thread"``: the CPU time of the
    calling thread, which is the wall time of single-threaded CPU work on an
    idle machine and ignores time taken by other processes on a busy one;
    only meaningful with ``torch.set_num_threads(1)``).

    Raises
    ------
    ValueError
        Unknown clock, or ``"thread"`` on a GPU.

    Returns
    -------
    list of float
        Times in seconds, length between ``min_repeats`` and ``max_repeats``.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: expected one of {CLOCKS}")
    if clock == "thread" and device.type != "cpu":
        raise ValueError("clock 'thread' times CPU work only")
    now = time.thread_time if clock == "thread" else time.perf_counter
    setup = setup or (lambda: None)
    for _ in range(warmup):
        fn(setup())
    synchronize(device)

    def once() -> float:
        arg = setup()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(arg)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3  # ms -> s
        t0 = now()
        fn(arg)
        return now() - t0

    times = [once()]
    n = int(min(max_repeats, max(min_repeats, round(target_s / max(times[0], 1e-9)))))
    times += [once() for _ in range(n - 1)]
    synchronize(device)
    return times


@dataclass
class DeviceInfo:
    """What a measured store records about the device.

    Attributes
    ----------
    name : str
        Device kind: the CPU model or the GPU name.
    type : str
        ``"cpu"`` or ``"cuda"``.
    memory_bytes : float
        Physical memory (CPU) or GPU memory, bytes.
    memory_bandwidth_bytes_per_s : float
        Measured: best of timed large copies (read + write bytes per second).
    peak_flops : dict[str, float]
        Measured: best of timed large square matmuls per dtype, FLOP/s.
    threads : int
        Intra-op threads torch used (CPU).
    kernel_overhead_s : float
        Measured time of one tiny op (dispatch or launch overhead), seconds.
    details : dict
        Matmul size, copy size, torch/CUDA versions ... for the provenance.
    """

    name: str
    type: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops: dict[str, float]
    threads: int
    kernel_overhead_s: float
    details: dict[str, Any] = field(default_factory=dict)


def _best_matmul_flops(device: torch.device, dtype: torch.dtype, n: int) -> float:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    times = time_fn(lambda _: torch.mm(a, b), device, warmup=2, min_repeats=5, max_repeats=10,
                    target_s=0.3)
    return 2.0 * n**3 / min(times)


def probe_device(device: torch.device, dtypes: tuple[str, ...] = ("fp32",)) -> DeviceInfo:
    """Measure the device: peak FLOP/s per dtype, memory bandwidth, op overhead.

    On a CPU the peak is the best of timed 2048^3 fp32 matmuls (and the given
    dtypes), the bandwidth the best of timed copies of 256 MiB, the memory
    ``MemTotal`` of ``/proc/meminfo``. On CUDA, 8192^3 matmuls (fp32 with TF32
    off; ``tf32`` with it on), 1 GiB copies and the device's total memory.
    Takes a few seconds.
    """
    from core.profiling.layers import TORCH_DTYPES

    cuda = device.type == "cuda"
    n = 8192 if cuda else 2048
    peak: dict[str, float] = {}
    wanted = tuple(dict.fromkeys(("fp32",) + tuple(dtypes) + (("tf32", "bf16") if cuda else ())))
    for dt in wanted:
        if dt == "tf32" and not cuda:
            continue
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        try:
            peak[dt] = _best_matmul_flops(device, TORCH_DTYPES.get(dt, torch.float32), n)
        except RuntimeError:  # dtype unsupported by this device's matmul
            continue
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    nbytes = (1 << 30) if cuda else (256 << 20)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    bw = 2.0 * nbytes / min(time_fn(lambda _: dst.copy_(src), device, warmup=2, min_repeats=5,
                                    max_repeats=10, target_s=0.2))
    src = dst = None  # free the buffers
    tiny = torch.zeros(1, device=device)
    if cuda:
        reps = 1000
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            tiny.add_(1.0)
        synchronize(device)
        overhead = (time.perf_counter() - t0) / reps
    else:
        overhead = statistics.median(time_fn(lambda _: tiny.add_(1.0), device, warmup=20,
                                             min_repeats=200, max_repeats=200))
    if cuda:
        props = torch.cuda.get_device_properties(device)
        name, memory = torch.cuda.get_device_name(device), float(props.total_memory)
    else:
        name, memory = cpu_model_name(), meminfo_total_bytes()
    return DeviceInfo(
        name=name, type=device.type, memory_bytes=memory, memory_bandwidth_bytes_per_s=bw,
        peak_flops=peak, threads=torch.get_num_threads(), kernel_overhead_s=overhead,
        details={"peak_flops_method": f"measured: best of timed {n}x{n}x{n} matmuls per dtype"
                                      + (" (fp32 with TF32 off)" if cuda else ""),
                 "memory_bandwidth_method": f"measured: best of timed {nbytes >> 20} MiB copies "
                                            "(read + write bytes)",
                 "memory_bytes_source": ("torch.cuda.get_device_properties" if cuda
                                         else "/proc/meminfo MemTotal (host memory)")})
