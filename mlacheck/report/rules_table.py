"""`mlacheck rules`: the finding codes (`codes.py`) and the kernel families the rule files declare."""

from __future__ import annotations

import importlib
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mlacheck.capture.caches import check_rules
from mlacheck.capture.fingerprint import fingerprint
from mlacheck.codes import CODES
from mlacheck.rulefiles import RuleFile, load_rules


def print_rules(console: Console, path: Path | None = None, fingerprints: bool = False) -> None:
    codes = Table(title="Finding codes", title_justify="left", header_style="bold")
    for column in ("code", "name", "severity", "what", "fix"):
        codes.add_column(column)
    for code in CODES.values():
        codes.add_row(code.code, code.name, code.severity.value, Text(code.summary), Text(code.hint))
    console.print(codes)
    rules = load_rules(path)
    check_rules(rules)
    families = Table(title="Kernel families", title_justify="left", header_style="bold")
    columns = ["family", "cache", "key fields", "checked against", "contracts", "file"] + (
        ["fingerprint"] if fingerprints else []
    )
    for column in columns:
        families.add_column(column, overflow="fold")
    for rule in rules.families:
        family = rule.family
        ranges = " or ".join(family.version_ranges)
        row = [
            family.name,
            f"{family.module}.{family.cache} ({family.cache_kind})",
            ", ".join(family.key_fields),
            f"{family.distribution} {ranges}",
            str(len(rule.contract)),
            rule.source,
        ]
        if fingerprints:
            row.append(_fingerprint_text(rule))
        families.add_row(*(Text(cell) for cell in row))
    triton = next((file for file in rules.files if file.triton is not None), None)
    if triton is not None:
        table = triton.triton
        row = [
            f"{table.PREFIX}<module>.<kernel> ({table.watch}"
            + (f", {len(table.kernel)} listed" if table.kernel else "")
            + (f"; not {', '.join(table.skip)}" if table.skip else "")
            + ")",
            "JITFunction.device_caches[device] (found at run time)",
            "the kernel's parameters, options",
            f"{table.distribution} {' or '.join([table.checked_versions] if isinstance(table.checked_versions, str) else table.checked_versions)}",
            str(sum(len(entry.contract) for entry in table.kernel)),
            triton.source,
        ]
        families.add_row(*(Text(cell) for cell in row + ([""] if fingerprints else [])))
    console.print(families)
    engines = Table(title="Engine frames and serving-start markers", title_justify="left", header_style="bold")
    for column in ("engine", "what", "function"):
        engines.add_column(column, overflow="fold")
    for phase in rules.phases:
        engines.add_row(Text(phase.engine), Text(phase.phase), Text(phase.function))
    for start in rules.serving_starts:
        engines.add_row(
            Text(start.engine), Text(f"serving starts ({start.at})"), Text(f"{start.module}:{start.qualname}")
        )
    if engines.row_count:
        console.print(engines)


def _fingerprint_text(rule: RuleFile) -> str:
    """The installed code's fingerprint, against the one the rule records."""
    if not rule.family.key_functions:
        return "— (no key_functions)"
    try:
        module = importlib.import_module(rule.family.module)
    except Exception as exc:  # noqa: BLE001 - a missing library is a row, not a failure
        return f"cannot import {rule.family.module}: {type(exc).__name__}"
    installed = fingerprint(module, rule.family.key_functions)
    recorded = rule.family.fingerprints
    state = (
        "matches the rule"
        if installed in recorded
        else f"the rule has {' or '.join(recorded)}"
        if recorded
        else "the rule records none"
    )
    return f"{installed} ({state})"
