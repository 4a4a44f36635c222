"""The HTML report's layout as headless Chromium lays it out (marker `browser`): for the vLLM profile (the widest
tables: six varying fields, long modelled sites) and program mode (ranks), at 1280 and 1920 px, every table cell is at
least as wide as its longest word (a path breaks only after its slashes, a name after its underscores), every
timeline label lies inside its plot, and a finding's code does not run into its title. Measured with
getBoundingClientRect and the canvas's measureText in the page itself; the numbers come back through --dump-dom."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from mlacheck.report.html import to_html
from tests.gold import gold

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]
MEASURE = r"""
<script>
const canvas = document.createElement("canvas").getContext("2d");
function longest(cell) {
  let widest = 0, word = "";
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    canvas.font = getComputedStyle(node.parentElement).font;
    for (const part of node.textContent.split(/\s+/)) {
      for (const piece of part.split(/(?<=[\/_])/)) {
        const width = canvas.measureText(piece).width;
        if (width > widest) { widest = width; word = piece; }
      }
    }
  }
  return [widest, word];
}
const result = {cells: [], labels: [], codes: []};
for (const cell of document.querySelectorAll("td, th")) {
  const style = getComputedStyle(cell);
  const inner = cell.getBoundingClientRect().width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const [widest, word] = longest(cell);
  result.cells.push({inner, widest, word});
}
for (const svg of document.querySelectorAll("svg.timeline")) {
  const plot = svg.getBoundingClientRect();
  for (const text of svg.querySelectorAll("text")) {
    const box = text.getBoundingClientRect();
    result.labels.push({left: box.left - plot.left, right: plot.right - box.right, text: text.textContent});
  }
}
for (const head of document.querySelectorAll(".finding .head")) {
  const code = head.querySelector(".code").getBoundingClientRect();
  const title = head.querySelector(".code").nextElementSibling.getBoundingClientRect();
  result.codes.push({gap: title.left - code.right, code: head.textContent.slice(0, 40)});
}
const pre = document.createElement("pre");
pre.id = "measured";
pre.textContent = JSON.stringify(result);
document.body.appendChild(pre);
</script>
"""


def measured(report: dict, tmp_path, width: int) -> dict:
    page = tmp_path / f"report-{width}.html"
    page.write_text(to_html(report).replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         f"--window-size={width},1200", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found[1].replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


@pytest.mark.parametrize("width", [1280, 1920])
@pytest.mark.parametrize("name", ["vllm", "ranks"])
def test_no_cell_narrower_than_its_longest_word_and_every_label_inside_its_plot(tmp_path, name, width):
    result = measured(gold(name), tmp_path, width)
    assert len(result["cells"]) > 20 and result["labels"]
    narrow = [cell for cell in result["cells"] if cell["inner"] + 0.5 < cell["widest"]]
    assert not narrow, narrow  # before: the vLLM report's `at` column 3 characters wide
    outside = [label for label in result["labels"] if label["left"] < -0.5 or label["right"] < -0.5]
    assert not outside, outside  # before: labels clipped at both edges
    assert result["codes"] and all(code["gap"] >= 4 for code in result["codes"]), result["codes"]
