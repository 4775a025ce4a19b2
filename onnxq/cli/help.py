"""The first screen (python -m onnxq help), the main command's parser around it, `help COMMAND`, and the one-line
refusal of a misspelt command.

As cargo and pip do for a command's help, `--help` shows everything: the first screen, then every flag in its group,
then examples; `help` alone shows the first screen, as `git help` and `cargo help` show a short page."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from onnxq.cli.flags import build_quantize_parser
from onnxq.cli.commands import SUBCOMMANDS
from onnxq.errors import ConfigError, closest, one_line

__all__ = ["build_parser", "first_screen", "help_command", "quantize_arguments", "command_names"]

PROG = "python -m onnxq"
USAGE = (f"{PROG} [quantize] MODEL [--calib DATA] [-o PATH] [options]\n"
         f"       {PROG} COMMAND [options]      ({PROG} help COMMAND: its flags)")
WHAT = ("onnxq quantizes a float ONNX model to int8 (or 4-bit weights) and verifies the result\n"
        "against the float model on ONNX Runtime.")

# The commands in the order the first screen lists them; a command registered in SUBCOMMANDS shows with its line.
COMMAND_SUMMARIES = {
    "quantize": "quantize MODEL and verify it (the default: the word may be left out)",
    "data": "make calibration data (.npz) for MODEL from text, images or .npy",
    "calibrate": "calibrate once and write the summary, for --calib-cache or merge",
    "merge": "merge the calibration summaries of shards of the data",
    "verify": "check a quantized model against its float model",
    "help": "this screen; help COMMAND: that command's flags",
}

# The flags most runs need: (how it is written, what it does). Each is defined in a group of cli.flags.
COMMON_FLAGS = (
    ("MODEL", "the float .onnx model"),
    ("--calib DATA", "calibration data: .npz, text, images; without it, dynamic activations"),
    ("-o, --output PATH", "the quantized model (default: MODEL.int8.onnx beside MODEL)"),
    ("--verify-data DATA", "held-out inputs (default: samples held back from --calib)"),
    ("--min-cosine X", "tolerance: mean cosine per output (default 0.98); any other: --tolerance"),
    ("--weights int4", "4-bit weight-only, for language models"),
    ("--target NAME", "cuda for NVIDIA GPUs, openvino-cpu for OpenVINO (default portable: every CPU)"),
    ("--config TOML", "settings from a TOML file; flags override it"),
    ("--report JSON", "the report as JSON; --html HTML: a page with per-layer errors"),
    ("-q, --quiet", "print only errors and the result line"),
    ("-v, --verbose", "log each step"),
    ("-h, --help", "every flag, in groups, and examples"),
)

EXAMPLES = f"""examples:
  # an encoder, calibrated on sentences through its tokenizer
  {PROG} minilm.onnx --calib sentences.jsonl --tokenizer tokenizer.json
  # a CNN from a folder of images, with a report page
  {PROG} resnet50.onnx --calib images/ --normalize imagenet --html report.html
  # a decoder with a KV cache, 4-bit weights
  {PROG} decoder.onnx --calib corpus.txt --tokenizer tokenizer.json --weights int4
  # for a GPU
  {PROG} model.onnx --calib calib.npz --target cuda -o model.cuda.onnx
  # check a quantized model against its float model
  {PROG} verify model.onnx model.int8.onnx --data heldout.npz

exit status: 0 within tolerance, 1 out of tolerance, 2 bad input, 3 internal error, 4 nothing shown
(nothing quantized, or the data cannot show a bar), 130 interrupted
every command and flag: docs/reference/cli.md"""


def command_names() -> list[str]:
    """quantize, the registered commands in the first screen's order (any other after them), then help."""
    registered = [name for name in COMMAND_SUMMARIES if name in SUBCOMMANDS]
    return ["quantize", *registered, *(n for n in SUBCOMMANDS if n not in COMMAND_SUMMARIES), "help"]


def _columns(rows: Iterable[tuple[str, str]], width: int) -> list[str]:
    return [f"  {left:<{width}}{right}".rstrip() for left, right in rows]


def _description() -> str:
    commands = _columns(((name, COMMAND_SUMMARIES.get(name, "")) for name in command_names()), 12)
    flags = _columns(COMMON_FLAGS, 21)
    return "\n".join([WHAT, "", "commands:", *commands, "", "the flags most runs need:", *flags])


def first_screen() -> str:
    """The first lines of --help: usage, what onnxq does, the commands and the common flags."""
    return f"usage: {USAGE}\n\n{_description()}\n"


def build_parser() -> argparse.ArgumentParser:
    """The quantize command's parser: --help is the first screen, the flags in their groups, then examples."""
    return build_quantize_parser(USAGE, _description(), EXAMPLES)


def help_command(argv: list[str]) -> int:
    """`help`: the first screen; `help COMMAND`: that command's whole help."""
    if len(argv) > 1:
        raise ConfigError(f"help takes one command name, e.g. {PROG} help verify")
    name = argv[0] if argv else "help"
    if name in ("help", "-h", "--help"):
        print(first_screen(), end="")
    elif name == "quantize":
        build_parser().print_help()
    elif name in SUBCOMMANDS:
        try:
            SUBCOMMANDS[name](["--help"])
        except SystemExit as done:  # argparse's help action ends so
            return done.code or 0
    else:
        raise ConfigError(_unknown_command(name))
    return 0


def quantize_arguments(argv: list[str]) -> list[str]:
    """The quantize command's arguments: `quantize MODEL ...` is `MODEL ...`. A first word that is no file and
    nearly a command's name (calibrat) is refused as a misspelt command; anything else is the model's path."""
    if argv and argv[0] == "quantize":
        return argv[1:]
    if argv and _looks_like_a_command(argv[0]) and closest(argv[0], command_names()) is not None:
        raise ConfigError(_unknown_command(argv[0]))
    return argv


def _looks_like_a_command(word: str) -> bool:
    """A bare word: no flag, no suffix or folder (a model's path has them), not a file here."""
    return not word.startswith("-") and not any(c in word for c in "./\\") and not Path(word).exists()


def _unknown_command(name: str) -> str:
    match = closest(name, command_names())
    if match is not None:
        return f"unknown command {one_line(repr(name))} — did you mean {match!r}?"
    return f"unknown command {one_line(repr(name))}; the commands are {', '.join(command_names())}"
