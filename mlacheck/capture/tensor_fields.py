"""Turns on reading torch tensors' key fields below Python on the compiled hot path (`_tensor_fields.c`): a DeepGEMM
hit keys five tensors, and reading their dtype, shape and strides through Python costs more than the 2% of a call
that issue 28 allows. The C side verifies, on probe tensors of every dtype torch names and of several layouts, that
what it reads is what Python reads, and stays off otherwise (another torch, the pure Python hot path): then Python
reads the fields, as before. Asked once a process, when the first observed call is made with torch imported."""

from __future__ import annotations

import os
import sys

from mlacheck.capture import hotpath

_answer: list[bool] = []  # whether it is on, once asked


def read_natively() -> bool:
    """Whether observed calls read exact tensors' fields below Python (turned on here at the first ask made with torch
    imported: asked before, it answers no and asks again next time)."""
    if not _answer:
        if "torch" not in sys.modules:
            return False
        _answer.append(_enable())
    return _answer[0]


def _enable() -> bool:
    torch = sys.modules.get("torch")
    enable = hotpath.read_tensors_natively  # None on the pure Python hot path
    if torch is None or enable is None:
        return False
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")  # where libtorch's C shim is
    try:
        return enable(
            (torch.Tensor, torch.nn.Parameter), library, _probes(torch), torch._C._is_torch_function_mode_enabled
        )
    except Exception:  # noqa: BLE001 - any doubt leaves it off: Python reads the fields
        return False


def _probes(torch) -> list:
    """A tensor of each real dtype torch names that can be made, and tensors of several shapes and layouts (a
    transpose, a slice, a scalar, an empty one, a Parameter). Not of complex or quantized dtypes: torch warns once a
    process at the first such tensor, and the warning is the program's to see (their tensors are read by Python)."""
    dtypes = dict.fromkeys(value for value in vars(torch).values() if isinstance(value, torch.dtype))
    probes = []
    for dtype in dtypes:
        if dtype.is_complex or str(dtype).startswith(("torch.qint", "torch.quint")):
            continue
        try:
            probes.append(torch.empty((2, 3), dtype=dtype))
        except Exception:  # noqa: BLE001, S112 - a dtype torch cannot make here has no probe (and is read by Python)
            continue
    grid = torch.empty(6, 10, 4)
    probes += [grid.transpose(0, 2), grid[:, 2:7:2], grid[1, 2, 3], torch.empty(0, 5), torch.nn.Parameter(grid)]
    return probes
