"""``vtrain import SOURCE FILE``: read another tool's files into a session.

``hf``: a Hugging Face config.json (core/cli/import_hf.py, core/io/hf_import.py);
``megatron-args``: a Megatron-LM launch script or argument list (core/io/megatron/);
``torchtitan``: a torchtitan job config (core/io/torchtitan_import.py);
``deepspeed``: a DeepSpeed config JSON with a model (core/io/deepspeed_import.py);
``bridge``: a Megatron-Bridge performance recipe or a checkpoint's run_config.yaml
(core/cli/import_bridge.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import integer_arg, path_arg
from core.cli.common import (GPU_HELP, check_outputs, check_seq_length, cluster_of_gpu,
                             plan_fit_note)

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``import`` subcommand (and its formats) to ``vtrain``'s sub-parsers."""
    from core.cli import import_hf

    imp = sub.add_parser("import", help="turn another tool's model or launch file into a session",
                         description="Turn another tool's model or launch file into a session file.")
    isub = imp.add_subparsers(dest="import_command", required=True, metavar="SOURCE")
    import_hf.add_source(isub)
    add_torchtitan(isub)
    add_deepspeed(isub)
    from core.cli import import_bridge
    import_bridge.add_source(isub)
    from core.plan.cluster import GPU_KINDS
    from core.plan.presets import MODEL_PRESETS
    pr = isub.add_parser(
        "preset", help="a published model shape of the editor's presets (Llama 3, Mixtral, "
                       "Qwen3, DeepSeek-V3, GPT-OSS, GPT-3 ...)",
        description="Write a session of one of the editor's model presets with a default plan "
                    "(one 8-GPU node: tensor parallel over the largest of 8, 4, 2, 1 that divides "
                    "the heads, groups and MLP sizes, data parallel over the rest, the lightest "
                    "activation recomputation (none, selective, full) with which it fits, bf16, "
                    "sequence parallelism with t > 1 and the distributed optimizer with its "
                    "overlaps, as Megatron-Bridge's recipes), to simulate or sweep from the "
                    "command line. Presets: "
                    + "; ".join(MODEL_PRESETS) + ".")
    pr.add_argument("name", metavar="PRESET", help="preset name, e.g. \"Llama 3 70B\" (quoted)")
    pr.add_argument("--out", type=path_arg, metavar="SESSION.json", required=True,
                    help="session file to write (atomically)")
    pr.add_argument("--gpu", metavar="KIND", help=GPU_HELP.format(", ".join(GPU_KINDS)))
    pr.add_argument("--seq-length", type=integer_arg, metavar="S",
                    help="sequence length (default: the preset's)")
    m = isub.add_parser(
        "megatron-args", help="a Megatron-LM launch script or argument list",
        description="Read a Megatron-LM / Megatron-Core launch (a shell script with torchrun or "
                    "srun, or a plain argument list) into a session file. Arguments vtrain does not "
                    "model yet are refused by name (exit status 2), and so is an argument "
                    "Megatron-LM does not define (a misspelling: the closest name is suggested); "
                    "Megatron-LM's other arguments that may change the iteration time are listed "
                    "as ignored, those that cannot (logging, paths, learning rate, numerics) "
                    "apart. Transformer Engine's fused (cuDNN) attention, the default "
                    "--attention-backend auto, is timed as FlashAttention.")
    m.add_argument("file", type=path_arg, metavar="FILE",
                   help="launch script (torchrun/srun/deepspeed ... pretrain_gpt.py ..., an sbatch "
                        "script), argument list, or Megatron-LM's printed argument dump")
    m.add_argument("--out", type=path_arg, metavar="SESSION.json", required=True,
                   help="session file to write (atomically; nothing is written on an error)")
    m.add_argument("--num-gpus", type=integer_arg, metavar="N",
                   help="world size, when the launch does not give it (or to override it)")
    m.add_argument("--gpus-per-node", type=integer_arg, metavar="G", help="GPUs per node, the NVLink "
                   "domain (default: the launcher's processes per host, a GB200 NVL72 host's 4 "
                   "being a rack of 72; else the GPU kind's NVLink domain)")
    m.add_argument("--nodes", type=integer_arg, metavar="N", help="nodes (with the launcher's or "
                   "--gpus-per-node's GPUs per node: the world size), when the script takes them "
                   "from its environment")
    m.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="a value of the script's environment or a positional parameter "
                        "(--var NNODES=4, --var 1=/data/ckpt); repeatable. The script is read, "
                        "never run: a variable it sets itself wins, except one it sets from a "
                        "command's output")
    m.add_argument("--gpu", metavar="KIND", help="GPU kind of the cluster (default A100-SXM4-80GB)")
    m.add_argument("--vocab-size", type=integer_arg, metavar="N",
                   help="the tokenizer's vocabulary size, when the launch does not give "
                        "--vocab-size and its tokenizer keeps it in its files "
                        "(HuggingFaceTokenizer, SentencePieceTokenizer ...); read as the "
                        "launch's --vocab-size; with Llama2Tokenizer, the size of its "
                        "--tokenizer-model file (32,000, Meta's, is assumed without it)")
    m.add_argument("--allow-unknown", action="store_true",
                   help="list arguments that are not Megatron-LM's as ignored (with a close "
                        "match) instead of refusing them; use it for a fork's or another "
                        "script's own arguments")
    m.add_argument("--json", action="store_true",
                   help="print the session and the ignored arguments as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain import``; returns the exit status."""
    if args.import_command == "hf":
        from core.cli import import_hf
        return import_hf.run(args)
    if args.import_command == "preset":
        return _preset(args)
    if args.import_command == "torchtitan":
        return _torchtitan(args)
    if args.import_command == "deepspeed":
        return _deepspeed(args)
    if args.import_command == "bridge":
        from core.cli import import_bridge
        return import_bridge.run(args)
    return _megatron(args)


def _preset(args: argparse.Namespace) -> int:
    """``vtrain import preset NAME --out SESSION.json [--gpu KIND] [--seq-length S]``."""
    import dataclasses

    from core.plan.cluster import ClusterConfig
    from core.plan.fields import ConfigError, FieldError
    from core.plan.presets import MODEL_PRESETS, preset_name, unknown_preset
    from core.plan.rules import check
    from core.plan.session import Session
    from core.io.start_plan import default_plan, start_recompute
    from core.io.import_result import global_batch_note, seq_length_note
    from core.io.session import save_session
    from core.util.text import printable
    check_outputs([("--out", args.out)], [])
    name = preset_name(args.name)
    if name is None:
        raise ConfigError([FieldError("PRESET", unknown_preset(args.name))])
    model = dataclasses.replace(MODEL_PRESETS[name])
    check_seq_length(args.seq_length)
    if args.seq_length is not None:
        model.seq_length = args.seq_length
    cluster = ClusterConfig() if args.gpu is None else cluster_of_gpu(args.gpu)
    session = check(Session(model=model, plan=default_plan(model), cluster=cluster))
    session, recompute_note = start_recompute(session, expert_parallel=True)
    save_session(session, args.out)
    print(printable(f"{name}: plan {session.plan.label()} on {session.cluster.gpu}; wrote "
                    f"{args.out} (change the plan with vtrain simulate/sweep --set, or in the "
                    "window)"))
    if args.seq_length is None:
        length = seq_length_note(model.seq_length, "the preset's")
        print(printable(f"  note: {length}"))
    print(printable(f"  note: {global_batch_note(session.plan.global_batch_size)}"))
    print(printable(f"  note: {recompute_note}"))
    fit = plan_fit_note(session, args.out)
    if fit:
        print(printable(f"  note: {fit}"))
    return 0


def _megatron(args: argparse.Namespace) -> int:
    from core.plan.cluster import GPU_KINDS, gpu_kind
    from core.util.console import Console, esc
    from core.io.megatron.arguments import MegatronArgsError
    from core.io.megatron.to_session import import_checked, parse_variables
    from core.io.session import save_session

    variables = parse_variables(args.var)
    for name, value in (("--num-gpus", args.num_gpus), ("--gpus-per-node", args.gpus_per_node),
                        ("--nodes", args.nodes)):
        if value is not None and value < 1:
            raise MegatronArgsError(f"{name} {value} must be a positive integer")
    gpu = None
    if args.gpu:
        gpu = gpu_kind(args.gpu)
        if gpu not in GPU_KINDS:
            raise MegatronArgsError(f"--gpu {args.gpu!r}: known kinds are {', '.join(GPU_KINDS)}")
    check_outputs([("--out", args.out)], [args.file])
    if args.vocab_size is not None and args.vocab_size < 1:
        raise MegatronArgsError(f"--vocab-size {args.vocab_size} must be a positive integer")
    res = import_checked(args.file, num_gpus=args.num_gpus, gpus_per_node=args.gpus_per_node,
                         gpu=gpu, allow_unknown=args.allow_unknown, nodes=args.nodes,
                         variables=variables, vocab_size=args.vocab_size)
    save_session(res.session, args.out)
    if args.json:
        from core.util.inputs import strict_dumps
        print(strict_dumps({"out": str(args.out), "session": res.session.to_dict(),
                          "used": [{"argument": a, "set": w} for a, w in res.used.items()],
                          "ignored": [{"argument": a, "why": w} for a, w in res.ignored.items()],
                          "neutral": res.neutral, "launcher": res.launch.launcher,
                          "notes": [{"about": a, "note": n} for a, n in res.notes],
                          "unknown": res.unknown, "reader": res.launch.notes}))
        return 0
    con = Console()
    pl = res.session.plan
    cp, ep = getattr(pl, "context_parallel", 1) or 1, getattr(pl, "expert_parallel", 1) or 1
    con.print(f"wrote {esc(str(args.out))}: {esc(res.session.model.name)}, {pl.num_gpus:,} GPUs "
              f"(t={pl.tensor_parallel}, "
              f"p={pl.pipeline_parallel}, " + (f"cp={cp}, " if cp > 1 else "")
              + f"d={pl.data_parallel}" + (f", ep={ep}" if ep > 1 else "")
              + f"; b={pl.micro_batch_size}, "
              f"B={pl.global_batch_size}) on {esc(res.session.cluster.gpu)}"
              + ("" if args.gpu else " (from the script's # vtrain: cluster comment)"
                 if any(about == "cluster" for about, _ in res.notes)
                 else " (Megatron's arguments do not name the GPU: the default; "
                 "--gpu KIND for yours)")
              + f", from {res.launch.launcher}", highlight=False)
    if res.session.cluster.inter_node_bandwidth_gbits_per_s is None and pl.num_gpus > \
            res.session.cluster.gpus_per_node:
        con.print("network: Megatron's arguments do not give it; the GPU's reference node "
                  "(set cluster.inter_node_bandwidth_gbits_per_s for yours)", highlight=False)
    for arg, what in res.used.items():
        con.print(f"[dim]used:[/] {esc(arg)} ({esc(what)})", highlight=False)
    for about, note in res.notes:
        con.print(f"{esc(about)}: {esc(res.session.model.attention_kernel)} ({esc(note)})"
                  if about == "attention" else f"{esc(about)}: {esc(note)}", highlight=False)
    for note in res.launch.notes:
        con.print(f"[yellow]script:[/] {esc(note)}", highlight=False)
    for arg, why in res.ignored.items():
        con.print(f"[yellow]ignored:[/] {esc(arg)} ({esc(why)})", highlight=False)
    if res.neutral:
        con.print(f"[dim]not used (no effect on the iteration time): {esc(' '.join(res.neutral))}[/]",
                  highlight=False)
    return 0


def add_torchtitan(isub: Any) -> None:
    """Add the ``torchtitan`` source to the ``import`` command's sub-parsers."""
    tt = isub.add_parser(
        "torchtitan", help="a torchtitan job config (train_configs/*.toml)",
        description="Read a torchtitan job config (TOML: [model] name and flavor, [parallelism] "
                    "degrees, [training] batch and sequence, [activation_checkpoint], [float8], "
                    "[compile]) into a session file (core/io/torchtitan_import.py). Every key is "
                    "used, listed as changing nothing, or refused by name (exit status 2).")
    tt.add_argument("config", type=path_arg, metavar="CONFIG.toml", help="the job config")
    tt.add_argument("--out", type=path_arg, metavar="SESSION.json", required=True,
                    help="session file to write (atomically; nothing is written on an error)")
    tt.add_argument("--num-gpus", type=integer_arg, metavar="N", help="world size (torchrun's); needed "
                    "when data_parallel_shard_degree is -1")
    tt.add_argument("--gpu", metavar="KIND", help="GPU kind of the cluster (default "
                    "A100-SXM4-80GB)")


def _torchtitan(args: argparse.Namespace) -> int:
    """``vtrain import torchtitan CONFIG.toml --out SESSION.json [--num-gpus N] [--gpu KIND]``."""
    from core.plan.cluster import gpu_kind
    from core.plan.fields import ConfigError, FieldError
    from core.io.session import save_session
    from core.util.text import printable
    from core.io.torchtitan_import import read_torchtitan_config, sweep_options
    from core.util.text import shell_word
    if args.num_gpus is not None and args.num_gpus < 1:
        raise ConfigError([FieldError("--num-gpus", f"{args.num_gpus} must be a positive "
                                      "integer")])
    check_outputs([("--out", args.out)], [args.config])
    imp = read_torchtitan_config(args.config, num_gpus=args.num_gpus,
                                 gpu=gpu_kind(args.gpu) if args.gpu else None)
    save_session(imp.session, args.out)
    s = imp.session
    print(printable(f"{s.model.name}: plan {s.plan.label()} on {s.cluster.gpu}; wrote "
                    f"{args.out}"))
    for key, what in imp.used.items():
        print(printable(f"  used {key}: {what}"))
    for key, why in imp.ignored.items():
        print(printable(f"  no effect {key}: {why}"))
    for note in imp.notes:
        print(printable(f"  note: {note}"))
    print(printable("  note: vtrain sweep's default space is Megatron-Core's (Transformer Engine's "
                    "fused cross-entropy, Megatron's selective recomputation, zero-bubble "
                    "schedules ...), and leaves out torchtitan's per-op recomputation; a sweep "
                    "kept to what torchtitan runs: "
                    f"vtrain sweep {shell_word(args.out)} {sweep_options(s)}"))
    return 0


def add_deepspeed(isub: Any) -> None:
    """Add the ``deepspeed`` source to the ``import`` command's sub-parsers."""
    from core.io.deepspeed_import import RECOMPUTE_OPTIONS
    from core.plan.cluster import GPU_KINDS
    ds = isub.add_parser(
        "deepspeed", help="a DeepSpeed config JSON (ds_config.json; DeepSpeed alone, or under "
                          "Hugging Face Trainer / accelerate) with its model",
        description="Read a DeepSpeed config JSON (ds_config.json: the batch, bf16 / fp16, the "
                    "ZeRO stage and its overlap) with the model it trains (--model: a Hugging "
                    "Face config.json or a preset) into a session file "
                    "(core/io/deepspeed_import.py; the policy of every key in "
                    "resources/deepspeed_config.json). DeepSpeed without Megatron is data "
                    "parallelism over every GPU (t = 1, p = 1). Every key is used, listed "
                    "(no effect, or approximated: bucket sizes), or refused by name (exit "
                    "status 2): CPU / NVMe offload, ZeRO++, pipeline, sparse attention, "
                    "compression and any key the importer does not know. Hugging Face "
                    "Trainer's \"auto\" values are refused unless the option below that "
                    "supplies them is given.",
        epilog="example: vtrain import deepspeed ds_config.json --model "
               "Meta-Llama-3-8B/config.json --num-gpus 16 --gpu H100 --out l8_ds.json")
    ds.add_argument("config", type=path_arg, metavar="DS_CONFIG.json",
                    help="the DeepSpeed config (JSON)")
    ds.add_argument("--model", required=True, metavar="MODEL",
                    help="the model: a Hugging Face config.json (or its folder), or a preset "
                         "name, e.g. \"Llama 3 8B\" (quoted)")
    ds.add_argument("--num-gpus", type=integer_arg, metavar="N", required=True,
                    help="world size (the launcher's): the data-parallel size")
    ds.add_argument("--gpus-per-node", type=integer_arg, metavar="G",
                    help="GPUs per node (default: the GPU kind's NVLink domain)")
    ds.add_argument("--gpu", metavar="KIND", help=GPU_HELP.format(", ".join(GPU_KINDS)))
    ds.add_argument("--seq-length", type=integer_arg, metavar="S",
                    help="sequence length to train at (default: the config's "
                         "max_position_embeddings, or the preset's)")
    ds.add_argument("--recompute", choices=RECOMPUTE_OPTIONS,
                    help="activation recomputation: full is Hugging Face's "
                         "gradient_checkpointing (each layer run again in the backward); "
                         "default: the lightest with which the plan fits (noted), as the "
                         "DeepSpeed config does not say")
    ds.add_argument("--out", type=path_arg, metavar="SESSION.json", required=True,
                    help="session file to write (atomically; nothing is written on an error)")
    auto = ds.add_argument_group(
        "values of Hugging Face Trainer's \"auto\"",
        "The Trainer fills these keys in from its own arguments; give the values it uses (a "
        "value the file gives must agree)")
    auto.add_argument("--micro-batch-size", type=integer_arg, metavar="B",
                      help="train_micro_batch_size_per_gpu (the Trainer's "
                           "per_device_train_batch_size)")
    auto.add_argument("--gradient-accumulation-steps", type=integer_arg, metavar="N",
                      help="gradient_accumulation_steps (the Trainer's)")
    auto.add_argument("--train-batch-size", type=integer_arg, metavar="N",
                      help="train_batch_size (micro-batch * accumulation steps * GPUs)")
    auto.add_argument("--precision", choices=("bf16", "fp16", "fp32"),
                      help="bf16.enabled and fp16.enabled (the Trainer's --bf16 / --fp16)")


def _deepspeed(args: argparse.Namespace) -> int:
    """``vtrain import deepspeed DS_CONFIG.json --model MODEL --num-gpus N --out SESSION.json``."""
    from core.plan.fields import ConfigError, FieldError
    from core.io.deepspeed_import import model_from_name, read_deepspeed_config, sweep_options
    from core.io.session import save_session
    from core.util.text import shell_word
    from core.util.text import printable
    for name, value in (("--num-gpus", args.num_gpus), ("--gpus-per-node", args.gpus_per_node),
                        ("--micro-batch-size", args.micro_batch_size),
                        ("--gradient-accumulation-steps", args.gradient_accumulation_steps),
                        ("--train-batch-size", args.train_batch_size)):
        if value is not None and value < 1:
            raise ConfigError([FieldError(name, f"{value} must be a positive integer")])
    check_seq_length(args.seq_length)
    gpu = None
    if args.gpu:
        gpu = cluster_of_gpu(args.gpu).gpu  # refused before reading (the kinds listed)
    check_outputs([("--out", args.out)], [args.config, args.model])
    model, model_ignored, model_notes = model_from_name(args.model, seq_length=args.seq_length)
    options = {"--micro-batch-size": args.micro_batch_size,
               "--gradient-accumulation-steps": args.gradient_accumulation_steps,
               "--train-batch-size": args.train_batch_size, "--precision": args.precision}
    imp = read_deepspeed_config(args.config, model, num_gpus=args.num_gpus,
                                gpus_per_node=args.gpus_per_node,
                                gpu=gpu, recompute=args.recompute,
                                options={k: v for k, v in options.items() if v is not None})
    save_session(imp.session, args.out)
    s = imp.session
    print(printable(f"{s.model.name}: plan {s.plan.label()}, B={s.plan.global_batch_size:,}, "
                    f"{s.plan.precision} on {s.plan.num_gpus:,} x {s.cluster.gpu} "
                    f"({s.cluster.gpus_per_node} per node); wrote {args.out}"))
    for key, what in imp.used.items():
        print(printable(f"  used {key}: {what}"))
    for key, what in imp.approximated.items():
        print(printable(f"  approximated {key}: {what}"))
    for key, why in imp.ignored.items():
        print(printable(f"  no effect {key}: {why}"))
    for key, why in model_ignored.items():
        print(printable(f"  model: ignored {key}: {why}"))
    for note in [*model_notes, *imp.notes]:
        print(printable(f"  note: {note}"))
    fit = plan_fit_note(s, args.out)
    if fit:
        print(printable(f"  note: {fit}"))
    print(printable("  note: vtrain sweep's default space is Megatron-Core's (tensor and pipeline "
                    "parallelism, fused cross-entropy ...); a sweep kept to what DeepSpeed runs: "
                    f"vtrain sweep {shell_word(args.out)} {sweep_options(s.plan.precision)}"))
    return 0
