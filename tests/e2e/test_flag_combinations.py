"""Seeded random combinations of the command line's own choices (read from its parser, so that a new flag is drawn
too) on four small models — an MLP of Gemms, a transformer, a decoder with a KV cache and a CNN — each run must end
in 0, 1, 4 (nothing shown) or a refusal of one line (exit 2), never an internal error, and a written file must load
in ONNX Runtime.
Found by the same draws run as a script: --per-tensor with 4-bit weights ended in exit 3."""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from decoder_model import kv_decoder, token_windows

from onnxq.cli.main import build_parser, main

DRAWS = 100
# Options whose values are numbers or words the parser does not list: a few sensible ones each.
VALUES = {"--block": ["16", "32"], "--calib-batch-size": ["1", "3"], "--calib-samples": ["5"],
          "--smooth": ["off", "0.5", "auto"], "--percentile": ["99.9"], "--min-cosine": ["0.9"],
          "--accuracy-level": ["0", "4"], "--vocabulary-bits": ["4", "8"]}
# Switches drawn; the rest (help, quiet, verbose) change only what is printed.
SWITCHES = ("--per-tensor", "--quantize-attention", "--no-fallback", "--no-sensitivity", "--allow-slower",
            "--no-verify", "--check-speed")


def _cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv → Relu → depthwise Conv → Relu → GlobalAveragePool → Flatten → Gemm."""
    arrays = {"w1": rng.normal(0, .3, (16, 3, 3, 3)), "b1": np.zeros(16), "w2": rng.normal(0, .3, (16, 1, 3, 3)),
              "w3": rng.normal(0, .3, (10, 16))}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], group=16, pads=[1, 1, 1, 1], name="depthwise"),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
                              [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def models(samples_dir, tmp_path_factory) -> dict[str, tuple[str, str]]:
    folder = tmp_path_factory.mktemp("models")
    rng = np.random.default_rng(0)
    onnx.save(kv_decoder(), folder / "decoder.onnx")
    np.savez(folder / "decoder.npz", **token_windows(rng, 24, 16))
    onnx.save(_cnn(rng), folder / "cnn.onnx")
    np.savez(folder / "cnn.npz", x=rng.normal(0, 1, (40, 3, 16, 16)).astype(np.float32))
    transformer = samples_dir / "tiny_transformer.onnx"
    return {"mlp": (str(samples_dir / "mlp.onnx"), str(samples_dir / "mlp_calib.npz")),
            "transformer": (str(transformer), str(samples_dir / "tiny_transformer_calib.npz")),
            "decoder": (str(folder / "decoder.onnx"), str(folder / "decoder.npz")),
            "cnn": (str(folder / "cnn.onnx"), str(folder / "cnn.npz"))}


def _choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Every option of the parser that lists its choices, and those of VALUES."""
    listed = {a.option_strings[-1]: [str(c) for c in a.choices] for a in parser._actions
              if a.option_strings and a.choices}
    return {**listed, **VALUES}


def _draw(rng: np.random.Generator, choices: dict[str, list[str]]) -> list[str]:
    args = []
    for option in sorted(choices):
        if rng.random() < 0.2:
            args += [option, str(rng.choice(choices[option]))]
    args += [s for s in SWITCHES if rng.random() < (0.03 if s == "--check-speed" else 0.12)]
    return args if "--check-speed" in args else [*args, "--no-speed"]


@pytest.mark.slow
def test_random_flag_combinations_never_end_in_an_internal_error(models, tmp_path, capsys):
    choices = _choices(build_parser())
    assert {"--format", "--target", "--weights", "--mode", "--activations"} <= set(choices)  # read from the parser
    rng = np.random.default_rng(2026)
    failures, codes = [], []
    for draw in range(DRAWS):
        name = str(rng.choice(sorted(models)))
        model, data = models[name]
        output = tmp_path / f"{draw}.onnx"
        flags = (["--calib", data] if rng.random() < 0.8 else []) + _draw(rng, choices)
        code = main([model, "-o", str(output), "-q", *flags])
        lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("WARNING")]
        codes.append(code)
        if code not in (0, 1, 2, 4) or (code == 2 and len(lines) != 1):
            failures.append(f"{name} {' '.join(flags)}: exit {code}: {lines[-1] if lines else ''}")
        elif code in (0, 1, 4):
            ort.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    assert not failures, "\n".join(failures)
    # The draws are not all refusals of settings that conflict: 49 of these 100 quantize (measured).
    assert codes.count(0) + codes.count(1) + codes.count(4) >= DRAWS // 3, codes
