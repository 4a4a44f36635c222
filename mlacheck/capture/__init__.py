"""Capture: hooks in a kernel family's compile cache, compile function and dispatch functions, writing events."""

from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.family import FamilyCapture
from mlacheck.capture.hooks import LaunchPolicy
from mlacheck.capture.policy import CapturePolicy

__all__ = ["CapturePolicy", "FamilyCapture", "LaunchPolicy", "SkippedCompile"]
