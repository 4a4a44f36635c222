"""The JSON report (`--output json:PATH`, `--json PATH`): the report model's JSON form, which every other format
renders and `mlacheck report` reads back (report/model.py gives its format's history).

Written by pydantic-core's serializer (about ten times faster than the json module's indented one, which is pure
Python: a report of 10^5 variants is over 100 MB) in the same layout; a report with text beyond ASCII is written by the
json module, which escapes it, so that no control character of the run's text reaches a terminal that shows the file.
"""

from __future__ import annotations

import json

from pydantic_core import to_json


def render(report: dict, options: object = None) -> str:
    text = to_json(report, indent=2, inf_nan_mode="constants").decode()
    if not text.isascii():
        text = json.dumps(report, indent=2)
    text += "\n"  # in place: the text of 10^5 variants is not copied
    return text
