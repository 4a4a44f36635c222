"""Strings from a run are text, never terminal control, markup or HTML, in every output (redteam 2.6): the gold
report `hostile` carries ESC sequences, an OSC title, an OSC 8 link, newlines that spoof a `verdict: PASS` line, rich
markup, HTML and a bidi override in its command, key values, sites, notes, messages, reasons and a trace's name."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET

import markdown as python_markdown
from rich.console import Console

from mlacheck.commands.progress import compile_line
from mlacheck.report import formats, terminal
from mlacheck.report.common import printable
from tests.gold import gold

STYLE = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours: the only escape a report may hold
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown_in_a_terminal(detail: str) -> str:
    out = io.StringIO()
    terminal.render(gold("hostile"), Console(file=out, width=80, force_terminal=True, color_system="truecolor"), detail)
    return out.getvalue()


def test_the_terminal_shows_every_hostile_string_escaped():
    for detail in ("normal", "verbose", "quiet"):
        text = shown_in_a_terminal(detail)
        assert not CONTROL.search(STYLE.sub("", text)), repr(CONTROL.search(STYLE.sub("", text)))
        lines = STYLE.sub("", text).splitlines()
        assert not [line for line in lines if line.lstrip().startswith("verdict: PASS")]  # no spoofed verdict line
        assert lines[-1].startswith("verdict: FAIL") or lines[-2].startswith("verdict: FAIL")
    text = STYLE.sub("", shown_in_a_terminal("verbose"))
    assert "[bold red]PWNED[/bold red]" in text.replace("\n    ", " ")  # markup is text, shown as written
    assert "\\x1b]0;owned-title\\x07" in text and "\\u202e" in text


def test_ci_files_hold_no_control_character_and_no_html():
    report = gold("hostile")
    github = formats.render(report, "github")
    assert not CONTROL.search(github) and all(line.startswith("::") for line in github.splitlines())
    junit = formats.render(report, "junit")
    assert not CONTROL.search(junit)
    ET.fromstring(junit)  # XML 1.0 holds no control character: the document parses
    html = formats.render(report, "html")
    assert "<script" not in html and "<img" not in html and not CONTROL.search(html)
    markdown = formats.render(report, "markdown")
    assert "<script" not in markdown and "<img" not in markdown and not CONTROL.search(markdown)
    rendered = python_markdown.markdown(markdown, extensions=["tables"])
    assert "<script" not in rendered and "<img" not in rendered  # as a Markdown renderer shows it: text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    json.loads(formats.render(report, "sarif"))


def test_the_progress_display_escapes_a_compiles_key():
    line = compile_line(
        {"type": "compile", "family": "f\x1b[2J", "phase": "warmup", "seconds": 1.0, "key": {"k": "\x1b]0;t\x07"}}
    )
    assert "\x1b" not in line.plain and "\x07" not in line.plain and "\\x1b" in line.plain


def test_printable_escapes_controls_and_keeps_text():
    assert printable("a\x1b[31m\nverdict: PASS\t\u202eé") == "a\\x1b[31m\\nverdict: PASS\\t\\u202eé"


def test_half_a_surrogate_pair_is_written_escaped_in_every_output(tmp_path):
    """JSON may spell half of a surrogate pair (`\\ud800`), which no UTF-8 output can hold: a saved report (or a run
    folder's document) carrying one in a message, a command and a key is written in every format, the text formats
    showing its escape, the JSON report holding it as JSON does (writing it ended the report in an internal error)."""
    report = gold("hostile")
    report["findings"][0]["message"] += " \ud800"
    report["program"]["runs"][1]["command"].append("\udfff")
    report["families"][0]["variants"][0]["key"] = {**report["families"][0]["variants"][0]["key"], "half": "\ud83d"}
    paths = {fmt: tmp_path / f"report.{fmt}" for fmt in formats.FORMATS}
    formats.write_outputs(report, list(paths.items()), environ={})
    assert json.loads(paths["json"].read_text()) == report
    assert "\\ud800" in paths["sarif"].read_text()
    for fmt in ("junit", "html", "markdown", "github"):
        assert "\\udfff" in paths[fmt].read_text() or "\\ud800" in paths[fmt].read_text(), fmt
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=80), "verbose")
    assert "\\ud800" in out.getvalue() and "\\udfff" in out.getvalue()
    assert printable("a\ud800b") == "a\\ud800b"
