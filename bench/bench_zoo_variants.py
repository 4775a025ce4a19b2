"""One zoo model quantized by onnxq in other modes than the default (what keeps more of a model's compute quantized
at its task bar): per variant, the gate's verdict, the share of MatMul/Gemm/Conv multiply-adds quantized,
string / label agreement with float and right answers on the held-out inputs as the package runs them, the nodes
the fallback kept float, the wall time; with --latency, each file's latency against float (one thread, interleaved
medians). The summary and JSON report of each variant are written beside its model.

    python bench/bench_zoo_variants.py [--model ppocr_rec] [--out bench/out/zoo_variants] [--latency 50] \
        [--no-speed] [--results bench/results] default recipe-auto per-token no-fallback

The verification data and metrics are bench_zoo's (bench/zoo/models.py), the sensitivity off as bench_zoo runs
onnxq; --no-speed leaves out the speed timing (verify.measure_speed), and with it never-slower, which acts only on
a model measured slower than float."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import THREADS, agreement, fetch  # noqa: E402
from common import Table, add_results_argument, interleaved_latency_ms, machine, session, write_result  # noqa: E402
from zoo.flops import product_macs  # noqa: E402
from zoo.models import ZOO  # noqa: E402

import onnxq  # noqa: E402
from onnxq.report.summary import format_summary  # noqa: E402

# name → (QuantConfig fields, VerifyConfig fields)
VARIANTS = {"default": ({}, {}), "recipe-auto": ({"recipe": "auto"}, {}),
            "per-token": ({"activation_granularity": "per-token"}, {}),
            "no-fallback": ({}, {"fallback": False})}


def quantized(entry, model: Path, task, name: str, out: Path, speed: bool) -> tuple[Path, onnxq.QuantReport, float]:
    top, verify = VARIANTS[name]
    config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(sample_axes=task.sample_axes),
                               verify=onnxq.VerifyConfig(sensitivity_samples=0, measure_speed=speed, **verify), **top)
    path = out / f"{entry.name}.{name}.onnx"
    start = time.perf_counter()
    report = onnxq.quantize(model, task.calibration, output=path, verify_data=task.verification,
                            config=config).report
    wall = time.perf_counter() - start
    path.with_suffix(".summary.txt").write_text(format_summary(report))
    path.with_suffix(".json").write_text(json.dumps(report.to_dict(), indent=1))
    return path, report, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", choices=list(VARIANTS))
    parser.add_argument("--model", default="ppocr_rec", choices=[e.name for e in ZOO])
    parser.add_argument("--out", type=Path, default=Path("bench/out/zoo_variants"))
    parser.add_argument("--latency", type=int, default=0, metavar="ROUNDS", help="0: no latency")
    parser.add_argument("--no-speed", action="store_true", help="onnxq without its speed timing")
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print("machine:", machine())
    entry = next(e for e in ZOO if e.name == args.model)
    model = fetch(entry, args.out)
    task = entry.prepare(np.random.default_rng(0))
    macs = product_macs(model, task.feed)
    float_answers = task.answers(session(model, THREADS))
    paths, rows = {"float": model}, {}
    for name in args.variants:
        path, report, wall = quantized(entry, model, task, name, args.out, not args.no_speed)
        paths[name] = path
        answers = task.answers(session(path, THREADS))
        names = {e.name for e in report.quantized}
        row = {"passed": report.passed, "mac_share": sum(v for k, v in macs.items() if k in names) / sum(macs.values()),
               "agreement": agreement(float_answers, answers, task.metric),
               "kept_float_by_fallback": 0 if report.fallback is None else len(report.fallback.kept_float),
               "wall_s": round(wall)}
        if task.truth is not None:
            row |= {"truth": agreement(task.truth, answers, task.metric),
                    "float_truth": agreement(task.truth, float_answers, task.metric)}
        rows[name] = row
        print(name, json.dumps(row), flush=True)
    latency = {}
    if args.latency:
        latency = interleaved_latency_ms(paths, task.feed, args.latency, threads=THREADS)
        print("latency x float:", json.dumps({k: round(v / latency["float"], 3) for k, v in latency.items()}))
    table = Table(("variant", "within tolerance", "MACs quantized", f"{task.metric} with float", "right answers",
                   "kept float by the fallback", "wall s", "latency × float"), tuple(
        (name, "yes" if r["passed"] else "no", f"{r['mac_share']:.0%}", f"{r['agreement']:.3f}",
         f"{r['truth']:.3f}" if "truth" in r else "—", str(r["kept_float_by_fallback"]), str(r["wall_s"]),
         f"{latency[name] / latency['float']:.2f}" if latency else "—") for name, r in rows.items()))
    write_result(args.results, __file__, f"{entry.name} in other modes than the default", [table],
                 {"variants": rows, "latency_ms": latency}, variant=entry.name)


if __name__ == "__main__":
    main()
