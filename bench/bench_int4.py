"""4-bit weights: onnxq's block-wise int4 / uint4 next to onnxruntime's MatMulNBitsQuantizer (its default RTN, and
HQQ when torch is installed), same model, data and machine, one run.

MiniLM: mean cosine of sentence_embedding to float on the 500 eval sentences, file size, latency at batch 1 and 32.
SmolLM2-135M: perplexity on dev_windows.npz (ORT's deployed kernels), file size, latency batch 1 × 128 tokens.

    python bench/bench_int4.py minilm [--rounds-b1 40] [--rounds-b32 8] [--results bench/results]
    bash ../shared/models/smollm2/build.sh && python bench/bench_int4.py smollm2 [--windows 48] [--rounds 25]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_llm_targets import DEFAULT_MODEL, perplexity, smollm2_inputs  # noqa: E402
from bench_minilm_recipes import MINILM, MODEL as MINILM_MODEL, embeddings  # noqa: E402
from common import (Table, add_results_argument, file_mb, fresh, interleaved_latency_ms, mean_cosine,  # noqa: E402
                    write_result)

import onnxq  # noqa: E402

BLOCK = 32
# name → (QuantConfig changes, uses calibration data)
INT4, UINT4 = onnxq.QScheme("int4", True), onnxq.QScheme("uint4", False)
# Every weight in 4 bits, a language model's token table and lm_head too (the comparison with ORT's quantizer);
# the last row is a decoder's default, the two in 8-bit blocks (blocks.vocabulary_bits).
ALL_4 = onnxq.BlockConfig(vocabulary_bits=4)
ONNXQ = {
    "int8 (default, static W8A8)": ({}, True),
    "int4 RTN + clip search (no data)": ({"weights": INT4, "blocks": ALL_4}, False),
    "uint4 RTN + clip search (no data)": ({"weights": UINT4, "blocks": ALL_4}, False),
    "int4 RTN + activation-aware clip": ({"weights": INT4, "blocks": onnxq.BlockConfig(
        method="rtn", clip="activation", vocabulary_bits=4)}, True),
    "int4 GPTQ (with data: the default)": ({"weights": INT4, "blocks": ALL_4}, True),
    "uint4 GPTQ (with data: the default)": ({"weights": UINT4, "blocks": ALL_4}, True),
    "int4 GPTQ, a decoder's table and lm_head 8-bit (its default)": ({"weights": INT4}, True),
    "int8 weight-only (MatMulNBits 8 bits, no data)": ({"mode": "weight-only"}, False),
}


def quantize_all(model: Path, calib: dict, out: Path, prefix: str, seconds: dict) -> dict[str, Path]:
    paths = {"float": model}
    for i, (name, (changes, uses_data)) in enumerate(ONNXQ.items()):
        path = out / f"{prefix}.int4_{i}.onnx"
        start = time.perf_counter()
        onnxq.quantize(model, calib if uses_data else None, output=path,
                       config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=False), **changes))
        seconds[f"onnxq {name}"] = time.perf_counter() - start
        paths[f"onnxq {name}"] = path
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    logging.disable(logging.WARNING)
    algorithms = {"RTN (default)": nbits.DefaultWeightOnlyQuantConfig(block_size=BLOCK, is_symmetric=True)}
    if importlib.util.find_spec("torch") is not None:  # ORT's HQQ runs on torch
        algorithms["HQQ"] = nbits.HQQWeightOnlyQuantConfig(block_size=BLOCK)
    else:
        print("ORT HQQ skipped: it needs torch (pip install torch)")
    for name, algo in algorithms.items():
        path = fresh(out / f"{prefix}.ort_nbits_{name.split()[0].lower()}.onnx")
        start = time.perf_counter()
        quantizer = nbits.MatMulNBitsQuantizer(onnx.load(model), block_size=BLOCK, is_symmetric=True,
                                               algo_config=algo)
        quantizer.process()
        quantizer.model.save_model_to_file(str(path), use_external_data_format=True)
        seconds[f"ORT MatMulNBits {name}"] = time.perf_counter() - start
        paths[f"ORT MatMulNBits {name}"] = path
    return paths


def minilm(args: argparse.Namespace, out: Path) -> None:
    calib_file, eval_file = np.load(MINILM / "calib_docs.npz"), np.load(MINILM / "eval_sentences.npz")
    calib = {k: calib_file[k] for k in calib_file.files}
    eval_inputs = {k: eval_file[k] for k in eval_file.files}
    seconds: dict[str, float] = {}
    paths = quantize_all(MINILM_MODEL, calib, out, "minilm", seconds)
    reference = embeddings(MINILM_MODEL, eval_inputs)
    cosine = {name: mean_cosine(reference, embeddings(p, eval_inputs)) for name, p in paths.items()}
    b1 = interleaved_latency_ms(paths, {k: v[:1] for k, v in calib.items()}, args.rounds_b1)
    b32 = interleaved_latency_ms(paths, {k: v[:32] for k, v in calib.items()}, args.rounds_b32)
    mb = {name: file_mb(p) for name, p in paths.items()}
    rows = tuple((name, f"{cosine[name]:.4f}", f"{mb[name]:.1f}", f"{mb[name] / mb['float']:.3f}",
                  f"{b1[name]:.1f} ms", f"{b1['float'] / b1[name]:.2f}×", f"{b32[name]:.0f} ms",
                  f"{b32['float'] / b32[name]:.2f}×", f"{seconds.get(name, 0):.1f}") for name in paths)
    table = Table(("model", "cosine", "MB", "size vs float", "latency b1", "speed-up", "latency b32", "speed-up",
                   "quantize s"), rows,
                  caption="all-MiniLM-L6-v2, mean cosine of sentence_embedding on 500 eval sentences, ORT_ENABLE_ALL")
    write_result(args.results, __file__, "4-bit weights: onnxq against ORT's MatMulNBitsQuantizer", [table],
                 {"cosine": cosine, "b1": b1, "b32": b32, "mb": mb, "seconds": seconds}, variant="minilm")


def smollm2(args: argparse.Namespace, out: Path) -> None:
    model, out, windows, calib = smollm2_inputs(args, args.calib)
    seconds: dict[str, float] = {}
    paths = quantize_all(model, calib, out, "smollm2", seconds)
    ppl = {name: perplexity(p, windows, optimize=True) for name, p in paths.items()}
    latency = interleaved_latency_ms(paths, {k: v[:1] for k, v in windows.items()}, args.rounds)
    mb = {name: file_mb(p) for name, p in paths.items()}
    rows = tuple((name, f"{ppl[name]:.2f}", f"{ppl[name] / ppl['float']:.3f}", f"{mb[name]:.0f}",
                  f"{mb[name] / mb['float']:.3f}", f"{latency[name]:.1f} ms",
                  f"{latency['float'] / latency[name]:.2f}×", f"{seconds.get(name, 0):.1f}") for name in paths)
    table = Table(("model", "perplexity", "× float", "MB", "size vs float", "latency b1×128", "speed-up",
                   "quantize s"), rows,
                  caption=f"SmolLM2-135M, perplexity on {args.windows} dev windows ({args.windows * 127} tokens), "
                          f"ORT_ENABLE_ALL; calibration {args.calib} windows")
    write_result(args.results, __file__, "4-bit weights: onnxq against ORT's MatMulNBitsQuantizer", [table],
                 {"perplexity": ppl, "ms": latency, "mb": mb, "seconds": seconds}, variant="smollm2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["minilm", "smollm2"])
    parser.add_argument("--model-path", dest="model_path", default=str(DEFAULT_MODEL), help="SmolLM2 .onnx")
    parser.add_argument("--windows", type=int, default=48, help="SmolLM2 dev windows scored (of 48)")
    parser.add_argument("--calib", type=int, default=32, help="SmolLM2 calibration windows (of 64)")
    parser.add_argument("--rounds", type=int, default=25, help="SmolLM2 latency rounds")
    parser.add_argument("--rounds-b1", type=int, default=40)
    parser.add_argument("--rounds-b32", type=int, default=8)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.model == "minilm":
        minilm(args, out)
    else:
        args.model = args.model_path
        smollm2(args, out)


if __name__ == "__main__":
    main()
