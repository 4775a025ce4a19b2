"""onnxq's three static output formats (qdq, qoperator, qlinear) against each other and onnxruntime.quantization's
QOperator form, same models, data and machine, one run.

    python bench/bench_formats.py [--out bench/out/formats] [--rounds 15] [--results bench/results]

Models: the small CNN of bench_conv.py, PP-OCR's direction classifier (rapidocr-onnxruntime 1.4.4, sha256 checked,
synthetic pages) and, when ../shared/models is present, all-MiniLM-L6-v2 (its calibration and evaluation sentences).
Per model and form: latency × float (interleaved medians; 8 images, or MiniLM's 32 calibration documents), cosine
to float on held-out inputs (sentence embeddings of the 500 evaluation sentences for MiniLM), argmax agreement
(meaningful for the classifiers), size, and how many com.microsoft operators the file holds (qlinear: none).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_conv import MODELS, bench_args, pages, ppocr_model, small_cnn  # noqa: E402
from common import SHARED, Table, file_mb, interleaved_latency_ms, mean_cosine, session, write_result  # noqa: E402

FORMATS = ("qdq", "qoperator", "qlinear")


def quantize_forms(source: Path, calibration: list[dict], out: Path) -> dict[str, Path]:
    import onnxq
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    paths = {"float": source}
    for form in FORMATS:
        paths[f"onnxq {form}"] = out / f"{source.stem}_{form}.onnx"
        onnxq.quantize(source, calibration, output=paths[f"onnxq {form}"],
                       config=onnxq.QuantConfig(format=form, verify=onnxq.VerifyConfig(enabled=False)))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(calibration)

        def get_next(self):
            return next(self.batches, None)

    paths["ORT QOperator"] = out / f"{source.stem}_ort_qoperator.onnx"
    quantize_static(source, paths["ORT QOperator"], Reader(), quant_format=QuantFormat.QOperator, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return paths


def measure(label: str, paths: dict[str, Path], feed: dict, output: str | None, rounds: int,
            timed_feed: dict | None = None) -> tuple[Table, dict]:
    """Accuracy on `feed`; latency on `timed_feed` (default: the same inputs): the model's table and figures."""
    reference = session(paths["float"]).run([output] if output else None, feed)[0]
    latency = interleaved_latency_ms(paths, timed_feed or feed, rounds)
    figures, rows = {}, []
    for kind, path in paths.items():
        out = session(path).run([output] if output else None, feed)[0]
        contrib = sum(n.domain == "com.microsoft" for n in onnx.load(str(path), load_external_data=False).graph.node)
        row = figures[kind] = {"latency_ms": latency[kind], "cosine": mean_cosine(reference, out),
                               "argmax_agreement": float((out.argmax(-1) == reference.argmax(-1)).mean()),
                               "size_mb": file_mb(path), "com_microsoft_nodes": contrib}
        rows.append((kind, f"{latency[kind]:.2f}", f"{latency[kind] / latency['float']:.2f}", f"{row['cosine']:.4f}",
                     f"{row['argmax_agreement']:.3f}", f"{row['size_mb']:.2f}", str(contrib)))
    table = Table(("form", "ms", "× float", "cosine", "argmax", "MB", "com.microsoft nodes"), tuple(rows),
                  caption=f"{label}: latency median of {rounds} interleaved rounds")
    return table, figures


def _minilm(out: Path, rounds: int) -> tuple[Table, dict] | None:
    folder = SHARED / "minilm"
    if not (folder / "all-MiniLM-L6-v2.onnx").is_file():
        print("\nMiniLM: skipped (needs ../shared/models/minilm)")
        return None
    docs = np.load(folder / "calib_docs.npz")
    calibration = [{k: docs[k][i:i + 8] for k in docs.files} for i in range(0, len(docs["input_ids"]), 8)]
    paths = quantize_forms(folder / "all-MiniLM-L6-v2.onnx", calibration, out)
    evaluation = np.load(folder / "eval_sentences.npz")
    return measure("all-MiniLM-L6-v2 (accuracy: eval sentences; latency: 32 calibration documents)", paths,
                   {k: evaluation[k] for k in evaluation.files}, "sentence_embedding", rounds,
                   {k: np.ascontiguousarray(docs[k][:32]) for k in docs.files})


def main() -> None:
    out, rounds, results = bench_args("formats")
    rng = np.random.default_rng(0)
    images = rng.normal(0, 1, (40, 3, 64, 64)).astype(np.float32)
    cnn = small_cnn(out / "small_cnn.onnx", rng)
    measured = {"small CNN": measure("small CNN (3 Conv + MatMul), 8 images",
                                     quantize_forms(cnn, [{"x": images[:32]}], out), {"x": images[32:]}, None, rounds)}
    _, (height, width), count = MODELS["ppocr_cls"]
    path = ppocr_model(out, "ppocr_cls")
    data = pages(count + 8, height, width, rng)
    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    measured["ppocr_cls"] = measure("PP-OCR direction classifier, 8 synthetic lines",
                                    quantize_forms(path, [{name: data[i:i + 8]} for i in range(0, count, 8)], out),
                                    {name: data[count:]}, None, rounds)
    minilm = _minilm(out, rounds)
    if minilm is not None:
        measured["all-MiniLM-L6-v2"] = minilm
    write_result(results, __file__, "Output formats: qdq, qoperator, qlinear", [t for t, _ in measured.values()],
                 {name: figures for name, (_, figures) in measured.items()})


if __name__ == "__main__":
    main()
