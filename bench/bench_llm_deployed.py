"""Language models as they are deployed: SmolLM2-135M exported with a KV cache by onnxruntime-genai's
model builder and by Optimum, quantized by onnxq with its defaults (W8A8: per-token + SmoothQuant, chosen because
the model is a decoder), with --weights int4 (accuracy_level 4, chosen likewise) and with static per-tensor int8
(--activations per-tensor: a naive W8A8 model, which the gate must refuse); beside them any ready-made
4-bit file (the builder's own int4) — one table: exit status, size and perplexity against the float export,
decode speed with the cache (batch 1, float and quantized in turns in this process), onnxq's wall time and peak
RSS (its own process, /usr/bin/time).

    python bench/bench_llm_deployed.py --export genai=DIR/model.onnx --export optimum=DIR/model.onnx \
        [--ready builder-int4=genai:DIR/model.onnx] [--methods default int4 static] [--out bench/out/llm_deployed] \
        [--results bench/results]

The exports: README, Language models (built from ../shared/models/smollm2's GGUF source). Perplexity: onnxq's gate on
dev_windows.npz (48 windows of 128 tokens: 6,096 next tokens).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, Table, add_results_argument, machine, write_result  # noqa: E402

import onnxq  # noqa: E402
from onnxq.data.specs import input_specs  # noqa: E402
from onnxq.io import load_model  # noqa: E402
from onnxq.verify.speed.decode import decode_speed  # noqa: E402

DATA = SHARED / "smollm2"
# static: the gate's verdict on a naive W8A8 model (--no-fallback: with it, onnxq keeps the most sensitive
# products float until the bar holds — a bisection over 151 products on 48 windows, over 30 minutes on 2 cores).
METHODS = {"default": [], "int4": ["--weights", "int4"], "static": ["--activations", "per-tensor", "--no-fallback"],
           # A zero point per block; the smallest file (the token table and lm_head in 4 bits too).
           "uint4": ["--weights", "uint4"], "int4-smallest": ["--weights", "int4", "--vocabulary-bits", "4"],
           # 4-bit held to 1.05x float's perplexity: the fallback moves the most sensitive products to 8-bit blocks.
           "int4-1.05": ["--weights", "int4", "--tolerance", "logits:perplexity=1.05"],
           # AWQ's activation-aware scales (--smooth with 4-bit weights), then GPTQ.
           "int4-awq": ["--weights", "int4", "--smooth", "auto"]}


def run_onnxq(model: Path, method: str, out: Path) -> dict:
    """onnxq's command line in its own process: exit status, wall time and peak RSS (GNU time), and its report."""
    target = out / f"{model.parent.name}.{method}" / "model.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    report = target.with_suffix(".json")
    command = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "onnxq", str(model), "--calib",
               str(DATA / "calib_windows.npz"), "--verify-data", str(DATA / "dev_windows.npz"), "-o", str(target),
               "--report", str(report), *METHODS[method]]
    done = subprocess.run(command, capture_output=True, text=True)
    wall, rss_kb = done.stderr.strip().splitlines()[-1].split()
    row = {"exit": done.returncode, "wall_s": float(wall), "peak_rss_mb": int(rss_kb) / 1024, "path": str(target)}
    if report.is_file():
        data = json.loads(report.read_text())
        logits = data["verification"]["providers"]["CPUExecutionProvider"]["outputs"]["logits"]
        row |= {"perplexity_ratio": logits["perplexity_ratio"], "perplexity": logits["perplexity"],
                "float_perplexity": logits["perplexity_reference"], "size_ratio": data["size"]["ratio"]}
    return row


def ready_made(float_model: Path, model: Path) -> dict:
    """A file made by another tool: its perplexity against the float export by onnxq's verification."""
    verification = onnxq.verify(float_model, model, DATA / "dev_windows.npz")
    logits = next(o for o in verification.outputs if o.name == "logits").metrics
    size = sum(f.stat().st_size for f in model.parent.glob(model.name + "*"))
    floats = sum(f.stat().st_size for f in float_model.parent.glob(float_model.name + "*"))
    return {"perplexity_ratio": logits.perplexity_ratio, "perplexity": logits.perplexity,
            "float_perplexity": logits.perplexity_reference, "size_ratio": size / floats, "path": str(model)}


def decoding(float_model: Path, model: Path, steps: int, rounds: int) -> dict:
    window = {k: v[:1] for k, v in np.load(DATA / "dev_windows.npz").items()}
    specs = input_specs(load_model(float_model))
    speed = decode_speed((float_model, model), window, specs, steps=steps, rounds=rounds)
    return {"decode_float_tok_s": speed.float_tokens_per_s, "decode_tok_s": speed.quantized_tokens_per_s,
            "decode_ratio": speed.speedup}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", action="append", required=True, metavar="NAME=MODEL")
    parser.add_argument("--ready", action="append", default=[], metavar="NAME=EXPORT:MODEL")
    parser.add_argument("--methods", nargs="*", default=list(METHODS))
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/out/llm_deployed"))
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    exports = dict(e.split("=", 1) for e in args.export)
    print("machine:", machine())
    rows = {}
    for name, model in exports.items():
        model = Path(model)
        for method in args.methods:
            row = run_onnxq(model, method, args.out)
            if row["exit"] in (0, 1):
                row |= decoding(model, Path(row["path"]), args.steps, args.rounds)
            rows[f"{name} onnxq {method}"] = row
            print(f"{name} onnxq {method}", json.dumps(row), flush=True)
    for spec in args.ready:
        name, where = spec.split("=", 1)
        export, model = where.split(":", 1)
        row = ready_made(Path(exports[export]), Path(model)) | decoding(Path(exports[export]), Path(model),
                                                                           args.steps, args.rounds)
        rows[name] = row
        print(name, json.dumps(row), flush=True)
    write_result(args.results, __file__, "Language models as deployed: SmolLM2-135M's KV-cache exports",
                 [_table(rows)], rows, packages=("onnxruntime-genai", "optimum"))


def _table(rows: dict) -> Table:
    def cell(row, key, fmt):
        return format(row[key], fmt) if key in row else "—"
    return Table(("model", "exit", "size × float", "perplexity (× float)", "decode tokens/s (× float)", "onnxq wall s",
                  "onnxq peak RSS MB"), tuple(
        (name, str(row.get("exit", "—")), cell(row, "size_ratio", ".3f"),
         f"{cell(row, 'perplexity', '.2f')} ({cell(row, 'perplexity_ratio', '.3f')}×)",
         f"{cell(row, 'decode_tok_s', '.1f')} ({cell(row, 'decode_ratio', '.2f')}×)", cell(row, "wall_s", ".0f"),
         cell(row, "peak_rss_mb", ".0f")) for name, row in rows.items()))


if __name__ == "__main__":
    main()
