"""The per-rank view of a run (one run folder per node, merged): for each run folder, host and rank, its processes,
what they dispatched, the serving-path compiles found in them, the processes of it that ran unobserved, and its
slowest engine step where one was far over its usual (`slow_step`) with the pids whose serving-path compile it
overlapped: a rank that waited at a collective while another rank compiled.

A rank's status is the worst of: `serving-path compile` (an MLA001 finding in one of its processes), `cut short` (a
process of it ended before its traffic may have: a crash, a kill from outside), `unobserved`
(a Python process of it that nothing of mlacheck observed: what it did is unknown), `never dispatched` (observed,
and no dispatch of a watched family reached a lookup in it), else `ok`. Processes with no rank (a launcher, a
helper) make up their host's rank-less row.
"""

from __future__ import annotations

from mlacheck.analysis import Finding

STATUSES = ("serving-path compile", "cut short", "unobserved", "never dispatched", "ok")


def rank_summaries(
    processes: list[dict],
    unobserved: list[dict],
    findings: list[Finding],
    lookups: dict[int | None, int],
    waits: list[dict] = (),
    cut: dict[int, str] | None = None,
) -> list[dict]:
    """One row per (run folder, host, rank) of the observed processes (`processes`, by index) and the unobserved
    (`cut`: the processes cut short, by index)."""
    rows: dict[tuple, dict] = {}

    def row(process: dict) -> dict:
        run, host, rank = process.get("run"), process.get("host"), process.get("rank")
        return rows.setdefault(
            (run, host, rank),
            {
                "run": run,
                "host": host,
                "rank": rank,
                "pids": [],
                "unobserved_pids": [],
                "dispatches": 0,
                "serving_path_compiles": 0,
                "findings": {},
                "slowest_step_s": None,
                "waited_for_pids": [],
                "cut_short": False,
            },
        )

    for proc, process in enumerate(processes):
        entry = row(process)
        entry["pids"].append(process.get("pid"))
        entry["dispatches"] += lookups.get(proc, 0)
        entry["cut_short"] |= proc in (cut or {})
    for process in unobserved:
        row(process)["unobserved_pids"].append(process.get("pid"))
    for finding in findings:
        if finding.proc is None or finding.proc >= len(processes):
            continue
        entry = row(processes[finding.proc])
        entry["findings"][finding.code] = entry["findings"].get(finding.code, 0) + 1
        entry["serving_path_compiles"] += finding.code == "MLA001"
    for wait in waits:
        if wait["proc"] is None or wait["proc"] >= len(processes):
            continue
        entry = row(processes[wait["proc"]])
        entry["slowest_step_s"] = max(entry["slowest_step_s"] or 0.0, wait["seconds"])
        entry["waited_for_pids"] = sorted({*entry["waited_for_pids"], *(c["pid"] for c in wait["during"])})
    for entry in rows.values():
        entry["status"] = _status(entry, entry.pop("cut_short"))
    order = {run: index for index, run in enumerate(dict.fromkeys(run for run, _, _ in rows))}
    return sorted(
        rows.values(),
        key=lambda r: (order[r["run"]], r["host"] or "", r["rank"] is None, r["rank"] if r["rank"] is not None else 0),
    )


def unchecked_folders(folders: list[tuple[str, range]], lookups: dict[int | None, int]) -> list[str]:
    """One line for each run folder of a merge (`folders`: each with its processes' indexes) that compared nothing of
    its own: it observed no Python process, or no dispatch of a watched family reached a lookup in it. The merge is
    then no better than that folder alone (the other folders' evidence says nothing of its node)."""
    reasons = []
    for path, procs in folders:
        if not procs:
            reasons.append(
                f"{path}: no Python process was observed in this run folder (its program started none, or none could "
                "import mlacheck): nothing of this node was checked"
            )
        elif not any(lookups.get(proc) for proc in procs):
            reasons.append(
                f"{path}: no dispatch of a watched kernel family reached a cache lookup in this run folder's "
                f"{len(procs)} observed process(es): nothing of this node was compared"
            )
    return reasons


def _status(row: dict, cut_short: bool) -> str:
    """A rank's status: the worst of what its row holds (STATUSES, worst first)."""
    if row["serving_path_compiles"]:
        return "serving-path compile"
    if cut_short:
        return "cut short"
    if row["unobserved_pids"]:
        return "unobserved"
    return "never dispatched" if not row["dispatches"] else "ok"
