"""Megatron-Bridge 0.6.2 performance recipes (core.accuracy.bridge_recipes, resources/bridge_perf_recipes.json):
the table's settings as the recipe source gives them, how a row picks its recipe among several
with one key, and what a row of another layout takes from its recipe family."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from core.accuracy.bridge_recipes import (BRIDGE_PERF_RECIPES, BRIDGE_RECIPES_FILE, bridge_recipe_family,
                                 load_bridge_recipes, match_bridge_recipe)
from core.accuracy.validate import read_measurements

PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "data" / "public-modern" / "published_runs.csv"
H100, B200, GB200 = "H100-SXM5-80GB", "B200-180GB", "GB200-NVL72"


def _by_function(name):
    (r,) = [r for r in BRIDGE_PERF_RECIPES if r.function == name]
    return r


def test_the_table_holds_every_pretraining_recipe_of_the_summary_models():
    """119 recipes (114 functions, 5 module-level aliases) of seven models on three GPU kinds;
    the file is the one the module loads."""
    assert load_bridge_recipes(str(BRIDGE_RECIPES_FILE)) == BRIDGE_PERF_RECIPES
    assert len(BRIDGE_PERF_RECIPES) == 119
    assert {r.key[0] for r in BRIDGE_PERF_RECIPES} == {H100, B200, GB200}
    assert {r.key[1] for r in BRIDGE_PERF_RECIPES} == {
        "Llama3-8B", "Llama3-70B", "Llama3.1-405B", "Qwen3-30B-A3B", "Qwen3-235B-A22B",
        "DeepSeek-V3", "GPT-OSS-120B"}
    # every function name appears once
    assert len({r.function for r in BRIDGE_PERF_RECIPES}) == 119


@pytest.mark.parametrize("function, expect", [
    # (t, p, v, cp, ep, micro-batch, global batch), then settings, as the recipe source sets them
    ("llama31_405b_pretrain_1024gpu_h100_fp8cs_config",
     dict(key=(8, 8, 8, 2, 1, 1, 1536), tp_comm_overlap=True, recompute="none")),
    ("qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config",
     dict(key=(2, 8, 4, 1, 32, 1, 8192), dispatcher="alltoall", ep_overlap=True,
          delay_wgrad=True, tp_comm_overlap=False)),
    ("gpt_oss_120b_pretrain_64gpu_gb200_bf16_config",
     dict(key=(1, 1, 1, 1, 64, 4, 1280), recompute="selective",
          recompute_modules="layernorm,moe_act", dispatcher="alltoall", ep_overlap=True,
          delay_wgrad=True)),
    ("deepseek_v3_pretrain_256gpu_gb200_fp8mx_config",
     dict(key=(1, 4, 4, 1, 64, 1, 4096), recompute="selective", recompute_modules="mla_up_proj",
          dispatcher="flex", ep_overlap=True, delay_wgrad=True, mtp_num_layers=1)),
    # full recomputation, block method, 5 layers per chunk (llama/h100/llama3.py)
    ("llama3_8b_pretrain_8gpu_h100_fp8cs_config",
     dict(key=(1, 1, 1, 1, 1, 1, 128), recompute="full", recompute_num_layers=5)),
])
def test_recipe_settings_as_the_source_sets_them(function, expect):
    r = _by_function(function)
    assert r.key[4:] == expect.pop("key")
    for name, value in expect.items():
        assert getattr(r, name) == value, name
    assert r.refuse is None


def test_what_a_recipe_runs_that_is_not_modelled_refuses_by_name():
    assert _by_function("qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx_config").refuse[0] == \
        "FP8 attention (fp8_dot_product_attention)"
    off = _by_function("llama3_70b_pretrain_64gpu_gb200_fp8cs_config").refuse
    assert off[0] == "CPU activation offloading" and "cpu_offloading_num_layers=40" in off[1]
    assert _by_function("llama3_8b_pretrain_8gpu_b200_nvfp4_config").refuse[0] == "NVFP4"
    assert "full-iteration CUDA graph" in _by_function(
        "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config").not_represented


def test_one_key_several_recipes():
    """The summary's plain recipe wins over its variants; the global batch is an override; a
    key nothing matches gives None."""
    # GB200 GPT-OSS BF16: the plain recipe (alltoall) and its _ncclep variant (flex) share a key
    r = match_bridge_recipe(GB200, "gpt-oss-120b", 64, "bf16", 1, 1, 1, 1, 64, 4)
    assert r.function == "gpt_oss_120b_pretrain_64gpu_gb200_bf16_config" and r.dispatcher == "alltoall"
    # H100 Qwen3-235B FP8: the plain recipe (8192) and _large_scale (512) agree; either batch
    for batch in (None, 512, 8192, 2048):
        r = match_bridge_recipe(H100, "Qwen3-235B-A22B", 256, "fp8", 2, 8, 4, 1, 32, 1, batch)
        assert r.function == "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config"
    # blockwise FP8 (Bridge's fp8sc): the DeepSeek-V3 H100 recipe at v = 2
    r = match_bridge_recipe(H100, "DeepSeek-V3", 1024, "fp8sc", 2, 8, 2, 1, 64, 1)
    assert r.function == "deepseek_v3_pretrain_1024gpu_h100_fp8sc_config"
    assert match_bridge_recipe(H100, "DeepSeek-V3", 1024, "fp8", 2, 8, 2, 1, 64, 1) is None
    assert match_bridge_recipe(H100, "Llama3-70B", 64, "fp8", 4, 8, 5, 1, 1, 2) is None


def test_recipe_family_keeps_only_what_all_agree_on():
    fam = bridge_recipe_family(H100, "Qwen3-235B-A22B", "fp8")
    assert fam.recipes == ("qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config",)  # no variant
    assert (fam.settings["dispatcher"], fam.settings["ep_overlap"], fam.settings["delay_wgrad"]) \
        == ("alltoall", True, True)
    # B200 Qwen3-235B BF16: alltoall at 64 and 256 GPUs, no overlap
    fam = bridge_recipe_family(B200, "qwen3-235b-a22b", "bf16")
    assert len(fam.recipes) == 2 and fam.settings["dispatcher"] == "alltoall"
    # GB200 Qwen3-235B FP8: flex at 64 and 256 GPUs, but the expert all-to-all overlap (t = 1)
    # and TP overlap (no recipe with t > 1) are not settled by the family
    fam = bridge_recipe_family(GB200, "Qwen3-235B-A22B", "fp8")
    assert fam.settings["dispatcher"] == "flex" and "tp_comm_overlap" not in fam.settings
    # B200 Qwen3-235B MXFP8: the 256-GPU recipe runs FP8 attention (refused): not family; the
    # 64-GPU one alone (alltoall, no overlap)
    fam = bridge_recipe_family(B200, "qwen3-235b-a22b", "mxfp8")
    assert fam.recipes == ("qwen3_235b_a22b_pretrain_64gpu_b200_fp8mx_config",)
    assert (fam.settings["dispatcher"], fam.settings["ep_overlap"]) == ("alltoall", False)
    # families of refused recipes only: none (Qwen3-30B MXFP8 on B200: FP8 attention; Llama3-70B
    # BF16 on GB200: CPU offloading)
    assert bridge_recipe_family(B200, "Qwen3-30B-A3B", "mxfp8") is None
    assert bridge_recipe_family(GB200, "Llama3-70B", "bf16") is None
    # DeepSeek-V3 on H100 in BF16: the two recipes (1024 and 64 GPUs) agree
    fam = bridge_recipe_family(H100, "DeepSeek-V3", "bf16")
    assert fam.settings["recompute"] == ("selective", "mla_up_proj,mlp", None)
    assert fam.settings["mtp_num_layers"] == 1
    assert bridge_recipe_family(H100, "Mixtral-8x7B", "bf16") is None
    assert bridge_recipe_family("A100-SXM4-80GB", "Llama3-8B", "bf16") is None


@pytest.fixture(scope="module")
def raw():
    if not PUBLISHED.exists():
        pytest.skip(f"shared data not present: {PUBLISHED}")
    return list(csv.DictReader(PUBLISHED.open()))


def _write(path, raw, **change):
    rows = [{**raw[5], **change}]  # row 6: Qwen3-235B-A22B on 256 H100, FP8, t2 p8 v4 ep32
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(raw[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_a_row_of_another_layout_takes_its_recipe_family(raw, tmp_path):
    """Row 6 at 128 GPUs (d halved): no recipe has that key; the one H100 FP8 Qwen3-235B recipe
    gives the dispatcher, the overlaps and no recomputation, named; without the family (another
    framework) the general assumptions hold."""
    (m,) = read_measurements(_write(tmp_path / "a.csv", raw, num_gpus="128", data_parallel="4"))
    names = {a.split(":")[0] for a in m.assumptions}
    assert "bridge-perf-recipe" not in names and "bridge-perf-recipe-family" in names
    fam = next(a for a in m.assumptions if a.startswith("bridge-perf-recipe-family"))
    assert ("dispatcher alltoall, expert all-to-all overlap, delayed weight gradients, recompute "
            "none, overlap_grad_reduce True, overlap_param_gather True, TP communication overlap "
            "off: the one recipe qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config") in fam
    pl = m.session.plan
    assert (pl.moe_token_dispatcher_type, pl.overlap_moe_expert_parallel_comm,
            pl.delay_wgrad_compute, pl.tp_comm_overlap, pl.recompute) == (
                "alltoall", True, True, False, "none")
    # a row that states its recomputation keeps it; the family fills the rest
    (m,) = read_measurements(_write(tmp_path / "b.csv", raw, num_gpus="128", data_parallel="4",
                                    recompute="full (block, 2 layers)"))
    assert (m.session.plan.recompute, m.session.plan.recompute_num_layers) == ("full", 2)
    fam = next(a for a in m.assumptions if a.startswith("bridge-perf-recipe-family"))
    assert "recompute" not in fam.split("(")[-1].split(":")[0]
    # another framework: no recipe, no family
    (m,) = read_measurements(_write(tmp_path / "c.csv", raw, num_gpus="128", data_parallel="4",
                                    framework="Megatron-LM"))
    assert not {a.split(":")[0] for a in m.assumptions} & {"bridge-perf-recipe",
                                                           "bridge-perf-recipe-family"}
    assert not m.session.plan.overlap_moe_expert_parallel_comm


def _row(raw, tmp_path, base, **change):
    rows = [{**raw[base - 1], **change}]
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(raw[0]))
        w.writeheader()
        w.writerows(rows)
    (m,) = read_measurements(path)
    return m, {a.split(":")[0] for a in m.assumptions}


def test_what_the_row_states_wins_over_its_recipe(raw, tmp_path):
    # notes that switch the expert all-to-all overlap or delayed wgrad off (row 21's recipe has both)
    m, _ = _row(raw, tmp_path, 21, notes=raw[20]["notes"] + "; EP overlap off; no delay_wgrad_compute")
    assert not m.session.plan.overlap_moe_expert_parallel_comm
    assert not m.session.plan.delay_wgrad_compute
    # the notes' recompute_modules over the recipe's [layernorm, moe_act] (row 3)
    m, names = _row(raw, tmp_path, 3, notes=raw[2]["notes"].replace(
        "recompute_modules=[layernorm, moe_act]", "recompute_modules=[core_attn]"))
    assert (m.session.plan.recompute, "megatron-recompute-modules" in names) == ("selective", True)
    assert m.session.plan.recompute_modules in (None, "core_attn")
    # notes naming the alltoall dispatcher: read, not refused (row 20's recipe: flex)
    m, names = _row(raw, tmp_path, 20, notes=raw[19]["notes"] + "; alltoall dispatcher")
    assert m.session.plan.moe_token_dispatcher_type == "alltoall"
    assert "dispatcher-alltoall-from-notes" in names and "token dispatcher" not in m.skip_causes


def test_a_family_setting_the_rows_layout_cannot_run_is_not_taken(raw, tmp_path):
    """Row 19 (GB200 DeepSeek-V3 MXFP8) without interleaving: no recipe; its family's expert
    all-to-all overlap needs the interleaved schedule with p = 4: not taken, not refused."""
    m, names = _row(raw, tmp_path, 19, virtual_pipeline_stages="1")
    assert "bridge-perf-recipe-family" in names
    assert not m.session.plan.overlap_moe_expert_parallel_comm and not m.skip_reason
    # TP overlap: the GB200 Llama3-70B BF16 recipes (t = 1, CPU offloading) settle nothing: a
    # t = 2 row keeps Bridge's general TP overlap
    m, names = _row(raw, tmp_path, 17, precision="bf16", tensor_parallel="2",
                    pipeline_parallel="4", virtual_pipeline_stages="5", data_parallel="8",
                    micro_batch_size="1", sequence_parallel="y")
    assert m.session.plan.tp_comm_overlap and "bridge-tp-comm-overlap" in names
    assert not {"bridge-perf-recipe", "bridge-perf-recipe-family"} & names


def test_recipe_settings_beyond_the_overlaps(raw, tmp_path):
    """Row 8 (DeepSeek-V3, 1024 H100) stated as FP8 current scaling and without its notes'
    layout: the H100 recipe's layout, no gradient-reduce overlap; blockwise FP8 (Bridge's
    fp8sc) at v = 2: the fp8sc recipe, whose FP8 parameter all-gather is off."""
    notes = raw[7]["notes"]
    m, names = _row(raw, tmp_path, 8, precision="fp8-cs (per-tensor current scaling)",
                    notes=notes.replace("pp_layout", "layout"))
    assert "deepseek_v3_pretrain_1024gpu_h100_fp8cs_config" in next(
        a for a in m.assumptions if a.startswith("bridge-perf-recipe:"))
    pl = m.session.plan
    assert "bridge-perf-recipe-layout" in names and "pp-layout-from-notes" not in names
    assert pl.pipeline_model_parallel_layout == "Et|(tt|)*30mL"
    assert not pl.overlap_grad_reduce and pl.overlap_param_gather
    m, names = _row(raw, tmp_path, 8, precision="FP8-SC (sub-channel scaling)",
                    virtual_pipeline_stages="2", notes="")
    assert m.session.plan.fp8_recipe == "blockwise"
    assert "deepseek_v3_pretrain_1024gpu_h100_fp8sc_config" in next(
        a for a in m.assumptions if a.startswith("bridge-perf-recipe:"))
    assert not m.session.plan.fp8_param_gather and "bridge-fp8-param-gather" not in names


def test_labels_and_names(raw, tmp_path):
    # an NVFP4 row is refused by its precision and claims no recipe or family
    m, names = _row(raw, tmp_path, 9, precision="nvfp4")
    assert m.skip_reason and not {"bridge-perf-recipe", "bridge-perf-recipe-family"} & names
    # Bridge's own model spelling matches (row 19: deepseek_v3)
    m, names = _row(raw, tmp_path, 19, model_name="deepseek_v3")
    assert "bridge-perf-recipe" in names and m.session.model.mtp_num_layers == 1
    # GB200 GPT-OSS MXFP8: selective with recompute_modules=[] recomputes nothing
    assert _by_function("gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config").recompute == "none"


def test_second_tester_findings(raw, tmp_path):
    # a notes' layout without MTP sets the MTP count, over the recipe's one layer (row 19)
    m, names = _row(raw, tmp_path, 19, notes=raw[18]["notes"] + "; pp_layout Et*4|(tttt|)*14tL")
    assert not m.skip_reason and m.session.model.mtp_num_layers == 0
    # the overlap switched off in the notes takes the recipe's delayed wgrad with it (row 21)
    m, _ = _row(raw, tmp_path, 21, notes=raw[20]["notes"] + "; EP overlap disabled")
    assert not m.skip_reason
    assert not (m.session.plan.overlap_moe_expert_parallel_comm or m.session.plan.delay_wgrad_compute)
    # a stated full recomputation: the recipe's overlap cannot run with it, and is not taken
    m, _ = _row(raw, tmp_path, 21, recompute="full")
    assert not m.skip_reason and not m.session.plan.overlap_moe_expert_parallel_comm
    # DeepSeek-V3 BF16 on 512 H100 (p 8, v 4; no recipe of 512 GPUs) without the notes' layout:
    # the layout every H100 BF16 recipe of the model has at p 8, v 4
    notes = raw[7]["notes"].replace("pp_layout Et|(tt|)*30mL, ", "").replace(
        "recompute_modules=[mla_up_proj, mlp], ", "")
    m, names = _row(raw, tmp_path, 8, precision="bf16", num_gpus="512", data_parallel="32",
                    notes=notes)
    assert not m.skip_reason, m.skip_reason
    assert m.session.plan.pipeline_model_parallel_layout == "Et|(tt|)*30mL"
    assert "bridge-perf-recipe-layout" in names and "bridge-perf-recipe-family" in names
    # GB200 DeepSeek-V3 MXFP8 at p 8, v 2, ep 32: the family has no layout there: the recalled map
    m, names = _row(raw, tmp_path, 19, pipeline_parallel="8", virtual_pipeline_stages="2",
                    data_parallel="32", expert_parallel="32")
    assert "bridge-dsv3-pipeline-layout" in names and "bridge-perf-recipe-layout" not in names
    # "sub channel" with a space is blockwise
    m, _ = _row(raw, tmp_path, 8, precision="FP8 sub channel", virtual_pipeline_stages="2")
    assert m.session.plan.fp8_recipe == "blockwise"


def test_an_empty_overlap_cell_is_not_stated(raw, tmp_path):
    """A CSV with an overlap_grad_reduce column: an empty cell leaves the recipe's DDP overlaps
    (row 8 as BF16 at global batch 16384: deepseek_v3_pretrain_1024gpu_h100_bf16_config, no
    gradient-reduce overlap, parameter all-gather overlapped); 'y' states the first only."""
    header = list(raw[0]) + ["overlap_grad_reduce"]
    for cell, expect in (("", (False, True)), ("y", (True, True))):
        path = tmp_path / f"o{cell}.csv"
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerow({**raw[7], "precision": "bf16", "global_batch_size": "16384",
                        "overlap_grad_reduce": cell})
        (m,) = read_measurements(path)
        assert "bridge-perf-recipe" in {a.split(":")[0] for a in m.assumptions}
        assert (m.session.plan.overlap_grad_reduce, m.session.plan.overlap_param_gather) == expect


@pytest.mark.parametrize("label", ["bf16 (fp8 attention)", "fp8-cs, FP8 DPA",
                                   "mxfp8 with fp8_dot_product_attention"])
def test_fp8_attention_in_the_label_is_refused_by_name(raw, tmp_path, label):
    m, _ = _row(raw, tmp_path, 9, precision=label)
    assert "FP8 attention (fp8_dot_product_attention)" in m.skip_causes
