"""The summary a person reads: each figure beside its bar, like reasons on one line, the plumbing only with -v, and
a speed line that says when a model is too small to time."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jsonschema
import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model

import onnxq
from onnxq.cli.main import main
from onnxq.report.summary import left_float_groups
from onnxq.verify.bars import Bar
from onnxq.verify.speed.latency import MEANINGFUL_MS, SpeedCheck, slower_notes

SCHEMA = json.loads((Path(onnxq.__file__).parent / "report_schema.json").read_text())
CPU = "CPUExecutionProvider"
# Words of the kernels' plumbing that the default summary leaves to -v.
PLUMBING = ("ORT_DISABLE_ALL", "K pairs", "U8S8", "ORT CPU kernels")


@pytest.fixture(scope="module")
def readme_run(samples_dir, tmp_path_factory):
    """The README's first command, as the CLI runs it: (its printed summary, its JSON report, -v's summary)."""
    folder = tmp_path_factory.mktemp("readme")
    args = [str(samples_dir / "tiny_transformer.onnx"), "--calib", str(samples_dir / "tiny_transformer_calib.npz"),
            "-o", str(folder / "q.onnx"), "--report", str(folder / "r.json"), "--no-sensitivity"]
    return args, folder


def _run(args: list[str], capsys) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def test_the_first_command_shows_each_figure_beside_its_bar_and_no_plumbing(readme_run, capsys):
    args, folder = readme_run
    out = _run(args, capsys)
    report = json.loads((folder / "r.json").read_text())
    jsonschema.validate(report, SCHEMA)
    cpu = report["verification"]["providers"][CPU]["outputs"]["last_hidden_state"]
    (bar,) = cpu["bars"]  # the default tolerance: mean cosine >= 0.98 only
    assert bar["metric"] == "cosine" and bar["op"] == ">=" and bar["bar"] == 0.98 and bar["passed"] is True
    assert bar["value"] == cpu["cosine_mean"] and abs(bar["share"] - (1 - cpu["cosine_mean"]) / 0.02) < 1e-12
    row = next(line for line in out.splitlines() if line.startswith("  last_hidden_state "))
    assert f"{cpu['cosine_mean']:.4f} (>= 0.98)" in row and row.endswith("  ok")
    assert not [word for word in PLUMBING if word in out], out
    assert "kernels:     6/6 quantized nodes on integer kernels of CPU" in out
    assert re.search(r"^checked on: .*target portable: .*— within tolerance on each$", out, re.MULTILINE), out
    assert report["command"] == "python -m onnxq " + " ".join(args)


def test_v_shows_the_plumbing(readme_run, capsys):
    args, _ = readme_run
    out = _run([*args, "-v"], capsys)
    # Every CPU verifies at least one target of portable by the exact quantization (ORT_DISABLE_ALL).
    assert "ORT_DISABLE_ALL" in out and "ORT CPU kernels: integer " in out
    assert "mean abs" in out.splitlines()[next(i for i, line in enumerate(out.splitlines())
                                              if line.startswith("verification on CPU")) + 1]


def test_a_model_too_small_to_time_says_so_instead_of_not_faster(readme_run, capsys):
    args, folder = readme_run
    out = _run(args, capsys)
    speed = json.loads((folder / "r.json").read_text())["speed"][0]
    assert "NOT FASTER" not in out and "SPEED:" not in out
    if speed["float_ms"] < MEANINGFUL_MS:  # 0.05-0.1 ms a batch on the CPUs measured: always, in practice
        assert (f"speed on CPU: {speed['float_ms']:.2f} ms a batch — too small to time meaningfully; quantized speed "
                "shows on models with bigger layers") in out


def test_speed_lines_and_notes_by_size():
    tiny, slow = SpeedCheck(CPU, 0.09, 0.12, 5), SpeedCheck(CPU, 130.21, 140.0, 5)
    assert tiny.text() == ("speed on CPU: 0.09 ms a batch — too small to time meaningfully; quantized speed shows on "
                           "models with bigger layers")
    assert slow.text() == ("speed on CPU: float 130.21 ms, quantized 140.00 ms (0.93x, NOT FASTER than float; median "
                           "of 5)")
    assert slower_notes([tiny], "portable", searched=False) == []
    (note,) = slower_notes([slow], "portable", searched=False)
    assert note.startswith("SPEED: the quantized model is not faster than float on CPUExecutionProvider")


def _three_biased_layers() -> ir.Model:
    """x [batch, 4, 16] through three MatMul + Add branches, each Add's bias 1024 values (a weight's size), summed:
    a transformer's dense layers on 3-D activations, whose bias Adds ORT does not fuse into a Gemm."""
    rng = np.random.default_rng(0)
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 4, 16])
    branches = []
    for i in range(3):
        w = tape.initializer(ir.tensor(rng.normal(0, 0.3, (16, 1024)).astype(np.float32), name=f"layer{i}.weight"))
        b = tape.initializer(ir.tensor(rng.normal(0, 0.1, 1024).astype(np.float32), name=f"layer{i}.bias"))
        branches.append(tape.op("Add", [tape.op("MatMul", [x, w]), b]))
    y = tape.op("Add", [tape.op("Add", branches[:2]), branches[2]])
    y.name = "y"
    return to_model(tape, [x], [y])


def test_like_reasons_are_one_line_with_a_count(capsys):
    data = {"x": np.random.default_rng(0).normal(0, 1, (64, 4, 16)).astype(np.float32)}
    result = onnxq.quantize(_three_biased_layers(), data, config={"verify": {"sensitivity_samples": 0}})
    adds = [e for e in result.report.left_float if e.op_type == "Add" and "bias" in e.detail]
    assert len(adds) == 3 and len({e.detail for e in adds}) == 3  # one reason each, naming its own bias
    lines = result.summary().splitlines()
    grouped = [line for line in lines if "onnxq does not quantize Add" in line]
    assert grouped == ["     3 Add: onnxq does not quantize Add: its constant input(s) stay float (e.g. layer0.bias "
                       "[1024])"]
    verbose = [line for line in result.summary(verbose=True).splitlines() if "onnxq does not quantize Add" in line]
    assert len(verbose) == 3 and all(f"layer{i}.bias [1024]" in "".join(verbose) for i in range(3))


def test_groups_keep_reasons_apart_that_differ_in_words():
    entries = tuple(onnxq.report.record.NodeEntry(f"n{i}", "Gemm", f"kept float by fallback (sensitivity rank {i}, harm "
                                                           f"{1 / i:.4f})") for i in (1, 2))
    entries += (onnxq.report.record.NodeEntry("m", "MatMul", "both inputs are activations"),) * 2
    assert left_float_groups(entries) == [(2, "Gemm", "kept float by fallback (e.g. sensitivity rank 1, harm 1.0000)"),
                                          (2, "MatMul", "both inputs are activations")]


def test_a_failing_figure_stands_beside_its_bar(samples_dir, tmp_path, capsys):
    """SQNR held to 40 dB: the sample MLP's logits miss it (33.9 dB measured), and the row says against what."""
    out_json = tmp_path / "r.json"
    code = main([str(samples_dir / "mlp.onnx"), "--calib", str(samples_dir / "mlp_calib.npz"), "-o",
                 str(tmp_path / "q.onnx"), "--tolerance", "sqnr=40", "--no-fallback", "--no-sensitivity", "--report",
                 str(out_json)])
    out = capsys.readouterr().out
    logits = json.loads(out_json.read_text())["verification"]["providers"][CPU]["outputs"]["logits"]
    sqnr = next(b for b in logits["bars"] if b["metric"] == "SQNR dB")
    assert code == 1 and sqnr["passed"] is False and sqnr["value"] < 40
    assert math.isclose(sqnr["share"], 10 ** ((40 - sqnr["value"]) / 10), rel_tol=1e-12) and sqnr["share"] > 1
    row = next(line for line in out.splitlines() if line.startswith("  logits "))
    assert f"{sqnr['value']:.1f} (>= 40)" in row and "top1 " in row and "(>= 0.99)" in row


@pytest.mark.parametrize(("bar", "share"), [
    (Bar("cosine", 0.99, 0.98, True, 1.0), 0.5),
    (Bar("max abs", 0.05, 0.1, False, 0.0), 0.5),
    (Bar("SQNR dB", 30.0, 40.0, True, math.inf), 10.0),
    (Bar("perplexity ratio", 1.03, 1.15, False, 1.0), 0.2),
    (Bar("top-1 agreement", 1.0, 0.99, True, 1.0), 0.0),
])
def test_a_bar_s_share_of_the_tolerance(bar, share):
    assert math.isclose(bar.share, share, rel_tol=1e-9, abs_tol=1e-12)
    assert bar.passed == (share <= 1.0)


def test_targets_the_data_cannot_judge_are_not_called_out_of_tolerance(samples_dir):
    """The sample classifier's 128 held-back answers cannot show its 0.99 top-1 bar on any target: the 'checked on'
    line says not shown, never OUT OF TOLERANCE beside a cosine of 0.999."""
    result = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                            config={"verify": {"sensitivity_samples": 0, "measure_speed": False}})
    assert result.report.verdict == "not shown"
    [checked] = [line for line in result.summary().splitlines() if line.startswith("checked on:")]
    assert "OUT OF TOLERANCE" not in checked and "not shown on x86-vnni, x86-avx2, arm64" in checked
