"""Compiles that began and never ended, or ended in a process that died before their record was written, that no
variant stands for (`tables.UnfinishedCompile`): never nothing.

On the serving path, a watched family's (its key not known yet: its lookup comes after its compile) is MLA001 and a
compile net's is MLA007, each with a stall of at least the time from its start to its process's last recorded moment
(one that ended: as long as it took); any other (warm-up, capture, or a phase nothing could tell) makes the run
incomplete: what it compiled is unknown.
"""

from __future__ import annotations

from mlacheck.analysis.findings import Finding
from mlacheck.analysis.tables import ProcessFacts, UnfinishedCompile
from mlacheck.capture.phase import SERVING
from mlacheck.codes import lookup


def unfinished_compiles(facts: dict[int | None, ProcessFacts]) -> tuple[list[Finding], list[str]]:
    """(a finding per serving-path compile that never ended, an incomplete reason per other one)."""
    findings, reasons = [], []
    for fact in facts.values():
        for compiled in fact.unfinished:
            if compiled.phase == SERVING:
                findings.append(_finding(compiled, fact))
            elif compiled.ended:
                reasons.append(
                    f"pid {fact.pid}: a compile of {_what(compiled.start)} ({compiled.phase}) at "
                    f"{compiled.start.get('site')} ended after {compiled.at_least:.1f} s, and {compiled.how}: what it "
                    "compiled is unknown"
                )
            else:
                reasons.append(
                    f"pid {fact.pid}: a compile of {_what(compiled.start)} ({compiled.phase}) began at "
                    f"{compiled.start.get('site')} and never ended ({compiled.how}, at least {compiled.at_least:.1f} s "
                    "later): what it compiled is unknown"
                )
    return findings, reasons


def _what(start: dict) -> str:
    return start["family"] if "family" in start else f"{start.get('kernel')} ({start.get('net')})"


def _finding(compiled: UnfinishedCompile, fact: ProcessFacts) -> Finding:
    start = compiled.start
    if compiled.ended:
        stall, ended = f"a {compiled.at_least:.1f} s stall ({compiled.how})", "compiled"
        summary = f"{compiled.at_least:.1f} s serving-path compile, its variant not recorded"
    else:
        stall, ended = f"a stall of at least {compiled.at_least:.1f} s that never ended ({compiled.how})", "never ended"
        summary = f"≥{compiled.at_least:.1f} s serving-path compile, never finished"
    if "family" in start:
        code, family = "MLA001", start["family"]
        message = (
            f"a compile of {family} began on the serving path and {ended}: {stall}; its key was not known yet "
            "(the dispatch looks the cache up after compiling)"
        )
        hint = lookup("MLA001").hint
    else:
        code, family = "MLA007", f"unwatched:{start.get('kernel')}"
        message = (
            f"{start.get('kernel')} ({start.get('net')}) began compiling on the serving path and {ended}, and no "
            f"rule file watches it: {stall}"
        )
        hint = lookup("MLA007").hint
    return Finding(
        code,
        family,
        {},
        message,
        hint,
        site=start.get("site"),
        stack=list(start.get("stack") or []),
        proc=fact.proc,
        summary=summary,
    )
