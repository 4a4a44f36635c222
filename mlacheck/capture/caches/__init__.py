"""Cache adapters: how capture sits in a family's cache, one module per way a library holds its cache.

A rule file's `cache_kind` names the adapter; `KINDS` maps each name to its class, imported when a family of that kind
is installed (an observed process loads only the adapters it uses). A new kind is one module here and one line in
`KINDS`. Every adapter keeps the `CacheAdapter` protocol and reports what it sees to the capture through
`hooks.CaptureHooks`; the capture never asks which kind it holds.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from mlacheck.errors import MlacheckError

if TYPE_CHECKING:  # for the annotations only (check_rules runs in the supervisor, never in an observed process)
    from mlacheck.capture.hooks import CaptureHooks
    from mlacheck.capture.install import Patches
    from mlacheck.rulefiles import RuleFile, RuleSet
    from mlacheck.rulefiles.plain import Family


class CacheAdapter(Protocol):
    """One family's cache for the run: built with (family, module, capture, patches); every replacement it makes
    goes through `patches`, which undoes it when the capture is removed."""

    @staticmethod
    def check(family: Family) -> str | None:
        """What this kind needs of the rule's [family] table and the table lacks, or None."""

    def install(self) -> None:
        """Put the recording cache in the program's cache's place (a cache that is not what the rule says is a
        `patches.stale` error)."""

    def preexisting(self) -> tuple[list, int]:
        """The keys cached before install (as far as they can be listed), and how many there are."""

    def describe(self, key: object) -> tuple[dict[str, object], dict | None]:
        """A key's fields by name (raw values), and how the call spelled it (None where the kind has no spelling)."""

    def cached(self, keys: Collection) -> list:
        """Those of `keys` that the cache holds now (a forked child lists what it inherited)."""

    def forget(self) -> None:
        """Empty whatever of the adapter's own answers lookups without the capture (front caches)."""

    def superseded(self) -> None:
        """A newer adapter watches the cache the program's module holds now (the module ran again)."""

    def audit(self) -> list[str]:
        """What went past capture since the last audit (entries it did not see enter, a cache no longer where the
        program looks), one line each, each said once; asked at each counts flush."""


KINDS: dict[str, str] = {  # each kind's class, MODULE:CLASS here, imported when a family of that kind is installed
    "dict": "attribute_dict:AttributeDict",
    "class_dict": "class_dict:ClassDict",
    "closure_dict": "closure_dict:ClosureDict",
    "functools": "functools_cache:FunctoolsCache",
    "jit_dir": "jit_dir:JitDir",
}


def kind_class(name: str) -> type[CacheAdapter] | None:
    """The adapter class of cache_kind `name` (None for a kind no adapter has)."""
    if name not in KINDS:
        return None
    module, _, attribute = KINDS[name].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)


def adapter(family: Family, module: object, capture: CaptureHooks, patches: Patches) -> CacheAdapter:
    """The adapter of the family's cache_kind (the rules were checked: `check_rules`)."""
    kind = kind_class(family.cache_kind)
    if kind is None:
        raise patches.stale(f"unknown cache_kind {family.cache_kind!r}")
    return kind(family, module, capture, patches)


def check_rules(rules: RuleSet) -> None:
    """Refuse, in one line naming the file, a family whose cache_kind no adapter has or whose table lacks what its
    kind needs."""
    for rule in rules.families:
        problem = _problem(rule)
        if problem is not None:
            raise MlacheckError(
                f"{rule.source}: family.cache_kind: {problem} (docs/rule-file-schema.md gives the schema)"
            )


def _problem(rule: RuleFile) -> str | None:
    kind = kind_class(rule.family.cache_kind)
    if kind is None:
        return f"unknown kind {rule.family.cache_kind!r}: choose one of {', '.join(KINDS)}"
    return kind.check(rule.family)
