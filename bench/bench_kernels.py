"""The integer-kernel ceiling: one [M×K]·[K×N] product per form ONNX Runtime offers, against float MatMul.

    python bench/bench_kernels.py [--m 4096 --k 384 --n 1536] [--rounds 30] [--threads 2] [--results bench/results]

Every form computes the same activation × weight product (the FFN input projection of a BERT-small layer at
batch 32 × 128 tokens by default), so the ratios show the best any quantized model can do on this CPU. Speed
only: whether AVX2's U8S8 kernel saturates is bench_weight_limits.py's question.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Table, add_results_argument, interleaved_latency_ms, write_result  # noqa: E402


def _model(nodes, inputs, output_type, inits, path: Path) -> Path:
    graph = helper.make_graph(nodes, "kernel", inputs, [helper.make_tensor_value_info("y", output_type, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def build(out: Path, k: int, n: int, rng: np.random.Generator) -> dict[str, Path]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])
    w = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    scale = np.abs(w).max(0) / 127
    w8 = np.rint(w / scale).astype(np.int8)
    wu8 = (w8.astype(np.int16) + 128).astype(np.uint8)
    a_scale, a_zp = np.float32(8 / 255), np.uint8(128)
    forms = {"float MatMul": _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], TensorProto.FLOAT,
                                    {"w": w}, out / "float.onnx")}
    for name, wq, wzp in (("u8s8", w8, np.zeros(n, np.int8)), ("u8u8", wu8, np.full(n, 128, np.uint8))):
        inits = {"w": wq, "ws": scale.astype(np.float32), "wzp": wzp, "as": np.array(a_scale), "azp": np.array(a_zp)}
        forms[f"DynamicQuantizeMatMul {name}"] = _model(
            [helper.make_node("DynamicQuantizeMatMul", ["x", "w", "ws", "wzp"], ["y"], domain="com.microsoft")],
            [x], TensorProto.FLOAT, inits, out / f"dqmm_{name}.onnx")
        forms[f"QuantizeLinear + MatMulIntegerToFloat {name}"] = _model(
            [helper.make_node("QuantizeLinear", ["x", "as", "azp"], ["xq"]),
             helper.make_node("MatMulIntegerToFloat", ["xq", "w", "as", "ws", "azp", "wzp"], ["y"],
                              domain="com.microsoft")],
            [x], TensorProto.FLOAT, inits, out / f"mmitf_{name}.onnx")
    s8 = {"w": w8, "ws": scale.astype(np.float32), "wzp": np.zeros(n, np.int8), "as": np.array(a_scale),
          "azp": np.array(np.int8(0))}
    forms["QuantizeLinear + MatMulIntegerToFloat s8s8"] = _model(
        [helper.make_node("QuantizeLinear", ["x", "as", "azp"], ["xq"]),
         helper.make_node("MatMulIntegerToFloat", ["xq", "w", "as", "ws", "azp", "wzp"], ["y"], domain="com.microsoft")],
        [x], TensorProto.FLOAT, s8, out / "mmitf_s8s8.onnx")
    # Per-token activations (one symmetric scale per row, at run time; onnxq's --activations per-token): the scale
    # subgraph, QuantizeLinear with a per-row scale (axis 0) and zero point 128, then either ORT's
    # MatMulIntegerToFloat (its activation scale must be a scalar: 1) and the row scales, or standard ops only.
    row_scale = [
        helper.make_node("Abs", ["x"], ["abs"]),
        helper.make_node("ReduceMax", ["abs", "axes"], ["amax"], keepdims=1),
        helper.make_node("Div", ["amax", "qmax"], ["scale0"]),
        helper.make_node("Max", ["scale0", "tiny"], ["scale"]),
        helper.make_node("Reshape", ["scale", "flat"], ["scale_flat"]),
        helper.make_node("Expand", ["azp", "rows"], ["zps"]),
        helper.make_node("Shape", ["scale_flat"], ["rows"]),
        helper.make_node("QuantizeLinear", ["x", "scale_flat", "zps"], ["xq"], axis=0)]
    per_token = {"w": w8, "ws": scale.astype(np.float32), "wzp": np.zeros(n, np.int8), "one": np.array(np.float32(1)),
                 "azp": np.array(a_zp), "axes": np.array([1], np.int64), "qmax": np.array(np.float32(127)),
                 "tiny": np.array(np.finfo(np.float32).tiny), "flat": np.array([-1], np.int64)}
    forms["per-token: QuantizeLinear per row + MatMulIntegerToFloat + Mul"] = _model(
        [*row_scale, helper.make_node("MatMulIntegerToFloat", ["xq", "w", "one", "ws", "azp", "wzp"], ["yw"],
                                      domain="com.microsoft"),
         helper.make_node("Mul", ["yw", "scale"], ["y"])], [x], TensorProto.FLOAT, per_token, out / "pt_mmitf.onnx")
    forms["per-token: QuantizeLinear per row + MatMulInteger + Cast + Mul + Mul"] = _model(
        [*row_scale, helper.make_node("MatMulInteger", ["xq", "w", "azp", "wzp"], ["acc"]),
         helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["accf", "scale"], ["yr"]), helper.make_node("Mul", ["yr", "ws"], ["y"])],
        [x], TensorProto.FLOAT, per_token, out / "pt_mmi.onnx")
    # MatMulNBits with 8-bit weights: B [N, K/block, block] uint8 (zero point 128), accuracy_level 4 quantizes
    # the activations to int8 per block and runs an integer kernel.
    block = 32
    wt = w.T.reshape(n, k // block, block)
    bscale = np.abs(wt).max(-1) / 127
    bq = (np.rint(wt / bscale[..., None]) + 128).astype(np.uint8)
    forms["MatMulNBits 8-bit acc4"] = _model(
        [helper.make_node("MatMulNBits", ["x", "b", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=8,
                          block_size=block, accuracy_level=4)],
        [x], TensorProto.FLOAT, {"b": bq, "s": bscale.astype(np.float32).reshape(-1)}, out / "nbits8.onnx")
    return forms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--k", type=int, default=384)
    parser.add_argument("--n", type=int, default=1536)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="bench/out/kernels")
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    forms = build(out, args.k, args.n, rng)
    feed = {"x": rng.normal(0, 1, (args.m, args.k)).astype(np.float32)}
    latency = interleaved_latency_ms(forms, feed, args.rounds, args.threads)
    base = latency["float MatMul"]
    table = Table(("form", "ms", "speed-up vs float"),
                  tuple((name, f"{ms:.1f}", f"{base / ms:.2f}×") for name, ms in latency.items()),
                  caption=f"[{args.m}×{args.k}]·[{args.k}×{args.n}], {args.threads} threads, median of {args.rounds} "
                          "interleaved rounds")
    write_result(args.results, __file__, "Integer kernels: one product per form against float MatMul", [table],
                 {"shape": {"m": args.m, "k": args.k, "n": args.n}, "threads": args.threads, "latency_ms": latency})


if __name__ == "__main__":
    main()
