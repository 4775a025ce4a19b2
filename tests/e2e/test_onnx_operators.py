"""Every ONNX operator onnx's node tests cover, between two quantized products (tests/e2e/onnx_operator_models.py),
through the command line with its defaults: never an internal error, a refusal in one line, and a written model that
ONNX Runtime runs (exit 0, 1, or 4 where nothing is shown). Slow: 108 models, in process (about 40 s on 2 cores)."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from onnx_operator_models import operator_models, save

from onnxq.cli.main import main


@pytest.mark.slow
def test_every_operator_between_quantized_products(tmp_path, capsys):
    cases = list(operator_models())
    assert len(cases) >= 100, len(cases)  # onnx 1.23's node tests give 108 operators that fit
    failures, quantized = [], 0
    for case in cases:
        model, data = save(case, tmp_path / case.name)
        output = tmp_path / case.name / "q.onnx"
        code = main([str(model), "--calib", str(data), "-o", str(output), "-q"])
        err = capsys.readouterr().err.strip().splitlines()
        lines = [line for line in err if not line.startswith("WARNING")]
        if code not in (0, 1, 2, 4) or (code == 2 and len(lines) != 1):
            failures.append(f"{case.name} ({case.op_type}): exit {code}: {err[-1] if err else ''}")
        elif code in (0, 1, 4):  # 4: written, but nothing quantized (the float file) or a bar the data cannot show
            quantized += output.read_bytes() != model.read_bytes()
            session = ort.InferenceSession(str(output), providers=["CPUExecutionProvider"])
            rows = session.get_inputs()[0].shape[0]  # every shape fixed, as the node test's: its first batch
            feed = {**case.data, "x_in": case.data["x_in"][:rows]}
            session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})
    assert not failures, "\n".join(failures)
    # Measured with onnx 1.23.2, onnxruntime 1.31.1 on an AMD EPYC: 93 of 108 quantized; refused in one line: 11
    # opsets past onnxruntime's (27, 28), 3 batchwise recurrent layouts onnxruntime does not run, Pow's NaN.
    assert quantized >= 85, quantized
