"""A scenario run in parts, one mode each: on a device that runs some driven families' kernels and not others (an
H200 runs FA4's SM90 forward, not tokenspeed_mla's SM100-only decode), the families it runs execute here and the
others are traced for their own target arch in a process of their own.

A process compiles its CuTe DSL kernels for one target (the DSL reads it once), so the traced part cannot share the
executing one's process: it is the same scenario (same options, seed and traffic) restricted to those families, in a
child Python process that hands back its report and leaves nothing behind. The two reports become one: each family
keeps its part's mode and target arch, the verdict is decided once over every finding.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from mlacheck import arch
from mlacheck.errors import MlacheckError
from mlacheck.report.model import Report, combined, read_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.scenario.check import Watch, run_check
from mlacheck.scenario.environment import device_capability
from mlacheck.scenario.header import library_warnings_text
from mlacheck.scenario.setup import CheckOptions, prepare


def run_scenario(options: CheckOptions, policy: ReportPolicy = ReportPolicy(), watch: Watch | None = None) -> Report:
    """The embedded scenario: in one mode, or where the device runs some driven families' kernels and not others,
    in two parts (those execute here, the others are traced in a process of their own)."""
    setup = prepare(options)
    in_parts = split(setup.kinds, setup.groups, options.arch, device_capability())
    if in_parts is None:
        return run_check(options, policy, watch, setup)
    executed, traced, target = in_parts
    if watch is not None:
        watch.phase(f"tracing {', '.join(traced)} for {target} in a process of its own")
    other = traced_part(options, traced, target)
    own = setup.only(executed)
    return joined(run_check(own.options, policy, watch, own), other, policy)


def split(
    kinds: tuple[str, ...], groups: list[list], requested: str, device: tuple[int, int] | None
) -> tuple[tuple[str, ...], tuple[str, ...], str] | None:
    """(the kinds the device executes, the kinds traced, their target arch), or None where one mode serves all (no
    device, a target asked for, or every kind alike)."""
    if device is None or requested != "auto" or len(kinds) < 2:
        return None
    runs = [any(arch.capability(name) == device for family in group for name in family.arches) for group in groups]
    executed = tuple(kind for kind, ok in zip(kinds, runs) if ok)
    traced_groups = [group for group, ok in zip(groups, runs) if not ok]
    if not executed or not traced_groups:
        return None
    arches = [name for name in traced_groups[0][0].arches if all(name in g[0].arches for g in traced_groups)]
    target = arch.DEFAULT_ARCH if arch.DEFAULT_ARCH in arches else arches[0]
    return executed, tuple(kind for kind, ok in zip(kinds, runs) if not ok), target


def traced_part(options: CheckOptions, kinds: tuple[str, ...], target: str) -> Report:
    """The scenario for `kinds` traced for `target`, in a child process; its report (its error is one here)."""
    trace = options.trace
    part = replace(
        options,
        kernel=kinds[0] if len(kinds) == 1 else "all",
        arch=target,
        trace=None if trace is None else trace.with_name(f"{trace.stem}-{target}{trace.suffix}"),
    )
    with tempfile.TemporaryDirectory(prefix="mlacheck-part-") as folder:
        out = Path(folder) / "report.json"
        fields = json.dumps({**asdict(part), "rules": _text(part.rules), "trace": _text(part.trace)})
        command = [sys.executable, "-c", CHILD, fields, str(out)]
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not out.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise MlacheckError(
                f"the traced part ({', '.join(kinds)} for {target}) ended with exit code {done.returncode} and no "
                f"report ({last}); run it alone: mlacheck run --kernel {part.kernel} --arch {target}"
            )
        data = json.loads(out.read_text())
    if "error" in data:
        raise MlacheckError(f"the traced part ({', '.join(kinds)} for {target}): {data['error']}")
    return read_report(data)


CHILD = "import sys; from mlacheck.scenario.parts import run_part; run_part(sys.argv[1], sys.argv[2])"


def run_part(fields: str, out: str) -> None:
    """In the child process: run the part (CheckOptions' fields, JSON), write its report (or its one-line error)."""
    values = json.loads(fields)
    options = CheckOptions(**{**values, "rules": _path(values["rules"]), "trace": _path(values["trace"])})
    try:
        text = run_check(options).model_dump_json()
    except MlacheckError as exc:
        text = json.dumps({"error": str(exc)})
    Path(out).write_text(text)


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def _text(value: Path | None) -> str | None:
    return None if value is None else str(value)


def joined(executed: Report, traced: Report, policy: ReportPolicy) -> Report:
    """One report of the two parts: the executing part's facts, each family with its part's mode and target arch,
    the scenario's facts of both, a header row that says which family ran in which mode."""
    own, other = executed.scenario or {}, traced.scenario or {}
    scenario = {
        **other,
        **own,
        "kernels": [*own.get("kernels", []), *other.get("kernels", [])],
        "launches": own.get("launches", 0) + other.get("launches", 0),
        "measured": {**(other.get("measured") or {}), **(own.get("measured") or {})},
        "phases": [*(own.get("phases") or []), *(other.get("phases") or [])],
    }
    rows = {row[0]: row for row in [*(other.get("header") or []), *(own.get("header") or [])]}
    rows["launches"] = ["launches", f"{own.get('launches', 0)} launched, {other.get('launches', 0)} replaced"]
    hidden = (own.get("library_warnings") or 0) + (other.get("library_warnings") or 0)
    if hidden:
        scenario["library_warnings"] = hidden
        rows["library warnings"] = ["library warnings", library_warnings_text(hidden)]
    rows["modes"] = [
        "modes",
        "; ".join(
            f"{part.mode} on {part.target_arch}: {', '.join(family.name for family in part.families)}"
            for part in (executed, traced)
        ),
    ]
    order = ["model", "engine", "warm-up", "prefill kernel", "prefill traffic", "decode start-up", "decode traffic"]
    scenario["header"] = [rows[name] for name in order if name in rows] + [
        row for name, row in rows.items() if name not in order
    ]
    return combined([executed, traced], {"mode": "mixed", "scenario": scenario}, policy)
