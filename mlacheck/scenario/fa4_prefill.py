"""vLLM 0.34.0's default MLA prefill on Blackwell: FlashAttention-4, called as vLLM calls it.

vLLM's FlashAttnPrefillBackend (v1/attention/backends/mla/prefill/flash_attn.py, run_prefill_new_tokens :468-490 and
run_prefill_context_chunk :492-512) reaches `_flash_attn_fwd` through vllm_flash_attn/flash_attn_interface.py:480 with
q and k [T, H, 192] bf16 (k concatenated, contiguous), v a view of the up-projection's [T, H, 256] output (stride
H*256, 256, 1), num_splits 0 (FA4 chooses), new tokens causal with the LSE where the batch has context, context chunks
non-causal with the LSE. The FA4 used is vLLM's vendored copy where vLLM is installed, else flash-attn-4 (the same
forward upstream; the header says which).

Modes: dry (no CUDA device) runs FA4's own dispatch on FakeTensorMode "cuda" tensors, which FA4 supports itself (it
compiles, or not under --compile skip, and launches nothing); on a CUDA device the tensors are real, and in execute
mode each launch's output and LSE are compared with mlacheck's FP32 reference (a `numerics` event: MLA005 beyond the
family's bounds).
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import asdict

import torch

from mlacheck.errors import MlacheckError
from mlacheck.scenario.activations import compare_outputs
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import cumulative
from mlacheck.scenario.prefill_traffic import PrefillCall
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import reference_prefill

INTERFACES = (
    ("vllm.vllm_flash_attn.cute.interface", "vLLM's vendored FA4"),
    ("flash_attn.cute.interface", "flash-attn-4, standing in for vLLM's vendored copy"),
)
V_WIDTH = 256  # the up-projection's per-head output: k_nope (128) then v (128); v is its second half


def fa4_interface():
    """The FA4 a vLLM engine would call here, and how the header names it."""
    for name, label in INTERFACES:
        try:
            return importlib.import_module(name), label
        except ImportError:
            continue
    raise MlacheckError("--profile vllm prefills with FlashAttention-4, which is not installed; install mlacheck[fa4]")


class FA4Prefill:
    """Prefill calls through FA4's `_flash_attn_fwd`, as vLLM makes them."""

    def __init__(
        self, interface, model: ModelPreset, mode: str, launcher: LaunchCounter, measurements: Measurements, family: str
    ) -> None:
        self.interface, self.model, self.mode = interface, model, mode
        self.launcher, self.measurements, self.family = launcher, measurements, family
        self.device = "cuda"
        self.calls = 0

    def startup(self, requests: int, tokens: int) -> None:
        """A start-up dummy prefill: `requests` of `tokens` new tokens each, causal, no LSE (vLLM's FlashInfer
        autotune run and warmup_kernels' first step); nothing reads its output."""
        lens = (tokens,) * requests
        with self._tensors():
            q, k, v = self._empty(sum(lens))
            self.extend(q, k, v, lens, lens, causal=True, return_lse=False)

    def call(self, call: PrefillCall, seed: int) -> None:
        """One prefill call of the traffic (new tokens causal, a context chunk not); in execute mode its output is
        measured against the reference."""
        with self._tensors():
            if self.mode == "execute":
                q, k, v = self._filled(sum(call.q_lens), sum(call.kv_lens), seed)
            else:
                q, k, v = self._empty(sum(call.q_lens), sum(call.kv_lens))
            forward = self.extend if call.is_causal else self.prefix_chunk
            result = forward(q, k, v, call.q_lens, call.kv_lens, call.is_causal, call.return_lse)
        kernel = None
        if self.mode == "execute":
            out, lse = result[0], result[1] if call.return_lse else None
            ref_out, ref_lse = reference_prefill(
                q,
                k,
                v,
                cumulative(call.q_lens, "cuda"),
                cumulative(call.kv_lens, "cuda"),
                self.model.softmax_scale,
                call.is_causal,
            )
            kernel = asdict(compare_outputs(out, None if lse is None else lse.transpose(0, 1), ref_out, ref_lse))
        self.measurements.record(self.family, self.launcher.last_key, sum(call.q_lens), None, kernel)

    def extend(self, q, k, v, q_lens, kv_lens, causal: bool, return_lse: bool):
        """vLLM's run_prefill_new_tokens (its start-up dummy prefills go this way too)."""
        return self.interface._flash_attn_fwd(q, k, v, **self._arguments(q_lens, kv_lens, causal, return_lse))

    def prefix_chunk(self, q, k, v, q_lens, kv_lens, causal: bool, return_lse: bool):
        """vLLM's run_prefill_context_chunk."""
        return self.interface._flash_attn_fwd(q, k, v, **self._arguments(q_lens, kv_lens, causal, return_lse))

    def _arguments(self, q_lens, kv_lens, causal: bool, return_lse: bool) -> dict:
        """`_flash_attn_fwd`'s arguments beside q, k, v, as vLLM passes them."""
        self.calls += 1
        return {
            "cu_seqlens_q": self._cumulative(q_lens),
            "cu_seqlens_k": self._cumulative(kv_lens),
            "max_seqlen_q": max(q_lens),
            "max_seqlen_k": max(kv_lens),
            "softmax_scale": self.model.softmax_scale,
            "causal": causal,
            "num_splits": 0,
            "return_lse": return_lse,
        }

    def _cumulative(self, lens: tuple[int, ...]) -> torch.Tensor:
        """cu_seqlens as the engine passes them (in dry mode a fake tensor of their size: FA4 reads no values then)."""
        if self.mode == "dry":
            return torch.empty(len(lens) + 1, dtype=torch.int32, device=self.device)
        return cumulative(lens, self.device)

    def _tensors(self):
        """Where the call's tensors live: FakeTensorMode "cuda" tensors in dry mode, the device otherwise."""
        if self.mode != "dry":
            return contextlib.nullcontext()
        from torch._subclasses.fake_tensor import FakeTensorMode

        return FakeTensorMode(allow_non_fake_inputs=True)

    def _empty(self, total_q: int, total_kv: int | None = None):
        model, total_kv = self.model, total_q if total_kv is None else total_kv
        q = torch.empty(total_q, model.num_heads, model.d_qk, dtype=torch.bfloat16, device=self.device)
        k = torch.empty(total_kv, model.num_heads, model.d_qk, dtype=torch.bfloat16, device=self.device)
        heads = model.num_heads
        v = torch.empty_strided(  # the second half of each [H, 256] up-projection row
            (total_kv, heads, model.d_v), (heads * V_WIDTH, V_WIDTH, 1), dtype=torch.bfloat16, device=self.device
        )
        return q, k, v

    def _filled(self, total_q: int, total_kv: int, seed: int):
        generator = torch.Generator(device=self.device).manual_seed(seed)
        q, k, v = self._empty(total_q, total_kv)
        for tensor in (q, k, v):
            tensor.normal_(generator=generator)
        return q, k, v
