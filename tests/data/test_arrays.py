"""Arrays the user has: an .npz whose arrays are named otherwise than the model's inputs (--input-map), and one .npy
for a one-input model."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import onnxq
from onnxq.data.batching import Holdout
from onnxq.cli.main import main

INPUT_MAP_LINE = (
    "calibration data has arrays x_train [40, 32] float32, y_train [40] int64, x_test [24, 32] float32, y_test [24] "
    "int64, which match no model input; the model's input is x (float32 [batch, 32]); x_train or x_test fits x — pass "
    "--input-map x=x_train (TOML [data] input_map = {x = \"x_train\"})")


@pytest.fixture
def split(samples_dir, tmp_path, rng):
    """The sample MLP and its data as a training script saves it: x_train, y_train, x_test, y_test."""
    shutil.copy(samples_dir / "mlp.onnx", tmp_path / "mlp.onnx")
    x = np.load(samples_dir / "mlp_calib.npz")["x"]
    np.savez(tmp_path / "split.npz", x_train=x[:40], y_train=rng.integers(0, 10, 40), x_test=x[40:64],
             y_test=rng.integers(0, 10, 24))
    return tmp_path


def test_arrays_named_otherwise_get_the_input_map_line_first(split, capsys):
    """Before --input-map, the first line was the sample-count mismatch's --constant-input advice, which fails again
    when followed."""
    for argv in ([str(split / "mlp.onnx"), "--calib", str(split / "split.npz")],
                 ["data", str(split / "mlp.onnx"), str(split / "split.npz"), "-o", str(split / "d.npz")],
                 ["calibrate", str(split / "mlp.onnx"), "--calib", str(split / "split.npz"), "-o",
                  str(split / "c.json")]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"onnxq: error: {INPUT_MAP_LINE}\n"
    assert sorted(p.name for p in split.iterdir()) == ["mlp.onnx", "split.npz"]


def test_the_input_map_picks_the_array_and_leaves_the_others_out(split, capsys):
    x = np.load(split / "split.npz")
    code = main([str(split / "mlp.onnx"), "--calib", str(split / "split.npz"), "--input-map", "x=x_train",
                 "--verify-data", str(split / "split.npz"), "-o", str(split / "q.onnx"), "--no-speed", "-q"])
    assert code == 4 and "NOT SHOWN — top-1 agreement" in capsys.readouterr().out  # too few to show 0.99; the map serves --verify-data
    via_map = onnxq.calibrate(split / "mlp.onnx", split / "split.npz", config={"data": {"input_map": {"x": "x_train"}}})
    direct = onnxq.calibrate(split / "mlp.onnx", {"x": x["x_train"]})
    assert via_map.samples == 40
    assert {n: o.range() for n, o in via_map.observers.items()} == {n: o.range() for n, o in direct.observers.items()}
    assert main(["data", str(split / "mlp.onnx"), str(split / "split.npz"), "--input-map", "x=x_test", "-o",
                 str(split / "test.npz")]) == 0
    written = np.load(split / "test.npz")
    assert list(written) == ["x"] and np.array_equal(written["x"], x["x_test"])


@pytest.mark.parametrize("mapping,line", [
    ("z=x_train", "--input-map names 'z', which is not an input of the model; its inputs are: x (float32 [batch, 32])"),
    ("x=x_val", "--input-map x=x_val: the calibration data has no array 'x_val'; its arrays are: x_train, y_train, "
                "x_test, y_test"),
])
def test_an_input_map_that_names_nothing(split, capsys, mapping, line):
    assert main([str(split / "mlp.onnx"), "--calib", str(split / "split.npz"), "--input-map", mapping]) == 2
    assert capsys.readouterr().err == f"onnxq: error: {line}\n"


def test_a_dict_with_an_array_beside_the_inputs_names_it(samples_dir):
    x = np.load(samples_dir / "mlp_calib.npz")["x"]
    with pytest.raises(onnxq.OnnxqError) as info:
        onnxq.quantize(samples_dir / "mlp.onnx", {"x": x, "labels": np.zeros(len(x), np.int64)})
    assert str(info.value) == ("calibration data has array labels [256] int64, which matches no model input; the "
                               "model's input is x (float32 [batch, 32]) — rename the arrays to the inputs they feed, "
                               "or leave them out of the data")


def test_one_npy_on_the_command_line(samples_dir, tmp_path, capsys):
    x = np.load(samples_dir / "mlp_calib.npz")["x"]
    np.save(tmp_path / "x.npy", x)
    code = main([str(samples_dir / "mlp.onnx"), "--calib", str(tmp_path / "x.npy"), "-o", str(tmp_path / "q.onnx"),
                 "--no-speed", "-q"])
    assert code == 4 and "NOT SHOWN — top-1 agreement" in capsys.readouterr().out  # too few to show 0.99
    from_npy = onnxq.calibrate(samples_dir / "mlp.onnx", tmp_path / "x.npy")
    from_array = onnxq.calibrate(samples_dir / "mlp.onnx", x)
    assert from_npy.samples == 256
    assert {n: o.range() for n, o in from_npy.observers.items()} == \
        {n: o.range() for n, o in from_array.observers.items()}


@pytest.mark.parametrize("samples,every,most,fixed", [(500, 10, 64, None), (37, 10, 64, None), (9, 10, 64, None),
                                                      (1000, 10, 64, None), (160, 10, 64, 4), (80, 10, 2, 8),
                                                      (70, 10, 64, 8)])
def test_the_held_out_count_is_the_split_s(samples, every, most, fixed):
    """The data command's account of the split (Holdout.held_of) against a real pass of the split."""
    holdout = Holdout(every, most, fixed)
    batches = [{"x": np.zeros((n, 2), np.float32)} for n in [fixed or 7] * (samples // (fixed or 7))]
    batches += [{"x": np.zeros((samples % (fixed or 7), 2), np.float32)}] if samples % (fixed or 7) else []
    list(holdout.split(batches))
    assert Holdout(every, most, fixed).held_of(samples) == holdout.held_count


def test_the_digits_data_as_shipped(shared_models, tmp_path, capsys):
    """The commonest data mistake, on the real digits data: x_train, y_train, x_test, y_test for an input x."""
    digits = shared_models / "digits"
    model, data = str(digits / "digits_mlp.onnx"), str(digits / "digits.npz")
    assert main([model, "--calib", data, "-o", str(tmp_path / "q.onnx")]) == 2
    assert capsys.readouterr().err == (
        "onnxq: error: calibration data has arrays x_train [1257, 64] float32, y_train [1257] int64, x_test [540, 64] "
        "float32, y_test [540] int64, which match no model input; the model's input is x (float32 [batch, 64]); "
        "x_train or x_test fits x — pass --input-map x=x_train (TOML [data] input_map = {x = \"x_train\"})\n")
    assert main([model, "--calib", data, "--input-map", "x=x_train", "-o", str(tmp_path / "q.onnx"), "--no-speed",
                 "-q"]) == 0
    assert "within tolerance" in capsys.readouterr().out


def test_one_npz_calibrates_on_one_array_and_verifies_on_another(split, capsys):
    """--verify-input-map picks the verification's array from the same .npz (x_test beside x_train), with or without
    --verify-data; naming an input twice in --input-map is refused (the later would replace the earlier)."""
    model, data = str(split / "mlp.onnx"), str(split / "split.npz")
    for extra in ([], ["--verify-data", data]):
        report = split / "r.json"
        code = main([model, "--calib", data, "--input-map", "x=x_train", "--verify-input-map", "x=x_test", *extra,
                     "-o", str(split / "q.onnx"), "--report", str(report), "--no-speed", "-q"])
        written = json.loads(report.read_text())
        assert code == 4 and written["calibration_samples"] == 40  # all of x_train; 24 answers show no 0.99 bar
        assert written["verification"]["samples"] == 24 and written["verification"]["data"] == "verification data"
        capsys.readouterr()
    assert main([model, "--calib", data, "--input-map", "x=x_train", "--input-map", "x=x_test"]) == 2
    assert capsys.readouterr().err == (
        "onnxq: error: --input-map gives x twice (x_train, x_test): one array per input — to verify on another "
        "array, keep --input-map for calibration and add --verify-input-map x=x_test\n")


def test_verification_on_the_calibration_data_says_it_flatters(split, capsys):
    """The same file and arrays for --calib and --verify-data: the figures are the calibration data's, and the
    result line says so (even with -q)."""
    data = str(split / "split.npz")
    code = main([str(split / "mlp.onnx"), "--calib", data, "--input-map", "x=x_train", "--verify-data", data,
                 "-o", str(split / "q.onnx"), "--no-speed", "-q"])
    out = capsys.readouterr().out
    assert code == 4 and out.endswith("on calibration data, which flatters it — verify on data held out from "
                                      "calibration for a verdict\n"), out


def test_a_test_npz_named_after_the_input_needs_no_map_beside_a_mapped_calibration(split, capsys):
    """--input-map x=x_train serves the calibration data; a verification .npz that already names x is read as it
    is, not refused for lacking x_train."""
    test = np.load(split / "split.npz")["x_test"]
    np.savez(split / "test.npz", x=test)
    report = split / "r.json"
    code = main([str(split / "mlp.onnx"), "--calib", str(split / "split.npz"), "--input-map", "x=x_train",
                 "--verify-data", str(split / "test.npz"), "-o", str(split / "q.onnx"), "--report", str(report),
                 "--no-speed", "-q"])
    assert code == 4 and json.loads(report.read_text())["verification"]["samples"] == 24, capsys.readouterr().err
