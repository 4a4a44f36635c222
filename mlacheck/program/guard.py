"""The guard: ends the program of an `mlacheck run` whose supervisor was killed, so that no process of it runs on.

The supervisor starts it (`python -S -E GUARD_FILE`: no site, nothing of mlacheck observes it) in a session of its
own, and tells it on its standard input each process of the program it records ("PID START" lines, the start time in
clock ticks telling the process from a later one with its pid). At the end of a run the supervisor writes "done".
When the input ends without it (the supervisor was killed), the guard ends every recorded process that is still the
one recorded, and their descendants: SIGTERM, then SIGKILL after a moment. Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

TERM_SECONDS = 1.0  # between SIGTERM and SIGKILL
KILL_SECONDS = 2.0


def main() -> None:
    recorded: set[tuple[int, int]] = set()
    for line in sys.stdin:
        if line.strip() == "done":
            return
        pid, _, start = line.strip().partition(" ")
        if pid.isdigit() and start.isdigit():
            recorded.add((int(pid), int(start)))
    end(recorded)


def end(recorded: set[tuple[int, int]]) -> None:
    """SIGTERM to each recorded process still alive and to its descendants, then SIGKILL to what is left."""
    for signum, seconds in ((signal.SIGTERM, TERM_SECONDS), (signal.SIGKILL, KILL_SECONDS)):
        sent: set[tuple[int, int]] = set()
        deadline = time.monotonic() + seconds
        while (left := _alive(recorded)) and time.monotonic() < deadline:
            for process in left - sent:
                try:
                    os.kill(process[0], signum)
                except OSError:
                    pass
            sent |= left
            time.sleep(0.05)


def _alive(recorded: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The recorded processes still alive (by pid and start time), with every live descendant of theirs."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] not in (b"Z", b"X"):
                table[int(entry)] = (int(fields[1]), int(fields[19]))
    alive = {(pid, start) for pid, start in recorded if table.get(pid, (0, -1))[1] == start}
    pids = {pid for pid, _ in alive}
    grew = True
    while grew:
        found = {pid for pid, (ppid, _) in table.items() if ppid in pids and pid not in pids}
        grew = bool(found)
        pids |= found
        alive |= {(pid, table[pid][1]) for pid in found}
    alive.discard((os.getpid(), table.get(os.getpid(), (0, 0))[1]))
    recorded |= alive
    return alive


class Guard:
    """The supervisor's end of the guard: `start`, `record` each process, `done` at the end (or `close` alone, which
    ends what was recorded)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self._sent: set[tuple[int, int]] = set()

    def start(self) -> None:
        """Start the guard; where it cannot start, the run goes on without one."""
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-S", "-E", os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "")},
            )
        except OSError:
            self.process = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def record(self, processes: list[tuple[int, int]]) -> None:
        """Tell the guard of processes of the program (pid, start time)."""
        new = [process for process in processes if process not in self._sent]
        if new and self.process is not None:
            self._sent.update(new)
            self._send("".join(f"{pid} {start}\n" for pid, start in new))

    def done(self) -> None:
        """The run ended as it should: the guard leaves."""
        self._send("done\n")
        self.close()

    def close(self) -> None:
        if self.process is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
            if self.process.poll() is None:
                try:
                    self.process.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass  # still ending the program: it goes on by itself
            self.process = None

    def _send(self, text: str) -> None:
        try:
            self.process.stdin.write(text.encode())
            self.process.stdin.flush()
        except (OSError, ValueError, AttributeError):
            pass


if __name__ == "__main__":
    main()
