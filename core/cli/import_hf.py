"""``vtrain import hf CONFIG.json --out SESSION.json [--gpu KIND] [--json]``: a Hugging Face
model config into a session file with a default plan (:mod:`core.io.hf_import`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from core.cli.common import integer_arg, path_arg
from core.cli.common import (GPU_HELP, check_outputs, check_seq_length, cluster_of_gpu,
                             plan_fit_note)

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``import`` (with its one source, ``hf``) to ``vtrain``'s sub-parsers."""
    imp = sub.add_parser("import", help="turn another tool's model file into a session",
                         description="Turn another tool's model file into a session file.")
    isub = imp.add_subparsers(dest="import_command", required=True, metavar="SOURCE")
    add_source(isub)


def add_source(isub: Any) -> None:
    """Add the ``hf`` source to the ``import`` command's sub-parsers (core/cli/imports.py)."""
    from core.io.hf_import import DENSE_ARCHITECTURES, MOE_ARCHITECTURES
    hf = isub.add_parser(
        "hf", help="a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2, Qwen3 and their "
                   "MoE variants, DeepSeek-V2/V3, GPT-OSS, GLM-4.5/4.6, Gemma 2/3, Nemotron-4, "
                   "Phi-3/4, OLMo 2)",
        description="Read a Hugging Face config.json of the dense "
                    + ", ".join(DENSE_ARCHITECTURES) + " or the mixture-of-experts "
                    + ", ".join(MOE_ARCHITECTURES) + " (the importer's own lists) into a "
                    "session with a default plan (one 8-GPU node). Fields that do "
                    "not change the cost are listed as ignored; fields the simulator does not "
                    "model, and other architectures, are refused by name (exit status 2).")
    hf.add_argument("config", type=path_arg, metavar="CONFIG.json",
                    help="the model's config.json, or its folder (which holds config.json)")
    hf.add_argument("--out", type=path_arg, metavar="SESSION.json", help="session file to write")
    hf.add_argument("--json", action="store_true", help="print the model section as JSON")
    hf.add_argument("--seq-length", type=integer_arg, metavar="S",
                    help="sequence length to train at (default: max_position_embeddings)")
    from core.plan.cluster import GPU_KINDS
    hf.add_argument("--gpu", metavar="KIND", help=GPU_HELP.format(", ".join(GPU_KINDS)))


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain import hf``; returns the exit status (errors raise ConfigError)."""
    from core.plan.fields import ConfigError, FieldError
    from core.plan.rules import check
    from core.io.hf_import import hf_config_path, read_hf_config
    from core.io.start_plan import start_recompute
    from core.util.inputs import strict_dumps
    from core.util.text import printable
    from core.model.counts import (num_active_parameters,
        num_active_parameters_with_embedding,
        num_parameters)
    from core.io.session import save_session
    if not args.out and not args.json:
        raise ConfigError([FieldError("--out", "give --out SESSION.json (or --json to print the "
                                               "model section)")])
    check_seq_length(args.seq_length)
    args.config = str(hf_config_path(args.config))  # a model folder: its config (never --out)
    check_outputs([("--out", args.out)], [args.config])
    cluster = None if args.gpu is None else cluster_of_gpu(args.gpu)  # refused before reading
    imp = read_hf_config(args.config, seq_length=args.seq_length)
    if cluster is not None:
        imp.session.cluster = cluster_of_gpu(args.gpu, imp.session.cluster)
        check(imp.session)  # the plan on that GPU (FP8 needs its tensor cores ...; exit 2)
    imp.session, recompute_note = start_recompute(imp.session, expert_parallel=True)
    imp.notes.append(recompute_note)
    model = imp.session.model
    if args.out:
        save_session(imp.session, args.out)
    if args.json:
        print(strict_dumps(dataclasses.asdict(model), "model", indent=2))
        out = sys.stderr
    else:
        out = sys.stdout
    n = num_parameters(model)
    active = (f" ({num_active_parameters(model) / 1e9:,.2f} B active without the input embedding, "
              f"{num_active_parameters_with_embedding(model) / 1e9:,.2f} B with it)"
              if model.is_moe else "")
    print(printable(f"{model.name!r}: {imp.architecture}, {n / 1e9:,.2f} B parameters{active}, "
                    f"plan {imp.session.plan.label()} on {imp.session.cluster.gpu}"
                    + (f"; wrote {args.out}" if args.out else "")),
          file=out)
    for name, why in imp.ignored.items():
        print(printable(f"  ignored {name}: {why}"), file=out)
    # the written session's plan, against simulate's memory verdict
    fit = plan_fit_note(imp.session, args.out) if args.out else None
    for note in [*imp.notes, *([fit] if fit else [])]:
        print(printable(f"  note: {note}"), file=out)
    return 0
