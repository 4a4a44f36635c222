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

Written a testcase at a time, element by element as xml.etree.ElementTree writes an indented tree (`Element`): a
report of 10^5 variants is never a tree in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

from mlacheck.keys import fields_text, key_identity, spelling_text, value_text, varying_fields
from mlacheck.report.common import fails, family_key_fields, printable_read, process_text, severity, summary_line
from mlacheck.report.common import state as state_of

PROPERTIES = ("verdict", "mode", "target_arch", "compile_policy", "mlacheck_version", "device")
DECLARATION = "<?xml version='1.0' encoding='utf-8'?>\n"
READS_PRINTABLE = True  # (report/formats.py)
BATCH = 1 << 20  # characters of the document encoded at a time


class Element:
    """An XML element as xml.etree.ElementTree writes it (attributes in order, escaped as it escapes them; an element
    with neither text nor children closed at once), its children indented two spaces a level as `ET.indent` does.
    (A plain class of slots: a report of 10^5 variants makes two a variant.)"""

    __slots__ = ("tag", "attributes", "text", "children")

    def __init__(
        self,
        tag: str,
        attributes: dict[str, str] | None = None,
        text: str | None = None,
        children: list[Element] | None = None,
    ) -> None:
        self.tag, self.attributes, self.text = tag, {} if attributes is None else attributes, text
        self.children = [] if children is None else children

    def opening(self) -> str:
        return f"<{self.tag}" + "".join([f' {name}="{_attribute(value)}"' for name, value in self.attributes.items()])

    def written(self, level: int) -> str:
        """The element as ElementTree writes it, `level` deep in an indented tree."""
        if not self.children:
            return f"{self.opening()}>{_text(self.text)}</{self.tag}>" if self.text else f"{self.opening()} />"
        inner = "\n" + "  " * (level + 1)
        written = "".join([inner + child.written(level + 1) for child in self.children])
        return f"{self.opening()}>{written}\n{'  ' * level}</{self.tag}>"


TEXT_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))  # as ElementTree escapes text, "&" first
ATTRIBUTE_ENTITIES = (*TEXT_ENTITIES, ('"', "&quot;"), ("\r", "&#13;"), ("\n", "&#10;"), ("\t", "&#09;"))


def _attribute(value: str) -> str:
    return _escaped(value, ATTRIBUTE_ENTITIES)


def _text(value: str) -> str:
    return _escaped(value, TEXT_ENTITIES)


def _escaped(value: str, entities: tuple[tuple[str, str], ...]) -> str:
    for char, entity in entities:
        value = value.replace(char, entity) if char in value else value
    return value


def to_junit(report: dict) -> str:
    """The report as a JUnit XML document (UTF-8 text with an XML declaration)."""
    return "".join(_pieces(report))


def encoded(report: dict, options: object = None) -> Iterator[bytes]:
    """The renderer protocol (report/formats.py): the document as UTF-8, about a MiB at a time."""
    batch: list[str] = []
    size = 0
    for piece in _pieces(report):
        batch.append(piece)
        size += len(piece)
        if size > BATCH:
            yield "".join(batch).encode()
            batch, size = [], 0
    yield "".join(batch).encode()


def render(report: dict, options: object = None) -> str:
    """The renderer protocol (report/formats.py)."""
    return to_junit(report)


def _pieces(report: dict) -> Iterator[str]:
    """The document, a testcase at a time (the suite's counts first: the testcases are counted before)."""
    report = printable_read(report)
    cases, keys = _cases(report)
    unseen = _unseen(report)
    strict = report.get("strict")
    failed = sum(bool(_failures(findings, strict)) for _, _, findings in cases)
    counts = {"tests": str(len(cases) + len(unseen)), "failures": str(failed), "errors": str(len(unseen))}
    suites = Element("testsuites", {"name": "mlacheck", **counts})
    suite = Element("testsuite", {"name": "mlacheck", **counts, "skipped": "0"})
    yield f"{DECLARATION}{suites.opening()}>\n  {suite.opening()}>"
    errors = report.get("internal_errors") or []
    suffix = (
        [Element("system-err", text="\n".join(f"internal error in capture: {e}" for e in errors))] if errors else []
    )
    yield "\n    " + _properties(report).written(2)
    classnames: dict[str, str] = {}  # each family's name as an attribute (escaped once)
    for classname, name, findings in cases:
        escaped = classnames.get(classname) or classnames.setdefault(classname, _attribute(classname))
        yield "\n    " + _testcase_text(escaped, name, findings, keys.get(classname, {}).get(name), strict)
    for element in (*unseen, *suffix):
        yield "\n    " + element.written(2)
    yield "\n  </testsuite>\n</testsuites>\n"


def _cases(report: dict) -> tuple[list[tuple[str, str, list[dict]]], dict[str, dict[str, str]]]:
    """The testcases, (classname, name, the findings on it): one per variant of each family, then one per finding that
    matches no variant; and the whole key of each variant's testcase, by (family, testcase name)."""
    fields = family_key_fields(report)
    cases: list[tuple[str, str, list[dict]]] = []
    by_variant: dict[str, dict[tuple, list[dict]]] = {}  # family -> its variants' findings, by key (`_identity`)
    keys: dict[str, dict[str, str]] = {}  # family -> testcase name -> its whole key
    named = {finding.get("family") for finding in report.get("findings") or []}  # (only their variants are looked up)
    for family in report.get("families") or []:
        variants, classname = family.get("variants") or [], family["name"]
        names, ordered = _names(variants, fields.get(classname)), fields.get(classname)
        ours, texts = by_variant.setdefault(classname, {}), keys.setdefault(classname, {})
        for variant, name in zip(variants, names):
            findings: list[dict] = []
            if classname in named:
                ours[_identity(variant.get("key") or {})] = findings
            texts[name] = fields_text(variant.get("key") or {}, ordered)
            cases.append((classname, name, findings))
    for finding in report.get("findings") or []:
        home = by_variant.get(finding.get("family"), {}).get(_identity(finding.get("key") or {}))
        if home is not None:
            home.append(finding)
        else:
            name = f"{finding.get('code')} {finding.get('name', '')}".strip()
            cases.append((finding.get("family") or "mlacheck", name, [finding]))
    return cases, keys


def _identity(key: dict) -> tuple:
    """`key_identity`'s pairs in one flat tuple (as much as it says, in half the room: one a variant)."""
    return tuple(chain.from_iterable(key_identity(key)))


def _properties(report: dict) -> Element:
    """The suite's <properties>: the run's facts, each family's version, the program's command, the summary."""
    values = [(name, str(report[name])) for name in PROPERTIES if report.get(name) is not None]
    values += [(f"version {family}", str(version)) for family, version in (report.get("versions") or {}).items()]
    program = report.get("program")
    if program:
        values.append(("program", " ".join(program.get("command") or [])))
    values.append(("summary", summary_line(report)))
    return Element(
        "properties", children=[Element("property", {"name": name, "value": value}) for name, value in values]
    )


def _failures(findings: list[dict], strict: object) -> list[dict]:
    """The findings that fail a testcase: new errors, and under --strict (`strict`) new warnings too."""
    return [f for f in findings if fails(f, strict)]


def _testcase_text(escaped: str, name: str, findings: list[dict], key: str | None, strict: object) -> str:
    """A variant's (or a lone finding's) testcase as `Element.written` writes it two levels deep, written at once
    (`escaped`: its classname as an attribute): a <failure> per finding that fails the run, the key and every other finding in
    its <system-out>."""
    opening = f'<testcase classname="{escaped}" name="{_attribute(name)}"'
    if not findings:  # the usual one: its key alone
        if key is None:
            return f"{opening} />"
        return f"{opening}>\n      <system-out>{_text(f'key: {key}')}</system-out>\n    </testcase>"
    failures = _failures(findings, strict)
    children = [_failure(finding) for finding in failures]
    notes = [f"{_label(f)}: {f.get('message', '')}" for f in findings if f not in failures]
    if key is not None or notes:
        out = "\n".join([*([f"key: {key}"] if key is not None else []), *notes])
        children.append(f"<system-out>{_text(out)}</system-out>" if out else "<system-out />")
    if not children:
        return f"{opening} />"
    return opening + ">" + "".join(["\n      " + child for child in children]) + "\n    </testcase>"


def _failure(finding: dict) -> str:
    """A <failure> as `Element.written` writes it: the finding's message and code, its details as text."""
    details = _details(finding)
    opening = (
        f'<failure message="{_attribute(finding.get("message", ""))}" type="{_attribute(finding.get("code", ""))}"'
    )
    return f"{opening}>{_text(details)}</failure>" if details else f"{opening} />"


def _unseen(report: dict) -> list[Element]:
    """A testcase with an <error> for each reason the run is incomplete and each internal capture error (those also in
    the suite's <system-err>)."""
    unseen = [("incomplete", reason) for reason in report.get("incomplete") or []]
    unseen += [("internal error in capture", error) for error in report.get("internal_errors") or []]
    return [
        Element(
            "testcase",
            {"classname": "mlacheck", "name": name},
            children=[Element("error", {"message": text, "type": name}, text)],
        )
        for name, text in unseen
    ]


def _names(variants: list[dict], fields: list[str] | None) -> list[str]:
    """Each variant's testcase name: its fields that tell the family's variants apart (and how a functools call
    spelled it, where only that tells two apart); a lone variant is "variant"."""
    varying = varying_fields([v.get("key") or {} for v in variants], fields)
    if len(set(varying)) == len(varying):  # (each once: `fields_text` of the fields' values, written at once)
        names = [", ".join([f"{n}={value_text((v.get('key') or {}).get(n))}" for n in varying]) for v in variants]
        names = [name or "variant" for name in names]
    else:
        names = [fields_text({n: (v.get("key") or {}).get(n) for n in varying}) or "variant" for v in variants]
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
