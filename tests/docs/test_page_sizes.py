"""README is a front page and each documentation page answers one question: their sizes are bounded, and every page
of docs/ is in the site's nav (a page outside it is found by no reader)."""

from __future__ import annotations

import re

from conftest import REPO

README_MAX_LINES = 250
PAGE_MAX_LINES = 400


def test_the_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail into docs/"


def test_every_page_fits_its_question():
    long = {str(p.relative_to(REPO)): n for p in sorted((REPO / "docs").rglob("*.md"))
            if (n := len(p.read_text().splitlines())) > PAGE_MAX_LINES}
    assert not long, f"pages over {PAGE_MAX_LINES} lines (split them by question): {long}"


def test_every_page_is_in_the_nav():
    nav = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M))
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages - nav == set(), f"pages no nav entry reaches: {sorted(pages - nav)}"
