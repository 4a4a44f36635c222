"""What capture puts in place when a module is imported: for each cache of the module that rule files declare, the
family capture of the rule that describes the installed code (`layouts.choose`), or, where none does, an unwatched
layout that says so; the compile nets whose entry point the module holds; under --dry the entry functions it holds.
What most processes never use (unwatched layouts, compile nets, --dry) is loaded only where it is used."""

from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

from mlacheck.capture import installed
from mlacheck.capture.family import FamilyCapture
from mlacheck.capture.fingerprint import ask_distributions, installed_version, providers
from mlacheck.capture.hooks import LaunchPolicy
from mlacheck.capture.layouts import choose, provider
from mlacheck.capture.policy import CapturePolicy
from mlacheck.rulefiles import plain
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
            from mlacheck.capture.unwatched import UnwatchedLayout  # here: most processes have none

            captures.append(UnwatchedLayout(layouts, module, sink, installed, reasons))
        else:
            captures.append(FamilyCapture(rule, sink, policy, launch, phases))
    return captures


def compile_nets(
    nets: list[CompileNet], sink: EventSink, phases: tuple[PhaseRule, ...] = (), replace_launch: bool = False
) -> list:
    if not nets:  # most modules hold none: nothing of the compile nets loaded
        return []
    from mlacheck.capture.compile_net import CompileNetCapture

    return [CompileNetCapture(net, sink, phases, replace_launch) for net in nets]


def dry_entry_hooks(rules: list[RuleFile], policy: CapturePolicy) -> list:
    """Under --dry, the families' entry functions (`dry_entries`); none, and nothing of them loaded, without."""
    if not rules or not policy.dry:
        return []
    from mlacheck.capture.dry_entries import dry_entries

    return dry_entries(rules, policy)


def ask_ahead(config: dict) -> None:
    """Ask the installed distributions now what installing capture.json's families and watchers will ask in each
    process that imports them (the provider of each family's module file, found without importing it; the versions
    and providers of its distribution): answers shared through capture/installed.py, which the program's processes
    then find ready, even a burst of workers started at once. A question asked here that a process does not ask, or
    one this misses, costs only time. The packages' distributions are read in one pass, and the answers written once."""
    installed.at_once(lambda: _ask_ahead(config))


def _ask_ahead(config: dict) -> None:
    families = [plain.rule_file(data).family for data in config.get("families", [])]
    ask_distributions(list(dict.fromkeys(family.package for family in families)))
    for family in families:
        path = _module_file(family.module)
        if path is not None:
            provider(SimpleNamespace(__name__=family.module, __file__=path))
        installed_version(family.distribution)
        providers(family.package)
    for watcher in config.get("watchers", []):
        installed_version(watcher["rule"]["distribution"])


def _module_file(name: str) -> str | None:
    """The file that importing the module `name` would run, found without importing anything: its top-level package
    by the import system, the rest by the usual layout (None where that file is not there)."""
    top, _, rest = name.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return None
    if not rest:
        return spec.origin if spec.origin and os.path.isfile(spec.origin) else None
    for folder in spec.submodule_search_locations or ():
        base = os.path.join(folder, *rest.split("."))
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(path):
                return path
    return None
