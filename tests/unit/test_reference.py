import math

import pytest
import torch
import torch.nn.functional as F

from mlacheck.scenario import reference
from mlacheck.scenario.reference import causal_mask, merge_by_lse, reference_prefill

SCALE = 0.125


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """torch's attention of one request, [n, h, d] layout; mask True where attended."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=SCALE, enable_gqa=True
    )
    return out.transpose(0, 1)


def _bottom_right(q_len: int, kv_len: int) -> torch.Tensor:
    return torch.ones(q_len, kv_len, dtype=torch.bool).tril(diagonal=kv_len - q_len)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("h_q,h_k", [(4, 4), (6, 2)])
def test_matches_sdpa_on_varlen_batch(is_causal: bool, h_q: int, h_k: int) -> None:
    q_lens, kv_lens = [5, 3, 7], [5, 9, 7]  # the middle request has a prefix: q_len < kv_len
    q = _randn(sum(q_lens), h_q, 24, seed=1)
    k = _randn(sum(kv_lens), h_k, 24, seed=2)
    v = _randn(sum(kv_lens), h_k, 16, seed=3)
    cu_q, cu_kv = [0, 5, 8, 15], [0, 5, 14, 21]

    out, lse = reference_prefill(q, k, v, cu_q, cu_kv, SCALE, is_causal)

    assert out.shape == (15, h_q, 16) and lse.shape == (15, h_q)
    for i in range(3):
        rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_kv[i], cu_kv[i + 1])
        mask = _bottom_right(q_lens[i], kv_lens[i]) if is_causal else None
        torch.testing.assert_close(out[rows], _sdpa(q[rows], k[keys], v[keys], mask), rtol=1e-5, atol=1e-5)


def test_causal_is_bottom_right_aligned() -> None:
    mask = causal_mask(2, 4)

    assert mask.tolist() == [[False, False, False, True], [False, False, False, False]]


def test_lse_is_natural_log_with_softmax_scale_by_hand() -> None:
    q = torch.tensor([[[1.0, 0.0]]])
    k = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    v = torch.tensor([[[2.0]], [[4.0]]])

    out, lse = reference_prefill(q, k, v, [0, 1], [0, 2], softmax_scale=0.5, is_causal=False)

    # scores 0.5 * [1, 0]: lse = ln(e^0.5 + e^0), not log2 and not without the scale.
    assert lse.item() == pytest.approx(math.log(math.exp(0.5) + 1.0), abs=1e-6)
    p = math.exp(0.5) / (math.exp(0.5) + 1.0)
    assert out.item() == pytest.approx(2.0 * p + 4.0 * (1 - p), abs=1e-6)


def test_lse_matches_logsumexp_of_scaled_masked_scores() -> None:
    q, k, v = _randn(6, 3, 8, seed=4), _randn(9, 3, 8, seed=5), _randn(9, 3, 4, seed=6)

    _, lse = reference_prefill(q, k, v, [0, 6], [0, 9], SCALE, is_causal=True)

    scores = torch.einsum("nhd,mhd->hnm", q, k) * SCALE
    expected = scores.masked_fill(~_bottom_right(6, 9), float("-inf")).logsumexp(-1).T
    torch.testing.assert_close(lse, expected)


def test_empty_kv_request_gives_zero_out_and_neg_inf_lse() -> None:
    q, k, v = _randn(5, 2, 8, seed=7), _randn(3, 2, 8, seed=8), _randn(3, 2, 4, seed=9)

    out, lse = reference_prefill(q, k, v, [0, 2, 5], [0, 0, 3], SCALE, is_causal=False)

    assert torch.equal(out[:2], torch.zeros(2, 2, 4)) and torch.isneginf(lse[:2]).all()
    assert torch.isfinite(lse[2:]).all() and out[2:].abs().sum() > 0


def test_causal_rows_without_keys_give_zero_out_and_neg_inf_lse() -> None:
    q, k, v = _randn(4, 1, 8, seed=10), _randn(2, 1, 8, seed=11), _randn(2, 1, 4, seed=12)

    out, lse = reference_prefill(q, k, v, [0, 4], [0, 2], SCALE, is_causal=True)

    assert torch.isneginf(lse[:2]).all() and torch.equal(out[:2], torch.zeros(2, 1, 4))
    assert torch.isfinite(lse[2:]).all() and not out.isnan().any()


def test_query_chunking_matches_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = _randn(11, 4, 8, seed=13), _randn(14, 2, 8, seed=14), _randn(14, 2, 4, seed=15)
    whole = reference_prefill(q, k, v, [0, 11], [0, 14], SCALE, is_causal=True)

    monkeypatch.setattr(reference, "_SCORE_BUDGET", 3 * 4 * 14)  # 3 query rows a block
    chunked = reference_prefill(q, k, v, [0, 11], [0, 14], SCALE, is_causal=True)

    torch.testing.assert_close(chunked, whole)


def test_fp8_inputs_are_dequantized_with_scales() -> None:
    q, k, v = _randn(4, 2, 8, seed=16), _randn(4, 2, 8, seed=17), _randn(4, 2, 4, seed=18)
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))

    cu = [0, 4]

    out, lse = reference_prefill(q8, k8, v8, cu, cu, SCALE, True, q_scale=2.0, k_scale=0.5, v_scale=3.0)

    expected = reference_prefill(q8.float() * 2.0, k8.float() * 0.5, v8.float() * 3.0, cu, cu, SCALE, True)
    torch.testing.assert_close((out, lse), expected)


def test_chunked_prefix_merge_equals_one_shot_bottom_right_causal() -> None:
    prefix, new, h = 10, 6, 3
    q = _randn(new, h, 16, seed=19)
    k, v = _randn(prefix + new, h, 16, seed=20), _randn(prefix + new, h, 8, seed=21)

    out, lse = reference_prefill(q, k[prefix:], v[prefix:], [0, new], [0, new], SCALE, is_causal=True)
    for start, stop in [(0, 4), (4, 4), (4, 10)]:  # (4, 4) is an empty chunk
        part = reference_prefill(q, k[start:stop], v[start:stop], [0, new], [0, stop - start], SCALE, False)
        out, lse = merge_by_lse(out, lse, *part)
    one_shot = reference_prefill(q, k, v, [0, new], [0, prefix + new], SCALE, is_causal=True)

    torch.testing.assert_close((out, lse), one_shot, rtol=1e-5, atol=1e-5)


def test_merge_with_empty_parts() -> None:
    out, lse = _randn(3, 2, 4, seed=22), _randn(3, 2, seed=23)
    empty_out, empty_lse = torch.zeros(3, 2, 4), torch.full((3, 2), float("-inf"))

    assert torch.equal(merge_by_lse(out, lse, empty_out, empty_lse)[0], out)
    assert torch.equal(merge_by_lse(empty_out, empty_lse, out, lse)[1], lse)
    both = merge_by_lse(empty_out, empty_lse, empty_out, empty_lse)
    assert torch.equal(both[0], empty_out) and torch.isneginf(both[1]).all()


def test_rejects_mismatched_offsets() -> None:
    q, k, v = _randn(4, 2, 8, seed=24), _randn(4, 2, 8, seed=25), _randn(4, 2, 4, seed=26)

    with pytest.raises(ValueError, match="cu_seqlens end"):
        reference_prefill(q, k, v, [0, 3], [0, 4], SCALE, False)
    with pytest.raises(ValueError, match="multiple of h_k"):
        reference_prefill(q, _randn(4, 3, 8, seed=27), _randn(4, 3, 4, seed=28), [0, 4], [0, 4], SCALE, False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    q, k, v = _randn(20, 8, 24, seed=29), _randn(26, 2, 24, seed=30), _randn(26, 2, 16, seed=31)
    cu_q, cu_kv = [0, 8, 8, 20], [0, 8, 14, 26]
    cpu = reference_prefill(q, k, v, cu_q, cu_kv, SCALE, is_causal=True)

    cu_q_cuda = torch.tensor(cu_q, device="cuda")
    cuda = reference_prefill(q.cuda(), k.cuda(), v.cuda(), cu_q_cuda, cu_kv, SCALE, is_causal=True)

    assert cuda[0].device.type == "cuda" and cuda[1].device.type == "cuda"
    torch.testing.assert_close((cuda[0].cpu(), cuda[1].cpu()), cpu, rtol=1e-5, atol=1e-5)


# decode: absorbed MLA over a paged latent cache


def _paged(rows_per_request: list[torch.Tensor], page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scatter each request's cache rows into pages in reverse order (so the table's order matters)."""
    pages, tables = [], []
    for rows in rows_per_request:
        count = -(-rows.shape[0] // page_size)
        padded = torch.cat([rows, torch.full((count * page_size - rows.shape[0], rows.shape[1]), float("nan"))])
        tables.append(list(range(len(pages) + count - 1, len(pages) - 1, -1)))
        pages += list(reversed(padded.reshape(count, page_size, -1)))
    width = max(len(t) for t in tables)
    return torch.stack(pages), torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)


def test_decode_hand_computed_case() -> None:
    # one request, one head, rank 1 latent + 1 rope channel: rows (c, r) = (1, 0) and (3, ln 2 / scale)
    kv_cache = torch.tensor([[[1.0, 0.0], [3.0, math.log(2) / SCALE]]])
    query = torch.tensor([[[[0.0, 1.0]]]])  # [B=1, q_len=1, H=1, 2]: scores 0 and ln 2, so weights 1/3, 2/3
    out = reference.reference_decode(query, kv_cache, torch.tensor([[0]]), [2], kv_lora_rank=1, softmax_scale=SCALE)
    assert out.shape == (1, 1, 1, 1)
    assert out.item() == pytest.approx(1 / 3 * 1 + 2 / 3 * 3)
    scaled = reference.reference_decode(query, kv_cache, torch.tensor([[0]]), [2], 1, SCALE, output_scale=0.5)
    assert scaled.item() == pytest.approx(out.item() * 0.5)


@pytest.mark.parametrize("q_len", [1, 3])
def test_decode_matches_sdpa_over_pages(q_len: int) -> None:
    rank, rope, heads, page_size = 16, 8, 4, 4
    lens = [7, 1, 12]
    rows = [_randn(n, rank + rope, seed=10 + i) for i, n in enumerate(lens)]
    kv_cache, tables = _paged(rows, page_size)
    query = _randn(len(lens), q_len, heads, rank + rope, seed=20)
    out = reference.reference_decode(query, kv_cache, tables, lens, rank, SCALE)
    assert out.shape == (len(lens), q_len, heads, rank) and not out.isnan().any()
    for b, n in enumerate(lens):
        k = rows[b][:, None, :].expand(n, heads, -1)
        mask = _bottom_right(q_len, n) if q_len > 1 else None
        expected = _sdpa(query[b], k, k[..., :rank], mask)
        torch.testing.assert_close(out[b], expected, rtol=1e-5, atol=1e-5)
