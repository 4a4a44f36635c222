"""MLA005 numerics: a launched variant's output beyond the rule's tolerance against the reference on the same inputs
(`codes.py` has its page).

The tolerance is data (`rulefiles.schema.Numerics`: per metric an upper `max` or lower `min` bound); deciding it is
here: a metric the launch measured beyond its bound, NaN counting as beyond; one it did not measure is not judged, and
a launch that measured none of the bounded metrics could not be judged (the run cannot pass).
"""

from __future__ import annotations

import math

from mlacheck import codes
from mlacheck.analysis.findings import Finding, Incomplete, named, telling
from mlacheck.analysis.view import FamilyView, identity_of
from mlacheck.keys import key_text
from mlacheck.rulefiles.schema import Numerics


def check(view: FamilyView) -> list[Finding | Incomplete]:
    numerics, family = view.rule.numerics, view.rule.family
    if numerics is None:
        return []
    findings: list[Finding | Incomplete] = []
    seen = set()
    bounded = [*numerics.max, *numerics.min]
    for table in view.tables:
        for variant in table.variants.values():
            if variant.numerics is None:
                continue
            if all(variant.numerics.get(name) is None for name in bounded):
                unjudged = Incomplete(
                    f"{family.name}: the kernel's output of {key_text(variant.key)} was measured without a figure "
                    f"its [numerics] bounds ({', '.join(bounded)}): it could not be judged (MLA005)"
                )
                if unjudged not in findings:  # (one line however many processes measured it)
                    findings.append(unjudged)
                continue
            found = breaches(numerics, variant.numerics)
            if not found:
                continue
            finding = Finding(
                "MLA005",
                family.name,
                variant.key,
                f"{named(variant.key, family.key_fields, view.varying)}: the kernel's output against the reference on "
                "the same inputs: " + "; ".join(found),
                codes.lookup("MLA005").hint,
                summary=f"{telling(variant.key, family.key_fields, view.varying)}: " + "; ".join(found),
            )
            if identity_of(finding) not in seen:
                seen.add(identity_of(finding))
                findings.append(finding)
    return findings


def breaches(numerics: Numerics, metrics: dict[str, float | None]) -> list[str]:
    """The metrics beyond their bound, as readable phrases (NaN counts as beyond)."""
    out = []
    for name, bound in numerics.max.items():
        value = metrics.get(name)
        if value is not None and not value <= bound:
            out.append(f"{name} {value:.3g} > {bound}")
    for name, bound in numerics.min.items():
        value = metrics.get(name)
        if value is not None and (math.isnan(value) or value < bound):
            out.append(f"{name} {value:.6f} < {bound}")
    return out
