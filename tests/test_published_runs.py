"""The published-runs layout (../shared/data/public-modern/published_runs.csv) -> sessions:
round trips on the real rows, and the named policies for what sources leave unstated
(core.accuracy.validate, docs/accuracy.md "Published runs: mapping and policies")."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from core.cli import main
from core.plan.cluster import GPU_KINDS
from core.plan.layout import virtual_stage_layer_counts
from core.plan.parallel import PRECISIONS, ParallelPlan
from core.accuracy.validate import ASSUMPTIONS, _flag, published_columns, read_measurements, skip_counts
from tests.conftest import ROOT

PUBLISHED = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.csv"


@pytest.fixture(scope="module")
def published():
    if not PUBLISHED.exists():
        pytest.skip(f"shared data not present: {PUBLISHED}")
    raw = list(csv.DictReader(PUBLISHED.open()))
    return raw, read_measurements(PUBLISHED)


def _names(m) -> set[str]:
    return {a.split(":")[0] for a in m.assumptions}


def _write_rows(path, raw, *rows):
    """A published-runs CSV at ``path`` with the shared file's header and ``rows`` (dicts)."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(raw[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _has_field(cls, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(cls))


INTS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length",
        "vocab_size", "global_batch_size", "micro_batch_size", "tensor_parallel",
        "pipeline_parallel", "data_parallel", "num_gpus", "gpus_per_node", "num_query_groups",
        "virtual_pipeline_stages", "context_parallel", "expert_parallel", "num_experts",
        "moe_top_k", "moe_ffn_hidden_size")


def test_every_row_round_trips_through_its_session(published):
    """Each real row's session, written back as columns (core.accuracy.validate.published_columns), gives
    the row's own cells: numbers equal, flags equal, the GPU its shipped kind or the raw name."""
    raw, ms = published
    assert len(ms) == len(raw) == 43
    for r, m in zip(raw, ms):
        cols = published_columns(m.session)
        cp_held = _has_field(ParallelPlan, "context_parallel") or r["context_parallel"] in ("", "1")
        for c in INTS:
            if c == "num_gpus" and not cp_held:
                continue  # the session cannot hold cp yet: the row is skipped for it
            if c in cols and r[c] != "":
                assert cols[c] == int(r[c]), (m.row, c)
        assert cols["inter_node_bandwidth_gbps"] == float(r["inter_node_bandwidth_gbps"])
        for c in ("tied_embeddings", "sequence_parallel"):
            assert cols[c] == ("y" if _flag(r[c]) else "n"), (m.row, c)
        if "hsdp" not in r["fsdp"].lower():
            assert cols["fsdp"] == ("y" if _flag(r["fsdp"]) else "n"), m.row
            assert cols["distributed_optimizer"] == ("y" if _flag(r["distributed_optimizer"]) else "n")
        # a GPU without a store keeps its own name: never another GPU silently
        assert cols["gpu"] in GPU_KINDS or cols["gpu"] == r["gpu"]
        assert float(r["measured_iteration_time_s"]) == m.measured_s


def test_every_row_is_predicted_or_skipped_with_causes_and_every_assumption_is_named(published):
    raw, ms = published
    for m in ms:
        assert bool(m.skip_reason) == bool(m.skip_causes)
        assert _names(m) <= set(ASSUMPTIONS), m.assumptions
        assert "derived-time" in _names(m)  # every time in this file is DERIVED
    counts = skip_counts(ms)
    # the 96 GB HBM2e H100 at 500 W has its own store (peaks fitted on its runs): no GPU skips
    assert "GPU kind without a shipped profile" not in counts
    tt = [m for r, m in zip(raw, ms) if r["gpu"].startswith("H100-96GB")]
    assert len(tt) == 12 and all(m.session.cluster.gpu == "H100-96GB-HBM2e-500W" for m in tt)
    assert all("gpu-peak-fraction-fitted" in _names(m) for m in tt)
    assert sum(not m.skip_reason for m in tt) == 8  # the rowwise FP8 rows (26, 27, 32, 33) skip
    # HSDP (rows 36, 37), torchtitan's per-op SAC and FSDP float8 all-gather (rows 34, 35) are
    # modelled: those rows predict; per-op SAC with t=8 (rows 28-33) is no cause either
    assert "hybrid sharded data parallelism (HSDP)" not in counts
    assert "per-op selective checkpointing (not modelled in this plan)" not in counts
    assert "FP8 parameter all-gather" not in counts
    for row in (34, 35, 36, 37):
        assert not ms[row - 1].skip_reason, (row, ms[row - 1].skip_reason)
    assert counts["selective recomputation (other than Megatron's)"] >= 6  # fms-fsdp's fractions
    # multi-head latent attention from the notes (DeepSeek-V3): no longer a cause; the 61
    # layers' pipeline layout: row 8's notes state it (pp_layout), rows 11, 19, 20 take the
    # Bridge recipe's (a named assumption)
    for row in (8, 11, 19, 20):
        m = ms[row - 1]
        assert "multi-head latent attention" not in m.skip_causes
        assert any(a.startswith("mla-from-notes") for a in m.assumptions)
        md = m.session.model
        assert (md.multi_latent_attention, md.q_lora_rank, md.kv_lora_rank, md.qk_head_dim,
                md.qk_pos_emb_head_dim, md.v_head_dim, md.qk_layernorm) == (
                    True, 1536, 512, 128, 64, 128, True)
    # row 20 says "w/o MTP" (over its recipe's one layer); row 11 does not name MTP and matches
    # no recipe: the one MTP layer of every B200 MXFP8 DeepSeek-V3 recipe (its family); row 19
    # takes its Bridge recipe's one MTP layer; row 8's layout holds one MTP layer (m)
    assert not any(any(a.startswith("mtp-not-stated") for a in ms[r - 1].assumptions)
                   for r in (8, 11, 19, 20))
    assert "1 MTP layer," in next(a for a in ms[10].assumptions
                                  if a.startswith("bridge-perf-recipe-family"))
    assert [ms[r - 1].session.model.mtp_num_layers for r in (8, 11, 19, 20)] == [1, 1, 1, 0]
    assert ms[7].session.plan.pipeline_model_parallel_layout == "Et|(tt|)*30mL"
    assert "pp-layout-from-notes" in _names(ms[7])
    for row in (11, 19, 20):
        m = ms[row - 1]
        pl = m.session.plan
        # p*v = 16: E+4t | 14 x 4t | 1t+L: rows 19 and 20 their Bridge recipe's layout (row 20
        # without the MTP layer it states it has not), row 11 (no recipe of its layout) that of
        # its family's one recipe at its p = 8, v = 2; rows 11 and 19's MTP layer with the loss
        assert pl.pipeline_model_parallel_layout == "E" + "|".join(
            ["tttt"] * 15 + ["t" + ("L" if row == 20 else "mL")])
        assert "bridge-perf-recipe-layout" in _names(m)
        assert virtual_stage_layer_counts(61, pl) == [4] * 15 + [1]
        assert "uneven pipeline split" not in m.skip_causes
        assert "pipeline_model_parallel_layout" not in m.skip_reason
    # without recomputation, and with the Bridge perf recipes' bf16 gradients and FP8 weight
    # all-gather, rows 11 (B200, 180 GiB) and 19, 20 (GB200, 186 GiB) need 182-195 GiB, within
    # the rule's 10 %: predicted
    for row in (11, 19, 20):
        assert ms[row - 1].skip_causes == [], ms[row - 1].skip_reason
    assert {"bridge-perf-bf16-grad-reduce", "bridge-fp8-param-gather"} <= _names(ms[10])
    assert ms[10].session.plan.grad_reduce_dtype == "bf16" and ms[10].session.plan.fp8_param_gather
    assert "bridge-fp8-param-gather" not in _names(ms[19])  # row 20 is BF16
    # GPT-OSS's sliding windows and attention sinks are modelled (tests/test_gpt_oss.py)
    for row in (3, 12, 21):
        assert not {"sliding-window attention", "attention sinks"} & set(ms[row - 1].skip_causes)


def test_megatron_bridge_dense_row_policies(published):
    """Row 2, Llama3-70B on 64 H100, Bridge 'FP8' label, recompute empty."""
    _, ms = published
    m = ms[1]
    s = m.session
    assert s.cluster.gpu == "H100-SXM5-80GB" and s.cluster.inter_node_bandwidth_gbits_per_s == 3200
    mo, pl = s.model, s.plan
    assert (mo.num_query_groups, mo.activation, mo.normalization, mo.position_embedding,
            mo.attention_kernel, mo.tied_embeddings, mo.add_bias_linear) == (
        8, "swiglu", "rmsnorm", "rope", "flash", False, False)
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel, pl.schedule,
            pl.virtual_pipeline_stages, pl.sequence_parallel) == (4, 8, 2, "interleaved", 5, True)
    assert pl.recompute == "none" and pl.zero_stage == 1
    assert pl.overlap_grad_reduce and pl.overlap_param_gather
    # the recomputation (none) and the TP overlap are its Megatron-Bridge perf recipe's
    assert {"bridge-perf-recipe", "gpu-alias", "llama-family",
            "fp8-label-tensorwise", "distributed-optimizer-zero1"} <= _names(m)
    assert not {"megatron-recompute-default", "bridge-tp-comm-overlap"} & _names(m)
    assert pl.tp_comm_overlap
    if "fp8" in PRECISIONS and _has_field(ParallelPlan, "fp8_recipe"):
        assert pl.precision == "fp8" and pl.fp8_recipe == "tensorwise"
    else:
        assert "FP8 precision" in m.skip_causes


def test_notes_policies_on_real_rows(published):
    _, ms = published
    # fms-fsdp rows: the printed 400/800 Gbps taken as the node's total, named
    for row in range(36, 44):
        assert "bandwidth-per-node-as-printed" in _names(ms[row - 1]), row
    assert "bandwidth-per-node-as-printed" not in _names(ms[0])
    qwen = ms[13]  # row 14: Qwen3-235B-A22B on 256 B200, p=8, 94 layers, mxfp8
    assert qwen.session.model.qk_layernorm
    if _has_field(ParallelPlan, "account_for_embedding_in_pipeline_split"):
        assert qwen.session.plan.account_for_embedding_in_pipeline_split
        assert qwen.session.plan.account_for_loss_in_pipeline_split
    else:
        assert (qwen.session.plan.first_stage_layers, qwen.session.plan.last_stage_layers) == (11, 11)
    assert {"pipeline-split-embedding-loss", "qk-norm-from-notes", "kv-channels-from-notes",
            "fp8-mxfp8", "moe-from-notes", "moe-balanced-routing"} <= _names(qwen)
    if _has_field(type(qwen.session.model), "kv_channels"):
        assert qwen.session.model.kv_channels == 128
    else:
        assert "kv_channels (head size other than h/a)" in qwen.skip_causes
    gb = ms[16]  # row 17: Llama3-70B on 64 GB200, Megatron-FSDP, b=2, s=8192, recompute empty
    assert gb.session.plan.zero_stage == 3 and "megatron-fsdp-zero3" in _names(gb)
    assert gb.session.cluster.gpu == "GB200-NVL72" and gb.session.cluster.gpus_per_node == 72
    # its Megatron-Bridge recipe offloads 40 of the 80 layers' activations to the CPU
    # (Megatron-Core --cpu-offloading), not modelled: refused by name
    assert gb.skip_causes == ["CPU activation offloading"]
    assert "cpu_offloading_num_layers=40" in gb.skip_reason and "bridge-perf-recipe" in _names(gb)
    # and without it the plan could not run: 340.4 GiB of the whole process (328.6 of tensors;
    # the process terms, mostly the allocator's reserve, add 11.8) against the GPU's 186 GiB (with the
    # Bridge recipes' bf16 gradients and Transformer Engine cross-entropy, of them 4.8 the
    # ZeRO-3 peak's prefetched next layer and unsharded gradients: 80 layers of b*s = 16,384
    # tokens, whose projection keeps its BF16 input under tensorwise FP8)
    from core.sim.simulate import stage_memory
    assert max(x.total_bytes for x in stage_memory(gb.session)) / 2**30 == pytest.approx(340.4, abs=0.05)
    ds = ms[7]  # row 8: DeepSeek-V3 on H100: recompute_modules named, pp_layout, precision inferred
    assert "precision not stated" in ds.skip_causes
    assert "custom pipeline layout" not in ds.skip_causes  # the layout is read from the notes
    assert virtual_stage_layer_counts(61, ds.session.plan) == [1] + [2] * 30 + [0]
    if _has_field(ParallelPlan, "recompute_modules"):  # the notes' modules, judged by validation
        assert ds.session.plan.recompute_modules == "mla_up_proj,mlp"
        # FP8 with these modules is modelled, and Bridge's DeepSeek recipes run no TP overlap:
        # the row is skipped for its unstated precision alone (and, its precision unknown,
        # matches no recipe)
        assert "recompute_modules" not in ds.skip_reason
        assert ds.skip_causes == ["precision not stated"]
        assert "bridge-mla-no-tp-comm-overlap" in _names(ds)
        assert not {"bridge-perf-recipe", "bridge-perf-recipe-family"} & _names(ds)
        assert ds.session.plan.tp_comm_overlap is False
    else:
        assert "recompute_modules=[mla_up_proj, mlp]" in ds.skip_reason
    # rows 28-33: torchtitan's per-op SAC with t=8, sequence-parallel (the recomputed ops'
    # all-gathers are modelled): skipped for their GPU (no store of the 96 GB 500 W H100) and,
    # rows 32-33, torchao's rowwise float8 scaling, never for the checkpointing
    for row in range(28, 34):
        tt = ms[row - 1]
        pl = tt.session.plan
        assert (pl.recompute, pl.tensor_parallel, pl.sequence_parallel) == ("selective_op", 8, True)
        assert "torchtitan-selective-op" in _names(tt)
        assert tt.skip_causes == ["rowwise FP8 scaling"] * (row >= 32), (row, tt.skip_reason)
        assert "selective_op" not in tt.skip_reason
        assert tt.session.cluster.gpu == "H100-96GB-HBM2e-500W"
        assert pl.tp_comm_overlap == (row % 2 == 1)  # the async TP rows: 29, 31, 33
    trainy = ms[34]  # row 35: torchtitan FSDP2, per-op SAC, float8 with FSDP float8 all-gather
    pl = trainy.session.plan
    assert (pl.recompute, pl.precision, pl.fp8_recipe, pl.fp8_param_gather, pl.zero_stage) == (
        "selective_op", "fp8", "tensorwise", True, 3)
    assert {"torchtitan-selective-op", "fp8-param-gather-from-label"} <= _names(trainy)
    for row, gpu in ((36, "A100-SXM4-80GB"), (37, "H100-SXM5-80GB")):  # fms-fsdp HSDP
        hs = ms[row - 1]
        assert hs.session.cluster.gpu == gpu and hs.session.plan.zero_stage == 3
        assert hs.session.plan.data_parallel_shard_size == 8  # gpus_per_node / (t*cp)
        assert "hsdp-node-shard" in _names(hs) and not hs.skip_reason
    fms = ms[37]  # row 38: fms-fsdp selective, fraction not stated
    assert "fraction of the layers" in fms.skip_reason and fms.session.plan.zero_stage == 3


@pytest.mark.parametrize("label, recipe, assumption", [
    ("fp8 (label 'FP8' = per-tensor current-scaling FP8 alongside separate MXFP8 rows)",
     "tensorwise", "fp8-label-tensorwise"),
    ("fp8-cs (per-tensor current scaling)", "tensorwise", "fp8-label-tensorwise"),
    ("mxfp8 (32-element block scaling)", "mxfp8", "fp8-mxfp8"),
    ("mxfp8 (label 'FP8-MX')", "mxfp8", "fp8-mxfp8"),
    ("fp8 tensorwise (torchao float8 linears) + bf16", "tensorwise", "fp8-label-tensorwise"),
    ("fp8 rowwise (torchao float8 linears) + bf16", None, None),  # refused: see below
    ("fp8 delayed scaling", "delayed", None),
    ("fp8", "tensorwise", "fp8-recipe-unstated"),
])
def test_fp8_labels_map_to_precision_and_recipe(label, recipe, assumption):
    from core.accuracy.validate import _precision_policy, _Row
    row = _Row()
    assert _precision_policy(label, row) == ("fp8", recipe)
    assert [a.split(":")[0] for a in row.assumptions] == ([assumption] if assumption else [])
    assert _precision_policy("bf16 mixed precision", _Row()) == ("bf16", None)
    inferred = _Row()
    _precision_policy("fp8 (inferred; see notes)", inferred)
    assert inferred.causes == ["precision not stated"]
    rowwise = _Row()
    _precision_policy("fp8 rowwise (torchao float8 linears) + bf16", rowwise)
    assert rowwise.causes == ["rowwise FP8 scaling"]


def test_fsdp_float8_all_gather_label_sets_fp8_param_gather():
    from core.accuracy.validate import _precision_policy, _Row
    row = _Row()
    label = "fp8 tensorwise (torchao float8 linears, FSDP float8 all-gather) + bf16"
    assert _precision_policy(label, row) == ("fp8", "tensorwise")
    assert row.fp8_param_gather and not row.causes
    assert "fp8-param-gather-from-label" in [a.split(":")[0] for a in row.assumptions]
    plain = _Row()
    _precision_policy("fp8 tensorwise (torchao float8 linears) + bf16", plain)
    assert not plain.fp8_param_gather


@pytest.mark.parametrize("text, framework, notes, expect, cause", [
    ("", "Megatron-Bridge (Megatron-Core)", "", "none", None),
    ("", "NeMo", "recompute_modules=[core_attn]", "selective", None),
    ("", "Megatron-Bridge", "recompute_modules=[layernorm, moe_act]", None,
     "selective recomputation (other than Megatron's)"),
    ("", "torchtitan", "", None, "recompute not stated"),
    ("selective", "Megatron-LM", "", "selective", None),
    ("selective", "torchtitan (FSDP2)", "", None, "selective recomputation (other than Megatron's)"),
    ("selective (per-op SAC)", "torchtitan", "", "selective_op", None),
    ("selective (per-op SAC, toml default)", "torchtitan (FSDP2)", "", "selective_op", None),
    ("selective_op", "", "", "selective_op", None),
    # Megatron-Core has no per-op SAC: its selective recomputation is by module (tester)
    ("selective (per-op SAC)", "Megatron-Bridge (Megatron-Core)", "", None,
     "selective recomputation (other than Megatron's)"),
    ("op-SAC", "NeMo 2.0", "", None, "selective recomputation (other than Megatron's)"),
    # the session's own value and its spellings too (tester)
    ("selective_op", "Megatron-LM", "", None, "selective recomputation (other than Megatron's)"),
    ("AC=selective_op", "NeMo", "", None, "selective recomputation (other than Megatron's)"),
    ("selective_op", "torchtitan", "", "selective_op", None),
    ("full", "fms-fsdp", "", "full", None),
    ("full (uniform, every layer)", "Megatron-LM", "", "full", None),
    ("full (block, 4 layers)", "Megatron-LM", "", None, "recompute"),
    ("none (no checkpointing)", "torchtitan", "", "none", None),
    ("no", "Megatron-LM", "", "none", None),
    ("off", "torchtitan", "", "none", None),
    ("activation checkpointing: full", "torchtitan", "", "full", None),
    ("selective (core_attn)", "NeMo 2.0 (Megatron-Core)", "", "selective", None),
    ("selective (recompute_modules=[core_attn])", "Megatron-LM", "", "selective", None),
    ("selective (core_attn)", "torchtitan", "", None, "selective recomputation (other than Megatron's)"),
    ("y", "Megatron-LM", "", None, "recompute"),
])
def test_recompute_policy(text, framework, notes, expect, cause):
    from core.accuracy.validate import _recompute_policy, _Row
    row = _Row()
    got = _recompute_policy(text, framework, notes, row)
    if cause is None:
        assert got == expect and not row.causes
    else:
        assert row.causes == [cause]


_CP_OTHER = "context parallelism other than Megatron-Core's ring"


@pytest.mark.parametrize("framework, notes, expect", [
    ("Megatron-Bridge (Megatron-Core)", "", "p2p"),
    ("Megatron-LM", "cp_comm_type=p2p", "p2p"),
    ("NeMo 2.0", "context parallel 2 (ring); TP all-gather overlapped", "p2p"),
    ("", "", "p2p"),                                     # the session's own terms: the ring
    ("torchtitan (FSDP2)", "", "allgather"),             # PyTorch's context_parallel default
    ("torchtitan (FSDP2)", "context_parallel_rotate_method=allgather", "allgather"),
    ("torchtitan (FSDP2)", "ring attention, cp_comm_type p2p", "p2p"),
    ("torchtitan (FSDP2)", "ring attention (p2p)", "p2p"),
    ("torchtitan (FSDP2)", "CP: ring attention", "p2p"),
    ("torchtitan (FSDP2)", "p2p ring", "p2p"),
    ("torchtitan (FSDP2)", "context_parallel_rotate_method = 'alltoall'", "p2p"),  # a ring shift
    ("torchtitan (FSDP2)", "DeepSpeed-Ulysses sequence parallel", None),
    ("Megatron-LM", "TP ring all-reduce", "p2p"),
    ("Megatron-Bridge", "cp_comm_type a2a", "a2a"),
    # Transformer Engine's all-gather, not overlapped: TE's name and Megatron-LM's help's
    ("Megatron-LM", "cp_comm_type: 'allgather'", "all_gather"),
    ("NeMo 2.0", "cp_comm_type=all_gather", "all_gather"),
    ("", "cp_comm_type all_gather", "all_gather"),       # the session's own terms
    ("", "cp_comm_type allgather", None),                # ... where allgather is PyTorch's
    ("Megatron-LM", "hierarchical CP, cp_comm_type a2a+p2p", "no sizes"),
    ("Megatron-LM", "cp_comm_type a2a+p2p, hierarchical_context_parallel_sizes [2, 4]",
     ("a2a+p2p", 2)),
    ("Megatron-LM", "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 2",
     ("a2a+p2p", 4)),
    ("NeMo", "cp_comm_type=a2a+p2p (a2a inside the node, p2p ring across nodes)", ("a2a+p2p", 4)),
    ("Megatron-LM", "DeepSpeed-Ulysses sequence parallel", "a2a"),
    ("Megatron-LM", "no Ulysses; ring attention", "p2p"),
    ("Megatron-Core", "Ulysses was not used", "p2p"),
    ("Megatron-Core", "unlike Ulysses, CP here uses ring attention", "p2p"),
    ("Megatron-Core", "CP via ring attention; Ulysses (not used)", "p2p"),
    ("Megatron-Core", "context parallel: all-to-all (a2a)", "a2a"),
    ("Megatron-Core", "no all-to-all CP", "p2p"),
    ("Megatron-LM", "cp_comm_type a2a+p2p, hierarchical_context_parallel_sizes [2, 2]", "no sizes"),
    ("Meta (Llama 3 paper)", "CP all-gathers K/V, then local attention", "all_gather"),
    ("Meta (Llama 3 paper)", "", None),
    ("Megatron-LM", "all-gather of K and V across the context-parallel ranks", "all_gather"),
    ("Megatron-LM", "no all-gather CP; ring attention", "p2p"),
    # all-gathers of weights are not context parallelism's; negated or contrasted mentions
    # are not used; TE's own spelling; K/V named first (tester)
    ("Megatron-LM", "context parallel 2, params all-gathered by FSDP", "p2p"),
    ("Megatron-Bridge (Megatron-Core)", "CP=2 with FSDP all-gather of params", "p2p"),
    ("NeMo", "CP 2, ZeRO all-gather of params overlapped", "p2p"),
    ("Megatron-LM", "fp8 param all-gather, CP 2", "p2p"),
    ("Megatron-LM", "the all-gather CP from Llama 3 was not used", "p2p"),
    ("Megatron-LM", "all-gather CP turned off; ring", "p2p"),
    ("Megatron-LM", "unlike Llama 3's all-gather CP, this uses the ring", "p2p"),
    ("Megatron-LM", "ring attention; all-gather of K/V", None),   # both named: refused
    ("Megatron-LM", "all-gather CP overlapped with compute", None),  # not TE's exchange
    ("Megatron-LM", "CP uses all_gather", "all_gather"),
    ("Megatron-LM", "context_parallel=2 via all_gather", "all_gather"),
    ("Megatron-LM", "K/V are all-gathered (Llama 3 style)", "all_gather"),
    ("torchtitan (FSDP2)", "CP without all-gather", "p2p"),
    ("Megatron-LM", "cp_comm_type=['p2p','a2a']", None),  # a per-layer list naming a2a
    ("Megatron-LM", "cp_comm_type=['p2p','p2p']", "p2p"),
    ("torchtitan (FSDP2)", "CP all-gathers K/V once per pass", "allgather"),
    ("torchtitan (FSDP2)", "CP is not a ring; K/V all-gathered", "allgather"),
])
def test_context_parallel_exchange_of_a_row(framework, notes, expect):
    """The ring (Megatron-Core's p2p, PyTorch's alltoall rotation), PyTorch context_parallel's
    overlapped all-gather (torchtitan's default) and Megatron-Core's all-to-all exchanges (a2a,
    Ulysses; a2a+p2p with its group size, from the notes' hierarchical sizes or "a2a inside the
    node": 4 cp ranks of a node here) are modelled; another exchange named in the notes, or
    another framework's CP not said to be a ring, refuses the row by name."""
    from core.accuracy.validate import _check_cp_comm, _Row
    row = _Row()
    got = _check_cp_comm(framework, notes, row, node_cp=4, cp=8)
    if expect == "no sizes":
        assert row.causes == ["context parallelism a2a+p2p without its group sizes"]
        return
    assert row.causes == ([] if expect else [_CP_OTHER])
    if expect:
        assert got == (expect if isinstance(expect, tuple) else (expect, None))
        assert ("torchtitan-cp-allgather" in _names(row)) == (expect == "allgather")
        assert ("cp-all-gather-exposed" in _names(row)) == (expect == "all_gather")
        kind = got[0]
        assert bool({"cp-comm-type-from-notes", "cp-ulysses-a2a"} & _names(row)) == \
            (kind in ("a2a", "a2a+p2p"))


def test_context_parallel_of_torchtitan_is_the_allgather_and_of_megatron_the_ring(published,
                                                                                   tmp_path):
    """End to end: a torchtitan row at cp = 2 is predicted with PyTorch's all-gather exchange,
    the same row from Meta's framework is refused, from Megatron-LM predicted with the ring."""
    raw, _ = published
    tt = dict(raw[33], context_parallel="2", data_parallel="16")  # row 34: 32 H200, torchtitan
    meta = dict(tt, framework="Meta internal (PyTorch)")
    mg = dict(tt, framework="Megatron-LM", recompute="selective", notes="")
    ms = read_measurements(_write_rows(tmp_path / "cp.csv", raw, tt, meta, mg))
    assert not ms[0].skip_reason and ms[0].session.plan.cp_comm_type == "allgather"
    assert ms[1].skip_causes == [_CP_OTHER] and "does not say it is a ring" in ms[1].skip_reason
    assert not ms[2].skip_reason and ms[2].session.plan.cp_comm_type == "p2p"
    from core.sim.simulate import simulate
    assert 0 < simulate(ms[0].session).report.iteration_time_s < float("inf")
    assert 0 < simulate(ms[2].session).report.iteration_time_s < float("inf")


def test_validate_json_prints_each_row_with_its_assumptions(published, capsys):
    assert main(["validate", str(PUBLISHED), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 43 and out["n"] + out["skipped"] == 43
    r2 = out["rows"][1]
    assert r2["gpu"] == "H100-SXM5-80GB" and r2["kind"] == "dense" and r2["precision"] == "fp8"
    assert any(a.startswith("bridge-perf-recipe:") and "llama3_70b_pretrain_64gpu_h100_fp8cs_config"
               in a for a in r2["assumptions"])
    assert set(out["by_group"]) >= {"gpu", "kind", "precision"}
    # the memory model against the runs: each predicted row's need and its GPU's capacity
    from core.sim.simulate import stage_memory
    from core.accuracy.validate import row_memory
    need, capacity = row_memory(published[1][1])
    assert need == max(x.total_bytes for x in stage_memory(published[1][1].session))
    assert r2["memory_need_gib"] == pytest.approx(need / 2**30)
    assert r2["memory_capacity_gib"] == pytest.approx(capacity / 2**30) == 80.0
    assert all(r["memory_need_gib"] is None for r in out["rows"] if r["predicted_s"] is None)


def test_cross_validate_with_fewer_rows_than_folds_is_leave_one_out(tmp_path, capsys):
    """Three usable rows and --cross-validate 5: three folds, said on stderr; one row: refused."""
    from tests.test_accuracy import MODERN_HEADER, _modern_row
    path = tmp_path / "three.csv"
    path.write_text(MODERN_HEADER + "\n" + "\n".join(
        _modern_row(measured_iteration_time_s=t, micro_batch_size=b, global_batch_size=64)
        for t, b in ((1.0, 1), (1.1, 2), (1.3, 4))) + "\n")
    assert main(["validate", str(path), "--cross-validate", "5", "--json"]) == 0
    captured = capsys.readouterr()
    assert "5 folds asked, 3 usable rows: 3 folds (leave-one-out)" in captured.err
    doc = json.loads(captured.out)
    assert doc["n"] == 3 and doc["cross_validated_folds"] == 3
    one = tmp_path / "one.csv"
    one.write_text(MODERN_HEADER + "\n" + _modern_row() + "\n")
    assert main(["validate", str(one), "--cross-validate", "5"]) == 2


def test_bridge_perf_recipes_give_the_settings_the_summary_leaves_out(published, tmp_path):
    """Megatron-Bridge summary rows that match a Bridge 0.6.2 perf recipe on every key field but
    the global batch take its recomputation, dispatcher and overlaps (core.accuracy.bridge_recipes); a
    row of the same model whose layout differs matches nothing and keeps the general
    assumptions; what a recipe runs that is not modelled refuses the row by name."""
    raw, ms = published

    def recipe(row):
        return [a for a in ms[row - 1].assumptions if a.startswith("bridge-perf-recipe:")]

    matched = {r for r in range(1, 44) if recipe(r)}
    assert matched == {1, 2, 3, 4, 6, 7, 9, 12, 13, 16, 17, 18, 19, 20, 21}
    q235 = ms[5].session.plan  # row 6: qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config
    assert "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config" in recipe(6)[0]
    assert (q235.moe_token_dispatcher_type, q235.overlap_moe_expert_parallel_comm,
            q235.delay_wgrad_compute, q235.tp_comm_overlap, q235.recompute) == (
                "alltoall", True, True, False, "none")
    # row 7: the same recipe at global batch 2048 (25.11): the batch is an override, the
    # recipe's settings hold and the assumption names both batches
    old = ms[6].session.plan
    assert (old.overlap_moe_expert_parallel_comm, old.delay_wgrad_compute, old.tp_comm_overlap,
            old.global_batch_size) == (True, True, False, 2048)
    assert "bridge-tp-comm-overlap" not in _names(ms[6])
    assert "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config" in recipe(7)[0]
    assert "global batch 2048 in the row, 8192 in the recipe" in recipe(7)[0]
    assert "global batch" not in recipe(6)[0].split("(qwen3")[1]
    # row 5: Qwen3-30B-A3B at another layout (p 2, v 24, ep 8, micro-batch 2): no recipe, but
    # both H100 FP8 recipes of the model dispatch with flex and overlap no expert all-to-all
    assert not recipe(5) and not ms[4].session.plan.overlap_moe_expert_parallel_comm
    assert ms[4].session.plan.moe_token_dispatcher_type == "flex"
    assert ("dispatcher flex, recompute none, overlap_grad_reduce True, overlap_param_gather True: "
            "all 2 of qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config") \
        in next(a for a in ms[4].assumptions if a.startswith("bridge-perf-recipe-family"))
    assert ms[3].session.plan.moe_token_dispatcher_type == "flex"  # row 4: HybridEP
    # every Bridge row: _benchmark_common's Transformer Engine cross-entropy; others: Megatron's
    for m in ms:
        bridge = "Bridge" in raw[m.row - 1]["framework"]
        assert m.session.plan.cross_entropy_loss_fusion is bridge, m.row
        assert ("bridge-perf-te-cross-entropy" in _names(m)) is bridge, m.row
    # row 11 (DeepSeek-V3 on B200, EP 32 against its recipe's 8): no recipe, but the deepseek_v3
    # base recipe's HybridEP; a Qwen3 row without a recipe keeps alltoall
    assert ms[10].session.plan.moe_token_dispatcher_type == "flex" and not recipe(11)
    assert "bridge-perf-recipe-family" in _names(ms[10])
    # row 15 (B200 Qwen3-235B MXFP8, v 2): of the model's two B200 MXFP8 recipes the 256-GPU one
    # runs FP8 attention (refused, not family): the 64-GPU recipe's alltoall
    assert ms[14].session.plan.moe_token_dispatcher_type == "alltoall" and not recipe(15)
    assert "dispatcher alltoall" in next(a for a in ms[14].assumptions
                                         if a.startswith("bridge-perf-recipe-family"))
    ds = ms[18].session  # row 19: DeepSeek-V3 on GB200, MXFP8
    assert (ds.plan.recompute, ds.plan.recompute_modules, ds.model.mtp_num_layers,
            ds.plan.overlap_moe_expert_parallel_comm, ds.plan.moe_token_dispatcher_type) == (
                "selective", "mla_up_proj", 1, True, "flex")
    assert ms[19].session.model.mtp_num_layers == 0  # row 20 states "w/o MTP": the row wins
    gpt = ms[20].session.plan  # row 21: GPT-OSS on GB200
    assert (gpt.recompute, gpt.recompute_modules, gpt.overlap_moe_expert_parallel_comm) == (
        "selective", "layernorm,moe_act", True)
    assert ms[12].skip_causes == ["FP8 attention (fp8_dot_product_attention)"]  # row 13
    for r in (1, 2, 3, 4, 6, 9, 12, 16, 18, 19, 20, 21):
        assert not ms[r - 1].skip_reason, (r, ms[r - 1].skip_reason)
    # the same settings in another framework's row: no recipe
    path = _write_rows(tmp_path / "tt.csv", raw, {**raw[5], "framework": "torchtitan",
                                                    "recompute": "none"})
    (m,) = read_measurements(path)
    assert "bridge-perf-recipe" not in _names(m)
    assert not m.session.plan.overlap_moe_expert_parallel_comm


@pytest.mark.parametrize("label, framework, recompute, layers, cause", [
    ("full (uniform, 1 layer)", "NeMo", "full", None, None),
    ("full, uniform, recompute_num_layers=4", "Megatron-LM", "full", None, None),
    ("full (block, 4 layers)", "Megatron-LM", "full", 4, None),
    ("full block num_layers=2", "Megatron-LM", "full", 2, None),
    ("full (block)", "Megatron-LM", "full", None, "recompute"),  # how many: not stated
    ("full (20 layers)", "Megatron-LM", "full", None, "recompute"),  # block or uniform?
    ("full (every other layer)", "torchtitan", "full", None, "recompute"),
    ("selective (op)", "torchtitan", "selective_op", None, None),
    ("selective (2)", "torchtitan", "full", None, "selective recomputation (other than Megatron's)"),
])
def test_recompute_labels_naming_megatrons_method_or_torchtitans_option(label, framework, recompute,
                                                                        layers, cause):
    """Megatron's --recompute-method in a label: uniform is every layer (full), block N the first
    N layers of each stage (plan.recompute_num_layers); what does not say how many is refused;
    torchtitan's selective option 'op' is per-op checkpointing, a layer count is not modelled."""
    from core.accuracy.validate import _recompute_policy, _Row
    row, plan = _Row(), ParallelPlan()
    assert _recompute_policy(label, framework, "", row, plan) == recompute
    assert plan.recompute_num_layers == layers
    assert row.causes == ([cause] if cause else [])
    if "uniform" in label or "block" in label and cause is None:
        assert any(a.startswith("megatron-recompute-method:") for a in row.assumptions)


def test_block_recompute_label_reaches_the_plan(published, tmp_path):
    raw, _ = published
    # row 2: Llama3-70B, p=8 v=5: 40 model chunks of 2 layers; Megatron counts per chunk
    path = _write_rows(tmp_path / "block.csv", raw, {**raw[1], "recompute": "full (block, 1 layers)"})
    (m,) = read_measurements(path)
    assert not m.skip_reason, m.skip_reason
    assert (m.session.plan.recompute, m.session.plan.recompute_num_layers) == ("full", 1)
    assert any("block, 1 layers per model chunk" in a for a in m.assumptions)
    # a count that reaches the chunk (2) or passes it (4, a per-stage reading; a stage holds
    # 10) recomputes every layer, as Megatron runs it: predicted, not refused
    for n in (2, 4):
        path = _write_rows(tmp_path / "block.csv", raw, {**raw[1], "recompute": f"full (block, {n} layers)"})
        (m,) = read_measurements(path)
        assert not m.skip_reason, m.skip_reason
        assert (m.session.plan.recompute, m.session.plan.recompute_num_layers) == ("full", None)
        assert [a for a in m.assumptions if a.startswith("megatron-recompute-method:")][0].endswith(
            f"(block, {n} layers: at least the largest model chunk, every layer)")


@pytest.mark.parametrize("cell, flag", [
    ("y", True), ("Yes", True), ("true", True), ("on", True), ("enabled", True), ("1", True),
    ("y (torchtitan TP plan shards norms/sequence)", True), ("y: HSDP", True),
    ("n", False), ("off", False), ("disabled", False), ("n/a (FSDP2)", False), ("0", False),
    ("", None), ("sometimes", None),
])
def test_yes_no_cells(cell, flag):
    assert _flag(cell) is flag


def test_nemo_rows_take_the_nemo_2_recipe_defaults(published, tmp_path):
    """A NeMo 2 row (not Megatron-Bridge) that leaves them unstated: the overlaps of NeMo's
    recipes, bf16 gradient reduction, FP8 parameter all-gather, a bare FP8 as delayed scaling
    (the performance scripts' --fp8_recipe ds) and, for a dense model with t > 1 and sequence
    parallelism, the TP communication overlap; one named assumption lists what it set."""
    raw, _ = published
    path = _write_rows(
        tmp_path / "nemo.csv", raw,
        {**raw[1], "framework": "NeMo 2.0 (Megatron-Core)", "precision": "fp8", "notes": ""},
        {**raw[1], "framework": "NeMo", "precision": "bf16", "notes": ""},
        {**raw[1], "framework": "NeMo", "precision": "mxfp8", "notes": ""})
    fp8, bf16, mx = read_measurements(path)
    pl = fp8.session.plan
    assert (pl.fp8_recipe, pl.overlap_grad_reduce, pl.overlap_param_gather, pl.grad_reduce_dtype,
            pl.fp8_param_gather, pl.tp_comm_overlap) == ("delayed", True, True, "bf16", True, True)
    assert "fp8-recipe-unstated" not in _names(fp8) and "bridge-perf-recipe" not in _names(fp8)
    (text,) = [a for a in fp8.assumptions if a.startswith("nemo-recipe-defaults:")]
    assert "(FP8 delayed scaling, overlap_grad_reduce, overlap_param_gather, Transformer " \
           "Engine's fused cross-entropy, gradients reduced in bf16, fp8_param_gather, " \
           "tp_comm_overlap)" in text
    assert (pl.cross_entropy_loss_fusion, pl.cross_entropy_fusion_impl) == (True, "te")
    assert (bf16.session.plan.precision, bf16.session.plan.fp8_param_gather) == ("bf16", False)
    assert mx.session.plan.fp8_recipe == "mxfp8" and not mx.session.plan.overlap_param_gather


@pytest.mark.parametrize("label, framework, layers, cause", [
    ("full (block, 0 layers)", "Megatron-LM", None, "recompute"),
    ("full (block, -2 layers)", "Megatron-LM", None, "recompute"),
    ("full (block, 4.5 layers)", "Megatron-LM", None, "recompute"),
    ("full (block, 1e1 layers)", "Megatron-LM", None, "recompute"),
    ("full (uniform, 1 layer, block)", "Megatron-LM", None, "recompute"),
    ("full (block, 4 layers)", "torchtitan", None, "recompute"),  # not torchtitan's words
    ("full (uniform)", "fms-fsdp", None, None),  # every layer, whatever the framework
    ("selective (op)", "Megatron-Bridge", None, "selective recomputation (other than Megatron's)"),
])
def test_recompute_labels_refused_rather_than_misread(label, framework, layers, cause):
    from core.accuracy.validate import _recompute_policy, _Row
    row, plan = _Row(), ParallelPlan()
    _recompute_policy(label, framework, "", row, plan)
    assert plan.recompute_num_layers == layers
    assert row.causes == ([cause] if cause else [])


@pytest.mark.parametrize("label, recipe", [
    ("fp8 (mxfp8)", "mxfp8"), ("FP8 (MXFP8 recipe)", "mxfp8"), ("fp8 (MX)", "mxfp8"),
    # Megatron-Bridge's own label: current scaling, whatever else the parenthesis mentions
    ("fp8 (label 'FP8' = per-tensor current-scaling FP8 alongside separate MXFP8 rows)",
     "tensorwise"),
])
def test_fp8_recipe_in_the_labels_parenthesis(label, recipe):
    from core.accuracy.validate import _precision_policy, _Row
    assert _precision_policy(label, _Row()) == ("fp8", recipe)


def test_an_empty_required_cell_is_named(published, tmp_path):
    """An empty time is taken from the row's throughput; without one the row is skipped
    naming the column, and the file's other rows are read."""
    raw, _ = published
    path = _write_rows(tmp_path / "empty.csv", raw, {**raw[1], "measured_iteration_time_s": ""},
                       {**raw[1], "measured_iteration_time_s": "", "tokens_per_s_per_gpu": ""},
                       raw[1])
    ms = read_measurements(path)
    assert ms[0].measured_s == pytest.approx(ms[2].measured_s, rel=1e-3)
    assert any(a.startswith("time-from-throughput") for a in ms[0].assumptions)
    assert ms[1].skip_reason.startswith("column 'measured_iteration_time_s' is empty; it is required")
    assert ms[2].skip_reason == ""


def test_deepseek_v3_rows_take_the_models_router_groups(published, tmp_path):
    """DeepSeek-V3 rows whose notes say nothing of router groups take the model's node-limited
    routing (config.json n_group 8, topk_group 4), which cuts the flex dispatcher's copies to
    other nodes; the notes' "no GQA, query_groups set = heads" is not about the router, and
    notes that name the router's groups leave them to the row."""
    raw, ms = published
    for r in (8, 11, 19, 20):
        m = ms[r - 1]
        assert "query_groups" in raw[r - 1]["notes"]
        assert (m.session.model.moe_router_num_groups, m.session.model.moe_router_group_topk) == (8, 4)
        assert "deepseek-v3-router-groups" in _names(m)
    # four B200 nodes (row 11, EP 32): 2.357 copies of a token leave its node, against 2.711
    # without the groups (core.model.model_math.flex_remote_node_copies)
    from core.model.model_math import flex_remote_node_copies
    assert flex_remote_node_copies(256, 8, 4, 8, 4) == pytest.approx(33 / 14)
    assert flex_remote_node_copies(256, 8, 4) == pytest.approx(2.71066, rel=1e-5)
    def with_notes(words):
        path = _write_rows(tmp_path / "g.csv", raw, {**raw[10], "notes": raw[10]["notes"] + "; " + words})
        return read_measurements(path)[0]

    # notes that give both numbers set them, whatever the model
    for words, groups in (("n_group 4, topk_group 2", (4, 2)), ("n_group=8 topk_group=4", (8, 4)),
                          ("--moe-router-num-groups 16 --moe-router-group-topk 4", (16, 4))):
        m = with_notes(words)
        assert (m.session.model.moe_router_num_groups, m.session.model.moe_router_group_topk) == groups
        assert "router-groups-from-notes" in _names(m) and "deepseek-v3-router-groups" not in _names(m)
        assert not m.skip_reason, m.skip_reason
    # notes that speak of router groups without both numbers: refused by name, not guessed
    for words in ("router groups not stated", "n_group 1", "topk-group 4",
                  "node-limited routing", "device-limited routing (M=3)", "routing groups 8"):
        m = with_notes(words)
        assert m.skip_causes == ["router groups"], words
        assert "deepseek-v3-router-groups" not in _names(m), words
    # other groups and limits are not the router's: the model's own groups
    for words in ("EP group limited to the NVLink domain", "NCCL process group limited to one node",
                  "HybridEP domain_group of 72 GPUs", "attention_groups = heads"):
        m = with_notes(words)
        assert m.session.model.moe_router_num_groups == 8 and "deepseek-v3-router-groups" in _names(m), words
    # the model's name however it is written
    path = _write_rows(tmp_path / "n.csv", raw, {**raw[10], "model_name": "DeepSeek V3"})
    (m,) = read_measurements(path)
    assert m.session.model.moe_router_num_groups == 8
    assert m.session.plan.moe_token_dispatcher_type == "flex"


def test_bridge_moe_rows_take_their_recipes_expert_tensor_parallel_size(published, tmp_path):
    """Megatron-Bridge's DeepSeek-V3 and Qwen3 MoE base recipes set expert_tensor_parallel_size=1:
    row 8 (DeepSeek-V3, t=2, ep=64 on 1,024 GPUs, where t*ep fits) takes 1, not Megatron-Core's
    default t; the same row from another framework keeps Megatron-Core's default."""
    raw, ms = published
    for r in (6, 7, 8):
        assert ms[r - 1].session.plan.expert_tensor_parallel == 1, r
        assert "bridge-moe-etp-1" in _names(ms[r - 1]), r
    path = _write_rows(tmp_path / "m.csv", raw, {**raw[7], "framework": "Megatron-LM",
                                                   "precision": "fp8"})
    (m,) = read_measurements(path)
    assert m.session.plan.expert_tensor_parallel is None and "etp-megatron-default" in _names(m)
    # a size the notes state wins over both
    for words in ("ETP 2", "expert_tensor_parallel_size=2", "--expert-tensor-parallel-size 2"):
        path = _write_rows(tmp_path / "e.csv", raw, {**raw[7], "precision": "fp8",
                                                       "notes": raw[7]["notes"] + "; " + words})
        (m,) = read_measurements(path)
        assert m.session.plan.expert_tensor_parallel == 2, words
        assert "etp-from-notes" in _names(m) and "bridge-moe-etp-1" not in _names(m), words
    # the model's name however it is written
    path = _write_rows(tmp_path / "s.csv", raw, {**raw[7], "model_name": "deepseek_v3", "precision": "fp8"})
    assert read_measurements(path)[0].session.plan.expert_tensor_parallel == 1


# --------------------------------------------------------------------------- other tables' spellings

def test_not_stated_numeric_cells_read_as_empty(published, tmp_path):
    """'n/a', 'none', '-' in a numeric cell are an empty cell (the column's default), never a
    broken file: a virtual-pipeline 'n/a' is no interleaving, a context-parallel '-' is 1."""
    raw, ms = published
    base = raw[36]  # row 37: fms-fsdp, Llama2-7B on 96 H100
    rows = [dict(base, virtual_pipeline_stages=x, context_parallel=y)
            for x, y in (("n/a", "-"), ("None", "n/a"), ("", ""), ("\u2014", "not stated"))]
    got = read_measurements(_write_rows(tmp_path / "na.csv", raw, *rows))
    assert [m.skip_reason for m in got] == [ms[36].skip_reason] * 4
    for m in got:
        assert m.session.plan.virtual_pipeline_stages in (None, 1)
        assert m.session.plan.context_parallel == 1
        assert m.session == got[2].session


@pytest.mark.parametrize("label, precision", [
    ("bf16-mixed", "bf16"), ("amp_bf16", "bf16"), ("BF16 AMP", "bf16"), ("bfloat16", "bf16"),
    ("fp16-mixed", "fp16"), ("bf16 mixed precision", "bf16"),
])
def test_precision_labels_of_other_tables(label, precision):
    from core.accuracy.validate import _precision_policy, _Row
    row = _Row()
    assert _precision_policy(label, row) == (precision, None) and not row.causes


@pytest.mark.parametrize("label", ["bf16-true", "pure bf16", "fp16-true"])
def test_pure_half_precision_is_refused(label):
    from core.accuracy.validate import _precision_policy, _Row
    row = _Row()
    _precision_policy(label, row)
    assert row.causes == ["precision"] and "FP32 master" in row.reasons[0]


def test_precision_label_naming_two_dtypes_is_refused():
    from core.accuracy.validate import _precision_policy, _Row
    row = _Row()
    _precision_policy("mixed (bfloat16 / float16)", row)
    assert row.causes == ["precision"]


@pytest.mark.parametrize("col, text, sharded", [
    ("fsdp", "FSDP2", True), ("fsdp", "FULL_SHARD", True), ("fsdp", "FSDP", True),
    ("fsdp", "Megatron-FSDP", True), ("fsdp", "ZeRO-3", True), ("fsdp", "shard_grad_op", None),
    ("distributed_optimizer", "ZeRO-1", True), ("distributed_optimizer", "zero1", True),
    ("distributed_optimizer", "ZeRO stage 1", True), ("distributed_optimizer", "ZeRO-2", None),
    # the scheme's name with a no is a no
    ("fsdp", "FSDP: no", False), ("fsdp", "FSDP off", False), ("fsdp", "fsdp disabled", False),
    ("fsdp", "ZeRO-3 (not used)", False), ("fsdp", "FSDP2 (full shard, no CPU offload)", True),
    ("distributed_optimizer", "distributed optimizer: no", False),
])
def test_sharding_columns_read_the_scheme_names(published, tmp_path, col, text, sharded):
    """fsdp and distributed_optimizer cells that name their scheme are a yes (ZeRO-3 / ZeRO-1);
    another scheme (ZeRO-2, SHARD_GRAD_OP) is refused as unreadable, never taken for one."""
    raw, _ = published
    other = "distributed_optimizer" if col == "fsdp" else "fsdp"
    r = dict(raw[36], **{col: text, other: "n"})
    m = read_measurements(_write_rows(tmp_path / "z.csv", raw, r))[0]
    if sharded:
        assert m.session.plan.zero_stage == (3 if col == "fsdp" else 1)
        assert f"unreadable {col}" not in m.skip_causes
    elif sharded is False:
        assert m.session.plan.zero_stage == 0 and f"unreadable {col}" not in m.skip_causes
    else:
        assert f"unreadable {col}" in m.skip_causes


def test_notes_name_the_alltoall_dispatcher_in_other_words(published, tmp_path):
    raw, ms = published
    base = raw[3]  # row 4: Qwen3-30B-A3B on 16 H100 (Bridge)
    rows = [dict(base, framework="Megatron-LM", notes=base["notes"] + "; " + extra)
            for extra in ("alltoall token dispatcher, grouped GEMM, dropless",
                          "--moe-token-dispatcher-type alltoall", "allgather token dispatcher")]
    got = read_measurements(_write_rows(tmp_path / "d.csv", raw, *rows))
    for m in got[:2]:
        assert "dispatcher-alltoall-from-notes" in _names(m)
        assert m.session.plan.moe_token_dispatcher_type == "alltoall"
    assert got[2].skip_causes == ["token dispatcher"]
    assert "'allgather token dispatcher'" in got[2].skip_reason


@pytest.mark.parametrize("notes, layers", [
    ("mtp_num_layers=1", 1), ("MTP 1 layer", 1), ("1 MTP layer", 1), ("MTP layers: 2", 2),
    ("with MTP (1 layer)", 1), ("no MTP", 0), ("w/o MTP", 0), ("without MTP", 0),
    ("trained with MTP", None), ("", None),
    ("2 MTP layers; no MTP loss logging", 2), ("MTP 0.3 loss weight", None), ("MTP: off", 0),
    ("w/o MTP layer", 0), ("mtp_num_layers=1; w/o MTP", -1), ("1 MTP layer; 2 MTP layers", -1),
])
def test_notes_mtp_layer_counts(notes, layers):
    from core.accuracy.validate import _notes_mtp_layers
    assert _notes_mtp_layers(notes) == layers


def test_mtp_count_from_notes_reaches_the_model_and_a_bare_mtp_is_refused(published, tmp_path):
    raw, ms = published
    base = raw[19]  # row 20: DeepSeek-V3 BF16 on GB200, "w/o MTP"
    notes = base["notes"].replace("w/o MTP", "")
    rows = [dict(base, notes=notes + "; MTP 1 layer"), dict(base, notes=notes + "; MTP")]
    got = read_measurements(_write_rows(tmp_path / "m.csv", raw, *rows))
    assert got[0].session.model.mtp_num_layers == 1 and "mtp-from-notes" in _names(got[0])
    assert "mtp-not-stated" not in _names(got[0])
    assert "multi-token prediction" in got[1].skip_causes


@pytest.mark.parametrize("notes, expect", [
    ("--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap",
     {"tp_comm_overlap": True, "overlap_grad_reduce": True, "overlap_param_gather": True}),
    ("tp_comm_overlap off", {"tp_comm_overlap": False}),
    ("no TP comm overlap; overlap_param_gather=False",
     {"tp_comm_overlap": False, "overlap_param_gather": False}),
    ("tp_comm_overlap off, overlap_grad_reduce on",
     {"tp_comm_overlap": False, "overlap_grad_reduce": True}),
    ("--overlap-param-gather-with-optimizer-step", {}),
    ("--no-overlap-grad-reduce", {"overlap_grad_reduce": False}),
    # a negation of another flag in the same clause is that flag's
    ("--tp-comm-overlap --overlap-grad-reduce --no-gradient-accumulation-fusion",
     {"tp_comm_overlap": True, "overlap_grad_reduce": True}),
    ("tp_comm_overlap is on (not overlap_param_gather)",
     {"tp_comm_overlap": True, "overlap_param_gather": False}),
    ("overlap_grad_reduce: disabled", {"overlap_grad_reduce": False}),
])
def test_notes_overlaps(notes, expect):
    from core.accuracy.validate import _notes_overlaps
    assert _notes_overlaps(notes) == (expect, [])


def test_notes_stating_an_overlap_both_on_and_off_are_refused(published, tmp_path):
    from core.accuracy.validate import _notes_overlaps
    assert _notes_overlaps("tp_comm_overlap=True; tp_comm_overlap=False") == ({}, ["tp_comm_overlap"])
    raw, _ = published
    r = dict(raw[1], notes="tp_comm_overlap=True; tp_comm_overlap=False")
    (m,) = read_measurements(_write_rows(tmp_path / "t.csv", raw, r))
    assert m.skip_causes == ["overlaps stated both on and off"]


def test_overlaps_in_notes_win_over_recipes_and_defaults(published, tmp_path):
    """Row 2 (Bridge, t=4 with SP: its recipe overlaps TP communication): notes that switch the
    TP overlap and the parameter all-gather overlap off win, the assumption says so, and the
    prediction is slower; the same notes on a NeMo row drop those from its NeMo defaults."""
    raw, ms = published
    off = "tp_comm_overlap off; overlap_param_gather=False"
    rows = [dict(raw[1], notes=raw[1]["notes"] + "; " + off),
            dict(raw[1], framework="NeMo 2.0 (Megatron-Core)", notes=off)]
    got = read_measurements(_write_rows(tmp_path / "o.csv", raw, *rows))
    for m in got:
        pl = m.session.plan
        assert not pl.tp_comm_overlap and not pl.overlap_param_gather and pl.overlap_grad_reduce
        assert "overlaps-from-notes" in _names(m)
    assert ms[1].session.plan.tp_comm_overlap
    head = "nemo-recipe-defaults: " + ASSUMPTIONS["nemo-recipe-defaults"]
    details = [a[len(head):] for a in got[1].assumptions if a.startswith(head)]
    assert details and all("tp_comm_overlap" not in d and "overlap_param_gather" not in d
                           for d in details)  # what the notes switch off is not a default
    from core.sim.simulate import simulate
    assert (simulate(got[0].session).report.iteration_time_s
            > simulate(ms[1].session).report.iteration_time_s)


def test_bare_fp8_of_megatron_lm_is_delayed_scaling(published, tmp_path):
    """Megatron-LM's own --fp8-recipe default is delayed scaling; Bridge's 'FP8' label is
    current scaling (the label's parenthesis), NeMo's bare FP8 delayed (its perf scripts)."""
    raw, _ = published
    rows = [dict(raw[1], framework=fw, precision="fp8", notes="")
            for fw in ("Megatron-LM core_r0.10", "Megatron-Bridge (Megatron-Core)", "torchtitan")]
    got = read_measurements(_write_rows(tmp_path / "f.csv", raw, *rows))
    assert got[0].session.plan.fp8_recipe == "delayed" and "fp8-megatron-delayed" in _names(got[0])
    assert got[1].session.plan.fp8_recipe == "tensorwise" and "fp8-recipe-unstated" in _names(got[1])
    assert got[2].session.plan.fp8_recipe == "tensorwise"


def test_attention_kernel_of_other_model_families(published, tmp_path):
    """A GeLU + LayerNorm row runs fused attention in a modern framework or when its notes say
    so (named assumptions), the session's unfused kernel otherwise (named too)."""
    raw, _ = published
    gpt = dict(raw[36], activation="gelu", normalization="layernorm", num_query_groups="",
               recompute="full")
    rows = [dict(gpt, framework="NeMo 24.09", notes=""),
            dict(gpt, framework="Megatron-LM", notes="--use-flash-attn"),
            dict(gpt, framework="Megatron-LM", notes=""),
            dict(gpt, framework="Megatron-LM", notes="no flash attention (unfused)"),
            dict(gpt, framework="Megatron-LM", notes="attention_backend=unfused")]
    got = read_measurements(_write_rows(tmp_path / "a.csv", raw, *rows))
    assert [m.session.model.attention_kernel for m in got] == [
        "flash", "flash", "unfused", "unfused", "unfused"]
    assert "fused-attention-framework" in _names(got[0])
    assert "attention-kernel-from-notes" in _names(got[1])
    assert "attention-unfused-default" in _names(got[2])


@pytest.mark.parametrize("notes, bias", [
    ("QKV bias (Qwen2-style)", True), ("no QKV bias", False), ("qkv_bias=False", False),
    ("biases in the QKV projection", True), ("", False)])
def test_qkv_bias_from_notes(published, tmp_path, notes, bias):
    raw, _ = published
    (m,) = read_measurements(_write_rows(tmp_path / "q.csv", raw, dict(raw[36], notes=notes)))
    assert m.session.model.add_qkv_bias is bias
    assert ("qkv-bias-from-notes" in _names(m)) is bias


@pytest.mark.parametrize("kind, size", [("allgather", None), ("a2a", None), ("a2a+p2p", 2),
                                        ("all_gather", None)])
def test_context_parallel_exchanges_round_trip_through_the_columns(tmp_path, kind, size):
    """published_columns names PyTorch's all-gather exchange and Megatron's all-to-all ones
    in the notes; read back, the session has them again."""
    from tests.test_context_parallel import _session
    s = _session(seq=131072, cp=4, t=2, gpu="H100-SXM5-80GB", cp_comm_type=kind,
                 cp_a2a_size=size)
    cols = {**published_columns(s), "recompute": "selective", "measured_iteration_time_s": 10}
    path = tmp_path / "rt.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(cols))
        w.writeheader()
        w.writerow(cols)
    (m,) = read_measurements(path)
    assert not m.skip_reason and m.session.plan.cp_comm_type == kind
    assert m.session.plan == s.plan


@pytest.mark.parametrize("notes, said", [
    ("recompute: selective, per-op SAC", "selective (per-op SAC)"),
    ("activation checkpointing: op-level SAC", "selective (per-op SAC)"),
    ("op-level SAC", "selective (per-op SAC)"),
    ("full activation checkpointing was too slow, so per-op SAC", "selective (per-op SAC)"),
    ("recompute: selective (core_attn)", "selective (core_attn)"),
])
def test_notes_naming_per_op_sac_fill_the_recompute_cell_with_it(notes, said):
    """Per-op selective checkpointing named in the notes is read as such (tester: "recompute:
    selective, per-op SAC" was Megatron's selective, "op-level SAC" nothing at all); a Megatron
    row then refuses it, a torchtitan one predicts selective_op."""
    from core.accuracy.validate import _notes_recompute, _recompute_policy, _Row
    assert _notes_recompute(notes) == said
    if "per-op" in said:
        row = _Row()
        _recompute_policy(said, "Megatron-LM", notes, row)
        assert row.causes == ["selective recomputation (other than Megatron's)"]
        assert _recompute_policy(said, "torchtitan", notes, _Row()) == "selective_op"
