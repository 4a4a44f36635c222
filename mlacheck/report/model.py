"""The report model: everything a report says, computed once; every output format renders its JSON form.

`build_report` takes the analysis and the run's facts and decides the verdict, the counts, the baseline
state of each finding (by fingerprint) and the exit code, in one place. A report holds its findings and each family's
variants in their JSON form already (dicts: 10^5 of them are made without a model each); `dumped` is the JSON report,
and `read_report` reads a saved one back (of any format version: fields a later version dropped are ignored), each
finding and variant checked against `FindingReport` and `VariantReport`.

Verdicts: `fail` (a new error finding, or with --strict any new finding), else `incomplete` (the run did
not see enough to compare: see `incomplete`; --allow-incomplete keeps the verdict and only changes the
exit code), else `pass`. Exit codes: 1 fail; 2 incomplete (unless --allow-incomplete); else the observed
program's own status (its exit code, 128 + N for signal N); else 0. A scenario stopped by Ctrl-C exits 130 with the
report of what it ran.
"""

from __future__ import annotations

import dataclasses
import signal
import typing
from collections.abc import Iterator
from dataclasses import asdict
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from mlacheck.analysis import Analysis, FamilyResult, Finding, Variant
from mlacheck.report.baseline import report_fingerprints
from mlacheck.report.policy import ReportPolicy

FORMAT_VERSION = 4
"""The JSON report's format. 1: mlacheck 0.1. 2: typed keys, processes, baseline, exit_reason. 3: no field is named
after a kernel library (tokenspeed_mla_version is gone: `versions` has every family's); a variant's scenario
measurements (tokens, FP8 cost) moved to `scenario`; `scenario.header` holds the scenario's own header rows;
`unwatched_compiles` lists what the compile nets saw; a finding's severity may be "note" (MLA004: never fails).
Within 3 (fields added, none changed): a finding's `summary` and `ignored`, `counts.ignored`, `select`,
`ignore`, `context_needed`, `interrupted`, `timeline` (each process's timed compiles), `scenario.phases`; a header
row may hold a third item, its detail.
4: `ranks`, the per-rank view of a program-mode run (one row per run folder, host and rank); a process's `run` (its
run folder); no other field changed."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


def _reported(name: str, source: type, sample: object | None = None, **own: tuple) -> type[BaseModel]:
    """A report model of the fields and properties an analysis dataclass reports (its `REPORTED`, in order), with their
    types and defaults (a property's: what `sample`, an otherwise empty one, says; without one it is required); `own`:
    fields of the report's own, or the report's own type of one (the variants of a family are `VariantReport`s).
    The analysis declares each field once; the report model is made from it."""
    hints = typing.get_type_hints(source)
    members = {member.name: member for member in dataclasses.fields(source)}
    definitions = {}
    for field_name in source.REPORTED:
        member = members.get(field_name)
        if member is None:  # a property
            annotation = typing.get_type_hints(getattr(source, field_name).fget)["return"]
            definitions[field_name] = (annotation, ... if sample is None else getattr(sample, field_name))
        elif member.default_factory is not dataclasses.MISSING:
            definitions[field_name] = (hints[field_name], Field(default_factory=member.default_factory))
        else:
            definitions[field_name] = (
                hints[field_name],
                ... if member.default is dataclasses.MISSING else member.default,
            )
    return create_model(name, __base__=_Model, __doc__=source.__doc__, **{**definitions, **own})


VariantReport = _reported("VariantReport", Variant, Variant({}))
FamilyReport = _reported(
    "FamilyReport",
    FamilyResult,
    FamilyResult(""),
    variants=(list[dict], []),  # each a VariantReport's JSON form
    mode=(str | None, None),  # in a run made in parts (mode "mixed"): this family's part's mode and target arch
    target_arch=(str | None, None),
)
FindingReport = _reported(
    "FindingReport",
    Finding,
    severity=(Literal["error", "warning", "note"], ...),  # the code's severity, as text
    process=(dict | None, None),  # pid, host and rank of the process it came from
    fingerprint=(str, ""),
    baselined=(bool, False),
    ignored=(bool, False),  # its code is ignored (--ignore, or left out by --select): listed, never failing
)


class RankSummary(_Model):
    """One run folder, host and rank of a program-mode run: its processes, and whether it compiled on the serving
    path, ran unobserved or never dispatched (`status`, the worst of them)."""

    run: str | None = None
    host: str | None = None
    rank: int | None = None
    pids: list[int | None] = []
    unobserved_pids: list[int | None] = []
    dispatches: int = 0
    serving_path_compiles: int = 0
    findings: dict[str, int] = {}
    slowest_step_s: float | None = None  # its slowest engine step far over its usual (--step, [[step]])
    waited_for_pids: list[int | None] = []  # the processes whose serving-path compile that step overlapped
    status: Literal["serving-path compile", "cut short", "unobserved", "never dispatched", "ok"] = "ok"


class Counts(_Model):
    errors: int = 0
    warnings: int = 0
    baselined: int = 0
    ignored: int = 0


class Report(_Model):
    format_version: int = FORMAT_VERSION
    verdict: Literal["pass", "fail", "incomplete"]
    exit_code: int = 0
    exit_reason: str = ""
    mode: str
    target_arch: str | None = None
    compile_policy: str = "real"
    mlacheck_version: str = ""
    versions: dict[str, str | None] = {}
    device: str | None = None
    strict: bool = False
    allow_incomplete: bool = False
    select: list[str] | None = None
    ignore: list[str] = []
    scenario: dict | None = None
    interrupted: str | None = None  # the embedded scenario's phase a Ctrl-C stopped it in
    program: dict | None = None
    processes: list[dict] = []
    ranks: list[RankSummary] = []
    families: list[FamilyReport] = []
    findings: list[dict] = []  # each a FindingReport's JSON form
    counts: Counts = Counts()
    baseline: dict | None = None
    incomplete: list[str] = []
    not_checked: list[str] = []
    unwatched_compiles: list[
        dict
    ] = []  # compiles no watched family accounted for: net, kernel, key, seconds, phase, site
    context_needed: list[str] = []
    timeline: list[dict] = []
    internal_errors: list[str] = []
    bad_lines: list[str] = []


def reported(item: object) -> dict:
    """What the report says of an analysis dataclass (a variant, a family, a finding): its `REPORTED` fields and
    properties."""
    return {name: getattr(item, name) for name in item.REPORTED}


def build_report(
    analysis: Analysis, facts: dict, processes: list[dict] | None = None, policy: ReportPolicy = ReportPolicy()
) -> Report:
    """The report of one run (or several merged); `decide` gives it its verdict. The analysis is taken: its findings
    and each family's variants are let go of as the report's are made (10^5 of each are never held twice)."""
    processes = processes or []
    findings = [_finding_form(finding, processes) for finding in _each_kept(analysis.findings)]
    families = []
    for family in analysis.families:
        variants, family.variants = family.variants, []
        made = FamilyReport.model_validate(reported(family))
        made.variants = [reported(variant) for variant in _each_kept(variants)]
        families.append(made)
    report = Report(
        verdict="pass",
        versions={f.name: f.version for f in analysis.families},
        incomplete=list(analysis.incomplete),
        not_checked=analysis.not_checked,
        context_needed=analysis.context_needed,
        timeline=analysis.timeline,
        internal_errors=analysis.internal_errors,
        processes=processes,
        unwatched_compiles=[_unwatched(compiled) for compiled in analysis.unwatched_compiles],
        **facts,
    )
    report.families, report.findings = families, findings  # (as they are: a model's check would copy each dict)
    return decide(report, policy)


def _finding_form(finding: Finding, processes: list[dict]) -> dict:
    """A finding's JSON form, as `FindingReport` dumps it: what the analysis reports of it, its severity as text, the
    process it came from (pid, host, rank); `decide` sets its fingerprint, `baselined` and `ignored`."""
    proc = finding.proc
    process = processes[proc] if proc is not None and proc < len(processes) else None
    return {
        **reported(finding),
        "severity": finding.severity.value,
        "process": {"pid": process.get("pid"), "host": process.get("host"), "rank": process.get("rank")}
        if process
        else None,
        "fingerprint": "",
        "baselined": False,
        "ignored": False,
    }


def _unwatched(compiled: object) -> dict:
    """An unwatched compile as the report lists it: its stack left out (its finding has it), `raised` only where it
    raised."""
    listed = {**asdict(compiled), "stack": None}
    if listed.get("raised") is None:
        listed.pop("raised", None)
    return listed


def dumped(report: Report) -> dict:
    """`report.model_dump(mode="json")` with the findings and variants it holds in their JSON form already: each list
    taken as it is (never copied; the report is left without them)."""
    findings, families, report.findings, report.families = report.findings, report.families, [], []
    data = report.model_dump(mode="json")
    data["findings"] = findings
    data["families"] = []
    for family in _each_kept(families):
        variants, family.variants = family.variants, []
        dumped_family = family.model_dump(mode="json")
        dumped_family["variants"] = variants
        data["families"].append(dumped_family)
    return data  # (each list in its own place: a key given a new value keeps its place)


def read_report(data: dict) -> Report:
    """A saved JSON report read back: each finding and variant checked against `FindingReport` and `VariantReport`
    (of any format version: a field it lacks takes its default, one a later version dropped is left out), in its
    JSON form; pydantic's `ValidationError` where one does not fit."""
    data = {**data, "findings": _checked(FindingReport, data.get("findings", []))}
    if isinstance(data.get("families"), list):
        data["families"] = [
            {**family, "variants": _checked(VariantReport, family.get("variants", []))}
            if isinstance(family, dict)
            else family
            for family in data["families"]
        ]
    return Report.model_validate(data)


def _checked(model: type[BaseModel], items: object) -> object:
    """The JSON form of each item as `model` reads and dumps it (items that are no list: as given, for the report's
    own check to refuse)."""
    if not isinstance(items, list):
        return items
    adapter = _adapter(model)
    return adapter.dump_python(adapter.validate_python(items), mode="json")


@cache
def _adapter(model: type[BaseModel]) -> TypeAdapter:
    return TypeAdapter(list[model])


def _each_kept(items: list) -> Iterator:
    """The items of a list, in order, each taken out of it as it comes (the list is left empty)."""
    items.reverse()
    while items:
        yield items.pop()


JOINED = ("findings", "incomplete", "not_checked", "timeline", "unwatched_compiles", "internal_errors")
"""The report's lists that a run made in parts holds every part's items of, in part order."""


def combined(parts: list[Report], facts: dict, policy: ReportPolicy = ReportPolicy()) -> Report:
    """One report of a run made in parts, each in a mode of its own: the first part's facts under `facts`, every
    part's families (each marked with its part's mode and target arch), findings and what was not seen; `decide`
    gives it its verdict."""
    joined = {name: [item for part in parts for item in getattr(part, name)] for name in JOINED}
    families = [
        family.model_copy(update={"mode": part.mode, "target_arch": part.target_arch})
        for part in parts
        for family in part.families
    ]
    update = {
        "families": families,
        "versions": {name: version for part in parts for name, version in part.versions.items()},
        "context_needed": sorted({name for part in parts for name in part.context_needed}),
        "interrupted": next((part.interrupted for part in parts if part.interrupted), None),
    }
    return decide(parts[0].model_copy(update={**joined, **update, **facts}), policy)


def decide(report: Report, policy: ReportPolicy = ReportPolicy()) -> Report:
    """The one place a verdict is made: fingerprints, baseline state and ignored codes, counts, verdict, exit code and
    its reason. An ignored finding (--ignore, --select) is listed and counted as ignored, never as an error, a
    warning or a baselined one."""
    strict, allow_incomplete, known, baseline_source = (
        policy.strict,
        policy.allow_incomplete,
        policy.known,
        policy.baseline,
    )
    for finding, print_ in zip(report.findings, report_fingerprints(report.findings)):
        finding["fingerprint"] = print_
        finding["ignored"] = ignored = policy.ignores(finding["code"])
        finding["baselined"] = known is not None and print_ in known and not ignored
    new = [f for f in report.findings if not f["baselined"] and not f["ignored"]]
    counts = Counts(
        errors=sum(f["severity"] == "error" for f in new),
        warnings=sum(f["severity"] == "warning" for f in new),
        baselined=sum(f["baselined"] for f in report.findings),
        ignored=sum(f["ignored"] for f in report.findings),
    )
    failing = counts.errors + (counts.warnings if strict else 0)
    verdict = "fail" if failing else "incomplete" if report.incomplete else "pass"
    exit_code, exit_reason = _exit(verdict, counts, report.incomplete, report.program, allow_incomplete)
    if report.interrupted:
        exit_code, exit_reason = 130, f"exit 130: interrupted (Ctrl-C) during {report.interrupted}"
    baseline = (
        {"source": baseline_source, "baselined": counts.baselined, "new": len(new)} if known is not None else None
    )
    return report.model_copy(
        update={
            "verdict": verdict,
            "counts": counts,
            "strict": strict,
            "baseline": baseline,
            "allow_incomplete": allow_incomplete,
            "select": sorted(policy.select) if policy.select is not None else None,
            "ignore": sorted(policy.ignore),
            "exit_code": exit_code,
            "exit_reason": exit_reason,
        }
    )


def _exit(
    verdict: str, counts: Counts, incomplete: list[str], program: dict | None, allow_incomplete: bool
) -> tuple[int, str]:
    if verdict == "fail":
        return 1, f"exit 1: findings failed ({counts.errors} error(s)" + (
            f", {counts.warnings} warning(s)" if counts.warnings else ""
        ) + ")"
    if verdict == "incomplete" and not allow_incomplete:
        return 2, f"exit 2: incomplete: {incomplete[0]}"
    for run in (program or {}).get("runs", [program] if program else []):
        if run.get("signal"):
            number = 128 + signal.Signals[run["signal"]].value
            return number, f"exit {number}: the program was killed by {run['signal']}"
        if run.get("exit_code"):
            return run["exit_code"], f"exit {run['exit_code']}: the program exited {run['exit_code']}"
        if run.get("unfinished"):
            return 2, "exit 2: the run never finished (no meta.json: mlacheck itself was stopped)"
    return 0, "exit 0" + (": the program exited 0" if program else "")
