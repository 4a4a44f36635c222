"""JUnit XML: one testcase per kernel variant, so CI test views list what failed and why.

Layout: <testsuites> holding one <testsuite name="mlacheck">. Each variant of each family is a
<testcase classname=FAMILY name="field=value, ...">, named by the fields that tell the family's variants apart (its
whole key is the first line of its <system-out>); each new error finding on it is a
<failure type=CODE message=MESSAGE> (text: message, diff, fix). Warnings, and findings a baseline
marked, are lines of the testcase's <system-out> (every JUnit reader shows it; <skipped> would
hide a variant that did run). A finding matching no variant (MLA004's version finding has key {})
is a testcase of its own, named "CODE name". Each reason the run is incomplete (it did not see enough to
pass) is a testcase "incomplete" with an <error>, and so is each internal capture error (also listed in the suite's
<system-err>): `errors` counts them, so a CI view never shows an incomplete run as clean. `failures` counts failed
testcases, `tests` all of them. Run facts are suite <properties>. Every string of the run is written with its control
characters escaped (`common.printable`): XML 1.0 cannot hold them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from mlacheck.keys import fields_text, key_identity, spelling_text, varying_fields
from mlacheck.report.common import family_key_fields, is_new, printable_report, process_text, severity, summary_line
from mlacheck.report.common import state as state_of

PROPERTIES = ("verdict", "mode", "target_arch", "compile_policy", "mlacheck_version", "device")


def to_junit(report: dict) -> str:
    """The report as a JUnit XML document (UTF-8 text with an XML declaration)."""
    report = printable_report(report)
    cases, keys = _cases(report)
    suites = ET.Element("testsuites", name="mlacheck")
    suite = ET.SubElement(suites, "testsuite", name="mlacheck")
    properties = _properties(suite, report)
    failed = sum(
        _testcase(suite, classname, name, findings, keys.get((classname, name))) for classname, name, findings in cases
    )
    unseen = _unseen(suite, report)
    for element in (suites, suite):
        element.set("tests", str(len(cases) + unseen))
        element.set("failures", str(failed))
        element.set("errors", str(unseen))
    suite.set("skipped", "0")
    ET.SubElement(properties, "property", name="summary", value=summary_line(report))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _cases(report: dict) -> tuple[list[tuple[str, str, list[dict]]], dict[tuple[str, str], str]]:
    """The testcases, (classname, name, the findings on it): one per variant of each family, then one per finding that
    matches no variant; and the whole key of each variant's testcase, by (family, testcase name)."""
    fields = family_key_fields(report)
    cases: list[tuple[str, str, list[dict]]] = []
    by_variant: dict[tuple, list[dict]] = {}
    keys: dict[tuple[str, str], str] = {}
    for family in report.get("families") or []:
        variants = family.get("variants") or []
        names = _names(variants, fields.get(family["name"]))
        for variant, name in zip(variants, names):
            findings: list[dict] = []
            by_variant[(family["name"], key_identity(variant.get("key") or {}))] = findings
            keys[(family["name"], name)] = fields_text(variant.get("key") or {}, fields.get(family["name"]))
            cases.append((family["name"], name, findings))
    for finding in report.get("findings") or []:
        home = by_variant.get((finding.get("family"), key_identity(finding.get("key") or {})))
        if home is not None:
            home.append(finding)
        else:
            name = f"{finding.get('code')} {finding.get('name', '')}".strip()
            cases.append((finding.get("family") or "mlacheck", name, [finding]))
    return cases, keys


def _properties(suite: ET.Element, report: dict) -> ET.Element:
    """The suite's <properties>: the run's facts, each family's version, the program's command."""
    properties = ET.SubElement(suite, "properties")
    for name in PROPERTIES:
        if report.get(name) is not None:
            ET.SubElement(properties, "property", name=name, value=str(report[name]))
    for family, version in (report.get("versions") or {}).items():
        ET.SubElement(properties, "property", name=f"version {family}", value=str(version))
    program = report.get("program")
    if program:
        ET.SubElement(properties, "property", name="program", value=" ".join(program.get("command") or []))
    return properties


def _testcase(suite: ET.Element, classname: str, name: str, findings: list[dict], key: str | None) -> bool:
    """A variant's (or a lone finding's) testcase: a <failure> per new error finding, the key and every other finding
    in its <system-out>; whether it failed."""
    case = ET.SubElement(suite, "testcase", classname=classname, name=name)
    failures = [f for f in findings if is_new(f) and severity(f) == "error"]
    for finding in failures:
        failure = ET.SubElement(case, "failure", message=finding.get("message", ""), type=finding.get("code", ""))
        failure.text = _details(finding)
    notes = [f"{_label(f)}: {f.get('message', '')}" for f in findings if f not in failures]
    if key is not None or notes:
        ET.SubElement(case, "system-out").text = "\n".join([*([f"key: {key}"] if key is not None else []), *notes])
    return bool(failures)


def _unseen(suite: ET.Element, report: dict) -> int:
    """A testcase with an <error> for each reason the run is incomplete and each internal capture error (those also in
    the suite's <system-err>); how many."""
    errors = report.get("internal_errors") or []
    unseen = [("incomplete", reason) for reason in report.get("incomplete") or []]
    unseen += [("internal error in capture", error) for error in errors]
    for name, text in unseen:
        case = ET.SubElement(suite, "testcase", classname="mlacheck", name=name)
        ET.SubElement(case, "error", message=text, type=name).text = text
    if errors:
        ET.SubElement(suite, "system-err").text = "\n".join(f"internal error in capture: {e}" for e in errors)
    return len(unseen)


def _names(variants: list[dict], fields: list[str] | None) -> list[str]:
    """Each variant's testcase name: its fields that tell the family's variants apart (and how a functools call
    spelled it, where only that tells two apart); a lone variant is "variant"."""
    varying = varying_fields([v.get("key") or {} for v in variants], fields)
    names = [fields_text({name: (v.get("key") or {}).get(name) for name in varying}) or "variant" for v in variants]
    if len(set(names)) < len(names):
        names = [f"{name} ({spelling_text(v.get('spelling'))})" for name, v in zip(names, variants)]
    return names


def _label(finding: dict) -> str:
    state = f"{state_of(finding)} " if state_of(finding) else ""
    where = process_text(finding)
    return f"{finding.get('code')} {finding.get('name', '')} [{state}{severity(finding)}]" + (
        f" {where}" if where else ""
    )


def _details(finding: dict) -> str:
    lines = [_label(finding), finding.get("message", "")]
    if finding.get("site"):
        lines.append(f"at {finding['site']}")
    for name, (old, new) in (finding.get("diff") or {}).items():
        lines.append(f"diff {name}: precompiled {old} -> dispatched {new}")
    if finding.get("hint"):
        lines.append(f"fix: {finding['hint']}")
    return "\n".join(lines)


def render(report: dict, options: object = None) -> str:
    """The renderer protocol (report/formats.py)."""
    return to_junit(report)
