"""The HTML report: one self-contained file from `run`, `report` and the pytest plugin, with a compile timeline per
process, rendered by a real browser (headless Chromium, marker `browser`, skipped where it is not installed)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from mlacheck.report.html import to_html
from tests.integration.cli import ROOT, run_cli

RULES = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
PROGRAM = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1, "fp8", True)
k.dispatch(1, "fp8", False)   # a variant the warm-up missed: a serving-path compile
"""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """A program-mode run of the synthetic family (real compile times: each compile sleeps 0.05 s), as HTML."""
    folder = tmp_path_factory.mktemp("html")
    program = folder / "program.py"
    program.write_text(PROGRAM)
    html = folder / "run.html"
    result = run_cli(
        "run", "--rules", RULES, "--run-dir", str(folder / "run"), "--output", f"html:{html}", "--",
        sys.executable, str(program), tmp_path=folder,
    )  # fmt: skip
    assert result.code == 1, result.stdout + result.stderr
    return folder, html, result.report


def test_one_self_contained_file_with_a_timeline_per_process(observed):
    _, html, report = observed
    text = html.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    for outside in ("http://", "https://", "<script", "<link", "src=", "url("):
        assert outside not in text, outside  # nothing fetched, nothing run
    [timeline] = report["timeline"]
    assert [(c["phase"], c["label"]) for c in timeline["compiles"]] == [
        ("warmup", "(causal=True)"),
        ("serving", "(causal=False)"),
    ]
    assert all(c["seconds"] >= 0.05 for c in timeline["compiles"])
    assert text.count('<svg class="timeline"') == 1
    assert len(re.findall(r'<rect class="compile[ "]', text)) == 2 and text.count('class="compile serving-path"') == 1
    assert "synthetic (causal=False)" in text and "MLA001" in text


def test_report_and_the_pytest_plugin_write_it_too(observed, tmp_path):
    folder, _, _ = observed
    again = run_cli("report", str(folder / "run"), "--output", f"html:{tmp_path / 'again.html'}")
    assert again.code == 1, again.stdout + again.stderr
    assert 'class="compile serving-path"' in (tmp_path / "again.html").read_text()
    (tmp_path / "test_serving.py").write_text(
        "def test_serving():\n" + "".join(f"    {line}\n" for line in PROGRAM.strip().splitlines())
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--mlacheck", f"--mlacheck-rules={RULES}",
         f"--mlacheck-run-dir={tmp_path / 'prun'}", f"--mlacheck-output=html:{tmp_path / 'plugin.html'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert 'class="compile serving-path"' in (tmp_path / "plugin.html").read_text()


def test_every_text_is_escaped():
    report = {
        "verdict": "fail",
        "mode": "program",
        "families": [],
        "findings": [{"code": "MLA001", "family": "<b>f</b>", "severity": "error", "message": "<script>x</script>"}],
        "timeline": [
            {
                "proc": 0,
                "end": 1.0,
                "compiles": [{"family": "<i>", "label": "&", "phase": "serving", "start": 0, "seconds": 0.5}],
            }
        ],
    }
    text = to_html(report)
    assert "<script>" not in text and "&lt;script&gt;" in text and "<b>f</b>" not in text and "<i>" not in text


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGBA or RGB bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, header = 8, [], None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (2, 6), header
    step = 4 if color == 6 else 3
    raw, rows, previous = zlib.decompress(b"".join(chunks)), [], bytes(width * step)
    for row in range(height):
        start = row * (width * step + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + width * step])
        for i in range(len(line)):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
                line[i] = (line[i] + near[2]) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, [bytes(row[i : i + 3]) for row in rows for i in range(0, len(row), step)]


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_chromium_draws_the_timeline(observed, tmp_path):
    _, html, _ = observed
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert len(re.findall(r'<rect class="compile[ "]', dom)) == 2, dom[:2000]  # the bars exist in the rendered DOM
    assert 'class="compile serving-path"' in dom and '<rect class="phase warmup"' in dom
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1000,700", html.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1000, 700)
    colours = set(pixels)
    assert len(colours) > 20, len(colours)  # not a blank page
    assert bytes.fromhex("c62828") in colours and bytes.fromhex("4a78b5") in colours  # both kinds of bar were painted
