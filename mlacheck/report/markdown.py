"""The Markdown report (for a PR comment or a CI job summary): verdict, run facts, variants, findings.

Every string from the run is text, never Markdown or HTML: its control characters escaped (`common.printable`),
`<`, `>` and `&` as entities, Markdown's own characters (`\\ ` * [ ] |`) behind a backslash; in a code span it is
fenced by more backticks than it holds (and is text where it holds `<`, `>` or `&`). A finding is its summary (the variant, what it costs, where), its diff, and
the fix once per code.
"""

from __future__ import annotations

import re
import shlex

from mlacheck.codes import CODES
from mlacheck.keys import value_text, varying_fields
from mlacheck.report.common import (
    compile_text,
    printable,
    process_text,
    program_runs,
    severity,
    slowest_step,
    summary_line,
    versions_text,
)
from mlacheck.report.common import state as state_of

SPECIAL = re.compile(r"([\\`*\[\]|])")


def text(value: object) -> str:
    """A string from the run as Markdown text that shows it as it is."""
    escaped = printable(str(value)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return SPECIAL.sub(r"\\\1", escaped)


def code(value: object) -> str:
    """A string from the run as a code span, fenced by one more backtick than its longest run of them; one holding
    `<`, `>` or `&` as text instead (a code span cannot hold an entity, and its raw HTML would reach a lenient
    renderer)."""
    content = printable(str(value))
    if re.search("[<>&]", content):
        return text(content)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", content)), default=0) + 1)
    padded = f" {content} " if content.startswith("`") or content.endswith("`") else content
    return f"{fence}{padded}{fence}"


def cell(value: object) -> str:
    """A table cell: text, None as an em dash."""
    if value is None or value == "":
        return "—"
    return text(value)


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    return [
        "| " + " | ".join(cell(name) for name in header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
        *("| " + " | ".join(cell(value) for value in row) + " |" for row in rows),
    ]


def to_markdown(report: dict) -> str:
    """The whole report as GitHub-flavoured Markdown."""
    lines = [f"## mlacheck {text(summary_line(report))}", ""]
    lines += _table(["run", "facts"], _facts(report)) + [""]
    for family in report.get("families") or []:
        lines += _family(family)
    if len(report.get("ranks") or []) > 1:
        lines += _ranks(report["ranks"])
    lines += _findings(report.get("findings") or []) + _unseen(report)
    if report.get("exit_reason"):
        lines.append(f"**{text(report['exit_reason'])}**")
    return "\n".join(lines).rstrip("\n") + "\n"


def _findings(findings: list[dict]) -> list[str]:
    """The findings section: each finding, then the fix of each code once; none without findings."""
    if not findings:
        return []
    lines = ["### Findings", ""]
    for finding in findings:
        lines += _finding(finding)
    codes = dict.fromkeys(f.get("code") for f in findings if not f.get("ignored") and f.get("code") in CODES)
    lines += [f"- fix {name}: {text(CODES[name].hint)} (`mlacheck rule {name}`)" for name in codes]
    return lines + [""]


def _unseen(report: dict) -> list[str]:
    """What the run did not see (incomplete reasons, each unreadable trace line among them, and what was not checked),
    then the internal errors of capture: a section each, where there are any."""
    unseen = [
        *(f"incomplete: {line}" for line in report.get("incomplete") or []),
        *(f"not checked: {line}" for line in report.get("not_checked") or []),
    ]
    lines = []
    if unseen:
        lines += ["### What this run did not see", ""] + [f"- {text(line)}" for line in unseen] + [""]
    errors = report.get("internal_errors") or []
    if errors:
        lines += ["### Internal errors in capture (the program went on)", ""]
        lines += [f"- {text(error)}" for error in errors] + [""]
    return lines


def _facts(report: dict) -> list[list[object]]:
    scenario = report.get("scenario") or {}
    rows: list[list[object]] = [
        [
            "mode",
            report.get("mode") + (f" ({report['device']})" if report.get("device") else "")
            if report.get("mode")
            else None,
        ],
        ["target arch", report.get("target_arch")],
        ["compile", compile_text(report) if report.get("compile_policy") else None],
        ["versions", versions_text(report)],
    ]
    rows += [
        [name, f"{value} ({more[0]})" if more and more[0] else value]
        for name, value, *more in scenario.get("header") or []
    ]
    for command, ended in program_runs(report):
        rows.append(["program", f"{shlex.join(command)} ({ended})"])
    processes = report.get("processes") or []
    if processes:
        rows.append(
            [
                "processes",
                ", ".join(
                    f"pid {p.get('pid')}"
                    + (f" rank {p['rank']}" if p.get("rank") is not None else "")
                    + (" (trace truncated)" if p.get("truncated") else "")
                    for p in processes
                ),
            ]
        )
    if report.get("strict"):
        rows.append(["strict", "warnings fail the run"])
    return [row for row in rows if row[1] is not None]


def _family(family: dict) -> list[str]:
    variants = family.get("variants") or []
    fields = list(family.get("key_fields") or []) or list(variants[0]["key"] if variants else [])
    varying = varying_fields([v.get("key", {}) for v in variants], fields) or fields
    shared = [name for name in fields if name not in varying]
    lines = [f"### {text(family.get('name'))} ({text(family.get('version') or 'version unknown')})", ""]
    rows = []
    for variant in variants:
        if variant.get("precompiled"):
            precompiled = f"yes, {variant['compile_s']:.1f} s" if variant.get("compile_s") is not None else "yes"
        else:
            precompiled = "no"
        status = variant.get("status")
        if variant.get("serving_path_compile_s") is not None:
            status = f"{status} ({variant['serving_path_compile_s']:.1f} s stall)"
        rows.append(
            [
                *(value_text(variant.get("key", {}).get(name)) for name in varying),
                precompiled,
                variant.get("compiled_by"),
                variant.get("dispatches"),
                status,
            ]
        )
    lines += _table([*varying, "precompiled", "compiled by", "dispatches", "status"], rows)
    if shared and variants:
        values = ", ".join(code(f"{name}={value_text(variants[0]['key'].get(name))}") for name in shared)
        lines += ["", f"every variant: {values}"]
    return lines + [""]


def _ranks(ranks: list[dict]) -> list[str]:
    rows = [
        [
            row.get("run"),
            row.get("host"),
            row.get("rank"),
            ", ".join(map(str, row.get("pids") or [])),
            row.get("dispatches", 0),
            row.get("serving_path_compiles", 0),
            ", ".join(map(str, row.get("unobserved_pids") or [])),
            slowest_step(row, ranks),
            row.get("status"),
        ]
        for row in ranks
    ]
    header = ["run", "host", "rank", "processes", "dispatches", "serving-path compiles", "unobserved", "slowest step"]
    header.append("status")
    return ["### Per rank", "", *_table(header, rows), ""]


def _finding(finding: dict) -> list[str]:
    """ "- **CODE** name [severity] (state) process, at `site`: the family and its summary", then its diff."""
    state = f" ({state_of(finding)})" if state_of(finding) else ""
    where = ", ".join(
        part for part in (process_text(finding), f"at {code(finding['site'])}" if finding.get("site") else "") if part
    )
    what = finding.get("summary") or finding.get("message", "")
    lines = [
        f"- **{text(finding.get('code'))}** {text(finding.get('name', ''))} [{severity(finding)}]{state}"
        + (f" {where}" if where else "")
        + f": {text(finding.get('family', ''))} {text(what)}"
    ]
    for name, (old, new) in (finding.get("diff") or {}).items():
        lines.append(f"  - diff {code(name)}: precompiled {code(value_text(old))} → dispatched {code(value_text(new))}")
    return lines


def render(report: dict, options: object = None) -> str:
    """The renderer protocol (report/formats.py)."""
    return to_markdown(report)
