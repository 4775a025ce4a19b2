"""The W8A8 ladder on all-MiniLM-L6-v2: mean cosine of sentence_embedding to float on the 500 eval sentences (ORT's
deployed kernels, ORT_ENABLE_ALL) and latency at batch 1 and 32 × 128 tokens (2 threads, interleaved rounds), onnxq's
recipes next to onnxruntime's quantize_dynamic, same data, same machine, one run.

    python bench/bench_minilm_recipes.py [--rounds-b1 40] [--rounds-b32 8] [--results bench/results]
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
LADDER = {
    "static per-tensor (default)": ({}, True),
    "dynamic per-tensor": ({"mode": "dynamic"}, False),
    "per-token": ({"activation_granularity": "per-token"}, False),
    "per-token + SmoothQuant α=0.5": ({"activation_granularity": "per-token", "smooth": 0.5}, True),
    "per-token + α search": ({"activation_granularity": "per-token", "smooth": "auto"}, True),
    "static per-tensor + α search": ({"smooth": "auto"}, True),
    "recipe auto (sentence_embedding cosine ≥ 0.997)": ({"recipe": "auto", "verify": onnxq.VerifyConfig(
        output_tolerances={"sentence_embedding": onnxq.Tolerance(min_cosine=0.997)}, sensitivity_samples=0)}, True),
}


def embeddings(path, inputs) -> np.ndarray:
    s = session(path)
    return np.concatenate([s.run(["sentence_embedding"], {k: v[i:i + 50] for k, v in inputs.items()})[0]
                           for i in range(0, len(inputs["input_ids"]), 50)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds-b1", type=int, default=40)
    parser.add_argument("--rounds-b32", type=int, default=8)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    calib_file = np.load(MINILM / "calib_docs.npz")
    calib = {k: calib_file[k] for k in calib_file.files}
    eval_file = np.load(MINILM / "eval_sentences.npz")
    eval_inputs = {k: eval_file[k] for k in eval_file.files}
    paths = {"float": MODEL}
    for i, (name, (changes, uses_data)) in enumerate(LADDER.items()):
        verify = changes.pop("verify", onnxq.VerifyConfig(enabled=False))
        path = out / f"minilm.ladder{i}.onnx"
        onnxq.quantize(MODEL, calib if uses_data else None, output=path,
                       config=onnxq.QuantConfig(verify=verify, **changes))
        paths[f"onnxq {name}"] = path
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.disable(logging.WARNING)
    paths["ORT quantize_dynamic"] = out / "minilm.ort.dynamic.onnx"
    quantize_dynamic(MODEL, paths["ORT quantize_dynamic"], weight_type=QuantType.QInt8)
    reference = embeddings(MODEL, eval_inputs)
    cosine = {name: mean_cosine(reference, embeddings(p, eval_inputs)) for name, p in paths.items()}
    b1 = interleaved_latency_ms(paths, {k: v[:1] for k, v in calib.items()}, args.rounds_b1)
    b32 = interleaved_latency_ms(paths, {k: v[:32] for k, v in calib.items()}, args.rounds_b32)
    rows = tuple((name, f"{cosine[name]:.4f}", f"{b1[name]:.1f} ms", f"{b1['float'] / b1[name]:.2f}×",
                  f"{b32[name]:.0f} ms", f"{b32['float'] / b32[name]:.2f}×") for name in paths)
    table = Table(("model", "cosine", "latency b1", "speed-up", "latency b32", "speed-up"), rows,
                  caption="all-MiniLM-L6-v2, mean cosine of sentence_embedding on 500 eval sentences, ORT_ENABLE_ALL")
    write_result(args.results, __file__, "MiniLM: the W8A8 ladder", [table], {"cosine": cosine, "b1": b1, "b32": b32})


if __name__ == "__main__":
    main()
