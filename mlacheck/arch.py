"""Target arch names: "sm_100a" is compute capability (10, 0)."""

from __future__ import annotations


def capability(arch: str) -> tuple[int, int] | None:
    """sm_100a -> (10, 0), sm_103a -> (10, 3), sm_90 -> (9, 0); None for anything else."""
    digits = arch.removeprefix("sm_").rstrip("af") if arch.startswith("sm_") else ""
    return (int(digits[:-1]), int(digits[-1])) if len(digits) >= 2 and digits.isdigit() else None
