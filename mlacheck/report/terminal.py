"""The rich terminal report: header, one variant table per kernel family, findings, what was not seen, verdict.

It renders the report's JSON form, as every other format does; every piece of text is a `Text` (never
markup), so paths, commands and function names print as they are. It fits the console's width (80
columns and up): a finding is one line (code, family, the variant by the fields that tell it apart, the
stall or waste, the site), its diff one indented line and its fix another; column names wrap at their
underscores, never inside a word; long paths are shortened from the left. `detail` is "normal",
"quiet" (findings and the verdict only) or "verbose" (each finding's whole message, full key and stack,
every shared key field, the engine's upstream files).
"""

from __future__ import annotations

import re
import shlex

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mlacheck.keys import key_identity, key_text, spelling_text, value_text, varying_fields
from mlacheck.report import discovered
from mlacheck.report.common import MODELLED, is_modelled, program_runs, short_site, versions_text
from mlacheck.report.model import Report

MODE_NOTES = {
    "execute": ("kernels launch on the device", "kernels launch on the device"),
    "trace": (
        "launches replaced",
        "the library's dispatch runs on the device; the kernel launch is replaced and counted",
    ),
    "dry": (
        "no CUDA device; nothing launches",
        "no CUDA device: the library's dispatch runs up to and past its cache lookup; nothing launches",
    ),
    "program": ("a program's own dispatches", "a program's own dispatches, observed in each of its Python processes"),
    "mixed": (
        "families in different modes (each table says which)",
        "the device runs some families' kernels and not others: those executed here, the others were traced for "
        "their target in a process of their own (each family's table says which)",
    ),
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
CAPTION_LINES = 2  # shared key fields a table lists before "--verbose lists them all"
CODE_WIDTH = 6  # "MLA001"
GAP = 2  # spaces between table columns
PHASES = {"warmup": "warm-up", "capture": "capture", "preexisting": "before mlacheck", "inherited": "inherited"}
SITE_MIN = 30  # a finding's site keeps at least this much of its path, wrapping when the line is full


def render(report: Report | dict, console: Console, detail: str = "normal") -> None:
    """Print the whole report."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    data, quiet = discovered.shown(data)
    if detail != "quiet":
        console.print(_header(data, detail))
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
            measured = ((data.get("scenario") or {}).get("measured") or {}).get(family["name"])
            console.print(_variant_table(family, console, detail, measured))
            for note in family.get("notes") or []:
                console.print(Text(f"note: {note}", style="dim"))
        for line in _unwatched_lines(data.get("unwatched_compiles") or []):
            console.print(line)
        if len(data.get("ranks") or []) > 1:
            console.print(_ranks(data["ranks"]))
    if data["findings"]:
        console.print(_findings(data, console.width, detail))
    if detail != "quiet":
        for line in _unseen(data, detail):
            console.print(line)
    console.print(_verdict(data))


def _header(data: dict, detail: str) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    mode = data["mode"]
    note = MODE_NOTES.get(mode, ("", ""))[detail == "verbose"]
    rows = [
        ("versions", versions_text(data)),
        ("target arch", data["target_arch"] or "not set (no observed process named one)"),
        ("mode", f"{mode}: {note}" + (f" ({data['device']})" if data.get("device") else "")),
        (
            "compile",
            "real (every compile timed)" if data["compile_policy"] == "real" else "skip (keys only, nothing compiled)",
        ),
    ]
    scenario_rows = (data.get("scenario") or {}).get("header") or []
    rows += _program_rows(data) if mode == "program" else scenario_rows
    for name, value, *more in rows:
        text = Text(value)
        if detail == "verbose" and more and more[0]:
            text.append(f"\n{more[0]}", style="dim")
        grid.add_row(Text(name), text)
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


def _variant_table(family: dict, console: Console, detail: str, extra: dict | None = None) -> Table:
    """Fields that every variant shares go in the caption; the columns are the fields that vary, then how and where
    the variant was compiled, its dispatches, the columns a scenario measured (`extra`: {"columns", "variants"}),
    its status. A modelled site is marked * (the caption says what the scenario models)."""
    variants, width = family["variants"], console.width
    fields = family.get("key_fields") or (list(variants[0]["key"]) if variants else [])
    fields = fields + [name for v in variants for name in v["key"] if name not in fields]
    varying = varying_fields([v["key"] for v in variants], fields)
    shared = [name for name in fields if name not in varying and variants and name in variants[0]["key"]]
    spelled = len({spelling_text(v.get("spelling")) for v in variants}) > 1
    title = f"{family['name']}  ({family.get('version') or 'version unknown'})"
    if family.get("dispatch_calls"):
        title += f"  {family['dispatch_calls']} dispatch call(s)"
    if family.get("mode"):
        title += f"  [{family['mode']} on {family['target_arch']}]"
    cells = {key_identity(row["key"]): row["cells"] for row in (extra or {}).get("variants") or []}
    measured = list((extra or {}).get("columns") or []) if cells else []
    judged = any(v.get("numerics") for v in variants)
    columns = [
        *varying,
        *(["spelled"] if spelled else []),
        "compiled",
        "at",
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
    site = columns.index("at")
    shortest = max((len(short_site(v["compiled_by"], 0, "*")) for v in variants if v.get("compiled_by")), default=1)
    headers = _headers(columns, rows, width, site, min(shortest, SITE_MIN))
    widths = {i: _width(headers[i], rows, i) for i in range(len(columns)) if i != site}
    for i in sorted(widths, key=lambda i: _word(headers[i], rows, i) - widths[i]):  # the most to gain first
        if width - sum(w + GAP for w in widths.values()) >= min(shortest, SITE_MIN):
            break
        widths[i] = _word(headers[i], rows, i)  # this column wraps at its spaces: its widest word is enough
    room = width - sum(w + GAP for w in widths.values())
    modelled = next((v["compiled_by"] for v in variants if is_modelled(v.get("compiled_by"))), None)
    for row, variant in zip(rows, variants):
        compiled_by = variant.get("compiled_by")
        if detail == "verbose" or not compiled_by:
            row[site] = Text(compiled_by or "—")
        else:
            row[site] = Text(short_site(compiled_by, max(room, SITE_MIN // 2), "*"))
    caption = _caption([(name, variants[0]["key"][name]) for name in shared], console, detail)
    if modelled and detail != "verbose":
        note = Text(f"* {modelled[modelled.index(MODELLED) + 1 : -1]}: the scenario's step stands for this line")
        caption = note if caption is None else Text("\n").join([caption, note])
    table = Table(
        title=Text(title),
        title_justify="left",
        header_style="bold underline",
        caption=caption,
        caption_justify="left",
        box=None,
        pad_edge=False,
    )
    for index, (name, header) in enumerate(zip(columns, headers)):
        table.add_column(
            header,
            justify="right" if name in ("dispatches", "tokens") else "left",
            min_width=_width(Text(""), rows, index) if index == site else None,
            width=widths.get(index) if detail != "verbose" else None,
            overflow="fold",
        )
    for row in rows:
        table.add_row(*row)
    return table


def _caption(shared: list[tuple[str, object]], console: Console, detail: str) -> Text | None:
    """ "every variant: name=value, ..." in at most CAPTION_LINES lines (verbose: all of it)."""
    if not shared:
        return None
    items = [f"{name}={value_text(value)}" for name, value in shared]
    for count in range(len(items), 0, -1):
        more = len(items) - count
        text = Text("every variant: " + ", ".join(items[:count]) + (f", … ({more} more: --verbose)" if more else ""))
        if detail == "verbose" or len(text.wrap(console, console.width)) <= CAPTION_LINES:
            return text
    return Text(f"every variant shares {len(items)} fields (--verbose lists them)")


def _width(header: Text, rows: list[list[Text]], column: int) -> int:
    """The widest line of a column: its header's and its cells'."""
    lines = [*header.plain.splitlines(), *(line for row in rows for line in row[column].plain.splitlines())]
    return max((len(line) for line in lines), default=1)


def _word(header: Text, rows: list[list[Text]], column: int) -> int:
    """The longest word of a column (its narrowest width that breaks no word)."""
    lines = [*header.plain.splitlines(), *(line for row in rows for line in row[column].plain.splitlines())]
    return max((len(word) for line in lines for word in line.split()), default=1)


def _headers(columns: list[str], rows: list[list[Text]], width: int, flexible: int, room: int) -> list[Text]:
    """Column names; where the table would not fit, the names longer than their cells wrap at their underscores
    (never inside a word), the longest first, until `room` is left for the `flexible` column (a path)."""
    cells = [_width(Text(""), rows, i) for i in range(len(columns))]
    names = list(columns)
    while True:
        total = sum(_width(Text(name), rows, i) + GAP for i, name in enumerate(names) if i != flexible)
        candidates = [
            (len(name) - cells[i], i)
            for i, name in enumerate(names)
            if i != flexible and name == columns[i] and _wrap_name(name, cells[i]) != name
        ]
        if total + room <= width or not candidates:
            return [Text(name) for name in names]
        names[max(candidates)[1]] = _wrap_name(columns[max(candidates)[1]], cells[max(candidates)[1]])


def _wrap_name(name: str, width: int) -> str:
    """ "is_workspace_size_zero" -> "is_\\nworkspace_\\nsize_zero" at about `width`: breaks after underscores or
    spaces only."""
    parts = re.findall(r"[^_ ]+[_ ]?", name)
    width = max(width, *(len(part.rstrip()) for part in parts))
    lines, line = [], ""
    for part in parts:
        if line and len(line) + len(part.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += part
    return "\n".join([*lines, line.rstrip()])


def _variant_cells(variant: dict, varying: list[str], spelled: bool, measured: list[str], judged: bool) -> list[Text]:
    """A variant's row; the "at" cell (where it was compiled) is filled in once the other columns' widths are known."""
    compiled = []
    if variant["precompiled"]:
        phase = variant.get("compile_phase")
        compiled.append(PHASES.get(phase, phase or "yes") + _seconds(variant.get("compile_s")))
    if variant.get("serving_path_compile_s") is not None or variant["status"] == "serving-path compile":
        compiled.append("serving" + _seconds(variant.get("serving_path_compile_s")))
    dispatches = ("≥" if variant.get("dispatches_at_least") else "") + str(variant["dispatches"])
    return [
        *(Text(value_text(variant["key"].get(name))) for name in varying),
        *([Text(spelling_text(variant.get("spelling")))] if spelled else []),
        Text(", ".join(compiled) or "no", style="red" if variant["status"] == "serving-path compile" else ""),
        Text(""),
        Text(dispatches),
        *(Text(cell) for cell in measured),
        *([Text(_metrics(variant.get("numerics")))] if judged else []),
        Text(variant["status"], style=STATUS_STYLES.get(variant["status"], "")),
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


def _seconds(seconds: float | None) -> str:
    return f" {seconds:.1f} s" if seconds is not None else ""


def _metrics(metrics: dict | None) -> str:
    """ "name value, ...": a launched kernel's measured distance from the reference."""
    if metrics is None:
        return "—"
    return ", ".join(f"{name} {value:.4g}" for name, value in metrics.items() if value is not None)


def _findings(data: dict, width: int, detail: str) -> Group:
    """Per finding: the line (code, family, variant, what it costs, site), then the diff and the fix under it.
    Continuation lines stay under the text (a grid: the code in one column, the rest in the other)."""
    fields = {family["name"]: family.get("key_fields") or [] for family in data["families"]}
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    text_width = width - CODE_WIDTH - 1
    for finding in sorted(data["findings"], key=lambda finding: bool(finding.get("ignored"))):
        grid.add_row(
            Text(finding["code"], style="dim" if finding.get("ignored") else SEVERITY_STYLES[finding["severity"]]),
            _headline(finding, text_width, detail),
        )
        diff = finding.get("diff") or {}
        if diff:
            changes = ", ".join(f"{name} {value_text(old)} → {value_text(new)}" for name, (old, new) in diff.items())
            grid.add_row("", Text(f"diff {changes}", style="cyan"))
        if detail == "verbose":
            grid.add_row("", Text(finding["message"]))
            if finding.get("key"):
                grid.add_row("", Text(f"key {key_text(finding['key'], fields.get(finding['family']))}", style="dim"))
            for frame in finding.get("stack") or []:
                if frame != finding.get("site"):
                    grid.add_row("", Text(f"from {frame}", style="dim"))
        if finding.get("hint"):
            grid.add_row("", Text(f"fix: {finding['hint']}", style="dim"))
    return Group(Text("Findings", style="bold"), grid)


def _headline(finding: dict, width: int, detail: str) -> Text:
    """family, the variant and what it costs (the finding's summary; an older report's message), the process, the
    site shortened from the left to what is left of the line."""
    line = Text()
    if finding.get("ignored"):
        line.append("ignored ", style="dim")
    elif finding.get("baselined"):
        line.append("known (baseline) ", style="dim")
    line.append(f"{finding['family']} ")
    line.append(finding.get("summary") or finding["message"])
    process = finding.get("process")
    if process:
        rank = process.get("rank")
        line.append(f" [pid {process.get('pid')}{f', rank {rank}' if rank is not None else ''}]", style="cyan")
    site = finding.get("site")
    if site:
        room = width - len(line.plain) % width - len(" at ")
        room = room if room >= SITE_MIN else max(SITE_MIN, width // 2)  # the site wraps to a line of its own
        line.append(" at ")
        line.append(site if detail == "verbose" else short_site(site, max(room, SITE_MIN)), style="dim")
    return line


def _unseen(data: dict, detail: str) -> list[Text]:
    """What the run did not see: the incomplete reasons, the contracts it could not evaluate (one line; --verbose:
    one each), lost lines, errors."""
    lines = [Text(f"incomplete: {reason}", style="magenta") for reason in data.get("incomplete") or []]
    unchecked = data.get("not_checked") or []
    if detail == "verbose":
        lines += [Text(f"not checked: {line}", style="dim") for line in unchecked]
    elif unchecked:
        needed = data.get("context_needed") or []
        give = f": give --context {' '.join(f'{name}=...' for name in needed)}" if needed else ""
        lines.append(
            Text(
                f"not checked: {len(unchecked)} contract(s) lack run context{give} (--verbose lists them)", style="dim"
            )
        )
    lines += [
        Text(f"unreadable trace line skipped (the rest of its trace was read): {line}", style="magenta")
        for line in data.get("bad_lines") or []
    ]
    lines += [
        Text(f"internal error in capture (the program went on): {error}", style="magenta")
        for error in data.get("internal_errors") or []
    ]
    return lines


def _unwatched_lines(compiles: list[dict]) -> list[Text]:
    """One line per kernel and phase of the compiles no watched family accounted for."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    for compiled in compiles:
        grouped.setdefault((compiled["kernel"], compiled["phase"]), []).append(compiled)
    lines = []
    for (kernel, phase), group in grouped.items():
        seconds = sum(c.get("seconds") or 0.0 for c in group)
        where = {"unknown": "before any serving start was marked (mark it to have these judged)"}.get(phase, phase)
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
        + (f", {counts.get('ignored')} ignored" if counts.get("ignored") else "")
        + (" (strict: warnings fail)" if data.get("strict") else "")
    )
    if stall:
        text.append(f"; {stall:.1f} s of serving-path compile")
    if wasted:
        text.append(f"; {wasted:.1f} s of warm-up wasted")
    text.append(f" — {data['exit_reason']}", style="bold")
    return text
