"""Placement read from ORT's graph assignment (verify.kernels.assignment), the way a provider that compiles subgraphs
(OpenVINO) is placed: here on the CPU provider, which records its assignment the same way."""

from __future__ import annotations

import onnxq
from onnxq.verify.kernels.assignment import assigned_placement
from onnxq.verify.kernels.placement import quantized_nodes


def test_assigned_placement_finds_each_quantized_node_with_its_dequantize_linear(samples_dir, tmp_path):
    onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                   output=tmp_path / "q.onnx", config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False)))
    quantized = quantized_nodes(tmp_path / "q.onnx")
    placement = assigned_placement(tmp_path / "q.onnx", "CPUExecutionProvider", {}, quantized)
    assert placement.source == "assigned" and placement.subgraphs >= 1
    # The assignment is recorded as the graph is partitioned, before ORT's QDQ fusions: each MatMul with its DQ.
    assert len(quantized) == 6 and sorted(placement.integer) == sorted(quantized) == sorted(placement.compiled)
    assert not placement.float_fallbacks and not placement.elsewhere
    assert placement.brief().startswith("6/6 quantized nodes compiled into CPU with their DequantizeLinear")
