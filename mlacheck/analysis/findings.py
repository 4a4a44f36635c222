"""Findings: what the variant tables break, code by code (`codes.py` says what each code means)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlacheck import codes
from mlacheck.analysis.tables import ProcessFamily, Variant
from mlacheck.codes import Severity
from mlacheck.keys import JsonValue, Key, key_text, spelling_text, value_text
from mlacheck.rulefiles import RuleFile


@dataclass
class Finding:
    code: str
    family: str
    key: Key
    message: str
    hint: str
    nearest: Key | None = None
    diff: dict[str, list[JsonValue]] = field(default_factory=dict)
    drivers: dict[str, list[str]] = field(default_factory=dict)  # diff field -> what drives it
    site: str | None = None
    stack: list[str] = field(default_factory=list)
    proc: int | None = None  # the process it came from (per-process codes)
    summary: str = ""  # one line: the variant by the fields that tell it apart, and the stall, waste or breach

    @property
    def name(self) -> str:
        return codes.lookup(self.code).name

    @property
    def severity(self) -> Severity:
        return codes.lookup(self.code).severity


LONG_KEY = 8  # fields; a finding names a longer key by the fields that tell it apart (the JSON has it whole)


def named(key: Key, fields: list[str] | tuple[str, ...], telling: list[str] | tuple[str, ...]) -> str:
    """`(field=value, ...)`, or for a long key only its `telling` fields and how many others there are."""
    shown = [name for name in telling if name in key]
    if len(key) <= LONG_KEY or not shown:
        return key_text(key, list(fields))
    return (
        key_text({name: key[name] for name in shown}, list(fields))[:-1] + f", and {len(key) - len(shown)} more fields)"
    )


SHORT_KEY = 3  # fields a summary shows of a variant that no field tells apart


def telling(key: Key, fields: list[str] | tuple[str, ...], telling: list[str] | tuple[str, ...]) -> str:
    """`(field=value, ...)` of the `telling` fields only (a summary line); without any, the first few fields."""
    shown = [name for name in telling if name in key]
    if shown:
        return key_text({name: key[name] for name in shown}, list(fields))
    if len(key) <= SHORT_KEY:
        return key_text(key, list(fields))
    return key_text(dict(list(key.items())[:SHORT_KEY]), list(fields))[:-1] + ", …)"


def nearest(key: Key, candidates: list[Key]) -> tuple[Key | None, dict[str, list[JsonValue]]]:
    """The candidate key with the fewest fields that differ from `key` (the first on a tie), and the diff:
    {field: [candidate's value, key's value]}."""
    best: tuple[Key | None, dict[str, list[JsonValue]]] = (None, {})
    for candidate in candidates:
        diff = {name: [candidate.get(name), value] for name, value in key.items() if candidate.get(name) != value}
        if best[0] is None or len(diff) < len(best[1]):
            best = (candidate, diff)
    return best


def serving_path_finding(rule: RuleFile, table: ProcessFamily, variant: Variant, varying: list[str]) -> Finding:
    """MLA001: a variant compiled inside a dispatch call while serving."""
    family = rule.family
    precompiled = [v for v in table.variants.values() if v.precompiled and v is not variant]
    nearest_key, diff = (variant.key, {}) if variant.precompiled else nearest(variant.key, [v.key for v in precompiled])
    drivers = {
        name: rule.fields[name].varies_with for name in diff if name in rule.fields and rule.fields[name].varies_with
    }
    if variant.unfinished:
        stall = f"a stall of at least {variant.serving_path_compile_s:.1f} s that never ended ({variant.unfinished})"
    elif variant.serving_path_compile_s is not None:
        stall = f"a {variant.serving_path_compile_s:.1f} s stall"
    elif variant.serving_path_origin == "unknown":
        stall = "no watched compile made it (loaded from a persistent cache, or made past the rule's compile function)"
    else:
        stall = "a stall (not measured: --compile skip)"
    text = named(variant.key, family.key_fields, list(diff))
    seconds = (
        f"{'≥' if variant.unfinished else ''}{variant.serving_path_compile_s:.1f} s serving-path compile"
        + (", never finished" if variant.unfinished else "")
        if variant.serving_path_compile_s is not None
        else "serving-path compile (not timed)"
    )
    summary = f"{telling(variant.key, family.key_fields, [*varying, *diff])}: {seconds}"  # which one, and how
    if variant.precompiled:
        summary += ", again: its precompiled entry was dropped"
        closest = (
            f"it was precompiled at {variant.compiled_by}, but its cache entry was dropped (cleared, popped or "
            "evicted) before this dispatch, so it compiled again"
        )
        hint = (
            "keep the warm-up's entries in the cache: nothing may clear it or evict from it between warm-up and serving"
        )
    elif nearest_key is None:
        closest, hint = (
            "nothing of this family was precompiled in this process",
            f"add a warm-up that precompiles {text}",
        )
    elif not diff:
        closest = (
            "a variant of the same field values was precompiled under another spelling of the functools key (MLA006)"
        )
        hint = codes.lookup("MLA006").hint
    else:
        closest = "the nearest precompiled variant differs in " + ", ".join(
            f"{name} (precompiled {value_text(old)}, dispatched {value_text(new)}"
            + (f"; follows {', '.join(drivers[name])}" if name in drivers else "")
            + ")"
            for name, (old, new) in diff.items()
        )
        if drivers and len(drivers) == len(diff):
            driven = list(dict.fromkeys(what for names in drivers.values() for what in names))
            hint = f"warm up (capture) this {' / '.join(driven)}, or precompile " + ", ".join(
                f"{n}={value_text(v)}" for n, (_, v) in diff.items()
            )
        else:
            hint = (
                "make the warm-up compile "
                + ", ".join(f"{n}={value_text(v)}" for n, (_, v) in diff.items())
                + " as the dispatch does"
            )
    call = (
        " (" + ", ".join(f"{name}={value_text(value)}" for name, value in variant.first_call.items()) + ")"
        if variant.first_call
        else ""
    )
    return Finding(
        "MLA001",
        family.name,
        variant.key,
        f"{text} compiled on the serving path: {stall} in the first call that dispatched it{call}; {closest}",
        hint,
        nearest_key,
        diff,
        drivers,
        variant.serving_path_site,
        variant.serving_path_stack,
        table.proc,
        summary,
    )


def unbounded_findings(rule: RuleFile, table: ProcessFamily) -> tuple[list[Finding], set[int]]:
    """MLA008: a key field that took more than the rule's `unbounded_after` values on the serving path that no
    warm-up variant had, once per field and process; and the vids of the serving-path compiles it stands for (those
    differing from their nearest precompiled variant in such fields only), which get no MLA001 of their own."""
    limit = rule.family.unbounded_after
    variants = sorted(table.variants.items())
    serving = [(vid, v) for vid, v in variants if v.serving_path_compile and not v.precompiled]
    if limit is None or len(serving) <= limit:
        return [], set()
    precompiled = [v for _, v in variants if v.precompiled]
    unbounded: dict[str, list[JsonValue]] = {}
    for name in rule.family.key_fields:
        warm = {value_text(v.key.get(name)) for v in precompiled}
        new = [text for text in dict.fromkeys(value_text(v.key.get(name)) for _, v in serving) if text not in warm]
        if len(new) > limit:
            unbounded[name] = new
    if not unbounded:
        return [], set()
    folded: set[int] = set()
    reference = precompiled or [serving[0][1]]
    for vid, variant in serving:
        _, diff = nearest(variant.key, [v.key for v in reference])
        if diff and set(diff) <= set(unbounded):
            folded.add(vid)
    findings = []
    for name, values in unbounded.items():
        stalls = [v.serving_path_compile_s for vid, v in serving if vid in folded and v.serving_path_compile_s]
        first = next(v for _, v in serving if value_text(v.key.get(name)) == values[0])
        warm = list(dict.fromkeys(value_text(v.key.get(name)) for v in precompiled))
        shown = ", ".join(values[:6]) + (f", ... ({len(values) - 6} more)" if len(values) > 6 else "")
        drivers = {name: rule.fields[name].varies_with} if name in rule.fields and rule.fields[name].varies_with else {}
        findings.append(
            Finding(
                "MLA008",
                rule.family.name,
                {},
                f"{name} took {len(values)} values on the serving path that no warm-up variant had ({shown}): each "
                f"compiled the kernel again"
                + (f", {sum(stalls):.1f} s of serving-path compile in all" if stalls else "")
                + "; the warm-up compiled "
                + (f"{name} = {', '.join(warm)}" if warm else "nothing of it")
                + (f"; {name} follows {', '.join(drivers[name])}" if drivers else ""),
                codes.lookup("MLA008").hint,
                diff={name: [warm, values]},
                drivers=drivers,
                site=first.serving_path_site,
                stack=first.serving_path_stack,
                proc=table.proc,
                summary=f"({name}): {len(values)} values compiled on the serving path"
                + (f", {sum(stalls):.1f} s" if stalls else ""),
            )
        )
    return findings, folded


def dead_warmup_finding(
    rule: RuleFile, variant: Variant, proc: int | None, varying: list[str], elsewhere: str = ""
) -> Finding:
    """MLA002: a precompiled variant that nothing dispatched."""
    wasted = (
        f"{variant.compile_s:.1f} s of compile wasted"
        if variant.compile_s is not None
        else "its compile time is wasted"
    )
    return Finding(
        "MLA002",
        rule.family.name,
        variant.key,
        f"{named(variant.key, rule.family.key_fields, varying)} was precompiled at {variant.compiled_by} but never "
        f"dispatched{elsewhere}: {wasted}",
        codes.lookup("MLA002").hint,
        site=variant.compiled_by,
        proc=proc,
        summary=f"{telling(variant.key, rule.family.key_fields, varying)}: precompiled, never dispatched{elsewhere}"
        + (f" ({variant.compile_s:.1f} s wasted)" if variant.compile_s is not None else ""),
    )


def contract_findings(rule: RuleFile, variant: Variant, context: dict[str, str], varying: list[str]) -> list[Finding]:
    """MLA003: key fields that break the rule file's contracts where the context says they apply."""
    findings = []
    for contract in rule.contract:
        expected = contract.expected(context)
        actual = value_text(variant.key.get(contract.field))
        if expected is None or not contract.applies(context) or actual == expected:
            continue
        where = ", ".join(f"{name}={context[name]}" for name in contract.when)
        role = "precompiled" if variant.precompiled else "dispatched"
        findings.append(
            Finding(
                "MLA003",
                rule.family.name,
                variant.key,
                f"{role} {named(variant.key, rule.family.key_fields, [*varying, contract.field])}: {contract.field} is {actual}, "
                "the contract "
                f"requires {expected}"
                + (f" where {where}" if where else "")
                + (f": {contract.why}" if contract.why else ""),
                f"make {contract.field}={expected} where the key is computed",
                site=variant.compiled_by or variant.serving_path_site or variant.first_dispatch_site,
                summary=f"{role} {telling(variant.key, rule.family.key_fields, [*varying, contract.field])}: "
                f"{contract.field} is {actual}, the contract requires {expected}",
            )
        )
    return findings


def spelling_findings(rule: RuleFile, table: ProcessFamily, varying: list[str]) -> list[Finding]:
    """MLA006: one key's field values cached under two spellings of a functools key: compiled twice."""
    by_values: dict[tuple, list[Variant]] = {}
    for variant in table.variants.values():
        if variant.spelling is not None and (variant.precompiled or variant.serving_path_compile):
            by_values.setdefault(variant.identity[0], []).append(variant)
    findings = []
    for variants in by_values.values():
        if len(variants) < 2:
            continue
        first, second = variants[0], variants[1]

        def described(v: Variant) -> str:
            site = v.compiled_by if v.precompiled else v.serving_path_site
            phase = v.compile_phase if v.precompiled else "serving"
            return f"spelled {spelling_text(v.spelling)} at {site} ({phase})"

        findings.append(
            Finding(
                "MLA006",
                rule.family.name,
                first.key,
                f"{named(first.key, rule.family.key_fields, varying)} was compiled {len(variants)} times, under {len(variants)} "
                f"spellings of one functools key: {described(first)}; {described(second)}. The cache keys on how the call "
                "is spelled, so the warm-up's entry is never hit by the other spelling",
                codes.lookup("MLA006").hint,
                site=second.serving_path_site or second.compiled_by,
                proc=table.proc,
                summary=f"{telling(first.key, rule.family.key_fields, varying)}: compiled {len(variants)} times, "
                f"under {len(variants)} spellings of one functools key",
            )
        )
    return findings


def key_layout_findings(rule: RuleFile, variants: list[Variant]) -> list[Finding]:
    """MLA004: observed keys whose fields are not the ones the rule names."""
    expected = list(rule.family.key_fields)
    findings, seen = [], set()
    for variant in variants:
        names = list(variant.key)
        if names == expected or tuple(names) in seen:
            continue
        seen.add(tuple(names))
        missing = [n for n in expected if n not in names]
        extra = [n for n in names if n not in expected]
        what = (
            f"observed key has {len(names)} fields, the rule names {len(expected)}"
            if len(names) != len(expected)
            else "observed key fields are in another order than the rule's"
        )
        details = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"not in the rule: {', '.join(extra)}" if extra else "",
            )
            if part
        )
        findings.append(
            Finding(
                "MLA004",
                rule.family.name,
                variant.key,
                f"{what} ({', '.join(expected)})" + (f": {details}" if details else ""),
                f"re-read {rule.family.module} and update key_fields in {rule.source}",
            )
        )
    return findings


def stale_rule_findings(rule: RuleFile, observed: list[tuple]) -> tuple[list[Finding], list[str]]:
    """MLA004 by distribution (a fork installs the package), by code (the key functions' fingerprint changed) or,
    without a fingerprint, by version; and notes. `observed` holds (version, fingerprint, providers)."""
    family = rule.family
    findings, notes = [], []
    for version, fingerprint, providers in observed:
        if providers and not any(_same_distribution(p.rpartition(" ")[0], family.distribution) for p in providers):
            findings.append(
                Finding(
                    "MLA004",
                    family.name,
                    {},
                    f"{family.module.partition('.')[0]} is installed by {', '.join(providers)}, not by "
                    f"{family.distribution}, the distribution this rule was written for: its key layout "
                    "and cache may differ",
                    f"write a rule file for {providers[0].rpartition(' ')[0]} (copy {rule.source} and "
                    "re-read its cache and key), or install " + family.distribution,
                )
            )
            continue
        same_code = fingerprint in family.fingerprints
        if family.fingerprints and fingerprint is not None and not same_code:
            findings.append(
                Finding(
                    "MLA004",
                    family.name,
                    {},
                    f"the code {family.name}'s key depends on ({', '.join(family.key_functions)}) changed in "
                    f"{family.distribution} {version}: fingerprint {fingerprint}, the rule was checked "
                    f"against {' or '.join(family.fingerprints)}",
                    f"re-check {rule.source} against {family.distribution} {version}, then set fingerprint = "
                    f'"{fingerprint}" (or add it to the list where both versions stay checked; '
                    "mlacheck rules --fingerprints prints it)",
                )
            )
        elif not family.checks_version(version):
            if same_code:
                notes.append(
                    f"{family.distribution} {version} lies outside the checked versions, but the code the key "
                    "depends on is unchanged (same fingerprint)"
                )
            else:
                ranges = " or ".join(family.version_ranges)
                findings.append(
                    Finding(
                        "MLA004",
                        family.name,
                        {},
                        f"installed {family.distribution} {version} lies outside the versions this rule "
                        f"was checked against ({ranges})",
                        f"re-check {rule.source} against {family.distribution} {version} and widen checked_versions",
                    )
                )
    return findings, notes


def _same_distribution(first: str, second: str) -> bool:
    return first.lower().replace("_", "-") == second.lower().replace("_", "-")


def numerics_findings(rule: RuleFile, variant: Variant, varying: list[str]) -> list[Finding]:
    """MLA005: a launched variant's output beyond the rule's tolerance."""
    if rule.numerics is None or variant.numerics is None:
        return []
    breaches = rule.numerics.breaches(variant.numerics)
    if not breaches:
        return []
    return [
        Finding(
            "MLA005",
            rule.family.name,
            variant.key,
            f"{named(variant.key, rule.family.key_fields, varying)}: the kernel's output against the reference on the "
            "same inputs: " + "; ".join(breaches),
            codes.lookup("MLA005").hint,
            summary=f"{telling(variant.key, rule.family.key_fields, varying)}: " + "; ".join(breaches),
        )
    ]
