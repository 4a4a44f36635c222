"""Compiles that began and never ended, or ended in a process that died before their record was written, that no
variant stands for (`tables.UnfinishedCompile`): never nothing. Nor is a record that names a compile its process did
not begin (`ProcessFacts.strays`, one reason a process): the run is incomplete.

On the serving path, a watched family's (its key not known yet: its lookup comes after its compile) is MLA001 and a
compile net's is MLA007 (`checks/`), each with a stall of at least the time from its start to its process's last
recorded moment (one that ended: as long as it took; "not measured" where its process recorded nothing later to
measure to, e.g. it was killed in the compile); any other (warm-up, capture, or a phase nothing could tell)
makes the run incomplete: what it compiled is unknown.
"""

from __future__ import annotations

from mlacheck.analysis.tables import ProcessFacts, UnfinishedCompile
from mlacheck.capture.phase import SERVING

MEASURED = 0.05  # a stall shorter than this to its process's last moment (shown "0.0 s") was not measured
NOT_MEASURED = "serving-path compile, never finished (stall not measured)"  # such a stall's summary


def unfinished_reasons(facts: dict[int | None, ProcessFacts]) -> list[str]:
    """An incomplete reason per compile that never ended (or whose record never came) off the serving path, and per
    record that names a compile its process did not begin."""
    reasons = []
    for fact in facts.values():
        if fact.first_stray is not None:
            stray, more = fact.first_stray, f" (and {fact.strays - 1} more such)" if fact.strays > 1 else ""
            reasons.append(
                f"pid {fact.pid}: a record of {stray['family']} names compile {stray['start']}, which its process did "
                f"not begin (or had closed, or began for another family){more}: the trace is not whole"
            )
        for compiled in fact.unfinished:
            if compiled.phase == SERVING:
                continue
            where = f"pid {fact.pid}: a compile of {_what(compiled.start)} ({compiled.phase}) "
            if compiled.ended:
                reasons.append(
                    where + f"at {compiled.start.get('site')} ended after {compiled.at_least:.1f} s, and "
                    f"{compiled.how}: what it compiled is unknown"
                )
            else:
                later = f", at least {compiled.at_least:.1f} s later" if compiled.at_least >= MEASURED else ""
                reasons.append(
                    where + f"began at {compiled.start.get('site')} and never ended ({compiled.how}{later}): what it "
                    "compiled is unknown"
                )
    return reasons


def stall_of(compiled: UnfinishedCompile) -> tuple[str, str, str]:
    """(the stall, how it ended, the finding's summary) of a serving-path compile that never ended."""
    if compiled.ended:
        return (
            f"a {compiled.at_least:.1f} s stall ({compiled.how})",
            "compiled",
            f"{compiled.at_least:.1f} s serving-path compile, its variant not recorded",
        )
    if compiled.at_least < MEASURED:  # its process recorded nothing later: "≥0.0 s" would say nothing
        return (
            f"a stall of unknown length, at least as long as the compile ran ({compiled.how}; its trace shows "
            "nothing after the compile began to measure it to)",
            "never ended",
            NOT_MEASURED,
        )
    return (
        f"a stall of at least {compiled.at_least:.1f} s that never ended ({compiled.how})",
        "never ended",
        f"≥{compiled.at_least:.1f} s serving-path compile, never finished",
    )


def _what(start: dict) -> str:
    return start["family"] if "family" in start else f"{start.get('kernel')} ({start.get('net')})"
