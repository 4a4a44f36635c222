"""Capture: hooks in a kernel family's compile cache, compile function and dispatch functions, writing events."""

from mlacheck.capture.compile_timer import SkippedCompile
from mlacheck.capture.family import FamilyCapture, LaunchPolicy
from mlacheck.capture.spec import CapturePolicy, CaptureSpec, DryPatch, PhaseFrame, ServingStart

__all__ = ["CapturePolicy", "CaptureSpec", "DryPatch", "FamilyCapture", "LaunchPolicy", "PhaseFrame", "ServingStart",
           "SkippedCompile"]
