"""FP32 reference attention for the tokenspeed_mla FP8 prefill and paged decode kernels, in their conventions.

Conventions read from tokenspeed_mla 2.0.4 (`fmha.py`, `fmha_helpers.py`, `mla_prefill.py`):

LSE: natural log with the softmax scale included, ``lse = ln(sum_j exp(softmax_scale * q.k_j))``.
    fmha.py:2959-2960 writes ``log(row_sum) + scale_softmax * row_max``; row_sum sums
    ``exp2((s - row_max) * scale_softmax_log2 + p_fp8_prescale_log2)`` (fmha.py:2202-2205) and
    mla_prefill.py:391 passes ``scale_softmax_log2 = softmax_scale * log2(e)``. The FP8 pre-scale
    offset is never subtracted (``p_fp8_prescale_lse_correction``, fmha.py:315, is unused), which is
    harmless here: mla_prefill.py:119 sets ``enable_skip_correction=True``, so
    ``rescale_threshold = 8`` (fmha.py:307) and ``p_fp8_prescale_log2 = floor(log2(448) - 8) = 0``
    (fmha.py:311-313).

Causal: bottom-right aligned. ``is_causal`` selects WINDOW_MASK_INFERENCE with ``window_right=0``
    (mla_prefill.py:106, 404; "the end of q is aligned with the end of k", fmha_helpers.py:386),
    which masks key j for query i when ``j > i + (kv_len - q_len)`` (fmha_helpers.py:1039-1054).
    With ``q_len == kv_len`` this is the ordinary causal mask.

Empty rows: a request with ``kv_len == 0`` gets ``out = 0, lse = -inf`` (fmha.py:1430, 2772-2844).
    The reference also gives this to query rows that a causal mask leaves without keys
    (``q_len > kv_len``); the kernel's output for such rows is not specified by its source.

Decode (`reference_decode`, mla_decode.py 2.0.4): absorbed MLA over a paged latent cache. Each cache row
    is kv_lora_rank + rope wide and shared by every head; the key is the whole row and the value its first
    kv_lora_rank entries (the kernel's c_latent, c_rope split, mla_decode.py:911-920); the output is
    ``attention * output_scale``. A q_len > 1 block is the sequence's last q_len positions, causally.

Not modelled: the prefill kernel rounds the probabilities P to FP8 before the P.V product
(fmha.py:1770-1880) while its row sums stay in float32, so its output differs from this reference
by more than the FP8 rounding of q/k/v alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# Largest score block (heads x queries x keys, float32 elements) built at once: 512 MiB.
_SCORE_BUDGET = 1 << 27


def dequantize(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """FP8 (or any dtype) to float32 with a per-tensor scale."""
    return x.float() * scale


def causal_mask(q_len: int, kv_len: int, rows: range | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """The kernel's bottom-right aligned causal mask [len(rows), kv_len], True where masked.

    ``rows`` picks query rows of the request (default: all ``q_len``).
    """
    rows = range(q_len) if rows is None else rows
    q_idx = torch.arange(rows.start, rows.stop, device=device)[:, None]
    k_idx = torch.arange(kv_len, device=device)[None, :]
    return k_idx > q_idx + (kv_len - q_len)


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One request's attention: q [n, h_q, d], k [m, h_k, d], v [m, h_k, d_v], float32.

    Query head h reads KV head ``h // (h_q // h_k)``, as the kernel's (h_k, h_r) layout does.
    Returns out [n, h_q, d_v] and lse [n, h_q]; rows with no visible key get 0 and -inf.
    """
    n, h_q, d = q.shape
    h_k = k.shape[1]
    scores = torch.einsum("nhgd,mhd->hgnm", q.reshape(n, h_k, h_q // h_k, d), k) * softmax_scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - _finite_or_zero(lse)[..., None])
    out = torch.einsum("hgnm,mhe->nhge", probs, v)
    return out.reshape(n, h_q, v.shape[-1]), lse.reshape(h_q, n).T


def _finite_or_zero(lse: torch.Tensor) -> torch.Tensor:
    """-inf to 0, so that exp(x - lse) of an empty row is exp(-inf) = 0 instead of NaN."""
    return torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)


def _offsets(cu_seqlens: Sequence[int] | torch.Tensor) -> list[int]:
    values = cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else cu_seqlens
    return [int(x) for x in values]


def _check_shapes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offsets: list[int], kv_offsets: list[int]
) -> None:
    if len(q_offsets) != len(kv_offsets) or not q_offsets:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_kv must list the same requests: {len(q_offsets)} vs {len(kv_offsets)} offsets"
        )
    for offsets in (q_offsets, kv_offsets):
        if offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:])):
            raise ValueError(f"cu_seqlens must start at 0 and not decrease, got {offsets}")
    if (q_offsets[-1], kv_offsets[-1], v.shape[0]) != (q.shape[0], k.shape[0], k.shape[0]):
        raise ValueError(
            f"cu_seqlens end at q={q_offsets[-1]}, kv={kv_offsets[-1]} but q has {q.shape[0]} rows, "
            f"k {k.shape[0]}, v {v.shape[0]}"
        )
    if q.shape[1] % k.shape[1] or v.shape[1] != k.shape[1] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"need h_q a multiple of h_k and one d_qk: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )


def reference_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: Sequence[int] | torch.Tensor,
    cu_seqlens_kv: Sequence[int] | torch.Tensor,
    softmax_scale: float,
    is_causal: bool,
    q_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Varlen attention in float32 on the inputs' device, in the kernel's conventions (module docstring).

    q [total_q, h_q, d_qk], k [total_kv, h_k, d_qk], v [total_kv, h_k, d_v], any float dtype (FP8 is
    dequantized as ``x.float() * scale``); h_q must be a multiple of h_k. Returns
    out float32 [total_q, h_q, d_v] and lse float32 [total_q, h_q].
    """
    q_offsets, kv_offsets = _offsets(cu_seqlens_q), _offsets(cu_seqlens_kv)
    _check_shapes(q, k, v, q_offsets, kv_offsets)
    total_q, h_q, _ = q.shape
    out = torch.zeros(total_q, h_q, v.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.full((total_q, h_q), float("-inf"), dtype=torch.float32, device=q.device)
    for q0, q1, kv0, kv1 in zip(q_offsets, q_offsets[1:], kv_offsets, kv_offsets[1:]):
        n, m = q1 - q0, kv1 - kv0
        if n == 0 or m == 0:
            continue
        k_req, v_req = dequantize(k[kv0:kv1], k_scale), dequantize(v[kv0:kv1], v_scale)
        chunk = max(1, _SCORE_BUDGET // (h_q * m))
        for start in range(0, n, chunk):
            rows = range(start, min(start + chunk, n))
            mask = causal_mask(n, m, rows, q.device) if is_causal else None
            dst = slice(q0 + rows.start, q0 + rows.stop)
            out[dst], lse[dst] = _attend(dequantize(q[dst], q_scale), k_req, v_req, softmax_scale, mask)
    return out, lse


def merge_by_lse(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attentions over disjoint key sets, as chunked prefill does.

    out [n, h, d_v], lse [n, h] in the kernel's convention. A part with lse = -inf (no keys) has
    weight 0; if both are -inf the result is out = 0, lse = -inf. Returns float32.
    """
    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    safe = _finite_or_zero(lse)
    w_a = torch.exp(lse_a.float() - safe)[..., None]
    w_b = torch.exp(lse_b.float() - safe)[..., None]
    return w_a * out_a.float() + w_b * out_b.float(), lse


def reference_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: Sequence[int] | torch.Tensor,
    kv_lora_rank: int,
    softmax_scale: float,
    output_scale: float = 1.0,
) -> torch.Tensor:
    """Paged MLA decode in float32: query [B, q_len, H, R + P], kv_cache [pages, page_size, R + P],
    block_tables [B, max_pages] (a request's pages in order), seq_lens [B]. Returns out [B, q_len, H, R]."""
    batch, q_len, heads, width = query.shape
    page_size = kv_cache.shape[-2]
    cache = kv_cache.reshape(-1, page_size, width)
    out = torch.zeros(batch, q_len, heads, kv_lora_rank, dtype=torch.float32, device=query.device)
    for b, length in enumerate(_offsets(seq_lens)):
        if length == 0:
            continue
        pages = block_tables[b, : -(-length // page_size)].long()
        rows = dequantize(cache[pages].reshape(-1, width)[:length])
        mask = causal_mask(q_len, length, device=query.device) if q_len > 1 else None
        attended, _ = _attend(dequantize(query[b]), rows[:, None, :], rows[:, None, :kv_lora_rank], softmax_scale, mask)
        out[b] = attended * output_scale
    return out
