"""The one exception type the front ends turn into a one-line message and exit code 2."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

SETTING = "{setting}"
"""Where a message names its setting: each front end writes it there as the user did (`--run-dir PATH`,
`--mlacheck-run-dir=PATH`, `/p/pyproject.toml [tool.mlacheck] rules = 'PATH'`)."""


def flag(setting: str, value: object = None) -> str:
    """A setting as the command line writes it: `--run-dir PATH` (the spelling where no front end says another)."""
    name = "--" + setting.replace("_", "-")
    return name if value is None else f"{name} {value}"


class MlacheckError(Exception):
    """Bad input or environment: the message is one line naming what is wrong and what to do.

    A line about a setting names it with `setting` (its name in mlacheck/config.py's table) and `value` (as given),
    and marks the place with SETTING: `MlacheckError(f"{SETTING}: is a file", setting="run_dir", value=path)`."""

    exit_code = 2

    def __init__(self, message: str, setting: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.message, self.setting, self.value = message, setting, value

    def line(self, spell: Callable[[str, object], str] = flag) -> str:
        """The message, its setting written by `spell(setting, value)`."""
        if self.setting is None:
            return self.message
        return self.message.replace(SETTING, spell(self.setting, self.value))

    def __str__(self) -> str:
        return self.line()


@contextmanager
def about(setting: str, value: object = None) -> Iterator[None]:
    """An error raised inside that marks its setting (SETTING) without saying which is about `setting` (and `value`)."""
    try:
        yield
    except MlacheckError as exc:
        if exc.setting is None and SETTING in exc.message:
            exc.setting, exc.value = setting, value
        raise
