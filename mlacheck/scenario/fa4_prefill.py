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
import functools
import importlib
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from mlacheck.errors import SETTING, MlacheckError
from mlacheck.rulefiles import RuleFile, RuleSet
from mlacheck.scenario.activations import compare_outputs
from mlacheck.scenario.backends import Bound, Loaded, TrafficStats
from mlacheck.scenario.engine import Engine
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import cumulative
from mlacheck.scenario.prefill_traffic import PrefillCall, Request
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import reference_prefill
from mlacheck.scenario.warmup import WarmupSource

INTERFACES = (
    ("vllm.vllm_flash_attn.cute.interface", "vLLM's vendored FA4"),
    ("flash_attn.cute.interface", "flash-attn-4, standing in for vLLM's vendored copy"),
)
FA4_FWD = "_flash_attn_fwd.compile_cache.cache"  # the forward's cache: the one the prefill kind is checked by
V_WIDTH = 256  # the up-projection's per-head output: k_nope (128) then v (128); v is its second half


class FA4Prefill:
    """Prefill calls through FA4's `_flash_attn_fwd`, as vLLM makes them."""

    q_dtype = torch.bfloat16

    def __init__(
        self,
        interface,
        model: ModelPreset,
        mode: str,
        launcher: LaunchCounter,
        measurements: Measurements,
        family: str,
        label: str,
    ) -> None:
        self.interface, self.model, self.mode = interface, model, mode
        self.launcher, self.measurements, self.family = launcher, measurements, family
        self.label = f"FlashAttention-4 ({label}: {interface.__name__})"
        self.device = "cuda"
        self.stats = TrafficStats()
        self.sites = {"extend": FA4Prefill.extend, "prefix_chunk": FA4Prefill.prefix_chunk}

    def startup(self, call: PrefillCall) -> None:
        """A start-up dummy prefill of new tokens (vLLM's FlashInfer autotune run and warmup_kernels' first step);
        nothing reads its output."""
        with self._tensors():
            q, k, v = self._empty(sum(call.q_lens), sum(call.kv_lens))
            self.extend(q, k, v, call.q_lens, call.kv_lens, call.is_causal, call.return_lse)

    def batch(self, batch: tuple[Request, ...], calls: list[PrefillCall], seed: int) -> list[Callable[[], object]]:
        return [functools.partial(self.call, call, seed + index) for index, call in enumerate(calls)]

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
        self.stats.prefill_calls += 1
        self.stats.tokens += sum(call.q_lens)

    def extend(self, q, k, v, q_lens, kv_lens, causal: bool, return_lse: bool):
        """vLLM's run_prefill_new_tokens (its start-up dummy prefills go this way too)."""
        return self.interface._flash_attn_fwd(q, k, v, **self._arguments(q_lens, kv_lens, causal, return_lse))

    def prefix_chunk(self, q, k, v, q_lens, kv_lens, causal: bool, return_lse: bool):
        """vLLM's run_prefill_context_chunk."""
        return self.interface._flash_attn_fwd(q, k, v, **self._arguments(q_lens, kv_lens, causal, return_lse))

    def _arguments(self, q_lens, kv_lens, causal: bool, return_lse: bool) -> dict:
        """`_flash_attn_fwd`'s arguments beside q, k, v, as vLLM passes them."""
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

        _spend_the_fake_data_pointer_warning()
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


@functools.cache
def _spend_the_fake_data_pointer_warning() -> None:
    """torch warns once a process when a FakeTensor's data pointer is read (c10/core/StorageImpl.cpp:46), and FA4's
    DLPack conversion of dry mode's fake tensors reads it (flash_attn/cute/cute_dsl_utils.py to_cute_tensor, through
    tvm-ffi) where torch prints to stderr itself, past Python's warnings. Read from Python first, that one warning is a
    UserWarning the scenario holds back with the libraries' others (`library_warnings.py`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        torch.empty(1).data_ptr()


class FA4Backend:
    name = "fa4"

    def watching(self, rules: RuleSet) -> list[RuleFile]:
        return [r for r in rules.families if r.family.module in dict(INTERFACES) and r.family.cache == FA4_FWD]

    def undeclared(self, path: Path | None) -> str:
        return (
            f"{path}: the scenario prefills with FlashAttention-4, but no rule file declares its forward cache; add "
            "one (copy mlacheck's bundled flash_attn_4.toml)"
        )

    def library_warmup(self, rules: RuleSet) -> WarmupSource:
        raise MlacheckError(
            "--warmup library: FlashAttention-4 has no warm-up function of its own; use engine, none or PATH.py:FUNC"
        )

    def load(self, engine: Engine, rules: RuleSet) -> Loaded:
        """The FA4 the engine would call here (vLLM's vendored copy, else flash-attn-4), and how the header names it."""
        for name, label in INTERFACES:
            try:
                interface = importlib.import_module(name)
            except ImportError:
                continue
            return Loaded(interface, interface, label)
        raise MlacheckError(
            f"{SETTING} prefills with FlashAttention-4, which is not installed; install mlacheck[fa4]",
            "profile",
            engine.name,
        )

    def runner(self, loaded: Loaded, bound: Bound, family: str) -> FA4Prefill:
        return FA4Prefill(
            loaded.library, bound.model, bound.mode, bound.launcher, bound.measurements, family, loaded.label
        )
