"""The examples under examples/ run as a user runs them: a subprocess in a folder of its own, writing only into the
folder given, printing what it did; each is held to its exit status and a figure it prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _run(tmp_path: Path, launcher: str, script: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`launcher script OUT args…` from an empty folder of its own; return the run and OUT, after checking that
    nothing was written anywhere else (the folder it ran in, the shipped samples)."""
    run_in, out = tmp_path / "cwd", tmp_path / "out"
    run_in.mkdir()
    samples = sorted((p.name, p.stat().st_mtime_ns) for p in (REPO / "models").iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHON": sys.executable}
    done = subprocess.run([launcher, str(EXAMPLES / script), str(out), *args], cwd=run_in, env=env,
                          capture_output=True, text=True, timeout=600)
    assert list(run_in.iterdir()) == []
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (REPO / "models").iterdir()) == samples
    return done, out


def _figure(stdout: str, pattern: str) -> float:
    match = re.search(pattern, stdout, re.M)
    assert match, f"{pattern!r} not in the output:\n{stdout[-2000:]}"
    return float(match.group(1))


def _python_example(tmp_path: Path, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    done, out = _run(tmp_path, sys.executable, name)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "result: within tolerance" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "within tolerance" and report["passed"] is True
    return done, out


def test_an_encoder_quantized_from_raw_text(tmp_path):
    pytest.importorskip("tokenizers")
    done, out = _python_example(tmp_path, "encoder_from_text.py")
    # The stand-in encoder's two MatMuls in int8: 1.0000 (seeded); the default bar is 0.98.
    assert _figure(done.stdout, r"^sentence_embedding: mean cosine to float ([\d.]+)$") >= 0.999
    assert "input_ids       int64 [200, 14]" in done.stdout  # what `onnxq data` made of the 200 sentences
    assert {"encoder.int8.onnx", "sentences.npz", "report.json", "tokenizer.json"} <= {p.name for p in out.iterdir()}


def test_a_cnn_quantized_from_a_folder_of_photos(tmp_path):
    pytest.importorskip("PIL")
    done, out = _python_example(tmp_path, "cnn_from_images.py")
    assert "quantized:   2 Conv, 1 Gemm" in done.stdout and "image  float32 [40, 3, 64, 64]" in done.stdout
    # Seeded: 1.0000 on the 4 held-back photos; the default bar is 0.98.
    assert _figure(done.stdout, r"^embedding: mean cosine to float ([\d.]+)$") >= 0.999
    assert (out / "cnn.int8.onnx").is_file() and (out / "photos.npz").is_file()


def test_a_kv_cache_decoder_to_int4(tmp_path):
    done, out = _python_example(tmp_path, "decoder_int4.py")
    assert "[weight-only int4, blocks of 32, matmulnbits, gptq, target portable]" in done.stdout
    assert "quantized:   13 MatMul" in done.stdout
    # Seeded: 0.9989x float's perplexity on the 16 dev windows (the gate's bar for a decoder: <= 1.15x).
    ratio = _figure(done.stdout, r"4-bit [\d.]+ \(([\d.]+)x float\)")
    assert 0.98 <= ratio <= 1.02
    assert _figure(done.stdout, r"file ([\d.]+)x float") < 0.5


def test_the_ci_gate_passes_a_model_within_tolerance(tmp_path):
    done, out = _run(tmp_path, "bash", "ci_gate.sh")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gate: passed — within tolerance" in done.stdout
    assert "report: verdict within tolerance, passed True" in done.stdout
    # The shipped sample's one output, seeded: cosine 0.9999 against the default bar 0.98.
    assert _figure(done.stdout, r"last_hidden_state: within tolerance \(cosine ([\d.]+) >= 0\.98\)") >= 0.999
    assert sorted(p.name for p in out.iterdir()) == ["model.int8.onnx", "report.json"]


def test_the_ci_gate_fails_a_model_its_data_cannot_show(tmp_path):
    """The shipped MLP is a classifier: 128 held-back samples cannot show its 0.99 top-1 bar (exit 4)."""
    done, _ = _run(tmp_path, "bash", "ci_gate.sh", str(REPO / "models" / "mlp.onnx"),
                   str(REPO / "models" / "mlp_calib.npz"))
    assert done.returncode == 4
    assert "gate: failed — not shown" in done.stdout and "report: verdict not shown, passed False" in done.stdout
    assert _figure(done.stdout, r"top-1 agreement ([\d.]+) >= 0\.99") >= 0.98


def test_the_ci_gate_fails_bad_input_with_nothing_written(tmp_path):
    done, out = _run(tmp_path, "bash", "ci_gate.sh", str(REPO / "models" / "mlp.onnx"),
                     str(tmp_path / "missing.npz"))
    assert done.returncode == 2 and "gate: failed — bad input" in done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "missing.npz" in done.stderr
    assert list(out.iterdir()) == []
