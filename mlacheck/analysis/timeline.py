"""The compile timeline of each process: when each variant compiled and for how long (in the phase the analysis
judges: a serving compile before the process's later serving mark was warm-up), when serving started, the steps of
its engine's step function that were far slower than usual (`slow_step`), when the process ended (seconds since its
run event, the events' `t`; `started`, the run event's wall clock, lines processes up). The HTML report draws it.

A compile event without `t` (a trace of an older mlacheck) leaves its compile out; a process with no timed
compile has no timeline. A compile that began and never ended (a `compile_start` with no `compile_end`: its process
died in it, or exited while it ran) is a bar from its start to the process's last recorded moment, origin
"unfinished".
"""

from __future__ import annotations

from collections.abc import Callable

from mlacheck.capture import phase as phases
from mlacheck.keys import Key


def timelines(events: list[dict], label: Callable[[str, Key], str]) -> list[dict]:
    """One entry per process that compiled with times or had a slow step: {"proc", "pid", "rank", "started", "end",
    "serving_start", "compiles": [{"family", "label", "phase", "start", "seconds", "origin"}], "steps": [{"function",
    "start", "seconds", "usual", "serving"}]}, `label(family, key)` naming each variant."""
    by_proc: dict[object, dict] = {}
    marked = {event.get("proc") for event in events if event["type"] == "serving_start"}
    unended: dict[tuple, dict] = {}  # (proc, id) -> a compile_start not ended (yet)
    last: dict[object, float] = {}  # proc -> its last recorded moment
    for event in events:
        proc = event.get("proc")
        entry = by_proc.setdefault(
            proc,
            {
                "proc": proc,
                "pid": None,
                "started": None,
                "end": None,
                "serving_start": None,
                "compiles": [],
                "steps": [],
            },
        )
        before_mark = proc in marked and entry["serving_start"] is None
        kind, t = event["type"], event.get("t")
        if isinstance(t, (int, float)):
            last[proc] = max(last.get(proc, 0.0), t)
        if kind == "compile_start" and t is not None:
            unended[(proc, event["id"])] = event
        elif kind == "compile_end":
            unended.pop((proc, event.get("id")), None)
        elif kind == "run":
            entry["pid"], entry["rank"], entry["started"] = event.get("pid"), event.get("rank"), event.get("started")
        elif kind == "slow_step":
            entry["steps"].append(
                {name: event.get(name) for name in ("function", "seconds", "usual", "serving")} | {"start": t}
            )
        elif kind == "exit" and t is not None:
            entry["end"] = t
        elif kind == "serving_start" and t is not None and entry["serving_start"] is None:
            entry["serving_start"] = t
        elif kind == "compile" and t is not None and event.get("phase") not in ("preexisting", "inherited"):
            seconds = event.get("seconds")
            entry["compiles"].append(
                {
                    "family": event["family"],
                    "label": label(event["family"], event.get("key") or {}),
                    "phase": phases.settled(event.get("phase") or phases.UNKNOWN, before_mark),
                    "start": round(max(0.0, t - (seconds or 0.0)), 3),
                    "seconds": seconds,
                    "origin": event.get("origin"),
                }
            )
    for (proc, _), start in unended.items():  # a compile the process died in (or exited in) was not before a mark
        family = start.get("family") or f"unwatched:{start.get('kernel')}"
        by_proc[proc]["compiles"].append(
            {
                "family": family,
                "label": label(family, start.get("key") or {}),
                "phase": start.get("phase"),
                "start": start["t"],
                "seconds": round(last[proc] - start["t"], 3),
                "origin": "unfinished",
            }
        )
    out = []
    for entry in by_proc.values():
        if not entry["compiles"] and not entry["steps"]:
            continue
        spans = [(c["start"], c["seconds"]) for c in entry["compiles"]] + [
            (s["start"], s["seconds"]) for s in entry["steps"]
        ]
        last = max(start + (seconds or 0.0) for start, seconds in spans)
        entry["end"] = max(entry["end"] or 0.0, last, entry["serving_start"] or 0.0)
        out.append(entry)
    return out
