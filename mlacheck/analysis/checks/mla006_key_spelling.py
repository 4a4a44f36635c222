"""MLA006 key-spelling: one key's field values cached under two spellings of a functools key, so compiled twice
(`codes.py` has its page). Per process, each group of such variants (`FamilyView.respelled`), named by its first two
compiles."""

from __future__ import annotations

from mlacheck import codes
from mlacheck.analysis.findings import Finding, named, telling
from mlacheck.analysis.tables import Variant
from mlacheck.analysis.view import FamilyView
from mlacheck.keys import spelling_text


def check(view: FamilyView) -> list[Finding]:
    family = view.rule.family
    findings = []
    for table in view.tables:
        for variants in view.respelled(table):
            first, second, count = variants[0], variants[1], len(variants)
            findings.append(
                Finding(
                    "MLA006",
                    family.name,
                    first.key,
                    f"{named(first.key, family.key_fields, view.varying)} was compiled {count} times, under {count} "
                    f"spellings of one functools key: {_described(first)}; {_described(second)}. The cache keys on how "
                    "the call is spelled, so the warm-up's entry is never hit by the other spelling",
                    codes.lookup("MLA006").hint,
                    site=second.serving_path_site or second.compiled_by,
                    proc=table.proc,
                    summary=f"{telling(first.key, family.key_fields, view.varying)}: compiled {count} times, "
                    f"under {count} spellings of one functools key",
                )
            )
    return findings


def _described(variant: Variant) -> str:
    site = variant.compiled_by if variant.precompiled else variant.serving_path_site
    phase = variant.compile_phase if variant.precompiled else "serving"
    return f"spelled {spelling_text(variant.spelling)} at {site} ({phase})"
