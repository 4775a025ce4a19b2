"""Every case of the corpus (tests/e2e/corpus.py) through the command line: a refused input gives exit 2, one line
on stderr naming the problem, no file written and the input untouched; an unusual but valid one gives a model that
ONNX Runtime runs. Never a traceback."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest
from corpus import CASES as FIRST
from corpus_guard import CASES as GUARD

from onnxq.cli.main import main
from onnxq.cli.commands import SUBCOMMANDS

CASES = {**FIRST, **GUARD}
assert len(CASES) == len(FIRST) + len(GUARD)  # no name used twice
HANG_SECONDS = 120  # a FIFO read would block forever: a case past this fails instead of hanging the suite


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under the folder (not following symlinks) with a hash of its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_the_corpus_has_at_least_40_cases_in_each_part():
    assert len(FIRST) >= 40 and len(GUARD) >= 40


def _hung(signum, frame):
    raise TimeoutError(f"the case ran past {HANG_SECONDS} s (a blocking read?)")


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_case(name, tmp_path, capsys):
    case = CASES[name]
    if case.needs_non_root and os.geteuid() == 0:
        pytest.skip("file permissions do not bind root, so a read-only folder cannot be made here")
    work = tmp_path / "work"
    work.mkdir()
    args = case.build(work)
    if args[0] not in SUBCOMMANDS and "-o" not in args:
        args = [*args, "-o", str(work / case.output)]
    before = _snapshot(work)
    capsys.readouterr()
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(HANG_SECONDS)
    try:
        code = main(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        for folder in work.rglob("*"):  # a read-only folder made by the case: let tmp_path clean up
            if folder.is_dir() and not os.access(folder, os.W_OK):
                folder.chmod(0o755)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if case.refused is not None:
        lines = captured.err.strip().splitlines()
        assert code == 2, captured.err
        assert len(lines) == 1 and lines[0].startswith("onnxq: error: "), captured.err
        # tmp_path holds the case's name: match the fragment in the message, not in a path it quotes
        assert case.refused in lines[0].replace(str(tmp_path), "<tmp>"), lines[0]
        assert captured.out == ""
        assert _snapshot(work) == before  # nothing written, nothing changed
    else:
        assert code == 0, captured.out + captured.err
        output = Path(args[args.index("-o") + 1])
        after = _snapshot(work)
        assert {k: v for k, v in after.items() if k in before} == before  # the inputs are untouched
        assert output.is_file()
        case.check(output)
