"""The fast paths of the report's text (report/common.py): `json_text` writes what `json.dumps(indent=2)` writes, and
`printable_report` escapes every string that needs it, whichever path it takes."""

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from mlacheck.report.common import json_text, printable_report

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_json_text_is_what_the_json_module_writes(value):
    assert json_text(value) == json.dumps(value, indent=2)


def test_json_text_of_every_float_magnitude_and_character():
    values = [m * 10.0**e for e in range(-30, 30) for m in (1.0, 1.5, 1.2345678901234567, -3.3)]
    values += [math.inf, -math.inf, math.nan, 0.0, -0.0, 5e-324, "\x7f", "\x1b[2J", "\u202e", "é", "a\\b"]
    for value in values:
        assert json_text({"x": [value]}) == json.dumps({"x": [value]}, indent=2)


def test_printable_report_escapes_whichever_path():
    plain = {"families": [{"name": "f", "variants": [{"key": {"d": "bf16"}}]}], "n": 1.5e-7}
    assert printable_report(plain) is plain  # nothing to escape: the value itself
    for hostile in ("\x1b[2J", "a\nverdict: PASS", "\x7f", "\u202e", "\x9b", "back\\slash"):
        report = {"families": [{"name": hostile, hostile: [hostile]}]}
        escaped = printable_report(report)
        text = json.dumps(escaped, ensure_ascii=False)
        assert not any(ch in text for ch in ("\x1b", "\n", "\x7f", "\u202e", "\x9b"))
        assert escaped != report or hostile == "back\\slash"
