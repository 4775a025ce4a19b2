"""Conv smoothing on PP-OCR v4's recognizer: which Conv activations to equalise, judged on 240 rendered
lines read as TextRecognizer batches them — string agreement, frame-argmax agreement and output SQNR vs float.

    pip install -e . rapidocr_onnxruntime==1.4.4
    python bench/bench_rec_smoothing.py [--out bench/out/zoo] [--lines 240] [--results bench/results]

Variants: the default (no smoothing); `smooth = 1` on one chosen set of Conv activations (the first Conv →
depthwise Conv pair; every activation read by depthwise Convs; every one read by 1×1 Convs); `--smooth auto`
(every group, α searched); then, without smoothing, the other calibration methods. The chosen sets are made by
narrowing onnxq.smoothing.steps' candidate groups, a measurement knob, not an option."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import fetch  # noqa: E402
from common import Table, add_results_argument, session, write_result  # noqa: E402
from zoo import inputs  # noqa: E402
from zoo.models import ZOO, _rapidocr, _rec_batch  # noqa: E402

FIRST_PAIR = "batch_norm_2.tmp_2"  # the first Conv's output, read by a depthwise Conv with nothing between


def _only(keep):
    """smoothable_groups narrowed to the Conv groups `keep(candidate)` accepts."""
    import onnxq.smoothing.steps as steps
    from onnxq.handlers.conv import is_depthwise
    from onnxq.smoothing.choice import smoothable_groups

    def narrowed(plans):
        return [c for c in smoothable_groups(plans) if c.channel_axis == 1 and keep(c, is_depthwise)]
    steps.smoothable_groups = narrowed if keep is not None else smoothable_groups


VARIANTS = {  # name: (smooth, which Conv groups (None = every group of every kind), calibration settings)
    "default (no smoothing)": ("off", None, {}),
    "first Conv → depthwise pair, α = 1": (1.0, lambda c, dw: c.activation.name == FIRST_PAIR, {}),
    "every depthwise Conv input, α = 1": (1.0, lambda c, dw: dw(c.plans[0].node, c.plans[0].node.inputs[1].shape),
                                          {}),
    "every 1×1 Conv input, α = 1": (1.0, lambda c, dw: not dw(c.plans[0].node, c.plans[0].node.inputs[1].shape), {}),
    "--smooth auto": ("auto", None, {}),
    "--method minmax": ("off", None, {"method": "minmax"}),
    "--method avgminmax": ("off", None, {"method": "avgminmax"}),
    "--method mse": ("off", None, {"method": "mse"}),
    "--method entropy": ("off", None, {"method": "entropy"}),
    "--percentile 99.99": ("off", None, {"percentile": 99.99}),
}


def main() -> None:
    import onnxq
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/out/zoo"))
    parser.add_argument("--lines", type=int, default=240)
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    entry = next(e for e in ZOO if e.name == "ppocr_rec")
    model, task = fetch(entry, args.out), entry.prepare(np.random.default_rng(0))  # the zoo's calibration lines
    rec, rng = _rapidocr().text_rec, np.random.default_rng(123)
    lines = sorted((inputs.text_line(rng)[0] for _ in range(args.lines)), key=lambda a: a.shape[1] / a.shape[0])
    batches = [_rec_batch(rec, lines[i:i + 6]) for i in range(0, len(lines), 6)]

    def outputs(path):
        s = session(path, 2)
        return [s.run(None, {"x": b})[0] for b in batches]
    reference = outputs(model)
    ref_strings = [t for o in reference for t, _ in rec.postprocess_op(o)]
    rows, figures = [], {}
    for name, (smooth, keep, calibration) in VARIANTS.items():
        _only(keep)
        path = args.out / "ppocr_rec.smoothing.onnx"
        config = onnxq.QuantConfig(smooth=smooth, calibration=onnxq.CalibrationConfig(**calibration),
                                   verify=onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=False))
        onnxq.quantize(model, task.calibration, output=path, config=config)
        got = outputs(path)
        strings = [t for o in got for t, _ in rec.postprocess_op(o)]
        frames = np.mean(np.concatenate([(a.argmax(-1) == b.argmax(-1)).ravel() for a, b in zip(reference, got)]))
        error = sum(float(((a - b) ** 2).sum()) for a, b in zip(reference, got)) / \
            sum(float((a ** 2).sum()) for a in reference)
        agreement = np.mean([a == b for a, b in zip(ref_strings, strings)])
        figures[name] = {"strings": float(agreement), "frames": float(frames), "sqnr_db": -10 * float(np.log10(error))}
        rows.append((name, f"{agreement:.3f}", f"{frames:.4f}", f"{-10 * np.log10(error):.1f} dB"))
        print(f"| {' | '.join(rows[-1])} |", flush=True)
    table = Table(("onnxq static", "strings", "frames", "SQNR"), tuple(rows),
                  caption=f"PP-OCR v4 recognizer, {args.lines} rendered lines: agreement with float")
    write_result(args.results, __file__, "PP-OCR recognizer: Conv smoothing and calibration methods", [table],
                 figures, packages=("rapidocr-onnxruntime",))


if __name__ == "__main__":
    main()
