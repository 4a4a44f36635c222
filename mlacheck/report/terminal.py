"""The terminal report: header, a variant table per kernel family, findings, what was not seen, the verdict.

It renders the report's JSON form, as every other format does, after `printable_report` has escaped every
control character of the run's strings; every piece of text is a `Text` (never markup). Everything fits the
console's width from 60 columns up without splitting a word (report/layout.py: a table changes shape rather than
cut a cell), and a finding takes at most two lines at 80 columns (report/findings_text.py). `detail` is "normal",
"quiet" (findings, incomplete reasons and the verdict only) or "verbose" (each finding's whole message, key and stack, every shared
key field, whole paths).
"""

from __future__ import annotations

import re
import shlex

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from mlacheck.keys import key_identity, spelling_text, value_text, varying_fields
from mlacheck.report import discovered
from mlacheck.report.common import (
    MODELLED,
    compile_text,
    is_modelled,
    printable,
    printable_read,
    program_runs,
    short_site,
    slowest_step,
    versions_text,
)
from mlacheck.report.findings_text import findings_lines
from mlacheck.report.layout import Column, fit, wrap

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
RANK_STYLES = {
    "serving-path compile": "bold red",
    "cut short": "magenta",
    "unobserved": "magenta",
    "never dispatched": "yellow",
    "ok": "green",
}
VERDICT_STYLES = {"pass": "bold green", "fail": "bold red", "incomplete": "bold magenta"}
CAPTION_LINES = 2  # shared key fields a table lists before "--verbose lists them all"
WASTED = re.compile(r"\(\d+(?:\.\d+)? s wasted\)$")  # how an MLA002 summary ends where the time is known wasted
PHASES = {
    "warmup": "warm-up",
    "capture": "capture",
    "preexisting": "before mlacheck",
    "inherited": "inherited",
    "borrowed": "another key's build",
}
SITE_WIDTH = 30  # a site in a table keeps about this much of its path ("…/paged/tokenspeed_mla.py:724*")
NAME_WIDTH = 18  # the header's names column, at most ("library warnings" and two spaces)


def render(report, console: Console, detail: str = "normal") -> None:
    """Print the whole report."""
    whole = report.model_dump(mode="json") if hasattr(report, "model_dump") else report
    data, quiet = discovered.shown(whole, summarise=detail != "verbose")
    data, quiet = printable_read(data), quiet and printable(quiet)  # (what is shown: a summary of 10^5 is small)
    width = max(console.width, 40)
    say = _printer(console)
    modelled = _modelled(data)
    if detail != "quiet":
        console.print(_header(data, detail, width))
        if quiet:
            say(wrap(Text(quiet, style="dim"), width))
        for family in data["families"]:
            measured = ((data.get("scenario") or {}).get("measured") or {}).get(family["name"])
            say(_family(family, width, detail, measured))
        for line in _unwatched(data.get("unwatched_compiles") or []):
            say(wrap(line, width, 0, 4))
        if len(data.get("ranks") or []) > 1:
            say(_ranks(data["ranks"], width))
    if data["findings"]:
        say(findings_lines(data, width, detail))
    if modelled and (data["findings"] or detail != "quiet"):
        say(wrap(Text(f"* {modelled}: the scenario's step stands for this line", style="dim"), width, 0, 2))
    for line in _unseen(data, detail):  # quiet: the incomplete reasons still (the verdict line points at them)
        if detail != "quiet" or line.plain.startswith("incomplete: "):
            say(wrap(line, width, 0, 4))
    say(wrap(_verdict(data, whole), width, 0, 4))


def _printer(console: Console):
    def say(lines: list[Text]) -> None:
        if lines:  # one print of the lines (rich's print costs as much as a line's layout)
            console.print(Text("\n").join(lines), no_wrap=True, overflow="ignore", crop=False)

    return say


def _modelled(data: dict) -> str | None:
    """ "modelled on ENGINE VERSION" of the first modelled site the report shows (the `*` after a site)."""
    sites = [f.get("site") for f in data["findings"]]
    sites += [v.get("compiled_by") for family in data["families"] for v in family["variants"]]
    site = next((site for site in sites if is_modelled(site)), None)
    return site[site.index(MODELLED) + 1 : -1] if site else None


def _header(data: dict, detail: str, width: int) -> Panel:
    mode = data["mode"]
    note = MODE_NOTES.get(mode, ("", ""))[detail == "verbose"]
    rows = [
        ("versions", versions_text(data), None),
        ("target arch", data["target_arch"] or "not set (no observed process named one)", None),
        ("mode", f"{mode}: {note}" + (f" ({data['device']})" if data.get("device") else ""), None),
        ("compile", compile_text(data), None),
    ]
    scenario_rows = (data.get("scenario") or {}).get("header") or []
    rows += (
        _program_rows(data)
        if mode == "program"
        else [(row[0], row[1], (row[2:] or [None])[0]) for row in scenario_rows]
    )
    inner = width - 4  # the panel's border and padding
    names = min(max(len(name) for name, _, _ in rows) + 2, NAME_WIDTH)
    lines: list[Text] = []
    for name, value, more in rows:
        text = Text(f"{name:<{names}}", style="bold") + Text(value)
        if detail == "verbose" and more:
            text.append(f"\n{more}", style="dim")
        for part in text.split("\n"):
            lines += wrap(part if part.plain.startswith(name) else Text(" " * names) + part, inner, 0, names)
    return Panel(Text("\n").join(lines), title="mlacheck report", title_align="left", width=min(width, inner + 4))


def _program_rows(data: dict) -> list[tuple[str, str, None]]:
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
        *(("program", line, None) for line in ended or ["?"]),
        ("processes", f"{len(processes)}: {described}" if processes else "none observed (no trace was read)", None),
    ]


def _family(family: dict, width: int, detail: str, measured: dict | None) -> list[Text]:
    """A family's title (name, version, what its dispatch calls were), its variant table, and under it what every
    variant shares: key fields, the site they were compiled at, notes."""
    title = Text(f"{family['name']}  ({family.get('version') or 'version unknown'})", style="bold")
    variants = family["variants"]
    if not variants:
        title.append(": loaded; nothing was compiled or looked up", style="dim")
        return wrap(title, width, 0, 4)
    _title_tail(title, family)
    fields = family.get("key_fields") or list(variants[0]["key"])
    fields = fields + [name for v in variants for name in v["key"] if name not in fields]
    varying = varying_fields([v["key"] for v in variants], fields)
    shared = [name for name in fields if name not in varying and name in variants[0]["key"]]
    sites = {v.get("compiled_by") for v in variants if v.get("compiled_by")}
    columns = _columns(family, varying, measured, detail, sites)
    lines = wrap(title, width, 0, 4) + fit(columns, width)
    caption = _caption([(name, variants[0]["key"][name]) for name in shared], width, detail)
    caption += _shared_site(variants, sites, width, detail)
    caption += [Text(f"note: {note}", style="dim") for note in family.get("notes") or []]
    return lines + [line for text in caption for line in wrap(text, width, 0, 4)]


def _title_tail(title: Text, family: dict) -> None:
    """Add to a family's title the mode it ran in (where families differ) and what its dispatch calls were."""
    if family.get("mode"):
        title.append(f"  [{family['mode']} on {family['target_arch']}]")
    calls = _calls(family)
    if calls:
        title.append(f"  {calls}", style="dim")


def _shared_site(variants: list[dict], sites: set, width: int, detail: str) -> list[Text]:
    """ "compiled at SITE" where every variant that has a site has the same one ("precompiled" where only the
    precompiled ones have one)."""
    if len(sites) != 1:
        return []
    [site] = sites
    shown = site if detail == "verbose" else short_site(site, width - 20, "*")
    every = all(v.get("compiled_by") for v in variants)
    return [Text(f"{'compiled' if every else 'precompiled'} at {shown}")]


def _calls(family: dict) -> str:
    """What the family's dispatch calls were, adding up: "139 dispatch call(s): 8 serving (the dispatches column's
    sum), 3 in warm-up, 128 in CUDA-graph capture"."""
    total = family.get("dispatch_calls") or 0
    if not total:
        return ""
    variants = family["variants"]
    parts = {
        "serving": sum(v.get("dispatches", 0) for v in variants),
        "in warm-up": sum(v.get("warmup_dispatches", 0) for v in variants),
        "in CUDA-graph capture": sum(v.get("capture_dispatches", 0) for v in variants),
        "died before the lookup": family.get("died_before_lookup") or 0,
    }
    counted = sum(parts.values())
    if counted < total:
        parts["without a lookup"] = total - counted
    named = [f"{count} {name}" for name, count in parts.items() if count]
    if counted > total or not named:  # lookups the calls do not account for: say what each figure is
        return f"{total} dispatch call(s), {counted} lookup(s)"
    return f"{total} dispatch call(s): " + ", ".join(named)


def _columns(family: dict, varying: list[str], measured: dict | None, detail: str, sites: set) -> list[Column]:
    """The variant table's columns: the key fields that vary (and the spelling, where it differs), when each variant
    compiled, where (where the sites differ), its dispatches, the scenario's measured columns, its numerics, its
    status."""
    variants = family["variants"]
    columns = [
        Column(name, [Text(value_text(v["key"].get(name))) for v in variants], whole=True, key=True) for name in varying
    ]
    if len({spelling_text(v.get("spelling")) for v in variants}) > 1:
        columns.append(Column("spelled", [Text(spelling_text(v.get("spelling"))) for v in variants], key=True))
    columns.append(Column("compiled", [_compiled(v) for v in variants]))
    if len(sites) > 1:
        columns.append(Column("at", [Text(_site(v.get("compiled_by"), detail)) for v in variants]))
    dispatches = [("≥" if v.get("dispatches_at_least") else "") + str(v["dispatches"]) for v in variants]
    columns.append(Column("dispatches", [Text(count) for count in dispatches], right=True, whole=True))
    columns += _measured(variants, measured)
    if any(v.get("numerics") for v in variants):
        columns.append(Column("kernel vs reference", [Text(_metrics(v.get("numerics"))) for v in variants]))
    statuses = [Text(v["status"], style=STATUS_STYLES.get(v["status"], "")) for v in variants]
    columns.append(Column("status", statuses, whole=True, key=True))
    return columns


def _measured(variants: list[dict], measured: dict | None) -> list[Column]:
    """The scenario's measured columns (tokens, FP8 cost), a cell per variant ("—" where it measured none)."""
    cells = {key_identity(row["key"]): row["cells"] for row in (measured or {}).get("variants") or []}
    extra = list((measured or {}).get("columns") or []) if cells else []
    columns = []
    for position, name in enumerate(extra):
        values = [cells.get(key_identity(v["key"]), ["—"] * len(extra))[position] for v in variants]
        columns.append(Column(name, [Text(str(value)) for value in values], right=name == "tokens"))
    return columns


def _site(site: str | None, detail: str) -> str:
    if not site:
        return "—"
    return site if detail == "verbose" else short_site(site, SITE_WIDTH, "*")


def _compiled(variant: dict) -> Text:
    compiled = []
    if variant["precompiled"]:
        phase = variant.get("compile_phase")
        compiled.append(PHASES.get(phase, phase or "yes") + _seconds(variant.get("compile_s")))
    if variant.get("serving_path_compile_s") is not None or variant["status"] == "serving-path compile":
        compiled.append("serving" + _seconds(variant.get("serving_path_compile_s")))
    return Text(", ".join(compiled) or "no", style="red" if variant["status"] == "serving-path compile" else "")


def _caption(shared: list[tuple[str, object]], width: int, detail: str) -> list[Text]:
    """ "every variant: name=value, ..." in at most CAPTION_LINES lines (verbose: all of it)."""
    if not shared:
        return []
    items = [f"{name}={value_text(value)}" for name, value in shared]
    for count in range(len(items), 0, -1):
        more = len(items) - count
        text = Text("every variant: " + ", ".join(items[:count]) + (f", … ({more} more: --verbose)" if more else ""))
        if detail == "verbose" or len(wrap(text, width, 0, 4)) <= CAPTION_LINES:
            return [text]
    return [Text(f"every variant shares {len(items)} fields (--verbose lists them)")]


def _ranks(ranks: list[dict], width: int) -> list[Text]:
    """The per-rank view: which host and rank compiled on the serving path, ran unobserved, never dispatched."""

    def column(name: str, values: list[str], **how) -> Column:
        return Column(name, [Text(value) for value in values], **how)

    def listed(row: dict, name: str) -> str:
        return ", ".join(map(str, row.get(name) or [])) or "—"

    columns = [
        column("run", [row.get("run") or "—" for row in ranks]),
        column("host", [row.get("host") or "—" for row in ranks], whole=True, key=True),
        column("rank", ["—" if row.get("rank") is None else str(row["rank"]) for row in ranks], whole=True, key=True),
        column("processes", [listed(row, "pids") for row in ranks]),
        column("dispatches", [str(row.get("dispatches", 0)) for row in ranks], right=True, whole=True),
        column("serving-path compiles", [str(row.get("serving_path_compiles", 0)) for row in ranks], right=True),
        column("unobserved", [listed(row, "unobserved_pids") for row in ranks]),
        column("slowest step", [slowest_step(row, ranks) for row in ranks]),
        Column(
            "status",
            [Text(row.get("status", ""), style=RANK_STYLES.get(row.get("status"), "")) for row in ranks],
            whole=True,
            key=True,
        ),
    ]
    return [Text("per rank", style="bold"), *fit(columns, width)]


def _seconds(seconds: float | None) -> str:
    return f" {seconds:.1f} s" if seconds is not None else ""


def _metrics(metrics: dict | None) -> str:
    """ "name value, ...": a launched kernel's measured distance from the reference."""
    if metrics is None:
        return "—"
    return ", ".join(f"{name} {value:.4g}" for name, value in metrics.items() if value is not None)


def _unseen(data: dict, detail: str) -> list[Text]:
    """What the run did not see: the incomplete reasons, the contracts it could not evaluate (one line; --verbose:
    one each), lost lines, errors."""
    lines = [Text(f"incomplete: {reason}", style="magenta") for reason in data.get("incomplete") or []]
    unchecked = data.get("not_checked") or []
    contracts = [line for line in unchecked if " contract needs " in line]  # one line each only with --verbose
    lines += [
        Text(f"not checked: {line}", style="dim") for line in unchecked if detail == "verbose" or line not in contracts
    ]
    if detail != "verbose" and contracts:
        needed = data.get("context_needed") or []
        give = f": give --context {' '.join(f'{name}=...' for name in needed)}" if needed else ""
        lines.append(
            Text(
                f"not checked: {len(contracts)} contract(s) lack run context{give} (--verbose lists them)", style="dim"
            )
        )
    lines += [
        Text(f"internal error in capture (the program went on): {error}", style="magenta")
        for error in data.get("internal_errors") or []
    ]
    return lines


def _unwatched(compiles: list[dict]) -> list[Text]:
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


def _verdict(data: dict, whole: dict) -> Text:
    """The verdict, the counts and the exit code; an incomplete run's reason is the `incomplete:` line above it, not
    repeated here. Its seconds are summed over every variant of the `whole` report, not the rows shown."""
    counts = data["counts"]
    variants = [v for family in whole["families"] for v in family["variants"]]
    stall = sum(v.get("serving_path_compile_s") or 0.0 for v in variants)
    wasted = _wasted(whole)
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
    text.append(f" — {_exit_text(data)}", style="bold")
    return text


def _wasted(data: dict) -> float:
    """The compile time of the dead warm-ups, but those whose MLA002 finding does not call it wasted (one that may
    have built a kernel other keys ran is not known to be)."""
    unknown = {
        (finding["family"], key_identity(finding["key"]))
        for finding in data["findings"]
        if finding["code"] == "MLA002" and not WASTED.search(finding.get("summary") or "")
    }
    return sum(
        variant.get("compile_s") or 0.0
        for family in data["families"]
        for variant in family["variants"]
        if variant["status"] == "dead warm-up"
        and not (unknown and (family["name"], key_identity(variant["key"])) in unknown)
    )


def _exit_text(data: dict) -> str:
    reason = data["exit_reason"]
    incomplete = data.get("incomplete") or []
    if incomplete and reason.endswith(incomplete[0]):
        return reason[: -len(incomplete[0])].rstrip(": ") + " (the reason above)"
    if data["verdict"] == "fail":
        return reason.split(" (", 1)[0]  # the counts are said once, above
    return reason
