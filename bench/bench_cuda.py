"""CUDA as a target, on a machine with onnxruntime-gpu: MiniLM in every form, each verified on the CPU and on CUDA
against the float model (onnxq.verify: the per-provider gate, the agreement bound, the placement profiled on CUDA
and checked against targets/ort_kernels.py's prediction), and timed on CUDA EP against float (interleaved medians,
batch 32 × 128 and 1 × 128), in one run.

    python bench/bench_cuda.py [--rounds 50] [--out bench/out/cuda] [--smollm2 PATH] [--windows 16] [--results DIR]

With --smollm2 (bash ../shared/models/smollm2/build.sh builds it), SmolLM2-135M for --target cuda, 8-bit and 4-bit
(GPTQ on calib_windows): size, and perplexity on dev_windows against float's, on CUDA when present and by the
exact float16 arithmetic on this CPU (passes.float16.emulation).

Without CUDA it quantizes and verifies on the CPU, predicts the CUDA placement, and says that nothing was timed on
a GPU. On a lent GPU machine: bash ../shared/tools/gpu-payload.sh ../shared/models/minilm/*.npz (its header gives
the calls), then this script with PYTHONPATH as setup.sh sets it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SHARED, Table, add_results_argument, file_mb, fresh, machine, session,  # noqa: E402
                    session_perplexity, write_result)

import onnxq  # noqa: E402
from onnxq.verify.speed.latency import check_speed  # noqa: E402

MINILM = SHARED / "minilm"
MODEL = MINILM / "all-MiniLM-L6-v2.onnx"
CUDA = "CUDAExecutionProvider"
OFF = onnxq.VerifyConfig(enabled=False)
# name → (config, calibration data or None): onnxq's five output forms, then the cuda target's two.
FORMS = {
    "dynamic (no data)": (onnxq.QuantConfig(verify=OFF), None),
    "static QDQ (default)": (onnxq.QuantConfig(verify=OFF), "calib_docs.npz"),
    "per-token + smooth auto": (onnxq.QuantConfig(activation_granularity="per-token", smooth="auto", verify=OFF),
                                "calib_docs.npz"),
    "qoperator": (onnxq.QuantConfig(format="qoperator", verify=OFF), "calib_docs.npz"),
    "int4 (GPTQ)": (onnxq.QuantConfig(weights=onnxq.QScheme("int4"), verify=OFF), "calib_docs.npz"),
    "--target cuda (8-bit blocks, float16)": (onnxq.QuantConfig(target="cuda", verify=OFF), None),
    "--target cuda --weights int4 (GPTQ, float16)": (onnxq.QuantConfig(target="cuda", weights=onnxq.QScheme("int4"),
                                                                       verify=OFF), "calib_docs.npz"),
}


def verified(path: Path) -> dict:
    """onnxq.verify on the 500 eval sentences, CPU and CUDA (when present)."""
    v = onnxq.verify(MODEL, path, MINILM / "eval_sentences.npz", providers=("cpu", "cuda"), target="cuda")
    row = {"passed": v.passed}
    for check in v.providers:
        embedding = next(o for o in check.outputs if o.name == "sentence_embedding")
        row[check.provider] = round(embedding.metrics.cosine_mean, 4)
        if check.placement is not None and check.provider == CUDA:
            row["cuda_placement"] = check.placement.text()
            row["mismatches"] = list(check.placement.mismatches)
    for provider, checks in v.agreement.items():
        row[f"agreement {provider}"] = [round(o.metrics.cosine_mean, 4) for o in checks]
    row["predicted"] = [line for p in v.predicted for line in p.text()]
    return row


def timed_on_cuda(path: Path, rounds: int) -> dict:
    docs = np.load(MINILM / "calib_docs.npz")
    out = {}
    for batch in (32, 1):
        feed = {k: docs[k][:batch] for k in docs.files}
        (check,) = check_speed(MODEL, path, feed, [CUDA], rounds)
        out[f"b{batch}"] = {"float_ms": round(check.float_ms, 3), "quantized_ms": round(check.quantized_ms, 3),
                            "speedup": round(check.speedup, 3)}
    return out


def smollm2_rows(model: Path, out: Path, windows: int) -> dict:
    """SmolLM2 for CUDA, 8-bit and 4-bit blocks: size and perplexity (float's beside) where it is deployed."""
    from onnxq.io import OrtModel, load_model
    from onnxq.io.sessions import session_options
    from onnxq.passes.float16.emulation import float16_emulation

    data = SHARED / "smollm2"
    dev = dict(np.load(data / "dev_windows.npz"))
    dev = {k: v[:windows] for k, v in dev.items()}
    rows = {"float": {"size_mb": round(file_mb(model), 1),
                      "cpu": session_perplexity(session(model, optimize=False), dev)}}
    print("float", json.dumps(rows["float"]))
    for name, weights, calib in (("cuda int8", "int8", None), ("cuda int4 gptq", "int4", "calib_windows.npz")):
        path = fresh(out / f"smollm2.{weights}.onnx")
        config = onnxq.QuantConfig(target="cuda", weights=onnxq.QScheme(weights), verify=OFF)
        onnxq.quantize(model, None if calib is None else data / calib, output=path, config=config)
        emulated = OrtModel(float16_emulation(load_model(path))).session(session_options(optimize=False),
                                                                         ["CPUExecutionProvider"])
        rows[name] = {"size_mb": round(file_mb(path), 1), "exact float16 on CPU": session_perplexity(emulated, dev)}
        if CUDA in ort.get_available_providers():
            rows[name]["cuda"] = session_perplexity(ort.InferenceSession(str(path), providers=[CUDA]), dev)
        print(name, json.dumps(rows[name]))
    return rows


def main() -> None:
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "cuda")
    parser.add_argument("--smollm2", type=Path, help="smollm2_135m.onnx (../shared/models/smollm2/build.sh)")
    parser.add_argument("--windows", type=int, default=16, help="SmolLM2 dev windows scored")
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    has_cuda = CUDA in ort.get_available_providers()
    print(f"machine: {machine()}; providers {ort.get_available_providers()}")
    results = {}
    for i, (name, (config, data)) in enumerate(FORMS.items()):
        path = fresh(args.out / f"minilm.form{i}.onnx")
        onnxq.quantize(MODEL, None if data is None else MINILM / data, output=path, config=config)
        row = {"size_mb": round(file_mb(path), 1), **verified(path)}
        if has_cuda:
            row["cuda_speed"] = timed_on_cuda(path, args.rounds)
        results[name] = row
        print(name, json.dumps(row))
    tables = [_forms_table(results, has_cuda)]
    if args.smollm2:
        results["smollm2"] = smollm2_rows(args.smollm2, args.out, args.windows)
        tables.append(_smollm2_table(results["smollm2"]))
    if not has_cuda:
        print("no CUDAExecutionProvider here: accuracy on the CPU and the predicted CUDA placement only; nothing was "
              "timed on a GPU")
    write_result(args.results, __file__, "CUDA as a target", tables, results, packages=("onnxruntime-gpu",))


def _forms_table(results: dict, has_cuda: bool) -> Table:
    rows = []
    for name, row in results.items():
        speed = row.get("cuda_speed", {})
        rows.append((name, f"{row['size_mb']}", "yes" if row["passed"] else "no",
                     str(row.get("CPUExecutionProvider", "—")), str(row.get(CUDA, "—")),
                     " / ".join(f"{speed[b]['speedup']:.2f}×" for b in ("b32", "b1")) if speed else "—",
                     f"{len(row.get('mismatches', []))}" if CUDA in row else "—"))
    return Table(("form", "MB", "within tolerance", "cosine on CPU", "cosine on CUDA", "CUDA speed-up b32 / b1",
                  "placement mismatches"), tuple(rows),
                 caption="all-MiniLM-L6-v2 on each provider (sentence_embedding, 500 eval sentences)",
                 note="" if has_cuda else "No CUDAExecutionProvider on this machine: the CPU's figures and the "
                                          "predicted CUDA placement only.")


def _smollm2_table(rows: dict) -> Table:
    return Table(("SmolLM2-135M", "MB", "perplexity on CPU (float)", "exact float16 on CPU", "on CUDA"), tuple(
        (name, f"{row['size_mb']}", f"{row['cpu']:.2f}" if "cpu" in row else "—",
         f"{row['exact float16 on CPU']:.2f}" if "exact float16 on CPU" in row else "—",
         f"{row['cuda']:.2f}" if "cuda" in row else "—") for name, row in rows.items()))


if __name__ == "__main__":
    main()
