"""The run's table of a family: every process's variants merged (`merge`), variants of the same key and spelling
summed."""

from __future__ import annotations

from mlacheck.analysis.figures import worst
from mlacheck.analysis.tables import ProcessFamily, Variant, precompiled, serving_path_compile


def merge(tables: list[ProcessFamily]) -> list[Variant]:
    """One table over every process: variants of the same key and spelling summed. A family one process alone
    recorded, no two of its variants alike, is its own variants: merging one table copies each variant's fields as
    they are (`tables`' functions set them so), but `first_phases`, which only reading the traces reads."""
    if len(tables) == 1:
        variants = list(tables[0].variants.values())
        if len({variant.identity for variant in variants}) == len(variants):
            return variants
    return merged(tables)


def merged(tables: list[ProcessFamily]) -> list[Variant]:
    """`merge` variant by variant, into new ones."""
    by_identity: dict[tuple, Variant] = {}
    for table in tables:
        for variant in table.variants.values():
            identity = variant.identity
            into = by_identity.get(identity)
            if into is None:
                by_identity[identity] = into = Variant(variant.key, variant.spelling)
            into.procs.append(table.proc)
            into.dispatches += variant.dispatches
            into.warmup_dispatches += variant.warmup_dispatches
            into.capture_dispatches += variant.capture_dispatches
            into.at_least |= variant.at_least
            into.captured |= variant.captured
            into.unverified = (into.unverified or variant.unverified) and not into.dispatches
            if into.first_dispatch_site is None:
                into.first_dispatch_site, into.first_call = variant.first_dispatch_site, variant.first_call
            if variant.precompiled:
                precompiled(into, variant.compile_phase, variant.compile_s, variant.compiled_by)
            if variant.serving_path_compile:
                serving_path_compile(
                    into,
                    variant.serving_path_compile_s,
                    variant.serving_path_site,
                    variant.serving_path_stack,
                    variant.serving_path_origin,
                )
                into.unfinished = into.unfinished or variant.unfinished
            into.numerics = worst(into.numerics, variant.numerics)
    return list(by_identity.values())
