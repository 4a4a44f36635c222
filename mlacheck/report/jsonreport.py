"""The JSON report (`--output json:PATH`, `--json PATH`): the report model's JSON form, which every other format
renders and `mlacheck report` reads back (report/model.py gives its format's history)."""

from __future__ import annotations

import json


def render(report: dict, options: object = None) -> str:
    return json.dumps(report, indent=2) + "\n"
