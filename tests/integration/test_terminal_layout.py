"""The report as a person sees it in a real terminal (a pseudo-terminal of 60, 80, 100 and 120 columns, through
pexpect): no line wider than the terminal, every status cell whole, no word split, a finding in at most two lines at
80 columns and up; for every profile, program mode, -v and `mlacheck rules`.

Each profile runs once (`--compile skip`, in a terminal of 80 columns); its JSON report is then rendered by `mlacheck
report` in a terminal of each width. Compile times change the layout (the `compiled` column), so the gold reports
with real compiles (tests/gold/) are rendered too. A word is split where a narrow rendering shows a fragment (an
alphanumeric run) that the same report, rendered 1000 columns wide, never shows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pexpect
import pytest
from rich.cells import cell_len

from tests.gold import GOLD
from tests.integration.cli import ROOT

WIDTHS = (60, 80, 100, 120)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
CODE_LINE = re.compile(r"^MLA\d{3} ")
PROFILES = {
    "tokenspeed": ("--profile", "tokenspeed"),
    "tokenspeed eager": ("--profile", "tokenspeed", "--cuda-graph", "off"),
    "sglang": ("--profile", "sglang"),
    "sglang@0.5.13": ("--profile", "sglang@0.5.13"),
    "vllm": ("--profile", "vllm"),
    "readme demo": (
        "--profile",
        "sglang@0.5.13",
        "--kernel",
        "prefill",
        "--warmup",
        "tests/fixtures/sglang_warmup.py:bf16_warmup",
    ),  # fmt: skip
}
PROGRAM = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1, "fp8", True)
k.dispatch(1, "fp8", False)
"""


def environment() -> dict:
    return {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES", "CUTE_DSL_ARCH")}


def in_terminal(columns: int, *args: str) -> tuple[int, list[str]]:
    """`python -m mlacheck ARGS` in a pseudo-terminal `columns` wide: its exit code and the lines it showed."""
    child = pexpect.spawn(
        sys.executable, ["-m", "mlacheck", *args], cwd=str(ROOT), env=environment(), dimensions=(60, columns),
        encoding="utf-8", timeout=600,
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    text = ANSI.sub("", child.before).replace("\r\n", "\n").replace("\r", "\n")
    return child.exitstatus, text.splitlines()


def wide(*args: str) -> str:
    """The same command's output 1000 columns wide, piped: every word whole."""
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", *args], cwd=ROOT, env={**environment(), "COLUMNS": "1000"},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return done.stdout


CAPTION = {
    "verbose",
    "more",
    "shares",
    "fields",
    "lists",
    "them",
}  # "… (N more: --verbose)": how much fits depends on the width


def words(text: str) -> set[str]:
    """Its alphanumeric runs, less numbers (a caption's count of fields left out depends on the width)."""
    return {word for word in re.findall(r"[A-Za-z0-9]+", text) if not word.isdigit()} - CAPTION


def report_part(lines: list[str]) -> list[str]:
    """The lines from the report's header on (a run's progress display and warnings come before it)."""
    start = next((i for i, line in enumerate(lines) if "mlacheck report" in line and line.startswith("╭")), 0)
    return lines[start:]


def assert_laid_out(
    lines: list[str], columns: int, report: dict | None, whole_text: str | None, verbose: bool = False
) -> None:
    """No line wider than the terminal; each variant's status whole at the end of a line; no word split (where
    `whole_text` is given: a hostile string's words may be longer than a line); at 80 columns and up, a finding in at
    most two lines (but with -v)."""
    assert lines, "nothing shown"
    too_wide = [line for line in lines if cell_len(line.rstrip()) > columns]
    assert not too_wide, too_wide
    if whole_text is not None:
        fragments = words("\n".join(lines)) - words(whole_text)
        assert not fragments, (fragments, "\n".join(lines))
    if report is not None:
        shown = [f for f in report["families"] if not f.get("discovered")]
        for status in {v["status"] for f in shown for v in f["variants"]}:
            rows = sum(v["status"] == status for f in shown for v in f["variants"])
            ends = sum(line.rstrip().endswith((f" {status}", f": {status}")) for line in lines)
            assert ends >= rows, (status, rows, ends, "\n".join(lines))
    if columns >= 80 and not verbose:
        for first in [i for i, line in enumerate(lines) if CODE_LINE.match(line)]:
            more = 0
            while first + more + 1 < len(lines) and re.match(r"^ {7}(?!fix MLA)\S", lines[first + more + 1]):
                more += 1
            assert 1 + more <= 2, "\n".join(lines[first : first + more + 1])


@pytest.fixture(scope="module")
def profile_reports(tmp_path_factory):
    """Each profile run once in an 80-column terminal (--compile skip): (its shown lines, its JSON report's path)."""
    folder = tmp_path_factory.mktemp("profiles")
    runs = {}
    for name, options in PROFILES.items():
        if name == "sglang" and importlib.util.find_spec("flashinfer") is None:
            continue
        path = folder / f"{name.replace(' ', '_')}.json"
        code, lines = in_terminal(80, "run", "--compile", "skip", *options, "--json", str(path))
        assert code in (0, 1), "\n".join(lines)
        runs[name] = (lines, path)
    return runs


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_profile_at_every_width(profile_reports, name):
    if name not in profile_reports:
        pytest.skip("flashinfer is not installed (pip install 'mlacheck[flashinfer]')")
    lines, path = profile_reports[name]
    report = json.loads(path.read_text())
    whole = wide("report", str(path)) + wide("report", str(path), "-v")
    assert_laid_out(report_part(lines), 80, report, whole)
    for columns in WIDTHS:
        for verbose in ((), ("-v",)):
            _, shown = in_terminal(columns, "report", str(path), *verbose)
            assert_laid_out(shown, columns, report, whole, bool(verbose))


@pytest.mark.parametrize("name", ["scenario", "vllm", "ranks", "incomplete", "hostile"])
def test_gold_reports_with_real_compile_times_and_ranks_at_every_width(name):
    path = GOLD / f"{name}.json"
    report = json.loads(path.read_text())
    whole = None if name == "hostile" else wide("report", str(path)) + wide("report", str(path), "-v")
    for columns in WIDTHS:
        for verbose in ((), ("-v",)):
            _, shown = in_terminal(columns, "report", str(path), *verbose)
            assert_laid_out(shown, columns, report, whole, bool(verbose))


def test_program_mode_in_a_terminal(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    rules = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
    saved = tmp_path / "report.json"
    command = ("run", "--rules", rules, "--json", str(saved), "--run-dir")
    code, lines = in_terminal(80, *command, str(tmp_path / "run"), "--", sys.executable, str(program))
    assert code == 1, "\n".join(lines)
    report = json.loads(saved.read_text())
    assert_laid_out(report_part(lines), 80, report, wide("report", str(saved)) + wide("report", str(saved), "-v"))
    for columns in WIDTHS:
        _, shown = in_terminal(columns, *command, str(tmp_path / f"run{columns}"), "--", sys.executable, str(program))
        assert_laid_out(report_part(shown), columns, report, wide("report", str(saved)) + "\n".join(lines))


@pytest.mark.parametrize("columns", WIDTHS)
def test_rules_at_every_width(columns):
    whole = wide("rules") + wide("rules", "-v")
    for verbose in ((), ("-v",)):
        code, lines = in_terminal(columns, "rules", *verbose)
        assert code == 0
        assert_laid_out(lines, columns, None, whole, bool(verbose))
        if not verbose:
            assert "checked against" in " ".join(lines)


def test_a_hostile_run_folder_prints_no_terminal_control_in_a_real_terminal():
    """The redteam's strings (tests/gold/hostile.json) through the real CLI on a pseudo-terminal: rich's colours are
    the only escapes; no title, link, clear-screen or cursor move, and no spoofed verdict line."""
    child = pexpect.spawn(
        sys.executable, ["-m", "mlacheck", "report", str(GOLD / "hostile.json"), "-v"], cwd=str(ROOT),
        env=environment(), dimensions=(60, 80), encoding="utf-8", timeout=120,
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    raw = child.before
    assert child.exitstatus == 1
    left = re.sub(r"\x1b\[[0-9;]*m", "", raw)  # rich's colours
    assert "\x1b" not in left and "\x07" not in left and "\u202e" not in left, repr(left[:400])
    lines = left.replace("\r\n", "\n").splitlines()
    assert not [line for line in lines if line.startswith("verdict: PASS")]
    assert any(line.startswith("verdict: FAIL") for line in lines[-3:])


def test_a_figure_stays_with_its_unit_in_a_real_terminal(tmp_path):
    """The gold report, its prefill family named 8 characters longer: in 80 columns an MLA002 line wraps right after
    "10.0", where a line that may break between a figure and its unit shows "...): 10.0" then "s wasted at ..."."""
    path = tmp_path / "report.json"
    path.write_text(
        (GOLD / "scenario.json").read_text().replace("tokenspeed_mla.prefill", "tokenspeed_mla.prefill_variant")
    )
    for verbose in ((), ("-v",)):
        code, lines = in_terminal(80, "report", str(path), *verbose)
        assert code == 1, "\n".join(lines)
        split = [(a, b) for a, b in zip(lines, lines[1:]) if re.search(r"\d$", a.rstrip()) and re.match(r"^\s*s\b", b)]
        assert not split, split
        assert verbose or any(line.startswith("       10.0 s wasted at ") for line in lines), "\n".join(lines)
