"""The rich terminal report: header, one variant table per kernel family, findings, what was not seen, verdict.

It renders the report's JSON form, as every other format does; every piece of text is a `Text` (never
markup), so paths, commands and function names print as they are.
"""

from __future__ import annotations

import shlex

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mlacheck.keys import key_identity, spelling_text, value_text, varying_fields
from mlacheck.report import discovered
from mlacheck.report.common import program_runs, versions_text
from mlacheck.report.model import Report

MODE_NOTES = {
    "execute": "kernels launch on the device",
    "trace": "the library's dispatch runs on the device; the kernel launch is replaced and counted",
    "dry": "no CUDA device: the library's dispatch runs up to and past its cache lookup; nothing launches",
    "program": "a program's own dispatches, observed in each of its Python processes",
}
STATUS_STYLES = {
    "ok": "green",
    "captured": "green",
    "serving-path compile": "bold red",
    "dead warm-up": "yellow",
    "unverified": "magenta",
    "not compiled": "dim",
    "unused": "dim",
}
SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "note": "magenta"}
VERDICT_STYLES = {"pass": "bold green", "fail": "bold red", "incomplete": "bold magenta"}


def render(report: Report | dict, console: Console) -> None:
    """Print the whole report."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    data, quiet = discovered.shown(data)
    console.print(_header(data))
    if quiet:
        console.print(Text(quiet, style="dim"))
    for family in data["families"]:
        if not family["variants"]:
            console.print(
                Text(
                    f"{family['name']}  ({family.get('version') or 'version unknown'}): loaded; nothing was "
                    "compiled or looked up",
                    style="dim",
                )
            )
            continue
        console.print(_variant_table(family, ((data.get("scenario") or {}).get("measured") or {}).get(family["name"])))
        for note in family.get("notes") or []:
            console.print(Text(f"note: {note}", style="dim"))
    for line in _unwatched_lines(data.get("unwatched_compiles") or []):
        console.print(line)
    if len(data.get("ranks") or []) > 1:
        console.print(_ranks(data["ranks"]))
    if data["findings"]:
        console.print(_findings(data["findings"]))
    for reason in data.get("incomplete") or []:
        console.print(Text(f"incomplete: {reason}", style="magenta"))
    for line in data.get("not_checked") or []:
        console.print(Text(f"not checked: {line}", style="dim"))
    for line in data.get("bad_lines") or []:
        console.print(Text(f"unreadable trace line skipped (the rest of its trace was read): {line}", style="magenta"))
    for error in data.get("internal_errors") or []:
        console.print(Text(f"internal error in capture (the program went on): {error}", style="magenta"))
    console.print(_verdict(data))


def _header(data: dict) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    mode = data["mode"]
    rows = [
        ("versions", versions_text(data)),
        ("target arch", data["target_arch"] or "not set (no observed process named one)"),
        ("mode", f"{mode}: {MODE_NOTES.get(mode, '')}" + (f" ({data['device']})" if data.get("device") else "")),
        (
            "compile",
            "real (every compile timed)" if data["compile_policy"] == "real" else "skip (keys only, nothing compiled)",
        ),
    ]
    rows += _program_rows(data) if mode == "program" else (data.get("scenario") or {}).get("header") or []
    for name, value in rows:
        grid.add_row(Text(name), Text(value))
    return Panel(grid, title="mlacheck report", title_align="left")


def _program_rows(data: dict) -> list[tuple[str, str]]:
    ended = [f"{shlex.join(command) or '?'}: {status}" for command, status in program_runs(data)]
    processes = data.get("processes") or []
    described = ", ".join(
        f"pid {p['pid']}"
        + (f" rank {p['rank']}" if p.get("rank") is not None else "")
        + (f" (forked from {p['forked_from']})" if p.get("forked_from") else "")
        + ("" if p.get("exited") else " (did not exit normally)")
        + (" (trace cut short)" if p.get("truncated") else "")
        for p in processes
    )
    return [
        ("program", "\n".join(ended)),
        ("processes", f"{len(processes)}: {described}" if processes else "none wrote a trace"),
    ]


def _variant_table(family: dict, extra: dict | None = None) -> Table:
    """Fields that every variant shares go in the caption; the columns are the fields that vary, then what the
    variant's compiles and dispatches were, then the columns a scenario measured (`extra`: {"columns", "variants"})."""
    variants = family["variants"]
    fields = family.get("key_fields") or (list(variants[0]["key"]) if variants else [])
    fields = fields + [name for v in variants for name in v["key"] if name not in fields]
    varying = varying_fields([v["key"] for v in variants], fields)
    shared = [name for name in fields if name not in varying and variants and name in variants[0]["key"]]
    spelled = len({spelling_text(v.get("spelling")) for v in variants}) > 1
    caption = ", ".join(f"{name}={value_text(variants[0]['key'][name])}" for name in shared)
    title = f"{family['name']}  ({family.get('version') or 'version unknown'})"
    if family.get("dispatch_calls"):
        title += f"  {family['dispatch_calls']} dispatch call(s)"
    table = Table(
        title=Text(title),
        title_justify="left",
        header_style="bold",
        caption_justify="left",
        caption=Text(f"every variant: {caption}") if caption else None,
    )
    cells = {key_identity(row["key"]): row["cells"] for row in (extra or {}).get("variants") or []}
    measured = list((extra or {}).get("columns") or []) if cells else []
    judged = any(v.get("numerics") for v in variants)
    columns = [
        *varying,
        *(["spelled"] if spelled else []),
        "precompiled",
        "compiled by",
        "dispatches",
        *measured,
        *(["kernel vs reference"] if judged else []),
        "status",
    ]
    rows = [
        _variant_cells(
            variant, varying, spelled, cells.get(key_identity(variant["key"]), ["—"] * len(measured)), judged
        )
        for variant in variants
    ]
    for name in columns:
        table.add_column(Text(name), justify="right" if name in ("dispatches", "tokens") else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _variant_cells(variant: dict, varying: list[str], spelled: bool, measured: list[str], judged: bool) -> list[Text]:
    if variant["precompiled"]:
        how = {"capture": "captured", "preexisting": "before mlacheck", "inherited": "inherited (fork)"}.get(
            variant.get("compile_phase"), "yes"
        )
        precompiled = how + (f", {variant['compile_s']:.1f} s" if variant.get("compile_s") is not None else "")
    else:
        precompiled = "no"
    status = variant["status"]
    if variant.get("serving_path_compile_s") is not None:
        status += f" ({variant['serving_path_compile_s']:.1f} s stall)"
    dispatches = ("≥" if variant.get("dispatches_at_least") else "") + str(variant["dispatches"])
    return [
        *(Text(value_text(variant["key"].get(name))) for name in varying),
        *([Text(spelling_text(variant.get("spelling")))] if spelled else []),
        Text(precompiled),
        Text(variant.get("compiled_by") or "—"),
        Text(dispatches),
        *(Text(cell) for cell in measured),
        *([Text(_metrics(variant.get("numerics")))] if judged else []),
        Text(status, style=STATUS_STYLES.get(variant["status"], "")),
    ]


RANK_STYLES = {"serving-path compile": "bold red", "unobserved": "magenta", "never dispatched": "yellow", "ok": "green"}


def _ranks(ranks: list[dict]) -> Table:
    """The per-rank view: which host and rank compiled on the serving path, ran unobserved, never dispatched."""
    table = Table(title=Text("per rank"), title_justify="left", header_style="bold")
    for name in ("run", "host", "rank", "processes", "dispatches", "serving-path compiles", "unobserved", "status"):
        table.add_column(Text(name), justify="right" if name in ("dispatches", "serving-path compiles") else "left")
    for row in ranks:
        table.add_row(
            Text(row.get("run") or "—"),
            Text(row.get("host") or "—"),
            Text("—" if row.get("rank") is None else str(row["rank"])),
            Text(", ".join(map(str, row.get("pids") or [])) or "—"),
            Text(str(row.get("dispatches", 0))),
            Text(str(row.get("serving_path_compiles", 0))),
            Text(", ".join(map(str, row.get("unobserved_pids") or [])) or "—"),
            Text(row.get("status", ""), style=RANK_STYLES.get(row.get("status"), "")),
        )
    return table


def _metrics(metrics: dict | None) -> str:
    """ "name value, ...": a launched kernel's measured distance from the reference."""
    if metrics is None:
        return "—"
    return ", ".join(f"{name} {value:.4g}" for name, value in metrics.items() if value is not None)


def _findings(findings: list[dict]) -> Group:
    parts = [Text("Findings", style="bold")]
    for finding in findings:
        line = Text()
        if finding.get("baselined"):
            line.append("known (in the baseline) ", style="dim")
        line.append(f"{finding['code']} {finding['name']} ", style=SEVERITY_STYLES[finding["severity"]])
        line.append(f"[{finding['severity']}] ", style="dim")
        line.append(finding["message"])
        process = finding.get("process")
        if process:
            rank = process.get("rank")
            line.append(f" [pid {process.get('pid')}{f', rank {rank}' if rank is not None else ''}]", style="cyan")
        parts.append(line)
        for name, (old, new) in (finding.get("diff") or {}).items():
            driven = finding.get("drivers", {}).get(name)
            parts.append(
                Text(
                    f"    diff {name}: precompiled {value_text(old)} → dispatched {value_text(new)}"
                    + (f"  (follows {', '.join(driven)})" if driven else ""),
                    style="cyan",
                )
            )
        if finding.get("site"):
            parts.append(Text(f"    at {finding['site']}", style="dim"))
        parts.append(Text(f"    fix: {finding['hint']}", style="dim"))
    return Group(*parts)


def _unwatched_lines(compiles: list[dict]) -> list[Text]:
    """One line per kernel and phase of the compiles no watched family accounted for."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    for compiled in compiles:
        grouped.setdefault((compiled["kernel"], compiled["phase"]), []).append(compiled)
    lines = []
    for (kernel, phase), group in grouped.items():
        seconds = sum(c.get("seconds") or 0.0 for c in group)
        where = {"unmarked": "before any serving start was marked (mark it to have these judged)"}.get(phase, phase)
        lines.append(
            Text(
                f"unwatched compile: {kernel} ({group[0]['net']}), {len(group)} in {where}, {seconds:.1f} s",
                style="bold red" if phase == "serving" else "dim",
            )
        )
    return lines


def _verdict(data: dict) -> Text:
    counts = data["counts"]
    variants = [v for family in data["families"] for v in family["variants"]]
    stall = sum(v.get("serving_path_compile_s") or 0.0 for v in variants)
    wasted = sum(v.get("compile_s") or 0.0 for v in variants if v["status"] == "dead warm-up")
    text = Text("verdict: ")
    text.append(data["verdict"].upper(), style=VERDICT_STYLES[data["verdict"]])
    text.append(
        f"  {counts['errors']} error(s), {counts['warnings']} warning(s)"
        + (f", {counts['baselined']} known from the baseline" if counts["baselined"] else "")
        + (" (strict: warnings fail)" if data.get("strict") else "")
    )
    if stall:
        text.append(f"; {stall:.1f} s of serving-path compile")
    if wasted:
        text.append(f"; {wasted:.1f} s of warm-up wasted")
    text.append(f" — {data['exit_reason']}", style="bold")
    return text
