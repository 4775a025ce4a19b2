"""docs/contributing/architecture.md names real things: every file, every registry and every test it points a
contributor to exists, so that a rename shows here rather than in a reader's dead end."""

from __future__ import annotations

import ast
import importlib
import re

from conftest import REPO

PAGE = REPO / "docs" / "contributing" / "architecture.md"


def _code_spans() -> list[str]:
    return re.findall(r"`([^`\n]+)`", PAGE.read_text(encoding="utf-8"))


def test_every_file_the_page_names_exists():
    paths = [s.split("::")[0] for s in _code_spans()
             if re.fullmatch(r"(onnxq|tests|docs|bench|models)/[\w/.*-]+(::\w+)?", s)]
    assert len(paths) > 40
    missing = [p for p in paths if not (REPO / p).exists() and not list(REPO.glob(p))]
    assert not missing, missing


def test_every_test_the_page_names_is_a_test_of_its_file():
    named = [s for s in _code_spans() if re.fullmatch(r"tests/[\w/]+\.py::\w+", s)]
    assert len(named) >= 10
    for spec in named:
        path, name = spec.split("::")
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body), spec


def test_every_registry_the_page_names_resolves():
    dotted = [s for s in _code_spans() if re.fullmatch(r"onnxq(\.\w+)+", s)]
    assert len(dotted) >= 15
    for name in dotted:
        module_name, _, attribute = name.rpartition(".")
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            module = importlib.import_module(module_name)
            assert hasattr(module, attribute), name
