"""Shapes that built nothing after serving start, settled over the whole run (cache kind jit_dir: DeepGEMM's disk cache
shared by the ranks of an engine): a process that had found entries in the cache that none of its own calls made ran
one of them; where a compile of the run on the same host made each, the shape's kernel is the run's (`borrowed`)."""

from __future__ import annotations

from mlacheck.analysis.tables import ProcessFamily, precompiled
from mlacheck.capture.phase import BORROWED


def settle_borrowed(
    tables: dict[tuple, ProcessFamily], netted: dict[tuple, set[str]], hosts: dict[int | None, str | None]
) -> None:
    """A variant that built nothing after serving start, in a process that had found entries no call of its own made:
    borrowed where every such entry was made by a compile of the run on the same host (another process's, a rank
    sharing the cache: its family's or its net's; one made on that process's serving path is its own finding), so its
    kernel is one of them; else left unsettled (an earlier run's entries: the run cannot pass)."""
    built: dict[str, set[tuple[str | None, str]]] = {}
    for (proc, family), entries in [*((place, table.built) for place, table in tables.items()), *netted.items()]:
        built.setdefault(family, set()).update((hosts.get(proc), entry) for entry in entries)
    for (proc, family), table in tables.items():
        ours, host = built.get(family, set()), hosts.get(proc)
        # how many of the foreign entries, in the order found, a compile of the run made before the first it did not
        covered = next((i for i, entry in enumerate(table.foreign) if (host, entry) not in ours), len(table.foreign))
        kept = []
        for variant, found, site in table.unsettled:
            if 0 < found <= covered:
                precompiled(variant, BORROWED, None, site)
            else:
                kept.append((variant, found, site))
        table.unsettled = kept
