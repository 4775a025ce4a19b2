"""onnxq vs onnxruntime.quantization on the classic CNN architectures that ship with the onnx package, same data,
same machine, one run.

    python bench/bench_light_cnns.py [--only light_resnet50 ...] [--rounds 20] [--out bench/out/light] [--results DIR]

onnx's backend test data holds "light" copies of the ONNX Model Zoo's CNNs (ResNet-50, Inception v1/v2, DenseNet-121,
ShuffleNet, SqueezeNet, VGG-19, AlexNet, ZFNet-512): their real graphs — opset 9, IR version 3 (every initializer a
graph input), BatchNormalization, LRN, Sum, Dropout — with every weight a ConstantOfShape of 0.02. The bench gives
each weight a seeded random value (He-normal for kernels, BatchNormalization's scale and variance near 1) and feeds
random images: the figures say how fast and how heavy each quantizer is on these graphs, and that its file stays
close to float — not how well a trained model classifies (the weights are not trained). Each quantizer runs in its
own process (wall time of the quantize call, peak RSS of the process): onnxq with its defaults — calibration, its
verification and speed check (the kinds of node slower quantized kept float), and where the check fails the
sensitivity, the escalation (output-error windows, GPTQ rounding) and the fallback —, onnxruntime's quantize_static (QDQ, per channel, MinMax, uint8
activations / int8 weights) on the same 24 images, which verifies nothing; latency batch 1, interleaved. ORT's
quantizer given an opset-9 model writes per-channel DequantizeLinear nodes that opset does not have (ORT refuses
the file): its run then converts the model to opset 13 with onnx's version converter first, as its user would, and
its time includes that conversion (onnxq's includes its own).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (Table, add_results_argument, file_mb, interleaved_latency_ms, machine, mean_cosine,  # noqa: E402
                    run_worker, session, timed, write_result)

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DEFAULT = ("light_squeezenet", "light_shufflenet", "light_inception_v1", "light_resnet50")
CALIBRATION, HELD_OUT = 24, 8


def with_weights(name: str, path: Path) -> str:
    """The light model with a seeded random value for each ConstantOfShape weight, saved at path; its input's name."""
    model = onnx.load(LIGHT / f"{name}.onnx")
    rng = np.random.default_rng(0)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    readers = {}
    for node in model.graph.node:
        for i, value in enumerate(node.input):
            readers.setdefault(value, []).append((node, i))
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        array = _weight([int(d) for d in shapes[node.input[0]]], _near_one(node.output[0], readers), rng)
        model.graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
        model.graph.input.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT,
                                                                    array.shape))  # IR 3: every initializer
    del model.graph.node[:]
    model.graph.node.extend(kept)
    for listed in (model.graph.initializer, model.graph.input):  # the shapes the ConstantOfShapes read: unused now
        unused = [v for v in listed if v.name.endswith("__SHAPE")]
        for value in unused:
            listed.remove(value)
    onnx.save(model, path)
    initializers = {t.name for t in model.graph.initializer}
    return next(i.name for i in model.graph.input if i.name not in initializers)


def _near_one(value: str, readers: dict) -> bool:
    """A BatchNormalization scale or variance, or what a Mul reads (DenseNet's unfolded batch norms)."""
    for node, i in readers.get(value, []):
        if node.op_type == "Unsqueeze":
            return _near_one(node.output[0], readers)
        if (node.op_type == "BatchNormalization" and i in (1, 4)) or node.op_type == "Mul":
            return True
    return False


def _weight(shape: list[int], near_one: bool, rng: np.random.Generator) -> np.ndarray:
    if len(shape) >= 2:
        array = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
    elif near_one:
        array = 1 + 0.1 * np.abs(rng.standard_normal(shape))
    else:
        array = 0.05 * rng.standard_normal(shape)
    return array.astype(np.float32)


def worker(kind: str, model: str, data: str, out: str) -> dict:
    with np.load(data) as stored:
        name, images = stored.files[0], stored[stored.files[0]]
    batches = [{name: images[i:i + 1]} for i in range(CALIBRATION)]  # the graphs take one image a run
    if kind == "onnxq":
        import onnxq

        return timed(lambda: onnxq.quantize(model, batches, output=out))  # the defaults: verified, never slower
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    def run() -> None:
        source = model
        if kind == "ort-converted":  # the user's own conversion to opset 13 first, timed with the quantization
            source = f"{out}.opset13.onnx"
            onnx.save(onnx.version_converter.convert_version(onnx.load(model), 13), source)
        quantize_static(source, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)

    return timed(run)


def _quantized(kind: str, model: Path, data: Path, out: Path) -> tuple[dict | None, Path]:
    """The quantizer's run (seconds, peak RSS, file size) and its file; None where ORT cannot load that file."""
    run = run_worker(Path(__file__), kind, str(model), str(data), str(out))
    try:
        session(out)
    except Exception:  # noqa: BLE001 — any refusal of the file is the finding
        return None, out
    return {"seconds": round(run["seconds"], 2), "peak_rss_mb": round(run["peak_rss_mb"]),
            "size_mb": round(file_mb(out), 1)}, out


def bench_one(name: str, folder: Path, rounds: int) -> dict:
    model, data = folder / f"{name}.onnx", folder / f"{name}_images.npz"
    input_name = with_weights(name, model)
    images = np.random.default_rng(1).standard_normal((CALIBRATION + HELD_OUT, 1, 3, 224, 224)).astype(np.float32)
    np.savez(data, **{input_name: images[:, 0]})
    row = {"model": name, "float_mb": round(file_mb(model), 1)}
    paths = {"float": model}
    for kind in ("onnxq", "ort"):
        row[kind], paths[kind] = _quantized(kind, model, data, folder / f"{name}.{kind}.onnx")
    if row["ort"] is None:  # its file does not load: the model converted to opset 13 first, as its user would
        row["ort_on_the_model_as_given"] = "writes a file ORT refuses (per-channel DequantizeLinear below opset 13)"
        row["ort"], paths["ort"] = _quantized("ort-converted", model, data, folder / f"{name}.ort.onnx")
    held_out = images[CALIBRATION:]
    outputs = {k: np.concatenate([session(p).run(None, {input_name: x})[0] for x in held_out])
               for k, p in paths.items()}
    for kind in ("onnxq", "ort"):
        row[kind]["cosine_to_float"] = round(mean_cosine(outputs["float"], outputs[kind]), 4)
    row["latency_ms"] = {k: round(v, 2) for k, v in interleaved_latency_ms(paths, {input_name: held_out[0]},
                                                                           rounds).items()}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(DEFAULT), help="light_<name> models (all: the folder's)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("bench/out/light"))
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    add_results_argument(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    print("machine:", machine())
    rows = []
    for name in args.only:
        rows.append(bench_one(name, args.out, args.rounds))
        print(json.dumps(rows[-1]), flush=True)
    write_result(args.results, __file__, "The onnx package's light CNNs: onnxq against onnxruntime.quantization",
                 [_table(rows)], {"rows": rows})


def _table(rows: list[dict]) -> Table:
    cells = []
    for r in rows:
        q, o, lat = r["onnxq"], r["ort"], r["latency_ms"]
        cells.append((f"{r['model']} ({r['float_mb']})",
                      f"{q['seconds']} s / {o['seconds']} s ({q['seconds'] / o['seconds']:.2f})",
                      f"{q['peak_rss_mb']} / {o['peak_rss_mb']} ({q['peak_rss_mb'] / o['peak_rss_mb']:.2f})",
                      f"{q['size_mb'] / r['float_mb']:.2f} / {o['size_mb'] / r['float_mb']:.2f}",
                      f"{lat['float'] / lat['onnxq']:.2f}× / {lat['float'] / lat['ort']:.2f}× faster",
                      f"{q['cosine_to_float']} / {o['cosine_to_float']}"))
    return Table(("model (float MB)", "quantize time onnxq / ORT (ratio)", "peak RSS MB onnxq / ORT (ratio)",
                  "size × float onnxq / ORT", "latency × float onnxq / ORT", "cosine to float onnxq / ORT"),
                 tuple(cells))


if __name__ == "__main__":
    main()
