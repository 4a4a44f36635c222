"""How findings become a verdict and an exit code: the policy of --strict, --allow-incomplete, --baseline, --select
and --ignore, checked when the command line is read (a bad one: one MlacheckError line), before anything runs. Kept
apart from the report model, so that checking the command line loads neither the model nor the analysis."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlacheck.codes import CODES
from mlacheck.errors import SETTING, MlacheckError
from mlacheck.report.baseline import known_findings


@dataclass(frozen=True, kw_only=True)
class ReportPolicy:
    """How findings become a verdict and an exit code (--strict, --allow-incomplete, --baseline); only `decide`
    reads it, everything between the command line and it passes it on whole."""

    strict: bool = False  # warnings fail too
    allow_incomplete: bool = False  # an incomplete verdict keeps the program's exit status instead of 2
    known: frozenset[str] | None = None  # the baseline's finding fingerprints (None: no baseline)
    baseline: str | None = None  # where the baseline came from, for the report
    select: frozenset[str] | None = None  # the codes whose findings count (None: every code)
    ignore: frozenset[str] = frozenset()  # codes whose findings are listed as ignored and never fail

    @classmethod
    def of(
        cls,
        *,
        strict: bool = False,
        allow_incomplete: bool = False,
        baseline: Path | None = None,
        select: list[str] | None = None,
        ignore: list[str] | None = None,
    ) -> ReportPolicy:
        """The policy of the settings; a baseline file is read and checked now, and the codes of select and ignore (a
        bad one is one MlacheckError line about its setting)."""
        known, source = known_findings(baseline)
        selected, ignored = _selected(select), frozenset(_codes("ignore", ignore or []))
        if selected is not None and selected <= ignored:  # (the two may come from two places: a flag and the file)
            raise MlacheckError(
                f"{SETTING} drops every code that select keeps ({', '.join(sorted(selected))}), so no finding could "
                "count; take them out of ignore, or select others",
                "ignore",
            )
        return cls(
            strict=strict,
            allow_incomplete=allow_incomplete,
            known=frozenset(known) if known is not None else None,
            baseline=source,
            select=selected,
            ignore=ignored,
        )

    def ignores(self, code: str) -> bool:
        """Whether a code's findings are ignored: --ignore names it, or --select does not."""
        return code in self.ignore or (self.select is not None and code not in self.select)


def _codes(setting: str, items: list[str]) -> list[str]:
    """Finding codes from repeated or comma-separated items ("MLA001,MLA003"); an unknown one is one line about the
    setting ("select" or "ignore")."""
    codes = [code.strip().upper() for item in items for code in item.split(",") if code.strip()]
    unknown = next((code for code in codes if code not in CODES), None)
    if unknown is not None:
        raise MlacheckError(
            f"{SETTING}: no such finding code; choose from {', '.join(CODES)} (mlacheck rule --all)", setting, unknown
        )
    return codes


def _selected(select: list[str] | None) -> frozenset[str] | None:
    """The codes select keeps; None where it is not given. One that selects nothing is refused: an empty CI variable
    would otherwise turn every finding into an ignored one, and a failing run into exit 0."""
    if select is None:
        return None
    codes = frozenset(_codes("select", select))
    if not codes:
        raise MlacheckError(
            f"{SETTING} selects no finding code (it was given empty); name the codes to keep (e.g. MLA001), or leave "
            "it out to keep them all",
            "select",
        )
    return codes
