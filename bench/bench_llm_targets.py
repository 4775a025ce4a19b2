"""Targets on SmolLM2-135M: perplexity on dev_windows.npz as deployed (ORT_ENABLE_ALL) and exact (ORT_DISABLE_ALL),
onnxq per target and mode next to onnxruntime's quantize_dynamic, same text and machine, one run.

    bash ../shared/models/smollm2/build.sh      # once, ~3 minutes
    python bench/bench_llm_targets.py [--model ~/.cache/onnxq-models/smollm2/smollm2_135m.onnx] [--windows 16] \
        [--results bench/results]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (SHARED, Table, add_results_argument, fresh, session, session_perplexity,  # noqa: E402
                    write_result)

import onnxq  # noqa: E402

DATA = SHARED / "smollm2"
DEFAULT_MODEL = Path.home() / ".cache" / "onnxq-models" / "smollm2" / "smollm2_135m.onnx"


def perplexity(path: Path, windows: dict[str, np.ndarray], optimize: bool) -> float:
    return session_perplexity(session(path, optimize=optimize), windows)


def smollm2_inputs(args: argparse.Namespace, calib_windows: int) -> tuple[Path, Path, dict, dict]:
    """The model (built by build.sh), the output folder, the first args.windows dev windows and the first
    calib_windows calibration windows."""
    model = Path(args.model)
    if not model.is_file():
        sys.exit(f"needs {model}: bash ../shared/models/smollm2/build.sh")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev, calib = np.load(DATA / "dev_windows.npz"), np.load(DATA / "calib_windows.npz")
    return (model, out, {k: dev[k][:args.windows] for k in dev.files},
            {k: calib[k][:calib_windows] for k in calib.files})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--windows", type=int, default=16, help="dev windows scored (of 48)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    add_results_argument(parser)
    args = parser.parse_args()
    model, out, windows, calib = smollm2_inputs(args, 32)
    paths = {}
    for target in ("portable", "x86-vnni"):
        for mode in ("static", "dynamic"):
            config = onnxq.QuantConfig(target=target, mode=mode, verify=onnxq.VerifyConfig(enabled=False),
                                       calibration=onnxq.CalibrationConfig(method="minmax"))
            path = out / f"smollm2.{target}.{mode}.onnx"
            onnxq.quantize(model, calib if mode == "static" else None, output=path, config=config)
            paths[f"onnxq {mode} target={target}"] = path
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.disable(logging.WARNING)
    paths["ORT quantize_dynamic"] = fresh(out / "smollm2.ort.dynamic.onnx")
    quantize_dynamic(model, paths["ORT quantize_dynamic"], weight_type=QuantType.QInt8, use_external_data_format=True)
    results = {"float": perplexity(model, windows, optimize=False)}
    for name, path in paths.items():
        results[name] = {"deployed": perplexity(path, windows, True), "exact": perplexity(path, windows, False)}
    rows = (("float", "—", f"{results['float']:.2f}"),) + tuple(
        (name, f"{results[name]['deployed']:.2f}", f"{results[name]['exact']:.2f}") for name in paths)
    table = Table(("model", "deployed (ORT_ENABLE_ALL)", "exact (ORT_DISABLE_ALL)"), rows,
                  caption=f"SmolLM2-135M, perplexity on the first {args.windows} dev windows")
    write_result(args.results, __file__, "SmolLM2-135M: targets, deployed and exact", [table], results)


if __name__ == "__main__":
    main()
