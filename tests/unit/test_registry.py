"""The run registry and the process tree, on real processes: found through ancestry only, stale entries dropped, a
folder someone else could write ignored; every descendant recorded, whatever its session, and ended by its ids."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mlacheck_startup
from mlacheck.program import registry
from mlacheck.program import tree as tree_module
from mlacheck.program.tree import FULL_POLLS, ProcessTree
from tests.fixtures.interpreters import without_site_packages

ROOT = Path(__file__).resolve().parents[2]
FIND = "from mlacheck.program import registry; print(registry.find_run())"


def cleared(code: str) -> str:
    """Run `code` in a Python child whose environment holds nothing of the parent's but PATH and PYTHONPATH."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_the_pth_looks_where_the_registry_is():
    line = next(line for line in (ROOT / "mlacheck-startup.pth").read_text().splitlines() if line.startswith("import"))
    folders = [folder % os.getuid() for folder in re.findall(r'"(/[a-z/]+/mlacheck-[%a-z/-]+)"', line)]
    assert registry.registry_dir() in folders and "MLACHECK_RUN_DIR" in line


def test_a_descendant_with_a_cleared_environment_finds_the_run_and_no_one_else_does(tmp_path):
    entry = registry.register(os.getpid(), str(tmp_path))
    try:
        assert cleared(FIND).strip() == str(tmp_path)
        # a grandchild, through a Python process in between, finds it too
        assert cleared(f"import subprocess, sys; subprocess.run([sys.executable, '-c', {FIND!r}])").strip() == str(
            tmp_path
        )
        assert registry.find_run(os.getppid()) is None  # this process's parent does not descend from it
    finally:
        registry.unregister(entry)
    assert cleared(FIND).strip() == "None"


def test_the_nearest_registered_ancestor_wins(tmp_path):
    outer = registry.register(os.getpid(), str(tmp_path / "outer"))
    inner_root = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, time, subprocess; sys.stdin.readline(); print(subprocess.run([sys.executable, '-c', {FIND!r}], capture_output=True, text=True).stdout, end='')",
        ],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    inner = registry.register(inner_root.pid, str(tmp_path / "inner"))
    try:
        out, _ = inner_root.communicate("go\n", timeout=60)
        assert out.strip() == str(tmp_path / "inner")
    finally:
        registry.unregister(inner)
        registry.unregister(outer)


def test_an_entry_of_a_root_that_ended_is_dropped_and_never_matches(tmp_path):
    ended = subprocess.Popen(["sleep", "0"])
    stale = registry.register(ended.pid, str(tmp_path / "stale"))
    ended.wait()
    entry = registry.register(os.getpid(), str(tmp_path))
    try:
        assert not os.path.exists(stale) and os.path.exists(entry)
    finally:
        registry.unregister(entry)


def test_a_folder_that_others_can_write_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(mlacheck_startup, "ROOT", str(tmp_path))
    monkeypatch.setattr(mlacheck_startup, "RUNTIME", str(tmp_path / "no-runtime-folder"))
    entry = registry.register(os.getpid(), "/somewhere")
    os.chmod(os.path.dirname(entry), 0o777)
    child = subprocess.Popen(["sleep", "5"])
    try:
        assert registry.find_run(child.pid) is None
        with pytest.raises(OSError, match="not a private folder"):
            registry.register(os.getpid(), "/somewhere")
        os.chmod(os.path.dirname(entry), 0o700)
        assert registry.find_run(child.pid) == "/somewhere"
    finally:
        child.kill()
        child.wait()
        registry.unregister(entry)


TREE = """
import os, subprocess, sys, time
grandchild = subprocess.Popen(["sleep", "60"], start_new_session=True)
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
print(grandchild.pid, flush=True)
time.sleep(60)
"""


def test_the_tree_records_every_descendant_whatever_its_session_and_ends_them_by_id():
    child = subprocess.Popen(
        [sys.executable, "-S", "-c", TREE], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    grandchild = int(child.stdout.readline())
    tree = ProcessTree()
    try:
        deadline = time.monotonic() + 10
        while len(tree.live()) < 3 and time.monotonic() < deadline:
            tree.poll()
            time.sleep(0.05)
        by_pid = {seen.pid: seen for seen in tree.live()}
        [fork] = [pid for pid in by_pid if pid not in (child.pid, grandchild)]
        assert by_pid[child.pid].python and not by_pid[child.pid].forked and by_pid[child.pid].sid == child.pid
        assert not by_pid[grandchild].python and by_pid[grandchild].sid == grandchild  # a session of its own
        assert by_pid[fork].python and by_pid[fork].forked  # its parent's image: the parent's to observe
        assert by_pid[grandchild].argv == ["sleep", "60"]
        ended = tree.signal_live(signal.SIGTERM)
        assert {seen.pid for seen in ended} == {child.pid, grandchild, fork}
        assert all(seen.ended_by == "SIGTERM" for seen in ended)
        child.wait(timeout=10)
        deadline = time.monotonic() + 10
        while tree.live() and time.monotonic() < deadline:
            tree.poll()
            tree.reap(keep=child.pid)
            time.sleep(0.05)
        assert tree.live() == []
    finally:
        for seen in tree.live():
            os.kill(seen.pid, signal.SIGKILL)


LATE = """
import subprocess, sys, time
sys.stdin.readline()  # the test says when
late = subprocess.Popen(["sleep", "30"])
print(late.pid, flush=True)
time.sleep(30)
"""


def test_a_process_of_the_run_started_later_is_found_at_the_next_poll_whatever_the_others():
    """The stat of a process seen not to be the run's is read again only every few polls (a process never becomes a
    descendant later); a new process of the run is found at the very next poll."""
    root = subprocess.Popen(
        [sys.executable, "-S", "-c", LATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    other = subprocess.Popen(["sleep", "30"])  # this test's child, not the root's
    tree = ProcessTree(root=root.pid)
    try:
        for _ in range(3):
            tree.poll()
        assert other.pid in tree._others and root.pid not in tree._others and tree.live() == []
        root.stdin.write("go\n")
        root.stdin.flush()
        late = int(root.stdout.readline())
        tree.poll()  # not a full poll (the first was): only the others' stat is skipped
        assert (tree._polls - 1) % FULL_POLLS != 0
        assert [seen.pid for seen in tree.live()] == [late]
        assert late not in tree._others
    finally:
        for process in (root, other):
            process.kill()
            process.wait()
        for seen in tree.live():
            os.kill(seen.pid, signal.SIGKILL)


SLEEPER = "import sys, time; print(flush=True); sys.stdin.readline(); time.sleep(30)"


@pytest.mark.parametrize("how", ["waits", "works"])
def test_the_wait_before_the_next_poll_is_ten_times_the_work_of_the_last_not_the_time_it_waited(monkeypatch, how):
    """A poll whose read of a command line waits (the process holds its memory map while importing; the supervisor
    is preempted; the machine is paused) does not stretch the time to the next poll: a worker that starts and ends in
    that time would go unseen (a false PASS). A poll that works longer (many processes) does: ten times its work."""
    root = subprocess.Popen([sys.executable, "-S", "-c", SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    root.stdout.readline()
    real = tree_module._read_argv

    def slow(pid):
        deadline = time.thread_time() + 0.03
        if how == "waits":
            time.sleep(0.3)
        while how == "works" and time.thread_time() < deadline:
            pass
        return real(pid)

    monkeypatch.setattr(tree_module, "_read_argv", slow)
    tree = ProcessTree()
    try:
        tree.poll()
        assert [seen.pid for seen in tree.live()] == [root.pid]
        if how == "waits":
            assert tree.interval == tree_module.POLL_SECONDS
        else:
            assert 0.3 <= tree.interval < 1.0
    finally:
        root.kill()
        root.wait()


def between_a_polls_reads(monkeypatch, act, done) -> None:
    """Make the next poll read every stat, then `act(table)` and wait until `done()`, then read the rest (each
    process's executable and command line) as it does: a real poll with an exec placed between its reads."""
    real = tree_module._process_table

    def stats_then_act(skip):
        table = real(skip)
        act(table)
        deadline = time.monotonic() + 10
        while not done():
            assert time.monotonic() < deadline, "the process did not exec"
            time.sleep(0.01)
        monkeypatch.setattr(tree_module, "_process_table", real)  # the polls after it as they are
        return table

    monkeypatch.setattr(tree_module, "_process_table", stats_then_act)


FORK_THEN_EXEC = """
import os, sys, time
child = os.fork()
if child == 0:
    os.read(0, 1)  # the test says when
    os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(30)"])
print(child, flush=True)
time.sleep(30)
"""


def test_a_child_whose_exec_falls_between_a_polls_two_reads_is_its_own_python(monkeypatch):
    """A poll reads every stat first, then each process's executable and command line: a child that execs in between
    shows its parent's stack (a fork's) with its own command line. Seen at that one poll alone (a worker that ends
    before the next), its image is its own Python, not a fork's copy of its parent's: a worker started with -S that
    wrote no trace would otherwise be missed, and the run would pass."""
    root = subprocess.Popen([sys.executable, "-S", "-c", FORK_THEN_EXEC], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    child = int(root.stdout.readline())
    argv = [sys.executable, "-S", "-c", "import time; time.sleep(30)"]

    def let_it_exec(table):
        assert table[1][child][5] == table[1][root.pid][5]  # the child has not exec'd: its parent's stack
        root.stdin.write(b"x")
        root.stdin.flush()

    tree = ProcessTree(root=root.pid)
    try:
        between_a_polls_reads(monkeypatch, let_it_exec, lambda: tree_module._read_argv(child) == argv)
        tree.poll()
        [seen] = [seen for seen in tree.live() if seen.pid == child]
        assert seen.argv == argv and seen.python and not seen.forked
        assert [(image["python"], image["forked"]) for image in seen.images] == [(True, False)]
    finally:
        root.kill()
        root.wait()
        os.kill(child, signal.SIGKILL)


def test_a_program_embedding_python_under_another_name_seen_before_its_loader_mapped_libpython_is_python(
    tmp_path, monkeypatch
):
    """An executable not named python* is Python where it maps a libpython, which its dynamic loader does just after
    the exec: a poll in between sees no libpython. The next polls look again (a copy of this interpreter named
    `engine` stands for an engine embedding Python; the first look is made to come too early)."""
    engine = without_site_packages(tmp_path, "engine")
    child = subprocess.Popen([engine, "-S", "-c", "import time; time.sleep(30)"], env={"PATH": os.environ["PATH"]})
    real, looks = tree_module._maps_libpython, []

    def too_early_the_first_time(pid):
        looks.append(pid)
        return len(looks) > 1 and real(pid)

    monkeypatch.setattr(tree_module, "_maps_libpython", too_early_the_first_time)
    tree = ProcessTree()
    try:
        deadline = time.monotonic() + 10
        while not any(seen.pid == child.pid and seen.exe == engine for seen in tree.live()):
            assert time.monotonic() < deadline, "the engine was not seen"
            tree.poll()
            time.sleep(0.05)
        for _ in range(3):
            tree.poll()
        [seen] = [seen for seen in tree.live() if seen.pid == child.pid]
        assert seen.python and not seen.forked and seen.images[-1]["python"], (looks, seen)
    finally:
        child.kill()
        child.wait()


def test_a_shell_whose_exec_into_python_falls_between_a_polls_reads_ran_two_images_one_python(monkeypatch):
    """A shell seen at one poll execs into Python between the next poll's stat (the shell's stack) and its read of
    the executable (Python's): one image of Python follows the shell's, not two (a second would be a Python image
    that wrote no trace, and a run whose worker was observed would end incomplete)."""
    shell = subprocess.Popen(
        ["bash", "-c", f"read go; exec {sys.executable} -S -c 'import time; time.sleep(30)'"], stdin=subprocess.PIPE
    )
    tree = ProcessTree()
    try:
        deadline = time.monotonic() + 10
        while not any(seen.pid == shell.pid and seen.exe and "bash" in seen.exe for seen in tree.live()):
            assert time.monotonic() < deadline, "the shell was not seen"
            tree.poll()
            time.sleep(0.05)

        def let_it_exec(table):
            shell.stdin.write(b"go\n")
            shell.stdin.flush()

        python = os.path.realpath(sys.executable)
        between_a_polls_reads(monkeypatch, let_it_exec, lambda: tree_module._executable(shell.pid) == python)
        for _ in range(4):
            tree.poll()
        [seen] = [seen for seen in tree.live() if seen.pid == shell.pid]
        assert [(os.path.basename(image["exe"]), image["python"]) for image in seen.images] == [
            ("bash", False),
            (os.path.basename(os.path.realpath(sys.executable)), True),
        ]
    finally:
        shell.kill()
        shell.wait()


def mid_exec_for(monkeypatch, pid: int, reads: int) -> list[int]:
    """Make the next `reads` polls see `pid` as a poll sees a process between an exec's new memory and its arguments
    (Linux sets a process's command line last): its executable already the new one, its command line empty, the start
    of its stack not yet where it will be. The polls after them read it as it is. Returns the polls' count so far."""
    real_table, real_argv, real_stack, seen = (
        tree_module._process_table,
        tree_module._read_argv,
        tree_module._stack_of,
        [0],
    )

    def table(skip):
        listed, rows = real_table(skip)
        seen[0] += 1
        if seen[0] <= reads and pid in rows:
            rows[pid] = (*rows[pid][:5], rows[pid][5] + 4096)
        return listed, rows

    def argv(of):
        return [] if of == pid and seen[0] <= reads else real_argv(of)

    def stack(of):
        found = real_stack(of)
        return found + 4096 if of == pid and seen[0] <= reads and found else found

    monkeypatch.setattr(tree_module, "_process_table", table)
    monkeypatch.setattr(tree_module, "_read_argv", argv)
    monkeypatch.setattr(tree_module, "_stack_of", stack)
    return seen


@pytest.mark.parametrize("reads", [1, 2])
def test_a_worker_seen_in_the_middle_of_its_exec_ran_one_image(monkeypatch, reads):
    """A multiprocessing worker seen by a poll in the middle of its exec (its command line not yet there, its stack not
    yet where it settles) runs one Python image, its own, not two: a second would be an image that wrote no trace,
    and a run whose every worker was observed would end INCOMPLETE (seen in bench_spawned_processes.py: one worker in
    64, 2 runs in 3, under load)."""
    argv = [sys.executable, "-S", "-c", "import time; time.sleep(30)"]
    child = subprocess.Popen(argv)
    mid_exec_for(monkeypatch, child.pid, reads)
    tree = ProcessTree()
    try:
        for _ in range(reads + 2):
            tree.poll()
        [seen] = [seen for seen in tree.live() if seen.pid == child.pid]
        assert seen.argv == argv and seen.python and not seen.forked
        assert [(image["argv"], image["python"], image["forked"]) for image in seen.images] == [(argv, True, False)]
    finally:
        child.kill()
        child.wait()


def test_a_python_whose_command_line_stays_empty_is_still_recorded_as_python(monkeypatch):
    """A process seen only in the middle of its exec (its command line empty at every poll: one that ends before its
    command line is read) is recorded as it shows, a Python image of its own, never left out."""
    child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(30)"])
    mid_exec_for(monkeypatch, child.pid, 10**6)
    tree = ProcessTree()
    try:
        for _ in range(5):
            tree.poll()
        [seen] = [seen for seen in tree.live() if seen.pid == child.pid]
        assert seen.python and not seen.forked and [image["python"] for image in seen.images] == [True]
    finally:
        child.kill()
        child.wait()
