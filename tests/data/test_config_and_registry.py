"""The [data] table in the one QuantConfig (TOML, the API's dict, the flags), and the readers' registry: a new kind of
data is one entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnxq
from onnxq.cli.main import build_parser, main
from onnxq.cli.args import config_from_args
from onnxq.cli.commands import build_calibrate_parser, build_verify_parser
from onnxq.config import DataConfig, QuantConfig
from onnxq.data import READERS, Reader
from onnxq.cli.data_command import build_data_parser
from onnxq.errors import CalibrationDataError, ConfigError


def test_the_data_table_from_toml_a_dict_and_the_flags(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[data]\ntokenizer = "tok.json"\nsize = [256, 192]\nnormalize = "signed"\nmean = [0.5]\n'
                    'input_map = {x = "x_train"}\n')
    from_file = QuantConfig.from_toml(toml).data
    assert from_file == DataConfig(tokenizer="tok.json", size=(256, 192), normalize="signed", mean=(0.5,),
                                   input_map={"x": "x_train"})
    assert QuantConfig.of({"data": {"window": 64, "channel_order": "bgr"}}).data == DataConfig(window=64,
                                                                                              channel_order="bgr")
    args = build_parser().parse_args(["m.onnx", "--config", str(toml), "--size", "224", "--std", "0.5,0.25,0.125",
                                      "--bgr", "--input-map", "y=y_train", "--window", "32"])
    data = config_from_args(args).data
    assert data.size == (224,) and data.std == (0.5, 0.25, 0.125) and data.channel_order == "bgr"
    assert data.input_map == {"x": "x_train", "y": "y_train"} and data.window == 32 and data.tokenizer == "tok.json"
    assert data.normalization.description == "signed with mean [0.5], std [0.5, 0.25, 0.125]"


@pytest.mark.parametrize("table,line", [
    ({"fields": "text"}, "unknown config key 'fields' in [data] — did you mean 'field'?"),
    ({"size": "224"}, "config data.size must be a list of integers"),
    ({"size": [224.5]}, "config data.size must be an integer, got 224.5"),
    ({"normalize": "zscore"}, "data.normalize 'zscore' is not one of imagenet, unit, signed, raw — or give data.mean, "
                              "data.std and data.scale"),
    ({"channel_order": "grb"}, "config data.channel_order = 'grb' is not one of ['rgb', 'bgr'] — did you mean 'rgb'?"),
    ({"max_length": 0}, "data.max_length (--max-length) = 0 is outside its range [1, 1000000]"),
    ({"scale": -1.0}, "data.scale (--scale) = -1.0 is outside its range (0, ∞)"),
])
def test_bad_data_settings_are_one_line(table, line):
    with pytest.raises(ConfigError) as info:
        QuantConfig.of({"data": table})
    assert str(info.value) == line


def test_every_command_that_reads_data_takes_the_same_source_flags():
    flags = ["--tokenizer", "t.json", "--field", "body", "--max-length", "64", "--size", "32", "--input-map", "x=a"]
    parsed = [build_parser().parse_args(["m.onnx", *flags]),
              build_calibrate_parser().parse_args(["m.onnx", "--calib", "d", "-o", "c.json", *flags]),
              build_verify_parser().parse_args(["f.onnx", "q.onnx", "--data", "d", *flags]),
              build_data_parser().parse_args(["m.onnx", "d", "-o", "d.npz", *flags])]
    for args in parsed:
        assert (args.tokenizer, args.field, args.max_length, args.size, args.input_map) == \
            ("t.json", "body", 64, "32", ["x=a"])


def _csv_reader(path: Path, model, config, what):
    """Comma-separated rows of numbers: the samples of a one-input model."""
    try:
        rows = np.loadtxt(path, delimiter=",", dtype=np.float32, ndmin=2)
    except ValueError as e:
        raise CalibrationDataError(f"{what} file {path} is not comma-separated numbers ({e})") from None
    return {model.specs[0].name: rows}


def test_a_new_kind_of_data_is_one_entry_in_the_registry(samples_dir, tmp_path, monkeypatch, capsys):
    x = np.load(samples_dir / "mlp_calib.npz")["x"]
    np.savetxt(tmp_path / "rows.csv", x, delimiter=",")
    assert main([str(samples_dir / "mlp.onnx"), "--calib", str(tmp_path / "rows.csv")]) == 2
    assert "onnxq does not read .csv" in capsys.readouterr().err
    monkeypatch.setitem(READERS, "csv", Reader("csv", ".csv (rows of numbers)", lambda p: p.suffix == ".csv",
                                               _csv_reader))
    summary = onnxq.calibrate(samples_dir / "mlp.onnx", tmp_path / "rows.csv")
    reference = onnxq.calibrate(samples_dir / "mlp.onnx", x)
    assert summary.samples == 256
    for name, observer in summary.observers.items():  # the text round trip keeps float32 to 18 digits: equal
        np.testing.assert_allclose(observer.range(), reference.observers[name].range(), rtol=1e-6)
    code = main([str(samples_dir / "mlp.onnx"), "--calib", str(tmp_path / "rows.csv"), "-o", str(tmp_path / "q.onnx"),
                 "--no-speed", "-q"])
    assert code == 4 and "NOT SHOWN — top-1 agreement" in capsys.readouterr().out  # too few to show 0.99
