"""The run's environment: which mode the device allows, the target arch, and an importable tokenspeed_mla."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

from mlacheck.errors import MlacheckError

TARGET_ARCHES = {(10, 0): "sm_100a", (10, 3): "sm_103a", (10, 7): "sm_107a"}
"""The arches tokenspeed_mla has kernels for, by CUDA compute capability."""

FLAGSHIP_SMS = {"sm_100a": (148, "B200")}
"""The SM count of each target arch's flagship GPU, which the decode key depends on (through split_kv)."""


def flagship_sm_count(arch: str) -> int:
    """The target arch's flagship SM count; arches without a known flagship get B200's (pass --num-sms)."""
    return FLAGSHIP_SMS.get(arch, FLAGSHIP_SMS["sm_100a"])[0]


def sm_count_label(arch: str, num_sms: int | None) -> str:
    """How the report names the SM count in use."""
    if num_sms is not None:
        return f"{num_sms} (--num-sms)"
    count, gpu = FLAGSHIP_SMS.get(arch, (None, None))
    return f"{count} ({gpu}, the {arch} flagship)" if count else f"{flagship_sm_count(arch)} (assumed, B200's: pass --num-sms)"


@dataclass(frozen=True)
class Environment:
    mode: str  # execute: the device runs the target arch; trace: a CUDA device that cannot; dry: no CUDA device
    target_arch: str
    device: str | None

    @property
    def enable_pdl(self) -> bool:
        """PDL as engines set it: on where the compute capability is 9 or more (every target arch)."""
        return int(self.target_arch[3:-1]) >= 90


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise MlacheckError("torch is not installed; install mlacheck's dependencies (pip install mlacheck)") from None


def detect_environment(arch: str = "auto") -> Environment:
    """Pick the mode and target arch, and set CUTE_DSL_ARCH so that every compile targets that arch."""
    if arch != "auto" and arch not in TARGET_ARCHES.values():
        raise MlacheckError(f"--arch {arch}: tokenspeed_mla has kernels for {', '.join(TARGET_ARCHES.values())} only; pick one or auto")
    torch = _torch()
    device = device_arch = None
    if torch.cuda.is_available():
        capability = torch.cuda.get_device_capability()
        device_arch = TARGET_ARCHES.get(capability)
        device = f"{torch.cuda.get_device_name()} (sm_{capability[0]}{capability[1]})"
    target = (device_arch or "sm_100a") if arch == "auto" else arch
    mode = "dry" if device is None else ("execute" if device_arch == target else "trace")
    os.environ["CUTE_DSL_ARCH"] = target
    return Environment(mode, target, device)


def import_tokenspeed_mla():
    """Import tokenspeed_mla and refuse its stubbed form (a missing tokenspeed_triton makes every entry point a stub)."""
    try:
        package = importlib.import_module("tokenspeed_mla")
    except ImportError as exc:
        raise MlacheckError(f"tokenspeed_mla cannot be imported ({exc}); install it: pip install tokenspeed-mla") from None
    missing = getattr(package, "_IMPORT_ERROR", None)
    if missing is not None:
        raise MlacheckError(
            f"tokenspeed_mla is installed but its API is stubbed because its import failed ({missing}): every "
            "tokenspeed_mla_prefill call raises ImportError, and an engine importing it gets those stubs silently; "
            "install the missing dependency (pip install tokenspeed-triton)"
        )
    return package
