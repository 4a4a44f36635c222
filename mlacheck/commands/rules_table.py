"""`mlacheck rules`: the finding codes (`codes.py`) and the kernel families the rule files declare, at any width from
60 columns without splitting a word (report/layout.py): long module paths are shortened from the left and break after
their dots, and a long key is its first fields and a count (`--verbose` prints everything whole)."""

from __future__ import annotations

import importlib
from pathlib import Path

from rich.console import Console
from rich.text import Text

from mlacheck.capture.caches import check_rules
from mlacheck.capture.fingerprint import fingerprint
from mlacheck.codes import CODES
from mlacheck.report.layout import NAMES, Column, fit, wrap
from mlacheck.rulefiles import BUNDLED, RuleFile, load_rules

SHOWN_FIELDS = 6  # key fields listed before "and N more"


def print_rules(console: Console, path: Path | None = None, fingerprints: bool = False, verbose: bool = False) -> None:
    width = max(console.width, 40)
    lines = [Text("Finding codes (mlacheck rule CODE explains one)", style="bold")]
    codes = list(CODES.values())
    lines += fit(
        [
            _column("code", [code.code for code in codes], whole=True, key=True),
            _column("name", [code.name for code in codes], whole=True, key=True),
            _column("severity", [code.severity.value for code in codes], whole=True, key=True),
            _column("what it finds", [code.summary for code in codes], readable=30),
        ],
        width,
    )
    rules = load_rules(path)
    check_rules(rules)
    if verbose or fingerprints:
        lines.append(Text("Kernel families", style="bold"))
        for rule in rules.families:
            lines += _pairs(_family(rule, width, fingerprints, verbose), width)
    else:
        lines += _families(rules.families, width)
    tritons = [file for file in rules.files if file.triton is not None]
    if tritons:
        lines += _tritons(tritons, width)
    rows = [(phase.engine, phase.phase, phase.function) for phase in rules.phases]
    rows += [
        (start.engine, f"serving ({start.at})", f"{start.module}:{start.qualname}") for start in rules.serving_starts
    ]
    if rows:
        room = width - max(len(engine) + len(what) + 2 * 2 for engine, what, _ in rows)
        lines.append(Text("Engine frames and serving-start markers", style="bold"))
        lines += fit(
            [
                _column("engine", [engine for engine, _, _ in rows], whole=True, key=True),
                _column("what", [what for _, what, _ in rows], key=True),
                _column("function", [_short(function, room, verbose) for _, _, function in rows], breaks=NAMES),
            ],
            width,
        )
    for line in lines:
        console.print(line, no_wrap=True, overflow="ignore", crop=False)


def _column(name: str, values: list[str], **how) -> Column:
    return Column(name, [Text(value) for value in values], **how)


def _pairs(rows: list[tuple[str, str]], width: int) -> list[Text]:
    """The first row as a title ("name  value"), then "name  value" lines, a value wrapped under itself (module paths
    after their dots)."""
    (title, what), *rows = rows
    lines = wrap(Text(title, style="bold") + Text(f"  {what}"), width, 0, 4)
    names = max(len(name) for name, _ in rows) + 2
    for name, value in rows:
        text = Text(f"{name:<{names}}", style="bold") + Text(value)
        lines += wrap(text, width, 0, names, NAMES)
    return lines


def _families(files: list[RuleFile], width: int) -> list[Text]:
    """One line per family: its name, its key's size and the code it was checked against."""
    lines = [Text("Kernel families (-v: each one's cache and key fields)", style="bold")]
    return lines + fit(
        [
            _column("family", [rule.family.name for rule in files], whole=True, key=True),
            Column("key", [Text(f"{len(rule.family.key_fields)} fields") for rule in files], right=True, whole=True),
            _column(
                "checked against",
                [f"{rule.family.distribution} {' or '.join(rule.family.version_ranges)}" for rule in files],
            ),
        ],
        width,
    )


def _family(rule: RuleFile, width: int, fingerprints: bool, verbose: bool) -> list[tuple[str, str]]:
    """One family: its name and distribution, then a row each for its cache, key, contracts and file."""
    family = rule.family
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
    return rows


def _tritons(files: list[RuleFile], width: int) -> list[Text]:
    """The [triton] tables: a line per Triton (stock, a fork) whose kernels are found at run time, each a family of
    its own; then what the tables share."""
    lines = []
    for file in files:
        table = file.triton
        versions = [table.checked_versions] if isinstance(table.checked_versions, str) else table.checked_versions
        watch = table.watch + (f", {len(table.kernel)} listed" if table.kernel else "")
        watch += f", skip {', '.join(table.skip)}" if table.skip else ""
        title = Text(f"{table.prefix}<module>.<kernel>", style="bold")
        lines += wrap(title + Text(f"  {table.distribution} {' or '.join(versions)}; watch {watch}"), width, 0, 4)
    rows = [
        ("  cache", "each kernel's JITFunction.device_caches[device] (found at run time)"),
        ("  key", "the kernel's parameters, options"),
        ("  contracts", str(sum(len(entry.contract) for file in files for entry in file.triton.kernel))),
        ("  files", ", ".join(_source_name(file.source) for file in files)),
    ]
    names = max(len(name) for name, _ in rows) + 2
    for name, value in rows:
        lines += wrap(Text(f"{name:<{names}}", style="bold") + Text(value), width, 0, names, NAMES)
    return lines


def _source_name(source: str) -> str:
    return f"bundled {Path(source).name}" if Path(source).parent == BUNDLED else source


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
