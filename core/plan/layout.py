"""Pipeline layout arithmetic: how a plan splits the model's layers over the pipeline stages
and virtual stages (even splits, uneven first/last stages, the embedding/loss slots and
Megatron-Core's custom ``--pipeline-model-parallel-layout`` strings).

A new way of placing layers on stages goes here.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from core.plan.parallel import ParallelPlan


class PipelineSplitError(ValueError):
    """The layers (or layer slots) do not divide evenly over the pipeline's (virtual) stages."""


class NotModelledError(ValueError):
    """A combination of layout fields the simulator does not model (refused, never guessed)."""

__all__ = ["PipelineSplitError", "NotModelledError",
           "pipeline_split_slots", "LAYOUT_RULE", "MAX_LAYOUT_SYMBOLS", "pipeline_layout_text",
           "expand_pipeline_layout", "pipeline_layout_errors", "layout_layer_counts",
           "layout_summary", "stage_layer_counts", "capped_recompute_layers", "largest_model_chunk",
           "virtual_stage_layer_counts", "uneven_splits", "layer_split_hint"]


#: Megatron-Core's rule for the layer-slot split, quoted by the validation messages.
_SLOT_RULE = ("Megatron-Core: with account_for_embedding_in_pipeline_split / "
              "account_for_loss_in_pipeline_split, (num_layers + embedding + loss) must be "
              "divisible by pipeline_parallel_size * virtual_pipeline_stages")


def _takes_layout(plan: ParallelPlan) -> bool:
    """Whether ``plan``'s schedule takes a custom pipeline layout (ZB-V places its chunks
    itself): its ``errors`` for a layout (``num_layers`` None) are none."""
    from core.schedules import get as get_schedule
    try:
        p = plan.pipeline_parallel  # m = p: no micro-batch rule speaks
        return not get_schedule(plan.schedule).errors(p, p, plan.virtual_pipeline_stages, None)
    except ValueError:
        return False


def _slot_hint(L: int, p: int, v: int = 1, layouts: bool = True,
               mtp_layers: int | None = None) -> str:
    """How Megatron-Core splits ``L`` layers over ``p`` stages of ``v`` model chunks (``v`` > 1
    under an interleaved schedule) when they do not divide: counting the embedding and / or the
    loss as a layer (``L + 1`` or ``L + 2`` slots), named when one of those divides by ``p*v``,
    and the uneven first and last chunks of :func:`uneven_splits` over the ``p*v`` virtual
    stages as a custom layout, with ``v`` = 1 also as the first and last stage layers (which
    Megatron-Core has only without interleaving); empty when neither splits them.

    ``mtp_layers``: the model's multi-token prediction layers (``mtp_num_layers``), placed as
    that many ``m`` before the ``L`` of the last virtual stage, so the layout given passes
    :func:`pipeline_layout_errors` as printed (DeepSeek-V3, 61 layers and one MTP layer on
    p=16: ``Et*3|(t*4|)*14t*2mL``); None when unknown (the text then says where they go)."""
    n = p * v
    hint = ""
    for extra, fields in ((2, "plan.account_for_embedding_in_pipeline_split and "
                              "plan.account_for_loss_in_pipeline_split"),
                          (1, "plan.account_for_loss_in_pipeline_split (or the embedding's)")):
        if (L + extra) % n == 0:
            hint = (f"; {L} + {extra} = {L + extra} layer slots split over it with {fields} "
                    "(Megatron-Core's --account-for-embedding/loss-in-pipeline-split)")
            break
    splits = uneven_splits(L, n)
    if not splits or not (v == 1 or layouts):
        return hint
    first, last = splits[0]
    middle = (L - first - last) // (n - 2)

    def ts(k: int) -> str:
        return "t" if k == 1 else f"t*{k}"
    counts = f"{first}, {n - 2} x {middle}, {last} layers"
    mtp = "m" * mtp_layers if mtp_layers is not None else ""
    layout = (f"plan.pipeline_model_parallel_layout=E{ts(first)}|({ts(middle)}|)*{n - 2}"
              f"{ts(last)}{mtp}L"
              + (" (with an m before the L per MTP layer)" if mtp_layers is None else ""))
    if v > 1:
        return hint + f"; the {n} virtual stages ({counts}) split it with {layout}"
    return (hint + f"; plan.first_stage_layers={first} and plan.last_stage_layers={last} split "
            f"it ({counts}; Megatron-Core's --decoder-first/last-pipeline-num-layers)"
            + (f", as does {layout}" if layouts else ""))


def layer_split_hint(num_layers: int, plan: ParallelPlan, mtp_layers: int | None = None) -> str:
    """What splits ``num_layers`` over ``plan``'s ``p`` stages of its schedule's chunks where
    they do not divide (:func:`_slot_hint`: the embedding and loss layer slots, the uneven first
    and last stages, the custom layout where the schedule takes one, with ``mtp_layers`` MTP
    layers placed in it when given); "" when nothing does. Starts with ``"; "``: it follows the
    rule's message."""
    return _slot_hint(num_layers, plan.pipeline_parallel, layout_chunks(plan),
                      _takes_layout(plan), mtp_layers)


def uneven_splits(num_layers: int, p: int) -> list[tuple[int, int]]:
    """Megatron-Core's uneven pipeline splits of ``num_layers`` over ``p`` stages where they do
    not split evenly (``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers``, :attr:`ParallelPlan.first_stage_layers`):
    ``k = ceil(L/p)`` layers on each of the ``p - 2`` middle stages and the rest on the first
    and last, either halved (the last no more than the first) or with ``k`` on the first and
    the least on the last (which also runs the output layer and the loss). DeepSeek-V3's 61
    layers on p=8: 7 + 6 x 8 + 6 and 8 + 6 x 8 + 5. Where ``k`` on every middle stage leaves
    the last none, ``k - 1`` on each and the rest so split (50 layers on p=16: 4 + 14 x 3 +
    4; no stage holds more than ``k``, as in any split). ``(first, last)`` pairs, each with
    ``1 <= last <= first <= k``; none when ``p < 3`` or neither leaves the last stage a
    layer."""
    if p < 3:
        return []
    k = -(-num_layers // p)
    for middle in (k, k - 1):
        rest = num_layers - (p - 2) * middle
        halves = (-(-rest // 2), rest // 2)
        pairs = [(f, l) for f, l in dict.fromkeys((halves, (k, rest - k))) if 1 <= l <= f <= k]
        if pairs or middle == 1:
            return pairs
    return []


def pipeline_split_slots(num_layers: int, plan: ParallelPlan) -> int:
    """Layer slots the pipeline split divides: ``num_layers`` plus one for the embedding with
    ``account_for_embedding_in_pipeline_split`` and one for the loss with
    ``account_for_loss_in_pipeline_split`` (Megatron-Core ``get_num_layers_to_build``)."""
    return (num_layers + int(bool(plan.account_for_embedding_in_pipeline_split))
            + int(bool(plan.account_for_loss_in_pipeline_split)))


def _split_flags(plan: ParallelPlan) -> bool:
    return bool(plan.account_for_embedding_in_pipeline_split
                or plan.account_for_loss_in_pipeline_split)


#: Megatron-Core's rule for ``--pipeline-model-parallel-layout``, quoted by the messages.
LAYOUT_RULE = ("Megatron-Core's layout: virtual stages separated by '|', each E (embedding), t "
               "(transformer layer), m (MTP layer), L (loss) in that order; x*N and (...)*N repeat")


#: Longest expanded layout accepted (symbols): far more than any model's layers, so a string
#: like '((t*9999)*9999)*9999' is refused before it is built.
MAX_LAYOUT_SYMBOLS = 100_000


def layout_chunks(plan: ParallelPlan) -> int:
    """``v`` of ``plan``: its schedule's model chunks per stage
    (:meth:`core.schedules.PipelineSchedule.chunks`: ``virtual_pipeline_stages`` under the
    interleaved schedule, 2 under ZB-V, else 1; 1 for an unknown schedule)."""
    from core.schedules import get as get_schedule  # numpy: not on the `vtrain --help` path
    try:
        return get_schedule(plan.schedule).chunks(plan.virtual_pipeline_stages)
    except ValueError:
        return 1


def pipeline_layout_text(plan: Any) -> str | None:
    """``plan.pipeline_model_parallel_layout`` stripped, or None when it is unset or blank."""
    text = getattr(plan, "pipeline_model_parallel_layout", None)
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip()


@lru_cache(maxsize=256)
def expand_pipeline_layout(text: str) -> tuple[str, ...]:
    """The virtual stages of a pipeline layout string (Megatron-Core
    ``--pipeline-model-parallel-layout``, ``PipelineParallelLayerLayout.parse_str_to_list``),
    expanded: one string of the symbols ``E``, ``t``, ``m``, ``L`` per virtual stage, in
    virtual-stage order (an empty string for an empty virtual stage).

    Grammar: symbols ``E t m L``, ``|`` between virtual stages, ``x*N`` repeats the symbol
    (or ``|``) before it ``N >= 1`` times, ``(...)*N`` a group; spaces and commas are ignored
    (Megatron drops commas). Example: ``"Et|(tt|)*30mL"`` -> ``("Et", "tt", ..., "tt", "mL")``,
    32 virtual stages. Within a stage the symbols must come in the order ``E``, ``t``, ``m``,
    ``L`` (the order Megatron-Core runs them).

    Raises
    ------
    ValueError
        The string breaks the grammar (an unknown character, an unmatched parenthesis, ``*``
        without a symbol before it or a count after it), expands past
        :data:`MAX_LAYOUT_SYMBOLS` symbols, or a stage lists its symbols out of order.
    """
    src = "".join(str(text).split()).replace(",", "")
    pos = 0

    def seq(depth: int) -> str:
        nonlocal pos
        out: list[str] = []
        size = 0
        while pos < len(src):
            c = src[pos]
            if c == ")":
                if depth == 0:
                    raise ValueError(f"unmatched ')' at character {pos + 1}")
                return "".join(out)
            if c == "(":
                pos += 1
                atom = seq(depth + 1)
                if pos >= len(src):
                    raise ValueError("unmatched '(' (no closing ')')")
                pos += 1
            elif c in "EtmL|":
                atom, pos = c, pos + 1
            elif c == "*":
                raise ValueError(f"'*' at character {pos + 1} must follow a symbol or a group "
                                 "'(...)'")
            else:
                raise ValueError(f"unknown symbol {c!r} at character {pos + 1} (use E, t, m, L, "
                                 "|, (, ), *N)")
            if pos < len(src) and src[pos] == "*":
                digits = ""
                while pos + 1 + len(digits) < len(src) and src[pos + 1 + len(digits)].isdigit():
                    digits += src[pos + 1 + len(digits)]
                value = digits.lstrip("0")  # no int() of a huge digit string
                if not value:
                    raise ValueError(f"'*' at character {pos + 1} must be followed by a count "
                                     ">= 1")
                n = int(value) if len(value) <= 12 else MAX_LAYOUT_SYMBOLS + 1
                if len(atom) * n + size > MAX_LAYOUT_SYMBOLS:
                    raise ValueError(f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
                atom *= n
                pos += 1 + len(digits)
            size += len(atom)
            if size > MAX_LAYOUT_SYMBOLS:
                raise ValueError(f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
            out.append(atom)
        if depth:
            raise ValueError("unmatched '(' (no closing ')')")
        return "".join(out)

    if not src:
        raise ValueError("is empty (leave the field unset for Megatron's split)")
    stages = tuple(seq(0).split("|"))
    order = "EtmL"
    for k, st in enumerate(stages):
        ranks = [order.index(c) for c in st]
        if ranks != sorted(ranks):
            raise ValueError(f"virtual stage {k} {st!r} lists its symbols out of order (E, then "
                             "t, then m, then L: the order Megatron-Core runs them)")
    return stages


def pipeline_layout_errors(text: str, num_layers: int, mtp_layers: int, p: int, v: int
                           ) -> list[str]:
    """Every rule pipeline layout ``text`` breaks for a model of ``num_layers`` transformer
    layers and ``mtp_layers`` multi-token prediction layers under ``p`` stages of ``v`` chunks
    (empty when it is fine); each message names the rule.

    Megatron-Core's rules (``PipelineParallelLayerLayout.validate_layer_layout``): the grammar
    of :func:`expand_pipeline_layout`; ``p*v`` virtual stages; one ``E``, in the first virtual
    stage, one ``L``, in the last; as many ``t`` as ``num_layers`` and ``m`` as
    ``mtp_layers``. MTP layers outside the last virtual stage (with the loss) are refused: not
    modelled."""
    try:
        stages = expand_pipeline_layout(text)
    except ValueError as exc:
        return [f"{text!r} {exc} ({LAYOUT_RULE})"]
    errs: list[str] = []
    n = p * v
    if len(stages) != n:
        errs.append(f"{text!r} has {len(stages)} virtual stages; it needs pipeline_parallel_size*"
                    f"virtual_pipeline_stages = {p}*{v} = {n} (v = virtual_pipeline_stages with the "
                    "interleaved schedule, else 1)")
    flat = "".join(stages)
    for sym, where, k in (("E", "first", 0), ("L", "last", len(stages) - 1)):
        if flat.count(sym) != 1 or sym not in stages[k]:
            errs.append(f"{text!r} must hold exactly one {sym} ({'embedding' if sym == 'E' else 'loss'}"
                        f"), in the {where} virtual stage (Megatron-Core's rule); it has "
                        f"{flat.count(sym)}")
    if flat.count("t") != num_layers:
        errs.append(f"{text!r} has {flat.count('t')} transformer layers (t); the model has "
                    f"num_layers={num_layers}")
    if flat.count("m") != mtp_layers:
        errs.append(f"{text!r} has {flat.count('m')} MTP layers (m); the model has "
                    f"mtp_num_layers={mtp_layers}")
    elif any("m" in st for st in stages[:-1]):
        errs.append(f"{text!r}: MTP layers (m) outside the last virtual stage (the loss's) are "
                    "not modelled")
    return errs


def layout_layer_counts(text: str, num_layers: int, p: int, v: int) -> list[int]:
    """Transformer layers (``t``) of each of the ``p*v`` virtual stages of pipeline layout
    ``text`` (:func:`expand_pipeline_layout`); raises ValueError (the first rule of
    :func:`pipeline_layout_errors` broken, MTP aside: its count needs the model) when it does
    not fit ``num_layers`` over ``p*v`` virtual stages."""
    stages = expand_pipeline_layout(text)
    mtp = "".join(stages).count("m")
    errs = pipeline_layout_errors(text, num_layers, mtp, p, v)
    if errs:
        raise ValueError(f"pipeline_model_parallel_layout {errs[0]}")
    return [st.count("t") for st in stages]


def layout_summary(num_layers: int, plan: ParallelPlan) -> str | None:
    """One line on ``plan``'s custom pipeline layout: its virtual stages and the transformer
    layers of each, runs of equal counts collapsed (``"32 virtual stages: 1, 30 x 2, 0 layers;
    E first, L last"``); None without a layout. Raises ValueError when the layout does not fit
    (:func:`virtual_stage_layer_counts`)."""
    text = pipeline_layout_text(plan)
    if text is None:
        return None
    counts = virtual_stage_layer_counts(num_layers, plan)
    runs: list[list[int]] = []
    for c in counts:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    # as the even split's text: a run of n stages of c layers is "n x c" ("7, 6 x 8, 6")
    parts = ", ".join(f"{n} x {c}" if n > 1 else str(c) for c, n in runs)
    mtp = "".join(expand_pipeline_layout(text)).count("m")
    return (f"{len(counts)} virtual stages: {parts} layers"
            + (f"; {mtp} MTP layer{'s' if mtp > 1 else ''} with the loss" if mtp else ""))


def layout_conflict(plan: ParallelPlan) -> str | None:
    """Why ``plan``'s custom pipeline layout cannot stand with its other split fields, or None
    (no layout, or none of them set)."""
    if pipeline_layout_text(plan) is None or not (
            plan.first_stage_layers is not None or plan.last_stage_layers is not None
            or plan.account_for_embedding_in_pipeline_split is True
            or plan.account_for_loss_in_pipeline_split is True):
        return None
    return ("pipeline_model_parallel_layout cannot be combined with first_stage_layers / "
            "last_stage_layers / account_for_embedding_in_pipeline_split / "
            "account_for_loss_in_pipeline_split (Megatron-Core refuses them together: the "
            "layout places every layer)")


def _layout_conflicts(plan: ParallelPlan) -> None:
    why = layout_conflict(plan)
    if why is not None:
        raise ValueError(why)


def stage_layer_counts(num_layers: int, plan: ParallelPlan, mtp_layers: int | None = None
                       ) -> list[int]:
    """Transformer layers of each pipeline stage, length p (all its model chunks together).

    Even split ``L/p`` unless ``first_stage_layers`` / ``last_stage_layers`` are
    set; then those stages hold that many and the other stages split the rest
    evenly (Megatron-Core ``--decoder-first/last-pipeline-num-layers``). With
    ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``
    the :func:`pipeline_split_slots` ``L + 1`` or ``L + 2`` split evenly over the ``p``
    stages and the first (last) stage holds one layer fewer (Megatron-Core
    ``get_num_layers_to_build``); with interleaving each stage's chunks add up to the same
    counts (the split over ``p*v`` virtual stages is checked by the interleaved schedule,
    :func:`virtual_stage_layer_counts` gives the chunks). With a custom pipeline layout
    (``plan.pipeline_model_parallel_layout``) each stage holds the ``t`` of its virtual stages
    ``i, p + i, ...`` (:func:`layout_layer_counts`; a stage may hold none).
    ``mtp_layers`` (the model's MTP layers, when known) only makes the refusal's custom
    layout hint (:func:`layer_split_hint`) exact.

    Raises
    ------
    ValueError
        The layers do not split that way (never dropped or added silently).
    """
    p, L = plan.pipeline_parallel, num_layers
    layout = pipeline_layout_text(plan)
    if layout is not None:
        _layout_conflicts(plan)
        v = layout_chunks(plan)
        vc = layout_layer_counts(layout, L, p, v)
        from core.schedules import get as get_schedule
        return [sum(vc[k] for k in row)
                for row in get_schedule(plan.schedule).virtual_stages(p, v).tolist()]
    first, last = plan.first_stage_layers, plan.last_stage_layers
    if _split_flags(plan):
        if first is not None or last is not None:
            raise ValueError("first_stage_layers / last_stage_layers cannot be set with "
                             "account_for_embedding_in_pipeline_split / "
                             "account_for_loss_in_pipeline_split (Megatron-Core's rule)")
        slots = pipeline_split_slots(L, plan)
        if slots % p:
            raise PipelineSplitError(f"num_layers={L} + embedding + loss = {slots} layer slots are not "
                             f"divisible by pipeline_parallel_size={p} ({_SLOT_RULE})")
        counts = [slots // p] * p
        counts[0] -= int(bool(plan.account_for_embedding_in_pipeline_split))
        counts[-1] -= int(bool(plan.account_for_loss_in_pipeline_split))
        return counts
    if first is None and last is None:
        if L % p:
            raise PipelineSplitError(f"num_layers={L} is not divisible by pipeline_parallel_size={p}"
                                     + layer_split_hint(L, plan, mtp_layers))
        return [L // p] * p
    if p < 2:
        raise ValueError("first_stage_layers / last_stage_layers need pipeline_parallel_size >= 2")
    rest = L - (first or 0) - (last or 0)
    middle = p - (first is not None) - (last is not None)
    if rest < 0 or (middle == 0 and rest != 0):
        raise ValueError(f"first_stage_layers + last_stage_layers = {(first or 0) + (last or 0)} "
                         f"must {'equal' if middle == 0 else 'be less than'} num_layers={L}")
    if middle and (rest == 0 or rest % middle):
        raise PipelineSplitError(f"the {rest} layers left after the first/last stage's do not split evenly "
                         f"over the other {middle} stages")
    each = rest // middle if middle else 0
    counts = [each] * p
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


def capped_recompute_layers(plan: ParallelPlan, num_layers: int, mtp_layers: int = 0
                            ) -> ParallelPlan:
    """``plan`` with ``recompute_num_layers`` None when the count reaches the plan's largest
    model chunk, else ``plan`` itself; with ``mtp_layers`` (the model's multi-token prediction
    layers) above 0, such a count becomes the largest chunk's layers instead.

    Megatron's block method applies ``--recompute-num-layers`` to each model chunk
    (TransformerBlock: a pipeline stage, or a virtual stage under the interleaved schedule)
    and a chunk with fewer layers recomputes them all, so such a count is "every layer"
    (the same simulation). Not with MTP layers: Megatron-Core recomputes them by the uniform
    method only (:func:`core.model.recompute.mtp_layers_recomputed`; None reads as uniform),
    so the block method's count stays one, capped. Readers of other tools' settings
    (Megatron arguments, published runs) and the sweep's plans take it through here;
    :func:`validate` refuses a count above every chunk in a session, where it reads as a
    per-stage count. A plan whose layers do not split is returned as is (validation names
    it)."""
    n = plan.recompute_num_layers
    if not isinstance(n, int) or isinstance(n, bool):
        return plan
    most = largest_model_chunk(num_layers, plan)
    if not most or n < most:
        return plan
    if mtp_layers > 0:
        return plan if n == most else dataclasses.replace(plan, recompute_num_layers=most)
    return dataclasses.replace(plan, recompute_num_layers=None)


def largest_model_chunk(num_layers: int, plan: ParallelPlan, chunks: int | None = None
                        ) -> int | None:
    """Transformer layers of the plan's largest model chunk (:func:`virtual_stage_layer_counts`
    with ``chunks``: a pipeline stage, or a virtual stage under the interleaved schedule), or
    None when the layers do not split (validation names why) or no chunk holds a layer."""
    try:
        return max(virtual_stage_layer_counts(num_layers, plan, chunks), default=0) or None
    except (ValueError, TypeError, ZeroDivisionError):
        return None


def virtual_stage_layer_counts(num_layers: int, plan: ParallelPlan, chunks: int | None = None
                               ) -> list[int]:
    """Transformer layers of each of the ``p*v`` virtual stages, length ``p*v``; virtual stage
    ``k`` is model chunk ``k // p`` of stage ``k % p`` and holds the layers after those of
    virtual stages ``0..k-1``.

    ``chunks`` is ``v`` (default: ``plan.virtual_pipeline_stages`` under the interleaved
    schedule, else 1). With ``v = 1`` this is :func:`stage_layer_counts`. With interleaving
    the layers split evenly, ``L/(p v)`` each; with the embedding / loss flags the
    :func:`pipeline_split_slots` split evenly, ``(L + 2)/(p v)`` each, the first virtual
    stage's first slot being the embedding and the last's last slot the loss, so those hold
    one layer fewer (Megatron-Core ``get_num_layers_to_build`` and
    ``get_transformer_layer_offset``; a virtual stage may hold no layer, as Megatron
    allows). Example: Llama 3.1 405B, 126 layers, p=8 v=8 -> ``[1, 2, ..., 2, 1]``. With a
    custom pipeline layout (``plan.pipeline_model_parallel_layout``, Megatron-Core's
    ``--pipeline-model-parallel-layout``) the ``t`` of each of its virtual stages
    (:func:`layout_layer_counts`): DeepSeek-V3's ``"Et|(tt|)*30mL"``, 61 layers, p=8 v=4 ->
    ``[1, 2, ..., 2, 0]``.

    Raises
    ------
    ValueError
        The layers (slots) do not split evenly over the ``p*v`` virtual stages, uneven
        first/last stages are combined with interleaving, or the layout does not fit
        (:func:`pipeline_layout_errors`) or is combined with the other split fields.
    """
    p = plan.pipeline_parallel
    if chunks is None:
        chunks = layout_chunks(plan)
    v = int(chunks)
    layout = pipeline_layout_text(plan)
    if layout is not None:
        _layout_conflicts(plan)
        return layout_layer_counts(layout, num_layers, p, max(v, 1))
    if v <= 1:
        return stage_layer_counts(num_layers, plan)
    if plan.first_stage_layers is not None or plan.last_stage_layers is not None:
        raise NotModelledError("first_stage_layers / last_stage_layers with the interleaved schedule "
                         "are not modelled yet")
    slots, n = pipeline_split_slots(num_layers, plan), p * v
    if slots % n:
        what = (f"num_layers={num_layers} + embedding + loss = {slots} layer slots"
                if _split_flags(plan) else f"num_layers={num_layers}")
        raise PipelineSplitError(f"{what} not divisible by pipeline_parallel_size*virtual_pipeline_stages"
                         f"={p}*{v}={n}" + (f" ({_SLOT_RULE})" if _split_flags(plan) else ""))
    counts = [slots // n] * n
    counts[0] -= int(bool(plan.account_for_embedding_in_pipeline_split))
    counts[-1] -= int(bool(plan.account_for_loss_in_pipeline_split))
    return counts

