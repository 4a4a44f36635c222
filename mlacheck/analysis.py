"""Analysis: events + rule files + the run's context in, variants and findings out. No I/O, no formatting."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from mlacheck.registry import Severity, finding_rule
from mlacheck.rules import FamilyRule

Key = dict[str, str]


@dataclass
class Variant:
    """One cache entry of a family, as warm-up and traffic saw it."""

    key: Key
    precompiled: bool = False
    compile_s: float | None = None
    dispatches: int = 0
    compiled_by: str | None = None
    serving_path_compile: bool = False
    serving_path_compile_s: float | None = None
    serving_path_site: str | None = None
    tokens: int = 0
    fp8_cost: dict[str, float] | None = None
    numerics: dict[str, float] | None = None

    @property
    def status(self) -> str:
        if self.serving_path_compile:
            return "serving-path compile"
        if self.precompiled and self.dispatches == 0:
            return "dead warm-up"
        return "ok" if self.precompiled else "not compiled"


@dataclass
class Finding:
    code: str
    family: str
    key: Key
    message: str
    hint: str
    nearest: Key | None = None
    diff: dict[str, list[str]] = field(default_factory=dict)
    site: str | None = None
    process: dict | None = None

    @property
    def name(self) -> str:
        return finding_rule(self.code).name

    @property
    def severity(self) -> Severity:
        return finding_rule(self.code).severity


@dataclass
class FamilyResult:
    name: str
    key_fields: list[str]
    version: str | None
    variants: list[Variant]


@dataclass
class Analysis:
    families: list[FamilyResult]
    findings: list[Finding]
    internal_errors: list[str]

    def failed(self, strict: bool = False) -> bool:
        """True when an error finding exists (or, with strict, any finding)."""
        return any(strict or finding.severity is Severity.ERROR for finding in self.findings)


PER_PROCESS = ("MLA001", "MLA002")
"""Each process has its own compile cache: these findings are per process, the others per variant."""


def analyse(events: list[dict], rules: list[FamilyRule], context: dict[str, str],
            processes: list[dict] | None = None) -> Analysis:
    """Turn a trace into per-family variants and findings.

    Events may carry "proc", an index into `processes` (one trace file each); each process's cache is
    analysed on its own and the variant tables are merged by key.
    """
    by_family = {rule.family.name: rule for rule in rules}
    versions: dict[str, str | None] = {}
    tables: dict[int | None, dict[str, dict[tuple, Variant]]] = {}
    merged: dict[str, dict[tuple, Variant]] = {}
    internal_errors = []
    for event in events:
        kind = event["type"]
        if kind == "internal_error":
            internal_errors.append(f"{event['where']}: {event['message']}")
        elif kind == "family":
            versions[event["family"]] = event["version"]
        elif kind in ("compile", "dispatch", "numerics") and event["family"] in by_family:
            # once into the process's own table, once into the table of all processes
            key = tuple(event["key"])
            for table in (tables.setdefault(event.get("proc"), {}).setdefault(event["family"], {}),
                          merged.setdefault(event["family"], {})):
                variant = table.get(key) or table.setdefault(key, Variant(_named(by_family[event["family"]], key)))
                _apply(variant, event)
    names = [name for name in by_family if name in versions]
    findings: list[Finding] = []
    for name in names:
        findings += _version_findings(by_family[name], versions[name])
    seen: set[tuple] = set()
    for proc, families in tables.items():
        process = processes[proc] if processes is not None and proc is not None else None
        for name, table in families.items():
            for finding in _family_findings(by_family[name], list(table.values()), context):
                identity = (finding.code, name, tuple(finding.key.items()))
                if finding.code in PER_PROCESS:
                    finding.process = process
                elif identity in seen:
                    continue
                seen.add(identity)
                findings.append(finding)
    findings.sort(key=lambda finding: (finding.severity is not Severity.ERROR, finding.code))
    families = [FamilyResult(name, by_family[name].family.key_fields, versions[name], list(merged.get(name, {}).values()))
                for name in names]
    return Analysis(families, findings, internal_errors)


def _apply(variant: Variant, event: dict) -> None:
    if event["type"] == "dispatch":
        variant.dispatches += 1
    elif event["type"] == "numerics":
        variant.tokens += event["tokens"]
        variant.fp8_cost = worst(variant.fp8_cost, event["fp8_cost"])
        variant.numerics = worst(variant.numerics, event["kernel"])
    elif event["phase"] == "dispatch":  # the longest stall, and the site of the first
        variant.serving_path_compile = True
        if event["seconds"] is not None:
            variant.serving_path_compile_s = max(variant.serving_path_compile_s or 0.0, event["seconds"])
        variant.serving_path_site = variant.serving_path_site or event["site"]
    elif not variant.precompiled:
        variant.precompiled = True
        variant.compile_s = event["seconds"]
        variant.compiled_by = event["site"]


def worst(old: dict[str, float] | None, new: dict[str, float] | None) -> dict[str, float] | None:
    """Per metric the worse of two: the larger error, the smaller cosine similarity (NaN wins)."""
    if old is None or new is None:
        return old or new
    pick = {name: (min if name == "cosine_similarity" else max) for name in new}
    return {name: new[name] if new[name] != new[name] else pick[name](old[name], new[name]) for name in new}


def _named(rule: FamilyRule, key: tuple) -> Key:
    names = rule.family.key_fields
    return {name or f"field{index}": value for index, (name, value) in enumerate(zip_longest(names, key, fillvalue=None)) if value is not None}


def _family_findings(rule: FamilyRule, variants: list[Variant], context: dict[str, str]) -> list[Finding]:
    family = rule.family
    findings = []
    well_formed = []
    for variant in variants:
        if len(variant.key) != len(family.key_fields):
            findings.append(Finding(
                "MLA004", family.name, variant.key,
                f"observed key has {len(variant.key)} fields, the rule names {len(family.key_fields)} ({', '.join(family.key_fields)})",
                f"re-read {family.module} and update key_fields in {rule.source}",
            ))
        else:
            well_formed.append(variant)
    precompiled = [variant for variant in well_formed if variant.precompiled]
    for variant in well_formed:
        if variant.serving_path_compile:
            findings.append(_serving_path_finding(family.name, variant, precompiled))
        elif variant.precompiled and variant.dispatches == 0:
            findings.append(_dead_warmup_finding(family.name, variant))
        findings += _contract_findings(rule, variant, context)
        if rule.numerics is not None and variant.numerics is not None:
            findings += _numerics_findings(rule, variant)
    return findings


def _numerics_findings(rule: FamilyRule, variant: Variant) -> list[Finding]:
    breaches = rule.numerics.breaches(variant.numerics)
    if not breaches:
        return []
    return [Finding("MLA005", rule.family.name, variant.key,
                    f"{_key_text(variant.key)}: the kernel's output against the reference on the same FP8 inputs: "
                    + "; ".join(breaches), finding_rule("MLA005").hint)]


def _version_findings(rule: FamilyRule, version: str | None) -> list[Finding]:
    family = rule.family
    try:
        inside = version is not None and Version(version) in SpecifierSet(family.checked_versions)
    except InvalidVersion:
        inside = False
    if inside:
        return []
    return [Finding(
        "MLA004", family.name, {},
        f"installed {family.distribution} {version} lies outside the versions this rule was checked against ({family.checked_versions})",
        f"re-check {rule.source} against {family.distribution} {version} and widen checked_versions",
    )]


def nearest_precompiled(key: Key, precompiled: list[Variant]) -> tuple[Key | None, dict[str, list[str]]]:
    """The precompiled key with the fewest differing fields (first in compile order on a tie) and the diff."""
    best: tuple[Key | None, dict[str, list[str]]] = (None, {})
    for candidate in precompiled:
        diff = {name: [candidate.key[name], value] for name, value in key.items() if candidate.key[name] != value}
        if best[0] is None or len(diff) < len(best[1]):
            best = (candidate.key, diff)
    return best


def _serving_path_finding(family: str, variant: Variant, precompiled: list[Variant]) -> Finding:
    nearest, diff = nearest_precompiled(variant.key, precompiled)
    stall = (f"a {variant.serving_path_compile_s:.1f} s stall" if variant.serving_path_compile_s is not None
             else "a stall (not measured: --compile skip)")
    if nearest is None:
        closest = "nothing of this family was precompiled"
        hint = f"add a warm-up that precompiles {_key_text(variant.key)}"
    else:
        fields = ", ".join(f"{name} (precompiled {old}, dispatched {new})" for name, (old, new) in diff.items())
        closest = f"the nearest precompiled variant differs in {fields}"
        hint = "make the warm-up compile " + ", ".join(f"{name}={new}" for name, (_, new) in diff.items()) + " as the dispatch does"
    return Finding("MLA001", family, variant.key,
                   f"{_key_text(variant.key)} compiled on the serving path: {stall} in the first request that dispatched it; {closest}",
                   hint, nearest, diff, site=variant.serving_path_site)


def _dead_warmup_finding(family: str, variant: Variant) -> Finding:
    wasted = f"{variant.compile_s:.1f} s of compile wasted" if variant.compile_s is not None else "its compile time is wasted"
    return Finding("MLA002", family, variant.key,
                   f"{_key_text(variant.key)} was precompiled at {variant.compiled_by} but never dispatched: {wasted}",
                   finding_rule("MLA002").hint, site=variant.compiled_by)


def _contract_findings(rule: FamilyRule, variant: Variant, context: dict[str, str]) -> list[Finding]:
    findings = []
    for contract in rule.contract:
        expected = contract.expected(context)
        actual = variant.key[contract.field]
        if expected is None or not contract.applies(context) or actual == expected:
            continue
        where = ", ".join(f"{name}={context[name]}" for name in contract.when)
        role = "precompiled" if variant.precompiled else "dispatched"
        findings.append(Finding(
            "MLA003", rule.family.name, variant.key,
            f"{role} {_key_text(variant.key)}: {contract.field} is {actual}, the contract requires {expected}"
            + (f" where {where}" if where else "") + (f": {contract.why}" if contract.why else ""),
            f"make {contract.field}={expected} where the key is computed",
            site=variant.compiled_by or variant.serving_path_site,
        ))
    return findings


def _key_text(key: Key) -> str:
    return "(" + ", ".join(f"{name}={value}" for name, value in key.items()) + ")"
