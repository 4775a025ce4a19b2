"""A verification runs the deployed sessions over every batch first, then the exact quantization: the deployed
sessions (each a packed copy of the quantized weights) are gone before the exact ones are made, this CPU's
deployed outputs kept for the kernels' gap — in memory up to the reference's budget, on disk beyond it — with the
same figures either way."""

import importlib
import tempfile
import weakref

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

import onnxq
from onnxq.verify.reference import Reference

check = importlib.import_module("onnxq.verify.check")  # the module (onnxq.verify is also a function)


def _quantized(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 32])
    hidden = tape.op("Relu", [tape.op("MatMul", [x, weight(tape, rng, "w1", (32, 32))], name="mm1")])
    y = tape.op("MatMul", [hidden, weight(tape, rng, "w2", (32, 8))], name="mm2")
    y.name = "y"
    float_model = to_model(tape, [x], [y])
    data = [{"x": rng.normal(0, 1, (16, 32)).astype(np.float32)}]
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False))
    return float_model, onnxq.quantize(float_model, data, config=config).model, config.verify


def _verified(rng, memory_bytes):
    float_model, quantized, config = _quantized(np.random.default_rng(0))
    batches = [{"x": rng.normal(0, 1, (4, 32)).astype(np.float32)} for _ in range(3)]
    reference = Reference(float_model, batches, memory_bytes)
    return check.verify_models(reference, quantized, config, "test data")


def test_the_same_figures_with_the_deployed_outputs_in_memory_or_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kept = _verified(np.random.default_rng(1), 1 << 30)
    assert not list(tmp_path.glob("onnxq-reference-*"))  # nothing written
    written = []
    save = np.save
    monkeypatch.setattr(np, "save", lambda path, *a, **k: written.append(str(path)) or save(path, *a, **k))
    spilled = _verified(np.random.default_rng(1), 0)  # every batch's outputs to disk
    # 3 batches of the reference's outputs and 3 of the deployed ones, read back for the exact quantization's pass
    assert len(written) == 6
    assert not list(tmp_path.glob("onnxq-reference-*/*"))  # removed once read
    assert spilled.to_dict() == kept.to_dict()
    assert spilled.coverage is not None and spilled.coverage.kernel_gap


def test_the_deployed_sessions_are_gone_before_the_exact_quantization_is_made(monkeypatch):
    deployed, alive_at_exact = [], []
    make_session = check.make_session

    def tracked(*args, **kwargs):
        session = make_session(*args, **kwargs)
        deployed.append(weakref.ref(session))
        return session

    coverage_run = check.CoverageRun

    def exact(*args, **kwargs):
        alive_at_exact.append(sum(ref() is not None for ref in deployed))
        return coverage_run(*args, **kwargs)

    monkeypatch.setattr(check, "make_session", tracked)
    monkeypatch.setattr(check, "CoverageRun", exact)
    verification = _verified(np.random.default_rng(2), 1 << 30)
    assert len(deployed) == 1 and alive_at_exact == [0]
    assert verification.coverage is not None and verification.passed
