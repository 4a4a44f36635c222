"""Whether an installed version lies inside a family's checked ranges: capture asks it to choose a rule for the imported
code (`capture.layouts`), the loader to answer it ahead for an observed process (capture.json's `version_checked`),
and MLA004 to judge the rule (`analysis.checks.mla004_stale_rule`)."""

from __future__ import annotations


def checks_version(family, version: str | None) -> bool:
    """True when `version` lies inside one of the family's checked ranges (`checked_versions`); a plain form may carry
    the answer for a version already (`version_checked`)."""
    known = getattr(family, "version_checked", {}).get(version)
    if known is not None:
        return known
    from packaging.specifiers import SpecifierSet  # only a family's install asks
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version) if version is not None else None
    except InvalidVersion:
        return False
    return parsed is not None and any(parsed in SpecifierSet(text) for text in family.version_ranges)
