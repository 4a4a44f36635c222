"""The traffic run: every prefill call of the workload through tokenspeed_mla's dispatch, in any mode.

All three modes share this path; they differ only at the launch (`launch.LaunchCounter`). On a CUDA device the
inputs are realistic bf16 activations, q cast to FP8 and K/V packed and quantized by the library's own
`mla_kv_pack_quantize_fp8`; each call's output and LSE come from the kernel (execute) or from mlacheck's
FP32 reference (trace), and a request with a prefix merges its extend pass and prefix chunks by LSE.
Each call is measured (`measurements.py`): tokens, the FP8 accuracy cost (reference on FP8 inputs vs on the
original bf16 inputs) and, in execute mode, the kernel against the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from mlacheck.scenario.activations import compare_outputs, make_activations, quantize_kv_fp8, quantize_q_fp8
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import FP8, CallTensors, cumulative, dispatch, empty_tensors
from mlacheck.scenario.prefill_traffic import PROFILES, PrefillCall, Request, Workload
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import merge_by_lse, reference_prefill


@dataclass
class RequestInputs:
    """One request's bf16 activations and their FP8 forms; K/V rows are [prefix..., new tokens...]."""

    prefix_len: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q8: torch.Tensor
    k8: torch.Tensor
    v8: torch.Tensor


def request_inputs(request: Request, model: ModelPreset, seed: int, device: str) -> RequestInputs:
    acts = make_activations(
        request.extend_len,
        request.prefix_len + request.extend_len,
        model.num_heads,
        model.d_qk,
        model.d_v,
        seed=seed,
        device=device,
    )
    k8, v8 = quantize_kv_fp8(acts.k_nope, acts.k_pe, acts.v)
    return RequestInputs(request.prefix_len, acts.q, acts.k, acts.v, quantize_q_fp8(acts.q), k8, v8)


def _kv_rows(inputs: RequestInputs, call: PrefillCall, index: int) -> slice:
    start = call.kv_starts[index] + (inputs.prefix_len if call.kind == "extend" else 0)
    return slice(start, start + call.kv_lens[index])


def call_tensors(batch: list[RequestInputs], call: PrefillCall, fp8: bool) -> CallTensors:
    """The call's ragged q/k/v (FP8 or the original bf16) with its cumulative lengths."""
    q = torch.cat([r.q8 if fp8 else r.q for r in batch])
    rows = [_kv_rows(r, call, i) for i, r in enumerate(batch)]
    k = torch.cat([(r.k8 if fp8 else r.k)[s] for r, s in zip(batch, rows)])
    v = torch.cat([(r.v8 if fp8 else r.v)[s] for r, s in zip(batch, rows)])
    device = q.device.type
    return CallTensors(q, k, v, cumulative(call.q_lens, device), cumulative(call.kv_lens, device))


@dataclass
class TrafficStats:
    prefill_calls: int = 0
    tokens: int = 0
    merge_max_abs_err: float | None = None  # chunked-prefix merge vs one-shot attention (GPU modes)


def run_traffic(
    prefill,
    workload: Workload,
    profile: str,
    model: ModelPreset,
    mode: str,
    enable_pdl: bool,
    launcher: LaunchCounter,
    measurements: Measurements,
    family: str,
    seed: int,
    device: str = "cuda",
    fp8: bool = True,
    between: Callable[[], object] = lambda: None,
) -> TrafficStats:
    """Send the workload's prefill calls through `prefill` and measure each call (GPU modes).

    q/k/v are FP8, or (fp8=False, vLLM without query quantization) the model's bf16 activations; `between` is
    called after each call (where a held-back Ctrl-C is raised)."""
    stats = TrafficStats()
    make_calls = PROFILES[profile]
    for number, batch in enumerate(workload.batches):
        calls = make_calls(batch, workload.chunk_capacity)
        stats.prefill_calls += len(calls)
        stats.tokens += sum(sum(call.q_lens) for call in calls)
        if mode == "dry":
            for call in calls:
                dispatch(
                    prefill, call, empty_tensors(call, model, "cpu", FP8 if fp8 else torch.bfloat16), model, enable_pdl
                )
                between()
            continue
        inputs = [request_inputs(r, model, seed * 7919 + number * 131 + i, device) for i, r in enumerate(batch)]
        merged = None
        for call in calls:
            out, lse = _run_call(prefill, call, inputs, model, enable_pdl, launcher, measurements, family, mode, fp8)
            between()
            merged = (out, lse) if merged is None else merge_by_lse(*merged, out, lse)
        error = _merge_error(merged, inputs, model, fp8)
        stats.merge_max_abs_err = max(stats.merge_max_abs_err or 0.0, error)
    return stats


def _run_call(prefill, call, inputs, model, enable_pdl, launcher, measurements, family, mode, fp8: bool):
    fed = call_tensors(inputs, call, fp8=fp8)
    result = dispatch(prefill, call, fed, model, enable_pdl)
    reference = reference_prefill(fed.q, fed.k, fed.v, fed.cum_q, fed.cum_kv, model.softmax_scale, call.is_causal)
    bf16 = call_tensors(inputs, call, fp8=False)
    original = reference_prefill(bf16.q, bf16.k, bf16.v, bf16.cum_q, bf16.cum_kv, model.softmax_scale, call.is_causal)
    kernel = None
    out, lse = reference
    if mode == "execute":
        out, lse = result if call.return_lse else (result, reference[1])
        kernel = asdict(compare_outputs(out, lse, *reference))
    measurements.record(
        family, launcher.last_key, sum(call.q_lens), asdict(compare_outputs(*reference, *original)), kernel
    )
    return out.float(), lse.float()


def _merge_error(merged, inputs: list[RequestInputs], model: ModelPreset, fp8: bool) -> float:
    """Max abs difference of the merged chunked-prefix output from one-shot attention over [prefix + new]."""
    q = torch.cat([r.q8 if fp8 else r.q for r in inputs])
    k = torch.cat([r.k8 if fp8 else r.k for r in inputs])
    v = torch.cat([r.v8 if fp8 else r.v for r in inputs])
    q_lens = tuple(r.q.shape[0] for r in inputs)
    kv_lens = tuple(r.k.shape[0] for r in inputs)
    device = q.device.type
    one_shot, _ = reference_prefill(
        q, k, v, cumulative(q_lens, device), cumulative(kv_lens, device), model.softmax_scale, True
    )
    return (merged[0] - one_shot).abs().max().item() if one_shot.numel() else 0.0
