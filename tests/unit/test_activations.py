import math

import pytest
import torch

from mlacheck.scenario.activations import (
    ROPE_DIM,
    AccuracyMetrics,
    check_unit_scales,
    compare_outputs,
    make_activations,
    quantize_kv_fp8,
    quantize_q_fp8,
)
from mlacheck.scenario.reference import reference_prefill

FP8 = torch.float8_e4m3fn


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8)


def test_shapes_and_dtypes() -> None:
    acts = make_activations(5, 7, num_heads=3, d_qk=192, d_v=128)

    assert acts.q.shape == (5, 3, 192) and acts.v.shape == (7, 3, 128)
    assert acts.k_nope.shape == (7, 3, 192 - ROPE_DIM) and acts.k_pe.shape == (7, 1, ROPE_DIM)
    assert acts.k.shape == (7, 3, 192)
    assert {x.dtype for x in (acts.q, acts.k_nope, acts.k_pe, acts.v)} == {torch.bfloat16}


def test_deterministic_per_seed() -> None:
    a, b, c = (make_activations(6, 6, 2, seed=s) for s in (3, 3, 4))

    for name in ("q", "k_nope", "k_pe", "v"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert not torch.equal(getattr(a, name), getattr(c, name)), name


def test_q_and_k_have_outlier_channels() -> None:
    acts = make_activations(256, 256, 4, seed=5, outlier_channels=2)

    for x in (acts.q, acts.k):
        channel_rms = x.float().pow(2).mean(dim=(0, 1)).sqrt()
        big = channel_rms > 8 * channel_rms.median()
        assert big.sum() == 2
        assert channel_rms[big].max() < 60 * channel_rms.median()
    assert acts.v.float().pow(2).mean(dim=(0, 1)).sqrt().max() < 3


def test_k_pe_is_shared_by_heads() -> None:
    k = make_activations(4, 4, 3, seed=6).k

    assert torch.equal(k[:, 0, -ROPE_DIM:], k[:, 2, -ROPE_DIM:])
    assert not torch.equal(k[:, 0, :-ROPE_DIM], k[:, 2, :-ROPE_DIM])


def test_quantize_kv_torch_path_is_a_plain_fp8_cast_per_part() -> None:
    acts = make_activations(4, 9, 3, seed=7)

    k8, v8 = quantize_kv_fp8(acts.k_nope, acts.k_pe, acts.v)

    assert k8.dtype == FP8 and k8.shape == (9, 3, 192)
    d_nope = 192 - ROPE_DIM
    assert torch.equal(_bits(k8[..., :d_nope]), _bits(acts.k_nope.to(FP8)))
    for head in range(3):
        assert torch.equal(_bits(k8[:, head, d_nope:]), _bits(acts.k_pe[:, 0].to(FP8)))
    assert torch.equal(_bits(v8), _bits(acts.v.to(FP8)))
    assert torch.equal(_bits(quantize_q_fp8(acts.q)), _bits(acts.q.to(FP8)))


@pytest.mark.parametrize("k_scale,v_scale", [(0.5, 1.0), (1.0, 0.5)])
def test_non_unit_scales_are_rejected(k_scale: float, v_scale: float) -> None:
    check_unit_scales(1.0, 1.0)
    with pytest.raises(ValueError, match="scale"):
        check_unit_scales(k_scale, v_scale)
    acts = make_activations(2, 2, 1)
    with pytest.raises(ValueError, match="scale"):
        quantize_kv_fp8(acts.k_nope, acts.k_pe, acts.v, k_scale=k_scale, v_scale=v_scale)


def test_values_past_fp8_range_are_rejected() -> None:
    q = torch.tensor([[[500.0]]], dtype=torch.bfloat16)

    with pytest.raises(ValueError, match="FP8"):
        quantize_q_fp8(q)


def test_metrics_of_identical_outputs_are_exact() -> None:
    out = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(8))
    lse = torch.tensor([[0.5, float("-inf")]] * 4)

    metrics = compare_outputs(out, lse, out.clone(), lse.clone())

    assert metrics == AccuracyMetrics(
        max_abs_err=0.0, max_rel_err=0.0, cosine_similarity=pytest.approx(1.0, abs=1e-12), lse_max_abs_err=0.0
    )


def test_metrics_of_perturbed_outputs() -> None:
    ref = torch.full((2, 1, 2), 2.0)
    out = ref.clone()
    out[0, 0, 0] = 2.5
    lse = torch.zeros(2, 1)

    metrics = compare_outputs(out, lse + 0.25, ref, lse)

    assert metrics.max_abs_err == pytest.approx(0.5)
    assert metrics.max_rel_err == pytest.approx(0.25)
    assert metrics.cosine_similarity == pytest.approx(17 / (4 * math.sqrt(18.25)))
    assert metrics.lse_max_abs_err == pytest.approx(0.25)


def test_metrics_flag_lse_that_should_be_empty() -> None:
    lse = torch.tensor([[float("-inf")]])

    metrics = compare_outputs(torch.zeros(1, 1, 1), torch.zeros(1, 1), torch.zeros(1, 1, 1), lse)

    assert metrics.lse_max_abs_err == math.inf
    assert metrics.cosine_similarity == 1.0


def test_fp8_accuracy_cost_is_small_but_not_zero() -> None:
    acts = make_activations(64, 64, 2, seed=9)
    k = acts.k
    k8, v8 = quantize_kv_fp8(acts.k_nope, acts.k_pe, acts.v)
    q8 = quantize_q_fp8(acts.q)
    cu = [0, 40, 64]
    scale = 1 / math.sqrt(192)

    # what the traffic run reports as the FP8 cost: reference on FP8 inputs against reference on bf16 inputs
    cost = compare_outputs(
        *reference_prefill(q8, k8, v8, cu, cu, scale, True), *reference_prefill(acts.q, k, acts.v, cu, cu, scale, True)
    )

    assert 0 < cost.max_abs_err and 0 < cost.lse_max_abs_err
    assert 0.95 < cost.cosine_similarity < 1.0
    exact = compare_outputs(
        *reference_prefill(acts.q, k, acts.v, cu, cu, scale, True),
        *reference_prefill(acts.q.float(), k.float(), acts.v.float(), cu, cu, scale, True),
    )
    assert exact.max_abs_err == 0 and exact.lse_max_abs_err == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_library_quantize_on_cuda_matches_torch_path() -> None:
    cpu = make_activations(300, 600, 4, seed=10)
    cuda = make_activations(300, 600, 4, seed=10, device="cuda")

    expected = quantize_kv_fp8(cpu.k_nope, cpu.k_pe, cpu.v)
    k8, v8 = quantize_kv_fp8(cuda.k_nope, cuda.k_pe, cuda.v)

    assert k8.is_cuda and torch.equal(_bits(k8.cpu()), _bits(expected[0]))
    assert torch.equal(_bits(v8.cpu()), _bits(expected[1]))
    assert torch.equal(_bits(quantize_q_fp8(cuda.q).cpu()), _bits(quantize_q_fp8(cpu.q)))
