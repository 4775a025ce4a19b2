"""What ONNX Runtime alone needs to run a float model as deployed: a fresh process opens the file in one ORT session
(ORT_ENABLE_ALL, its default: the kernels pack their weights) and runs one batch of the data; its peak RSS, against
the float file's bytes, is the floor under any run that times the float model.

    python bench/bench_float_session_memory.py MODEL.onnx [--data ../shared/models/smollm2/dev_windows.npz]

Inputs the data leaves out (a decoder's position ids and empty past key / values) are made as onnxq makes them, in
a child process; the measured one imports only onnxruntime and numpy before the session.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, Table, add_results_argument, machine, peak_rss_mb, write_result  # noqa: E402


def session_peak(model: Path, feeds: Path) -> dict:
    """Open the session and run the feeds once, in this process (nothing but onnxruntime and numpy imported)."""
    start = _rss_mib()
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    opened = _rss_mib()
    names = {i.name for i in session.get_inputs()}
    session.run(None, {k: v for k, v in np.load(feeds).items() if k in names})
    return {"before_session_mib": round(start), "session_mib": round(opened), "peak_mib": round(peak_rss_mb())}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def make_feeds(model: Path, data: Path, feeds: Path) -> None:
    """In a child process (onnxq's graph and its memory stay out of the measured one): the data's first sample, with
    the inputs it leaves out made as onnxq makes them."""
    from onnxq.data.specs import input_specs
    from onnxq.data.completion import completed
    from onnxq.io import load_model
    batch = {name: array[:1] for name, array in np.load(data).items()}
    np.savez(feeds, **completed(batch, input_specs(load_model(model))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--data", type=Path, default=SHARED / "smollm2" / "dev_windows.npz")
    parser.add_argument("--make-feeds", type=Path, help=argparse.SUPPRESS)  # the child's job
    add_results_argument(parser)
    args = parser.parse_args()
    if args.make_feeds is not None:
        make_feeds(args.model, args.data, args.make_feeds)
        return
    with tempfile.TemporaryDirectory() as folder:
        feeds = Path(folder) / "feeds.npz"
        subprocess.run([sys.executable, __file__, str(args.model), "--data", str(args.data), "--make-feeds",
                        str(feeds)], check=True)
        row = session_peak(args.model, feeds)
    model_bytes = sum(f.stat().st_size for f in args.model.parent.glob(args.model.name + "*"))
    row |= {"model_mb": round(model_bytes / 1e6, 1), "peak_over_file": round(row["peak_mib"] * 2**20 / model_bytes, 2)}
    print("machine:", machine())
    print(json.dumps(row))
    name = args.model.parent.name if args.model.stem == "model" else args.model.stem
    table = Table(("model", "file MB", "RSS before the session MiB", "after opening it MiB", "peak MiB",
                   "peak / file"), ((name, f"{row['model_mb']}", f"{row['before_session_mib']}",
                                     f"{row['session_mib']}", f"{row['peak_mib']}", f"{row['peak_over_file']}"),))
    write_result(args.results, __file__, f"ONNX Runtime's own memory for a float model: {name}", [table], row,
                 variant=name)


if __name__ == "__main__":
    main()
