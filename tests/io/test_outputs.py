"""The output guard (onnxq.io.outputs): every output checked against the run's inputs and other outputs before any
work, staged beside its target, moved into place together at the end — or none, with what it replaced restored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

import onnxq.io.outputs as outputs
from onnxq.errors import InputChangedError, OutputPathError
from onnxq.io import RunFiles, run_files, write_output


def _write(text: str):
    return lambda staged: staged.write_text(text)


def test_outputs_appear_only_when_the_run_ends_well(tmp_path):
    with run_files() as files:
        files.claim(tmp_path / "a.txt", "a")
        files.claim(tmp_path / "b.txt", "b")
        files.stage(tmp_path / "a.txt", _write("A"))
        files.stage(tmp_path / "b.txt", _write("B"))
        assert not (tmp_path / "a.txt").exists()  # staged, not yet in place
        assert files.staged_bytes([tmp_path / "a.txt", tmp_path / "b.txt"]) == 2
    assert (tmp_path / "a.txt").read_text() == "A" and (tmp_path / "b.txt").read_text() == "B"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]  # no staging folder left


def test_a_run_that_raises_writes_nothing(tmp_path):
    (tmp_path / "a.txt").write_text("previous")
    with pytest.raises(RuntimeError), run_files() as files:
        files.claim(tmp_path / "a.txt", "a")
        files.stage(tmp_path / "a.txt", _write("new"))
        raise RuntimeError("a later step failed")
    assert (tmp_path / "a.txt").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_failed_rename_puts_back_what_was_replaced(tmp_path, monkeypatch):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"previous {name}")
    real_replace = os.replace

    def failing_second(src, dst):
        if Path(dst).name == "b.txt":
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(outputs.os, "replace", failing_second)
    with pytest.raises(OutputPathError, match="No space left on device"), run_files() as files:
        for name in ("a.txt", "b.txt"):
            files.claim(tmp_path / name, name)
            files.stage(tmp_path / name, _write("new"))
    monkeypatch.undo()
    assert (tmp_path / "a.txt").read_text() == "previous a.txt"  # replaced, then restored
    assert (tmp_path / "b.txt").read_text() == "previous b.txt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_an_output_cannot_be_an_input_or_another_output(tmp_path):
    (tmp_path / "in.onnx").write_bytes(b"model")
    (tmp_path / "sub").mkdir()
    files = RunFiles()
    files.add_input(tmp_path / "in.onnx", "the input model")
    with pytest.raises(OutputPathError, match="would overwrite the input model"):
        files.claim(tmp_path / "sub" / ".." / "in.onnx", "output")  # the same file by another spelling
    files.claim(tmp_path / "r.json", "--report")
    with pytest.raises(OutputPathError, match="is also the run's --report"):
        files.claim(tmp_path / "r.json", "--html")
    with pytest.raises(OutputPathError, match="--report .* would overwrite the calibration data"):
        files.add_input(tmp_path / "r.json", "the calibration data")  # declared after the output: still caught
    os.symlink(tmp_path / "in.onnx", tmp_path / "link.onnx")
    with pytest.raises(OutputPathError, match="would overwrite the input model"):
        files.claim(tmp_path / "link.onnx", "output")


@pytest.mark.parametrize("make,kind", [
    (lambda p: os.mkfifo(p), "a named pipe"),
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: p.symlink_to("/dev/null"), "a character device"),
])
def test_only_regular_files_are_replaced(tmp_path, make, kind):
    make(tmp_path / "out")
    with pytest.raises(OutputPathError, match=kind):
        write_output(tmp_path / "out", _write("x"))
    assert os.path.realpath("/dev/null") == "/dev/null" and Path("/dev/null").is_char_device()


def test_an_input_changed_before_the_end_stops_the_commit(tmp_path):
    (tmp_path / "data.npz").write_bytes(b"samples")
    with pytest.raises(InputChangedError, match="the calibration data .* changed while onnxq ran"):
        with run_files() as files:
            files.read(tmp_path / "data.npz", "the calibration data")
            files.claim(tmp_path / "out.txt", "output")
            files.stage(tmp_path / "out.txt", _write("x"))
            (tmp_path / "data.npz").write_bytes(b"other samples")
    assert not (tmp_path / "out.txt").exists()


_FULL_DISK_CHILD = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from onnxq.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("limit,which", [(512, "could not write output"), (1500, "could not write --report"),
                                         (2048, "onnxruntime's profile of the quantized model could not be read")])
def test_a_full_disk_ends_in_one_line_and_leaves_the_previous_files(tmp_path, limit, which):
    """Files past `limit` bytes fail as on a full disk. 512: the model (980 bytes) cannot be written; 1500: it can,
    the report (2.5 KB) cannot — the staged model is dropped too; 2048 with verification: ORT's profile, in the
    temporary folder, comes back cut short."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
    from corpus import _good_model, _npz, _weight

    model, data = _good_model(tmp_path), _npz(tmp_path, x=_weight((20, 16), seed=3))
    (tmp_path / "q.onnx").write_bytes(b"previous model")
    verify = ["--no-verify"] if limit < 2048 else []
    run = subprocess.run([sys.executable, "-c", _FULL_DISK_CHILD, str(limit), model, "--calib", data, "-o",
                          str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.json"), *verify],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert which in lines[0]
    assert (tmp_path / "q.onnx").read_bytes() == b"previous model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "m.onnx", "q.onnx"]
