"""The rule of each recorded family: a rule file's `[family]`, or, for a family found at run time (a kernel of a Triton),
the rule the `[triton]` table of that Triton makes for it, with what of its `[[triton.kernel]]` entry does not fit the
kernel."""

from __future__ import annotations

from mlacheck.capture.triton.runtime import FOUND
from mlacheck.rulefiles import RuleFile, RuleSet, Triton
from mlacheck.rulefiles.schema import Family


def declared(
    rules: RuleSet, recorded: dict[str, list[str]], found: dict[str, str] | None = None
) -> dict[str, tuple[RuleFile, list[str]]]:
    """name -> (its rule, what of its [[triton.kernel]] entry is stale): the declared families in rule-file order, then
    those a table of the rules watches among the `recorded` ones (name -> the key fields it was recorded with), by
    name: a kernel of the Triton its name begins with (`triton:`, `tokenspeed_triton:`, or one the processes found by
    its layout: `found`, its import name -> the module of the table its capture took)."""
    rules_of = {rule.family.name: (rule, []) for rule in rules.families}
    tables = [(file.triton, file.source) for file in rules.files if file.triton is not None]
    tables += found_tables(tables, found or {})
    for name in sorted(set(recorded) - set(rules_of)):
        watching = next(((table, source) for table, source in tables if name.startswith(table.prefix)), None)
        if watching is None:
            continue
        rule, stale = triton_rule(watching[0], name, recorded[name], watching[1])
        if rule is not None:
            rules_of[name] = (rule, stale)
    return rules_of


def found_tritons(facts: dict) -> dict[str, str]:
    """The Tritons the processes found by their layout (their context says so: `runtime.FOUND`): each import name ->
    the module of the table its capture took."""
    return {
        name.removeprefix(FOUND): like
        for fact in facts.values()
        for name, like in fact.context.items()
        if name.startswith(FOUND)
    }


def found_tables(tables: list[tuple[Triton, str]], found: dict[str, str]) -> list[tuple[Triton, str]]:
    """The table of each Triton found by its layout: the one its capture took, under its own import name."""
    by_module = {table.module: (table, source) for table, source in tables}
    return [
        (by_module[like][0].model_copy(update={"module": name, "distribution": name}), by_module[like][1])
        for name, like in sorted(found.items())
        if like in by_module and name not in by_module
    ]


def triton_rule(table: Triton, name: str, key_fields: list[str], source: str) -> tuple[RuleFile | None, list[str]]:
    """The rule of a recorded family `name` (None where it is not a kernel of this Triton) and what of the
    [[triton.kernel]] entry does not fit the kernel's parameters (a stale rule)."""
    if not name.startswith(table.prefix) or not key_fields:
        return None, []
    kernel = name.removeprefix(table.prefix).removesuffix(table.AUTOTUNE)
    entry = next((e for e in table.kernel if table.family_name(e.kernel) == table.prefix + kernel), None)
    fields, contracts, stale = {}, [], []
    if entry is not None and not name.endswith(table.AUTOTUNE):
        fields = {field: note for field, note in entry.fields.items() if field in key_fields}
        contracts = [contract for contract in entry.contract if contract.field in key_fields]
        stale = [
            f"[[triton.kernel]] {entry.kernel} names {field!r}, which is not one of its parameters "
            f"({', '.join(key_fields)})"
            for field in [*entry.fields, *(c.field for c in entry.contract)]
            if field not in key_fields
        ]
    family = Family(
        name=name,
        description=f"Triton kernel {kernel}, compiled by {table.module}"
        + (" (its autotuner's tunings)" if name.endswith(table.AUTOTUNE) else ""),
        distribution=table.distribution,
        checked_versions=table.checked_versions,
        arches=table.arches,
        module=kernel,
        cache="device_caches",
        cache_kind="triton",
        dispatch=[kernel],
        key_fields=key_fields,
        site_skip=table.site_skip,
        unbounded_after=table.unbounded_after,
    )
    return RuleFile(family=family, fields=fields, contract=contracts, source=source), stale
