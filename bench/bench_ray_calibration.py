"""Calibration sharded on Ray: wall time of one process against 1 and 2 Ray workers on the same shards, and whether
the merged summaries are the single process's, bit for bit. One run.

    pip install -e '.[ray]'
    python bench/bench_ray_calibration.py --model DIR/model.onnx [--windows 256] [--shards 8] [--workers 1 2] \
        [--results bench/results]

The shards: SmolLM2's 64 calibration windows repeated to --windows (a timing, not a better calibration), cut into
--shards .npz files. On a machine with fewer cores than workers the figure shows the overhead, not the scaling:
each ONNX Runtime session already uses every core it is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, Table, add_results_argument, machine, write_result  # noqa: E402

import onnxq  # noqa: E402
from onnxq.distributed import calibrate_on_ray  # noqa: E402


def shards(folder: Path, windows: int, count: int) -> list[Path]:
    data = dict(np.load(SHARED / "smollm2" / "calib_windows.npz"))
    repeat = -(-windows // len(data["input_ids"]))
    data = {k: np.concatenate([v] * repeat)[:windows] for k, v in data.items()}
    paths = []
    for i, part in enumerate(np.array_split(np.arange(windows), count)):
        paths.append(folder / f"part{i:03d}.npz")
        np.savez(paths[-1], **{k: v[part] for k, v in data.items()})
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--windows", type=int, default=256)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    add_results_argument(parser)
    args = parser.parse_args()
    import ray
    print("machine:", machine(), f"({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as scratch:
        paths = shards(Path(scratch), args.windows, args.shards)
        start = time.perf_counter()
        single = onnxq.calibrate(args.model, Path(scratch))
        rows = {"one process": {"wall_s": time.perf_counter() - start, "samples": single.samples}}
        print("one process", json.dumps(rows["one process"]), flush=True)
        for workers in args.workers:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
            start = time.perf_counter()
            merged = calibrate_on_ray(args.model, paths, workers=workers)
            rows[f"ray {workers}"] = {"wall_s": time.perf_counter() - start, "samples": merged.samples,
                                      "bit_for_bit": merged.to_json() == single.to_json()}
            ray.shutdown()
            print(f"ray {workers}", json.dumps(rows[f"ray {workers}"]), flush=True)
    table = Table(("calibration", "wall s", "samples", "merged = one process's, bit for bit"), tuple(
        (name, f"{row['wall_s']:.1f}", str(row["samples"]), {True: "yes", False: "no"}.get(row.get("bit_for_bit"), "—"))
        for name, row in rows.items()), caption=f"{args.windows} windows in {args.shards} shards")
    write_result(args.results, __file__, "Calibration sharded on Ray", [table], rows, packages=("ray",))


if __name__ == "__main__":
    main()
