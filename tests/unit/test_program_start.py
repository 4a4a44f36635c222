"""`mlacheck run -- COMMAND` starts the program as soon as the command line and the rules are checked: what only the
report needs (the analysis, the report model, the trace reader) is loaded while the program runs (issue 29: a fixed
cost before every observed program)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT_ONLY = ("mlacheck.analysis", "mlacheck.report.model", "mlacheck.program.saved", "mlacheck.trace")
CHECKS = f"""
import json, sys
from mlacheck import cli
from mlacheck.program.observation import Observation
from mlacheck.program.session import ProgramOptions

settings, specs, policy = cli._inputs({{"rules": sys.argv[1], "run_dir": sys.argv[2], "select": ["MLA001"]}})
Observation(ProgramOptions(**settings.program()), policy).prepare()
print(json.dumps(sorted(name for name in {REPORT_ONLY!r} if name in sys.modules)))
"""


def test_the_input_checks_and_the_run_folder_load_nothing_only_the_report_needs(tmp_path):
    rules = ROOT / "tests" / "fixtures" / "synthetic.toml"
    done = subprocess.run(
        [sys.executable, "-c", CHECKS, str(rules), str(tmp_path / "run")],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert (tmp_path / "run" / "capture.json").is_file()  # the run folder was made: the program could start now


def test_a_bad_select_is_still_refused_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "--rules", str(ROOT / "tests" / "fixtures" / "synthetic.toml")]
        + ["--select", "MLA999", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and not marker.exists()
    assert done.stderr.count("\n") == 1 and "MLA999" in done.stderr and "Traceback" not in done.stderr


def test_what_runs_once_the_program_started_costs_the_run_nothing_when_it_fails(tmp_path):
    """`on_started` is called once, with the program's process there (a child of the supervisor's), and what it
    raises never stops the supervision: the program runs to its end, its exit code recorded."""
    from mlacheck.program.run_folder import RunFolder
    from mlacheck.program.supervisor import run_program

    token = f"program-{tmp_path.name}"
    seen = []

    def started() -> None:
        seen.append(_children_running(token))
        raise RuntimeError("a preparation that fails")

    marker = tmp_path / "ended"
    command = [sys.executable, "-S", "-c", f"import time; {token!r}; time.sleep(0.3); open({str(marker)!r}, 'w')"]
    supervised = run_program(command, RunFolder.create(tmp_path / "run"), on_started=started)
    assert seen == [1] and marker.exists()
    assert supervised.meta["exit_code"] == 0 and supervised.meta["killed_after_grace"] is False


def _children_running(token: str) -> int:
    """How many children of this process have `token` on their command line."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        count += int(stat.rsplit(b")", 1)[1].split()[1]) == os.getpid() and token.encode() in cmdline
    return count


AT_START = """
import json, sys
from mlacheck import cli
from mlacheck.program import supervisor

real = supervisor.subprocess.Popen
loaded = {}


class Popen(real):
    def __init__(self, command, *args, **kwargs):
        if command[:1] == ["true"]:  # the program (the guard starts first)
            loaded.update({name: name in sys.modules for name in ("rich", "rich.console")})
        super().__init__(command, *args, **kwargs)


supervisor.subprocess.Popen = Popen
try:
    cli.app(["run", "--rules", sys.argv[1], "--run-dir", sys.argv[2], "--", "true"], standalone_mode=False)
except BaseException:
    pass
sys.stdout.write("\\n" + json.dumps(loaded) + "\\n")
"""


def test_a_program_run_with_no_terminal_starts_before_rich_is_loaded(tmp_path):
    """Where neither stdout nor stderr is a terminal (CI, a log), nothing shown before the program starts needs rich:
    its import (20-30 ms) comes after the program's start, with the report's (issue 29)."""
    done = subprocess.run(
        [sys.executable, "-c", AT_START, str(ROOT / "tests" / "fixtures" / "synthetic.toml"), str(tmp_path / "run")],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {"rich": False, "rich.console": False}, done.stderr
    assert done.stderr.startswith(f"mlacheck: run folder {tmp_path / 'run'}\n")


@pytest.mark.parametrize("path", ["/tmp/run", "/tmp/a b/run\twith a tab", "/tmp/ünïcode/run", "/tmp/" + "x" * 300])
def test_the_run_folder_line_without_rich_is_the_line_rich_writes(monkeypatch, path):
    """The run folder's line written without rich (no terminal) is byte for byte what rich's console writes there."""
    import io

    from rich.console import Console

    from mlacheck.commands import consoles
    from mlacheck.report.common import printable

    text = f"mlacheck: run folder {printable(path)}"
    plain, rich = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    consoles.say(text, stderr=True)
    console = Console(file=rich, emoji=False, highlight=False)
    console.width = consoles.LOG_WIDTH
    console.print(text, markup=False, soft_wrap=True)
    assert plain.getvalue() == rich.getvalue()
