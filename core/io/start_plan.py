"""The plan an imported model starts with (``vtrain import hf``, ``vtrain import preset`` and the
window's Hugging Face import): :func:`default_plan` from the model's shapes alone, then
:func:`start_recompute` once the GPU kind is known."""

from __future__ import annotations

from dataclasses import replace

from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session

__all__ = ["default_plan", "START_BATCH_TOKENS", "START_BATCH_MAX", "start_global_batch",
           "START_RECOMPUTE", "start_recompute",
           "start_expert_layouts"]


#: Tokens per iteration an imported plan starts with: Megatron-Bridge 0.6.2's one-node
#: pretraining recipes (``llama3_8b_pretrain_8gpu_*``: global batch 128 at sequence 8,192,
#: ``resources/bridge_perf_recipes.json``) train 2**20 tokens per iteration; their multi-node
#: ones 1 to 64 M.
START_BATCH_TOKENS = 2**20
#: Most sequences an imported plan's global batch starts with: the largest of the published
#: pretraining batches (GPT-3 175B: 1,536 of 2,048 tokens; Llama 3 405B: 2,048 of 8,192).
START_BATCH_MAX = 2048


def start_global_batch(seq_length: int, data_parallel: int) -> int:
    """Global batch (sequences) an imported plan starts with: :data:`START_BATCH_TOKENS` tokens
    of ``seq_length``, rounded down to a multiple of ``data_parallel`` (one micro-batch of 1
    per replica at least), and at most :data:`START_BATCH_MAX` sequences (a toy model's
    short sequences): 128 sequences of 8,192 tokens, 512 of 2,048, 8 of 131,072."""
    per = min(START_BATCH_MAX, START_BATCH_TOKENS // max(1, seq_length))
    return max(data_parallel, per // data_parallel * data_parallel)


def default_plan(model: ModelConfig) -> ParallelPlan:
    """The plan an imported model starts with: one 8-GPU node, tensor parallel ``t`` = the
    largest of 8, 4, 2, 1 that divides the heads, the query groups and the MLP sizes (the
    experts' too), data parallel over the rest of the node (``d = 8/t``), no pipeline, no
    expert parallelism (the importers then add what a mixture of experts needs to fit:
    :func:`start_recompute`), ``b`` = 1, ``B`` = :func:`start_global_batch` sequences (about a
    million tokens, as NVIDIA's one-node recipes train), 1F1B, full recomputation (the
    importers then lighten it to what fits: :func:`start_recompute`), bf16, and what
    Megatron-Core users run with it (every Megatron-Bridge pretraining recipe):
    sequence parallelism with ``t > 1``, the distributed optimizer (ZeRO 1) with its gradient
    reduce-scatter and parameter all-gather overlapped. Change it in the editor or the sweep."""
    experts = model.moe_ffn_hidden_size or model.ffn
    t = next(x for x in (8, 4, 2, 1) if model.num_attention_heads % x == 0
             and model.query_groups % x == 0 and model.ffn % x == 0 and experts % x == 0)
    d = 8 // t
    return ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=d, micro_batch_size=1,
                        global_batch_size=start_global_batch(model.seq_length, d),
                        schedule="1f1b", recompute="full", precision="bf16",
                        sequence_parallel=t > 1, zero_stage=1, overlap_grad_reduce=True,
                        overlap_param_gather=True)


#: The recomputation modes an imported plan tries, lightest first (:func:`start_recompute`).
START_RECOMPUTE = ("none", "selective", "full")


def start_expert_layouts(session: Session) -> list[tuple[int, int | None]]:
    """The (``expert_parallel``, ``expert_tensor_parallel``) pairs an imported plan tries, in
    order (:func:`start_recompute` with ``expert_parallel=True``): the session's own first, then
    for a mixture-of-experts model each ``ep`` dividing ``num_experts``, ascending, with
    ``etp`` unset (Megatron-Core's default, the tensor-parallel size) and then 1 (Megatron-
    Bridge's MoE recipes), those that break none of :func:`core.plan.rules.moe_errors`' rules
    (``etp * ep`` divides ``t * cp * d``, the expert width divisible by ``etp``, a flex
    dispatcher's ``etp * ep > 1`` ...). A dense model: the session's alone. Never raises."""
    from core.plan.rules import moe_errors
    pl, m = session.plan, session.model
    own = (pl.expert_parallel, pl.expert_tensor_parallel)
    if not m.num_experts:
        return [own]
    out = [own]
    for ep in range(1, m.num_experts + 1):
        if m.num_experts % ep:
            continue
        for etp in (None, 1):
            if (ep, etp) in out or moe_errors(m, replace(pl, expert_parallel=ep,
                                                         expert_tensor_parallel=etp)):
                continue
            out.append((ep, etp))
    return out


def start_recompute(session: Session, modes: tuple[str, ...] = START_RECOMPUTE, *,
                    expert_parallel: bool = False) -> tuple[Session, str]:
    """``session`` with the lightest activation recomputation its plan fits with, and a note
    saying which and why (an import's start, after its GPU kind is set).

    Megatron-LM recomputes nothing unless asked (``--recompute-granularity`` defaults to
    None), and a user adds selective recomputation (the attention core) and then full
    recomputation only when memory runs out, so the start is the first of
    :data:`START_RECOMPUTE` whose memory verdict is "fits"
    (:func:`core.sim.report.memory_verdict` of :func:`core.sim.simulate.stage_memory`
    against the session's profile store's memory, with the planner's margin
    ``cluster.memory_reserve_fraction``); else the first that is "tight"; else the last, the
    heaviest (the import then notes that the plan does not fit). ``modes`` are the modes to
    try, lightest first (``vtrain import deepspeed``: none and full, the two a Hugging Face
    model has). Every mode costs one memory model per stage, no simulation.

    ``expert_parallel`` (the Hugging Face and preset imports): a mixture-of-experts model
    also tries expert parallelism, which splits the experts' weights, gradients and optimizer
    state over ``ep`` ranks (``etp`` the expert tensor-parallel size): each pair of
    :func:`start_expert_layouts` in turn, with the modes lightest first; the first pair
    with a mode that fits (then one that is tight) gives the plan, so a model that fits
    without expert parallelism keeps ``ep = 1``. When none fits, the pair and mode that need
    the least memory, and the note names every ``ep`` / ``etp`` tried.

    Raises whatever opening the session's profile store raises (a missing or bad store)."""
    from core.sim.report import memory_verdict as report_verdict
    from core.sim.simulate import memory_verdict, session_profile, stage_memory
    store = session_profile(session)
    capacity = float(store.memory_bytes)
    margin = session.cluster.memory_reserve_fraction
    own = (session.plan.expert_parallel, session.plan.expert_tensor_parallel)
    layouts = start_expert_layouts(session) if expert_parallel else [own]
    verdicts, needs = {}, {}
    for lay in layouts:
        for mode in modes:
            trial = replace(session, plan=replace(session.plan, recompute=mode,
                                                  expert_parallel=lay[0],
                                                  expert_tensor_parallel=lay[1]))
            need, fits, _ = memory_verdict(stage_memory(trial, store), capacity)
            verdicts[lay, mode] = report_verdict(need, capacity, margin, fits)
            needs[lay, mode] = need
    order = [(lay, m) for lay in layouts for m in modes]
    pick = next((k for k in order if verdicts[k] == "fits"),
                next((k for k in order if verdicts[k] == "tight"), None))
    if pick is None:  # nothing fits: the least memory (one layout: the heaviest mode)
        pick = (min(order, key=lambda k: needs[k]) if len(layouts) > 1
                else (layouts[0], modes[-1]))
    lay, mode = pick
    session.plan = replace(session.plan, recompute=mode, expert_parallel=lay[0],
                           expert_tensor_parallel=lay[1])
    if len(layouts) == 1:
        return session, _recompute_note(session, modes, {m: verdicts[lay, m] for m in modes}, mode)
    gpu, t = session.cluster.gpu, session.plan.tensor_parallel
    what = f"recompute={mode} expert_parallel={lay[0]} expert_tensor_parallel={_etp(lay[1], t)}"
    names = {x: f"ep={x[0]} etp={_etp(x[1], t)}" for x in layouts}
    if verdicts[pick] == "does not fit":
        return session, (f"{what}: the plan does not fit on the {gpu} with any recomputation and "
                         f"expert parallelism tried ({', '.join(names.values())}, each with "
                         f"recompute {', '.join(modes)}); this one needs the least memory, "
                         f"{needs[pick] / 2**30:.1f} GiB per GPU")
    if lay == own:
        return session, _recompute_note(session, modes, {m: verdicts[lay, m] for m in modes}, mode)

    def tried(lay):
        said = {verdicts[lay, m] for m in modes}
        if len(said) == 1:
            return f"{names[lay]}: {said.pop()} with {', '.join(modes)}"
        return f"{names[lay]}: " + ", ".join(f"{m} {verdicts[lay, m]}" for m in modes)
    earlier = "; ".join(tried(x) for x in layouts[:layouts.index(lay)])
    return session, (f"{what}: the least expert parallelism, with the lightest activation "
                     f"recomputation, with which the plan fits on the {gpu}"
                     + (" (tight)" if verdicts[pick] == "tight" else "")
                     + f" ({earlier})")


def _etp(etp: int | None, t: int) -> str:
    """An expert tensor-parallel size for a note: unset is the tensor-parallel size ``t``."""
    return f"{t} (unset)" if etp is None else str(etp)


def _recompute_note(session: Session, modes: tuple[str, ...], verdicts: dict[str, str],
                    mode: str) -> str:
    """:func:`start_recompute`'s note on the recomputation ``mode`` picked among ``modes``
    (``verdicts``: each mode's memory verdict) with the plan's own expert layout."""
    if verdicts[mode] == "does not fit":
        return (f"recompute={mode}: the plan does not fit on the {session.cluster.gpu} "
                f"with any of {', '.join(modes)}; {mode} keeps the least "
                "activation memory")
    lighter = modes[:modes.index(mode)]
    why = (" (" + ", ".join(f"{m}: {verdicts[m]}" for m in lighter) + ")") if lighter else ""
    return (f"recompute={mode}: the lightest activation recomputation with which the "
            f"plan fits on the {session.cluster.gpu}"
            + (" (tight)" if verdicts[mode] == "tight" else "") + why)
