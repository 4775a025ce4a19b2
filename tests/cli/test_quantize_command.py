"""`python -m onnxq quantize MODEL ...` is `python -m onnxq MODEL ...`: the same model, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

from onnxq.cli.main import main


def test_quantize_word_gives_the_same_model_and_report(samples_dir, tmp_path, capsys):
    model, data = str(samples_dir / "mlp.onnx"), str(samples_dir / "mlp_calib.npz")
    runs = {}
    for name, prefix in (("plain", []), ("quantize", ["quantize"])):
        out, report = tmp_path / f"{name}.onnx", tmp_path / f"{name}.json"
        # --no-speed: the default timing may keep slower node kinds float, which differs from run to run.
        code = main([*prefix, model, "--calib", data, "-o", str(out), "--report", str(report), "--no-speed", "-q"])
        # 128 held-back answers of the sample's classifier cannot show its 0.99 top-1 bar: exit 4, either way.
        assert code == 4, capsys.readouterr().err
        assert capsys.readouterr().out.startswith(f"onnxq: wrote {out}; NOT SHOWN — top-1 agreement")
        runs[name] = (out.read_bytes(), json.loads(report.read_text()))
    assert runs["plain"][0] == runs["quantize"][0]
    plain, worded = runs["plain"][1], runs["quantize"][1]
    cosine = [r["verification"]["providers"]["CPUExecutionProvider"]["outputs"]["logits"]["cosine_mean"]
              for r in (plain, worded)]
    assert cosine[0] == cosine[1] >= 0.999
    assert plain["config"] == worded["config"] and plain["quantized"] == worded["quantized"]


def test_quantize_word_through_the_entry_point(samples_dir, tmp_path):
    out = tmp_path / "q.onnx"
    run = subprocess.run([sys.executable, "-m", "onnxq", "quantize", str(samples_dir / "mlp.onnx"), "-o", str(out),
                          "--no-verify"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert out.is_file() and run.stderr == ""
