"""Capture: hooks in a kernel family's compile cache, compile function and dispatch functions, writing events.

The names below load their modules when first used: an observed process imports only the capture parts it installs
(a process that watches Triton alone never loads the rule files' cache adapters)."""

import importlib

_FROM = {
    "CapturePolicy": "mlacheck.capture.policy",
    "FamilyCapture": "mlacheck.capture.family",
    "LaunchPolicy": "mlacheck.capture.hooks",
    "SkippedCompile": "mlacheck.capture.compile_timer",
}

__all__ = list(_FROM)


def __getattr__(name: str) -> object:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FROM[name]), name)
