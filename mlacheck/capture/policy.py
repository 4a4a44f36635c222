"""How capture treats what it watches, for one run: compile for real or skip, replace the launch, --dry stand-ins."""

from __future__ import annotations

from collections import namedtuple

FIELDS = {
    "compile": "real",  # "real" or "skip"
    "replace_launch": False,
    "dry": False,
    "target_arch": "sm_100a",
    "num_sms": None,  # --dry and the scenario: the target's SM count (default: its flagship's)
    "flush_seconds": 5.0,  # counts are written at least this often while dispatches happen
}


class CapturePolicy(namedtuple("CapturePolicy", FIELDS, defaults=FIELDS.values())):
    """What capture does with what it watches (JSON in capture.json, as `_asdict` writes it). A named tuple, not a
    dataclass: every observed process that installs a capture makes this class, and a frozen dataclass takes a
    millisecond to make."""

    __slots__ = ()
