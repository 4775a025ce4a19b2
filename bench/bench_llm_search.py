"""A search a language-model user can afford: `--smooth auto --recipe auto --verify-data dev_windows.npz` on
SmolLM2-135M (issue 18, scope 9), timed end to end in its own process, with the report's seconds per step, the
recipe's probe log and its choice.

    bash ../shared/models/smollm2/build.sh && python bench/bench_llm_search.py [--model PATH]
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
from common import SHARED, machine  # noqa: E402

from onnxq.targets import cpu_flags, cpu_model  # noqa: E402

DATA = SHARED / "smollm2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
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
    print(f"{cpu_model()} ({', '.join(sorted(cpu_flags()))}), {machine()}")
    print(f"wall {wall:.0f} s; steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items()))
    print(f"recipe: {len(recipe['per_token'])} of {recipe['candidates']} groups per token, met {recipe['met']}; "
          f"verification {recipe['verification']}")
    print(f"logits cosine {result['verification']['providers']['CPUExecutionProvider']['outputs']['logits']['cosine_mean']:.4f}"
          f"; sensitivity on {result['sensitivity']['kernels'] if result['sensitivity'] else '-'} kernels")
    (out / "bench_llm_search.json").write_text(json.dumps({"wall_s": wall, "seconds": result["seconds"],
                                                           "recipe": recipe}, indent=2))


if __name__ == "__main__":
    main()
