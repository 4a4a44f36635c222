"""A reader that leaves (`mlacheck report ... | head`, a log collector that died): the terminal's report is cut short,
nothing else. Every file asked for is written whole, the exit code is the verdict's, no traceback; a document that was
to go to the stream whose reader left is an error in one line (exit 2), never a pass. Real `mlacheck` processes whose
stdout or stderr is a pipe with no reader (each write fails with EPIPE, as after `head` exits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.adversarial.conftest import ROOT, SYNTHETIC, WARM, program
from tests.unit.test_forked_writers import CLI, report

SHARED, HERE = 1, 10**9  # FORK_FROM: every report's files shared with a child, or all written here


@pytest.fixture(autouse=True)
def _importable(monkeypatch):
    """The CLI's process imports mlacheck and the tests' fixtures from the repository."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def saved(tmp_path: Path, failing: bool) -> Path:
    """A saved report of 40 variants that fails (20 findings) or passes (`test_forked_writers.report`)."""
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(report(failing=failing)))
    return path


def readerless(command: list[str], stream: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`command` run with `stream` (stdout or stderr) a pipe whose reader is gone; the other one captured."""
    read, write = os.pipe()
    os.close(read)
    try:
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: write}
        return subprocess.run(command, **streams, text=True, cwd=tmp_path, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("fork_from", [SHARED, HERE], ids=["shared with a child", "written here"])
@pytest.mark.parametrize("failing", [True, False], ids=["failing", "passing"])
def test_the_terminal_s_reader_gone_loses_no_file(tmp_path, fork_from, failing):
    out, junit, sarif = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.sarif"
    given = saved(tmp_path, failing)
    command = [sys.executable, "-c", CLI, str(fork_from), "report", "-v", str(given)]
    command += [f"--output=json:{out}", f"--output=junit:{junit}", f"--output=sarif:{sarif}"]
    done = readerless(command, "stdout", tmp_path)
    assert done.returncode == (1 if failing else 0), done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    report = json.loads(out.read_text())
    assert report["verdict"] == ("fail" if failing else "pass")
    assert len(report["findings"]) == len(json.loads(given.read_text())["findings"]) == (20 if failing else 0)
    assert junit.read_text().endswith("</testsuites>\n")
    assert json.loads(sarif.read_text())["runs"]


def test_a_document_to_stdout_is_whole_when_stderr_s_reader_is_gone(tmp_path):
    """The terminal's report goes to stderr where a document goes to stdout: its reader gone, the document still
    reaches stdout whole (rich's own handling points stdout at /dev/null, whichever stream broke)."""
    command = [sys.executable, "-c", CLI, str(HERE), "report", str(saved(tmp_path, True)), "--output=json:-"]
    done = readerless(command, "stderr", tmp_path)
    assert done.returncode == 1
    assert len(json.loads(done.stdout)["findings"]) == 20


@pytest.mark.parametrize("failing", [True, False], ids=["failing", "passing"])
def test_a_document_whose_reader_is_gone_is_an_error_never_a_pass(tmp_path, failing):
    command = [sys.executable, "-c", CLI, str(HERE), "report", str(saved(tmp_path, failing)), "--output=json:-"]
    done = readerless(command, "stdout", tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == "mlacheck: error: --output json:-: cannot write stdout: Broken pipe"


def test_a_run_whose_terminal_reader_is_gone_keeps_its_report_and_verdict(tmp_path):
    """`mlacheck run ... | head`: the program observed, the run's files whole, the verdict's exit code (it passes)."""
    out = tmp_path / "r.json"
    command = [sys.executable, "-m", "mlacheck", "run", "--rules", SYNTHETIC, "--run-dir", str(tmp_path / "run")]
    command += ["--json", str(out), "--", sys.executable, program(tmp_path, WARM)]
    done = readerless(command, "stdout", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(out.read_text())
    assert report["verdict"] == "pass" and report["processes"], report["verdict"]
    assert (tmp_path / "run" / "meta.json").exists()


def test_a_run_whose_stderr_reader_is_gone_shows_its_report_on_stdout(tmp_path):
    """The run folder's line goes to stderr before the program starts: its reader gone, the run goes on and the report
    reaches stdout whole."""
    out = tmp_path / "r.json"
    command = [sys.executable, "-m", "mlacheck", "run", "--rules", SYNTHETIC, "--run-dir", str(tmp_path / "run")]
    command += ["--json", str(out), "--", sys.executable, program(tmp_path, WARM)]
    done = readerless(command, "stderr", tmp_path)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith("verdict: PASS"), done.stdout
    assert json.loads(out.read_text())["verdict"] == "pass"
