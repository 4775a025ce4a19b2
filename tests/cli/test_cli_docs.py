"""docs/reference/cli.md's reference part is what the parsers give (docs/gen/cli_reference.py writes it)."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO


def _generator():
    spec = importlib.util.spec_from_file_location("onnxq_docs_cli_reference", REPO / "docs" / "gen" /
                                                  "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_matches_the_parsers():
    gen = _generator()
    text = gen.DOC.read_text(encoding="utf-8")
    assert text == gen.rendered(text), "docs/reference/cli.md is stale: run python docs/gen/all.py"


def test_the_reference_names_every_flag_and_command():
    from onnxq.cli.help import build_parser, command_names

    reference = _generator().reference()
    for action in build_parser()._actions:
        for flag in action.option_strings:
            assert f"`{flag}" in reference or f", {flag}" in reference, flag
    for name in command_names():
        assert name == "help" or name == "quantize" or f"## {name}\n" in reference, name
