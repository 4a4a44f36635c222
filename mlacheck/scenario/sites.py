"""The sites of a scenario run, named as the engine's code that each step models.

The scenario calls the kernel library from its own functions (the engine's warm-up, its prefill and decode
calls), so a site the capture records there is a line of mlacheck, which no user can act on. `SiteMap`
rewrites such a site as the upstream line the step models (the engine profile's `steps`): `PATH:LINE
FUNCTION (modelled on ENGINE VERSION)`; a stack ends at that frame (the frames outside it drive the
scenario). A site in the user's own code (a `--warmup PATH.py:FUNC`) is left as it is.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from mlacheck.capture.stack import short_path
from mlacheck.scenario import decode_run, fa4_prefill, prefill_call, warmup
from mlacheck.scenario.engines import EngineProfile

STEPS = {  # the scenario's functions that call the kernel library, by the engine step they model
    "warmup": (warmup._tokenspeed_warmup, warmup._sglang_warmup, warmup._vllm_warmup),
    "extend": (prefill_call.extend,),
    "prefix_chunk": (prefill_call.prefix_chunk,),
    "fa4_extend": (fa4_prefill.FA4Prefill.extend,),
    "fa4_prefix_chunk": (fa4_prefill.FA4Prefill.prefix_chunk,),
    "decode": (decode_run.DecodeRunner.dispatch, decode_run.FlashInferDecode.dispatch),
}
SITE_EVENTS = ("compile", "dispatch", "dispatch_error", "no_lookup")


class SiteMap:
    """Rewrites the sites that lie in the scenario's library-calling functions."""

    def __init__(self, profile: EngineProfile, library_warmup: object | None = None) -> None:
        self._spans: list[tuple[str, range, str]] = []
        for step, functions in STEPS.items():
            upstream = profile.steps.get(step)
            if upstream is None:  # a step the engine does not take (SGLang 0.5.23 has no JIT prefill)
                continue
            text = f"{upstream.path}:{upstream.line} {upstream.function} (modelled on {profile.release})"
            self._spans += [(*_span(function), text) for function in functions]
        if library_warmup is not None:  # --warmup library: mlacheck calls the library's own warm-up function
            path, lines = _span(library_warmup)
            self._spans.append(
                (
                    *_span(warmup._library_warmup),
                    f"{short_path(path)}:{lines.start} {library_warmup.__qualname__} (called by --warmup library)",
                )
            )

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


def _span(function) -> tuple[str, range]:
    """The absolute file of a function and the lines of its source."""
    function = inspect.unwrap(function)
    lines, first = inspect.getsourcelines(function)
    return Path(inspect.getsourcefile(function)).resolve().as_posix(), range(first, first + len(lines))
