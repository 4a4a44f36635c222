"""The run's environment: which mode the device allows, the target arch, and the kernel libraries imported cleanly."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

from mlacheck import arch
from mlacheck.errors import SETTING, MlacheckError


@dataclass(frozen=True)
class Environment:
    mode: str  # execute: the device runs the target arch; trace: a CUDA device that cannot; dry: no CUDA device
    target_arch: str
    device: str | None

    @property
    def enable_pdl(self) -> bool:
        """PDL as engines set it: on where the compute capability is 9 or more (every target arch)."""
        return arch.capability(self.target_arch)[0] >= 9


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise MlacheckError("torch is not installed; install mlacheck's dependencies (pip install mlacheck)") from None


def detect_environment(requested: str, kernel_arches: list[str], arch_env: list[str]) -> Environment:
    """Pick the mode and target arch among the arches the driven families have kernels for, and set the variables
    the families read their target from (`arch_env`, e.g. CUTE_DSL_ARCH) so that every compile targets it."""
    if requested != "auto" and requested not in kernel_arches:
        raise MlacheckError(
            f"{SETTING}: the scenario's families have kernels for {', '.join(kernel_arches)} only; pick one or auto",
            "arch",
            requested,
        )
    device = device_arch = None
    capability = device_capability()
    if capability is not None:
        device_arch = next((name for name in kernel_arches if arch.capability(name) == capability), None)
        device = f"{_torch().cuda.get_device_name()} (sm_{capability[0]}{capability[1]})"
    target = (device_arch or arch.DEFAULT_ARCH) if requested == "auto" else requested
    mode = "dry" if device is None else ("execute" if device_arch == target else "trace")
    for name in arch_env:
        os.environ[name] = target
    return Environment(mode, target, device)


def device_capability() -> tuple[int, int] | None:
    """The CUDA device's compute capability, or None without one."""
    torch = _torch()
    return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


def import_tokenspeed_mla():
    """Import tokenspeed_mla and refuse its stubbed form (a missing tokenspeed_triton makes every entry point a stub)."""
    try:
        package = importlib.import_module("tokenspeed_mla")
    except ImportError as exc:
        raise MlacheckError(
            f"tokenspeed_mla cannot be imported ({exc}); install it: pip install tokenspeed-mla"
        ) from None
    missing = getattr(package, "_IMPORT_ERROR", None)
    if missing is not None:
        raise MlacheckError(
            f"tokenspeed_mla is installed but its API is stubbed because its import failed ({missing}): every "
            "tokenspeed_mla_prefill call raises ImportError, and an engine importing it gets those stubs silently; "
            "install the missing dependency (pip install tokenspeed-triton)"
        )
    return package


def import_flashinfer_mla(profile: str):
    """flashinfer.mla, whose trtllm_batch_decode_with_kv_cache_mla the engines call (the flashinfer extra)."""
    try:
        return importlib.import_module("flashinfer.mla")
    except ImportError as exc:
        raise MlacheckError(
            f"{SETTING} decodes through FlashInfer's CuTe DSL MLA decode, and flashinfer cannot be imported ({exc}); "
            "install it: pip install 'mlacheck[flashinfer]'",
            "profile",
            profile,
        ) from None
