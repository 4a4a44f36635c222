"""A report of thousands of variants (issue 29): the terminal shows a summary whose figures still add up to the whole
run's, and the machine outputs hold every variant and finding."""

import io
import json
import re

from rich.console import Console

from mlacheck.analysis import analyse
from mlacheck.report import abridged
from mlacheck.report.formats import write_outputs
from mlacheck.report.model import build_report
from mlacheck.report.terminal import render
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES

VARIANTS = 3000


def events(variants: int) -> list[dict]:
    """One process of the synthetic family: the first half precompiled (causal False for the last of them alone),
    never dispatched; the second half compiled on the serving path, 1 s each."""
    out = [{"type": "run", "format_version": 3, "pid": 7}, {"type": "family", "family": "synthetic", "version": "9"}]
    dispatches = {}
    for vid in range(variants):
        served = vid >= variants // 2
        key = {"dtype": f"v{vid}", "causal": vid != variants // 2 - 1}  # one not shown differs
        phase = "serving" if served else "warmup"
        out.append({"type": "compile", "family": "synthetic", "vid": vid, "key": key, "phase": phase, "seconds": 1.0})
        if served:
            out.append({"type": "dispatch", "family": "synthetic", "vid": vid, "key": key, "phase": "serving"})
            dispatches[f"{vid}:serving"] = 2
    calls = {"dispatch": 2 * (variants - variants // 2)}
    out.append({"type": "counts", "family": "synthetic", "dispatches": dispatches, "calls": calls})
    return [*out, {"type": "exit"}]


def test_the_terminal_summarises_thousands_and_the_json_holds_them_all(tmp_path):
    report = build_report(analyse(events(VARIANTS), load_rules(FIXTURES / "synthetic.toml")), {"mode": "program"})
    assert len(report.findings) == VARIANTS and report.counts.errors == VARIANTS // 2
    console = Console(file=io.StringIO(), width=120)
    render(report, console, "normal")
    shown = console.file.getvalue()
    lines = shown.splitlines()
    assert len(lines) < 4 * (abridged.ROWS + 2 * abridged.FINDINGS), len(lines)
    half = VARIANTS // 2
    assert f"{2 * half} dispatch call(s): {2 * half} serving" in shown  # the summary rows' dispatches add up
    rows = [line for line in lines if line.startswith(abridged.MORE)]
    assert len(rows) == 2 and {row.split()[-1] for row in rows} == {"compile", "warm-up"}
    assert f"{half:.1f} s of serving-path compile; {half:.1f} s of warm-up wasted" in shown  # the verdict's seconds
    more = [int(n.replace(",", "")) for n in re.findall(r"and ([\d,]+) more \(the JSON", shown)]
    assert sorted(more) == [half - abridged.FINDINGS] * 2
    assert "every variant:" not in shown  # causal is not shared by every variant: no caption says so
    write_outputs(report, [("json", tmp_path / "report.json")])
    data = json.loads((tmp_path / "report.json").read_text())
    assert len(data["findings"]) == VARIANTS and len(data["families"][0]["variants"]) == VARIANTS
    assert data == report.model_dump(mode="json")


def test_a_small_report_is_shown_whole():
    data = {"families": [{"name": "f", "variants": [{"key": {"a": 1}, "status": "ok"}]}], "findings": []}
    assert abridged.abridged(data) is data


def test_verbose_shows_every_variant_and_finding():
    report = build_report(analyse(events(300), load_rules(FIXTURES / "synthetic.toml")), {"mode": "program"})
    console = Console(file=io.StringIO(), width=160)
    render(report, console, "verbose")
    shown = console.file.getvalue()
    assert "more (the JSON" not in shown and f"{abridged.MORE} " not in shown.replace("…/", "")
    assert all(f"v{vid} " in shown for vid in range(300))  # every variant's row


def test_thousands_of_lost_lines_are_summarised_and_the_run_stays_incomplete():
    """A trace of thousands of garbage lines: the terminal lists the first of its incomplete reasons (each unreadable
    line one of them, listed once), one line for the rest, and the verdict is INCOMPLETE (its first reason above);
    --verbose lists them all."""
    report = build_report(analyse(events(4), load_rules(FIXTURES / "synthetic.toml")), {"mode": "program"})
    lost = [f"trace-7.jsonl:{n}" for n in range(3, 3003)]
    data = {**report.model_dump(mode="json"), "verdict": "incomplete", "bad_lines": lost}
    data["incomplete"] = [f"events were lost: {line} could not be read" for line in lost]
    data["exit_reason"] = f"exit 2: incomplete: {data['incomplete'][0]}"
    for detail, shown in (("normal", abridged.LINES), ("quiet", abridged.LINES), ("verbose", len(lost))):
        console = Console(file=io.StringIO(), width=200)
        render(data, console, detail)
        lines = console.file.getvalue().splitlines()
        assert sum(line.startswith("incomplete: events were lost") for line in lines) == shown
        more = [line for line in lines if f"{abridged.MORE} and {len(lost) - abridged.LINES:,} more" in line]
        assert len(more) == (0 if detail == "verbose" else 1)  # (the unreadable lines are among the reasons: once)
        assert "verdict: INCOMPLETE" in lines[-1] and "(the reason above)" in lines[-1]
