"""`MODULE:QUALNAME`, how rule files, options and the environment name a function; parsed here alone.

Imported by every observed process (the agent reads its serving-start markers with it), so it imports nothing.
"""

from __future__ import annotations


def split(path: str) -> tuple[str, str] | None:
    """ "vllm.utils.jit_monitor:activate" -> ("vllm.utils.jit_monitor", "activate"); None where it is not that form."""
    module, sep, qualname = path.partition(":")
    return (module, qualname) if sep and module and qualname else None


def serving_start(item: str) -> tuple[str, str, str] | None:
    """MODULE:QUALNAME or MODULE:QUALNAME@return -> (module, qualname, "call" or "return"); None where it is not that."""
    function, _, at = item.partition("@")
    parts = split(function)
    if parts is None or at not in ("", "return"):
        return None
    return (*parts, "return" if at else "call")
