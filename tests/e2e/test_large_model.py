"""A model over protobuf's 2 GB limit (external data) quantizes end to end, with the default pipeline
(calibration, verification, sensitivity), in a peak RSS of at most 1.5 × its size: the float weights stay in
their memory map, shared by every ONNX Runtime session, and are paged out between phases.

Slow: ~2 min on the 2-core AVX2 machine (101 s in the child, ~40 s of it the AVX2-safe weight search); 2.3 GB
written to tmp_path plus the 0.57 GB result; ~3 GB of RAM in the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO
from large_model import model_bytes, write_large_model

pytestmark = pytest.mark.slow


def test_model_over_2gb_quantizes_within_one_and_a_half_times_its_size(tmp_path):
    model = write_large_model(tmp_path)
    size = model_bytes(model)
    assert size > 2**31
    calibration = tmp_path / "calib.npz"
    np.savez(calibration, x=np.random.default_rng(1).standard_normal((16, 4096)).astype(np.float32))
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in (model, tmp_path / "big.onnx.data")}
    output, report_path = tmp_path / "big.int8.onnx", tmp_path / "report.json"

    start = time.perf_counter()
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        child = subprocess.Popen([sys.executable, "-m", "onnxq", str(model), "--calib", str(calibration),
                                  "-o", str(output), "--report", str(report_path), "--sensitivity"], cwd=REPO,
                                 stdout=out, stderr=err)  # every step, the per-layer ranking too, held to the bar
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS, not the test process's
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    peak = usage.ru_maxrss * 1024  # Linux reports KiB
    print(f"\nmodel {size / 1e9:.2f} GB, peak RSS {peak / 1e9:.2f} GB ({peak / size:.2f}x), {seconds:.0f} s")

    assert child.returncode == 0, (tmp_path / "stderr").read_text()
    report = json.loads(report_path.read_text())
    assert len(report["quantized"]) == 34 and report["passed"]
    assert report["size"]["quant_bytes"] <= 0.26 * report["size"]["float_bytes"]  # int8 weights: measured 0.250
    cosine = report["verification"]["providers"]["CPUExecutionProvider"]["outputs"]["y"]["cosine_mean"]
    assert cosine >= 0.99  # measured 0.9964
    assert report["sensitivity"] is not None and len(report["sensitivity"]["nodes"]) == 34
    assert peak <= 1.5 * size, f"peak RSS {peak / 1e9:.2f} GB is over 1.5 x the {size / 1e9:.2f} GB model"  # 1.37x
    assert before == {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in before}  # the input is untouched
