"""Reading traces back: formats 3 and 2, and format 1 upgraded (`schemas.FORMATS["trace"]` says what changed); a garbage
line is lost alone, a cut-short last line is truncated, not an error. The counts a process kept in its checkpoint
(`events.checkpoint_path`, replaced while it ran) are the last state of each family whose trace has no final counts:
they become a counts event at the end. (`mlacheck.events` documents the event types.)"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlacheck import schemas
from mlacheck.errors import MlacheckError
from mlacheck.events import EVENT_TYPES, FORMAT_VERSION, checkpoint_path, compile_event, counts_event, dispatch_event


@dataclass
class Trace:
    """One trace file read back: its events (format 2), whether its last line was cut short, bad lines."""

    events: list[dict]
    truncated: bool = False
    bad_lines: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION


def read_trace(path: Path) -> Trace:
    """Read a trace; a garbage line loses that line only (named in `bad_lines`), a cut-short last line is `truncated`."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MlacheckError(f"{path}: cannot read the trace: {exc}") from None
    lines = text.split("\n")
    trace = Trace([])
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        event = _parse(line)
        if event is not None:
            trace.events.append(event)
        elif number == len(lines):
            trace.truncated = True  # the line a killed writer was writing
        else:
            trace.bad_lines.append(f"{path}:{number}")
    if trace.events:
        first = trace.events[0]
        if first.get("type") != "run" or "format_version" not in first:
            raise MlacheckError(f"{path}: not an mlacheck trace (its first line is no run event); pass a run folder")
        version = first["format_version"]
        schemas.check("trace", version, path)
        trace.format_version = version
        if version == 1:
            trace.events = upgrade_format_1(trace.events)
    checkpoint = Path(checkpoint_path(path))
    if trace.events and checkpoint.exists():
        _kept_counts(trace, checkpoint)
    return trace


def _kept_counts(trace: Trace, path: Path) -> None:
    """The counts a checkpoint kept, as a counts event of each family whose trace has no final counts (its process
    did not exit normally: "at least"); a checkpoint that cannot be read is lost, and named."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        schemas.check("counts checkpoint", state.get("format_version"), path)
        families = state["families"]
        final = {event["family"] for event in trace.events if event["type"] == "counts" and event.get("final")}
        kept = [
            {**counts_event(name, dict(totals["dispatches"]), dict(totals["calls"]), False), "t": float(state["t"])}
            for name, totals in families.items()
            if name not in final
        ]
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        trace.bad_lines.append(str(path))
        return
    trace.events += kept


def _parse(line: str) -> dict | None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and event.get("type") in EVENT_TYPES else None


def upgrade_format_1(events: list[dict]) -> list[dict]:
    """Format-1 events (keys as lists of strings, one event per dispatch) as format 2."""
    fields: dict[str, list[str]] = {}
    vids: dict[tuple, int] = {}
    seen: set[tuple] = set()
    counts: dict[str, dict[str, int]] = {}
    upgraded = []
    for event in events:
        kind = event["type"]
        if kind == "family":
            fields[event["family"]] = list(event.get("key_fields") or [])
            upgraded.append({**event, "cache_kind": "dict", "fingerprint": None, "preexisting": 0})
        elif kind in ("compile", "dispatch"):
            family, strings = event["family"], tuple(event.get("key") or [])
            vid = vids.setdefault((family, strings), len(vids))
            names = fields.get(family, [])
            key = {(names[i] if i < len(names) else f"field{i}"): _guess(text) for i, text in enumerate(strings)}
            if kind == "compile":
                phase = "serving" if event.get("phase") == "dispatch" else "warmup"
                compiled = compile_event(
                    family, vid, key, None, phase, event.get("seconds"), "compile", event.get("site"), []
                )
                del compiled["t"]  # format 1 kept no times
                upgraded.append(compiled)
            else:
                tally = counts.setdefault(family, {})
                tally[f"{vid}:serving"] = tally.get(f"{vid}:serving", 0) + 1
                if (family, vid) not in seen:
                    seen.add((family, vid))
                    upgraded.append(dispatch_event(family, vid, key, None, "serving", None, [], {}))
        elif kind == "numerics":
            names = fields.get(event["family"], [])
            key = {
                (names[i] if i < len(names) else f"field{i}"): _guess(t) for i, t in enumerate(event.get("key") or [])
            }
            upgraded.append({**event, "key": key})
        else:
            upgraded.append(event)
    at = next((i for i, e in enumerate(upgraded) if e["type"] == "exit"), len(upgraded))
    exited = at < len(upgraded)
    upgraded[at:at] = [counts_event(family, tally, {}, exited) for family, tally in counts.items()]
    return upgraded


def _guess(text: str) -> object:
    """A format-1 key string back as a typed value (only format 1 needs this)."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    try:
        return int(text)
    except ValueError:
        return text
