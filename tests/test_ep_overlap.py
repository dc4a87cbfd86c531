"""Expert all-to-all overlap (``plan.overlap_moe_expert_parallel_comm``, Megatron-Core's
combined 1F1B): the pair's closed form against a two-stream reference, the simulated
iteration, memory, validation, sweeps and the Megatron import / export."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.model import model_math as mm
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.rules import ep_overlap_errors, inactive_fields, validate
from core.plan.session import Session
from core.sim.stages import ep_overlap_pair, stage_times
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.megatron.to_session import import_file
from core.sim.simulate import session_profile, simulate
from core.studies.sweep import SweepSpace, enumerate_plans
from tests.test_megatron_args import MIXTRAL_LAUNCH, _write
from tests.test_moe import MIXTRAL, _errors


def _session(overlap=True, gpu="H100-SXM5-80GB", gpus_per_node=8, **plan) -> Session:
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=16, micro_batch_size=1,
                global_batch_size=64, recompute="none", expert_parallel=8,
                overlap_moe_expert_parallel_comm=overlap)
    base.update(plan)
    return Session(MIXTRAL, ParallelPlan(**base), ClusterConfig(gpu=gpu, gpus_per_node=gpus_per_node))


# --------------------------------------------------------------------------- the pair

def _two_streams(f, b, wgrad=0.0) -> tuple[float, float, float]:
    """Reference: the eight nodes of Megatron-Core 0.19 ``TransformerLayerSchedulePlan.run``
    issued in its order on a computation and a communication stream, each starting when its
    stream is free and its pass's previous node has ended; the span, and how long each pass's
    all-to-alls run beyond the computation beside them."""
    af, df, mf, cf = f
    cb, mb, db, ab = b
    free = {"comp": 0.0, "comm": 0.0}
    end: dict[str, float] = {}

    def run(name, stream, dur, after=None):
        start = max(free[stream], end[after] if after else 0.0)
        end[name] = free[stream] = start + dur

    run("combine_bwd", "comm", cb)
    run("pre_fwd", "comp", af)
    run("mlp_bwd", "comp", mb - wgrad, "combine_bwd")  # with --delay-wgrad-compute: dgrad only
    run("dispatch_fwd", "comm", df, "pre_fwd")
    run("mlp_bwd_dw", "comp", wgrad, "mlp_bwd")        # mlp.backward_dw()
    run("dispatch_bwd", "comm", db, "mlp_bwd")
    run("mlp_fwd", "comp", mf, "dispatch_fwd")
    run("combine_fwd", "comm", cf, "mlp_fwd")
    run("pre_bwd", "comp", ab, "dispatch_bwd")
    return max(end.values()), end["pre_bwd"], end["combine_fwd"]


def test_pair_closed_form_matches_the_two_stream_reference():
    rng = np.random.default_rng(7)
    for _ in range(500):
        f = tuple(rng.uniform(0, 5, 4) * rng.integers(0, 2, 4))  # some zeros too
        b = tuple(rng.uniform(0, 5, 4) * rng.integers(0, 2, 4))
        span, ef, eb = ep_overlap_pair(f, b)
        ref, _, _ = _two_streams(f, b)
        assert span == pytest.approx(ref, abs=1e-12)
        w = float(rng.uniform(0, b[1]))  # delay_wgrad_compute: part of m_b is the wgrad
        assert ep_overlap_pair(f, b, w)[0] == pytest.approx(_two_streams(f, b, w)[0], abs=1e-12)
        assert ep_overlap_pair(f, b, w)[0] <= span + 1e-12  # never slower
        # the span is both computations plus both exposures
        assert span == pytest.approx(f[0] + f[2] + b[1] + b[3] + ef + eb, abs=1e-12)
        assert 0 <= ef <= f[1] + f[3] + 1e-12 and 0 <= eb <= b[0] + b[2] + 1e-12


def test_pair_hand_values():
    # computation longer than every all-to-all: all hidden
    assert ep_overlap_pair((3, 2, 5, 2), (2, 6, 2, 4)) == (18, 0, 0)
    # all-to-alls of 4 beside computations of 1: each exposes 3
    assert ep_overlap_pair((1, 4, 1, 4), (4, 1, 4, 1)) == (16, 6, 6)
    # without the overlap the same layer pair would take 20 (computation 4, all-to-alls 16)
    # the backward's dispatch (4) waits for the experts' backward (4) and exposes 3 beside the
    # forward's experts (1); with 2 of those 4 the delayed weight gradient, it starts 2 earlier
    assert ep_overlap_pair((1, 1, 1, 1), (1, 4, 4, 1)) == (10, 0, 3)
    assert ep_overlap_pair((1, 1, 1, 1), (1, 4, 4, 1), wgrad=2) == (8, 0, 1)


# --------------------------------------------------------------------------- simulation

def test_overlap_hides_the_all_to_alls_and_keeps_the_compute():
    """Nodes of four GPUs (ep = 8 spans two): the overlapped plan's exposed and hidden all-to-all
    add up to the plain plan's; compute is unchanged; the iteration is shorter by the hidden
    part; the time terms still sum to the iteration."""
    plain = simulate(_session(False, gpus_per_node=4)).report
    ov = simulate(_session(True, gpus_per_node=4)).report
    assert plain.ep_hidden_s == 0
    assert ov.ep_hidden_s > 0
    assert ov.ep_comm_s + ov.ep_hidden_s == pytest.approx(plain.ep_comm_s, rel=1e-9)
    assert ov.compute_s == pytest.approx(plain.compute_s, rel=1e-12)
    assert ov.iteration_time_s == pytest.approx(plain.iteration_time_s - ov.ep_hidden_s, rel=1e-9)
    total = ov.compute_s + ov.comm_s + ov.ep_comm_s + ov.pp_comm_s + ov.bubble_s + ov.imbalance_s
    assert total == pytest.approx(ov.iteration_time_s, rel=1e-9)


def test_exposed_all_to_all_is_the_pair_formula_on_the_op_times():
    """One stage, every layer MoE and alike: each all-to-all of a pass is timed at half the
    pass's exposure of :func:`ep_overlap_pair`, built from the op times by hand here, on the
    paired share of the items ((m-1)/m = 3/4 without pipelining: the first forward and the last
    backward run alone)."""
    s = _session(True, gpus_per_node=4)
    st = stage_times(s, session_profile(s))
    o, a2a = st.op_times_s, st.moe_comm_s["ep_all_to_all"]
    af = o["attention_fwd"] + o["router_fwd"] + o["moe_permute_fwd"] + o["moe_unpermute_fwd"]
    mf = o["experts_fwd"]
    mb = o["moe_unpermute_bwd"] + o["experts_bwd"]
    ab = o["moe_permute_bwd"] + o["router_bwd"] + o["attention_bwd"]
    _, ef, eb = ep_overlap_pair((af, a2a, mf, a2a), (a2a, mb, a2a, ab))
    plain = stage_times(dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, overlap_moe_expert_parallel_comm=False)), session_profile(s))
    L, paired = MIXTRAL.num_layers, 3 / 4
    assert s.plan.num_microbatches == 4 and mm.ep_overlap_paired_share(s.plan, 0) == paired
    assert st.fwd_s[0, 0] == pytest.approx(plain.fwd_s[0, 0] - paired * L * (2 * a2a - ef),
                                           rel=1e-9)
    assert st.bwd_s[0, 0] == pytest.approx(plain.bwd_s[0, 0] - paired * L * (2 * a2a - eb),
                                           rel=1e-9)


def test_paired_share_follows_the_warm_up():
    """Without pipelining (m-1)/m; with interleaving stage i warms up with 2(p-1-i) + (v-1)p + 1
    forwards (Megatron's count plus the combined 1F1B's extra one) of its m*v; none paired when
    the warm-up takes them all; 0 without the overlap."""
    assert mm.ep_overlap_paired_share(_session(True, global_batch_size=16).plan, 0) == 0  # m = 1
    assert mm.ep_overlap_paired_share(_session(True, global_batch_size=64).plan, 0) == 3 / 4
    assert mm.ep_overlap_paired_share(_session(False).plan, 0) == 0
    kw = dict(pipeline_parallel=2, data_parallel=8, schedule="interleaved",
              virtual_pipeline_stages=2)
    # m = p = 2: stage 0's warm-up 2 + 2 + 1 takes all 4 items, stage 1's 0 + 2 + 1 leaves one
    # (Megatron-Core's get_pp_rank_microbatches has no all-warm-up rule for m == p any more)
    for B, shares in ((64, ((16 - 5) / 16, (16 - 3) / 16)), (16, (0.0, (4 - 3) / 4))):
        pl = _session(True, global_batch_size=B, **kw).plan
        assert tuple(mm.ep_overlap_paired_share(pl, i) for i in range(2)) == shares


def test_nothing_hidden_when_nothing_pairs():
    """One micro-batch without pipelining: the all-to-alls stay whole (the tester's case m = 1
    at p = 1; with interleaving the last stage's warm-up, (v-1)p + 1 of m*v >= p*v items, never
    takes every item, so some always pair)."""
    for kw in (dict(global_batch_size=16),):
        plain = simulate(_session(False, gpus_per_node=4, **kw)).report
        ov = simulate(_session(True, gpus_per_node=4, **kw)).report
        assert plain.ep_comm_s > 0 and ov.ep_hidden_s == 0
        assert ov.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-12)


def test_interleaved_plan_with_overlap_simulates_and_gains():
    kw = dict(pipeline_parallel=2, data_parallel=8, schedule="interleaved",
              virtual_pipeline_stages=2, expert_parallel=8, global_batch_size=64)
    plain = simulate(_session(False, **kw)).report
    ov = simulate(_session(True, **kw)).report
    assert ov.iteration_time_s < plain.iteration_time_s
    assert ov.ep_comm_s < plain.ep_comm_s


def test_delay_wgrad_compute():
    """The experts' weight gradient beside the backward's dispatch: never slower (here the
    forward's all-to-alls are what stays exposed, so no faster either); needs the overlap."""
    kw = dict(gpus_per_node=4)
    ov = simulate(_session(True, **kw)).report
    dw = simulate(_session(True, delay_wgrad_compute=True, **kw)).report
    assert dw.iteration_time_s <= ov.iteration_time_s + 1e-12
    assert dw.ep_comm_s <= ov.ep_comm_s * (1 + 1e-12)
    errs = _errors(_session(False, delay_wgrad_compute=True))
    assert "needs overlap_moe_expert_parallel_comm" in errs["plan.delay_wgrad_compute"]
    assert "plan.delay_wgrad_compute" in inactive_fields(_session(False))


# --------------------------------------------------------------------------- memory

def test_in_flight_activations():
    """A forward beside a backward holds one layer more than a micro-batch (the backward frees
    its layers as the forward fills its own): 1 + 1/32 of Mixtral's 32 layers without
    pipelining; with interleaving also one more warm-up chunk, 1/v of the stage's layers."""
    M = MIXTRAL
    assert mm.in_flight_microbatches(_session(False).plan, 0, M) == 1
    assert mm.in_flight_microbatches(_session(True).plan, 0, M) == pytest.approx(1 + 1 / 32)
    kw = dict(pipeline_parallel=2, data_parallel=8, schedule="interleaved",
              virtual_pipeline_stages=2)
    for i in range(2):
        base = mm.in_flight_microbatches(_session(False, **kw).plan, i, M)
        assert mm.in_flight_microbatches(_session(True, **kw).plan, i, M) == pytest.approx(
            base + 1 / 2 + 1 / 16)
    # one micro-batch only: nothing more to hold
    assert mm.in_flight_microbatches(_session(True, global_batch_size=16).plan, 0, M) == 1
    with pytest.raises(ValueError, match="need the model"):
        mm.in_flight_microbatches(_session(True).plan, 0)
    # the activations grow by one micro-batch's (stage memory of the whole layer stack)
    a = mm.stage_memory(MIXTRAL, _session(False).plan)[0]
    b = mm.stage_memory(MIXTRAL, _session(True).plan)[0]
    assert b.weights_bytes == a.weights_bytes and b.activations_bytes > a.activations_bytes


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("plan,words", [
    (dict(expert_parallel=1), "needs expert parallelism"),
    (dict(pipeline_parallel=2, data_parallel=8), "needs the interleaved schedule"),
    (dict(schedule="gpipe"), "combined 1F1B schedule, not 'gpipe'"),
    (dict(recompute="full"), "full recomputation"),
    (dict(recompute="selective", recompute_modules="moe"), "moe out of recompute_modules"),
    (dict(precision="fp32"), "bf16 or fp16 model only"),
])
def test_rules_name_the_field(plan, words):
    errs = _errors(_session(True, **plan))
    assert words in errs.get("plan.overlap_moe_expert_parallel_comm", ""), errs
    assert "plan.overlap_moe_expert_parallel_comm" not in _errors(_session(False, **plan))


def test_dense_model_and_inactive_field():
    s = _session(True, expert_parallel=1)
    dense = dataclasses.replace(s, model=dataclasses.replace(MIXTRAL, num_experts=None))
    assert "needs expert parallelism" in _errors(dense)["plan.overlap_moe_expert_parallel_comm"]
    assert "plan.overlap_moe_expert_parallel_comm" in inactive_fields(dense)
    assert "plan.overlap_moe_expert_parallel_comm" not in inactive_fields(_session(True))
    assert not validate(_session(True))


# --------------------------------------------------------------------------- sweep

def test_sweep_keeps_the_overlap_only_where_the_plan_allows_it():
    s = _session(True, global_batch_size=64)
    plans = enumerate_plans(s, SweepSpace(num_gpus=16, tensor_parallel=[1], pipeline_parallel=[1, 2],
                                          micro_batch_sizes=[1], schedules=["1f1b", "interleaved"],
                                          recompute=["none", "full"], expert_parallel=[1, 8],
                                          overlap_moe_expert_parallel_comm=(True,)))
    assert plans
    for pl in plans:
        allowed = (pl.expert_parallel > 1 and pl.recompute != "full"
                   and (pl.pipeline_parallel == 1 or pl.schedule == "interleaved"))
        assert pl.overlap_moe_expert_parallel_comm is allowed, pl
    assert any(pl.overlap_moe_expert_parallel_comm for pl in plans)
    assert any(pl.expert_parallel == 1 for pl in plans)  # still tried, without the overlap


# --------------------------------------------------------------------------- Megatron

def test_megatron_import_and_export(tmp_path):
    text = (MIXTRAL_LAUNCH.replace("--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 1")
            .replace("--recompute-granularity selective",
                     "--overlap-moe-expert-parallel-comm --delay-wgrad-compute"))
    res = import_file(_write(tmp_path, "overlap.sh", text))
    assert res.session.plan.overlap_moe_expert_parallel_comm is True
    assert res.session.plan.delay_wgrad_compute is True
    assert {"--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"} <= set(
        export_arguments(res.session))
    res = import_file(_write(tmp_path, "plain.sh", MIXTRAL_LAUNCH))
    assert res.session.plan.overlap_moe_expert_parallel_comm is False
    assert "--overlap-moe-expert-parallel-comm" not in export_arguments(res.session)
    both = text.replace("--delay-wgrad-compute", "--moe-shared-expert-overlap")
    with pytest.raises(MegatronArgsError, match="refuses them together"):
        import_file(_write(tmp_path, "both.sh", both))


def test_sweep_and_studies_of_an_overlapped_session(tmp_path, capsys):
    """The studies check a session but its plan with a probe plan (ep 1, full recomputation):
    the overlap is off there, so an overlapped session sweeps (the tester's exit 2)."""
    from core.cli import main
    from core.plan.rules import check_all_but_the_plan
    from core.io.session import save_session
    s = _session(True, global_batch_size=64)
    assert not check_all_but_the_plan(s)
    path = tmp_path / "ov.json"
    save_session(s, path)
    assert main(["sweep", str(path), "--gpus", "16", "--micro-batch-sizes", "1",
                 "--pipeline-parallel", "1", "--tensor-parallel", "1", "--json",
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert '"num_plans"' in out and "overlap_moe_expert_parallel_comm" in out


# --------------------------------------------------------------------------- published runs

def test_published_row_with_the_overlap():
    """Row 4 of the published sessions (Qwen3-30B-A3B on 16 H100, ep 16 over two nodes, p 1),
    run without the expert all-to-all overlap; with it (and with delayed weight gradients) the
    plan is valid and predicted faster."""
    import json

    from core.io.session import session_from_document
    from tests.test_measured_runs import SESSIONS
    if not SESSIONS.exists():
        pytest.skip(f"shared data not present: {SESSIONS}")
    plain = session_from_document(json.loads(SESSIONS.read_text().splitlines()[3])["session"])
    assert plain.model.name == "Qwen3-30B-A3B" and plain.plan.expert_parallel == 16
    assert plain.plan.overlap_moe_expert_parallel_comm is False
    ov = plain.copy()
    ov.plan.overlap_moe_expert_parallel_comm = True
    ov_dw = ov.copy()
    ov_dw.plan.delay_wgrad_compute = True
    assert not validate(ov) and not validate(ov_dw)
    assert (simulate(ov).report.iteration_time_s
            < simulate(plain).report.iteration_time_s)


def test_sweep_tries_the_overlap_off_and_on():
    """``SweepSpace.overlap_moe_expert_parallel_comm = (False, True)``: every plan without it,
    and with it those that allow it (the session's delay_wgrad_compute with it); a dense
    model's sweep is unchanged; the space round-trips through its dict."""
    s = _session(False, global_batch_size=64, delay_wgrad_compute=False)
    kw = dict(num_gpus=16, tensor_parallel=[1], pipeline_parallel=[1, 2], micro_batch_sizes=[1],
              schedules=["1f1b", "interleaved"], recompute=["none", "full"], expert_parallel=[1, 8])
    off = enumerate_plans(s, SweepSpace(**kw, overlap_moe_expert_parallel_comm=(False,),
                                        moe_token_dispatcher_type=("alltoall",)))
    both = enumerate_plans(s, SweepSpace(**kw, overlap_moe_expert_parallel_comm=(False, True),
                                         moe_token_dispatcher_type=("alltoall",)))
    assert not any(pl.overlap_moe_expert_parallel_comm for pl in off)
    plain = [pl for pl in both if not pl.overlap_moe_expert_parallel_comm]
    assert plain == off
    on = [pl for pl in both if pl.overlap_moe_expert_parallel_comm]
    assert on and len(on) == sum(not ep_overlap_errors(MIXTRAL, dataclasses.replace(
        pl, overlap_moe_expert_parallel_comm=True)) for pl in off)
    space = SweepSpace(**kw, overlap_moe_expert_parallel_comm=(True,))
    assert SweepSpace.from_dict(space.to_dict()).to_dict() == space.to_dict()
    assert "overlap_moe_expert_parallel_comm" in space.swept_fields()
    bad = SweepSpace(**kw, overlap_moe_expert_parallel_comm=("yes",))
    assert any(e.field == "sweep.overlap_moe_expert_parallel_comm" for e in bad.errors())


def test_cli_sweep_option(tmp_path, capsys):
    import json

    from core.cli import main
    from core.io.session import save_session
    path = tmp_path / "s.json"
    save_session(_session(False, global_batch_size=64), path)
    args = ["sweep", str(path), "--gpus", "16", "--micro-batch-sizes", "1", "--tensor-parallel",
            "1", "--pipeline-parallel", "1", "--workers", "1", "--json"]
    assert main(args + ["--overlap-moe-expert-parallel-comm", "n,y"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert main(args + ["--overlap-moe-expert-parallel-comm", "n"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert both["num_plans"] > off["num_plans"]
    assert main(args) == 0  # a mixture-of-experts model: off and on by default
    assert json.loads(capsys.readouterr().out)["num_plans"] == both["num_plans"]
    assert main(args + ["--overlap-moe-expert-parallel-comm", "maybe"]) == 2
    assert "--overlap-moe-expert-parallel-comm" in capsys.readouterr().err
    # the dispatchers: both by default with ep > 1, one when given
    assert main(args + ["--moe-token-dispatcher", "alltoall"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["num_plans"] < both["num_plans"]
    assert main(args + ["--moe-token-dispatcher", "deepep"]) == 2
    assert "--moe-token-dispatcher" in capsys.readouterr().err


def test_sweep_refuses_what_simulate_refuses(tmp_path, capsys):
    """Asking a dense model's sweep for the overlap, or a session's delay_wgrad_compute with
    the overlap off and not swept on: one message naming the option or the file (exit 2), as
    vtrain simulate names it (the tester: both were silently dropped)."""
    from core.cli import main
    from core.plan.fields import ConfigError
    from core.io.session import load_any, save_session
    from tests.conftest import EXAMPLES
    dense = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    with pytest.raises(ConfigError, match="on needs a mixture-of-experts model"):
        enumerate_plans(dense, SweepSpace(max_gpus=8, overlap_moe_expert_parallel_comm=(True,)))
    assert enumerate_plans(dense, SweepSpace(max_gpus=8, overlap_moe_expert_parallel_comm=(False,)))
    path = tmp_path / "s.json"
    save_session(_session(False, global_batch_size=64), path)
    args = ["sweep", str(path), "--gpus", "16", "--micro-batch-sizes", "1", "--pipeline-parallel",
            "1", "--workers", "1", "--json", "--set", "plan.delay_wgrad_compute=true"]
    assert main(args + ["--overlap-moe-expert-parallel-comm", "n"]) == 2
    err = capsys.readouterr().err
    assert f"{path} with --set plan.delay_wgrad_compute=true" in err
    assert "delay_wgrad_compute needs overlap_moe_expert_parallel_comm" in err
    assert main(args + ["--overlap-moe-expert-parallel-comm", "n,y"]) == 0  # swept on: allowed
    capsys.readouterr()
    assert main(args) == 0  # the default sweeps it on too


def test_the_sweep_leaves_out_the_overlap_where_nothing_pairs():
    """One stage and one micro-batch: nothing to pair, so the overlap changes nothing (same
    iteration time and memory); a sweep trying it off and on listed both, with the same
    figures (twice on vtrain sweep --gpus-from's front, differing only in ep_overlap). Now
    only off is built there; with more micro-batches, or on alone asked, on still is."""
    from core.studies.sweep import run_sweep
    from core.studies.sweep.variants import _overlap_pairs_nothing
    off, on = (simulate(_session(ov, global_batch_size=16, gpus_per_node=4)).report
               for ov in (False, True))
    assert on.iteration_time_s == off.iteration_time_s
    assert on.max_memory_per_gpu_bytes == off.max_memory_per_gpu_bytes
    assert on.ep_hidden_s == 0 and off.ep_comm_s > 0
    kw = dict(max_gpus=16, tensor_parallel=[1], pipeline_parallel=[1, 2], micro_batch_sizes=[1],
              schedules=["1f1b", "interleaved"], recompute=["none"], expert_parallel=[8],
              context_parallel=[1], moe_token_dispatcher_type=("alltoall",))
    # B = 16 on 8 and 16 GPUs: at p = 1, d = 8 (m = 2, pairs) and d = 16 (m = 1, nothing),
    # whose overlap variants the enumeration builds once per rule fields (not m)
    s = _session(False, global_batch_size=16)
    both = enumerate_plans(s, SweepSpace(**kw, overlap_moe_expert_parallel_comm=(False, True)))
    on = {(pl.pipeline_parallel, pl.num_microbatches): False for pl in both}
    for pl in both:
        on[pl.pipeline_parallel, pl.num_microbatches] |= pl.overlap_moe_expert_parallel_comm
    assert on == {(1, 2): True, (1, 1): False, (2, 2): True}  # before: (1, 1) True too
    for pl in both:  # the rule is the model's: nothing paired on the one stage
        assert _overlap_pairs_nothing(dataclasses.asdict(pl)) is (
            pl.pipeline_parallel == 1 and mm.ep_overlap_paired_share(
                dataclasses.replace(pl, overlap_moe_expert_parallel_comm=True), 0) == 0)
    s = _session(False, global_batch_size=16)
    only = enumerate_plans(s, SweepSpace(**kw, overlap_moe_expert_parallel_comm=(True,)))
    assert all(pl.overlap_moe_expert_parallel_comm for pl in only if pl.pipeline_parallel == 1)
    # no two plans of a sweep differ only in the overlap with the same figures
    res = run_sweep(s, SweepSpace(**kw, overlap_moe_expert_parallel_comm=(False, True)),
                    prune=False)
    groups: dict[str, list] = {}
    for i, pl in enumerate(res.plans):
        key = repr(dataclasses.replace(pl, overlap_moe_expert_parallel_comm=False,
                                       delay_wgrad_compute=False))
        groups.setdefault(key, []).append((res.iteration_time_s[i],
                                           res.max_memory_per_gpu_bytes[i]))
    pairs = [g for g in groups.values() if len(g) == 2]
    assert pairs and all(a != b for a, b in pairs)
