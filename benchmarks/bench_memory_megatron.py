"""Our per-GPU memory model against Megatron-LM's own estimate, term by term.

Megatron-LM prints a "theoretical memory footprint" (``report_theoretical_memory``, called on
rank 0 with ``--log-memory-to-tensorboard`` / at the first logged iteration): the weights and
optimizer state of the most loaded model shard and the activations of the first pipeline stage.
This script re-implements that estimate from megatron-core 0.19.2's
``megatron/training/theoretical_memory_usage.py`` (the wheel's copy; line numbers below are
that file's; megatron is NOT imported) for the case its sequence-parallel branch applies to
(``--sequence-parallel`` with ``--recompute-granularity selective``, line 466: a dense model,
no MoE, MLA or MTP), and prints, for a few plans of GPT-3 175B, Llama 3 70B and Llama 3 8B
(1F1B and interleaved with several ``p``, ``v``; distributed optimizer on and off), Megatron's
figure beside :func:`core.model.memory.stage_memory`'s for stage 0:

* weights + gradients + optimizer state: the parameters of the shard (Megatron lines 214-264:
  ``(layers/p + embedding)/t + norms/p``) times its bytes per parameter (line 296: 18, or
  ``6 + 12/d`` with ``--use-distributed-optimizer``), against ours
  (:func:`core.model.counts.params_per_gpu` times :func:`core.model.memory.bytes_per_parameter`,
  plus Transformer Engine's placeholder weight gradients);
* activations of the first stage: one layer's bytes (line 317: ``s b h (18 + 4 f/h) / t``),
  the micro-batches in flight in units of a stage's layers (lines 342-366: ``p (1 + (p-1)/(p v))``
  interleaved, ``min(p, m)`` 1F1B), the embedding's input and dropout mask (lines 330-339) and,
  with ``p = 1``, the output layer's input and the logits (lines 368-376), against ours
  (:func:`core.model.memory.activation_bytes_per_layer`, :func:`in_flight_microbatches`, the
  embedding's ids and mask, :func:`core.model.memory.embedding_activation_bytes` times
  :func:`core.model.memory.embedding_in_flight`, and the loss stage's final norm and logits).

The ``why`` column names the explanation of each difference above 2 % (docs/simulator.md,
"Memory model against Megatron-LM's estimate", lists them with their lines).

Run: ``python benchmarks/bench_memory_megatron.py`` (a few seconds).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.model.counts import params_per_gpu  # noqa: E402
from core.model.memory import (activation_bytes_per_layer, bytes_per_parameter,  # noqa: E402
                               embedding_activation_bytes, embedding_in_flight,
                               in_flight_microbatches, stage_memory)
from core.model.wgrad_buffers import weight_gradient_buffer_bytes  # noqa: E402
from core.plan.layout import stage_layer_counts  # noqa: E402
from core.plan.model_config import ModelConfig, padded_vocab_size  # noqa: E402
from core.plan.parallel import ParallelPlan  # noqa: E402
from core.plan.presets import MODEL_PRESETS  # noqa: E402

GiB = 2.0 ** 30
#: The file re-implemented here, with its version.
SOURCE = "megatron-core 0.19.2, megatron/training/theoretical_memory_usage.py"


def megatron_args(model: ModelConfig, plan: ParallelPlan) -> SimpleNamespace:
    """The Megatron-LM arguments the estimate reads, for a dense ``model`` and ``plan``
    (``padded_vocab_size`` as Megatron pads it: ``vocab_size_with_padding``, a multiple of
    ``make_vocab_size_divisible_by * t``, megatron-core 0.19.2
    ``core/tokenizers/utils/build_tokenizer.py:124``). Raises ValueError for a model or plan
    the estimate's sequence-parallel branch does not describe (MoE, MLA, MTP; no sequence
    parallelism or no selective recomputation; context parallelism)."""
    if model.num_experts or model.multi_latent_attention or model.mtp_num_layers:
        raise ValueError(f"{model.name}: only dense models (no MoE, MLA or MTP) are compared")
    if not (plan.sequence_parallel and plan.recompute == "selective"
            and plan.context_parallel == 1):
        raise ValueError("the estimate's sequence-parallel branch needs sequence_parallel, "
                         "selective recomputation and cp = 1 (theoretical_memory_usage.py:466)")
    a = model.num_attention_heads
    kv = model.kv_channels or model.hidden_size // a
    g = model.num_query_groups or a
    return SimpleNamespace(
        kv_channels=kv, num_attention_heads=a, hidden_size=model.hidden_size,
        group_query_attention=g != a, num_query_groups=g,
        swiglu=model.activation == "swiglu", ffn_hidden_size=model.ffn_hidden_size or 4 * model.hidden_size,
        normalization="RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm",
        padded_vocab_size=padded_vocab_size(model.vocab_size, plan.tensor_parallel,
                                            model.make_vocab_size_divisible_by),
        untie_embeddings_and_output_weights=not model.tied_embeddings,
        num_layers=model.num_layers, seq_length=model.seq_length,
        micro_batch_size=plan.micro_batch_size,
        tensor_model_parallel_size=plan.tensor_parallel,
        pipeline_model_parallel_size=plan.pipeline_parallel,
        virtual_pipeline_model_parallel_size=(plan.virtual_pipeline_stages
                                              if plan.schedule == "interleaved" else None),
        data_parallel_size=plan.data_parallel,
        use_distributed_optimizer=plan.zero_stage >= 1)


def megatron_weight_and_optimizer(args: SimpleNamespace) -> dict[str, float]:
    """``compute_weight_and_optimizer_memory`` (lines 12-305) for a dense model: ``params``
    (the most loaded shard's, lines 248-267), ``bytes_per_parameter`` (line 296) and
    ``bytes`` (lines 298-303). The MoE, MLA and MTP terms are zero and left out."""
    q = args.kv_channels * args.num_attention_heads                      # line 14
    q_ratio = q / args.hidden_size                                        # line 15
    groups = args.num_query_groups if args.group_query_attention else args.num_attention_heads
    gated = 3 / 2 if args.swiglu else 1                                   # line 21
    norm_size = 1 if args.normalization == "RMSNorm" else 2               # line 60
    attention = 2 * args.hidden_size * args.hidden_size * (
        (1 + groups / args.num_attention_heads) * q_ratio)                # lines 82-93
    embedding = args.hidden_size * args.padded_vocab_size                 # line 95
    final_norm = norm_size * args.hidden_size                             # line 96
    mlp = 2 * args.hidden_size * args.ffn_hidden_size * gated             # line 103
    norms = 2 * args.hidden_size * norm_size                              # line 127
    L, p, t = args.num_layers, args.pipeline_model_parallel_size, args.tensor_model_parallel_size
    tp_sharded = (attention + mlp) * L                                    # lines 215-218
    replicated = norms * L + final_norm                                   # lines 219-229
    tp_on_shard = (tp_sharded / p + embedding) / t                        # lines 248-252
    rep_on_shard = replicated / p                                         # lines 253-255
    if args.untie_embeddings_and_output_weights and p == 1:               # lines 265-267
        tp_on_shard += embedding / t
    d = args.data_parallel_size
    per_param = 18 if not args.use_distributed_optimizer else 6 + 12 / d  # line 296
    params = tp_on_shard + rep_on_shard
    return {"params": params, "bytes_per_parameter": per_param, "bytes": params * per_param}


def megatron_activations(args: SimpleNamespace, num_microbatches: int | None
                         ) -> dict[str, float]:
    """``compute_activation_memory`` (lines 308-379, the sequence-parallel + selective branch),
    split into its terms, each already divided by ``t`` (line 379), bytes: ``per_layer``
    (line 317, one layer's), ``in_flight`` (micro-batches in flight on the first stage in units
    of its ``L/p`` layers: ``p`` times the factor of lines 343-346 / 361), ``layers``,
    ``embedding`` (lines 330-339, scaled alike), ``output`` (lines 368-376, ``p = 1`` only) and
    ``bytes`` (their sum: the function's result)."""
    s, b, h = args.seq_length, args.micro_batch_size, args.hidden_size
    p, t = args.pipeline_model_parallel_size, args.tensor_model_parallel_size
    per_layer = s * b * h * (18 + 4 * (args.ffn_hidden_size / h))        # lines 317-319
    layers = per_layer * args.num_layers                                  # line 325
    embedding = 8 * s * b * p + s * b * h * p                             # lines 330-339
    factor = 1.0
    if args.virtual_pipeline_model_parallel_size is not None:             # lines 342-355
        factor = 1 + (p - 1) / (p * args.virtual_pipeline_model_parallel_size)
    elif p > 1 and num_microbatches is not None:                          # lines 359-361
        factor = min(1, num_microbatches / p)
    layers, embedding = layers * factor, embedding * factor
    output = 0.0
    if p == 1:                                                            # lines 368-376
        output = s * b * h * 4 * (1 + args.padded_vocab_size / h)
    return {"per_layer": per_layer / t, "in_flight": p * factor, "layers": layers / t,
            "embedding": embedding / t, "output": output / t,
            "bytes": (layers + embedding + output) / t}


def ours(model: ModelConfig, plan: ParallelPlan) -> dict[str, float]:
    """Stage 0 of :func:`core.model.memory.stage_memory`, in the same terms: ``params``,
    ``bytes_per_parameter`` (:func:`bytes_per_parameter`, summed), ``placeholder`` (Transformer
    Engine's placeholder weight gradients, :func:`weight_gradient_buffer_bytes`, bytes),
    ``state`` (weights + gradients + optimizer state, bytes), ``per_layer``, ``in_flight``,
    ``layers`` (the stage's layers' activations), ``embedding`` (the embedding's input ids and
    dropout mask of the micro-batches in flight), ``rest`` (the other activations: the final
    norm and the logits when stage 0 is the loss stage) and ``activations`` (bytes)."""
    sm = stage_memory(model, plan)[0]
    per_layer = activation_bytes_per_layer(model, plan)
    in_flight = in_flight_microbatches(plan, 0, model)
    layers = per_layer * stage_layer_counts(model.num_layers, plan)[0] * in_flight
    embedding = embedding_activation_bytes(model, plan) * embedding_in_flight(plan)
    return {"params": float(params_per_gpu(model, plan)[0]),
            "bytes_per_parameter": float(sum(bytes_per_parameter(plan))),
            "placeholder": float(weight_gradient_buffer_bytes(model, plan)[0]),
            "state": float(sm.weights_bytes + sm.gradients_bytes + sm.optimizer_bytes),
            "per_layer": per_layer, "in_flight": in_flight, "layers": layers,
            "embedding": embedding, "rest": float(sm.activations_bytes) - layers - embedding,
            "activations": float(sm.activations_bytes)}


@dataclass(frozen=True)
class Case:
    """A plan of the comparison: the model preset, ``t p d``, ``v`` (None: 1F1B), the global
    batch (``m = B/d`` with ``b = 1``), the distributed optimizer, and the ``why`` codes of the
    differences above 2 % (:data:`WHY`)."""

    model: str
    t: int
    p: int
    d: int
    v: int | None
    gbs: int
    dist_opt: bool
    why: str = ""

    def plan(self) -> ParallelPlan:
        return ParallelPlan(tensor_parallel=self.t, pipeline_parallel=self.p,
                            data_parallel=self.d, micro_batch_size=1,
                            global_batch_size=self.gbs,
                            schedule="interleaved" if self.v else "1f1b",
                            virtual_pipeline_stages=self.v, recompute="selective",
                            sequence_parallel=True, zero_stage=1 if self.dist_opt else 0)


#: What each ``why`` code stands for (docs/simulator.md has the lines); the first of a pair
#: of letters explains the weights-and-optimizer difference, lower case, the second the
#: activations', upper case.
WHY = {
    "p": "Megatron's embedding is V'h only (line 95; no learned position embedding s*h, "
         "replicated over t) and its layers have no biases (lines 82-103): GPT-3 175B, 25.6 M "
         "parameters more per GPU in ours",
    "g": "ours adds Transformer Engine's placeholder weight gradients (get_dummy_wgrad: one "
         "buffer per distinct linear-weight shape, about one layer's linear weights in BF16, "
         "with the output layer's on the loss stage); Megatron's estimate has no such term",
    "L": "Megatron's layer term (line 317) is GPT's 18 + 4f/h for every model: no SwiGLU "
         "(6f/h, not 4f/h), no GQA (K, V with g of a heads; TODO at line 313), dropout masks "
         "counted at hidden_dropout 0 (the layers' two and the embedding's, line 334)",
    "M": "Megatron's interleaved factor (lines 342-355) ignores the micro-batch count: with "
         "m = p every item is in warm-up (megatron-core pipeline_parallel/schedules.py:949-951) "
         "and the first stage holds p stage units, not p + (p-1)/v",
    "O": "p = 1: Megatron counts fp32 logits 4sbV'/t (lines 370-376); ours the BF16 logits "
         "beside their fp32 copy 6sbV'/t at the loss (both count the final norm's input and "
         "output, 4sbh/t)",
}

CASES = (
    Case("GPT-3 175B", 8, 8, 4, None, 256, False),
    Case("GPT-3 175B", 8, 8, 4, None, 256, True, "pg"),
    Case("GPT-3 175B", 8, 8, 4, 2, 256, True, "pg"),
    Case("GPT-3 175B", 8, 8, 4, 6, 256, True, "pg"),
    Case("GPT-3 175B", 8, 16, 8, 3, 1536, True, "pg"),
    Case("GPT-3 175B", 8, 8, 4, None, 16, True, "pg"),    # m = 4 < p: 1F1B in flight min(p, m)
    Case("GPT-3 175B", 8, 8, 4, 2, 32, True, "pgM"),      # m = p under interleaving
    Case("Llama 3 70B", 8, 4, 2, None, 64, True, "L"),
    Case("Llama 3 70B", 8, 4, 2, 5, 64, True, "L"),
    Case("Llama 3 70B", 4, 8, 2, 5, 128, True, "L"),
    Case("Llama 3 70B", 8, 8, 1, 10, 64, False, "L"),
    Case("Llama 3 8B", 2, 1, 4, None, 32, True, "gLO"),
    Case("Llama 3 8B", 8, 1, 1, None, 8, False, "LO"),
    Case("Llama 3 8B", 4, 2, 1, None, 16, True, "L"),
    Case("Llama 3 8B", 2, 4, 2, 2, 64, True, "L"),
)


def compare(case: Case) -> dict:
    """Megatron's terms and ours for one case, with the two totals' differences (%)."""
    model, plan = MODEL_PRESETS[case.model], case.plan()
    args = megatron_args(model, plan)
    meg_w = megatron_weight_and_optimizer(args)
    meg_a = megatron_activations(args, plan.num_microbatches)
    us = ours(model, plan)
    return {"case": case, "m": plan.num_microbatches, "meg_w": meg_w, "meg_a": meg_a, "ours": us,
            "state_diff": (us["state"] / meg_w["bytes"] - 1) * 100,
            "act_diff": (us["activations"] / meg_a["bytes"] - 1) * 100}


def main() -> None:
    print(f"Megatron: {SOURCE} (re-implemented; sequence-parallel + selective branch)")
    print("stage 0 (Megatron's most loaded shard, its first stage), b = 1, BF16; s*b*h/t "
          "units for one layer's activations; in flight in units of the stage's layers\n")
    print(f"{'model':<12}{'t':>3}{'p':>3}{'v':>3}{'m':>5}{'d':>3} {'dopt':<5}"
          f"{'params M meg/ours':>19}{'B/param':>13}{'placeh.':>8}{'W+G+O GiB meg/ours':>20}"
          f"{'diff':>7}{'layer':>14}{'in flight':>16}{'emb meg/ours':>14}{'logits meg/ours':>16}"
          f"{'act GiB meg/ours':>18}{'diff':>7}  why")
    for case in CASES:
        r = compare(case)
        mw, ma, us = r["meg_w"], r["meg_a"], r["ours"]
        model = MODEL_PRESETS[case.model]
        unit = model.seq_length * model.hidden_size / case.t
        print(f"{case.model:<12}{case.t:>3}{case.p:>3}{case.v or 1:>3}{r['m']:>5}{case.d:>3} "
              f"{'on' if case.dist_opt else 'off':<5}"
              f"{mw['params'] / 1e6:>10.1f}/{us['params'] / 1e6:<8.1f}"
              f"{mw['bytes_per_parameter']:>6.2f}/{us['bytes_per_parameter']:<6.2f}"
              f"{us['placeholder'] / GiB:>7.2f} "
              f"{mw['bytes'] / GiB:>11.2f}/{us['state'] / GiB:<8.2f}{r['state_diff']:>+6.1f}%"
              f"{ma['per_layer'] / unit:>7.2f}/{us['per_layer'] / unit:<6.2f}"
              f"{ma['in_flight']:>7.3f}/{us['in_flight']:<7.3f}"
              f"{ma['embedding'] / GiB:>7.3f}/{us['embedding'] / GiB:<6.3f}"
              f"{ma['output'] / GiB:>7.2f}/{us['rest'] / GiB:<7.2f}"
              f"{ma['bytes'] / GiB:>9.2f}/{us['activations'] / GiB:<8.2f}{r['act_diff']:>+6.1f}%"
              f"  {case.why}")
    print("\nGiB columns: placeh. = ours' placeholder weight gradients (in its W+G+O); emb = "
          "the embedding's input ids and dropout mask (Megatron's lines 330-339: 8sb + sbh per "
          "micro-batch, all over t, times its layers' in-flight factor; ours 8sb + sbh/t, the ids "
          "on every tensor-parallel rank, times the first chunk's micro-batches in flight, 2p "
          "under interleaving); logits = the final norm and the logits (p = 1 only)")
    for code, text in WHY.items():
        print(f"  {code}: {text}")


if __name__ == "__main__":
    main()
