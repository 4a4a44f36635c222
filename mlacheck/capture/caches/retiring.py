"""The mutations of a dict whose lookups a fast table answers (`_fast`: a hot-path `FastTable`): each retires the keys
it touches from the table, so that a key's next lookup reads the stack again. A rule file's recording dict and a Triton
kernel's counting cache both build on it; neither is anything but a dict otherwise."""

from __future__ import annotations


class RetiringDict:
    """Mixed into a hot-path dict (`hotpath.GetitemDict`, `ContainsDict`, `GetDict`), which holds `_fast`."""

    __slots__ = ()

    def __setitem__(self, key: object, value: object) -> None:
        dict.__setitem__(self, key, value)
        self._fast.pop(key, None)

    def __delitem__(self, key: object) -> None:
        dict.__delitem__(self, key)
        self._fast.pop(key, None)

    def pop(self, key: object, *default: object) -> object:
        self._fast.pop(key, None)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[object, object]:
        key, value = dict.popitem(self)
        self._fast.pop(key, None)
        return key, value

    def clear(self) -> None:
        dict.clear(self)
        self._fast.clear()
