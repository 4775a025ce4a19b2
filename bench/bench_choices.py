"""Measure onnxq's default choices on MiniLM: activation dtype, and whether attention's activation × activation
MatMuls are quantized. Same data and machine, one run; latency interleaved.

    python bench/bench_choices.py [--rounds-b1 60] [--rounds-b32 12]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, interleaved_latency_ms, machine, mean_cosine, session  # noqa: E402

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
    (out / "bench_choices.json").write_text(json.dumps({"cosine": cosine, "latency_ms": latency}, indent=2))
    print(f"MiniLM-L6 ({machine()}): onnxq variants, static (default calibration) on calib_docs (128)\n")
    print("| variant | cosine to float | latency b1 (speed-up vs float) | latency b32 (speed-up vs float) |")
    print("|---|---|---|---|")
    for k in paths:
        print(f"| {k} | {cosine[k]:.4f} | {latency[1][k]:.2f} ms ({latency[1]['float'] / latency[1][k]:.2f}x) "
              f"| {latency[32][k]:.0f} ms ({latency[32]['float'] / latency[32][k]:.2f}x) |")


if __name__ == "__main__":
    main()
