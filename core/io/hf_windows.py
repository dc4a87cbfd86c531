"""The sliding windows of a Hugging Face ``config.json`` (:mod:`core.io.hf_import`): which layers
each architecture's modelling code windows (``layer_types`` where the code reads it, its own rule
elsewhere) as Megatron-Core's ``--window-size`` and ``--window-attn-skip-freq`` (the model's
``window_size`` and ``window_attn_skip_freq``, :func:`core.model.attention.window_layer_mask`).
"""

from __future__ import annotations

from typing import Any

from core.io.import_result import refusal
from core.util.text import short_repr

__all__ = ["window_fields_of"]

#: Architectures whose sliding_window, without layer_types, windows every layer (their
#: modelling code passes it to every layer's attention).
_WINDOW_EVERY_LAYER = ("MistralForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM",
                       "PhimoeForCausalLM")
#: Architectures whose modelling code windows the layers ``layer_types`` names (transformers
#: 4.53+ for Gemma 2 and 3; GPT-OSS; OLMo 3). The others' configuration classes may keep the key,
#: but their attention windows by its own rule (:func:`_own_window_layers`): Qwen2/Qwen3 and their
#: MoE classes null ``sliding_window`` unless ``use_sliding_window``; a ``layer_types`` there
#: must agree with that rule.
_READS_LAYER_TYPES = ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "GptOssForCausalLM",
                      "Olmo3ForCausalLM")
#: Architectures whose window is switched by ``use_sliding_window`` (refused when on).
_SWITCHED_WINDOW = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM",
                    "Qwen3MoeForCausalLM")


def window_fields_of(cfg: dict[str, Any], arch: str, layers: int, s: int, where: str
                     ) -> tuple[dict[str, Any], str]:
    """``(model fields, note for the ignored list)`` of a config's sliding window (the module doc
    of :mod:`core.io.hf_import`), ``s`` the sequence length in tokens:
    ``window_size`` and ``window_attn_skip_freq`` when some layer is windowed, else a note on
    why ``sliding_window`` does nothing (empty when the config has none).

    Raises ConfigError for a window that is not a positive integer or a layer pattern Megatron-
    Core's ``--window-attn-skip-freq`` cannot give."""
    window = cfg.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or window < 1):  # whether or not a layer uses it
        raise refusal(where, "sliding_window", f"{short_repr(window)}: a window must be a positive "
                      "integer, or null for none")
    types = cfg.get("layer_types")
    own = _own_window_layers(cfg, arch, layers, window is not None, where)
    if types is None:
        flags = own
    else:
        flags = _layer_types_flags(types, layers, where)
        if arch not in _READS_LAYER_TYPES and flags != own:
            # the class keeps the key, the modelling code windows by its own rule
            raise refusal(where, "layer_types", f"sliding_attention on layers "
                          f"{[i for i, x in enumerate(flags) if x][:8]}: {arch} does not read "
                          f"layer_types ({_own_rule(arch)}); a config whose layer_types says "
                          "otherwise is not the model transformers builds")
    if arch == "Gemma3ForCausalLM":
        _check_gemma3_pattern(cfg, types, layers, where)
    if not any(flags):
        return {}, f"inactive ({arch}: {_own_rule(arch)})" if window is not None else ""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise refusal(where, "sliding_window", f"{short_repr(window)}: the window of the sliding_attention "
                      "layers must be a positive integer")
    if window >= s:
        return {}, f"{window}: not shorter than the sequence length"
    if all(flags):
        return {"window_size": window}, ""
    full = [i for i, x in enumerate(flags) if not x]
    n = full[0] + 1  # Megatron-Core: layer number i+1 keeps full attention when it divides by N
    if flags != [(i + 1) % n != 0 for i in range(layers)]:
        raise refusal(where, "layer_types", f"full attention on layers {full[:8]}"
                      f"{' ...' if len(full) > 8 else ''}: only every N-th layer full, the others "
                      "windowed (Megatron-Core's --window-attn-skip-freq N) is modelled")
    return {"window_size": window, "window_attn_skip_freq": n}, ""


def _own_window_layers(cfg: dict[str, Any], arch: str, layers: int, has_window: bool,
                       where: str) -> list[bool]:
    """The layers ``arch``'s modelling code windows without ``layer_types`` (True = sliding):
    Mistral, Mixtral, Phi-3 and Phi-3.5-MoE every layer; GPT-OSS and Gemma 2 layers 1, 3, 5 ...
    (1-based; transformers' default ``layer_types``); OLMo 3 all but every 4th; Gemma 3 all but
    every ``sliding_window_pattern``-th
    (default 6); none for the others (Qwen2/Qwen3: only with ``use_sliding_window``, refused
    when on; Llama, OLMo 2, Nemotron, GLM-4.5, DeepSeek: no window in their code); none either
    when the config has no window (``has_window`` false).

    Raises ConfigError for a ``sliding_window_pattern`` that is not a positive integer."""
    if arch in _WINDOW_EVERY_LAYER:
        return [has_window] * layers
    if arch in ("GptOssForCausalLM", "Gemma2ForCausalLM"):
        return [has_window and (i + 1) % 2 == 1 for i in range(layers)]
    if arch == "Olmo3ForCausalLM":  # Olmo3Config's default layer_types: every 4th layer full
        return [has_window and (i + 1) % 4 != 0 for i in range(layers)]
    if arch == "Gemma3ForCausalLM":
        n = cfg.get("sliding_window_pattern", 6)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise refusal(where, "sliding_window_pattern", f"{short_repr(n)} must be a positive integer")
        return [has_window and (i + 1) % n != 0 for i in range(layers)]
    return [False] * layers


def _own_rule(arch: str) -> str:
    """How ``arch``'s modelling code picks the windowed layers, for messages."""
    if arch in _WINDOW_EVERY_LAYER:
        return "its sliding_window windows every layer"
    if arch in _SWITCHED_WINDOW:
        return "use_sliding_window is false: no layer is windowed"
    if arch in _READS_LAYER_TYPES:
        return "every layer has full attention"
    return "its modelling code has no sliding window"


def _layer_types_flags(types: Any, layers: int, where: str) -> list[bool]:
    """``layer_types`` as windowed-layer flags (True = ``sliding_attention``).

    Raises ConfigError naming ``layer_types`` when it is not a list of one entry per layer, or
    names another mixer (Qwen3-Next's ``linear_attention``, a hybrid's ``mamba``): only
    softmax attention, windowed or full, is modelled."""
    if not (isinstance(types, list) and len(types) == layers):
        raise refusal(where, "layer_types", "must list sliding_attention or full_attention for "
                      f"each of the {layers} layers")
    for i, x in enumerate(types):
        if x not in ("sliding_attention", "full_attention"):
            raise refusal(where, "layer_types", f"{short_repr(x)} (layer {i}): only softmax-attention "
                          "layers, sliding_attention or full_attention, are modelled; other "
                          "mixers (linear attention, Mamba / state-space layers) have no op here")
    return [x == "sliding_attention" for x in types]


def _check_gemma3_pattern(cfg: dict[str, Any], types: list[str] | None, layers: int,
                          where: str) -> None:
    """Check Gemma 3's ``_sliding_window_pattern`` (transformers 4.53+ writes it beside
    ``layer_types``: one global layer in N) against the layers' pattern, ``layer_types`` or
    else ``sliding_window_pattern`` (default 6).

    Raises ConfigError naming it when it is not a positive integer or gives other layers."""
    if "_sliding_window_pattern" not in cfg:
        return
    n = cfg["_sliding_window_pattern"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise refusal(where, "_sliding_window_pattern", f"{short_repr(n)} must be a positive integer")
    want = ([x == "sliding_attention" for x in types] if types is not None else
            [(i + 1) % cfg.get("sliding_window_pattern", 6) != 0 for i in range(layers)])
    if [(i + 1) % n != 0 for i in range(layers)] != want:
        raise refusal(where, "_sliding_window_pattern", f"{n}: one global layer in {n} disagrees "
                      "with the layers' pattern (" + ("layer_types" if types is not None else
                                                      "sliding_window_pattern") + ")")
