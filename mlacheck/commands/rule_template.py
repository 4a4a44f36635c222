"""`mlacheck rules --template MODULE`: a starting rule for the installed code of a module that no loaded rule
describes (a fork, a new release), made from the loaded rules of the same module: each copied with the installed
distribution, version and the fingerprint of its key functions as installed, and a note of what to re-read."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from mlacheck.capture.fingerprint import fingerprint
from mlacheck.capture.layouts import provider
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import RuleSet


def template(rules: RuleSet, module_name: str) -> str:
    """The rule files of `module_name`, retargeted at what is installed (TOML text, one file after another)."""
    known = [rule for rule in rules.families if rule.family.module == module_name]
    if not known:
        modules = ", ".join(sorted({rule.family.module for rule in rules.families}))
        raise MlacheckError(
            f"--template {module_name}: no loaded rule watches that module; start from one of {modules}"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the library's import error, in one line
        raise MlacheckError(f"--template {module_name}: cannot import it ({type(exc).__name__}: {exc})") from None
    installed = provider(module)
    parts = []
    for rule in known:
        text = Path(rule.source).read_text(encoding="utf-8")
        code = fingerprint(module, rule.family.key_functions)
        text = _set(text, "distribution", f'"{installed.distribution or rule.family.distribution}"')
        text = _set(text, "checked_versions", f'"=={installed.version}"' if installed.version else '">=0"')
        text = _set(text, "fingerprint", f'"{code}"' if code else '"unreadable: fix key_functions"')
        parts.append(
            f"# A starting rule for {module_name} as installed ({installed}),\n"
            f"# copied from {Path(rule.source).name} ({rule.family.distribution} {' or '.join(rule.family.version_ranges)}).\n"
            "# Re-read the installed code before using it: key_fields must name the installed key's fields in order,\n"
            "# and the family's name must differ from the rule's it was copied from.\n" + text
        )
    return "\n".join(parts)


def _set(text: str, name: str, value: str) -> str:
    """The [family] table's `name = ...` line (one line or a bracketed list) set to `value`, or added after `name =`."""
    pattern = re.compile(rf"^{name} = (\[[^\]]*\]|[^\n]*)$", re.MULTILINE)
    if pattern.search(text):
        return pattern.sub(f"{name} = {value}", text, count=1)
    return re.sub(r"^(name = [^\n]*)$", rf"\1\n{name} = {value}", text, count=1, flags=re.MULTILINE)
