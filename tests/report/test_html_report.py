"""The HTML report's structure: bars coloured by their share of the tolerance with the tolerance line drawn, the
command and configuration that made it, caveats in the headline, the fallback told in words. (How it looks is
checked by eye in a browser: docs/verification/report.md.)"""

from __future__ import annotations

import json
import re
import shlex
from html.parser import HTMLParser

import pytest

import onnxq
from onnxq.cli.main import main
from onnxq.report.record import SHARE_COLOURS, bar_chart, escape


class _Elements(HTMLParser):
    """Each element's tag and attributes, and the text inside each element with a class."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self._open: list[tuple[str, dict, list[str]]] = []
        self.texts: list[tuple[str, str]] = []  # (class, text inside)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag not in ("line", "rect", "i", "br", "meta"):
            self._open.append((tag, dict(attrs), []))

    def handle_endtag(self, tag):
        while self._open:
            name, attrs, text = self._open.pop()
            if attrs.get("class"):
                self.texts.append((attrs["class"], "".join(text)))
            if self._open:
                self._open[-1][2].extend(text)
            if name == tag:
                break

    def handle_data(self, data):
        if self._open:
            self._open[-1][2].append(data)


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


def test_bars_are_coloured_by_their_share_and_the_tolerance_is_drawn():
    chart = _parse(bar_chart([("well within", 0.1), ("near", 0.7), ("over", 2.0), ("at zero", 0.0)], "harm",
                             limit=1.0))
    fills = [attrs["fill"] for tag, attrs in chart.elements if tag == "rect"]
    assert fills == [SHARE_COLOURS["within"], SHARE_COLOURS["near"], SHARE_COLOURS["over"], SHARE_COLOURS["within"]]
    (line,) = [attrs for tag, attrs in chart.elements if tag == "line"]
    # The axis reaches the largest bar (2.0) over 320 px from x = 380: the bar 1.0 sits half way.
    assert line["class"] == "tolerance" and float(line["x1"]) == pytest.approx(380 + 320 * 1.0 / 2.0)
    widths = [float(attrs["width"]) for tag, attrs in chart.elements if tag == "rect"]
    assert widths == pytest.approx([16.0, 112.0, 320.0, 2.0])


@pytest.fixture(scope="module")
def failing_page(samples_dir, tmp_path_factory):
    """The sample MLP held to SQNR 40 dB, which it misses even with all but one node float (measured: the
    fallback cannot meet it)."""
    folder = tmp_path_factory.mktemp("failing")
    args = [str(samples_dir / "mlp.onnx"), "--calib", str(samples_dir / "mlp_calib.npz"), "-o",
            str(folder / "q.onnx"), "--tolerance", "sqnr=40", "--html", str(folder / "r.html"), "--report",
            str(folder / "r.json")]
    assert main(args) == 1
    logits = json.loads((folder / "r.json").read_text())["verification"]["providers"]["CPUExecutionProvider"]
    return args, (folder / "r.html").read_text(), logits["outputs"]["logits"]


def test_the_page_says_what_made_it(failing_page):
    args, page, _ = failing_page
    command = escape("python -m onnxq " + shlex.join(args))
    assert f"<pre class='command'>{command}</pre>" in page
    # The settings given differ from the defaults and are listed; the whole configuration is folded below.
    assert "verify.tolerance.min_sqnr_db = 40.0" in page and "<summary>The whole configuration</summary>" in page


def test_figures_are_coloured_by_their_share(failing_page):
    _, page, logits = failing_page
    cells = {text.split()[0]: cls for cls, text in _parse(page).texts if cls.startswith("num ")}
    # The logits' cosine (0.9997 measured) uses 1.5 % of its tolerance; its SQNR (33.9 dB) over 400 %.
    cosine, sqnr = f"{logits['cosine_mean']:.5f}", f"{logits['sqnr_db']:.1f}"
    assert cells[cosine] == "num within" and cells[sqnr] == "num over"
    assert f"<td class='num over' title='{10 ** ((40 - logits['sqnr_db']) / 10):.0%} of the tolerance'>{sqnr} " \
           "<br><span class='bar'>(&gt;= 40)</span></td>" in page


def test_the_headline_says_the_verdict_and_what_fails(failing_page):
    _, page, logits = failing_page
    headline = next(text for cls, text in _parse(page).texts if cls.startswith("headline"))
    assert headline.startswith("OUT OF TOLERANCE") and "CPU: logits: " + "; ".join(logits["failures"]) in headline
    assert "The fallback could not meet the tolerance by keeping nodes float" in headline
    assert "class='headline verdict-fail'" in page


def test_a_fallback_that_cannot_be_met_is_told_in_words(failing_page):
    _, page, logits = failing_page
    section = page.split("<h2>Fallback: the tolerance cannot be met</h2>", 1)[1].split("\n", 1)[0]  # its own part
    paragraphs = re.findall(r"<p>(.*?)</p>", section)
    assert len(paragraphs) == 3
    assert paragraphs[0] == escape(f"The model as planned missed its tolerance on 128 samples (logits: "
                                   f"{'; '.join(logits['failures'])}).")
    assert "ranked the 3 quantized nodes by harm" in paragraphs[1] and "all but the least harmful float (2 float, " \
           "only /fc2/Gemm quantized" in paragraphs[1] and paragraphs[1].endswith("even that misses the tolerance.")
    assert paragraphs[2].startswith("Keeping every node float would give back the float model, so it stopped there")


def test_a_fallback_that_met_the_tolerance_says_what_it_kept(samples_dir, tmp_path):
    code = main([str(samples_dir / "mlp.onnx"), "--calib", str(samples_dir / "mlp_calib.npz"), "-o",
                 str(tmp_path / "q.onnx"), "--tolerance", "sqnr=36", "--html", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text()
    kept = re.search(r"<h2>Fallback: met by keeping (\d+) node\(s\) float</h2>", page)
    assert code == 4 and kept  # 128 answers cannot show the default top-1 bar of 0.99: not shown
    assert f"It keeps {kept.group(1)} node(s) float, listed below with their harm; the model then meets the " \
           "tolerance on all 128 samples" in page
    assert f"The fallback kept {kept.group(1)} node(s) float to meet the tolerance" in page  # in the headline


def test_made_up_inputs_are_a_caveat_in_the_headline(samples_dir):
    report = onnxq.quantize(samples_dir / "tiny_transformer.onnx", config={"verify": {"sensitivity_samples": 0}}).report
    page = onnxq.QuantResult(None, None, report).to_html()
    headline = next(text for cls, text in _parse(page).texts if cls.startswith("headline"))
    assert report.passed and "class='headline verdict-warn'" in page
    assert headline.startswith("within tolerance on made-up inputs — pass --verify-data for a verdict on yours")
    assert "Verified on made-up random inputs, for want of data: a smoke test, not a measure of accuracy" in headline


def test_a_verdict_the_data_cannot_show_is_the_headline(samples_dir):
    """The sample classifier's 128 held-back answers cannot show its 0.99 top-1 bar: the headline says not shown and
    why, in amber, once."""
    report = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                            config={"verify": {"sensitivity_samples": 0}}).report
    page = onnxq.QuantResult(None, None, report).to_html()
    assert report.verdict == "not shown" and "class='headline verdict-warn'" in page
    assert "<p class='verdict'>NOT SHOWN — top-1 agreement" in page
    assert "cannot show the 0.99 bar" in page and "<li>Not shown" not in page


def test_prose_is_left_aligned_and_numbers_right():
    from onnxq.report.html import _STYLE
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", _STYLE))
    assert "text-align:left" in rules["body"] and "text-align:left" in rules["td,th"]
    assert "text-align:right" in rules["td.num,th.num"]
