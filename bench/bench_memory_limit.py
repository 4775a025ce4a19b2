"""A model larger than the memory it is given: onnxq's command line in a child process confined to a
memory cgroup whose limit is under the model's size — its weights are read from the external data file as each
segment of the graph runs (onnxq.io.segments), the file pages the kernel takes back under the limit.

    sudo python bench/bench_memory_limit.py [--limit-ratio 0.85] [--layers 34] [--width 4096] [--dir /tmp/onnxq-limit]
    sudo python bench/bench_memory_limit.py --model M.onnx --calib C.npz [--verify-data V.npz] --limit-mb 1000
    sudo python bench/bench_memory_limit.py --decoder [--layers 11] [--width 2048]
    (each also takes --results DIR: where its result file goes, bench/results by default)

Without --model: the 2.28 GB chain of MatMuls of tests/e2e/large_model.py (34 × 4096² float32 weights, external
data), 16 seeded calibration samples, onnxq's defaults (verification and sensitivity included). With --decoder: the
KV-cache decoder of tests/e2e/decoder_model.py at --layers × --width (11 × 2048: 2.35 GB, vocabulary 8192, tied
table), 16 calibration and 8 verification windows of 64 seeded random tokens; onnxq recognizes it as a language
model and gives it those defaults (W8A8 per-token + SmoothQuant, perplexity gate). Needs to write a
cgroup (v1: /sys/fs/cgroup/memory, v2: /sys/fs/cgroup with the memory controller): root, outside most containers'
restrictions. Prints the exit code, wall time, the cgroup's peak charge (resident memory and page cache), the
child's peak RSS, how often the limit was hit, and whether the kernel killed the child for memory (OOM).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
from common import Table, add_results_argument, write_result  # noqa: E402
from decoder_model import kv_decoder, token_windows  # noqa: E402
from large_model import model_bytes, write_large_model  # noqa: E402


class MemoryCgroup:
    """A memory cgroup of its own, v1 or v2, removed on exit."""

    def __init__(self, limit_bytes: int) -> None:
        name = f"onnxq-bench-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/memory")
        self.v1 = v1.is_dir()
        self.path = (v1 if self.v1 else Path("/sys/fs/cgroup")) / name
        self.path.mkdir()
        (self.path / ("memory.limit_in_bytes" if self.v1 else "memory.max")).write_text(str(limit_bytes))

    def enter(self) -> None:
        """Called in the child before it runs onnxq."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def figures(self) -> dict:
        if self.v1:
            return {"peak_charge_mb": int((self.path / "memory.max_usage_in_bytes").read_text()) / 2**20,
                    "limit_hits": int((self.path / "memory.failcnt").read_text()),
                    "oom_killed": "oom_kill 0" not in (self.path / "memory.oom_control").read_text()}
        events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
        peak = self.path / "memory.peak"
        return {"peak_charge_mb": int(peak.read_text()) / 2**20 if peak.exists() else None,
                "limit_hits": int(events.get("max", 0)), "oom_killed": int(events.get("oom_kill", 0)) > 0}

    def remove(self) -> None:
        self.path.rmdir()


def run_limited(args: list[str], limit_bytes: int, folder: Path) -> dict:
    group = MemoryCgroup(limit_bytes)
    try:
        start = time.perf_counter()
        with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
            child = subprocess.Popen([sys.executable, "-m", "onnxq", *args], stdout=out, stderr=err,
                                     preexec_fn=group.enter, cwd=HERE.parent)
            _, status, usage = os.wait4(child.pid, 0)
        return {"exit": os.waitstatus_to_exitcode(status), "seconds": round(time.perf_counter() - start, 1),
                "peak_rss_mb": usage.ru_maxrss / 1024, "limit_mb": limit_bytes / 2**20, **group.figures()}
    finally:
        group.remove()


def write_decoder(folder: Path, layers: int, width: int) -> tuple[Path, str, str]:
    """The decoder with its weights in external data, and its calibration and verification windows."""
    model = folder / "decoder.onnx"
    (folder / "decoder.onnx.data").unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save(kv_decoder(layers=layers, width=width, heads=width // 128, vocab=8192), model,
              save_as_external_data=True, location="decoder.onnx.data")
    rng = np.random.default_rng(1)
    calibration, verification = str(folder / "calib.npz"), str(folder / "verify.npz")
    np.savez(calibration, **token_windows(rng, 16, 64, vocab=8192))
    np.savez(verification, **token_windows(rng, 8, 64, vocab=8192))
    return model, calibration, verification


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/tmp/onnxq-limit")
    parser.add_argument("--layers", type=int, help="the chain's (34) or the decoder's (11) layers")
    parser.add_argument("--width", type=int, help="the chain's (4096) or the decoder's (2048) width")
    parser.add_argument("--decoder", action="store_true", help="a KV-cache decoder instead of the chain")
    parser.add_argument("--model", help="a model of your own instead of the chain of MatMuls")
    parser.add_argument("--calib")
    parser.add_argument("--verify-data")
    parser.add_argument("--limit-ratio", type=float, default=0.85, help="the limit as a share of the model's bytes")
    parser.add_argument("--limit-mb", type=float, help="the limit in MiB (instead of --limit-ratio)")
    add_results_argument(parser)
    options = parser.parse_args()
    folder = Path(options.dir)
    folder.mkdir(parents=True, exist_ok=True)
    verification = options.verify_data
    if options.model:
        model, calibration = Path(options.model), options.calib
    elif options.decoder:
        model, calibration, verification = write_decoder(folder, options.layers or 11, options.width or 2048)
    else:
        options.layers, options.width = options.layers or 34, options.width or 4096
        model = write_large_model(folder, layers=options.layers, width=options.width)
        calibration = str(folder / "calib.npz")
        np.savez(calibration, x=np.random.default_rng(1).standard_normal((16, options.width)).astype(np.float32))
    size = model_bytes(model)
    limit = int(options.limit_mb * 2**20) if options.limit_mb else int(options.limit_ratio * size)
    args = [str(model), "--calib", calibration, "-o", str(folder / "quantized.onnx"), "--report",
            str(folder / "report.json")] + (["--verify-data", verification] if verification else [])
    result = {"model_mb": size / 2**20, **run_limited(args, limit, folder)}
    if result["exit"] in (0, 1):
        report = json.loads((folder / "report.json").read_text())
        result["passed"], result["memory"] = report["passed"], report.get("memory")
    else:
        result["stderr_tail"] = (folder / "stderr").read_text()[-600:]
    print(json.dumps(result, indent=1))
    variant = "model" if options.model else "decoder" if options.decoder else "chain"
    write_result(options.results, __file__, f"A model larger than its memory limit ({variant})", [_table(result)],
                 result, variant=variant)


def _table(r: dict) -> Table:
    peak = "—" if r.get("peak_charge_mb") is None else f"{r['peak_charge_mb']:.0f}"
    return Table(("model MiB", "limit MiB", "exit", "within tolerance", "wall s", "cgroup peak MiB (RSS + page cache)",
                  "peak RSS MiB", "limit hits", "killed for memory"), ((
        f"{r['model_mb']:.0f}", f"{r['limit_mb']:.0f}", str(r["exit"]), str(r.get("passed", "—")), f"{r['seconds']}",
        peak, f"{r['peak_rss_mb']:.0f}", str(r["limit_hits"]), "yes" if r["oom_killed"] else "no"),))


if __name__ == "__main__":
    main()
