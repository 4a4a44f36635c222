"""A report of thousands of variants as the terminal shows it (issue 29): a summary, while the JSON, SARIF and JUnit
reports hold them all.

A family of more than `ROWS` variants shows `ROWS` of them in its table, some of each status (those of a finding
first), and one row for the others of each status: their dispatches and seconds summed (so the title's dispatch calls
and the verdict's seconds still add up), each key field's value where every variant of the family has it, else "…".
Of more than `FINDINGS` findings of one code, family and state (new, known, ignored), the first `FINDINGS` are listed
and one line says how many more there are; so are the first `LINES` of more incomplete reasons or internal errors (a
hostile trace of 10^5 garbage lines: 10^5 reasons, which took the terminal minutes). Nothing is dropped from the
report itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

ROWS = 40  # variant rows a family's table shows
FINDINGS = 20  # findings of one code, family and state listed
ATTENTION = ("serving-path compile", "dead warm-up", "unverified", "not compiled")  # statuses shown first
MORE = "…"
DISPATCHES = ("dispatches", "warmup_dispatches", "capture_dispatches")  # summed in a summary row
LINES = 100  # incomplete reasons and internal errors listed, each (a run at scale has more)
LISTED = ("incomplete", "internal_errors")  # the report's lists of lines (each unreadable line is a reason)


def abridged(data: dict) -> dict:
    """The report's JSON form with long tables, finding lists and lists of lines summarised (a copy where anything
    was)."""
    families = [_family(family) for family in data["families"]]
    findings = _findings(data["findings"])
    lines = {name: _lines(data[name]) for name in LISTED if len(data.get(name) or []) > LINES}
    if findings is data["findings"] and all(new is old for new, old in zip(families, data["families"])) and not lines:
        return data
    return {**data, "families": families, "findings": findings, **lines}


def _lines(items: list[str]) -> list[str]:
    """The first LINES of a list of lines, then one that stands for the rest."""
    return [
        *items[:LINES],
        f"{MORE} and {len(items) - LINES:,} more (the JSON, SARIF and JUnit reports list every one)",
    ]


def _family(family: dict) -> dict:
    variants = family["variants"]
    if len(variants) <= ROWS:
        return family
    by_status = _by_status(variants)
    shown, key = _rows(variants, by_status), _summary_key(variants)
    rest = sorted(([i for i in rows if i not in shown] for rows in by_status.values()), key=lambda rows: rows[:1])
    note = (
        f"the table shows {ROWS} of {len(variants):,} variants (some of each status, findings' first) and a row for "
        "the others of each status, their dispatches and seconds summed; the JSON, SARIF and JUnit reports list every "
        "one"
    )
    return {
        **family,
        "variants": [variants[i] for i in sorted(shown)]
        + [_summary_row(key, [variants[i] for i in rows]) for rows in rest if rows],
        "notes": [*(family.get("notes") or []), note],
    }


def _by_status(variants: list[dict]) -> dict[str | None, list[int]]:
    """Each status's variants (their places), the statuses in the order they first come."""
    by_status: dict[str | None, list[int]] = {}
    for i, variant in enumerate(variants):
        rows = by_status.get(variant.get("status"))
        if rows is None:
            by_status[variant.get("status")] = [i]
        else:
            rows.append(i)
    return by_status


def _rows(variants: list[dict], by_status: dict[str | None, list[int]]) -> set[int]:
    """The ROWS variants a table shows: taken in turn from each status, those of ATTENTION first, in their order."""
    queues = sorted(
        (rows[:ROWS] for rows in by_status.values()), key=lambda rows: _rank(variants[rows[0]].get("status"))
    )
    shown: list[int] = []
    while len(shown) < ROWS:
        shown += [rows.pop(0) for rows in queues if rows][: ROWS - len(shown)]
    return set(shown)


def _rank(status: str | None) -> int:
    return ATTENTION.index(status) if status in ATTENTION else len(ATTENTION)


def _summary_row(key: Callable[[int], dict], rest: list[dict]) -> dict:
    """One row for `rest` (variants of one status): its key (`key`: `_summary_key`'s); dispatches and seconds summed (the
    title's dispatch calls and the verdict's seconds still add up); its site theirs where they share one, "…" where
    they have several (so no caption says they share one)."""
    sites, compile_s, serving_s = set(), [], []
    precompiled = at_least = False
    dispatches = dict.fromkeys(DISPATCHES, 0)
    for v in rest:  # (one pass over 10^5 variants)
        sites.add(v.get("compiled_by"))
        precompiled = precompiled or bool(v.get("precompiled"))
        at_least = at_least or bool(v.get("dispatches_at_least"))
        for name in DISPATCHES:
            dispatches[name] += v.get(name) or 0
        if v.get("compile_s") is not None:
            compile_s.append(v["compile_s"])
        if v.get("serving_path_compile_s") is not None:
            serving_s.append(v["serving_path_compile_s"])
    return {
        "key": key(len(rest)),
        "precompiled": precompiled,
        "compile_phase": MORE,
        "compile_s": sum(compile_s) if compile_s else None,
        "compiled_by": next(iter(sites)) if len(sites) == 1 else MORE if len(sites - {None}) > 1 else None,
        "dispatches_at_least": at_least,
        **dispatches,
        "serving_path_compile_s": sum(serving_s) if serving_s else None,
        "status": rest[0].get("status"),
    }


def _summary_key(variants: list[dict]) -> Callable[[int], dict]:
    """A summary row's key, of the row's count: a field every variant of the family shares keeps its value, the
    others read "…" (the first names how many variants the row stands for). The family's shared fields found once."""
    fields = list(dict.fromkeys(name for variant in variants for name in variant["key"]))
    first = variants[0]["key"]
    shared = {name for name in fields if name in first and all(v["key"].get(name) == first[name] for v in variants)}
    varying = [name for name in fields if name not in shared]

    def key(count: int) -> dict:
        made = {name: first[name] if name in shared else MORE for name in fields}
        if varying:
            made[varying[0]] = f"{MORE} {count:,} more"
        return made

    return key


def _findings(findings: list[dict]) -> list[dict]:
    """The first FINDINGS of each (code, family, state), then a line standing for the rest of them."""
    groups = Counter(_group(finding) for finding in findings)
    if all(count <= FINDINGS for count in groups.values()):
        return findings
    listed: Counter = Counter()
    out = []
    for finding in findings:
        group = _group(finding)
        listed[group] += 1
        if listed[group] <= FINDINGS:
            out.append(finding)
        if listed[group] == groups[group] and groups[group] > FINDINGS:
            out.append(_more(finding, groups[group] - FINDINGS))
    return out


def _group(finding: dict) -> tuple:
    return finding["code"], finding.get("family"), bool(finding.get("ignored")), bool(finding.get("baselined"))


def _more(last: dict, count: int) -> dict:
    """The line that stands for `count` more findings like `last` (its code, family and state)."""
    text = f"{MORE} and {count:,} more (the JSON, SARIF and JUnit reports list every one)"
    return {
        "code": last["code"],
        "severity": last.get("severity"),
        "family": last.get("family"),
        "ignored": last.get("ignored", False),
        "baselined": last.get("baselined", False),
        "key": {},
        "message": text,
        "summary": text,
    }
