"""Reports from what was saved: run folders (analysed again) or one JSON report (re-decided, e.g. under a baseline)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from mlacheck.errors import MlacheckError
from mlacheck.report.model import Report, decide


def load_report(path: Path) -> Report:
    """A JSON report written by `--json` or `--output json:PATH`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MlacheckError(f"{path}: not a readable JSON report: {exc}".replace("\n", " ")) from None
    if not isinstance(data, dict) or "families" not in data or "verdict" not in data:
        raise MlacheckError(f"{path}: not an mlacheck JSON report (no 'families' or 'verdict'); write one with --json")
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise MlacheckError(f"{path}: not an mlacheck JSON report: {'.'.join(map(str, error['loc']))}: {error['msg']}") from None


def report_from_sources(sources: list[Path], rules: Path | None = None, strict: bool = False, allow_incomplete: bool = False,
                        context: dict[str, str] | None = None, known: set[str] | None = None,
                        baseline_source: str | None = None) -> Report:
    """Run folders are analysed (merged); a single JSON file is read back and decided again."""
    files = [source for source in sources if source.is_file()]
    if files:
        if len(sources) > 1:
            raise MlacheckError(f"{files[0]}: give one saved JSON report, or run folders only (not both, not several reports)")
        return decide(load_report(files[0]), strict, allow_incomplete, known, baseline_source)
    from mlacheck.program.runs import program_report

    return program_report(sources, rules, strict, allow_incomplete, context, known, baseline_source)
