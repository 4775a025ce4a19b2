"""Inputs that another program changes while onnxq runs: nothing is written, one line says why. Truncated external
data faults the memory map (SIGBUS), which the command line turns into that line (exit 2) instead of a crash; any
other change (size, modification time, a replaced file) is caught right after loading, after each step, and before
the outputs are moved into place."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from conftest import REPO, to_model

import onnxq
import onnxq.steps.load
import onnxq.steps.rewrite
from onnxq.cli.main import main
from onnxq.errors import InputChangedError
from onnxq.io.faults import SIGBUS_MESSAGE

WIDTH = 512  # 1 MiB of weights: pages the calibration session still has to read after the cut


def _external_model(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", WIDTH])
    value = x
    for i in range(4):
        w = tape.initializer(ir.tensor(rng.normal(0, 0.05, (WIDTH, WIDTH)).astype(np.float32), name=f"w{i}"))
        value = tape.op("Relu", [tape.op("MatMul", [value, w])])
    value.name = "y"
    ir.save(to_model(tape, [x], [value]), folder / "m.onnx", external_data="m.onnx.data")
    np.savez(folder / "calib.npz", x=rng.normal(0, 1, (64, WIDTH)).astype(np.float32))
    return folder / "m.onnx"


CHILD = textwrap.dedent("""
    import os, sys
    import onnxq.cli.progress
    from onnxq.cli.main import main

    data = sys.argv[1]
    def cut(self, samples):  # after the first calibration batch: the data file loses all but its first page
        os.truncate(data, 4096)
    onnxq.cli.progress.ProgressBar.__call__ = cut
    sys.exit(main(sys.argv[2:]))
""")


def test_external_data_truncated_mid_run_ends_in_one_line_and_writes_nothing(tmp_path):
    model = _external_model(tmp_path)
    output = tmp_path / "q.onnx"
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "m.onnx.data"), str(model), "--calib",
                          str(tmp_path / "calib.npz"), "--calib-batch-size", "8", "-o", str(output)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [SIGBUS_MESSAGE.strip()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.npz", "m.onnx", "m.onnx.data"]  # no staging left


def test_an_input_changed_mid_run_is_caught_before_anything_is_written(tmp_path, monkeypatch, capsys):
    model = _external_model(tmp_path)
    original = onnxq.steps.rewrite.apply_plans

    def touching(*args, **kwargs):  # another program writes the calibration data while onnxq rewrites the model
        with open(tmp_path / "calib.npz", "ab") as f:
            f.write(b"\0")
        return original(*args, **kwargs)

    monkeypatch.setattr(onnxq.steps.rewrite, "apply_plans", touching)
    code = main([str(model), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "q.onnx"),
                 "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "the calibration data" in err[0] and "changed while onnxq ran" in err[0] and "nothing was written" in err[0]
    assert not (tmp_path / "q.onnx").exists() and not (tmp_path / "r.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".onnxq-")]


def test_the_model_file_replaced_mid_run_is_caught(tmp_path, monkeypatch, capsys):
    model = _external_model(tmp_path)
    original = onnxq.steps.rewrite.apply_plans

    def replacing(*args, **kwargs):
        (tmp_path / "m.onnx.new").write_bytes(model.read_bytes())
        os.replace(tmp_path / "m.onnx.new", model)  # same bytes, another file
        return original(*args, **kwargs)

    monkeypatch.setattr(onnxq.steps.rewrite, "apply_plans", replacing)
    code = main([str(model), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "the input model" in err[0] and "changed" in err[0]
    assert not (tmp_path / "q.onnx").exists()


def test_a_model_changed_while_it_loads_stops_the_run_right_after_loading(tmp_path, monkeypatch, capsys):
    """Another program writes the model while onnxq reads it: the run stops before calibrating (not at the end of
    an hour-long run), one line, nothing written."""
    model = _external_model(tmp_path)
    original = onnxq.steps.load.load_model

    def rewriting(*args, **kwargs):  # another program writes the file as onnxq finishes reading it
        loaded = original(*args, **kwargs)
        os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 10**9))
        return loaded

    monkeypatch.setattr(onnxq.steps.load, "load_model", rewriting)
    batches = []
    with pytest.raises(InputChangedError, match="seen right after loading"):
        onnxq.quantize(model, tmp_path / "calib.npz", output=tmp_path / "q.onnx", progress=batches.append)
    assert batches == []  # not one calibration batch ran
    code = main([str(model), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "the input model" in err[0] and "seen right after loading" in err[0]
    assert not (tmp_path / "q.onnx").exists()


def test_data_changed_during_calibration_stops_the_run_after_that_step(tmp_path):
    model = _external_model(tmp_path)
    calib = tmp_path / "calib.npz"
    touched = []

    def touching(samples):  # after the first calibration batch, another program writes the calibration data
        if not touched:
            os.utime(calib, ns=(calib.stat().st_atime_ns, calib.stat().st_mtime_ns + 10**9))
            touched.append(samples)

    with pytest.raises(InputChangedError, match="the calibration data .* seen after step calibrate"):
        onnxq.quantize(model, calib, output=tmp_path / "q.onnx", progress=touching)
    assert not (tmp_path / "q.onnx").exists()
