"""Rule files: TOML that declares kernel families and the engine functions around them. Strict; one-line errors.

`load_rules` reads a file or a folder (default: the bundled rules, `bundled/`) into a `RuleSet` (`loading.py`); the
schema is `schema.py` (pydantic); `plain.py` is the form an observed process reads from capture.json, without pydantic.
The loader and the schema are imported when first asked for (`__getattr__`), so that an observed process that reads
the plain form loads nothing of pydantic; `BUNDLED` is made then too (resolving a path is no work for such a process).
"""

from pathlib import Path

__all__ = ["BUNDLED", "RuleFile", "RuleSet", "Triton", "load_rule_file", "load_rules"]

_LOADED = ("RuleFile", "RuleSet", "Triton", "load_rule_file", "load_rules")


def __getattr__(name: str) -> object:
    if name == "BUNDLED":  # the rule files shipped with mlacheck
        return Path(__file__).resolve().parent / "bundled"
    if name in _LOADED:
        from mlacheck.rulefiles import loading

        return getattr(loading, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
