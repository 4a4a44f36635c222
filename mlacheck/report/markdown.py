"""The Markdown report (for a PR comment or a CI job summary): verdict, run facts, variants, findings."""

from __future__ import annotations

import shlex

from mlacheck.keys import value_text, varying_fields
from mlacheck.report.common import process_text, program_runs, severity, summary_line, versions_text
from mlacheck.report.common import state as state_of


def cell(value: object) -> str:
    """A table cell: pipes escaped, line breaks as <br>, None as an em dash."""
    if value is None or value == "":
        return "—"
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    return [
        "| " + " | ".join(cell(name) if name else "" for name in header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
        *("| " + " | ".join(cell(value) for value in row) + " |" for row in rows),
    ]


def _inline(text: object) -> str:
    return " ".join(str(text).split())


def to_markdown(report: dict) -> str:
    """The whole report as GitHub-flavoured Markdown."""
    lines = [f"## mlacheck {summary_line(report)}", ""]
    lines += _table(["", ""], _facts(report)) + [""]
    for family in report.get("families") or []:
        lines += _family(family)
    if len(report.get("ranks") or []) > 1:
        lines += _ranks(report["ranks"])
    findings = report.get("findings") or []
    if findings:
        lines += ["### Findings", ""]
        for finding in findings:
            lines += _finding(finding)
        lines.append("")
    unseen = [
        *(f"incomplete: {line}" for line in report.get("incomplete") or []),
        *(f"not checked: {line}" for line in report.get("not_checked") or []),
        *(f"unreadable trace line skipped: {line}" for line in report.get("bad_lines") or []),
    ]
    if unseen:
        lines += ["### What this run did not see", ""] + [f"- {_inline(line)}" for line in unseen] + [""]
    errors = report.get("internal_errors") or []
    if errors:
        lines += ["### Internal errors in capture (the program went on)", ""]
        lines += [f"- {_inline(error)}" for error in errors] + [""]
    if report.get("exit_reason"):
        lines.append(f"**{_inline(report['exit_reason'])}**")
    return "\n".join(lines).rstrip("\n") + "\n"


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
        ["compile", report.get("compile_policy")],
        ["versions", versions_text(report)],
    ]
    rows += [
        [name, f"{text} ({more[0]})" if more and more[0] else text]
        for name, text, *more in scenario.get("header") or []
    ]
    for command, ended in program_runs(report):
        rows.append(["program", f"`{shlex.join(command)}` ({ended})"])
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
    lines = [f"### {family.get('name')} ({family.get('version') or 'version unknown'})", ""]
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
        lines += [
            "",
            "every variant: " + ", ".join(f"`{name}={value_text(variants[0]['key'].get(name))}`" for name in shared),
        ]
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
            row.get("status"),
        ]
        for row in ranks
    ]
    header = ["run", "host", "rank", "processes", "dispatches", "serving-path compiles", "unobserved", "status"]
    return ["### Per rank", "", *_table(header, rows), ""]


def _finding(finding: dict) -> list[str]:
    state = f" ({state_of(finding)})" if state_of(finding) else ""
    where = ", ".join(
        part for part in (process_text(finding), f"at `{finding['site']}`" if finding.get("site") else "") if part
    )
    lines = [
        f"- **{finding.get('code')}** {finding.get('name', '')} [{severity(finding)}]{state}"
        + (f" {where}" if where else "")
        + f": {_inline(finding.get('message', ''))}"
    ]
    for name, (old, new) in (finding.get("diff") or {}).items():
        lines.append(f"  - diff `{name}`: precompiled `{value_text(old)}` → dispatched `{value_text(new)}`")
    if finding.get("hint"):
        lines.append(f"  - fix: {_inline(finding['hint'])}")
    return lines


def render(report: dict, options: object = None) -> str:
    """The renderer protocol (report/formats.py)."""
    return to_markdown(report)
