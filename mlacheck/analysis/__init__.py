"""Analysis: events + rule files + the run's context in, variants, findings and what was not seen out.

No I/O, no formatting, and nothing of torch or of a kernel library.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlacheck.analysis.completeness import incomplete_reasons, mark_unverified, unseen_reasons
from mlacheck.analysis.findings import (
    Finding,
    contract_findings,
    dead_warmup_finding,
    key_layout_findings,
    numerics_findings,
    serving_path_finding,
    spelling_findings,
    stale_rule_findings,
    telling,
    unbounded_findings,
)
from mlacheck.analysis.tables import ProcessFamily, Variant, build_tables, merge
from mlacheck.analysis.timeline import timelines
from mlacheck.analysis.unfinished import unfinished_compiles
from mlacheck.analysis.unwatched import (
    UnwatchedCompile,
    interpreted_tritons,
    unwatched_compiles,
    unwatched_layouts,
)
from mlacheck.analysis.waits import waits
from mlacheck.arch import capability
from mlacheck.codes import Severity
from mlacheck.keys import key_identity, value_text, varying_fields
from mlacheck.rulefiles import RuleFile, RuleSet

__all__ = ["Analysis", "FamilyResult", "Finding", "Variant", "analyse"]


@dataclass
class FamilyResult:
    name: str
    key_fields: list[str]
    versions: list[str | None]
    variants: list[Variant]  # every process merged
    dispatch_calls: int = 0
    died_before_lookup: int = 0
    notes: list[str] = field(default_factory=list)
    field_drivers: dict[str, list[str]] = field(default_factory=dict)
    discovered: bool = False  # found at run time (a Triton kernel), not declared by a rule file of its own

    @property
    def version(self) -> str | None:
        return self.versions[0] if self.versions else None


@dataclass
class Analysis:
    families: list[FamilyResult]
    findings: list[Finding]
    internal_errors: list[str]
    incomplete: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # contracts that could not be evaluated, and why
    context_needed: list[str] = field(default_factory=list)  # the run-context names those contracts need
    timeline: list[dict] = field(default_factory=list)  # each process's timed compiles (`timeline.py`)
    contexts: dict[int | None, dict[str, str]] = field(default_factory=dict)
    unwatched_compiles: list[UnwatchedCompile] = field(default_factory=list)
    lookups: dict[int | None, int] = field(default_factory=dict)  # per process: dispatches that reached a lookup
    waits: list[dict] = field(default_factory=list)  # slow engine steps and the other processes' compiles they overlap

    def failed(self, strict: bool = False) -> bool:
        """True when an error finding exists (or, with strict, a warning too; a note never fails)."""
        failing = (Severity.ERROR, Severity.WARNING) if strict else (Severity.ERROR,)
        return any(finding.severity in failing for finding in self.findings)


def analyse(
    events: list[dict],
    rules: RuleSet,
    context: dict[str, str] | None = None,
    unobserved: list[str] | None = None,
    observed: int | None = None,
    lost: list[str] | None = None,
    dry: bool = False,
    interrupted: str | None = None,
) -> Analysis:
    """Turn the events of one or more traces (tagged "proc") into per-family variants and findings.

    `context` is the run's own (the scenario's, or --context), over each rule file's defaults and over
    what each process showed; `observed` is how many processes wrote a trace (None: this process); `lost`
    names the trace lines that could not be read; `dry`: the run took the dispatches past their lookup (--dry);
    `interrupted`: the step a Ctrl-C stopped the run in (the rest never ran: nothing unused is dead warm-up).
    """
    tables, facts = build_tables(events)
    declared, stale_tables = _declared(rules, tables)
    by_family: dict[str, list[ProcessFamily]] = {}
    for (_, name), table in tables.items():
        if name in declared:
            by_family.setdefault(name, []).append(table)
    findings: list[Finding] = [
        Finding("MLA004", name, {}, problem, "re-read the kernel and update the rule file's [[triton.kernel]] entry")
        for name, problems in stale_tables.items()
        for problem in problems
    ]
    families: list[FamilyResult] = []
    stale_families: list[str] = []
    not_checked: set[str] = set()
    needed: set[str] = set()
    contexts = {proc: fact.context for proc, fact in facts.items()}
    unseen = frozenset((e.get("proc"), e.get("family")) for e in events if e["type"] == "unseen")
    for name, rule in declared.items():
        family_tables = by_family.get(name)
        if not family_tables:
            continue
        mark_unverified(family_tables, interrupted is not None, unseen)
        observed_code = sorted(
            {
                (t.version, t.fingerprint, t.providers)
                for t in family_tables
                if t.version or t.fingerprint or t.providers
            },
            key=str,
        ) or [(None, None, ())]
        stale, notes = stale_rule_findings(rule, observed_code)
        merged = merge(family_tables)
        stale += key_layout_findings(rule, merged)
        findings += stale
        families.append(_family_result(rule, family_tables, merged, notes, rules.family(name) is None))
        if stale:  # the rule does not describe the installed code: nothing of the family can be judged with it
            stale_families.append(
                f"{name}: not checked: the rule does not describe the installed code (MLA004): {stale[0].message}"
            )
            continue
        varying = varying_fields([variant.key for variant in merged])
        findings += _per_process(rule, family_tables, merged, varying)
        seen: set[tuple] = set()
        for table in family_tables:
            run_context = derived_context({**rule.context, **facts[table.proc].context, **(context or {})})
            for contract in rule.contract:
                missing = [need for need in contract.needs() if need not in run_context]
                if missing and table.variants:
                    needed.update(missing)
                    not_checked.add(
                        f"{name}: the {contract.field} contract needs {', '.join(missing)} "
                        "(give --context " + " ".join(f"{m}=..." for m in missing) + ")"
                    )
            for variant in table.variants.values():
                for finding in contract_findings(rule, variant, run_context, varying) + numerics_findings(
                    rule, variant, varying
                ):
                    identity = (finding.code, key_identity(finding.key), finding.message)
                    if identity not in seen:
                        seen.add(identity)
                        findings.append(finding)
    layouts_not_checked, layouts_dispatched = unwatched_layouts(events)
    compiles, unwatched_findings, unknown_phases = unwatched_compiles(events)
    unfinished, never_ended = unfinished_compiles(facts)
    findings += unwatched_findings + unfinished
    findings.sort(key=lambda finding: (SEVERITY_ORDER[finding.severity], finding.code))
    watched = [rule.family.module for rule in rules.families] + [f"{module} kernels" for module in rules.tritons]
    internal = [f"{e['where']}: {e['message']}" for e in events if e["type"] == "internal_error"]
    incomplete = incomplete_reasons(
        {
            name: tables
            for name, tables in by_family.items()
            if not any(line.startswith(f"{name}: ") for line in stale_families)
        },
        watched,
        len(facts) if observed is None else observed,
        unobserved or [],
        lost or [],
        len(internal),
        dry,
    )
    incomplete += stale_families + layouts_dispatched + unknown_phases + never_ended + unseen_reasons(events)
    incomplete += [
        f"{name}: not checked: its [[triton.kernel]] entry is stale (MLA004): {problem}"
        for name, problems in stale_tables.items()
        for problem in problems
    ]
    if interrupted is not None:
        incomplete.insert(0, f"the run was interrupted (Ctrl-C) during {interrupted}: the rest was not run")
    lookups: dict[int | None, int] = {}
    for tables_of_family in by_family.values():
        for table in tables_of_family:
            lookups[table.proc] = lookups.get(table.proc, 0) + table.lookups
    fields = {family.name: (family.key_fields, varying_fields([v.key for v in family.variants])) for family in families}
    label = lambda name, key: telling(key, *fields.get(name, ([], [])))
    timeline = timelines(events, label)
    waited = waits(timeline)
    _held(findings, waited)
    return Analysis(
        families,
        findings,
        internal,
        incomplete,
        sorted(not_checked) + layouts_not_checked + interpreted_tritons(contexts),
        sorted(needed),
        timeline,
        contexts,
        compiles,
        lookups,
        waited,
    )


def _held(findings: list[Finding], waited: list[dict]) -> None:
    """An MLA001 says which other processes waited in a slow step while it compiled (`waits`)."""
    for finding in findings:
        if finding.code != "MLA001" or finding.proc is None:
            continue
        held = [
            (f"pid {wait['pid']}" if wait["rank"] is None else f"rank {wait['rank']} (pid {wait['pid']})")
            + f" waited in a {wait['seconds']:.1f} s step (usually {wait['usual']:.2f} s)"
            for wait in waited
            if any(c["proc"] == finding.proc and c["family"] == finding.family for c in wait["during"])
        ]
        if held:
            finding.message += f"; meanwhile {', '.join(held)}"


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}


def _family_result(
    rule: RuleFile, tables: list[ProcessFamily], merged: list[Variant], notes: list[str], discovered: bool
) -> FamilyResult:
    return FamilyResult(
        rule.family.name,
        list(rule.family.key_fields),
        sorted({t.version for t in tables}, key=str),
        merged,
        sum(t.dispatch_calls for t in tables),
        sum(t.died_before_lookup for t in tables),
        notes,
        {field_name: note.varies_with for field_name, note in rule.fields.items() if note.varies_with},
        discovered,
    )


def _declared(rules: RuleSet, tables: dict) -> tuple[dict[str, RuleFile], dict[str, list[str]]]:
    """The rule of each family, by name: the declared ones in rule-file order, then those a table of the rules
    watches (Triton kernels, found at run time), by name; and what of such a table does not fit its family."""
    declared = {rule.family.name: rule for rule in rules.families}
    stale: dict[str, list[str]] = {}
    for name in sorted({name for _, name in tables} - set(declared)):
        key_fields = next(
            (t.key_fields for (_, n), t in sorted(tables.items(), key=str) if n == name and t.key_fields), []
        )
        rule, problems = rules.discovered(name, key_fields)
        if rule is not None:
            declared[name] = rule
            if problems:
                stale[name] = problems
    return declared, stale


def derived_context(context: dict[str, str]) -> dict[str, str]:
    """The context with what follows from it: target_capability "(10, 0)" from target_arch "sm_100a"."""
    target = capability(context.get("target_arch", ""))
    if "target_capability" not in context and target is not None:
        return {**context, "target_capability": value_text(list(target))}
    return context


def _per_process(rule, tables: list[ProcessFamily], merged: list[Variant], varying: list[str]) -> list[Finding]:
    """MLA001, MLA006 and MLA008 per process; MLA002 per process that dispatched the family (or counts every lookup),
    else for the run as a whole. Serving-path compiles an MLA008 stands for get no MLA001 of their own.

    A variant compiled twice under two spellings (MLA006) is not also reported as dead warm-up."""
    findings = []
    dispatched_anywhere = {v.identity for v in merged if v.dispatches or v.captured}
    reported: set[tuple] = set()
    for table in tables:
        judged_here = table.lookups > 0 or table.every_lookup_counted is True
        spelling = spelling_findings(rule, table, varying)
        respelled = {key_identity(finding.key) for finding in spelling}
        unbounded, folded = unbounded_findings(rule, table)
        findings += unbounded
        for vid, variant in table.variants.items():
            if len(variant.key) != len(rule.family.key_fields):
                continue
            if variant.serving_path_compile:
                if vid not in folded:
                    findings.append(serving_path_finding(rule, table, variant, varying))
            elif variant.status == "dead warm-up" and key_identity(variant.key) not in respelled:
                if judged_here:
                    findings.append(dead_warmup_finding(rule, variant, table.proc, varying))
                elif variant.identity not in dispatched_anywhere and variant.identity not in reported:
                    reported.add(variant.identity)
                    findings.append(dead_warmup_finding(rule, variant, table.proc, varying, " by any process"))
        findings += spelling
    return findings
