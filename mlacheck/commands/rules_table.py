"""`mlacheck rules`: the finding codes (`codes.py`) and the kernel families the rule files declare, at any width:
a family is a block of rows rather than a table row, long module paths are shortened from the left, and a long
key is its first fields and a count (`--verbose` prints everything whole)."""

from __future__ import annotations

import importlib
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mlacheck.capture.caches import check_rules
from mlacheck.capture.fingerprint import fingerprint
from mlacheck.codes import CODES
from mlacheck.rulefiles import BUNDLED, RuleFile, load_rules

SHOWN_FIELDS = 6  # key fields listed before "and N more"


def print_rules(console: Console, path: Path | None = None, fingerprints: bool = False, verbose: bool = False) -> None:
    codes = _listing("Finding codes (mlacheck rule CODE explains one)")
    for column in ("code", "name", "severity", "what it finds"):
        codes.add_column(column, no_wrap=column != "what it finds")
    for code in CODES.values():
        codes.add_row(code.code, code.name, code.severity.value, Text(code.summary))
    console.print(codes)
    rules = load_rules(path)
    check_rules(rules)
    if verbose or fingerprints:
        console.print(Text("Kernel families", style="bold"))
        for rule in rules.families:
            console.print(_family(rule, console.width, fingerprints, verbose))
    else:
        console.print(_families(rules.families))
    triton = next((file for file in rules.files if file.triton is not None), None)
    if triton is not None:
        console.print(_triton(triton))
    engines = _listing("Engine frames and serving-start markers")
    for column in ("engine", "what", "function"):
        engines.add_column(column, no_wrap=column != "function", overflow="fold")
    rows = [(phase.engine, phase.phase, phase.function) for phase in rules.phases]
    rows += [
        (start.engine, f"serving starts ({start.at})", f"{start.module}:{start.qualname}")
        for start in rules.serving_starts
    ]
    width = console.width - max((len(engine) + len(what) + 4 for engine, what, _ in rows), default=0)
    for engine, what, function in rows:
        engines.add_row(Text(engine), Text(what), Text(_short(function, width, verbose)))
    if engines.row_count:
        console.print(engines)


def _listing(title: str) -> Table:
    """A table as `mlacheck rules` prints them: a title, underlined column names, no rules."""
    return Table(title=title, title_justify="left", header_style="bold underline", box=None, pad_edge=False)


def _families(files: list[RuleFile]) -> Table:
    """One line per family: its name, its key's size and the code it was checked against."""
    table = _listing("Kernel families (-v: each one's cache and key fields)")
    table.add_column("family", no_wrap=True, min_width=max(len(rule.family.name) for rule in files))
    table.add_column("key", no_wrap=True, justify="right", min_width=len("64 fields"))
    table.add_column("checked against", overflow="ellipsis", no_wrap=True)
    for rule in files:
        family = rule.family
        table.add_row(
            Text(family.name),
            Text(f"{len(family.key_fields)} fields"),
            Text(f"{family.distribution} {' or '.join(family.version_ranges)}"),
        )
    return table


def _family(rule: RuleFile, width: int, fingerprints: bool, verbose: bool) -> Table:
    """One family: its name and distribution, then a row each for its cache, key, contracts and file."""
    family = rule.family
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    fields = list(family.key_fields)
    shown = fields if verbose or len(fields) <= SHOWN_FIELDS + 2 else fields[:SHOWN_FIELDS]
    more = f", … {len(fields) - len(shown)} more" if len(shown) < len(fields) else ""
    source = Path(rule.source)
    rows = [
        (family.name, f"{family.distribution} {' or '.join(family.version_ranges)}"),
        ("  cache", _short(f"{family.module}.{family.cache}", width - 24, verbose) + f" ({family.cache_kind})"),
        ("  key", f"{len(fields)} fields: " + ", ".join(shown) + more),
        ("  contracts", str(len(rule.contract))),
        ("  file", f"bundled {source.name}" if source.parent == BUNDLED and not verbose else str(source)),
    ]
    if fingerprints:
        rows.append(("  fingerprint", _fingerprint_text(rule)))
    for name, value in rows:
        grid.add_row(Text(name), Text(value))
    return grid


def _triton(file: RuleFile) -> Table:
    """The [triton] table: Triton kernels found at run time, each a family of its own."""
    table = file.triton
    versions = [table.checked_versions] if isinstance(table.checked_versions, str) else table.checked_versions
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    rows = [
        (f"{table.PREFIX}<module>.<kernel>", f"{table.distribution} {' or '.join(versions)}"),
        ("  cache", "JITFunction.device_caches[device] (found at run time)"),
        ("  key", "the kernel's parameters, options"),
        ("  watch", table.watch + (f", {len(table.kernel)} listed" if table.kernel else "")),
        ("  contracts", str(sum(len(entry.contract) for entry in table.kernel))),
        ("  file", f"bundled {Path(file.source).name}" if Path(file.source).parent == BUNDLED else file.source),
    ]
    if table.skip:
        rows.insert(4, ("  skip", ", ".join(table.skip)))
    for name, value in rows:
        grid.add_row(Text(name), Text(value))
    return grid


def _short(dotted: str, width: int, verbose: bool) -> str:
    """A `module.path[:Qualname]` shortened from the left at the module's dots to about `width`
    (`…paged.tokenspeed_mla:CuteDSLMLABackend.__init__`); the qualname and the last module part stay whole."""
    if verbose or len(dotted) <= width:
        return dotted
    module, colon, qualname = dotted.rpartition(":") if ":" in dotted else dotted.rpartition(".")
    parts = module.split(".")
    kept = parts[-1] + (":" if colon == ":" else ".") + qualname
    for part in reversed(parts[:-1]):
        if len(part) + 2 + len(kept) > width:
            break
        kept = f"{part}.{kept}"
    return f"…{kept}"


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
