"""The public API of the model's arithmetic, re-exported from the modules that define it.

Callers write ``from core.model import model_math as mm`` and ``mm.num_parameters(...)``;
nothing is defined here. The formulas live by component (:mod:`core.model.attention`,
:mod:`core.model.mla`, :mod:`core.model.mlp`, :mod:`core.model.moe`, :mod:`core.model.mtp`,
:mod:`core.model.fp8`, :mod:`core.model.context_parallel`, :mod:`core.model.recompute`), the
dense layer built from them (:mod:`core.model.layer`), the layer spec and family registry
(:mod:`core.model.spec`, :mod:`core.model.families`), op keys and kernels
(:mod:`core.model.keys`, :mod:`core.model.kernels`), whole-model counts
(:mod:`core.model.counts`) and memory (:mod:`core.model.memory`). New code may import from
those modules directly.
"""

from __future__ import annotations

from core.model.base import (  # noqa: F401
    ADAM_BYTES_PER_PARAM, DTYPE_BYTES, GRAD_ACCUMULATE_BYTES_PER_PARAM, Kernel,
)
from core.model.fp8 import (  # noqa: F401
    FP8_BYTES, FP8_WEIGHT_CAST_OP, fp8_cast_kernels, fp8_copies, fp8_gathered_cast_kernels,
    fp8_gathers_params, fp8_gemm, fp8_gemm_dtype, fp8_scale_bytes, fp8_tn_only,
    fp8_weight_bytes_per_parameter, param_gather_bytes,
)
from core.model.keys import (  # noqa: F401
    DERIVED_OPS, FAMILY_KEY, FAMILY_KEY_DEFAULTS, MLA_KEY, MODULE_OPS, MOE_DERIVED_OPS, MOE_KEY,
    MOE_OPS, MTP_KEY, MTP_OPS, OP_KEYS, PART_OPS, SELECTIVE_OP_GEMMS, SELECTIVE_OP_OPS, SWA_OPS,
    TP_OVERLAP_GEMMS, TP_OVERLAP_OPS, activation_key, cross_entropy_fusion, family_key_value,
    full_op_key, mla_key, table_covers,
)
from core.model.spec import (  # noqa: F401
    FAMILIES, LayerSpec, ModelFamily, register_family,
)
from core.model.families import (  # noqa: F401
    family_of, layer_spec,
)
from core.model.attention import (  # noqa: F401
    attended_pairs, causal_core_fraction, norms_separate, window_layer_mask,
)
from core.model.mla import (  # noqa: F401
    mla_forward_flops_per_token, mla_tp_latent_width, mla_up_proj_forward_flops_per_token,
)
from core.model.moe import (  # noqa: F401
    MoeLayerParameters, expert_data_parallel, expert_tensor_parallel, flex_remote_node_copies,
    moe_activation_bytes_per_layer, moe_ffn, moe_forward_flops_per_token, moe_layer_mask,
    moe_layer_parameters, num_moe_layers,
)
from core.model.mtp import (  # noqa: F401
    mtp_cp_roll_bytes, mtp_extra_parameters, mtp_layer_is_moe, mtp_layers, mtp_tp_collectives,
)
from core.model.context_parallel import (  # noqa: F401
    cp_a2a_bytes, cp_a2a_size, cp_all_gather, cp_core_output_kept_twice,
    cp_exchange_buffer_bytes, cp_exchange_bytes, cp_head_sizes, cp_kv_block_bytes,
    cp_output_bytes, cp_query_bytes,
)
from core.model.layout import (  # noqa: F401
    chunks_per_stage, edge_stages, loss_stage, stage_chunk_layers, stage_layers,
)
from core.model.recompute import (  # noqa: F401
    recomputed_in_chunk, recomputed_layers, selective_op_flops_per_token, selective_op_linears,
)
from core.model.layer import (  # noqa: F401
    attention_forward_flops_per_token, attention_parameters, dense_edge_parameters,
    dense_forward_flops_per_token, dense_layer_parameters,
)
from core.model.counts import (  # noqa: F401
    causal_model_flops_per_iteration, edge_params_per_gpu, expert_params_per_gpu,
    hardware_flops_per_iteration, input_embedding_parameters, model_flops_per_iteration,
    mtp_edge_parameters, num_active_parameters, num_active_parameters_with_embedding,
    num_parameters, params_per_gpu, stage_moe_layer_counts,
)
from core.model.memory import (  # noqa: F401
    ACTIVATION_FREE_PLAN_FIELDS, ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES,
    GEMM_WORKSPACE_BYTES, NCCL_BUFFSIZE_BYTES, NCCL_CHANNELS, NCCL_RING_PEERS,
    STATE_FREE_PLAN_FIELDS, StageMemoryArrays, activation_bytes_per_layer, bytes_per_parameter,
    ep_overlap_on, ep_overlap_paired_share, fp8_linear_params_per_layer, fp8_weights_per_gpu,
    in_flight_microbatches, nccl_buffer_bytes, nccl_communicators, process_memory_terms,
    schedule_in_flight, stage_memory, stage_memory_arrays, stage_state_bytes, state_bytes_of,
    grad_copy_bytes_per_parameter, optimizer_at_peak,
)
from core.model.kernels import (  # noqa: F401
    op_kernels, selective_op_kernels,
)

__all__ = [
    "ADAM_BYTES_PER_PARAM", "DTYPE_BYTES", "GRAD_ACCUMULATE_BYTES_PER_PARAM", "Kernel",
    "FP8_BYTES", "FP8_WEIGHT_CAST_OP", "fp8_cast_kernels", "fp8_copies",
    "fp8_gathered_cast_kernels", "fp8_gathers_params", "fp8_gemm", "fp8_gemm_dtype",
    "fp8_scale_bytes", "fp8_tn_only", "fp8_weight_bytes_per_parameter", "param_gather_bytes",
    "DERIVED_OPS", "FAMILY_KEY", "FAMILY_KEY_DEFAULTS", "MLA_KEY", "MODULE_OPS",
    "MOE_DERIVED_OPS", "MOE_KEY", "MOE_OPS", "MTP_KEY", "MTP_OPS", "OP_KEYS", "PART_OPS",
    "SELECTIVE_OP_GEMMS", "SELECTIVE_OP_OPS", "SWA_OPS", "TP_OVERLAP_GEMMS", "TP_OVERLAP_OPS",
    "activation_key", "cross_entropy_fusion", "family_key_value", "full_op_key", "mla_key",
    "table_covers", "FAMILIES", "LayerSpec", "ModelFamily", "register_family", "family_of",
    "layer_spec", "attended_pairs", "causal_core_fraction", "norms_separate",
    "window_layer_mask", "mla_forward_flops_per_token", "mla_tp_latent_width",
    "mla_up_proj_forward_flops_per_token", "MoeLayerParameters", "expert_data_parallel",
    "expert_tensor_parallel", "flex_remote_node_copies", "moe_activation_bytes_per_layer",
    "moe_ffn", "moe_forward_flops_per_token", "moe_layer_mask", "moe_layer_parameters",
    "num_moe_layers", "mtp_cp_roll_bytes", "mtp_extra_parameters", "mtp_layer_is_moe", "mtp_layers",
    "mtp_tp_collectives", "cp_a2a_bytes", "cp_a2a_size", "cp_all_gather",
    "cp_core_output_kept_twice", "cp_exchange_buffer_bytes", "cp_exchange_bytes",
    "cp_head_sizes", "cp_kv_block_bytes", "cp_output_bytes", "cp_query_bytes",
    "chunks_per_stage", "edge_stages", "loss_stage",
    "stage_chunk_layers", "stage_layers", "recomputed_in_chunk", "recomputed_layers",
    "selective_op_flops_per_token", "selective_op_linears", "attention_forward_flops_per_token",
    "attention_parameters", "dense_edge_parameters", "dense_forward_flops_per_token",
    "dense_layer_parameters", "causal_model_flops_per_iteration", "edge_params_per_gpu",
    "expert_params_per_gpu", "hardware_flops_per_iteration", "input_embedding_parameters",
    "model_flops_per_iteration", "mtp_edge_parameters", "num_active_parameters",
    "num_active_parameters_with_embedding", "num_parameters", "params_per_gpu",
    "stage_moe_layer_counts", "ACTIVATION_FREE_PLAN_FIELDS", "ALLOCATOR_RESERVE_FRACTION",
    "CUDA_CONTEXT_BYTES", "GEMM_WORKSPACE_BYTES", "NCCL_BUFFSIZE_BYTES", "NCCL_CHANNELS",
    "NCCL_RING_PEERS", "STATE_FREE_PLAN_FIELDS", "StageMemoryArrays",
    "activation_bytes_per_layer", "bytes_per_parameter", "ep_overlap_on",
    "ep_overlap_paired_share", "fp8_linear_params_per_layer", "fp8_weights_per_gpu",
    "in_flight_microbatches", "nccl_buffer_bytes", "nccl_communicators", "process_memory_terms",
    "schedule_in_flight", "stage_memory", "stage_memory_arrays", "stage_state_bytes",
    "state_bytes_of", "grad_copy_bytes_per_parameter", "optimizer_at_peak", "op_kernels",
    "selective_op_kernels",
]
