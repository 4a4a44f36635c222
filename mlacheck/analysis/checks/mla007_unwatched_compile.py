"""MLA007 unwatched-compile: a compile on the serving path that no rule file watches (a compile net's; `codes.py`
has its page), with the nearest earlier compile of the same kernel in the same process and the fields in which it
differs (a compile that raised is one too: the caller waited for it); and each compile net's compile that began on the serving path and never ended (or whose record never came)."""

from __future__ import annotations

from mlacheck import codes
from mlacheck.analysis.findings import Finding
from mlacheck.analysis.nearest import Nearest
from mlacheck.analysis.unfinished import stall_of
from mlacheck.analysis.view import RunView
from mlacheck.capture.phase import SERVING
from mlacheck.keys import value_text


def check_run(run: RunView) -> list[Finding]:
    return _served(run) + _unfinished(run)


def _served(run: RunView) -> list[Finding]:
    findings = []
    earlier: dict[tuple, Nearest] = {}  # (kernel, proc) -> the keys of its compiles so far
    for compiled in run.unwatched:
        before = earlier.setdefault((compiled.kernel, compiled.proc), Nearest())
        if compiled.phase != SERVING:
            before.add(compiled.key)
            continue
        closest, diff = before.of(compiled.key)
        if compiled.raised is None:  # (a compile that raised made nothing a later one could have reused)
            before.add(compiled.key)
        stall = f"a {compiled.seconds:.1f} s stall" if compiled.seconds is not None else "a stall"
        if compiled.raised is not None:
            stall += f" for a compile that raised {compiled.raised} (the caller went on without it)"
        if closest is None:
            before = "nothing of this kernel compiled earlier in this process"
        elif not diff:
            before = "a compile of the same configuration came earlier in this process (its result was not kept)"
        else:
            before = "the nearest earlier compile differs in " + ", ".join(
                f"{name} ({value_text(old)} then, {value_text(new)} now)" for name, (old, new) in diff.items()
            )
        findings.append(
            Finding(
                "MLA007",
                f"unwatched:{compiled.kernel}",
                compiled.key,
                f"{compiled.kernel} ({compiled.net}) compiled on the serving path, and no rule file watches it: "
                f"{stall}; {before}",
                codes.lookup("MLA007").hint,
                closest,
                diff,
                {},
                compiled.site,
                compiled.stack,
                compiled.proc,
                summary=f"{compiled.kernel}: "
                + (f"{compiled.seconds:.1f} s " if compiled.seconds is not None else "")
                + "serving-path compile"
                + (f" (raised {compiled.raised})" if compiled.raised is not None else "")
                + ", no rule file watches it",
            )
        )
    return findings


def _unfinished(run: RunView) -> list[Finding]:
    findings = []
    for fact in run.facts.values():
        for compiled in fact.unfinished:
            if compiled.phase != SERVING or "family" in compiled.start:
                continue
            start = compiled.start
            stall, ended, summary = stall_of(compiled)
            findings.append(
                Finding(
                    "MLA007",
                    f"unwatched:{start.get('kernel')}",
                    {},
                    f"{start.get('kernel')} ({start.get('net')}) began compiling on the serving path and {ended}, and "
                    f"no rule file watches it: {stall}",
                    codes.lookup("MLA007").hint,
                    site=start.get("site"),
                    stack=list(start.get("stack") or []),
                    proc=fact.proc,
                    summary=summary,
                )
            )
    return findings
