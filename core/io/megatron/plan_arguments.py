"""Mapping a launch's parallelism, schedule, recomputation and precision arguments to
``plan.*`` fields (Megatron-LM's ``arguments.py`` and Megatron-Core's rules).

What belongs here: one function per concern of the plan (tensor, pipeline and context
parallelism; experts and their token dispatcher; the world size and the batch; the pipeline
split and schedule; sharding, overlaps and fusions; recomputation; precision and FP8), each
reading its arguments through a :class:`~core.io.megatron.mapping.Mapper`, and
:func:`map_plan`, which calls them in Megatron-LM's order. Megatron-LM's defaults:
t = p = cp = 1, d = world / (t * p * cp), ``--global-batch-size`` defaults to
``--micro-batch-size`` times d, ``--recompute-activations`` is selective recomputation.
"""

from __future__ import annotations

from core.schedules import megatron_schedule
from core.io.megatron.arguments import (BY_OPTION, MEGATRON_FSDP_STRATEGIES,
                                        MEGATRON_PLAN_DEFAULTS,
                                        MegatronArgsError, field_exists)
from core.io.megatron.launch import Launch
from core.io.megatron.mapping import Mapper, int_argument, one_value
from core.plan.layout import LAYOUT_RULE, expand_pipeline_layout
from core.util.text import short_repr

__all__ = ["map_plan"]


def _tensor_and_pipeline(mp: Mapper) -> tuple[int, int]:
    """``(t, p)``, and the experts' tensor-parallel size when given."""
    args, src = mp.args, mp.source
    t = (int_argument(args, "--tensor-model-parallel-size", src)
         or MEGATRON_PLAN_DEFAULTS["tensor_parallel"])
    p = (int_argument(args, "--pipeline-model-parallel-size", src)
         or MEGATRON_PLAN_DEFAULTS["pipeline_parallel"])
    mp.take("--tensor-model-parallel-size")
    mp.take("--pipeline-model-parallel-size")
    mp.set("--tensor-model-parallel-size", "plan.tensor_parallel", t)
    mp.set("--pipeline-model-parallel-size", "plan.pipeline_parallel", p)
    if mp.take("--expert-tensor-parallel-size"):
        mp.set("--expert-tensor-parallel-size", "plan.expert_tensor_parallel",
               int_argument(args, "--expert-tensor-parallel-size", src))
    return t, p


def _context_parallel(mp: Mapper) -> int:
    """``cp``, with its exchange (``--cp-comm-type``) and the a2a+p2p group sizes."""
    args, src = mp.args, mp.source
    cp = int_argument(args, "--context-parallel-size", src) or 1
    if mp.take("--context-parallel-size") and (cp > 1 or field_exists("plan.context_parallel")):
        mp.set("--context-parallel-size", "plan.context_parallel", cp)
    if mp.take("--cp-comm-type"):  # one type, or one per layer (Megatron-Core's list form)
        kinds = {k.strip("[](),'\"") for k in " ".join(args["--cp-comm-type"]).replace(",", " ").split()}
        kinds.discard("")
        # Megatron-LM's help spells Transformer Engine's all_gather "allgather": the same exchange
        # (TE's AttnFuncWithCPAndKVAllGather), not PyTorch's overlapped one (plan "allgather")
        kinds = {"all_gather" if k == "allgather" else k for k in kinds}
        unknown = sorted(kinds - {"p2p", "a2a", "all_gather", "a2a+p2p"})
        if not kinds or unknown:
            raise MegatronArgsError(f"{src}: --cp-comm-type {short_repr(' '.join(args['--cp-comm-type']))}: "
                                    "expected p2p, a2a, all_gather or a2a+p2p (one, or one per "
                                    "layer)")
        if cp > 1 and len(kinds) > 1:
            mp.refuse("--cp-comm-type", f"{' '.join(sorted(kinds))}: one exchange per layer "
                      "that differ is not modelled (one plan.cp_comm_type for every layer)")
        elif cp > 1:
            mp.set("--cp-comm-type", "plan.cp_comm_type", next(iter(kinds)))
        elif kinds != {"p2p"}:  # Megatron-Core ignores it without context parallelism
            mp.ignored.append(("--cp-comm-type", "without --context-parallel-size > 1 it has "
                                 "no effect"))
    if mp.take("--hierarchical-context-parallel-sizes"):
        sizes = [x for x in " ".join(args["--hierarchical-context-parallel-sizes"]).replace(
            ",", " ").strip("[]() ").split() if x.strip("[]()")]
        try:
            sizes = [int(x.strip("[]()")) for x in sizes]
        except ValueError:
            sizes = []
        if len(sizes) != 2 or min(sizes) < 1 or sizes[0] * sizes[1] != cp:
            raise MegatronArgsError(f"{src}: --hierarchical-context-parallel-sizes "
                                    f"{short_repr(' '.join(args['--hierarchical-context-parallel-sizes']))}: "
                                    f"expected two sizes A P with A * P = "
                                    f"--context-parallel-size {cp}")
        if cp > 1 and mp.values["plan"].get("cp_comm_type") == "a2a+p2p" and 1 in sizes:
            # one group of cp ranks: Transformer Engine 2.20's attn_forward_func_with_cp runs
            # a2a when the p2p group has one rank, p2p when the all-to-all group has one
            kind = "a2a" if sizes[1] == 1 else "p2p"
            mp.set("--hierarchical-context-parallel-sizes", "plan.cp_comm_type", kind)
            mp.notes.append(("--hierarchical-context-parallel-sizes", (
                f"{sizes[0]} {sizes[1]} with --cp-comm-type a2a+p2p read as cp_comm_type {kind} "
                "(Transformer Engine runs a2a+p2p with a group of one rank as "
                f"{kind})")))
        elif cp > 1 and mp.values["plan"].get("cp_comm_type") == "a2a+p2p":
            mp.set("--hierarchical-context-parallel-sizes", "plan.cp_a2a_size", sizes[0])
        else:  # the sizes only matter to a2a+p2p; Megatron-Core builds no groups for the others
            mp.ignored.append(("--hierarchical-context-parallel-sizes", "without "
                                 "--cp-comm-type a2a+p2p (and --context-parallel-size > 1) it has "
                                 "no effect"))
    return cp


def _expert_parallel(mp: Mapper) -> None:
    """The expert-parallel size and the MoE token dispatcher (Megatron-Core 0.19
    TransformerConfig)."""
    args, src = mp.args, mp.source
    ep = int_argument(args, "--expert-model-parallel-size", src) or 1
    if mp.take("--expert-model-parallel-size") and (ep > 1 or field_exists("plan.expert_parallel")):
        mp.set("--expert-model-parallel-size", "plan.expert_parallel", ep)
    # the token dispatcher (Megatron-Core 0.19 TransformerConfig: --moe-enable-deepep, the
    # deprecated spelling of --moe-flex-dispatcher-backend deepep, needs the flex dispatcher)
    dispatcher = (one_value(args, "--moe-token-dispatcher-type", src)
                  if mp.take("--moe-token-dispatcher-type") else None)
    if mp.switch("--moe-enable-deepep") and dispatcher != "flex":
        raise MegatronArgsError(f"{src}: --moe-enable-deepep needs --moe-token-dispatcher-type "
                                "flex (Megatron-Core: \"DeepEP backend is only supported with "
                                "flex token dispatcher\")")
    backend = (one_value(args, "--moe-flex-dispatcher-backend", src)
               if mp.take("--moe-flex-dispatcher-backend") else None)
    if backend is not None and dispatcher == "flex" and backend not in ("deepep", "hybridep"):
        raise MegatronArgsError(f"{src}: --moe-flex-dispatcher-backend {backend}: not modelled "
                                "(deepep and hybridep are: one copy of a token per other node, "
                                "forwarded over NVLink)")
    if "--num-experts" in args:
        if dispatcher is None and ep > 1:
            raise MegatronArgsError(
                f"{src}: --moe-token-dispatcher-type is not given: Megatron-Core's default, the "
                "allgather dispatcher, is not modelled; give --moe-token-dispatcher-type alltoall "
                "or flex (DeepEP / HybridEP)")
        if dispatcher is not None:
            mp.set("--moe-token-dispatcher-type", "plan.moe_token_dispatcher_type", dispatcher)


def _world_and_batch(mp: Mapper, launch: Launch, sizes: tuple[int, int, int],
                     num_gpus: int | None, gpus_per_node: int | None, nodes: int | None
                     ) -> tuple[int, int, int | None]:
    """``(d, B, nproc)``: the data-parallel size from the world size (the caller's counts, else
    the launcher's) over ``sizes`` = (t, p, cp), the global batch, and the GPUs per node.

    Raises
    ------
    MegatronArgsError
        The world size is unknown (an unset launcher variable named) or not divisible by
        t*p*cp.
    """
    args, src = mp.args, mp.source
    t, p, cp = sizes
    b = int_argument(args, "--micro-batch-size", src)
    mp.take("--micro-batch-size")
    mp.set("--micro-batch-size", "plan.micro_batch_size", b)
    world = num_gpus
    nproc = gpus_per_node or launch.nproc_per_node
    if world is None and nodes is not None:
        # --nodes stands for the launcher's node count (torchrun's --nnodes, srun -N): hosts,
        # each running the launcher's processes; --gpus-per-node (the NVLink domain, 72 for a
        # GB200 rack of 4-GPU hosts) counts them only where the launch does not
        per_host = launch.nproc_per_node or gpus_per_node
        if per_host is None and launch.unset_counts:
            raise MegatronArgsError(launch.unset_counts[0])
        if per_host is None:
            raise MegatronArgsError(f"{src}: --nodes {nodes}: the GPUs per node are unknown (the "
                                    "launch has no --nproc-per-node); give --gpus-per-node G")
        world = nodes * per_host
    if world is None and launch.nnodes is not None and launch.nproc_per_node is not None:
        world = launch.nnodes * launch.nproc_per_node
    if world is None and launch.host_nproc is not None:  # torchrun --nproc-per-node gpu
        if gpus_per_node is None:
            raise MegatronArgsError(launch.host_nproc)
        world = (launch.nnodes or 1) * gpus_per_node
    if world is None and launch.world_size is not None:  # a printed dump's world_size
        world = launch.world_size
    if world is None and launch.unset_counts:
        raise MegatronArgsError(launch.unset_counts[0])
    if world is None:
        raise MegatronArgsError(f"{src}: the world size is unknown: the launch has no torchrun "
                                "--nnodes/--nproc-per-node or srun -N/--ntasks-per-node; give "
                                "--nodes N --gpus-per-node G (or --num-gpus N)")
    if world % (t * p * cp):
        raise MegatronArgsError(f"{src}: world size {world} is not divisible by t*p*cp = "
                                f"{t}*{p}*{cp} (Megatron-LM requires it)")
    d = world // (t * p * cp)
    mp.set("world size", "plan.data_parallel", d)
    B = int_argument(args, "--global-batch-size", src) if mp.take("--global-batch-size") else b * d
    mp.set("--global-batch-size", "plan.global_batch_size", B)
    return d, B, nproc


def _pipeline_schedule(mp: Mapper, L: int, p: int) -> None:
    """The embedding and loss slots of the split, virtual stages (interleaved 1F1B) or a
    custom pipeline layout, and the schedule."""
    args, src = mp.args, mp.source
    # the embedding and the loss as layer slots of the split (Megatron-Core)
    slots = L
    for flag, target in (("--account-for-embedding-in-pipeline-split",
                          "plan.account_for_embedding_in_pipeline_split"),
                         ("--account-for-loss-in-pipeline-split",
                          "plan.account_for_loss_in_pipeline_split")):
        if mp.switch(flag):
            mp.set(flag, target, True)
            slots += 1
        elif field_exists(target):
            mp.set(flag, target, False)
    # schedule
    v = None
    if mp.take("--num-layers-per-virtual-pipeline-stage"):
        per = int_argument(args, "--num-layers-per-virtual-pipeline-stage", src)
        if slots % (p * per):  # Megatron-LM counts the slots of the embedding and the loss
            raise MegatronArgsError(f"{src}: --num-layers-per-virtual-pipeline-stage {per}: "
                                    f"{L} layers{f' + {slots - L} slots' if slots > L else ''} do "
                                    f"not split into {p} stages of chunks of {per}")
        v = slots // (p * per)
    if mp.take("--num-virtual-stages-per-pipeline-rank"):
        v = int_argument(args, "--num-virtual-stages-per-pipeline-rank", src)
    flag = ("--num-layers-per-virtual-pipeline-stage"
            if "--num-layers-per-virtual-pipeline-stage" in args else
            "--num-virtual-stages-per-pipeline-rank")
    layout_flag = "--pipeline-model-parallel-layout"
    if mp.take(layout_flag):  # Megatron-Core: the layout's virtual stages over p give v
        layout = (one_value(args, layout_flag, src) or "").strip()
        try:
            n = len(expand_pipeline_layout(layout))
        except ValueError as exc:
            raise MegatronArgsError(f"{src}: {layout_flag} {short_repr(layout)} {exc} ({LAYOUT_RULE})"
                                    ) from None
        if n % p:
            raise MegatronArgsError(f"{src}: {layout_flag} {short_repr(layout)} has {n} virtual stages, "
                                    f"not a multiple of --pipeline-model-parallel-size {p}")
        if v is not None and v != n // p:
            raise MegatronArgsError(f"{src}: {layout_flag} {short_repr(layout)} gives {n // p} virtual "
                                    f"stages per rank ({n} over p={p}); {flag} gives {v}")
        for other in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                      "--account-for-embedding-in-pipeline-split",
                      "--account-for-loss-in-pipeline-split"):
            if other in args:
                raise MegatronArgsError(f"{src}: {layout_flag} cannot be combined with {other} "
                                        "(Megatron-Core refuses them together: the layout places "
                                        "every layer)")
        mp.set(layout_flag, "plan.pipeline_model_parallel_layout", layout, check_value=False)
        v, flag = n // p, layout_flag
    elif field_exists("plan.pipeline_model_parallel_layout"):
        mp.set(layout_flag, "plan.pipeline_model_parallel_layout", None, check_value=False)
    if v is not None and v > 1:
        mp.set(flag, "plan.schedule", megatron_schedule(v))  # interleaved 1F1B
        mp.set(flag, "plan.virtual_pipeline_stages", v)
    else:
        mp.set("schedule", "plan.schedule", megatron_schedule(None))  # Megatron's 1F1B


def _sharding(mp: Mapper, d: int, t: int) -> None:
    """Sequence parallelism (off with ``t`` 1, as Megatron-LM turns it off), the distributed
    optimizer or FSDP (zero_stage), hybrid sharding over ``d``, and FP8 parameter gathers."""
    args, src = mp.args, mp.source
    sp = mp.switch("--sequence-parallel")
    if sp and t == 1:
        # validate_args: "Disabling sequence parallelism because tensor model parallelism is
        # disabled" (args.sequence_parallel = False when tensor_model_parallel_size == 1)
        mp.set("--sequence-parallel", "plan.sequence_parallel", False)
        mp.notes.append(("--sequence-parallel", "off: Megatron-LM turns sequence parallelism "
                         "off with --tensor-model-parallel-size 1"))
    elif sp:
        mp.set("--sequence-parallel", "plan.sequence_parallel", True)
    elif field_exists("plan.sequence_parallel"):
        mp.set("--sequence-parallel", "plan.sequence_parallel", False)
    fsdp, dist = mp.switch("--use-torch-fsdp2"), mp.switch("--use-distributed-optimizer")
    if fsdp and dist:
        raise MegatronArgsError(f"{src}: --use-torch-fsdp2 and --use-distributed-optimizer "
                                "exclude each other")
    # FSDP2 keeping the gathered parameters from the forward to the backward
    # (fully_shard(reshard_after_forward=False)): every layer's whole weights held between
    # them, more than ZeRO-3's sharded ones; the torchtitan import refuses the like
    keep = "--torch-fsdp2-no-reshard-after-forward"
    if mp.switch(keep) and fsdp:
        mp.refuse(keep, "FSDP2 keeping each layer's gathered parameters from its forward to its "
                  "backward (reshard_after_forward False) is not modelled: the memory verdict "
                  "would count ZeRO-3's sharded parameters")
    elif keep in args:
        mp.ignored.append((keep, "no effect without --use-torch-fsdp2"))
    megatron_fsdp = _megatron_fsdp(mp, fsdp, dist)  # sets plan.zero_stage when it is used
    if not megatron_fsdp and (fsdp or dist):
        mp.set("--use-torch-fsdp2" if fsdp else "--use-distributed-optimizer", "plan.zero_stage",
               3 if fsdp else 1)
    elif not megatron_fsdp and field_exists("plan.zero_stage"):
        mp.set("zero stage", "plan.zero_stage", 0)
    flag = "--num-distributed-optimizer-instances"
    if mp.take(flag):  # Megatron-Core: each instance shards over d*cp/n ranks, i.e. d/n of d
        n = int_argument(args, flag, src)
        if n < 1 or d % n:
            raise MegatronArgsError(f"{src}: {flag} {n} does not divide the data-parallel size "
                                    f"{d} (world / (t*p*cp))")
        mp.set(flag, "plan.data_parallel_shard_size", d // n)
    elif field_exists("plan.data_parallel_shard_size"):
        mp.set(flag, "plan.data_parallel_shard_size", None, check_value=False)
    if mp.switch("--fp8-param-gather"):
        mp.set("--fp8-param-gather", "plan.fp8_param_gather", True)
    elif field_exists("plan.fp8_param_gather"):
        mp.set("--fp8-param-gather", "plan.fp8_param_gather", False)


#: Megatron-FSDP's own arguments that change the memory or the communication it does:
#: option -> (its default, arguments.json; what the simulator models). Another value is
#: refused under --use-megatron-fsdp.
_MEGATRON_FSDP_DEFAULTS = {
    "--megatron-fsdp-main-params-dtype": ("fp32", "fp32 main weights"),
    "--megatron-fsdp-main-grads-dtype": ("auto", "gradients in plan.grad_reduce_dtype"),
    "--megatron-fsdp-grad-comm-dtype": ("auto", "gradients reduced in their own dtype"),
    "--outer-dp-sharding-strategy": ("no_shard", "no outer data-parallel group"),
    "--megatron-fsdp-version": ("1", "Megatron-FSDP as Megatron-Core 0.16.1 has it")}


def _megatron_fsdp(mp: Mapper, fsdp2: bool, dist: bool) -> bool:
    """Megatron-FSDP (``--use-megatron-fsdp``): ``plan.zero_stage`` from
    ``--data-parallel-sharding-strategy`` (:data:`MEGATRON_FSDP_STRATEGIES`; Megatron-LM's
    default optim_grads_params is ZeRO-3); whether the launch uses it. What the simulator does
    not model is refused by name: Megatron-FSDP without the distributed optimizer (Megatron-
    Core then builds ``Float16OptimizerWithFloat16Params`` over FSDP's parameters,
    ``megatron/core/optimizer/__init__.py``, beside FSDP's own main weights), its hybrid
    sharding (an outer data-parallel group, ``--num-distributed-optimizer-instances``), FP8
    parameter gathers, and its main-weight, gradient and communication dtypes other than the
    defaults. The overlaps it forces are set by :func:`_overlap_and_fusion`."""
    args, src = mp.args, mp.source
    flag = "--data-parallel-sharding-strategy"
    strategy = one_value(args, flag, src) if mp.take(flag) else None
    if not mp.switch("--use-megatron-fsdp"):
        if strategy is not None:
            mp.notes.append((flag, "without --use-megatron-fsdp it has no effect"))
        return False
    if fsdp2:
        raise MegatronArgsError(f"{src}: --use-megatron-fsdp and --use-torch-fsdp2 exclude "
                                "each other (two FSDP implementations)")
    strategy = strategy or "optim_grads_params"
    zero = MEGATRON_FSDP_STRATEGIES[strategy]
    if zero and not dist:
        mp.refuse("--use-megatron-fsdp", f"{flag} {strategy} without "
                  "--use-distributed-optimizer is not modelled (Megatron-Core then keeps the "
                  "optimizer's own fp32 copies beside Megatron-FSDP's main weights, "
                  "Float16OptimizerWithFloat16Params); add --use-distributed-optimizer")
    if zero and (int_argument(args, "--num-distributed-optimizer-instances", src) or 1) > 1:
        mp.refuse("--num-distributed-optimizer-instances", "Megatron-FSDP's hybrid sharding "
                  "(an outer data-parallel group that all-reduces the shards) is not modelled")
    if zero and mp.switch("--fp8-param-gather"):
        mp.refuse("--fp8-param-gather", "FP8 parameter gathers under Megatron-FSDP are not "
                  "modelled")
    for option, (default, modelled) in _MEGATRON_FSDP_DEFAULTS.items():
        value = one_value(args, option, src) if mp.take(option) else None
        if value is not None and value != default:
            mp.refuse(option, f"{value} under Megatron-FSDP is not modelled (the simulator "
                      f"models {default}: {modelled})")
    if mp.switch("--enable-full-sharding-in-hsdp"):
        mp.refuse("--enable-full-sharding-in-hsdp", "Megatron-FSDP's hybrid sharding is not "
                  "modelled")
    mp.set("--use-megatron-fsdp", "plan.zero_stage", zero)
    return True


#: The overlaps ``MegatronFSDP.__init__`` turns on whatever the launch says (Megatron-Core
#: 0.16.1, ``megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py``, lines
#: 274-283): optim_grads_params (ZeRO-3) gathers the parameters and reduce-scatters the
#: gradients under the compute, optim_grads (ZeRO-2) the reduce-scatters.
MEGATRON_FSDP_OVERLAPS = {3: ("--overlap-grad-reduce", "--overlap-param-gather"),
                          2: ("--overlap-grad-reduce",)}


def _megatron_fsdp_overlaps(mp: Mapper) -> None:
    """Under Megatron-FSDP, the overlaps it forces on (:data:`MEGATRON_FSDP_OVERLAPS`), and no
    parameter gather to overlap with ``no_shard`` (its ``--overlap-param-gather`` gathers
    nothing)."""
    if "--use-megatron-fsdp" not in mp.args:
        return
    zero = mp.values["plan"].get("zero_stage")
    for flag in MEGATRON_FSDP_OVERLAPS.get(zero, ()):
        mp.set(flag, "plan." + flag[2:].replace("-", "_"), True)
        if flag not in mp.args:
            mp.notes.append((flag, f"on: Megatron-FSDP overlaps it at zero_stage {zero} "
                             "whatever the launch says"))
    if zero == 0 and "--overlap-param-gather" in mp.args:
        mp.set("--overlap-param-gather", "plan.overlap_param_gather", False)
        mp.notes.append(("--overlap-param-gather", "off: Megatron-FSDP's no_shard gathers no "
                         "parameters"))


def _overlap_and_fusion(mp: Mapper) -> None:
    """Communication overlaps, the fused cross-entropy, and the gradient-reduction dtype."""
    args, src = mp.args, mp.source
    for flag, target in (("--overlap-grad-reduce", "plan.overlap_grad_reduce"),
                         ("--overlap-param-gather", "plan.overlap_param_gather"),
                         ("--tp-comm-overlap", "plan.tp_comm_overlap"),
                         ("--overlap-moe-expert-parallel-comm",
                          "plan.overlap_moe_expert_parallel_comm"),
                         ("--delay-wgrad-compute", "plan.delay_wgrad_compute"),
                         ("--cross-entropy-loss-fusion", "plan.cross_entropy_loss_fusion")):
        if mp.switch(flag):
            mp.set(flag, target, True)
        elif field_exists(target):
            mp.set(flag, target, False)
    _megatron_fsdp_overlaps(mp)
    no_fusion = mp.switch("--no-gradient-accumulation-fusion")
    if "--use-torch-fsdp2" in args:
        pass  # what FSDP2 requires (core.io.megatron.rules); the field has no effect at zero 3
    elif no_fusion:
        mp.set("--no-gradient-accumulation-fusion", "plan.gradient_accumulation_fusion", False)
    elif field_exists("plan.gradient_accumulation_fusion"):
        mp.set("--no-gradient-accumulation-fusion", "plan.gradient_accumulation_fusion", True)
    # Megatron-LM overlaps only the interleaved schedule's transfers (validate_args turns
    # overlap_p2p_comm off without virtual stages, so a plain run's dump says False): the switch
    # of another schedule's launch says nothing of how its interleaved plans would run
    no_overlap = mp.switch("--no-overlap-p2p-communication")
    if no_overlap and mp.values["plan"].get("schedule") == "interleaved":
        mp.set("--no-overlap-p2p-communication", "plan.overlap_p2p_comm", False)
    elif field_exists("plan.overlap_p2p_comm"):
        mp.set("--no-overlap-p2p-communication", "plan.overlap_p2p_comm", True)
        if no_overlap:
            mp.notes.append(("--no-overlap-p2p-communication",
                             "no virtual stages: Megatron-LM overlaps no other schedule's "
                             "transfers; plan.overlap_p2p_comm keeps its default (true) for the "
                             "interleaved plans a sweep tries"))
    if mp.take("--cross-entropy-fusion-impl"):
        impl = one_value(args, "--cross-entropy-fusion-impl", src)  # among the parser's choices
        mp.set("--cross-entropy-fusion-impl", "plan.cross_entropy_fusion_impl", impl)
    if mp.switch("--overlap-moe-expert-parallel-comm") and mp.switch("--moe-shared-expert-overlap"):
        raise MegatronArgsError(f"{src}: --overlap-moe-expert-parallel-comm with "
                                "--moe-shared-expert-overlap: Megatron-Core refuses them together "
                                "(disable moe_shared_expert_overlap when enabling "
                                "overlap_moe_expert_parallel_comm)")
    bf16_grads, fp32_grads = mp.switch("--grad-reduce-in-bf16"), mp.switch("--accumulate-allreduce-grads-in-fp32")
    if bf16_grads and fp32_grads:
        raise MegatronArgsError(f"{src}: --grad-reduce-in-bf16 and "
                                "--accumulate-allreduce-grads-in-fp32 exclude each other")
    if bf16_grads or fp32_grads:
        mp.set("--grad-reduce-in-bf16" if bf16_grads else "--accumulate-allreduce-grads-in-fp32",
               "plan.grad_reduce_dtype", "bf16" if bf16_grads else "fp32")
    elif field_exists("plan.grad_reduce_dtype"):
        mp.set("grad reduce dtype", "plan.grad_reduce_dtype", None, check_value=False)


def _recompute(mp: Mapper) -> None:
    """Activation recomputation (granularity, method, layers, modules) and the uneven first
    and last pipeline stages."""
    args, src = mp.args, mp.source
    # recomputation
    gran = one_value(args, "--recompute-granularity", src) if mp.take("--recompute-granularity") else None
    if mp.switch("--recompute-activations"):
        # validate_args: "if args.recompute_activations: args.recompute_granularity =
        # 'selective'", over any --recompute-granularity
        gran = "selective"
    method = one_value(args, "--recompute-method", src) if mp.take("--recompute-method") else None
    nrec = int_argument(args, "--recompute-num-layers", src) if mp.take("--recompute-num-layers") else None
    if mp.switch("--checkpoint-activations"):  # the old name: full, uniform
        gran, method = gran or "full", method or "uniform"
        if mp.take("--checkpoint-num-layers"):
            nrec = int_argument(args, "--checkpoint-num-layers", src)
    if mp.take("--activations-checkpoint-method"):
        # Megatron-LM of late 2021 to mid 2022 (examples/pretrain_gpt3_175B.sh): a method turns
        # full recomputation on, --activations-checkpoint-num-layers (default 1) layers per
        # checkpoint (uniform) or per stage (block); renamed --recompute-method and
        # --recompute-num-layers with --recompute-granularity full
        old = one_value(args, "--activations-checkpoint-method", src)
        if old not in ("uniform", "block"):
            raise MegatronArgsError(f"{src}: --activations-checkpoint-method {short_repr(old)}: uniform or "
                                    "block")
        gran, method = gran or "full", method or old
        if nrec is None:
            nrec = (int_argument(args, "--activations-checkpoint-num-layers", src)
                    if mp.take("--activations-checkpoint-num-layers") else 1)
        mp.notes.append(("--activations-checkpoint-method", f"Megatron-LM's earlier name: "
                         f"--recompute-granularity full --recompute-method {method} "
                         f"--recompute-num-layers {nrec}"))
    elif mp.take("--activations-checkpoint-num-layers"):
        mp.ignored.append(("--activations-checkpoint-num-layers", "no effect without "
                           "--activations-checkpoint-method"))
    # Megatron-Core's TransformerConfig.__post_init__: the deprecated --moe-layer-recompute is
    # selective recomputation with "moe" added to the modules (default ["core_attn"]); beside
    # full granularity it raises ("Do not set --moe-layer-recompute with full recompute
    # granularity")
    moe_layer = mp.switch("--moe-layer-recompute")
    if moe_layer and gran == "full":
        raise MegatronArgsError(f"{src}: --moe-layer-recompute with --recompute-granularity full: "
                                "Megatron-Core refuses them together (the switch is selective "
                                "recomputation of the MoE layer)")
    if moe_layer:
        gran = "selective"
    rflag = ("--recompute-activations" if "--recompute-activations" in args else
             "--recompute-granularity" if "--recompute-granularity" in args else
             "--activations-checkpoint-method" if "--activations-checkpoint-method" in args else
             "--checkpoint-activations")
    mp.set(rflag, "plan.recompute", gran or MEGATRON_PLAN_DEFAULTS["recompute"])
    if gran == "full" and method == "block" and nrec is not None:
        # a count at or above the largest model chunk recomputes every layer: set to None
        # once the plan is whole (below), as Megatron caps it per chunk
        mp.set("--recompute-num-layers", "plan.recompute_num_layers", nrec)
    elif gran == "full" and method == "uniform" and nrec not in (None, 1):
        mp.refuse("--recompute-method uniform", f"not modelled yet (one checkpoint per {nrec} "
                                                "layers; vtrain keeps every layer's input)")
    if moe_layer:
        mods = (" ".join(args["--recompute-modules"]).replace(",", " ").split()
                if mp.take("--recompute-modules") else []) or ["core_attn"]
        mp.set("--moe-layer-recompute", "plan.recompute_modules",
               ",".join(mods + ["moe"] * ("moe" not in mods)), check_value=False)
        mp.notes.append(("--moe-layer-recompute", "Megatron-Core's deprecated switch: "
                         "--recompute-granularity selective with moe added to "
                         "--recompute-modules (TransformerConfig)"))
    elif mp.take("--recompute-modules"):  # nargs='*': a space-separated list (commas accepted too)
        mods = " ".join(args["--recompute-modules"]).replace(",", " ").split()
        if gran == "selective" and mods:
            mp.set("--recompute-modules", "plan.recompute_modules", ",".join(mods),
                   check_value=False)
        elif mods and mods != ["core_attn"]:
            mp.refuse("--recompute-modules", "needs --recompute-granularity selective (Megatron-Core "
                      "recomputes the modules only with selective granularity)")
    # full without a method, uniform by 1, or a block of the whole stage: every layer recomputed
    if field_exists("plan.recompute_num_layers") and "recompute_num_layers" not in mp.values["plan"]:
        mp.values["plan"]["recompute_num_layers"] = None
    # uneven pipelines (Megatron-Core's --decoder-first/last-pipeline-num-layers)
    for flag, target in (("--decoder-first-pipeline-num-layers", "plan.first_stage_layers"),
                         ("--decoder-last-pipeline-num-layers", "plan.last_stage_layers")):
        if mp.take(flag):
            mp.set(flag, target, int_argument(args, flag, src))


def _cuda_graphs(mp: Mapper) -> None:
    """CUDA graphs: ``--cuda-graph-impl`` (Megatron-LM's choices none, local, transformer_engine,
    full_iteration), the deprecated ``--enable-cuda-graph`` (``local``) and
    ``--external-cuda-graph`` (``transformer_engine``; Megatron-LM asserts the impl is none
    when either sets it), and the modules of ``--cuda-graph-modules`` or the deprecated
    ``--cuda-graph-scope`` (nargs '+'; ``full`` is the whole layer, Megatron's old spelling,
    and ``full_iteration`` with ``local`` is the ``full_iteration`` implementation, as
    Megatron-Core migrates it). The modules' rules are :func:`core.plan.rules.cuda_graph_errors`'s."""
    args, src = mp.args, mp.source
    flag = "--cuda-graph-impl"
    impl = one_value(args, flag, src) if mp.take(flag) else "none"  # among the parser's choices
    for old, meant in (("--enable-cuda-graph", "local"), ("--external-cuda-graph", "transformer_engine")):
        if mp.switch(old):
            if impl not in ("none", meant):
                raise MegatronArgsError(f"{src}: {old} (deprecated: --cuda-graph-impl {meant}) with "
                                        f"--cuda-graph-impl {impl}: Megatron-LM needs "
                                        "--cuda-graph-impl none beside it")
            flag, impl = old, meant
    mods: list[str] = []
    for mflag in ("--cuda-graph-modules", "--cuda-graph-scope"):
        if mp.take(mflag):
            mods += [m for m in " ".join(args[mflag]).replace(",", " ").split() if m not in mods]
    mods = [m for m in mods if m != "full"]  # Megatron's old "full": the whole layer
    if "full_iteration" in mods and impl in ("local", "full_iteration"):
        mods.remove("full_iteration")
        if impl == "local":
            mp.notes.append(("--cuda-graph-impl local with the full_iteration scope",
                             "read as --cuda-graph-impl full_iteration (Megatron-Core migrates it)"))
        impl = "full_iteration"
    if impl != "none" or field_exists("plan.cuda_graph_impl"):
        mp.set(flag, "plan.cuda_graph_impl", impl)
    if mods:
        mp.set("--cuda-graph-modules" if "--cuda-graph-modules" in args else "--cuda-graph-scope",
               "plan.cuda_graph_modules", ",".join(mods), check_value=False)


#: Why ``--fp8-format`` with ``--transformer-impl local`` is refused: Megatron-Core runs FP8
#: GEMMs only in Transformer Engine's layers. megatron-core 0.16.1: ``models/backends.py``
#: ``LocalSpecProvider`` builds the local spec's linear layers from
#: ``tensor_parallel.ColumnParallelLinear`` / ``RowParallelLinear``
#: (``tensor_parallel/layers.py``, torch matmuls with no FP8 path), and FP8 is turned on by
#: ``fp8_utils.get_fp8_context``, ``transformer_engine.pytorch.fp8_autocast``, which acts on
#: Transformer Engine's modules only. Such a launch runs its GEMMs in BF16, not the FP8 the
#: session's plan.precision fp8 would time.
LOCAL_FP8 = ("with --transformer-impl local: Megatron-Core runs FP8 GEMMs only in Transformer "
             "Engine's layers (--fp8-format is Transformer Engine's recipe, turned on by "
             "fp8_utils.get_fp8_context's transformer_engine.pytorch.fp8_autocast); the local "
             "spec's linear layers (models/backends.py LocalSpecProvider: tensor_parallel's "
             "ColumnParallelLinear/RowParallelLinear) have no FP8 path, so timing them in FP8 "
             "(plan.precision fp8) would be another run (megatron-core 0.16.1); use "
             "--transformer-impl transformer_engine for FP8, or drop --fp8-format for BF16")


def _precision(mp: Mapper) -> None:
    """bf16, fp16 or fp32, and FP8 (format and recipe) on bf16 weights; and the logits' dtype
    (:func:`_logit_dtype`)."""
    args, src = mp.args, mp.source
    # precision
    fp8 = one_value(args, "--fp8-format", src) if mp.take("--fp8-format") else None
    bf16, fp16 = mp.switch("--bf16"), mp.switch("--fp16")
    if bf16 and fp16:
        raise MegatronArgsError(f"{src}: --bf16 and --fp16 exclude each other")
    recipe = one_value(args, "--fp8-recipe", src) if mp.take("--fp8-recipe") else None
    if fp8 is not None:
        # E4M3 everywhere or E5M2 gradients (hybrid): the same FP8 tensor-core rate, one model
        # (the parser's choices, hybrid and e4m3, checked before: core.io.megatron.arguments)
        local = "--transformer-impl" in args and \
            one_value(args, "--transformer-impl", src) == "local"
        if local:
            others = [f for f in args if f.startswith("--fp8") and f != "--fp8-format"]
            mp.refuse(f"--fp8-format {fp8}", LOCAL_FP8 + (
                f" (the launch's other FP8 options: {', '.join(others)})" if others else ""))
        elif fp16:
            mp.refuse("--fp8-format", "with --fp16 is not modelled yet (vtrain models FP8 training "
                                      "on bf16 weights, --bf16)")
        elif not bf16:
            mp.refuse("--fp8-format", "without --bf16 (fp32 weights) is not modelled yet (vtrain "
                                      "models FP8 training on bf16 weights, --bf16)")
        else:
            mp.set("--fp8-format", "plan.precision", "fp8")
            # Megatron-Core's TransformerConfig.fp8_recipe defaults to delayed; vtrain's empty
            # fp8_recipe is tensorwise (per-tensor current scaling)
            recipe = recipe or "delayed"
            mp.set("--fp8-recipe", "plan.fp8_recipe", None if recipe == "tensorwise" else recipe)
    else:
        mp.set("--bf16" if bf16 else "--fp16" if fp16 else "precision", "plan.precision",
               "bf16" if bf16 else "fp16" if fp16 else MEGATRON_PLAN_DEFAULTS["precision"])
    _logit_dtype(mp, "bf16" if bf16 else "fp16" if fp16 else "fp32")


def _logit_dtype(mp: Mapper, compute: str) -> None:
    """``--output-logit-dtype`` (``logit_dtype``; Megatron-LM's default None: the output
    layer's own dtype). The memory model keeps the logits in the compute dtype ``compute``
    (:func:`core.plan.parallel.tensor_dtype`: bf16 under ``--bf16`` and FP8, fp16 under
    ``--fp16``, fp32 without either; :func:`core.model.memory`'s logits term): the same dtype
    changes nothing, listed as having no effect; another is a logits memory (and a loss
    kernel) the model does not have, refused by name (resources/megatron_arguments.json's
    note), never counted as the compute dtype's."""
    flag = "--output-logit-dtype"
    if not mp.take(flag):
        return
    dtype = one_value(mp.args, flag, mp.source)  # bf16 or fp32: the parser's choices, checked
    if dtype == compute:
        mp.ignored.append((flag, f"{dtype}: no effect, the logits are {compute} already (the "
                           "training precision's compute dtype)"))
    else:
        mp.refuse(f"{flag} {dtype}", f"not modelled: the logits modelled are {compute} "
                  f"({BY_OPTION[flag].note})")


def map_plan(mp: Mapper, launch: Launch, L: int, *, num_gpus: int | None = None,
             gpus_per_node: int | None = None, nodes: int | None = None
             ) -> tuple[int, int | None]:
    """Map the plan's arguments into ``mp`` (Megatron-LM's order: an error names the first
    argument it meets) for a model of ``L`` layers; returns ``(B, nproc)``: the global batch
    and the GPUs per node (None when neither the caller nor the launcher gives them).

    Raises
    ------
    MegatronArgsError
        A value that is not valid, arguments that exclude each other, or an unknown world
        size; refusals are collected in ``mp.refused``.
    """
    t, p = _tensor_and_pipeline(mp)
    cp = _context_parallel(mp)
    _expert_parallel(mp)
    d, B, nproc = _world_and_batch(mp, launch, (t, p, cp), num_gpus, gpus_per_node, nodes)
    _pipeline_schedule(mp, L, p)
    _sharding(mp, d, t)
    _overlap_and_fusion(mp)
    _recompute(mp)
    _precision(mp)
    _cuda_graphs(mp)
    _optimizer_and_offloading(mp)
    _rank_order(mp, p, d)
    return B, nproc


def _rank_order(mp: Mapper, p: int, d: int) -> None:
    """``--use-tp-pp-dp-mapping``: Megatron-Core's rank order ``tp-cp-ep-pp-dp`` instead of
    its default ``tp-cp-ep-dp-pp`` (megatron/core/parallel_state.py ``initialize_model_parallel``
    ``order``), which the simulation places ranks by (core/sim/comm.py): with p > 1 and d > 1
    the data-parallel and pipeline groups hold other ranks, so other exchanges cross nodes:
    refused by name. With p or d of 1 the two orders are one: listed as having no effect."""
    flag = "--use-tp-pp-dp-mapping"
    if not mp.switch(flag):
        return
    if p > 1 and d > 1:
        mp.refuse(flag, f"not modelled (Megatron-Core's rank order tp-cp-ep-pp-dp: with "
                  f"p = {p} and d = {d} the data-parallel and pipeline groups hold other ranks "
                  "than under its default tp-cp-ep-dp-pp, which the simulation places ranks "
                  "by, so other exchanges cross nodes)")
    else:
        mp.ignored.append((flag, f"no effect with p = {p} and d = {d} (the order "
                           "tp-cp-ep-pp-dp is the default tp-cp-ep-dp-pp when p or d is 1)"))


#: Megatron-LM's optimizer state dtypes under --use-precision-aware-optimizer (arguments.json:
#: each defaults to fp32) -> the plan field each sets (``--main-grads-dtype`` has none: the
#: gradient buffer's dtype is ``plan.grad_reduce_dtype``, see :func:`_precision_aware_optimizer`).
_STATE_DTYPES = {"--main-grads-dtype": None, "--main-params-dtype": "main_params_dtype",
                 "--exp-avg-dtype": "exp_avg_dtype", "--exp-avg-sq-dtype": "exp_avg_sq_dtype"}


def _precision_aware_optimizer(mp: Mapper) -> None:
    """``--use-precision-aware-optimizer`` and its state dtypes -> ``plan.use_precision_aware_
    optimizer``, ``main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype`` (Megatron-Core
    0.16.1 ``OptimizerConfig``; the memory they take, :func:`core.model.memory.
    optimizer_state_bytes`). A dtype other than fp32 without the switch is Megatron-Core's
    assertion (:data:`core.io.megatron.rules.RULES`, ``state-dtypes-precision-aware``).
    ``--main-grads-dtype bf16``: Megatron-Core 0.16.1 reads it nowhere but in that assertion;
    the optimizer reads the gradient buffer (``main_grad``), whose dtype ``--grad-reduce-in-bf16``
    sets. With ``--grad-reduce-in-bf16`` both say bf16 and it is taken; without it the launch's
    gradient dtype is not decided by what is read here, and it is refused by name.
    ``plan.te_master_weights``: ``--fp8-recipe`` (default delayed), which Megatron-LM gives the
    optimizer's config in BF16 training too: delayed, or master weights below fp32, leave them
    to Transformer Engine; tensorwise, mxfp8, blockwise or custom to Megatron-Core."""
    args, src = mp.args, mp.source
    aware = mp.switch("--use-precision-aware-optimizer")
    given = {f: one_value(args, f, src) for f in _STATE_DTYPES if mp.take(f)}
    mp.set("--use-precision-aware-optimizer", "plan.use_precision_aware_optimizer", aware)
    for flag, name in _STATE_DTYPES.items():
        if name is not None:
            mp.set(flag, f"plan.{name}", given.get(flag, "fp32"))
    # Megatron-LM passes --fp8-recipe (default delayed) to Megatron-Core's OptimizerConfig
    # whether or not it trains FP8; any other recipe leaves the fp32 master weights (and the
    # fp32 gradient copy) to Megatron-Core unless they are below fp32
    # (use_precision_aware_optimizer_no_fp8_or_ds_fp8, optimizer_config.py:355)
    recipe = one_value(args, "--fp8-recipe", src) if "--fp8-recipe" in args else "delayed"
    mp.set("--fp8-recipe", "plan.te_master_weights", not aware or recipe == "delayed"
           or given.get("--main-params-dtype", "fp32") != "fp32")
    if aware and "--use-megatron-fsdp" in args:
        mp.refuse("--use-precision-aware-optimizer", "with --use-megatron-fsdp: Megatron-FSDP "
                  "keeps its own fp32 main weights (preserve_fp32_weights, Megatron-Core 0.16.1 "
                  "megatron_fsdp/param_and_grad_buffer.py:2004) beside Transformer Engine's "
                  "FusedAdam state; the precision-aware optimizer is modelled with the "
                  "distributed optimizer only")
    grads = given.get("--main-grads-dtype", "fp32")
    if aware and grads != "fp32" and "--grad-reduce-in-bf16" not in args:
        mp.refuse("--main-grads-dtype", f"{grads} without --grad-reduce-in-bf16: the gradient "
                  "buffer's dtype is set by --grad-reduce-in-bf16 (Megatron-Core 0.16.1 reads "
                  "--main-grads-dtype only in an assertion); say it with that flag")


def _optimizer_and_offloading(mp: Mapper) -> None:
    """What moves the optimizer state or the activations off the GPU, shrinks the state, or
    runs another optimizer: refused by name when on, since the memory verdict (and the
    optimizer step) would be another run's. The simulator's optimizer is Adam with fp32
    master weights and moments on the GPU, and its activations stay on the GPU.

    * ``--optimizer`` other than ``adam`` (sgd, muon, lion, soap ...): other state and step;
    * ``--optimizer-cpu-offload``: the state (a fraction, ``--optimizer-offload-fraction``)
      and its step on the CPU;
    * (the precision-aware optimizer and its state dtypes are read:
      :func:`_precision_aware_optimizer`);
    * ``--cpu-offloading-num-layers`` above 0 and ``--fine-grained-activation-offloading``:
      activations offloaded to the host;
    * ``--fp32-residual-connection``: the residual stream in fp32;
    * ``--distribute-saved-activations`` with full recomputation and t > 1: the saved layer
      inputs split over the tensor-parallel ranks (without them it has no effect: listed)."""
    args, src = mp.args, mp.source
    if mp.take("--optimizer"):
        opt = one_value(args, "--optimizer", src)
        if opt != "adam":
            mp.refuse("--optimizer", f"{opt}: not modelled (the simulator's optimizer is Adam: "
                      "fp32 master weights and two fp32 moments per parameter, Adam's step)")
    offload = mp.switch("--optimizer-cpu-offload")
    if offload:
        mp.refuse("--optimizer-cpu-offload", "the optimizer state and its step on the CPU are "
                  "not modelled (the memory verdict would count the state on the GPU)")
    if mp.take("--optimizer-offload-fraction") and not offload:
        mp.ignored.append(("--optimizer-offload-fraction", "no effect without "
                           "--optimizer-cpu-offload"))
    _precision_aware_optimizer(mp)
    if mp.take("--cpu-offloading-num-layers") and \
            int_argument(args, "--cpu-offloading-num-layers", src, minimum=0) > 0:
        mp.refuse("--cpu-offloading-num-layers", "activations (and weights) of that many layers "
                  "offloaded to the host are not modelled (the memory verdict would count them "
                  "on the GPU)")
    if mp.switch("--fp32-residual-connection"):
        mp.refuse("--fp32-residual-connection", "the residual stream kept in fp32 is not "
                  "modelled (its activations and the adds on it would be twice as wide)")
    distribute = [f for f in ("--distribute-saved-activations",
                              "--distribute-checkpointed-activations")  # and its earlier name
                  if mp.switch(f)]
    if distribute:
        plan = mp.values["plan"]
        if plan.get("recompute") == "full" and (plan.get("tensor_parallel") or 1) > 1:
            mp.refuse(distribute[0], "the recomputed layers' saved inputs "
                      "split over the tensor-parallel ranks are not modelled (the memory "
                      "verdict counts each rank's whole copy)")
        else:
            mp.ignored.append((distribute[0], "no effect without full "
                               "recomputation and tensor parallelism"))
    if mp.switch("--fine-grained-activation-offloading"):
        mp.refuse("--fine-grained-activation-offloading", "activations offloaded to the host "
                  "(--offload-modules) are not modelled (the memory verdict would count them "
                  "on the GPU)")
