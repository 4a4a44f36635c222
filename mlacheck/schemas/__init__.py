"""The formats of the files mlacheck writes and reads back: each file's current version, the versions this mlacheck
reads, and what changed in each (`FORMATS`), with the one reader check (`check`) that refuses, in one line that says
what changed, a file it cannot read. The trace's events have a JSON Schema each, `events/KIND.json` (package data;
`event_schema`).

Every JSON file carries its version as "format_version" (a trace, in its first event); a rule file as a top-level
`format_version = N`. A writer stamps it with `stamp`. Imported by every observed process as it starts: it imports
nothing heavy (no dataclasses, which loads inspect and ast).
"""

from __future__ import annotations

import json
from pathlib import Path

from mlacheck.errors import MlacheckError


class Format:  # not a dataclass, nor a named tuple (whose class is compiled when made): see above
    """One kind of file: the version written now (`current`), those read (`readable`), what changed in each version
    (`changes`: version -> what it changed, 0 where the file carried no version), and what to do with a file of a
    version this mlacheck cannot read (`advice`)."""

    __slots__ = ("name", "current", "readable", "changes", "advice")

    def __init__(self, name: str, current: int, readable: tuple, changes: dict, advice: str) -> None:
        self.name, self.current, self.readable, self.changes, self.advice = name, current, readable, changes, advice

    def changed_since(self, version: int) -> str:
        """What changed after `version`, up to the current one."""
        return "; ".join(f"format {v}: {self.changes[v]}" for v in sorted(self.changes) if version < v <= self.current)


FORMATS = {
    f.name: f
    for f in (
        Format(
            "trace",
            4,
            (1, 2, 3, 4),
            {
                1: "one event per dispatch, keys as lists of strings",
                2: "typed keys, the first dispatch per variant and phase plus cumulative counts",
                3: "compile_start and compile_end around every compile; phase unknown (was unmarked); counts are "
                "state: kept while the process runs in trace-PID.counts.json beside the trace (replaced, not "
                "appended), and a final counts event at exit",
                4: "the compile record of a watched compile that returned names its compile_start (start); where it "
                "is the line after the compile returned, it is the compile's end too (no compile_end)",
            },
            "record it again with this mlacheck, or read it with the mlacheck that wrote it",
        ),
        Format(
            "counts checkpoint",
            1,
            (1,),
            {1: '{"format_version": 1, "pid", "t", "families": {FAMILY: {"dispatches", "calls"}}}'},
            "read the run folder with the mlacheck that wrote it",
        ),
        Format(
            "capture.json",
            1,
            (1,),
            {0: "the rule schema's dump, validated again in every observed process", 1: "the rules' plain form"},
            "start the program with the mlacheck that made the run folder (capture.json is written by `mlacheck run`)",
        ),
        Format(
            "installed answers",
            1,
            (1,),
            {
                1: '{"format_version": 1, "installation": [[[ENTRY, [[INFO, INODE, MTIME], ...]], ...], [FINDER, ...]], '
                '"answers": {QUESTION: ANSWER}}'
            },
            "nothing: a file of another format is asked again, and written over",
        ),
        Format(
            "meta.json",
            1,
            (0, 1),
            {0: "no version", 1: "format_version"},
            "report the run folder with the mlacheck that wrote it",
        ),
        Format(
            "processes.json",
            1,
            (0, 1),
            {0: "no version", 1: "format_version"},
            "report the run folder with the mlacheck that wrote it",
        ),
        Format(
            "baseline",
            1,
            (0, 1),
            {0: "a fingerprints list without a version", 1: '{"format_version": 1, "fingerprints": [...]}'},
            "write the baseline again with --output json:PATH",
        ),
        Format(
            "rule file",
            2,
            (2,),
            {
                1: "mlacheck 0.2.0",
                2: 'family.arches is required (the target arches the kernels exist for, e.g. arches = ["sm_100a"]), '
                "[numerics] bounds are max = {METRIC = BOUND} and min = {...} (not max_rel_err, min_cosine, "
                "lse_max_abs_err), [[dry.patch]] actions are the generic ones of docs/rule-file-schema.md",
            },
            "update the file as said and declare format_version = 2 at its top",
        ),
    )
}
"""Every versioned file mlacheck writes (the JSON report and the manifest keep their own, in `report/`)."""


def stamp(name: str, data: dict) -> dict:
    """`data` with the current format version of file kind `name` first."""
    return {"format_version": FORMATS[name].current, **data}


def check(name: str, version: object, source: object) -> None:
    """Refuse, in one line naming `source` and what changed, a file of kind `name` whose format version this mlacheck
    cannot read (None: the file carries none, version 0)."""
    kind = FORMATS[name]
    found = 0 if version is None else version
    if isinstance(found, int) and not isinstance(found, bool) and found in kind.readable:
        return
    readable = " or ".join(map(str, kind.readable))
    if not isinstance(found, int) or isinstance(found, bool):
        raise MlacheckError(f"{source}: format_version {found!r} is not a number; this mlacheck reads {readable}")
    if found > kind.current:
        raise MlacheckError(
            f"{source}: a {name} of format {found}, newer than this mlacheck reads (format {readable}); upgrade mlacheck"
        )
    written = f" ({kind.changes[found]})" if found in kind.changes else ""
    raise MlacheckError(
        f"{source}: a {name} of format {found}{written}; this mlacheck reads format {readable}, where "
        f"{kind.changed_since(found)}; {kind.advice}"
    )


def event_schema(kind: str) -> dict:
    """The JSON Schema of one kind of trace event."""
    return json.loads((_events() / f"{kind}.json").read_text(encoding="utf-8"))


def _events() -> Path:
    """The events' schemas' folder, made when asked (an observed process reads none)."""
    return Path(__file__).resolve().parent / "events"


def __getattr__(name: str) -> object:
    if name == "EVENTS":
        return _events()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
