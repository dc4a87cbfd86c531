"""Messages that point at the fix (found by a new-user trial); exit 2, one line, no traceback.

A misspelled name gets the closest known one in every input format: a session's section, an
authors'-format config's key (also tensor_parallel_size itself, which decides the format), and a
Hugging Face config's field. A GPU without a shipped store is pointed to --profile, which works."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from tests.conftest import EXAMPLES, shared_file


def _run(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("vtrain: error:") and "Traceback" not in err
    return err


def test_session_section(tmp_path, capsys):
    doc = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    doc["clusterr"] = doc.pop("cluster")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    assert "clusterr: unknown section; did you mean cluster?" in _run(capsys, "simulate", str(path))


@pytest.mark.parametrize("key, wrong", [("micro_batch_size", "micro_batch_szie"),
                                        ("tensor_parallel_size", "tensor_paralel_size")])
def test_authors_config_key(tmp_path, capsys, key, wrong):
    doc = json.loads(shared_file("configs", "mtnlg_530b_3360gpu_t8_d12_p35.json").read_text())
    doc[wrong] = doc.pop(key)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    err = _run(capsys, "simulate", str(path))
    assert f"{wrong}: unknown key in vTrain config; did you mean {key}?" in err


def test_hugging_face_field(tmp_path, capsys):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hiden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
           "hidden_act": "silu", "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    err = _run(capsys, "import", "hf", str(path), "--out", str(tmp_path / "s.json"))
    assert "num_hiden_layers: is not known to the importer" in err
    assert err.rstrip().endswith("did you mean num_hidden_layers?")


def test_a_gpu_without_a_shipped_store_runs_with_the_store_the_message_points_to(tmp_path,
                                                                                  capsys):
    """The authors' format has no cluster.profile_path: the message points to --profile too,
    and --profile is applied before the rules are checked, so the fix it names works."""
    doc = json.loads(shared_file("configs", "mtnlg_530b_3360gpu_t8_d12_p35.json").read_text())
    doc["gpu_name"] = "V100"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    err = _run(capsys, "simulate", str(path))
    assert "gpu_name='V100' has no shipped profile" in err and "--profile STORE.h5" in err
    from tests.conftest import ROOT
    assert main(["simulate", str(path), "--profile",
                 str(ROOT / "profiles" / "A100-SXM4-80GB.h5"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 3360


def test_profile_keeps_the_authors_configs_own_checks(tmp_path, capsys):
    """--profile is part of the cluster before the rules, not a reason to skip them: a config
    whose num_gpus disagrees with t*p*d is refused with it as without it (a breaker's find)."""
    doc = {"num_gpus": 16, "tensor_parallel_size": 2, "data_parallel_size": 2,
           "pipeline_parallel_size": 2, "global_batch_size": 64, "micro_batch_size": 2,
           "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "max_length": 2048}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    from tests.conftest import ROOT
    for extra in ([], ["--profile", str(ROOT / "profiles" / "A100-SXM4-80GB.h5")]):
        assert "num_gpus=16 disagrees" in _run(capsys, "simulate", str(path), *extra)


def test_a_hugging_face_config_is_not_taken_for_an_authors_config(tmp_path, capsys):
    """It shares the model keys (hidden_size, num_attention_heads, vocab_size) with the authors'
    format, not its own keys: 'neither format', pointing to vtrain import hf."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 128256,
           "max_position_embeddings": 8192}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    err = _run(capsys, "simulate", str(path))
    assert "neither a vTrain session file nor a vTrain config" in err
    assert "vtrain import hf" in err and "unknown key in vTrain config" not in err


def test_import_hf_from_a_folder_never_writes_over_its_config(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
           "hidden_act": "silu", "tie_word_embeddings": False}
    text = json.dumps(cfg)
    (folder / "config.json").write_text(text)
    err = _run(capsys, "import", "hf", str(folder), "--out", str(folder / "config.json"))
    assert "would replace the input" in err and (folder / "config.json").read_text() == text


def test_a_misspelled_required_section(tmp_path, capsys):
    doc = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    doc["plna"] = doc.pop("plan")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    err = _run(capsys, "simulate", str(path))
    assert "missing section 'plan'" in err and "plna: unknown section; did you mean plan?" in err


def test_a_set_that_changes_the_gpu_count_says_so_with_the_d_that_keeps_it(capsys):
    """MT-NLG on 3,360 GPUs with --set plan.tensor_parallel=4: d is held, so 1,680 GPUs; a note
    says so (only the headline did) and names d=24, which keeps 3,360; none when d is set."""
    from core.cli import main
    from tests.conftest import EXAMPLES
    path = str(EXAMPLES / "mtnlg_530b.json")
    assert main(["simulate", path, "--set", "plan.tensor_parallel=4", "--json"]) == 0
    assert capsys.readouterr().err.strip() == (
        "note: --set changes the GPU count from 3,360 to 1,680 (t*p*cp*d, d held at 12); "
        "--set plan.data_parallel=24 keeps 3,360")
    assert main(["simulate", path, "--set", "plan.tensor_parallel=4", "--set",
                 "plan.data_parallel=24", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_the_gpu_count_note_names_no_d_the_global_batch_refuses(capsys, tmp_path):
    """t=8 p=2 d=3 b=2 B=24 with --set plan.tensor_parallel=1: 6 GPUs; d=24 would keep 48 but
    B=24 is not divisible by b*d = 48, so the note names no d."""
    from core.cli import main
    from core.io.session import load_any, save_session
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.plan.tensor_parallel, s.plan.data_parallel, s.plan.micro_batch_size = 8, 3, 2
    s.plan.global_batch_size = 24
    path = tmp_path / "d3.json"
    save_session(s, path)
    assert main(["simulate", str(path), "--set", "plan.tensor_parallel=1", "--json"]) == 0
    assert capsys.readouterr().err.strip() == (
        "note: --set changes the GPU count from 48 to 6 (t*p*cp*d, d held at 3)")


def test_a_set_gpu_kind_takes_its_nvlink_domain_as_the_node(capsys, tmp_path):
    """--set cluster.gpu=GB200 on an 8-GPU HGX node: the node follows to the rack's 72 (it
    stayed 8, pricing t=8 all-reduces over the NICs: 49 % slower on GPT-OSS), said on standard
    error; a node the user sets too, or one the session set to something else, stays."""
    from core.io.session import load_any, save_session
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["simulate", path, "--set", "cluster.gpu=GB200", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["session"]["cluster"]["gpus_per_node"] == 72
    assert json.loads(out.out)["session"]["cluster"]["inter_node_bandwidth_gbits_per_s"] == 7200
    assert out.err.strip().splitlines() == [
        "note: --set cluster.gpu=GB200-NVL72 takes its NVLink domain as the node: 72 GPUs (was "
        "8); --set cluster.gpus_per_node=N for another",
        # the example's own network (800 Gb/s for 8 A100s, not their 1,600 reference) keeps
        # its 100 Gb/s per GPU: the field is the whole node's
        "note: --set cluster.gpu=GB200-NVL72 takes the node's network at the same share per "
        "GPU: 7,200 Gb/s for 72 GPUs (was 800 for 8); --set "
        "cluster.inter_node_bandwidth_gbits_per_s=N for another"]
    assert main(["simulate", path, "--set", "cluster.gpu=GB200", "--set",
                 "cluster.gpus_per_node=8", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["session"]["cluster"]["gpus_per_node"] == 8 and out.err == ""
    s = load_any(path)
    s.cluster.gpus_per_node = 4
    save_session(s, tmp_path / "n4.json")
    assert main(["simulate", str(tmp_path / "n4.json"), "--set", "cluster.gpu=GB200",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session"]["cluster"]["gpus_per_node"] == 4
    # an H100 node's network (8 x 400 Gb/s) follows too: the rack's 72 x 400 Gb/s
    s.cluster.gpu, s.cluster.gpus_per_node = "H100-SXM5-80GB", 8
    s.cluster.inter_node_bandwidth_gbits_per_s = 3200.0
    save_session(s, tmp_path / "h100.json")
    assert main(["simulate", str(tmp_path / "h100.json"), "--set", "cluster.gpu=GB200",
                 "--json"]) == 0
    out = capsys.readouterr()
    cluster = json.loads(out.out)["session"]["cluster"]
    assert (cluster["gpus_per_node"], cluster["inter_node_bandwidth_gbits_per_s"]) == (72, 28800)
    assert out.err.strip().splitlines()[1] == (
        "note: --set cluster.gpu=GB200-NVL72 takes its node's network: 28,800 Gb/s (was 3,200, "
        "the old kind's node); --set cluster.inter_node_bandwidth_gbits_per_s=N for another")


def test_a_session_files_gpu_alias_names_the_kind_it_means(tmp_path, capsys):
    """A session file's "H100" or "H100 SXM" (names --gpu and --set read as H100-SXM5-80GB) is
    refused with the kind it means, not with the list of every kind; a name of no shipped kind
    keeps the list."""
    doc = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    for name in ("H100", "H100 SXM"):
        doc["cluster"]["gpu"] = name
        path = tmp_path / "s.json"
        path.write_text(json.dumps(doc))
        assert main(["simulate", str(path)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"vtrain: error: {path}: cluster.gpu: gpu={name!r} is not a GPU kind of the session "
            "format; did you mean 'H100-SXM5-80GB' (as --gpu and --set cluster.gpu= read that "
            "name)?")
    doc["cluster"]["gpu"] = "V100"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 2
    assert "gpu='V100' has no shipped profile; choose one of" in capsys.readouterr().err


@pytest.mark.parametrize("name, text, importer", [
    ("train_llama3_8b.sh", "#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py \\\n"
                           "    --num-layers 32 --hidden-size 4096\n", "vtrain import megatron-args"),
    ("llama3_70b.toml", "[model]\nname = \"llama3\"\nflavor = \"70B\"\n",
     "vtrain import torchtitan"),
    ("run_config.yaml", "_target_: megatron.bridge.training.config.ConfigContainer\nmodel:\n"
                        "  num_layers: 32\n", "vtrain import bridge")])
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_another_tools_file_given_as_a_session_names_its_importer(tmp_path, capsys, name, text,
                                                                  importer, command):
    """A launch script, a torchtitan config or a Megatron-Bridge checkpoint's run_config.yaml
    given to simulate or sweep (a new user's first try) is refused as not JSON, and the message
    names the importer that reads it."""
    path = tmp_path / name
    path.write_text(text)
    err = _run(capsys, command, str(path))
    assert err.count("\n") == 1 and f"{path}: not a valid JSON file" in err
    assert f"{importer} turns it into a session" in err


def test_a_file_of_another_suffix_that_is_not_json_gets_no_importer_hint(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("not json\n")
    err = _run(capsys, "simulate", str(path))
    assert "not a valid JSON file" in err and "import" not in err
