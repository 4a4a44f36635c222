"""`--output FORMAT:PATH`: parse the specs and write the report dict in each format.

FORMAT is json, junit, sarif, github or markdown; PATH "-" is stdout (github's usual place, since
GitHub reads annotations from the step's output). Every spec is parsed before anything is written.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from mlacheck.errors import MlacheckError
from mlacheck.report.github import to_github, write_github
from mlacheck.report.junit import to_junit
from mlacheck.report.markdown import to_markdown
from mlacheck.report.sarif import to_sarif

FORMATS = ("json", "junit", "sarif", "github", "markdown")


def parse_output(spec: str) -> tuple[str, Path | None]:
    """"FORMAT:PATH" -> (format, path); path None means stdout ("-"). Bad specs are one-line MlacheckErrors."""
    fmt, sep, path = spec.partition(":")
    if not sep or not path:
        raise MlacheckError(f"--output {spec}: write FORMAT:PATH, FORMAT one of {', '.join(FORMATS)} (PATH - is stdout)")
    if fmt not in FORMATS:
        raise MlacheckError(f"--output {spec}: unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return fmt, None if path == "-" else Path(path)


def render(report: dict, fmt: str, sarif_anchor: str | None = None) -> str:
    """The report as text in one format (github: the annotation lines only; sarif_anchor: see to_sarif)."""
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    if fmt == "junit":
        return to_junit(report)
    if fmt == "sarif":
        return json.dumps(to_sarif(report, sarif_anchor), indent=2) + "\n"
    if fmt == "github":
        return to_github(report)
    if fmt == "markdown":
        return to_markdown(report)
    raise MlacheckError(f"unknown output format {fmt!r}: choose one of {', '.join(FORMATS)}")


def write_outputs(report: dict, specs: Iterable[str], stdout: TextIO | None = None,
                  environ: Mapping[str, str] | None = None, sarif_anchor: str | None = None) -> None:
    """Write the report once per spec; github also appends the job summary to $GITHUB_STEP_SUMMARY."""
    stdout = sys.stdout if stdout is None else stdout
    environ = os.environ if environ is None else environ
    for spec, (fmt, path) in [(spec, parse_output(spec)) for spec in specs]:
        try:
            if path is None:
                if fmt == "github":
                    write_github(report, stdout, environ)
                else:
                    stdout.write(render(report, fmt, sarif_anchor))
                    stdout.flush()
            else:
                with path.open("w", encoding="utf-8") as handle:
                    if fmt == "github":
                        write_github(report, handle, environ)
                    else:
                        handle.write(render(report, fmt, sarif_anchor))
        except OSError as exc:
            raise MlacheckError(f"--output {spec}: cannot write {path or 'stdout'}: {exc.strerror or exc}") from None
