"""A large report's documents shared with a forked child (`report/formats.py`, `mlacheck/forked.py`): the same bytes as
written here alone; a child killed, failing to write or failing otherwise is an error (never a report that seems
written); none is left behind, waited for or alive; stdout's document stays here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlacheck import forked
from mlacheck.analysis import analyse
from mlacheck.errors import MlacheckError
from mlacheck.report import formats, junit
from mlacheck.report.formats import REGISTRY, write_outputs
from mlacheck.report.model import build_report, dumped
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES
from tests.processes import alive

pytestmark = pytest.mark.skipif(not forked.forkable(), reason="no fork, or one CPU: documents are written here alone")
FILES = ("json", "sarif", "junit", "html", "markdown")


CLI = textwrap.dedent(  # the `mlacheck` command, its first argument FORK_FROM (1: any report's files shared)
    """
    import sys
    from mlacheck.report import formats
    formats.FORK_FROM = int(sys.argv.pop(1))
    from mlacheck.cli import main
    sys.argv = ["mlacheck", *sys.argv[1:]]
    main()
    """
)


def report(variants: int = 40, failing: bool = True) -> dict:
    """A program's report: half its variants precompiled and never dispatched, half compiled on the serving path (it
    fails); or, not `failing`, each precompiled and dispatched (it passes)."""
    events = [{"type": "run", "format_version": 4, "pid": 7}, {"type": "family", "family": "synthetic", "version": "9"}]
    for vid in range(variants):
        phase = "serving" if failing and vid >= variants // 2 else "warmup"
        key = {"dtype": f"v{vid}", "causal": True}
        events.append({"type": "compile", "family": "synthetic", "vid": vid, "key": key, "phase": phase, "seconds": 1})
        if not failing:
            events.append({"type": "dispatch", "family": "synthetic", "vid": vid, "key": key, "phase": "serving"})
    events.append({"type": "exit"})
    return dumped(build_report(analyse(events, load_rules(FIXTURES / "synthetic.toml")), {"mode": "program"}))


def documents(folder: Path, data: dict, fork_from: int, monkeypatch) -> dict[str, bytes]:
    monkeypatch.setattr(formats, "FORK_FROM", fork_from)
    folder.mkdir()
    write_outputs(data, [(fmt, folder / fmt) for fmt in FILES], may_fork=True)
    return {fmt: (folder / fmt).read_bytes() for fmt in FILES}


def children() -> list[int]:
    """This process's children now (Linux)."""
    path = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def test_forked_documents_are_the_documents_written_here(tmp_path, monkeypatch):
    data = report()
    written_here = documents(tmp_path / "here", data, 10**9, monkeypatch)
    forks = []
    monkeypatch.setattr(formats, "beside", lambda *a: forks.append(a) or forked.beside(*a))
    shared = documents(tmp_path / "shared", data, 1, monkeypatch)
    assert forks and shared == written_here
    assert b"MLA001" in shared["junit"] and b"MLA002" in shared["sarif"]
    assert not children()


def test_a_child_killed_while_writing_is_an_error_and_none_is_left(tmp_path, monkeypatch):
    """The child that writes JUnit (the heaviest) dies of SIGKILL after its first piece: never a report that seems
    written; this process's documents are whole."""
    parent = os.getpid()
    encoded = junit.encoded

    def killed(data, options=None):
        for number, piece in enumerate(encoded(data, options)):
            if number == 1 and os.getpid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
            yield piece

    monkeypatch.setattr(junit, "encoded", killed)
    monkeypatch.setattr(junit, "BATCH", 64)
    monkeypatch.setattr(formats, "FORK_FROM", 1)
    with pytest.raises(MlacheckError, match=r"wrote junit:\S+ ended before it finished \(killed"):
        write_outputs(report(), [("json", tmp_path / "r.json"), ("junit", tmp_path / "r.xml")], may_fork=True)
    assert (tmp_path / "r.json").read_text().endswith("}\n")
    assert not children()


def test_a_child_that_cannot_write_says_so_in_one_line(tmp_path):
    """A real `mlacheck report` whose JUnit goes to /dev/full, written by the forked child: one line naming the
    output, exit code 2; the JSON document is written whole."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(report()))
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CLI,
            "1",
            "report",
            "-q",
            str(saved),
            f"--output=json:{out}",
            "--output=junit:/dev/full",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("mlacheck: error: --output junit:/dev/full: cannot write /dev/full: No space left")
    assert "Traceback" not in done.stderr
    assert json.loads(out.read_text())["findings"]


def test_what_fails_otherwise_in_the_child_is_an_internal_error_here():
    child = forked.beside(lambda: 1 / 0, "a document")
    with pytest.raises(RuntimeError, match="wrote a document: ZeroDivisionError"):
        child.wait()
    child = forked.beside(lambda: (_ for _ in ()).throw(MlacheckError("bad {setting}", "output", "x:y")), "it")
    with pytest.raises(MlacheckError) as raised:
        child.wait()
    assert (raised.value.message, raised.value.setting, raised.value.value) == ("bad {setting}", "output", "x:y")


@pytest.mark.parametrize("failure", [RuntimeError("the terminal failed"), SystemExit(1)], ids=["error", "exit"])
def test_an_error_here_waits_for_the_child_whose_document_is_whole(tmp_path, monkeypatch, failure):
    """An error in this process's share, or an exit (rich's console exits 1 on a broken pipe: `mlacheck report | head`),
    is said once the child's document is whole."""
    monkeypatch.setattr(formats, "FORK_FROM", 1)

    def fails() -> None:
        raise failure

    with pytest.raises(type(failure)):
        specs = [("json", tmp_path / "r.json"), ("junit", tmp_path / "r.xml")]
        write_outputs(report(), specs, meanwhile=fails, may_fork=True)
    assert (tmp_path / "r.xml").read_text().endswith("</testsuites>\n")
    assert not children()


def test_ctrl_c_here_kills_the_child_at_once(tmp_path, monkeypatch):
    """Ctrl-C while this process writes its share: the child, still writing, is killed and reaped, not waited for."""
    parent = os.getpid()
    encoded = junit.encoded

    def slow(data, options=None):
        if os.getpid() != parent:
            time.sleep(60)
        yield from encoded(data, options)

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(junit, "encoded", slow)
    monkeypatch.setattr(formats, "FORK_FROM", 1)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        specs = [("json", tmp_path / "r.json"), ("junit", tmp_path / "r.xml")]
        write_outputs(report(), specs, meanwhile=interrupted, may_fork=True)
    assert time.monotonic() - started < 10 and not children()


def test_a_closed_stdout_still_gets_every_document_written(tmp_path):
    """A real `mlacheck report` with its stdout closed (`>&-`), the files shared with a child: no traceback, both
    documents whole, the verdict's exit code (this report fails: 1)."""
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(report()))
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-c", CLI, "1", "report", "-q", str(saved), f"--output=json:{out}"]
        + [f"--output=junit:{tmp_path / 'r.xml'}"],
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(out.read_text())["findings"]
    assert (tmp_path / "r.xml").read_text().endswith("</testsuites>\n")


def test_an_interrupt_here_kills_the_child_and_waits_for_it():
    child = forked.beside(lambda: time.sleep(60), "a document")
    started = time.monotonic()
    child.stop()
    assert time.monotonic() - started < 10 and not children()


def test_a_child_dies_with_its_parent(tmp_path):
    """The parent SIGKILLed while its child works: the child ends too (PR_SET_PDEATHSIG), none is left."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    said = tmp_path / "child"
    program = textwrap.dedent(
        f"""
        import os, time
        from mlacheck import forked
        def work():
            open({str(said)!r}, "w").write(str(os.getpid()))
            time.sleep(60)
        forked.beside(work, "a document")
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", program])
    try:
        deadline = time.monotonic() + 30
        while not (said.exists() and said.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(said.read_text())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_no_child_while_another_thread_runs():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forked.beside(lambda: None, "a document") is None
    finally:
        stop.set()
        thread.join()


def test_a_small_report_and_a_program_s_process_are_written_here(tmp_path, monkeypatch):
    """A small report; and a large one written in a program's process (the pytest plugin's), which did not say it may
    fork."""
    monkeypatch.setattr(formats, "beside", lambda *a: pytest.fail("forked"))
    specs = [("json", tmp_path / "r.json"), ("junit", tmp_path / "r.xml")]
    write_outputs(report(), specs, may_fork=True)
    monkeypatch.setattr(formats, "FORK_FROM", 1)
    write_outputs(report(), specs)


NAMES = [entry.name for entry in REGISTRY]


@given(st.lists(st.sampled_from(NAMES), max_size=8), st.none() | st.sampled_from(NAMES), st.integers(0, 8))
def test_every_document_is_written_once_and_stdout_here(files, to_stdout, place):
    """Any outputs (at most one to stdout, as `output_specs` allows)."""
    specs = [(fmt, Path(f"{number}.{fmt}")) for number, fmt in enumerate(files)]
    specs[place:place] = [(to_stdout, None)] if to_stdout else []
    big = {"findings": [{}] * formats.FORK_FROM}
    theirs, ours = formats._shared(specs, big)
    assert sorted(map(str, theirs + ours)) == sorted(map(str, specs))
    assert all(path is not None for _, path in theirs)
    assert not theirs or len([spec for spec in specs if spec[1] is not None]) >= 2
    weight = {entry.name: entry.weight for entry in REGISTRY}
    if theirs:  # the heaviest file goes first to the child, and neither side holds more than it needs
        loads = [sum(weight[fmt] for fmt, _ in side) for side in (theirs, ours)]
        assert abs(loads[0] - loads[1]) <= max(weight[fmt] for fmt, _ in specs)


def test_two_documents_to_one_file_are_never_written_at_once(tmp_path, monkeypatch):
    """The same path twice, the same file through a symbolic or a hard link: nothing is shared (written one after the
    other, the last document is the file, as without a fork)."""
    monkeypatch.setattr(formats, "beside", lambda *a: pytest.fail("forked two documents of one file"))
    monkeypatch.setattr(formats, "FORK_FROM", 1)
    (tmp_path / "r.xml").write_text("")
    (tmp_path / "link.xml").symlink_to(tmp_path / "r.xml")
    os.link(tmp_path / "r.xml", tmp_path / "hard.xml")
    for other in ("r.xml", "link.xml", "hard.xml"):
        write_outputs(report(), [("json", tmp_path / other), ("junit", tmp_path / "r.xml")], may_fork=True)
        assert (tmp_path / "r.xml").read_text().endswith("</testsuites>\n")


def test_what_is_not_a_regular_file_is_written_here_after_the_terminal(tmp_path, monkeypatch):
    """A document to a device (a terminal's /dev/stderr, here /dev/null) or a FIFO is never the child's: it would
    interleave with the terminal's report."""
    monkeypatch.setattr(formats, "FORK_FROM", 1)
    specs = [("json", Path("/dev/null")), ("junit", tmp_path / "r.xml"), ("sarif", tmp_path / "r.sarif")]
    theirs, ours = formats._shared(specs, report())
    assert theirs == [specs[1]] and ours == [specs[0], specs[2]]
    os.mkfifo(tmp_path / "fifo")
    theirs, ours = formats._shared([("json", tmp_path / "fifo"), *specs[1:]], report())
    assert theirs == [specs[1]] and ours[0] == ("json", tmp_path / "fifo")


def test_an_interrupt_while_waiting_kills_the_child_and_reaps_it():
    """Ctrl-C while mlacheck waits for its child (a SIGINT raised in the wait's read): the child is killed and reaped."""
    child = forked.beside(lambda: time.sleep(60), "a document")
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            child.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert child.pid is None and not children()
