"""A compile's phase, decided here for every capture path (the dict, functools, closure and class caches, Triton, the
compile nets) from the same evidence, and settled here by the analysis once the whole trace is known.

The rule:
1. Once the process has marked serving start, it is serving, whatever function made the compile and whatever frame is
   on the stack: a library's `plan()`, the program's own code filling the cache, and a warm-up or capture frame entered
   after the mark (SGLang runs its whole DeepGEMM M-list warm-up lazily inside the first GEMM of a new shape: after
   serving start that warm-up stalls the request that ran it).
2. Else, under a declared warm-up or capture frame (a `[[phase]]` function on the stack), the frame decides: warm-up
   or capture.
3. Else, inside a dispatch call (a watched family's dispatch function, a Triton launch), it is serving: nothing said
   it was a warm-up. If the process marks serving start later, it came before the mark and was warm-up.
4. Else, outside every dispatch call, it is warm-up (precompiled).
5. Where a capture path cannot tell whether the compile is inside a dispatch call (a compile net's unwatched
   compile), it is unknown: warm-up if the process marks serving start later; in a process that never marks serving
   start, the run is incomplete and says how to mark it.

A dispatch is judged by the same rule (it is inside a dispatch call by definition): serving after the mark, else its
frame, else serving.
"""

from __future__ import annotations

WARMUP, CAPTURE, SERVING, UNKNOWN = "warmup", "capture", "serving", "unknown"
BORROWED = "borrowed"  # not a time: the variant built nothing, its kernel was one this process built for another key
# the phases of a variant that entered the cache with no compile of its own in this process
NOT_COMPILED_HERE = ("preexisting", "inherited", BORROWED)
LEGACY = {"unmarked": UNKNOWN}  # what traces of mlacheck 0.3 and earlier called an unknown phase
HOW_TO_MARK = (
    "mark where serving starts (call mlacheck.serving_started(), set MLACHECK_SERVING_START=MODULE:FUNCTION, or give "
    "--serving-start or a [[serving_start]] rule), or declare the warm-up function as a [[phase]]"
)


def decide(frame: str | None, serving: bool, in_dispatch: bool | None) -> str:
    """The phase of a compile (or dispatch) now: `frame` is the phase of the `[[phase]]` frame on the stack (None:
    none); `serving`, whether the process marked serving start; `in_dispatch`, whether it is inside a dispatch call
    (None: the capture path cannot tell)."""
    if serving:
        return SERVING
    if frame is not None:
        return frame
    if in_dispatch is None:
        return UNKNOWN
    return SERVING if in_dispatch else WARMUP


def settled(phase: str, before_mark: bool) -> str:
    """The phase the analysis judges: a compile recorded as serving or unknown before its process marked serving
    start (the mark came later in its trace) was warm-up."""
    phase = LEGACY.get(phase, phase)
    return WARMUP if before_mark and phase in (SERVING, UNKNOWN) else phase
