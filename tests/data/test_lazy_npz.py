"""Calibration arrays are read a batch at a time: `--calib-samples N` reads N samples, and a small compressed .npz
whose array inflates to hundreds of MB costs one batch of memory — whatever the file claims."""

from __future__ import annotations

import sys
import zipfile

import numpy as np
import onnx_ir as ir
import pytest
from conftest import child_peak_rss, to_model, weight

from onnxq.data.npz import open_npz
from onnxq.errors import CalibrationDataError

WIDTH = 4096


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_rows_read_on_demand_equal_the_array(rng, tmp_path, save):
    x = rng.normal(0, 1, (50, 3, 4)).astype(np.float32)
    save(tmp_path / "d.npz", x=x, ids=np.arange(50))
    arrays = open_npz(tmp_path / "d.npz", "calibration")
    assert arrays["x"].shape == (50, 3, 4) and arrays["x"].dtype == np.float32 and len(arrays["ids"]) == 50
    for start, stop in ((0, 8), (8, 16), (40, 50), (3, 5), (0, 50)):  # forward, then back to the start
        np.testing.assert_array_equal(arrays["x"][start:stop], x[start:stop])
    np.testing.assert_array_equal(np.asarray(arrays["ids"]), np.arange(50))


def test_fortran_order_arrays_are_read_whole_and_right(rng, tmp_path):
    x = np.asfortranarray(rng.normal(0, 1, (20, 6)).astype(np.float32))
    np.savez(tmp_path / "d.npz", x=x)
    np.testing.assert_array_equal(open_npz(tmp_path / "d.npz", "calibration")["x"][5:9], x[5:9])


def test_an_array_shorter_than_its_header_is_named(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.ones((100, 16), np.float32))
    with zipfile.ZipFile(tmp_path / "d.npz") as archive:
        data = archive.read("x.npy")
    with zipfile.ZipFile(tmp_path / "cut.npz", "w") as archive:
        archive.writestr("x.npy", data[:len(data) // 2])  # header intact, half the rows gone
    x = open_npz(tmp_path / "cut.npz", "calibration")["x"]
    assert x[0:8].shape == (8, 16)
    with pytest.raises(CalibrationDataError, match="is truncated"):
        x[90:100]


def _model(folder):
    rng = np.random.default_rng(0)
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", WIDTH])
    y = tape.op("MatMul", [x, weight(tape, rng, "w", (WIDTH, 8))])
    y.name = "y"
    ir.save(to_model(tape, [x], [y]), folder / "m.onnx")
    return folder / "m.onnx"


def _peak_rss(args: list[str]) -> int:
    code, peak, _, err = child_peak_rss([sys.executable, "-m", "onnxq", *args])
    assert code == 0, err
    return peak


def _bomb(tmp_path):
    bomb = np.zeros((16384, WIDTH), np.float32)  # 256 MiB of zeros (one 1.0 per row) in a file of about 300 KB
    bomb[:, 0] = 1.0
    np.savez_compressed(tmp_path / "bomb.npz", x=bomb)
    np.savez(tmp_path / "small.npz", x=bomb[:32])
    assert (tmp_path / "bomb.npz").stat().st_size < 2**20


def test_calib_samples_of_a_zip_bomb_reads_only_those_samples(tmp_path):
    model = _model(tmp_path)
    _bomb(tmp_path)
    common = ["--calib-samples", "16", "--no-verify", "-o", str(tmp_path / "q.onnx")]
    small = _peak_rss([str(model), "--calib", str(tmp_path / "small.npz"), *common])
    large = _peak_rss([str(model), "--calib", str(tmp_path / "bomb.npz"), *common])
    # Loading the array whole would add its 256 MiB; measured: +0.1 MB.
    assert large - small < 48 * 2**20, (small, large)


def test_verification_data_is_read_a_batch_at_a_time(tmp_path):
    """All 16384 samples of the 256 MiB array are verified, one batch in memory at a time."""
    model = _model(tmp_path)
    _bomb(tmp_path)
    assert _peak_rss([str(model), "--calib", str(tmp_path / "small.npz"), "--no-verify", "-o",
                      str(tmp_path / "q.onnx")]) > 0
    small = _peak_rss(["verify", str(model), str(tmp_path / "q.onnx"), "--data", str(tmp_path / "small.npz")])
    large = _peak_rss(["verify", str(model), str(tmp_path / "q.onnx"), "--data", str(tmp_path / "bomb.npz")])
    assert large - small < 48 * 2**20, (small, large)  # holding the data whole would add 256 MiB
