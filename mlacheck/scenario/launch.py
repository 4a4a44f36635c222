"""The scenario's launch policy, shared by prefill and decode: what a dispatch gets instead of the kernel it looked up."""

from __future__ import annotations


class LaunchCounter:
    """One stand-in per variant notes the key of each launch and counts it; only execute mode calls the compiled
    kernel (trace and dry mode replace the launch)."""

    def __init__(self, execute: bool) -> None:
        self.execute = execute
        self.launches = 0
        self.last_key: dict | None = None

    def stand_in(self, key: dict, kernel: object):
        """The capture's launch policy: what the dispatch gets instead of `kernel` (made once per variant)."""

        def launch(*args: object, **kwargs: object) -> object:
            self.launches += 1
            self.last_key = key
            return kernel(*args, **kwargs) if self.execute else None

        return launch
