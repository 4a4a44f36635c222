"""Helpers the report formats share, all over the JSON report dict: sites, severities, counts, runs.

A site is `PATH:LINE`, optionally followed by the function and a note: the embedded scenario names the
engine's code a step models as `PATH:LINE FUNCTION (modelled on ENGINE VERSION)` (`scenario/sites.py`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic_core import PydanticSerializationError, to_json

from mlacheck.codes import CODES

SITE = re.compile(r"^(?P<path>.+?):(?P<line>\d+)(?:\s+(?P<detail>.*))?$")
MODELLED = "(modelled"
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# where a number may be one that the json module writes otherwise than pydantic-core (1e-05 against 0.00001, 1.5e-07
# against 1.5e-7): a one-digit negative exponent after a digit, or "0.0000" (the literal first: the search is quick)
ONE_DIGIT_EXPONENT = re.compile(rb"e-\d(?!\d)")


def printable(text: str) -> str:
    """A string from a run as it may be printed: every control character (C0 with newlines and tabs, DEL, C1), every
    bidi override and every half of a surrogate pair (no UTF-8 can hold one alone) written as its escape (`\\x1b`,
    `\\n`, `\\u202e`, `\\ud800`), so that it can neither move the cursor, retitle the terminal, make a link, hide text,
    print a line of its own (a `verdict: PASS` line) nor stop the output."""
    if text.isascii() and text.isprintable():  # the usual text, at once: no control character in it
        return text
    return CONTROL.sub(lambda match: ESCAPES.get(match[0]) or _escape(match[0]), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable_report(value):
    """The report's JSON form (or any part of it) with every string, keys included, made `printable`; a part in which
    no string needs it is kept as it is (the usual report, at once: a program's command with a newline in it is copied
    alone)."""
    if isinstance(value, str):
        return printable(value)
    if not isinstance(value, (dict, list)) or _plain(value):
        return value
    if isinstance(value, dict):
        return {printable(str(name)): printable_report(item) for name, item in value.items()}
    return [printable_report(item) for item in value]


UNREAD = ("timeline",)  # what the terminal, JUnit and GitHub renderers never read (each process's timed compiles)


class Readable(dict):
    """A report's part that the terminal, JUnit and GitHub renderers read, made printable (`printable_read`)."""


def printable_read(report: dict) -> Readable:
    """`printable_report` of what the terminal, JUnit and GitHub renderers read of a report: all of it but `UNREAD` (a
    timeline of 10^5 compiles is not checked for them). A `Readable` is returned as it is: the renderers of one report
    check its text once."""
    if isinstance(report, Readable):
        return report
    return Readable(printable_report({name: value for name, value in report.items() if name not in UNREAD}))


def _plain(value: dict | list) -> bool:
    """Whether no string of a JSON value needs `printable` (its compact JSON text has no escape and no control
    character: no whitespace of its own, which a control character would be)."""
    try:
        return not any(_escaped(piece) for piece in _compact(value))
    except (PydanticSerializationError, ValueError, RecursionError):
        return False


def _compact(value) -> Iterator[bytes]:
    """The compact JSON text of a value's keys and values, in pieces: a list of more than `SLICE` items a slice at a
    time (never the whole text of a report of 10^5 variants)."""
    if isinstance(value, list) and len(value) > SLICE:
        for start in range(0, len(value), SLICE):
            yield to_json(value[start : start + SLICE], inf_nan_mode="constants")
    elif isinstance(value, (list, dict)) and _large(value):
        if isinstance(value, dict):
            yield to_json(list(value), inf_nan_mode="constants")
        for item in value.values() if isinstance(value, dict) else value:
            yield from _compact(item)
    else:
        yield to_json(value, inf_nan_mode="constants")


def _escaped(text: bytes) -> bool:
    return b"\\" in text or bool((b"\x7f" in text) if text.isascii() else CONTROL.search(text.decode()))


def json_pieces(value, depth: int = 0) -> Iterator[bytes]:
    """The text pydantic-core writes of a JSON value (`to_json(value, indent=2)`, nested `depth` deep), in pieces: a
    list of more than `SLICE` items a slice at a time, a list or an object that holds one an item at a time (the
    serializer's text of a report of 10^5 variants, and the buffer it grows, are never held whole)."""
    pad = b"\n" + b"  " * depth
    if isinstance(value, Slices) and len(value) <= SLICE:
        value = value[0 : len(value)]
    if isinstance(value, (list, Slices)) and len(value) > SLICE:
        yield b"["
        for start in range(0, len(value), SLICE):
            yield (b"," if start else b"") + _nested(value[start : start + SLICE], depth)
        yield pad + b"]"
    elif isinstance(value, (list, dict)) and _large(value):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        yield b"{" if isinstance(value, dict) else b"["
        for number, (name, item) in enumerate(items):
            named = to_json(name) + b": " if isinstance(value, dict) else b""
            yield (b"," if number else b"") + pad + b"  " + named
            yield from json_pieces(item, depth + 1)
        yield pad + (b"}" if isinstance(value, dict) else b"]")
    else:
        yield to_json(value, indent=2, inf_nan_mode="constants").replace(b"\n", pad)


SLICE = 512  # items of a long list serialized at a time


def _nested(items: list, depth: int) -> bytes:
    """The items of a list `depth` deep as `to_json(..., indent=2)` writes them there, without the list's brackets:
    the list serialized inside `depth` lists, which indent it, and those lists' lines cut off (no copy of the text to
    indent it)."""
    text = to_json(_inside(items, depth), indent=2, inf_nan_mode="constants")
    head, tail = _brackets(depth)
    return text[head : len(text) - tail]


def _inside(items: list, depth: int) -> list:
    """`items` inside `depth` lists, one in the other."""
    for _ in range(depth):
        items = [items]
    return items


@cache
def _brackets(depth: int) -> tuple[int, int]:
    """The length of the text before a list's first item `depth` lists deep (their openings and its own), and after
    its last (its closing and theirs): read off the text of a list of one item."""
    text = to_json(_inside([0], depth), indent=2)
    body = b"\n" + b"  " * (depth + 1) + b"0"
    return text.index(body), len(text) - text.index(body) - len(body)


class Slices:
    """A long JSON list made a slice at a time as it is written (`json_pieces`, `json_stream`), never whole:
    `make(start, stop)` gives its items from start to stop."""

    def __init__(self, length: int, make: Callable[[int, int], list]) -> None:
        self.length, self.make = length, make

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, part: slice) -> list:
        start, stop, _ = part.indices(self.length)
        return self.make(start, stop)


def _whole_list(value: object) -> list:
    """A `Slices`'s items, for the json module (its `default`)."""
    if isinstance(value, Slices):
        return value[0 : len(value)]
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _large(value) -> bool:
    """Whether a JSON value holds a list of more than `SLICE` items."""
    if isinstance(value, Slices):
        return True
    if isinstance(value, list):
        return len(value) > SLICE or any(_large(item) for item in value)
    if isinstance(value, dict):
        return any(_large(item) for item in value.values())
    return False


class Rewrite(Exception):  # noqa: N818 - not an error: a renderer's other way to write its document
    """A renderer's `encoded` found, after some of its pieces, that its document is written otherwise: `pieces` are
    the whole document instead (the writer starts it again; `whole` gives every piece)."""

    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__("the document is written again")
        self.pieces = pieces


def whole(pieces: Iterable[bytes]) -> list[bytes]:
    """Every piece of a document (a Rewrite's, where one comes)."""
    try:
        return list(pieces)
    except Rewrite as again:
        return again.pieces


def json_stream(value, alike: Callable[[bytes], bool] | None = None) -> Iterator[bytes]:
    """`json.dumps(value, indent=2)` as UTF-8, a piece at a time: pydantic-core's (`json_pieces`; about ten times
    faster than the json module's indented writer, which is pure Python) while each piece is `alike` (default: the
    same text as the json module's: ASCII, no DEL, no number that the two write differently), else (Rewrite) the json
    module's, whole."""

    def whole() -> Rewrite:
        return Rewrite([json.dumps(value, indent=2, default=_whole_list).encode()])

    try:
        for piece in json_pieces(value):
            if not (alike or _alike)(piece):
                raise whole()
            yield piece
    except PydanticSerializationError:  # (text it cannot write as UTF-8: half a surrogate pair, which json escapes)
        raise whole() from None


def _alike(data: bytes) -> bool:
    return data.isascii() and b"\x7f" not in data and b"0.0000" not in data and not _exponents(data)


def json_document(value, alike: Callable[[bytes], bool] | None = None) -> Iterator[bytes]:
    """`json_stream` of a whole document, ending in a newline as its file does (a Rewrite's pieces end in one too)."""
    try:
        yield from json_stream(value, alike)
    except Rewrite as again:
        raise Rewrite([*again.pieces, b"\n"]) from None
    yield b"\n"


def document_text(pieces: Iterable[bytes]) -> str:
    """A document's pieces as text (a Rewrite's, where one comes)."""
    return b"".join(whole(pieces)).decode()


def json_bytes(value) -> list[bytes]:
    """`json.dumps(value, indent=2)` as UTF-8, in pieces (`json_stream`)."""
    return whole(json_stream(value))


def _exponents(data: bytes) -> bool:
    if b"e-" not in data:  # (the usual piece, at once)
        return False
    return any(data[match.start() - 1 : match.start()].isdigit() for match in ONE_DIGIT_EXPONENT.finditer(data))


def severity(finding: dict) -> str:
    """ "error" or "warning": the finding's own, else the code table's."""
    if finding.get("severity"):
        return finding["severity"]
    code = CODES.get(finding.get("code", ""))
    return code.severity.value if code else "error"


def is_new(finding: dict) -> bool:
    """Whether a finding counts toward the verdict: False for one a baseline marked as known, or whose code is
    ignored (--ignore, --select)."""
    return not finding.get("baselined", False) and not finding.get("ignored", False)


def fails(finding: dict, strict: object = False) -> bool:
    """Whether a finding fails the run: a new error, or under --strict (`strict`: the report's) any new finding."""
    return is_new(finding) and (bool(strict) or severity(finding) == "error")


def level(finding: dict, strict: object = False) -> str:
    """ "error" for a finding that fails the run (`fails`), else its own severity: what a CI format calls it."""
    return "error" if fails(finding, strict) else severity(finding)


def state(finding: dict) -> str:
    """ "baselined", "ignored" or "" (a finding that counts)."""
    return "ignored" if finding.get("ignored") else "baselined" if finding.get("baselined") else ""


def parse_site(site: str | None) -> tuple[str, int | None] | None:
    """ "path:line[ detail]" -> (path, line); a site without a usable line -> (site, None); no site -> None."""
    if not site:
        return None
    match = SITE.match(site)
    if match and int(match["line"]) > 0:
        return match["path"], int(match["line"])
    return site, None


def is_modelled(site: str | None) -> bool:
    """Whether a site names an engine's code that the embedded scenario models (not code that ran)."""
    return bool(site) and MODELLED in site


def short_site(site: str, width: int, modelled: str = " (modelled)") -> str:
    """`PATH:LINE` shortened from the left to about `width` (`…/paged/tokenspeed_mla.py:724`), a modelled site
    marked so; the function a site names is left out (the JSON report and --verbose have it)."""
    match = SITE.match(site)
    if not match:
        return site if len(site) <= width else "…" + site[len(site) - width + 1 :]
    tail = f":{match['line']}" + (modelled if is_modelled(site) else "")
    parts = match["path"].split("/")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        if len(kept) + len(part) + 3 + len(tail) > width:
            return f"…/{kept}{tail}" if len(kept) + 2 + len(tail) <= width else kept + tail
        kept = f"{part}/{kept}"
    return kept + tail


@dataclass(frozen=True)
class Repository:
    """The user's repository: code-scanning formats locate findings at files inside it only."""

    root: Path  # the git work tree holding `base`, else `base`
    base: Path  # where relative sites are relative to: the folder mlacheck ran in

    @classmethod
    def here(cls) -> Repository:
        base = Path.cwd().resolve()
        root = next((folder for folder in (base, *base.parents) if (folder / ".git").exists()), base)
        return cls(root, base)

    def locate(self, site: str | None) -> tuple[str, int | None] | None:
        """(path relative to the root, line) of a site in an existing file inside the repository, else None (a
        modelled engine line, an installed package, a file elsewhere or gone)."""
        parsed = parse_site(site)
        if parsed is None or is_modelled(site):
            return None
        path, line = parsed
        candidate = Path(path) if Path(path).is_absolute() else self.base / path
        try:
            resolved = candidate.resolve()
            relative = resolved.relative_to(self.root.resolve())
        except (OSError, ValueError):
            return None
        return (relative.as_posix(), line) if resolved.is_file() else None


def process_text(finding: dict) -> str:
    """ "rank R (pid P)" / "pid P" for a finding from one process of several; "" otherwise."""
    process = finding.get("process") or {}
    parts = [
        f"rank {process['rank']}" if process.get("rank") is not None else "",
        f"pid {process['pid']}" if process.get("pid") is not None else "",
    ]
    if parts[0] and parts[1]:
        return f"{parts[0]} ({parts[1]})"
    return parts[0] or parts[1]


def family_key_fields(report: dict) -> dict[str, list[str]]:
    """Family name -> its key_fields."""
    return {family["name"]: list(family.get("key_fields") or []) for family in report.get("families") or []}


def counts(report: dict) -> dict[str, int]:
    """Findings by state, as the report model counted them: new errors, new warnings, baselined, ignored."""
    return {"errors": 0, "warnings": 0, "baselined": 0, "ignored": 0, **(report.get("counts") or {})}


def summary_line(report: dict) -> str:
    """ "FAIL: 6 error(s), 3 warning(s)" with ", N baselined" / ", N ignored" when a baseline or --ignore applied."""
    n = counts(report)
    line = f"{str(report.get('verdict', '?')).upper()}: {n['errors']} error(s), {n['warnings']} warning(s)"
    return (
        line
        + (f", {n['baselined']} baselined" if n["baselined"] else "")
        + (f", {n['ignored']} ignored" if n["ignored"] else "")
    )


def program_runs(report: dict) -> list[tuple[list[str], str]]:
    """(command, how it ended) of each observed program run (several when runs were merged)."""
    program = report.get("program")
    if not program:
        return []
    described = []
    for run in program.get("runs", [program]):
        ended = (
            f"killed by {run['signal']}"
            if run.get("signal")
            else "unfinished (no meta.json: mlacheck itself was stopped)"
            if run.get("unfinished")
            else f"exit code {run['exit_code']}"
            if run.get("exit_code") is not None
            else "did not finish"
        )
        if run.get("forwarded"):
            ended += f" (mlacheck got {', '.join(run['forwarded'])} and passed it on)"
        if run.get("left_behind"):
            pids = ", ".join(f"{p['pid']} ({p['ended_by']})" for p in run["left_behind"])
            ended += f"; mlacheck ended {len(run['left_behind'])} process(es) the program left running: {pids}"
        described.append((list(run.get("command") or []), ended))
    return described


def versions_text(report: dict) -> str:
    """ "mlacheck 0.2.0, tokenspeed_mla.prefill 2.0.4, ...": the version of each family seen in the observed processes."""
    seen = ", ".join(
        f"{name} {version or 'version unknown'}" for name, version in (report.get("versions") or {}).items()
    )
    return f"mlacheck {report.get('mlacheck_version')}" + (f", {seen}" if seen else "")


def compile_text(report: dict) -> str:
    """The compile policy as the report states it; a merged report whose runs compiled says so, whatever the first
    run's policy was (before: "skip" beside compile seconds)."""
    variants = [v for family in report.get("families") or [] for v in family.get("variants") or []]
    timed = any(v.get("compile_s") is not None or v.get("serving_path_compile_s") is not None for v in variants)
    if report.get("compile_policy") == "real":
        return "real (every compile timed)"
    if timed:
        return "skip in some runs, real in others (the seconds given are of those that compiled)"
    return "skip (keys only, nothing compiled)"


def slowest_step(row: dict, ranks: list[dict]) -> str:
    """ "4.3 s, waited for rank 0" where a rank's engine step was far over its usual (and overlapped the serving-path
    compile of another rank, found among `ranks` by its pid)."""
    if row.get("slowest_step_s") is None:
        return "—"
    rank_of = {pid: other.get("rank") for other in ranks for pid in other.get("pids") or []}
    waited = [
        f"rank {rank_of[pid]}" if rank_of.get(pid) is not None else f"pid {pid}"
        for pid in row.get("waited_for_pids") or []
    ]
    return f"{row['slowest_step_s']:.1f} s" + (f", waited for {', '.join(waited)}" if waited else "")
