"""Which sensitivity ranking predicts the real thing: the switch model on ORT's deployed kernels (ORT_ENABLE_ALL) or
on the exact quantization (ORT_DISABLE_ALL), against each node really quantized alone (a model with every other
node float, run on the deployed kernels and compared with the float model under ORT_DISABLE_ALL, as the gate does).

all-MiniLM-L6-v2, the default static config, 128 calibration documents, the sensitivity's 16 samples (held-out
calibration documents). Prints Spearman's rank correlation and the top-k overlap of each ranking with the real one.

    python bench/bench_sensitivity_kernels.py [--samples 16] [--results bench/results]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, Table, add_results_argument, write_result  # noqa: E402

from onnxq import QuantConfig, VerifyConfig  # noqa: E402
from onnxq.data.batching import first_samples  # noqa: E402
from onnxq.io import run_files  # noqa: E402
from onnxq.passes.graph.builder import shared_weight_quantization  # noqa: E402
from onnxq.search.build import Overrides  # noqa: E402
from onnxq.search.sensitivity import _budgets, _harm, layer_sensitivity  # noqa: E402
from onnxq.steps import RunInputs, RunState, run_steps  # noqa: E402
from onnxq.steps.run import STEPS  # noqa: E402
from onnxq.steps.sensitivity import _deployed_kernels  # noqa: E402
from onnxq.verify.metrics import MetricsAccumulator  # noqa: E402
from onnxq.io.model_sessions import make_session  # noqa: E402

MINILM = SHARED / "minilm"


def real_harm(state: RunState, samples: list, references: list, node: str) -> float:
    """Only `node` quantized, on the deployed kernels, against the float model's exact outputs."""
    others = tuple(p.node.name for p in state.quantized.plans if p.node.name != node)
    built = state.builder.build(Overrides(float_nodes=others))
    session = make_session(built.model, optimize=True)
    names = [o.name for o in state.loaded.reference.graph.outputs]
    accumulators = {n: MetricsAccumulator() for n in names}
    for batch, expected in zip(samples, references):
        for name, e, got in zip(names, expected, session.run(names, batch)):
            accumulators[name].add(e, got)
    return _harm({n: a.result() for n, a in accumulators.items()}, _budgets(state.builder))


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    data = np.load(MINILM / "calib_docs.npz")
    calib = {k: data[k] for k in data.files}
    config = QuantConfig(verify=VerifyConfig(sensitivity_samples=0))
    given = RunInputs(str(MINILM / "all-MiniLM-L6-v2.onnx"), calib, None, None, None, None)
    until_verified = tuple(s for s in STEPS if s.name in ("load", "resolve", "plan", "smooth", "calibrate", "rewrite", "verify"))
    with shared_weight_quantization(), run_files():
        state = run_steps(RunState(given, config), until_verified)
        samples = first_samples(state.verified.batches, args.samples, None)
        references = [o for _, o in zip(samples, state.verified.float_outputs)]
        rankings, seconds = {}, {}
        for kernels, deployed in (("deployed", _deployed_kernels(state, samples[0])), ("exact", None)):
            start = time.perf_counter()
            result = layer_sensitivity(state.builder, state.quantized.plans, samples, True, deployed)
            seconds[kernels] = time.perf_counter() - start
            assert result.kernels == kernels, result.kernels_reason
            rankings[kernels] = {n.name: n.harm for n in result.nodes}
        start = time.perf_counter()
        real = {p.node.name: real_harm(state, samples, [r for _, r in references], p.node.name) for p in state.quantized.plans}
        seconds["real (one model per node)"] = time.perf_counter() - start
    names = sorted(real)
    real_order = sorted(names, key=lambda n: -real[n])
    summary = {}
    for kernels, harms in rankings.items():
        order = sorted(names, key=lambda n: -harms[n])
        row = {"spearman": spearman([harms[n] for n in names], [real[n] for n in names]),
               **{f"top{k}": len(set(order[:k]) & set(real_order[:k])) for k in (3, 5, 10)},
               "median_ratio": float(np.median([harms[n] / real[n] for n in names if real[n] > 0])),
               "seconds": seconds[kernels]}
        summary[kernels] = row
    count = sum(len(next(iter(b.values()))) for b in samples)
    table = Table(("ranking on", "Spearman", "top 3", "top 5", "top 10", "median harm / real", "seconds"), tuple(
        (kernels, f"{row['spearman']:.3f}", f"{row['top3']}/3", f"{row['top5']}/5", f"{row['top10']}/10",
         f"{row['median_ratio']:.3f}", f"{row['seconds']:.1f}") for kernels, row in summary.items()),
        caption=f"all-MiniLM-L6-v2, {len(names)} nodes, {count} samples: each ranking against the real one",
        note=f"The real ranking (one model per node) took {seconds['real (one model per node)']:.1f} s; its top 5: "
             f"{', '.join(real_order[:5])}.")
    write_result(args.results, __file__, "Sensitivity: which kernels predict the real ranking", [table],
                 {"summary": summary, "real": real, "rankings": rankings, "seconds": seconds})


if __name__ == "__main__":
    main()
