"""Typed, named cache keys: a key field's value as JSON (bool, int, float, str, None, list) and as text.

A variant's key is `{field: value}` in the family's field order. Values are typed when the capture
records them, so nothing downstream guesses types back from strings: torch dtypes become their names
(`torch.float8_e4m3fn` -> "float8_e4m3fn"), classes (CuTe DSL dtypes) their class names, tuples lists.
"""

from __future__ import annotations

JsonValue = bool | int | float | str | None | list
Key = dict[str, JsonValue]


def typed(value: object) -> JsonValue:
    """A key field's runtime value as a JSON value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [typed(item) for item in value]
    if isinstance(value, type):
        return value.__name__
    text = str(value)
    return text[len("torch.") :] if text.startswith("torch.") else text


def value_text(value: JsonValue) -> str:
    """A typed value as the report writes it: True, 192, float8_e4m3fn, (2, 1), None."""
    if type(value) is str:  # (the usual value, as it is)
        return value
    if isinstance(value, list):
        return "(" + ", ".join(value_text(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def fields_text(key: Key, fields: list[str] | None = None) -> str:
    """`field=value, ...` in the given field order, then any other fields."""
    if fields and list(key) != fields:  # (the usual key has the family's fields in order: as it is)
        key = {name: key[name] for name in fields if name in key} | key
    return ", ".join([f"{name}={value if type(value) is str else value_text(value)}" for name, value in key.items()])


def key_text(key: Key, fields: list[str] | None = None) -> str:
    """`(field=value, ...)`: the key as findings and tables name it."""
    return f"({fields_text(key, fields)})"


def varying_fields(keys: list[Key], fields: list[str] | None = None) -> list[str]:
    """The fields (in `fields` order, else in the keys' own) whose values differ between the keys."""
    names = fields if fields is not None else list(dict.fromkeys(name for key in keys for name in key))
    return [name for name in names if len({value_text(key.get(name)) for key in keys}) > 1]


def key_identity(key: Key) -> tuple[tuple[str, str], ...]:
    """What makes two keys the same key, wherever they come from (a trace, a saved report, a baseline): the sorted
    (field, value text) pairs. Field order does not count. Finding fingerprints hash exactly this."""
    return tuple(
        sorted(
            [
                (name if type(name) is str else str(name), value if type(value) is str else value_text(value))
                for name, value in key.items()
            ]
        )
    )


def spelling_text(spelling: dict | None) -> str:
    """How a functools-cached call spelled its key: "3 positional, 2 by keyword"; a dict key: "positional tuple"."""
    if not spelling:
        return "positional tuple"
    positional, keywords = len(spelling.get("positional") or []), len(spelling.get("keywords") or [])
    parts = [f"{positional} positional" if positional else "", f"{keywords} by keyword" if keywords else ""]
    return ", ".join(part for part in parts if part) or "no arguments"
