"""The nearest match: of the candidate keys, the one with the fewest fields that differ from a key."""

from __future__ import annotations

from mlacheck.keys import JsonValue, Key


def nearest(key: Key, candidates: list[Key]) -> tuple[Key | None, dict[str, list[JsonValue]]]:
    """The candidate key with the fewest fields that differ from `key` (the first on a tie), and the diff:
    {field: [candidate's value, key's value]}."""
    best: tuple[Key | None, dict[str, list[JsonValue]]] = (None, {})
    for candidate in candidates:
        diff = {name: [candidate.get(name), value] for name, value in key.items() if candidate.get(name) != value}
        if best[0] is None or len(diff) < len(best[1]):
            best = (candidate, diff)
    return best
