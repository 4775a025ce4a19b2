"""What int8 itself costs a zoo model's task, part by part (can any int8 file hold the task bar?): the float model
with only its weights perturbed, or only the inputs of its products, judged as bench_zoo judges it (the same
string / label / IoU agreement with float on the held-out inputs, and right answers where the data has them).

    python bench/bench_zoo_bounds.py [--model ppocr_rec] [--out bench/out/zoo_bounds] [--onnxq FILE] [--results DIR]

Perturbations of every Conv / MatMul / Gemm with a constant weight (run under ORT_DISABLE_ALL, float kernels):
- float16 weights: each weight rounded to float16 (what a float16 model does to the weights alone);
- int8 weights: each weight rounded to nearest on a symmetric int8 grid per output channel, activations float;
- int8 activations: each product's input rounded to a uint8 grid over the calibration data's min / max, per
  tensor (written as float ops, which every opset has), weights float;
- int8 activations per channel (Conv): the same with one scale per input channel of each Conv (the other
  products' inputs per tensor) — a scheme no integer Conv kernel runs as is (QLinearConv takes one input scale):
  about the most an activation-side method (smoothing, equalization) could give back;
- with --onnxq FILE (a QDQ file onnxq wrote for this model): the file as is, and its weights alone (every
  activation's QuantizeLinear → DequantizeLinear pair taken out, the rounded weights kept).

A bar that the weights alone do not hold cannot be held by any int8 file that quantizes those products."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import THREADS, agreement, fetch  # noqa: E402
from common import Table, add_results_argument, session, write_result  # noqa: E402
from zoo.models import ZOO  # noqa: E402

PRODUCTS = ("Conv", "MatMul", "Gemm")


def with_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """Constant nodes' tensors as initializers (PaddlePaddle's exports hold every weight in a Constant)."""
    kept = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def products(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Conv / MatMul / Gemm nodes of the main graph whose input 1 is a constant weight of rank ≥ 2."""
    weights = {t.name for t in model.graph.initializer if len(t.dims) >= 2}
    return [n for n in model.graph.node if n.op_type in PRODUCTS and len(n.input) > 1 and n.input[1] in weights]


def output_axis(node: onnx.NodeProto) -> int:
    """The weight's axis of output channels: 0 for Conv and Gemm with transB, else 1 (MatMul's columns)."""
    if node.op_type == "Conv":
        return 0
    trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
    return 0 if node.op_type == "Gemm" and trans_b else 1


def int8_nearest(weight: np.ndarray, axis: int) -> np.ndarray:
    """Round to nearest on a symmetric int8 grid, one scale per slice along `axis`, back to float."""
    moved = np.moveaxis(weight, axis, 0)
    scale = np.abs(moved).reshape(len(moved), -1).max(1) / 127
    scale = np.where(scale > 0, scale, 1).reshape((-1,) + (1,) * (moved.ndim - 1))
    return np.moveaxis(np.clip(np.round(moved / scale), -127, 127) * scale, 0, axis).astype(np.float32)


def with_weights(model: onnx.ModelProto, change: Callable[[onnx.NodeProto, np.ndarray], np.ndarray]) -> onnx.ModelProto:
    """A copy whose products' weights are change(node, weight) — each node its own copy where weights are shared."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    arrays = {t.name: t for t in out.graph.initializer}
    for node in products(out):
        weight = numpy_helper.to_array(arrays[node.input[1]])
        name = f"{node.input[1]}.{node.name}.bounds"
        out.graph.initializer.append(numpy_helper.from_array(change(node, weight), name))
        node.input[1] = name
    return out


def input_ranges(model: onnx.ModelProto, calibration: dict[str, np.ndarray],
                 out: Path) -> dict[str, tuple[np.ndarray, ...]]:
    """Each product input's min and max over the calibration data, per channel on axis 1 and over everything."""
    names = sorted({n.input[0] for n in products(model)})
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    path = out / "probe.onnx"
    onnx.save(probe, str(path))
    runner = session(path, THREADS, optimize=False)
    first = next(iter(calibration.values()))
    lows: dict[str, np.ndarray] = {}
    highs: dict[str, np.ndarray] = {}
    for start in range(len(first)):  # one sample a run: a page's activations are large, some models take 1
        feed = {k: v[start:start + 1] for k, v in calibration.items()}
        for name, value in zip(names, runner.run(names, feed)):
            channels = np.moveaxis(value, 1, 0).reshape(value.shape[1], -1) if value.ndim == 4 else value.reshape(1, -1)
            lows[name] = np.minimum(lows.get(name, np.inf), channels.min(1))
            highs[name] = np.maximum(highs.get(name, -np.inf), channels.max(1))
    return {name: (lows[name], highs[name]) for name in names}


def fake_quant_nodes(value: str, low: np.ndarray, high: np.ndarray, tag: str) -> tuple[list, list]:
    """Nodes and initializers computing uint8 Q → DQ of `value` with scales per channel (shape [1, C, 1, 1]) or one
    scale (C = 1), written as float ops so that any opset takes them; returns (nodes, initializers)."""
    low, high = np.minimum(low, 0), np.maximum(high, 0)
    scale = np.maximum((high - low) / 255, 1e-12).astype(np.float32)
    zero = np.clip(np.round(-low / scale), 0, 255).astype(np.float32)
    shape = (1, -1, 1, 1) if scale.size > 1 else ()
    names = [f"{tag}.{k}" for k in ("scale", "zero", "lo", "hi")]
    inits = [numpy_helper.from_array(a, n) for a, n in
             zip((scale.reshape(shape), zero.reshape(shape), np.float32(0), np.float32(255)), names)]
    steps = [f"{tag}.{i}" for i in range(5)]
    nodes = [helper.make_node("Div", [value, names[0]], [steps[0]]), helper.make_node("Round", [steps[0]], [steps[1]]),
             helper.make_node("Add", [steps[1], names[1]], [steps[2]]),
             helper.make_node("Clip", [steps[2], names[2], names[3]], [steps[3]]),
             helper.make_node("Sub", [steps[3], names[1]], [steps[4]]),
             helper.make_node("Mul", [steps[4], names[0]], [f"{tag}.out"])]
    return nodes, inits


def with_quantized_inputs(model: onnx.ModelProto, ranges: dict, per_channel: bool) -> onnx.ModelProto:
    """A copy whose products read their input through uint8 fake quantization (per channel: Conv inputs; the
    others per tensor)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    targets = {n.name: n.op_type == "Conv" and per_channel for n in products(out)}
    nodes = []
    for node in out.graph.node:
        if node.name in targets:
            low, high = ranges[node.input[0]]
            if not targets[node.name]:
                low, high = low.min(keepdims=True), high.max(keepdims=True)
            added, inits = fake_quant_nodes(node.input[0], low, high, f"{node.name}.bounds")
            nodes += added
            out.graph.initializer.extend(inits)
            node.input[0] = added[-1].output[0]
        nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def weights_alone(path: Path) -> onnx.ModelProto:
    """A QDQ file with every activation's QuantizeLinear → DequantizeLinear pair taken out."""
    model = onnx.load(str(path))
    quantized = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    restored, kept = {}, []
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in quantized:
            restored[node.output[0]] = quantized[node.input[0]]
        elif node.op_type != "QuantizeLinear":
            kept.append(node)
    for node in kept:
        node.input[:] = [restored.get(name, name) for name in node.input]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def judge(task, float_answers: list, model: onnx.ModelProto | Path, name: str, out: Path) -> dict:
    """The task's agreement with float (and right answers) of a model run under ORT_DISABLE_ALL."""
    path = model if isinstance(model, Path) else out / f"{name.replace(' ', '_').replace(',', '')}.onnx"
    if not isinstance(model, Path):
        onnx.save(model, str(path))
    answers = task.answers(session(path, THREADS, optimize=False))
    row = {"variant": name, "agreement": agreement(float_answers, answers, task.metric)}
    if task.truth is not None:
        row["right"] = agreement(task.truth, answers, task.metric)
    print(json.dumps(row), flush=True)
    return row


def variants(model: onnx.ModelProto, task, onnxq_file: Path | None, out: Path) -> dict[str, Callable[[], object]]:
    """name → a thunk making the model to judge (the ranges measured once, when first needed)."""
    measured = functools.cache(lambda: input_ranges(model, task.calibration, out))
    made = {"float16 weights": lambda: with_weights(model, lambda n, w: w.astype(np.float16).astype(np.float32)),
            "int8 weights": lambda: with_weights(model, lambda n, w: int8_nearest(w, output_axis(n))),
            "int8 activations": lambda: with_quantized_inputs(model, measured(), per_channel=False),
            "int8 activations per channel (Conv)": lambda: with_quantized_inputs(model, measured(), per_channel=True)}
    if onnxq_file is not None:
        made["onnxq file"] = lambda: onnxq_file
        made["onnxq file, its weights alone"] = lambda: weights_alone(onnxq_file)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ppocr_rec", choices=[e.name for e in ZOO])
    parser.add_argument("--out", type=Path, default=Path("bench/out/zoo_bounds"))
    parser.add_argument("--onnxq", type=Path, help="a QDQ file onnxq wrote for this model")
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    entry = next(e for e in ZOO if e.name == args.model)
    float_path = fetch(entry, args.out)
    task = entry.prepare(np.random.default_rng(0))
    model = with_initializers(onnx.load(str(float_path)))
    float_answers = task.answers(session(float_path, THREADS, optimize=False))
    rows = [judge(task, float_answers, float_path, "float", args.out)]
    rows += [judge(task, float_answers, make(), name, args.out)
             for name, make in variants(model, task, args.onnxq, args.out).items()]
    table = Table((entry.name, f"{task.metric} with float", "right answers"), tuple(
        (row["variant"], f"{row['agreement']:.3f}", f"{row['right']:.3f}" if "right" in row else "—") for row in rows))
    write_result(args.results, __file__, f"What int8 costs {entry.name}'s task, part by part", [table],
                 {"model": entry.name, "metric": task.metric, "rows": rows}, variant=entry.name)


if __name__ == "__main__":
    main()
