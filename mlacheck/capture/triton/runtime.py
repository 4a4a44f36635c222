"""One Triton of a process, found by its import name: stock `triton` or a fork that keeps Triton's runtime
(tokenspeed-triton 3.9.10 installs `tokenspeed_triton`, with the same `runtime/jit.py`, `runtime/autotuner.py` and
`knobs.py`). The rule's `[triton]` table names the module; nothing here imports a Triton by a fixed name, so every
Triton in the process gets the same capture.

Under Triton's CPU interpreter (`TRITON_INTERPRET=1`: `knobs.runtime.interpret`) `@jit` makes an
`InterpretedFunction` instead of a `JITFunction`: its launches run the kernel's Python body, and nothing compiles.
"""

from __future__ import annotations

import importlib
from collections import namedtuple

INTERPRETED = "interpreted"
"""The context value under a Triton's module name where the process ran it interpreted (`context_event`)."""
FOUND = "triton found by its layout: "
"""The context key, before a Triton's import name, where the process found it by its layout, not by a rule's [triton]
table (a vendored copy, a fork): its value is the module of the table its capture took (`program/found.py`)."""


PARTS = (
    "module",  # the import name
    "version",
    "knobs",  # <module>.knobs: the hooks' slots and runtime.interpret
    "jit",  # <module>.runtime.jit: JITFunction, serialize_specialization_data
    "autotuner",  # <module>.runtime.autotuner: Autotuner
    "async_compile",  # <module>.runtime._async_compile: active_mode
    "driver",  # <module>.runtime.driver.driver
    "gpu_target",  # <module>.backends.compiler.GPUTarget
)


class TritonRuntime(namedtuple("TritonRuntime", PARTS)):
    """The parts of one Triton the capture uses (a named tuple: a frozen dataclass takes a millisecond to make, in
    every observed process that imports Triton)."""

    __slots__ = ()

    @property
    def interpreted(self) -> bool:
        """Whether `@jit` makes interpreted functions now (TRITON_INTERPRET=1)."""
        return bool(getattr(self.knobs.runtime, "interpret", False))

    def kernel_of(self, owner: object) -> object | None:
        """The JITFunction under an Autotuner or Heuristics (or the JITFunction itself); None where the innermost
        function is not one (an interpreted kernel: an InterpretedFunction over a plain function). The class is read
        with type(), never `__class__`, which an object may fake."""
        jit_function, seen = owner, 0
        while not issubclass(type(jit_function), self.jit.JITFunction):
            jit_function, seen = getattr(jit_function, "fn", None), seen + 1
            if jit_function is None or seen > 16:
                return None
        return jit_function


def load(module: str, distribution: str) -> TritonRuntime:
    """The Triton installed under the import name `module` (imported already: the agent installs its watcher when it
    is); its version is the distribution's where that is the module's (a fork's `__version__` drops the build: 3.9.10
    for 3.9.10.post20261028), else the module's own."""
    from mlacheck.capture.fingerprint import installed_version

    top = importlib.import_module(module)
    version = getattr(top, "__version__", None)
    installed = installed_version(distribution)
    if installed is not None and (version is None or installed.startswith(version)):
        version = installed
    part = lambda name: importlib.import_module(f"{module}.{name}")
    return TritonRuntime(
        module,
        version,
        part("knobs"),
        part("runtime.jit"),
        part("runtime.autotuner"),
        part("runtime._async_compile"),
        part("runtime.driver").driver,
        part("backends.compiler").GPUTarget,
    )


def kernel_name(jit_function: object) -> str:
    """`module:qualname` of a JITFunction's Python function."""
    return f"{jit_function.fn.__module__}:{jit_function.fn.__qualname__}"


def still_compiling(future_kernel: object) -> bool:
    """Whether an async compile's FutureKernel has not finished (a launch that takes it waits in its `result()`).
    Read from its own attributes, never through its `__getattr__` (which waits for the compile); one that holds no
    `future` to ask (a layout other than Triton 3.6-3.9's, or none found: None) is taken as still compiling: its wait
    is measured, never assumed away."""
    if future_kernel is None:
        return True
    state = object.__getattribute__(future_kernel, "__dict__")
    if state.get("kernel") is not None:
        return False
    done = getattr(state.get("future"), "done", None)
    return not done() if callable(done) else "future" not in state


def future_kernel_of(mode: object, cache: dict, key: str) -> object | None:
    """The FutureKernel of `mode` (an AsyncCompileMode) that will put `key` in `cache`: where Triton keeps it in the
    mode alone (3.6: `future_kernels`, by its compile's cache key), the one whose `finalize_compile` closes over that
    cache and key. None where none is found."""
    for future_kernel in list((getattr(mode, "future_kernels", None) or {}).values()):
        finalize = object.__getattribute__(future_kernel, "__dict__").get("finalize_compile")
        code = getattr(finalize, "__code__", None)
        cells = dict(zip(code.co_freevars, finalize.__closure__ or ())) if code is not None else {}
        try:
            if cells["kernel_cache"].cell_contents is cache and cells["key"].cell_contents == key:
                return future_kernel
        except (KeyError, ValueError):  # (not Triton's closure, or a cell still empty)
            continue
    return None
