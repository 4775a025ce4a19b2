"""Targets on MiniLM: accuracy as deployed (ORT_ENABLE_ALL: integer kernels) and exact (ORT_DISABLE_ALL: the same
file, DequantizeLinear + float ops), and latency vs float and vs onnxruntime.quantization's outputs, one run.

    python bench/bench_targets.py [--rounds-b1 40] [--rounds-b32 8] [--accuracy-only] [--results bench/results]

On a CPU without VNNI, deployed differs from exact where ORT's U8S8 kernel saturates (onnxq.targets): the
x86-vnni row shows what a model made for VNNI does here; portable / x86-avx2 must match their exact figure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SHARED, Table, add_results_argument, interleaved_latency_ms, mean_cosine, session,  # noqa: E402
                    write_result)

import onnxq  # noqa: E402

MINILM = SHARED / "minilm"
MODEL = MINILM / "all-MiniLM-L6-v2.onnx"
CALIB = MINILM / "calib_docs.npz"


def transformers_optimized(out: Path) -> Path:
    """The float model through onnxruntime.transformers' fusions (SkipLayerNormalization, BiasGelu; opt_level 0:
    the python fusions only, as its ORT pass needs torch)."""
    from onnxruntime.transformers import optimizer

    path = out / "minilm.fused.onnx"
    optimizer.optimize_model(str(MODEL), model_type="bert", num_heads=12, hidden_size=384,
                             opt_level=0).save_model_to_file(str(path))
    return path


def onnxq_variants(out: Path, fused: Path) -> dict[str, Path]:
    off = onnxq.VerifyConfig(enabled=False)
    variants = {f"onnxq {mode}{' ' + fmt if fmt != 'qdq' else ''} target={target}":
                (MODEL, onnxq.QuantConfig(target=target, mode=mode, format=fmt, verify=off))
                for target in ("portable", "x86-vnni") for mode, fmt in
                (("static", "qdq"), ("static", "qoperator"), ("dynamic", "qdq"))}
    variants["onnxq static target=portable, fused float model"] = (fused, onnxq.QuantConfig(verify=off))
    paths = {}
    for i, (name, (source, config)) in enumerate(variants.items()):
        path = out / f"minilm.variant{i}.onnx"
        static = config.mode == "static"
        cache = out / f"{source.stem}.calib.json" if static else None
        onnxq.quantize(source, CALIB if static else None, output=path, config=config, calibration_cache=cache)
        paths[name] = path
    return paths


def ort_variants(out: Path) -> dict[str, Path]:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    logging.disable(logging.WARNING)
    docs = np.load(CALIB)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{k: docs[k][i:i + 8] for k in docs.files} for i in range(0, len(docs["input_ids"]), 8)])

        def get_next(self):
            return next(self.batches, None)

    paths = {"ORT quantize_dynamic": out / "minilm.ort.dynamic.onnx"}
    quantize_dynamic(MODEL, paths["ORT quantize_dynamic"], weight_type=QuantType.QInt8)
    for reduce_range in (False, True):
        path = out / f"minilm.ort.static.rr{int(reduce_range)}.onnx"
        quantize_static(MODEL, path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        op_types_to_quantize=["MatMul"], activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, reduce_range=reduce_range)
        paths[f"ORT quantize_static QDQ U8S8{' reduce_range' if reduce_range else ''}"] = path
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds-b1", type=int, default=40)
    parser.add_argument("--rounds-b32", type=int, default=8)
    parser.add_argument("--accuracy-only", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    if not MODEL.is_file():
        sys.exit(f"needs {MODEL} (the onnxq workplace's shared models)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fused = transformers_optimized(out)
    paths = {**onnxq_variants(out, fused), **ort_variants(out)}
    evaluation = np.load(MINILM / "eval_sentences.npz")
    feed = {k: evaluation[k] for k in evaluation.files}
    reference = session(MODEL, optimize=False).run(["sentence_embedding"], feed)[0]
    cosine = {k: {"deployed": mean_cosine(reference, session(p).run(["sentence_embedding"], feed)[0]),
                  "exact": mean_cosine(reference, session(p, optimize=False).run(["sentence_embedding"], feed)[0])}
              for k, p in paths.items()}
    latency = {}
    if not args.accuracy_only:
        docs = np.load(CALIB)
        for batch, rounds in ((1, args.rounds_b1), (32, args.rounds_b32)):
            batch_feed = {k: np.ascontiguousarray(docs[k][:batch]) for k in docs.files}
            latency[batch] = interleaved_latency_ms({"float": MODEL, "float, fused": fused, **paths}, batch_feed,
                                                    rounds)
    rows = []
    for k in paths:
        cells = [k, f"{cosine[k]['deployed']:.4f}", f"{cosine[k]['exact']:.4f}"]
        for b in (1, 32):
            cells.append(f"{latency[b][k]:.1f} ({latency[b]['float'] / latency[b][k]:.2f}×)" if latency else "")
        rows.append(tuple(cells))
    if latency:
        for name in ("float", "float, fused"):
            rows.append((name, "1", "1", f"{latency[1][name]:.1f} ({latency[1]['float'] / latency[1][name]:.2f}×)",
                         f"{latency[32][name]:.0f} ({latency[32]['float'] / latency[32][name]:.2f}×)"))
    table = Table(("model", "cosine deployed", "cosine exact (ORT_DISABLE_ALL)", "b1 ms (vs float)",
                   "b32 ms (vs float)"), tuple(rows), caption="all-MiniLM-L6-v2, sentence_embedding")
    write_result(args.results, __file__, "MiniLM: targets, deployed and exact", [table],
                 {"cosine": cosine, "latency_ms": {f"b{b}": v for b, v in latency.items()}})


if __name__ == "__main__":
    main()
