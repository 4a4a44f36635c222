"""Triton: every kernel a Triton of a process (stock `triton`, or a fork a `[triton]` table names, such as
`tokenspeed_triton`) compiles or launches is a kernel family of its own, found at run time (no rule file per kernel),
captured through that Triton's hooks and counted in its own caches.

`runtime` finds a Triton by its import name, `keys` names a kernel's key per parameter, `families` holds one kernel's
variants, counts and counting dicts, `capture` installs it all in a process (the agent does, when the Triton is
imported) with `compiles` (its hooks), `lookups` (hits and tunings) and `kernels` (the counting dicts, their audit,
interpreted kernels); `dry` is `--dry` for Triton.
"""

from mlacheck.capture.triton.capture import TritonCapture

__all__ = ["TritonCapture"]
