"""Analysis: events + rule files + the run's context in, variants, findings and what was not seen out.

No I/O, no formatting, and nothing of torch or of a kernel library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from mlacheck.analysis.borrowed import settle_borrowed
from mlacheck.analysis.checks import run_checks
from mlacheck.analysis.completeness import (
    cut_short_reasons,
    incomplete_reasons,
    mark_unverified,
    unnamed_lines,
    unseen_reasons,
)
from mlacheck.analysis.declared import declared, found_tritons
from mlacheck.analysis.digest import Digest
from mlacheck.analysis.findings import Finding, teller
from mlacheck.analysis.merging import merge
from mlacheck.analysis.tables import ProcessFacts, ProcessFamily, Variant
from mlacheck.analysis.unfinished import unfinished_reasons
from mlacheck.analysis.unwatched import UnwatchedCompile, interpreted_tritons
from mlacheck.analysis.view import FamilyView, RunView
from mlacheck.analysis.waits import waits
from mlacheck.arch import capability
from mlacheck.codes import Severity
from mlacheck.keys import value_text
from mlacheck.rulefiles import RuleSet

__all__ = ["Analysis", "FamilyResult", "Finding", "Variant", "analyse"]


@dataclass
class FamilyResult:
    """One kernel family's result; the report says of it what `REPORTED` names (report/model.py builds the JSON report's
    family from these fields)."""

    name: str
    key_fields: list[str] = field(default_factory=list)
    versions: list[str | None] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)  # every process merged
    dispatch_calls: int = 0
    died_before_lookup: int = 0
    notes: list[str] = field(default_factory=list)
    field_drivers: dict[str, list[str]] = field(default_factory=dict)
    discovered: bool = False  # found at run time (a Triton kernel), not declared by a rule file of its own

    @property
    def version(self) -> str | None:
        return self.versions[0] if self.versions else None

    REPORTED: ClassVar[tuple[str, ...]] = (  # what the report says of it, in order
        "name",
        "version",
        "versions",
        "key_fields",
        "variants",
        "dispatch_calls",
        "died_before_lookup",
        "notes",
        "field_drivers",
        "discovered",
    )


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
    events: list[dict] | Digest,
    rules: RuleSet,
    context: dict[str, str] | None = None,
    unobserved: list[str] | None = None,
    observed: int | None = None,
    lost: list[str] | None = None,
    dry: bool = False,
    interrupted: str | None = None,
    cut_short: Mapping = MappingProxyType({}),
) -> Analysis:
    """Turn the events of one or more traces (tagged "proc"), or their digest (`analysis.digest`: what a run folder's
    traces streamed into), into per-family variants and findings: the registry of checks (`analysis/checks/`) over
    each family's view, then over the run's.

    `context` is the run's own (the scenario's, or --context), over each rule file's defaults and over
    what each process showed; `observed` is how many processes wrote a trace (None: this process); `lost`
    names the records the traces lost (the variants a process's counts name without a record are added here); `dry`: the run took the dispatches past their lookup (--dry);
    `interrupted`: the step a Ctrl-C stopped the run in (the rest never ran: nothing unused is dead warm-up);
    `cut_short`: the processes whose program ended before its traffic may have, each with how it ended (what they
    did not dispatch is not dead warm-up either).
    """
    digest = events if isinstance(events, Digest) else Digest.of(events)
    tables, facts = digest.tables.finish()
    settle_borrowed(tables, digest.tables.netted, {proc: fact.host for proc, fact in facts.items()})
    unseen = frozenset((e.get("proc"), e.get("family")) for e in digest.kept["unseen"])
    views, cut_tables = _views(rules, tables, facts, context or {}, interrupted is not None, unseen, cut_short)
    labels = {view.name: teller(view.key_fields, view.varying) for view in views}
    unnamed = teller([], [])
    timeline = digest.timeline.finish(lambda name, key: labels.get(name, unnamed)(key))
    waited = waits(timeline)
    for view in views:
        view.waits = waited
    layouts_not_checked, layouts_dispatched = digest.unwatched.unwatched_layouts()
    compiles, unknown_phases = digest.unwatched.unwatched_compiles()
    judged = run_checks(views, RunView(facts, compiles, waited))
    findings = sorted(judged.findings, key=lambda finding: (SEVERITY_ORDER[finding.severity], finding.code))
    watched = [rule.family.module for rule in rules.families] + [f"{module} kernels" for module in rules.tritons]
    internal = [f"{e['where']}: {e['message']}" for e in digest.kept["internal_error"]]
    incomplete = incomplete_reasons(
        {view.name: view.tables for view in views if view.name not in judged.stopped},
        watched,
        len(facts) if observed is None else observed,
        unobserved or [],
        [*(lost or []), *unnamed_lines(tables, facts)],
        len(internal),
        dry,
        bool(digest.kept["unseen"]),
    )
    incomplete += judged.incomplete + layouts_dispatched + unknown_phases + unfinished_reasons(facts)
    incomplete += unseen_reasons(digest.kept["unseen"])
    incomplete += cut_short_reasons(cut_tables, cut_short)
    contexts = {proc: fact.context for proc, fact in facts.items()}
    if interrupted is not None:
        incomplete.insert(0, f"the run was interrupted (Ctrl-C) during {interrupted}: the rest was not run")
    return Analysis(
        [_family_result(view, judged.notes.get(view.name, []), rules.family(view.name) is None) for view in views],
        findings,
        internal,
        incomplete,
        sorted(judged.not_checked) + layouts_not_checked + interpreted_tritons(contexts),
        sorted(judged.needed),
        timeline,
        contexts,
        compiles,
        _lookups(views),
        waited,
    )


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}


def _views(
    rules: RuleSet,
    tables: dict[tuple, ProcessFamily],
    facts: dict[int | None, ProcessFacts],
    context: dict[str, str],
    interrupted: bool,
    unseen: frozenset,
    cut_short: Mapping,
) -> tuple[list[FamilyView], list[ProcessFamily]]:
    """Each recorded family that a rule declares, as the checks see it (its precompiled variants that nothing could
    have checked marked unverified first), and the tables that their program's end alone left doubted."""
    recorded: dict[str, list[str]] = {}  # family -> the key fields its first table recorded
    for (_, name), table in sorted(tables.items(), key=lambda item: str(item[0])):  # (proc, family): no repr of tables
        recorded[name] = recorded.get(name) or list(table.key_fields)
    views, cut_tables = [], []
    for name, (rule, stale_entry) in declared(rules, recorded, found_tritons(facts)).items():
        family_tables = [table for (_, of), table in tables.items() if of == name]
        if not family_tables:
            continue
        cut_tables += mark_unverified(family_tables, interrupted, unseen, cut_short)
        contexts = [derived_context({**rule.context, **facts[t.proc].context, **context}) for t in family_tables]
        views.append(FamilyView(rule, family_tables, merge(family_tables), contexts, stale_entry=stale_entry))
    return views, cut_tables


def _family_result(view: FamilyView, notes: list[str], discovered: bool) -> FamilyResult:
    rule, tables = view.rule, view.tables
    return FamilyResult(
        rule.family.name,
        list(rule.family.key_fields),
        sorted({t.version for t in tables}, key=str),
        view.merged,
        sum(t.dispatch_calls for t in tables),
        sum(t.died_before_lookup for t in tables),
        notes,
        {field_name: note.varies_with for field_name, note in rule.fields.items() if note.varies_with},
        discovered,
    )


def _lookups(views: list[FamilyView]) -> dict[int | None, int]:
    """Per process: the dispatches that reached a lookup of a watched family."""
    lookups: dict[int | None, int] = {}
    for view in views:
        for table in view.tables:
            lookups[table.proc] = lookups.get(table.proc, 0) + table.lookups
    return lookups


def derived_context(context: dict[str, str]) -> dict[str, str]:
    """The context with what follows from it: target_capability "(10, 0)" from target_arch "sm_100a"."""
    target = capability(context.get("target_arch", ""))
    if "target_capability" not in context and target is not None:
        return {**context, "target_capability": value_text(list(target))}
    return context
