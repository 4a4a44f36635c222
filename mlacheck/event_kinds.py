"""What each kind of trace event holds (`mlacheck.events` documents them): its fields, required and optional, and of
which types or choices (a number, NaN and Infinity aside; a stack, providers, key fields and argv, of text; a key or a
call, of values that are no objects); why an event does not fit its kind (`wrong`), or at a glance that it does
(`fits`). A trace of format 1 had fewer kinds, keys as lists of strings (`wrong_in_format_1`)."""

from __future__ import annotations

from math import isfinite

from pydantic_core import SchemaValidator
from pydantic_core import core_schema as cs

COMPILE_PHASES = ("warmup", "capture", "serving", "preexisting", "inherited", "borrowed", "unknown")
DISPATCH_PHASES = ("warmup", "capture", "serving", "unknown")
NET_PHASES = ("warmup", "capture", "serving", "unmarked", "unknown")  # unmarked: format 2's name for unknown
START_PHASES = ("warmup", "capture", "serving", "unknown")
FORMAT_1_TYPES = ("run", "family", "compile", "dispatch", "numerics", "internal_error", "exit")


def wrong(event: dict) -> str | None:
    """Why an event of format 2 or 3 does not fit its kind, else None."""
    kind = event["type"]
    for name, expected in REQUIRED.get(kind, {}).items():
        if name not in event:
            return f"a {kind} event without {name!r}"
        why = _misfit(kind, name, event[name], expected)
        if why:
            return why
    for name, expected in OPTIONAL.get(kind, {}).items():
        if event.get(name) is not None:
            why = _misfit(kind, name, event[name], expected)
            if why:
                return why
    if kind == "compile_start" and event.get("vid") is not None and not isinstance(event.get("key"), dict):
        return "a compile_start event with a vid and no key"
    if kind == "counts":
        for label, count in (event.get("dispatches") or {}).items():
            vid, _, phase = label.partition(":")
            if not vid.isdecimal() or phase not in DISPATCH_PHASES or not _is(count, int):  # (int() reads it)
                return f"a counts event with a dispatch count {label[:40]!r}: {str(count)[:20]}"
        if any(not _is(count, int) for count in (event.get("calls") or {}).values()):
            return "a counts event with a call count that is not a number"
    return None


def fits(event: dict) -> bool:
    """Whether an event of format 2 or 3 fits its kind at a glance: each field of exactly a type it takes, or one of
    its choices, and each field that may hold a number, a list of text, a key or a call `_fine`. True only where
    `wrong` finds nothing (anything else goes to `wrong`, which says why)."""
    kind = event["type"]
    if kind == "counts" or (
        kind == "compile_start" and event.get("vid") is not None and type(event.get("key")) is not dict
    ):
        return False
    for name, exact, choices in _FIT_REQUIRED.get(kind, ()):
        value = event.get(name, fits)  # (a function: of no type a field takes)
        if type(value) not in exact and not (type(value) is str and value in choices):
            return False
    for name, exact, choices in _FIT_OPTIONAL.get(kind, ()):
        value = event.get(name)
        if value is not None and type(value) not in exact and not (type(value) is str and value in choices):
            return False
    for name in _FIT_FINE.get(kind, ()):
        if not _fine(name, event.get(name)):
            return False
    return True


def _fine(name: str, value: object) -> bool:
    """Not a NaN or Infinity, nor a list of text (a stack, providers, key fields, argv) with an item that is not text,
    nor a key or call with a value that is an object (a key field's value is text, a number, true/false, null or a
    list), nor a launch's figures with one that is no number or null (what `_misfit` also asks of a value of its
    type)."""
    if type(value) is float:
        return isfinite(value)
    if name in KEYED and type(value) is dict:
        return all(type(item) is not dict for item in value.values())
    if name in MEASURED and type(value) is dict:
        return all(item is None or type(item) is int or type(item) is float for item in value.values())
    return name not in TEXTS or type(value) is not list or all(type(item) is str for item in value)


KEYED = ("key", "call")  # objects of key fields' values
MEASURED = ("kernel",)  # objects of figures: each a number (NaN and Infinity too: what a launch measured) or null
TEXTS = ("stack", "providers", "key_fields", "argv", "entries", "foreign")  # lists of text


def wrong_in_format_1(event: dict) -> str | None:
    """Why an event does not fit format 1 (keys as lists of strings, phases precompile or dispatch), else None."""
    kind = event["type"]
    if kind not in FORMAT_1_TYPES:
        return f"a {kind} event in a format-1 trace"
    if kind in ("family", "compile", "dispatch", "numerics") and not isinstance(event.get("family"), str):
        return f"a {kind} event without a family name"
    if kind in ("compile", "dispatch", "numerics"):
        if "vid" in event or not isinstance(event.get("key"), list):
            return f"a {kind} event that is not of format 1 (its key is not a list)"
    if kind == "compile" and event.get("phase") not in ("precompile", "dispatch"):
        return f"a compile event whose phase {str(event.get('phase'))[:40]!r} is not of format 1"
    if kind == "internal_error" and not all(isinstance(event.get(name), str) for name in ("where", "message")):
        return "an internal_error event without its where and message"
    if event.get("stack") is not None:
        return _misfit(kind, "stack", event["stack"], list)
    return None


def _mistyped(kind: str, name: str, value: object, expected: object) -> str | None:
    if type(value) in _EXACT.get(expected, ()) or (type(value) is str and value in _CHOICES.get(expected, ())):
        return None  # the usual case, said at once: a value of exactly an expected type, or one of the choices
    if isinstance(expected, tuple) and all(isinstance(choice, str) for choice in expected):
        if value not in expected:
            return f"a {kind} event whose {name} {str(value)[:40]!r} is not one of {', '.join(expected)}"
        return None
    if not _is(value, expected):
        return f"a {kind} event whose {name} is not {_NAMES.get(expected, 'of the right type')}"
    return None


def _misfit(kind: str, name: str, value: object, expected: object) -> str | None:
    """Why a field's value does not fit: of another type, a number (each is a time: `t`, `seconds`, `usual`) that
    JSON gave as NaN or Infinity, or a stack with a frame that is not text."""
    why = _mistyped(kind, name, value, expected)
    if why is None and not _fine(name, value):
        fault = "is not a finite number" if type(value) is float else "holds an object" if name in KEYED else None
        fault = "holds a figure that is not a number" if name in MEASURED else fault
        return f"a {kind} event whose {name} {fault or 'is not a list of text'}"
    return why


def _is(value: object, expected: object) -> bool:
    """isinstance, where a bool is not a number."""
    return isinstance(value, expected) and not (isinstance(value, bool) and expected in (int, float, (int, float)))


_NAMES = {int: "a whole number", str: "text", dict: "an object", list: "a list", bool: "true or false"}
_NAMES[(int, float)] = "a number"
REQUIRED = {
    "run": {"format_version": int},
    "family": {"family": str},
    "compile": {"family": str, "vid": int, "key": dict, "phase": COMPILE_PHASES},
    "dispatch": {"family": str, "vid": int, "key": dict, "phase": DISPATCH_PHASES},
    "counts": {"family": str},
    "dispatch_error": {"family": str, "function": str, "reached_lookup": bool, "error": str, "message": str},
    "no_lookup": {"family": str, "function": str},
    "context": {"values": dict},
    "numerics": {"family": str, "key": dict, "kernel": dict},
    "unwatched": {"module": str, "cache": str, "provider": (str, type(None))},
    "unwatched_dispatch": {"module": str, "function": str},
    "unwatched_compile": {"net": str, "kernel": str, "phase": NET_PHASES},
    "lost": {"events": int, "errors": dict},
    "internal_error": {"where": str, "message": str},
    "compile_start": {"id": int, "phase": START_PHASES, "t": (int, float)},
    "compile_end": {"id": int},
    "spawn": {"child": int, "path": str, "argv": list, "python": bool},
    "kill": {"target": int, "signal": int},
    "reaped": {"pid": int, "how": ("exit", "signal"), "number": int},
    "unseen": {"family": str, "what": str},
    "slow_step": {"function": str, "seconds": (int, float), "usual": (int, float), "t": (int, float)},
}
OPTIONAL = {
    "run": {
        "pid": int,
        "ppid": int,
        "pgid": int,
        "argv": list,
        "forked_from": int,
        "host": str,
        "rank": int,
        "start_ticks": int,
    },
    "family": {"key_fields": list, "providers": list, "every_lookup_counted": bool},
    "compile": {
        "spelling": dict,
        "seconds": (int, float),
        "site": str,
        "stack": list,
        "origin": str,
        "t": (int, float),
        "entries": list,
        "foreign": list,
        "start": int,
    },
    "dispatch": {"spelling": dict, "site": str, "stack": list, "call": dict},
    "counts": {"dispatches": dict, "calls": dict, "final": bool},
    "dispatch_error": {"site": str},
    "no_lookup": {"site": str},
    "serving_start": {"how": str, "site": str, "t": (int, float)},
    "unwatched_compile": {
        "key": dict,
        "seconds": (int, float),
        "site": str,
        "stack": list,
        "t": (int, float),
        "entries": list,
        "raised": str,
        "child": int,
    },
    "exit": {"rank": int, "how": str, "t": (int, float)},
    "unseen": {"net": bool},
    "slow_step": {"step": int, "serving": bool},
    "exec": {"path": str, "argv": list, "python": bool, "failed": str},
    "spawn": {"rank": (int, type(None)), "t": (int, float), "start_ticks": int},
    "kill": {"t": (int, float), "reached": list},
    "reaped": {"t": (int, float), "start_ticks": int},
    "compile_start": {
        "family": str,
        "vid": int,
        "key": dict,
        "spelling": dict,
        "site": str,
        "stack": list,
        "net": str,
        "kernel": str,
    },
    "compile_end": {"seconds": (int, float), "outcome": ("returned", "raised", "skipped", "cached"), "t": (int, float)},
}


_EXPECTED = {expected for kinds in (REQUIRED, OPTIONAL) for fields in kinds.values() for expected in fields.values()}
_CHOICES = {e: frozenset(e) for e in _EXPECTED if isinstance(e, tuple) and all(isinstance(c, str) for c in e)}
_EXACT = {e: frozenset(e if isinstance(e, tuple) else (e,)) for e in _EXPECTED if e not in _CHOICES}  # bool is no int
_FIT_REQUIRED, _FIT_OPTIONAL = (
    {
        kind: tuple((name, _EXACT.get(e, frozenset()), _CHOICES.get(e, frozenset())) for name, e in fields.items())
        for kind, fields in kinds.items()
    }
    for kinds in (REQUIRED, OPTIONAL)
)
_FIT_FINE = {  # the fields of each kind that `_fine` has more to ask of: a number, a list of text, a key or a call
    kind: tuple(
        name
        for fields in (REQUIRED.get(kind, {}), OPTIONAL.get(kind, {}))
        for name, expected in fields.items()
        if name in (*TEXTS, *KEYED, *MEASURED) or float in _EXACT.get(expected, ())
    )
    for kind in {*REQUIRED, *OPTIONAL}
}


USUAL = ("compile_start", "compile_end", "compile", "dispatch")  # the kinds a variant writes: most lines of a trace
_USUAL_LINES = tuple(b'{"type":"%s"' % kind.encode() for kind in USUAL)  # how the sink begins their lines


def usual_event(line: bytes) -> dict | None:
    """The event of a line of a `USUAL` kind that `fits` it, read and checked in one pass of pydantic-core's (the
    line's JSON as `from_json` reads it); None for any other line (another kind, a field that does not fit, not JSON
    that it reads: the caller reads it the slower way, which says why). A line that does not begin as the sink begins
    a usual kind's (a run, family or counts line) goes the slower way at once, never read twice."""
    if not line.startswith(_USUAL_LINES):
        return None
    try:
        event = _USUAL_READER.validate_json(line)
    except ValueError:
        return None
    if event["type"] == "compile_start" and event.get("vid") is not None and type(event.get("key")) is not dict:
        return None  # (`fits` refuses it: a compile_start with a vid and no key)
    return event


def _field_schema(name: str, expected: object) -> dict:
    """A field's value as `fits` takes it, in pydantic-core's strict terms (a number finite, an int never a bool)."""
    if name in KEYED:  # values that are no objects
        value = cs.union_schema(
            [*map(_strict, (str, int, float, bool, type(None))), cs.list_schema()], mode="left_to_right"
        )
        return cs.dict_schema(cs.str_schema(strict=True), value, strict=True)
    if name in TEXTS:
        return cs.list_schema(cs.str_schema(strict=True), strict=True)
    if expected in _CHOICES:
        return cs.literal_schema(list(expected))
    types = expected if isinstance(expected, tuple) else (expected,)
    return _strict(types[0]) if len(types) == 1 else cs.union_schema([*map(_strict, types)], mode="left_to_right")


def _strict(kind: type) -> dict:
    return {
        int: cs.int_schema(strict=True),
        float: cs.float_schema(strict=True, allow_inf_nan=False),
        str: cs.str_schema(strict=True),
        bool: cs.bool_schema(strict=True),
        dict: cs.dict_schema(strict=True),
        list: cs.list_schema(strict=True),
        type(None): cs.none_schema(),
    }[kind]


def _usual_schema(kind: str) -> dict:
    fields = {"type": cs.typed_dict_field(cs.literal_schema([kind]))}
    fields |= {name: cs.typed_dict_field(_field_schema(name, e)) for name, e in REQUIRED.get(kind, {}).items()}
    fields |= {
        name: cs.typed_dict_field(cs.nullable_schema(_field_schema(name, e)), required=False)
        for name, e in OPTIONAL.get(kind, {}).items()
    }
    return cs.typed_dict_schema(fields, extra_behavior="allow")


_USUAL_READER = SchemaValidator(
    cs.tagged_union_schema({kind: _usual_schema(kind) for kind in USUAL}, "type"), cs.CoreConfig(cache_strings="all")
)
