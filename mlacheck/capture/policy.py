"""How capture treats what it watches, for one run: compile for real or skip, replace the launch, --dry stand-ins."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CapturePolicy:
    """What capture does with what it watches (JSON in capture.json, as `dataclasses.asdict` writes it)."""

    compile: str = "real"  # "real" or "skip"
    replace_launch: bool = False
    dry: bool = False
    target_arch: str = "sm_100a"
    num_sms: int | None = None  # --dry and the scenario: the target's SM count (default: its flagship's)
    flush_seconds: float = 5.0  # counts are written at least this often while dispatches happen
