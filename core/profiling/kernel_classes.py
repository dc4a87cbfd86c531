"""Measure each kernel class of the op model on this device: dense GEMMs by shape and layout,
FP8 GEMMs by scaling recipe, TF32 and fp32 GEMMs, fused attention forward and backward by
sequence length, head size and causal masking, grouped expert GEMMs, element-wise and norm
kernels.

The op model (:mod:`core.model.ops`) gives each of these classes an efficiency of its own;
end-to-end iteration times cannot tell them apart (docs/accuracy.md, "Kernel classes"). These
microbenchmarks can: each point is one kernel (or one fused call) timed alone, with its FLOPs
and bytes counted the way the op model counts them, so :mod:`core.accuracy.kernel_fit` fits
each class's parameters on its own points.

Timing: ``warmup`` untimed calls, then ``rounds`` rounds of ``calls`` back-to-back calls
between two CUDA events (nccl-tests' and ``triton.testing.do_bench``'s practice: launch
overhead is hidden behind the previous kernel, as in a training step); a point's time is the
median round divided by ``calls``. Inputs are random normal (zeros run faster: the tensor
cores' power draw depends on the data, KINDS.md records 788 against 894 TFLOP/s on H200).

This file imports torch and the standard library only, so that it runs as a script on a
machine with torch and nothing of vtrain installed::

    python3 core/profiling/kernel_classes.py --out kernels.json

Output: one JSON document, ``{"format": "vtrain-kernel-classes", "version": 1,
"provenance": {...}, "points": [...]}``; each point has ``class``, its shape fields, ``flops``,
``bytes`` and ``seconds`` (or ``error`` when the kernel is not available here, e.g. FP8 on a
GPU without FP8 tensor cores).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

FORMAT, VERSION = "vtrain-kernel-classes", 1

def gemm_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """Dense GEMM shapes ``(M, N, K)`` measured (a few in ``quick`` mode), in nn.Linear's
    layout: tokens ``M`` (micro-batch times sequence length, 2048 and 8192), output features
    ``N``, input features ``K``. The (N, K) pairs are one tensor-parallel rank's linear layers
    of Llama 3 8B / 70B / 405B (h 4096 / 8192 / 16384, 8 KV heads of 128, SwiGLU f 14336 /
    28672 / 53248) at t = 1, 2, 4, 8; square sizes from 256 give the roll-off at small sizes."""
    if quick:
        return [(64, 64, 64), (128, 96, 64)]
    shapes: set[tuple[int, int, int]] = set()
    for n in (256, 512, 1024, 2048, 4096, 8192):
        shapes.add((n, n, n))
    layers = []
    for h, q_kv, f in ((4096, 4096 + 2 * 1024, 14336), (8192, 8192 + 2 * 1024, 28672),
                       (16384, 16384 + 2 * 1024, 53248)):
        layers.append((q_kv, h))      # QKV (column-parallel)
        layers.append((h, h))         # attention projection (row-parallel; K = h / t)
        layers.append((2 * f, h))     # SwiGLU fc1 (gate and up, column-parallel)
        layers.append((h, f))         # fc2 (row-parallel; K = f / t)
    for m in (2048, 8192):
        for t in (1, 2, 4, 8):
            for i, (n, k) in enumerate(layers):
                row_parallel = i % 4 in (1, 3)
                shapes.add((m, n, k // t) if row_parallel else (m, n // t, k))
    return sorted(shapes)


def attention_shapes(quick: bool) -> list[dict[str, int]]:
    """Fused attention points: ``b`` micro-batch, ``s`` sequence, ``hq`` query heads, ``hkv`` KV
    heads, ``d`` head size, ``causal`` 0/1."""
    if quick:
        return [dict(b=1, s=128, hq=4, hkv=2, d=32, causal=1)]
    out = []
    for s in (1024, 2048, 4096, 8192, 16384, 32768):
        b = max(1, 16384 // s)
        for d in (64, 128):
            for causal in (1, 0):
                if causal == 0 and d == 64:
                    continue
                out.append(dict(b=b, s=s, hq=32 if d == 128 else 64, hkv=8, d=d, causal=causal))
        out.append(dict(b=b, s=s, hq=8, hkv=1, d=128, causal=1))  # 64 heads at t = 8
    return out


def grouped_shapes(quick: bool) -> list[dict[str, int]]:
    """Grouped expert GEMM points: ``e`` local experts, ``m`` tokens per expert, ``n`` output
    and ``k`` input features of each expert's weight (the routed experts' fc1 of Qwen3-30B-A3B,
    h 2048, expert f 768; of DeepSeek-V3, h 7168, expert f 2048; of Mixtral 8x7B, h 4096,
    f 14336)."""
    if quick:
        return [dict(e=2, m=32, n=64, k=32)]
    out = []
    for e, n, k in ((16, 2 * 768, 2048), (8, 2 * 2048, 7168), (4, 2 * 14336, 4096)):
        for m in (128, 512, 2048, 8192):
            out.append(dict(e=e, m=m, n=n, k=k))
            out.append(dict(e=e, m=m, n=k, k=n // 2))  # fc2
    return out


def memory_shapes(quick: bool) -> list[dict[str, int]]:
    """Element-wise and norm points: ``tokens`` rows of ``h`` columns."""
    if quick:
        return [dict(tokens=64, h=128)]
    return [dict(tokens=tok, h=h) for tok in (4096, 16384) for h in (4096, 8192, 16384)]


def cuda_available() -> bool:
    """Whether torch sees a CUDA device here (``vtrain profile kernels`` asks before choosing
    its default device; the command line itself never imports torch)."""
    return bool(torch.cuda.is_available())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[], Any], device: torch.device, calls: int = 10, rounds: int = 5,
               warmup: int = 3) -> float:
    """Seconds per call of ``fn``: the median of ``rounds`` rounds of ``calls`` back-to-back calls
    (CUDA events on a GPU, :func:`time.perf_counter` on a CPU), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def _calls_for(seconds_guess: float) -> int:
    """Back-to-back calls per round for about 20 ms a round (2 .. 200)."""
    return int(min(200, max(2, 0.02 / max(seconds_guess, 1e-7))))


#: ``time.perf_counter()`` after which points are skipped (``--budget-s``; None: no limit).
_DEADLINE: list[float | None] = [None]


def _point(cls: str, fields: dict[str, Any], flops: float, nbytes: float,
           run: Callable[[], float]) -> dict[str, Any]:
    out = {"class": cls, **fields, "flops": float(flops), "bytes": float(nbytes)}
    if _DEADLINE[0] is not None and time.perf_counter() > _DEADLINE[0]:
        out["error"] = "skipped: the run's time budget (--budget-s) was spent"
        return out
    try:
        out["seconds"] = run()
    except Exception as exc:  # a kernel this device or torch build lacks: named, not fatal
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    return out


def _timed(fn: Callable[[], Any], device: torch.device) -> float:
    guess = time_calls(fn, device, calls=1, rounds=1, warmup=1)
    return time_calls(fn, device, calls=_calls_for(guess))


def _backward_seconds(fn: Callable[[], torch.Tensor], inputs: tuple[torch.Tensor, ...],
                      device: torch.device) -> float:
    """Seconds of the backward of ``fn()`` with respect to ``inputs``: one untimed forward whose
    graph is kept, then each timed call runs the backward alone with a fixed random gradient."""
    out = fn()
    grad = torch.randn_like(out)
    return _timed(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True), device)


def measure_gemms(device: torch.device, quick: bool, log: Callable[[str], None]) -> list[dict]:
    """Dense BF16 GEMMs in nn.Linear's three layouts (forward ``x W^T``, data gradient
    ``dy W``, weight gradient ``dy^T x``), TF32 and fp32 on square shapes, FP8 (e4m3) with
    tensor-wise and row-wise scales via ``torch._scaled_mm``."""
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    points = []
    for m, n, k in gemm_shapes(quick):
        x = torch.randn(m, k, device=device, dtype=dt)
        w = torch.randn(n, k, device=device, dtype=dt)
        dy = torch.randn(m, n, device=device, dtype=dt)
        flops = 2.0 * m * n * k
        size = 2 * (m * k + n * k + m * n)
        for layout, fn in (("fprop", lambda: F.linear(x, w)), ("dgrad", lambda: dy @ w),
                           ("wgrad", lambda: dy.t() @ x)):
            points.append(_point("gemm", dict(dtype="bf16", layout=layout, m=m, n=n, k=k),
                                 flops, size, lambda fn=fn: _timed(fn, device)))
    log(f"gemm: {len(points)} points")
    square = [(n, n, n) for n in (1024, 4096, 8192)] if not quick else [(64, 64, 64)]
    for m, n, k in square:
        a = torch.randn(m, k, device=device, dtype=torch.float32)
        b = torch.randn(n, k, device=device, dtype=torch.float32)
        for name, allow in (("tf32", True), ("fp32", False)):
            def run(a=a, b=b, allow=allow) -> float:
                old = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = allow
                try:
                    return _timed(lambda: F.linear(a, b), device)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = old
            points.append(_point("gemm", dict(dtype=name, layout="fprop", m=m, n=n, k=k),
                                 2.0 * m * n * k, 4 * (m * k + n * k + m * n), run))
    fp8_shapes = [s for s in gemm_shapes(quick) if s[0] == 8192 or quick]
    for m, n, k in fp8_shapes:
        for recipe in ("tensorwise", "rowwise"):
            def run(m=m, n=n, k=k, recipe=recipe) -> float:
                a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major
                if recipe == "tensorwise":
                    sa = torch.tensor(1.0, device=device)
                    sb = torch.tensor(1.0, device=device)
                else:
                    sa = torch.ones(m, 1, device=device)
                    sb = torch.ones(1, n, device=device)
                return _timed(lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb,
                                                       out_dtype=torch.bfloat16), device)
            points.append(_point("gemm", dict(dtype="fp8", recipe=recipe, layout="fprop",
                                              m=m, n=n, k=k),
                                 2.0 * m * n * k, m * k + n * k + 2 * m * n, run))
    log(f"gemm with tf32, fp32, fp8: {len(points)} points")
    return points


def measure_attention(device: torch.device, quick: bool, log: Callable[[str], None]) -> list[dict]:
    """Fused attention (``F.scaled_dot_product_attention``) forward and backward with each
    backend torch has here (FlashAttention-2 and cuDNN on Hopper), ``(b, h, s, d)`` bf16.
    FLOPs as FlashAttention's papers count them: forward ``4 b hq s^2 d`` (halved with causal
    masking), backward 2.5 times that."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if device.type != "cuda":
        backends = [("math", SDPBackend.MATH)]
    points = []
    for p in attention_shapes(quick):
        b, s, hq, hkv, d, causal = (p[k] for k in ("b", "s", "hq", "hkv", "d", "causal"))
        fwd_flops = 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
        nbytes = 2.0 * b * s * d * (2 * hq + 2 * hkv)
        for name, backend in backends:
            q = torch.randn(b, hq, s, d, device=device, dtype=dt, requires_grad=True)
            kk = torch.randn(b, hkv, s, d, device=device, dtype=dt, requires_grad=True)
            v = torch.randn(b, hkv, s, d, device=device, dtype=dt, requires_grad=True)

            def fwd(q=q, kk=kk, v=v, backend=backend, causal=causal, gqa=hq != hkv):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, kk, v, is_causal=bool(causal),
                                                          enable_gqa=gqa)

            def run_fwd(fwd=fwd) -> float:
                with torch.no_grad():
                    return _timed(fwd, device)

            def run_bwd(fwd=fwd, inputs=(q, kk, v)) -> float:
                return _backward_seconds(fwd, inputs, device)
            fields = dict(backend=name, **p)
            points.append(_point("attention_fwd", fields, fwd_flops, nbytes, run_fwd))
            points.append(_point("attention_bwd", fields, 2.5 * fwd_flops, 2 * nbytes, run_bwd))
    log(f"attention: {len(points)} points")
    return points


def measure_grouped(device: torch.device, quick: bool, log: Callable[[str], None]) -> list[dict]:
    """Grouped expert GEMMs (``torch._grouped_mm``, the kernel torchtitan's MoE runs; Megatron's
    ``TEGroupedMLP`` runs Transformer Engine's cuBLAS grouped GEMM): ``e`` experts of ``m``
    tokens each, bf16."""
    dt = torch.bfloat16
    points = []
    for p in grouped_shapes(quick):
        e, m, n, k = p["e"], p["m"], p["n"], p["k"]

        def run(e=e, m=m, n=n, k=k) -> float:
            x = torch.randn(e * m, k, device=device, dtype=dt)
            w = torch.randn(e, n, k, device=device, dtype=dt).transpose(-2, -1)
            offs = torch.arange(m, e * m + 1, m, device=device, dtype=torch.int32)
            return _timed(lambda: torch._grouped_mm(x, w, offs=offs), device)
        points.append(_point("grouped_gemm", dict(dtype="bf16", **p), 2.0 * e * m * n * k,
                             2.0 * (e * m * k + e * n * k + e * m * n), run))
    log(f"grouped gemm: {len(points)} points")
    return points


def measure_memory_bound(device: torch.device, quick: bool, log: Callable[[str], None]
                         ) -> list[dict]:
    """Element-wise and norm kernels on ``(tokens, h)`` bf16, bytes as passes over the tensor:
    copy (read, write: 2), add (2 reads, 1 write: 3), SwiGLU's ``silu(a) * b`` run eagerly (two
    kernels, silu 2 and mul 3: 5), ``F.rms_norm`` and ``F.layer_norm`` forward (read, write: 2;
    the weights and statistics are negligible)."""
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    es = torch.tensor([], dtype=dt).element_size()
    points = []
    for p in memory_shapes(quick):
        n = p["tokens"] * p["h"]
        a = torch.randn(p["tokens"], p["h"], device=device, dtype=dt)
        b = torch.randn_like(a)
        out = torch.empty_like(a)
        w = torch.ones(p["h"], device=device, dtype=dt)
        kernels = (
            ("copy", 2, lambda: out.copy_(a)),
            ("add", 3, lambda: torch.add(a, b, out=out)),
            ("swiglu_eager", 5, lambda: F.silu(a) * b),  # two kernels: silu (2), mul (3)
            ("rms_norm", 2, lambda: F.rms_norm(a, (p["h"],), w)),
            ("layer_norm", 2, lambda: F.layer_norm(a, (p["h"],), w)),
        )
        for name, passes, fn in kernels:
            points.append(_point("memory", dict(kernel=name, dtype=str(dt).split(".")[-1], **p),
                                 0.0, float(passes * n * es),
                                 lambda fn=fn: _timed(fn, device)))
    log(f"memory-bound: {len(points)} points")
    return points


#: Llama layers measured whole (``layer`` class): (preset name in :data:`core.plan.presets.MODEL_PRESETS`,
#: h, a, g, f, tensor-parallel sizes, (b, s) pairs).
LAYER_MODELS = (
    ("Llama 3 8B", 4096, 32, 8, 14336, (1, 2, 4, 8), ((1, 8192), (2, 4096))),
    ("Llama 3 70B", 8192, 64, 8, 28672, (2, 4, 8), ((1, 8192),)),
    ("Llama 2 7B", 4096, 32, 32, 11008, (1,), ((2, 4096),)),
)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as Megatron-Core's unfused ``apply_rotary_pos_emb``: ``x cos +
    rotate_half(x) sin`` on ``(s, b, heads, d)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _rope_tables(s: int, d: int, device: torch.device, dt: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the rotary angles, shape ``(s, 1, 1, d)`` (base 10,000)."""
    pos = torch.arange(s, device=device, dtype=torch.float32)[:, None]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    ang = torch.cat((pos * inv, pos * inv), dim=-1)[:, None, None, :]
    return ang.cos().to(dt), ang.sin().to(dt)


def _attention_op(x: torch.Tensor, n1: torch.Tensor, w_qkv: torch.Tensor, w_proj: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, heads: int, groups: int, d: int
                  ) -> torch.Tensor:
    """The attention op on ``(s, b, h)``: RMSNorm, QKV GEMM, rotary embedding on Q and K, causal
    grouped-query attention (cuDNN on a GPU, on ``(b, heads, s, d)`` copies), projection GEMM;
    ``heads`` and ``groups`` the rank's query heads and KV heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    s, b, h = x.shape
    q, k, v = F.linear(F.rms_norm(x, (h,), n1), w_qkv).split(
        [heads * d, groups * d, groups * d], dim=-1)
    q = _rope(q.view(s, b, heads, d), cos, sin)
    k = _rope(k.view(s, b, groups, d), cos, sin)
    backend = SDPBackend.CUDNN_ATTENTION if x.is_cuda else SDPBackend.MATH
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(
            *(z.permute(1, 2, 0, 3).contiguous() for z in (q, k, v.view(s, b, groups, d))),
            is_causal=True, enable_gqa=heads != groups)
    return F.linear(o.permute(2, 0, 1, 3).reshape(s, b, heads * d), w_proj)


def _mlp_op(r: torch.Tensor, n2: torch.Tensor, w_fc1: torch.Tensor, w_fc2: torch.Tensor
            ) -> torch.Tensor:
    """The MLP op's layers on the residual stream ``r``: RMSNorm, fc1 of gate and up, SiLU
    times up, fc2 (the residual add is the caller's)."""
    gate, up = F.linear(F.rms_norm(r, (r.shape[-1],), n2), w_fc1).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_fc2)


def measure_layers(device: torch.device, quick: bool, log: Callable[[str], None]) -> list[dict]:
    """One tensor-parallel rank's share of a Llama layer run eagerly in Megatron's ``(s, b, h)``
    layout, as the op model splits it (:func:`core.model.kernels.op_kernels`): the attention op
    (RMSNorm, QKV GEMM, rotary embedding on Q and K, causal grouped-query attention through
    cuDNN on ``(b, heads, s, d)`` copies, projection GEMM) and the MLP op (residual add, RMSNorm, fc1 of gate and up, SiLU
    times up, fc2, residual add), forward and backward (the backward of an untimed forward,
    the graph kept). No tensor-parallel communication: the graph inserts it. bf16."""
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    models = LAYER_MODELS if not quick else (("tiny", 64, 4, 2, 128, (1,), ((1, 32),)),)
    points = []
    for name, h, a, g, f, tps, bss in models:
        d = h // a
        for t in tps:
            for b, s in bss:
                ha, hg, ft = a // t, max(1, g // t), f // t

                def weights(*shape):
                    return (torch.randn(*shape, device=device, dtype=dt) * 0.02).requires_grad_()
                w_qkv, w_proj = weights((ha + 2 * hg) * d, h), weights(h, ha * d)
                w_fc1, w_fc2 = weights(2 * ft, h), weights(h, ft)
                n1 = torch.ones(h, device=device, dtype=dt, requires_grad=True)
                n2 = torch.ones(h, device=device, dtype=dt, requires_grad=True)
                cos, sin = _rope_tables(s, d, device, dt)
                x = torch.randn(s, b, h, device=device, dtype=dt, requires_grad=True)
                y = torch.randn(s, b, h, device=device, dtype=dt, requires_grad=True)

                def attention(x=x, n1=n1, w_qkv=w_qkv, w_proj=w_proj, cos=cos, sin=sin, ha=ha,
                              hg=hg, d=d):
                    return _attention_op(x, n1, w_qkv, w_proj, cos, sin, ha, hg, d)

                def mlp(x=x, y=y, n2=n2, w_fc1=w_fc1, w_fc2=w_fc2):
                    r = x + y  # the attention's residual add
                    return _mlp_op(r, n2, w_fc1, w_fc2) + r

                fields = dict(model=name, h=h, a=a, g=g, f=f, t=t, b=b, s=s, dtype="bf16")
                for part, fn, inputs in (("attention", attention, (x, n1, w_qkv, w_proj)),
                                         ("mlp", mlp, (x, y, n2, w_fc1, w_fc2))):
                    def run_fwd(fn=fn) -> float:
                        with torch.enable_grad():
                            return _timed(fn, device)

                    def run_bwd(fn=fn, inputs=inputs) -> float:
                        return _backward_seconds(fn, inputs, device)
                    points.append(_point("layer", dict(op=f"{part}_fwd", **fields), 0.0, 0.0, run_fwd))
                    points.append(_point("layer", dict(op=f"{part}_bwd", **fields), 0.0, 0.0, run_bwd))
    log(f"layers: {len(points)} points")
    return points


#: Whole models timed one step (``step`` class): (name, h, a, g, f, vocabulary, layer counts,
#: (b, s)); two layer counts separate the per-layer time from the fixed part (embedding,
#: output layer, loss).
STEP_MODELS = (("Llama 3 8B", 4096, 32, 8, 14336, 128256, (8, 32), (1, 8192)),)


def measure_steps(device: torch.device, quick: bool, log: Callable[[str], None]) -> list[dict]:
    """One GPU's training step of a whole Llama model (no parallelism: t = p = d = 1):
    embedding, ``layers`` times the attention and MLP ops of :func:`measure_layers`, final
    RMSNorm, the untied output GEMM and the cross-entropy in fp32; ``forward`` (autograd on) and
    ``forward_backward`` (gradients set to None first, as a step with gradient-accumulation
    fusion writes them once). No optimizer step. bf16. Each model eagerly (``compile`` 0) and
    with each layer and the loss compiled by ``torch.compile`` (``compile`` 1: torchtitan's
    per-block compilation, which fuses the element-wise work around the GEMMs and the
    attention kernel); a compilation torch cannot do here is kept as the point's error."""
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    models = STEP_MODELS if not quick else (("tiny", 64, 4, 2, 128, 256, (1, 2), (1, 32)),)
    points = []
    for name, h, a, g, f, vocab, layer_counts, (b, s) in models:
        d = h // a

        def weights(*shape):
            return (torch.randn(*shape, device=device, dtype=dt) * 0.02).requires_grad_()
        cos, sin = _rope_tables(s, d, device, dt)
        ids = torch.randint(0, vocab, (s, b), device=device)
        targets = torch.randint(0, vocab, (s * b,), device=device)
        def block(x, n1, w_qkv, w_proj, n2, w_fc1, w_fc2, cos=cos, sin=sin, a=a, g=g, d=d):
            x = x + _attention_op(x, n1, w_qkv, w_proj, cos, sin, a, g, d)
            return x + _mlp_op(x, n2, w_fc1, w_fc2)

        def loss(x, n_final, w_out, targets=targets, h=h, vocab=vocab):
            logits = F.linear(F.rms_norm(x, (h,), n_final), w_out)
            return F.cross_entropy(logits.float().view(-1, vocab), targets)

        for compiled in ((0,) if quick else (0, 1)):  # quick: no compilation (minutes on a CPU)
            run_block, run_loss = ((torch.compile(block), torch.compile(loss)) if compiled
                                   else (block, loss))
            for n_layers in layer_counts:
                emb, w_out, n_final = weights(vocab, h), weights(vocab, h), weights(h)
                layers = [(weights(h), weights((a + 2 * g) * d, h), weights(h, a * d), weights(h),
                           weights(2 * f, h), weights(h, f)) for _ in range(n_layers)]
                params = [emb, w_out, n_final, *(w for layer in layers for w in layer)]

                def forward(layers=layers, emb=emb, w_out=w_out, n_final=n_final,
                            run_block=run_block, run_loss=run_loss):
                    x = F.embedding(ids, emb)
                    for ws in layers:
                        x = run_block(x, *ws)
                    return run_loss(x, n_final, w_out)

                def step(forward=forward, params=params):
                    for w in params:
                        w.grad = None
                    forward().backward()

                fields = dict(model=name, h=h, a=a, g=g, f=f, V=vocab, layers=n_layers, t=1, b=b,
                              s=s, dtype="bf16", compile=compiled)
                points.append(_point("step", dict(op="forward", **fields), 0.0, 0.0,
                                     lambda forward=forward: _timed(forward, device)))
                points.append(_point("step", dict(op="forward_backward", **fields), 0.0, 0.0,
                                     lambda step=step: _timed(step, device)))
                log(f"step {name} L={n_layers} compile={compiled}: " + ", ".join(
                    f"{p['op']} {p.get('seconds', float('nan')):.4f} s" for p in points[-2:]))
    return points


def _nvidia_smi(query: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable ({type(exc).__name__})"


def provenance(device: torch.device) -> dict[str, Any]:
    """What was measured where: date, host, torch, CUDA, cuDNN, the GPU and its clocks."""
    out: dict[str, Any] = {
        "measured_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(),
        "torch": torch.__version__, "device": str(device),
        "method": ("each point: median of 5 rounds of back-to-back calls between CUDA events "
                   "(about 20 ms a round) after 3 warm-up calls; random normal inputs"),
        "tool": "core/profiling/kernel_classes.py",
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update({
            "gpu": props.name, "multiprocessors": props.multi_processor_count,
            "memory_bytes": props.total_memory, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "nvidia_smi": _nvidia_smi("name,driver_version,power.limit,clocks.max.sm,"
                                      "clocks.max.mem"),
        })
    return out


def measure(device: torch.device, quick: bool = False, classes: tuple[str, ...] = (
        "gemm", "attention", "grouped_gemm", "memory", "layer"), log: Callable[[str], None] = print
            ) -> dict[str, Any]:
    """Every point of the classes named; a JSON-able document (module doc)."""
    torch.manual_seed(0)
    doc = {"format": FORMAT, "version": VERSION, "provenance": provenance(device), "points": []}
    steps = {"memory": measure_memory_bound, "gemm": measure_gemms,
             "attention": measure_attention, "grouped_gemm": measure_grouped,
             "layer": measure_layers, "step": measure_steps}
    t0 = time.perf_counter()
    for name in classes:
        try:
            doc["points"] += steps[name](device, quick, log)
        except Exception as exc:  # one class failing keeps the others' points
            doc.setdefault("class_errors", {})[name] = f"{type(exc).__name__}: {exc}"[:500]
            log(f"{name}: failed: {exc}")
        log(f"{name} done at {time.perf_counter() - t0:.0f} s")
    if device.type == "cuda":
        doc["provenance"]["clocks_after"] = _nvidia_smi("clocks.sm,clocks.mem,temperature.gpu,"
                                                        "power.draw")
    doc["provenance"]["seconds"] = round(time.perf_counter() - t0, 1)
    return doc


#: The classes ``--classes`` names (:func:`measure`'s steps); all but ``step`` by default (a
#: whole Llama 3 8B needs about 80 GB of GPU memory).
CLASSES = ("memory", "gemm", "attention", "grouped_gemm", "layer", "step")
DEFAULT_CLASSES = CLASSES[:-1]


def device_of(text: str) -> torch.device:
    """The torch device ``--device`` names (``cpu``, ``cuda``, ``cuda:N``).

    Raises
    ------
    ValueError
        Not a device name, a CUDA device where torch has none, or an index past the last GPU.
    """
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"--device {text!r}: must be cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {text!r}: must be cpu, cuda or cuda:N")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"--device {text!r}: torch here has no CUDA device "
                             f"(torch {torch.__version__}); use --device cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {text!r}: there are {count} CUDA devices "
                             f"(cuda:0 to cuda:{count - 1})")
    return device


def check_out(path: str) -> None:
    """Refuse, before anything is measured, an ``--out`` that could not be written at the end:
    a folder, or a path whose temporary file (``PATH.tmp``) cannot be made.

    Raises
    ------
    ValueError
        Naming the path and why.
    """
    if not path or os.path.isdir(path):
        raise ValueError(f"--out {path!r}: must be a file path, not a folder")
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8"):
            pass
        os.remove(tmp)
    except OSError as exc:
        raise ValueError(f"--out {path}: cannot write {tmp} ({exc.strerror or exc})") from None


def measure_to_file(out: str, device_name: str, quick: bool = False,
                    classes: tuple[str, ...] = DEFAULT_CLASSES, budget_s: float | None = None,
                    log: Callable[[str], None] = print) -> dict[str, Any]:
    """Check the options, then :func:`measure` and write the document to ``out`` atomically
    (``OUT.tmp``, then a rename); the document is returned and a last line logged.

    Raises
    ------
    ValueError
        Before anything is measured: a bad device (:func:`device_of`), a ``budget_s`` that is
        not a finite number > 0, or an ``out`` that cannot be written (:func:`check_out`).
    """
    device = device_of(device_name)
    if budget_s is not None and not (math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"--budget-s {budget_s}: must be a finite number of seconds > 0")
    check_out(out)
    _DEADLINE[0] = None if budget_s is None else time.perf_counter() + budget_s
    doc = measure(device, quick, tuple(classes), log=log)
    tmp = f"{out}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, out)
    bad = [p for p in doc["points"] if "error" in p]
    log(f"wrote {out}: {len(doc['points'])} points, {len(bad)} with errors")
    return doc


def main(argv: list[str] | None = None) -> int:
    """``python3 core/profiling/kernel_classes.py --out FILE [--quick] [--device cpu]
    [--classes ...] [--budget-s S]``; a bad option is one line ``kernel_classes.py: error: ...``
    on stderr, exit status 2, before anything is measured."""
    ap = argparse.ArgumentParser(prog="kernel_classes.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--classes", nargs="+", default=list(DEFAULT_CLASSES), choices=CLASSES)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip the points left after this many seconds (each named)")
    args = ap.parse_args(argv)
    try:
        measure_to_file(args.out, args.device, args.quick, tuple(args.classes), args.budget_s,
                        log=lambda s: print(s, flush=True))
    except ValueError as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
