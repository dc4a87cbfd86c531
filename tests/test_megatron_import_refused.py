"""Megatron-LM arguments that build another model or algorithm than the one simulated, or move
memory or work first-order, are refused by name when given at a value other than Megatron-LM's
default (resources/megatron_arguments.json, effect ``refused``; docs/megatron_args.md): the
audit of the arguments that were listed as ``ignored``. At the default they change nothing and
are listed as not used; one that acts only with other options (``only_with``) is listed as
having no effect without them."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from core.io.megatron.arguments import (BY_OPTION, ENTRIES, REFUSED_ARGUMENTS, TABLE_FILE,
                                        MegatronArgsError, at_default)
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import import_file, session_from_launch
from tests.test_megatron_args import (DSV3_LAUNCH, GPT3_175B_NO_RAMPUP, GPT_1P3B, LLAMA3_8B,
                                      MIXTRAL_LAUNCH)
from tests.test_megatron_import_current import LLAMA3_8B_FP8

BASE = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
        "--micro-batch-size 1 --vocab-size 9 --save /c ")


def _import(extra: str, num_gpus: int = 1):
    return session_from_launch(read_launch(BASE + extra, "a.txt"), num_gpus=num_gpus)


def _refusal(extra: str, num_gpus: int = 1) -> str:
    with pytest.raises(MegatronArgsError) as exc:
        _import(extra, num_gpus)
    return str(exc.value)


DSA = ("DeepSeek sparse attention's indexer (--experimental-attention-variant dsa): another "
       "attention, each query attending to its top-k keys")
HCP = ("hybrid context parallelism: sequences spread over the data- and context-parallel ranks "
       "by their lengths, another split of the work than cp equal chunks of each sequence")
SHARDS = ("tensor-parallel weights split into further shards that are gathered when used "
          "(--gtp-remat-*): another weight memory and extra all-gathers")
FP4 = "FP4 training (--fp4-format): FP4 GEMMs, another tensor-core rate"
T5 = "an encoder-decoder (T5) model: another model than a GPT decoder"

# one launch per group of newly refused arguments -> the exact message (exit 2 in the CLI)
GROUPS = {
    "dsa": ("--dsa-indexer-topk 2048",
            f"a.txt: --dsa-indexer-topk 2048: not modelled ({DSA})"),
    "linear attention": ("--linear-num-value-heads 64",
                         "a.txt: --linear-num-value-heads 64: not modelled (linear-attention "
                         "(gated delta net) layers: another model)"),
    "hyper-connections": ("--mhc-num-residual-streams 8",
                          "a.txt: --mhc-num-residual-streams 8: not modelled (manifold "
                          "hyper-connections (--enable-mhc-connections): several residual "
                          "streams per layer)"),
    "hybrid context parallel": ("--hybrid-context-parallel",
                                f"a.txt: --hybrid-context-parallel: not modelled ({HCP})"),
    "weight shards": ("--tensor-parallel-num-weight-shards 2",
                      f"a.txt: --tensor-parallel-num-weight-shards 2: not modelled ({SHARDS})"),
    "fp4": ("--fp4-param-gather", f"a.txt: --fp4-param-gather: not modelled ({FP4})"),
    "fp8 wgrad": ("--bf16 --fp8-format hybrid --no-fp8-wgrad",
                  "a.txt: --no-fp8-wgrad: not modelled (the weight-gradient GEMMs in BF16 under "
                  "FP8: a third of the linear layers' GEMMs at the BF16 rate, where the "
                  "simulation runs all at the FP8 rate)"),
    "fp8 first/last layers": ("--bf16 --fp8-format hybrid --first-last-layers-bf16",
                              "a.txt: --first-last-layers-bf16: not modelled (FP8 off for the "
                              "first and last layers (--first-last-layers-bf16): their GEMMs at "
                              "the BF16 rate, where the simulation runs every layer's at the FP8 "
                              "rate)"),
    "mxfp8 all-to-all": ("--moe-dispatch-fwd-dtype mxfp8",
                         "a.txt: --moe-dispatch-fwd-dtype mxfp8: not modelled (the expert "
                         "all-to-all in MXFP8: about half the bytes of the BF16 exchange "
                         "simulated)"),
    "activation offloading": ("--moe-paged-stash",
                              "a.txt: --moe-paged-stash: not modelled (MoE activations kept in a "
                              "paged stash (--moe-paged-stash): another activation memory, part "
                              "of it on the host)"),
    "batch schedule": ("--step-batch-size-schedule 0:8",
                       "a.txt: --step-batch-size-schedule 0:8: not modelled (the global batch "
                       "changes during the run: the session simulates one batch, "
                       "--global-batch-size's)"),
    "encoder-decoder": ("--decoder-num-layers 4",
                        f"a.txt: --decoder-num-layers 4: not modelled ({T5})"),
    "unread files": ("--spec megatron.core.models.gpt.gpt_layer_specs my_spec",
                     "a.txt: --spec megatron.core.models.gpt.gpt_layer_specs my_spec: not "
                     "modelled (a module that builds the layers: what it builds is not read "
                     "(the simulation builds Megatron-Core's GPT layer with Transformer "
                     "Engine))"),
    "document masking": ("--dataloader-inter-document-masking",
                         "a.txt: --dataloader-inter-document-masking: not modelled (attention "
                         "masked at document boundaries: its work depends on the documents' "
                         "lengths, which the launch does not give (the simulation masks "
                         "causally over the whole sequence))"),
    "kernels": ("--batch-invariant-mode",
                "a.txt: --batch-invariant-mode: not modelled (batch-invariant kernels "
                "(--batch-invariant-mode): other GEMM, attention and norm kernels than "
                "cuBLAS's and Transformer Engine's timed)"),
    "no training": ("--freeze-all-layers",
                    "a.txt: --freeze-all-layers: not modelled (no layer trained: no weight "
                    "gradients, gradient reduction or optimizer step for them, which the "
                    "simulation counts)"),
    "no communication": ("--fake-process-group",
                         "a.txt: --fake-process-group: not modelled (a fake process group: no "
                         "collective communicates (a benchmarking run), where the simulation "
                         "times every exchange)"),
    "mtp": ("--mtp-num-layers 2 --mtp-use-repeated-layer",
            "a.txt: --mtp-use-repeated-layer: not modelled (one multi-token-prediction layer's "
            "weights used at every MTP depth: fewer parameters than the --mtp-num-layers "
            "layers simulated)"),
    "mlp chunks": ("--mlp-chunks-for-training 4",
                   "a.txt: --mlp-chunks-for-training 4: not modelled (the MLP run in that many "
                   "chunks of the tokens: other GEMM shapes and activation memory than one "
                   "MLP's)"),
}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_each_newly_refused_group_is_named_with_why(group):
    extra, message = GROUPS[group]
    assert _refusal(extra) == message


def test_a_refusal_is_exit_2_in_the_cli(tmp_path, capsys):
    path = tmp_path / "dsa.sh"
    path.write_text("torchrun --nproc_per_node 1 pretrain_gpt.py " + BASE
                    + "--dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128\n", encoding="utf-8")
    assert main(["import", "megatron-args", str(path), "--out", str(tmp_path / "s.json")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--dsa-indexer-n-heads 64: not modelled ({DSA})" in err
    assert f"--dsa-indexer-head-dim 128: not modelled ({DSA})" in err  # every one named
    assert not (tmp_path / "s.json").exists()


def test_at_megatrons_default_they_change_nothing_and_are_listed_as_not_used():
    res = _import("--dsa-indexer-topk-freq 1 --moe-dispatch-fwd-dtype bf16 "
                  "--mlp-chunks-for-training 1 --mhc-sinkhorn-iterations 20 "
                  "--activation-offload-fraction 1.0 --fp4-recipe nvfp4")
    assert {"--dsa-indexer-topk-freq", "--moe-dispatch-fwd-dtype", "--mlp-chunks-for-training",
            "--mhc-sinkhorn-iterations", "--activation-offload-fraction",
            "--fp4-recipe"} <= set(res.neutral)
    assert not set(res.ignored) & {"--dsa-indexer-topk-freq", "--mlp-chunks-for-training"}
    # a value that only reads as the default is one: 1.0 for 1, 20 for 20.0
    assert at_default("--mlp-chunks-for-training", ["1.0"])
    assert not at_default("--mlp-chunks-for-training", ["2"])
    assert not at_default("--dsa-indexer-topk", ["0"])  # default None: any value is given
    assert not at_default("--hybrid-context-parallel", [])  # a switch given is never
    assert at_default("--offload-modules", []) and not at_default("--offload-modules", ["core_attn"])


def test_without_what_they_act_with_they_are_listed_as_having_no_effect():
    res = _import("--no-fp8-wgrad --first-last-layers-bf16 --mtp-use-repeated-layer "
                  "--offload-modules core_attn --moe-paged-stash-page-size 128")
    assert res.ignored["--no-fp8-wgrad"] == (
        "no effect without --fp8-format (the weight-gradient GEMMs in BF16 under FP8: a third "
        "of the linear layers' GEMMs at the BF16 rate, where the simulation runs all at the "
        "FP8 rate)")
    assert res.ignored["--mtp-use-repeated-layer"].startswith("no effect without --mtp-num-layers")
    assert res.ignored["--offload-modules"].startswith(
        "no effect without --fine-grained-activation-offloading")
    assert res.ignored["--moe-paged-stash-page-size"].startswith(
        "no effect without --moe-paged-stash")
    # the layer counts act with both FP8 and --first-last-layers-bf16
    fp8 = _import("--bf16 --fp8-format hybrid --num-layers-at-start-in-bf16 2")
    assert fp8.ignored["--num-layers-at-start-in-bf16"].startswith(
        "no effect without --first-last-layers-bf16")
    assert _refusal("--bf16 --fp8-format hybrid --first-last-layers-bf16 "
                    "--num-layers-at-start-in-bf16 2").count("not modelled") == 2


def test_the_rank_order_is_refused_only_where_it_differs():
    """--use-tp-pp-dp-mapping (Megatron-Core's order tp-cp-ep-pp-dp) puts other ranks in the
    data-parallel and pipeline groups than the default tp-cp-ep-dp-pp the simulation places
    ranks by, where both p and d exceed 1; with either 1 the orders are one."""
    msg = _refusal("--pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping", num_gpus=4)
    assert msg == ("a.txt: --use-tp-pp-dp-mapping: not modelled (Megatron-Core's rank order "
                   "tp-cp-ep-pp-dp: with p = 2 and d = 2 the data-parallel and pipeline groups "
                   "hold other ranks than under its default tp-cp-ep-dp-pp, which the "
                   "simulation places ranks by, so other exchanges cross nodes)")
    one = _import("--pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping", num_gpus=2)
    assert one.ignored["--use-tp-pp-dp-mapping"] == (
        "no effect with p = 2 and d = 1 (the order tp-cp-ep-pp-dp is the default tp-cp-ep-dp-pp "
        "when p or d is 1)")


def test_a_yaml_file_of_arguments_is_refused_even_with_the_launchs():
    """Megatron-LM's --yaml-cfg replaces the launch's arguments by the file's (parse_args:
    ``args = load_yaml(args.yaml_cfg)``): the launch's sizes are not what runs."""
    assert _refusal("--yaml-cfg /cfg/gpt.yaml") == (
        "a.txt: --yaml-cfg /cfg/gpt.yaml: not modelled (Megatron-LM takes all its arguments "
        "from that YAML file instead of the launch's, and vtrain does not read it)")


def test_every_refused_argument_given_off_its_default_is_refused_by_name():
    """Each refused entry of the table that no mapping reads, given at a value that is not
    Megatron-LM's default (with what it acts with), stops the import naming it."""
    read_by_mappings = {"--optimizer", "--optimizer-cpu-offload", "--cpu-offloading-num-layers",
                        "--fine-grained-activation-offloading", "--fp32-residual-connection",
                        "--distribute-saved-activations", "--moe-expert-capacity-factor",
                        "--moe-pad-expert-input-to-capacity", "--use-tp-pp-dp-mapping",
                        "--output-logit-dtype"}
    needs_values = {"--fp8-format": "hybrid --bf16", "--mtp-num-layers": "1",
                    "--first-last-layers-bf16": "", "--moe-paged-stash": "",
                    "--fine-grained-activation-offloading": "",
                    "--overlap-moe-expert-parallel-comm": "", "--use-megatron-fsdp": "",
                    "--defer-embedding-wgrad-compute": ""}
    hybrid = {"--is-hybrid-model", "--hybrid-override-pattern", "--mamba-state-dim",
              "--mamba-head-dim", "--mamba-num-groups", "--hybrid-attention-ratio",
              "--hybrid-mlp-ratio"}
    checked = 0
    for e in ENTRIES:
        if e.effect != "refused" or e.options[0] in read_by_mappings | hybrid:
            continue
        flag = e.options[0]
        if e.nargs == 0:
            value = ""
        elif e.choices:
            value = str(next(c for c in e.choices if c != e.default))
        elif isinstance(e.nargs, int):  # --rampup-batch-size START INCREMENT SAMPLES
            value = " ".join(["7"] * e.nargs)
        else:
            value = "7"
        extra = " ".join(f"{f} {needs_values[f]}" for f in e.only_with)
        msg = _refusal(f"{extra} {flag} {value}")
        assert f"{' '.join(filter(None, (flag, value)))}: not modelled ({e.note})" in msg, flag
        checked += 1
    assert checked >= 80


def test_the_reclassification_is_the_tables():
    """The table is the one source: the audited arguments are refused there with a note."""
    data = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    by = {a["options"][0]: a for a in data["arguments"]}
    for flag in ("--dsa-indexer-topk", "--linear-key-head-dim", "--mhc-num-residual-streams",
                 "--hybrid-context-parallel", "--tensor-parallel-num-weight-shards",
                 "--fp4-param-gather", "--no-fp8-wgrad", "--first-last-layers-bf16",
                 "--offload-modules", "--step-batch-size-schedule", "--spec", "--yaml-cfg",
                 "--optimizer", "--cpu-offloading-num-layers", "--use-tp-pp-dp-mapping",
                 "--fake-process-group", "--freeze-all-layers", "--te-precision-config-file"):
        assert by[flag]["effect"] == "refused" and by[flag]["note"], flag
        assert flag in REFUSED_ARGUMENTS
    assert by["--no-fp8-wgrad"]["only_with"] == ["--fp8-format"]
    assert BY_OPTION["--num-layers-at-end-in-bf16"].only_with == (
        "--fp8-format", "--first-last-layers-bf16")
    # what stays ignored: second-order kernel, fusion, bucket and SM-count switches
    for flag in ("--ddp-bucket-size", "--moe-deepep-num-sms",
                 "--tp-comm-overlap-cfg", "--manual-gc",
                 "--moe-token-drop-policy", "--transformer-impl"):
        assert by[flag]["effect"] == "ignored", flag
    # the unfused activation keeps silu's output too (model.bias_activation_fusion): modelled
    for flag in ("--no-bias-swiglu-fusion", "--no-bias-gelu-fusion"):
        assert by[flag]["effect"] == "modelled", flag
    # the second audit: what changes the run's length, its memory or the model's work
    for flag, only_with in (
            ("--rampup-batch-size", None), ("--output-logit-dtype", None),
            ("--fp8-output-proj", ["--fp8-format"]), ("--mtp-detach-heads", ["--mtp-num-layers"]),
            ("--mtp-hsm", ["--mtp-num-layers"]), ("--qk-l2-norm", None),
            ("--defer-embedding-wgrad-compute", None),
            ("--wgrad-deferral-limit", ["--defer-embedding-wgrad-compute"]),
            ("--ep-overlap-early-attn-memory-release", ["--overlap-moe-expert-parallel-comm"]),
            ("--keep-fp8-transpose-cache", ["--use-megatron-fsdp", "--fp8-format"])):
        assert by[flag]["effect"] == "refused" and by[flag]["note"], flag
        assert by[flag].get("only_with") == only_with, flag


@pytest.mark.parametrize("name, text", [
    ("gpt3.sh", GPT3_175B_NO_RAMPUP), ("gpt13.sh", GPT_1P3B), ("llama.sh", LLAMA3_8B),
    ("mixtral.sh", MIXTRAL_LAUNCH), ("dsv3.sh", DSV3_LAUNCH)])
def test_real_launches_still_import(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    res = import_file(path, gpu="H100-SXM5-80GB")
    assert res.session.model.num_layers > 0


def test_llama3_8b_fp8_example_still_imports(tmp_path):
    path = tmp_path / "llama.sh"
    path.write_text(LLAMA3_8B_FP8, encoding="utf-8")
    res = import_file(path, gpu="H100-SXM5-80GB", variables={"1": "/ck", "3": "MOCK", "4": "MOCK"})
    assert res.session.plan.precision == "fp8"


#: --rampup-batch-size's refusal (resources/megatron_arguments.json's note).
RAMPUP = ("the global batch ramps up from its first value over the first samples "
          "(rampup_batch_size: start, increment, samples): the per-iteration simulation and the "
          "iterations-to-train count assume --global-batch-size from the first step; drop it to "
          "plan the full-batch phase")


def test_a_batch_ramp_up_is_refused_by_name(tmp_path, capsys):
    """--rampup-batch-size (Megatron-LM: the global batch grows from START by INCREMENT over
    SAMPLES samples) was listed as ignored in a sample-based run: the iterations, their time and
    the run's days were counted at the full batch from the first step. Refused by name, with
    what to do; in an iteration-based run Megatron-LM does not start it either, said with it
    (rule iteration-based-no-rampup). Exit 2 in the CLI."""
    samples = "--train-samples 1000 --global-batch-size 8 "
    assert _refusal(samples + "--rampup-batch-size 2 2 400", num_gpus=8) == (
        f"a.txt: --rampup-batch-size 2 2 400: not modelled ({RAMPUP})")
    # the full-batch phase alone imports (what the message says to do)
    assert _import(samples, num_gpus=8).session.plan.global_batch_size == 8
    iters = _refusal("--train-iters 100 --rampup-batch-size 2 2 400")
    assert iters == (
        f"a.txt: --rampup-batch-size 2 2 400: not modelled ({RAMPUP}); and Megatron-LM "
        "(d98e8a6) refuses to start it: rule iteration-based-no-rampup: \"expected no "
        "batch-size rampup for iteration-based training\" (megatron/training/arguments.py "
        "validate_args); change one of: --train-iters 100, --rampup-batch-size 2 2 400")
    path = tmp_path / "ramp.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py " + BASE + samples
                    + "--rampup-batch-size 2 2 400\n", encoding="utf-8")
    assert main(["import", "megatron-args", str(path), "--out", str(tmp_path / "s.json")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--rampup-batch-size 2 2 400: not modelled ({RAMPUP})" in err
    assert "Traceback" not in err and not (tmp_path / "s.json").exists()


#: --output-logit-dtype's note.
LOGITS = ("the output layer's logits in another dtype than the training precision's: another "
          "logits memory (and loss kernel) than the one modelled, whose logits are in the "
          "compute dtype (bf16 under --bf16 and FP8, fp16 under --fp16, fp32 without either)")


@pytest.mark.parametrize("extra, compute", [
    ("--bf16 --output-logit-dtype fp32", "bf16"),
    ("--bf16 --fp8-format hybrid --output-logit-dtype fp32", "bf16"),
    ("--fp16 --output-logit-dtype bf16", "fp16"), ("--fp16 --output-logit-dtype fp32", "fp16"),
    ("--output-logit-dtype bf16", "fp32")])
def test_logits_in_another_dtype_are_refused(extra, compute):
    """--output-logit-dtype (logit_dtype): the memory model keeps the logits in the compute
    dtype (core.model.memory: s*b*V/t*(e + 4) with e the compute dtype's bytes), so fp32 logits
    under bf16 training (s*b*V/t*4, their own fp32 copy) or bf16 ones under fp32 training are
    another number: refused by name. It was listed as ignored and the bf16 logits counted."""
    dtype = extra.split()[-1]
    assert _refusal(extra) == (f"a.txt: --output-logit-dtype {dtype}: not modelled: the "
                               f"logits modelled are {compute} ({LOGITS})")


@pytest.mark.parametrize("extra, dtype, precision", [
    ("--bf16 --output-logit-dtype bf16", "bf16", "bf16"),
    ("--bf16 --fp8-format hybrid --output-logit-dtype bf16", "bf16", "fp8"),
    ("--output-logit-dtype fp32", "fp32", "fp32")])
def test_logits_in_the_compute_dtype_change_nothing(extra, dtype, precision):
    res = _import(extra)
    assert res.session.plan.precision == precision
    assert res.ignored["--output-logit-dtype"] == (
        f"{dtype}: no effect, the logits are {dtype} already (the training precision's compute "
        "dtype)")


MTP_DETACH = ("multi-token-prediction heads detached from the main model: another backward "
              "through the MTP layers than the one simulated (Megatron-Core's default MTP layers)")
MTP_HSM = ("a variant of the multi-token-prediction layers (mtp_hsm) other than Megatron-Core's "
           "default MTP layers, the ones simulated")
FP8_OUT = ("an output projection's GEMM in FP8 beside the FP8 recipe's linear layers: another "
           "set of FP8 GEMMs than the one simulated")


@pytest.mark.parametrize("flag, needs, note", [
    ("--mtp-detach-heads", "--mtp-num-layers 1", MTP_DETACH),
    ("--mtp-hsm", "--mtp-num-layers 1", MTP_HSM),
    ("--fp8-output-proj", "--bf16 --fp8-format hybrid", FP8_OUT)])
def test_mtp_variants_and_the_fp8_output_projection_are_refused_where_they_act(flag, needs, note):
    """The MTP layers simulated are Megatron-Core's default ones (core.model.mtp); detached
    heads and mtp_hsm are other MTP layers, refused by name with --mtp-num-layers (without it
    Megatron-LM builds no MTP layer: listed as having no effect). --fp8-output-proj changes
    which GEMMs run in FP8: refused with --fp8-format, of no effect without it."""
    assert _refusal(f"{needs} {flag}") == f"a.txt: {flag}: not modelled ({note})"
    res = _import(flag)
    assert res.ignored[flag] == f"no effect without {needs.split()[-2]} ({note})"
    assert res.session.model.mtp_num_layers == 0
