"""`--dry`: what lets a family's dispatch run past its lookup on a machine without the target GPU.

A rule file names the library attributes to stand in for (`[[dry.patch]]`) and the dispatch arguments
that must stay host tensors; these are the generic actions it can choose from. Every stand-in is put in
place for the duration of one dispatch call and taken out after it; the launch itself is replaced by
the capture's launch policy and the dispatch's tensor results are zeroed, so the program carries on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator

from mlacheck import arch, qualnames
from mlacheck.capture.policy import CapturePolicy
from mlacheck.rulefiles.plain import DryPatch


def _actions(policy: CapturePolicy) -> dict[str, Callable[..., object]]:
    """Each action of the schema's DRY_ACTIONS but stand_in_class (`_stand_in` builds those), for the policy's target."""
    target = arch.capability(policy.target_arch)
    sms = policy.num_sms or 0
    l2_bytes = arch.flagship(policy.target_arch).l2_bytes
    return {
        "nullcontext": lambda *args, **kwargs: contextlib.nullcontext(),
        "target_capability": lambda *args, **kwargs: target,
        "target_sm_count": lambda *args, **kwargs: sms,
        "target_clusters": lambda cluster_size=1, *args, **kwargs: max(1, sms // max(1, int(cluster_size))),
        "target_l2_bytes": lambda *args, **kwargs: l2_bytes,
        "target_supports_pdl": lambda *args, **kwargs: target is not None and target[0] >= 9,
        "false": lambda *args, **kwargs: False,
    }


def _stand_in(patch: DryPatch, actions: dict[str, Callable[..., object]]) -> object:
    """The stand-in a patch declares: an action, or a class whose instances answer the declared methods."""
    if patch.action != "stand_in_class":
        return actions[patch.action]
    methods = {name: staticmethod(actions[action]) for name, action in patch.methods.items()}
    return type(
        f"DryStandIn_{patch.target.rpartition(':')[2]}",
        (),
        {
            "__init__": lambda self, *args, **kwargs: None,
            "__doc__": f"--dry: {patch.target} of the target GPU",
            **methods,
        },
    )


class DryStandIns:
    """The stand-ins of one family, put in place around each dispatch call."""

    def __init__(self, patches: list[DryPatch], host_arguments: list[str], policy: CapturePolicy) -> None:
        actions = _actions(policy)
        self._patches = [(qualnames.split(patch.target), _stand_in(patch, actions)) for patch in patches]
        self.host_arguments = frozenset(host_arguments)

    @contextlib.contextmanager
    def around_call(self) -> Iterator[None]:
        """The stand-ins in place for one call; a target the installed release lacks is not asked, and is skipped."""
        saved = []
        try:
            for (module_name, attribute), stand_in in self._patches:
                owner = _module(module_name)
                if owner is None or not hasattr(owner, attribute):
                    continue
                saved.append((owner, attribute, getattr(owner, attribute)))
                setattr(owner, attribute, stand_in)
            yield
        finally:
            for owner, attribute, original in reversed(saved):
                setattr(owner, attribute, original)

    def entry(self, function: Callable) -> Callable:
        """A library entry function with the stand-ins in place for each of its calls."""

        @functools.wraps(function)
        def with_stand_ins(*args: object, **kwargs: object) -> object:
            with self.around_call():
                return function(*args, **kwargs)

        return with_stand_ins

    def host_tensor(self, value: object) -> object:
        """A host tensor as a view that reports is_cuda, so the library keeps it on the host."""
        if getattr(value, "is_cuda", True) or not hasattr(value, "as_subclass"):
            return value
        return value.as_subclass(_host_tensor_class())


def _module(name: str) -> object | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def zero_results(result: object) -> object:
    """Zero the tensors a dispatch returns (its launch was replaced, so they hold whatever memory held)."""
    for value in result if isinstance(result, (tuple, list)) else (result,):
        if hasattr(value, "zero_") and getattr(value, "is_floating_point", lambda: False)():
            value.zero_()
    return result


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
