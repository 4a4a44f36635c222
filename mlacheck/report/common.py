"""Helpers the CI formats share, all over the JSON report dict: key text, sites, severities, counts."""

from __future__ import annotations

from mlacheck.codes import CODES


def severity(finding: dict) -> str:
    """ "error" or "warning": the finding's own, else the code table's."""
    if finding.get("severity"):
        return finding["severity"]
    code = CODES.get(finding.get("code", ""))
    return code.severity.value if code else "error"


def is_new(finding: dict) -> bool:
    """False only for a finding that a baseline marked as already known."""
    return not finding.get("baselined", False)


def parse_site(site: str | None) -> tuple[str, int | None] | None:
    """ "path:line" -> (path, line); a site without a usable line -> (site, None); no site -> None."""
    if not site:
        return None
    path, sep, line = site.rpartition(":")
    if sep and path and line.isdigit() and int(line) > 0:
        return path, int(line)
    return site, None


def process_text(finding: dict) -> str:
    """ "rank R (pid P)" / "pid P" for a finding from one process of several; "" otherwise."""
    process = finding.get("process") or {}
    parts = [
        f"rank {process['rank']}" if process.get("rank") is not None else "",
        f"pid {process['pid']}" if process.get("pid") is not None else "",
    ]
    if parts[0] and parts[1]:
        return f"{parts[0]} ({parts[1]})"
    return parts[0] or parts[1]


def family_key_fields(report: dict) -> dict[str, list[str]]:
    """Family name -> its key_fields."""
    return {family["name"]: list(family.get("key_fields") or []) for family in report.get("families") or []}


def counts(report: dict) -> dict[str, int]:
    """Findings by state, as the report model counted them: new errors, new warnings, baselined."""
    return {"errors": 0, "warnings": 0, "baselined": 0, **(report.get("counts") or {})}


def summary_line(report: dict) -> str:
    """ "FAIL: 6 error(s), 3 warning(s)" with ", N baselined" when a baseline applied."""
    n = counts(report)
    line = f"{str(report.get('verdict', '?')).upper()}: {n['errors']} error(s), {n['warnings']} warning(s)"
    return line + (f", {n['baselined']} baselined" if n["baselined"] else "")


def program_runs(report: dict) -> list[tuple[list[str], str]]:
    """(command, how it ended) of each observed program run (several when runs were merged)."""
    program = report.get("program")
    if not program:
        return []
    described = []
    for run in program.get("runs", [program]):
        ended = (
            f"killed by {run['signal']}"
            if run.get("signal")
            else "unfinished (no meta.json: mlacheck itself was stopped)"
            if run.get("unfinished")
            else f"exit code {run['exit_code']}"
            if run.get("exit_code") is not None
            else "did not finish"
        )
        if run.get("forwarded"):
            ended += f" (mlacheck got {', '.join(run['forwarded'])} and passed it on)"
        if run.get("left_behind"):
            pids = ", ".join(f"{p['pid']} ({p['ended_by']})" for p in run["left_behind"])
            ended += f"; mlacheck ended {len(run['left_behind'])} process(es) the program left running: {pids}"
        described.append((list(run.get("command") or []), ended))
    return described


def versions_text(report: dict) -> str:
    """ "mlacheck 0.2.0, tokenspeed_mla.prefill 2.0.4, ...": the version of each family seen in the observed processes."""
    seen = ", ".join(
        f"{name} {version or 'version unknown'}" for name, version in (report.get("versions") or {}).items()
    )
    return f"mlacheck {report.get('mlacheck_version')}" + (f", {seen}" if seen else "")
