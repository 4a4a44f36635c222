"""The rule files a saved run was recorded under (its run folder's rules/), for `mlacheck report` without --rules."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.files import RULES_LIMIT, read_bytes, regular_files
from mlacheck.program.run_folder import RunFolder
from mlacheck.rulefiles import RuleSet, load_rules


def run_rules(paths: list[Path]) -> RuleSet:
    """The union of the rule files saved in the run folders; a family declared differently by two runs is refused."""
    files: dict[str, tuple[str, Path]] = {}
    for path in paths:
        for rule_file in regular_files(RunFolder(path).rules_dir, "*.toml"):
            digest = hashlib.sha256(read_bytes(rule_file, RULES_LIMIT)).hexdigest()
            earlier = files.setdefault(rule_file.name, (digest, path))
            if earlier[0] != digest:
                raise MlacheckError(
                    f"{rule_file.name}: runs {earlier[1]} and {path} were recorded under different versions "
                    "of this rule file; report them separately, or pass --rules to analyse both with one"
                )
    if not files:
        raise MlacheckError(f"{paths[0]}: no saved rule files in its rules/ folder; pass --rules")
    folder = next(path for path in paths if any(RunFolder(path).rules_dir.glob("*.toml")))
    rules = _saved_rules(folder)
    for path in paths:
        if path != folder:
            rules = _union(rules, _saved_rules(path))
    return rules


def _saved_rules(path: Path) -> RuleSet:
    """The rule files saved in a run folder (checked to be small regular files above); one nested too deeply for
    the TOML reader is refused in one line, as every other malformed rule file is."""
    try:
        return load_rules(RunFolder(path).rules_dir)
    except RecursionError:
        raise MlacheckError(
            f"{RunFolder(path).rules_dir}: a saved rule file is nested too deeply; pass --rules"
        ) from None


def _union(first: RuleSet, second: RuleSet) -> RuleSet:
    sources = {Path(file.source).name for file in first.files}
    return RuleSet(first.files + [file for file in second.files if Path(file.source).name not in sources])
