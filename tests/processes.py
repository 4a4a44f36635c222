"""What the tests ask of a real process (Linux /proc)."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Whether process `pid` runs: a zombie (dead, not reaped yet) or a dying one does not, nor one that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError):
        return False
