"""The sweep's header names a short run's token budget as vtrain simulate does.

A Megatron-Bridge performance recipe's run_config.yaml trains 50 iterations (50 x 256 x 8,192 =
104,857,600 tokens); ``vtrain sweep`` printed "0B tokens" for it (and ``--gpus-from``
likewise), where ``vtrain simulate`` prints "105M tokens" (``core.util.text.format_params``).
"""
from __future__ import annotations

from core.cli import main
from core.io.session import load_any, save_session
from core.util.text import format_params
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node
HEADER = "gpu,price_per_gpu_hour_usd,max_gpus,gpus_per_node,source,date\n"


def _short(tmp_path, tokens):
    session = load_any(SMALL)
    session.cost.training_tokens = tokens
    path = tmp_path / "short.json"
    save_session(session, path)
    return path


def test_format_params_of_token_budgets():
    assert format_params(104_857_600) == "105M"
    assert format_params(26_214_400) == "26.2M"
    assert format_params(270e9) == "270B"
    assert format_params(1.5e12) == "1.5T"


def test_sweep_header_names_a_short_runs_tokens(tmp_path, capsys):
    path = _short(tmp_path, 50 * 256 * 2048)  # 26,214,400 tokens
    assert main(["sweep", str(path), "--max-gpus", "8", "--micro-batch-sizes", "1",
                 "--schedules", "1f1b", "--workers", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "global batch 256, 26.2M tokens at $" in first and "0B tokens" not in first


def test_gpus_from_header_names_a_short_runs_tokens(tmp_path, capsys):
    path = _short(tmp_path, 50 * 256 * 2048)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,2,8,,test,2026-01-01\n")
    assert main(["sweep", str(path), "--gpus-from", str(sheet), "--micro-batch-sizes", "1",
                 "--schedules", "1f1b", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "global batch 256, 26.2M tokens; failures" in out and "0B tokens" not in out
