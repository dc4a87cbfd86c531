"""``vtrain import bridge`` (core/cli/import_bridge.py): Megatron-Bridge 0.6.2 performance
recipes by name into sessions, the recipe table listed, refused recipes exiting 2 with their
reason."""

from __future__ import annotations

import json

import pytest

from core.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_recipe_round_trip_through_simulate(tmp_path, capsys):
    """llama3_8b_pretrain_8gpu_h100_bf16_config (perf_recipes/llama/h100/llama3.py:33): 8
    H100s, t1 p1 cp2 (d = 8 / 2 = 4), b1, B128, bf16, seq 8192; Llama 3 8B has 8.03 B
    parameters (8,030,261,248: Meta's model card rounds to 8.03 B)."""
    out = tmp_path / "l8.json"
    rc, text, err = _run(capsys, "import", "bridge", "--recipe",
                         "llama3_8b_pretrain_8gpu_h100_bf16_config", "-o", str(out))
    assert rc == 0, err
    assert "llama/h100/llama3.py:33" in text
    doc = json.loads(out.read_text())
    plan = doc["plan"]
    assert (plan["tensor_parallel"], plan["pipeline_parallel"], plan["context_parallel"],
            plan["data_parallel"], plan["micro_batch_size"], plan["global_batch_size"],
            plan["precision"]) == (1, 1, 2, 4, 1, 128, "bf16")
    assert doc["cluster"]["gpu"] == "H100-SXM5-80GB" and doc["model"]["seq_length"] == 8192
    assert doc["notes"] == ("Megatron-Bridge performance recipe "
                            "llama3_8b_pretrain_8gpu_h100_bf16_config (megatron/bridge/"
                            "perf_recipes/llama/h100/llama3.py:33, Megatron-Bridge 0.6.2)")
    rc, text, err = _run(capsys, "simulate", str(out), "--json")
    assert rc == 0, err
    result = json.loads(text)
    assert result["num_parameters"] == 8_030_261_248
    assert result["num_gpus"] == 8 and result["num_microbatches"] == 128 // 4


@pytest.mark.parametrize("name, words", [
    ("llama3_8b_pretrain_8gpu_b200_nvfp4_config",
     "llama/b200/llama3.py:155, Megatron-Bridge 0.6.2) is not simulated: NVFP4: the recipe "
     "trains in NVFP4"),
    ("llama3_70b_pretrain_64gpu_b200_fp8cs_config",
     "is not simulated: CPU activation offloading: the recipe offloads the activations of 5 "
     "of the layers to CPU memory (cpu_offloading_num_layers=5"),
])
def test_refused_recipe_exits_2_with_its_reason(name, words, tmp_path, capsys):
    out = tmp_path / "never.json"
    rc, text, err = _run(capsys, "import", "bridge", "--recipe", name, "-o", str(out))
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert err.startswith(f"vtrain: error: --recipe: {name} (megatron/bridge/perf_recipes/")
    assert words in err


def test_unknown_recipe_suggests_the_closest(tmp_path, capsys):
    rc, _, err = _run(capsys, "import", "bridge", "--recipe", "llama3_8b_pretrain_8gpu_h100_bf16",
                      "-o", str(tmp_path / "x.json"))
    assert rc == 2
    assert "(did you mean llama3_8b_pretrain_8gpu_h100_bf16_config," in err
    assert "vtrain import bridge --list shows the 119" in err


def test_list_filters_by_gpu_and_model(capsys):
    """The four H100 Llama3-8B recipes of the table (llama/h100/llama3.py)."""
    rc, text, err = _run(capsys, "import", "bridge", "--list", "--gpu", "H100", "--model",
                         "Llama 3 8B")
    assert rc == 0, err
    lines = text.splitlines()
    assert lines[0].split() == ["recipe", "GPU", "model", "GPUs", "prec", "t", "p", "v", "cp",
                                "ep", "b", "B", "vtrain"]
    assert [ln.split()[0] for ln in lines[1:-1]] == [
        "llama3_8b_pretrain_8gpu_h100_bf16_config", "llama3_8b_pretrain_8gpu_h100_fp8cs_config",
        "llama3_8b_pretrain_64gpu_h100_bf16_config", "llama3_8b_pretrain_64gpu_h100_fp8cs_config"]
    assert lines[1].split()[1:] == ["H100-SXM5-80GB", "Llama3-8B", "8", "bf16", "1", "1", "1",
                                    "2", "1", "1", "128", "modelled"]
    assert lines[-1].startswith("4 recipes of Megatron-Bridge 0.6.2 (4 modelled, 0 refused")


def test_list_all_counts_the_refused(capsys):
    """All 119 recipes; those refused are the ones recipe_session refuses."""
    from core.accuracy.bridge_sessions import recipe_sessions
    refused = sum(r.session is None for r in recipe_sessions())
    rc, text, _ = _run(capsys, "import", "bridge", "--list")
    assert rc == 0
    assert text.splitlines()[-1].startswith(
        f"119 recipes of Megatron-Bridge 0.6.2 ({119 - refused} modelled, {refused} refused")
    assert "llama3_8b_pretrain_8gpu_b200_nvfp4_config" in text and "refused: NVFP4" in text


@pytest.mark.parametrize("argv, words", [
    ((), "give one of --list, --recipe NAME or RUN_CONFIG.yaml"),
    (("--list", "--recipe", "x"), "(got --list, --recipe)"),
    (("--recipe", "llama3_8b_pretrain_8gpu_h100_bf16_config"), "--out SESSION.json is required"),
    (("--list", "--gpu", "MI300X"), "--gpu: no recipe of --gpu 'MI300X'"),
])
def test_usage_errors_exit_2(argv, words, capsys):
    rc, _, err = _run(capsys, "import", "bridge", *argv)
    assert rc == 2 and words in err
