"""Write the ``fields`` of resources/bridge_run_config.json: the dataclass fields (and defaults)
of the ConfigContainer sections ``vtrain import bridge RUN_CONFIG.yaml`` reads, from the
Megatron-Bridge 0.6.2 and Megatron-Core 0.19.2 sources (read with :mod:`ast`, never imported:
they need torch, Transformer Engine and transformers).

Run: ``python scripts/bridge_run_config_fields.py BRIDGE_DIR MCORE_DIR`` with BRIDGE_DIR the
unpacked wheel's ``megatron/bridge`` and MCORE_DIR the unpacked Megatron-Core wheel's
``megatron``; it rewrites the ``fields`` key of resources/bridge_run_config.json in place and
keeps the rest (the policies) as they are.

A default is kept as its literal value where :func:`ast.literal_eval` reads it, else as
``{"expr": SOURCE}`` (``torch.float32``, ``AttnBackend.auto``, ``F.gelu``, a
``default_factory``); a field without a default (``InitVar``s and required fields) as
``{"expr": null}``. Each class of a section's chain is read in order, a later class's
definition of a field replacing an earlier's (the Python MRO of these classes).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "resources" / "bridge_run_config.json"

#: section -> [(package, file under it, class)] base first (their MRO, most derived last)
CHAINS = {
    "model": [("mcore", "core/model_parallel_config.py", "ModelParallelConfig"),
              ("mcore", "core/transformer/transformer_config.py", "TransformerConfig"),
              ("bridge", "models/transformer_config.py", "TransformerConfig"),
              ("bridge", "models/gpt_provider.py", "GPTModelProvider")],
    "model/mla": [("mcore", "core/transformer/transformer_config.py", "MLATransformerConfig"),
                  ("bridge", "models/transformer_config.py", "MLATransformerConfig"),
                  ("bridge", "models/mla_provider.py", "MLAModelProvider")],
    "ddp": [("mcore", "core/distributed/distributed_data_parallel_config.py",
             "DistributedDataParallelConfig"),
            ("bridge", "training/config.py", "DistributedDataParallelConfig")],
    "optimizer": [("mcore", "core/optimizer/optimizer_config.py", "OptimizerConfig"),
                  ("bridge", "training/config.py", "OptimizerConfig")],
    "train": [("mcore", "training/config/training_config.py", "TrainingConfig"),
              ("bridge", "training/config.py", "TrainingConfig")],
    "dataset": [("mcore", "core/datasets/blended_megatron_dataset_config.py",
                 "BlendedMegatronDatasetConfig"),
                ("mcore", "core/datasets/gpt_dataset.py", "GPTDatasetConfig"),
                ("bridge", "data/base.py", "DataloaderConfig"),
                ("bridge", "training/config.py", "GPTDatasetConfig")],
    "mixed_precision": [("bridge", "training/mixed_precision.py", "MixedPrecisionConfig")],
    "dist": [("mcore", "training/config/common_config.py", "DistributedInitConfig"),
             ("bridge", "training/config.py", "DistributedInitConfig")],
    "comm_overlap": [("bridge", "training/comm_overlap.py", "CommOverlapConfig")],
}


def _fields(path: Path, name: str) -> dict[str, object]:
    """The annotated class attributes of class ``name`` in ``path`` with their defaults."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            break
    else:
        raise SystemExit(f"{path}: no class {name}")
    out: dict[str, object] = {}
    for st in node.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = ast.unparse(st.annotation)
        if "ClassVar" in ann:
            continue
        key = st.target.id
        if st.value is None:
            out[key] = {"expr": None}
            continue
        value = st.value
        if (isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field")):
            kw = {k.arg: k.value for k in value.keywords}
            if "default" in kw:
                value = kw["default"]
            else:
                out[key] = {"expr": ast.unparse(kw.get("default_factory", value))}
                continue
        try:
            out[key] = ast.literal_eval(value)
        except ValueError:
            out[key] = {"expr": ast.unparse(value)}
    return out


def main(argv: list[str]) -> int:
    bridge, mcore = Path(argv[1]), Path(argv[2])
    roots = {"bridge": bridge, "mcore": mcore}
    fields: dict[str, dict[str, object]] = {}
    for section, chain in CHAINS.items():
        merged: dict[str, object] = {}
        for pkg, rel, cls in chain:
            merged.update(_fields(roots[pkg] / rel, cls))
        fields[section] = {k: merged[k] for k in sorted(merged) if not k.startswith("_")}
    doc = json.loads(OUT.read_text()) if OUT.exists() else {}  # keeps the policies
    doc["fields"] = fields
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{OUT}: " + ", ".join(f"{s} {len(f)}" for s, f in fields.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
