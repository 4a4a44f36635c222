"""Dispatch: feed the traffic's prefill calls through tokenspeed_mla's own `tokenspeed_mla_prefill`.

The library computes the key from the tensors and looks it up in its cache; what happens at the launch
is the capture's launch policy (`launch.LaunchCounter`: only execute mode calls the kernel). In dry mode
the capture puts the rule file's stand-ins in place around each call (host cum_seq_lens, a null CUDA
stream context); nothing of the library's own code is patched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mlacheck.scenario.prefill_traffic import PrefillCall
from mlacheck.scenario.presets import ModelPreset

FP8 = torch.float8_e4m3fn


@dataclass(frozen=True)
class CallTensors:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cum_q: torch.Tensor
    cum_kv: torch.Tensor


def empty_tensors(call: PrefillCall, model: ModelPreset, device: str, dtype: torch.dtype = FP8) -> CallTensors:
    """q/k/v of the call's shapes (MLA prefill attends with h_k == h_q), unfilled: dry mode and start-up dummy
    runs compute nothing that is read (dry mode zeroes the outputs)."""
    total_q, total_kv, heads = sum(call.q_lens), sum(call.kv_lens), model.num_heads
    return CallTensors(
        torch.empty(total_q, heads, model.d_qk, dtype=dtype, device=device),
        torch.empty(total_kv, heads, model.d_qk, dtype=dtype, device=device),
        torch.empty(total_kv, heads, model.d_v, dtype=dtype, device=device),
        cumulative(call.q_lens, device),
        cumulative(call.kv_lens, device),
    )


def cumulative(lens: tuple[int, ...], device: str) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def dispatch(prefill, call: PrefillCall, tensors: CallTensors, model: ModelPreset, enable_pdl: bool):
    """One tokenspeed_mla_prefill call, as the engines' backends make it: for the new tokens (extend), or for a
    chunk of the cached prefix (each is its own step of the engine, `sites.py`)."""
    arguments = {
        "seq_lens": torch.tensor(call.kv_lens, dtype=torch.int32, device=tensors.q.device),
        "cum_seq_lens": tensors.cum_kv,
        "max_seq_len": max(call.kv_lens),
        "batch_size": len(call.q_lens),
        "softmax_scale": model.softmax_scale,
        "is_causal": call.is_causal,
        "return_lse": call.return_lse,
        "cum_seq_lens_q": tensors.cum_q,
        "max_seq_len_q": max(call.q_lens),
        "enable_pdl": enable_pdl,
    }
    step = extend if call.kind == "extend" else prefix_chunk
    return step(prefill, tensors, arguments)


def extend(prefill, tensors: CallTensors, arguments: dict):
    """The engine's prefill call over the new tokens."""
    return prefill(tensors.q, tensors.k, tensors.v, **arguments)


def prefix_chunk(prefill, tensors: CallTensors, arguments: dict):
    """The engine's prefill call over one chunk of a request's cached prefix."""
    return prefill(tensors.q, tensors.k, tensors.v, **arguments)
