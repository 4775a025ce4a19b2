"""bench/common.py's result file: every benchmark writes its tables and raw figures with the command that ran, the
machine (CPU family / model, the ISA flags that decide ORT's integer kernels, GPUs), the versions and the date."""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def common():
    spec = importlib.util.spec_from_file_location("bench_common", REPO / "bench" / "common.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _cpuinfo(key: str) -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":")[0].strip() == key), None)


def test_the_machine_is_read_as_proc_cpuinfo_says(common):
    info = common.machine_info()
    family = _cpuinfo("cpu family")
    if family is None:
        pytest.skip("no x86 /proc/cpuinfo here")
    assert info["cpu"] == _cpuinfo("model name")
    assert (info["cpu_family"], info["cpu_model"]) == (int(family), int(_cpuinfo("model")))
    flags = set(_cpuinfo("flags").split())
    assert info["isa"] == [f for f in ("avx2", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    assert info["arch"] == platform.machine() and info["providers"] == ort.get_available_providers()


def test_a_result_file_holds_tables_figures_command_machine_versions_date(common, tmp_path, monkeypatch, capsys):
    script = tmp_path / "bench_made_up.py"
    script.write_text('"""A made-up benchmark: what it measures.\n\n    python bench/bench_made_up.py\n"""\n')
    monkeypatch.setattr(sys, "argv", [str(REPO / "bench" / "bench_made_up.py"), "--rounds", "3"])
    table = common.Table(("model", "ms"), (("float", "1.5"),), caption="one row")
    path = common.write_result(tmp_path / "results", str(script), "Made up", [table], {"ms": np.float32(1.5)},
                               variant="small")
    assert path == tmp_path / "results" / "bench_made_up.small.json"
    result = json.loads(path.read_text())
    assert result["command"] == "python bench/bench_made_up.py --rounds 3"
    assert result["title"] == "Made up" and result["measured"].startswith("A made-up benchmark: what it measures.")
    assert result["tables"] == [{"caption": "one row", "columns": ["model", "ms"], "rows": [["float", "1.5"]],
                                 "note": ""}]
    assert result["figures"] == {"ms": 1.5} and result["variant"] == "small" and len(result["date"]) == 10
    assert result["versions"]["onnxruntime"] == ort.__version__ and result["versions"]["numpy"] == np.__version__
    assert result["machine"] == common.machine_info() and len(result["load_average"]) == 3
    assert "| float | 1.5 |" in capsys.readouterr().out  # printed as it is kept


def test_results_none_writes_nothing(common, tmp_path):
    table = common.Table(("a",), (("1",),))
    assert common.write_result("none", str(REPO / "bench" / "bench_minilm.py"), "t", [table], {}) is None
    assert list(tmp_path.iterdir()) == []
