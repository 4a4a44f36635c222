"""The report model: everything a report says, computed once; every output format renders its JSON form.

`build_report` takes the analysis and the run's facts and decides the verdict, the counts, the baseline
state of each finding (by fingerprint) and the exit code, in one place. `Report.model_dump(mode="json")`
is the JSON report (format_version 2; later versions add fields and never rename these), and
`Report.model_validate` reads a saved one back.

Verdicts: `fail` (a new error finding, or with --strict any new finding), else `incomplete` (the run did
not see enough to compare: see `incomplete`; --allow-incomplete keeps the verdict and only changes the
exit code), else `pass`. Exit codes: 1 fail; 2 incomplete (unless --allow-incomplete); else the observed
program's own status (its exit code, 128 + N for signal N); else 0.
"""

from __future__ import annotations

import signal
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

from mlacheck.analysis import Analysis, Variant
from mlacheck.keys import JsonValue
from mlacheck.report.baseline import report_fingerprints

FORMAT_VERSION = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class VariantReport(_Model):
    key: dict[str, JsonValue]
    spelling: Optional[dict] = None
    precompiled: bool = False
    compile_phase: Optional[str] = None
    compile_s: Optional[float] = None
    compiled_by: Optional[str] = None
    captured: bool = False
    dispatches: int = 0
    dispatches_at_least: bool = False
    warmup_dispatches: int = 0
    serving_path_compile_s: Optional[float] = None
    serving_path_site: Optional[str] = None
    first_dispatch_site: Optional[str] = None
    first_call: dict[str, JsonValue] = {}
    status: str = "ok"
    tokens: int = 0
    fp8_cost: Optional[dict[str, Optional[float]]] = None  # lse_max_abs_err is None where no LSE is returned (decode)
    numerics: Optional[dict[str, Optional[float]]] = None


class FamilyReport(_Model):
    name: str
    version: Optional[str] = None
    versions: list[Optional[str]] = []
    key_fields: list[str] = []
    variants: list[VariantReport] = []
    dispatch_calls: int = 0
    died_before_lookup: int = 0
    notes: list[str] = []
    field_drivers: dict[str, list[str]] = {}


class FindingReport(_Model):
    code: str
    name: str
    severity: Literal["error", "warning"]
    family: str
    key: dict[str, JsonValue] = {}
    nearest: Optional[dict[str, JsonValue]] = None
    diff: dict[str, list[JsonValue]] = {}
    drivers: dict[str, list[str]] = {}
    message: str
    hint: str = ""
    site: Optional[str] = None
    stack: list[str] = []
    process: Optional[dict] = None
    fingerprint: str = ""
    baselined: bool = False


class Counts(_Model):
    errors: int = 0
    warnings: int = 0
    baselined: int = 0


class Report(_Model):
    format_version: int = FORMAT_VERSION
    verdict: Literal["pass", "fail", "incomplete"]
    exit_code: int = 0
    exit_reason: str = ""
    mode: str
    target_arch: Optional[str] = None
    compile_policy: str = "real"
    mlacheck_version: str = ""
    tokenspeed_mla_version: Optional[str] = None
    versions: dict[str, Optional[str]] = {}
    device: Optional[str] = None
    strict: bool = False
    allow_incomplete: bool = False
    scenario: Optional[dict] = None
    program: Optional[dict] = None
    processes: list[dict] = []
    families: list[FamilyReport] = []
    findings: list[FindingReport] = []
    counts: Counts = Counts()
    baseline: Optional[dict] = None
    incomplete: list[str] = []
    not_checked: list[str] = []
    internal_errors: list[str] = []
    bad_lines: list[str] = []


def variant_report(variant: Variant) -> VariantReport:
    return VariantReport(
        key=variant.key, spelling=variant.spelling, precompiled=variant.precompiled, compile_phase=variant.compile_phase,
        compile_s=variant.compile_s, compiled_by=variant.compiled_by, captured=variant.captured,
        dispatches=variant.dispatches, dispatches_at_least=variant.at_least and variant.dispatches > 0,
        warmup_dispatches=variant.warmup_dispatches, serving_path_compile_s=variant.serving_path_compile_s,
        serving_path_site=variant.serving_path_site, first_dispatch_site=variant.first_dispatch_site,
        first_call=variant.first_call,
        status=variant.status, tokens=variant.tokens, fp8_cost=variant.fp8_cost, numerics=variant.numerics)


def build_report(analysis: Analysis, facts: dict, processes: list[dict] | None = None, strict: bool = False,
                 allow_incomplete: bool = False, known: set[str] | None = None, baseline_source: str | None = None) -> Report:
    """The report of one run (or several merged); `decide` gives it its verdict."""
    processes = processes or []
    findings = []
    for finding in analysis.findings:
        process = processes[finding.proc] if finding.proc is not None and finding.proc < len(processes) else None
        findings.append(FindingReport(
            code=finding.code, name=finding.name, severity=finding.severity.value, family=finding.family,
            key=finding.key, nearest=finding.nearest, diff=finding.diff, drivers=finding.drivers,
            message=finding.message, hint=finding.hint, site=finding.site, stack=finding.stack,
            process={name: process.get(name) for name in ("pid", "host", "rank")} if process else None))
    families = [FamilyReport(name=f.name, version=f.version, versions=f.versions, key_fields=f.key_fields,
                             variants=[variant_report(v) for v in f.variants], dispatch_calls=f.dispatch_calls,
                             died_before_lookup=f.died_before_lookup, notes=f.notes, field_drivers=f.field_drivers)
                for f in analysis.families]
    versions = {f.name: f.version for f in analysis.families}
    report = Report(
        verdict="pass", versions=versions, families=families, findings=findings, incomplete=list(analysis.incomplete),
        tokenspeed_mla_version=next((v for name, v in versions.items() if name.startswith("tokenspeed_mla")), None),
        not_checked=analysis.not_checked, internal_errors=analysis.internal_errors, processes=processes, **facts)
    return decide(report, strict, allow_incomplete, known, baseline_source)


def decide(report: Report, strict: bool = False, allow_incomplete: bool = False, known: set[str] | None = None,
           baseline_source: str | None = None) -> Report:
    """The one place a verdict is made: fingerprints and baseline state, counts, verdict, exit code and its reason."""
    for finding, print_ in zip(report.findings, report_fingerprints([f.model_dump() for f in report.findings])):
        finding.fingerprint = print_
        finding.baselined = known is not None and print_ in known
    new = [f for f in report.findings if not f.baselined]
    counts = Counts(errors=sum(f.severity == "error" for f in new), warnings=sum(f.severity == "warning" for f in new),
                    baselined=len(report.findings) - len(new))
    failing = counts.errors + (counts.warnings if strict else 0)
    verdict = "fail" if failing else "incomplete" if report.incomplete else "pass"
    exit_code, exit_reason = _exit(verdict, counts, report.incomplete, report.program, allow_incomplete)
    baseline = {"source": baseline_source, "baselined": counts.baselined, "new": len(new)} if known is not None else None
    return report.model_copy(update={"verdict": verdict, "counts": counts, "strict": strict, "baseline": baseline,
                                     "allow_incomplete": allow_incomplete, "exit_code": exit_code, "exit_reason": exit_reason})


def _exit(verdict: str, counts: Counts, incomplete: list[str], program: dict | None,
          allow_incomplete: bool) -> tuple[int, str]:
    if verdict == "fail":
        return 1, f"exit 1: findings failed ({counts.errors} error(s)" + (f", {counts.warnings} warning(s)" if counts.warnings else "") + ")"
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
