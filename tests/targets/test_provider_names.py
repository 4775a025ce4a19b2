"""Providers and targets are registries: no module outside onnxq/targets names one in a string literal (an
if-chain on a provider's or a target's name belongs in its own module, as a field or method the code calls)."""

from __future__ import annotations

import ast

from conftest import REPO

from onnxq.targets import TARGETS
from onnxq.targets.providers import PROVIDERS

PACKAGE = REPO / "onnxq"
# The report's platform record keys its CPU model "cpu" (a JSON field, not the provider).
ALLOWED = {("verify/kernels/coverage.py", "cpu"), ("report/summary.py", "cpu")}


def _names() -> set[str]:
    names = set(TARGETS) | set(PROVIDERS) | {a for p in PROVIDERS.values() for a in p.aliases}
    return names - {"auto"}


def _literals(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_no_provider_or_target_name_outside_the_registries():
    names = _names()
    assert {"CPUExecutionProvider", "CUDAExecutionProvider", "OpenVINOExecutionProvider", "cuda", "openvino",
            "x86-avx2", "x86-vnni", "openvino-cpu"} <= names
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("targets/"):
            continue
        found += [f"{where}:{line}: {value!r}" for line, value in _literals(ast.parse(path.read_text()))
                  if value in names and (where, value) not in ALLOWED]
    assert not found, found
