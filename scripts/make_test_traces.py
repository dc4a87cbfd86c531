"""Regenerate the PyTorch profiler traces under tests/data/traces/ (needs torch; CPU only).

    python scripts/make_test_traces.py [--out tests/data/traces]

Writes, from a tiny GPT-like layer stack (pre-norm attention and MLP blocks, AdamW) trained
for a few steps on the CPU under ``torch.profiler`` with ``record_function`` ranges:

* ``cpu_1rank.json``: one rank; its gradients all-reduced over a gloo group of one (so the
  trace holds ``gloo:all_reduce`` ranges); ``ProfilerStep#1`` to ``#3``, the last one
  opened by the final ``prof.step()`` and holding no work;
* ``cpu_p2_rank0.json.gz``, ``cpu_p2_rank1.json.gz``: two ranks (steps as above) of a two-stage pipeline (two
  processes, gloo), GPipe order with two micro-batches: rank 0 runs the first half of the
  layers and sends activations (``gloo:send``), rank 1 the second half and the loss and sends
  the gradients back (``gloo:recv`` on rank 0);

and ``README.md`` beside them with torch's version and the date. Flow events ("ph" "s"/"f")
and each event's ``Ev Idx`` argument are dropped to keep the files small; nothing else is
changed. Tests read these files and never need torch.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

H, A, S, B = 32, 4, 16, 2
#: One warm-up step, then steps 1 and 2 recorded; the loops run three iterations, so the range
#: ProfilerStep#3 that the last ``prof.step()`` opens is closed when the profiler stops, empty.
_SCHEDULE = schedule(wait=0, warmup=1, active=3, repeat=1)


class Block(nn.Module):
    """A pre-norm transformer layer: attention (scaled_dot_product_attention) and a GELU MLP."""

    def __init__(self):
        super().__init__()
        self.ln1, self.qkv, self.proj = nn.LayerNorm(H), nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(H), nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, A, h // A).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def _slim(src: Path, dst: Path) -> None:
    doc = json.loads(src.read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") not in ("s", "f")]
    for e in events:
        if isinstance(e.get("args"), dict):
            e["args"].pop("Ev Idx", None)
    doc["traceEvents"] = events
    text = json.dumps(doc, separators=(",", ":"))
    if dst.suffix == ".gz":
        with gzip.open(dst, "wt", encoding="utf-8", compresslevel=9) as fh:
            fh.write(text)
    else:
        dst.write_text(text)


def one_rank(out: Path, tmp: Path) -> None:
    """Three profiler steps of one rank, data-parallel all-reduce over a group of one."""
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"file://{tmp}/pg1")
    model = Block()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(B, S, H)
    with profile(activities=[ProfilerActivity.CPU], schedule=_SCHEDULE,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(tmp / "one.json"))) as prof:
        for _ in range(3):
            with record_function("forward"):
                loss = model(x).pow(2).mean()
            with record_function("backward"):
                loss.backward()
            with record_function("grad_all_reduce"):
                for p in model.parameters():
                    dist.all_reduce(p.grad)
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()
    dist.destroy_process_group()
    _slim(tmp / "one.json", out / "cpu_1rank.json")


def _stage(rank: int, tmp: str, out: str) -> None:
    torch.set_num_threads(1)  # a spawned process does not inherit the parent's setting
    torch.manual_seed(rank)
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"file://{tmp}/pg2")
    model = Block()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    m = 2  # micro-batches
    path = f"{tmp}/p2_rank{rank}.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=_SCHEDULE,
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(3):
            acts = []
            for mb in range(m):
                with record_function(f"forward mb{mb}"):
                    if rank == 0:
                        y = model(torch.randn(B, S, H))
                        dist.send(y.detach(), 1)
                    else:
                        x = torch.empty(B, S, H)
                        dist.recv(x, 0)
                        x.requires_grad_(True)
                        y = model(x).pow(2).mean()
                    acts.append((x if rank == 1 else None, y))
            for mb in range(m):
                with record_function(f"backward mb{mb}"):
                    x, y = acts[mb]
                    if rank == 1:
                        y.backward()
                        dist.send(x.grad, 0)
                    else:
                        g = torch.empty(B, S, H)
                        dist.recv(g, 1)
                        y.backward(g)
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()
    dist.destroy_process_group()
    _slim(Path(tmp) / f"p2_rank{rank}.json", Path(out) / f"cpu_p2_rank{rank}.json.gz")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "data"
                                         / "traces"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        one_rank(out, Path(tmp))
        mp.spawn(_stage, args=(tmp, str(out)), nprocs=2, join=True)
    today = datetime.date.today().isoformat()
    (out / "README.md").write_text(
        "# PyTorch profiler traces for tests/test_trace_import.py\n\n"
        f"Written by `python scripts/make_test_traces.py` on {today} with torch "
        f"{torch.__version__} (Python {sys.version.split()[0]}, CPU only, gloo): see the "
        "script's docstring for what each file holds. Flow events and the `Ev Idx` argument "
        "are dropped; nothing else is changed. The times are whatever this machine took: "
        "tests compare the reader with sums computed from the files themselves, never with "
        "fixed numbers.\n\n"
        "* `cpu_1rank.json`: one rank, steps 1 and 2 (step 3 holds no work)\n"
        "* `cpu_p2_rank0.json.gz`, `cpu_p2_rank1.json.gz`: a two-stage pipeline (gloo send/recv)\n")
    os.sync()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
