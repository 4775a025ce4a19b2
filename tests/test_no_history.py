"""The tree speaks of the project as it is: no working history in code, comments, docstrings, test names, benchmark
scripts, examples or documentation — no work sessions ("the forty-eighth session", "this session"), no issue
numbers, no "before this change", no dates of work. ONNX Runtime's sessions (InferenceSession, "an ORT session",
"session options") are not history, nor are other projects' issues ("ORT issues #11532")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT = {".py", ".md", ".json", ".toml", ".sh", ".txt", ".yml", ".yaml", ".cfg", ".ini"}
_ORDINAL = (r"(?:(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)-(?:first|second|third|fourth|fifth|sixth|"
            r"seventh|eighth|ninth)|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|[a-z]+teenth|"
            r"twentieth|thirtieth|fortieth|fiftieth|sixtieth|\d+(?:st|nd|rd|th))")
PATTERNS = {
    "a work session by its ordinal": re.compile(rf"\b{_ORDINAL}\s+session\b", re.I),
    "a work session": re.compile(r"\b(?:last|previous|earlier|next) session\b|\bthis session\b(?!\s+ran\b)|"
                                 r"\bsession of work\b|\bwork session\b|\b(?:measured|fixed|found|added|seen) "
                                 r"(?:in |during )?(?:this|last|an earlier|the previous|the last) session\b", re.I),
    "an issue number": re.compile(r"(?<![A-Za-z])(?<!ORT )(?<!onnxruntime )(?<!onnxruntime's )issues?[ _#-]?#?\d+|"
                                  r"\bissue #", re.I),
    "a change told as history": re.compile(r"\b(?:before|after) this change\b|\b(?:earlier|later) today\b|"
                                           r"\byesterday\b|\bused to (?:crash|fail|be|give|write|refuse|read|run)\b|"
                                           r"\bthe old (?:default|bar|code|behaviou?r)\b|(?:#\s*|\.\s+|\"\"\"\s*)"
                                           r"[Bb]efore: |\bnow (?:does|keeps|gives|refuses|writes|quantizes)\b",
                                           re.I),
    "a date of work": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
}
# Figures kept as data name the date they were measured: that date is the measurement's, not history.
DATED = ("bench/results/", "docs/benchmarks.md")


def history(text: str, path: str = "") -> list[str]:
    """Each line of `text` that tells working history, with the pattern it matches."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name, pattern in PATTERNS.items():
            if name == "a date of work" and path.startswith(DATED):
                continue
            match = pattern.search(line)
            if match:
                found.append(f"{path}:{number}: {name} ({match.group(0)!r}): {line.strip()[:160]}")
    return found


def _files(folder: Path) -> list[Path]:
    this = Path(__file__).resolve()
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in TEXT and p.resolve() != this
                  and "out" not in p.relative_to(REPO).parts[:2] and "__pycache__" not in p.parts)


def _tree_history(folder: str) -> list[str]:
    found = []
    for path in _files(REPO / folder):
        relative = path.relative_to(REPO).as_posix()
        found += history(path.read_text(errors="replace"), relative)
        found += history(path.name, relative + " (its name)")
    return found


@pytest.mark.parametrize("folder", ["onnxq", "tests", "bench", "examples", "docs"])
def test_no_working_history_in(folder):
    found = _tree_history(folder)
    assert not found, "say what the code does and why, without its history:\n" + "\n".join(found)


def test_no_working_history_in_the_readme():
    # The headline block is generated from bench/results (its measurement's date included) and checked there.
    text = re.sub(r"<!-- headline:start -->.*?<!-- headline:end -->", "", (REPO / "README.md").read_text(),
                  flags=re.S)
    found = history(text, "README.md")
    assert not found, "\n".join(found[:40]) + f"\n… {len(found)} lines"


@pytest.mark.parametrize("line", [
    "Measured at the end of the forty-eighth session on the AMD EPYC.",
    "(twenty-second session) the detector rerun",
    "as measured in the 31st session",
    "fixed this session: the scale grid",
    "what the last session found",
    "a regression from issue 32's VAD",
    "def test_issue31_runs_pass(rng):",
    "(Issue #12)",
    "the gate, before this change, passed it",
    "`--weights int4` used to crash on Constant weights",
    "cosine alone (the old default) passes it",
    "    # Before: 3 QLinearConv",
    "what passes.forms.qdq now keeps from happening",
    "The H100 run of 2026-11-26",
])
def test_the_patterns_catch_working_history(line):
    assert history(line)


@pytest.mark.parametrize("line", [
    "session = ort.InferenceSession(str(path), options)",
    "one ONNX Runtime session over a switch model; an ORT session per provider",
    "options.add_session_config_entry('session.intra_op.allow_spinning', '0')  # session options",
    "the model's own refusal is worded where its first session is made",
    "Quantized nodes the kernel table predicted otherwise than this session ran them.",
    "Both sides of every comparison come from the same session",
    "(ORT issues #11532, #10636: silent disagreement)",
    "    before: Verification",
    "a cache from before: symmetric bounds",
    "the fallback no longer needs float",
])
def test_the_patterns_spare_onnx_runtime_sessions_and_plain_words(line):
    assert history(line) == []
