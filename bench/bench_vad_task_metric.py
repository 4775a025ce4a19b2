"""The zoo's two silero-vad files quantized with a task metric: the fallback, judged by the VAD's own decision
(probability > 0.5) on the held-out calibration chunks, keeps the nodes that flip it float — on silero_vad.onnx
inside the branches of its If. Agreement with float on the zoo's streamed speech, onnxq's default and with the
task metric, one run.

    python bench/bench_vad_task_metric.py [--out bench/out/zoo] [--results bench/results]
    (after bench_zoo.py's install line)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import agreement, fetch  # noqa: E402
from common import Table, add_results_argument, session, write_result  # noqa: E402
from zoo.models import ZOO  # noqa: E402


def speech(outputs: dict[str, np.ndarray]) -> list[bool]:
    """The VAD's decision per sample (chunk), as silero's users take it."""
    return list(outputs["output"][:, 0] > 0.5)


def main() -> None:
    import onnxq
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "zoo")
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, figures = [], {}
    for entry in (z for z in ZOO if z.name.startswith("silero")):
        model = fetch(entry, args.out)
        task = entry.prepare(np.random.default_rng(0))
        reference = task.answers(session(model, 1))
        cells, left_float = [], []
        for metric in (None, speech):
            verify = onnxq.VerifyConfig(task_metric=metric, task_max_drop=0.0, fallback=metric is not None)
            config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(sample_axes=task.sample_axes),
                                       verify=verify)
            path = args.out / f"{entry.name}.task_metric.onnx"
            report = onnxq.quantize(model, task.calibration, output=path, config=config).report
            cells.append(f"{agreement(reference, task.answers(session(path, 1)), task.metric):.3f}")
            left_float.append([e.name for e in report.left_float])
        kept = [name for name in left_float[1] if name not in left_float[0]]
        figures[entry.member] = {"default": float(cells[0]), "task_metric": float(cells[1]), "kept_float": kept}
        rows.append((entry.member, cells[0], cells[1], f"{len(kept)}: {', '.join(kept[:4])}"))
        print(f"| {' | '.join(rows[-1])} |", flush=True)
    table = Table(("model", "onnxq default", "onnxq --task-metric (no drop)", "kept float by the fallback"),
                  tuple(rows), caption="silero-vad: agreement of the speech decision with float")
    write_result(args.results, __file__, "silero-vad with a task metric", [table], figures)


if __name__ == "__main__":
    main()
