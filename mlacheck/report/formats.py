"""`--output FORMAT:PATH`: parse the specs, check them before the run, and write the report in each format.

FORMAT is json, junit, sarif, github, markdown or html; PATH "-" is stdout (github's usual place, since
GitHub reads annotations from the step's output). Every format renders the report's JSON form.
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
from mlacheck.report.html import to_html
from mlacheck.report.junit import to_junit
from mlacheck.report.markdown import to_markdown
from mlacheck.report.model import Report
from mlacheck.report.sarif import to_sarif

FORMATS = ("json", "junit", "sarif", "github", "markdown", "html")


def check_writable(path: Path) -> None:
    """Refuse, before the run, an output path that cannot be written."""
    folder = path.parent if str(path.parent) else Path(".")
    if (
        path.is_dir()
        or not folder.is_dir()
        or not os.access(folder, os.W_OK)
        or (path.exists() and not os.access(path, os.W_OK))
    ):
        reason = (
            "is a folder" if path.is_dir() else "its folder does not exist" if not folder.is_dir() else "not writable"
        )
        raise MlacheckError(f"--output {path}: cannot write it ({reason}); give a writable file path")


def parse_output(spec: str) -> tuple[str, Path | None]:
    """ "FORMAT:PATH" -> (format, path); path None means stdout ("-"). Bad specs are one-line MlacheckErrors."""
    fmt, sep, path = spec.partition(":")
    if not sep or not path:
        raise MlacheckError(
            f"--output {spec}: write FORMAT:PATH, FORMAT one of {', '.join(FORMATS)} (PATH - is stdout)"
        )
    if fmt not in FORMATS:
        raise MlacheckError(f"--output {spec}: unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return fmt, None if path == "-" else Path(path)


def output_specs(outputs: list[str]) -> list[tuple[str, Path | None]]:
    """Parse and check every --output before anything runs; at most one may go to stdout."""
    specs = [parse_output(spec) for spec in outputs]
    if sum(path is None for _, path in specs) > 1:
        raise MlacheckError("--output: only one document can go to stdout (PATH -)")
    for _, path in specs:
        if path is not None:
            check_writable(path)
    return specs


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
    if fmt == "html":
        return to_html(report)
    raise MlacheckError(f"unknown output format {fmt!r}: choose one of {', '.join(FORMATS)}")


def write_outputs(
    report: Report | dict,
    specs: Iterable[tuple[str, Path | None]],
    stdout: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    sarif_anchor: str | None = None,
) -> None:
    """Write the report once per (format, path); github also appends the job summary to $GITHUB_STEP_SUMMARY."""
    stdout = sys.stdout if stdout is None else stdout
    environ = os.environ if environ is None else environ
    report = report.model_dump(mode="json") if isinstance(report, Report) else report
    for fmt, path in specs:
        spec = f"{fmt}:{path or '-'}"
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
