"""A misspelt flag, command, config key, tolerance metric or task kind: one line naming the nearest right one, exit 2,
nothing written, the inputs untouched."""

from __future__ import annotations

import shutil

import pytest

import onnxq
from onnxq.cli.main import main
from onnxq.cli.help import command_names
from onnxq.errors import ConfigError


@pytest.fixture
def work(samples_dir, tmp_path):
    for name in ("mlp.onnx", "mlp_calib.npz"):
        shutil.copy(samples_dir / name, tmp_path / name)
    (tmp_path / "q.toml").write_text("[calibration]\npercentil = 99.99\n")
    return tmp_path


def _state(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


CASES = {
    "flag": (["M", "--calibb", "D"], "unknown flag '--calibb' — did you mean '--calib'?"),
    "flag, a prefix of a real one": (["M", "--calib", "D", "--min-cosin", "0.99"],
                                     "unknown flag '--min-cosin' — did you mean '--min-cosine'?"),
    # A flag cut short means the shortest it begins, not a lookalike (--scale is as near as --calib by difflib).
    "flag cut short": (["M", "--cal", "D"], "unknown flag '--cal' — did you mean '--calib'?"),
    "flag with its value after =": (["M", "--calib", "D", "--verify-dat=D"],
                                    "unknown flag '--verify-dat' — did you mean '--verify-data'?"),
    # Before the missing MODEL: the misspelt flag is what went wrong.
    "flag, and no model": (["--calibb", "D"], "unknown flag '--calibb' — did you mean '--calib'?"),
    "flag far from any": (["M", "--frobnicate"], "unknown flag '--frobnicate' — see python -m onnxq --help for the "
                                                 "flags"),
    "flag of a command": (["verify", "M", "M", "--dat", "D"], "unknown flag '--dat' — did you mean '--data'?"),
    "command": (["calibrat", "M", "--calib", "D", "-o", "OUT"], "unknown command 'calibrat' — did you mean "
                                                               "'calibrate'?"),
    "help of a misspelt command": (["help", "verfy"], "unknown command 'verfy' — did you mean 'verify'?"),
    "config key in a table": (["M", "--calib", "D", "--config", "TOML"],
                              "unknown config key 'percentil' in [calibration] — did you mean 'percentile'?"),
    "tolerance metric": (["M", "--calib", "D", "--tolerance", "cosin=0.99"],
                         "--tolerance 'cosin=0.99': unknown metric 'cosin' — did you mean 'cosine'?"),
    "tolerance metric of an output": (["M", "--tolerance", "logits:argmx=0.99"],
                                      "--tolerance 'logits:argmx=0.99': unknown metric 'argmx' — did you mean "
                                      "'argmax'?"),
    "task kind in --task-metric": (["M", "--calib", "D", "--task-metric", "sequnce"],
                                   "--task-metric 'sequnce' is not a task kind — did you mean 'sequence'?"),
    "task kind in --tolerance": (["M", "--tolerance", "logits:task=frame"],
                                 "--tolerance 'logits:task=frame': 'frame' is not a task kind — did you mean "
                                 "'frames'?"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_with_the_nearest_name_exit_2_nothing_written(work, capsys, case):
    args, line = CASES[case]
    names = {"M": work / "mlp.onnx", "D": work / "mlp_calib.npz", "OUT": work / "s.json", "TOML": work / "q.toml"}
    args = [str(names[a]) if a in names else a.replace("=D", f"={names['D']}") for a in args]
    before = _state(work)
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == f"onnxq: error: {line}\n" and captured.out == ""
    assert _state(work) == before


def test_a_command_with_no_near_name_lists_the_commands(capsys):
    assert main(["help", "nonsense"]) == 2
    assert capsys.readouterr().err == (f"onnxq: error: unknown command 'nonsense'; the commands are "
                                       f"{', '.join(command_names())}\n")


def test_a_misspelt_model_path_is_not_a_command(work, capsys, monkeypatch):
    """A path (a suffix, a folder) or a file that exists is the model, however near a command's name."""
    assert main([str(work / "mlp.onx")]) == 2
    assert capsys.readouterr().err.startswith("onnxq: error: model file not found: ")
    monkeypatch.chdir(work)
    shutil.copy(work / "mlp.onnx", work / "merg")
    assert main(["merg", "--calib", "mlp_calib.npz", "-o", "merg.int8.onnx", "--no-verify"]) == 0
    assert (work / "merg.int8.onnx").is_file()


@pytest.mark.parametrize("config, message", [
    ({"calibration": {"percentil": 99.9}}, "unknown config key 'percentil' in [calibration] — did you mean "
                                           "'percentile'?"),
    ({"mdoe": "static"}, "unknown config key 'mdoe' — did you mean 'mode'?"),
    ({"calibraton": {}}, "unknown config key 'calibraton' — did you mean 'calibration'?"),
    ({"verify": {"tolerance": {"min_cosin": 0.9}}}, "unknown config key 'min_cosin' in [verify.tolerance] — did you "
                                                     "mean 'min_cosine'?"),
    ({"verify": {"output_tolerances": {"logits": {"min_sqn_db": 20}}}},
     "unknown config key 'min_sqn_db' in [verify.output_tolerances.logits] — did you mean 'min_sqnr_db'?"),
    ({"calibration": {"zzzz": 1}}, "unknown config key 'zzzz' in [calibration]; its keys are batch_size, "
                                   "constant_inputs, histogram_bins, max_samples, method, percentile, range_choice, "
                                   "sample_axes, unbatched_inputs"),
    ({"calibration": {"method": "precentile"}}, "calibration.method 'precentile' is not one of ['minmax', "
                                                "'avgminmax', 'percentile', 'entropy', 'mse'] — did you mean "
                                                "'percentile'?"),
    ({"activation_granularity": "per-tokens"}, "config activation_granularity = 'per-tokens' is not one of ['auto', "
                                               "'per-tensor', 'per-token'] — did you mean 'per-token'?"),
])
def test_the_api_s_dict_config_names_the_nearest_key(samples_dir, config, message):
    with pytest.raises(ConfigError) as refused:
        onnxq.quantize(samples_dir / "mlp.onnx", None, config=config)
    assert str(refused.value) == message
