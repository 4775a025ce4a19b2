"""python -m onnxq: thin argument parsing over onnxq.quantize(); exit 0 within tolerance, 1 out of tolerance, 2 bad
input, 3 internal error, 4 nothing shown (verify.result.EXIT_CODES), 130 interrupted."""

from __future__ import annotations

import argparse
import json
import logging
import platform
import signal
import sys
import threading
import traceback
from pathlib import Path

from onnxq.cli_args import (Parser, add_calibration_flags, add_custom_ops_flag, add_tolerance_flags, add_verbose_flag,
                            config_from_args, path_arg)
from onnxq.commands import SUBCOMMANDS
from onnxq.config.formats import FORMATS
from onnxq.errors import ConfigError, OnnxqError, one_line, ort_reason
from onnxq.html_report import render_html
from onnxq.io import run_files, write_output
from onnxq.io.faults import sigbus_as_error
from onnxq.numerics import METHODS
from onnxq.pipeline import default_output_path, quantize
from onnxq.progress import ProgressBar, count_samples
from onnxq.summary import format_summary
from onnxq.targets import TARGETS, target_names
from onnxq.verify.result import EXIT_CODES
from onnxq.verify.verdict import NOT_SHOWN

try:
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, InvalidGraph, NotImplemented
    _ORT_ERRORS: tuple[type[BaseException], ...] = (Fail, InvalidArgument, InvalidGraph, NotImplemented)
except ImportError:  # a future onnxruntime may move them
    _ORT_ERRORS = ()

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_OUT_OF_TOLERANCE, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_NOT_SHOWN = EXIT_CODES[NOT_SHOWN]  # nothing shown: not shown, or nothing quantized
EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m onnxq",
        description="Quantize a float ONNX model to int8 (MatMul/Gemm/Conv/Gather) and verify it on ONNX Runtime.",
        epilog="Exit status: 0 within tolerance, 1 out of tolerance, 2 bad input, 3 internal error, 4 nothing "
               "shown (nothing quantized, or the data cannot show a bar), 130 interrupted. Other commands: "
               "python -m onnxq calibrate (calibration on its own), merge (shard summaries), verify (check any "
               "quantized model); each takes --help.")
    for flags in (_file_flags, _scheme_flags, _selection_flags, _calibration_and_check_flags):
        flags(p)
    add_verbose_flag(p)
    p.add_argument("--version", action=_PrintVersions, nargs=0,
                   help="print onnxq's version and those of the libraries it runs on (for a bug report), then exit")
    return p


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


def _file_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=path_arg, help="float .onnx model")
    p.add_argument("--calib", type=path_arg, metavar="DATA",
                   help=".npz (arrays keyed by input name, first axis = samples) or a folder of .npz; without it "
                        "activations are quantized dynamically at run time")
    p.add_argument("-o", "--output", type=path_arg,
                   help="output path (default: MODEL.int8.onnx beside the model)")
    p.add_argument("--verify-data", type=path_arg, metavar="DATA",
                   help="held-out inputs for verification (default: every 10th calibration sample is held back)")
    p.add_argument("--config", type=path_arg, metavar="TOML", help="QuantConfig as TOML; flags override it")
    p.add_argument("--report", type=path_arg, metavar="JSON", help="write the report as JSON")


def _scheme_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=["auto", "static", "dynamic", "weight-only"],
                   help="auto (default): static with --calib, else dynamic (weight-only for 4-bit weights); "
                        "weight-only: weights in blocks, activations float (int8: MatMulNBits 8 bits)")
    p.add_argument("--target", choices=target_names(),
                   help="where the model is deployed (default portable): auto, this machine's CPU; "
                        + "; ".join(f"{n}, {TARGETS[n].description}" for n in target_names()[1:]))
    p.add_argument("--compute", choices=["auto", "float32", "float16"],
                   help="the float arithmetic of what stays float: auto (default) the target's (float16 for cuda, "
                        "float32 for CPUs); float16 pairs with weight-only blocks")
    p.add_argument("--format", choices=list(FORMATS),
                   help="output format (default qdq): " + "; ".join(f"{f.name}, {f.description}"
                                                                     for f in FORMATS.values()))
    p.add_argument("--activation-dtype", choices=["uint8", "int8"],
                   help="uint8 asymmetric (default, fastest on x86) or int8 symmetric")
    p.add_argument("--activations", choices=["auto", "per-tensor", "per-token"],
                   help="activation scales: auto (default: per-token with SmoothQuant for a decoder language model, "
                        "per-tensor for any other), per-tensor, or per-token (one per row, at run time)")
    p.add_argument("--smooth", metavar="off|ALPHA|auto",
                   help="SmoothQuant before quantizing (needs --calib): off (default), a number α in [0, 1], or "
                        "auto (α searched per layer); with 4-bit weights, AWQ's activation-aware scales")
    p.add_argument("--recipe", choices=["manual", "auto"],
                   help="auto: per layer group the cheapest of static per-tensor and per-token + smoothing that "
                        "meets the tolerance (needs --calib); manual (default): the flags as given")
    p.add_argument("--weights", choices=["int8", "int4", "uint4"],
                   help="int8 (default); int4 (symmetric) / uint4 (a zero point per block): 4-bit weight-only, "
                        "block-wise along K, activations stay float")
    p.add_argument("--block", type=int, metavar="N", help="weight-only: values per block along K (default 32)")
    p.add_argument("--accuracy-level", type=int, choices=range(5), metavar="0-4",
                   help="weight-only: MatMulNBits accuracy_level — 0 float compute, 4 int8 activations per block "
                        "(ORT's fastest CPU kernels for 4-bit weights; the result is verified as it runs); default: 4 "
                        "for a decoder language model on a CPU target, else 0")
    p.add_argument("--vocabulary-bits", type=int, choices=(4, 8),
                   help="4-bit weights: bits of a language model's token table and lm_head (one table when tied); "
                        "default 8 for a decoder language model (more accurate), 4 for the smallest file")
    p.add_argument("--block-format", choices=["matmulnbits", "qdq"],
                   help="weight-only: com.microsoft MatMulNBits (default) or opset-21 DequantizeLinear block_size")


def _selection_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--per-tensor", action="store_true", default=None, help="one weight scale per tensor")
    p.add_argument("--quantize-attention", action="store_true", default=None,
                   help="also quantize MatMuls whose two inputs are activations (Q·Kᵀ, scores·V)")
    p.add_argument("--untie-tables", action="store_true", default=None,
                   help="a token table tied to an lm_head gets its own int8 form or blocks (default: stored "
                        "once, the Gather reading the lm_head's)")
    p.add_argument("--gemm-bias", choices=["int32", "float"], help="Gemm bias storage (default int32)")
    p.add_argument("--weight-rounding", choices=["gptq", "nearest"],
                   help="static Conv weights on their per-channel grid: gptq (default) rounds each so the layer's "
                        "output error on the calibration data is least (one more pass over it); nearest")
    p.add_argument("--exclude", action="append", metavar="NODE", help="keep this node float (repeatable)")
    p.add_argument("--exclude-op", action="append", metavar="OP", help="keep this op type float (repeatable)")
    p.add_argument("--exclude-regex", metavar="RE", help="keep nodes whose names match RE in float")
    add_custom_ops_flag(p)


def _calibration_and_check_flags(p: argparse.ArgumentParser) -> None:
    add_calibration_flags(p)
    p.add_argument("--method", choices=list(METHODS),
                   help="how activation ranges are chosen from the calibration data (default percentile)")
    p.add_argument("--percentile", type=float, metavar="P", help="for --method percentile (default 99.999)")
    p.add_argument("--range-choice", choices=["saturation", "method", "output-error"],
                   help="output-error (default): saturation, then each Conv input's window narrowed where the "
                        "Convs reading it lose the least output (measured on 16 calibration samples); saturation: "
                        "only narrow a range where the per-element ops reading the tensor (an affine and a "
                        "hardswish, a ReLU6) map every value beyond to one output — exact; method: the method's "
                        "range as it is")
    p.add_argument("--calib-cache", type=path_arg, metavar="JSON",
                   help="calibration summary: read if it exists (no calibration pass), else written after "
                        "calibrating; see python -m onnxq calibrate / merge")
    add_tolerance_flags(p)
    p.add_argument("--tolerance", action="append", metavar="[OUTPUT:]METRIC=VALUE",
                   help="accuracy target (metric: cosine, sqnr, max_abs, argmax: the share of argmax decisions "
                        "over the last axis kept, topK: the share of float answers among the quantized top K, "
                        "K = 1 … 10), e.g. cosine=0.995, sentence_embedding:cosine=0.995, logits:argmax=0.99 or "
                        "logits:top5=0.999, logits:task=0.995 (the task metric's share), logits:task=sequence (its "
                        "kind), maps:threshold=0.3 (where a mask's or on/off output's values count as on); "
                        "repeatable. Out of tolerance, the most sensitive nodes are kept float, fewest first, "
                        "until the target is met (see --no-fallback)")
    p.add_argument("--no-fallback", action="store_true",
                   help="only gate: out of tolerance, keep every node quantized and exit 1")
    p.add_argument("--no-sensitivity", action="store_true", help="skip the per-layer sensitivity analysis")
    p.add_argument("--html", type=path_arg, metavar="HTML",
                   help="write a human report with a per-layer error chart")
    p.add_argument("--check-speed", action="store_true", default=None,
                   help="keep float each kind of node (MatMul, Gemm, Conv depthwise / 1x1 / kxk) that runs slower "
                        "quantized on this CPU, measured; then time float vs quantized on each provider")
    p.add_argument("--no-speed", action="store_true",
                   help="do not time float against quantized on the CPU (done by default, a few rounds)")
    p.add_argument("--allow-slower", action="store_true",
                   help="when the default timing finds the quantized model slower than float here, only say so "
                        "(by default the kinds of node that run slower are then kept float, as --check-speed does)")
    p.add_argument("--no-verify", action="store_true", help="skip verification")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the result line")


def main(argv: list[str] | None = None) -> int:
    """Every failure ends in one line on stderr and an exit code, never a traceback (-v prints one above the line for
    an internal error; the exit code stays 3): 2 bad input (OnnxqError, or a model onnxruntime refuses), 3 an
    internal error, 130 interrupted. Outputs are staged and moved into place only when the run succeeds, so none of
    these leaves a file behind."""
    argv = sys.argv[1:] if argv is None else argv
    verbose = "-v" in argv or "--verbose" in argv
    previous = None
    if threading.current_thread() is threading.main_thread():  # SIGTERM (a CI timeout, kill) cleans up like Ctrl-C
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with sigbus_as_error():
            return _run(argv, verbose)
    except OnnxqError as e:
        return _fail(f"onnxq: error: {e}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return _fail("onnxq: interrupted; nothing was written", EXIT_INTERRUPTED)
    except _ORT_ERRORS as e:
        reason = ort_reason(e)
        return _fail(f"onnxq: error: onnxruntime cannot run the model: {reason}", EXIT_BAD_INPUT)
    except Exception as e:  # noqa: BLE001 — the one place that turns a bug into a line instead of a traceback
        if verbose:
            traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = "the traceback is above" if verbose else "rerun with -v for the traceback"
        return _fail(f"onnxq: internal error: {type(e).__name__}: {first} — {hint} and report it", EXIT_INTERNAL)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _fail(line: str, code: int) -> int:
    print(one_line(line), file=sys.stderr)
    return code


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _run(argv: list[str], verbose: bool) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # -v is onnxq's progress: the libraries' INFO stays out (onnx_ir logs a stack trace for every op onnx.defs does
    # not define: 30 a SmolLM2 builder file, per pass).
    logging.getLogger("onnxq").setLevel(logging.INFO if verbose else logging.WARNING)
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
    with run_files() as files:  # every output checked now, written together at the end (or none)
        if args.config:
            files.read(args.config, "the config file", ConfigError)
        for path, flag in ((args.report, "--report"), (args.html, "--html")):
            if path is not None:
                files.claim(path, flag)
        config = config_from_args(args)
        output = Path(args.output) if args.output is not None else default_output_path(args.model)
        progress = ProgressBar(count_samples(args.calib, config.calibration.max_samples))
        try:
            result = quantize(args.model, args.calib, output=output, config=config, verify_data=args.verify_data,
                              calibration_cache=args.calib_cache, progress=progress)
        finally:
            progress.close()
        report = result.report
        if args.report:
            text = json.dumps(report.to_dict(), indent=2) + "\n"
            write_output(args.report, lambda staged: staged.write_text(text))
        if args.html:
            page = render_html(report)
            write_output(args.html, lambda staged: staged.write_text(page))
    if args.quiet:  # the result line keeps its caveat (made-up inputs, not shown, nothing quantized)
        print(f"onnxq: wrote {result.output}; {report.result}")
    else:
        print(format_summary(report))
    return EXIT_CODES[report.verdict]
