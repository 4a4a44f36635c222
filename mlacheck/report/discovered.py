"""Kernel families found at run time (every Triton kernel a server compiles: hundreds) in the terminal report: those
with findings are shown as any family is, the rest as one line; and a family of thousands of variants, or thousands
of findings, as a summary (`report.abridged`). The JSON, SARIF and other reports keep them all."""

from __future__ import annotations

from mlacheck.report.abridged import abridged


def shown(data: dict, summarise: bool = True) -> tuple[dict, str | None]:
    """The report's JSON form as the terminal shows it (the families found at run time without findings left out of
    the tables and the versions row; long tables and finding lists summarised unless `summarise` is false, as under
    --verbose), and the line that stands for those left out (None where none is)."""
    shorten = abridged if summarise else _whole
    flagged = {finding["family"] for finding in data.get("findings") or []}
    quiet = [f for f in data["families"] if f.get("discovered") and f["name"] not in flagged]
    if not quiet:
        return shorten(data), None
    names = {family["name"] for family in quiet}
    variants = [variant for family in quiet for variant in family["variants"]]
    versions = sorted({family.get("version") or "version unknown" for family in quiet})
    line = (
        f"{len(quiet)} more kernel famil{'y' if len(quiet) == 1 else 'ies'} found at run time without findings "
        f"({', '.join(versions)}): {len(variants)} variant(s), {sum(v['dispatches'] for v in variants)} serving "
        "dispatch(es); the JSON and SARIF reports list them all"
    )
    return shorten(
        {
            **data,
            "families": [family for family in data["families"] if family["name"] not in names],
            "versions": {name: version for name, version in (data.get("versions") or {}).items() if name not in names},
        }
    ), line


def _whole(data: dict) -> dict:
    return data
