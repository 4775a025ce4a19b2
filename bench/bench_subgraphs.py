"""Products inside a Loop body: onnxq static (the body's activations calibrated through its outputs) against onnxq
dynamic (activations quantized at run time) and onnxruntime.quantization's quantize_static / quantize_dynamic,
same model, data and machine, one run.

The model is an RNN run by a Loop, as exporters write recurrent decoders: per step t, h ← tanh(x_t·Wx + h·Wh + b)
and y_t = h·Wy (H = 512, 24 steps), every product inside the body. Inputs: x [batch, 24, 512] of a smooth random
signal; the first 96 sequences calibrate, 32 others are held out. Figures: cosine of every step's output to float
(mean over held-out sequences), size, latency of a run of --batch sequences (one thread, interleaved medians).

    python bench/bench_subgraphs.py [--out bench/out/subgraphs] [--rounds 300] [--batch 1] [--results bench/results]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (Table, add_results_argument, file_mb, fresh, interleaved_latency_ms, mean_cosine,  # noqa: E402
                    session, write_result)

H, STEPS, CALIBRATION, HELD_OUT = 512, 24, 96, 32


def rnn_loop(rng: np.random.Generator) -> onnx.ModelProto:
    """Loop over the steps of x [batch, STEPS, H]: each step's products in the body, y [STEPS, batch, H] out."""
    weights = {name: rng.normal(0, 1.0 / np.sqrt(H), (H, H)).astype(np.float32) for name in ("wx", "wh", "wy")}
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["x_t"], axis=1),
         helper.make_node("MatMul", ["x_t", "wx"], ["xw"], name="step_x"),
         helper.make_node("MatMul", ["h_in", "wh"], ["hw"], name="step_h"),
         helper.make_node("Add", ["xw", "hw"], ["pre"]), helper.make_node("Add", ["pre", "b"], ["biased"]),
         helper.make_node("Tanh", ["biased"], ["h_out"]),
         helper.make_node("MatMul", ["h_out", "wy"], ["y_t"], name="step_out"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "step", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["batch", H])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["batch", H]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, ["batch", H])])
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "zero"], ["batch"]),
         helper.make_node("Concat", ["batch", "width"], ["h_shape"], axis=0),
         helper.make_node("ConstantOfShape", ["h_shape"], ["h0"]),
         helper.make_node("Loop", ["steps", "", "h0"], ["h_last", "y"], name="decoder", body=body)], "rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", STEPS, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [STEPS, "batch", H])],
        [*(numpy_helper.from_array(w, n) for n, w in weights.items()),
         numpy_helper.from_array(rng.normal(0, 0.1, H).astype(np.float32), "b"),
         numpy_helper.from_array(np.array(STEPS, np.int64), "steps"),
         numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([H], np.int64), "width")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def signal(rng: np.random.Generator, count: int) -> np.ndarray:
    """Smooth sequences: a random walk per feature, scaled to unit variance."""
    walk = np.cumsum(rng.normal(0, 0.3, (count, STEPS, H)), axis=1)
    return (walk / walk.std()).astype(np.float32)


def variants(model: Path, calibration: np.ndarray, out: Path) -> dict[str, Path]:
    import onnxq
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, \
        quantize_static
    paths = {"float": model}
    verify = onnxq.VerifyConfig(sensitivity_samples=0)
    for name, mode in (("onnxq static", "static"), ("onnxq dynamic", "dynamic")):
        paths[name] = fresh(out / f"rnn.{mode}.onnx")
        onnxq.quantize(model, {"x": calibration}, output=paths[name],
                       config=onnxq.QuantConfig(mode=mode, verify=verify))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter({"x": calibration[i:i + 1]} for i in range(len(calibration)))

        def get_next(self):
            return next(self.feeds, None)
    paths["ORT static"] = fresh(out / "rnn.ort_static.onnx")
    quantize_static(str(model), str(paths["ORT static"]), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    paths["ORT dynamic"] = fresh(out / "rnn.ort_dynamic.onnx")
    quantize_dynamic(str(model), str(paths["ORT dynamic"]), weight_type=QuantType.QInt8)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "subgraphs")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1, help="sequences per timed run")
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    model = args.out / "rnn.float.onnx"
    onnx.save(rnn_loop(rng), str(model))
    data = signal(rng, CALIBRATION + HELD_OUT)
    paths = variants(model, data[:CALIBRATION], args.out)
    held_out = {"x": data[CALIBRATION:]}
    reference = session(model, 1).run(None, held_out)[0]
    latency = interleaved_latency_ms(paths, {"x": data[:args.batch]}, args.rounds, threads=1)
    rows, figures = [], {}
    for name, path in paths.items():
        got = session(path, 1).run(None, held_out)[0]
        cosine = mean_cosine(reference.transpose(1, 0, 2).reshape(HELD_OUT, -1),
                             got.transpose(1, 0, 2).reshape(HELD_OUT, -1))
        figures[name] = {"cosine": cosine, "size_mb": file_mb(path), "latency_ms": latency[name]}
        rows.append((name, f"{cosine:.5f}", f"{file_mb(path) / file_mb(model):.2f}",
                     f"{latency[name]:.3f} ms ({latency[name] / latency['float']:.2f})"))
    table = Table(("variant", "cosine to float (every step)", "size (× float)", "latency of a run (× float)"),
                  tuple(rows), caption=f"An RNN in a Loop; one thread, {args.rounds} rounds, {args.batch} sequence(s) "
                                       "a run")
    write_result(args.results, __file__, "Products inside a Loop body", [table], figures)


if __name__ == "__main__":
    main()
