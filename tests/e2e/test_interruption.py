"""Interrupted runs leave nothing half-written: Ctrl-C during calibration exits 130 with one line and no file; a
kill (SIGKILL) or SIGTERM while the model is being saved leaves the output path as it was — the model is written
to a hidden staging folder beside it and renamed only when complete (SIGTERM also removes the staging folder)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

# Run in a child: stop in the first calibration batch, or half-way through the save, and print a marker on stdout
# when that point is reached.
CHILD = textwrap.dedent("""
    import signal, sys, time
    import onnxq.io.model
    import onnxq.cli.progress
    from onnxq.cli.main import main

    # A terminal's Ctrl-C: a test runner started in the background (CI's `cmd &`) passes SIGINT on ignored, and
    # Python then installs no KeyboardInterrupt for it; a runner may also pass the signals on blocked (a CI run
    # whose SIGINT stayed pending while the child ran on) — either way the child ran on through the signal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    stage = sys.argv[1]
    if stage == "calibrate":
        def slow(self, samples, _first=[True]):
            if _first:  # wait there for the signal: a parent slow to read the mark must still find calibration
                print("MARK", flush=True)
                _first.clear()
                time.sleep(60)
            time.sleep(0.2)
        onnxq.cli.progress.ProgressBar.__call__ = slow
    else:
        def stuck(model, path, **kwargs):
            with open(path, "wb") as f:
                f.write(b"half a model")
            print("MARK", flush=True)
            time.sleep(60)
        onnxq.io.model.write_streamed = stuck  # what writes a model under 2 GB
    sys.exit(main(sys.argv[2:]))
""")


def _start(stage: str, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, stage, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_mark(child: subprocess.Popen) -> None:
    line = child.stdout.readline()  # blocks until the child reaches the point (or dies)
    assert line.strip() == "MARK", child.stderr.read()


def _communicate(child: subprocess.Popen) -> tuple[str, str]:
    """The child's output once it ends; one that runs on a minute after the signal is killed, and the failure
    shows its signal masks (blocked, ignored, pending) — where a runner's settings swallowed the signal."""
    try:
        return child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        status = Path(f"/proc/{child.pid}/status")
        masks = [line for line in status.read_text().splitlines() if line.startswith("Sig")] if status.exists() else []
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"the child ran on after the signal; its masks {masks}; stderr {err[-1000:]!r}")


def _calibration_run(samples_dir: Path, tmp_path: Path) -> list[str]:
    return [str(samples_dir / "tiny_transformer.onnx"), "--calib", str(samples_dir / "tiny_transformer_calib.npz"),
            "--calib-batch-size", "1", "-o", str(tmp_path / "q.onnx")]


def test_ctrl_c_during_calibration_exits_130_with_one_line_and_no_file(samples_dir, tmp_path):
    child = _start("calibrate", _calibration_run(samples_dir, tmp_path))
    _wait_for_mark(child)
    child.send_signal(signal.SIGINT)
    out, err = _communicate(child)
    # On failure, the child's own words say where the interrupt went.
    assert child.returncode == 130, (out[-2000:], err[-2000:])
    assert err.strip().splitlines() == ["onnxq: interrupted; nothing was written"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_kill_while_saving_leaves_the_output_as_it_was(samples_dir, tmp_path, sig):
    output = tmp_path / "q.onnx"
    output.write_bytes(b"the previous model")
    child = _start("save", [str(samples_dir / "mlp.onnx"), "--no-verify", "-o", str(output)])
    _wait_for_mark(child)
    child.send_signal(sig)
    _, err = _communicate(child)
    assert output.read_bytes() == b"the previous model"  # never a partial model at the output path
    leftovers = [p.name for p in tmp_path.iterdir() if p != output]
    if sig == signal.SIGTERM:  # handled: a line, exit 130, the temporary file removed
        assert child.returncode == 130 and err.strip().splitlines()[-1] == "onnxq: interrupted; nothing was written"
        assert leftovers == []
    else:  # SIGKILL cannot be handled: at most the hidden staging folder stays beside it
        assert child.returncode == -signal.SIGKILL
        assert len(leftovers) == 1 and leftovers[0].startswith(".onnxq-")

