"""--help: a first screen (usage, what onnxq does, the commands, the common flags), then every flag in one of nine
groups, then examples; `help` and `help COMMAND`."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

import pytest
from conftest import REPO

from onnxq.cli.main import main
from onnxq.cli.flags import GROUPS
from onnxq.cli.help import COMMON_FLAGS, EXAMPLES, build_parser, command_names, first_screen
from onnxq.cli.commands import SUBCOMMANDS, build_verify_parser

GROUP_TITLES = ["input and output", "data and calibration", "quantization", "language models",
                "targets and providers", "verification and tolerance", "speed", "reports", "messages"]
# Flags another part of onnxq adds to the data group (onnxq.data's add_data_source_flags); an example that uses one
# is checked where they are defined.
DATA_SOURCE_FLAGS = {"--tokenizer", "--field", "--max-length", "--window", "--size", "--mean", "--std", "--scale",
                     "--normalize", "--bgr", "--input-map"}


def _help_text(capsys, argv) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_help_prints_the_first_screen_and_exits_0(capsys):
    assert main(["help"]) == 0
    out = capsys.readouterr().out
    assert out == first_screen()
    for also in (["help", "help"], ["help", "--help"]):
        assert main(also) == 0 and capsys.readouterr().out == out
    lines = out.splitlines()
    assert len(lines) <= 40, len(lines)  # one screen
    assert lines[0] == "usage: python -m onnxq [quantize] MODEL [--calib DATA] [-o PATH] [options]"
    assert lines[1].strip().startswith("python -m onnxq COMMAND [options]")
    assert "onnxq quantizes a float ONNX model to int8" in out
    # The commands, each on its own line in order: quantize (the default) first, help last.
    listed = [line.split()[0] for line in lines[lines.index("commands:") + 1:_block_end(lines, "commands:")]]
    assert listed == command_names() and listed[0] == "quantize" and listed[-1] == "help"
    assert set(SUBCOMMANDS) <= set(listed)
    assert "(the default: the word may be left out)" in lines[lines.index("commands:") + 1]


def _block_end(lines: list[str], heading: str) -> int:
    start = lines.index(heading) + 1
    return next(i for i in range(start, len(lines)) if not lines[i].strip())


def test_the_common_flags_of_the_first_screen_are_flags_of_the_parser():
    known = {s for a in build_parser()._actions for s in a.option_strings}
    shown = [word.rstrip(",") for left, _ in COMMON_FLAGS for word in left.split() if word.startswith("-")]
    assert {"--calib", "-o", "--output", "--verify-data", "--min-cosine", "--config", "--report", "-q", "-v",
            "-h"} <= set(shown)
    assert set(shown) <= known, set(shown) - known
    screen = first_screen()
    assert all(f"  {left}" in screen for left, _ in COMMON_FLAGS)


def test_help_flag_starts_with_the_first_screen_then_the_nine_groups_then_examples(capsys):
    text = _help_text(capsys, ["--help"])
    assert text.startswith(first_screen())
    rest = text[len(first_screen()):]
    headings = [line[:-1] for line in rest.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == [*GROUP_TITLES, "examples"]
    assert rest.rstrip().endswith("every command and flag: docs/reference/cli.md")
    assert "exit status: 0 within tolerance, 1 out of tolerance, 2 bad input" in rest
    assert _help_text(capsys, ["quantize", "--help"]) == text
    assert main(["help", "quantize"]) == 0 and capsys.readouterr().out == text


def test_every_flag_is_in_exactly_one_of_the_nine_groups():
    parser = build_parser()
    assert [title for title, _ in GROUPS] == GROUP_TITLES
    groups = {g.title: g._group_actions for g in parser._action_groups}
    # argparse's own groups hold nothing: every argument, MODEL and -h included, sits in a titled group.
    assert not groups["positional arguments"] and not groups["options"]
    grouped = [a for title in GROUP_TITLES for a in groups[title]]
    assert all(groups[title] for title in GROUP_TITLES)
    assert sorted(map(id, grouped)) == sorted(map(id, parser._actions)) and len(set(map(id, grouped))) == len(grouped)
    assert len(grouped) >= 55  # MODEL and the 54 flags


def test_flag_help_is_a_line_or_two(capsys, monkeypatch):
    """Details belong in docs/reference/cli.md: no flag's help runs past two lines of 80 characters."""
    too_long = [a.option_strings or a.dest for a in build_parser()._actions if len(a.help or "") > 160]
    assert not too_long
    monkeypatch.setenv("COLUMNS", "300")
    assert max(len(line) for line in _help_text(capsys, ["--help"]).splitlines()) <= 100


@pytest.mark.parametrize("example", [line.strip() for line in EXAMPLES.splitlines()
                                     if line.strip().startswith("python -m onnxq ")])
def test_each_example_parses(example):
    words = shlex.split(example)[3:]
    unknown = DATA_SOURCE_FLAGS & set(words) - {s for a in build_parser()._actions for s in a.option_strings}
    if unknown:
        pytest.skip(f"the data-source flags {sorted(unknown)} are defined by onnxq.data, absent here")
    if words[0] == "verify":
        assert isinstance(build_verify_parser().parse_args(words[1:]), argparse.Namespace)
    else:
        args = build_parser().parse_args(words)
        assert args.model.endswith(".onnx") and args.calib


def test_the_examples_cover_text_images_a_decoder_and_a_gpu():
    assert "--calib sentences.jsonl --tokenizer tokenizer.json" in EXAMPLES
    assert "--calib images/" in EXAMPLES and "--weights int4" in EXAMPLES and "--target cuda" in EXAMPLES


def test_help_command_shows_that_command_s_help(capsys):
    assert main(["help", "verify"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m onnxq verify FLOAT_MODEL QUANT_MODEL --data DATA [options]\n")
    assert "--tolerance [OUTPUT:]METRIC=VALUE" in out and "--providers LIST" in out
    for name in ("calibrate", "merge"):
        assert main(["help", name]) == 0
        assert capsys.readouterr().out.startswith(f"usage: python -m onnxq {name} ")


def test_no_arguments_print_the_first_screen_and_exit_2(capsys):
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == first_screen() and captured.err == ""


def test_the_entry_point_s_first_40_lines_show_commands_and_common_flags():
    run = subprocess.run([sys.executable, "-m", "onnxq", "--help"], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "COLUMNS": "80"})
    assert run.returncode == 0, run.stderr
    head = run.stdout.splitlines()[:40]
    assert head[0].startswith("usage: python -m onnxq [quantize] MODEL")
    for needle in ("commands:", "  verify ", "  help ", "  --calib DATA", "  -o, --output PATH", "  -q, --quiet"):
        assert any(line.startswith(needle) for line in head), needle
