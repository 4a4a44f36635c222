"""The JSON report (`--output json:PATH`, `--json PATH`): the report model's JSON form, which every other format
renders and `mlacheck report` reads back (report/model.py gives its format's history).

Written by pydantic-core's serializer (about ten times faster than the json module's indented one, which is pure
Python: a report of 10^5 variants is over 100 MB) in the same layout; a report with text beyond ASCII is written by the
json module, which escapes it, so that no control character of the run's text reaches a terminal that shows the file.
"""

from __future__ import annotations

from collections.abc import Iterator

from mlacheck.report.common import document_text, json_document


def encoded(report: dict, options: object = None) -> Iterator[bytes]:
    """The renderer protocol (report/formats.py): the report as JSON, a piece at a time (a Rewrite where a piece
    holds text beyond ASCII)."""
    return json_document(report, bytes.isascii)


def render(report: dict, options: object = None) -> str:
    """The renderer protocol: the report as JSON text."""
    return document_text(encoded(report, options))
