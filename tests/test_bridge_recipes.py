"""Megatron-Bridge 0.6.2 performance recipes (core.accuracy.bridge_recipes, resources/bridge_perf_recipes.json):
the table's settings as the recipe source gives them, how a row picks its recipe among several
with one key, and what a row of another layout takes from its recipe family (the ``recipe``
column of a measurement CSV: tests/test_measured_runs.py)."""

from __future__ import annotations

import pytest

from core.accuracy.bridge_recipes import (BRIDGE_PERF_RECIPES, BRIDGE_RECIPES_FILE, bridge_recipe_family,
                                 load_bridge_recipes, match_bridge_recipe, parse_recipe_cuda_graph)

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
    # CUDA graphs are represented (plan.cuda_graph_impl / cuda_graph_modules), not a note
    dsv3 = _by_function("deepseek_v3_pretrain_256gpu_gb200_fp8mx_config")
    assert not any("CUDA graph" in n for n in dsv3.not_represented)
    assert (dsv3.cuda_graph_impl, dsv3.cuda_graph_modules) == ("full_iteration", None)


def test_the_recipes_cuda_graphs_are_read_into_the_plan_fields():
    """Every form of the file's ``cuda_graph`` entry: none, full_iteration (also as Megatron-Core
    migrated the older local + full_iteration scope), Transformer Engine's modules, its whole
    layer; anything else is an error, never a guess."""
    assert parse_recipe_cuda_graph("none") == ("none", None)
    assert parse_recipe_cuda_graph(None) == ("none", None)
    assert parse_recipe_cuda_graph("full_iteration (MCore migrates local+['full_iteration'], "
                                   "cuda_graph_config.py:10-13)") == ("full_iteration", None)
    assert parse_recipe_cuda_graph("transformer_engine modules=['attn', 'moe_router', "
                                   "'moe_preprocess']") == (
        "transformer_engine", "attn,moe_router,moe_preprocess")
    assert parse_recipe_cuda_graph("transformer_engine (whole layer, via deprecated "
                                   "external_cuda_graph)") == ("transformer_engine", None)
    for bad in ("cudagraphs", "transformer_engine modules=attn", "local something"):
        with pytest.raises(ValueError):
            parse_recipe_cuda_graph(bad)
    te = _by_function("deepseek_v3_pretrain_256gpu_gb200_bf16_config")
    assert (te.cuda_graph_impl, te.cuda_graph_modules) == (
        "transformer_engine", "attn,moe_router,moe_preprocess")
    assert _by_function("llama3_70b_pretrain_64gpu_gb200_nvfp4_config").cuda_graph_modules == "mlp,attn"
    assert _by_function("llama3_8b_pretrain_8gpu_h100_bf16_config").cuda_graph_impl == "none"


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
