"""Memory bounded by the work, not by what the input claims: each case is onnxq's command line in a child process
(wall time, its own peak RSS), with a watchdog.

    python bench/bench_hostile_memory.py [--dir /tmp/onnxq-hostile] [--cases zipbomb,rnn] [--results bench/results]

zipbomb: a 2.2 MB .npz whose one array inflates to 2 GiB (32768 × 16384 float32, zeros but one column), read with
`--calib-samples 16` (a MatMul 16384 → 8). rnn: an unrolled bidirectional RNN (tests/e2e/rnn_model.py: 20 steps,
4 shared 4096 × 4096 weights read by 80 Gemms, 268 MB) to 4-bit with GPTQ on 32 calibration samples.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
from common import Table, add_results_argument, write_result  # noqa: E402
from rnn_model import rnn_inputs, unrolled_rnn  # noqa: E402


def _zipbomb(folder: Path) -> list[str]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width, rows = 16384, 32768
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.01, (width, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "wide.onnx")
    with zipfile.ZipFile(folder / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (rows, width)})
            chunk = np.zeros((256, width), np.float32)
            chunk[:, 0] = 1.0
            for _ in range(rows // 256):
                f.write(chunk.tobytes())
    print(f"zipbomb: {(folder / 'bomb.npz').stat().st_size / 1e6:.1f} MB file, {rows * width * 4 / 2**30:.0f} GiB "
          "array", flush=True)
    return [str(folder / "wide.onnx"), "--calib", str(folder / "bomb.npz"), "--calib-samples", "16", "-o",
            str(folder / "wide.int8.onnx")]


def _rnn(folder: Path) -> list[str]:
    import onnx

    onnx.save(unrolled_rnn(steps=20, width=4096), folder / "rnn.onnx")
    np.savez(folder / "rnn.npz", x=rnn_inputs(32, 20, 4096))
    return [str(folder / "rnn.onnx"), "--calib", str(folder / "rnn.npz"), "--weights", "int4", "-o",
            str(folder / "rnn.int4.onnx"), "--report", str(folder / "rnn.json")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default="/tmp/onnxq-hostile")
    parser.add_argument("--cases", default="zipbomb,rnn")
    parser.add_argument("--max-rss-mb", type=float, default=16000)
    parser.add_argument("--max-seconds", type=float, default=3600)
    add_results_argument(parser)
    args = parser.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    makers = {"zipbomb": _zipbomb, "rnn": _rnn}
    results = {}
    for case in args.cases.split(","):
        results[case] = _measured(makers[case](folder), args.max_rss_mb, args.max_seconds)
        print(json.dumps({"case": case, **results[case]}), flush=True)
    rows = tuple((case, str(r["exit"]), f"{r['seconds']}", f"{r['peak_rss_mb']}", r["killed"] or "no")
                 for case, r in results.items())
    table = Table(("case", "exit status", "wall s", "peak RSS MB", "stopped by the watchdog"), rows)
    write_result(args.results, __file__, "Hostile inputs: memory bounded by the work", [table], results)


# The child is spawned from a bare Python that watches it: a child's ru_maxrss starts from its parent's RSS at fork
# (vfork shares the parent's memory until exec), and this script holds onnx and numpy.
_WATCHER = """
import json, os, subprocess, sys, time
limit_mb, limit_s = float(sys.argv[1]), float(sys.argv[2])
start = time.perf_counter()
child = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

def rss_mb():
    try:
        with open(f"/proc/{child.pid}/status") as f:
            return next((int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:")), 0.0)
    except OSError:
        return 0.0

killed = None
while True:
    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    if pid:
        break
    if killed is None and (rss_mb() > limit_mb or time.perf_counter() - start > limit_s):
        killed = f"over {limit_mb:.0f} MB or {limit_s:.0f} s"
        child.kill()
    time.sleep(0.1)
print(json.dumps({"exit": os.waitstatus_to_exitcode(status), "seconds": round(time.perf_counter() - start, 1),
                  "peak_rss_mb": round(usage.ru_maxrss / 1024), "killed": killed,
                  "result": child.stdout.read().decode().strip()[-100:],
                  "stderr": child.stderr.read().decode().strip()[-200:]}))
"""


def _measured(cli: list[str], max_rss_mb: float, max_seconds: float) -> dict:
    """The run's wall time and its own peak RSS (wait4's ru_maxrss), killed past the limits."""
    watcher = subprocess.run([sys.executable, "-c", _WATCHER, str(max_rss_mb), str(max_seconds), sys.executable,
                              "-m", "onnxq", *cli, "-q"], capture_output=True, text=True, check=True)
    return json.loads(watcher.stdout)


if __name__ == "__main__":
    main()
