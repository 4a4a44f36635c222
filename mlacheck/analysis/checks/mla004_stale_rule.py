"""MLA004 stale-rule: the rule does not describe the installed code (`codes.py` has its page).

By distribution (a fork installs the package), by code (the key functions' fingerprint changed) or, without a
fingerprint, by version; and by key layout (the observed keys' fields are not the rule's). Any of these stops the
family's other checks: nothing of it can be judged with a rule that does not describe it, so the run is incomplete. A
version outside the checked ranges with the checked code (same fingerprint) is a note of the family. A
`[[triton.kernel]]` entry naming parameters the kernel does not have is a finding too, and leaves those unchecked.
"""

from __future__ import annotations

from mlacheck.analysis.findings import Finding, Incomplete, Note
from mlacheck.analysis.view import FamilyView
from mlacheck.rulefiles.versions import checks_version


def check(view: FamilyView) -> list[Finding | Incomplete | Note]:
    found: list[Finding | Incomplete | Note] = []
    for problem in view.stale_entry:
        found.append(
            Finding(
                "MLA004",
                view.name,
                {},
                problem,
                "re-read the kernel and update the rule file's [[triton.kernel]] entry",
            )
        )
        found.append(Incomplete(f"{view.name}: not checked: its [[triton.kernel]] entry is stale (MLA004): {problem}"))
    stale: list[Finding] = []
    for version, fingerprint, providers in view.observed_code:
        finding = _by_code(view, version, fingerprint, providers)
        if isinstance(finding, Finding):
            stale.append(finding)
        elif finding is not None:
            found.append(finding)
    stale += _by_layout(view)
    if stale:
        found += stale
        found.append(
            Incomplete(
                f"{view.name}: not checked: the rule does not describe the installed code (MLA004): {stale[0].message}",
                stop=True,
            )
        )
    return found


def _by_code(view: FamilyView, version, fingerprint, providers) -> Finding | Note | None:
    """The finding (or note) of one installed code: (version, fingerprint, providers) as a process loaded it."""
    rule, family = view.rule, view.rule.family
    if providers and not any(_same_distribution(p.rpartition(" ")[0], family.distribution) for p in providers):
        return Finding(
            "MLA004",
            family.name,
            {},
            f"{family.package} is installed by {', '.join(providers)}, not by {family.distribution}, the distribution "
            "this rule was written for: its key layout and cache may differ",
            f"write a rule file for {providers[0].rpartition(' ')[0]} (copy {rule.source} and re-read its cache and "
            "key), or install " + family.distribution,
        )
    same_code = fingerprint in family.fingerprints
    if family.fingerprints and fingerprint is not None and not same_code:
        return Finding(
            "MLA004",
            family.name,
            {},
            f"the code {family.name}'s key depends on ({', '.join(family.key_functions)}) changed in "
            f"{family.distribution} {version}: fingerprint {fingerprint}, the rule was checked against "
            f"{' or '.join(family.fingerprints)}",
            f"re-check {rule.source} against {family.distribution} {version}, then set fingerprint = "
            f'"{fingerprint}" (or add it to the list where both versions stay checked; mlacheck rules --fingerprints '
            "prints it)",
        )
    if checks_version(family, version):
        return None
    if same_code:
        return Note(
            f"{family.distribution} {version} lies outside the checked versions, but the code the key depends on is "
            "unchanged (same fingerprint)"
        )
    return Finding(
        "MLA004",
        family.name,
        {},
        f"installed {family.distribution} {version} lies outside the versions this rule was checked against "
        f"({' or '.join(family.version_ranges)})",
        f"re-check {rule.source} against {family.distribution} {version} and widen checked_versions",
    )


def _by_layout(view: FamilyView) -> list[Finding]:
    """Observed keys whose fields are not the ones the rule names, one finding per layout."""
    expected = view.key_fields
    findings, seen = [], set()
    for variant in view.merged:
        names = list(variant.key)
        if names == expected or tuple(names) in seen:
            continue
        seen.add(tuple(names))
        missing = [n for n in expected if n not in names]
        extra = [n for n in names if n not in expected]
        what = (
            f"observed key has {len(names)} fields, the rule names {len(expected)}"
            if len(names) != len(expected)
            else "observed key fields are in another order than the rule's"
        )
        details = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"not in the rule: {', '.join(extra)}" if extra else "",
            )
            if part
        )
        findings.append(
            Finding(
                "MLA004",
                view.name,
                variant.key,
                f"{what} ({', '.join(expected)})" + (f": {details}" if details else ""),
                f"re-read {view.rule.family.module} and update key_fields in {view.rule.source}",
            )
        )
    return findings


def _same_distribution(first: str, second: str) -> bool:
    return first.lower().replace("_", "-") == second.lower().replace("_", "-")
