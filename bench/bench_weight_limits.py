"""How to keep AVX2's U8S8 kernel from saturating, measured: accuracy of each candidate, on real models.

    python bench/bench_weight_limits.py [--results bench/results]

Candidates (U8S8 unless said; the same calibration for all): full-range weights (what VNNI runs; on AVX2 it
saturates), 7-bit weights (onnxruntime's reduce_range), the K-pair limit alone, onnxq's choice (per channel the
scale widening 1-2× with the least weight error under the pair limit), and S8S8 (int8 symmetric activations, which
never saturate). Speed: all U8S8 variants run the same kernel; S8S8 and U8U8 are in bench_kernels.py.
Accuracy is the exact quantization's (ORT_DISABLE_ALL), so the table holds on every CPU; on a CPU without VNNI,
the deployed column shows what its kernels make of each file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, Table, add_results_argument, mean_cosine, session, write_result  # noqa: E402

import onnxq  # noqa: E402
import onnxq.numerics.pairs as pairs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = {
    "full range (x86-vnni)": ({"target": "x86-vnni"}, None),
    "7-bit weights (reduce_range)": ({"target": "portable"}, np.array([2.0])),
    "pair limit alone": ({"target": "portable"}, np.array([1.0])),
    "onnxq: pair limit + per-channel widening (default)": ({"target": "portable"}, None),
    "S8S8 (int8 symmetric activations)": ({"target": "portable", "activations": onnxq.QScheme("int8", True)}, None),
}


def quantized(model: Path, calib, out: Path, changes: dict, widenings) -> Path:
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False), **changes)
    patch = mock.patch.object(pairs, "_WIDENINGS", widenings) if widenings is not None else mock.MagicMock()
    with patch:
        onnxq.quantize(model, calib, output=out, config=config)
    return out


def sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    return float(10 * np.log10((reference ** 2).sum() / ((reference - other) ** 2).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(__file__).parent / "out" / "limits"
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    minilm = SHARED / "minilm"
    if minilm.is_dir():
        ev = np.load(minilm / "eval_sentences.npz")
        cases.append(("MiniLM sentence_embedding cosine", minilm / "all-MiniLM-L6-v2.onnx", minilm / "calib_docs.npz",
                      {k: ev[k] for k in ev.files}, "sentence_embedding", mean_cosine))
    digits = SHARED / "digits"
    if digits.is_dir():
        d = np.load(digits / "digits.npz")
        cases.append(("digits logits SQNR dB", digits / "digits_mlp.onnx", {"x": d["x_train"]}, {"x": d["x_test"]},
                      "logits", sqnr_db))
    calib = np.load(REPO / "models" / "mlp_calib.npz")
    cases.append(("mlp sample logits SQNR dB", REPO / "models" / "mlp.onnx", dict(calib),
                  {k: calib[k][-64:] for k in calib.files}, "logits", sqnr_db))
    rows = {name: [] for name in CANDIDATES}
    figures: dict = {c[0]: {} for c in cases}
    for i, (label, model, calib_data, feed, output, metric) in enumerate(cases):
        reference = session(model, optimize=False).run([output], feed)[0]
        for j, (name, (changes, widenings)) in enumerate(CANDIDATES.items()):
            path = quantized(model, calib_data, out / f"case{i}_{j}.onnx", changes, widenings)
            exact = metric(reference, session(path, optimize=False).run([output], feed)[0])
            deployed = metric(reference, session(path).run([output], feed)[0])
            figures[label][name] = {"exact": exact, "deployed": deployed}
            rows[name].append(f"{exact:.4f} / {deployed:.4f}" if "cosine" in label else f"{exact:.1f} / {deployed:.1f}")
    table = Table(("candidate", *(f"{c[0]} exact / deployed" for c in cases)),
                  tuple((name, *cells) for name, cells in rows.items()))
    write_result(args.results, __file__, "AVX2's U8S8 saturation: the candidates' accuracy", [table], figures)


if __name__ == "__main__":
    main()
