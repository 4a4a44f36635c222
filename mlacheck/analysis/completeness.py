"""What a run did not see: the reasons its verdict cannot be a pass, and the variants nothing could check.

A check that saw nothing, or could not compare, never passes: no watched family loaded, a family whose
warm-up no dispatch ever reached, dispatch calls that died before their lookup or returned without one
(where the rule says every call looks up), a dispatched variant never seen entering its cache, a launch measured
for a variant no record shows, what capture said it could not see (`unseen` events), processes that ran unobserved,
and events that were lost (capture failed, or a trace line could not be read). Precompiled variants that such
dispatches could have hit are "unverified", not dead warm-up.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from mlacheck.analysis.tables import ProcessFamily
from mlacheck.capture.phase import HOW_TO_MARK
from mlacheck.keys import key_text

NO_DEVICE = (  # what torch says when a dispatch needs the CUDA device the process does not have
    "Torch not compiled with CUDA enabled",
    "No CUDA GPUs are available",
    "Found no NVIDIA driver",
)
DRY_HINT = (
    "; the process has no CUDA device: run it with --dry (pytest: --mlacheck-dry), which takes the watched "
    "dispatches past their lookup without one"
)


def mark_unverified(
    tables: list[ProcessFamily],
    interrupted: bool = False,
    unseen: frozenset = frozenset(),
    cut_short: Collection = frozenset(),
) -> list[ProcessFamily]:
    """Precompiled, never-dispatched variants whose family's dispatches died before the lookup, or never came, or
    whose lookups the capture said it could not count (where it said it counts every lookup, none is no use), or
    went past capture in that process (`unseen`: (proc, family) pairs), or whose traffic never ran to its end (the
    run was interrupted, or the process's program was cut short: `cut_short`, its processes). Each of these is a reason
    of its own but the last: the tables that their program's end alone doubts are returned (`cut_short_reasons`)."""
    looked_up = any(table.lookups for table in tables)
    alone = []
    for table in tables:
        counted = table.every_lookup_counted
        doubted = (
            interrupted
            or (table.proc, table.family) in unseen
            or table.died_before_lookup
            or table.returned_without_lookup
            or counted is False
            or not (looked_up or counted)
        )
        cut = table.proc in cut_short
        if cut and not doubted:
            alone.append(table)
        if doubted or cut:
            for variant in table.variants.values():
                if variant.precompiled and not variant.dispatches and not variant.captured:
                    variant.unverified = True
    return alone


def cut_short_reasons(tables: list[ProcessFamily], cut_short: Mapping) -> list[str]:
    """One line for each way a program ended before its traffic may have (`cut_short`: a process -> how its program
    ended) that alone left precompiled variants unverified (`tables`: those `mark_unverified` returned)."""
    unverified: dict[str, int] = {}
    for table in tables:
        how = cut_short[table.proc]
        unverified[how] = unverified.get(how, 0) + sum(v.unverified for v in table.variants.values())
    return [
        f"{how} before its traffic may have ended: {count} precompiled variant(s) it never dispatched are unverified "
        "(dead warm-up, or traffic that never came)"
        for how, count in unverified.items()
        if count
    ]


def incomplete_reasons(
    family_tables: dict[str, list[ProcessFamily]],
    watched: list[str],
    observed: int,
    unobserved: list[str],
    lost: list[str],
    internal_errors: int,
    dry: bool = False,
    unseen: bool = False,
) -> list[str]:
    """One line per reason the run cannot pass (a dispatch that died for want of a CUDA device, in a run without
    --dry, says to add it). `unseen`: capture said what it could not see (its lines say why, a family it could not
    watch among them: no family loaded is then no news)."""
    reasons = [f"a Python process ran unobserved: {line}" for line in unobserved]
    reasons += [f"events were lost: {line}" for line in lost]
    if internal_errors:
        reasons.append(
            f"capture failed {internal_errors} time(s) (the internal errors below): what it would have "
            "recorded is missing"
        )
    if observed == 0:
        return reasons + ["no Python process was observed (the program started none, or none could import mlacheck)"]
    if not family_tables and not unseen:
        return reasons + [
            f"no observed process loaded a watched kernel family ({', '.join(dict.fromkeys(watched))}): nothing was checked"
        ]
    return reasons + _family_reasons(family_tables, dry)


def _family_reasons(family_tables: dict[str, list[ProcessFamily]], dry: bool) -> list[str]:
    """What the loaded families' tables say was not compared: no lookup anywhere, or per family a precompiled family
    never looked up, dispatches that died before the lookup or returned without one, inserts capture did not see,
    measurements no record matches."""
    reasons = []
    used = {name: tables for name, tables in family_tables.items() if any(t.used for t in tables)}
    counted = {name for name, tables in used.items() if all(t.every_lookup_counted is True for t in tables)}
    died = {name: _died(tables) for name, tables in sorted(used.items())}
    looked_up = any(t.lookups for tables in used.values() for t in tables)
    uncounted = sorted(name for name in used or family_tables if name not in counted)
    if not looked_up and not any(died.values()) and uncounted:
        reasons.append(
            f"{', '.join(uncounted)}: loaded, but no dispatch call reached the cache lookup: the warm-up was never "
            "compared with a dispatch"
        )
    for name, tables in sorted(used.items()):
        if looked_up and name not in counted:
            reasons += _not_looked_up(name, tables)
        reasons += [_died_line(name, *death, dry) for death in died[name]]
        reasons += _unlooked(name, tables) + _never_entered(name, tables) + _unsettled(name, tables)
        reasons += _unjudged(name, tables)
    return reasons


def _not_looked_up(name: str, tables: list[ProcessFamily]) -> list[str]:
    """A family that precompiled while no dispatch of it reached its cache lookup (other families' did)."""
    precompiled = sum(v.precompiled for t in tables for v in t.variants.values())
    if not precompiled or any(t.lookups for t in tables):
        return []
    return [f"{name}: {precompiled} variant(s) precompiled, but no dispatch reached its cache lookup"]


def _died_line(name: str, function: str, count: int, calls: int, error: str, dry: bool) -> str:
    return (
        f"{name}: {count} of {calls} {function} call(s) raised before the cache lookup ({error}), so they checked "
        "nothing" + (DRY_HINT if not dry and any(text in error for text in NO_DEVICE) else "")
    )


def unnamed_lines(tables: dict[tuple, ProcessFamily], facts: dict) -> list[str]:
    """Per process and family, the variants its counts name that no compile or dispatch record shows: their records
    were lost (one line each, as `incomplete_reasons`' `lost` takes them; every family's, declared or not)."""
    lines = []
    for (proc, name), table in tables.items():
        if table.unnamed:
            vids = sorted(table.unnamed)
            fact = facts.get(proc)
            named = f"pid {fact.pid}" if fact is not None and fact.pid is not None else "this process"
            lines.append(
                f"{named}: {name} dispatches of {len(vids)} variant(s) counted (vid "
                f"{', '.join(map(str, vids[:5]))}{', ...' if len(vids) > 5 else ''}) whose compile and dispatch "
                "records are missing (whether they compiled on the serving path is unknown)"
            )
    return lines


def _unjudged(name: str, tables: list[ProcessFamily]) -> list[str]:
    """Launches measured against the reference (numerics) of variants no record of their process shows: their records
    were lost, or the measurement's key is not the capture's, so MLA005 could not judge them."""
    keys = {key_text(key): None for t in tables for key in t.unjudged}
    if not keys:
        return []
    return [
        f"{name}: the kernel's output was measured for {len(keys)} variant(s) that no compile or dispatch record of "
        f"its process shows: {', '.join(keys)}; the measurement could not be judged (MLA005)"
    ]


def unseen_reasons(events: list[dict]) -> list[str]:
    """One line per thing capture said it could not see (an `unseen` event), each once."""
    return list(dict.fromkeys(f"{e.get('family')}: {e.get('what')}" for e in events if e["type"] == "unseen"))


def _never_entered(name: str, tables: list[ProcessFamily]) -> list[str]:
    """Dispatched variants that no event shows entering the cache (not compiled, not there before): an insert capture
    did not see, so whether it compiled on the serving path is unknown."""
    keys = {}
    for t in tables:
        unsettled = {id(variant) for variant, _, _ in t.unsettled}  # (said by `_unsettled`)
        keys |= {
            key_text(v.key): None for v in t.variants.values() if v.status == "not compiled" and id(v) not in unsettled
        }
    if not keys:
        return []
    return [
        f"{name}: {len(keys)} dispatched variant(s) never seen entering the cache: {', '.join(keys)} (an insert "
        "capture did not see, such as one made from C or through a reference taken before mlacheck): whether "
        "it compiled on the serving path is unknown"
    ]


def _unsettled(name: str, tables: list[ProcessFamily]) -> list[str]:
    """Variants that entered the cache with no compile of their own seen (loaded from a cache that held entries from
    outside the process, or built for another key), where no serving-start mark came after them: ready before serving
    start, but after it, or where the process never marked it, whether a warm-up covered them is unknown."""
    after = {key_text(v.key): None for t in tables if t.marked for v, _, _ in t.unsettled}
    never = {key_text(v.key): None for t in tables if not t.marked for v, _, _ in t.unsettled}
    lines = []
    if after:
        lines.append(
            f"{name}: {len(after)} variant(s) first dispatched on the serving path built nothing of their own while "
            f"the cache held entries that no compile of this run made (an earlier run's, or an unobserved process's): "
            f"{', '.join(after)}; whether a warm-up covered them, or they were loaded from there and would compile on "
            "the serving path with an empty cache, is unknown: run it with an empty cache"
        )
    if never:
        lines.append(
            f"{name}: {len(never)} variant(s) built nothing of their own in a process that never marked serving "
            f"start: {', '.join(never)}; whether that was before serving is unknown: {HOW_TO_MARK}"
        )
    return lines


def _unlooked(name: str, tables: list[ProcessFamily]) -> list[str]:
    out = []
    for function in sorted(
        {event["function"] for t in tables for event in t.no_lookup}
        | {n.partition("!")[0] for t in tables for n in t.calls if n.endswith("!nolookup")}
    ):
        count = sum(t.calls.get(f"{function}!nolookup", 0) for t in tables)
        count = count or sum(1 for t in tables for e in t.no_lookup if e["function"] == function)
        calls = max(sum(t.calls.get(function, 0) for t in tables), count)
        site = next((e.get("site") for t in tables for e in t.no_lookup if e["function"] == function), None)
        out.append(
            f"{name}: {count} of {calls} {function} call(s) returned without looking the cache up"
            + (f" (first at {site})" if site else "")
            + ": they ran variants through a path the rule does not "
            "watch, which nothing checked"
        )
    return out


def _died(tables: list[ProcessFamily]) -> list[tuple[str, int, int, str]]:
    out = []
    functions = sorted(
        {name.partition("!")[0] for t in tables for name in t.calls} | {e["function"] for t in tables for e in t.errors}
    )
    for function in functions:
        died = sum(t.calls.get(f"{function}!before", 0) for t in tables)
        died = died or sum(1 for t in tables for e in t.errors if e["function"] == function and not e["reached_lookup"])
        if not died:
            continue
        calls = max(sum(t.calls.get(function, 0) for t in tables), died)
        first = next(
            (e for t in tables for e in t.errors if e["function"] == function and not e["reached_lookup"]), None
        )
        error = "the error line was lost" if first is None else f"{first['error']}: {first['message']}".rstrip(": ")
        out.append((function, died, calls, error))
    return out
