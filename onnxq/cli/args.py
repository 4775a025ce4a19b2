"""Command-line flags onto the one QuantConfig (flags override a --config TOML file)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing

from onnxq.cli.parser import Parser, path_arg
from onnxq.config import CalibrationConfig, QScheme, QuantConfig, VerifyConfig
from onnxq.config.schema import TaskKind
from onnxq.config.checks import KNOWN_PROVIDER_ALIASES, TOPK_MAX
from onnxq.data import data_config_from_args
from onnxq.errors import ConfigError, closest, did_you_mean, one_line

TASK_KINDS = typing.get_args(TaskKind)

__all__ = ["Parser", "path_arg", "add_tolerance_flags", "add_providers_flag", "add_calibration_flags", "add_verbose_flag",
           "config_from_args", "verify_config_from_args", "add_custom_ops_flag", "custom_op_libraries_from_args"]


def add_custom_ops_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--custom-ops", type=path_arg, action="append", metavar="LIBRARY",
                   help="a custom-operator library every session registers: a path, or a package with "
                        "get_library_path() (onnxruntime_extensions); repeatable")


def custom_op_libraries_from_args(config, args: argparse.Namespace) -> tuple[str, ...]:
    """The config file's custom_op_libraries, then --custom-ops'."""
    return tuple(dict.fromkeys([*config.custom_op_libraries, *(getattr(args, "custom_ops", None) or ())]))


def add_verbose_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log each step, print the summary's details (every reason, the kernels ORT ran, how each "
                        "target was checked) and an internal error's traceback")


def add_tolerance_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-cosine", type=float, metavar="X", help="mean cosine per output (default 0.98)")
    p.add_argument("--min-sqnr", type=float, metavar="DB", help="SQNR per output, in dB")
    p.add_argument("--max-abs", type=float, metavar="X", help="largest absolute error per output")
    p.add_argument("--tolerance", action="append", metavar="[OUTPUT:]METRIC=VALUE",
                   help="any bar, for one output or all: cosine, sqnr, max_abs, argmax, topK (K = 1 … 10), task, "
                        "threshold, perplexity; e.g. logits:top5=0.999; repeatable")
    p.add_argument("--task-metric", metavar="KIND|MODULE:FUNCTION",
                   help=f"the task measure gated: a kind ({', '.join(TASK_KINDS)}; default auto) or your function, "
                        "MODULE:FUNCTION or FILE.py:FUNCTION")
    p.add_argument("--task-max-drop", type=float, metavar="X",
                   help="with your --task-metric function: how far its score may fall below float's (default 0.01)")


def add_providers_flag(p: argparse.ArgumentParser) -> None:
    names = ", ".join(KNOWN_PROVIDER_ALIASES)  # every registered provider's short name (targets.providers)
    p.add_argument("--providers", metavar="LIST",
                   help=f"execution providers to verify on, comma-separated: auto (default: CPU, CUDA where present, "
                        f"and the target's provider), {names}")


_METRICS = {"cosine": "min_cosine", "sqnr": "min_sqnr_db", "max_abs": "max_abs_error", "argmax": "min_argmax_agreement",
            "perplexity": "max_perplexity_ratio", "threshold": "task_threshold"}


def _apply_tolerance_specs(verify: VerifyConfig, specs: list[str]) -> VerifyConfig:
    """--tolerance [OUTPUT:]METRIC=VALUE entries onto the verify config."""
    tolerance, per_output = verify.tolerance, dict(verify.output_tolerances)
    for spec in specs:
        target, _, assignment = spec.rpartition(":")
        metric, _, value = assignment.partition("=")
        top = re.fullmatch(r"top([0-9]+)", metric)
        if metric not in _METRICS and top is None and metric != "task" and value:
            known = [*_METRICS, "task", *(f"top{k}" for k in range(1, TOPK_MAX + 1))]
            match = closest(metric, known)
            if match is not None:
                raise ConfigError(f"--tolerance {one_line(repr(spec))}: unknown metric {one_line(repr(metric))} — "
                                  f"did you mean {match!r}?")
        if (metric not in _METRICS and top is None and metric != "task") or not value:
            raise ConfigError(f"--tolerance {one_line(repr(spec))}: expected [OUTPUT:]METRIC=VALUE with METRIC one "
                              f"of {', '.join(_METRICS)}, topK (K = 1 … {TOPK_MAX}), task (a share, or a kind: "
                              f"{', '.join(TASK_KINDS)})")
        if metric == "task" and value in TASK_KINDS:
            fields = {"task": value}
        elif metric == "task" and _is_word(value):
            raise ConfigError(f"--tolerance {one_line(repr(spec))}: {_not_a_kind(value)}")
        else:
            fields = _number_fields(spec, metric, value, top)
        if target:
            per_output[target] = dataclasses.replace(per_output.get(target, tolerance), **fields)
        else:
            tolerance = dataclasses.replace(tolerance, **fields)
    return dataclasses.replace(verify, tolerance=tolerance, output_tolerances=per_output)


def _number_fields(spec: str, metric: str, value: str, top: re.Match | None) -> dict:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"--tolerance {spec!r}: {value!r} is not a number") from None
    if top:
        return {"min_topk_agreement": number, "topk": int(top.group(1))}
    return {"min_task_agreement" if metric == "task" else _METRICS[metric]: number}


def _is_word(text: str) -> bool:
    """A value meant as a name (a kind), not a number."""
    try:
        float(text)
    except ValueError:
        return True
    return False


def _not_a_kind(value: str) -> str:
    hint = did_you_mean(value, TASK_KINDS)
    return f"{one_line(repr(value))} is not a task kind" + (hint or f" ({', '.join(TASK_KINDS)})")


def _check_task_kind(value: str | None) -> None:
    """--task-metric without a ':' can only be a kind: a misspelt one is named here, not read as a module."""
    if value is not None and ":" not in value and value not in TASK_KINDS:
        hint = did_you_mean(value, TASK_KINDS)
        raise ConfigError(f"--task-metric {one_line(repr(value))} is not a task kind{hint}" if hint else
                          f"--task-metric {one_line(repr(value))} is neither a task kind ({', '.join(TASK_KINDS)}) "
                          "nor MODULE:FUNCTION")


def verify_config_from_args(verify: VerifyConfig, args: argparse.Namespace) -> VerifyConfig:
    _check_task_kind(args.task_metric)
    tolerance = _changed(verify.tolerance, min_cosine=args.min_cosine, min_sqnr_db=args.min_sqnr,
                         max_abs_error=args.max_abs)
    providers = tuple(p.strip() for p in args.providers.split(",")) if args.providers else None
    kind = args.task_metric if args.task_metric in TASK_KINDS else None
    if kind is not None:  # a kind for every output, the per-output tolerances included
        tolerance = dataclasses.replace(tolerance, task=kind)
        verify = dataclasses.replace(verify, output_tolerances={
            name: dataclasses.replace(t, task=kind) for name, t in verify.output_tolerances.items()})
    verify = _changed(verify, tolerance=tolerance, providers=providers,
                      task_metric=None if kind is not None else args.task_metric, task_max_drop=args.task_max_drop)
    if getattr(args, "tolerance", None):
        verify = _apply_tolerance_specs(verify, args.tolerance)
    if getattr(args, "no_fallback", False):
        verify = dataclasses.replace(verify, fallback=False)
    return verify


def add_calibration_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calib-samples", type=int, metavar="N", help="use only the first N calibration samples")
    p.add_argument("--calib-batch-size", type=int, metavar="N", help="samples per calibration run (default 8)")
    add_layout_flags(p)


def add_layout_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sample-axis", action="append", metavar="INPUT=AXIS",
                   help="the data holds INPUT's samples on AXIS (e.g. state=1 for a state [2, batch, 128]); "
                        "repeatable")
    p.add_argument("--constant-input", action="append", metavar="INPUT",
                   help="the data gives INPUT once, fed whole with every batch; repeatable")
    p.add_argument("--unbatched-input", action="append", metavar="INPUT",
                   help="the model takes INPUT without a batch axis: the data stacks samples, fed one a run; "
                        "repeatable")


def layout_from_args(calibration: CalibrationConfig, args: argparse.Namespace) -> CalibrationConfig:
    """--sample-axis, --constant-input and --unbatched-input over the config's calibration.sample_axes /
    constant_inputs / unbatched_inputs."""
    axes = dict(calibration.sample_axes)
    for spec in args.sample_axis or ():
        name, _, axis = spec.rpartition("=")
        if not name or not axis.isdigit():
            raise ConfigError(f"--sample-axis {spec!r}: expected INPUT=AXIS with AXIS an integer >= 0, e.g. state=1")
        axes[name] = int(axis)
    constant = tuple(dict.fromkeys([*calibration.constant_inputs, *(args.constant_input or ())]))
    unbatched = tuple(dict.fromkeys([*calibration.unbatched_inputs, *(args.unbatched_input or ())]))
    return dataclasses.replace(calibration, sample_axes=axes, constant_inputs=constant, unbatched_inputs=unbatched)


def config_from_args(args: argparse.Namespace) -> QuantConfig:
    """The --config file's settings with the flags over them, checked as a whole once both are applied."""
    config = types.SimpleNamespace(**QuantConfig.file_fields(args.config))
    if not hasattr(args, "mode"):  # the calibrate subcommand: calibration settings, smooth and weights apply
        smooth = _smooth_value(args.smooth)
        weights = QScheme(args.weights, symmetric=args.weights != "uint4") if args.weights else config.weights
        return QuantConfig(**{**vars(config), "weights": weights, "calibration": _changed(
            layout_from_args(config.calibration, args), batch_size=args.calib_batch_size,
            max_samples=args.calib_samples), "smooth": config.smooth if smooth is None else smooth,
            "custom_op_libraries": custom_op_libraries_from_args(config, args),
            "data": data_config_from_args(config.data, args)})
    top = {k: v for k, v in {
        "mode": args.mode,
        "target": args.target,
        "format": args.format,
        "per_channel": False if args.per_tensor else None,
        "quantize_activation_matmul": args.quantize_attention,
        "tie_tables": False if getattr(args, "untie_tables", None) else None,
        "gemm_bias": args.gemm_bias,
        "weight_rounding": getattr(args, "weight_rounding", None),
        "exclude_nodes": tuple(args.exclude) if args.exclude else None,
        "exclude_op_types": tuple(args.exclude_op) if args.exclude_op else None,
        "exclude_regex": args.exclude_regex,
        "activation_granularity": args.activations,
        "smooth": _smooth_value(args.smooth),
        "recipe": args.recipe,
        "compute": args.compute,
        "custom_op_libraries": custom_op_libraries_from_args(config, args),
    }.items() if v is not None}
    if args.weights:
        top["weights"] = QScheme(args.weights, symmetric=args.weights != "uint4")
    blocks = _changed(config.blocks, size=args.block, format=args.block_format,
                      accuracy_level=getattr(args, "accuracy_level", None),
                      vocabulary_bits=getattr(args, "vocabulary_bits", None))
    if blocks != config.blocks:
        top["blocks"] = blocks
    if args.activation_dtype:
        top["activations"] = QScheme(args.activation_dtype, symmetric=args.activation_dtype.startswith("int"))
    calibration = _changed(layout_from_args(config.calibration, args), batch_size=args.calib_batch_size,
                           max_samples=args.calib_samples,
                           method=getattr(args, "method", None), percentile=getattr(args, "percentile", None),
                           range_choice=getattr(args, "range_choice", None))
    verify = verify_config_from_args(config.verify, args)
    verify = _changed(verify, enabled=False if args.no_verify else None,
                      sensitivity_samples=0 if args.no_sensitivity else None, check_speed=args.check_speed,
                      sensitivity="always" if getattr(args, "sensitivity", None) else None,
                      measure_speed=False if args.no_speed else None,
                      never_slower=False if getattr(args, "allow_slower", False) else None)
    return QuantConfig(**{**vars(config), **top, "calibration": calibration, "verify": verify,
                          "data": data_config_from_args(config.data, args)})


def _smooth_value(text: str | None) -> float | str | None:
    if text is None or text in ("off", "auto"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--smooth {text!r}: use off, auto or a number α in [0, 1] (e.g. 0.5)") from None


def _changed(obj, **changes):
    return dataclasses.replace(obj, **{k: v for k, v in changes.items() if v is not None})
