"""The package's shape, checked: small functions, packages in tiers that import only downward, no import cycle
(docs/contributing/architecture.md)."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from conftest import REPO

PACKAGE = REPO / "onnxq"
# Packages (and the root's few modules) lowest first: a module imports from its own package and the tiers before
# it, never after. The architecture page lists the same order.
TIERS = ("errors", "numerics", "targets", "io", "config", "data", "calibration", "handlers", "passes", "verify",
         "report", "search", "smoothing", "calibration_api", "distributed", "ranges", "steps", "pipeline", "__init__",
         "cli", "__main__")


def _module_name(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield path, parts[0] if parts[0] != "__init__" else "__init__", ast.parse(path.read_text())


def _tier(module: str) -> int:
    parts = module.split(".")
    return TIERS.index(parts[1] if len(parts) > 1 else "__init__")


def _imported(node: ast.AST) -> list[str]:
    """The onnxq modules an import statement reads: `from onnxq.a import b` reads onnxq.a.b where b is a module."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("onnxq")]
    if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("onnxq")):
        return []
    base = PACKAGE.parent.joinpath(*node.module.split("."))
    submodules = [f"{node.module}.{a.name}" for a in node.names
                  if (base / f"{a.name}.py").is_file() or (base / a.name / "__init__.py").is_file()]
    return submodules or [node.module]


def _module_level_imports(tree: ast.Module) -> list[str]:
    """Imports run when the module loads, and those under `if TYPE_CHECKING:` (a type is a dependency too); an
    import inside a function is not among them."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.If):
            found += [n for statement in node.body for n in _imported(statement)]
        found += _imported(node)
    return found


def test_every_module_has_a_tier_and_imports_only_downward():
    upward = []
    for path, top, tree in _modules():
        assert top in TIERS, f"{path} is in no tier: add it to TIERS and to docs/contributing/architecture.md"
        mine = TIERS.index(top)
        for node in ast.walk(tree):
            upward += [f"{path.relative_to(REPO)} imports {n}" for n in _imported(node) if _tier(n) > mine]
    assert not upward, upward


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of the graph, or []."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                return path[path.index(imported):] + [imported]
            if imported not in state and (found := walk(imported)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := walk(module)):
            return found
    return []


def test_no_module_imports_one_that_imports_it_back():
    graph = {_module_name(path): set(_module_level_imports(tree)) - {_module_name(path)}
             for path, _, tree in _modules()}
    assert _cycle(graph) == [], " → ".join(_cycle(graph))


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


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


def test_the_tier_order_is_the_architecture_page_s():
    page = (REPO / "docs" / "contributing" / "architecture.md").read_text()
    assert " → ".join(TIERS) in " ".join(page.split())


def _written_fields(tree: ast.Module) -> set[str]:
    """The RunState fields a module assigns (state.x = …, state.x, state.y = …)."""
    written = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(one, ast.Attribute) and isinstance(one.value, ast.Name) and one.value.id == "state":
                    written.add(one.attr)
    return written


def test_the_configuration_is_resolved_in_one_step():
    """state.resolved (the config and the mode) is written by steps/resolve.py alone: every later step reads the one
    configuration the report shows."""
    writers = {path.name for path, top, tree in _modules() if {"resolved"} & _written_fields(tree)}
    assert writers == {"resolve.py"}


# The run's append-only logs, which every step adds to: the only RunState fields more than one step module writes.
RUN_LOGS = {"notes", "sections", "timings"}


def _changed_in_place(tree: ast.Module) -> set[str]:
    """What a module changes inside the state's values: state.x.y = … (a record's field), state.x.append(…) and the
    other mutating calls (named by the field: state.x)."""
    changed = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(one, ast.Attribute) and isinstance(one.value, ast.Attribute) \
                        and isinstance(one.value.value, ast.Name) and one.value.value.id == "state":
                    changed.add(f"{one.value.attr}.{one.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and owner.value.id == "state":
                changed.add(owner.attr)
    return changed


MUTATORS = {"append", "extend", "update", "add", "insert", "pop", "remove", "clear", "setdefault"}


def test_no_run_state_field_is_written_by_two_step_modules():
    """Each RunState field (a step's record, a search's result) is set by one module of onnxq/steps, as a new value;
    the searches' chosen models become the run's through RunState.adopt alone (state.py, not a step). Only the
    append-only logs are written by many, and nothing else is changed in place."""
    from onnxq.steps.state import RunState

    fields = {f.name for f in dataclasses.fields(RunState)}
    writers: dict[str, set[str]] = {}
    changed = []
    for path, top, tree in _modules():
        for name in _written_fields(tree):
            writers.setdefault(name, set()).add(path.name)
        changed += [f"{path.name}: state.{name}" for name in _changed_in_place(tree) if name not in RUN_LOGS]
    shared = {name: sorted(modules) for name, modules in writers.items() if len(modules) > 1 and name not in RUN_LOGS}
    assert not shared, shared
    assert not changed, changed
    assert set(writers) <= fields, set(writers) - fields  # no write to a name RunState lacks (a property raises)
    assert {"loaded", "resolved", "planned", "calibrated", "quantized", "verified", "saved"} <= set(writers)


def test_the_run_s_records_are_frozen():
    """A step's record cannot be changed, only replaced by a new one: assigning a field raises."""
    from onnxq.config import QuantConfig
    from onnxq.steps.records import RECORDS
    from onnxq.steps.state import RunInputs, RunState

    state = RunState(RunInputs("model.onnx", None, None, None, None, None), QuantConfig())
    record_fields = [f.name for f in dataclasses.fields(RunState) if f.name in RECORDS]
    assert sorted(record_fields) == sorted(RECORDS)
    for name in record_fields:
        record = getattr(state, name)
        assert type(record) is RECORDS[name]
        first = dataclasses.fields(record)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, first, None)
    assert state.resolved.config == QuantConfig() and state.resolved.mode == ""  # the caller's until resolved


# What the searches may read of verification: its face, the runner API, the verdict words, the task types and the
# timing of two models. Everything else in verify/ is the gate's own.
VERIFY_FACE = {"onnxq.verify", "onnxq.verify.runner", "onnxq.verify.result", "onnxq.verify.tasks.types",
               "onnxq.verify.speed.latency"}


def test_the_searches_use_verification_through_its_runner_api():
    searches = [(path, tree) for path, top, tree in _modules()
                if top == "search" or path.name in ("sensitivity.py", "fallback.py", "recipe.py") and top == "steps"]
    inner = [f"{path.relative_to(REPO)} imports {name}" for path, tree in searches for node in ast.walk(tree)
             for name in _imported(node) if name.startswith("onnxq.verify") and name not in VERIFY_FACE]
    assert len(searches) > 10 and not inner, inner
