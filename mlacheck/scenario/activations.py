"""Realistic MLA prefill inputs, their FP8 quantization as chunked prefill does it, and accuracy metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ROPE_DIM = 64  # MLA's rope part of the QK head dim, one k_pe shared by all heads
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448
OUTLIER_MAGNITUDE = (10.0, 50.0)  # outlier channels' offsets, in units of the baseline RMS


@dataclass(frozen=True)
class Activations:
    """bf16 MLA prefill inputs: q [q_tokens, h, d_qk], k_nope [kv_tokens, h, d_qk - 64],
    k_pe [kv_tokens, 1, 64] (shared by all heads) and v [kv_tokens, h, d_v]."""

    q: torch.Tensor
    k_nope: torch.Tensor
    k_pe: torch.Tensor
    v: torch.Tensor

    @property
    def k(self) -> torch.Tensor:
        """K as the kernel reads it: [kv_tokens, h, d_qk], k_nope then k_pe in every head."""
        return torch.cat([self.k_nope, self.k_pe.expand(-1, self.k_nope.shape[1], -1)], dim=-1)


@dataclass(frozen=True)
class AccuracyMetrics:
    """Errors of an attention output against a reference; NaN anywhere makes them NaN.

    max_rel_err is max_abs_err over the reference's largest magnitude, so that near-zero
    reference entries do not dominate it.
    """

    max_abs_err: float
    max_rel_err: float
    cosine_similarity: float
    lse_max_abs_err: float | None  # None where no LSE was returned (decode)


def _channel_scaled_normal(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Normal noise whose channels (last dim) have log-normal RMS around 1, per head."""
    scales = torch.exp(0.3 * torch.randn(shape[1:], generator=gen))
    return torch.randn(shape, generator=gen) * scales


def _add_outliers(x: torch.Tensor, channels: torch.Tensor, gen: torch.Generator) -> None:
    """Add a fixed-sign 10-50x offset to the given channels, drawn per head, the same on every token.

    Outliers fixed to a few channels across tokens are what real key caches show (KIVI,
    arXiv:2402.02750).
    """
    low, high = OUTLIER_MAGNITUDE
    magnitude = low + (high - low) * torch.rand(x.shape[1], len(channels), generator=gen)
    sign = torch.randint(0, 2, (x.shape[1], len(channels)), generator=gen) * 2 - 1
    x[..., channels] += sign * magnitude


def make_activations(
    q_tokens: int,
    kv_tokens: int,
    num_heads: int,
    d_qk: int = 192,
    d_v: int = 128,
    seed: int = 0,
    device: torch.device | str = "cpu",
    outlier_channels: int = 2,
) -> Activations:
    """Seeded bf16 q, k_nope, k_pe, v for MLA prefill (h_q == h_k == num_heads).

    Baseline entries are normal with per-channel RMS spread around 1. q and K each get
    ``outlier_channels`` channels of d_qk with fixed 10-50x offsets, in different channels: where
    both are large their product puts logits in the hundreds. Drawn on the CPU, so one seed gives
    the same tensors on every device.
    """
    if d_qk <= ROPE_DIM:
        raise ValueError(f"d_qk must exceed the rope part ({ROPE_DIM}), got {d_qk}")
    gen = torch.Generator().manual_seed(seed)
    d_nope = d_qk - ROPE_DIM
    channels = torch.randperm(d_qk, generator=gen)
    q_channels, k_channels = channels[:outlier_channels], channels[outlier_channels : 2 * outlier_channels]
    q = _channel_scaled_normal((q_tokens, num_heads, d_qk), gen)
    k_nope = _channel_scaled_normal((kv_tokens, num_heads, d_nope), gen)
    k_pe = _channel_scaled_normal((kv_tokens, 1, ROPE_DIM), gen)
    v = _channel_scaled_normal((kv_tokens, num_heads, d_v), gen)
    _add_outliers(q, q_channels, gen)
    _add_outliers(k_nope, k_channels[k_channels < d_nope], gen)
    _add_outliers(k_pe, k_channels[k_channels >= d_nope] - d_nope, gen)
    return Activations(*(_to_bf16(x, device) for x in (q, k_nope, k_pe, v)))


def _to_bf16(x: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    return x.to(torch.bfloat16).to(device)


def check_unit_scales(k_scale: float, v_scale: float) -> None:
    """Raise ValueError unless both FP8 scales are exactly 1.0.

    tokenspeed_mla_prefill takes no dequantization scales: it passes ``Float32(1.0)`` as the
    kernel's ``scale_output`` (mla_prefill.py:421) and uses softmax_scale as given, so FP8 K/V
    quantized with another scale would give silently wrong outputs and LSE.
    """
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if float(scale) != 1.0:
            raise ValueError(
                f"{name}={scale}: tokenspeed_mla_prefill has no dequantization scale and assumes 1.0; "
                f"quantize K/V with scale 1.0"
            )


def _check_fp8_range(name: str, x: torch.Tensor) -> None:
    """Raise ValueError if x is past the float8_e4m3fn range, which a scale-1.0 cast silently saturates."""
    peak = x.abs().max().item() if x.numel() else 0.0
    if peak > FP8_MAX:
        raise ValueError(f"{name} reaches {peak:g}, past the FP8 e4m3 maximum {FP8_MAX:g}")


def quantize_q_fp8(q: torch.Tensor) -> torch.Tensor:
    """q to float8_e4m3fn with scale 1.0, as the prefill kernel takes it."""
    _check_fp8_range("q", q)
    return q.to(torch.float8_e4m3fn)


def quantize_kv_fp8(
    k_nope: torch.Tensor, k_pe: torch.Tensor, v: torch.Tensor, k_scale: float = 1.0, v_scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack K = [k_nope, k_pe per head] and quantize K and V to float8_e4m3fn as chunked prefill does.

    On CUDA this calls the library's ``mla_kv_pack_quantize_fp8``; on the CPU, where its Triton
    kernel cannot run, it casts in torch, which matched the library bit for bit on an H200.
    k_nope [s, h, d_nope], k_pe [s, 1, 64] or [s, 64], v [s, h, d_v]. Returns (k_fp8, v_fp8).
    """
    check_unit_scales(k_scale, v_scale)
    for name, x in (("k_nope", k_nope), ("k_pe", k_pe), ("v", v)):
        _check_fp8_range(name, x)
    if k_nope.is_cuda:
        # Imported here: the CPU path needs neither the library nor its Triton.
        from tokenspeed_mla.mla_kv_pack_quantize_fp8 import mla_kv_pack_quantize_fp8

        return mla_kv_pack_quantize_fp8(k_nope, k_pe, v, k_scale_inv=1.0 / k_scale, v_scale_inv=1.0 / v_scale)
    s, h, _ = k_nope.shape
    k = torch.cat([k_nope, k_pe.reshape(s, 1, -1).expand(-1, h, -1)], dim=-1)
    return k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)


def _max(x: torch.Tensor) -> float:
    return x.max().item() if x.numel() else 0.0


def compare_outputs(
    out: torch.Tensor, lse: torch.Tensor | None, ref_out: torch.Tensor, ref_lse: torch.Tensor | None
) -> AccuracyMetrics:
    """Metrics of out [n, h, d_v] and lse [n, h] against a reference, in float64 on the reference's device.

    Rows where both LSEs are -inf (no keys) count as equal; without an LSE, its error is None.
    """
    out = out.to(ref_out.device, torch.float64)
    ref = ref_out.to(torch.float64)
    max_abs = _max((out - ref).abs())
    peak = _max(ref.abs())
    max_rel = max_abs / peak if peak else (0.0 if max_abs == 0 else math.inf)
    norms = (out.norm() * ref.norm()).item()
    if norms:
        cosine = (torch.dot(out.flatten(), ref.flatten()) / norms).item()
    else:
        cosine = 1.0 if max_abs == 0 else 0.0
    if lse is None or ref_lse is None:
        return AccuracyMetrics(max_abs, max_rel, cosine, None)
    lse = lse.to(ref_lse.device, torch.float64)
    ref_lse = ref_lse.to(torch.float64)
    lse_err = torch.where(lse == ref_lse, torch.zeros_like(lse), (lse - ref_lse).abs())
    return AccuracyMetrics(max_abs, max_rel, cosine, _max(lse_err))
