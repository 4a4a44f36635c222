"""The sites of a scenario run, named as the engine's code that each step models.

The scenario calls the kernel library from its own functions (the engine's warm-up, its prefill and decode
calls), so a site the capture records there is a line of mlacheck, which no user can act on. `SiteMap`
rewrites such a site as the upstream line the step models (each step of the plan names its `Site`s, `plan.py`):
`PATH:LINE FUNCTION (modelled on ENGINE VERSION)`; a stack ends at that frame (the frames outside it drive the
scenario). A site in the user's own code (a `--warmup PATH.py:FUNC`) is left as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

SITE_EVENTS = ("compile", "dispatch", "dispatch_error", "no_lookup")


@dataclass(frozen=True)
class Site:
    """A scenario function that calls the kernel library, and the upstream line it stands for in the report."""

    function: Callable
    models: str  # "PATH:LINE FUNCTION (modelled on ENGINE VERSION)"


class SiteMap:
    """Rewrites the sites that lie in the scenario's library-calling functions."""

    def __init__(self, sites: Iterable[Site]) -> None:
        self._spans = [(*span(site.function), site.models) for site in dict.fromkeys(sites)]

    def site(self, site: str | None) -> str | None:
        """The upstream site a scenario site models, or the site itself."""
        if not site:
            return site
        path, _, line = site.rpartition(":")
        if not line.isdigit():
            return site
        for file, lines, text in self._spans:
            if int(line) in lines and (file == path or file.endswith("/" + path)):
                return text
        return site

    def rewrite(self, events: list[dict]) -> None:
        """Rewrite the sites and stack entries of the events in place."""
        for event in events:
            if event.get("type") not in SITE_EVENTS:
                continue
            if event.get("site"):
                event["site"] = self.site(event["site"])
            if event.get("stack"):
                event["stack"] = self._stack(event["stack"])

    def _stack(self, stack: list[str]) -> list[str]:
        """The stack up to the first modelled frame, named upstream (the frames outside it drive the scenario)."""
        for index, entry in enumerate(stack):
            site = entry.partition(" ")[0]
            modelled = self.site(site)
            if modelled != site:
                return [*stack[:index], modelled]
        return stack


def span(function) -> tuple[str, range]:
    """The absolute file of a function and the lines of its source."""
    function = inspect.unwrap(function)
    lines, first = inspect.getsourcelines(function)
    return Path(inspect.getsourcefile(function)).resolve().as_posix(), range(first, first + len(lines))
