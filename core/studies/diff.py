"""Why plan B is faster or slower than plan A: the iteration time split into terms.

One plan's iteration time ``T`` is the sum of the report's per-stage means
(:class:`core.sim.report.Report`): compute + blocking tensor- and data-parallel
communication + exposed pipeline communication + pipeline bubble + stage
imbalance. :func:`time_terms` splits the compute and the communication by task
kind (mean over stages of each kind's busy time); every view names the terms by
:data:`core.sim.labels.TIME_TERMS`:

* ``forward_backward``: forward, backward (input and weight gradients), embedding
  and output + loss work (the report's ``compute_s`` is this plus recomputation and
  the optimizer step);
* ``recomputation``: the recomputed forward of activation recomputation;
* ``optimizer``: the optimizer step;
* ``tp_comm``, ``dp_comm``, ``cp_comm``, ``ep_comm`` (the report's names; a
  communication kind a later model adds, by its kind name): communication of
  that kind that blocks the compute stream. Communication overlapped with
  compute (``--overlap-grad-reduce`` buckets, on a stream of their own) is
  left out, as the report leaves it out: it is hidden, and what it does not
  hide shows as idle time; its busy time is given apart
  (``overlapped_comm`` of :class:`PlanDiff`);
* ``pp_comm``: what pipeline transfers add to the iteration (``T`` minus the
  time with free transfers);
* ``bubble``: the schedule's idle time with balanced stages;
* ``imbalance``: the idle time unequal stages add;
* ``rest``: ``T`` minus the sum of the others, which closes the sum; zero up
  to rounding while the report's terms sum to ``T`` (they do by construction).

The terms of a plan sum to its ``T`` exactly, so the terms of ``B - A`` sum
to the difference of the iteration times.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.plan.session import Session
from core.sim.graph_types import KINDS
from core.sim.labels import DIFF_TERMS

__all__ = ["TERMS", "time_terms", "PlanDiff", "diff_plans"]

#: Term of each task kind (kinds not listed are their own term, by name); the terms'
#: names are :data:`core.sim.labels.TIME_TERMS`.
KIND_TERM = {"forward": "forward_backward", "backward": "forward_backward",
             "wgrad": "forward_backward", "embedding": "forward_backward",
             "output": "forward_backward", "recompute": "recomputation",
             "optimizer": "optimizer", "tp_comm": "tp_comm", "dp_comm": "dp_comm",
             "cp_p2p": "cp_comm", "ep_all_to_all": "ep_comm",
             "pp_p2p": None}  # pipeline transfers: the report's pp_comm_s
#: Terms in display order (:data:`core.sim.labels.DIFF_TERMS`).
TERMS = DIFF_TERMS


def time_terms(result) -> tuple[dict[str, float], dict[str, list[float]], dict[str, float]]:
    """The terms of one simulated iteration (see the module doc).

    Parameters
    ----------
    result : core.sim.simulate.SimulationResult

    Returns
    -------
    terms : dict[str, float]
        Term name -> seconds (mean over pipeline stages); they sum to the iteration time.
    per_stage : dict[str, list[float]]
        Term name -> seconds per stage (length p), for the terms that are per-stage
        busy times (compute, recomputation, optimizer, communication kinds).
    overlapped : dict[str, float]
        Communication kind term -> mean busy seconds of its tasks overlapped with
        compute (not in ``terms``); empty when nothing overlaps.
    """
    g, r = result.graph, result.report
    p = result.session.plan.pipeline_parallel
    beside = getattr(g, "overlapped", None)
    beside = np.zeros(g.kind.shape, bool) if beside is None else np.asarray(beside, bool)
    per_stage: dict[str, np.ndarray] = {}
    overlapped: dict[str, float] = {}
    for k, name in enumerate(KINDS):
        term = KIND_TERM.get(name, name)
        if term is None:
            continue
        sel = g.kind == k
        if not sel.any() and term not in TERMS:
            continue
        hidden = sel & beside
        if hidden.any():
            overlapped[term] = overlapped.get(term, 0.0) + float(g.duration_s[hidden].sum()) / p
        sel &= ~beside
        busy = np.bincount(g.stage[sel], g.duration_s[sel], minlength=p)
        per_stage[term] = per_stage.get(term, np.zeros(p)) + busy
    terms = {t: float(v.mean()) for t, v in per_stage.items()}
    terms.update(pp_comm=float(r.pp_comm_s), bubble=float(r.bubble_s),
                 overlap_wait=float(r.overlap_wait_s), imbalance=float(r.imbalance_s))
    ordered = {t: terms.get(t, 0.0) for t in TERMS if t != "rest"}
    ordered.update({t: v for t, v in terms.items() if t not in ordered})
    ordered["rest"] = float(r.iteration_time_s) - sum(ordered.values())
    return ordered, {t: v.tolist() for t, v in per_stage.items()}, overlapped


@dataclass
class PlanDiff:
    """Plan A against plan B.

    Attributes
    ----------
    a, b : core.sim.simulate.SimulationResult
    terms_a, terms_b : dict[str, float]
        :func:`time_terms` of each, seconds.
    terms : dict[str, float]
        ``terms_b - terms_a`` per term, seconds; sums to :attr:`difference_s`.
    per_stage_a, per_stage_b : dict[str, list[float]]
    overlapped_a, overlapped_b : dict[str, float]
        Busy seconds of communication overlapped with compute, by kind (not in the terms).
    """

    a: Any
    b: Any
    terms_a: dict[str, float]
    terms_b: dict[str, float]
    terms: dict[str, float] = field(default_factory=dict)
    per_stage_a: dict[str, list[float]] = field(default_factory=dict)
    per_stage_b: dict[str, list[float]] = field(default_factory=dict)
    overlapped_a: dict[str, float] = field(default_factory=dict)
    overlapped_b: dict[str, float] = field(default_factory=dict)

    def shown_terms(self) -> list[str]:
        """The terms a table or chart of this diff shows, in order: those either plan has
        (more than 1e-9 of the longer iteration time in A or B); a term neither has (the
        rounding rest, overlap wait without overlapped communication, a kind neither plan
        uses) is left out. ``vtrain diff`` and the Compare tab show the same terms."""
        tiny = 1e-9 * max(self.a.report.iteration_time_s, self.b.report.iteration_time_s)
        return [name for name in self.terms
                if abs(self.terms_a.get(name, 0.0)) > tiny or abs(self.terms_b.get(name, 0.0)) > tiny]

    @property
    def difference_s(self) -> float:
        """Iteration time of B minus A, seconds."""
        return float(self.b.report.iteration_time_s - self.a.report.iteration_time_s)

    def to_dict(self) -> dict[str, Any]:
        """What ``vtrain diff --json`` prints: ``difference_s`` (B - A), ``terms`` (name ->
        seconds, summing to it), and per plan its iteration time, terms, per-stage terms,
        memory per GPU with the GPU's capacity, the planner's margin (``memory_margin``, also
        as ``memory_reserve_fraction``, simulate's name) and the verdict
        (``memory_verdict``: fits, tight or does not fit, :func:`core.sim.report.memory_verdict`;
        ``memory_verdict_text`` with its figures and the margin named), days and cost, and
        its report's ``warnings`` (what ``vtrain simulate`` warns of: a profile store of
        another GPU kind than ``cluster.gpu``, collectives extrapolated beyond the measured
        sizes ...)."""
        def plan(res, terms, stages, overlapped) -> dict[str, Any]:
            r, pl = res.report, res.session.plan
            return {"label": plan_label(res.session), "iteration_time_s": r.iteration_time_s,
                    "terms": terms, "per_stage": stages, "overlapped_comm_s": overlapped,
                    "num_gpus": pl.num_gpus,
                    "max_memory_per_gpu_bytes": r.max_memory_per_gpu_bytes,
                    "fits_in_memory": r.fits_in_memory,
                    "memory_capacity_bytes": r.memory_capacity_bytes,
                    "memory_margin": r.memory_reserve_fraction,
                    # the same figure under simulate --json's (and the session's) name
                    "memory_reserve_fraction": r.memory_reserve_fraction,
                    "memory_verdict": r.memory_verdict,
                    "memory_verdict_text": r.memory_verdict_text, "training_days": r.training_days,
                    "gpu_hours": r.gpu_hours, "cost_usd": r.cost_usd, "mfu": r.mfu,
                    "iteration_time_interval_s": (
                        [r.interval.low_s, r.interval.high_s]
                        if r.interval is not None and r.interval.available else None),
                    "warnings": list(r.warnings)}
        ra, rb = self.a.report, self.b.report
        return {"difference_s": self.difference_s, "terms": dict(self.terms),
                "relative_difference": self.difference_s / ra.iteration_time_s,
                "memory_difference_bytes": rb.max_memory_per_gpu_bytes - ra.max_memory_per_gpu_bytes,
                "cost_difference_usd": rb.cost_usd - ra.cost_usd,
                "training_days_difference": rb.training_days - ra.training_days,
                "beyond_plan": beyond_plan(self.a.session, self.b.session),
                "idle_plan_differences": idle_plan_differences(self.a.session, self.b.session),
                "a": plan(self.a, self.terms_a, self.per_stage_a, self.overlapped_a),
                "b": plan(self.b, self.terms_b, self.per_stage_b, self.overlapped_b)}


def beyond_plan(a: Session, b: Session) -> list[dict[str, Any]]:
    """What differs between two sessions besides the plan, ``{"field", "a", "b"}`` each: the
    model when its fields differ (named by its name, or each field when the names agree; a
    name alone is a label, not a difference), then each cluster and cost field
    (``cluster.profile_path`` when the two use other store files: null and a path to the
    shipped store of the same GPU are one store; ``cluster.inter_node_bandwidth_gbits_per_s``
    when the nodes' networks differ: empty is the GPU's reference node).
    Empty when the two differ in the plan only; otherwise the difference of iteration times,
    days and cost is not the plans' alone."""
    out: list[dict[str, Any]] = []
    ma, mb = _resolved(a.model), _resolved(b.model)
    if ma != dataclasses.replace(mb, name=ma.name):  # the name is a label
        if a.model.name != b.model.name:
            out.append({"field": "model", "a": a.model.name, "b": b.model.name})
        else:
            out += [{"field": f"model.{f.name}", "a": getattr(a.model, f.name),
                     "b": getattr(b.model, f.name)} for f in dataclasses.fields(a.model)
                    if getattr(ma, f.name) != getattr(mb, f.name)]
    for section in ("cluster", "cost"):
        x, y = getattr(a, section), getattr(b, section)
        out += [{"field": f"{section}.{f.name}", "a": getattr(x, f.name), "b": getattr(y, f.name)}
                for f in dataclasses.fields(x) if getattr(x, f.name) != getattr(y, f.name)
                and not (f.name == "profile_path" and _same_store(a, b))
                and not (f.name == "inter_node_bandwidth_gbits_per_s" and _same_network(a, b))]
    return out


def idle_plan_differences(a: Session, b: Session) -> list[dict[str, Any]]:
    """The plan fields whose values differ between two sessions but change nothing in either
    (``{"field", "a", "b"}`` each): a field that A's full plan label does not show with B's value
    in its place (:meth:`ParallelPlan.label` leaves out the fields without effect, e.g.
    ``plan.tp_saved_input`` without tensor and sequence parallelism, ``plan.fp8_impl`` outside
    FP8, ``plan.fsdp_fp32_params`` outside ZeRO-3), and likewise B's. Two plans that differ in
    these alone read the same label and the same figures: the list says why."""
    out: list[dict[str, Any]] = []
    pa, pb = a.plan, b.plan
    if not dataclasses.is_dataclass(pa) or type(pa) is not type(pb):
        return out
    la, lb = pa.label(full=True), pb.label(full=True)
    for f in dataclasses.fields(pa):
        x, y = getattr(pa, f.name), getattr(pb, f.name)
        if x == y:
            continue
        try:
            same = (dataclasses.replace(pa, **{f.name: y}).label(full=True) == la
                    and dataclasses.replace(pb, **{f.name: x}).label(full=True) == lb)
        except (TypeError, ValueError):  # a value the other plan cannot hold: not idle
            same = False
        if same:
            out.append({"field": f"plan.{f.name}", "a": x, "b": y})
    return out


def _resolved(model: Any) -> Any:
    """``model`` with the fields whose empty value means a value of the others filled in:
    ``kv_channels`` (empty: h/a, :attr:`ModelConfig.head_dim`) and ``num_query_groups`` (empty:
    a, :attr:`ModelConfig.query_groups`), so that a preset's Llama 3 70B (kv_channels empty)
    and the same model imported from a Hugging Face config or a Megatron-Bridge run_config.yaml
    (kv_channels 128) are one model."""
    return dataclasses.replace(model, kv_channels=model.head_dim,
                               num_query_groups=model.query_groups)


def _same_network(a: Session, b: Session) -> bool:
    """Whether two sessions' nodes have one network bandwidth
    (:func:`core.plan.cluster.node_network_gbits_per_s`: an empty field is the GPU's reference
    node, 1,600 Gb/s for eight A100s, which a number may also give)."""
    from core.plan.cluster import node_network_gbits_per_s
    try:
        return node_network_gbits_per_s(a.cluster) == node_network_gbits_per_s(b.cluster)
    except ValueError:  # a GPU kind without a reference node and the field empty
        return False


def _same_store(a: Session, b: Session) -> bool:
    """Whether two sessions use one profile store file (:func:`core.sim.simulate.profile_path`:
    ``cluster.profile_path`` null is the shipped store of ``cluster.gpu``, which a path may
    also name): then their ``profile_path`` texts differ without the stores differing."""
    import os

    from core.sim.simulate import profile_path
    pa, pb = profile_path(a), profile_path(b)
    try:
        return os.path.samefile(pa, pb)
    except (OSError, ValueError):  # a missing store, a NUL byte: the texts decide
        return os.path.abspath(pa) == os.path.abspath(pb)


def _value_text(v: Any, other: Any = None) -> str:
    """A session field's value as :func:`beyond_plan_text` shows it: floats in short form, or
    exactly when the short forms of ``v`` and the ``other`` side's value would read the same
    (26,000,000,000 and 25,999,998,976 tokens are not both "2.6e+10"); an empty field (null
    in the file) as "empty", the word of the fields' help ("empty means the GPU's reference
    node"), never Python's "None"; true and false as the file writes them."""
    if v is None:
        return "empty"
    if isinstance(v, bool):
        return "true" if v else "false"
    if not isinstance(v, float):
        return str(v)
    short = f"{v:,.4g}"
    if isinstance(other, float) and other != v and f"{other:,.4g}" == short:
        return f"{v:,.0f}" if abs(v) >= 1e4 and v == int(v) else repr(v)
    return short


def beyond_plan_text(items: list[dict[str, Any]]) -> str:
    """``"model GPT-3 1.3B / MT-NLG 530B; cluster.gpus_per_node 8 / 16"``: the fields of
    :func:`beyond_plan` with A's value, then B's (what ``vtrain diff`` and the Compare tab
    print after "A and B differ beyond the plan"); empty for no items."""
    return "; ".join(f"{x['field']} {_value_text(x['a'], x['b'])} / {_value_text(x['b'], x['a'])}"
                     for x in items)


def plan_label(session: Session) -> str:
    """``"t=8 p=16 d=4 b=1 1f1b recompute=full"``-style label of a session's plan; a precision
    other than bf16 is named (``"... precision=fp8 fp8=delayed"``, ``"... precision=fp32
    tf32"``: two plans that differ in it read apart)."""
    pl = session.plan
    if hasattr(pl, "label"):
        if getattr(pl, "precision", "bf16") == "bf16":
            return pl.label()
        from core.plan.parallel import fp8_recipe, tf32_matmuls
        recipe = fp8_recipe(pl)
        return (f"{pl.label()} precision={pl.precision}" + (f" fp8={recipe}" if recipe else "")
                + (" tf32" if tf32_matmuls(pl) else ""))
    return (f"t={pl.tensor_parallel} p={pl.pipeline_parallel} d={pl.data_parallel} "
            f"b={pl.micro_batch_size} {pl.schedule} recompute={pl.recompute}")


def diff_plans(a: Session, b: Session, store_a=None, store_b=None) -> PlanDiff:
    """Simulate both sessions and split the difference of their iteration times into terms.

    Raises what :func:`core.sim.simulate.simulate` raises (ConfigError, ProfileStoreError, KeyError).
    """
    from core.sim.simulate import simulate

    return diff_results(simulate(a, store_a), simulate(b, store_b))


def diff_results(ra, rb) -> PlanDiff:
    """Split the difference of two simulated iterations' times into terms (B minus A).

    Parameters
    ----------
    ra, rb : core.sim.simulate.SimulationResult
        Plan A and plan B, already simulated (the window's pinned and edited plans).

    Returns
    -------
    PlanDiff
        Its ``terms`` sum to ``difference_s`` (seconds).
    """
    ta, sa, oa = time_terms(ra)
    tb, sb, ob = time_terms(rb)
    names = list(dict.fromkeys([*ta, *tb]))
    terms = {t: tb.get(t, 0.0) - ta.get(t, 0.0) for t in names}
    return PlanDiff(ra, rb, ta, tb, terms, sa, sb, oa, ob)


__all__ += ["KIND_TERM", "plan_label", "diff_results", "beyond_plan", "idle_plan_differences",
            "beyond_plan_text"]
