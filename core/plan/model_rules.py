"""The rules of a model alone (no plan): mixture of experts, node-limited routing,
multi-head latent attention, sliding windows and gated-MLP options. What the simulator does not
model is refused by name. :func:`core.plan.rules.validate` runs them.
"""

from __future__ import annotations

import dataclasses

from core.plan.fields import NOT_MODELLED, FieldError, is_int, is_num
from core.plan.model_config import DENSE_ONLY_FAMILIES, ModelConfig



def model_feature_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of the model's mixture-of-experts and attention fields; what the simulator does not
    model is refused by name."""
    errs: list[FieldError] = []
    errs += _mla_model_errors(m)
    errs += _moe_model_errors(m)
    if m.family in DENSE_ONLY_FAMILIES:
        has = [what for what, present in (
            ("experts (num_experts)", m.is_moe),
            ("multi-head latent attention", m.multi_latent_attention is True),
            ("multi-token prediction (mtp_num_layers)", is_int(m.mtp_num_layers)
             and m.mtp_num_layers > 0)) if present]
        if has:
            errs.append(FieldError("model.family", f"family={m.family!r} with "
                                   f"{' and '.join(has)} is not modelled (the family has none)",
                                   rule=NOT_MODELLED))
    w, n = m.window_size, m.window_attn_skip_freq
    if n is not None and w is None:
        errs.append(FieldError("model.window_attn_skip_freq", "window_attn_skip_freq needs a "
                               "window_size (the layers it keeps full are among windowed ones)"))
    if w is not None and m.attention_kernel != "flash":
        errs.append(FieldError("model.window_size", "sliding-window attention needs "
                               "attention_kernel = flash (Megatron-Core's unfused "
                               "DotProductAttention has no window; Transformer Engine's has)"))
    gated = m.activation == "swiglu"
    if m.activation_func_clamp_value is not None and not gated:
        errs.append(FieldError("model.activation_func_clamp_value", "activation_func_clamp_value "
                               "needs a gated MLP (activation = swiglu): the clamp acts on the "
                               "gate and the linear half"))
    if is_num(m.glu_linear_offset) and m.glu_linear_offset != 0 and not gated:
        errs.append(FieldError("model.glu_linear_offset", "glu_linear_offset needs a gated MLP "
                               "(activation = swiglu; Megatron-Core: only used with "
                               "gated_linear_unit)"))
    if getattr(m, "bias_activation_fusion", True) is False and gated and (
            m.activation_func_clamp_value is not None
            or (is_num(m.glu_linear_offset) and m.glu_linear_offset != 0)):
        errs.append(FieldError("model.bias_activation_fusion", "bias_activation_fusion false "
                               "with a clamp or a linear offset is not modelled (Megatron-Core's "
                               "unfused glu clamps and offsets in more PyTorch ops, whose saved "
                               "tensors are not counted)", rule=NOT_MODELLED))
    return errs


#: The MLA fields and their values without MLA (the dataclass defaults).
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")


def _mla_model_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of multi-head latent attention (Megatron-Core ``MLATransformerConfig`` and the
    combinations the simulator models), each naming its field:

    * ``mtp_num_layers`` with a sliding window is not modelled (multi-token prediction).
    * Without ``multi_latent_attention`` the MLA fields keep their defaults (a value there
      would be ignored: refused instead).
    * With it: ``kv_channels`` unset or ``qk_head_dim + qk_pos_emb_head_dim`` (Megatron's
      MLA sets the query/key head size so; another value names another model); no grouped
      query attention (``num_query_groups`` unset or ``a``: MLA's keys and values have ``a``
      heads); ``attention_kernel`` flash (Megatron-Core runs MLA's core in Transformer
      Engine's fused attention, which takes a value head size other than the query's);
      ``add_qkv_bias`` off (MLA's projections have no bias); no sliding window and no attention
      sinks (``softmax_type``). (Context parallelism with MLA: the plan rules,
      :func:`core.plan.rules._mla_plan_errors`.)
    """
    errs: list[FieldError] = []
    mtp = m.mtp_num_layers
    if is_int(mtp) and mtp > 0 and m.window_size is not None:
        errs.append(FieldError("model.mtp_num_layers", f"mtp_num_layers={mtp} with sliding-"
                               "window attention is not modelled (which attention the MTP "
                               "layer has)", rule=NOT_MODELLED))
    if m.multi_latent_attention is not True:
        defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
        for name in MLA_FIELDS:
            if getattr(m, name) != defaults[name]:
                errs.append(FieldError(f"model.{name}", f"{name}={getattr(m, name)!r} needs "
                                       "multi_latent_attention (multi-head latent attention)"))
        return errs
    if not all(is_int(getattr(m, n)) for n in MLA_FIELDS[1:]):
        return errs  # type errors are reported by section_errors
    qk = m.qk_head_dim + m.qk_pos_emb_head_dim
    if m.kv_channels is not None and m.kv_channels != qk:
        errs.append(FieldError("model.kv_channels", f"kv_channels={m.kv_channels} with multi-head "
                               "latent attention must be empty or qk_head_dim + "
                               f"qk_pos_emb_head_dim = {qk} (the query/key head size)"))
    if m.num_query_groups is not None and m.num_query_groups != m.num_attention_heads:
        errs.append(FieldError("model.num_query_groups", f"num_query_groups={m.num_query_groups} "
                               "with multi-head latent attention: MLA's keys and values have one "
                               "head per query head (leave it empty)"))
    if m.attention_kernel != "flash":
        errs.append(FieldError("model.attention_kernel", "multi-head latent attention needs "
                               "attention_kernel = flash (Megatron-Core runs MLA's core in "
                               "Transformer Engine's fused attention; the unfused path is not "
                               "modelled)"))
    if m.add_qkv_bias:
        errs.append(FieldError("model.add_qkv_bias", "add_qkv_bias with multi-head latent "
                               "attention: MLA's projections have no bias"))
    if m.window_size is not None:
        errs.append(FieldError("model.window_size", "sliding-window attention with multi-head "
                               "latent attention is not modelled", rule=NOT_MODELLED))
    if getattr(m, "softmax_type", "vanilla") != "vanilla":
        errs.append(FieldError("model.softmax_type", f"softmax_type={m.softmax_type!r} with "
                               "multi-head latent attention is not modelled", rule=NOT_MODELLED))
    return errs


def _moe_model_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of the mixture-of-experts fields (Megatron-Core ``TransformerConfig`` and
    ``arguments.py``): ``moe_top_k`` at most ``num_experts``; the MoE-only fields need
    ``num_experts``; ``add_mlp_bias`` is for dense MLPs only; the first dense layers leave at least one MoE layer (a model without
    one is the dense model: say so rather than simulate it under an MoE name)."""
    errs: list[FieldError] = []
    E = m.num_experts
    if E is None:
        for name, default in (("moe_ffn_hidden_size", None), ("num_shared_experts", 0),
                              ("moe_layer_frequency", 1), ("moe_first_dense_layers", 0),
                              ("moe_router_num_groups", None), ("moe_router_group_topk", None)):
            if getattr(m, name, default) != default:
                errs.append(FieldError(f"model.{name}", f"{name}={getattr(m, name)!r} needs "
                                       "num_experts (a mixture-of-experts model)"))
        return errs
    errs += _group_routing_errors(m)
    if getattr(m, "bias_activation_fusion", True) is False:
        errs.append(FieldError("model.bias_activation_fusion", "bias_activation_fusion false "
                               "with experts is not modelled (the experts' unfused activation, "
                               "TEGroupedMLP's eager path and its saved tensors, is not "
                               "modelled; Megatron-Core fuses it with weighted_bias_swiglu_impl)",
                               rule=NOT_MODELLED))
    if getattr(m, "add_mlp_bias", False) is True:
        errs.append(FieldError("model.add_mlp_bias", "add_mlp_bias with experts is not modelled "
                               "(the routed experts' biases and their adds are add_bias_linear's)",
                               rule=NOT_MODELLED))
    if not all(is_int(x) for x in (E, m.moe_top_k, m.moe_layer_frequency,
                                    m.moe_first_dense_layers, m.num_layers)):
        return errs  # type errors are reported by section_errors
    if m.moe_top_k > E:
        errs.append(FieldError("model.moe_top_k", f"moe_top_k={m.moe_top_k} is more than "
                               f"num_experts={E}: a token is routed to distinct experts"))
    k, first = m.moe_layer_frequency, m.moe_first_dense_layers
    if k < 1 or first < 0:
        return errs  # bound errors are reported by section_errors
    if (m.num_layers - 1) // k < -(-first // k):  # no multiple of k in first..L-1
        errs.append(FieldError("model.moe_first_dense_layers", f"moe_first_dense_layers="
                               f"{m.moe_first_dense_layers} and moe_layer_frequency="
                               f"{m.moe_layer_frequency} leave no MoE layer among the "
                               f"{m.num_layers} layers"))
    return errs


def _group_routing_errors(m: ModelConfig) -> list[FieldError]:
    """Rules of node-limited routing (Megatron-Core ``TransformerConfig``, ``moe_utils.
    group_limited_topk``): ``moe_router_group_topk`` needs ``moe_router_num_groups`` ("When
    using group limited routing, moe_router_num_groups must be specified"; the groups alone
    limit nothing); the groups split the experts evenly; a token reaches at most
    ``num_groups`` groups, holding at least ``moe_top_k`` experts."""
    G, M = getattr(m, "moe_router_num_groups", None), getattr(m, "moe_router_group_topk", None)
    if M is None:
        return []
    if G is None:
        return [FieldError("model.moe_router_num_groups", "moe_router_group_topk (node-limited "
                           "routing) needs moe_router_num_groups (Megatron-Core: it must be "
                           "specified)")]
    if not all(is_int(x) and x >= 1 for x in (G, M, m.num_experts, m.moe_top_k)):
        return []  # type and bound errors are reported by section_errors
    E, k = m.num_experts, m.moe_top_k
    if E % G:
        return [FieldError("model.moe_router_num_groups", f"moe_router_num_groups={G} does not "
                           f"divide num_experts={E}")]
    if M > G:
        return [FieldError("model.moe_router_group_topk", f"moe_router_group_topk={M} is more "
                           f"than moe_router_num_groups={G}")]
    if M * (E // G) < k:
        return [FieldError("model.moe_router_group_topk", f"moe_router_group_topk={M} groups of "
                           f"{E // G} experts hold fewer than moe_top_k={k}")]
    return []

