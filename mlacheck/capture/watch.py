"""What capture puts in place when a module is imported: for each cache of the module that rule files declare, the
family capture of the rule that describes the installed code (`layouts.choose`), or, where none does, an unwatched
layout that says so; and the compile nets whose entry point the module holds."""

from __future__ import annotations

from mlacheck.capture.compile_net import CompileNetCapture
from mlacheck.capture.family import FamilyCapture
from mlacheck.capture.hooks import LaunchPolicy
from mlacheck.capture.layouts import choose, provider
from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.unwatched import UnwatchedLayout
from mlacheck.rulefiles.plain import CompileNet, PhaseRule, RuleFile
from mlacheck.sinks import EventSink


def family_captures(
    module: object,
    rules: list[RuleFile],
    sink: EventSink,
    policy: CapturePolicy = CapturePolicy(),
    phases: tuple[PhaseRule, ...] = (),
    launch: LaunchPolicy | None = None,
) -> list:
    """One capture per cache of `module` that `rules` declare (not installed yet)."""
    caches: dict[str, list[RuleFile]] = {}
    for rule in rules:
        caches.setdefault(rule.family.cache, []).append(rule)
    installed = provider(module)
    captures = []
    for layouts in caches.values():
        rule, reasons = choose(layouts, module, installed)
        if rule is None:
            captures.append(UnwatchedLayout(layouts, module, sink, installed, reasons))
        else:
            captures.append(FamilyCapture(rule, sink, policy, launch, phases))
    return captures


def compile_nets(
    nets: list[CompileNet], sink: EventSink, phases: tuple[PhaseRule, ...] = (), replace_launch: bool = False
) -> list:
    return [CompileNetCapture(net, sink, phases, replace_launch) for net in nets]
