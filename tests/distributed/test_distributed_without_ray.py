"""Without Ray installed, asking for it is one line that says how to get it (exit 2), and nothing is written."""

import sys

import pytest

from onnxq.cli.main import main
from onnxq.distributed import calibrate_on_ray
from onnxq.distributed.ray_calibration import RAY_MISSING
from onnxq.errors import ConfigError


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as where it is not installed


def test_the_api_says_how_to_install_ray(no_ray, samples_dir):
    with pytest.raises(ConfigError, match=r"pip install 'onnxq\[ray\]'"):
        calibrate_on_ray(samples_dir / "tiny_transformer.onnx", [samples_dir / "tiny_transformer_calib.npz"])


def test_the_command_line_says_it_in_one_line(no_ray, samples_dir, tmp_path, capsys):
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "part0.npz").write_bytes((samples_dir / "tiny_transformer_calib.npz").read_bytes())
    code = main(["calibrate", str(samples_dir / "tiny_transformer.onnx"), "--calib", str(folder), "--ray", "-o",
                 str(tmp_path / "c.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"onnxq: error: {RAY_MISSING}" and not (tmp_path / "c.json").exists()
    code = main(["calibrate", str(samples_dir / "tiny_transformer.onnx"), "--calib", str(folder / "part0.npz"),
                 "--ray", "-o", str(tmp_path / "c.json")])
    assert code == 2 and "--ray calibrates a folder of .npz shards" in capsys.readouterr().err
