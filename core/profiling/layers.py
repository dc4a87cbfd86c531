"""One rank's shard of Megatron-LM's GPT model in torch (what the profiler times).

The modules follow Megatron-LM (Shoeybi et al. 2019, Fig. 3; ``megatron/model``
of the 2021-2022 releases that vTrain profiles) for one tensor-parallel rank
out of ``t``, in Megatron's ``(s, b, h)`` activation layout:

* :class:`AttentionShard` (op ``attention_fwd``/``attention_bwd``): layer norm,
  column-parallel QKV GEMM with bias (``h -> 3h/t``), unfused core attention on
  ``a/t`` heads (``baddbmm`` scores scaled by ``1/sqrt(h/a)``, causal mask,
  softmax, dropout, ``bmm`` with the values), row-parallel projection without
  its bias (``h/t -> h``; Megatron adds the bias after the all-reduce).
* :class:`MLPShard` (op ``mlp_fwd``/``mlp_bwd``): the attention's bias-dropout-add
  (residual), layer norm, column-parallel fc1 with bias (``h -> f/t``), GeLU
  (tanh form, as Megatron's fused bias-gelu), row-parallel fc2 without bias
  (``f/t -> h``), then the MLP's bias-dropout-add.
* :class:`EmbeddingShard` (op ``embedding_*``): vocabulary-parallel word
  embedding (``V/t`` rows; ids outside the shard masked when ``t > 1``),
  learned position embedding, dropout.
* :class:`OutputShard` (op ``output_*``): final layer norm, logits GEMM against
  the word embedding shard (``h -> V/t``), vocabulary-parallel cross-entropy in
  fp32.

The tensor-parallel all-reduces are not here: the simulator inserts them.
:class:`GPTModel` stacks the same modules with ``t = 1`` into the reference
model that ``benchmarks/bench_cpu_proof.py`` trains, so profile and training
run the same code. :func:`make_optimizer` is the optimizer both use.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["TORCH_DTYPES", "AttentionShard", "MLPShard", "EmbeddingShard", "OutputShard",
           "TransformerLayer", "GPTModel", "make_optimizer", "init_weights"]

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
HIDDEN_DROPOUT = 0.1
ATTENTION_DROPOUT = 0.1
INIT_STD = 0.02


def init_weights(module: nn.Module) -> None:
    """Megatron's init: normal(0, 0.02) weights, zero biases, unit layer-norm scales."""
    for name, p in module.named_parameters(recurse=False):
        with torch.no_grad():
            if name.endswith("bias"):
                p.zero_()
            elif name.startswith("ln"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, INIT_STD)


class AttentionShard(nn.Module):
    """Self-attention of one tensor-parallel rank: ``(s, b, h) -> (s, b, h)`` partial sum.

    Parameters
    ----------
    h, a, t : int
        Hidden size, attention heads, tensor-parallel size (``a % t == 0``).
    s : int
        Sequence length (size of the causal mask buffer).
    """

    def __init__(self, h: int, a: int, t: int, s: int):
        super().__init__()
        self.h, self.heads, self.dh = h, a // t, h // a
        self.ln_weight = nn.Parameter(torch.empty(h))
        self.ln_bias = nn.Parameter(torch.empty(h))
        self.qkv_weight = nn.Parameter(torch.empty(3 * h // t, h))   # column-parallel
        self.qkv_bias = nn.Parameter(torch.empty(3 * h // t))
        self.proj_weight = nn.Parameter(torch.empty(h, h // t))      # row-parallel
        self.proj_bias = nn.Parameter(torch.empty(h))  # added by the MLPShard's bias-dropout-add
        self.register_buffer("causal_mask",
                             torch.ones(s, s, dtype=torch.bool).triu(1), persistent=False)
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, _ = x.shape
        n, dh = self.heads, self.dh
        y = F.layer_norm(x, (self.h,), self.ln_weight, self.ln_bias)            # (s, b, h)
        qkv = F.linear(y, self.qkv_weight, self.qkv_bias)                       # (s, b, 3h/t)
        qkv = qkv.view(s, b, n, 3 * dh)                                         # (s, b, a/t, 3*dh)
        q, k, v = qkv.split(dh, dim=-1)                                         # 3 x (s, b, a/t, dh)
        q = q.reshape(s, b * n, dh).transpose(0, 1)                             # (b*a/t, s, dh)
        k = k.reshape(s, b * n, dh).transpose(0, 1)                             # (b*a/t, s, dh)
        v = v.reshape(s, b * n, dh).transpose(0, 1)                             # (b*a/t, s, dh)
        scores = torch.empty(b * n, s, s, dtype=x.dtype, device=x.device)
        scores = torch.baddbmm(scores, q, k.transpose(1, 2), beta=0.0,
                               alpha=1.0 / math.sqrt(dh))                       # (b*a/t, s, s)
        scores = scores.masked_fill(self.causal_mask[:s, :s], -10000.0)
        probs = torch.softmax(scores, dim=-1)                                   # (b*a/t, s, s)
        probs = F.dropout(probs, ATTENTION_DROPOUT, self.training)
        ctx = torch.bmm(probs, v)                                               # (b*a/t, s, dh)
        ctx = ctx.view(b, n, s, dh).permute(2, 0, 1, 3).reshape(s, b, n * dh)   # (s, b, h/t)
        return F.linear(ctx, self.proj_weight)                                  # (s, b, h)


class MLPShard(nn.Module):
    """MLP of one tensor-parallel rank with both residual bias-dropout-adds.

    ``forward(x, attn_out, attn_bias)``: ``x`` the layer input, ``attn_out`` the
    (all-reduced) attention output, ``attn_bias`` the projection bias; returns
    the layer output (after the MLP's all-reduce in Megatron), ``(s, b, h)``.
    """

    def __init__(self, h: int, f: int, t: int):
        super().__init__()
        self.h = h
        self.ln_weight = nn.Parameter(torch.empty(h))
        self.ln_bias = nn.Parameter(torch.empty(h))
        self.fc1_weight = nn.Parameter(torch.empty(f // t, h))       # column-parallel
        self.fc1_bias = nn.Parameter(torch.empty(f // t))
        self.fc2_weight = nn.Parameter(torch.empty(h, f // t))       # row-parallel
        self.fc2_bias = nn.Parameter(torch.empty(h))
        init_weights(self)

    def forward(self, x: torch.Tensor, attn_out: torch.Tensor, attn_bias: torch.Tensor
                ) -> torch.Tensor:
        res = x + F.dropout(attn_out + attn_bias, HIDDEN_DROPOUT, self.training)  # (s, b, h)
        y = F.layer_norm(res, (self.h,), self.ln_weight, self.ln_bias)            # (s, b, h)
        y = F.gelu(F.linear(y, self.fc1_weight, self.fc1_bias), approximate="tanh")  # (s, b, f/t)
        y = F.linear(y, self.fc2_weight)                                          # (s, b, h)
        return res + F.dropout(y + self.fc2_bias, HIDDEN_DROPOUT, self.training)  # (s, b, h)


class EmbeddingShard(nn.Module):
    """Vocabulary-parallel word embedding (``V/t`` rows) plus position embedding and dropout.

    ``forward(ids)``: ``ids`` (b, s) int64 -> ``(s, b, h)`` (partial sum over ranks when t > 1).
    """

    def __init__(self, V: int, h: int, s: int, t: int):
        super().__init__()
        self.t, self.rows = t, V // t
        self.vocab_start = 0  # rank 0's shard
        self.word_weight = nn.Parameter(torch.empty(V // t, h))
        self.pos_weight = nn.Parameter(torch.empty(s, h))
        init_weights(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        if self.t > 1:  # Megatron VocabParallelEmbedding: mask ids held by other ranks
            outside = (ids < self.vocab_start) | (ids >= self.vocab_start + self.rows)
            local = (ids - self.vocab_start).masked_fill(outside, 0)
            emb = F.embedding(local, self.word_weight)                          # (b, s, h)
            emb = emb.masked_fill(outside.unsqueeze(-1), 0.0)
        else:
            emb = F.embedding(ids, self.word_weight)                            # (b, s, h)
        pos = F.embedding(torch.arange(s, device=ids.device), self.pos_weight)  # (s, h)
        x = (emb + pos).transpose(0, 1).contiguous()                            # (s, b, h)
        return F.dropout(x, HIDDEN_DROPOUT, self.training)


class OutputShard(nn.Module):
    """Final layer norm, logits against the word-embedding shard, vocab-parallel cross-entropy.

    ``forward(x, labels, word_weight=None)``: ``x`` (s, b, h), ``labels`` (b, s)
    int64 -> mean loss (scalar, fp32). ``word_weight`` (V/t, h) is the tied
    embedding; without it the module's own copy is used (Megatron's last
    pipeline stage keeps a copy).
    """

    def __init__(self, V: int, h: int, t: int):
        super().__init__()
        self.h, self.t, self.rows = h, t, V // t
        self.ln_weight = nn.Parameter(torch.empty(h))
        self.ln_bias = nn.Parameter(torch.empty(h))
        self.word_weight = nn.Parameter(torch.empty(V // t, h))
        init_weights(self)

    def forward(self, x: torch.Tensor, labels: torch.Tensor,
                word_weight: torch.Tensor | None = None) -> torch.Tensor:
        w = self.word_weight if word_weight is None else word_weight
        y = F.layer_norm(x, (self.h,), self.ln_weight, self.ln_bias)            # (s, b, h)
        logits = F.linear(y, w).transpose(0, 1).float()                         # (b, s, V/t) fp32
        if self.t == 1:
            return F.cross_entropy(logits.reshape(-1, self.rows), labels.reshape(-1))
        # Megatron vocab_parallel_cross_entropy on one rank (all-reduces of max,
        # predicted logit and sum-exp left out: the simulator inserts communication).
        logits = logits - logits.max(dim=-1, keepdim=True).values.detach()      # (b, s, V/t)
        outside = (labels < 0) | (labels >= self.rows)
        local = labels.masked_fill(outside, 0)                                   # (b, s)
        predicted = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1)          # (b, s)
        predicted = predicted.masked_fill(outside, 0.0)
        sum_exp = logits.exp().sum(dim=-1)                                       # (b, s)
        return (sum_exp.log() - predicted).mean()


class TransformerLayer(nn.Module):
    """One GPT layer: :class:`AttentionShard` then :class:`MLPShard` (``t`` ranks' share)."""

    def __init__(self, h: int, a: int, f: int, t: int, s: int):
        super().__init__()
        self.attention = AttentionShard(h, a, t, s)
        self.mlp = MLPShard(h, f, t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x, self.attention(x), self.attention.proj_bias)        # (s, b, h)


class GPTModel(nn.Module):
    """Megatron-style GPT on one device (``t = 1``), word embedding tied to the output layer.

    Parameters
    ----------
    num_layers, h, a, f, s, V : int
        Layers, hidden size, heads, MLP hidden size, sequence length, padded vocabulary.
    recompute : bool
        Full activation recomputation: each layer runs under
        ``torch.utils.checkpoint`` (its forward is repeated in the backward).
    """

    def __init__(self, num_layers: int, h: int, a: int, f: int, s: int, V: int,
                 recompute: bool = False):
        super().__init__()
        self.recompute = recompute
        self.embedding = EmbeddingShard(V, h, s, 1)
        self.layers = nn.ModuleList(TransformerLayer(h, a, f, 1, s) for _ in range(num_layers))
        self.output = OutputShard(V, h, 1)
        del self.output.word_weight  # tied to the embedding (Megatron's default for GPT)
        self.output.word_weight = None

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy loss of ``ids`` (b, s) against ``labels`` (b, s)."""
        x = self.embedding(ids)                                                 # (s, b, h)
        for layer in self.layers:
            if self.recompute:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return self.output(x, labels, self.embedding.word_weight)


def make_optimizer(params, device_type: str) -> torch.optim.Optimizer:
    """Adam (Megatron's default, weight decay 0.01 as AdamW) used by profiler and trainer alike.

    On CUDA the fused implementation (as Megatron's apex FusedAdam); on a CPU
    torch's default (for-each over tensors where supported).
    """
    kw = {"fused": True} if device_type == "cuda" else {}
    return torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01,
                             **kw)
