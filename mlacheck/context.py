"""The run context that contracts read: `--context KEY=VALUE` items as a dict."""

from __future__ import annotations

from mlacheck.errors import MlacheckError


def parse_context(items: list[str] | None, flag: str = "--context") -> dict[str, str]:
    """["kv_cache_dtype=float8_e4m3fn", ...] -> {"kv_cache_dtype": "float8_e4m3fn"}; a malformed item is one line."""
    context = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise MlacheckError(f"{flag} {item}: write KEY=VALUE, e.g. {flag} kv_cache_dtype=float8_e4m3fn")
        context[name.strip()] = value.strip()
    return context
