"""A model over 2 GB: onnxq against onnxruntime.quantization.quantize_static on the same model, data and machine, in
one run; each quantizer in its own process (wall time, peak RSS of the process).

    python bench/bench_large_model.py [--layers 34] [--width 4096] [--dir /tmp/onnxq-large] [--results bench/results]

The model: a chain of `layers` MatMuls with width × width float32 weights in one external data file (34 × 4096² =
2.28 GB), written layer by layer by tests/e2e/large_model.py. Calibration: 16 seeded normal samples; evaluation:
16 more. onnxq runs twice: with its defaults (verification and per-layer sensitivity included) and with
--no-verify (the same work as ORT's); ORT with QDQ, per-channel int8 weights, uint8 activations, MinMax,
use_external_data_format. A watchdog stops a run past --max-rss-mb or --max-seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
from common import (Table, add_results_argument, fresh, mean_cosine, run_worker, session, timed,  # noqa: E402
                    write_result)
from large_model import model_bytes, write_large_model  # noqa: E402


def worker(tool: str, model: str, calibration: str, out: str) -> dict:
    if tool.startswith("onnxq"):
        import onnxq

        config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(enabled=tool == "onnxq"))
        return timed(lambda: onnxq.quantize(model, calibration, output=out, config=config))
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    data = np.load(calibration)["x"]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": data[i:i + 8]} for i in range(0, len(data), 8)])

        def get_next(self):
            return next(self.batches, None)

    return timed(lambda: quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                                         activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                         use_external_data_format=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, default=34)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--dir", default="/tmp/onnxq-large")
    parser.add_argument("--max-rss-mb", type=float, default=20000)
    parser.add_argument("--max-seconds", type=float, default=1200)
    add_results_argument(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    model = write_large_model(folder, args.layers, args.width)
    size_mb = model_bytes(model) / 2**20
    rng = np.random.default_rng(1)
    calibration, evaluation = folder / "calib.npz", rng.standard_normal((32, args.width)).astype(np.float32)
    np.savez(calibration, x=evaluation[:16])
    runs = {}
    for tool in ("onnxq", "onnxq-no-verify", "ort"):
        out = fresh(folder / f"large.{tool}.onnx")
        run = run_worker(Path(__file__), tool, str(model), str(calibration), str(out),
                         max_rss_mb=args.max_rss_mb, max_seconds=args.max_seconds)
        runs[tool] = run
        print(tool, run, flush=True)
    feed = {"x": evaluation[16:]}
    reference = session(model, optimize=False).run(None, feed)[0]
    for tool, run in runs.items():
        out = folder / f"large.{tool}.onnx"
        if "killed" not in run:
            run["size_mb"] = model_bytes(out) / 2**20 if (folder / f"{out.name}.data").exists() else \
                out.stat().st_size / 2**20
            run["cosine"] = mean_cosine(reference, session(out).run(None, feed)[0])
    results = {"model_mb": size_mb, "runs": runs}
    write_result(args.results, __file__, "A model over 2 GB: onnxq against onnxruntime.quantization",
                 [_table(results)], results)


def _table(r: dict) -> Table:
    size = r["model_mb"]
    rows = []
    for tool, run in r["runs"].items():
        if "killed" in run:
            rows.append((tool, f"stopped: {run['killed']}", f"≥ {run['peak_rss_mb']:.0f} MiB", "", "", ""))
            continue
        rows.append((tool, f"{run['seconds']:.0f} s", f"{run['peak_rss_mb']:.0f} MiB",
                     f"{run['peak_rss_mb'] / size:.2f}x", f"{run['size_mb']:.0f} MiB", f"{run['cosine']:.4f}"))
    return Table(("", "quantize time", "peak RSS", "peak RSS / model", "size", "cosine to float"), tuple(rows),
                 caption=f"{size / 1024:.2f} GiB float model")


if __name__ == "__main__":
    main()
