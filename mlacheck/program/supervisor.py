"""Run a program under observation and always leave a finished run folder, and no process of the program behind.

The program runs in its own session and process group. Its environment gets the bootstrap folder on PYTHONPATH
and the run folder's location, for this run only; nothing is written into any installation. The run is also
registered (registry.py) with this process as its root, so that a process of the program started with a cleared
environment finds it through mlacheck's .pth; this process is made a child subreaper, so that every process the
program starts stays a descendant (tree.py records them all, whatever session they put themselves in, and the
report names a Python process among them that nothing of mlacheck observed).

SIGINT, SIGTERM and SIGHUP sent to mlacheck go to the program's process group; after a grace period the group,
and every process of the program recorded, is killed. When the program's main process ends, what is left of the
program (its group, and the recorded processes in sessions of their own, as Ray's are) gets SIGTERM, then after
the grace period SIGKILL, each checked by its start time to be the process recorded; meta.json names them.

If mlacheck itself is killed, its program does not run on: the main process gets SIGTERM from the kernel
(PR_SET_PDEATHSIG), and the guard (guard.py), a process of its own told of every process recorded, ends them all.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.forked import dies_with
from mlacheck.program import registry
from mlacheck.program.guard import Guard
from mlacheck.program.layout import ENV_RUN_DIR
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.tree import ProcessTree, become_subreaper

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 10.0
REMNANT_SECONDS = 2.0  # how long the rest of the program may take to end by itself after the main process


def observed_environment(run: RunFolder, base: dict[str, str]) -> dict[str, str]:
    """The program's environment: the caller's, plus what starts the agent in every Python process."""
    python_path = os.pathsep.join(filter(None, [str(BOOTSTRAP), base.get("PYTHONPATH", "")]))
    return {**base, "PYTHONPATH": python_path, ENV_RUN_DIR: str(run.path)}


@dataclass
class Supervised:
    """What the supervisor recorded: meta.json's content (not written yet: the caller completes it), the process tree
    (processes.json, written where the folder could take it), and what could not be written, one line each."""

    meta: dict
    tree: dict
    problems: list[str]


def run_program(
    command: list[str],
    run: RunFolder,
    extra_environment: dict[str, str] | None = None,
    grace_seconds: float = GRACE_SECONDS,
    on_tick: Callable[[], object] | None = None,
    on_started: Callable[[], object] | None = None,
) -> Supervised:
    """Run `command` to its end under observation; what it recorded (meta.json's content: command, exit code,
    signal; the process tree).
    `on_tick` is called while it waits (a progress display following the traces); what it raises is its own loss.
    `on_started` is called once, as soon as the program has started (what the supervisor needs only after the
    program's end is prepared while it waits); what it raises is its own loss too."""
    started = time.time()
    environment = observed_environment(run, {**os.environ, **(extra_environment or {})})
    subreaper = become_subreaper()
    guard = Guard()
    guard.start()  # before the run is registered: nothing of mlacheck observes it
    try:
        entry, registered = registry.register(os.getpid(), str(run.path)), "registered"
    except OSError as exc:
        entry, registered = None, f"not registered ({exc}): a process started with a cleared environment is not found"
        sys.stderr.write(f"mlacheck: note: the run is {registered}\n")
    tree = Guarded(guard)
    try:
        process = subprocess.Popen(
            command, env=environment, start_new_session=True, preexec_fn=dies_with(os.getpid(), signal.SIGTERM)
        )
    except OSError as exc:
        if entry is not None:
            registry.unregister(entry)
        guard.done()
        raise MlacheckError(f"cannot start {command[0]!r}: {exc.strerror or exc}; check the command after --") from None
    guard.record([(process.pid, _start_of(process.pid))])
    if on_started is not None:
        try:
            on_started()
        except Exception:  # noqa: BLE001 - a preparation never stops the supervision
            pass
    forwarded: list[str] = []
    stopped_at: list[float] = []  # when the first signal was forwarded: the stop's time (ends.py)

    def forward(signum: int, frame: object) -> None:
        stopped_at.append(time.time())
        forwarded.append(signal.Signals(signum).name)
        _signal_group(process.pid, signum)

    previous = {number: signal.signal(number, forward) for number in FORWARDED}
    try:
        returncode, killed = _wait(process, forwarded, grace_seconds, tree, on_tick)
        remnants = end_remnants(process.pid, grace_seconds, tree, subreaper)
        guard.done()
    finally:
        guard.close()  # without "done" (an error of mlacheck's own): the guard ends what is left of the program
        for number, handler in previous.items():
            signal.signal(number, handler)
        if entry is not None:
            registry.unregister(entry)
    recorded = {"host": os.uname().nodename, "root": os.getpid(), "processes": tree.records()}
    problems = []
    try:
        run.write_tree(recorded)
    except MlacheckError as exc:
        problems.append(str(exc))
    meta = {
        "command": command,
        "started": started,
        "ended": time.time(),
        "exit_code": returncode if returncode >= 0 else None,
        "signal": signal.Signals(-returncode).name if returncode < 0 else None,
        "forwarded": forwarded,
        "stopped_at": stopped_at[0] if stopped_at else None,
        "pid": process.pid,
        "killed_after_grace": killed,
        "remnants_ended": remnants,
        "left_behind": [
            {"pid": seen.pid, "start": seen.start, "argv": seen.argv, "sid": seen.sid, "ended_by": seen.ended_by}
            for seen in tree.seen.values()
            if seen.ended_by is not None
        ],
        "registry": registered,
        "subreaper": subreaper,
    }
    return Supervised(meta, recorded, problems)


def _wait(
    process: subprocess.Popen,
    forwarded: list[str],
    grace_seconds: float,
    tree: ProcessTree,
    on_tick: Callable[[], object] | None = None,
) -> tuple[int, bool]:
    """The main process's return code, recording the tree meanwhile; after a forwarded signal and the grace period,
    the group and every recorded process are killed."""
    deadline = None
    while True:
        if on_tick is not None:
            try:
                on_tick()
            except Exception:  # noqa: BLE001 - a display never stops the supervision
                on_tick = None
        returncode = _ended(process, tree.interval)
        if returncode is not None:
            return returncode, deadline is not None and time.monotonic() > deadline
        tree.poll()
        tree.reap(keep=process.pid)
        if forwarded and deadline is None:
            deadline = time.monotonic() + grace_seconds
        if deadline is not None and time.monotonic() > deadline:
            tree.signal_live(signal.SIGKILL)
            _signal_group(process.pid, signal.SIGKILL)


def _ended(process: subprocess.Popen, seconds: float) -> int | None:
    """The main process's return code where it ends within `seconds` (told as it ends), else None."""
    if _until_one_ends([process.pid], seconds):
        return process.poll()
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def end_remnants(group: int | None, grace_seconds: float, tree: ProcessTree, subreaper: bool) -> int:
    """Let the rest of the program end by itself for a moment, then SIGTERM, grace, SIGKILL, to its group and to every
    live recorded process (`subreaper`: whether every process of the group stays a descendant the tree records; `group`
    None: no group, the tree's live processes alone, as what a pytest session left running).
    Returns how many steps it took (0: it ended by itself; 3: something survived SIGKILL)."""
    for step, (wait, signum) in enumerate(
        ((REMNANT_SECONDS, signal.SIGTERM), (grace_seconds, signal.SIGKILL), (1.0, None))
    ):
        if _wait_gone(group, tree, wait, subreaper):
            return step
        if signum is not None:
            tree.signal_live(signum)  # first: a process that the group's signal ends is still named
            if group is not None and _group_alive(group, tree, subreaper):
                _signal_group(group, signum)
    return 3


def _wait_gone(group: int | None, tree: ProcessTree, seconds: float, subreaper: bool) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        tree.poll()
        tree.reap()
        if not tree.live() and (group is None or not _group_alive(group, tree, subreaper)):
            return True
        if time.monotonic() > deadline:
            return False
        if not _until_one_ends([seen.pid for seen in tree.live()], tree.interval):
            time.sleep(tree.interval)


def _until_one_ends(pids: list[int], seconds: float) -> bool:
    """Wait `seconds`, or less: until one of the processes `pids` ends, so that the poll that sees an end comes as it
    ends, not up to a wait later (the wait between two polls is never longer than it was). False, having waited
    nothing, where it cannot wait so (no pidfd: not Linux, a kernel before 5.3). A process that ended before it was
    asked about ends the wait at once; a pid that another process took since the poll is waited on as that process
    (the next poll tells them apart)."""
    descriptors = []
    try:
        for pid in pids:
            try:
                descriptors.append(os.pidfd_open(pid))
            except ProcessLookupError:  # ended since the poll
                return True
            except (AttributeError, OSError):
                return False
        if not descriptors:
            time.sleep(seconds)
            return True
        ends = select.poll()  # (not select.select: a descriptor may be numbered past FD_SETSIZE)
        for descriptor in descriptors:
            ends.register(descriptor, select.POLLIN)
        ends.poll(seconds * 1000)
        return True
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _group_alive(group: int, tree: ProcessTree, subreaper: bool) -> bool:
    """Whether a live process of the program is left in its group: one the tree recorded there (the main process
    reaped and the group empty, its number may be another process's group by now); where the tree may not hold every
    process of the group (no /proc, or an orphan reparented to init: no subreaper), any live process in the group
    (/proc where there is one, else a signal 0 probe)."""
    if tree.available and subreaper:
        return any(seen.pgid == group for seen in tree.live())
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.isdir("/proc/self"):
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
                return True
    return False


class Guarded(ProcessTree):
    """The program's process tree, each process it records also told to the guard (guard.py), which ends them if
    mlacheck is killed."""

    def __init__(self, guard: Guard) -> None:
        super().__init__(exclude=frozenset({guard.pid}) if guard.pid is not None else frozenset())
        self.guard = guard

    def poll(self) -> None:
        super().poll()
        self.guard.record(list(self.seen))


def _start_of(pid: int) -> int:
    found = registry.process_stat(pid)
    return found[1] if found is not None else 0


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass
