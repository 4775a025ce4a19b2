"""Nodes without names, or with repeated names (hand-built and older exported graphs), get unique names at load, so
that everything keyed by node works — sensitivity, fallback, recipe auto, placement, the exclude options — and the
report maps each generated name back to the node's place in the input file."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from corpus import _two_matmuls, _weight, save

import onnxq
from onnxq.cli.main import main
from onnxq.io import LOAD_NOTES, load_model


def _model(tmp_path, names=("", "", "")):
    model = _two_matmuls()
    for node, name in zip(model.graph.node, names):
        node.name = name
    return save(model, tmp_path / "m.onnx")


def _data(samples=40):
    return {"x": _weight((samples, 16), seed=11)}


def test_unnamed_nodes_are_named_by_op_type_and_position(tmp_path):
    model = load_model(_model(tmp_path, ("", "", "mm2")))
    assert [n.name for n in model.graph] == ["MatMul_0", "Relu_1", "mm2"]
    renamed = model.meta[LOAD_NOTES]["renamed_nodes"]
    assert [(r.name, r.original, r.graph, r.position) for r in renamed] == [
        ("MatMul_0", None, "main", 0), ("Relu_1", None, "main", 1)]


def test_a_repeated_name_keeps_its_first_node_and_a_generated_name_never_takes_an_existing_one(tmp_path):
    model = load_model(_model(tmp_path, ("Relu_1", "", "Relu_1")))
    assert [n.name for n in model.graph] == ["Relu_1", "Relu_1_1", "Relu_1_2"]
    assert [(r.original, r.position) for r in model.meta[LOAD_NOTES]["renamed_nodes"]] == [(None, 1), ("Relu_1", 2)]


def test_the_caller_s_model_keeps_its_names():
    proto = _two_matmuls()
    for node in proto.graph.node:
        node.name = ""
    onnxq.quantize(proto, _data(), config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False)))
    assert [n.name for n in proto.graph.node] == ["", "", ""]


def test_sensitivity_placement_and_the_report_work_without_names(tmp_path, capsys):
    report_path = tmp_path / "r.json"
    code = main([_model(tmp_path), "--calib", str(_save(tmp_path, _data())), "-o", str(tmp_path / "q.onnx"),
                 "--report", str(report_path), "--sensitivity"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(report_path.read_text())
    assert [e["name"] for e in report["quantized"]] == ["MatMul_0", "MatMul_2"]
    cpu = report["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    assert sorted(cpu["integer"]) == ["MatMul_0", "MatMul_2"]  # was 0 of 2 before names were given
    assert sorted(n["name"] for n in report["sensitivity"]["nodes"]) == ["MatMul_0", "MatMul_2"]
    assert [(r["name"], r["position"]) for r in report["renamed_nodes"]] == [
        ("MatMul_0", 0), ("Relu_1", 1), ("MatMul_2", 2)]
    assert "3 node(s) had no name or a repeated one" in out
    names = [n.name for n in onnx.load(str(tmp_path / "q.onnx")).graph.node]
    assert "MatMul_0" in names and "MatMul_2" in names


def _save(tmp_path, data):
    np.savez(tmp_path / "d.npz", **data)
    return tmp_path / "d.npz"


@pytest.mark.parametrize("names", [("", "", ""), ("mm", "", "mm")])
def test_fallback_and_exclude_work_on_generated_names(tmp_path, names):
    path = _model(tmp_path, names)
    second = "MatMul_2" if names[0] == "" else "mm_1"
    config = onnxq.QuantConfig(exclude_nodes=(second,), verify=onnxq.VerifyConfig(sensitivity_samples=0))
    report = onnxq.quantize(path, _data(), config=config).report
    assert [e.name for e in report.quantized] == [names[0] or "MatMul_0"]
    assert [(e.name, e.detail) for e in report.left_float] == [(second, "excluded by name")]
    # A tolerance only float can meet: the fallback keeps nodes float by their generated names.
    tight = onnxq.QuantConfig(verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_sqnr_db=200.0), fallback=True))
    report = onnxq.quantize(path, _data(), config=tight).report
    assert report.fallback is not None and report.fallback.probes >= 1
    ranked = {n.name for n in report.sensitivity.nodes}
    assert ranked == {names[0] or "MatMul_0", second}


def test_recipe_auto_works_on_generated_names(tmp_path):
    path = _model(tmp_path)
    config = onnxq.QuantConfig(recipe="auto", verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_cosine=0.99999)))
    report = onnxq.quantize(path, _data(), config=config).report
    assert report.verification is not None and {e.name for e in report.quantized} <= {"MatMul_0", "MatMul_2"}
