"""The checks, one module per finding code (ruff's one rule, one file), each a function of a kernel family's view
(`check`) or of the run's (`check_run`: what no family accounts for), and `CHECKS`, the registry that runs them.

A check returns what it found: findings, and where it could not judge, what it could not check and the run context
that would let it (`NotChecked`), a reason the run cannot pass (`Incomplete`; with `stop`, the family's rule does not
describe its code and no later check looks at the family), a note of the family (`Note`). MLA004 runs first for that
reason. Checks do not import each other: what several need of a family is said once in `analysis.view`.

A new check is a module here and one line in `CHECKS`; its code's page is one `Code` in `mlacheck/codes.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mlacheck.analysis.checks import (
    mla001_serving_path,
    mla002_dead_warmup,
    mla003_field_contract,
    mla004_stale_rule,
    mla005_numerics,
    mla006_key_spelling,
    mla007_unwatched_compile,
    mla008_unbounded,
)
from mlacheck.analysis.findings import Finding, Incomplete, NotChecked, Note
from mlacheck.analysis.view import FamilyView, RunView


@dataclass(frozen=True)
class Check:
    code: str
    family: Callable[[FamilyView], list] | None = None  # run over each family's view, in order
    run: Callable[[RunView], list] | None = None  # run once over the run's view, after every family's


CHECKS = (
    Check("MLA004", family=mla004_stale_rule.check),
    Check("MLA001", family=mla001_serving_path.check, run=mla001_serving_path.check_run),
    Check("MLA002", family=mla002_dead_warmup.check),
    Check("MLA003", family=mla003_field_contract.check),
    Check("MLA005", family=mla005_numerics.check),
    Check("MLA006", family=mla006_key_spelling.check),
    Check("MLA007", run=mla007_unwatched_compile.check_run),
    Check("MLA008", family=mla008_unbounded.check),
)


@dataclass
class Judged:
    """What the checks found, sorted by kind."""

    findings: list[Finding] = field(default_factory=list)
    not_checked: set[str] = field(default_factory=set)
    needed: set[str] = field(default_factory=set)  # the run-context names the unchecked contracts need
    incomplete: list[str] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)  # family -> its notes
    stopped: set[str] = field(default_factory=set)  # families whose rule does not describe their code

    def take(self, found: list, family: str | None = None) -> None:
        for item in found:
            if isinstance(item, Finding):
                self.findings.append(item)
            elif isinstance(item, NotChecked):
                self.not_checked.add(item.line)
                self.needed.update(item.needs)
            elif isinstance(item, Incomplete):
                self.incomplete.append(item.line)
                if item.stop:
                    self.stopped.add(family)
            elif isinstance(item, Note):
                self.notes.setdefault(family, []).append(item.line)


def run_checks(views: list[FamilyView], run: RunView, checks: tuple[Check, ...] = CHECKS) -> Judged:
    """Every family check over every family's view (a family stops at a stale rule), then every run check."""
    judged = Judged()
    for view in views:
        for check in checks:
            if check.family is not None and view.name not in judged.stopped:
                judged.take(check.family(view), view.name)
    for check in checks:
        if check.run is not None:
            judged.take(check.run(run))
    return judged
