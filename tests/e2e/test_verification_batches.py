"""Verification batches are cut to verify.reference.OUTPUT_BUDGET bytes of float outputs (each comparison holds
float64 copies of a batch's outputs, and ORT's arenas keep a run's buffers: a language model's logits set the run's
peak memory), while the speed timing keeps its own, larger batch: the data's first batch, up to 64 MB of outputs."""

import importlib

import numpy as np
import onnx_ir as ir
from conftest import to_model, weight

import onnxq
from onnxq.data.batching import samples_in

WIDTH = 64
WIDE = 1 << 17  # 512 KiB of float32 outputs a sample: 32 MiB hold 64 samples, 64 MiB 128


def _wide_model(rng) -> ir.Model:
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", WIDTH])
    hidden = tape.op("MatMul", [x, weight(tape, rng, "w", (WIDTH, WIDTH))], name="mm")
    reps = tape.initializer(ir.tensor(np.array([1, WIDE // WIDTH], np.int64), name="reps"))
    wide = tape.op("Tile", [hidden, reps], name="tile")
    wide.name = "wide"
    return to_model(tape, [x], [wide])


def test_verification_batches_are_cut_and_the_timed_batch_is_not(rng, monkeypatch):
    check_speed = importlib.import_module("onnxq.steps.check_speed")
    timed, checked = [], []
    time_both = check_speed.time_both
    monkeypatch.setattr(check_speed, "time_both",
                        lambda f, q, batch, *a, **k: timed.append(samples_in(batch)) or time_both(f, q, batch, *a, **k))
    verify_models = importlib.import_module("onnxq.steps.verify").verify_models
    monkeypatch.setattr(importlib.import_module("onnxq.steps.verify"), "verify_models",
                        lambda reference, *a: checked.extend(samples_in(b) for b in reference.batches) or
                        verify_models(reference, *a))
    data = {"x": rng.normal(0, 1, (200, WIDTH)).astype(np.float32)}
    verify = {"x": rng.normal(0, 1, (160, WIDTH)).astype(np.float32)}
    # The speed is timed but decides nothing (never_slower off): on a loaded machine a timing may say the quantized
    # MatMul is slower, and the test is of the batches, not of that decision.
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(batch_size=160),
                               verify=onnxq.VerifyConfig(sensitivity_samples=0, fallback=False, never_slower=False))
    result = onnxq.quantize(_wide_model(rng), [data], config=config, verify_data=[verify])
    assert result.report.passed
    assert checked == [64, 64, 32]  # 160 samples, 64 (32 MiB of outputs) a batch
    assert set(timed) == {128}  # the data's first batch (160) cut to 64 MiB of outputs, each time it is timed
