"""onnxq vs onnxruntime.quantization on all-MiniLM-L6-v2, same data, same machine, one run.

    python bench/bench_minilm.py [--rounds-b1 60] [--rounds-b32 12] [--out bench/out]

Each quantizer runs in its own process (wall time of the quantize call, peak RSS of the process). Both calibrate
MinMax (onnxq's default is percentile: bench_calibration.py compares every method) on the same 128 documents
of calib_docs.npz (batches of 8); the QDQ comparison is quantize_static(QDQ,
per channel, MatMul, uint8 activations / int8 weights). Fidelity: mean cosine of sentence_embedding to the float
model on the 500 eval sentences. Latency: batch 1 and 32 at sequence 128, 2 threads, interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, file_mb, interleaved_latency_ms, machine, mean_cosine, run_worker, session, timed  # noqa: E402

MINILM = SHARED / "minilm"
MODEL = MINILM / "all-MiniLM-L6-v2.onnx"
BATCH = 8


def _calibration_batches():
    data = np.load(MINILM / "calib_docs.npz")
    n = len(data["input_ids"])
    return [{k: data[k][i:i + BATCH] for k in data.files} for i in range(0, n, BATCH)]


def worker(kind: str, out: str) -> dict:
    if kind.startswith("onnxq"):
        import onnxq

        # MinMax, as ORT's quantize_static by default: the same method on both sides.
        config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(method="minmax"),
                                   verify=onnxq.VerifyConfig(enabled=False))
        calibration = None if kind == "onnxq-dynamic" else _calibration_batches()
        return timed(lambda: onnxq.quantize(MODEL, calibration, output=out, config=config))
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    if kind == "ort-dynamic":
        return timed(lambda: quantize_dynamic(MODEL, out, weight_type=QuantType.QInt8))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(_calibration_batches())

        def get_next(self):
            return next(self.batches, None)

    return timed(lambda: quantize_static(
        MODEL, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, op_types_to_quantize=["MatMul"],
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--rounds-b1", type=int, default=60)
    parser.add_argument("--rounds-b32", type=int, default=12)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    args = parser.parse_args()
    if args.worker:
        import logging

        logging.disable(logging.WARNING)  # ORT's quantizer warns about pre-processing on stderr
        print(json.dumps(worker(*args.worker)))
        return
    if not MODEL.is_file():
        sys.exit(f"needs {MODEL} (the onnxq workplace's shared models)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kinds = {"onnxq": "onnxq static", "ort": "ORT quantize_static", "onnxq-dynamic": "onnxq dynamic",
             "ort-dynamic": "ORT quantize_dynamic"}
    paths = {k: out / f"minilm.{k}.onnx" for k in kinds}
    runs = {k: run_worker(Path(__file__), k, str(paths[k])) for k in kinds}

    evaluation = np.load(MINILM / "eval_sentences.npz")
    feed = {k: evaluation[k] for k in evaluation.files}
    reference = session(MODEL).run(["sentence_embedding"], feed)[0]
    cosine = {k: mean_cosine(reference, session(p).run(["sentence_embedding"], feed)[0]) for k, p in paths.items()}

    docs = np.load(MINILM / "calib_docs.npz")
    latency = {}
    for batch, rounds in ((1, args.rounds_b1), (32, args.rounds_b32)):
        feed = {k: np.ascontiguousarray(docs[k][:batch]) for k in docs.files}
        latency[batch] = interleaved_latency_ms({"float": MODEL, **paths}, feed, rounds)

    results = {"machine": machine(), "runs": runs, "cosine": cosine, "latency_ms": latency,
               "size_mb": {"float": file_mb(MODEL), **{k: file_mb(p) for k, p in paths.items()}}}
    (out / "bench_minilm.json").write_text(json.dumps(results, indent=2))
    print(_table(results, kinds))


def _table(r: dict, kinds: dict[str, str]) -> str:
    pairs = [("onnxq", "ort"), ("onnxq-dynamic", "ort-dynamic")]
    lines = [f"MiniLM-L6 ({r['machine']}); ratios are onnxq / ORT in the same run",
             "",
             "| | quantize time | peak RSS | size | cosine to float | latency b1 (vs float) | latency b32 (vs float) |",
             "|---|---|---|---|---|---|---|"]
    lat = r["latency_ms"]
    size = r["size_mb"]
    lines.append(f"| float | | | {size['float']:.1f} MB | 1 | {lat[1]['float']:.2f} ms | {lat[32]['float']:.0f} ms |")
    for ours, theirs in pairs:
        for k in (ours, theirs):
            run = r["runs"][k]
            lines.append(
                f"| {kinds[k]} | {run['seconds']:.1f} s | {run['peak_rss_mb']:.0f} MB | {size[k]:.1f} MB "
                f"| {r['cosine'][k]:.4f} | {lat[1][k]:.2f} ms ({lat[1]['float'] / lat[1][k]:.2f}x) "
                f"| {lat[32][k]:.0f} ms ({lat[32]['float'] / lat[32][k]:.2f}x) |")
        a, b = r["runs"][ours], r["runs"][theirs]
        lines.append(
            f"| **ratio onnxq/ORT** | **{a['seconds'] / b['seconds']:.2f}** | **{a['peak_rss_mb'] / b['peak_rss_mb']:.2f}** "
            f"| **{size[ours] / size[theirs]:.2f}** | {r['cosine'][ours] - r['cosine'][theirs]:+.4f} "
            f"| **{lat[1][ours] / lat[1][theirs]:.2f}** | **{lat[32][ours] / lat[32][theirs]:.2f}** |")
    lines.append("")
    lines.append("Latency columns: median ms, in brackets the speed-up over float (higher is faster); ratio rows: "
                 "onnxq's latency / ORT's (lower is faster).")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
