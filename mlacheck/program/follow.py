"""Following a run folder's traces while the program runs: the events each process wrote since the last look.

Reads whole lines only (a line still being written waits for the next look), from regular files only, a bounded
chunk at a time; a line that is not JSON is left to the report, which names it. Each event gets the pid of the trace
it came from.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.files import MIB, open_regular
from mlacheck.program.layout import TRACE_GLOB

CHUNK = 4 * MIB  # read at one look per trace, at most


class TraceFollower:
    """New events of every trace in a run folder, trace by trace."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._offsets: dict[Path, int] = {}

    def poll(self) -> list[dict]:
        events = []
        for path in sorted(self.folder.glob(TRACE_GLOB)):
            offset = self._offsets.get(path, 0)
            try:
                with open_regular(path) as file:
                    file.seek(offset)
                    data = file.read(CHUNK)
            except (OSError, MlacheckError):  # gone, or not a regular file: the report names it
                continue
            end = data.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            pid = path.stem.rpartition("-")[2]
            for line in data[:end].splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append({**event, "pid": event.get("pid") or (int(pid) if pid.isdigit() else None)})
        return events
