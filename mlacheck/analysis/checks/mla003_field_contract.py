"""MLA003 field-contract: a key field that breaks one of the rule's `[[contract]]`s where the run's context says the
contract applies (`codes.py` has its page).

A contract is data (`rulefiles.schema.Contract`): a field, the value it must equal (`equals`, or the context value
named by `equals_context`) and the context values under which it applies (`when`). Deciding it is here: it applies
where every `when` entry is known in the run's context and matches it; a contract whose context the run lacks is not
checked (one line each, and the names to give with --context). Each variant is judged in each process with that
process's context; a finding several processes share is reported once.
"""

from __future__ import annotations

from mlacheck.analysis.findings import Finding, NotChecked, named, telling
from mlacheck.analysis.tables import Variant
from mlacheck.analysis.view import FamilyView, identity_of
from mlacheck.keys import value_text
from mlacheck.rulefiles.schema import Contract


def check(view: FamilyView) -> list[Finding | NotChecked]:
    found: list[Finding | NotChecked] = []
    seen: set[tuple] = set()
    for table, context in zip(view.tables, view.contexts):
        for contract in view.rule.contract:
            missing = [need for need in needs(contract) if need not in context]
            if missing and table.variants:
                found.append(
                    NotChecked(
                        f"{view.name}: the {contract.field} contract needs {', '.join(missing)} (give --context "
                        + " ".join(f"{name}=..." for name in missing)
                        + ")",
                        tuple(missing),
                    )
                )
        live = [(contract, wanted) for contract, wanted in _wanted(view, context) if applies(contract, context)]
        for variant in table.variants.values() if live else ():
            for finding in _broken(view, variant, context, live):
                if identity_of(finding) not in seen:
                    seen.add(identity_of(finding))
                    found.append(finding)
    return found


def needs(contract: Contract) -> list[str]:
    """The context names the contract cannot be evaluated without."""
    return [*contract.when, *([contract.equals_context] if contract.equals_context else [])]


def applies(contract: Contract, context: dict[str, str]) -> bool:
    """True when every `when` entry is known in the context and matches it."""
    return all(
        context.get(name) in ([wanted] if isinstance(wanted, str) else wanted) for name, wanted in contract.when.items()
    )


def expected(contract: Contract, context: dict[str, str]) -> str | None:
    """The value the field must have, as text, or None where the context does not say."""
    return value_text(contract.equals) if contract.equals_context is None else context.get(contract.equals_context)


def _wanted(view: FamilyView, context: dict[str, str]) -> list[tuple[Contract, str]]:
    """Each contract of the rule whose required value the context says, with it."""
    return [
        (contract, wanted) for contract in view.rule.contract if (wanted := expected(contract, context)) is not None
    ]


def _broken(
    view: FamilyView, variant: Variant, context: dict[str, str], live: list[tuple[Contract, str]]
) -> list[Finding]:
    """The findings of the contracts that apply in the context (`live`, with the value each requires) that the
    variant breaks."""
    family = view.rule.family
    findings = []
    for contract, wanted in live:
        actual = value_text(variant.key.get(contract.field))
        if actual == wanted:
            continue
        where = ", ".join(f"{name}={context[name]}" for name in contract.when)
        role = "precompiled" if variant.precompiled else "dispatched"
        fields = [*view.varying, contract.field]
        findings.append(
            Finding(
                "MLA003",
                family.name,
                variant.key,
                f"{role} {named(variant.key, family.key_fields, fields)}: {contract.field} is {actual}, the contract "
                f"requires {wanted}"
                + (f" where {where}" if where else "")
                + (f": {contract.why}" if contract.why else ""),
                f"make {contract.field}={wanted} where the key is computed",
                site=variant.compiled_by or variant.serving_path_site or variant.first_dispatch_site,
                summary=f"{role} {telling(variant.key, family.key_fields, fields)}: "
                f"{contract.field} is {actual}, the contract requires {wanted}",
            )
        )
    return findings
