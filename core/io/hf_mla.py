"""The multi-head latent attention keys of a Hugging Face DeepSeek config: the model fields its
head sizes give (:data:`MLA_HF_FIELDS`) and the keys transformers' own config classes derive
from them (:func:`mla_derived_keys`); used by :mod:`core.io.hf_import`."""

from __future__ import annotations

from typing import Any

from core.io.import_result import positive_int, refusal
from core.util.text import short_repr

__all__ = ["MLA_HF_FIELDS", "mla_derived_keys"]

#: DeepSeek's latent-attention head sizes -> the model fields.
MLA_HF_FIELDS = {"q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
                 "qk_nope_head_dim": "qk_head_dim", "qk_rope_head_dim": "qk_pos_emb_head_dim",
                 "v_head_dim": "v_head_dim"}


def mla_derived_keys(cfg: dict[str, Any], arch: str, mla: bool, where: str,
                     ignored: dict[str, str]) -> dict[str, Any]:
    """``cfg`` without the keys transformers' ``DeepseekV2Config`` / ``DeepseekV3Config`` derive
    from the multi-head latent attention's head sizes and write into the files they save
    (``head_dim`` = ``qk_rope_head_dim``, the rotary part of a query/key head, not its size;
    ``qk_head_dim`` = ``qk_nope_head_dim + qk_rope_head_dim``), each checked and listed in
    ``ignored``. Other architectures' configs (``mla`` false: the architecture has no
    multi-head latent attention) come back unchanged.

    Raises ConfigError for a ``qk_head_dim`` that is not the sum."""
    if not (mla and ("head_dim" in cfg or "qk_head_dim" in cfg)):
        return cfg
    out = dict(cfg)
    rope = positive_int(cfg, "qk_rope_head_dim", where)
    if "qk_head_dim" in cfg:
        total = rope + positive_int(cfg, "qk_nope_head_dim", where)
        if positive_int(cfg, "qk_head_dim", where) != total:
            raise refusal(where, "qk_head_dim", f"{short_repr(cfg['qk_head_dim'])} must be "
                          f"qk_nope_head_dim + qk_rope_head_dim = {total} (the query/key head "
                          "size transformers derives)")
        ignored["qk_head_dim"] = f"{total}: qk_nope_head_dim + qk_rope_head_dim (checked)"
        del out["qk_head_dim"]
    head_dim = cfg.get("head_dim")
    if head_dim == rope and not isinstance(head_dim, bool):
        ignored["head_dim"] = (f"{rope}: transformers' {arch[:10]}Config sets it to "
                               "qk_rope_head_dim (the rotary part of a query/key head, not the "
                               "head size: qk_nope_head_dim, qk_rope_head_dim, v_head_dim)")
        del out["head_dim"]
    return out
