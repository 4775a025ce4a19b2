"""MatMulNBits accuracy_level as a measured choice: where the run chose level 4 for a decoder's 4-bit weights (the
config left it open), the same model at level 0 is checked on the verification data, and level 4 is kept only where
its greedy next tokens and perplexity stay within LEVEL4_MAX_LOSS / LEVEL4_MAX_PERPLEXITY of level 0's. Real
sessions on the test decoder; the bound itself is lowered in one test to take the other branch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import numpy as np
import onnx_ir as ir

import onnxq
from onnxq.search import accuracy_level as search

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from decoder_model import kv_decoder, sampled_windows  # noqa: E402


def _levels(model: ir.Model) -> set[int]:
    return {node.attributes["accuracy_level"].value for node in model.graph if node.op_type == "MatMulNBits"
            and "accuracy_level" in node.attributes}


def _run(config: dict | None = None):
    model = kv_decoder()
    calibration = sampled_windows(model, np.random.default_rng(1), 24, 16)
    held_out = sampled_windows(model, np.random.default_rng(2), 8, 16)
    settings = {"weights": {"dtype": "int4", "symmetric": True}, "verify": {"never_slower": False}, **(config or {})}
    return onnxq.quantize(model, calibration, verify_data=held_out, config=settings)


def test_level_4_chosen_by_the_run_is_measured_against_level_0_and_kept_where_it_holds():
    result = _run()
    choice = result.report.section("accuracy_level")
    assert choice is not None and choice.kept == 4 and _levels(result.model) == {4}
    level4, level0 = choice.agreement
    # Measured on this seed: the two levels agree with float on the same share of next tokens, within the bound.
    assert level4 >= level0 - search.LEVEL4_MAX_LOSS and 0.5 < level0 <= 1.0
    written = json.loads(json.dumps(result.report.to_dict()))
    jsonschema.validate(written, json.loads((Path(onnxq.__file__).parent / "report_schema.json").read_text()))
    assert written["accuracy_level"]["kept"] == 4
    assert any(line.startswith("accuracy level: 4 kept") for line in choice.text())


def test_level_0_is_kept_where_level_4_loses_next_tokens(monkeypatch):
    monkeypatch.setattr(search, "LEVEL4_MAX_LOSS", -1.0)  # no level 4 can hold: the other branch, real sessions
    result = _run()
    choice = result.report.section("accuracy_level")
    assert choice.kept == 0 and _levels(result.model) == {0}
    assert any(n.startswith("accuracy level 0 kept") for n in result.report.notes)
    assert result.report.verdict == "within tolerance"


def test_a_level_the_user_set_is_not_searched():
    result = _run({"blocks": {"accuracy_level": 4}})
    assert result.report.section("accuracy_level") is None and _levels(result.model) == {4}
    assert "accuracy_level" not in result.report.seconds
