"""python -m onnxq: thin argument parsing over onnxq.quantize(); exit 0 within tolerance, 1 out of tolerance, 2 bad
input, 3 internal error, 4 nothing shown (verify.result.EXIT_CODES), 130 interrupted."""

from __future__ import annotations

import dataclasses
import json
import logging
import shlex
import signal
import sys
import threading
import traceback
from pathlib import Path

from onnxq.cli.args import config_from_args
from onnxq.cli.help import build_parser, first_screen, help_command, quantize_arguments
from onnxq.cli.commands import SUBCOMMANDS
from onnxq.errors import ConfigError, OnnxqError, one_line, ort_reason
from onnxq.report.html import render_html
from onnxq.io import run_files, write_output
from onnxq.io.faults import sigbus_as_error
from onnxq.pipeline import default_output_path, quantize
from onnxq.cli.progress import ProgressBar, count_samples
from onnxq.report.summary import format_summary
from onnxq.steps.heartbeat import PROGRESS_LOGGER
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


def command_line(argv: list[str]) -> str:
    """The command that made a report, as a shell would take it back."""
    return shlex.join(["python", "-m", "onnxq", *argv])


def _fail(line: str, code: int) -> int:
    print(one_line(line), file=sys.stderr)
    return code


def _show_progress(shown: bool) -> None:
    """A long step's lines (steps.heartbeat) on stderr as `onnxq: calibrating… (35 s)`, unless -q."""
    progress = logging.getLogger(PROGRESS_LOGGER)
    progress.propagate = False
    progress.handlers = [h for h in progress.handlers if not getattr(h, "onnxq_progress", False)]
    if shown:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("onnxq: %(message)s"))
        handler.onnxq_progress = True
        progress.addHandler(handler)
    progress.setLevel(logging.INFO if shown else logging.WARNING)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _run(argv: list[str], verbose: bool) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # -v is onnxq's progress: the libraries' INFO stays out (onnx_ir logs a stack trace for every op onnx.defs does
    # not define: 30 a SmolLM2 builder file, per pass).
    logging.getLogger("onnxq").setLevel(logging.INFO if verbose else logging.WARNING)
    _show_progress("-q" not in argv and "--quiet" not in argv)
    if not argv:  # as git and cargo do without a command: the first screen
        print(first_screen(), end="")
        return EXIT_BAD_INPUT
    if argv[0] == "help":
        return help_command(argv[1:])
    if argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    args = build_parser().parse_args(quantize_arguments(argv))
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
        report = dataclasses.replace(result.report, command=command_line(argv))
        if args.report:
            text = json.dumps(report.to_dict(), indent=2) + "\n"
            write_output(args.report, lambda staged: staged.write_text(text))
        if args.html:
            page = render_html(report)
            write_output(args.html, lambda staged: staged.write_text(page))
    if args.quiet:  # the result line keeps its caveat (made-up inputs, not shown, nothing quantized)
        print(f"onnxq: wrote {result.output}; {report.result}")
    else:
        print(format_summary(report, verbose=verbose))
    return EXIT_CODES[report.verdict]
