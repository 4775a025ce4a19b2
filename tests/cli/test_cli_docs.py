"""docs/cli.md's reference part is what the parsers give (docs/gen_cli.py writes it)."""

from __future__ import annotations

import importlib.util

from conftest import REPO


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli", REPO / "docs" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_matches_the_parsers():
    gen = _generator()
    text = gen.DOC.read_text(encoding="utf-8")
    assert text == gen.rendered(text), "docs/cli.md is stale: run python docs/gen_cli.py"


def test_the_reference_names_every_flag_and_command():
    from onnxq.cli_help import build_parser, command_names

    reference = _generator().reference()
    for action in build_parser()._actions:
        for flag in action.option_strings:
            assert f"`{flag}" in reference or f", {flag}" in reference, flag
    for name in command_names():
        assert name == "help" or name == "quantize" or f"## {name}\n" in reference, name
