"""Megatron-LM's NullTokenizer size and ``--no-pad-vocab-size``, from megatron-core's source.

megatron-core 0.19.2 (the PyPI wheel; 0.18.2 and 0.19.0 the same),
``megatron/core/tokenizers/text/libraries/null_tokenizer.py``::

    def __init__(self, vocab_size, eod_id=None, pad_id=-1, **kwargs):
        self._vocab_size = int(vocab_size)
        self._eod_id = int(eod_id) if eod_id is not None else self._vocab_size - 1
    ...
    def vocab_size(self):
        return self._vocab_size

so ``--tokenizer-type NullTokenizer --vocab-size N`` has N tokens (megatron-core 0.17.1 and
0.16.1 returned ``_vocab_size_without_eod + 1``, which the import followed). The table's
Megatron-LM commit has ``--null-tokenizer-eod-id``, which came with the 0.18 tokenizer.
``megatron/core/tokenizers/utils/build_tokenizer.py`` (0.19.2) pads only ``if
args.pad_vocab_size`` (``--no-pad-vocab-size`` clears it) and only when ``padded_vocab_size`` is
None, to ``ceil(orig / (make_vocab_size_divisible_by * tensor_model_parallel_size))`` times that
multiple (``vocab_size_with_padding``).
"""

from __future__ import annotations

import pytest

from core.io.megatron.arguments import BY_OPTION, MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.megatron.to_session import import_file
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig, padded_vocab_size
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from tests.test_megatron_import_current import PARSER

HEAD = ("--num-layers=4 --hidden-size=256 --num-attention-heads=8 --seq-length=512 "
        "--micro-batch-size=2 --global-batch-size=64 --tensor-model-parallel-size=2 ")


def _import(tmp_path, words):
    path = tmp_path / "args.txt"
    path.write_text(HEAD + words + "\n")
    return import_file(path, num_gpus=8, gpus_per_node=8)


def test_null_tokenizer_has_vocab_size_tokens(tmp_path):
    m = _import(tmp_path, "--tokenizer-type NullTokenizer --vocab-size 129280").session.model
    assert m.vocab_size == 129280  # not 129,281
    # DeepSeek-V3's launches: 129,280 = 3232*40 is not padded at t = 2 (the import read 129,281,
    # which pads to 3232*2*21 = 135,744)
    m = _import(tmp_path, "--tokenizer-type NullTokenizer --vocab-size 129280 "
                "--make-vocab-size-divisible-by 3232").session.model
    assert padded_vocab_size(m.vocab_size, 2, m.make_vocab_size_divisible_by) == 129280


def test_the_export_writes_the_null_tokenizers_size_and_reads_it_back(tmp_path):
    s = Session(ModelConfig("x", 4, 256, 4, None, 128, 32000),
                ParallelPlan(1, 1, 1, 1, 8, "1f1b", "none", "bf16"), ClusterConfig(), CostConfig())
    args = export_arguments(s)
    assert args[args.index("--tokenizer-type") + 1] == "NullTokenizer"
    assert args[args.index("--vocab-size") + 1] == "32000"
    path = tmp_path / "back.txt"
    path.write_text(" ".join(args) + "\n")
    assert import_file(path, num_gpus=8).session.model.vocab_size == 32000


def test_megatron_pads_to_a_multiple_of_the_divisor_times_t(tmp_path):
    # vocab_size_with_padding: 50,257 over 128*2 = 256 -> ceil(196.3) * 256 = 50,432
    m = _import(tmp_path, "--tokenizer-type GPT2BPETokenizer").session.model
    assert (m.vocab_size, m.make_vocab_size_divisible_by) == (50257, 128)
    assert padded_vocab_size(m.vocab_size, 2, m.make_vocab_size_divisible_by) == 50432 == 197 * 256


@pytest.mark.parametrize("flag", ["--no-pad-vocab-size", "--disable-pad-vocab-size"])
def test_no_pad_vocab_size_without_padded_vocab_size_is_refused_by_name(tmp_path, flag):
    """It was listed as ignored and the import padded 999 to 1,024 all the same."""
    with pytest.raises(MegatronArgsError) as err:
        _import(tmp_path, f"--tokenizer-type NullTokenizer --vocab-size 999 {flag}")
    assert f"{flag}: without --padded-vocab-size" in str(err.value)
    assert "give --padded-vocab-size" in str(err.value)


def test_no_pad_vocab_size_with_padded_vocab_size_changes_nothing(tmp_path):
    res = _import(tmp_path, "--tokenizer-type NullTokenizer --vocab-size 999 "
                  "--padded-vocab-size 1000 --no-pad-vocab-size")
    m = res.session.model
    assert (m.vocab_size, m.make_vocab_size_divisible_by) == (1000, 1)
    assert "--no-pad-vocab-size" not in res.ignored
    assert any("--no-pad-vocab-size" in str(n) and "no effect" in str(n) for n in res.notes)


def test_the_table_models_it_as_the_parser_defines_it():
    import json
    if not PARSER.is_file():
        pytest.skip(f"shared data not present: {PARSER}")
    parser = json.loads(PARSER.read_text(encoding="utf-8"))
    entry = next(a for a in parser["arguments"] if "--no-pad-vocab-size" in a["options"])
    assert (entry["dest"], entry["action"], entry["default"]) == (
        "pad_vocab_size", "_StoreFalseAction", True)
    assert "--null-tokenizer-eod-id" in {o for a in parser["arguments"] for o in a["options"]}
    assert BY_OPTION["--no-pad-vocab-size"].effect == "modelled"
