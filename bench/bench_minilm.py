"""onnxq vs onnxruntime.quantization on all-MiniLM-L6-v2, same data, same machine, one run.

    python bench/bench_minilm.py [--rounds-b1 60] [--rounds-b32 12] [--out bench/out] [--results bench/results]

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
from common import (SHARED, Table, add_results_argument, file_mb, interleaved_latency_ms, mean_cosine,  # noqa: E402
                    run_worker, session, timed, write_result)

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
    add_results_argument(parser)
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

    results = {"runs": runs, "cosine": cosine, "latency_ms": {f"b{b}": v for b, v in latency.items()},
               "size_mb": {"float": file_mb(MODEL), **{k: file_mb(p) for k, p in paths.items()}}}
    write_result(args.results, __file__, "MiniLM: onnxq against onnxruntime.quantization", [_table(results, kinds)],
                 results, headline=_headline(results, kinds))


PAIRS = (("onnxq", "ort"), ("onnxq-dynamic", "ort-dynamic"))


def _table(r: dict, kinds: dict[str, str]) -> Table:
    lat, size = r["latency_ms"], r["size_mb"]
    rows = [("float", "", "", f"{size['float']:.1f} MB", "1", f"{lat['b1']['float']:.2f} ms",
             f"{lat['b32']['float']:.0f} ms")]
    for ours, theirs in PAIRS:
        for k in (ours, theirs):
            run = r["runs"][k]
            rows.append((kinds[k], f"{run['seconds']:.1f} s", f"{run['peak_rss_mb']:.0f} MB", f"{size[k]:.1f} MB",
                         f"{r['cosine'][k]:.4f}", f"{lat['b1'][k]:.2f} ms ({lat['b1']['float'] / lat['b1'][k]:.2f}x)",
                         f"{lat['b32'][k]:.0f} ms ({lat['b32']['float'] / lat['b32'][k]:.2f}x)"))
        a, b = r["runs"][ours], r["runs"][theirs]
        rows.append(("**ratio onnxq/ORT**", f"**{a['seconds'] / b['seconds']:.2f}**",
                     f"**{a['peak_rss_mb'] / b['peak_rss_mb']:.2f}**", f"**{size[ours] / size[theirs]:.2f}**",
                     f"{r['cosine'][ours] - r['cosine'][theirs]:+.4f}",
                     f"**{lat['b1'][ours] / lat['b1'][theirs]:.2f}**",
                     f"**{lat['b32'][ours] / lat['b32'][theirs]:.2f}**"))
    return Table(("", "quantize time", "peak RSS", "size", "cosine to float", "latency b1 (vs float)",
                  "latency b32 (vs float)"), tuple(rows),
                 caption="all-MiniLM-L6-v2; ratios are onnxq / ORT in the same run",
                 note="Latency columns: median ms, in brackets the speed-up over float (higher is faster); ratio "
                      "rows: onnxq's latency / ORT's (lower is faster).")


def _headline(r: dict, kinds: dict[str, str]) -> Table:
    """The front page's table: per quantizer, how close, how fast, how small, what it cost to make."""
    lat, size = r["latency_ms"], r["size_mb"]
    rows = tuple((kinds[k], f"{r['cosine'][k]:.4f}",
                  f"{lat['b1']['float'] / lat['b1'][k]:.2f}× / {lat['b32']['float'] / lat['b32'][k]:.2f}×",
                  f"{size[k]:.1f} MB ({size[k] / size['float']:.2f}×)", f"{r['runs'][k]['seconds']:.1f} s",
                  f"{r['runs'][k]['peak_rss_mb']:.0f} MB") for pair in PAIRS for k in pair)
    return Table(("all-MiniLM-L6-v2", "cosine to float", "speed-up b1 / b32", "size", "quantize time",
                  "quantizer peak RSS"), rows,
                 caption="onnxq against onnxruntime.quantization: the same 128 calibration documents, the same "
                         "method (MinMax), one run")


if __name__ == "__main__":
    main()
