"""`--dry` for Triton: every launch computes its real key for the target arch, with Triton's own `run` and binder,
and nothing launches.

Triton asks its active driver for the device, the stream and the target (runtime/driver.py `DriverConfig`, the
same in 3.6 to 3.9); `DryDriver` answers for the target arch with no GPU and no CUDA driver. Its device is a
string of its own (`dry:sm_90a`), so the kernels' caches for it are their own too. `JITFunction.run` is called
with `warmup=True` (compile, never launch), the launch's own `warmup` is kept in `LAUNCH_WARMUP`, and a launch that
got an async compile (AsyncCompileMode's `FutureKernel`) waits for it in its `result()`, as a launch does; an autotuner
runs each config once, unmeasured, and keeps its first (`dry_bench`).
"""

from __future__ import annotations

import contextvars
from typing import Any

LAUNCH_WARMUP: contextvars.ContextVar[bool] = contextvars.ContextVar("mlacheck_triton_launch_warmup", default=False)
"""Under --dry: the `warmup` argument the launch itself gave `JITFunction.run`."""


class DryKernel:
    """What a dry launch's cache holds for a variant nothing compiled (`--compile skip`): a later launch of the same
    key is a cache hit, and launches nothing."""

    def __repr__(self) -> str:
        return "<mlacheck --dry: a Triton kernel not compiled, never launched>"


class DryDriver:
    """What `JITFunction.run`, its binder and `Autotuner` ask of Triton's active driver, answered for a target with
    no GPU. Anything else (loading a binary, launching, benchmarking) is an AttributeError naming --dry."""

    def __init__(self, target: Any, name: str) -> None:
        self.target, self.device = target, f"dry:{name}"

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> str:
        return self.device

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"mlacheck --dry: Triton's driver.{name} needs a GPU; nothing launches under --dry")


def target_of(arch: str) -> tuple[str, int]:
    """ "sm_90a" -> ("cuda", 90): the backend and the capability number Triton's GPUTarget takes."""
    from mlacheck.arch import capability

    major, minor = capability(arch) or (10, 0)
    return "cuda", major * 10 + minor


def dry_run(original: Any) -> Any:
    """`JITFunction.run` that compiles and never launches, keeping the launch's own `warmup` in LAUNCH_WARMUP."""

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        token = LAUNCH_WARMUP.set(bool(warmup))
        try:
            kernel = original(self, *args, grid=grid, warmup=True, **kwargs)
            if not warmup and type(kernel).__name__ == "FutureKernel":
                kernel.result()  # an async compile's launch waits for it (a launch reads the kernel through result())
            return kernel
        finally:
            LAUNCH_WARMUP.reset(token)

    run.__wrapped__ = original
    return run


def dry_bench(tuner: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
    """`Autotuner._bench` under --dry: the config's variant is launched once (its key recorded, nothing runs) and
    timed as its place in the config list, so the first config is chosen (the GPU's choice is not known)."""
    tuner.fn.run(*args, **dict(meta, **config.all_kwargs()))
    index = tuner.configs.index(config) if config in tuner.configs else 0
    return [float(index)] * 3
