"""MLA002 dead-warmup: a precompiled variant that nothing dispatched (`codes.py` has its page).

Per process where the family's lookups were counted (a dispatch reached the lookup there, or the capture counts every
lookup); where none was, once for the run, and only if no process dispatched it. A variant compiled twice under two
spellings of a functools key is MLA006's, not dead warm-up; one whose dispatches could not have been checked is
"unverified" (`analysis.completeness`), not dead. Where the library picks its kernels in native code (cache kind
`jit_dir`: the key is what Python passes) and a process dispatched a variant that built nothing of its own, a dead
variant's compile may have built the kernel that served it: the finding says so instead of calling the time wasted,
since dropping that warm-up would move the compile onto the serving path.
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
        judged = [variant for _, variant in view.judged(table)]
        borrowers = _borrowers(view, judged)
        for variant in judged:
            if variant.status != "dead warm-up" or (respelled and key_identity(variant.key) in respelled):
                continue
            if judged_here:
                findings.append(_finding(view, variant, table.proc, borrowers=borrowers))
                continue
            if dispatched_anywhere is None:
                dispatched_anywhere = {v.identity for v in view.merged if v.dispatches or v.captured}
            identity = variant.identity
            if identity not in dispatched_anywhere and identity not in reported:
                reported.add(identity)
                findings.append(_finding(view, variant, table.proc, " by any process", borrowers))
    return findings


def _borrowers(view: FamilyView, variants: list[Variant]) -> int:
    """How many dispatched variants built nothing of their own, where the library picks kernels natively (their
    kernel came from another key's compile or from the disk); 0 where the key is the kernel's."""
    if view.rule.family.cache_kind != "jit_dir":
        return 0
    return sum(1 for v in variants if v.dispatches and v.compile_s is None and not v.serving_path_compile)


def _finding(view: FamilyView, variant: Variant, proc: int | None, elsewhere: str = "", borrowers: int = 0) -> Finding:
    family = view.rule.family
    timed = variant.compile_s is not None
    if borrowers:
        spent = f"{variant.compile_s:.1f} s" if timed else "its compile time"
        outcome = (
            f"{spent} not known to be wasted: the library picks its kernels in native code, and {borrowers} "
            "dispatched variant(s) built no kernel of their own, so this compile may have built theirs"
        )
        hint = "Before dropping it from the warm-up, check that the dispatched shapes still find their kernel built."
        short = "; may have built a kernel other shapes use"
    else:
        outcome = f"{variant.compile_s:.1f} s of compile wasted" if timed else "its compile time is wasted"
        hint = codes.lookup("MLA002").hint
        short = f" ({variant.compile_s:.1f} s wasted)" if timed else ""
    return Finding(
        "MLA002",
        family.name,
        variant.key,
        f"{named(variant.key, family.key_fields, view.varying)} was precompiled at {variant.compiled_by} but never "
        f"dispatched{elsewhere}: {outcome}",
        hint,
        site=variant.compiled_by,
        proc=proc,
        summary=f"{telling(variant.key, family.key_fields, view.varying)}: precompiled, never dispatched{elsewhere}"
        + short,
    )
