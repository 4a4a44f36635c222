"""The terminal's findings, as ruff's concise output: one line per finding, two at most at 80 columns.

A finding's line is its code, its family, the fields that tell its variant apart, what it costs (the stall, the
waste, the breach), its process and its site; then, where it adds something, its diff (the fields in which the
nearest precompiled variant differs). Where that does not fit, the line says less, in this order: the fewest fields
that still tell the variant apart, fewer diff fields ("+2 more"), the site's file name only, no diff. The fix is
said once per code, under the findings. `--verbose` prints each finding whole: its message, key, stack and fix.
"""

from __future__ import annotations

import re

from rich.text import Text

from mlacheck.codes import CODES
from mlacheck.keys import key_text, value_text
from mlacheck.report.common import short_site
from mlacheck.report.layout import wrap

SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "note": "magenta"}
INDENT = 7  # "MLA001 "
SITE_WIDTH = 30  # a site keeps about this much of its path
SUMMARY = re.compile(r"^(?P<role>[a-z]+ )?\((?P<fields>[^()]*=.*?)\): (?P<what>.*)$", re.S)
SHORT = {  # what a finding costs, said short where its code already names it: (pattern, its short form)
    "MLA001": (re.compile(r"^(\d+(?:\.\d+)? s )serving-path compile"), r"\1stall"),
    "MLA002": (re.compile(r"^precompiled, never dispatched \((\d+(?:\.\d+)? s wasted)\)"), r"\1"),
    "MLA003": (re.compile(r"^(?P<field>\S+) is (.+?), the contract requires (.+)$"), r"\1=\2 (contract: \3)"),
}
UNTIMED = "serving-path compile (not timed)"
# (the variant's fields: the analysis' own, the fewest that tell it apart, those but the diff's; diff fields shown;
# the site's width: its path shortened to about it, 0 its file name only; what it costs, short)
LEVELS = (
    ("own", None, SITE_WIDTH, False),
    ("fewest", None, SITE_WIDTH, True),
    ("apart", None, SITE_WIDTH, True),
    ("apart", 2, 0, True),
    ("apart", 1, 0, True),
)
LINES = 2  # a finding's lines at most, where it can be done


def findings_lines(data: dict, width: int, detail: str) -> list[Text]:
    """The findings section: a finding per line (ignored ones last), then the fix of each code once."""
    keys = {family["name"]: [v["key"] for v in family["variants"]] for family in data["families"]}
    fields = {family["name"]: family.get("key_fields") or [] for family in data["families"]}
    lines = [Text("Findings", style="bold")]
    findings = sorted(data["findings"], key=lambda finding: bool(finding.get("ignored")))
    for finding in findings:
        family = finding.get("family", "")
        if detail == "verbose":
            lines += _verbose(finding, fields.get(family), width)
        else:
            lines += _concise(finding, keys.get(family, []), width)
    if detail != "verbose":
        codes = dict.fromkeys(f["code"] for f in findings if not f.get("ignored") and f["code"] in CODES)
        for code in codes:
            text = Text(f"fix {code}: ", style="dim") + Text(f"{CODES[code].hint} (mlacheck rule {code})", style="dim")
            lines += wrap(text, width, INDENT, INDENT)
    return lines


def _concise(finding: dict, keys: list[dict], width: int) -> list[Text]:
    """The finding in at most LINES lines at the first level of LEVELS that fits. At each level: its line then its
    diff; or its line without the site, then the site and the diff; or all of it run on. Where none fits (a narrow
    terminal), the shortest form with the whole diff, in more lines."""
    for fields, count, site_width, short in LEVELS:
        head, diff = _head(finding, keys, fields, short), _diff(finding, count)
        site = _site(finding, site_width)
        arrangements = [
            [head + site, diff],
            [head, (site[1:] + Text("; ") + diff) if diff is not None and site else diff or (site[1:] or None)],
            [head + site + Text("; ") + diff if diff is not None else head + site],
        ]
        for parts in arrangements:
            lines = [line for i, part in enumerate(parts) if part is not None for line in _wrap(part, width, i)]
            if len(lines) <= LINES and (len(parts) == 1 or parts[1] is None or len(_wrap(parts[0], width, 0)) == 1):
                return lines
    head, diff = _head(finding, keys, "apart", True) + _site(finding, 0), _diff(finding, None)
    return _wrap(head if diff is None else head + Text("; ") + diff, width, 0)  # narrow: more lines, nothing dropped


def _wrap(text: Text, width: int, position: int) -> list[Text]:
    return wrap(text, width, INDENT if position else 0, INDENT)


def _site(finding: dict, width: int | None) -> Text:
    """ " at SITE" shortened to about `width` (None: whole), a modelled site marked *; empty without a site."""
    site = finding.get("site")
    if not site:
        return Text("")
    return Text(" at ") + Text(site if width is None else short_site(site, width, "*"), style="dim")


def _head(finding: dict, keys: list[dict], fields: str, short: bool = False) -> Text:
    """code, state, family, the variant, what it costs, the process."""
    ignored = bool(finding.get("ignored"))
    line = Text(f"{finding['code']} ", style="dim" if ignored else SEVERITY_STYLES.get(finding.get("severity"), ""))
    if ignored:
        line.append("ignored ", style="dim")
    elif finding.get("baselined"):
        line.append("known (baseline) ", style="dim")
    line.append(f"{finding['family']} ")
    line.append(_variant(finding, keys, fields, short))
    process = finding.get("process")
    if process:
        rank = process.get("rank")
        line.append(f" [pid {process.get('pid')}{f', rank {rank}' if rank is not None else ''}]", style="cyan")
    return line


def _variant(finding: dict, keys: list[dict], fields: str, short: bool) -> str:
    """ "(name=value, ...): what it costs": the analysis' summary; with `fields` "fewest" the fewest of its fields
    that tell the variant apart from the family's others, "apart" those less the diff's (the diff names them); with
    `short` a serving-path compile is "a stall" (its code says what it is)."""
    summary = _summary(finding)
    match = SUMMARY.match(summary)
    key = finding.get("key") or {}
    if fields == "own" or match is None or not key:
        return summary
    what, said = _cost(match["what"], finding.get("code"), short)
    diff = list(finding.get("diff") or {})
    named = re.findall(r"(?:^|, )([^=, ]+)=", match["fields"])
    order = [name for name in dict.fromkeys([*named, *diff, *key]) if name in key]
    chosen = _fewest(key, [k for k in keys if k != key], order)
    if fields == "apart":
        chosen -= {*diff, *said}
    shown = ", ".join(f"{name}={value_text(key[name])}" for name in order if name in chosen)
    return f"{match['role'] or ''}({shown}): {what}" if shown else f"{match['role'] or ''}{what}"


def _summary(finding: dict) -> str:
    """The finding's summary, less a leading "KERNEL: " that its family ("unwatched:KERNEL") names already."""
    summary = finding.get("summary") or finding.get("message", "")
    family = finding.get("family") or ""
    for name in dict.fromkeys([family, family.partition(":")[2]]):
        if name and summary.startswith(f"{name}: "):
            return summary[len(name) + 2 :]
    return summary


def _cost(what: str, code: str | None, short: bool) -> tuple[str, list[str | None]]:
    """What a finding costs, said short (`short`) where its code already names it, and the field the short form names
    (it need not be named again)."""
    pattern, form = SHORT.get(code, (None, ""))
    if short and what.startswith(UNTIMED):
        return "stall" + what[len(UNTIMED) :], []  # the header says --compile skip: nothing was timed
    if short and pattern is not None and pattern.match(what):
        return pattern.sub(form, what, count=1), [pattern.match(what).groupdict().get("field")]
    return what, []


def _fewest(key: dict, others: list[dict], order: list[str]) -> set[str]:
    """The fewest fields, taken in `order`, on which no other key agrees with `key`: each taken field rules out at least
    one other key (none where no field tells them apart)."""
    chosen: set[str] = set()
    left = [other for other in others if any(other.get(name) != key[name] for name in order)]
    for name in order:
        if not left:
            break
        kept = [other for other in left if other.get(name) == key[name]]
        if len(kept) < len(left):
            chosen.add(name)
            left = kept
    return chosen or set(order[:1])


def _diff(finding: dict, count: int | None) -> Text | None:
    """ "diff name precompiled → dispatched, ..." (the first `count` fields, then how many more)."""
    diff = finding.get("diff") or {}
    if not diff:
        return None
    items = [f"{name} {value_text(old)}→{value_text(new)}" for name, (old, new) in diff.items()]
    shown = items if count is None else items[:count]
    more = len(items) - len(shown)
    listed = ", ".join(shown) + (", " if shown and more else "") + (f"+{more} more (-v)" if more else "")
    return Text(f"diff {listed}", style="cyan")


def _verbose(finding: dict, fields: list[str] | None, width: int) -> list[Text]:
    """The whole finding: its line with the whole site, then its message, key, stack and fix."""
    lines = wrap(_head(finding, [], "own") + _site(finding, None), width, 0, INDENT)
    more = [Text(finding.get("message", ""))]
    if finding.get("key"):
        more.append(Text(f"key {key_text(finding['key'], fields)}", style="dim"))
    more += [Text(f"from {frame}", style="dim") for frame in finding.get("stack") or [] if frame != finding.get("site")]
    if finding.get("hint"):
        more.append(Text(f"fix: {finding['hint']}", style="dim"))
    for text in more:
        lines += wrap(text, width, INDENT, INDENT)
    return lines
