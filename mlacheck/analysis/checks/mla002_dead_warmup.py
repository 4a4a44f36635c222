"""MLA002 dead-warmup: a precompiled variant that nothing dispatched (`codes.py` has its page).

Per process where the family's lookups were counted (a dispatch reached the lookup there, or the capture counts every
lookup); where none was, once for the run, and only if no process dispatched it. A variant compiled twice under two
spellings of a functools key is MLA006's, not dead warm-up; one whose dispatches could not have been checked is
"unverified" (`analysis.completeness`), not dead.
"""

from __future__ import annotations

from mlacheck import codes
from mlacheck.analysis.findings import Finding, named, telling
from mlacheck.analysis.tables import Variant
from mlacheck.analysis.view import FamilyView
from mlacheck.keys import key_identity


def check(view: FamilyView) -> list[Finding]:
    findings = []
    dispatched_anywhere: set[tuple] | None = None  # (made when a process that judged nothing needs it)
    reported: set[tuple] = set()
    for table in view.tables:
        judged_here = table.lookups > 0 or table.every_lookup_counted is True
        respelled = {key_identity(group[0].key) for group in view.respelled(table)}
        for _, variant in view.judged(table):
            if variant.status != "dead warm-up" or (respelled and key_identity(variant.key) in respelled):
                continue
            if judged_here:
                findings.append(_finding(view, variant, table.proc))
                continue
            if dispatched_anywhere is None:
                dispatched_anywhere = {v.identity for v in view.merged if v.dispatches or v.captured}
            identity = variant.identity
            if identity not in dispatched_anywhere and identity not in reported:
                reported.add(identity)
                findings.append(_finding(view, variant, table.proc, " by any process"))
    return findings


def _finding(view: FamilyView, variant: Variant, proc: int | None, elsewhere: str = "") -> Finding:
    family = view.rule.family
    wasted = (
        f"{variant.compile_s:.1f} s of compile wasted"
        if variant.compile_s is not None
        else "its compile time is wasted"
    )
    return Finding(
        "MLA002",
        family.name,
        variant.key,
        f"{named(variant.key, family.key_fields, view.varying)} was precompiled at {variant.compiled_by} but never "
        f"dispatched{elsewhere}: {wasted}",
        codes.lookup("MLA002").hint,
        site=variant.compiled_by,
        proc=proc,
        summary=f"{telling(variant.key, family.key_fields, view.varying)}: precompiled, never dispatched{elsewhere}"
        + (f" ({variant.compile_s:.1f} s wasted)" if variant.compile_s is not None else ""),
    )
