"""Who waited for a serving-path compile: a slow step of one process (`slow_step`: its engine step far over its usual)
that overlaps, on the wall clock, a serving-path compile of another process of the run. In a tensor-parallel engine
that is the rank that waited at the next collective while another rank compiled: the stall's reach beyond the rank
that compiled. Processes are lined up by their run events' wall clock (`started`), so ranks on one host line up to
the millisecond; across hosts they are as good as the hosts' clocks.
"""

from __future__ import annotations


def waits(timeline: list[dict]) -> list[dict]:
    """Each slow step of the timeline with the serving-path compiles of other processes it overlapped (`during`, each
    {"proc", "pid", "rank", "family", "label", "seconds"}; empty where it overlapped none: a stall of the process's own, or a
    wait for something mlacheck does not see)."""
    compiles = [
        (entry, compile_)
        for entry in timeline
        if entry.get("started") is not None
        for compile_ in entry["compiles"]
        if compile_["phase"] == "serving" and compile_["seconds"]
    ]
    found = []
    for entry in timeline:
        if entry.get("started") is None:
            continue
        for step in entry.get("steps") or []:
            begin = entry["started"] + step["start"]
            during = [
                {name: other.get(name) for name in ("proc", "pid", "rank")}
                | {name: compile_[name] for name in ("family", "label", "seconds")}
                for other, compile_ in compiles
                if other["proc"] != entry["proc"]
                and _overlap(begin, step["seconds"], other["started"] + compile_["start"], compile_["seconds"])
            ]
            found.append({name: entry[name] for name in ("proc", "pid", "rank")} | step | {"during": during})
    return found


def _overlap(first: float, first_seconds: float, second: float, second_seconds: float) -> bool:
    return first < second + second_seconds and second < first + first_seconds
