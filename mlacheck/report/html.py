"""The HTML report (`--output html:PATH`): one self-contained file, no script, nothing fetched from the network.

It renders the report's JSON form, as every other format does: the verdict and the run's facts, then a compile
timeline per process (an SVG: the warm-up, capture and serving phases as bands, each compile a bar as long as
its seconds, a serving-path compile in red; a bar's tooltip names the variant), then the variant tables and
the findings. Every piece of text is escaped.
"""

from __future__ import annotations

import re
import shlex
from html import escape

from mlacheck.keys import value_text, varying_fields
from mlacheck.report.common import compile_text, printable_report, program_runs, state, summary_line, versions_text

WIDTH, LEFT, RIGHT = 960, 70, 20  # the SVG's width and its margins, px
BAND, LANE, TOP = 22, 16, 26  # the phase band's height, a compile lane's, the band's top
CHAR = 7.0  # at least the width of a character of the SVG's 11 px text (labels are placed to fit by it)
EDGE = 4  # px a label keeps from the plot's edges
PHASE_CLASSES = {"warm-up": "warmup", "warmup": "warmup", "CUDA-graph capture": "capture", "capture": "capture"}
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b1f24; max-width: 1200px; }
h1 { font-size: 20px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.verdict { font-weight: 600; padding: 6px 10px; border-radius: 4px; display: inline-block; }
.pass { background: #dff3e4; } .fail { background: #fbe0e0; } .incomplete { background: #efe2f7; }
.scroll { overflow-x: auto; } table { border-collapse: collapse; margin: 6px 0; }
td, th { padding: 2px 12px 2px 0; text-align: left; vertical-align: top; } th { border-bottom: 1px solid #888; }
.facts td:first-child { font-weight: 600; white-space: nowrap; }
.num { text-align: right; } .muted { color: #666; } code { font-size: 13px; overflow-wrap: normal; }
.whole { white-space: nowrap; } .site { min-width: 16em; }
.status-serving-path-compile { color: #b3261e; font-weight: 600; } .status-dead-warm-up { color: #8a6100; }
.finding { margin: 8px 0 12px; } .finding .head { font-weight: 600; display: flex; gap: 0.6em; }
.finding .head .code { flex: none; } .finding > div:not(.head), .finding details { margin-left: 4.6em; }
.error .code { color: #b3261e; } .warning .code { color: #8a6100; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .warmup { fill: #dce9f7; } svg .capture { fill: #dcf1e0; } svg .serving { fill: #fbe9d7; }
svg .compile { fill: #4a78b5; } svg .compile.serving-path { fill: #c62828; } svg .axis { stroke: #999; }
svg .step { fill: #8d8d8d; }
.legend { font-size: 12px; }
.key { display: inline-block; width: 12px; height: 10px; margin: 0 4px 0 10px; vertical-align: middle; }
.key.warmup { background: #dce9f7; } .key.capture { background: #dcf1e0; } .key.serving { background: #fbe9d7; }
.key.compile { background: #4a78b5; } .key.serving-path { background: #c62828; } .key.step { background: #8d8d8d; }
"""


def to_html(report: dict) -> str:
    """The whole report as one HTML document."""
    report = printable_report(report)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>mlacheck {escape(summary_line(report))}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>mlacheck report</h1>{_verdict(report)}",
        _facts(report),
    ]
    timelines = report.get("timeline") or []
    if timelines:
        parts.append("<h2>Compile timeline</h2>")
        phases = (report.get("scenario") or {}).get("phases")
        for timeline in timelines:
            parts.append(_timeline(timeline, report, phases if timeline.get("proc") is None else None))
    for family in report.get("families") or []:
        parts.append(_family(family))
    findings = report.get("findings") or []
    if findings:
        parts.append("<h2>Findings</h2>")
        parts += [_finding(finding) for finding in findings]
    unseen = [
        *(f"incomplete: {line}" for line in report.get("incomplete") or []),
        *(f"not checked: {line}" for line in report.get("not_checked") or []),
        *(f"internal error in capture: {line}" for line in report.get("internal_errors") or []),
    ]
    if unseen:
        parts.append("<h2>What this run did not see</h2><ul>")
        parts += [f"<li>{escape(line)}</li>" for line in unseen]
        parts.append("</ul>")
    parts.append(f'<p class="muted">{escape(report.get("exit_reason") or "")}</p></body></html>')
    return "\n".join(parts) + "\n"


def _verdict(report: dict) -> str:
    verdict = str(report.get("verdict", "?"))
    return f'<div class="verdict {escape(verdict)}">{escape(summary_line(report))}</div>'


def _facts(report: dict) -> str:
    rows = [
        ("versions", versions_text(report)),
        ("target arch", report.get("target_arch") or "not set"),
        ("mode", str(report.get("mode")) + (f" ({report['device']})" if report.get("device") else "")),
        ("compile", compile_text(report)),
    ]
    rows += [(name, f"{text} ({more[0]})" if more and more[0] else text) for name, text, *more in _header(report)]
    rows += [("program", f"{shlex.join(command)}: {ended}") for command, ended in program_runs(report)]
    cells = "".join(f"<tr><td>{escape(str(name))}</td><td>{escape(str(value))}</td></tr>" for name, value in rows)
    return f'<table class="facts">{cells}</table>'


def _header(report: dict) -> list:
    return (report.get("scenario") or {}).get("header") or []


def _timeline(timeline: dict, report: dict, phases: list[dict] | None) -> str:
    """One process's SVG: phase bands on top, then one lane per compile, then one per slow engine step."""
    end = max(float(timeline.get("end") or 0.0), 0.001)
    compiles = sorted(timeline.get("compiles") or [], key=lambda c: c["start"])
    steps = sorted(timeline.get("steps") or [], key=lambda s: s["start"])
    height = TOP + BAND + 8 + LANE * (len(compiles) + len(steps)) + 24
    scale = (WIDTH - LEFT - RIGHT) / end
    x = lambda seconds: LEFT + seconds * scale  # noqa: E731
    parts = [f'<svg class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img">']
    parts.append(f"<title>{escape(_process_label(timeline, report))}: compiles over {end:.1f} s</title>")
    parts.append(f'<text x="0" y="14">{escape(_process_label(timeline, report))}</text>')
    for name, start, stop in _bands(timeline, phases, end):
        kind = PHASE_CLASSES.get(name, "serving")
        width = max(x(stop) - x(start), 1.0)
        parts.append(
            f'<rect class="phase {kind}" x="{x(start):.1f}" y="{TOP}" width="{width:.1f}" height="{BAND}">'
            f"<title>{escape(name)}: {start:.1f}–{stop:.1f} s</title></rect>"
        )
        if width > CHAR * len(name) + 6:
            parts.append(f'<text x="{x(start) + 3:.1f}" y="{TOP + 15}">{escape(name)}</text>')
    for lane, item in enumerate(compiles):
        top = TOP + BAND + 8 + lane * LANE
        seconds = item.get("seconds") or 0.0
        serving = item.get("phase") == "serving"
        what = f"{item['family']} {item.get('label') or ''}: " + (
            f"{seconds:.1f} s" if item.get("seconds") is not None else "not compiled (--compile skip)"
        )
        phase = "serving-path compile" if serving else "warm-up" if item.get("phase") == "warmup" else item.get("phase")
        what += f" ({phase}, at {item['start']:.1f} s)"
        width = max(seconds * scale, 2.0)
        parts.append(
            f'<rect class="compile{" serving-path" if serving else ""}" x="{x(item["start"]):.1f}" y="{top}" '
            f'width="{width:.1f}" height="{LANE - 4}"><title>{escape(what)}</title></rect>'
        )
        label = f"{item['family']} {item.get('label') or ''}" + (f" {seconds:.1f} s" if item.get("seconds") else "")
        parts.append(_label(label, x(item["start"]), x(item["start"]) + width, top + LANE - 5))
    for lane, step in enumerate(steps, start=len(compiles)):
        top = TOP + BAND + 8 + lane * LANE
        label = f"slow step {step['seconds']:.1f} s (usually {step['usual']:.2f} s)"
        what = f"{step['function']}: {label}, at {step['start']:.1f} s"
        width = max(step["seconds"] * scale, 2.0)
        parts.append(
            f'<rect class="step" x="{x(step["start"]):.1f}" y="{top}" width="{width:.1f}" height="{LANE - 4}">'
            f"<title>{escape(what)}</title></rect>"
        )
        parts.append(_label(label, x(step["start"]), x(step["start"]) + width, top + LANE - 5))
    axis = TOP + BAND + 8 + LANE * (len(compiles) + len(steps)) + 6
    parts.append(f'<line class="axis" x1="{LEFT}" y1="{axis}" x2="{WIDTH - RIGHT}" y2="{axis}"/>')
    step = _tick(end)
    tick = 0.0
    while tick <= end + 1e-9:
        anchor = "end" if x(tick) + CHAR * 3 > WIDTH else "middle"
        parts.append(f'<text x="{x(tick):.1f}" y="{axis + 14}" text-anchor="{anchor}">{tick:g} s</text>')
        tick += step
    parts.append("</svg>")
    return "\n".join(parts) + LEGEND


def _label(label: str, left: float, right: float, y: int) -> str:
    """A compile's label inside the plot: after its bar where it fits there, else before it, else cut (with "…") to
    the wider side; its whole text is the tooltip."""
    after, before = WIDTH - EDGE - (right + EDGE), left - EDGE - EDGE
    if CHAR * len(label) <= after or (CHAR * len(label) > before and after >= before):
        shown, x, anchor = _cut(label, after), right + EDGE, "start"
    else:
        shown, x, anchor = _cut(label, before), left - EDGE, "end"
    return (
        f'<text class="label" x="{x:.1f}" y="{y}" text-anchor="{anchor}"><title>{escape(label)}</title>'
        f"{escape(shown)}</text>"
    )


def _cut(label: str, room: float) -> str:
    fits = int(room // CHAR)
    return label if len(label) <= fits else label[: max(fits - 1, 0)] + "…"


LEGEND = (
    '<p class="legend muted"><span class="key warmup"></span>warm-up <span class="key capture"></span>CUDA-graph '
    'capture <span class="key serving"></span>serving <span class="key compile"></span>a compile, as long as its '
    'seconds <span class="key serving-path"></span>a serving-path compile <span class="key step"></span>an engine step '
    "far slower than its usual (--step): a stall, or a wait for another rank's compile</p>"
)


def _bands(timeline: dict, phases: list[dict] | None, end: float) -> list[tuple[str, float, float]]:
    """(name, start, end) of the process's phases: the scenario's own, else warm-up until serving starts (marked,
    else the end of the last compile before serving), capture over its compiles, serving to the end."""
    if phases:
        spans = [(p["name"], p["start"], p["end"] if p.get("end") is not None else end) for p in phases]
        return [(name, start, stop) for name, start, stop in spans if stop - start > 0.0005]
    compiles = timeline.get("compiles") or []
    before = [c["start"] + (c["seconds"] or 0.0) for c in compiles if c.get("phase") != "serving"]
    serving = timeline.get("serving_start")
    if serving is None:
        first = [c["start"] for c in compiles if c.get("phase") == "serving"]
        serving = min([*first, max(before, default=end)])
    bands = [("warm-up", 0.0, serving)]
    captured = [c for c in compiles if c.get("phase") == "capture"]
    if captured:
        bands.append(
            (
                "capture",
                min(c["start"] for c in captured),
                max(c["start"] + (c["seconds"] or 0.0) for c in captured),
            )
        )
    if serving < end:
        bands.append(("serving", serving, end))
    return bands


def _tick(end: float) -> float:
    """A round axis step giving about 6 to 12 ticks."""
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600):
        if end / step <= 12:
            return float(step)
    return end / 10


def _process_label(timeline: dict, report: dict) -> str:
    processes = report.get("processes") or []
    proc = timeline.get("proc")
    process = processes[proc] if isinstance(proc, int) and proc < len(processes) else {}
    rank = process.get("rank")
    pid = process.get("pid") or timeline.get("pid")
    return "the scenario" if proc is None else f"pid {pid}" + (f", rank {rank}" if rank is not None else "")


def _family(family: dict) -> str:
    """The variant table: key values and statuses whole, paths broken only after their slashes, names after their
    underscores (so that no column is narrower than its longest word); a site every variant shares goes under it."""
    variants = family.get("variants") or []
    fields = family.get("key_fields") or (list(variants[0]["key"]) if variants else [])
    varying = varying_fields([v["key"] for v in variants], fields)
    title = f"{family['name']} ({family.get('version') or 'version unknown'})"
    if not variants:
        return f"<h2>{escape(title)}</h2><p class='muted'>loaded; nothing was compiled or looked up</p>"
    sites = {v.get("compiled_by") for v in variants if v.get("compiled_by")}
    columns = [*varying, "compiled", *(["at"] if len(sites) > 1 else []), "dispatches", "status"]
    head = "".join(f"<th>{_breakable(name, '_')}</th>" for name in columns)
    rows = "".join(_row(variant, varying, len(sites) > 1) for variant in variants)
    return f"<h2>{escape(title)}</h2><div class='scroll'><table><tr>{head}</tr>{rows}</table></div>" + "".join(
        f'<p class="muted">{line}</p>' for line in _under(variants, fields, varying, sites)
    )


def _row(variant: dict, varying: list[str], at: bool) -> str:
    """A variant's row: its varying key fields, when it compiled, its site (`at`: where the variants' sites differ),
    its dispatches and its status."""
    cells = [f'<td class="whole">{escape(value_text(variant["key"].get(name)))}</td>' for name in varying]
    cells.append(f'<td class="whole">{escape(_compiled(variant))}</td>')
    if at:
        cells.append(f'<td class="site"><code>{_breakable(variant.get("compiled_by") or "—", "/")}</code></td>')
    cells.append(f'<td class="num">{escape(str(variant.get("dispatches", 0)))}</td>')
    status = str(variant.get("status"))
    cells.append(f'<td class="whole status-{escape(status.replace(" ", "-"))}">{escape(status)}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _compiled(variant: dict) -> str:
    """When the variant compiled and how long it took: its precompile's phase, a serving-path compile; else "no"."""
    compiled = []
    if variant.get("precompiled"):
        phase = {"warmup": "warm-up"}.get(variant.get("compile_phase"), variant.get("compile_phase") or "yes")
        compiled.append(f"{phase} {_seconds(variant.get('compile_s'))}".strip())
    if variant.get("status") == "serving-path compile":
        compiled.append(f"serving {_seconds(variant.get('serving_path_compile_s'))}".strip())
    return ", ".join(compiled) or "no"


def _under(variants: list[dict], fields: list[str], varying: list[str], sites: set) -> list[str]:
    """The lines under the table (HTML): the key fields every variant shares, and the site where all compiled there."""
    shared = [name for name in fields if name not in varying and name in variants[0]["key"]]
    caption = ", ".join(f"{name}={value_text(variants[0]['key'][name])}" for name in shared)
    under = [f"every variant: {escape(caption)}"] if caption else []
    if len(sites) == 1:
        [site] = sites
        every = all(v.get("compiled_by") for v in variants)
        under.append(f"{'compiled' if every else 'precompiled'} at <code>{_breakable(site, '/')}</code>")
    return under


def _breakable(text: str, after: str) -> str:
    """Escaped text that may break after each `after` (a path's slashes, a name's underscores) and nowhere else."""
    return "<wbr>".join(escape(part) for part in re.split(f"(?<={re.escape(after)})", text))


def _seconds(seconds: float | None) -> str:
    return f"{seconds:.1f} s" if seconds is not None else ""


def _finding(finding: dict) -> str:
    """The finding's line (code, family, summary, site), its diff, its fix; its whole message and key folded."""
    known = state(finding)
    head = (
        f"<span>{escape(finding.get('family', ''))} {escape(finding.get('summary') or finding.get('message', ''))}"
        + (
            f" <span class='muted'>at <code>{_breakable(finding['site'], '/')}</code></span>"
            if finding.get("site")
            else ""
        )
        + (f" <span class='muted'>({escape(known)})</span>" if known else "")
        + "</span>"
    )
    diff = ", ".join(
        f"{name} {value_text(old)} → {value_text(new)}" for name, (old, new) in (finding.get("diff") or {}).items()
    )
    more = escape(finding.get("message", "")) + (
        f"<br><code>{escape(str(finding.get('key')))}</code>" if finding.get("key") else ""
    )
    return (
        f'<div class="finding {escape(finding.get("severity", ""))}"><div class="head">'
        f'<span class="code">{escape(finding.get("code", ""))}</span>{head}</div>'
        + (f"<div>diff {escape(diff)}</div>" if diff else "")
        + (f"<div>fix: {escape(finding['hint'])}</div>" if finding.get("hint") else "")
        + f"<details class='muted'><summary>the whole finding</summary>{more}</details></div>"
    )


def render(report: dict, options: object = None) -> str:
    """The renderer protocol (report/formats.py)."""
    return to_html(report)
