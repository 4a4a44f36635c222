"""The warm-up manifest: the variants a run dispatched, as JSON a backend loads to precompile exactly those.

Schema (format_version 2):
  {"format_version": 2, "generated_by": "mlacheck X.Y.Z",
   "families": [{"name", "module", "cache", "cache_kind", "compile", "key_fields": [...],
                 "variants": [{field: value}, ...]}]}
Values are the report's typed key values: booleans, integers, lists for tuples, and dtypes by name
(e.g. "float8_e4m3fn" for torch.float8_e4m3fn). A variant counts as dispatched when any dispatch call
looked it up: while serving, under a warm-up frame, or during CUDA-graph capture.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlacheck import __version__
from mlacheck.errors import MlacheckError
from mlacheck.report.model import Report
from mlacheck.rulefiles import RuleSet

FORMAT_VERSION = 2
"""The manifest's format. 1: keys as lists of strings. 2: keys as {field: typed value}, with each family's module,
cache, cache_kind and compile."""


def manifest(report: Report, rules: RuleSet) -> dict:
    """The dispatched variants of every family in the report whose rule is known."""
    families = []
    for family in report.families:
        rule = rules.family(family.name)
        if rule is None:
            continue
        spec = rule.family
        variants = [
            dict(v["key"]) for v in family.variants if v["dispatches"] or v["warmup_dispatches"] or v["captured"]
        ]
        families.append(
            {
                "name": spec.name,
                "module": spec.module,
                "cache": spec.cache,
                "cache_kind": spec.cache_kind,
                "compile": spec.compile,
                "key_fields": list(spec.key_fields),
                "variants": variants,
            }
        )
    return {"format_version": FORMAT_VERSION, "generated_by": f"mlacheck {__version__}", "families": families}


def write_manifest(data: dict, path: Path) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise MlacheckError(f"--output {path}: cannot write the manifest: {exc}") from None
