"""What a check says (`analysis/checks/`: one module per finding code): a finding, a check it could not make, a reason
the run cannot pass; and how findings name a variant (`codes.py` says what each code means)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from mlacheck import codes
from mlacheck.codes import Severity
from mlacheck.keys import JsonValue, Key, key_text, value_text

__all__ = ["Finding", "Incomplete", "Note", "NotChecked", "named", "telling"]


@dataclass(slots=True)
class Finding:
    """One finding. The report says of it what `REPORTED` names, fields and properties (report/model.py builds the JSON
    report's finding from them)."""

    code: str
    family: str
    key: Key
    message: str
    hint: str
    nearest: Key | None = None
    diff: dict[str, list[JsonValue]] = field(default_factory=dict)
    drivers: dict[str, list[str]] = field(default_factory=dict)  # diff field -> what drives it
    site: str | None = None
    stack: list[str] = field(default_factory=list)
    proc: int | None = None  # the process it came from (per-process codes)
    summary: str = ""  # one line: the variant by the fields that tell it apart, and the stall, waste or breach

    REPORTED: ClassVar[tuple[str, ...]] = (  # what the report says of it, in order
        "code",
        "name",
        "severity",
        "family",
        "key",
        "nearest",
        "diff",
        "drivers",
        "message",
        "summary",
        "hint",
        "site",
        "stack",
    )

    @property
    def name(self) -> str:
        return codes.lookup(self.code).name

    @property
    def severity(self) -> Severity:
        return codes.lookup(self.code).severity


@dataclass(frozen=True)
class NotChecked:
    """A check a rule asks for that the run could not make (one line of the report's `not_checked`), and the run
    context names that would let it (`context_needed`)."""

    line: str
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Incomplete:
    """A reason the run cannot pass (one line of the report's `incomplete`); with `stop`, the family's rule does not
    describe the installed code: no other check of the family is made, and nothing else of it is judged."""

    line: str
    stop: bool = False


@dataclass(frozen=True)
class Note:
    """A line of a family's notes: something the report says of it that is neither a finding nor a gap."""

    line: str


LONG_KEY = 8  # fields; a finding names a longer key by the fields that tell it apart (the JSON has it whole)


def named(key: Key, fields: list[str] | tuple[str, ...], telling: list[str] | tuple[str, ...]) -> str:
    """`(field=value, ...)`, or for a long key only its `telling` fields and how many others there are."""
    shown = [name for name in telling if name in key]
    if len(key) <= LONG_KEY or not shown:
        return key_text(key, list(fields))
    return (
        key_text({name: key[name] for name in shown}, list(fields))[:-1] + f", and {len(key) - len(shown)} more fields)"
    )


SHORT_KEY = 3  # fields a summary shows of a variant that no field tells apart


def telling(key: Key, fields: list[str] | tuple[str, ...], telling: list[str] | tuple[str, ...]) -> str:
    """`(field=value, ...)` of the `telling` fields only (a summary line); without any, the first few fields."""
    return teller(fields, telling)(key)


def teller(fields: list[str] | tuple[str, ...], telling: list[str] | tuple[str, ...]) -> Callable[[Key], str]:
    """`telling` of a family's keys, its fields' order found once (a timeline names 10^5 compiles)."""
    ordered = [name for name in fields if name in telling] + [name for name in telling if name not in fields]
    fields = list(fields)

    def told(key: Key) -> str:
        shown = [name for name in ordered if name in key]
        if shown:
            return "(" + ", ".join([f"{name}={value_text(key[name])}" for name in shown]) + ")"
        if len(key) <= SHORT_KEY:
            return key_text(key, fields)
        return key_text(dict(list(key.items())[:SHORT_KEY]), fields)[:-1] + ", …)"

    return told
