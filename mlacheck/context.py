"""The run context that contracts read: `--context KEY=VALUE` items as a dict."""

from __future__ import annotations

from mlacheck.errors import SETTING, MlacheckError


def parse_context(items: list[str] | None) -> dict[str, str]:
    """["kv_cache_dtype=float8_e4m3fn", ...] -> {"kv_cache_dtype": "float8_e4m3fn"}; a malformed item is one line."""
    context = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise MlacheckError(f"{SETTING}: write KEY=VALUE, e.g. kv_cache_dtype=float8_e4m3fn", "context", item)
        context[name.strip()] = value.strip()
    return context
