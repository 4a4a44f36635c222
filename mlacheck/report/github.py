"""GitHub Actions: workflow-command annotations on stdout and a Markdown job summary.

Each new finding is one `::error` / `::warning` line titled "CODE name" (plus "[rank R (pid P)]"
for a finding from one process of several), with file= and line= from its site when that is a file inside the
user's repository (`common.Repository`); any other site is named in the message.
Findings a baseline marked get no annotation (the summary lists them). Each reason the run is incomplete is an
`::error` titled "mlacheck incomplete" (with --allow-incomplete too: the exit code may pass, the annotation says
what was not seen); internal capture errors are `::warning` lines. The summary is the Markdown report, appended to
the file named by GITHUB_STEP_SUMMARY.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mlacheck.errors import MlacheckError
from mlacheck.report.common import Repository, is_new, level, printable_read, process_text
from mlacheck.report.markdown import to_markdown

READS_PRINTABLE = True  # (report/formats.py)


def escape_data(text: str) -> str:
    """A command's message: % -> %25, CR -> %0D, LF -> %0A."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property value: as the message, and also : -> %3A, , -> %2C."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **properties: object) -> str:
    """`::level key=value,...::message`, properties that are None left out."""
    given = ",".join(f"{name}={escape_property(str(value))}" for name, value in properties.items() if value is not None)
    return f"::{level}{' ' + given if given else ''}::{escape_data(message)}"


def annotation(finding: dict, repository: Repository | None = None, strict: object = False) -> str:
    """One finding as an ::error / ::warning line (::error for one that fails the run: under --strict, `strict`, a new
    warning too)."""
    location = (repository or Repository.here()).locate(finding.get("site"))
    file, line = location if location else (None, None)
    message = finding.get("message", "")
    if finding.get("site") and location is None:
        message += f"\nat {finding['site']}"
    if finding.get("hint"):
        message += f"\nfix: {finding['hint']}"
    kind = {"error": "error", "warning": "warning"}.get(level(finding, strict), "notice")
    title = f"{finding.get('code', '')} {finding.get('name', '')}".strip()
    if process_text(finding):
        title += f" [{process_text(finding)}]"
    return command(kind, message, file=file, line=line, title=title)


def to_github(report: dict, repository: Repository | None = None) -> str:
    """The annotation lines for the report's new findings, incomplete reasons and internal errors; every string of the
    run with its control characters escaped (a log viewer is a terminal too)."""
    report = printable_read(report)
    repository = repository or Repository.here()
    strict = report.get("strict")
    lines = [annotation(f, repository, strict) for f in report.get("findings") or [] if is_new(f)]
    lines += [command("error", reason, title="mlacheck incomplete") for reason in report.get("incomplete") or []]
    lines += [
        command("warning", f"internal error in capture (the program went on): {error}", title="mlacheck internal error")
        for error in report.get("internal_errors") or []
    ]
    return "".join(line + "\n" for line in lines)


def render(report: dict, options: object = None) -> str:
    """The renderer protocol (report/formats.py): the annotation lines."""
    return to_github(report)


def publish(report: dict, environ: Mapping[str, str] | None = None) -> None:
    """Append the job summary (the Markdown report) to $GITHUB_STEP_SUMMARY when it is set."""
    summary = (os.environ if environ is None else environ).get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(to_markdown(report) + "\n")
        except OSError as exc:
            raise MlacheckError(
                f"GITHUB_STEP_SUMMARY={summary}: cannot append the job summary: {exc.strerror or exc}"
            ) from None
