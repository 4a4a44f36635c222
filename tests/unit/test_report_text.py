"""The fast paths of the report's text (report/common.py): `json_bytes` writes what `json.dumps(indent=2)` writes, and
`printable_report` escapes every string that needs it, whichever path it takes."""

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from mlacheck.report.common import json_bytes, printable_report

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_json_bytes_is_what_the_json_module_writes(value):
    assert b"".join(json_bytes(value)).decode() == json.dumps(value, indent=2)


def test_json_bytes_of_every_float_magnitude_and_character():
    values = [m * 10.0**e for e in range(-30, 30) for m in (1.0, 1.5, 1.2345678901234567, -3.3)]
    values += [math.inf, -math.inf, math.nan, 0.0, -0.0, 5e-324, "\x7f", "\x1b[2J", "\u202e", "é", "a\\b"]
    for value in values:
        assert b"".join(json_bytes({"x": [value]})).decode() == json.dumps({"x": [value]}, indent=2)


def test_printable_report_escapes_whichever_path():
    plain = {"families": [{"name": "f", "variants": [{"key": {"d": "bf16"}}]}], "n": 1.5e-7}
    assert printable_report(plain) is plain  # nothing to escape: the value itself
    for hostile in ("\x1b[2J", "a\nverdict: PASS", "\x7f", "\u202e", "\x9b", "back\\slash"):
        report = {"families": [{"name": hostile, hostile: [hostile]}]}
        escaped = printable_report(report)
        text = json.dumps(escaped, ensure_ascii=False)
        assert not any(ch in text for ch in ("\x1b", "\n", "\x7f", "\u202e", "\x9b"))
        assert escaped != report or hostile == "back\\slash"


@given(JSON)
def test_json_pieces_are_the_serializers_text_whatever_the_slice(value):
    from pydantic_core import to_json

    from mlacheck.report import common

    whole = to_json(value, indent=2, inf_nan_mode="constants")
    saved = common.SLICE
    try:
        for size in (1, 2):
            common.SLICE = size  # every list sliced, every object holding one taken a field at a time
            assert b"".join(common.json_pieces(value)) == whole
            assert b"".join(json_bytes(value)).decode() == json.dumps(value, indent=2)
    finally:
        common.SLICE = saved


def test_json_pieces_of_a_report_of_thousands_of_variants():
    from pydantic_core import to_json

    from mlacheck.report.common import json_pieces

    variants = [
        {"key": {"dtype": f"v{i}", "causal": True}, "compile_s": i * 1e-7, "first_call": {}} for i in range(1500)
    ]
    report = {"families": [{"name": "f", "variants": variants, "notes": []}], "findings": variants[:600], "x": {}}
    pieces = list(json_pieces(report))
    assert len(pieces) > 4 and max(map(len, pieces)) < len(b"".join(pieces)) / 2
    assert b"".join(pieces) == to_json(report, indent=2, inf_nan_mode="constants")
    assert b"".join(json_bytes(report)).decode() == json.dumps(report, indent=2)
    assert printable_report(report) is report


@given(st.text(), st.text(), st.integers(min_value=0, max_value=3))
def test_junit_elements_are_what_elementtree_writes(text, value, children):
    import xml.etree.ElementTree as ET

    from mlacheck.report.junit import Element

    tree = ET.Element("testcase", classname=value, name="n")
    ours = Element("testcase", {"classname": value, "name": "n"})
    for number in range(children):
        ET.SubElement(tree, "failure", message=value, type=str(number)).text = text
        ours.children.append(Element("failure", {"message": value, "type": str(number)}, text))
    ET.SubElement(tree, "system-out").text = text
    ours.children.append(Element("system-out", text=text))
    outer = ET.Element("suite")
    outer.append(tree)
    ET.indent(outer)
    expected = ET.tostring(outer, encoding="unicode")
    assert "<suite>\n  " + ours.written(1) + "\n</suite>" == expected


MARKUP = st.one_of(st.text(max_size=6), st.text(alphabet='a"&<>\n\t\r é', max_size=8))  # what XML escapes
FINDINGS = st.lists(
    st.fixed_dictionaries(
        {"code": st.sampled_from(["MLA001", "MLA002", "MLA004", 'a"<']), "message": MARKUP},
        optional={
            "name": st.text(max_size=4),
            "severity": st.sampled_from(["error", "warning", "note"]),
            "site": st.one_of(st.none(), MARKUP),
            "hint": MARKUP,
            "diff": st.dictionaries(st.text(max_size=3), st.tuples(st.text(max_size=2), st.integers()), max_size=2),
            "baselined": st.booleans(),
            "ignored": st.booleans(),
            "process": st.one_of(st.none(), st.fixed_dictionaries({"pid": st.integers(), "rank": st.integers()})),
        },
    ),
    max_size=3,
)


@given(MARKUP, MARKUP, FINDINGS, st.one_of(st.none(), MARKUP))
def test_a_testcase_written_at_once_is_what_its_elements_write(classname, name, findings, key):
    """A testcase (a variant's, with its findings or none, or a lone finding's) written as one string is what the
    elements of the documented layout write (`Element.written` is ElementTree's text: the test above)."""
    from mlacheck.report.junit import Element, _attribute, _details, _failures, _label, _testcase_text

    for strict in (False, True):  # (--strict: a new warning fails too)
        failures = _failures(findings, strict)
        children = [
            Element("failure", {"message": f.get("message", ""), "type": f.get("code", "")}, _details(f))
            for f in failures
        ]
        notes = [f"{_label(f)}: {f.get('message', '')}" for f in findings if f not in failures]
        if key is not None or notes:
            children.append(
                Element("system-out", text="\n".join([*([f"key: {key}"] if key is not None else []), *notes]))
            )
        expected = Element("testcase", {"classname": classname, "name": name}, children=children).written(2)
        assert _testcase_text(_attribute(classname), name, findings, key, strict) == expected


def test_a_document_found_beyond_ascii_late_is_written_again_whole(tmp_path):
    """The JSON report and SARIF log are written a piece at a time; text beyond ASCII in the last variant (after many
    pieces were written) makes the json module's document, written over them: the same file as one written whole."""
    from mlacheck.report.formats import write_outputs
    from mlacheck.report.jsonreport import render

    variants = [{"key": {"dtype": f"v{n}"}} for n in range(3000)] + [{"key": {"dtype": "é\u202e"}}]
    report = {"verdict": "pass", "families": [{"name": "f", "variants": variants}], "findings": []}
    write_outputs(report, [("json", tmp_path / "r.json"), ("sarif", tmp_path / "r.sarif")])
    assert (tmp_path / "r.json").read_text() == render(report) == json.dumps(report, indent=2) + "\n"
    assert (tmp_path / "r.json").read_bytes().isascii()
    ascii_report = {**report, "families": [{"name": "f", "variants": variants[:-1]}]}
    write_outputs(ascii_report, [("json", tmp_path / "r.json")])
    assert (tmp_path / "r.json").read_text() == json.dumps(ascii_report, indent=2) + "\n"


def test_a_sarif_log_of_many_findings_made_a_slice_at_a_time_is_the_log_whole(tmp_path):
    """SARIF's results are made a slice at a time as the log is written: the same text as the log made whole, also
    where a late result holds text beyond ASCII (the json module's document then) or a number the two write apart."""
    from mlacheck.report.formats import write_outputs
    from mlacheck.report.sarif import to_sarif

    finding = {"code": "MLA001", "family": "f", "severity": "error", "message": "m", "fingerprint": "0" * 32}
    findings = [{**finding, "key": {"dtype": f"v{n}"}} for n in range(1300)]
    for last in ({"message": "m"}, {"message": "é\u202e"}, {"key": {"seconds": 1e-05}}):
        report = {"verdict": "fail", "families": [], "findings": [*findings, {**finding, **last}]}
        write_outputs(report, [("sarif", tmp_path / "r.sarif")])
        assert (tmp_path / "r.sarif").read_text() == json.dumps(to_sarif(report), indent=2) + "\n"
