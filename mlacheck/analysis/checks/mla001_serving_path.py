"""MLA001 serving-path-compile: a variant compiled inside a dispatch call while serving (`codes.py` has its page).

Per process, each variant of the family that compiled on the serving path, unless an MLA008 stands for it, with the
nearest precompiled variant of that process and the fields in which it differs (and what drives them, where the rule
says); and, run-wide, each compile of a watched family that began on the serving path and never ended (or whose record
never came) before its key was known. A serving launch that waited for its variant's async compile, begun in the
warm-up and not finished when serving needed it, is one too: the warm-up covered the variant but did not finish it in
time, and the wait is its stall. Each names the other processes that waited in a slow step meanwhile.
"""

from __future__ import annotations

from mlacheck import codes
from mlacheck.analysis.findings import Finding, named, telling
from mlacheck.analysis.tables import WAIT, ProcessFamily, Variant
from mlacheck.analysis.unfinished import MEASURED, NOT_MEASURED, stall_of
from mlacheck.analysis.view import FamilyView, RunView
from mlacheck.capture.phase import SERVING
from mlacheck.keys import value_text


def check(view: FamilyView) -> list[Finding]:
    findings = []
    for table in view.tables:
        folded = view.unbounded(table).folded
        for vid, variant in view.judged(table):
            if variant.serving_path_compile and vid not in folded:
                findings.append(_meanwhile(_finding(view, table, variant), view.waits))
    return findings


def check_run(run: RunView) -> list[Finding]:
    """The serving-path compiles of a watched family that never ended, or whose record never came, key unknown."""
    findings = []
    for fact in run.facts.values():
        for compiled in fact.unfinished:
            if compiled.phase == SERVING and "family" in compiled.start:
                stall, ended, summary = stall_of(compiled)
                family = compiled.start["family"]
                finding = Finding(
                    "MLA001",
                    family,
                    {},
                    f"a compile of {family} began on the serving path and {ended}: {stall}; its key was not known yet "
                    "(the dispatch looks the cache up after compiling)",
                    codes.lookup("MLA001").hint,
                    site=compiled.start.get("site"),
                    stack=list(compiled.start.get("stack") or []),
                    proc=fact.proc,
                    summary=summary,
                )
                findings.append(_meanwhile(finding, run.waits))
    return findings


def _finding(view: FamilyView, table: ProcessFamily, variant: Variant) -> Finding:
    family = view.rule.family
    waited = variant.serving_path_origin == WAIT  # (for its own compile: no other variant is nearer)
    nearest_key, diff = (variant.key, {}) if variant.precompiled or waited else view.precompiled(table).of(variant.key)
    drivers = view.drivers(diff)
    text = named(variant.key, family.key_fields, list(diff))
    closest, hint = _closest(variant, nearest_key, diff, drivers, text)
    call = (
        " (" + ", ".join(f"{name}={value_text(value)}" for name, value in variant.first_call.items()) + ")"
        if variant.first_call
        else ""
    )
    if waited:
        message = f"{text} was still compiling when serving needed it: {_stall(variant)} in the serving launch that "
        message += f"waited for it{call}; {closest}"
    else:
        message = f"{text} compiled on the serving path: {_stall(variant)} in the first call that dispatched it{call}; "
        message += closest
    return Finding(
        "MLA001",
        family.name,
        variant.key,
        message,
        hint,
        nearest_key,
        diff,
        drivers,
        variant.serving_path_site,
        variant.serving_path_stack,
        table.proc,
        _summary(variant, family.key_fields, [*view.varying, *diff]),
    )


def _stall(variant: Variant) -> str:
    if variant.unfinished and not _measured(variant):
        return f"a stall of unknown length that never ended ({variant.unfinished}; nothing recorded later measures it)"
    if variant.unfinished:
        return f"a stall of at least {variant.serving_path_compile_s:.1f} s that never ended ({variant.unfinished})"
    if variant.serving_path_compile_s is not None:
        return f"a {variant.serving_path_compile_s:.1f} s stall"
    if variant.serving_path_origin == "unknown":
        return "no watched compile made it (loaded from a persistent cache, or made past the rule's compile function)"
    return "a stall (not measured: --compile skip)"


def _measured(variant: Variant) -> bool:
    """Whether a stall was measured: a compile its process died in is measured to the process's last event."""
    return (variant.serving_path_compile_s or 0.0) >= MEASURED


def _summary(variant: Variant, key_fields, telling_fields: list[str]) -> str:
    """Which variant, and how long it stalled."""
    if variant.serving_path_origin == WAIT:
        wait = f"{variant.serving_path_compile_s or 0.0:.1f} s serving-path wait"
        return f"{telling(variant.key, key_fields, telling_fields)}: {wait}: its warm-up compile had not finished"
    if variant.serving_path_compile_s is None:
        seconds = "serving-path compile (not timed)"
    elif variant.unfinished and not _measured(variant):
        seconds = NOT_MEASURED
    else:
        seconds = f"{'≥' if variant.unfinished else ''}{variant.serving_path_compile_s:.1f} s serving-path compile"
        seconds += ", never finished" if variant.unfinished else ""
    summary = f"{telling(variant.key, key_fields, telling_fields)}: {seconds}"
    return summary + (", again: its precompiled entry was dropped" if variant.precompiled else "")


def _closest(variant: Variant, nearest_key, diff: dict, drivers: dict, text: str) -> tuple[str, str]:
    """What the nearest precompiled variant says, and the fix."""
    if variant.serving_path_origin == WAIT:
        began = "in the CUDA-graph capture" if variant.compile_phase == "capture" else "in the warm-up"
        began += f" at {variant.compiled_by}" if variant.compiled_by else ""
        return (
            f"its compile (an async one: Triton's AsyncCompileMode) began {began} and had not finished when serving "
            "started: the warm-up covered this variant but did not finish it before serving began",
            "let the warm-up's async compiles finish before serving starts: leave the AsyncCompileMode block (its exit "
            "waits for every compile), or call .result() on each FutureKernel the warm-up got, before serving starts",
        )
    if variant.precompiled:
        return (
            f"it was precompiled at {variant.compiled_by}, but its cache entry was dropped (cleared, popped or "
            "evicted) before this dispatch, so it compiled again",
            "keep the warm-up's entries in the cache: nothing may clear it or evict from it between warm-up and serving",
        )
    if nearest_key is None:
        return "nothing of this family was precompiled in this process", f"add a warm-up that precompiles {text}"
    if not diff:
        return (
            "a variant of the same field values was precompiled under another spelling of the functools key (MLA006)",
            codes.lookup("MLA006").hint,
        )
    closest = "the nearest precompiled variant differs in " + ", ".join(
        f"{name} (precompiled {value_text(old)}, dispatched {value_text(new)}"
        + (f"; follows {', '.join(drivers[name])}" if name in drivers else "")
        + ")"
        for name, (old, new) in diff.items()
    )
    wanted = ", ".join(f"{name}={value_text(new)}" for name, (_, new) in diff.items())
    if drivers and len(drivers) == len(diff):
        driven = list(dict.fromkeys(what for names in drivers.values() for what in names))
        return closest, f"warm up (capture) this {' / '.join(driven)}, or precompile {wanted}"
    return closest, f"make the warm-up compile {wanted} as the dispatch does"


def _meanwhile(finding: Finding, waits: list[dict]) -> Finding:
    """The finding, saying which other processes waited in a slow step while it compiled (`analysis.waits`)."""
    if finding.proc is None:
        return finding
    held = [
        (f"pid {wait['pid']}" if wait["rank"] is None else f"rank {wait['rank']} (pid {wait['pid']})")
        + f" waited in a {wait['seconds']:.1f} s step (usually {wait['usual']:.2f} s)"
        for wait in waits
        if any(c["proc"] == finding.proc and c["family"] == finding.family for c in wait["during"])
    ]
    if held:
        finding.message += f"; meanwhile {', '.join(held)}"
    return finding
