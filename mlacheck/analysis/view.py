"""What a check looks at (`analysis/checks/`): a kernel family's view (its rule, its table in each process, its variants
merged over every process, the run context of each process) and the run's view (what no family accounts for), with
what more than one check needs to know of them, said once here: which serving-path compiles one MLA008 stands for,
which keys were compiled under several spellings (MLA006, never also dead warm-up)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from mlacheck.analysis.nearest import Nearest
from mlacheck.analysis.tables import ProcessFacts, ProcessFamily, Variant
from mlacheck.analysis.unwatched import UnwatchedCompile
from mlacheck.keys import JsonValue, key_identity, value_text, varying_fields
from mlacheck.rulefiles import RuleFile


@dataclass
class Unbounded:
    """A table's key fields that took more than the rule's `unbounded_after` values on the serving path that no
    warm-up variant had (field -> those values, in order), and the vids of the serving-path compiles that differ from
    their nearest precompiled variant in such fields only: one MLA008 stands for them."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    folded: set[int] = field(default_factory=set)
    serving: list[tuple[int, Variant]] = field(default_factory=list)  # (vid, variant), compiled on the serving path
    precompiled: list[Variant] = field(default_factory=list)


@dataclass
class FamilyView:
    """One kernel family as the checks see it."""

    rule: RuleFile
    tables: list[ProcessFamily]  # one per process that loaded it
    merged: list[Variant]  # every process's variants, merged
    contexts: list[dict[str, str]]  # per table: the run context (the rule's defaults < the process's < the run's own)
    waits: list[dict] = field(default_factory=list)  # the run's slow steps, with the compiles they overlapped
    stale_entry: list[str] = field(default_factory=list)  # what of its [[triton.kernel]] entry does not fit it
    _known: dict = field(default_factory=dict, init=False, repr=False)  # what `_per_table` computed

    @property
    def name(self) -> str:
        return self.rule.family.name

    @property
    def key_fields(self) -> list[str]:
        return list(self.rule.family.key_fields)

    @cached_property
    def varying(self) -> list[str]:
        """The key fields whose values differ between the family's variants."""
        return varying_fields([variant.key for variant in self.merged])

    @cached_property
    def observed_code(self) -> list[tuple]:
        """(version, fingerprint, providers) of the code the processes loaded, each once."""
        found = {
            (t.version, t.fingerprint, t.providers) for t in self.tables if t.version or t.fingerprint or t.providers
        }
        return sorted(found, key=str) or [(None, None, ())]

    def judged(self, table: ProcessFamily) -> list[tuple[int, Variant]]:
        """(vid, variant) of the table's variants whose key has the rule's fields (MLA004 says what of the others)."""
        return [(vid, v) for vid, v in table.variants.items() if len(v.key) == len(self.rule.family.key_fields)]

    def drivers(self, names) -> dict[str, list[str]]:
        """Of the fields `names`, those the rule says something drives, and what."""
        fields = self.rule.fields
        return {name: fields[name].varies_with for name in names if name in fields and fields[name].varies_with}

    def unbounded(self, table: ProcessFamily) -> Unbounded:
        """What of the table one MLA008 stands for."""
        return self._per_table(
            "unbounded", table, lambda: _unbounded(self.rule.family.unbounded_after, self.key_fields, table)
        )

    def precompiled(self, table: ProcessFamily) -> Nearest:
        """The keys of the table's precompiled variants, to find the nearest to a key among."""
        return self._per_table(
            "precompiled", table, lambda: Nearest([v.key for v in table.variants.values() if v.precompiled])
        )

    def respelled(self, table: ProcessFamily) -> list[list[Variant]]:
        """Groups of the table's variants of one key's field values cached under several spellings of a functools
        key, each compiled (precompiled or on the serving path)."""
        return self._per_table("respelled", table, lambda: _respelled(table))

    def _per_table(self, what: str, table: ProcessFamily, compute):
        if (what, id(table)) not in self._known:
            self._known[(what, id(table))] = compute()
        return self._known[(what, id(table))]


def _respelled(table: ProcessFamily) -> list[list[Variant]]:
    by_values: dict[tuple, list[Variant]] = {}
    for variant in table.variants.values():
        if variant.spelling is not None and (variant.precompiled or variant.serving_path_compile):
            by_values.setdefault(variant.identity[0], []).append(variant)
    return [variants for variants in by_values.values() if len(variants) > 1]


def _unbounded(limit: int | None, key_fields: list[str], table: ProcessFamily) -> Unbounded:
    variants = sorted(table.variants.items())
    serving = [(vid, v) for vid, v in variants if v.serving_path_compile and not v.precompiled]
    if limit is None or len(serving) <= limit:
        return Unbounded()
    precompiled = [v for _, v in variants if v.precompiled]
    fields: dict[str, list[JsonValue]] = {}
    for name in key_fields:
        warm = {value_text(v.key.get(name)) for v in precompiled}
        new = [text for text in dict.fromkeys(value_text(v.key.get(name)) for _, v in serving) if text not in warm]
        if len(new) > limit:
            fields[name] = new
    if not fields:
        return Unbounded()
    reference = Nearest([v.key for v in precompiled or [serving[0][1]]])
    folded = set()
    for vid, variant in serving:
        _, diff = reference.of(variant.key)
        if diff and set(diff) <= set(fields):
            folded.add(vid)
    return Unbounded(fields, folded, serving, precompiled)


@dataclass
class RunView:
    """What the run-wide checks look at: each process's facts (its compiles that never ended), the compiles no
    watched family accounted for, the slow steps."""

    facts: dict[int | None, ProcessFacts]
    unwatched: list[UnwatchedCompile]
    waits: list[dict] = field(default_factory=list)


def identity_of(finding) -> tuple:
    """What makes two findings of different processes one (a contract broken by the same variant in each)."""
    return finding.code, key_identity(finding.key), finding.message
