"""docs/benchmarks.md, bench/results/headline.md and README's headline block are generated from
bench/results/*.json by bench/tables.py: a figure changed in one place and not the other fails here."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = _module("bench_tables", REPO / "bench" / "tables.py")


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The result files, the bench scripts and the generated pages, copied: a repository to change."""
    shutil.copytree(REPO / "bench", tmp_path / "bench", ignore=shutil.ignore_patterns("out", "__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs" / "benchmarks.md", tmp_path / "docs" / "benchmarks.md")
    (tmp_path / "README.md").write_text("# onnxq\n\nintro\n\n<!-- headline:start -->\nold table\n"
                                        "<!-- headline:end -->\n\nthe rest\n")
    assert tables.main([], repo=tmp_path) == 0  # the README block filled in
    return tmp_path


def test_the_generated_pages_agree_with_the_result_files():
    assert list((REPO / "bench" / "results").glob("*.json")), "no result file: run python bench/bench_minilm.py"
    assert tables.stale(REPO) == [], "run python bench/tables.py"


def test_every_result_names_its_command_machine_versions_and_date():
    for path in sorted((REPO / "bench" / "results").glob("*.json")):
        result = json.loads(path.read_text())
        assert result["command"].startswith(f"python {result['script']}"), path.name
        machine = result["machine"]
        assert machine["cpu"] and machine["cores"] >= 1 and isinstance(machine["isa"], list), path.name
        assert {"onnxq", "onnxruntime", "onnx", "numpy", "python"} <= set(result["versions"]), path.name
        assert len(result["date"]) == 10 and result["tables"], path.name


def _changed(repo: Path, where: str) -> str:
    """Change the first figure of bench_minilm.json's first table or headline (its onnxq row's second cell);
    return the new cell."""
    result_file = repo / "bench" / "results" / "bench_minilm.json"
    result = json.loads(result_file.read_text())
    table = result["headline"] if where == "headline" else result["tables"][0]
    row = next(r for r in table["rows"] if r[0] == "onnxq static")
    row[1] += "1"
    result_file.write_text(json.dumps(result))
    return row[1]


def _stale(repo: Path) -> set[str]:
    return {p.relative_to(repo).as_posix() for p in tables.stale(repo)}


def test_a_figure_changed_in_a_result_file_makes_its_page_stale(repo_copy):
    assert tables.stale(repo_copy) == []
    cell = _changed(repo_copy, "tables")
    assert _stale(repo_copy) == {"docs/benchmarks.md"}
    assert tables.main(["--check"], repo=repo_copy) == 1
    assert tables.main([], repo=repo_copy) == 0 and tables.stale(repo_copy) == []
    assert f"| {cell} |" in (repo_copy / "docs" / "benchmarks.md").read_text()


def test_a_headline_figure_changed_makes_the_snippet_and_readme_stale(repo_copy):
    cell = _changed(repo_copy, "headline")
    assert _stale(repo_copy) == {"bench/results/headline.md", "README.md"}
    assert tables.main(["--check"], repo=repo_copy) == 1
    assert tables.main([], repo=repo_copy) == 0 and tables.stale(repo_copy) == []
    assert f"| {cell} |" in (repo_copy / "README.md").read_text()


def test_a_page_edited_by_hand_is_stale(repo_copy):
    page = repo_copy / "docs" / "benchmarks.md"
    page.write_text(page.read_text().replace("0.", "0,", 1))
    assert tables.stale(repo_copy) == [page]


def test_readme_keeps_everything_outside_its_markers(repo_copy):
    readme = (repo_copy / "README.md").read_text()
    headline = (repo_copy / "bench" / "results" / "headline.md").read_text()
    assert readme == ("# onnxq\n\nintro\n\n<!-- headline:start -->\n" + headline + "<!-- headline:end -->\n\n"
                      "the rest\n")
    assert tables.with_headline("no markers here\n", headline) is None


def test_the_headline_names_its_machine_and_links_every_benchmark():
    headline = (REPO / "bench" / "results" / "headline.md").read_text()
    minilm = json.loads((REPO / "bench" / "results" / "bench_minilm.json").read_text())
    assert minilm["machine"]["cpu"] in headline and minilm["versions"]["onnxruntime"] in headline
    assert "[docs/benchmarks.md](docs/benchmarks.md)" in headline
    assert "| onnxq static |" in headline and "| ORT quantize_static |" in headline
