"""File > Import Hugging Face config: a Llama config becomes an untitled session; a refused
config (quantized weights) changes nothing and says why in one message."""

from __future__ import annotations

import json

from core.model import model_math
from tests.test_llama import LLAMA3_8B


def test_import_hf_config_into_the_window(window, qtbot, tmp_path, message_boxes, real_simulate):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(LLAMA3_8B), encoding="utf-8")
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.import_hf_path(path)
    session = window.session()
    assert session.model.name == "Meta-Llama-3-8B"
    assert model_math.num_parameters(session.model) == 8_030_261_248
    assert window.path is None and window.isWindowModified()
    assert "rope_theta" in window.statusBar().currentMessage()
    assert not message_boxes.of_kind("critical")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_refused_config_leaves_the_session_untouched(window, tmp_path, message_boxes):
    before = window.session().to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA3_8B, "quantization_config": {"quant_method": "gptq"}}),
                    encoding="utf-8")
    assert not window.import_hf_path(path)
    (kind, title, text), = message_boxes.of_kind("critical")
    assert text == "config.json: quantization_config: quantized weights are not modelled"
    assert window.session().to_dict() == before
