"""Triton: every `@triton.jit` kernel a process compiles or launches is a kernel family of its own, found at run time
(no rule file per kernel), captured through Triton's hooks and counted in its own caches.

`keys` names a kernel's key per parameter, `families` holds one kernel's variants, counts and counting dicts,
`capture` installs it all in a process (the agent does, when `triton` is imported), `dry` is `--dry` for Triton.
"""

from mlacheck.capture.triton.capture import TritonCapture

__all__ = ["TritonCapture"]
