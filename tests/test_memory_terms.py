"""Each term of the per-GPU memory model against its closed form and source (docs/simulator.md,
"Memory model"), and the memory benchmark's figures on ../shared/data/measured-memory."""

from __future__ import annotations

import dataclasses

import pytest

from core.model import model_math as mm
from core import schedules
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.sim.report import MEMORY_SCALES, StageMemory
from tests.conftest import ROOT, load_module

MiB, GiB = 2.0 ** 20, 2.0 ** 30
MEASURED = ROOT.parent / "shared" / "data" / "measured-memory" / "measured_memory.csv"


def _plan(**kw) -> ParallelPlan:
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                global_batch_size=8, recompute="none")
    return ParallelPlan(**{**base, **kw})


@pytest.mark.parametrize("precision, grad, zero, d, want", [
    # Megatron-LM docs, distributed optimizer page: bytes per parameter
    ("bf16", None, 0, 8, 18), ("bf16", None, 1, 8, 6 + 12 / 8),
    ("fp16", None, 0, 8, 20), ("fp16", None, 1, 8, 4 + 16 / 8),
    ("fp32", None, 0, 8, 16), ("fp32", None, 1, 8, 8 + 8 / 8),
    # fp16 with --accumulate-allreduce-grads-in-fp32: fp32 main gradients, as bf16
    ("fp16", "fp32", 0, 8, 18), ("fp16", "fp32", 1, 8, 6 + 12 / 8),
])
def test_bytes_per_parameter_as_megatrons_table(precision, grad, zero, d, want):
    plan = _plan(precision=precision, grad_reduce_dtype=grad, zero_stage=zero, data_parallel=d)
    assert sum(mm.bytes_per_parameter(plan)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("p, v, m", [(2, 2, 2), (2, 5, 8), (4, 2, 8), (4, 8, 4), (4, 8, 8),
                                     (8, 5, 8), (8, 5, 32), (4, 3, 12)])
def test_interleaved_in_flight_is_megatron_cores_warm_up(p, v, m):
    """Stage i holds (warm-up + 1) chunks of 1/v of its layers, warm-up (p-i-1)*2 + (v-1)*p
    capped at m*v (Megatron-Core get_pp_rank_microbatches); all m*v when the cap binds."""
    got = schedules.in_flight_all("interleaved", p, m, v)
    for i in range(p):
        warm = min((p - i - 1) * 2 + (v - 1) * p, m * v)
        assert got[i] == pytest.approx(min(warm + 1, m * v) / v, rel=1e-12)


def test_virtual_stages_lower_the_first_stage_only_to_p_plus_a_share():
    """Interleaving does not cut the activations: stage 0 holds (2(p-1) + (v-1)p + 1)/v
    micro-batches of its layers, p + (p-1)/v at large m, against 1F1B's p."""
    p, m = 4, 16
    assert schedules.in_flight_all("1f1b", p, m)[0] == p
    for v in (2, 4):
        assert schedules.in_flight_all("interleaved", p, m, v)[0] == pytest.approx(
            (2 * (p - 1) + (v - 1) * p + 1) / v, rel=1e-12)


def test_process_terms_closed_forms():
    tensors = [10 * GiB, 20 * GiB]
    plan = _plan(tensor_parallel=2, pipeline_parallel=2, data_parallel=4)
    terms = mm.process_memory_terms(plan, tensors)
    assert list(terms["workspace"]) == [64 * MiB] * 2  # PyTorch's and TE's 32 MiB (Hopper+)
    assert terms["allocator_reserve"] == pytest.approx(
        [mm.ALLOCATOR_RESERVE_FRACTION * (x + 64 * MiB) for x in tensors], rel=1e-12)
    assert list(terms["cuda_context"]) == [0.75 * GiB] * 2
    # tp, dp, pp and the model-parallel group: 4 communicators x 16 channels x 2 peers x 4 MiB
    assert mm.nccl_communicators(plan) == 4
    assert list(terms["nccl_buffers"]) == [4 * 16 * 2 * 4 * MiB] * 2


@pytest.mark.parametrize("kw, n", [
    (dict(), 0), (dict(data_parallel=8), 1), (dict(tensor_parallel=8), 1),
    (dict(tensor_parallel=2, data_parallel=2), 2),
    (dict(pipeline_parallel=2), 2),  # pp and the model-parallel group (t*p = 2)
    (dict(data_parallel=2, context_parallel=2), 2),  # cp, and dp*cp
    (dict(data_parallel=4, expert_parallel=4), 2),  # dp, ep: every rank holds other experts
    (dict(data_parallel=8, expert_parallel=4), 3),  # + the experts' data-parallel group (2)
    (dict(tensor_parallel=2, data_parallel=4, expert_parallel=4, expert_tensor_parallel=1),
     4),  # tp, dp, ep, and expert dp t*d/(etp*ep) = 2
])
def test_nccl_communicators(kw, n):
    assert mm.nccl_communicators(_plan(**kw)) == n


def test_stage_memory_scales_nest():
    sm = StageMemory(0, 1.0, 2.0, 3.0, 4.0, workspace_bytes=5.0, allocator_reserve_bytes=6.0,
                     cuda_context_bytes=7.0, nccl_buffer_bytes=8.0)
    assert [sm.at_scale(s) for s in MEMORY_SCALES] == [15.0, 21.0, 36.0]
    assert sm.total_bytes == 36.0  # the whole process: what the fit verdict uses
    with pytest.raises(ValueError):
        sm.at_scale("rss")


def test_old_reports_load_without_the_process_terms():
    old = {"stage": 0, "weights_bytes": 1.0, "gradients_bytes": 2.0, "optimizer_bytes": 3.0,
           "activations_bytes": 4.0}
    sm = StageMemory(**old)
    assert sm.total_bytes == sm.allocated_bytes == 10.0


def test_stage_memory_carries_the_terms_and_the_arrays_agree():
    model = ModelConfig(num_layers=8, hidden_size=1024, num_attention_heads=8, seq_length=2048)
    plan = _plan(pipeline_parallel=2, tensor_parallel=2, data_parallel=2)
    arrays = mm.stage_memory_arrays(model, plan)
    w, g, o, a = arrays  # unpacks as the four tensor arrays
    for i, sm in enumerate(mm.stage_memory(model, plan)):
        assert sm.workspace_bytes == mm.GEMM_WORKSPACE_BYTES
        assert sm.nccl_buffer_bytes == mm.nccl_buffer_bytes(plan)
        assert sm.total_bytes == pytest.approx(w[i] + g[i] + o[i] + a[i]
                                               + arrays.overhead_bytes[i], rel=1e-12)


def test_memory_verdict_arrays_counts_the_process_terms():
    from core.sim.simulate import memory_verdict_arrays
    model = ModelConfig(num_layers=8, hidden_size=1024, num_attention_heads=8, seq_length=2048)
    plan = _plan(pipeline_parallel=2, data_parallel=2)
    arrays = mm.stage_memory_arrays(model, plan)
    need, _, _ = memory_verdict_arrays(arrays, 80 * GiB)
    assert need == pytest.approx(max(sm.total_bytes for sm in mm.stage_memory(model, plan)),
                                 rel=1e-12)


def _bench_memory():
    """benchmarks/bench_memory.py as a module."""
    return load_module(ROOT / "benchmarks" / "bench_memory.py")


def test_bench_memory_within_five_percent_median_and_every_run_fits():
    """benchmarks/bench_memory.py on the measured peaks: median error at most 5 % on
    max_allocated and max_reserved (the issue's target), every row within 3 % (2.2 and 2.6 %
    at most with Transformer Engine's placeholder weight gradients; 7.9 and 10.2 % without,
    the 405B-shape rows short by one layer's linear weights in BF16), and every measured run
    (all ran) judged to fit."""
    if not MEASURED.exists():
        pytest.skip(f"shared data not present: {MEASURED}")
    bench = _bench_memory()
    figures = bench.figures(MEASURED)
    assert figures["verdicts_right"] == figures["rows"] == 20
    for scale in ("max_allocated", "max_reserved"):
        assert figures["median_abs_error_percent"][scale] <= 5.0
        assert max(map(abs, figures["errors_percent"][scale])) <= 3.0


def test_the_fp32_gradient_copy_is_a_step_transient():
    """Gradients reduced in bf16 get an fp32 copy in the optimizer step (Megatron-Core 0.16.1
    distrib_optimizer.py:2419 ``shard_main_param.grad = shard_model_grad.float()``), freed by
    the next ``zero_grad`` before the forward (distrib_optimizer.py:2286-2298): the peak holds
    the larger of it and the activations. 1,024-wide, 4 layers, vocabulary 1,024, 16 tokens,
    t = p = 1, ZeRO-1 over d = 2: the copy is 4/2 = 2 bytes per parameter, far above the
    activations, so the optimizer term is 12/2 + 2 bytes per parameter less the activations
    (stage total = states + the copy); with 4,096 tokens the activations exceed the copy and
    the optimizer term is 12/2 bytes per parameter."""
    model = ModelConfig(num_layers=4, hidden_size=1024, num_attention_heads=8, seq_length=16,
                        vocab_size=1024)
    for seq, copy_wins in ((16, True), (4096, False)):
        m = dataclasses.replace(model, seq_length=seq)
        pl = _plan(grad_reduce_dtype="bf16", zero_stage=1, data_parallel=2, global_batch_size=2)
        assert mm.bytes_per_parameter(pl) == (2, 2, 8.0)  # 6 + 16/d: Megatron's table
        assert mm.grad_copy_bytes_per_parameter(pl) == 2.0
        n = float(mm.params_per_gpu(m, pl)[0])
        sm = mm.stage_memory(m, pl)[0]
        assert (2 * n < sm.activations_bytes) is not copy_wins
        want = 6 * n + (2 * n - sm.activations_bytes if copy_wins else 0.0)
        assert sm.optimizer_bytes == pytest.approx(want, rel=1e-12)
        # fp32 gradients are their own copy: nothing to leave out
        fp32 = _plan(zero_stage=1, data_parallel=2, global_batch_size=2)
        assert mm.grad_copy_bytes_per_parameter(fp32) == 0.0
        assert mm.stage_memory(m, fp32)[0].optimizer_bytes == pytest.approx(6 * n, rel=1e-12)


def test_the_shared_cases_memory_figures_hold():
    """benchmarks/data/memory_cases.csv: the cases' 18 bytes per parameter (bf16 with fp32 main
    gradients), 23.7 GB of model states for GPT-3 1.3B, 6 + 12/d = 7.5 with ZeRO-1 on 8, the
    search case's plan running and the Compare case's editor plan not fitting."""
    if not (ROOT.parent / "shared" / "cases" / "s3").exists():
        pytest.skip("shared cases not present")
    rows = _bench_memory().case_checks()
    assert len(rows) == 5
    assert [(r["case"], r["quantity"], r["modelled"]) for r in rows if not r["right"]] == []
    assert [r["modelled"] for r in rows[:3]] == ["18", "23.68", "7.5"]


def test_every_published_run_the_simulator_models_fits_or_is_tight():
    """The published modern runs all ran: bench_memory's verdict of each one the file does not
    skip says it fits or is tight (30 of 30; row 16, Llama 3.1 405B on GB200 with gradients
    reduced in bf16, tight: within the planner's margin of the GPU's memory, 181.3 GiB of
    186.0, once the fp32 gradient copy, which exists only in the optimizer step, no longer adds
    to the activations' peak; over the GPU's memory, 187.3 GiB, while it did)."""
    published = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"
    if not published.exists():
        pytest.skip(f"shared data not present: {published}")
    bench = _bench_memory()
    rows = bench.published_verdicts(published)
    modelled = [r for r in rows if not r["skip_reason"]]
    assert len(rows) == 43 and len(modelled) == 30
    assert [r["row"] for r in modelled if r["verdict"] == "does not fit"] == []
    row16 = next(r for r in rows if r["row"] == 16)
    assert row16["verdict"] == "tight"
    assert 0.9 * row16["capacity_gib"] < row16["need_gib"] < row16["capacity_gib"]


def test_fp8_copies_still_counted_in_the_weights():
    """The FP8 weight copies stay a weights term (not a process term): per-tensor scaling on
    Hopper, 2 bytes + scales per linear weight."""
    model = ModelConfig(num_layers=4, hidden_size=1024, num_attention_heads=8, seq_length=2048)
    bf16, fp8 = _plan(), _plan(precision="fp8")
    extra = mm.stage_memory(model, fp8)[0].weights_bytes - mm.stage_memory(model, bf16)[0].weights_bytes
    assert extra == pytest.approx(float(mm.fp8_weights_per_gpu(model, fp8)[0])
                                  * mm.fp8_weight_bytes_per_parameter("tensorwise", True), rel=1e-12)
    assert dataclasses.fields(StageMemory)[5].name == "workspace_bytes"


def test_zero3_gathers_the_largest_unit_the_stage_holds():
    """FSDP gathers whole wrapped modules (Megatron-LM's torch FSDP2: each TransformerLayer,
    the embedding and the output layer; torchtitan likewise): Mixtral 8x7B at t = ep = 1
    gathers its MoE layer with all 8 experts, 1,451.3 M parameters (attention 41.9 M, router
    and norms, 8 x 176.2 M experts), not the 218.1 M of its attention and one MLP; Llama 3
    8B's largest unit is its output layer with the final norm, V' h + h = 128,256 x 4,096 +
    4,096 = 525.3 M (torchtitan wraps the two together; its layers are 218.1 M). Under ZeRO-3 the weights add that unit in bf16 and the gradients in fp32."""
    from core.model.memory import fsdp_unit_parameters
    from core.plan.presets import MODEL_PRESETS
    mixtral, llama = MODEL_PRESETS["Mixtral 8x7B"], MODEL_PRESETS["Llama 3 8B"]
    plan = _plan(data_parallel=8, zero_stage=3, global_batch_size=8)
    moe = mm.moe_layer_parameters(mixtral)
    unit, _ = fsdp_unit_parameters(mixtral, plan)
    assert unit[0] == moe.sharded + moe.replicated + moe.experts
    assert unit[0] / 1e6 == pytest.approx(1451.3, abs=0.05)
    assert sum(mm.family_of(mixtral).layer_parameters(mixtral)) / 1e6 == pytest.approx(218.1, abs=0.05)
    out = 128_256 * 4_096 + 4_096
    unit, fp8 = fsdp_unit_parameters(llama, plan)
    assert unit[0] == out and fp8[0] == 0.0
    # two stages: the first holds the embedding, the last the output layer (and the norm)
    unit2, _ = fsdp_unit_parameters(llama, _plan(pipeline_parallel=2, zero_stage=3))
    assert unit2.tolist() == [128_256 * 4_096, out]
    # the weights and gradients terms carry it: 2 bytes gathered, 4 bytes of fp32 gradient
    from core.model.wgrad_buffers import weight_gradient_buffer_bytes
    z3 = mm.stage_memory(llama, plan)[0]
    n = float(mm.params_per_gpu(llama, plan)[0])
    assert z3.weights_bytes == pytest.approx(n * 2 / 8 + out * 2, rel=1e-12)
    assert z3.gradients_bytes == pytest.approx(
        n * 4 / 8 + out * 4 + float(weight_gradient_buffer_bytes(llama, plan)[0]), rel=1e-12)


def test_fp32_logits_are_their_own_fp32_copy():
    """The loss stage keeps the logits and their fp32 copy, s b V' (e + 4) bytes; in fp32 the
    cast returns the same tensor (``Tensor.float()`` of an fp32 tensor is itself), so 4 bytes
    per logit, not 8: seen as the activations' growth with the padded vocabulary."""
    model = ModelConfig(num_layers=2, hidden_size=1024, num_attention_heads=8, seq_length=2048,
                        vocab_size=32_000)
    wider = dataclasses.replace(model, vocab_size=64_000)
    tokens = 2048
    for precision, per_logit in (("bf16", 2 + 4), ("fp32", 4)):
        plan = _plan(precision=precision)
        grow = (mm.stage_memory(wider, plan)[0].activations_bytes
                - mm.stage_memory(model, plan)[0].activations_bytes)
        assert grow == pytest.approx(tokens * (64_000 - 32_000) * per_logit, rel=1e-12)


def test_loss_stage_holds_the_larger_of_logits_and_recompute_working_set():
    """Under full recomputation the micro-batch in its backward has freed its logits and their
    fp32 copy (the loss's and the output layer's backward run first) before its last layer runs
    again: the loss stage holds ``L ckpt + max(working, logits + final norm)`` (1F1B, one
    micro-batch in flight), not both; the final norm's input and output (``2 sbh e``) go with
    the logits, and this one-stage model's first stage adds the embedding's ids and dropout
    mask (``8 sb + sbh``, hidden_dropout 0.1), kept whatever runs again. Closed form from the
    per-layer terms; a small vocabulary (the working set larger) and a large one (the logits
    larger)."""
    from core.model.memory import activation_bytes_per_layer, stage_activation_bytes
    from core.plan.model_config import padded_vocab_size
    for vocab in (1_024, 256_000):
        model = ModelConfig(num_layers=4, hidden_size=1024, num_attention_heads=8,
                            seq_length=2048, vocab_size=vocab)
        plan = _plan(recompute="full", precision="bf16")
        ckpt = activation_bytes_per_layer(model, plan, "full")
        working = activation_bytes_per_layer(model, plan, "none")
        V = padded_vocab_size(vocab, 1)
        logits = 2048 * V * (2 + 4)
        norm = 2 * 2048 * 1024 * 2  # the final norm's input and output, BF16, no SP
        emb = 8 * 2048 + 2048 * 1024  # int64 ids and the 1-byte dropout mask
        got = float(stage_activation_bytes(model, plan)[0])
        assert (working > logits + norm) == (vocab == 1_024)
        assert got == pytest.approx(4 * ckpt + max(working, logits + norm) + emb, rel=1e-12)
        # without recomputation nothing runs again: the layers' activations and the logits
        kept = float(stage_activation_bytes(model, _plan(recompute="none"))[0])
        assert kept == pytest.approx(4 * working + logits + norm + emb, rel=1e-12)


def test_dropout_zero_keeps_no_masks():
    """Korthikanti et al. 2022 Table 2: a layer keeps ``sbh (10 + 24/t)`` bytes with sequence
    parallelism the ``10`` over t too; two of the ``10`` are the hidden dropout's masks (1 byte
    per element each), and the unfused core's ``5as/h`` holds its dropout mask and output
    (``3as/h``). At probability 0 PyTorch's dropout keeps no mask: ``8`` and ``2as/h``."""
    from core.model.layer import dense_activation_bytes_per_layer
    from core.plan.presets import MODEL_PRESETS
    gpt = dataclasses.replace(MODEL_PRESETS["GPT-3 1.3B"], attention_kernel="unfused")
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=1,
                        micro_batch_size=4, global_batch_size=4, sequence_parallel=True,
                        recompute="none", precision="bf16")
    s, b, h, a, t = 2048, 4, 2048, 16, 2
    assert (gpt.seq_length, gpt.hidden_size, gpt.num_attention_heads) == (s, h, a)
    sbh = s * b * h
    with_masks = dense_activation_bytes_per_layer(gpt, plan, "none")
    assert with_masks == pytest.approx(sbh / t * (10 + 24 + 5 * a * s / h))
    none = dense_activation_bytes_per_layer(
        dataclasses.replace(gpt, hidden_dropout=0.0, attention_dropout=0.0), plan, "none")
    assert none == pytest.approx(sbh / t * (8 + 24 + 2 * a * s / h))
    hidden_only = dense_activation_bytes_per_layer(
        dataclasses.replace(gpt, hidden_dropout=0.0), plan, "none")
    assert hidden_only == pytest.approx(sbh / t * (8 + 24 + 5 * a * s / h))
    # Llama-family presets (Megatron-Bridge sets both to 0) keep no masks; full recomputation
    # keeps only the layer input either way
    llama = MODEL_PRESETS["Llama 3 8B"]
    assert (llama.hidden_dropout, llama.attention_dropout) == (0.0, 0.0)
    full = dataclasses.replace(plan, recompute="full")
    assert dense_activation_bytes_per_layer(gpt, full, "full") == \
        dense_activation_bytes_per_layer(dataclasses.replace(gpt, hidden_dropout=0.0), full, "full")


def test_dropout_from_a_megatron_launch_and_back():
    """--hidden-dropout and --attention-dropout are read into the model and exported again
    (Megatron-LM's default, 0.1, is left out of the export)."""
    from core.io.megatron.from_session import export_arguments
    from core.io.megatron.launch import read_launch
    from core.io.megatron.to_session import session_from_launch
    base = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
            "--seq-length", "128", "--vocab-size", "1000", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--bf16"]

    def load(words):
        return session_from_launch(read_launch("\n".join(words) + "\n", "a.txt"),
                                   num_gpus=8).session
    s = load(base + ["--hidden-dropout", "0.0", "--attention-dropout", "0.05"])
    assert (s.model.hidden_dropout, s.model.attention_dropout) == (0.0, 0.05)
    words = export_arguments(s)
    assert words[words.index("--hidden-dropout") + 1] == "0.0"
    assert words[words.index("--attention-dropout") + 1] == "0.05"
    d = load(base)
    assert (d.model.hidden_dropout, d.model.attention_dropout) == (0.1, 0.1)
    assert "--hidden-dropout" not in export_arguments(d)
