"""The sweep's pipeline splits: which embedding / loss slot flags and which uneven first / last
stages a sweep gives the plans of each pipeline size, so that their layers split as a
Megatron-Core user would split them (split from :mod:`core.studies.sweep.space`, which
enumerates the plans; :mod:`core.studies.fit_changes` and the Explore tab's settings read them
too). No simulation belongs here.
"""

from __future__ import annotations

from typing import Any

from core.plan.layout import pipeline_layout_text, uneven_splits
from core.plan.parallel import ParallelPlan
from core.plan.session import Session

__all__ = ["SPLIT_FLAG_FIELDS", "split_flag_options", "split_flags_for", "uneven_split_flags",
           "splits_evenly", "pipeline_splits", "slots_split"]

#: Megatron-Core's flags that count the embedding / the loss as a layer slot of the pipeline
#: split (``--account-for-embedding-in-pipeline-split``, ``--account-for-loss-in-pipeline-split``)
SPLIT_FLAG_FIELDS = ("account_for_embedding_in_pipeline_split",
                     "account_for_loss_in_pipeline_split")


def split_flag_options(plan: ParallelPlan) -> list[tuple[int, list[tuple[Any, Any]]]]:
    """The (embedding, loss) slot flags a sweep may give the plans of ``plan``'s session,
    ``[(extra, [(embedding, loss), ...]), ...]`` by the layer slots they add to the session's
    own (``extra`` 0, 1, 2): first the session's flags as they are, then each way of setting
    one more of them, then both; last, where the session sets a flag true, both off (``extra``
    -1 or -2: the layers alone), tried only where no flagged slot count splits (a Megatron-Core
    user turns the flags off there: ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split``, either or both, split the slots evenly only).
    A flag the session sets true stays true wherever its slots split. One more slot where
    the session sets neither is the loss's: the last stage runs the output layer and the
    loss, so one layer fewer there balances the stages better than on the first (the
    embedding is a lookup); the sweep's own times agreed on every pair checked (Llama 3 8B /
    70B with 31 / 79 layers: 731 plans of each flag, the loss's faster in every one, none
    fitting with one flag only), so the embedding's alone is not tried (half of the plans
    these sizes add). Only the session's with a custom pipeline layout (which places every
    layer; Megatron-Core refuses the flags with it) or flags that are not booleans
    (validation names them)."""
    e0, l0 = (getattr(plan, f) for f in SPLIT_FLAG_FIELDS)
    own: list[tuple[int, list[tuple[Any, Any]]]] = [(0, [(e0, l0)])]
    if (pipeline_layout_text(plan) is not None
            or not (isinstance(e0, bool) and isinstance(l0, bool))):
        return own
    more: dict[int, list[tuple[Any, Any]]] = {}
    for loss in dict.fromkeys((l0, True)):
        for e in dict.fromkeys((e0, True)):
            n = int(e and not e0) + int(loss and not l0)
            if n and not (n == 1 and not e0 and not l0 and e):  # one more: the loss's
                more.setdefault(n, []).append((e, loss))
    off = [(-(int(e0) + int(l0)), [(False, False)])] if e0 or l0 else []
    return own + sorted(more.items()) + off


def split_flags_for(num_layers: int, options: list, virtual_stages: int,
                    interleaved: bool = False) -> list[tuple[Any, Any]]:
    """The (embedding, loss) slot flags of the plans of ``virtual_stages`` (``p*v``) virtual
    stages, of :func:`split_flag_options` ``options``: the session's when its layer slots
    split evenly over them; else those of the fewest more slots (``L + 1``: the loss's, or
    the one the session does not set; ``L + 2``: both flags) that do, what a Megatron-Core
    user sets when the layers alone do not split (Llama 3.1 405B: 126 layers, 128 slots over
    p=8 or 16); else both off where the session sets a flag and the layers alone split (Llama
    3 70B with the loss's slot: 80 layers, 81 or 82 slots, over p=4, 8 or 16); the session's
    when none does (validation refuses those plans, or :func:`pipeline_splits` gives them
    uneven first / last stages). ``interleaved``: the interleaved schedule with ``v >= 2``
    (:func:`slots_split`)."""
    own = options[0][1]
    slots = num_layers + sum(map(bool, own[0]))
    for extra, flags in options:
        if slots_split(slots + extra, virtual_stages, extra, interleaved):
            return flags
    return own


def uneven_split_flags(options: list) -> tuple[Any, Any]:
    """The (embedding, loss) slot flags of the plans with uneven first / last stages that the
    sweep makes, of :func:`split_flag_options` ``options``: both off (Megatron-Core refuses
    either with ``--decoder-first/last-pipeline-num-layers``), the session's where it sets
    none true."""
    extra, flags = options[-1]
    return flags[0] if extra < 0 else options[0][1][0]


def splits_evenly(num_layers: int, options: list, p: int) -> bool:
    """Whether the layers (or the one or two more layer slots of :func:`split_flag_options`
    ``options``, or the layers alone with the session's flags off) split evenly over ``p``
    stages without interleaving."""
    slots = num_layers + sum(map(bool, options[0][1][0]))
    return any(slots_split(slots + extra, p, extra) for extra, _ in options)


def pipeline_splits(session: Session, ps: list[int]) -> dict[int, list[tuple[int, int]]]:
    """The uneven (first, last) stage layers of the plans of each ``p`` in ``ps`` that has
    them: the session's at its own p when it sets them, else :func:`uneven_splits` where
    neither the layers nor any layer slot count of :func:`split_flag_options` split evenly
    (:func:`splits_evenly`); those plans turn the session's embedding / loss slot flags off
    (:func:`uneven_split_flags`: Megatron-Core refuses them with uneven stages). None but the
    session's with a custom pipeline layout (which places every layer) or slot flags that
    are not booleans (validation names them)."""
    base, L = session.plan, session.model.num_layers
    out: dict[int, list[tuple[int, int]]] = {}
    if base.first_stage_layers is not None or base.last_stage_layers is not None:
        out[base.pipeline_parallel] = [(base.first_stage_layers, base.last_stage_layers)]
    flags = [getattr(base, f) for f in SPLIT_FLAG_FIELDS]
    if (pipeline_layout_text(base) is not None
            or any(f and not isinstance(f, bool) for f in flags)):
        return out
    options = split_flag_options(base)
    for p in ps:
        if p not in out and not splits_evenly(L, options, p):
            splits = uneven_splits(L, p)
            if splits:
                out[p] = splits
    return out


def slots_split(slots: int, virtual_stages: int, extra: int, interleaved: bool = False) -> bool:
    """Whether ``slots`` layer slots split evenly over ``virtual_stages`` in a sweep's plan,
    ``extra`` of them the slots its flags add to the session's (negative: the session's
    flags turned off): with flags added, at least two slots per virtual stage, so that no
    stage holds only the embedding or the loss (a stage of GPUs without a transformer layer,
    never a fast plan); one is enough under the ``interleaved`` schedule with two or more
    model chunks per rank, whose round-robin placement (rank r holds chunks r, p + r, ...)
    leaves the ranks of the embedding's and the loss's chunks layers in their other chunks
    (Megatron-Bridge's Llama 3.1 405B recipes on B200 and GB200: 126 layers and both slots,
    128 over t4 p16 v8, one per virtual stage). Not under ZB-V, whose V places the first and
    the last chunk on one rank."""
    least = 1 if interleaved else 2
    return slots % virtual_stages == 0 and (extra <= 0 or slots // virtual_stages >= least)
