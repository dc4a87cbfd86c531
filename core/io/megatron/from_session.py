"""A session's model and plan as Megatron-LM arguments (``vtrain export megatron-args``).

What belongs here: :func:`export_arguments`, the inverse of
:func:`core.io.megatron.to_session.session_from_launch` through the same table
(:data:`~core.io.megatron.arguments.ARGUMENTS`): a session -> arguments -> session round trip is
exact for every field Megatron-LM has an argument for; a plan Megatron-LM's arguments cannot
express is refused naming the field. The script around them (torchrun line, environment,
start-up rules, rewriting the user's script) is :mod:`core.io.megatron.export`.
"""

from __future__ import annotations

from typing import Any

from core.schedules import get as get_schedule
from core.io.megatron.arguments import MEGATRON_FSDP_STRATEGIES, TOKENIZER_VOCAB, MegatronArgsError
from core.io.megatron.model_arguments import DEFAULT_ATTENTION_BACKEND, EXPORTED_ATTENTION_BACKENDS
from core.plan.cluster import NO_CHECKPOINT_INTERVAL
from core.plan.parallel import fp8_recipe, tp_saves_gathered_input, wgrad_accumulation
from core.plan.session import Session

__all__ = ["export_arguments", "train_samples"]


#: Plan switches exported as Megatron-LM's flag of the same name (``--`` and dashes), in order.
_SWITCHES = ("fp8_param_gather", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
             "overlap_moe_expert_parallel_comm", "delay_wgrad_compute")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default)


def _shape_words(m: Any) -> list[str]:
    """The model's shape, sequence length, vocabulary (a tokenizer and its padding) and query
    groups."""
    out = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
           "--num-attention-heads", str(m.num_attention_heads)]
    if m.ffn_hidden_size or _get(m, "activation") == "swiglu":  # SwiGLU's default is not 4h
        out += ["--ffn-hidden-size", str(m.ffn)]
    out += ["--seq-length", str(m.seq_length), "--max-position-embeddings", str(m.seq_length)]
    if m.vocab_size == TOKENIZER_VOCAB["GPT2BPETokenizer"]:  # the files are the user's to place
        out += ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "gpt2-vocab.json",
                "--merge-file", "gpt2-merges.txt"]
    else:
        # megatron-core 0.18 on: the NullTokenizer's size is --vocab-size (eod the last id)
        out += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab_size)]
    divisor = _get(m, "make_vocab_size_divisible_by", 128)
    if divisor != 128:  # Megatron-LM's default pads to 128*t
        out += ["--make-vocab-size-divisible-by", str(divisor)]
    if _get(m, "kv_channels") is not None:
        out += ["--kv-channels", str(m.kv_channels)]
    g = _get(m, "num_query_groups")
    if g is not None and g != m.num_attention_heads:
        out += ["--group-query-attention", "--num-query-groups", str(g)]
    return out


def _layer_words(m: Any) -> list[str]:
    """The MLP activation, norms, biases, attention kernel, sliding window, multi-latent
    attention and multi-token prediction."""
    out: list[str] = []
    family = _get(m, "family") or "dense"
    if family != "dense":
        raise MegatronArgsError(f"model.family {family!r}: Megatron-LM's pretrain_gpt.py builds "
                                "Megatron-Core's GPT layer specs only, which have no such layer "
                                "(post-norms, embedding scale"
                                + (", soft-capping)" if family == "gemma2" else ")"))
    if _get(m, "activation") == "geglu":
        raise MegatronArgsError("model.activation 'geglu': Megatron-LM has no tanh-GeLU gated "
                                "MLP argument (--quick-geglu is x*sigmoid(1.702x))")
    clamp, offset = _get(m, "activation_func_clamp_value"), _get(m, "glu_linear_offset") or 0.0
    if _get(m, "activation") == "swiglu":
        # Megatron-Core fuses a clamp and a linear offset only with the quick-GELU gate
        # (TransformerConfig: glu_linear_offset needs quick_gelu under bias_activation_fusion)
        out.append("--quick-geglu" if clamp is not None or offset else "--swiglu")
    elif _get(m, "activation") == "squared_relu":
        out.append("--squared-relu")
    if clamp is not None:
        out += ["--activation-func-clamp-value", repr(float(clamp))]
    if offset:
        out += ["--glu-linear-offset", repr(float(offset))]
    if _get(m, "bias_activation_fusion", True) is False:
        # Megatron-LM reads --no-bias-swiglu-fusion with --swiglu, --no-bias-gelu-fusion
        # otherwise (--quick-geglu included; core_transformer_config_from_args)
        out.append("--no-bias-swiglu-fusion" if "--swiglu" in out else "--no-bias-gelu-fusion")
    if (_get(m, "softmax_type") or "vanilla") != "vanilla":
        out += ["--softmax-type", m.softmax_type]
    for name in ("hidden_dropout", "attention_dropout"):  # Megatron-LM's default is 0.1
        p = _get(m, name, 0.1)
        if p != 0.1:
            out += ["--" + name.replace("_", "-"), repr(float(p))]
    if _get(m, "normalization") == "rmsnorm":
        out += ["--normalization", "RMSNorm"]
    if _get(m, "position_embedding") == "rope":
        out += ["--position-embedding-type", "rope"]
    if _get(m, "tied_embeddings") is False:
        out.append("--untie-embeddings-and-output-weights")
    if _get(m, "add_bias_linear") is False:
        for name, what in (("add_proj_bias", "the output projection's bias"),
                           ("add_mlp_bias", "fc1's and fc2's biases")):
            if _get(m, name):
                raise MegatronArgsError(
                    f"model.{name} true: Megatron-LM has no argument for {what} without the "
                    "other linear biases (--disable-bias-linear drops them all, --add-qkv-bias "
                    "adds QKV's only)")
        out.append("--disable-bias-linear")
    if _get(m, "add_qkv_bias"):
        out.append("--add-qkv-bias")
    if _get(m, "add_output_bias"):
        raise MegatronArgsError("model.add_output_bias true: Megatron-LM's output layer has no "
                                "bias (GPTModel's output_layer is built with bias=False)")
    if _get(m, "qk_layernorm"):
        out.append("--qk-layernorm")
    kernel = _get(m, "attention_kernel")
    if kernel is not None and kernel not in EXPORTED_ATTENTION_BACKENDS:
        raise MegatronArgsError(f"model.attention_kernel {kernel!r}: no Megatron-LM "
                                "--attention-backend runs it")
    backend = EXPORTED_ATTENTION_BACKENDS.get(kernel, DEFAULT_ATTENTION_BACKEND)
    if backend != DEFAULT_ATTENTION_BACKEND:  # Megatron-Core's default auto goes unwritten
        out += ["--attention-backend", backend]
    if _get(m, "window_size"):
        out += ["--window-size", f"({m.window_size},0)"]
        if _get(m, "window_attn_skip_freq"):
            out += ["--window-attn-skip-freq", str(m.window_attn_skip_freq)]
    if _get(m, "multi_latent_attention"):
        out.append("--multi-latent-attention")
        if m.q_lora_rank:
            out += ["--q-lora-rank", str(m.q_lora_rank)]
        out += ["--kv-lora-rank", str(m.kv_lora_rank), "--qk-head-dim", str(m.qk_head_dim),
                "--qk-pos-emb-head-dim", str(m.qk_pos_emb_head_dim),
                "--v-head-dim", str(m.v_head_dim)]
    if _get(m, "mtp_num_layers"):
        out += ["--mtp-num-layers", str(m.mtp_num_layers)]
    return out


def _expert_words(m: Any, pl: Any) -> list[str]:
    """The experts, their router and token dispatcher, and the MoE layer pattern."""
    out: list[str] = []
    E = _get(m, "num_experts")
    if E:
        out += ["--num-experts", str(E), "--moe-router-topk", str(m.moe_top_k),
                "--moe-grouped-gemm",  # the experts are timed as grouped GEMMs (TEGroupedMLP)
                "--moe-token-dispatcher-type", str(_get(pl, "moe_token_dispatcher_type")
                                                   or "alltoall")]
        if m.moe_ffn_hidden_size:
            out += ["--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size)]
        if m.num_shared_experts:
            width = m.moe_ffn_hidden_size or m.ffn
            out += ["--moe-shared-expert-intermediate-size", str(m.num_shared_experts * width)]
        first, freq = m.moe_first_dense_layers, m.moe_layer_frequency
        if first:  # Megatron's list form; the first dense layers end where MoE starts
            L = m.num_layers
            out += ["--moe-layer-freq", f"([0]*{first}+[1]*{L - first})" if freq == 1 else
                    "[" + ",".join("1" if i >= first and i % freq == 0 else "0"
                                   for i in range(L)) + "]"]
        elif freq != 1:
            out += ["--moe-layer-freq", str(freq)]
        if getattr(m, "moe_router_num_groups", None):
            out += ["--moe-router-num-groups", str(m.moe_router_num_groups),
                    "--moe-router-group-topk", str(m.moe_router_group_topk)]
    return out


def _parallel_words(pl: Any) -> list[str]:
    """The batch, the parallel sizes, context parallelism's exchange, and the pipeline
    schedule (Megatron-LM has 1F1B and interleaved 1F1B only)."""
    out: list[str] = []
    out += ["--micro-batch-size", str(pl.micro_batch_size),
            "--global-batch-size", str(pl.global_batch_size),
            "--tensor-model-parallel-size", str(pl.tensor_parallel),
            "--pipeline-model-parallel-size", str(pl.pipeline_parallel)]
    cp, ep = _get(pl, "context_parallel", 1) or 1, _get(pl, "expert_parallel", 1) or 1
    if cp > 1:
        out += ["--context-parallel-size", str(cp)]
        kind = _get(pl, "cp_comm_type", "p2p")
        if kind == "allgather":
            raise MegatronArgsError(
                f"plan.cp_comm_type {pl.cp_comm_type!r}: PyTorch's context_parallel all-gather "
                "(torchtitan) has no Megatron-LM argument (--cp-comm-type all_gather is Transformer "
                "Engine's, which does not overlap the gather: plan.cp_comm_type all_gather); use "
                "p2p, the ring")
        if kind != "p2p":
            out += ["--cp-comm-type", kind]
        if kind == "a2a+p2p":
            if not _get(pl, "cp_a2a_size"):
                raise MegatronArgsError("plan.cp_a2a_size is empty: cp_comm_type 'a2a+p2p' needs "
                                        "the all-to-all group's size")
            out += ["--hierarchical-context-parallel-sizes", str(pl.cp_a2a_size),
                    str(cp // pl.cp_a2a_size)]
    if ep > 1:
        out += ["--expert-model-parallel-size", str(ep)]
    if _get(pl, "expert_tensor_parallel") is not None:
        out += ["--expert-tensor-parallel-size", str(pl.expert_tensor_parallel)]
    layout = _get(pl, "pipeline_model_parallel_layout")
    if layout and str(layout).strip():  # Megatron-Core derives v from the layout
        out += ["--pipeline-model-parallel-layout", str(layout).strip()]
    try:  # the schedule's own Megatron arguments, or its refusal by name
        schedule_args = get_schedule(pl.schedule).megatron_args(pl.virtual_pipeline_stages)
    except ValueError as exc:  # NotInMegatron, or an unknown name
        raise MegatronArgsError(f"plan.schedule {pl.schedule!r}: {exc}") from None
    if not (layout and str(layout).strip()):
        out += schedule_args
    if pl.schedule == "interleaved" and _get(pl, "overlap_p2p_comm", True) is False:
        out.append("--no-overlap-p2p-communication")
    return out


def _megatron_fsdp(pl: Any, zero: int) -> bool:
    """Whether a ZeRO-2 or ZeRO-3 plan is exported as Megatron-FSDP
    (``--data-parallel-sharding-strategy`` optim_grads or optim_grads_params) rather than
    torch FSDP2 (ZeRO-3 only): ZeRO-2 always (FSDP2 has no ZeRO-2), ZeRO-3 when the plan
    overlaps the parameter gather (FSDP2 refuses ``--overlap-param-gather``). Megatron-FSDP
    forces its overlaps on (:data:`core.io.megatron.plan_arguments.MEGATRON_FSDP_OVERLAPS`):
    a ZeRO-2 plan without the gradient overlap, and what the import refuses under
    Megatron-FSDP (hybrid sharding, FP8 parameter gathers), is refused here naming the field
    (a ZeRO-3 plan that gathers overlapped without it breaks Megatron-LM's own rule
    ``overlap-param-gather-grad-reduce``, which the export names).

    Raises
    ------
    MegatronArgsError
        The plan is one Megatron-FSDP would run otherwise than the simulator models it.
    """
    if zero == 3 and not _get(pl, "overlap_param_gather"):
        return False
    which = f"plan.zero_stage {zero} (Megatron-FSDP, --data-parallel-sharding-strategy " + \
        ("optim_grads)" if zero == 2 else "optim_grads_params)")
    if zero == 2 and not _get(pl, "overlap_grad_reduce"):
        raise MegatronArgsError(f"{which} with plan.overlap_grad_reduce false: Megatron-FSDP "
                                "always overlaps the gradient reduce-scatters (megatron_fsdp.py "
                                "MegatronFSDP.__init__); set plan.overlap_grad_reduce true")
    size = _get(pl, "data_parallel_shard_size")
    if size and size != pl.data_parallel:
        raise MegatronArgsError(f"{which} with plan.data_parallel_shard_size {size}: "
                                "Megatron-FSDP's hybrid sharding is not modelled")
    if _get(pl, "fp8_param_gather"):
        raise MegatronArgsError(f"{which} with plan.fp8_param_gather: FP8 parameter gathers "
                                "under Megatron-FSDP are not modelled; Megatron-LM runs it with "
                                "plan.fp8_param_gather false, at ZeRO-1 (--use-distributed-"
                                "optimizer; a sweep: --zero-stages 1), or at ZeRO-3 with "
                                "plan.overlap_param_gather false (torch FSDP2)")
    return True


def _sharding_words(pl: Any) -> list[str]:
    """Sequence parallelism, the distributed optimizer or FSDP, hybrid sharding, overlaps,
    fusions, the gradient-reduction dtype, the precision-aware optimizer and CUDA graphs."""
    out: list[str] = []
    if _get(pl, "sequence_parallel"):
        if tp_saves_gathered_input(pl):
            raise MegatronArgsError(
                "plan.tp_saved_input 'gathered': column-parallel linears that keep their "
                "all-gathered input, all s tokens on every rank (torchtitan's DTensor tensor "
                "parallelism), have no Megatron-LM argument: Megatron-Core's sequence "
                "parallelism saves the s/t shard and gathers it again in the backward; set it "
                "to sequence_shard")
        out.append("--sequence-parallel")
    zero = _get(pl, "zero_stage", 0) or 0
    from core.model.optimizer_memory import fsdp_fp32_shards
    if fsdp_fp32_shards(pl):
        raise MegatronArgsError(
            "plan.fsdp_fp32_params: FSDP2 over an fp32 model (torchtitan: fp32 shards that are "
            "the master weights, 16 bytes per parameter over d) has no Megatron-LM argument "
            "(Megatron-FSDP and --use-torch-fsdp2 shard the 16-bit weights beside fp32 main "
            "weights, 18 over d): set it false")
    if zero == 1:
        out.append("--use-distributed-optimizer")
    elif zero >= 2 and _megatron_fsdp(pl, zero):
        strategy = next(k for k, v in MEGATRON_FSDP_STRATEGIES.items() if v == zero)
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
                "--use-distributed-optimizer", "--ckpt-format", "fsdp_dtensor"]
    elif zero == 3:
        out.append("--use-torch-fsdp2")
    # off, and under FSDP2, which Megatron runs only without it (core.io.megatron.rules);
    # Megatron-FSDP takes the plan's choice (its ZeRO-3 wgrad GEMMs write into the bucket)
    if (_get(pl, "gradient_accumulation_fusion") is False if "--use-megatron-fsdp" in out
            else wgrad_accumulation(pl) != "fused"):
        out.append("--no-gradient-accumulation-fusion")
    size = _get(pl, "data_parallel_shard_size")
    if size:  # hybrid sharding: d/size instances of the distributed optimizer
        out += ["--num-distributed-optimizer-instances", str(pl.data_parallel // size)]
    if _get(pl, "tp_comm_overlap") and _get(pl, "tp_comm_overlap_backend") == "symmetric_memory":
        raise MegatronArgsError(
            "plan.tp_comm_overlap_backend 'symmetric_memory': PyTorch's async TP (torchtitan) has "
            "no Megatron-LM argument (--tp-comm-overlap is Transformer Engine's userbuffers, "
            "which also overlaps the backward's reduce-scatters): use userbuffers")
    out += [f"--{name.replace('_', '-')}" for name in _SWITCHES if _get(pl, name)]
    if _get(pl, "cross_entropy_loss_fusion"):
        out += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
                str(_get(pl, "cross_entropy_fusion_impl") or "native")]
    gd = _get(pl, "grad_reduce_dtype")
    if gd == "bf16":
        out.append("--grad-reduce-in-bf16")
    elif gd == "fp32":
        out.append("--accumulate-allreduce-grads-in-fp32")
    elif gd is not None:
        raise MegatronArgsError(f"plan.grad_reduce_dtype {gd!r}: Megatron-LM reduces gradients "
                                "in fp32 or bf16")
    if _get(pl, "use_precision_aware_optimizer"):
        if _get(pl, "te_master_weights") is False and pl.precision == "fp8" \
                and fp8_recipe(pl) == "delayed":
            raise MegatronArgsError("plan.te_master_weights false with FP8 delayed scaling: "
                                    "Megatron-Core leaves the master weights to Transformer "
                                    "Engine's FusedAdam with the delayed recipe")
        out.append("--use-precision-aware-optimizer")
        if _get(pl, "te_master_weights") is False and pl.precision != "fp8":
            # Megatron-LM gives --fp8-recipe (default delayed) to the optimizer's config in
            # BF16 training too; another recipe keeps Megatron-Core's fp32 master weights
            out += ["--fp8-recipe", "tensorwise"]
        for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if (_get(pl, name) or "fp32") != "fp32":
                out += [f"--{name.replace('_', '-')}", str(_get(pl, name))]
    impl = _get(pl, "cuda_graph_impl", "none") or "none"
    if impl != "none":  # Megatron-LM's current names (not the deprecated switches)
        out += ["--cuda-graph-impl", str(impl)]
        mods = str(_get(pl, "cuda_graph_modules") or "").replace(",", " ").split()
        if mods:
            out += ["--cuda-graph-modules", *mods]
    return out


def train_samples(session: Session) -> int:
    """``--train-samples`` of ``session``'s token budget: the whole iterations that cover it
    (:func:`core.sim.costing.iterations_for_tokens`, ``ceil(training_tokens / (B * s))``,
    as ``vtrain simulate`` counts them) times the global batch ``B`` in sequences.

    Megatron-LM runs ``train_samples // global_batch_size`` iterations
    (``update_train_iters``, megatron/training/training.py, megatron-core 0.19.2): the token
    budget in sequences, ``round(tokens / s)``, ran the fractional iteration's floor, one
    iteration fewer than simulated whenever the budget is not a whole number of iterations.
    A multiple of ``B`` runs exactly the simulated iterations."""
    from core.sim.costing import iterations_for_tokens
    B, s = session.plan.global_batch_size, session.model.seq_length
    return iterations_for_tokens(session.cost.training_tokens, B * s) * B


def _recompute_and_precision_words(session: Session) -> list[str]:
    """Recomputation, the uneven pipeline split, precision (FP8's recipe always explicit),
    the token budget and the checkpoints' interval and asynchrony."""
    pl = session.plan
    out: list[str] = []
    if pl.recompute == "full":
        n = _get(pl, "recompute_num_layers")
        out += ["--recompute-granularity", "full"]
        out += ["--recompute-method", "block", "--recompute-num-layers", str(n)] if n else [
            "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif pl.recompute == "selective_op":
        raise MegatronArgsError("plan.recompute 'selective_op': torchtitan's per-op selective "
                                "activation checkpointing has no Megatron-LM argument")
    elif pl.recompute == "selective":
        out += ["--recompute-granularity", "selective"]
        if _get(pl, "recompute_modules"):
            out += ["--recompute-modules", *_get(pl, "recompute_modules").replace(",", " ").split()]
    for name, flag in (("first_stage_layers", "--decoder-first-pipeline-num-layers"),
                       ("last_stage_layers", "--decoder-last-pipeline-num-layers")):
        if _get(pl, name):
            out += [flag, str(getattr(pl, name))]
    for name, flag in (("account_for_embedding_in_pipeline_split",
                        "--account-for-embedding-in-pipeline-split"),
                       ("account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split")):
        if _get(pl, name):
            out.append(flag)
    if pl.precision in ("bf16", "fp16"):
        out.append(f"--{pl.precision}")
    elif pl.precision == "fp8":  # the recipe always explicit: Megatron's default is delayed
        if _get(pl, "fp8_impl") == "torchao":
            raise MegatronArgsError(
                "plan.fp8_impl 'torchao': torchao's Float8Linear (torchtitan's float8: no "
                "persistent FP8 weight copies, BF16 saved inputs) has no Megatron-LM argument: "
                "its Transformer Engine layers keep the copies; set it to transformer_engine")
        out += ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe",
                _get(pl, "fp8_recipe") or "tensorwise"]
    out += ["--train-samples", str(train_samples(session))]
    rel = getattr(session, "reliability", None)  # the run's checkpoints (docs/goodput.md)
    if (rel is not None and rel.checkpoint_interval_iterations is not None
            and rel.checkpoint_interval_iterations != NO_CHECKPOINT_INTERVAL):
        # no checkpoint (Megatron-LM without --save): no interval to write; the import reads
        # a launch without --save back as this session. One save at the end (2^40 - 1) is
        # written as that interval: Megatron-LM asserts one above 0 with --save (rules
        # save-interval-given, save-interval-positive), and no run reaches it
        out += ["--save-interval", str(rel.checkpoint_interval_iterations)]
    if rel is not None and rel.async_save:
        out.append("--async-save")
    return out


def export_arguments(session: Session) -> list[str]:
    """Megatron-LM arguments that run ``session``'s model and plan (shell words).

    Raises
    ------
    MegatronArgsError
        The session has something Megatron-LM's arguments cannot express (GPipe,
        ZB-H1, a ZeRO-2 or ZeRO-3 plan Megatron-FSDP runs otherwise than modelled, a model
        family other than ``dense``), naming the field.
    """
    m, pl = session.model, session.plan
    return (_shape_words(m) + _layer_words(m) + _expert_words(m, pl) + _parallel_words(pl)
            + _sharding_words(pl) + _recompute_and_precision_words(session))
