"""Memory error on measured per-GPU peaks, per memory scale.

Reads ../shared/data/measured-memory/measured_memory.csv (20 measured peaks with
their plans; README there), builds each row's session with the explicit mapping
below, predicts the per-GPU memory of the rank the figure comes from and prints,
per row and per ``memory_scale`` (``max_allocated``, ``max_reserved``,
``nvidia-smi``), the modelled and measured GiB, the error and the fit verdict, then
the median and mean absolute percentage error per scale.

Which modelled quantity each scale is compared with:
:meth:`core.sim.report.StageMemory.at_scale` (``max_allocated``: the tensors;
``max_reserved``: plus the caching allocator's reserve; ``nvidia-smi``: plus the
CUDA context and NCCL's buffers). Which rank: the maximum over the stages, except
Megatron-LM's CI rows, whose figure is written by the last rank only (README,
source 3), so the last stage.

Every measured run ran, so the verdict (:func:`core.sim.report.memory_verdict` of the
whole-process peak against the GPU's whole memory, the session's margin naming a tight
fit) must say it fits or is tight.

Then the published runs of ../shared/data/public-modern (``published_runs.sessions.jsonl``),
which have no measured memory but all ran: each one's verdict, which must say it fits or is
tight (the rows the file skips, for what the simulator does not model, are listed apart).

Last, the memory figures the shared cases state (``benchmarks/data/memory_cases.csv``, README
there): bytes per parameter, model-state GB and fit verdicts, each against the model.

Run: ``python benchmarks/bench_memory.py [--csv PATH]`` (about 20 s).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.plan.cluster import ClusterConfig, gpu_kind
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session  # noqa: E402
from core.sim.report import memory_verdict  # noqa: E402
from core.sim.simulate import session_profile, stage_memory  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "measured-memory" / "measured_memory.csv"
PUBLISHED = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"
GiB = 2.0 ** 30

#: Model columns -> ModelConfig fields, read as integers (empty cells keep the field's default:
#: no query groups = multi-head attention, no ffn = 4h; README of the data).
MODEL_INTS = {"num_layers": "num_layers", "hidden_size": "hidden_size",
              "num_attention_heads": "num_attention_heads", "num_query_groups": "num_query_groups",
              "ffn_hidden_size": "ffn_hidden_size", "seq_length": "seq_length",
              "vocab_size": "vocab_size"}
MODEL_TEXT = {"activation": "activation", "normalization": "normalization"}
#: Plan columns -> ParallelPlan fields.
PLAN_INTS = {"tensor_parallel": "tensor_parallel", "pipeline_parallel": "pipeline_parallel",
             "data_parallel": "data_parallel", "micro_batch_size": "micro_batch_size",
             "global_batch_size": "global_batch_size"}


def _flag(text: str) -> bool:
    return text.strip().lower() in ("y", "yes", "true", "1")


def session_of(row: dict[str, str]) -> Session:
    """The session of one row. What the columns do not hold comes from the data's README, the
    same for every row: Transformer Engine's fused attention, untied embeddings; SwiGLU +
    RMSNorm rows are Llama 3 (RoPE, no biases); GeLU + LayerNorm rows Megatron's GPT (learned
    absolute positions, biases). SimuMax's ``_cef`` cases fuse the cross-entropy (Megatron-Core
    ``--cross-entropy-loss-fusion``, native kernels: the default impl); the CI rows overlap the
    gradient reduce and the parameter gather (their model_config.yaml)."""
    model = ModelConfig(name=f"h={row['hidden_size']} L={row['num_layers']}")
    for col, name in MODEL_INTS.items():
        if row[col].strip():
            setattr(model, name, int(row[col]))
    for col, name in MODEL_TEXT.items():
        setattr(model, name, row[col].strip().lower())
    model.tied_embeddings = False
    model.attention_kernel = "flash"
    if model.activation == "swiglu":
        model.position_embedding, model.add_bias_linear = "rope", False
    v = int(row["virtual_pipeline_stages"] or 1)
    plan = ParallelPlan(**{name: int(row[col]) for col, name in PLAN_INTS.items()},
                        schedule="interleaved" if v > 1 else "1f1b",
                        virtual_pipeline_stages=v if v > 1 else None,
                        sequence_parallel=_flag(row["sequence_parallel"]),
                        recompute=row["recompute"].strip(), precision=row["precision"].strip(),
                        zero_stage=1 if _flag(row["distributed_optimizer"]) else 0)
    source = row["source"]
    if "_cef" in source:
        plan.cross_entropy_loss_fusion = True
    if source.startswith("NVIDIA/Megatron-LM"):
        plan.overlap_grad_reduce = plan.overlap_param_gather = True
    cluster = ClusterConfig(gpu=gpu_kind(row["gpu"]), gpus_per_node=int(row["gpus_per_node"]))
    return Session(model=model, plan=plan, cluster=cluster)


def measured_stage(row: dict[str, str], num_stages: int) -> int | None:
    """The stage whose GPU the figure is of: the last for Megatron-LM's CI rows (the
    tensorboard writer's rank), None (the maximum over the stages) for the others."""
    return num_stages - 1 if row["source"].startswith("NVIDIA/Megatron-LM") else None


def predict(path: Path) -> list[dict]:
    """One record per row: session label, GPU, scale, modelled and measured GiB, error (%)
    and the verdict of the whole-process peak against the GPU's whole memory."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        session = session_of(row)
        mem = stage_memory(session)
        scale = row["memory_scale"].strip()
        stage = measured_stage(row, len(mem))
        picked = [mem[stage]] if stage is not None else mem
        predicted = max(sm.at_scale(scale) for sm in picked) / GiB
        measured = float(row["measured_peak_memory_gib"])
        capacity = float(session_profile(session).memory_bytes)
        pl = session.plan
        out.append({"gpu": session.cluster.gpu, "scale": scale, "predicted_gib": predicted,
                    "measured_gib": measured, "error_percent": (predicted - measured) / measured * 100,
                    "verdict": memory_verdict(max(sm.total_bytes for sm in mem), capacity,
                                              session.cluster.memory_reserve_fraction,
                                              max(sm.required_bytes for sm in mem) <= capacity),
                    "plan": (f"t{pl.tensor_parallel} p{pl.pipeline_parallel} d{pl.data_parallel} "
                             f"v{pl.virtual_pipeline_stages or 1} m{pl.num_microbatches} "
                             f"L{session.model.num_layers}")})
    return out


def figures(path: Path = DATA) -> dict:
    """Summary of :func:`predict`: rows, verdicts right (every measured run ran, so each must
    fit) and, per memory scale, the median absolute error (%)."""
    recs = predict(path)
    by: dict[str, list[float]] = {}
    for r in recs:
        by.setdefault(r["scale"], []).append(r["error_percent"])
    return {"rows": len(recs), "verdicts_right": sum(r["verdict"] != "does not fit" for r in recs),
            "median_abs_error_percent": {s: float(np.median(np.abs(e))) for s, e in by.items()},
            "errors_percent": by}


def published_verdicts(path: Path = PUBLISHED) -> list[dict]:
    """One record per published run: its row, model, GPU, the skip reason of the file (None
    for a run the simulator models), the whole-process need and the need without the
    allocator's reserve of its largest stage (GiB), the GPU's memory (GiB) and the verdict
    (:func:`core.sim.report.memory_verdict`, the fit decided as :func:`core.sim.simulate.memory_verdict`
    decides it)."""
    from core.accuracy.measured import read_measurements
    from core.sim.simulate import memory_verdict as fit_of
    out = []
    for m in read_measurements(path):
        session = m.session
        mem = stage_memory(session)
        capacity = float(session_profile(session).memory_bytes)
        need, fits, _ = fit_of(mem, capacity)
        out.append({"row": m.row, "model": session.model.name, "gpu": session.cluster.gpu,
                    "skip_reason": m.skip_reason or None, "need_gib": need / GiB,
                    "required_gib": max(sm.required_bytes for sm in mem) / GiB,
                    "capacity_gib": capacity / GiB,
                    "verdict": memory_verdict(need, capacity,
                                              session.cluster.memory_reserve_fraction, fits)})
    return out


CASES = ROOT / "benchmarks" / "data" / "memory_cases.csv"


def case_checks(path: Path = CASES) -> list[dict]:
    """One record per row of ``benchmarks/data/memory_cases.csv`` (README there): the case,
    the quantity, the expected figure or verdict, the modelled one and whether they agree
    (bytes per parameter exactly, GB to the case's three digits, a verdict as stated: ``runs``
    is fits or tight). Rows whose session ../shared lacks are left out."""
    from core.io.session import load_any
    from core.model.counts import num_parameters
    from core.model.memory import bytes_per_parameter
    from core.sim.simulate import memory_verdict as fit_of
    from core.cli.common import apply_sets
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            file = ROOT.parent / "shared" / row["session"]
            if not file.exists():
                continue
            session = apply_sets(load_any(file), [f"plan.{item}" for item in row["plan"].split()])
            q, want = row["quantity"], row["expected"]
            if q == "verdict":
                mem = stage_memory(session)
                capacity = float(session_profile(session).memory_bytes)
                need, fits, _ = fit_of(mem, capacity)
                got = memory_verdict(need, capacity, session.cluster.memory_reserve_fraction, fits)
                shown = f"{got} ({need / GiB:.1f} of {capacity / GiB:.1f} GiB)"
                right = got != "does not fit" if want == "runs" else got == want
            else:
                per = float(sum(bytes_per_parameter(session.plan)))
                if q == "model_states_bytes_per_parameter":
                    got, shown = per, f"{per:g}"
                    right = abs(per - float(want)) < 1e-9
                else:
                    got = per * num_parameters(session.model, 1) / 1e9
                    shown = f"{got:.2f}"
                    right = round(got, 1) == float(want)
            out.append({"case": row["case"], "plan": row["plan"], "quantity": q, "expected": want,
                        "modelled": shown, "right": right, "source": row["source"]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DATA)
    args = ap.parse_args()
    if not args.csv.exists():
        print(f"no data: {args.csv} (the shared checkout lacks it)")
        return 0
    recs = predict(args.csv)
    print(f"{'row':>3} {'gpu':<15} {'plan':<26} {'scale':<13} {'model GiB':>9} "
          f"{'meas GiB':>8} {'error':>7}  verdict (whole process)")
    for i, r in enumerate(recs, 1):
        print(f"{i:>3} {r['gpu']:<15} {r['plan']:<26} {r['scale']:<13} {r['predicted_gib']:>9.2f} "
              f"{r['measured_gib']:>8.2f} {r['error_percent']:>+6.1f}%  {r['verdict']}")
    f = figures(args.csv)
    print()
    print(f"{'memory_scale':<13} {'rows':>4} {'median |err|':>12} {'mean |err|':>10} "
          f"{'max |err|':>9} {'median err':>10}")
    for scale, errs in f["errors_percent"].items():
        a = np.abs(errs)
        print(f"{scale:<13} {len(errs):>4} {np.median(a):>11.1f}% {a.mean():>9.1f}% "
              f"{a.max():>8.1f}% {np.median(errs):>+9.1f}%")
    print(f"\nverdicts right (every measured run ran): {f['verdicts_right']} of {f['rows']}")
    if PUBLISHED.exists():
        pub = published_verdicts(PUBLISHED)
        print(f"\npublished runs (no measured memory; every one ran), {PUBLISHED.name}:")
        print(f"{'row':>3} {'model':<22} {'gpu':<22} {'GiB':>7} {'w/o cache':>9} {'of':>6}  verdict")
        for r in pub:
            why = r["skip_reason"] or ""
            note = f"  (skipped: {why[:60]}{'...' if len(why) > 60 else ''})" if why else ""
            print(f"{r['row']:>3} {r['model'][:22]:<22} {r['gpu'][:22]:<22} {r['need_gib']:>7.1f} "
                  f"{r['required_gib']:>9.1f} {r['capacity_gib']:>6.1f}  {r['verdict']}{note}")
        modelled = [r for r in pub if not r["skip_reason"]]
        right = sum(r["verdict"] != "does not fit" for r in modelled)
        print(f"verdicts right (fits or tight) on the runs the file does not skip: "
              f"{right} of {len(modelled)}")
    cases = case_checks()
    if cases:
        print(f"\nthe shared cases' memory figures ({CASES.relative_to(ROOT)}):")
        for r in cases:
            print(f"  {r['case']:<32} {r['plan'][:40]:<40} {r['quantity']:<33} expected "
                  f"{r['expected']:<12} modelled {r['modelled']}  {'right' if r['right'] else 'WRONG'}")
        print(f"right: {sum(r['right'] for r in cases)} of {len(cases)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
