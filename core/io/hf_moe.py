"""The mixture-of-experts fields of a Hugging Face ``config.json`` (:mod:`core.io.hf_import`):
the experts, top-k and expert width of each MoE architecture's layout (Mixtral, Phi-3.5-MoE,
GPT-OSS, DeepSeek-V2/V3, GLM-4.5, Qwen-MoE), their shared experts and which layers have experts
(:func:`moe_layer_fields`, Megatron-Core's ``--moe-layer-freq`` with first dense layers).
"""

from __future__ import annotations

from typing import Any

from core.io.import_result import positive_int, refusal
from core.util.text import short_repr

__all__ = ["moe_fields", "moe_layer_fields"]

#: DeepSeek's ``topk_method`` values the importer knows (all pick ``k`` experts).
_DEEPSEEK_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def moe_layer_fields(pattern: list[bool] | list[int]) -> tuple[int, int] | None:
    """``(moe_first_dense_layers, moe_layer_frequency)`` whose layers with experts are
    ``pattern``'s (truthy = MoE), or None when no such pair gives it.

    The session's rule (Megatron-Core's ``--moe-layer-freq`` with first dense layers):
    layer ``i`` has experts when ``i >= moe_first_dense_layers`` and
    ``i % moe_layer_frequency == 0``. Of the pairs that give a pattern, the one whose
    first dense layers end at the first MoE layer is returned (0 when layer 0 has
    experts), so the integer form ``--moe-layer-freq k`` comes back as ``(0, k)``.
    """
    flags = [bool(x) for x in pattern]
    moe = [i for i, x in enumerate(flags) if x]
    L = len(flags)
    if not moe:
        return None
    j = moe[0]
    if len(moe) > 1:
        candidates = [moe[1] - j]
    else:  # one MoE layer: the last one, or the next multiple past the end
        candidates = [1] * (j == L - 1) + [j] * (j > 0) + [max(L, 1)] * (j == 0)
    for k in candidates:
        if j % k == 0 and all(x == (i >= j and i % k == 0) for i, x in enumerate(flags)):
            return j, k
    return None


def moe_fields(cfg: dict[str, Any], arch: str, experts_key: str, layers: int, where: str,
               ignored: dict[str, str]) -> dict[str, Any]:
    """The mixture-of-experts model fields of an MoE architecture's config (the module doc of
    :mod:`core.io.hf_import`): ``num_experts`` from ``experts_key``, ``moe_top_k`` and the
    fields of the architecture's expert layout; notes on approximations go to ``ignored``.

    Raises ConfigError for a field that is missing, bad or not one of the architecture's."""
    E = positive_int(cfg, experts_key, where)
    k = positive_int(cfg, "num_experts_per_tok", where)
    if k > E:
        raise refusal(where, "num_experts_per_tok", f"{short_repr(k)} is more than the {short_repr(E)} experts "
                      f"({experts_key})")
    out: dict[str, Any] = {"num_experts": E, "moe_top_k": k}
    if arch == "GptOssForCausalLM":
        out.update(_gpt_oss_expert_fields(cfg, arch, k, where, ignored))
        return out
    if arch in ("MixtralForCausalLM", "PhimoeForCausalLM"):
        _refuse_qwen_expert_fields(cfg, arch, where)
        if arch == "PhimoeForCausalLM":
            _phimoe_notes(cfg, k, where, ignored)
        return out
    moe_ffn = positive_int(cfg, "moe_intermediate_size", where)
    out["moe_ffn_hidden_size"] = moe_ffn
    if arch.startswith("Deepseek"):  # DeepseekV2/V3MoE: shared experts of moe_intermediate_size
        out.update(_deepseek_expert_fields(cfg, arch, where, ignored))
    elif arch == "Glm4MoeForCausalLM":
        out.update(_glm_expert_fields(cfg, where, ignored))
    else:
        out.update(_qwen_expert_fields(cfg, arch, layers, moe_ffn, where, ignored))
    return out


def _phimoe_notes(cfg: dict[str, Any], k: int, where: str, ignored: dict[str, str]) -> None:
    """Phi-3.5-MoE's router (transformers' ``modeling_phimoe.py``, ``PhimoeTopKRouter`` and
    ``sparsemixer``): a ``h x E`` gate without bias (Mixtral's, modelled), then SparseMixer, which
    picks exactly two experts whatever ``num_experts_per_tok`` says (transformers 4.57 raises
    ``top_k must be equal to 2``; 5.x picks two), with Gumbel sampling and masked softmaxes over
    the ``(T, E)`` scores and a Heun's-method gradient estimate; in training
    ``input_jitter_noise`` scales the layer's input by uniform noise. Those are elementwise
    kernels over ``(T, E)`` or ``(T, h)``, noted in ``ignored``, not timed. Its norms are
    ``nn.LayerNorm`` with ``rms_norm_eps`` as their eps (noted: not an RMSNorm's).

    Raises ConfigError naming ``num_experts_per_tok`` when ``k`` is not 2."""
    if k != 2:
        raise refusal(where, "num_experts_per_tok", f"{k}: PhimoeForCausalLM's SparseMixer "
                      "router picks exactly 2 experts per token (transformers' sparsemixer; "
                      "4.57 raises 'top_k must be equal to 2'); a config asking for another "
                      "top-k is not a model transformers builds")
    ignored["sparsemixer"] = (
        "Phi-3.5-MoE's router (SparseMixer, arXiv 2409.12136): masks, Gumbel sampling of the two "
        "experts and masked softmaxes over the (T, E) scores, with a Heun's-method gradient "
        "estimate: elementwise kernels on the router's output, not timed (the gate GEMM and "
        "the top-2 dispatch are modelled)")
    if "router_jitter_noise" in cfg:
        ignored["router_jitter_noise"] = (f"{short_repr(cfg['router_jitter_noise'])}: SparseMixer's mask "
                                          "threshold (a number; see sparsemixer)")
    if "rms_norm_eps" in cfg:
        ignored["rms_norm_eps"] = ("the eps of Phi-3.5-MoE's LayerNorms (transformers passes it "
                                   "to nn.LayerNorm): a constant")
    if "input_jitter_noise" in cfg:
        ignored["input_jitter_noise"] = (
            f"{short_repr(cfg['input_jitter_noise'])}: in training the MoE layer's input is scaled by "
            "uniform noise in [1 - eps, 1 + eps] (an elementwise kernel over (T, h), not timed)")


def _refuse_qwen_expert_fields(cfg: dict[str, Any], arch: str, where: str) -> None:
    """Refuse the Qwen-style expert fields in an architecture whose experts are
    ``intermediate_size`` wide in every layer (Mixtral, Phi-3.5-MoE, GPT-OSS)."""
    for name in ("moe_intermediate_size", "shared_expert_intermediate_size",
                 "decoder_sparse_step", "mlp_only_layers", "num_experts"):
        if cfg.get(name) not in (None, [], 0):
            raise refusal(where, name, f"{short_repr(cfg[name])}: not a field of {arch} (its experts "
                          "are intermediate_size wide, every layer has them)")


def _gpt_oss_expert_fields(cfg: dict[str, Any], arch: str, k: int, where: str,
                           ignored: dict[str, str]) -> dict[str, Any]:
    """GPT-OSS's expert fields: experts ``intermediate_size`` wide, ``swiglu_limit`` the gated
    activation's clamp (``k`` the top-k its ``experts_per_token`` must agree with); its quick-GELU
    gate is noted in ``ignored``."""
    out: dict[str, Any] = {}
    other = cfg.get("experts_per_token")
    if other is not None and other != k:
        raise refusal(where, "experts_per_token", f"{short_repr(other)} disagrees with "
                      f"num_experts_per_tok={k}")
    _refuse_qwen_expert_fields(cfg, arch, where)
    out["moe_ffn_hidden_size"] = positive_int(cfg, "intermediate_size", where)
    limit = cfg.get("swiglu_limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
            raise refusal(where, "swiglu_limit", f"{short_repr(limit)} must be a positive number")
        out["activation_func_clamp_value"] = float(limit)
    ignored["hidden_act"] = ("GPT-OSS's experts gate with x*sigmoid(1.702x) (quick GELU) "
                             "whatever it says: timed as SwiGLU's (same GEMMs, same fused "
                             "activation kernel's bytes)")
    return out


def _deepseek_expert_fields(cfg: dict[str, Any], arch: str, where: str,
                            ignored: dict[str, str]) -> dict[str, Any]:
    """DeepSeek-V2/V3's expert fields: ``n_shared_experts`` shared experts, the first
    ``first_k_dense_replace`` layers dense, then every ``moe_layer_freq``-th; a ``topk_method``
    other than greedy is noted in ``ignored``. A config without ``topk_method`` routes as
    transformers' code for ``arch`` does: DeepSeek-V2's ``greedy`` (``DeepseekV2Config``'s
    default), DeepSeek-V3's group-limited ``noaux_tc`` (``DeepseekV3TopkRouter`` always picks
    within ``topk_group`` of ``n_group`` groups)."""
    out: dict[str, Any] = {}
    method = cfg.get("topk_method",
                     "noaux_tc" if arch == "DeepseekV3ForCausalLM" else "greedy")
    if method not in _DEEPSEEK_TOPK_METHODS:
        raise refusal(where, "topk_method", f"{short_repr(method)}: expert selection other than "
                      f"{', '.join(_DEEPSEEK_TOPK_METHODS)} is not known to the importer")
    if method != "greedy":
        if "topk_method" in cfg:
            ignored["topk_method"] = (f"{method}: group-limited / bias-corrected top-k picks "
                                      "the same number of experts; no extra cost is modelled")
        # HF DeepseekV2/V3MoEGate: the experts in topk_group of n_group groups (Megatron-Core's
        # node-limited routing, --moe-router-num-groups / --moe-router-group-topk)
        out.update(_router_groups(cfg, where, ignored))
    else:
        for key in ("n_group", "topk_group"):
            if key in cfg:
                ignored[key] = "not read under topk_method greedy (top-k over all experts)"
    out["num_shared_experts"] = cfg.get("n_shared_experts") or 0
    if not (isinstance(out["num_shared_experts"], int)
            and not isinstance(out["num_shared_experts"], bool)
            and out["num_shared_experts"] >= 0):
        raise refusal(where, "n_shared_experts", f"{short_repr(cfg['n_shared_experts'])} must be a "
                      "non-negative integer")
    # HF DeepseekV2/V3: layer i has experts when i >= first_k_dense_replace and
    # i % moe_layer_freq == 0 -- the session's rule (core.model.moe.moe_layer_mask)
    first = cfg.get("first_k_dense_replace") or 0
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise refusal(where, "first_k_dense_replace", f"{short_repr(first)} must be a non-negative "
                      "integer")
    out["moe_first_dense_layers"] = first
    out["moe_layer_frequency"] = positive_int(cfg, "moe_layer_freq", where, required=False) or 1
    return out


def _router_groups(cfg: dict[str, Any], where: str, ignored: dict[str, str]) -> dict[str, Any]:
    """The group-limited routing of DeepSeek-V3's router (transformers' ``DeepseekV3TopkRouter``,
    which GLM-4.5's copies): a token's experts lie in ``topk_group`` of ``n_group`` groups,
    Megatron-Core's ``--moe-router-num-groups`` / ``--moe-router-group-topk`` (the flex
    dispatcher's remote copies depend on them). Both are required (transformers' configs would
    fill 8 and 4 for DeepSeek-V3, 1 and 1 for GLM: no default is taken for a number that changes
    the work); one group is the top-k over all experts (noted in ``ignored``, no groups set).

    Raises ConfigError naming the key: missing, not a positive integer, or ``topk_group`` above
    ``n_group`` (transformers' ``topk`` over the groups fails there)."""
    groups = positive_int(cfg, "n_group", where)
    topk = positive_int(cfg, "topk_group", where)
    if topk > groups:
        raise refusal(where, "topk_group", f"{short_repr(topk)} is more than n_group={short_repr(groups)}: a token's "
                      "experts lie in topk_group of the n_group groups")
    if groups == 1:
        for key in ("n_group", "topk_group"):
            ignored[key] = "one group (n_group 1): the top-k over all experts"
        return {}
    return {"moe_router_num_groups": groups, "moe_router_group_topk": topk}


def _required_count(cfg: dict[str, Any], name: str, where: str, why: str) -> int:
    """``cfg[name]``, a non-negative integer the config must give (``why``: what it counts).

    Raises ConfigError when it is absent or not one."""
    value = cfg.get(name)
    if name not in cfg:
        raise refusal(where, name, f"is missing: the number of {why} (the importer does not "
                      "take a default for a number that changes the work)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise refusal(where, name, f"{short_repr(value)} must be a non-negative integer ({why})")
    return value


def _glm_expert_fields(cfg: dict[str, Any], where: str, ignored: dict[str, str]
                       ) -> dict[str, Any]:
    """GLM-4.5's expert fields (transformers' ``modeling_glm4_moe.py``): ``Glm4MoeMoE`` has
    ``n_routed_experts`` experts and one shared ``Glm4MoeMLP`` of ``moe_intermediate_size *
    n_shared_experts`` (Megatron's --moe-shared-expert-intermediate-size: ``n_shared_experts``
    shared experts of ``moe_intermediate_size``); decoder layer ``i`` has experts when ``i >=
    first_k_dense_replace``, the others a dense ``Glm4MoeMLP`` of ``intermediate_size``. Both
    counts must be given. ``moe_layer_freq`` is not read by that code, so only 1 (every layer
    after the dense ones) is accepted. The router (``Glm4MoeTopkRouter``: sigmoid scores plus
    ``e_score_correction_bias`` for the choice, DeepSeek-V3's ``noaux_tc``) is noted in
    ``ignored``; its group-limited routing (``n_group`` > 1 groups, ``topk_group`` of them) is
    ``model.moe_router_num_groups`` / ``moe_router_group_topk`` as DeepSeek-V3's (one group,
    the published configs': ignored)."""
    out = {"num_shared_experts": _required_count(cfg, "n_shared_experts", where,
                                                 "shared experts of moe_intermediate_size"),
           "moe_first_dense_layers": _required_count(cfg, "first_k_dense_replace", where,
                                                     "dense layers before the MoE layers")}
    freq = cfg.get("moe_layer_freq", 1)
    if freq != 1 or isinstance(freq, bool):
        raise refusal(where, "moe_layer_freq", f"{short_repr(freq)}: Glm4MoeForCausalLM's modelling code "
                      "puts experts on every layer from first_k_dense_replace on; a config "
                      "asking for another pattern is not one we know")
    out.update(_router_groups(cfg, where, ignored))  # Glm4MoeTopkRouter is DeepSeek-V3's
    if "topk_method" in cfg:  # DeepSeek's field; Glm4MoeTopkRouter does not read it
        ignored["topk_method"] = (f"{short_repr(cfg['topk_method'])}: not read by Glm4Moe's modelling "
                                  "code (its router is always noaux_tc); the same k experts")
    if "e_score_correction_bias" in cfg:  # a weight of the checkpoint, not a config field
        ignored["e_score_correction_bias"] = (
            "GLM-4.5's router (noaux_tc, as DeepSeek-V3's): sigmoid scores plus a per-expert bias "
            "for the top-k choice (Megatron's --moe-router-score-function sigmoid "
            "--moe-router-enable-expert-bias); elementwise on the (T, E) scores, the bias a buffer "
            "of E numbers per MoE layer updated outside the gradient: not counted")
    return out


def _qwen_expert_fields(cfg: dict[str, Any], arch: str, layers: int, moe_ffn: int, where: str,
                        ignored: dict[str, str]) -> dict[str, Any]:
    """Qwen-MoE's expert fields: shared experts from ``shared_expert_intermediate_size`` (a
    multiple of ``moe_ffn``; Qwen2-MoE only, its gate noted in ``ignored``) and the MoE layers
    from ``decoder_sparse_step`` and ``mlp_only_layers`` (:func:`moe_layer_fields`)."""
    out: dict[str, Any] = {}
    shared = (0 if cfg.get("shared_expert_intermediate_size") == 0 else  # Qwen3-Coder: 0
              positive_int(cfg, "shared_expert_intermediate_size", where, required=False) or 0)
    if shared and arch != "Qwen2MoeForCausalLM":
        raise refusal(where, "shared_expert_intermediate_size", f"{short_repr(shared)}: {arch} has no shared "
                      "expert")
    if shared % moe_ffn:
        raise refusal(where, "shared_expert_intermediate_size", f"{short_repr(shared)} is not a multiple of "
                      f"moe_intermediate_size={short_repr(moe_ffn)}: a shared expert of its own size is not "
                      "modelled (shared experts are each moe_intermediate_size wide)")
    out["num_shared_experts"] = shared // moe_ffn
    if shared:
        ignored["shared_expert_gate"] = ("Qwen2-MoE's sigmoid gate on the shared expert: h "
                                         "parameters per layer and an elementwise product, not "
                                         "counted")
    step = positive_int(cfg, "decoder_sparse_step", where, required=False) or 1
    dense = cfg.get("mlp_only_layers") or []
    if not (isinstance(dense, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                            and 0 <= i < layers for i in dense)):
        raise refusal(where, "mlp_only_layers", f"{short_repr(dense)} must be a list of layer indices "
                      f"0..{layers - 1}")
    pattern = [(i + 1) % step == 0 and i not in dense for i in range(layers)]
    fit = moe_layer_fields(pattern)
    if fit is None:
        bad = "decoder_sparse_step" if step > 1 and not dense else "mlp_only_layers"
        raise refusal(where, bad, f"MoE layers {[i for i, x in enumerate(pattern) if x][:8]}"
                      f"{' ...' if sum(pattern) > 8 else ''} (decoder_sparse_step={step}, "
                      f"mlp_only_layers={dense}): only first dense layers followed by every k-th "
                      "layer from the first MoE layer on (Megatron's --moe-layer-freq) are "
                      "modelled")
    out["moe_first_dense_layers"], out["moe_layer_frequency"] = fit
    return out
