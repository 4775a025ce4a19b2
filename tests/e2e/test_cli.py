"""The command line: exit codes 0 / 1 / 2 / 4, one-line errors, nothing written on bad input.

The sample MLP's default run ends "not shown" (exit 4): its 256 samples hold back 128, whose top-1 agreement (one
near tie flipped: 0.992) cannot show the 0.99 bar (its interval reaches 0.957) — tests of other mechanics expect
that code (NOT_SHOWN); tests/verify/test_task_interval.py shows exit 0 on data large enough."""

import json
import shutil
import subprocess
import sys

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from conftest import REPO, to_model

import onnxq
from onnxq.cli.main import main
from onnxq.cli.progress import ProgressBar as _Progress
from onnxq.cli.progress import count_samples as _count_samples
from onnxq.verify import resolve_providers
from onnxq.verify.speed.latency import MEANINGFUL_MS

NOT_SHOWN = 4


@pytest.fixture
def work(samples_dir, tmp_path):
    for name in ("mlp.onnx", "mlp_calib.npz"):
        shutil.copy(samples_dir / name, tmp_path / name)
    return tmp_path


def _files(path):
    return sorted(p.name for p in path.iterdir())


def test_quantize_writes_beside_the_model_and_says_what_the_data_shows(work, capsys):
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--report", str(work / "r.json")])
    out = capsys.readouterr().out
    assert code == NOT_SHOWN
    assert (work / "mlp.int8.onnx").is_file()
    assert "result: NOT SHOWN — top-1 agreement" in out and "cannot show the 0.99 bar" in out
    report = json.loads((work / "r.json").read_text())
    assert report["schema_version"] == 8 and report["passed"] is False and report["verdict"] == "not shown"
    assert report["result"].startswith("NOT SHOWN — top-1 agreement")
    cpu = report["verification"]["providers"]["CPUExecutionProvider"]
    assert cpu["outputs"]["logits"]["cosine_mean"] >= 0.999
    # The sample MLP's random weights leave held-out near ties that int8 may flip: the default gate judges the
    # logits' top-1, which no bar measures below (the fallback acts only then), and 128 answers cannot show 0.99.
    assert report["verification"]["tasks"]["logits"]["kind"] == "top1"
    assert cpu["outputs"]["logits"]["task_agreement"] >= 0.99 and cpu["outputs"]["logits"]["task"] == "top1"
    assert cpu["outputs"]["logits"]["task_interval"]["low"] < 0.99 and report["verification"]["samples"] == 128
    assert report["fallback"] is None or report["fallback"]["met"]


def test_out_of_tolerance_exits_1(work, capsys):
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--min-sqnr", "60"])
    assert code == 1
    assert "OUT OF TOLERANCE" in capsys.readouterr().out


def test_config_file_and_flags(work, capsys):
    (work / "q.toml").write_text('gemm_bias = "float"\n[verify.tolerance]\nmin_cosine = 0.9\n')
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--config", str(work / "q.toml"),
                 "-o", str(work / "out.onnx"), "--report", str(work / "r.json")])
    assert code == NOT_SHOWN
    report = json.loads((work / "r.json").read_text())
    assert report["config"]["gemm_bias"] == "float" and report["config"]["verify"]["tolerance"]["min_cosine"] == 0.9
    assert all("bias float" in e["detail"] for e in report["quantized"])


def test_flags_apply_before_the_config_file_is_checked(work, capsys):
    """A file's [blocks] (weight-only settings) with --weights int4 is a 4-bit config, not a refusal: the file is
    checked with the flags that override it, not alone in its int8 default; and --accuracy-level sets MatMulNBits'
    accuracy_level over the file's."""
    (work / "q.toml").write_text("[blocks]\naccuracy_level = 1\nsize = 16\n")
    out = work / "out.onnx"
    code = main([str(work / "mlp.onnx"), "--config", str(work / "q.toml"), "--weights", "int4", "--accuracy-level",
                 "4", "-o", str(out), "--no-verify"])
    assert code == 0, capsys.readouterr().err
    nbits = [n for n in ir.load(out).graph if n.op_type == "MatMulNBits"]
    assert nbits and {(n.attributes["accuracy_level"].value, n.attributes["block_size"].value) for n in nbits} == {
        (4, 16)}
    # The file alone still is what it says: blocks settings for an int8 model, refused in one line.
    code = main([str(work / "mlp.onnx"), "--config", str(work / "q.toml"), "-o", str(work / "int8.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and "blocks settings (size, accuracy_level) apply to weight-only models" in err
    assert not (work / "int8.onnx").exists()


def _write(path, content):
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return path


def _opset11_model(path):
    """Opset 11 with an op onnx's version converter has no schema for: the conversion to opset 13 fails."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 4])
    y = tape.op("MatMul", [x, tape.initializer(ir.tensor(np.ones((4, 4), np.float32), name="w"))])
    z = tape.op("FrobnicateX", [y])
    ir.save(to_model(tape, [x], [z], opset=11), path)
    return path


def _relu_model(path):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 4])
    ir.save(to_model(tape, [x], [tape.op("Relu", [x])]), path)
    return path


BAD_INPUTS = {
    "missing model": (lambda w: [str(w / "nope.onnx")], "model file not found"),
    "not onnx": (lambda w: [str(_write(w / "text.onnx", "hello"))], "not a readable ONNX model"),
    "truncated": (lambda w: [str(_write(w / "t.onnx", (w / "mlp.onnx").read_bytes()[:5000]))],
                  "not a readable ONNX model"),
    "unconvertible opset": (lambda w: [str(_opset11_model(w / "old.onnx"))],
                            "opset 11; onnxq needs opset >= 13 for per-channel QuantizeLinear, and onnx's version "
                            "converter could not convert it"),
    "nothing to quantize": (lambda w: [str(_relu_model(w / "relu.onnx"))], "nothing to quantize"),
    "names match no input": (lambda w: ["--calib", _npz(w, y=np.zeros((4, 32), np.float32))], "matches no model input"),
    "wrong dtype": (lambda w: ["--calib", _npz(w, x=np.zeros((4, 32), np.int64))], "is int64 but the model expects"),
    "wrong rank": (lambda w: ["--calib", _npz(w, x=np.zeros((4, 2, 32), np.float32))], "rank 3"),
    "NaN": (lambda w: ["--calib", _npz(w, x=np.full((4, 32), np.nan, np.float32))], "contains NaN"),
    "calib not found": (lambda w: ["--calib", str(w / "none.npz")], "calibration data not found"),
    "output is the input": (lambda w: ["--calib", str(w / "mlp_calib.npz"), "-o", str(w / "mlp.onnx")],
                            "would overwrite the input"),
    "bad config key": (lambda w: ["--config", str(_write(w / "c.toml", "per_chanel = true\n"))],
                       "unknown config key 'per_chanel' — did you mean 'per_channel'?"),
    # Bad verification data is found before the model or the calibration cache is written.
    "bad verify data": (lambda w: ["--calib", str(w / "mlp_calib.npz"), "--calib-cache", str(w / "c.json"),
                                   "--verify-data", _npz(w, x=np.zeros((4, 31), np.float32))],
                        "verification input 'x' has shape (4, 31)"),
    "not a calibration summary": (lambda w: ["--calib-cache", str(_write(w / "s.json", "{}"))],
                                  "not an onnxq calibration summary"),
    "smoothing without data": (lambda w: ["--smooth", "auto"], "smoothing needs calibration data"),
    "smooth not a number": (lambda w: ["--calib", str(w / "mlp_calib.npz"), "--smooth", "strong"],
                            "--smooth 'strong': use off, auto or a number"),
    "smooth out of range": (lambda w: ["--calib", str(w / "mlp_calib.npz"), "--smooth", "1.5"],
                            "smooth = 1.5: use off, auto or a number α in [0, 1]"),
    # Weight-only weights have a scale per block: per-tensor was ignored for a Gemm and crashed a MatMul's rewrite
    # (exit 3) before.
    "per-tensor 4-bit weights": (lambda w: ["--weights", "int4", "--per-tensor"],
                                 "per_channel = false (--per-tensor) with weight-only int4 weights"),
    "per-tensor cuda blocks": (lambda w: ["--target", "cuda", "--per-tensor"],
                               "per_channel = false (--per-tensor) with weight-only int8 weights"),
    # It went on from a per-token model as if it were the all-static one: exit 3 (a KeyError) on an MLP.
    "recipe auto, per-token": (lambda w: ["--calib", str(w / "mlp_calib.npz"), "--recipe", "auto", "--activations",
                                          "per-token"], "recipe auto chooses per-tensor or per-token activations"),
    "recipe auto, dynamic": (lambda w: ["--calib", str(w / "mlp_calib.npz"), "--recipe", "auto", "--mode",
                                        "dynamic"], "recipe auto chooses by verifying"),
}


def _npz(work, **arrays):
    path = work / "bad.npz"
    np.savez(path, **arrays)
    return str(path)


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_one_line_exit_2_nothing_written(work, capsys, case):
    make_args, message = BAD_INPUTS[case]
    args = make_args(work)
    if not args[0].endswith(".onnx"):
        args = [str(work / "mlp.onnx"), *args]
    before = _files(work)
    model_bytes = (work / "mlp.onnx").read_bytes()
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1 and captured.err.startswith("onnxq: error: ")
    assert message in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert _files(work) == before
    assert (work / "mlp.onnx").read_bytes() == model_bytes


def test_python_dash_m_entry_point(work):
    run = subprocess.run([sys.executable, "-m", "onnxq", str(work / "mlp.onnx"), "--calib",
                          str(work / "mlp_calib.npz"), "-q"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == NOT_SHOWN, run.stderr
    # -q keeps the verdict's reason: the one line is never surer than the run.
    assert run.stdout.strip().startswith(f"onnxq: wrote {work / 'mlp.int8.onnx'}; NOT SHOWN — top-1 agreement")
    assert "cannot show the 0.99 bar" in run.stdout


def test_progress_bar_counts_samples_against_the_npz_total(samples_dir, capsys):
    total = _count_samples(str(samples_dir / "tiny_transformer_calib.npz"), None)
    assert total == 128 and _count_samples(str(samples_dir / "tiny_transformer_calib.npz"), 50) == 50
    progress = _Progress(total)
    progress.live = True  # as on a terminal
    progress(64)
    progress.close()
    err = capsys.readouterr().err
    assert "[###############...............] 64/128 samples" in err and "samples/s" in err


def test_check_speed_times_both_models_and_warns_only_when_slower(work, capsys):
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--check-speed",
                 "--no-sensitivity", "--report", str(work / "r.json")])
    out = capsys.readouterr().out
    report = json.loads((work / "r.json").read_text())
    assert code == {"not shown": NOT_SHOWN, "nothing quantized": NOT_SHOWN, "within tolerance": 0}[report["verdict"]]
    # One timing per provider verified: the CPU, and CUDA too on a machine that has it.
    assert [s["provider"] for s in report["speed"]] == resolve_providers(("auto",))[0]
    for speed in report["speed"]:
        assert speed["rounds"] == 10 and speed["float_ms"] > 0 and speed["quantized_ms"] > 0
        assert abs(speed["speedup"] - speed["float_ms"] / speed["quantized_ms"]) < 1e-9
        warned = any("not faster than float on " + speed["provider"] in n for n in report["notes"])
        # A tiny model may end with every node float (the whole-model rule): float against float warns of nothing;
        # nor does a timing under MEANINGFUL_MS a batch, which says nothing of the kernels (its line says so).
        assert warned == (speed["speedup"] <= 1.0 and bool(report["quantized"]) and speed["float_ms"] >= MEANINGFUL_MS)
    assert "speed on CPU:" in out


def test_default_run_times_the_cpu_and_no_speed_turns_it_off(work, capsys):
    """Without --check-speed the CPU is still timed (5 interleaved rounds) and a quantized model that is not faster
    says so with the way out; --no-speed times nothing and writes the same model."""
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--no-sensitivity",
                 "--report", str(work / "r.json"), "-o", str(work / "timed.onnx")])
    out = capsys.readouterr().out
    assert code == NOT_SHOWN
    report = json.loads((work / "r.json").read_text())
    speed = report["speed"][0]  # the CPU first; CUDA next on a machine that has it
    assert [s["provider"] for s in report["speed"]] == resolve_providers(("auto",))[0]
    assert speed["provider"] == "CPUExecutionProvider" and speed["rounds"] == 5
    assert speed["float_ms"] > 0 and speed["quantized_ms"] > 0 and "speed on CPU:" in out
    slower = [n for n in report["notes"] if "not faster than float on CPUExecutionProvider" in n]
    assert len(slower) == (speed["speedup"] <= 1.0 and speed["float_ms"] >= MEANINGFUL_MS)
    assert all("--check-speed keeps float the kinds of node" in n for n in slower)
    assert "speed_by_kind" not in report or report["speed_by_kind"] is None
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--no-sensitivity", "--no-speed",
                 "--report", str(work / "r2.json"), "-o", str(work / "untimed.onnx")])
    report = json.loads((work / "r2.json").read_text())
    assert code == NOT_SHOWN and report["speed"] == [] and not any("speed" in n.lower() for n in report["notes"])
    assert "speed on CPU:" not in capsys.readouterr().out
    assert (work / "timed.onnx").read_bytes() == (work / "untimed.onnx").read_bytes()


def test_default_timing_stops_at_its_budget_after_three_rounds(work, monkeypatch):
    """A budget already spent (a model whose batch takes seconds) leaves the median of MIN_ROUNDS rounds, and the
    report says so."""
    from onnxq.steps import check_speed as step
    monkeypatch.setattr(step, "DEFAULT_BUDGET_S", 0.0)
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--no-sensitivity",
                 "--report", str(work / "r.json")])
    speeds = json.loads((work / "r.json").read_text())["speed"]  # one per provider: CUDA too where present
    assert code == NOT_SHOWN and speeds and all(speed["rounds"] == 3 for speed in speeds)


def test_default_timing_skips_models_over_the_memory_bound(work, monkeypatch):
    """A model whose float weights pass SPEED_MAX_BYTES is not timed by default (two sessions at once would raise
    the run's peak memory); the note says how to time it."""
    from onnxq.steps import check_speed as step
    monkeypatch.setattr(step, "SPEED_MAX_BYTES", 1024)
    code = main([str(work / "mlp.onnx"), "--calib", str(work / "mlp_calib.npz"), "--no-sensitivity",
                 "--report", str(work / "r.json")])
    report = json.loads((work / "r.json").read_text())
    assert code == NOT_SHOWN and report["speed"] == []
    assert any(n.startswith("speed: not timed by default") and "--check-speed" in n for n in report["notes"])


def test_argparse_errors_are_one_line_with_a_pointer_to_help(work, capsys):
    for args, command in (([str(work / "mlp.onnx"), "--mode", "turbo"], "python -m onnxq"),
                          (["verify", str(work / "mlp.onnx")], "python -m onnxq verify"),
                          (["calibrate", str(work / "mlp.onnx"), "--calib"], "python -m onnxq calibrate"),
                          (["merge"], "python -m onnxq merge")):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("onnxq: error: ") and f"see {command} --help" in err, err


def test_every_command_takes_v_and_v_never_changes_the_exit_code(work, capsys, monkeypatch):
    model, data = str(work / "mlp.onnx"), str(work / "mlp_calib.npz")
    assert main(["calibrate", model, "--calib", data, "-o", str(work / "s.json"), "-v"]) == 0
    assert main(["merge", str(work / "s.json"), "-o", str(work / "m.json"), "-v"]) == 0
    assert main([model, "--calib", data, "-o", str(work / "q.onnx")]) == NOT_SHOWN
    assert main([model, "--calib", data, "-o", str(work / "q.onnx"), "-v"]) == NOT_SHOWN
    # Numeric bars: on all 256 samples, int8 changes a few of the random sample MLP's near-tied answers.
    assert main(["verify", model, str(work / "q.onnx"), "--data", data, "--task-metric", "numeric", "--verbose"]) == 0
    capsys.readouterr()

    def broken(*args, **kwargs):
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr("onnxq.cli.main.quantize", broken)
    assert main([model, "-o", str(work / "q2.onnx")]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == ["onnxq: internal error: RuntimeError: a bug — rerun with -v for the traceback and report it"]
    assert main([model, "-o", str(work / "q2.onnx"), "-v"]) == 3  # the same code, the traceback above the line
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and "RuntimeError: a bug" in "\n".join(err)
    assert err[-1] == "onnxq: internal error: RuntimeError: a bug — the traceback is above and report it"
    assert not (work / "q2.onnx").exists()


def test_onnxruntime_logs_nothing_of_its_own_before_the_line(work, capfd):
    """A model ORT fails to run (a Reshape to an impossible shape) ends in onnxq's line only: ORT's own error log
    (on the C++ side's stderr) is silenced in every session onnxq makes."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 32])
    y = tape.op("MatMul", [x, tape.initializer(ir.tensor(np.ones((32, 6), np.float32), name="w"))])
    z = tape.op("Reshape", [y, tape.initializer(ir.tensor(np.array([5, -1], np.int64), name="shape"))])
    ir.save(to_model(tape, [x], [z]), work / "bad_reshape.onnx")
    code = main([str(work / "bad_reshape.onnx"), "--calib", str(work / "mlp_calib.npz"), "-o", str(work / "q.onnx")])
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("onnxq: error: "), err


def test_version_is_one_line_naming_the_libraries(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"onnxq {onnxq.__version__} (onnxruntime {ort.__version__}, onnx ")
