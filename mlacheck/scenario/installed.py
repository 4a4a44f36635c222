"""Capture in the scenario's own process, put in place as program mode's agent puts it (`program/agent.py` `_install`):
for each module a driven kernel's families live in, the capture of the rule that describes the installed code
(`capture.watch.family_captures`, which asks `capture.layouts.choose`) or an unwatched layout that says why none does;
the compile nets; under --dry the families' entry functions. The agent itself is not used: it writes a run folder's
per-process trace, while the scenario's events go to memory (and the progress display), and it knows no launch policy.
"""

from __future__ import annotations

import importlib
import sys

from mlacheck.capture import CapturePolicy, FamilyCapture, LaunchPolicy
from mlacheck.capture.dry_entries import dry_entries
from mlacheck.capture.layouts import provider
from mlacheck.capture.unwatched import UnwatchedLayout
from mlacheck.capture.watch import compile_nets, family_captures
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import RuleFile, RuleSet
from mlacheck.rulefiles.schema import PhaseRule
from mlacheck.sinks import EventSink


class Installed:
    """A context manager: the captures of `modules` in place while it is entered, removed (last first) after."""

    def __init__(
        self,
        modules: list[object],
        rules: RuleSet,
        sink: EventSink,
        policy: CapturePolicy,
        phases: tuple[PhaseRule, ...],
        launch: LaunchPolicy,
    ) -> None:
        names = [module.__name__ for module in modules]
        self.families = [
            capture
            for module in modules
            for capture in family_captures(
                module, [r for r in rules.families if r.family.module == module.__name__], sink, policy, phases, launch
            )
        ]
        self.entries = dry_entries([r for r in rules.families if r.family.module in names], policy)
        self.nets = compile_nets(rules.compile_nets, sink, phases, policy.replace_launch)

    def __enter__(self) -> Installed:
        try:
            for capture in self.families:
                capture.install()
            for entry in self.entries:
                entry.install(importlib.import_module(entry.module_name))
            for net in self.nets:
                module = sys.modules.get(net.net.module)
                if module is not None:  # a builder that nothing the scenario drives loaded compiles nothing here
                    net.install(module)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in reversed(self.hooks):
            hook.remove()

    @property
    def hooks(self) -> list:
        """Every capture, entry and net (each is told where a start-up phase starts and ends)."""
        return [*self.families, *self.entries, *self.nets]

    def family(self, module: object, rules: list[RuleFile]) -> str:
        """The name of the family watching the cache that `rules` describe, in `module`. Where none of them applies to
        the installed code, the scenario cannot drive it (nothing it dispatched would be checked, and without the
        rule's stand-ins a dry or trace run cannot reach the lookup): that is one line."""
        for capture in self.families:
            if isinstance(capture, FamilyCapture) and any(capture.rule is rule for rule in rules):
                return capture.family.name
        reasons = [
            reason
            for capture in self.families
            if isinstance(capture, UnwatchedLayout) and any(rule in capture.rules for rule in rules)
            for reason in capture.reasons
        ]
        raise MlacheckError(
            f"the scenario drives {module.__name__}, but no rule file describes the installed code "
            f"({'; '.join(reasons) or 'no rule watches its cache'}; installed: {provider(module)}); install a version "
            "a rule was checked against, or record this one's fingerprint in the rule (mlacheck rules --fingerprints)"
        )
