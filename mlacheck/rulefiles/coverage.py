"""How the loaded rules see a JIT-compiling library's compiles (a `[[jit_library]]` entry): what watches it, or which
of its compile paths nothing watches. A path is watched where a family's module, a compile net's entry point or a
watcher's module lies inside it."""

from __future__ import annotations

from mlacheck import qualnames
from mlacheck.rulefiles import RuleSet
from mlacheck.rulefiles.schema import JitLibrary


def watchers(rules: RuleSet) -> list[tuple[str, str]]:
    """(module, what watches it) for every family, compile net and watcher the rules load."""
    found = [(rule.family.module, f"family {rule.family.name}") for rule in rules.families]
    found += [
        (qualnames.split(net.function)[0], f"compile net {net.function} ({net.label})") for net in rules.compile_nets
    ]
    found += [(module, f"[triton] of {module}: every kernel it compiles") for module in rules.tritons]
    return found


def coverage(rules: RuleSet, library: JitLibrary) -> tuple[list[str], list[str]]:
    """What watches the library's compiles, and which of its compile paths nothing watches. A library with
    `compiles_through` is watched when every one of those modules is; one without, when one of its own modules is."""
    found = watchers(rules)
    paths = library.compiles_through or library.modules
    watched = {path: [what for module, what in found if _within(module, path)] for path in paths}
    if library.compiles_through:
        return list(dict.fromkeys(w for ws in watched.values() for w in ws)), [p for p, ws in watched.items() if not ws]
    seen = list(dict.fromkeys(w for ws in watched.values() for w in ws))
    return seen, [] if seen else list(paths)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")
