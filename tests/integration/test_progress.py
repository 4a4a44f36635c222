"""Progress on stderr: phases and each compile with its seconds, live in a terminal, nothing in a pipe or with -q.

The terminal is a real pseudo-terminal (80 columns) around the real CLI; --compile skip keeps it to seconds."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from mlacheck.program.follow import TraceFollower
from tests.integration.cli import ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_a_terminal(*args: str) -> tuple[int, str, float]:
    """Run `python -m mlacheck ARGS` on a pseudo-terminal: exit code, what it showed (escapes removed), and the
    seconds to its first byte."""
    started = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI, its stdout and stderr the terminal
        os.chdir(ROOT)
        os.environ.pop("CUTE_DSL_ARCH", None)
        os.environ["COLUMNS"] = "80"
        os.execv(sys.executable, [sys.executable, "-m", "mlacheck", *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    data, first = b"", None
    while True:
        ready, _, _ = select.select([fd], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        first = first if first is not None else time.monotonic() - started
        data += chunk
    _, status = os.waitpid(pid, 0)
    shown = ANSI.sub("", data.decode(errors="replace")).replace("\r\n", "\n")
    return os.waitstatus_to_exitcode(status), shown, first or 0.0


def test_a_terminal_sees_the_phases_and_each_compile_at_once():
    code, shown, first = in_a_terminal("run", "--compile", "skip")
    assert code == 0, shown
    assert first < 3.0, first  # the display starts before torch is imported (before: nothing until the report)
    before_report = shown[: shown.index("mlacheck report")]
    for phase in ("importing torch and the kernel library", "CUDA-graph capture", "analysis"):
        assert phase in before_report, phase
    assert re.search(r"tokenspeed_mla\.prefill key recorded \(not compiled\) \(warm-up\)", before_report)
    assert re.search(r"\d compile\(s\)", before_report)
    assert "verdict: PASS" in shown


def test_no_progress_in_a_pipe_or_with_quiet():
    env = {name: value for name, value in os.environ.items() if name != "CUTE_DSL_ARCH"}
    piped = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "--compile", "skip"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
    code, shown, _ = in_a_terminal("run", "--compile", "skip", "-q")
    assert code == 0 and shown.lstrip().startswith("verdict: PASS"), shown


def test_program_mode_prints_a_line_per_compile_from_the_traces(tmp_path):
    program = tmp_path / "p.py"
    program.write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tests.fixtures import synthetic_kernels as k\n"
        "k.warmup(dtypes=('fp8',), causal=(True,))\nk.dispatch(1, 'fp8', False)\n"
    )
    rules = str(ROOT / "tests" / "fixtures" / "synthetic.toml")
    code, shown, _ = in_a_terminal(
        "run", "--rules", rules, "--run-dir", str(tmp_path / "run"), "--", sys.executable, str(program)
    )
    assert code == 1, shown
    assert f"mlacheck: run folder {tmp_path / 'run'}\nmlacheck: running {sys.executable} " in shown
    assert re.search(r"mlacheck: synthetic compiled in 0\.\d s \(warm-up, pid \d+\)", shown), shown
    assert re.search(r"mlacheck: synthetic compiled in 0\.\d s \(serving path, pid \d+\)", shown), shown
    assert shown.index("mlacheck: analysing the run folder") < shown.index("mlacheck report")


def test_the_follower_reads_whole_lines_only(tmp_path):
    trace = tmp_path / "trace-42.jsonl"
    trace.write_text('{"type": "run", "pid": 42}\n{"type": "compile", "fam')
    follower = TraceFollower(tmp_path)
    assert follower.poll() == [{"type": "run", "pid": 42}]
    with trace.open("a") as file:
        file.write('ily": "f"}\nnot json\n')
    assert follower.poll() == [{"type": "compile", "family": "f", "pid": 42}]
    assert follower.poll() == []


def test_a_rule_page_in_a_terminal_wraps_its_prose_at_a_space():
    code, shown, _ = in_a_terminal("rule", "MLA008")
    assert code == 0 and shown.startswith("# unbounded-specialization (MLA008)"), shown
    prose = [
        line
        for line in shown.splitlines()
        if line and not line.startswith(("```", "MLA008", " ", "@", "def", "for", "gather"))
    ]
    assert max(map(len, prose)) <= 80, [line for line in prose if len(line) > 80]
    assert "the traffic (a token count, a batch size) passed as a specialized parameter" in " ".join(shown.split())
