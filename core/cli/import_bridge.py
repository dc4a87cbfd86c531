"""``vtrain import bridge``: a Megatron-Bridge performance recipe, or the ``run_config.yaml``
of a Megatron-Bridge checkpoint, into a session file.

* ``--recipe NAME``: one of the 119 pretraining performance recipes of Megatron-Bridge 0.6.2
  (``resources/bridge_perf_recipes.json``, :mod:`core.accuracy.bridge_recipes`) by its function
  name, as :func:`core.accuracy.bridge_sessions.recipe_session` builds it; a recipe that runs
  what is not modelled (NVFP4, FP8 attention, CPU activation offloading, ...) is refused with
  its reason (exit status 2). The session's ``notes`` keep the recipe's function and its
  source file:line (under ``megatron/bridge/perf_recipes``).
* ``--list``: the recipes as a table (``--gpu KIND`` and ``--model NAME`` filter it).
* ``RUN_CONFIG.yaml``: the ConfigContainer Megatron-Bridge writes into every checkpoint
  (:mod:`core.io.bridge_import`), with ``--gpu`` and ``--num-gpus``.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import integer_arg, path_arg
from core.cli.common import (UsageError, check_outputs, cluster_of_gpu, field_error,
                             plan_fit_note)

__all__ = ["add_source", "run", "recipe_rows", "find_recipe", "recipe_import"]


def add_source(isub: Any) -> None:
    """Add the ``bridge`` source to the ``import`` command's sub-parsers (core/cli/imports.py)."""
    from core.plan.cluster import GPU_KINDS
    br = isub.add_parser(
        "bridge", help="a Megatron-Bridge performance recipe (--recipe NAME, --list) or a "
                       "checkpoint's run_config.yaml",
        description="Start a plan from Megatron-Bridge (NVIDIA's training stack on "
                    "Megatron-Core). --recipe NAME: one of Megatron-Bridge 0.6.2's 119 "
                    "pretraining performance recipes by its function name (--list shows them); "
                    "a recipe that runs what the simulator does not model (NVFP4, FP8 "
                    "attention, CPU activation offloading, whole-layer CUDA graphs of an MoE "
                    "model ...) is refused with its reason (exit status 2). RUN_CONFIG.yaml: "
                    "the ConfigContainer Megatron-Bridge writes into every checkpoint; its "
                    "model, train, ddp, optimizer, dist, mixed_precision, comm_overlap, "
                    "checkpoint and dataset sections are read through Megatron-LM's argument "
                    "mapping (vtrain import megatron-args), keys that change the cost and are "
                    "not modelled or not classified refused by name. The file "
                    "names neither the GPU kind nor the GPU count: give --gpu and --num-gpus. "
                    "docs/bridge.md.",
        epilog="examples: vtrain import bridge --list --gpu H100; vtrain import bridge --recipe "
               "llama3_8b_pretrain_8gpu_h100_bf16_config -o l8.json; vtrain import bridge "
               "ckpt/iter_0001000/run_config.yaml --gpu H100 --num-gpus 64 -o run.json")
    br.add_argument("run_config", nargs="?", type=path_arg, metavar="RUN_CONFIG.yaml",
                    help="a Megatron-Bridge checkpoint's run_config.yaml (ConfigContainer.to_yaml)")
    br.add_argument("--recipe", metavar="NAME",
                    help="a performance recipe's function name, e.g. "
                         "llama3_8b_pretrain_8gpu_h100_bf16_config")
    br.add_argument("--list", action="store_true",
                    help="list the recipes (GPU kind, model, GPUs, precision, layout, batch, "
                         "and whether it is modelled)")
    br.add_argument("--model", metavar="NAME",
                    help="with --list: only this model's recipes (Llama3-8B, \"Llama 3 70B\", "
                         "qwen3_30b_a3b ... : case, spaces and hyphens do not matter)")
    br.add_argument("--gpu", metavar="KIND",
                    help="with --list: only this GPU kind's recipes; with RUN_CONFIG.yaml: the "
                         "cluster's GPU kind (required): " + ", ".join(GPU_KINDS))
    br.add_argument("--num-gpus", "--gpus", dest="num_gpus", type=integer_arg, metavar="N",
                    help="with RUN_CONFIG.yaml: the world size (required; the file does not "
                         "keep it); --gpus is its other name")
    br.add_argument("--gpus-per-node", type=integer_arg, metavar="G",
                    help="with RUN_CONFIG.yaml: GPUs per node (default: the GPU kind's NVLink "
                         "domain)")
    br.add_argument("-o", "--out", type=path_arg, metavar="SESSION.json",
                    help="session file to write (atomically; nothing is written on an error); "
                         "required but with --list")


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain import bridge``; returns the exit status (bad input raises UsageError or
    ConfigError, exit status 2)."""
    modes = [m for m, on in (("--list", args.list), ("--recipe", args.recipe is not None),
                             ("RUN_CONFIG.yaml", args.run_config is not None)) if on]
    if len(modes) != 1:
        raise UsageError("vtrain import bridge: give one of --list, --recipe NAME or "
                         "RUN_CONFIG.yaml" + (f" (got {', '.join(modes)})" if modes else ""))
    if args.list:
        return _list(args)
    if args.out is None:
        raise UsageError("vtrain import bridge: --out SESSION.json is required")
    if args.recipe is not None:
        return _recipe(args)
    return _run_config(args)


def recipe_rows(gpu: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """The recipe table's rows (:data:`core.accuracy.bridge_recipes.BRIDGE_PERF_RECIPES`, in
    the file's order), those of GPU kind ``gpu`` (a name :func:`core.plan.cluster.gpu_kind`
    reads) and model ``model`` (compared by :func:`core.accuracy.bridge_recipes.model_key`)
    where given: ``function``, ``source``, ``gpu``, ``model``, ``gpus``, ``precision``, ``t``,
    ``p``, ``v``, ``cp``, ``ep``, ``b``, ``B`` and ``refused`` (the reason's cause, None for a
    recipe that is modelled; :func:`core.accuracy.bridge_sessions.recipe_session`)."""
    from core.accuracy.bridge_recipes import BRIDGE_PERF_RECIPES, model_key
    from core.accuracy.bridge_sessions import recipe_session
    from core.plan.cluster import gpu_kind
    kind = gpu_kind(gpu) if gpu else None
    want = model_key(model) if model else None
    rows = []
    for r in BRIDGE_PERF_RECIPES:
        g, name, n, prec, t, p, v, cp, ep, b, gb = r.key
        if (kind and g != kind) or (want and model_key(name) != want):
            continue
        rs = recipe_session(r)
        rows.append({"function": r.function, "source": r.source, "gpu": g, "model": name,
                     "gpus": n, "precision": prec, "t": t, "p": p, "v": v, "cp": cp, "ep": ep,
                     "b": b, "B": gb, "refused": rs.refusal[0] if rs.refusal else None})
    return rows


def find_recipe(name: str):
    """The recipe whose function name is ``name``.

    Raises
    ------
    ConfigError
        ``--recipe``: no such recipe (the closest names are suggested).
    """
    import difflib

    from core.accuracy.bridge_recipes import BRIDGE_PERF_RECIPES, BRIDGE_VERSION
    by_name = {r.function: r for r in BRIDGE_PERF_RECIPES}
    if name in by_name:
        return by_name[name]
    close = difflib.get_close_matches(name, list(by_name), n=3)
    raise field_error("--recipe", f"{_shown_name(name)} is not a pretraining performance "
                      f"recipe of {BRIDGE_VERSION}" + (f" (did you mean {', '.join(close)}?)" if close
                                              else "") + "; vtrain import bridge --list shows "
                      f"the {len(by_name)}")


#: Longest recipe name a message shows whole: the longest function name is 64 characters
_MAX_SHOWN_NAME = 80


def _shown_name(name: str) -> str:
    """``repr(name)`` as a message shows it: a name longer than :data:`_MAX_SHOWN_NAME` as its
    first 60 characters and its length (a 100,000-character ``--recipe`` made a 100 KB error
    line)."""
    if len(name) <= _MAX_SHOWN_NAME:
        return repr(name)
    return f"{name[:60]!r}... ({len(name):,} characters)"


def _list(args: argparse.Namespace) -> int:
    """``vtrain import bridge --list [--gpu KIND] [--model NAME]``."""
    from core.accuracy.bridge_recipes import BRIDGE_VERSION
    from core.util.text import printable
    for name, given in (("RUN_CONFIG.yaml", args.run_config), ("--out", args.out),
                        ("--num-gpus", args.num_gpus), ("--gpus-per-node", args.gpus_per_node)):
        if given is not None:
            raise UsageError(f"vtrain import bridge --list: {name} is for an import, not the list")
    from core.accuracy.bridge_recipes import model_key
    # a filter that names nothing ('', ' - ': no letter or digit) would list every recipe, as
    # if it were not given
    for name, what, given, empty in (
            ("--gpu", "GPU kind", args.gpu, args.gpu is not None and not args.gpu.strip()),
            ("--model", "model", args.model, args.model is not None and not model_key(args.model))):
        if empty:
            raise field_error(name, f"{_shown_name(given)} names no {what} (no letter or "
                              "digit): give one, or leave the option out to list every recipe")
    rows = recipe_rows(args.gpu, args.model)
    if not rows:
        raise field_error("--gpu" if args.gpu else "--model",
                          "no recipe of " + " and ".join(
                              f"{o} {_shown_name(v)}" for o, v in (("--gpu", args.gpu),
                                                        ("--model", args.model)) if v)
                          + "; the recipes' GPU kinds are H100-SXM5-80GB, B200-180GB and "
                            "GB200-NVL72 and their models Llama3-8B, Llama3-70B, Llama3.1-405B, "
                            "Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3 and GPT-OSS-120B")
    head = ("recipe", "GPU", "model", "GPUs", "prec", "t", "p", "v", "cp", "ep", "b", "B",
            "vtrain")
    table = [head] + [(r["function"], r["gpu"], r["model"], str(r["gpus"]), r["precision"],
                       str(r["t"]), str(r["p"]), str(r["v"]), str(r["cp"]), str(r["ep"]),
                       str(r["b"]), str(r["B"]),
                       "modelled" if r["refused"] is None else f"refused: {r['refused']}")
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print(printable("  ".join(c.ljust(w) if i in (0, 1, 2, 4, 12) else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(row, widths))).rstrip()))
    refused = sum(r["refused"] is not None for r in rows)
    print(printable(f"{len(rows)} recipes of {BRIDGE_VERSION} ({len(rows) - refused} modelled, "
                    f"{refused} refused: vtrain import bridge --recipe NAME -o S.json gives "
                    "the reason)"))
    return 0


def recipe_import(name: str):
    """``(session, lines)`` of the recipe whose function name is ``name``: its session with
    its source in ``notes`` (``function (megatron/bridge/perf_recipes/FILE:LINE, Megatron-Bridge
    0.6.2)``), and the lines to show with it (its source, what it sets that is not represented,
    the recipe file's notes).

    Raises
    ------
    ConfigError
        ``--recipe``: no such recipe (closest names suggested), or one the simulator refuses
        (its cause and reason).
    """
    import dataclasses

    from core.accuracy.bridge_recipes import BRIDGE_VERSION
    from core.accuracy.bridge_sessions import recipe_session
    recipe = find_recipe(name)
    rs = recipe_session(recipe)
    where = f"{recipe.function} (megatron/bridge/perf_recipes/{recipe.source}, {BRIDGE_VERSION})"
    if rs.session is None:
        cause, why = rs.refusal
        raise field_error("--recipe", f"{where} is not simulated: {cause}: {why}")
    session = dataclasses.replace(rs.session, notes=f"Megatron-Bridge performance recipe {where}")
    lines = [f"source: megatron/bridge/perf_recipes/{recipe.source} ({BRIDGE_VERSION}); "
             "docs/accuracy.md \"Mapping and policies\" for how a recipe is read"]
    lines += [f"not represented (no change to the modelled work): {item}"
              for item in recipe.not_represented]
    lines += list(recipe.uncertain) + ([recipe.alias_of] if recipe.alias_of else [])
    return session, lines


def _recipe(args: argparse.Namespace) -> int:
    """``vtrain import bridge --recipe NAME --out SESSION.json``."""
    from core.io.session import save_session
    from core.util.text import printable
    for name, given in (("--gpu", args.gpu), ("--num-gpus", args.num_gpus),
                        ("--gpus-per-node", args.gpus_per_node), ("--model", args.model)):
        if given is not None:
            raise UsageError(f"vtrain import bridge --recipe: {name} is not taken (the recipe "
                             "sets its GPU kind, GPU count and model)")
    check_outputs([("--out", args.out)], [])
    s, lines = recipe_import(args.recipe)
    save_session(s, args.out)
    print(printable(f"{args.recipe}: {s.model.name}, plan {s.plan.label()}, "
                    f"B={s.plan.global_batch_size:,}, {s.plan.precision} on {s.plan.num_gpus:,} "
                    f"x {s.cluster.gpu}; wrote {args.out}"))
    first, *rest = lines
    print(printable(f"  {first}"))
    for line in rest:
        print(printable(f"  {line}" if line.startswith("not represented") else f"  note: {line}"))
    fit = plan_fit_note(s, args.out)
    if fit:
        print(printable(f"  note: {fit}"))
    return 0


def _run_config(args: argparse.Namespace) -> int:
    """``vtrain import bridge RUN_CONFIG.yaml --gpu KIND --num-gpus N --out SESSION.json``."""
    from core.io.bridge_import import read_run_config
    from core.io.session import save_session
    from core.util.text import printable
    if args.model is not None:
        raise UsageError("vtrain import bridge RUN_CONFIG.yaml: --model is for --list (the "
                         "file's model section is the model)")
    missing = [o for o, v in (("--gpu KIND", args.gpu), ("--num-gpus N", args.num_gpus))
               if v is None]
    if missing:
        raise UsageError(f"vtrain import bridge RUN_CONFIG.yaml: give {' and '.join(missing)}: "
                         "a run_config.yaml keeps neither the GPU kind nor the world size "
                         "(Megatron-Bridge computes the data-parallel size from the world size "
                         "at run time)")
    for name, value in (("--num-gpus", args.num_gpus), ("--gpus-per-node", args.gpus_per_node)):
        if value is not None and value < 1:
            raise field_error(name, f"{value} must be a positive integer")
    gpu = cluster_of_gpu(args.gpu).gpu  # refused before reading (the kinds listed)
    check_outputs([("--out", args.out)], [args.run_config])
    imp = read_run_config(args.run_config, gpu=gpu, num_gpus=args.num_gpus,
                          gpus_per_node=args.gpus_per_node)
    save_session(imp.session, args.out)
    s = imp.session
    print(printable(f"{s.model.name}: plan {s.plan.label()}, B={s.plan.global_batch_size:,}, "
                    f"{s.plan.precision} on {s.plan.num_gpus:,} x {s.cluster.gpu} "
                    f"({s.cluster.gpus_per_node} per node; --gpu and --num-gpus, which the file "
                    f"does not keep); wrote {args.out}"))
    for path, what in imp.used.items():
        print(printable(f"  used {path}: {what}"))
    for path, why in imp.ignored.items():
        print(printable(f"  ignored {path}: {why}"))
    for about, note in imp.notes:
        print(printable(f"  note: {about}: {note}"))
    if imp.neutral:
        print(printable("  no effect on the iteration time: " + ", ".join(imp.neutral)))
    fit = plan_fit_note(s, args.out)
    if fit:
        print(printable(f"  note: {fit}"))
    return 0
