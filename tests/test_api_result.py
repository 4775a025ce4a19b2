"""The API for export scripts: onnxq.quantize()'s result saves, gives a ModelProto, its summary and its HTML; the
package shows only its public names; the shipped example runs and writes only where told."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import REPO

import onnxq
import onnxq.io.model
from onnxq.errors import OutputPathError, UnsupportedModelError


@pytest.fixture(scope="module")
def result(samples_dir):
    return onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                          config={"verify": {"sensitivity_samples": 0}})


def _run(model: str | bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run(None, inputs)


def test_dir_shows_the_public_names_only():
    assert dir(onnxq) == sorted(onnxq.__all__)
    assert not [name for name in onnxq.__all__ if isinstance(getattr(onnxq, name), types.ModuleType)]
    assert {"quantize", "QuantResult", "QuantConfig", "OnnxqError"} <= set(dir(onnxq))
    assert "irquery" not in dir(onnxq) and "smoothing_steps" not in dir(onnxq)
    assert onnxq.config.QuantConfig is onnxq.QuantConfig  # the submodules stay importable by name


def test_save_writes_the_model_atomically_and_says_where(result, samples_dir, tmp_path):
    target = tmp_path / "exported.onnx"
    assert result.save(target) == [target]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported.onnx"]  # no staging folder left behind
    assert result.output == target and result.report.output == str(target)
    assert result.report.quant_bytes == target.stat().st_size  # the file's size, as the command line reports it
    assert result.summary().startswith(f"onnxq: {samples_dir / 'tiny_transformer.onnx'} -> {target}  [static int8")
    # The saved file is the model in memory: the same outputs, bit for bit, under the exact arithmetic.
    inputs = {k: v[:4] for k, v in np.load(samples_dir / "tiny_transformer_calib.npz").items()}
    proto = result.to_proto()
    assert isinstance(proto, onnx.ModelProto) and proto.ir_version <= onnxq.io.model.MAX_IR_VERSION
    for saved, given in zip(_run(str(target), inputs), _run(proto.SerializeToString(), inputs)):
        np.testing.assert_array_equal(saved, given)


def test_save_never_writes_over_the_input(samples_dir, tmp_path):
    model = tmp_path / "tiny_transformer.onnx"
    shutil.copy(samples_dir / "tiny_transformer.onnx", model)
    before = model.read_bytes()
    made = onnxq.quantize(model, config={"verify": {"enabled": False}})
    with pytest.raises(OutputPathError, match="would overwrite the input model"):
        made.save(model)
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["tiny_transformer.onnx"]


def test_to_proto_refuses_a_model_over_protobuf_s_limit(result, monkeypatch):
    monkeypatch.setattr(onnxq.io.model, "_PROTO_LIMIT_BYTES", 1000)
    with pytest.raises(UnsupportedModelError, match=r"over protobuf's 2 GB for one ModelProto: save it with "
                                                    r"result\.save\(path\)"):
        result.to_proto()


def test_summary_and_html_are_the_cli_s(result, samples_dir):
    text = result.summary()
    assert text.splitlines()[-1] == "result: within tolerance" and "ORT CPU kernels" not in text
    assert "ORT CPU kernels: integer " in result.summary(verbose=True)
    page = result.to_html()
    call = (f"onnxq.quantize({str(samples_dir / 'tiny_transformer.onnx')!r}, "
            f"{str(samples_dir / 'tiny_transformer_calib.npz')!r}, ...)")
    assert result.report.command == call and f"<pre class='command'>{onnxq.report.record.escape(call)}</pre>" in page
    assert repr(result).startswith("QuantResult(output=") and len(repr(result)) < 200


def test_an_in_memory_model_is_named_by_its_type(samples_dir):
    made = onnxq.quantize(onnx.load(samples_dir / "tiny_transformer.onnx"), config={"verify": {"enabled": False}})
    assert made.report.command == "onnxq.quantize(<ModelProto>, ...)" and made.output is None


def test_the_export_example_runs_and_writes_only_where_told(tmp_path):
    script = REPO / "examples" / "export_script.py"
    assert len(script.read_text().splitlines()) <= 12
    run_in, out = tmp_path / "cwd", tmp_path / "out"
    run_in.mkdir()
    out.mkdir()
    models_before = sorted((p.name, p.stat().st_mtime_ns) for p in (REPO / "models").iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script), str(out)], cwd=run_in, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith(f"-> {out / 'tiny_transformer.int8.onnx'}  [static int8, qdq, "
                                                "target portable]")
    assert done.stdout.splitlines()[-1] == "result: within tolerance"
    assert sorted(p.name for p in out.iterdir()) == ["tiny_transformer.int8.onnx", "tiny_transformer.report.html"]
    assert list(run_in.iterdir()) == []
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (REPO / "models").iterdir()) == models_before
    quantized = onnx.load(out / "tiny_transformer.int8.onnx")
    assert sum(n.op_type == "DequantizeLinear" for n in quantized.graph.node) >= 6
