"""The op model's fitted parameters, their bounds and start, and the stores a set of them makes.

What belongs here: the parameter tables of the calibration (:data:`FIT_PARAMS` with its
start :data:`FIT_START`, the shared fit's :data:`SHARED_FIT_PARAMS` and their bounds,
:func:`param_bounds`), the key a measured shape's correction is filed under
(:func:`shape_key`, :data:`SHAPE_FACTOR_FAMILY`) and the stores an op model and corrections
make (:func:`store_op_model`, :func:`model_store`, :func:`apply_fit`). The fit itself is
:mod:`core.accuracy.calibrate`'s, the critical-path linearization it fits through
:mod:`core.accuracy.linearize`'s; the trace fit (:mod:`core.accuracy.trace_fit`) and the
shared fit of GPU kinds (:mod:`core.accuracy.shared_fit`) use the same tables and stores.
"""

from __future__ import annotations

import numpy as np

from core.plan.session import Session
from core.plan.model_config import padded_vocab_size
from core.store.gpu_spec import fits_peak_fraction
from core.model.keys import mla_key
from core.model.ops import DEFAULT_OP_MODEL, DERIVED_OPS, table_covers
from core.store.profile_store import ProfileStore

__all__ = ["FIT_PARAMS", "FIT_START", "HALF_PRECISIONS", "OPTIONAL_BOUNDS", "SHAPE_FACTOR_FAMILY",
           "SHARED_FIT_PARAMS", "store_op_model", "shared_fit_params", "param_bounds",
           "BaseStores", "base_of", "shape_key", "model_store", "apply_fit"]

#: Fitted parameters and their bounds (SI units).
FIT_PARAMS: dict[str, tuple[float, float]] = {
    "gemm_efficiency_max": (0.2, 1.0),
    "gemm_half_size": (1.0, 4000.0),
    "memory_efficiency": (0.1, 1.0),
    "kernel_overhead_s": (0.0, 100e-6),
    "op_overhead_s": (0.0, 5e-3),
    "kernel_launch_s": (0.0, 100e-6),
    "iteration_overhead_s": (0.0, 2.0),
    "collective_overhead_s": (0.0, 5e-3),
    "p2p_overhead_s": (0.0, 5e-3),
    "inter_node_efficiency": (0.05, 1.0),
}
# p2p_efficiency is not fitted: on the authors' data it improved no fit (in-sample MAPE
# 5.68 % -> 5.69 % on the multi-node runs) and drifted to unphysical values (12 % of the
# network share), which made 1F1B look slower than GPipe for reasons nobody measured.
#: Where the search starts (host overheads must start above zero: below the
#: device time their gradient vanishes).
FIT_START = {"gemm_efficiency_max": 0.7, "gemm_half_size": 200.0, "memory_efficiency": 0.7,
             "kernel_overhead_s": 2e-6, "op_overhead_s": 2e-4, "kernel_launch_s": 5e-6,
             "iteration_overhead_s": 1e-3, "collective_overhead_s": 1e-5, "p2p_overhead_s": 1e-5,
             "inter_node_efficiency": 0.8}
#: Precisions that run at the same tensor-core rate: a half-precision shape's correction holds
#: for both (:func:`apply_fit`).
HALF_PRECISIONS = ("fp16", "bf16")
#: Ops a measured shape's correction factor scales (:func:`shape_key`): the transformer layer's
#: ("layer") and the embedding and output ops ("edge"); every other op keeps the model's time.
SHAPE_FACTOR_FAMILY = {
    "attention_fwd": "layer", "attention_bwd": "layer", "mlp_fwd": "layer", "mlp_bwd": "layer",
    "attention_core_fwd": "layer", "layernorm_fwd": "layer", "mlp_core_fwd": "layer",
    "attention_swa_fwd": "layer", "attention_swa_bwd": "layer",
    "attention_core_swa_fwd": "layer", "attention_sac_fwd": "layer", "mlp_sac_fwd": "layer",
    "embedding_fwd": "edge", "embedding_bwd": "edge", "output_fwd": "edge", "output_bwd": "edge"}


#: Parameters of the shared fit of the modern GPU kinds (:func:`shared_fit_params`): efficiencies
#: as fractions of each GPU's data-sheet peaks (GEMM FLOP/s, HBM bandwidth, network bandwidth)
#: and the FP8 GEMM and all-to-all efficiencies where the op model has them. With a few
#: dozen runs over four GPU kinds, shape parameters (``gemm_half_size``) are left at the spec's
#: values and host overheads at the spec's or the A100 fit's
#: (:data:`core.accuracy.shared_fit.SHARED_FIXED`): the runs are few, and cannot pin them
#: beside the efficiencies.
#: ``peak_fraction`` is not shared: it is the sustained share of the reference peaks of the
#: GPU kinds without a data sheet of their own (:func:`fits_peak_fraction`), fitted with the
#: others on those kinds' runs alone (every other kind keeps 1, :func:`store_op_model`).
SHARED_FIT_PARAMS = ("gemm_efficiency_max", "memory_efficiency", "inter_node_efficiency",
                     "fp8_gemm_efficiency", "all_to_all_efficiency", "flex_all_to_all_efficiency",
                     "peak_fraction", "grouped_gemm_efficiency", "flash_attention_efficiency")
#: Bounds of the optional shared parameters (added to FIT_PARAMS when the op model has them).
#: The kernel classes' relative efficiencies (shares of the dense GEMM curve's,
#: :func:`core.model.ops.kernel_class`) lie in 0.3-1.2: a grouped expert GEMM (Megatron-Core's
#: ``TEGroupedMLP``, cuBLASLt / CUTLASS grouped GEMM) runs its experts' GEMMs at the dense rate
#: of their own size at best (the half-size roll-off already takes the per-expert rows) and
#: loses to the busiest expert, the grouped launch and the tile waste of ragged row counts;
#: FlashAttention's forward sustains 50-73 % of the A100's peak (Dao 2023, Sec. 4.1) and up to
#: 75 % of the H100's BF16 peak (Shah et al. 2024, Sec. 4.1), against 70-80 % for cuBLAS GEMMs,
#: about 0.7-1.0 of the dense curve; the upper bound 1.2 leaves room where the dense curve
#: itself sits low (its fitted maximum under what cuBLAS reaches).
OPTIONAL_BOUNDS = {"fp8_gemm_efficiency": (0.3, 1.2), "all_to_all_efficiency": (0.05, 1.0),
                    "flex_all_to_all_efficiency": (0.05, 1.0), "peak_fraction": (0.3, 1.0),
                    "grouped_gemm_efficiency": (0.3, 1.2), "flash_attention_efficiency": (0.3, 1.2)}


def store_op_model(store: ProfileStore, op_model: dict[str, float]) -> dict[str, float]:
    """``op_model`` as ``store``'s device runs it: ``peak_fraction`` 1 unless the device has
    no data sheet of its own (:func:`fits_peak_fraction`). One op model is fitted for every GPU
    kind; only the kinds without a data sheet sustain a fitted share of their reference peaks."""
    if op_model.get("peak_fraction", 1.0) != 1.0 and not fits_peak_fraction(store):
        return {**op_model, "peak_fraction": 1.0}
    return op_model


def shared_fit_params() -> list[str]:
    """The shared-fit parameters the op model knows (:data:`SHARED_FIT_PARAMS` that are keys of
    :data:`core.model.ops.DEFAULT_OP_MODEL`)."""
    return [n for n in SHARED_FIT_PARAMS if n in DEFAULT_OP_MODEL]


def param_bounds(name: str, overrides: dict[str, tuple[float, float]] | None = None
                 ) -> tuple[float, float]:
    """Bounds ``(low, high)`` of fit parameter ``name``: ``overrides``' (the shared fit's
    :data:`core.accuracy.shared_fit.SHARED_BOUNDS`), else :data:`FIT_PARAMS`' or those of the
    optional shared parameters.

    Raises
    ------
    KeyError
        A parameter without bounds.
    """
    if overrides and name in overrides:
        return tuple(overrides[name])
    return _bounds(name)


def _bounds(name: str) -> tuple[float, float]:
    if name in FIT_PARAMS:
        return FIT_PARAMS[name]
    if name in OPTIONAL_BOUNDS:
        return OPTIONAL_BOUNDS[name]
    raise KeyError(f"no bounds for fit parameter {name!r}")


#: A profile store, or a function giving each session its store (several GPU kinds fitted
#: together: each run's times come from its own GPU's peaks, the parameters are shared).
BaseStores = "ProfileStore | Callable[[Session], ProfileStore]"


def base_of(base, session: Session) -> ProfileStore:
    """The base store of ``session``: ``base`` itself, or ``base(session)`` when it is a function."""
    return base(session) if callable(base) else base


def shape_key(session: Session) -> tuple:
    """Correction key of a plan: ``("shape", s, h, a, f, V, t, b, dtype)`` (V padded) for a GPT;
    a model of another family (:data:`core.model.keys.FAMILY_KEY_DEFAULTS` not at GPT's values)
    adds its family columns, and :func:`apply_fit` tabulates no correction for it (its ops keep
    the fitted model: a GPT shape's factor never reaches it, nor its factor a GPT)."""
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    key = ("shape", m.seq_length, m.hidden_size, m.num_attention_heads, m.ffn,
           padded_vocab_size(m.vocab_size, t, divisible_by=m.make_vocab_size_divisible_by), t,
           pl.micro_batch_size, pl.precision)
    family = (m.query_groups, m.activation, m.normalization, m.position_embedding,
              m.attention_kernel, int(m.qk_layernorm), m.head_dim)
    gpt = (m.num_attention_heads, "gelu", "layernorm", "learned", "unfused", 0,
           m.hidden_size // m.num_attention_heads)
    if m.is_moe:  # an MoE model never shares a factor with its dense counterpart
        family += ("moe", m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts,
                   m.moe_layer_frequency, m.moe_first_dense_layers, pl.expert_parallel,
                   pl.expert_tensor_parallel)
    if m.multi_latent_attention is True:  # MLA's attention never shares a GPT factor
        family += ("mla", *mla_key(m).values())
    if pl.context_parallel > 1:  # ops of s/cp tokens (context parallelism needs flash: not GPT)
        family += (pl.context_parallel,)
    return key if family == gpt else key + family


def model_store(base: ProfileStore, op_model: dict[str, float]) -> ProfileStore:
    """A copy of ``base`` without op tables (every op from the analytic model) and with ``op_model``
    (as ``base``'s device runs it, :func:`store_op_model`)."""
    store = ProfileStore(base.device_name, dict(base.peak_flops), base.memory_bytes,
                         base.memory_bandwidth_bytes_per_s, dict(base.provenance),
                         dict(store_op_model(base, op_model)))
    for kind, sizes in base.collective_kinds().items():
        for n in sizes:
            store.add_collective(kind, n, *base.collective_curve(kind, n))
    return store


def apply_fit(base: ProfileStore, op_model: dict[str, float],
              corrections: dict[tuple, float] | None = None) -> ProfileStore:
    """``base``'s device with the fitted model, and op tables holding the corrected times.

    Corrected shapes are tabulated at the generator's micro-batch sizes too,
    with the factor log-interpolated between measured micro-batch sizes and
    the nearest measured one beyond them, so a table row along b never mixes
    corrected and uncorrected times. bf16 and fp16 run at the same
    tensor-core rate, so a half-precision shape's factor holds for both.
    """
    from core.store.profiles_gen import fill_op_tables

    store = model_store(base, op_model)
    by_shape: dict[tuple, dict[int, float]] = {}  # (s, h, a, f, V, t, dtype) -> {b: factor}
    for key, c in (corrections or {}).items():
        if len(key) != 9:  # a model of another family (see shape_key): the model times it
            continue
        _, seq, h, a, f, V, t, b, dtype = key
        twins = HALF_PRECISIONS if dtype in HALF_PRECISIONS else (dtype,)
        for dt in twins:
            by_shape.setdefault((seq, h, a, f, V, t, dt), {})[b] = c
    extra = [dict(s=k[0], h=k[1], a=k[2], f=k[3], V=k[4], t=k[5], dtype=k[6], b=min(v))
             for k, v in by_shape.items()]

    def factor(op: str, key: dict) -> float:
        if op not in SHAPE_FACTOR_FAMILY or not table_covers(DERIVED_OPS.get(op, op), key, ()):
            return 1.0  # corrections are of GPT shapes (table_covers: key at GPT's values)
        for (seq, h, a, f, V, t, dtype), by_b in by_shape.items():
            if ((seq, h, t, dtype) == (key["s"], key["h"], key["t"], key["dtype"])
                    and key.get("a", a) == a and key.get("f", f) == f and key.get("V", V) == V):
                if key["b"] in by_b:
                    return by_b[key["b"]]
                bs = np.array(sorted(by_b), float)
                logs = np.log([by_b[int(x)] for x in bs])
                return float(np.exp(np.interp(np.log(key["b"]), np.log(bs), logs)))
        return 1.0

    fill_op_tables(store, extra, factor)
    return store

