"""onnxq's int8 files on ONNX Runtime's OpenVINO provider against float there and against ORT's CPU provider.

    python bench/bench_openvino.py [--rounds 10] [--out bench/out/openvino] [--results DIR]

Runs in a virtual environment where onnxruntime-openvino replaces onnxruntime (its python,
.venv-ov/bin/python as docs/guides/openvino.md makes it, runs the script). Models:
all-MiniLM-L6-v2 (onnxq's static quantization, calibrated on calib_docs.npz; fidelity: mean cosine of
sentence_embedding to float on the 500 eval sentences; latency at batch 32 × 128 tokens) and PP-OCR's text
direction classifier as rapidocr-onnxruntime 1.4.4 ships it (a trained CNN; calibrated on 64 synthetic pages,
fidelity: top-1 agreement with float on 256 others; latency at batch 16). Each int8 file is quantized once by
onnxq for target openvino-cpu (verification off: the bench measures), with its default uint8 asymmetric
activations and with int8 symmetric ones (NNCF's PERFORMANCE preset), and run on both providers: the reference is
the float model on ORT's CPU provider. Latency: median ms of interleaved rounds, every session on 2 threads, each
made as onnxq makes a deployed one (on OpenVINO without ORT's own graph optimizations: targets/providers).
"""

from __future__ import annotations

import argparse
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SHARED, Table, add_results_argument, fetch_wheel, file_mb, machine,  # noqa: E402
                    mean_cosine, write_result)

MINILM = SHARED / "minilm"
WHEEL = ("rapidocr-onnxruntime", "1.4.4", "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")
CLASSIFIER = "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
OPENVINO = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
# name → (provider, file kind): the float model and each int8 file on each provider.
RUNS = {"float, CPU EP": (CPU, "float"), "int8 u8 act, CPU EP": (CPU, "uint8"),
        "float, OpenVINO EP": (OPENVINO, "float"), "int8 u8 act, OpenVINO EP": (OPENVINO, "uint8"),
        "int8 s8 act, OpenVINO EP": (OPENVINO, "int8")}


def _session(path: Path, provider: str) -> ort.InferenceSession:
    """As onnxq deploys it (io.model_sessions): on OpenVINO, without ORT's own graph optimizations."""
    from onnxq.targets.providers import provider_named

    options = ort.SessionOptions()
    if not provider_named(provider).ort_optimizations:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    entry = (provider, {"device_type": "CPU", "num_of_threads": "2"}) if provider == OPENVINO else provider
    return ort.InferenceSession(str(path), options, providers=[entry])


def _quantize(model: Path, calibration, out: Path, activations: str) -> Path:
    import onnxq

    scheme = onnxq.QScheme(activations, symmetric=activations == "int8")
    config = onnxq.QuantConfig(target="openvino-cpu", activations=scheme, verify=onnxq.VerifyConfig(enabled=False))
    onnxq.quantize(model, calibration, output=out, config=config)
    return out


def _latency(sessions: dict[str, ort.InferenceSession], feed: dict, rounds: int) -> dict[str, float]:
    """Median ms per run; the sessions take turns, each round starting one further on (bench.common's reasons)."""
    for s in sessions.values():
        s.run(None, feed)
        s.run(None, feed)
    times = {name: [] for name in sessions}
    order = list(sessions)
    for index in range(rounds):
        shift = index % len(order)
        for name in order[shift:] + order[:shift]:
            start = time.perf_counter()
            sessions[name].run(None, feed)
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t) * 1000) for name, t in times.items()}


def _model_figures(files: dict[str, Path], evaluate, timed_feed: dict, rounds: int) -> dict:
    sessions = {name: _session(files[kind], provider) for name, (provider, kind) in RUNS.items()}
    reference = evaluate(sessions["float, CPU EP"], None)
    fidelity = {name: evaluate(s, reference) for name, s in sessions.items()}
    return {"fidelity": fidelity, "latency_ms": _latency(sessions, timed_feed, rounds),
            "size_mb": {kind: file_mb(path) for kind, path in files.items()}}


def minilm(out: Path, rounds: int) -> dict:
    model = MINILM / "all-MiniLM-L6-v2.onnx"
    calibration = MINILM / "calib_docs.npz"
    files = {"float": model, **{a: _quantize(model, calibration, out / f"minilm.{a}.onnx", a)
                                for a in ("uint8", "int8")}}
    evaluation = dict(np.load(MINILM / "eval_sentences.npz"))

    def evaluate(session, reference):
        got = session.run(["sentence_embedding"], evaluation)[0]
        return got if reference is None else mean_cosine(reference, got)

    docs = np.load(MINILM / "calib_docs.npz")
    figures = _model_figures(files, evaluate, {k: np.ascontiguousarray(docs[k][:32]) for k in docs.files}, rounds)
    figures["fidelity"] = {k: v for k, v in figures["fidelity"].items()}
    return figures


def _pages(n: int, rng: np.random.Generator) -> np.ndarray:
    """Synthetic text lines, 48 × 192, PP-OCR's normalization to [-1, 1] (bench_conv.py's pages)."""
    images = np.ones((n, 3, 48, 192), np.float32)
    for image in images:
        for _ in range(rng.integers(3, 9)):
            y, x = rng.integers(0, 40), rng.integers(0, 172)
            image[:, y:y + rng.integers(4, 16), x:x + rng.integers(10, 96)] = rng.uniform(0, 0.3)
        image += rng.normal(0, 0.05, image.shape).astype(np.float32)
    return (images - 0.5) / 0.5


def classifier(out: Path, rounds: int) -> dict:
    model = out / Path(CLASSIFIER).name
    with zipfile.ZipFile(fetch_wheel(*WHEEL, out)) as wheel:
        model.write_bytes(wheel.read(CLASSIFIER))
    rng = np.random.default_rng(0)
    name = _session(model, CPU).get_inputs()[0].name
    calibration = out / "cls_calib.npz"
    np.savez(calibration, **{name: _pages(64, rng)})
    held_out = _pages(256, rng)
    files = {"float": model, **{a: _quantize(model, calibration, out / f"cls.{a}.onnx", a) for a in ("uint8", "int8")}}

    def evaluate(session, reference):
        got = session.run(None, {name: held_out})[0]
        return got.argmax(-1) if reference is None else float((got.argmax(-1) == reference).mean())

    return _model_figures(files, evaluate, {name: held_out[:16]}, rounds)


def _table(label: str, figures: dict, measure: str, fmt: str) -> Table:
    lat = figures["latency_ms"]
    rows = []
    for name, (provider, kind) in RUNS.items():
        base = lat["float, CPU EP" if provider == CPU else "float, OpenVINO EP"]
        rows.append((name, f"{figures['size_mb'][kind]:.1f} MB", format(figures["fidelity"][name], fmt),
                     f"{lat[name]:.1f} ms", f"{base / lat[name]:.2f}x", f"{lat['float, CPU EP'] / lat[name]:.2f}x"))
    return Table(("", "size", measure, "latency", "vs float, same EP", "vs float, CPU EP"), tuple(rows),
                 caption=label, note="Latency: median of interleaved rounds, 2 threads; higher ratios are faster. "
                                     f"Reference for {measure}: the float model on ORT's CPU EP.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out" / "openvino"))
    add_results_argument(parser)
    args = parser.parse_args()
    if OPENVINO not in ort.get_available_providers():
        sys.exit("needs onnxruntime-openvino in place of onnxruntime (docs/guides/openvino.md)")
    if not MINILM.is_dir():
        sys.exit(f"needs {MINILM} (the onnxq workplace's shared models)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"minilm": minilm(out, args.rounds), "ppocr_cls": classifier(out, args.rounds)}
    tables = [_table(f"all-MiniLM-L6-v2, batch 32 × 128 tokens — {machine()}", figures["minilm"],
                     "cosine to float", ".4f"),
              _table("PP-OCR text direction classifier (rapidocr-onnxruntime 1.4.4), batch 16",
                     figures["ppocr_cls"], "top-1 agreement", ".4f")]
    write_result(args.results, __file__, "OpenVINO EP: onnxq's int8 files against float and ORT's CPU EP", tables,
                 figures)


if __name__ == "__main__":
    main()
