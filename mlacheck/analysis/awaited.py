"""The compiles that returned and await their record (`Brackets.starts`), found at once by the record that closes
them."""

from __future__ import annotations


class Awaited:
    """The compiles that returned and whose record has not come yet (keys of `Brackets.starts`), grouped by process
    and family or net, and by variant too, each group in the order they returned: the one a record closes is found at
    once (a hostile trace of 10^5 of them is no 10^10 comparisons)."""

    def __init__(self) -> None:
        self.groups: dict[tuple, dict[tuple, None]] = {}

    def add(self, key: tuple, start: dict) -> None:
        for group in _groups(key[0], start):
            self.groups.setdefault(group, {})[key] = None

    def remove(self, key: tuple, start: dict) -> None:
        for group in _groups(key[0], start):
            members = self.groups[group]
            del members[key]
            if not members:
                del self.groups[group]

    def closed(self, proc: int | None, event: dict) -> tuple | None:
        """The compile a record closes (a `compile` of the same family, an `unwatched_compile` of the same net, in the
        same process): the first that returned of the same variant where its start knew it, else the first."""
        owner, name = ("family", event["family"]) if event["type"] == "compile" else ("net", event.get("net"))
        try:
            members = self.groups.get((proc, owner, name, event.get("vid"))) or self.groups.get((proc, owner, name))
        except TypeError:  # (a vid no start can have)
            members = self.groups.get((proc, owner, name))
        return next(iter(members)) if members else None


def _groups(proc: int | None, start: dict) -> list[tuple]:
    """The groups a returned compile is found in: its family's and its net's, each also with its variant."""
    groups = []
    for owner in ("family", "net"):
        groups.append((proc, owner, start.get(owner)))
        if "vid" in start:
            groups.append((proc, owner, start.get(owner), start["vid"]))
    return groups
