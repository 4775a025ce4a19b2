"""The guides' commands are ones onnxq accepts: every `python -m onnxq …` line of docs/guides/*.md parses with the
command's own parser (a quantize line also makes its QuantConfig, which refuses a combination of flags that does not
go together), and every --flag the guides name in code is a flag of some command (the benchmark scripts' aside)."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import REPO

from onnxq.cli.args import config_from_args
from onnxq.cli.help import build_parser, quantize_arguments
from onnxq.cli.commands import build_calibrate_parser, build_merge_parser, build_verify_parser
from onnxq.cli.data_command import build_data_parser

GUIDES = sorted((REPO / "docs" / "guides").glob("*.md"))
SUBCOMMAND_PARSERS = {"verify": build_verify_parser, "data": build_data_parser, "calibrate": build_calibrate_parser,
                      "merge": build_merge_parser}
# A command in a fenced block (after an optional `$ ` prompt) or in inline code; a trailing comment is no argument.
COMMAND = re.compile(r"^(?:\$ )?python -m onnxq (.+?)\s*(?:#.*)?$")
INLINE_COMMAND = re.compile(r"`python -m onnxq ([^`]+)`")


def _commands(text: str) -> list[str]:
    found = [m.group(1) for line in text.splitlines() if (m := COMMAND.match(line.strip()))]
    # Inline, a command's name alone (`python -m onnxq data`) is a mention, not a command line.
    return found + [c for c in INLINE_COMMAND.findall(text) if len(c.split()) > 1]


def _all_flags() -> set[str]:
    parsers = [build_parser(), *(build() for build in SUBCOMMAND_PARSERS.values())]
    return {flag for parser in parsers for action in parser._actions for flag in action.option_strings}


def test_there_are_seven_guides_each_with_commands():
    assert [p.stem for p in GUIDES] == ["cnns", "cpu-fleets", "encoders", "gpus", "int4", "language-models",
                                        "openvino"]
    for guide in GUIDES:
        assert len(_commands(guide.read_text(encoding="utf-8"))) >= 3, guide.name


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.stem)
def test_every_command_in_a_guide_parses(guide):
    for command in _commands(guide.read_text(encoding="utf-8")):
        if "…" in command:  # an elided line of output, not a command to copy
            continue
        argv = shlex.split(command)
        if argv[0] in SUBCOMMAND_PARSERS:
            SUBCOMMAND_PARSERS[argv[0]]().parse_args(argv[1:])
        else:
            config_from_args(build_parser().parse_args(quantize_arguments(argv)))


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.stem)
def test_every_flag_a_guide_names_exists(guide):
    text = guide.read_text(encoding="utf-8")
    code = " ".join(re.findall(r"```.*?```", text, flags=re.S) + re.findall(r"`[^`\n]+`", text))
    # The benchmark scripts', the exporters' (optimum-cli, onnxruntime_genai's builder) and pip's own flags.
    code = re.sub(r"(python bench/|optimum-cli |python -m onnxruntime_genai|pip install )[^`\n]*", "", code)
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", code))
    assert named - _all_flags() == set()
