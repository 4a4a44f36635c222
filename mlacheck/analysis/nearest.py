"""The nearest match: of the candidate keys, the one with the fewest fields that differ from a key.

`nearest` compares a key with every candidate; `Nearest` gives the same answer for many keys against many candidates
without doing so: a key that differs from its nearest candidate in `size` fields matches it exactly on the other
fields, so an index of the candidates by their values on all fields but `size` of them finds it, trying no field
left out, then one, then two. Where more differ, or the fields are too many to index that way, it compares with every
candidate, as `nearest` does.
"""

from __future__ import annotations

from functools import cache, lru_cache
from itertools import combinations

from mlacheck.keys import JsonValue, Key

Diff = dict[str, list[JsonValue]]
LEFT_OUT = 2  # fields an index may leave out; a key nearer to no candidate than this is compared with every one
INDEXES = 64  # at most this many indexes a set of fields (the ways to leave fields out), else every one is compared


def nearest(key: Key, candidates: list[Key]) -> tuple[Key | None, Diff]:
    """The candidate key with the fewest fields that differ from `key` (the first on a tie), and the diff:
    {field: [candidate's value, key's value]}."""
    best: tuple[Key | None, Diff] = (None, {})
    for candidate in candidates:
        diff = _diff(key, candidate)
        if best[0] is None or len(diff) < len(best[1]):
            best = (candidate, diff)
    return best


class Nearest:
    """Candidate keys, added in order, and for a key the one `nearest` would find among them, found through indexes
    (made the first time a key's fields need them, then kept up to date as candidates are added)."""

    def __init__(self, candidates: list[Key] | None = None) -> None:
        self.candidates: list[Key] = []
        self._indexes: dict[tuple, dict[tuple, int]] = {}  # (fields, left out) -> the others' values -> first candidate
        self._levels: dict[tuple, list[tuple[tuple[str, ...], dict[tuple, int]]]] = {}  # (fields, size) -> its indexes
        for candidate in candidates or []:
            self.add(candidate)

    def add(self, candidate: Key) -> None:
        position = len(self.candidates)
        self.candidates.append(candidate)
        for (fields, left_out), index in self._indexes.items():
            kept = _kept(candidate, _others(fields, left_out))
            if kept is not None:
                index.setdefault(kept, position)

    def of(self, key: Key) -> tuple[Key | None, Diff]:
        """What `nearest(key, candidates)` is."""
        fields = tuple(key)
        for size in range(min(LEFT_OUT, len(fields)) + 1):
            level = self._levels.get((fields, size)) or self._level(fields, size)
            if not level:
                break
            first = -1
            for others, index in level:
                try:
                    position = index.get(tuple([key.get(name) for name in others]), -1)
                except TypeError:  # (a list in it)
                    values = _kept(key, others)
                    position = -1 if values is None else index.get(values, -1)
                if position >= 0 and (first < 0 or position < first):
                    first = position
            if first >= 0:
                candidate = self.candidates[first]
                diff = _diff(key, candidate)
                if len(diff) == size:
                    return candidate, diff
                break  # values equal without being == (NaN): compare with every one
        return nearest(key, self.candidates)

    def _level(self, fields: tuple[str, ...], size: int) -> list[tuple[tuple[str, ...], dict[tuple, int]]]:
        """(the fields kept, their index) of each way to leave `size` fields out; none where the ways are too many."""
        ways = _ways(len(fields), size)
        level = [] if len(ways) > INDEXES else [(_others(fields, way), self._index(fields, way)) for way in ways]
        self._levels[(fields, size)] = level
        return level

    def _index(self, fields: tuple[str, ...], left_out: tuple[int, ...]) -> dict[tuple, int]:
        index = self._indexes.get((fields, left_out))
        if index is None:
            index = self._indexes[(fields, left_out)] = {}
            others = _others(fields, left_out)
            for position, candidate in enumerate(self.candidates):
                kept = _kept(candidate, others)
                if kept is not None:
                    index.setdefault(kept, position)
        return index


@cache
def _ways(fields: int, size: int) -> list[tuple[int, ...]]:
    """The ways to leave `size` of `fields` fields out (their positions)."""
    return list(combinations(range(fields), size))


def _diff(key: Key, candidate: Key) -> Diff:
    return {name: [candidate.get(name), value] for name, value in key.items() if candidate.get(name) != value}


def _kept(key: Key, names: tuple[str, ...]) -> tuple | None:
    """The key's values on `names`, as a hashable tuple (None where a value is not JSON)."""
    values = tuple([key.get(name) for name in names])
    try:
        hash(values)  # the usual key: no list in it, its values as they are
        return values
    except TypeError:
        pass
    try:
        return tuple(_hashable(value) for value in values)
    except TypeError:
        return None


@lru_cache(maxsize=1024)
def _others(fields: tuple[str, ...], left_out: tuple[int, ...]) -> tuple[str, ...]:
    """The fields but those left out (their positions)."""
    return tuple(name for i, name in enumerate(fields) if i not in left_out)


def _hashable(value: JsonValue) -> object:
    """A JSON value as a value of equal equality and a hash: a list as a tuple; anything else unhashable raises."""
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    hash(value)
    return value
