"""Context parallelism at long sequences: Llama 3 8B at s = 128K and 1M tokens, cp = 1 to 32.

Plan: t=8 with sequence parallelism, p=1, d=1, b=1, B=8 sequences, selective recomputation,
ZeRO-1, on H200 nodes of 8 GPUs (3,200 Gb/s per node) and on GB200 NVL72 racks (one NVLink
domain of 72 GPUs). For each cp: the GPUs (t*cp), the iteration time, tokens/s per GPU, MFU,
the exposed context-parallel exchange (what the ring's steps wait for) and its hidden part
(one layer's forward and backward rings), the largest memory per GPU and whether it fits, and
the wall time of ``simulate``. Plans the rules refuse (e.g. t*cp not filling NVL72 nodes) are
listed with the rule.

Run: ``python benchmarks/bench_context_parallel.py``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session  # noqa: E402
from core.sim.stages import stage_times  # noqa: E402
from core.sim.simulate import session_profile, simulate  # noqa: E402

CLUSTERS = {
    "H200 x8 nodes": ClusterConfig(gpu="H200-SXM-141GB", gpus_per_node=8,
                                   inter_node_bandwidth_gbits_per_s=3200.0),
    "GB200 NVL72": ClusterConfig(gpu="GB200-NVL72", gpus_per_node=72,
                                 inter_node_bandwidth_gbits_per_s=72 * 400.0),
}


def main() -> None:
    print(f"{'cluster':<14} {'seq':>8} {'cp':>3} {'GPUs':>5} {'iter s':>9} {'tok/s/GPU':>10} "
          f"{'MFU':>6} {'exposed cp s':>12} {'hidden/layer ms':>15} {'GiB/GPU':>8} {'fits':>5} "
          f"{'wall ms':>8}")
    for name, cluster in CLUSTERS.items():
        for seq in (131072, 1048576):
            model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=seq)
            for cp in (1, 2, 4, 8, 16, 32):
                plan = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                    micro_batch_size=1, global_batch_size=8, recompute="selective",
                                    sequence_parallel=True, zero_stage=1, context_parallel=cp)
                s = Session(model=model, plan=plan, cluster=cluster)
                errs = validate(s)
                if errs:
                    print(f"{name:<14} {seq:>8} {cp:>3}  refused: {errs[0]}")
                    continue
                t0 = time.perf_counter()
                r = simulate(s).report
                wall = time.perf_counter() - t0
                hidden = 0.0
                if cp > 1:
                    times = stage_times(s, session_profile(s)).op_times_s
                    hidden = times["cp_fwd_hidden"] + times["cp_bwd_hidden"]
                print(f"{name:<14} {seq:>8} {cp:>3} {r.num_gpus:>5} {r.iteration_time_s:>9.3f} "
                      f"{r.tokens_per_s / r.num_gpus:>10,.0f} {r.mfu:>6.1%} {r.cp_comm_s:>12.4f} "
                      f"{hidden * 1e3:>15.3f} {r.max_memory_per_gpu_bytes / 2**30:>8.1f} "
                      f"{'yes' if r.fits_in_memory else 'NO':>5} {wall * 1e3:>8.0f}")


if __name__ == "__main__":
    main()
