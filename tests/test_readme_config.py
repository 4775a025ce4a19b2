"""The configuration README.md documents is one QuantConfig accepts, key for key."""

from __future__ import annotations

import sys

import onnxq
from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def test_readme_toml_example_loads():
    text = (REPO / "README.md").read_text()
    start = text.index("```toml") + len("```toml")
    config = onnxq.QuantConfig.from_dict(tomllib.loads(text[start:text.index("```", start)]))
    assert config.blocks.size == 32 and config.calibration.method == "percentile"
    assert config.verify.output_tolerances["sentence_embedding"].min_cosine == 0.996


def test_readme_states_every_range_the_config_checks():
    from onnxq.config.checks import RANGES, setting_name

    rows = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `")]
    for (kind, field), rule in RANGES.items():
        row = next((r for r in rows if r.startswith(f"| `{setting_name(kind, field)}`")), None)
        assert row is not None, f"README has no row for {setting_name(kind, field)}"
        assert rule.describe() in row, (row, rule.describe())
