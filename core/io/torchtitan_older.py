"""torchtitan's older job-config layout (late 2024, the torchtitan paper's runs), read as the
current one by :mod:`core.io.torchtitan_import`: the keys that moved to other sections
(:data:`OLDER_NAMES`), the micro-batch count that became a micro-batch size
(:func:`older_microbatches`), and the pipeline degree whose layer split cannot be checked
(:func:`older_pipeline_split`). Messages name the file's older key."""

from __future__ import annotations

from typing import Any

from core.io.import_result import refusal
from core.util.text import short_repr

__all__ = ["OLDER_NAMES", "OLDER_MICROBATCHES", "older_layout", "older_pipeline_split",
           "older_microbatches"]

#: The older key of the number of micro-batches the local batch is split into.
OLDER_MICROBATCHES = "experimental.pipeline_parallel_microbatches"
_PAR = "parallelism."


#: torchtitan's older layout (the job config of late 2024, the torchtitan paper's runs:
#: ``torchtitan/config_manager.py``): the parallel degrees under ``[training]`` and
#: ``[experimental]``, ``compile`` a switch of ``[training]``. Each is read as the key it was
#: renamed to, the same meaning; messages name the file's key. ``pipeline_parallel_microbatches``
#: (the number of micro-batches the local batch is split into, default the pipeline degree)
#: gives the micro-batch size (:func:`older_microbatches`). ``pipeline_parallel_degree`` above 1
#: is refused under its older name (:func:`older_pipeline_split`: that version's split of the
#: layers is not known).
OLDER_NAMES: dict[str, str] = {
    "training.batch_size": "training.local_batch_size",
    "training.data_parallel_replicate_degree": "parallelism.data_parallel_replicate_degree",
    "training.data_parallel_shard_degree": "parallelism.data_parallel_shard_degree",
    "training.tensor_parallel_degree": "parallelism.tensor_parallel_degree",
    "training.disable_loss_parallel": "parallelism.disable_loss_parallel",
    "training.compile": "compile.enable",
    "experimental.pipeline_parallel_degree": "parallelism.pipeline_parallel_degree",
    "experimental.pipeline_parallel_schedule": "parallelism.pipeline_parallel_schedule",
    "experimental.pipeline_parallel_split_points": "parallelism.pipeline_parallel_split_points",
    "experimental.enable_async_tensor_parallel": "parallelism.enable_async_tensor_parallel",
    "experimental.context_parallel_degree": "parallelism.context_parallel_degree",
    "experimental.context_parallel_rotate_method": "parallelism.context_parallel_rotate_method",
    "experimental.enable_compiled_autograd": "parallelism.enable_compiled_autograd",
}


def older_layout(cfg: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``(cfg in the current layout, {current key: the file's older key})``: the keys of
    :data:`OLDER_NAMES` moved to their current sections. A file that gives a key under both
    names is refused (which one runs depends on the torchtitan version)."""
    renamed: dict[str, str] = {}
    out = {sec: (dict(t) if isinstance(t, dict) else t) for sec, t in cfg.items()}
    for old, new in OLDER_NAMES.items():
        sec, key = old.split(".")
        table = out.get(sec)
        if not isinstance(table, dict) or key not in table:
            continue
        nsec, nkey = new.split(".")
        target = out.setdefault(nsec, {})
        if not isinstance(target, dict) or nkey in target:
            raise refusal(where, old, f"given twice: as torchtitan's older {old} and as {new}")
        target[nkey] = table.pop(key)
        renamed[new] = old
    return out, renamed


def older_pipeline_split(used: dict[str, Any], where: str, renamed: dict[str, str]) -> None:
    """Refuse ``[experimental] pipeline_parallel_degree`` above 1: the stages' layers are not
    known for the torchtitan that read that layout.

    The importer's split (:func:`core.io.torchtitan_import.torchtitan_stage_layers`) is torchtitan 0.1.0's and 0.2.0's
    ``generate_split_points`` / ``generate_llm_fqn_per_model_part`` (``num_layers + 2`` effective
    layers, the embedding and the output layer one each: ``torchtitan/distributed/pipeline.py``,
    ``pipeline_parallel.py``). Those releases read the degree under ``[parallelism]`` only, and
    their ``ConfigManager._dict_to_dataclass`` drops keys its dataclasses do not have, so a file
    with the older key runs with no pipeline there (0.1.0 ``config_manager.py``). The torchtitan
    that read ``[experimental]`` has no release whose code can be read (PyPI's torchtitan 0.0.2
    wheel holds none), so how it split the layers when ``pipeline_parallel_split_points`` is
    empty cannot be checked: refused by name rather than given 0.1.0's split. Degree 1 (no
    pipeline) is read.

    Raises ConfigError naming the file's older key."""
    key = _PAR + "pipeline_parallel_degree"
    p = used.get(key)
    if key not in renamed or isinstance(p, bool) or not isinstance(p, int) or p <= 1:
        return  # the current key, no pipeline, or a bad value _degrees refuses
    raise refusal(where, key, f"{p} under the older [experimental] layout: the stages' layers "
                  "are those the torchtitan that read it chose (its own generate_split_points), "
                  "which no torchtitan release shows; the importer models 0.1.0's and 0.2.0's "
                  "split (num_layers + 2 over the stages, the embedding and output layer one "
                  "layer each), and those releases ignore this key (they read [parallelism] "
                  "pipeline_parallel_degree and drop keys they do not know). Give "
                  "[parallelism] pipeline_parallel_degree if the run used that split, or import "
                  "without the pipeline and set the session's pipeline_model_parallel_layout")


def older_microbatches(used: dict[str, Any], where: str, renamed: dict[str, str]) -> None:
    """Older torchtitan split the local batch into ``pipeline_parallel_microbatches``
    micro-batches (None: as many as pipeline stages): set the current
    ``pipeline_parallel_microbatch_size`` from it."""
    n = used.pop(OLDER_MICROBATCHES, None)
    p = used.get(_PAR + "pipeline_parallel_degree", 1)
    if (n is None and _PAR + "pipeline_parallel_degree" not in renamed) or p == 1 \
            or _PAR + "pipeline_parallel_microbatch_size" in used:
        if n is not None and _PAR + "pipeline_parallel_microbatch_size" in used:
            raise refusal(where, OLDER_MICROBATCHES, "given with pipeline_parallel_"
                          "microbatch_size: one splits the local batch, the other sizes it")
        return
    n = p if n is None else n
    local = used.get("training.local_batch_size", 8)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not isinstance(local, int) \
            or local % n:
        raise refusal(where, OLDER_MICROBATCHES, f"{short_repr(n)} micro-batches must divide the local "
                      f"batch_size {short_repr(local)}")
    used[_PAR + "pipeline_parallel_microbatch_size"] = local // n
    renamed[_PAR + "pipeline_parallel_microbatch_size"] = OLDER_MICROBATCHES
