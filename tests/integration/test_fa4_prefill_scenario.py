"""`mlacheck run --profile vllm`: vLLM 0.34.0's default MLA prefill on Blackwell, FlashAttention-4, replayed through
FA4's own dispatch on the CPU (FakeTensorMode, --dry): its registry warm-up compiles nothing, its start-up dummy
prefills compile one variant (a batch of more than 256 short sequences), and chunked-prefill traffic compiles the rest
on the serving path. Needs the fa4 extra."""

import pytest

from tests.integration.cli import run_cli

pytest.importorskip("flash_attn.cute", reason="FlashAttention-4 is the optional fa4 extra")

FWD = "flash_attn_4.fwd"


def run(tmp_path, *args):
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", "--compile", "skip", *args, tmp_path=tmp_path)
    assert result.report is not None, result.stdout + result.stderr
    return result


def test_vllm_fa4_prefill_compiles_its_traffic_on_the_serving_path(tmp_path):
    result = run(tmp_path)
    assert result.code == 1, result.stdout + result.stderr
    report = result.report
    assert report["mode"] == "dry" and report["target_arch"] == "sm_100a"
    header = {row[0]: row[1] for row in report["scenario"]["header"]}
    assert header["prefill kernel"].startswith("FlashAttention-4 (flash-attn-4, standing in for vLLM's vendored copy")
    assert "FA4MLAPrefillKernel.get_warmup_keys returns no key on SM100" in header["warm-up"]
    [fwd] = [family for family in report["families"] if family["name"] == FWD]
    [startup] = [v for v in fwd["variants"] if v["precompiled"]]  # both start-up prefills: one variant
    assert startup["key"]["has_cu_total_m_blocks"] and startup["key"]["lse_is_none"] and startup["key"]["causal"]
    serving = [f for f in report["findings"] if f["code"] == "MLA001" and f["family"] == FWD]
    assert len(serving) >= 2
    assert all({"is_static_persistent", "has_cu_total_m_blocks"} <= set(f["diff"]) for f in serving)
    assert {f["key"]["causal"] for f in serving} == {True, False}  # new tokens, and the non-causal context chunk
    assert any(f["key"]["lse_is_none"] is False for f in serving)  # LSE where the batch has context


def test_a_context_chunk_over_few_requests_compiles_its_own_fa4_variant(tmp_path):
    """vLLM's context chunk is a call over its own requests' new tokens only (mla_attention.py:3272-3275): a chunk of
    one short request (30 new tokens beside 15 of context, seed 0's eighth batch) has a max_seqlen_q that FA4 keys
    otherwise than the batch's, a variant a chunk over the whole batch would never show."""
    result = run(tmp_path, "--requests", "32")
    [fwd] = [family for family in result.report["families"] if family["name"] == FWD]
    chunks = [v["key"] for v in fwd["variants"] if v["key"]["causal"] is False]
    assert {(key["q_stage"], key["is_static_persistent"]) for key in chunks} >= {(1, True), (2, False)}
    assert result.report["scenario"]["prefill_calls"] == 19


def test_enforce_eager_leaves_only_the_autotune_dummy_prefill(tmp_path):
    result = run(tmp_path, "--cuda-graph", "off")
    [fwd] = [family for family in result.report["families"] if family["name"] == FWD]
    assert [v["compile_phase"] for v in fwd["variants"] if v["precompiled"]] == ["warmup"]


def test_library_warmup_is_refused_for_fa4_in_one_line(tmp_path):
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", "--warmup", "library")
    assert result.code == 2 and "FlashAttention-4 has no warm-up function of its own" in result.stderr


@pytest.mark.compile
def test_a_cute_compile_of_a_cache_no_rule_watches_is_named_not_claimed(tmp_path):
    """FA4's blocks-to-batch helper compiles through cute.compile like the forward, into a cache no rule watches (its
    key is ()): the forward's rule claims only its own compiles (compile_callers), so the net names this one."""
    result = run_cli("run", "--profile", "vllm", "--kernel", "prefill", tmp_path=tmp_path)
    assert result.report is not None, result.stdout + result.stderr
    [helper] = result.report["unwatched_compiles"]
    assert helper["kernel"] == "flash_attn.cute.cu_blocks_kernel.CuBlocksToBatchKernel"
    assert helper["phase"] == "warmup" and helper["seconds"] > 0  # the start-up dummy prefill's >256 sequences
    assert result.report["internal_errors"] == [] and result.report["incomplete"] == []
