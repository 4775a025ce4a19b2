"""A search a language-model user can afford: `--smooth auto --recipe auto --verify-data dev_windows.npz` on
SmolLM2-135M, timed end to end in its own process, with the report's seconds per step, the recipe's probe log and
its choice.

    bash ../shared/models/smollm2/build.sh && python bench/bench_llm_search.py [--model PATH] [--results bench/results]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_llm_targets import DEFAULT_MODEL  # noqa: E402
from common import SHARED, Table, add_results_argument, write_result  # noqa: E402

DATA = SHARED / "smollm2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "smollm2.search.json"
    command = [sys.executable, "-m", "onnxq", args.model, "--calib", str(DATA / "calib_windows.npz"), "--smooth",
               "auto", "--recipe", "auto", "--verify-data", str(DATA / "dev_windows.npz"), "-o",
               str(out / "smollm2.search.onnx"), "--report", str(report), "-q"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"onnxq failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    result = json.loads(report.read_text())
    recipe = result["recipe"]
    logits = result["verification"]["providers"]["CPUExecutionProvider"]["outputs"]["logits"]
    kernels = result["sensitivity"]["kernels"] if result["sensitivity"] else "-"
    table = Table(("wall s", "steps", "groups per token", "tolerance met", "logits cosine", "sensitivity kernels"), ((
        f"{wall:.0f}", ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items()),
        f"{len(recipe['per_token'])} of {recipe['candidates']}", str(recipe["met"]), f"{logits['cosine_mean']:.4f}",
        str(kernels)),), caption="SmolLM2-135M, `--smooth auto --recipe auto`, verified on dev_windows.npz")
    write_result(args.results, __file__, "SmolLM2-135M: the recipe search's cost", [table],
                 {"exit": done.returncode, "wall_s": wall, "seconds": result["seconds"], "recipe": recipe,
                  "logits_cosine": logits["cosine_mean"], "sensitivity_kernels": kernels})


if __name__ == "__main__":
    main()
