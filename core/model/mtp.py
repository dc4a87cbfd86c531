"""Multi-token prediction (DeepSeek-V3; Megatron-Core ``MultiTokenPredictionLayer``): its layers,
extra parameters, kernels of :data:`core.model.keys.MTP_OPS`, tensor-parallel collectives and,
with context parallelism, the boundary exchanges of ``roll_tensor``.
"""

from __future__ import annotations

from typing import Any, Mapping

from core.model.base import DTYPE_BYTES, Kernel, mem, wgrad_accumulate, wgrad_accumulate_bytes
from core.model.fp8 import linear_kernels
from core.plan.model_config import ModelConfig
from core.plan.parallel import tensor_dtype

__all__ = [
    "MTP_CP_ROLL_ELEMENT_BYTES", "mtp_cp_roll_bytes", "mtp_extra_parameters",
    "mtp_layer_is_moe", "mtp_layers", "mtp_op_kernels", "mtp_tp_collectives",
]

#: Bytes per element of the tensors Megatron-Core 0.16.1 rolls once per MTP layer and
#: micro-batch (``roll_tensor(..., cp_group=self.cp_group)``), in call order: the input ids and
#: position ids in ``MultiTokenPredictionLayer._get_embeddings``
#: (``transformer/multi_token_prediction.py`` lines 705 and 712), the labels and the loss mask
#: in ``GPTModel._postprocess`` before each MTP loss (``models/gpt/gpt_model.py`` lines 626 and
#: 633). The ids, positions and labels are int64 (``GPTDataset.__getitem__``:
#: ``torch.from_numpy(text).long()``; ``torch.arange(..., dtype=torch.long)``), the loss mask
#: float32 (``torch.ones(seq_length, dtype=torch.float)``; ``datasets/gpt_dataset.py``).
MTP_CP_ROLL_ELEMENT_BYTES = (8, 8, 8, 4)


def mtp_layers(model: ModelConfig) -> int:
    """Multi-token prediction layers ``N`` (``model.mtp_num_layers``; 0 without)."""
    return int(getattr(model, "mtp_num_layers", 0) or 0)


def mtp_layer_is_moe(model: ModelConfig) -> bool:
    """Whether an MTP layer's transformer layer is an MoE layer: Megatron-Core builds it with
    the decoder's last layer's spec (``get_gpt_mtp_block_spec(config,
    transformer_layer_spec.layer_specs[-1])``), so it is one when layer ``L - 1`` is
    (:func:`moe_layer_mask`; DeepSeek-V3: yes)."""
    if not model.is_moe:
        return False
    i = model.num_layers - 1
    return i >= model.moe_first_dense_layers and i % model.moe_layer_frequency == 0


def mtp_extra_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of one MTP layer besides its transformer
    layer (Megatron-Core ``MultiTokenPredictionLayer``; DeepSeek-V3 report, Sec. 2.2): the
    projection ``eh_proj`` of the concatenated ``2h`` to ``h`` (column-parallel, no bias:
    ``2h^2``) and three norms, ``enorm`` and ``hnorm`` on its two inputs and the final norm
    before the shared output layer (``h`` each with RMSNorm, ``2h`` with LayerNorm). The
    embedding and the output layer are the main model's (shared)."""
    h = model.hidden_size
    w = 2 if model.normalization == "layernorm" else 1
    return 2.0 * h * h, 3.0 * w * h


def mtp_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of an MTP layer's projection (:data:`MTP_OPS`), per micro-batch
    of ``T = b s`` tokens (``T_in = T/t`` with sequence parallelism): ``enorm`` of the shifted
    tokens' embedding and ``hnorm`` of the previous hidden state (``T_in`` tokens each), their
    concatenation (read and write ``2h`` per token), ``eh_proj`` ``(T, 2h) x (2h, h/t)``
    (column-parallel on the gathered tokens; FP8 as the layers' linears); backward its input
    and weight gradients, the concatenation's split and the two norms' backward."""
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    acc = wgrad_accumulate_bytes(key, dtype)[0]  # eh_proj: a Transformer Engine linear
    linear, cast = linear_kernels(key)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    T = b * s
    T_in = T // t if key.get("sp") else T
    tok = T_in * h * e
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    if op == "mtp_proj_fwd":
        return [mem(f"mtp_e{norm}", 2 * tok), mem(f"mtp_h{norm}", 2 * tok),
                mem("mtp_concat", 4 * tok), *cast("eh_proj_input", T * 2 * h),
                linear("eh_proj", T, h // t, 2 * h)]              # (b*s, 2h) x (2h, h/t)
    if op == "mtp_proj_bwd":
        return [*cast("eh_proj_grad", T * (h // t)),
                linear("eh_proj_dgrad", T, 2 * h, h // t), linear("eh_proj_wgrad", h // t, 2 * h, T),
                *wgrad_accumulate(acc * 2 * h * (h // t)),
                mem("mtp_concat_bwd", 4 * tok),
                mem(f"mtp_e{norm}_bwd", 4 * tok), mem(f"mtp_h{norm}_bwd", 4 * tok)]
    raise KeyError(f"unknown MTP op {op!r}")


def mtp_tp_collectives(model: ModelConfig, sequence_parallel: bool
                       ) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]:
    """``(forward, backward)`` tensor-parallel collectives around an MTP layer's ``eh_proj``,
    each ``(kind, elements per token)`` of one GPU's full (gathered) tensor.

    Megatron-Core ``MultiTokenPredictionLayer``: ``eh_proj`` is column-parallel, its ``h/t``
    output all-gathered along the hidden dimension, then (sequence parallelism) split back to
    the rank's tokens. With sequence parallelism: forward the all-gather of the ``2h``-wide
    input and of the output (``h``); backward the gathered output's gradient all-gathered
    (``h``; the backward of the split), the input all-gathered again for the weight gradient
    and its gradient reduce-scattered (``2h`` each). Without: forward the output's all-gather
    (``h``), backward the all-reduce of the input gradient (``2h``; the split needs none)."""
    h = float(model.hidden_size)
    if sequence_parallel:
        return ((("all_gather", 2 * h), ("all_gather", h)),
                (("all_gather", h), ("all_gather", 2 * h), ("reduce_scatter", 2 * h)))
    return (("all_gather", h),), (("all_reduce", 2 * h),)


def mtp_cp_roll_bytes(micro_batch_size: int) -> tuple[float, ...]:
    """Bytes of one boundary message of each ``roll_tensor`` call of one MTP layer and
    micro-batch under context parallelism (cp > 1), one per call
    (:data:`MTP_CP_ROLL_ELEMENT_BYTES`: four calls).

    Megatron-Core 0.16.1 ``roll_tensor`` (``transformer/multi_token_prediction.py`` line 127):
    the rank's ``(b, s/cp)`` tensor is split in its two load-balanced chunks, each rolled by
    one token, and each chunk's boundary column (``select(-1, -1)``: shape ``(b,)``) is sent
    to the previous or the next cp rank with ``isend``/``irecv``, the ops waited for before
    the chunks are spliced (no autograd: nothing in the backward; outside the MTP layer's
    checkpointed function: nothing again under full recomputation). ``b`` elements of each
    tensor per message."""
    return tuple(float(micro_batch_size * e) for e in MTP_CP_ROLL_ELEMENT_BYTES)
