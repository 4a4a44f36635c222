"""A dict cache, recorded: the dict a family's cache becomes for the run, and the adapter every dict kind shares.

The recording dict holds the same entries as the program's dict: an insert is a compile, and the rule's lookup
operation (`getitem` or `contains`) inside a dispatch is a dispatch. Its hot path (`hotpath.GetitemDict` /
`ContainsDict`) answers a lookup of a variant already seen in serving from the capture's fast table; everything
else reaches the capture, which reads the stack. The table is emptied by every mutation that touches its keys, so
such a key's next lookup reads the stack again. At the end the program gets its own dict back, holding what the
run's cache holds. What went past it is reported at each counts flush (`audit`): an entry no `__setitem__` of it saw
(a C extension's PyDict_SetItem, `dict.__setitem__(cache, ...)`), one written into the program's dict through a
reference taken before install, and a recording dict no longer where the program looks (the attribute rebound, the
module reloaded).

A dict kind differs from another only in where the dict is held (`DictCache.locate`): at the end of an attribute
path, on the class that defines it, in a closure cell.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from types import FrameType

from mlacheck.capture import hotpath
from mlacheck.capture.caches.retiring import RetiringDict
from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.hooks import MISSING, CaptureHooks
from mlacheck.capture.install import AlreadyRecorded, Patches
from mlacheck.errors import MlacheckError
from mlacheck.keys import key_text, typed
from mlacheck.rulefiles.plain import Family

_getframe = sys._getframe


class RecordingDict(RetiringDict):
    """What both recording dicts add to the hot-path dict they extend: inserts reported to the capture, the keys seen
    entering kept (what no insert of its own brought in is `unseen`), and what a mutation touches retired from the fast
    table (`RetiringDict`); a dict otherwise."""

    __slots__ = ()

    def __init__(self, entries: dict, capture: CaptureHooks) -> None:
        dict.__init__(self, entries)
        self._capture, self._fast, self._ticks = capture, capture.fast, capture.ticks
        self._entered = set(entries)  # the keys it saw enter (or held from the start)

    def __setitem__(self, key: object, value: object) -> None:
        RetiringDict.__setitem__(self, key, value)
        self._entered.add(key)
        self._capture.inserted(key, value, _getframe(1))

    def __delitem__(self, key: object) -> None:
        RetiringDict.__delitem__(self, key)
        self._entered.discard(key)

    def pop(self, key: object, *default: object) -> object:
        self._entered.discard(key)
        return RetiringDict.pop(self, key, *default)

    def popitem(self) -> tuple[object, object]:
        key, value = RetiringDict.popitem(self)
        self._entered.discard(key)
        return key, value

    def clear(self) -> None:
        RetiringDict.clear(self)
        self._entered.clear()

    def _entered_unseen(self, key: object) -> None:
        """A looked-up key no `__setitem__` of it saw enter: flush now, so that the audit says so before the lookup
        is written (not at the next flush)."""
        if key not in self._entered and dict.__contains__(self, key):
            self._capture.safely("flush", self._capture.flush)

    def unseen(self) -> list:
        """The keys it holds that no `__setitem__` of it saw enter (each returned once)."""
        keys = [key for key in list(dict.keys(self)) if key not in self._entered]  # a copy made at once
        self._entered.update(keys)
        return keys

    def update(self, *args: object, **kwargs: object) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: object) -> RecordingDict:
        self.update(other)
        return self

    def setdefault(self, key: object, default: object = None) -> object:
        if not dict.__contains__(self, key):
            self[key] = default
        return dict.__getitem__(self, key)

    def get(self, key: object, default: object = None) -> object:
        """`cache[key]` where the key is cached: a lookup where `[]` is the rule's lookup, not one where `in` is."""
        return self[key] if dict.__contains__(self, key) else default


class GetitemRecordingDict(RecordingDict, hotpath.GetitemDict):
    """The dispatch's lookup is `cache[key]` (tokenspeed_mla prefill: `config not in cache`, then `cache[config]`)."""

    __slots__ = ("_entered",)

    def _missed(self, key: object, frame: FrameType) -> object:
        """A lookup the fast table did not serve."""
        self._entered_unseen(key)
        return self._capture.looked_up(key, dict.__getitem__(self, key), frame)


class ContainsRecordingDict(RecordingDict, hotpath.ContainsDict):
    """The dispatch's lookup is `key in cache` (FA4: `compile_key not in compile_cache`, its only one under FakeTensorMode)."""

    __slots__ = ("_entered",)

    def _missed(self, key: object, frame: FrameType) -> bool:
        """A lookup the fast table did not serve."""
        found = dict.__contains__(self, key)
        if found:
            self._entered_unseen(key)
        self._capture.looked_up(key, dict.__getitem__(self, key) if found else MISSING, frame)
        return found

    def __getitem__(self, key: object) -> object:
        """Not a lookup; but under a launch policy, what a dispatch gets after its `in` is the stand-in."""
        value = dict.__getitem__(self, key)
        if self._capture.launch is None:
            return value
        entry = self._fast.get(key)
        return entry[1] if entry is not None else self._capture.launched(key, value, _getframe(1))


RECORDING_DICTS = {"getitem": GetitemRecordingDict, "contains": ContainsRecordingDict}


class DictCache:
    """The adapter of a dict cache: a recording dict in the program's dict's place for the run. A kind says where
    the dict is held (`locate`); the rest is shared."""

    def __init__(self, family: Family, module: object, capture: CaptureHooks, patches: Patches) -> None:
        self.family, self.module, self.capture, self.patches = family, module, capture, patches
        self.recording: RecordingDict | None = None
        self._original: dict = {}  # the program's dict, which a reference taken before install still writes into
        self._installed: frozenset = frozenset()  # what it held at install
        self._past: set = set()  # keys written into it that way, reported
        self._moved = False  # said that the recording dict is no longer in place (or a newer adapter took over)

    @staticmethod
    def check(family: Family) -> str | None:
        """What a dict kind needs of the rule's [family] table, or None where it has it."""
        return None if family.compile else "a dict cache needs compile (the function whose result enters the cache)"

    def locate(self) -> tuple[object, Callable[[object], None]]:
        """The program's dict as the rule's `cache` path finds it, and how to put another in its place."""
        raise NotImplementedError

    def install(self) -> None:
        cache, put = self.locate()
        where = f"{self.family.module}.{self.family.cache}"
        if isinstance(cache, RecordingDict):
            raise AlreadyRecorded(
                f"{self.family.name}: {where} is already being recorded; install mlacheck once per process"
            )
        if not isinstance(cache, dict):
            raise self.patches.stale(f"{where} is a {type(cache).__name__}, not a dict")
        self.recording = RECORDING_DICTS[self.family.lookup](cache, self.capture)
        self._original, self._installed = cache, frozenset(cache)
        self._past = set(self._installed)
        put(self.recording)
        self.patches.on_undo(lambda: self._give_back(cache, put))

    def preexisting(self) -> tuple[list, int]:
        """The keys cached before install, and how many there are."""
        return list(self.recording), len(self.recording)

    def describe(self, key: object) -> tuple[dict[str, object], dict | None]:
        """A key's fields, named positionally by the rule's key_fields (a dict key has no spelling)."""
        values = key if isinstance(key, tuple) else (key,)
        names = self.family.key_fields
        return {(names[i] if i < len(names) else f"field{i}"): value for i, value in enumerate(values)}, None

    def cached(self, keys: Collection) -> list:
        """Those of `keys` that the cache holds now."""
        return [key for key in self.recording if key in keys]

    def forget(self) -> None:
        """Nothing of a dict cache's own serves lookups past the capture's fast table."""

    def audit(self) -> list[str]:
        """What went past the recording dict since the last audit, one line each (`recording` module docstring)."""
        where, lines = f"{self.family.module}.{self.family.cache}", []
        unseen = self.recording.unseen()
        if unseen:
            lines.append(
                f"{len(unseen)} variant(s) entered the cache unseen (an insert past {where}'s recording dict, as "
                f"from C; found at its next lookup or a counts flush): {self._keys(unseen)}"
            )
        past = [
            key for key in list(self._original) if key not in self._past and not dict.__contains__(self.recording, key)
        ]
        if past:
            self._past.update(past)
            lines.append(
                f"{len(past)} variant(s) entered {where} through a reference taken before mlacheck was installed: "
                f"{self._keys(past)}; whether they compiled on the serving path is unknown"
            )
        if not self._moved and not self._still_in_place():
            self._moved = True
            lines.append(
                f"{where} no longer holds mlacheck's recording dict (the program rebound it or reloaded its module): "
                "what entered the new one was not watched"
            )
        return lines

    def _still_in_place(self) -> bool:
        try:
            return self.locate()[0] is self.recording
        except MlacheckError:  # the path to it is gone
            return False

    def _keys(self, keys: list) -> str:
        return ", ".join(
            key_text({name: typed(value) for name, value in self.describe(key)[0].items()}) for key in keys
        )

    def superseded(self) -> None:
        """A newer adapter watches the cache the program's module holds now (it ran again): this one's recording
        dict is no longer expected in place."""
        self._moved = True

    def _give_back(self, original: dict, put: Callable[[object], None]) -> None:
        """The program's own dict back, holding what the run's cache holds (less skipped compiles), and what was
        written past mlacheck through an older reference to it (`audit` reported it); put back where the recording
        dict still is (a dict the program put there since stays)."""
        recording = self.recording
        bypassed = {
            key: value
            for key, value in original.items()
            if key not in self._installed and not dict.__contains__(recording, key)
        }
        original.clear()
        original.update({key: value for key, value in dict.items(recording) if not isinstance(value, SkippedCompile)})
        original.update(bypassed)
        if self._still_in_place():
            put(original)
