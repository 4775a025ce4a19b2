"""Conv models against onnxruntime.quantization, same data, same machine, same run.

    python bench/bench_conv.py [--out bench/out/conv] [--rounds 15] [--results bench/results]

Models: a 3-Conv CNN built here, and PP-OCR's direction classifier and text detector as rapidocr-onnxruntime 1.4.4
ships them (fetched with `pip download`, the wheel's sha256 checked). Inputs are synthetic pages (dark rectangles
on a light background, PP-OCR's normalization to [-1, 1]): the figures say how close and how fast, not how well
text is read. Per model: latency (interleaved medians), cosine to float and argmax agreement on held-out inputs
(last axis), for float, onnxq static, onnxruntime's quantize_static (QDQ, per channel, U8S8) and quantize_dynamic.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (Table, add_results_argument, fetch_wheel, interleaved_latency_ms, mean_cosine,  # noqa: E402
                    session, write_result)

WHEEL = ("rapidocr-onnxruntime", "1.4.4", "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")
MODELS = {"ppocr_cls": ("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", (48, 192), 64),
          "ppocr_det": ("rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", (320, 320), 16)}


def ppocr_model(out: Path, key: str) -> Path:
    """One of MODELS, taken out of the fetched wheel into `out`."""
    member = MODELS[key][0]
    path = out / Path(member).name
    with zipfile.ZipFile(fetch_wheel(*WHEEL, out)) as wheel:
        path.write_bytes(wheel.read(member))
    return path


def bench_args(default_out: str) -> tuple[Path, int, Path]:
    """(the output folder, made; interleaved rounds; the result file's folder) from --out, --rounds, --results."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / default_out))
    parser.add_argument("--rounds", type=int, default=15)
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out, args.rounds, args.results


def pages(n: int, height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    images = np.ones((n, 3, height, width), np.float32)
    for image in images:
        for _ in range(rng.integers(3, 9)):
            y, x = rng.integers(0, height - 8), rng.integers(0, width - 20)
            image[:, y:y + rng.integers(4, max(5, height // 3)), x:x + rng.integers(10, width // 2)] = \
                rng.uniform(0, 0.3)
        image += rng.normal(0, 0.05, image.shape).astype(np.float32)
    return (images - 0.5) / 0.5


def small_cnn(path: Path, rng: np.random.Generator) -> Path:
    nodes, inits, x, channels = [], [], "x", (3, 32, 64, 64)
    for i in range(3):
        w = rng.normal(0, 1 / np.sqrt(channels[i] * 9), (channels[i + 1], channels[i], 3, 3)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, channels[i + 1]).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
        if i == 0:
            nodes.append(helper.make_node("MaxPool", [x], ["p0"], kernel_shape=[2, 2], strides=[2, 2]))
            x = "p0"
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("MatMul", ["f", "wf"], ["y"], name="fc")]
    inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (64, 10)).astype(np.float32), "wf"))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def quantize_all(source: Path, calibration: np.ndarray, out: Path, failures: dict) -> dict[str, Path]:
    import onnxq
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    name = onnx.load(str(source), load_external_data=False).graph.input[0].name
    paths = {"float": source, "onnxq static": out / f"{source.stem}_onnxq.onnx",
             "ORT static": out / f"{source.stem}_ort_static.onnx", "ORT dynamic": out / f"{source.stem}_ort_dyn.onnx"}
    onnxq.quantize(source, {name: calibration}, output=paths["onnxq static"],
                   config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False)))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{name: calibration[i:i + 1]} for i in range(len(calibration))])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(source, paths["ORT static"], Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    try:
        quantize_dynamic(source, paths["ORT dynamic"], weight_type=QuantType.QInt8)
    except Exception as e:  # noqa: BLE001 — its failure is a result
        failures[f"ORT dynamic on {source.name}"] = str(e)[:120]
        print(f"  ORT quantize_dynamic failed on {source.name}: {str(e)[:120]}")
        del paths["ORT dynamic"]
    return paths


def measure(label: str, paths: dict[str, Path], held_out: np.ndarray, rounds: int) -> tuple[Table, dict]:
    """The table of one model (latency, × float, cosine, argmax agreement per quantizer) and its figures."""
    name = onnx.load(str(paths["float"]), load_external_data=False).graph.input[0].name
    feed = {name: held_out}
    reference = session(paths["float"]).run(None, feed)[0]
    latency = interleaved_latency_ms(paths, feed, rounds)
    figures, rows = {}, []
    for kind, path in paths.items():
        out = session(path).run(None, feed)[0]
        figures[kind] = {"latency_ms": latency[kind], "cosine": mean_cosine(reference, out),
                         "argmax_agreement": float((out.argmax(-1) == reference.argmax(-1)).mean())}
        rows.append((kind, f"{latency[kind]:.1f}", f"{latency[kind] / latency['float']:.2f}",
                     f"{figures[kind]['cosine']:.4f}", f"{figures[kind]['argmax_agreement']:.3f}"))
    table = Table(("model", "latency ms", "× float", "cosine", "argmax agreement"), tuple(rows),
                  caption=f"{label}: {len(held_out)} held-out inputs, latency median of {rounds} interleaved rounds")
    return table, figures


def main() -> None:
    out, rounds, results = bench_args("conv")
    rng = np.random.default_rng(0)
    cnn = small_cnn(out / "small_cnn.onnx", rng)
    images = rng.normal(0, 1, (40, 3, 64, 64)).astype(np.float32)
    failures: dict[str, str] = {}
    tables, figures = [], {}
    table, figures["small CNN"] = measure("small CNN (3 Conv + MatMul)", quantize_all(cnn, images[:32], out, failures),
                                          images[32:], rounds)
    tables.append(table)
    for key, (_, (height, width), count) in MODELS.items():
        path = ppocr_model(out, key)
        data = pages(count + 8, height, width, rng)
        table, figures[key] = measure(key, quantize_all(path, data[:count], out, failures), data[count:], rounds)
        tables.append(table)
    write_result(results, __file__, "CNNs: onnxq against onnxruntime.quantization", tables,
                 {"models": figures, "failures": failures})


if __name__ == "__main__":
    main()
