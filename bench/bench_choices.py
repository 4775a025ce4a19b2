"""Measure onnxq's default choices on MiniLM: activation dtype, and whether attention's activation × activation
MatMuls are quantized. Same data and machine, one run; latency interleaved.

    python bench/bench_choices.py [--rounds-b1 60] [--rounds-b32 12] [--results bench/results]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SHARED, Table, add_results_argument, interleaved_latency_ms, mean_cosine, session,  # noqa: E402
                    write_result)

import onnxq  # noqa: E402

MINILM = SHARED / "minilm"
MODEL = MINILM / "all-MiniLM-L6-v2.onnx"

VARIANTS = {
    "default (uint8 asym activations, attention float)": {},
    "int8 symmetric activations": {"activations": onnxq.QScheme("int8", symmetric=True)},
    "attention MatMuls quantized too": {"quantize_activation_matmul": True},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds-b1", type=int, default=60)
    parser.add_argument("--rounds-b32", type=int, default=12)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i, (name, changes) in enumerate(VARIANTS.items()):
        config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False)).replace(**changes)
        paths[name] = onnxq.quantize(MODEL, MINILM / "calib_docs.npz", output=out / f"choice{i}.onnx",
                                     config=config).output
    evaluation = np.load(MINILM / "eval_sentences.npz")
    feed = {k: evaluation[k] for k in evaluation.files}
    reference = session(MODEL).run(["sentence_embedding"], feed)[0]
    cosine = {k: mean_cosine(reference, session(p).run(["sentence_embedding"], feed)[0]) for k, p in paths.items()}
    docs = np.load(MINILM / "calib_docs.npz")
    latency = {b: interleaved_latency_ms({"float": MODEL, **paths},
                                         {k: np.ascontiguousarray(docs[k][:b]) for k in docs.files}, rounds)
               for b, rounds in ((1, args.rounds_b1), (32, args.rounds_b32))}
    rows = tuple((k, f"{cosine[k]:.4f}", f"{latency[1][k]:.2f} ms ({latency[1]['float'] / latency[1][k]:.2f}x)",
                  f"{latency[32][k]:.0f} ms ({latency[32]['float'] / latency[32][k]:.2f}x)") for k in paths)
    table = Table(("variant", "cosine to float", "latency b1 (speed-up vs float)", "latency b32 (speed-up vs float)"),
                  rows, caption="all-MiniLM-L6-v2, static, calibrated on calib_docs (128 documents)")
    write_result(args.results, __file__, "MiniLM: onnxq's default choices", [table],
                 {"cosine": cosine, "latency_ms": {f"b{b}": v for b, v in latency.items()}})


if __name__ == "__main__":
    main()
