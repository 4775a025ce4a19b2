"""python -m onnxq calibrate | merge | verify: the commands beside quantization."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from onnxq.data.dataset import data_files
from onnxq.calibration.summary import CalibrationSummary
from onnxq.calibration_api import calibrate, merge_calibrations
from onnxq.cli.args import (Parser, add_calibration_flags, add_custom_ops_flag, add_layout_flags, add_providers_flag,
                            add_tolerance_flags, add_verbose_flag, config_from_args, custom_op_libraries_from_args,
                            layout_from_args, path_arg, verify_config_from_args)
from onnxq.errors import CalibrationDataError, ConfigError
from onnxq.io import run_files, write_output
from onnxq.config import QuantConfig
from onnxq.data import add_data_source_flags, data_config_from_args
from onnxq.cli.data_command import data_command
from onnxq.cli.progress import ProgressBar, count_samples
from onnxq.report.record import SCHEMA_VERSION
from onnxq.report.summary import format_verification
from onnxq.targets import target_names
from onnxq.verify.api import verify
from onnxq.verify.result import EXIT_CODES, verification_result

__all__ = ["SUBCOMMANDS", "build_calibrate_parser", "build_merge_parser", "build_verify_parser"]

EXIT_OK = 0


def build_verify_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m onnxq verify", usage="%(prog)s FLOAT_MODEL QUANT_MODEL --data DATA [options]",
        description="Check a quantized model against its float model on every provider present: every output "
                    "against its tolerance, the providers against each other, and where each node ran.",
        epilog="Exit status: 0 within tolerance, 1 out of tolerance, 2 bad input (a second model that quantizes "
               "nothing, the two swapped), 3 internal error, 4 not shown (the data cannot show a task bar), 130 "
               "interrupted.")
    p.add_argument("float_model", type=path_arg, metavar="FLOAT_MODEL", help="the float .onnx model")
    p.add_argument("quant_model", type=path_arg, metavar="QUANT_MODEL", help="its quantized .onnx model")
    p.add_argument("--data", type=path_arg, metavar="DATA", required=True,
                   help="inputs: .npz, or a folder of .npz / <input>.npy; or text, images, one .npy (data sources)")
    p.add_argument("--config", type=path_arg, metavar="TOML",
                   help="QuantConfig as TOML (its [verify] table applies)")
    p.add_argument("--report", type=path_arg, metavar="JSON", help="write the verification as JSON")
    p.add_argument("--target", choices=target_names(),
                   help="CPUs the model must hold on (default portable: AVX2 is emulated where this CPU is not one)")
    add_tolerance_flags(p)
    add_providers_flag(p)
    add_layout_flags(p)
    add_data_source_flags(p)
    add_custom_ops_flag(p)
    add_verbose_flag(p)
    return p


def build_calibrate_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m onnxq calibrate", usage="%(prog)s MODEL --calib DATA -o JSON [options]",
        description="Calibrate once (every candidate activation, with histograms) and write the summary: reuse it "
                    "with --calib-cache under any method or setting, or run it on shards of the data and merge.")
    p.add_argument("model", type=path_arg, metavar="MODEL", help="the float .onnx model")
    p.add_argument("--calib", type=path_arg, metavar="DATA", required=True,
                   help=".npz, or a folder of .npz / <input>.npy; or text, images, one .npy (data sources)")
    p.add_argument("-o", "--output", type=path_arg, metavar="JSON", required=True, help="summary file to write")
    p.add_argument("--config", type=path_arg, metavar="TOML",
                   help="QuantConfig as TOML (its [calibration] table applies)")
    p.add_argument("--smooth", metavar="off|ALPHA|auto",
                   help="also keep the per-channel statistics SmoothQuant needs (any value but off)")
    p.add_argument("--weights", choices=["int4", "uint4"],
                   help="also keep each weight's XᵀX, which GPTQ fits 4-bit weights to (quantize --weights int4 "
                        "--calib-cache then reads no data)")
    p.add_argument("--ray", action="store_true",
                   help="calibrate the .npz shards of the --calib folder on Ray workers (pip install 'onnxq[ray]'), "
                        "their partial summaries merged exactly")
    p.add_argument("--workers", type=int, default=2, metavar="N", help="--ray: workers (actors), default 2")
    p.add_argument("--ray-address", metavar="ADDRESS",
                   help="--ray: a running cluster (auto, or ray://host:port); default: a local one for this run")
    add_calibration_flags(p)
    add_data_source_flags(p)
    add_custom_ops_flag(p)
    add_verbose_flag(p)
    return p


def build_merge_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m onnxq merge", usage="%(prog)s JSON [JSON ...] -o JSON [-v]",
               description="Merge calibration summaries of shards of the data into one.")
    p.add_argument("summaries", type=path_arg, nargs="+", metavar="JSON", help="the summaries to merge")
    p.add_argument("-o", "--output", type=path_arg, metavar="JSON", required=True, help="the merged summary to write")
    add_verbose_flag(p)
    return p


def _calibrate_command(argv: list[str]) -> int:
    args = build_calibrate_parser().parse_args(argv)
    with run_files() as files:  # the summary is written when the run ends well, or not at all
        if args.config:
            files.read(args.config, "the config file", ConfigError)
        files.claim(args.output, "output")
        config = config_from_args(args)
        if args.ray:
            return _calibrate_on_ray(args, config)
        progress = ProgressBar(count_samples(args.calib, config.calibration.max_samples))
        try:
            summary = calibrate(args.model, args.calib, config=config, progress=progress)
            summary.save(args.output)
        finally:
            progress.close()
    print(f"onnxq: wrote {args.output}: {_contents(summary)}, model {summary.model_fingerprint[:24]}…")
    return EXIT_OK


def _calibrate_on_ray(args: argparse.Namespace, config: QuantConfig) -> int:
    """Each .npz of the --calib folder one shard, read in turn; calibration.max_samples bounds them all."""
    from onnxq.distributed import calibrate_on_ray  # Ray itself is imported only there, and only now

    if not Path(args.calib).is_dir():
        raise ConfigError("--ray calibrates a folder of .npz shards, one per file: put the data in a folder")
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: give at least 1")
    shards, arrays = data_files(Path(args.calib), "calibration")
    if arrays:
        raise ConfigError("--ray needs .npz shards (one file each), not a folder of per-input .npy arrays")
    summary = calibrate_on_ray(args.model, shards, config=config, workers=args.workers, address=args.ray_address)
    summary.save(args.output)
    print(f"onnxq: wrote {args.output}: {_contents(summary)}, {len(shards)} shards on "
          f"{min(args.workers, len(shards))} Ray workers, model {summary.model_fingerprint[:24]}…")
    return EXIT_OK


def _contents(summary: CalibrationSummary) -> str:
    moments = "" if summary.moments is None else f", second moments of {len(summary.moments.weights)} weights"
    return f"{len(summary.observers)} tensors{moments}, {summary.samples} samples"


def _merge_command(argv: list[str]) -> int:
    args = build_merge_parser().parse_args(argv)
    with run_files() as files:
        for path in args.summaries:
            files.read(path, "a calibration summary to merge", CalibrationDataError)
        files.claim(args.output, "output")
        summary = merge_calibrations(args.summaries)
        summary.save(args.output)
    print(f"onnxq: merged {len(args.summaries)} summaries into {args.output}: {summary.samples} samples")
    return EXIT_OK


def _verify_command(argv: list[str]) -> int:
    args = build_verify_parser().parse_args(argv)
    with run_files() as files:
        if args.config:
            files.read(args.config, "the config file", ConfigError)
        if args.report:
            files.claim(args.report, "--report")
        base = QuantConfig.from_toml(args.config) if args.config else QuantConfig()
        config = base.replace(verify=verify_config_from_args(base.verify, args),
                              calibration=layout_from_args(base.calibration, args),
                              data=data_config_from_args(base.data, args),
                              custom_op_libraries=custom_op_libraries_from_args(base, args))
        verification = verify(args.float_model, args.quant_model, args.data, config=config,
                              target=args.target or base.target)
        if args.report:
            text = json.dumps({"schema_version": SCHEMA_VERSION, "passed": verification.passed,
                               "verdict": verification.verdict,
                               "result": verification_result(verification), "verification": verification.to_dict()},
                              indent=2)
            write_output(args.report, lambda staged: staged.write_text(text + "\n"))
    print("\n".join(format_verification(verification, verbose=args.verbose)))
    print(f"result: {verification_result(verification)}")
    return EXIT_CODES[verification.verdict]


SUBCOMMANDS = {"calibrate": _calibrate_command, "merge": _merge_command, "verify": _verify_command,
               "data": data_command}
