"""The W8A8 ladder on SmolLM2-135M: perplexity on dev_windows.npz (ORT's deployed kernels) and latency (batch 1 ×
128 tokens, 2 threads), onnxq's recipes next to onnxruntime's quantize_dynamic and quantize_static, same text,
same calibration windows, same machine, one run.

    bash ../shared/models/smollm2/build.sh      # once, ~3 minutes
    python bench/bench_llm_recipes.py [--windows 48] [--calib 32] [--results bench/results]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_llm_targets import DEFAULT_MODEL, perplexity, smollm2_inputs  # noqa: E402
from common import Table, add_results_argument, file_mb, fresh, interleaved_latency_ms, write_result  # noqa: E402

import onnxq  # noqa: E402

# name → (QuantConfig changes, uses calibration data)
LADDER = {
    "naive W8A8 (static per-tensor)": ({}, True),
    "dynamic per-tensor": ({"mode": "dynamic"}, False),
    "static per-tensor + α search": ({"smooth": "auto"}, True),
    "+ per-token": ({"activation_granularity": "per-token"}, False),
    "+ SmoothQuant α=0.5": ({"activation_granularity": "per-token", "smooth": 0.5}, True),
    "+ α search (smooth auto)": ({"activation_granularity": "per-token", "smooth": "auto"}, True),
    "recipe auto (logits cosine ≥ 0.995)": ({"recipe": "auto", "verify": onnxq.VerifyConfig(
        tolerance=onnxq.Tolerance(min_cosine=0.995), sensitivity_samples=0, check_kernels=False)}, True),
    "per-token + α search, lm_head float": ({"activation_granularity": "per-token", "smooth": "auto",
                                             "exclude_regex": "lm_head"}, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--windows", type=int, default=48, help="dev windows scored (of 48)")
    parser.add_argument("--calib", type=int, default=32, help="calibration windows (of 64)")
    parser.add_argument("--rounds", type=int, default=25, help="latency rounds")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    model, out, windows, calib = smollm2_inputs(args, args.calib)
    paths, seconds = {"float": model}, {}
    for i, (name, (changes, uses_data)) in enumerate(LADDER.items()):
        verify = changes.pop("verify", onnxq.VerifyConfig(enabled=False))
        config = onnxq.QuantConfig(verify=verify, **changes)
        path = out / f"smollm2.ladder{i}.onnx"
        start = time.perf_counter()
        onnxq.quantize(model, calib if uses_data else None, output=path, config=config)
        seconds[name] = time.perf_counter() - start
        paths[f"onnxq {name}"] = path
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, \
        quantize_static

    logging.disable(logging.WARNING)
    path = fresh(out / "smollm2.ort.dynamic.onnx")
    start = time.perf_counter()
    quantize_dynamic(model, path, weight_type=QuantType.QInt8, use_external_data_format=True)
    seconds["ORT quantize_dynamic"] = time.perf_counter() - start
    paths["ORT quantize_dynamic"] = path

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.rows = iter(range(0, args.calib, 8))

        def get_next(self):
            i = next(self.rows, None)
            return None if i is None else {k: v[i:i + 8] for k, v in calib.items()}

    path = fresh(out / "smollm2.ort.static.onnx")
    start = time.perf_counter()
    quantize_static(model, path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    op_types_to_quantize=["MatMul"], activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    use_external_data_format=True)
    seconds["ORT quantize_static (QDQ, MatMul, per channel)"] = time.perf_counter() - start
    paths["ORT quantize_static (QDQ, MatMul, per channel)"] = path

    results = {name: {"perplexity": perplexity(p, windows, optimize=True), "mb": file_mb(p)}
               for name, p in paths.items()}
    feed = {k: v[:1] for k, v in windows.items()}
    latency = interleaved_latency_ms(paths, feed, args.rounds)
    for name in results:
        results[name]["ms"] = latency[name]
    base = results["float"]
    rows = tuple((name, f"{r['perplexity']:.2f}",
                  f"{r['perplexity'] / base['perplexity'] - 1:+.1%}".replace("+0.0%", "—"), f"{r['ms']:.1f} ms",
                  f"{base['ms'] / r['ms']:.2f}×", f"{r['mb']:.0f}") for name, r in results.items())
    table = Table(("model", "perplexity", "vs float", "latency b1×128", "speed-up", "MB"), rows,
                  caption=f"SmolLM2-135M, perplexity on {args.windows} dev windows ({args.windows * 127} tokens), "
                          f"ORT_ENABLE_ALL; calibration {args.calib} windows")
    write_result(args.results, __file__, "SmolLM2-135M: the W8A8 ladder", [table],
                 {"results": results, "seconds": seconds})


if __name__ == "__main__":
    main()
