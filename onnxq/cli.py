"""python -m onnxq: thin argument parsing over onnxq.quantize(); exit 0 ok, 1 out of tolerance, 2 bad input."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

from onnxq.calibration.api import calibrate, merge_calibrations
from onnxq.config import QScheme, QuantConfig, VerifyConfig
from onnxq.errors import ConfigError, OnnxqError
from onnxq.numerics import METHODS
from onnxq.pipeline import default_output_path, quantize
from onnxq.html_report import render_html
from onnxq.report import SCHEMA_VERSION
from onnxq.summary import format_summary, format_verification
from onnxq.verify.api import verify

__all__ = ["main", "build_parser", "build_calibrate_parser", "build_merge_parser", "build_verify_parser"]

EXIT_OK, EXIT_OUT_OF_TOLERANCE, EXIT_BAD_INPUT = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m onnxq",
        description="Quantize a float ONNX model to int8 (MatMul/Gemm/Gather) and verify it on ONNX Runtime.",
        epilog="Exit status: 0 within tolerance, 1 out of tolerance, 2 bad input. Other commands: "
               "python -m onnxq calibrate (calibration on its own), merge (shard summaries), verify (check any "
               "quantized model); each takes --help.")
    p.add_argument("model", help="float .onnx model")
    p.add_argument("--calib", metavar="DATA", help=".npz (arrays keyed by input name, first axis = samples) or a "
                   "folder of .npz; without it activations are quantized dynamically at run time")
    p.add_argument("-o", "--output", help="output path (default: MODEL.int8.onnx beside the model)")
    p.add_argument("--verify-data", metavar="DATA", help="held-out inputs for verification (default: every 10th "
                   "calibration sample is held back)")
    p.add_argument("--config", metavar="TOML", help="QuantConfig as TOML; flags override it")
    p.add_argument("--report", metavar="JSON", help="write the report as JSON")
    p.add_argument("--mode", choices=["auto", "static", "dynamic"],
                   help="auto (default): static with --calib, else dynamic")
    p.add_argument("--activation-dtype", choices=["uint8", "int8"],
                   help="uint8 asymmetric (default, fastest on x86) or int8 symmetric")
    p.add_argument("--per-tensor", action="store_true", default=None, help="one weight scale per tensor")
    p.add_argument("--quantize-attention", action="store_true", default=None,
                   help="also quantize MatMuls whose two inputs are activations (Q·Kᵀ, scores·V)")
    p.add_argument("--gemm-bias", choices=["int32", "float"], help="Gemm bias storage (default int32)")
    p.add_argument("--exclude", action="append", metavar="NODE", help="keep this node float (repeatable)")
    p.add_argument("--exclude-op", action="append", metavar="OP", help="keep this op type float (repeatable)")
    p.add_argument("--exclude-regex", metavar="RE", help="keep nodes whose names match RE in float")
    _add_calibration_flags(p)
    p.add_argument("--method", choices=list(METHODS),
                   help="how activation ranges are chosen from the calibration data (default percentile)")
    p.add_argument("--percentile", type=float, metavar="P", help="for --method percentile (default 99.999)")
    p.add_argument("--calib-cache", metavar="JSON", help="calibration summary: read if it exists (no calibration "
                   "pass), else written after calibrating; see python -m onnxq calibrate / merge")
    _add_tolerance_flags(p)
    p.add_argument("--tolerance", action="append", metavar="[OUTPUT:]METRIC=VALUE",
                   help="accuracy target (metric: cosine, sqnr, max_abs), e.g. cosine=0.995 or "
                        "sentence_embedding:cosine=0.995; repeatable. Turns on fallback: when out of tolerance, the "
                        "most sensitive nodes are kept float, fewest first, until the target is met")
    p.add_argument("--no-fallback", action="store_true", help="with --tolerance: only gate, do not fall back")
    p.add_argument("--no-sensitivity", action="store_true", help="skip the per-layer sensitivity analysis")
    p.add_argument("--html", metavar="HTML", help="write a human report with a per-layer error chart")
    p.add_argument("--no-verify", action="store_true", help="skip verification")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the result line")
    p.add_argument("-v", "--verbose", action="store_true", help="log what each step does")
    return p


def _add_tolerance_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-cosine", type=float, metavar="X", help="tolerance: mean cosine per output (default 0.98)")
    p.add_argument("--min-sqnr", type=float, metavar="DB", help="tolerance: SQNR per output in dB")
    p.add_argument("--max-abs", type=float, metavar="X", help="tolerance: max abs error per output")
    p.add_argument("--providers", metavar="LIST",
                   help="execution providers to verify on, comma-separated: auto (default: CPU, plus CUDA when "
                        "present), cpu, cuda")


_METRICS = {"cosine": "min_cosine", "sqnr": "min_sqnr_db", "max_abs": "max_abs_error"}


def _apply_tolerance_specs(verify: VerifyConfig, specs: list[str]) -> VerifyConfig:
    """--tolerance [OUTPUT:]METRIC=VALUE entries onto the verify config."""
    tolerance, per_output = verify.tolerance, dict(verify.output_tolerances)
    for spec in specs:
        target, _, assignment = spec.rpartition(":")
        metric, _, value = assignment.partition("=")
        if metric not in _METRICS or not value:
            raise ConfigError(f"--tolerance {spec!r}: expected [OUTPUT:]METRIC=VALUE with METRIC one of "
                              f"{', '.join(_METRICS)}")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"--tolerance {spec!r}: {value!r} is not a number") from None
        if target:
            per_output[target] = dataclasses.replace(per_output.get(target, tolerance), **{_METRICS[metric]: number})
        else:
            tolerance = dataclasses.replace(tolerance, **{_METRICS[metric]: number})
    return dataclasses.replace(verify, tolerance=tolerance, output_tolerances=per_output)


def _verify_config_from_args(verify: VerifyConfig, args: argparse.Namespace) -> VerifyConfig:
    tolerance = _changed(verify.tolerance, min_cosine=args.min_cosine, min_sqnr_db=args.min_sqnr,
                         max_abs_error=args.max_abs)
    providers = tuple(p.strip() for p in args.providers.split(",")) if args.providers else None
    verify = _changed(verify, tolerance=tolerance, providers=providers)
    if getattr(args, "tolerance", None):
        verify = _apply_tolerance_specs(verify, args.tolerance)
        verify = dataclasses.replace(verify, fallback=not getattr(args, "no_fallback", False))
    return verify


def build_verify_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m onnxq verify",
        description="Check a quantized model against its float model on every provider present: every output "
                    "against its tolerance, the providers against each other, and where each node ran.",
        epilog="Exit status: 0 within tolerance, 1 out of tolerance, 2 bad input.")
    p.add_argument("float_model")
    p.add_argument("quant_model")
    p.add_argument("--data", metavar="DATA", required=True, help="inputs: .npz, or a folder of .npz / <input>.npy")
    p.add_argument("--config", metavar="TOML", help="QuantConfig as TOML (its [verify] table applies)")
    p.add_argument("--tolerance", action="append", metavar="[OUTPUT:]METRIC=VALUE",
                   help="tolerance (metric: cosine, sqnr, max_abs); repeatable")
    p.add_argument("--report", metavar="JSON", help="write the verification as JSON")
    _add_tolerance_flags(p)
    return p


def _add_calibration_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calib-batch-size", type=int, metavar="N", help="samples per calibration run (default 8)")
    p.add_argument("--calib-samples", type=int, metavar="N", help="use only the first N calibration samples")


def build_calibrate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m onnxq calibrate",
        description="Calibrate once (every candidate activation, with histograms) and write the summary: reuse it "
                    "with --calib-cache under any method or setting, or run it on shards of the data and merge.")
    p.add_argument("model", help="float .onnx model")
    p.add_argument("--calib", metavar="DATA", required=True, help=".npz, or a folder of .npz / <input>.npy")
    p.add_argument("-o", "--output", metavar="JSON", required=True, help="summary file to write")
    p.add_argument("--config", metavar="TOML", help="QuantConfig as TOML (its [calibration] table applies)")
    _add_calibration_flags(p)
    return p


def build_merge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m onnxq merge",
                                description="Merge calibration summaries of shards of the data into one.")
    p.add_argument("summaries", nargs="+", metavar="JSON")
    p.add_argument("-o", "--output", metavar="JSON", required=True)
    return p


def config_from_args(args: argparse.Namespace) -> QuantConfig:
    config = QuantConfig.from_toml(args.config) if args.config else QuantConfig()
    if not hasattr(args, "mode"):  # the calibrate subcommand: only calibration settings apply
        return config.replace(calibration=_changed(config.calibration, batch_size=args.calib_batch_size,
                                                   max_samples=args.calib_samples))
    top = {k: v for k, v in {
        "mode": args.mode,
        "per_channel": False if args.per_tensor else None,
        "quantize_activation_matmul": args.quantize_attention,
        "gemm_bias": args.gemm_bias,
        "exclude_nodes": tuple(args.exclude) if args.exclude else None,
        "exclude_op_types": tuple(args.exclude_op) if args.exclude_op else None,
        "exclude_regex": args.exclude_regex,
    }.items() if v is not None}
    if args.activation_dtype:
        top["activations"] = QScheme(args.activation_dtype, symmetric=args.activation_dtype == "int8")
    calibration = _changed(config.calibration, batch_size=args.calib_batch_size, max_samples=args.calib_samples,
                           method=getattr(args, "method", None), percentile=getattr(args, "percentile", None))
    verify = _verify_config_from_args(config.verify, args)
    verify = _changed(verify, enabled=False if args.no_verify else None,
                      sensitivity_samples=0 if args.no_sensitivity else None)
    return config.replace(**top, calibration=calibration, verify=verify)


def _changed(obj, **changes):
    return dataclasses.replace(obj, **{k: v for k, v in changes.items() if v is not None})


class _Progress:
    """A one-line progress bar on stderr (only when it is a terminal)."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.done = 0
        self.start = time.perf_counter()
        self.live = sys.stderr.isatty()

    def __call__(self, samples: int) -> None:
        self.done += samples
        if not self.live:
            return
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        if self.total:
            filled = int(30 * min(self.done / self.total, 1.0))
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
        else:
            bar = f"{self.done}"
        sys.stderr.write(f"\rcalibrating {bar} samples, {rate:.1f} samples/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.live and self.done:
            sys.stderr.write("\n")


def _count_samples(source: str | None, limit: int | None) -> int | None:
    """Samples in an .npz file or folder, from the array headers alone; None when unknown."""
    if source is None:
        return None
    path = Path(source)
    files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
    total = 0
    try:
        for file in files:
            with zipfile.ZipFile(file) as archive:
                name = archive.namelist()[0]
                with archive.open(name) as f:
                    major, _ = np.lib.format.read_magic(f)
                    read_header = (np.lib.format.read_array_header_1_0 if major == 1
                                   else np.lib.format.read_array_header_2_0)
                    shape = read_header(f)[0]
                total += shape[0] if shape else 0
    except Exception:  # only a progress-bar nicety: the real reader reports bad files
        return None
    return min(total, limit) if limit else total


def _calibrate_command(argv: list[str]) -> int:
    args = build_calibrate_parser().parse_args(argv)
    config = config_from_args(args)
    progress = _Progress(_count_samples(args.calib, config.calibration.max_samples))
    try:
        summary = calibrate(args.model, args.calib, config=config, progress=progress)
        path = summary.save(args.output)
    finally:
        progress.close()
    print(f"onnxq: wrote {path}: {len(summary.observers)} tensors, {summary.samples} samples, "
          f"model {summary.model_fingerprint[:24]}…")
    return EXIT_OK


def _merge_command(argv: list[str]) -> int:
    args = build_merge_parser().parse_args(argv)
    summary = merge_calibrations(args.summaries)
    path = summary.save(args.output)
    print(f"onnxq: merged {len(args.summaries)} summaries into {path}: {summary.samples} samples")
    return EXIT_OK


def _verify_command(argv: list[str]) -> int:
    args = build_verify_parser().parse_args(argv)
    base = QuantConfig.from_toml(args.config) if args.config else QuantConfig()
    verification = verify(args.float_model, args.quant_model, args.data,
                          config=_verify_config_from_args(base.verify, args))
    print("\n".join(format_verification(verification)))
    print("result: within tolerance" if verification.passed else "result: OUT OF TOLERANCE")
    if args.report:
        Path(args.report).write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                                 "verification": verification.to_dict()}, indent=2) + "\n")
    return EXIT_OK if verification.passed else EXIT_OUT_OF_TOLERANCE


SUBCOMMANDS = {"calibrate": _calibrate_command, "merge": _merge_command, "verify": _verify_command}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
        try:
            return SUBCOMMANDS[argv[0]](argv[1:])
        except OnnxqError as e:
            print(f"onnxq: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s: %(message)s")
    progress = None
    try:
        config = config_from_args(args)
        output = Path(args.output) if args.output else default_output_path(args.model)
        progress = _Progress(_count_samples(args.calib, config.calibration.max_samples))
        result = quantize(args.model, args.calib, output=output, config=config, verify_data=args.verify_data,
                          calibration_cache=args.calib_cache, progress=progress)
    except OnnxqError as e:
        if progress is not None:
            progress.close()
        print(f"onnxq: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    progress.close()
    report = result.report
    if args.report:
        Path(args.report).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    if args.html:
        Path(args.html).write_text(render_html(report))
    if args.quiet:
        print(f"onnxq: wrote {result.output}; " + {None: "not verified", True: "within tolerance",
                                                   False: "OUT OF TOLERANCE"}[report.passed])
    else:
        print(format_summary(report))
    return EXIT_OUT_OF_TOLERANCE if report.passed is False else EXIT_OK
