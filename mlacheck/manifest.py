"""The warm-up manifest: the variants a run dispatched, as JSON a backend loads to precompile exactly those.

Schema (format_version 1):
  {"format_version": 1, "generated_by": "mlacheck X.Y.Z",
   "families": [{"name", "module", "cache", "compile", "key_fields": [...],
                 "variants": [{field: value}, ...]}]}
Values are typed: booleans as JSON booleans, integers as numbers, anything else (dtypes) as the
string mlacheck reports, e.g. "float8_e4m3fn" (torch.float8_e4m3fn).
"""

from __future__ import annotations

import json
from pathlib import Path

from mlacheck import __version__
from mlacheck.errors import MlacheckError
from mlacheck.rules import FamilyRule

FORMAT_VERSION = 1


def typed(value: str) -> bool | int | str:
    """A key field string back as the JSON value a loader needs."""
    if value in ("True", "False"):
        return value == "True"
    try:
        return int(value)
    except ValueError:
        return value


def manifest(report: dict, rules: list[FamilyRule]) -> dict:
    """The dispatched variants of every family in the report whose rule is known."""
    by_name = {rule.family.name: rule.family for rule in rules}
    families = []
    for family in report["families"]:
        rule = by_name.get(family["name"])
        if rule is None:
            continue
        variants = [{name: typed(value) for name, value in v["key"].items()} for v in family["variants"] if v["dispatches"]]
        families.append({"name": rule.name, "module": rule.module, "cache": rule.cache, "compile": rule.compile,
                         "key_fields": rule.key_fields, "variants": variants})
    return {"format_version": FORMAT_VERSION, "generated_by": f"mlacheck {__version__}", "families": families}


def load_report(path: Path) -> dict:
    """A JSON report written by `--json` or `--output json:PATH`."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MlacheckError(f"{path}: not a readable JSON report: {exc}") from None
    if not isinstance(report, dict) or "families" not in report:
        raise MlacheckError(f"{path}: not an mlacheck JSON report (no 'families'); write one with --json")
    return report


def write_manifest(data: dict, path: Path) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise MlacheckError(f"--output {path}: cannot write the manifest: {exc}") from None
