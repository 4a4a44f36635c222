"""Read run folders back: every process's trace merged into one analysis, with per-process attribution."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlacheck import __version__
from mlacheck.analysis import analyse
from mlacheck.check import CheckResult
from mlacheck.environment import distribution_version
from mlacheck.errors import MlacheckError
from mlacheck.events import read_trace
from mlacheck.program.rundir import RunDir
from mlacheck.rules import load_rules


@dataclass
class LoadedRuns:
    events: list[dict]
    processes: list[dict]
    programs: list[dict]


def load_runs(paths: list[Path]) -> LoadedRuns:
    """Events of every trace in the run folders, each tagged with "proc" (its index in `processes`)."""
    events, processes, programs = [], [], []
    for path in paths:
        if not path.is_dir():
            raise MlacheckError(f"{path}: no such run folder; pass the --run-dir of an mlacheck run")
        run = RunDir(path)
        meta = run.read_meta()
        programs.append(meta or {"command": None, "exit_code": None, "signal": None, "unfinished": True})
        for trace in run.traces():
            trace_events, truncated = read_trace(trace)
            if not trace_events:
                continue
            first = trace_events[0]
            exit_rank = next((e["rank"] for e in trace_events if e["type"] == "exit"), None)
            proc = len(processes)
            processes.append({
                "pid": first.get("pid"), "host": first.get("host"), "rank": exit_rank if exit_rank is not None else first.get("rank"),
                "argv": first.get("argv"), "trace": str(trace), "truncated": truncated,
                "exited": any(e["type"] == "exit" for e in trace_events), "events": len(trace_events),
            })
            for event in trace_events:
                event["proc"] = proc
            events += trace_events
    return LoadedRuns(events, processes, programs)


def program_result(paths: list[Path], rules_path: Path | None = None, strict: bool = False) -> CheckResult:
    """Analyse saved runs: the rules given, else the rule files saved in the first run folder."""
    loaded = load_runs(paths)
    rules = load_rules(rules_path if rules_path is not None else RunDir(paths[0]).rules_dir)
    arch = next((e.get("cute_dsl_arch") for e in loaded.events if e["type"] == "run" and e.get("cute_dsl_arch")), None)
    context = {"target_arch": arch} if arch else {}
    header = {
        "mlacheck_version": __version__,
        "tokenspeed_mla_version": distribution_version("tokenspeed-mla"),
        "target_arch": arch, "mode": "program", "device": None, "compile_policy": loaded.programs[0].get("compile_policy", "real"),
        "program": loaded.programs[0] if len(loaded.programs) == 1 else {"runs": loaded.programs},
        "processes": loaded.processes,
        "run_dirs": [str(path) for path in paths],
    }
    return CheckResult(header, analyse(loaded.events, rules, context, loaded.processes), strict)
