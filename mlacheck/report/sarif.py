"""SARIF 2.1.0 for code-scanning uploads: one run, the finding codes as SARIF rules, one result per finding.

A result is located at the finding's "site" ("path:line": the engine line for MLA001, where the dead
variant was precompiled for MLA002), else where its variant was precompiled ("compiled_by"), but only at a
file inside the user's repository (the git work tree mlacheck runs in: not an installed package, not a line
the embedded scenario models); else at `anchor` when one is given, else nowhere (locations []; the
message then names the site). The schema allows that, but GitHub code
scanning rejects a whole log holding an unlocated result, so an uploader should pass an anchor
(e.g. the rule file or the warm-up's file) when MLA004's version finding may occur. partialFingerprints
"mlacheck/v1" carries the baseline fingerprint; a report that went through a baseline also gets
baselineState "new" / "unchanged"; a finding whose code is ignored (--ignore, --select) is suppressed
("external"). Under --strict a new warning fails the run: its level is "error". Each reason an incomplete run could
not pass is an error result of rule `mlacheck/incomplete` too (located at the anchor), beside its notification: a
consumer that shows results alone (code scanning's alerts) never shows an incomplete run as clean. Internal capture
errors are tool execution notifications.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath, PureWindowsPath
from urllib.parse import quote

from mlacheck.codes import CODES
from mlacheck.keys import key_identity
from mlacheck.report.baseline import FINGERPRINT_SCHEME, fingerprint, report_fingerprints
from mlacheck.report.common import Repository, Slices, document_text, json_document, level

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INCOMPLETE_RULE = {
    "id": "mlacheck/incomplete",
    "name": "incomplete",
    "shortDescription": {"text": "the run could not be checked in full"},
    "fullDescription": {"text": "What mlacheck could not see or compare: the run can neither pass nor fail on it."},
    "help": {"text": "Each result says what is missing and how to see it; fix that and run again."},
    "defaultConfiguration": {"level": "error"},
}
RUN_PROPERTIES = (
    "verdict",
    "mode",
    "target_arch",
    "compile_policy",
    "versions",
    "device",
    "strict",
    "scenario",
    "program",
    "processes",
    "baseline",
)


def to_sarif(report: dict, anchor: str | None = None, repository: Repository | None = None) -> dict:
    """The report as a SARIF 2.1.0 log (a dict; json.dumps it); anchor ("path[:line]") locates findings without a
    site in the repository (default: the one mlacheck runs in)."""
    log = _log(report, anchor, repository)
    run = log["runs"][0]
    run["results"] = run["results"][0 : len(run["results"])]
    return log


def _log(report: dict, anchor: str | None = None, repository: Repository | None = None) -> dict:
    """`to_sarif`'s log, its results made a slice at a time as it is written."""
    rules = list(CODES.values())
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": _driver(report, rules)},
                "invocations": [_invocation(report)],
                "results": _results(report, rules, anchor, repository or Repository.here()),
                "properties": {name: report[name] for name in RUN_PROPERTIES if report.get(name) is not None},
            }
        ],
    }


def _driver(report: dict, rules: list) -> dict:
    """mlacheck as the run's tool: its version and every finding code as a SARIF rule."""
    driver = {
        "name": "mlacheck",
        "rules": [
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": rule.why},
                "help": {"text": rule.hint},
                "defaultConfiguration": {"level": rule.severity.value},
            }
            for rule in rules
        ]
        + [INCOMPLETE_RULE],
    }
    if report.get("mlacheck_version"):
        driver["version"] = str(report["mlacheck_version"])
    return driver


def _invocation(report: dict) -> dict:
    """The run's invocation: an incomplete run did not do what it was asked (executionSuccessful false), each reason
    and each internal capture error an error notification."""
    notifications = [f"incomplete: {reason}" for reason in report.get("incomplete") or []]
    notifications += [f"internal error in capture: {error}" for error in report.get("internal_errors") or []]
    invocation = {"executionSuccessful": not notifications}
    if notifications:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": text}} for text in notifications
        ]
    return invocation


def _results(report: dict, rules: list, anchor: str | None, repository: Repository) -> Slices:
    """A result per finding, located at its site, else where its variant was compiled, else at the anchor (made a
    slice at a time as the log is written)."""
    index = {rule.code: position for position, rule in enumerate(rules)}
    findings = report.get("findings") or []
    compiled_by: dict[tuple, str | None] = {}  # (family, key identity) -> where its variant was compiled
    located: dict[str | None, tuple[str, int | None] | None] = {}  # site -> its location (thousands share one)
    anywhere: list[bool] = []  # whether any variant was compiled at a site in the repository

    def locate(site: str | None) -> tuple[str, int | None] | None:
        if site not in located:
            located[site] = repository.locate(site)
        return located[site]

    def compiled_at(finding: dict) -> tuple[str, int | None] | None:
        """Where the finding's variant was compiled, located (looked at once a finding's site is not in the
        repository; each variant's key looked up only where some variant's site is)."""
        if not anywhere:
            sites = {
                v.get("compiled_by") for family in report.get("families") or [] for v in family.get("variants") or []
            }
            anywhere.append(any(locate(site) for site in sites))
        if not anywhere[0]:
            return None
        if not compiled_by:
            compiled_by.update(
                ((family["name"], key_identity(variant.get("key") or {})), variant.get("compiled_by"))
                for family in report.get("families") or []
                for variant in family.get("variants") or []
            )
        return locate(compiled_by.get((finding.get("family"), key_identity(finding.get("key") or {}))))

    prints = [finding.get("fingerprint") for finding in findings]  # (`decide` made them: each made again otherwise)
    prints = prints if all(prints) else report_fingerprints(findings)

    strict, reasons = report.get("strict"), report.get("incomplete") or []

    def results(start: int, stop: int) -> list[dict]:
        made = []
        for finding, print_ in zip(findings[start:stop], prints[start:stop]):
            location = locate(finding.get("site")) or compiled_at(finding)
            made.append(_result(finding, print_, index, location, anchor, strict))
        first = max(start - len(findings), 0)
        made += [_incomplete(reason, anchor) for reason in reasons[first : max(stop - len(findings), first)]]
        return made

    return Slices(len(findings) + len(reasons), results)


def _incomplete(reason: str, anchor: str | None) -> dict:
    """An error result for a reason the run could not pass (at the anchor: a reason has no place in the code)."""
    return {
        "ruleId": INCOMPLETE_RULE["id"],
        "level": "error",
        "message": {"text": reason},
        "locations": _anchor(anchor),
        "partialFingerprints": {
            FINGERPRINT_SCHEME: fingerprint({"code": INCOMPLETE_RULE["id"], "family": "", "key": {"reason": reason}})
        },
    }


def _result(
    finding: dict,
    print_: str,
    index: dict[str, int],
    location: tuple[str, int | None] | None,
    anchor: str | None,
    strict: object,
) -> dict:
    text = finding.get("message", "")
    if finding.get("site") and location is None:
        text += f"\nat {finding['site']}"
    if finding.get("hint"):
        text += f"\nfix: {finding['hint']}"
    result = {
        "ruleId": finding.get("code", ""),
        "level": level(finding, strict),
        "message": {"text": text},
        "locations": _locations(location) if location else _anchor(anchor),
        "partialFingerprints": {FINGERPRINT_SCHEME: print_},
        "properties": {
            name: finding[name]
            for name in ("family", "key", "nearest", "diff", "process")
            if finding.get(name) is not None
        },
    }
    if finding.get("code") in index:
        result["ruleIndex"] = index[finding["code"]]
    if "baselined" in finding:
        result["baselineState"] = "unchanged" if finding["baselined"] else "new"
    if finding.get("ignored"):  # --ignore / --select: shown, suppressed, never failing
        result["suppressions"] = [{"kind": "external", "justification": "its code is ignored (--ignore, --select)"}]
    return result


def _anchor(anchor: str | None) -> list[dict]:
    """The anchor ("path[:line]") as a location, as given."""
    if not anchor:
        return []
    path, sep, line = anchor.rpartition(":")
    return _locations((path, int(line)) if sep and line.isdigit() else (anchor, None))


def _locations(location: tuple[str, int | None]) -> list[dict]:
    path, line = location
    physical: dict = {"artifactLocation": {"uri": path_uri(path)}}
    if line is not None:
        physical["region"] = {"startLine": line}
    return [{"physicalLocation": physical}]


def path_uri(path: str) -> str:
    """A relative path as a relative URI reference (forward slashes, percent-quoted); an absolute one as file://."""
    if PureWindowsPath(path).drive:
        return PureWindowsPath(path).as_uri()
    if path.startswith("/"):
        return PurePosixPath(path).as_uri()
    return quote(path.replace("\\", "/"))


def encoded(report: dict, options=None) -> Iterator[bytes]:
    """The renderer protocol (report/formats.py): the log as JSON, findings without a site located at the options'
    anchor."""
    return json_document(_log(report, getattr(options, "anchor", None)))


def render(report: dict, options=None) -> str:
    """The renderer protocol: the log as JSON text."""
    return document_text(encoded(report, options))
