"""A long run never sits silent: a step past FIRST_S says what it is doing, again every EVERY_S, and how long it
took; a quick one says nothing, so that a short run prints only its summary and a refused input's line stays first."""

import time

import pytest

from onnxq.cli.main import main
from onnxq.steps import heartbeat


def test_a_long_block_says_what_it_does_then_how_long_it_took():
    said = []
    with heartbeat.Heartbeat("calibrating", first_s=0.05, every_s=0.05, say=said.append):
        time.sleep(0.4)
    assert len(said) >= 3, said  # at least two lines while it ran, then the last one
    assert all(line.startswith("calibrating… (") and line.endswith(" s)") for line in said[:-1])
    assert said[-1].startswith("calibrating: done in ")


def test_a_quick_block_says_nothing():
    said = []
    with heartbeat.Heartbeat("verifying", first_s=5.0, say=said.append):
        pass
    assert said == []


def test_a_failing_block_stops_its_lines_and_claims_no_end():
    said = []
    with pytest.raises(ValueError), heartbeat.Heartbeat("saving", first_s=0.02, every_s=10, say=said.append):
        time.sleep(0.1)
        raise ValueError("refused")
    time.sleep(0.1)
    assert said and not any("done" in line for line in said)


@pytest.mark.parametrize("quiet", [False, True])
def test_the_command_prints_a_long_step_s_lines_on_stderr_unless_quiet(samples_dir, tmp_path, capsys, monkeypatch,
                                                                       quiet):
    monkeypatch.setattr(heartbeat, "FIRST_S", 0.0)  # every step counts as long
    argv = [str(samples_dir / "tiny_transformer.onnx"), "--calib", str(samples_dir / "tiny_transformer_calib.npz"),
            "-o", str(tmp_path / "q.onnx")] + (["-q"] if quiet else [])
    assert main(argv) == 0
    err = capsys.readouterr().err
    if quiet:
        assert "onnxq: calibrating" not in err
    else:
        assert "onnxq: loading the model… (0 s)" in err and "onnxq: calibrating… (0 s)" in err
        assert "onnxq: verifying: done in 0 s" in err


def test_a_refused_input_s_line_stays_the_first(samples_dir, tmp_path, capsys):
    assert main([str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "q.onnx")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("onnxq: error:")
