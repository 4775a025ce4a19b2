"""Same numbers out: quantize a fixed set of configurations and record what comes out, so that two versions of onnxq
(a refactor and the code before it) can be compared bit for bit.

    python bench/same_numbers.py record OUT [--only NAME,...] [--no-minilm]
    PYTHONPATH=/path/to/old/checkout python bench/same_numbers.py record OUT_OLD
    python bench/same_numbers.py compare OUT_OLD OUT

record: for each configuration, the quantized model's outputs on fixed inputs under ORT_ENABLE_ALL (the deployed
kernels) and ORT_DISABLE_ALL (the exact quantization), and the JSON report less its timings. compare: outputs
must be byte-identical; reports equal except for timings and for fields one side lacks (new fields), each listed.
Uses only the public API (onnxq.quantize, QuantConfig), so that an older checkout runs it too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "models"
MINILM = REPO.parent / "shared" / "models" / "minilm"


def _configs(onnxq) -> dict:
    """name → (model, calibration, verify_data, QuantConfig, eval inputs)."""
    c = onnxq
    mlp, mlp_data = SAMPLES / "mlp.onnx", SAMPLES / "mlp_calib.npz"
    tiny, tiny_data = SAMPLES / "tiny_transformer.onnx", SAMPLES / "tiny_transformer_calib.npz"
    int4 = c.QScheme("int4", symmetric=True)
    fallback = c.VerifyConfig(tolerance=c.Tolerance(min_sqnr_db=36.0), fallback=True)
    runs = {
        "mlp static": (mlp, mlp_data, None, c.QuantConfig()),
        "mlp dynamic": (mlp, mlp_data, None, c.QuantConfig(mode="dynamic")),
        "mlp qoperator": (mlp, mlp_data, None, c.QuantConfig(format="qoperator")),
        "mlp fallback": (mlp, mlp_data, None, c.QuantConfig(verify=fallback)),
        "mlp x86-vnni": (mlp, mlp_data, None, c.QuantConfig(target="x86-vnni")),
        "mlp recipe auto": (mlp, mlp_data, None, c.QuantConfig(
            recipe="auto", verify=c.VerifyConfig(tolerance=c.Tolerance(min_cosine=0.99999)))),
        "tiny static": (tiny, tiny_data, None, c.QuantConfig()),
        "tiny dynamic, no data": (tiny, None, None, c.QuantConfig()),
        "tiny per-token smooth auto": (tiny, tiny_data, None, c.QuantConfig(activation_granularity="per-token",
                                                                            smooth="auto")),
        "tiny recipe auto": (tiny, tiny_data, None, c.QuantConfig(
            recipe="auto", verify=c.VerifyConfig(tolerance=c.Tolerance(min_cosine=0.9999)))),
        "tiny int4 with data": (tiny, tiny_data, None, c.QuantConfig(weights=int4)),
        "tiny int4 without data": (tiny, None, None, c.QuantConfig(weights=int4)),
        "tiny weight-only int8": (tiny, tiny_data, None, c.QuantConfig(mode="weight-only")),
        "tiny int4 fallback": (tiny, tiny_data, None, c.QuantConfig(
            weights=int4, verify=c.VerifyConfig(tolerance=c.Tolerance(min_cosine=0.9995), fallback=True))),
    }
    if MINILM.is_dir():
        model, docs, evals = MINILM / "all-MiniLM-L6-v2.onnx", MINILM / "calib_docs.npz", MINILM / "eval_sentences.npz"
        runs["minilm static"] = (model, docs, evals, c.QuantConfig())
        runs["minilm dynamic"] = (model, None, evals, c.QuantConfig(mode="dynamic"))
        runs["minilm int4"] = (model, docs, evals, c.QuantConfig(weights=int4))
    return runs


def _eval_inputs(model: Path) -> dict[str, np.ndarray]:
    if model.name == "mlp.onnx":
        data, count = np.load(SAMPLES / "mlp_calib.npz"), 16
    elif model.name == "tiny_transformer.onnx":
        data, count = np.load(SAMPLES / "tiny_transformer_calib.npz"), 8
    else:
        data, count = np.load(MINILM / "eval_sentences.npz"), 16
    return {k: data[k][:count] for k in data.files}


def _outputs(model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx_ir as ir

    proto = ir.serde.serialize_model(model).SerializeToString()
    out = {}
    for level, name in ((ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "enable"),
                        (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "disable")):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.intra_op_num_threads = 1  # one thread: the same summation order every run
        session = ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"])
        for o, value in zip(session.get_outputs(), session.run(None, inputs)):
            out[f"{o.name}@{name}"] = value
    return out


def record(folder: Path, only: set[str] | None, minilm: bool) -> None:
    import onnxq

    folder.mkdir(parents=True, exist_ok=True)
    for name, (model, calibration, verify_data, config) in _configs(onnxq).items():
        if (only and name not in only) or (not minilm and name.startswith("minilm")):
            continue
        calib = None if calibration is None else str(calibration)
        verify = None if verify_data is None else str(verify_data)
        result = onnxq.quantize(str(model), calib, config=config, verify_data=verify)
        np.savez(folder / f"{name}.npz", **_outputs(result.model, _eval_inputs(model)))
        report = result.report.to_dict()
        report.pop("seconds", None)
        # Timings are measurements, not results: the default speed check's figures and its note differ run to run.
        report["speed"] = []
        report["notes"] = [n for n in report.get("notes", []) if not n.startswith("SPEED:")]
        (folder / f"{name}.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
        print(f"recorded {name}", flush=True)


def _differences(old, new, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                found.append(f"{path}/{key}: only in {'new' if key not in old else 'old'}")
            else:
                found += _differences(old[key], new[key], f"{path}/{key}")
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in _differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {str(old)[:80]} -> {str(new)[:80]}"]


def compare(old: Path, new: Path) -> int:
    failures = 0
    for report in sorted(old.glob("*.json")):
        name = report.stem
        if not (new / f"{name}.json").exists():
            print(f"{name}: not recorded in {new}")
            continue
        a, b = np.load(old / f"{name}.npz"), np.load(new / f"{name}.npz")
        changed = [k for k in a.files if k not in b.files or a[k].tobytes() != b[k].tobytes()]
        diffs = _differences(json.loads(report.read_text()), json.loads((new / f"{name}.json").read_text()))
        added = [d for d in diffs if d.endswith("only in new")]
        other = [d for d in diffs if d not in added]
        failures += bool(changed)
        print(f"{name}: outputs {'IDENTICAL' if not changed else 'DIFFER: ' + ', '.join(changed)}; report "
              f"{'equal' if not other else f'{len(other)} difference(s)'}"
              + (f" (+{len(added)} new field(s))" if added else ""))
        for line in other[:12]:
            print(f"    {line}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--only", help="comma-separated configuration names")
    rec.add_argument("--no-minilm", action="store_true")
    cmp = sub.add_parser("compare")
    cmp.add_argument("old")
    cmp.add_argument("new")
    args = parser.parse_args()
    if args.command == "record":
        record(Path(args.out), set(args.only.split(",")) if args.only else None, not args.no_minilm)
        return 0
    return compare(Path(args.old), Path(args.new))


if __name__ == "__main__":
    sys.exit(main())
