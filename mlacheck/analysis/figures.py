"""A variant's measured figures (a launch's output against the reference, the FP8 cost) over its launches: the worst
of each figure."""

from __future__ import annotations


def worst(old: dict[str, float] | None, new: dict[str, float] | None) -> dict[str, float] | None:
    """Per metric the worse of two: the larger error, the smaller cosine similarity (NaN wins); a metric one of them
    lacks is the other's."""
    if old is None or new is None:
        return new if old is None else old
    return {name: _worse(name, old.get(name), new.get(name)) for name in {**old, **new}}


def _worse(name: str, old: float | None, new: float | None) -> float | None:
    """The worse of two values of one metric; a metric one side lacks (a decode LSE) takes the other's."""
    if old is None or new is None:
        return new if old is None else old
    if new != new:  # NaN wins
        return new
    return min(old, new) if name == "cosine_similarity" else max(old, new)
