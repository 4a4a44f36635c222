"""Target arches: "sm_100a" is compute capability (10, 0); and the GPU that stands for an arch where a key depends on
the device (its SM count, its L2) and no device of that arch is there to ask."""

from __future__ import annotations

from collections import namedtuple


def capability(arch: str) -> tuple[int, int] | None:
    """sm_100a -> (10, 0), sm_103a -> (10, 3), sm_90 -> (9, 0); None for anything else."""
    digits = arch.removeprefix("sm_").rstrip("af") if arch.startswith("sm_") else ""
    return (int(digits[:-1]), int(digits[-1])) if len(digits) >= 2 and digits.isdigit() else None


def of_capability(major: int, minor: int) -> str:
    """(9, 0) -> sm_90a, (10, 0) -> sm_100a, (8, 0) -> sm_80: the arch a device of that capability runs (from Hopper
    on, the architecture-specific "a" target)."""
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


class Flagship(namedtuple("Flagship", "name sms l2_bytes")):  # not a dataclass: observed processes import this
    """The GPU an arch's keys are predicted for: its name, SM count and L2 size."""

    __slots__ = ()


DEFAULT_ARCH = "sm_100a"
"""The target where nothing names one (no --arch, no device, no variable a family reads it from)."""

FLAGSHIPS = {"sm_90a": Flagship("H200", 132, 50 << 20), "sm_100a": Flagship("B200", 148, 126 << 20)}
DEFAULT_FLAGSHIP = FLAGSHIPS[DEFAULT_ARCH]


def flagship(arch: str) -> Flagship:
    """The arch's flagship; an arch without a known one gets the B200 (pass --num-sms)."""
    return FLAGSHIPS.get(arch, DEFAULT_FLAGSHIP)


def sm_count_label(arch: str, num_sms: int | None) -> str:
    """How the report names the SM count in use."""
    if num_sms is not None:
        return f"{num_sms} (--num-sms)"
    known = FLAGSHIPS.get(arch)
    if known is not None:
        return f"{known.sms} ({known.name}, the {arch} flagship)"
    return f"{DEFAULT_FLAGSHIP.sms} (assumed, {DEFAULT_FLAGSHIP.name}'s: pass --num-sms)"
