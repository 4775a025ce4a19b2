"""A new command is one entry in onnxq.cli.commands.SUBCOMMANDS (its function takes the arguments after its name and
returns the exit status) and its line in cli_help.COMMAND_SUMMARIES: python -m onnxq dispatches to it, the first
screen lists it, `help COMMAND` prints its --help, a misspelling names it, and the CLI reference documents it."""

import collections

import onnx_ir as ir
import pytest

from onnxq.cli import help as cli_help

from onnxq.cli import commands
from onnxq.cli.main import main
from onnxq.cli.parser import Parser, path_arg


def _ops_command(argv: list[str]) -> int:
    """A command this test adds: the model's operators, counted by type."""
    parser = Parser(prog="python -m onnxq ops", description="count MODEL's operators by type")
    parser.add_argument("model", type=path_arg, metavar="MODEL", help="an .onnx model")
    args = parser.parse_args(argv)
    counts = collections.Counter(node.op_type for node in ir.load(args.model).graph)
    print(", ".join(f"{n} {op}" for op, n in sorted(counts.items())))
    return 0


@pytest.fixture
def ops_command(monkeypatch):
    monkeypatch.setitem(commands.SUBCOMMANDS, "ops", _ops_command)
    monkeypatch.setitem(cli_help.COMMAND_SUMMARIES, "ops", "count a model's operators by type")


def test_a_registered_command_runs_is_listed_and_has_help(ops_command, samples_dir, capsys):
    assert main(["ops", str(samples_dir / "mlp.onnx")]) == 0
    out = capsys.readouterr().out
    counts = collections.Counter(node.op_type for node in ir.load(samples_dir / "mlp.onnx").graph)
    assert out.strip() == ", ".join(f"{n} {op}" for op, n in sorted(counts.items())) and counts
    assert main(["help"]) == 0
    screen = capsys.readouterr().out
    assert "  ops         count a model's operators by type" in screen.splitlines()
    assert cli_help.command_names()[-2:] == ["ops", "help"]  # a new command lists after the known ones
    assert main(["help", "ops"]) == 0
    assert "count MODEL's operators by type" in capsys.readouterr().out
    assert main(["opz", str(samples_dir / "missing")]) == 2
    assert capsys.readouterr().err.strip() == "onnxq: error: unknown command 'opz' — did you mean 'ops'?"


def test_the_cli_reference_documents_a_registered_command(ops_command):
    from test_cli_docs import _generator

    assert "## ops\n\n```text\nusage: python -m onnxq ops [-h] MODEL" in _generator().reference()
