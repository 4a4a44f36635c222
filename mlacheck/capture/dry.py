"""`--dry`: what lets a family's dispatch run past its lookup on a machine without the target GPU.

A rule file names the library attributes to stand in for (`[[dry.patch]]`) and the dispatch arguments
that must stay host tensors; these are the generic actions it can choose from. Every stand-in is put in
place for the duration of one dispatch call and taken out after it; the launch itself is replaced by
the capture's launch policy and the dispatch's tensor results are zeroed, so the program carries on.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator

from mlacheck.arch import capability
from mlacheck.capture.spec import CapturePolicy, DryPatch


def _actions(policy: CapturePolicy) -> dict[str, Callable[..., object]]:
    target = capability(policy.target_arch)
    sms = policy.num_sms or 0
    clusters = lambda cluster_size=1, *args, **kwargs: max(1, sms // max(1, int(cluster_size)))  # noqa: E731

    class TargetHardwareInfo:
        """cutlass.utils.HardwareInfo of the target GPU, without a CUDA driver."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        get_max_active_clusters = staticmethod(clusters)
        get_device_multiprocessor_count = staticmethod(lambda: sms)
        get_l2_cache_size_in_bytes = staticmethod(lambda: L2_BYTES)

    return {
        "nullcontext": lambda *args, **kwargs: contextlib.nullcontext(),
        "target_capability": lambda *args, **kwargs: target,
        "target_sm_count": lambda *args, **kwargs: sms,
        "target_clusters": clusters,
        "target_hardware_info": TargetHardwareInfo,
    }


ACTIONS = tuple(_actions(CapturePolicy()))
"""nullcontext: a context manager that does nothing (a CUDA stream binding); target_capability: the target
arch's (major, minor); target_sm_count: the target's SM count; target_clusters(cluster_size): SMs / size;
target_hardware_info: a cutlass.utils.HardwareInfo class answering with those (and L2_BYTES)."""
L2_BYTES = 126 << 20  # the B200's L2; no key field reads it (it sizes some schedulers' grids)


class DryStandIns:
    """The stand-ins of one family, put in place around each dispatch call."""

    def __init__(self, patches: tuple[DryPatch, ...], host_arguments: tuple[str, ...], policy: CapturePolicy) -> None:
        actions = _actions(policy)
        self._patches = [(_split(patch.target), actions[patch.action]) for patch in patches]
        self.host_arguments = frozenset(host_arguments)

    @contextlib.contextmanager
    def around_call(self) -> Iterator[None]:
        saved = []
        try:
            for (module_name, attribute), stand_in in self._patches:
                owner = importlib.import_module(module_name)
                saved.append((owner, attribute, getattr(owner, attribute)))
                setattr(owner, attribute, stand_in)
            yield
        finally:
            for owner, attribute, original in reversed(saved):
                setattr(owner, attribute, original)

    def host_tensor(self, value: object) -> object:
        """A host tensor as a view that reports is_cuda, so the library keeps it on the host."""
        if getattr(value, "is_cuda", True) or not hasattr(value, "as_subclass"):
            return value
        return value.as_subclass(_host_tensor_class())


def zero_results(result: object) -> object:
    """Zero the tensors a dispatch returns (its launch was replaced, so they hold whatever memory held)."""
    for value in result if isinstance(result, (tuple, list)) else (result,):
        if hasattr(value, "zero_") and getattr(value, "is_floating_point", lambda: False)():
            value.zero_()
    return result


def _split(target: str) -> tuple[str, str]:
    module, _, attribute = target.partition(":")
    return module, attribute


_HOST_TENSOR: type | None = None


def _host_tensor_class() -> type:
    global _HOST_TENSOR
    if _HOST_TENSOR is None:
        import torch

        class HostTensorReportingCuda(torch.Tensor):
            """--dry only: a host tensor that says it is on CUDA, so a dispatch keeps it where it is."""

            @property
            def is_cuda(self) -> bool:
                return True

        _HOST_TENSOR = HostTensorReportingCuda
    return _HOST_TENSOR
