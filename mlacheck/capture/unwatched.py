"""A cache that no loaded rule describes as installed (a fork, a release no rule was checked against): it is not
watched, the process says so once, and its dispatch calls are counted, the first one written at once, so that a
run that dispatched through it cannot pass; where no rule's dispatch functions are all there (a fork renamed them),
nothing can count them, and that is said (`unseen`). Nothing of it is patched but the dispatch functions."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

from mlacheck import events
from mlacheck.capture.install import Patches
from mlacheck.capture.layouts import Provider
from mlacheck.capture.stack import frame_site
from mlacheck.rulefiles.plain import RuleFile
from mlacheck.sinks import EventSink


class UnwatchedLayout:
    """The rules of one module's cache, none of which applies to what the process imported."""

    def __init__(
        self, rules: list[RuleFile], module: object, sink: EventSink, provider: Provider, reasons: list[str]
    ) -> None:
        self.rules, self.module, self.sink, self.provider, self.reasons = rules, module, sink, provider, reasons
        self._patches = Patches("unwatched", where=module.__name__)
        self._called: set[str] = set()
        self.installed = False

    def install(self) -> None:
        self._write_event()
        missing = []
        for name in dict.fromkeys(name for rule in self.rules for name in rule.family.dispatch):
            try:
                owner, attribute = self._patches.function(name, self.module)
            except Exception:  # noqa: BLE001 - a dispatch function this layout lacks: said below
                missing.append(name)
                continue
            self._patches.wrap_function(owner, attribute, self._counting(name, getattr(owner, attribute)))
        if all(set(rule.family.dispatch) & set(missing) for rule in self.rules):
            self._write_missing(missing)
        self.installed = True

    def remove(self) -> None:
        self._patches.undo(lambda where, action: action())
        self.installed = False

    def after_fork(self) -> None:
        """A forked child's trace says it again; its calls are its own."""
        self._called.clear()
        self._write_event()

    def serving_started(self) -> None:
        """Nothing is counted by phase here."""

    def phase_changed(self) -> None:
        """Nothing is counted by phase here."""

    def _write_event(self) -> None:
        first = self.rules[0].family
        self.sink.write(
            events.unwatched_event(
                first.module, first.cache, [rule.family.name for rule in self.rules], str(self.provider), self.reasons
            )
        )

    def _write_missing(self, missing: list[str]) -> None:
        """No rule's dispatch functions are all in the installed code (a fork renamed them): its calls cannot be
        counted, so whether it served cannot be known."""
        first = self.rules[0].family
        self.sink.write(
            events.unseen_event(
                first.name,
                f"{self.module.__name__} (not watched: installed {self.provider}) lacks the dispatch function(s) "
                f"{', '.join(missing)} the rules name: calls through whatever replaced them were not counted, so "
                "whether its cache served the run is unknown",
            )
        )

    def _counting(self, name: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def dispatch(*args: object, **kwargs: object) -> object:
            if name not in self._called:
                self._called.add(name)
                try:
                    self.sink.write(
                        events.unwatched_dispatch_event(self.module.__name__, name, frame_site(sys._getframe(1)))
                    )
                except Exception:  # noqa: BLE001 - capture never raises into the program
                    pass
            return function(*args, **kwargs)

        return dispatch
