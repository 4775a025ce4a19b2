"""Calibration methods at scale: onnxq vs onnxruntime.quantization.quantize_static, same method, same data, one run.

    python bench/bench_calibration.py [--samples 128 1024] [--methods minmax percentile entropy] [--accuracy-only]

Speed and memory: all-MiniLM-L6-v2, calib_docs.npz (128 documents of 128 tokens, repeated to reach 1,024),
batches of 8, each quantizer in its own process (wall time of the quantize call, peak RSS of the process; a
watchdog stops a run past 16 GB or 15 minutes). Accuracy: every onnxq method and ORT's three, calibrated on the
128 documents: MiniLM mean cosine of sentence_embedding on the 500 eval sentences, and digits test accuracy
(calibrated on 1,256 training samples).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SHARED, Table, add_results_argument, mean_cosine, run_worker, session, timed,  # noqa: E402
                    write_result)

MINILM = SHARED / "minilm"
MODEL = MINILM / "all-MiniLM-L6-v2.onnx"
DIGITS = SHARED / "digits"
BATCH = 8
ONNXQ_METHODS = ("minmax", "avgminmax", "percentile", "entropy", "mse")
ORT_METHODS = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}


def _batches(samples: int):
    data = np.load(MINILM / "calib_docs.npz")
    arrays = {k: np.concatenate([data[k]] * (-(-samples // len(data[k]))))[:samples] for k in data.files}
    for i in range(0, samples, BATCH):
        yield {k: v[i:i + BATCH] for k, v in arrays.items()}


def _digits_batches():
    # 1,256 of the 1,257 training samples: ORT's histogram calibrators fail on a last, smaller batch.
    x = np.load(DIGITS / "digits.npz")["x_train"][:1256]
    for i in range(0, len(x), BATCH):
        yield {"x": x[i:i + BATCH]}


def worker(tool: str, method: str, samples: str, out: str, model: str = "minilm") -> dict:
    model_path = MODEL if model == "minilm" else DIGITS / "digits_mlp.onnx"
    batches = (lambda: _batches(int(samples))) if model == "minilm" else _digits_batches
    if tool == "onnxq":
        import onnxq

        config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(method=method),
                                   verify=onnxq.VerifyConfig(enabled=False))
        return timed(lambda: onnxq.quantize(model_path, batches(), output=out, config=config))
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.iterator = batches()

        def get_next(self):
            return next(self.iterator, None)

    op_types = ["MatMul"] if model == "minilm" else ["Gemm"]
    return timed(lambda: quantize_static(
        model_path, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, op_types_to_quantize=op_types,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        calibrate_method=getattr(CalibrationMethod, ORT_METHODS[method])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--samples", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--methods", nargs="+", default=list(ORT_METHODS))
    parser.add_argument("--max-rss-mb", type=float, default=16000)
    parser.add_argument("--max-seconds", type=float, default=900)
    parser.add_argument("--accuracy-only", action="store_true", help="skip the speed and memory runs")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    if args.worker:
        import logging
        import os

        logging.disable(logging.WARNING)
        sys.stdout, real = open(os.devnull, "w"), sys.stdout  # ORT's calibrators print progress
        result = worker(*args.worker)
        sys.stdout = real
        print(json.dumps(result))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    limits = {"max_rss_mb": args.max_rss_mb, "max_seconds": args.max_seconds}
    runs = {}
    for samples in ([] if args.accuracy_only else args.samples):
        for method in args.methods:
            for tool in ("onnxq", "ort"):
                path = out / f"calib.{tool}.{method}.{samples}.onnx"
                runs[f"{tool}/{method}/{samples}"] = run_worker(Path(__file__), tool, method, str(samples), str(path),
                                                                **limits)
                print(tool, method, samples, runs[f"{tool}/{method}/{samples}"], flush=True)

    # Accuracy, calibrated on the 128 documents (MiniLM) / the training set (digits).
    evaluation = np.load(MINILM / "eval_sentences.npz")
    feed = {k: evaluation[k] for k in evaluation.files}
    reference = session(MODEL).run(["sentence_embedding"], feed)[0]
    digits = np.load(DIGITS / "digits.npz")

    float_logits = session(DIGITS / "digits_mlp.onnx").run(None, {"x": digits["x_test"]})[0]

    def digits_scores(path):
        """Test accuracy, agreement with the float model's predictions, and SQNR of the logits."""
        logits = session(path).run(None, {"x": digits["x_test"]})[0]
        noise = float(((logits - float_logits) ** 2).sum())
        return {"digits": float((logits.argmax(1) == digits["y_test"]).mean()),
                "digits_agreement": float((logits.argmax(1) == float_logits.argmax(1)).mean()),
                "digits_sqnr_db": 10 * float(np.log10((float_logits**2).sum() / noise)) if noise else float("inf")}

    accuracy = {"float": {"cosine": 1.0, **digits_scores(DIGITS / "digits_mlp.onnx")}}
    for tool, methods in (("onnxq", ONNXQ_METHODS), ("ort", tuple(ORT_METHODS))):
        for method in methods:
            path = out / f"calib.{tool}.{method}.128.onnx"
            if not path.exists():
                run_worker(Path(__file__), tool, method, "128", str(path), **limits)
            digits_path = out / f"digits.{tool}.{method}.onnx"
            run_worker(Path(__file__), tool, method, "0", str(digits_path), "digits", **limits)
            accuracy[f"{tool}/{method}"] = {
                "cosine": mean_cosine(reference, session(path).run(["sentence_embedding"], feed)[0]),
                **digits_scores(digits_path)}
            print(tool, method, accuracy[f"{tool}/{method}"], flush=True)
    results = {"runs": runs, "accuracy": accuracy}
    tables = [] if args.accuracy_only else [_speed_table(results, args.samples, args.methods)]
    write_result(args.results, __file__, "Calibration methods: onnxq against onnxruntime.quantization",
                 tables + [_accuracy_table(results)], results)


def _fmt_run(run: dict) -> str:
    if "killed" in run:
        return f"stopped: {run['killed']} (after {run['seconds']:.0f} s, {run['peak_rss_mb'] / 1024:.1f} GB)"
    return f"{run['seconds']:.1f} s, {run['peak_rss_mb']:.0f} MB"


def _speed_table(r: dict, sample_counts: list[int], methods: list[str]) -> Table:
    rows = []
    for method in methods:
        for samples in sample_counts:
            ours, theirs = r["runs"][f"onnxq/{method}/{samples}"], r["runs"][f"ort/{method}/{samples}"]
            bound = "< " if "killed" in theirs else ""
            rows.append((method, str(samples), _fmt_run(ours), _fmt_run(theirs),
                         f"{bound}{ours['seconds'] / theirs['seconds']:.2f}",
                         f"{bound}{ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}"))
    growth = []
    for method in methods:
        small, large = (r["runs"][f"onnxq/{method}/{n}"] for n in (min(sample_counts), max(sample_counts)))
        growth.append(f"onnxq {method}: peak RSS {small['peak_rss_mb']:.0f} MB at {min(sample_counts)} samples, "
                      f"{large['peak_rss_mb']:.0f} MB at {max(sample_counts)} "
                      f"({(large['peak_rss_mb'] / small['peak_rss_mb'] - 1) * 100:+.1f} %).")
    return Table(("method", "samples", "onnxq", "ORT quantize_static", "time ratio", "RSS ratio"), tuple(rows),
                 caption="all-MiniLM-L6-v2: wall time of the quantize call and peak RSS of its process",
                 note=" ".join(growth))


def _accuracy_table(r: dict) -> Table:
    acc = r["accuracy"]
    rows = [("float", "1", f"{acc['float']['digits']:.4f}", "1", "∞")]
    for method in ONNXQ_METHODS:
        ours, theirs = acc[f"onnxq/{method}"], acc.get(f"ort/{method}")

        def pair(key, fmt, ours=ours, theirs=theirs):
            return f"{ours[key]:{fmt}} / " + (f"{theirs[key]:{fmt}}" if theirs else "—")
        rows.append((method, pair("cosine", ".4f"), pair("digits", ".4f"), pair("digits_agreement", ".4f"),
                     pair("digits_sqnr_db", ".1f") + " dB"))
    return Table(("method", "MiniLM cosine onnxq / ORT", "digits accuracy onnxq / ORT",
                  "digits agreement with float onnxq / ORT", "digits logits SQNR onnxq / ORT"), tuple(rows),
                 caption="Accuracy per calibration method: MiniLM calibrated on 128 documents, digits on its "
                         "training set")


if __name__ == "__main__":
    main()
