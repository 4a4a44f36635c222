"""The processes of a run, as the supervisor saw them: every descendant, polled from /proc while the program runs,
and ended at the end by the ids recorded.

The supervisor is made a child subreaper, so a process whose parent ended (a daemon's double fork, Ray's
processes after their driver) is reparented to it and stays its descendant, in whatever session or process group
it put itself; it is reaped here. Of each process the tree keeps its pid and start time (the two tell it from a
later process that reuses the pid), parent, session, process group, executable and command line (the executable
read again at every poll; the command line where the start of the stack moved, which an exec does, and every few
polls for a process title: reading another process's command line waits on its memory map, which a process that
imports modules holds often), RANK or LOCAL_RANK where its environment is readable, and whether it is a Python
interpreter: its executable is named python* or pypy*, or it maps a libpython. A process
showing its parent's executable and command line is a fork of it (or one between its fork and exec): what runs in
it is its parent's to observe. Each image a process runs is kept too (`images`): an exec gives the process a new
stack (its start address changes; the executable, where that cannot be read), which a process title does not. A
process seen in the middle of its exec (its stat shows the start of the new image's arguments, and the code not yet
placed or the stack not yet where it settles) runs the image it settles into: one image, not two.

What it cannot see: a process that starts and ends between two polls, a Python statically linked under another
name, and a process that does not descend from the supervisor (a Ray cluster started outside the run).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass, field

from mlacheck.program.spawns import environment_rank, python_named

POLL_SECONDS = 0.05  # between two polls, or ten times the work of the last poll where that is longer (many processes)
TITLE_POLLS = 8  # an image's command line is read again every this many polls (a process title); an exec, at once
FULL_POLLS = 20  # every this many polls, the stat of every process is read, not only of those that may be the run's
LOADER_POLLS = 3  # an image not found to be Python is looked at again this many polls (its loader maps libpython)
PR_SET_CHILD_SUBREAPER = 36


@dataclass
class Seen:
    """One process of the run."""

    pid: int
    start: int  # clock ticks after boot: with the pid, the process's identity
    ppid: int
    sid: int
    pgid: int
    exe: str | None = None
    argv: list[str] = field(default_factory=list)
    python: bool = False
    forked: bool = True  # only ever seen with its parent's image
    rank: int | None = None
    first_seen: float = 0.0
    last_seen: float = 0.0
    alive: bool = True
    ended_by: str | None = None  # the signal mlacheck ended it with, where it had to
    images: list[dict] = field(default_factory=list)  # {exe, argv, python, forked, polls} of each image it ran
    stack: int | None = None  # the start of its stack, which an exec changes (in flight: of its arguments; 0: unknown)


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); False where it cannot be."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class ProcessTree:
    """The descendants of `root` (default: this process), recorded at every `poll`."""

    def __init__(self, root: int | None = None, exclude: frozenset[int] = frozenset()) -> None:
        self.root = os.getpid() if root is None else root
        self.exclude = exclude  # pids of processes that are mlacheck's own, not the program's
        self.seen: dict[tuple[int, int], Seen] = {}
        self.available = os.path.isdir("/proc/self")
        self.interval = POLL_SECONDS  # how long to wait before the next poll: polls work at most a tenth of the time
        self._others: dict[int, int] = {}  # pid -> inode number in /proc of processes not descending from root
        self._flights: dict[tuple[int, int], tuple[dict, int]] = {}  # an exec seen in flight: see _read
        self._polls = 0

    def poll(self) -> None:
        """Record every live descendant, and whether each recorded one is still alive.

        A process seen not to descend from root never does later (an orphan is reparented to an ancestor of its own:
        its nearest subreaper, or init), so its stat is not read again while /proc lists its pid with the same inode
        number: a later process that takes the pid gets a /proc directory, and an inode number, of its own. Reading
        every process's stat is what a poll on a busy machine spends most on; the listing's inode numbers come with
        it. Every FULL_POLLS polls every stat is read all the same (a /proc whose inode numbers tell no process
        apart). The wait before the next poll is ten times the CPU time this one took, not its wall time: a read that
        waits (on a process holding its memory map while it imports, or a preempted or paused machine) costs nothing,
        and a longer wait would let a process start and end unseen."""
        if not self.available:
            return
        now, started = time.time(), time.thread_time()
        full, self._polls = self._polls % FULL_POLLS == 0, self._polls + 1
        listed, table = _process_table({} if full else self._others)
        children: dict[int, list[int]] = {}
        for pid, row in table.items():
            children.setdefault(row[1], []).append(pid)
        live: set[tuple[int, int]] = set()
        stack = list(children.get(self.root, []))
        while stack:
            pid = stack.pop()
            state, ppid, pgid, sid, start = table[pid][:5]
            stack += children.get(pid, [])
            if pid in self.exclude:
                continue
            key = (pid, start)
            record = self.seen.get(key)
            if record is None:
                record = self.seen[key] = Seen(pid, start, ppid, sid, pgid, first_seen=now)
            record.ppid, record.sid, record.pgid, record.last_seen = ppid, sid, pgid, now
            if state in "ZX":
                continue
            live.add(key)
            self._read(key, record, table)
        ours = {key[0] for key in live} | {record.pid for record in self.seen.values()} | self.exclude | {self.root}
        self._others = {
            pid: inode
            for pid, inode in listed.items()
            if pid not in ours and (pid in table or self._others.get(pid) == inode)  # its stat read, or skipped
        }
        for key, record in self.seen.items():
            record.alive = key in live
        self._flights = {key: flight for key, flight in self._flights.items() if key in live}
        self.interval = max(POLL_SECONDS, 10 * (time.thread_time() - started))

    def reap(self, keep: int | None = None) -> None:
        """Collect the exit status of ended orphans that were reparented to this process."""
        for record in self.seen.values():
            if not record.alive and record.ppid == os.getpid() and record.pid != keep:
                try:
                    os.waitpid(record.pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def live(self) -> list[Seen]:
        return [record for record in self.seen.values() if record.alive]

    def signal_live(self, signum: int) -> list[Seen]:
        """Send `signum` to every live recorded process, each checked to be the same process first."""
        sent = []
        for record in self.live():
            if _start_of(record.pid) != record.start:
                continue
            try:
                os.kill(record.pid, signum)
            except (ProcessLookupError, PermissionError):
                continue
            record.ended_by = signal.Signals(signum).name
            sent.append(record)
        return sent

    def records(self) -> list[dict]:
        return [asdict(record) for record in sorted(self.seen.values(), key=lambda r: (r.first_seen, r.pid))]

    def _read(self, key: tuple[int, int], record: Seen, table: dict) -> None:
        """Read the process's image (`_read_image`), one seen in the middle of its exec (`_in_flight`) as one image.
        A poll that sees an exec under way records the image as it shows (its stack: the start of its arguments) and
        keeps what the record held before (`_flights`). Where a later poll shows that same image settled (the start of
        its arguments, set once an exec, is the one seen in flight; the executable is the same), its image is read
        from what the record held before: the stack's move from where it showed in flight to where it settles is no
        second exec (a second Python image that wrote no trace). Any other way, what was read in flight stays
        recorded: the process ended or never settled (it is all that was seen of that image), or exec'd again, before
        the next poll or between its stat and its reads (the stack read after the command line is not the stat's)."""
        row, flight = table[record.pid], self._flights.get(key)
        moved = flight is not None and row[6] != flight[1]  # another exec since: another image
        if flight is not None and not _in_flight(row):
            del self._flights[key]
            if not moved and _executable(record.pid) == record.exe:
                seen = _held(record)
                _restore(record, flight[0])
                self._read_image(record, table)
                if record.stack == row[5]:
                    return
                _restore(record, seen)
                self._flights.pop(key, None)
        self._read_image(record, table, moved)

    def _read_image(self, record: Seen, table: dict, execed: bool = False) -> None:
        """Read the process's executable and stack again, and its command line where the image may have changed: an
        exec starts a new image; a process title (or the exec of a fork seen before its stack changed) updates the
        image it runs. Where the command line is read, the stack is read again after it: the poll's first read may
        have come before an exec whose executable or command line the later reads saw. An image not named python* is
        Python where it maps a libpython, which its loader does after the exec: it is looked at again for its first
        LOADER_POLLS polls. An exec seen under way (`_shown`), by the stat or by the second read, is a new image; one
        in flight is kept in `_flights` with what the record held before this read. `execed`: the process is known to
        have exec'd since the last poll."""
        exe = _executable(record.pid)
        if exe is None and record.images:  # ending (its memory is gone), or no longer readable: as it was
            return
        row, key = table[record.pid], (record.pid, record.start)
        argv, again = _command(record, exe, _image_stack(row))
        stack, starting, flying = _shown(record, row, again)
        if flying and self._flights.get(key, ({}, 0))[1] != flying:
            self._flights[key] = (_held(record), flying)
        execed = execed or starting or _execed(record, exe, stack)
        record.stack = stack
        if record.images:
            record.images[-1]["polls"] += 1
        loading = not record.python and bool(record.images) and record.images[-1]["polls"] <= LOADER_POLLS
        if exe == record.exe and argv == record.argv and not execed and not loading:
            return
        changed_exe = exe != record.exe or execed
        record.exe, record.argv = exe, argv
        forked = self._forked(record, stack, execed, table)
        record.forked &= forked
        if (changed_exe or loading) and exe is not None:
            _identify(record, exe)
        _keep_image(record, forked, execed)

    def _forked(self, record: Seen, stack: int, execed: bool, table: dict) -> bool:
        """Whether the image the process shows is its parent's: a fork has its parent's stack, whatever its title;
        where a stack cannot be read, its parent's executable and command line."""
        parent_stack = table[record.ppid][5] if record.ppid in table else 0
        if stack and parent_stack and not execed:
            return stack == parent_stack
        parent = next((r for (pid, _), r in self.seen.items() if pid == record.ppid and r.alive), None)
        parent_image = (parent.exe, parent.argv) if parent is not None else _image(record.ppid)
        return not execed and (record.exe, record.argv) == parent_image


def _held(record: Seen) -> dict:
    """What a poll's read of a process's image may change in its record, as it is now."""
    held = {name: getattr(record, name) for name in ("exe", "argv", "python", "forked", "rank", "stack")}
    return {**held, "images": [dict(image) for image in record.images]}


def _restore(record: Seen, held: dict) -> None:
    for name, value in held.items():
        setattr(record, name, value)


def _command(record: Seen, exe: str | None, stack: int) -> tuple[list[str], tuple | None]:
    """The process's command line, and its stat read again after it (None where not read, or it ended): the command
    line recorded where the image is the same (no exec: the stack is where it was), read again every few polls (a
    process title), and at every poll while it read empty (an exec under way); where it is read, the stat is read
    again after it (an exec may have come since the poll read the stack)."""
    same = bool(record.images) and stack != 0 and stack == record.stack and exe == record.exe and bool(record.argv)
    if same and record.images[-1]["polls"] % TITLE_POLLS:
        return record.argv, None
    return _read_argv(record.pid), _row_of(record.pid)


def _shown(record: Seen, row: tuple, again: tuple | None) -> tuple[int, bool, int]:
    """Of the image the poll's reads saw (the stat read again after the command line where it was: an exec may have
    come between), the start of its stack (`_image_stack`; the first read's where the second's is 0), whether it is
    an exec before the start of its arguments is set that follows an image whose stack was seen (`_starting`: a new
    image, nothing of it readable yet, its stack not known: 0), and the start of its arguments where it is in flight
    (else 0). A process that let go of its memory at its end shows the same 0s: an exec still has an executable (read
    after the stat: the first read's was)."""
    seen = row if again is None else again
    if record.stack and _starting(seen) and (again is None or _executable(record.pid) is not None):
        return 0, True, 0
    return _image_stack(seen) or _image_stack(row), False, seen[6] if _in_flight(seen) else 0


def _identify(record: Seen, exe: str) -> None:
    """Whether the image is Python (named python* or pypy*, or mapping a libpython), and its rank where not a fork."""
    record.python = python_named(exe) or _maps_libpython(record.pid)
    record.rank = _environment_rank(record.pid) if not record.forked else record.rank


def _execed(record: Seen, exe: str | None, stack: int) -> bool:
    """Whether the process exec'd since the last poll: its stack moved (its executable changed, where a stack cannot be
    read); a process whose image was never read has none to leave. An image seen in the middle of its exec (Linux
    sets the new image's stack, then its command line: it read empty, its stack not yet settled) is the same image
    when it shows its command line, not a second one (which would be a Python image that wrote no trace), where its
    executable is the same."""
    if record.stack is None or not record.images:
        return False
    if not record.argv and exe == record.exe:
        return False
    return stack != record.stack if stack and record.stack else exe != record.exe


def _keep_image(record: Seen, forked: bool, execed: bool) -> None:
    """Record the image the process runs now: a new one after an exec (or the first), else the last one updated."""
    if execed or not record.images:
        record.images.append(
            {"exe": record.exe, "argv": record.argv, "python": record.python, "forked": forked, "polls": 1}
        )
    else:
        image = record.images[-1]
        image.update(exe=record.exe, argv=record.argv, python=record.python, forked=image["forked"] and forked)


def _process_table(skip: dict[int, int]) -> tuple[dict[int, int], dict[int, tuple]]:
    """pid -> inode number of each process in /proc, and pid -> its stat's `_row` of each but those that `skip` holds
    with the same inode number."""
    listed, table = {}, {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid, inode = int(entry.name), entry.inode()
        listed[pid] = inode
        if skip.get(pid) == inode:
            continue
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, 4096)
            finally:
                os.close(fd)
            table[pid] = _row(data)
        except (OSError, IndexError, ValueError):
            continue
    return listed, table


def _row(data: bytes) -> tuple[str, int, int, int, int, int, int, bool]:
    """(state, ppid, pgid, sid, start, start of stack, start of arguments, whether the code is placed) of a stat line;
    the start of the arguments 0 where the line has none (Linux before 3.5)."""
    fields = data.rsplit(b")", 1)[1].split()
    arguments = int(fields[45]) if len(fields) > 45 else 0
    return (
        fields[0].decode(),
        int(fields[1]),
        int(fields[2]),
        int(fields[3]),
        int(fields[19]),
        int(fields[25]),
        arguments,
        int(fields[23]) != 0 or int(fields[24]) != 0,
    )


def _in_flight(row: tuple) -> bool:
    """Whether the row is of a process in the middle of an exec, past the start of its new image's arguments: Linux
    sets that start (setup_arg_pages; once an exec), moves the stack under it and sets the stack's start there, writes
    the pointers to the arguments and the auxiliary vector below (create_elf_tables, which makes the new command line
    readable), and only then sets where the stack settles, below them, with the start and end of the code
    (load_elf_binary; both 0 until then). A stat read while those last are set may show the code placed and the stack
    at its arguments, or the code not placed and the stack settled (both in flight here: a settled image's code is
    placed and its stack starts below its arguments)."""
    arguments = row[6]
    return arguments != 0 and (not row[7] or row[5] == arguments)


def _starting(row: tuple) -> bool:
    """Whether the row is of a process at the start of an exec, before it sets the start of its new arguments: its
    code, stack and arguments all 0 (329 rows of the 2.06 million, in 37 execs of 30,000). A /proc that shows them so
    for every process tells no exec by them: only an image whose stack was seen is taken to leave it (`_shown`)."""
    return not row[7] and row[5] == 0 and row[6] == 0


def _image_stack(row: tuple) -> int:
    """The start of the stack of the image the row shows: where its exec is in flight, the start of its arguments
    (where its stack starts in flight, once moved), else the start of its stack (0 where it cannot be read, and at the
    start of an exec: `_starting`)."""
    return row[6] if _in_flight(row) else row[5]


def _start_of(pid: int) -> int | None:
    row = _row_of(pid)
    return None if row is None else row[4]


def _row_of(pid: int) -> tuple | None:
    """The stat `_row` of a live process (None where it ended or cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            row = _row(stat.read())
        return row if row[0] not in ("Z", "X") else None
    except (OSError, IndexError, ValueError):
        return None


def _read_argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            data = cmdline.read(8192)
    except OSError:
        return []
    return [part.decode(errors="replace") for part in data.rstrip(b"\0").split(b"\0")] if data else []


def _image(pid: int) -> tuple[str | None, list[str]]:
    return _executable(pid), _read_argv(pid)


def _executable(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _maps_libpython(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            return b"/libpython" in maps.read()
    except OSError:
        return False


def _environment_rank(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return environment_rank(item for item in environ.read().split(b"\0") if item)
    except OSError:
        return None


def python_images(record: dict | None) -> list[dict]:
    """The images of a saved record of a process that ran Python of their own (not a fork's copy of its parent's, seen
    before it exec'd its command)."""
    if record is None:
        return []
    images = record.get("images") or [record]  # a record of mlacheck 0.2 holds its last image only
    return [image for image in images if image.get("python") and not image.get("forked")]
