"""The reference pages generated from the code (docs/gen/all.py) are what the code gives: the command line's flags,
every configuration key with its meaning and flag, the public API, the report's schema."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys

import pytest
from conftest import REPO

import onnxq
from onnxq.config.schema import QScheme

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

GEN = REPO / "docs" / "gen"
TABLES = (onnxq.QuantConfig, QScheme, onnxq.BlockConfig, onnxq.CalibrationConfig, onnxq.VerifyConfig,
          onnxq.Tolerance, onnxq.DataConfig)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"onnxq_docs_{name}", GEN / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages():
    return {path.name: text for path, text in _load("all").expected_pages().items()}


def test_every_generated_page_is_what_the_code_gives():
    stale = [str(p.relative_to(REPO)) for p in _load("all").stale_pages()]
    assert not stale, f"{stale} stale: run python docs/gen/all.py"


def test_the_check_mode_names_a_stale_page_and_exits_1(tmp_path, monkeypatch, capsys):
    generator = _load("all")
    page = tmp_path / "reference" / "config.md"
    expected = {page: "# Configuration\n"}
    monkeypatch.setattr(generator, "expected_pages", lambda: expected)
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    assert generator.main(["--check"]) == 1 and not page.exists()
    assert "reference/config.md is stale: run python docs/gen/all.py" in capsys.readouterr().err
    assert generator.main([]) == 0 and page.read_text() == "# Configuration\n"
    assert generator.main(["--check"]) == 0


def test_every_config_key_has_its_row_with_its_meaning(pages):
    config_page = pages["config.md"]
    generator = _load("config_reference")
    for table in TABLES:
        meanings = generator.field_comments(table)
        for field in dataclasses.fields(table):
            said = generator._cell(generator._words(meanings[field.name]))
            row = next((line for line in config_page.splitlines() if line.startswith(f"| `{field.name}` |")
                        and line.endswith(f"| {said} |")), None)
            assert row is not None, f"{table.__name__}.{field.name} has no row with its meaning"


@dataclasses.dataclass(frozen=True)
class _Uncommented:
    # A setting with its meaning.
    said: int = 1
    unsaid: int = 2


def test_a_key_without_a_comment_above_it_is_refused():
    with pytest.raises(ValueError, match=r"_Uncommented\.unsaid \(.*test_generated_pages\.py:\d+\) has no comment"):
        _load("config_reference").field_comments(_Uncommented)


def test_the_flag_column_is_what_the_command_line_sets(pages):
    keys = _load("config_flags").flag_keys()
    assert keys["calibration.percentile"] == ["`--percentile`"]
    assert keys["weights.dtype"] == ["`--weights`"] and keys["weights.symmetric"] == ["`--weights uint4`"]
    assert keys["verify.tolerance.min_cosine"] == ["`--min-cosine`", "`--tolerance cosine=X`"]
    assert keys["verify.task_metric"] == ["`--task-metric MODULE:FUNCTION`"]
    assert keys["blocks.size"] == ["`--block`"]  # set beside --weights int4 only
    assert "calibration.histogram_bins" not in keys
    found = {flag for flags in keys.values() for flag in flags}
    # Flags that name files or say how to print set no key.
    for flag in ("--calib", "--verify-data", "--output", "--config", "--report", "--html", "--quiet", "--verbose"):
        assert not any(f.split()[0].strip("`") == flag for f in found), flag
    row = next(line for line in pages["config.md"].splitlines() if line.startswith("| `percentile` |"))
    assert "| number in (0, 100] | `99.999` | `--percentile` |" in row


def test_the_config_pages_example_is_a_config(pages):
    text = pages["config.md"]
    start = text.index("```toml") + len("```toml")
    config = onnxq.QuantConfig.from_dict(tomllib.loads(text[start:text.index("```", start)]))
    assert config.calibration.method == "minmax" and config.verify.output_tolerances["logits"].topk == 5


def test_the_api_page_has_every_public_name(pages):
    names = re.findall(r"^      heading: onnxq\.(\w+)$", pages["api.md"], re.M)
    assert sorted(names) == sorted(n for n in onnxq.__all__ if not n.startswith("__"))


def test_the_schema_page_has_every_field_of_the_schema(pages):
    schema = json.loads((REPO / "onnxq" / "report_schema.json").read_text())
    names = set()

    def walk(node):
        if isinstance(node, dict):
            names.update(node.get("properties", {}))
            names.update(node.get("required", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    missing = [n for n in names if f"`{n}`" not in pages["report-schema.md"]]  # a row, or a small object inline
    assert not missing and len(names) > 100, missing


def test_no_generated_page_speaks_of_its_history(pages):
    history = re.compile(r"\bissue \d+|\bREADME\b|\bthe old default\b|\bbefore this change\b", re.I)
    found = {name: history.findall(text) for name, text in pages.items() if history.search(text)}
    assert not found, found
