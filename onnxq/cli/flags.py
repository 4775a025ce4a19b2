"""The quantize command's flags, in the groups --help shows them in: every flag in exactly one group, each help a
line or two (the details are in docs/reference/cli.md)."""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable

from onnxq.cli.args import (Parser, add_calibration_flags, add_custom_ops_flag, add_providers_flag,
                            add_tolerance_flags, add_verbose_flag, path_arg)
from onnxq.config.formats import FORMATS
from onnxq.data import add_data_source_flags
from onnxq.numerics import METHODS
from onnxq.targets import target_names

__all__ = ["GROUPS", "DATA_GROUP", "build_quantize_parser"]

Group = argparse._ArgumentGroup  # what add_argument_group returns: it takes add_argument as a parser does

DATA_GROUP = "data and calibration"


def build_quantize_parser(usage: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """The main command's parser: its own help flag (in the last group), then the groups of GROUPS in order."""
    p = Parser(prog="python -m onnxq", usage=usage, description=description, epilog=epilog, add_help=False)
    for title, add_flags in GROUPS:
        add_flags(p.add_argument_group(title))
    return p


def _input_and_output(g: Group) -> None:
    g.add_argument("model", type=path_arg, metavar="MODEL", help="the float .onnx model")
    g.add_argument("-o", "--output", type=path_arg, metavar="PATH",
                   help="the quantized model (default: MODEL.int8.onnx beside MODEL)")
    g.add_argument("--config", type=path_arg, metavar="TOML", help="settings from a TOML file; flags override it")


def _data_and_calibration(g: Group) -> None:
    g.add_argument("--calib", type=path_arg, metavar="DATA",
                   help="calibration data: .npz, a folder of .npz / .npy, text, images (see data sources); without it, "
                        "dynamic activations")
    g.add_argument("--verify-data", type=path_arg, metavar="DATA",
                   help="held-out inputs to verify on (default: held back from --calib: every 10th sample, or as "
                        "many as a task bar needs, up to half)")
    add_data_source_flags(g)  # what the data is: text and its tokenizer, images, arrays named otherwise
    add_calibration_flags(g)
    g.add_argument("--calib-cache", type=path_arg, metavar="JSON",
                   help="calibration summary: read if it exists (no calibration pass), else written; see the "
                        "calibrate command")
    g.add_argument("--method", choices=list(METHODS),
                   help="how activation ranges are chosen from the data (default percentile)")
    g.add_argument("--percentile", type=float, metavar="P", help="for --method percentile (default 99.999)")
    g.add_argument("--range-choice", choices=["auto", "saturation", "method", "output-error"],
                   help="auto (default): saturation, then output-error only where a check fails; output-error: "
                        "Conv inputs narrowed where their output loses least; saturation; method")


def _quantization(g: Group) -> None:
    g.add_argument("--mode", choices=["auto", "static", "dynamic", "weight-only"],
                   help="auto (default): static with --calib, else dynamic; weight-only: weights in blocks, "
                        "activations float")
    g.add_argument("--weights", choices=["int8", "int4", "uint4"],
                   help="int8 (default); int4 / uint4: 4-bit weight-only, in blocks (see language models)")
    g.add_argument("--activation-dtype", choices=["uint8", "int8", "uint16", "int16"],
                   help="uint8 asymmetric (default, fastest on x86) or int8 symmetric; uint16 / int16 for "
                        "accelerators that take 16-bit activations (opset 21)")
    g.add_argument("--format", choices=list(FORMATS),
                   help="how the quantized graph is written (default qdq: QuantizeLinear/DequantizeLinear pairs)")
    g.add_argument("--per-tensor", action="store_true", default=None,
                   help="one weight scale per tensor (default: one per channel)")
    g.add_argument("--weight-rounding", choices=["auto", "gptq", "nearest"],
                   help="static Conv weights: auto (default) nearest, gptq only where a check fails; gptq: all, "
                        "for least output error on the data; nearest")
    g.add_argument("--gemm-bias", choices=["int32", "float"], help="Gemm bias storage (default int32)")
    g.add_argument("--exclude", action="append", metavar="NODE", help="keep this node float; repeatable")
    g.add_argument("--exclude-op", action="append", metavar="OP", help="keep this op type float; repeatable")
    g.add_argument("--exclude-regex", metavar="RE", help="keep float the nodes whose names match RE")


def _language_models(g: Group) -> None:
    g.add_argument("--activations", choices=["auto", "per-tensor", "per-token"],
                   help="activation scales: auto (default: per-token for a decoder language model, else "
                        "per-tensor), per-tensor, per-token")
    g.add_argument("--smooth", metavar="off|ALPHA|auto",
                   help="SmoothQuant (needs --calib): off (default; a decoder language model with data gets auto), "
                        "α in [0, 1], or auto (per layer); with 4-bit weights, AWQ")
    g.add_argument("--recipe", choices=["manual", "auto"],
                   help="auto: per layer group the cheapest of per-tensor and per-token + smoothing that meets the "
                        "tolerance (needs --calib); manual (default)")
    g.add_argument("--quantize-attention", action="store_true", default=None,
                   help="also quantize MatMuls of two activations (Q·Kᵀ, scores·V)")
    g.add_argument("--block", type=int, metavar="N", help="weight-only: values per block along K (default 32)")
    g.add_argument("--block-format", choices=["matmulnbits", "qdq"],
                   help="weight-only: MatMulNBits (default) or opset-21 DequantizeLinear blocks")
    g.add_argument("--accuracy-level", type=int, choices=range(5), metavar="0-4",
                   help="MatMulNBits compute, 0 float … 4 int8 (default: 4 for a decoder language model on a CPU, "
                        "else 0)")
    g.add_argument("--vocabulary-bits", type=int, choices=(4, 8),
                   help="4-bit weights: bits of the token table and lm_head (default 8 for a decoder language model)")
    g.add_argument("--untie-tables", action="store_true", default=None,
                   help="a token table tied to the lm_head gets its own quantized copy (default: stored once)")


def _targets_and_providers(g: Group) -> None:
    g.add_argument("--target", choices=target_names(), metavar="TARGET",
                   help=f"where the model will run: {', '.join(target_names())} (default portable: every CPU; auto: "
                        "this one)")
    g.add_argument("--compute", choices=["auto", "float32", "float16"],
                   help="float arithmetic of what stays float (default auto: float16 for cuda, else float32)")
    add_providers_flag(g)
    add_custom_ops_flag(g)


def _verification_and_tolerance(g: Group) -> None:
    add_tolerance_flags(g)
    g.add_argument("--no-fallback", action="store_true",
                   help="out of tolerance, keep every node quantized and exit 1 (default: the most sensitive float)")
    g.add_argument("--sensitivity", action="store_true", default=None,
                   help="rank every quantized node's harm on every run (default: only where the check fails)")
    g.add_argument("--no-sensitivity", action="store_true",
                   help="never rank for the report (a failing check still ranks what the fallback needs)")
    g.add_argument("--no-verify", action="store_true", help="skip verification")


def _speed(g: Group) -> None:
    g.add_argument("--check-speed", action="store_true", default=None,
                   help="keep float each kind of node that runs slower quantized here (measured), then time every "
                        "provider")
    g.add_argument("--no-speed", action="store_true",
                   help="do not time float against quantized (default: a few rounds on the CPU)")
    g.add_argument("--allow-slower", action="store_true",
                   help="when that timing finds the quantized model slower, only say so (default: as --check-speed)")


def _reports(g: Group) -> None:
    g.add_argument("--report", type=path_arg, metavar="JSON", help="write the report as JSON")
    g.add_argument("--html", type=path_arg, metavar="HTML", help="write a page with a per-layer error chart")


def _messages(g: Group) -> None:
    g.add_argument("-q", "--quiet", action="store_true", help="print only errors and the result line")
    add_verbose_flag(g)
    g.add_argument("--version", action=_PrintVersions, nargs=0,
                   help="print the versions of onnxq and the libraries it runs on, then exit")
    g.add_argument("-h", "--help", action="help", help="show this help and exit")


GROUPS: tuple[tuple[str, Callable[[Group], None]], ...] = (
    ("input and output", _input_and_output),
    (DATA_GROUP, _data_and_calibration),
    ("quantization", _quantization),
    ("language models", _language_models),
    ("targets and providers", _targets_and_providers),
    ("verification and tolerance", _verification_and_tolerance),
    ("speed", _speed),
    ("reports", _reports),
    ("messages", _messages),
)


class _PrintVersions(argparse.Action):
    """--version on one line (argparse's own version action wraps it at the terminal's width)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(_versions())
        parser.exit()


def _versions() -> str:
    import numpy
    import onnx
    import onnx_ir
    import onnxruntime

    from onnxq import __version__
    return (f"onnxq {__version__} (onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, onnx-ir "
            f"{onnx_ir.__version__}, numpy {numpy.__version__}, Python {platform.python_version()})")
