"""Quantize the shipped sample, save it, print the summary: python examples/export_script.py OUT_FOLDER"""
import sys
from pathlib import Path

import onnxq

models, out = Path(__file__).resolve().parents[1] / "models", Path(sys.argv[1])
result = onnxq.quantize(models / "tiny_transformer.onnx", models / "tiny_transformer_calib.npz")
result.save(out / "tiny_transformer.int8.onnx")
(out / "tiny_transformer.report.html").write_text(result.to_html())
print(result.summary())
