"""tokenspeed_mla's prefill as a backend of the scenario: every prefill call through its own dispatch, in any mode.

All three modes share this path; they differ only at the launch (`launch.LaunchCounter`). On a CUDA device the
inputs are realistic bf16 activations, q cast to FP8 and K/V packed and quantized by the library's own
`mla_kv_pack_quantize_fp8`; each call's output and LSE come from the kernel (execute) or from mlacheck's
FP32 reference (trace), and a request with a prefix merges its extend pass and prefix chunks by LSE.
Each call is measured (`measurements.py`): tokens, the FP8 accuracy cost (reference on FP8 inputs vs on the
original bf16 inputs) and, in execute mode, the kernel against the reference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from mlacheck.rulefiles import RuleSet
from mlacheck.scenario import prefill_call
from mlacheck.scenario.activations import compare_outputs, make_activations, quantize_kv_fp8, quantize_q_fp8
from mlacheck.scenario.backends import Bound, FamilyBackend, Loaded, TrafficStats
from mlacheck.scenario.engine import Engine
from mlacheck.scenario.environment import import_tokenspeed_mla
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import FP8, CallTensors, cumulative, dispatch, empty_tensors
from mlacheck.scenario.prefill_traffic import PrefillCall, Request
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import merge_by_lse, reference_prefill
from mlacheck.scenario.warmup import WarmupSource, library_warmup


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


def call_tensors(inputs: list[RequestInputs], call: PrefillCall, fp8: bool) -> CallTensors:
    """The call's ragged q/k/v (FP8 or the original bf16) over the requests it covers, with its cumulative lengths."""
    batch = inputs[call.first : call.first + len(call.q_lens)]
    q = torch.cat([r.q8 if fp8 else r.q for r in batch])
    rows = [_kv_rows(r, call, i) for i, r in enumerate(batch)]
    k = torch.cat([(r.k8 if fp8 else r.k)[s] for r, s in zip(batch, rows)])
    v = torch.cat([(r.v8 if fp8 else r.v)[s] for r, s in zip(batch, rows)])
    device = q.device.type
    return CallTensors(q, k, v, cumulative(call.q_lens, device), cumulative(call.kv_lens, device))


class TokenspeedMLAPrefill:
    """Prefill calls through the package's `tokenspeed_mla_prefill` (looked up at each call, as engines that import the
    package do), with the engine's q dtype: FP8, or (an engine that does not quantize the query) the model's bf16
    activations."""

    label = "tokenspeed_mla"
    sites = {"extend": prefill_call.extend, "prefix_chunk": prefill_call.prefix_chunk}

    def __init__(
        self,
        package,
        model: ModelPreset,
        mode: str,
        enable_pdl: bool,
        launcher: LaunchCounter,
        measurements: Measurements,
        family: str,
        device: str,
        q_dtype: torch.dtype = FP8,
    ) -> None:
        self.package, self.model, self.mode, self.enable_pdl = package, model, mode, enable_pdl
        self.launcher, self.measurements, self.family, self.device = launcher, measurements, family, device
        self.q_dtype = q_dtype
        self.stats = TrafficStats()

    def startup(self, call: PrefillCall) -> None:
        """A start-up dummy prefill on unfilled tensors."""
        tensors = empty_tensors(call, self.model, self.device, self.q_dtype)
        dispatch(self.package.tokenspeed_mla_prefill, call, tensors, self.model, self.enable_pdl)

    def batch(self, batch: tuple[Request, ...], calls: list[PrefillCall], seed: int) -> list[Callable[[], object]]:
        """One action per call. In the GPU modes each call is measured, and once the batch's last call has run its
        outputs, merged by LSE, are compared with one-shot attention over each request's [prefix + new] tokens."""
        if self.mode == "dry":
            return [functools.partial(self._dry_call, call) for call in calls]
        state = _Batch(lambda: [request_inputs(r, self.model, seed + i, self.device) for i, r in enumerate(batch)])
        return [functools.partial(self._call, state, call, index == len(calls) - 1) for index, call in enumerate(calls)]

    def _dry_call(self, call: PrefillCall) -> None:
        self.startup(call)
        self._count(call)

    def _count(self, call: PrefillCall) -> None:
        self.stats.prefill_calls += 1
        self.stats.tokens += sum(call.q_lens)

    def _call(self, state: _Batch, call: PrefillCall, last: bool) -> None:
        fp8 = self.q_dtype == FP8
        out, lse = _run_call(
            self.package.tokenspeed_mla_prefill,
            call,
            state.inputs(),
            self.model,
            self.enable_pdl,
            self.launcher,
            self.measurements,
            self.family,
            self.mode,
            fp8,
        )
        self._count(call)
        out, lse = _over_the_batch(out, lse, state.inputs(), call)
        state.merged = (out, lse) if state.merged is None else merge_by_lse(*state.merged, out, lse)
        if last:
            error = _merge_error(state.merged, state.inputs(), self.model, fp8)
            self.stats.merge_max_abs_err = max(self.stats.merge_max_abs_err or 0.0, error)


class _Batch:
    """A traffic batch's inputs (made at its first call) and its calls' outputs merged so far."""

    def __init__(self, make: Callable[[], list[RequestInputs]]) -> None:
        self._make, self._inputs, self.merged = make, None, None

    def inputs(self) -> list[RequestInputs]:
        if self._inputs is None:
            self._inputs = self._make()
        return self._inputs


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


def _over_the_batch(out: torch.Tensor, lse: torch.Tensor, inputs: list[RequestInputs], call: PrefillCall):
    """A call's output and LSE as rows of every request of the batch: those it does not cover attended to no key
    (output 0, LSE -inf), so that merging by LSE leaves them as they were."""
    rows = [r.q.shape[0] for r in inputs]
    before, total = sum(rows[: call.first]), sum(rows)
    if out.shape[0] == total:
        return out, lse
    full_out = out.new_zeros((total, *out.shape[1:]))
    full_lse = lse.new_full((total, *lse.shape[1:]), float("-inf"))
    full_out[before : before + out.shape[0]] = out
    full_lse[before : before + lse.shape[0]] = lse
    return full_out, full_lse


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


class TokenspeedMLAPrefillBackend(FamilyBackend):
    name = "tokenspeed_mla"
    family = "tokenspeed_mla.prefill"

    def library_warmup(self, rules: RuleSet) -> WarmupSource:
        return library_warmup(rules.family(self.family))

    def load(self, engine: Engine, rules: RuleSet) -> Loaded:
        return Loaded(import_tokenspeed_mla(), self.module(rules))

    def runner(self, loaded: Loaded, bound: Bound, family: str) -> TokenspeedMLAPrefill:
        return TokenspeedMLAPrefill(
            loaded.library,
            bound.model,
            bound.mode,
            bound.enable_pdl,
            bound.launcher,
            bound.measurements,
            family,
            bound.device,
            getattr(torch, bound.engine.prefill_q_dtype),
        )
