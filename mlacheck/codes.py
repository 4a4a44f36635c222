"""Every finding code in one table: `mlacheck rules`, the report and the README read it.

The codes keep the MLA prefix they were born with (baselines and SARIF fingerprints depend on them); they
apply to every kernel family, not to MLA kernels only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"  # fails the run
    WARNING = "warning"  # fails it under --strict
    NOTE = "note"  # a limit of the tool, not of the program: never fails, makes the run incomplete


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    severity: Severity
    summary: str
    why: str
    hint: str


CODES: dict[str, Code] = {
    c.code: c
    for c in (
        Code(
            "MLA001",
            "serving-path-compile",
            Severity.ERROR,
            "A dispatched variant was not precompiled: it compiles on the serving path.",
            "One CuTe DSL compile takes seconds to minutes; inside a request it can stall the "
            "scheduler past its watchdog (300 s in SGLang).",
            "Precompile this key in the warm-up: make the warm-up compute the key the way the dispatch does.",
        ),
        Code(
            "MLA002",
            "dead-warmup",
            Severity.WARNING,
            "A precompiled variant was never dispatched: its compile time is wasted.",
            "Dead warm-up lengthens start-up and usually means the warm-up and the dispatch disagree on a field.",
            "Drop this variant from the warm-up, or fix the field in which it differs from what is dispatched.",
        ),
        Code(
            "MLA003",
            "field-contract",
            Severity.ERROR,
            "A key field breaks a constraint that the family's rule file declares.",
            "Such a variant is wrong for the deployment (e.g. bf16 q against an FP8 KV cache) even if it is cached.",
            "Make the field what the contract requires where the key is computed.",
        ),
        Code(
            "MLA004",
            "stale-rule",
            Severity.NOTE,
            "The observed key or the installed library does not match what the rule file was checked against.",
            "A rule that names the wrong fields or versions reports wrong diffs, or none: the family is not checked and "
            "the run is incomplete (a limit of the rule, never the program's failure).",
            "Re-check the rule file against the installed library and update key_fields or checked_versions.",
        ),
        Code(
            "MLA005",
            "numerics",
            Severity.ERROR,
            "A launched variant's output is further from the reference than the rule file's tolerance.",
            "A variant that compiles and launches can still compute the wrong attention (a wrong mask, scale or LSE).",
            "Compare the variant's compile arguments with the dispatch's inputs; check the kernel on these shapes.",
        ),
        Code(
            "MLA006",
            "key-spelling",
            Severity.ERROR,
            "One variant was compiled twice, under two spellings of the same functools-cached call.",
            "functools.cache keys on how a call is spelled: f(a, b) and f(a=a, b=b) are two entries, so a warm-up "
            "that spells it differently from the dispatch compiles a variant the dispatch never hits.",
            "Spell the warm-up's call exactly as the dispatch does (the same arguments by keyword, in the same order).",
        ),
        Code(
            "MLA007",
            "unwatched-compile",
            Severity.ERROR,
            "A kernel that no rule file watches compiled on the serving path.",
            "Every JIT compile after start-up stalls the request that triggered it; a kernel no rule file names is "
            "never checked against its warm-up, so nothing else would say so.",
            "Compile this kernel in the warm-up for the configuration the serving path asked for, and add a rule file "
            "for its cache (mlacheck rules --template) so that its keys are checked.",
        ),
        Code(
            "MLA008",
            "unbounded-specialization",
            Severity.ERROR,
            "One key field took many values on the serving path that the warm-up never compiled: a variant per value.",
            "A value that follows the traffic (a token count, a batch size) passed as a specialized parameter (a "
            "Triton tl.constexpr) compiles a new variant for every new value, on the serving path, without end; no "
            "warm-up can cover it.",
            "Pass such a value as a runtime argument (not tl.constexpr), or round it to a bounded set of buckets "
            "that the warm-up compiles.",
        ),
    )
}


def lookup(code: str) -> Code:
    """The table entry of a finding code."""
    return CODES[code]
