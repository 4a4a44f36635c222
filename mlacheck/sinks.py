"""Where events go: every event passes through one `EventSink.write`. A sink keeps events in memory (the scenario),
appends them to a trace file (`JsonlSink`: a process of an observed program), hands them to a display, or to several
sinks; the families' counts go to a checkpoint beside the trace, replaced at once (`replace_file`). Nothing is lost in
silence: an event the trace refuses is counted and said, in the trace or in the note beside it."""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import stat
import sys

from mlacheck.errors import MlacheckError
from mlacheck.events import (
    checkpoint_path,
    checkpoint_state,
    counts_event,
    internal_error_event,
    lost_event,
    lost_note_path,
    run_started,
)

_checkpoints: dict[str, tuple[float, dict[str, dict]]] = {}  # trace path -> (its image's start, its state)

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# json.dumps(data, separators=(",", ":")), with its encoder made once (json.dumps makes one at every call)
_compact = json.JSONEncoder(separators=(",", ":")).encode
NOTE_SIZE = 256  # bytes of the note beside a trace (`_Note`)
END_SLOT = 64  # of them, the last: how its process ended (program/_ending.c writes them)


def replace_file(path: str | os.PathLike, data: bytes) -> None:
    """Replace the file at `path` with `data` at once (a reader sees the old state or the new, never a part): written
    into a file created exclusively beside it (never through a link, never over a file someone put there), then
    renamed over it (a link or a file at `path` is replaced, never written through). OSError where it cannot be."""
    folder, name = os.path.split(os.fspath(path))
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.new")
    try:
        os.unlink(temporary)  # left by a process of the same pid that was killed while writing it
    except FileNotFoundError:
        pass
    fd = os.open(temporary, NEW_FILE, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(temporary)
        raise
    os.close(fd)
    os.replace(temporary, path)


def write_internal_error(sink: EventSink, where: str, error: object) -> None:
    """Record what capture could not see or do (the run then cannot pass); where the sink itself fails, say it on
    stderr, the one fallback. Never raises."""
    try:
        sink.write(internal_error_event(where, error))
    except Exception as exc:  # noqa: BLE001 - the sink failed too: the one place left to say it
        try:
            sys.stderr.write(f"mlacheck: capture error in process {os.getpid()}: {where}: {error} ({exc})\n")
        except Exception:  # noqa: BLE001
            pass


class EventSink:
    """Where events go: `write(event)` one at a time, `checkpoint(counts)` for the state of the counts, `close()` at the
    end."""

    def write(self, event: dict) -> None:
        raise NotImplementedError

    def end(self, event: dict) -> None:
        """A returned compile's `compile_end`, whose record (a `compile` event naming it as its `start`) may follow:
        written now (a trace file holds it until its next line: `JsonlSink.end`)."""
        self.write(event)

    def checkpoint(self, counts: dict[str, dict]) -> None:
        """Families' counts so far, {family: {"dispatches", "calls"}}: state, not a log. A sink that writes a trace
        file (its `path`) keeps the process's state in one file beside it (`checkpoint_path`), replaced at each
        checkpoint, so the run folder grows with variants and not with time; any other sink gets a counts event each."""
        path = getattr(self, "path", None)
        if path is None:
            for family, totals in counts.items():
                self.write(counts_event(family, **totals, final=False))
            return
        started, state = _checkpoints.get(os.fspath(path), (None, {}))
        if started != run_started():  # a new image (a failed exec starts one in the same process): a new state
            state = {}
            _checkpoints[os.fspath(path)] = (run_started(), state)
        state.update(counts)
        replace_file(checkpoint_path(path), _compact(checkpoint_state(state)).encode())

    def close(self) -> None:
        pass


class MemorySink(EventSink):
    """Keeps events in a list (the scenario analyses them in the same process)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def write(self, event: dict) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


class JsonlSink(EventSink):
    """Appends one JSON line per event with a single os.write, so a killed process loses at most that line.

    Nothing is lost in silence: every write's result is checked. An event the file refuses (a full disk, a file-size
    limit, an I/O error) is counted, and the count goes into the trace as a `lost` event with the next write that
    succeeds (and at `close`), and into a note beside the trace (`_Note`) at once, where the trace cannot take it. A
    returned compile's end is held until the next line (`end`): one line says both where that is its record. The
    descriptor is checked to be the trace's before each write (device and inode, kept at open): one that the
    program closed or reused for a file of its own (`os.closerange`, daemonizing code) is never written into nor
    closed; the trace is opened again by its path. A trace deleted while open is made again, starting with `header`
    (the process's run event, marked `trace_replaced`). Files are opened without following links and closed at exec.
    """

    FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, path: str | os.PathLike, header: dict | None = None) -> None:
        self._fd = -1
        self._identity: tuple[int, int] | None = None
        self.header = header  # written first into a trace made again after it was deleted
        self.lost = 0  # events the trace refused, in all
        self._reported = 0  # of them, how many a `lost` event in the trace already says
        self._errors: dict[str, int] = {}
        self._cut = False  # a refused write left part of a line: the next write ends it first
        self._note: _Note | None = None
        self.leave_note = False  # the note is left at close (whoever watches the process's end takes it away)
        self._held: list[dict] = []  # the compile_end events held until the next line (`end`)
        self.reopen(path)

    def reopen(self, path: str | os.PathLike) -> None:
        """Write to another file from now on (a forked child gets its own trace); counts start again."""
        try:
            fd, identity = _open_regular(path, self.FLAGS)
        except OSError as exc:
            raise MlacheckError(f"{path}: cannot write the event trace: {exc}") from None
        self._release()
        self.path, self._fd, self._identity = path, fd, identity
        self.lost, self._reported, self._errors, self._cut = 0, 0, {}, False
        self._held = []  # (a forked child's copy of its parent's: the parent writes them)
        self._note = _Note(lost_note_path(path))  # made now, while it can be

    def write(self, event: dict) -> None:
        line = (_compact(event) + "\n").encode()
        if self._held:  # (written first, in the same write; the end that `event` names as its start is said by it)
            held, count = self._unfolded(event.get("start") if event["type"] == "compile" else None)
            self._put(held + line, count + 1)
        else:
            self._put(line, 1)

    def end(self, event: dict) -> None:
        """Hold a returned compile's `compile_end` until the next line: where that is the compile's own record (a
        `compile` event whose `start` is the end's id), the record says both in one line; any other line (or a
        checkpoint, or `close`) writes the end first. A process that dies before then leaves the compile begun and
        never ended."""
        self._held.append(event)

    def _unfolded(self, start: object) -> tuple[bytes, int]:
        """The held ends taken (each once, whatever thread takes it), as lines, but the one `start` names, and their
        number."""
        lines, count = b"", 0
        while self._held:
            try:
                held = self._held.pop(0)
            except IndexError:  # (another thread took it)
                break
            if held["id"] != start:
                lines, count = lines + (_compact(held) + "\n").encode(), count + 1
        return lines, count

    def _write_held(self) -> None:
        """Write the ends held, each on its own line (no record follows to say them)."""
        if self._held:
            self._put(*self._unfolded(None))

    def _put(self, lines: bytes, events: int) -> None:
        """Write the lines of `events` events at once, after the lost event where there is news of one."""
        if not self._still_ours() and not self._open_again():
            self._refused(OSError(errno.EBADF, "the trace could not be opened again"), events)
            return
        lost = self.lost
        data = b"\n" * self._cut + (self._lost_line(lost) if lost > self._reported else b"") + lines
        try:
            self._write_all(data)
        except OSError as exc:
            self._refused(exc, events)
            return
        self._cut, self._reported = False, lost

    def checkpoint(self, counts: dict[str, dict]) -> None:
        """As every sink's (`EventSink.checkpoint`), the ends held written first (a compile that returned long before
        its process was killed is never one it died in); a checkpoint the folder refuses is a lost record, counted and
        said as a refused event is."""
        self._write_held()
        try:
            EventSink.checkpoint(self, counts)
        except OSError as exc:
            self._refused(exc)

    def close(self) -> None:
        """Say what was lost (in the trace, else in the note beside it), then close the trace if it is still ours; the
        note of a trace that lost nothing goes (unless `leave_note`). The ends held are written first."""
        if self._fd >= 0:
            self._write_held()
        if self.lost > self._reported and self._fd >= 0 and self._still_ours():
            try:
                self._write_all(b"\n" * self._cut + self._lost_line(self.lost))
                self._reported = self.lost
            except OSError:
                pass
        if not self.lost and not self.leave_note and not (self._note and self._note.carried):
            with contextlib.suppress(OSError):
                os.unlink(lost_note_path(self.path))
        self._release()

    def _release(self) -> None:
        """Close the descriptor if it is still the trace's (never one the program took over)."""
        if self._fd >= 0 and self._still_ours():
            os.close(self._fd)
        self._fd, self._identity = -1, None
        if self._note is not None:
            self._note.close()  # (a forked child's copy of its parent's: the parent's note is left as it is)

    def _still_ours(self) -> bool:
        """Whether the descriptor still is the trace opened (a closed or reused one is not), and the trace still in
        the folder (one deleted while open is not)."""
        try:
            info = os.fstat(self._fd)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity and info.st_nlink > 0

    def _open_again(self) -> bool:
        """Open the trace again by its path (the descriptor was taken from it); never closes the old number."""
        try:
            fd, identity = _open_regular(self.path, self.FLAGS)
        except OSError:
            return False
        self._fd, self._identity = fd, identity
        if os.fstat(fd).st_size == 0 and self.header is not None:
            try:
                self._write_all((json.dumps({**self.header, "trace_replaced": True}) + "\n").encode())
            except OSError:
                return True
        return True

    def _write_all(self, data: bytes) -> None:
        """Write every byte, or raise; a short write (the disk filled up) is followed by the rest."""
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            if written <= 0:
                raise OSError(errno.EIO, "the trace took no bytes")
            self._cut = True
            view = view[written:]

    def _refused(self, error: OSError, events: int = 1) -> None:
        """Count the events the trace refused, and say so in the note beside the trace at once."""
        first = not self.lost
        self.lost += events
        name = errno.errorcode.get(error.errno or 0, "error")
        self._errors[name] = self._errors.get(name, 0) + events
        if first:
            try:
                sys.stderr.write(f"mlacheck: pid {os.getpid()} lost an event of its trace {self.path}: {error}\n")
            except Exception:  # noqa: BLE001 - the program's stderr may be closed too
                pass
        if self._note is not None:
            self._note.write(self.lost, self._errors)

    def _lost_line(self, count: int) -> bytes:
        return (_compact(lost_event(count, self._errors)) + "\n").encode()


def _open_regular(path: str | os.PathLike, flags: int, mode: int = 0o600) -> tuple[int, tuple[int, int]]:
    """Open `path` (never through a link); only a regular file of this user's will do. (fd, (device, inode))."""
    fd = os.open(path, flags | os.O_NONBLOCK, mode)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
        os.close(fd)
        raise OSError(errno.EPERM, "not a regular file of this user's")
    return fd, (info.st_dev, info.st_ino)


class _Note:
    """The note beside a trace (`lost_note_path`): its first line counts the events the trace refused, its last
    END_SLOT bytes say how the process ended (program/ending.py). Made with the trace, NOTE_SIZE bytes at once (a later
    line needs no new block nor inode), and written over in place (best effort: the disk may be full too): by its path,
    else, where no file can be opened any more (the program closed every descriptor, then changed its user or root, or
    left itself none free: a daemonizing server), through a shared mapping of the file made with it. A note that an
    earlier process of the same pid left (the pid was reused) keeps what it says: its count (`carried`) and its end."""

    def __init__(self, path: str) -> None:
        self.path, self._map, self.carried = path, None, 0
        try:
            fd, _ = _open_regular(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            earlier = os.pread(fd, NOTE_SIZE, 0)
            self.carried, end = _count(earlier), earlier[-END_SLOT:] if len(earlier) == NOTE_SIZE else b""
            os.pwrite(fd, _line(self._text(0, {})) + (end if end.strip() else b" " * (END_SLOT - 1) + b"\n"), 0)
            self._map = mmap.mmap(fd, NOTE_SIZE)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # (a note that holds no count says events were lost: this one has lost none)
                os.pwrite(fd, self._text(0, {}).encode(), 0)
        finally:
            os.close(fd)

    def _text(self, lost: int, errors: dict[str, int]) -> str:
        """The count's line: the events lost (the earlier process's added), each error's count."""
        said = ", ".join(f"{name} x{count}" for name, count in sorted(errors.items()))
        return f"{lost + self.carried} event(s) lost" + (f" ({said})" if said else "") + "\n"

    def write(self, lost: int, errors: dict[str, int]) -> None:
        """The note's first line, now: by its path, else through the mapping (a path out of the process's reach now:
        nothing it does can have cut the file short, which would make a write through the mapping end it)."""
        line = _line(self._text(lost, errors))
        try:
            fd, _ = _open_regular(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            if self._map is not None:
                self._map[: len(line)] = line
            return
        try:
            os.pwrite(fd, line, 0)
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def _line(text: str) -> bytes:
    """A note's first line as its NOTE_SIZE - END_SLOT bytes: its text (its count first, what follows cut where it is
    longer), spaces, a newline."""
    size = NOTE_SIZE - END_SLOT
    return text.rstrip("\n").encode()[: size - 1].ljust(size - 1) + b"\n"


def _count(note: bytes) -> int:
    """The count a note begins with (0 where it begins with none)."""
    said = note.split()[:1]
    return int(said[0]) if said and said[0].isdigit() else 0


class CallbackSink(EventSink):
    """Hands every event to a callback (a progress display); a callback that raises loses nothing but itself."""

    def __init__(self, callback) -> None:
        self.callback = callback

    def write(self, event: dict) -> None:
        try:
            self.callback(event)
        except Exception:  # noqa: BLE001 - a display must never cost the run an event
            pass


class TeeSink(EventSink):
    """Writes every event to several sinks."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def write(self, event: dict) -> None:
        for sink in self.sinks:
            sink.write(event)

    def end(self, event: dict) -> None:
        for sink in self.sinks:
            sink.end(event)

    def checkpoint(self, counts: dict[str, dict]) -> None:
        for sink in self.sinks:
            sink.checkpoint(counts)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
