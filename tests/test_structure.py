"""The package's shape, checked: small functions, and layers that import only downward
(docs/contributing/architecture.md)."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGE = REPO / "onnxq"
# Lowest first: a module may import its own layer and those before it. The architecture page lists the same order.
LAYERS = ("errors", "numerics", "targets", "irquery", "io", "config", "calibration", "data", "handlers", "passes",
          "smoothing", "awq", "verify", "report", "search", "calibration_api", "distributed", "ranges", "smoothing_steps", "steps",
          "summary", "html_report", "progress", "pipeline", "cli_parser", "cli_args", "data_command", "cli_flags",
          "commands", "cli_help", "cli", "__init__", "__main__")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield path, parts[0] if parts[0] != "__init__" else "__init__", ast.parse(path.read_text())


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "__init__")


def test_every_module_has_a_layer_and_imports_only_downward():
    upward = []
    for path, top, tree in _modules():
        assert top in LAYERS, f"{path} is in no layer: add it to LAYERS and to docs/contributing/architecture.md"
        mine = LAYERS.index(top)
        for node in ast.walk(tree):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            upward += [f"{path.relative_to(REPO)} imports {n}" for n in names
                       if n.startswith("onnxq.") and _layer(n) > mine]
    assert not upward, upward


def test_numerics_are_pure_numpy():
    for path, top, tree in _modules():
        if top != "numerics":
            continue
        imported = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not imported & {"onnx", "onnx_ir", "onnxruntime"}, path


def test_no_function_over_60_lines_or_7_parameters():
    too_big = []
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            count = sum(p is not None and p.arg not in ("self", "cls") for p in params)
            lines = node.end_lineno - node.lineno + 1
            if lines > 60 or count > 7:
                too_big.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines, {count} params")
    assert not too_big, too_big


def test_the_layer_order_is_the_architecture_page_s():
    page = (REPO / "docs" / "contributing" / "architecture.md").read_text()
    assert " → ".join(LAYERS[:-2]) in " ".join(page.split())
