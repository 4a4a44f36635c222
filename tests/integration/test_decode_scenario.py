"""`mlacheck run` with decode: real tokenspeed_mla_decode dispatch on the CPU, as each engine runs it.

Keys only (--compile skip) except one test that really cross-compiles a few decode variants for sm_100a.
"""

import pytest

from tests.integration.cli import run_cli

DECODE = "tokenspeed_mla.decode"
SPLIT_FIELDS = {"is_workspace_size_zero", "reducer_d_tiles", "reducer_max_splits"}
SPLIT_DRIVERS = ["batch size", "max_seq_len", "SM count"]


def decode(report):
    return next(f for f in report["families"] if f["name"] == DECODE)


def findings(report, code, family=DECODE):
    return [f for f in report["findings"] if f["code"] == code and f["family"] == family]


def run(tmp_path, *args):
    tmp_path.mkdir(parents=True, exist_ok=True)
    result = run_cli("run", "--compile", "skip", *args, tmp_path=tmp_path)
    assert result.report is not None, result.stdout + result.stderr
    return result


def test_default_tokenspeed_run_captures_every_variant_its_batches_use(tmp_path):
    """TokenSpeed 0.1.1 as published: the ladder 1, 2, 4, 8..160 is captured at the context length and every
    serving batch (at most 160, the default max_num_seqs) is padded to a captured size and replayed: clean."""
    result = run(tmp_path)
    assert result.code == 0, result.stdout
    scenario = result.report["scenario"]
    assert scenario["capture_sizes"] == [1, 2, 4, *range(8, 161, 8)] and scenario["eager_batch_sizes"] == []
    assert scenario["replays"] == len(scenario["batch_sizes"])
    variants = decode(result.report)["variants"]
    assert {v["status"] for v in variants} == {"captured"} and len(variants) == 4
    assert {v["key"]["reducer_max_splits"] for v in variants} == {4, 16, 32}
    assert all(
        v["key"]["torch_dtype"] == "float8_e4m3fn" and v["key"]["compute_capability"] == [10, 0] for v in variants
    )
    assert result.report["findings"] == [] and result.report["not_checked"] == []


def test_without_cuda_graphs_eager_decode_compiles_on_the_serving_path_in_batch_size_fields_only(tmp_path):
    """TokenSpeed under enforce-eager warms decode at batch size 1 only; every other batch's key differs from it
    in the fields that follow split_kv, nothing else."""
    result = run(tmp_path, "--kernel", "decode", "--cuda-graph", "off")
    assert result.code == 1
    serving = findings(result.report, "MLA001")
    assert len(serving) == 4
    for finding in serving:
        assert finding["diff"] and set(finding["diff"]) <= SPLIT_FIELDS
        assert all(finding["drivers"][name] == SPLIT_DRIVERS for name in finding["diff"])
        assert finding["key"]["num_heads"] == 128 and "first call that dispatched it (B=" in finding["message"]
    [warm] = [v for v in decode(result.report)["variants"] if v["precompiled"]]
    assert warm["compile_phase"] == "warmup" and warm["dispatches"] > 0


def test_sglang_eager_decode_with_short_sequences_misses_the_max_context_capture(tmp_path):
    """SGLang captures at max_context_len; a batch above --cuda-graph-max-bs decodes eagerly at its own longest
    sequence, and that key is one the capture never built."""
    result = run(
        tmp_path,
        "--kernel",
        "decode",
        "--profile",
        "sglang@0.5.13",
        "--cuda-graph-max-bs",
        "8",
        "--batch-sizes",
        "4,16",
    )
    assert result.code == 1
    assert result.report["scenario"]["eager_batch_sizes"] == [16]
    [finding] = findings(result.report, "MLA001")
    assert finding["diff"] == {"reducer_max_splits": [16, 4]}
    assert finding["nearest"]["reducer_max_splits"] == 16
    captured = [v for v in decode(result.report)["variants"] if v["status"] == "captured"]
    assert len(captured) == 2  # batch sizes 1, 2, 4, 8 fall into two variants


def test_the_sm_count_moves_the_batch_size_boundaries(tmp_path):
    """Eager decode of batches 9..14 at 128 heads needs reducer_max_splits=8 on a B200 (148 SMs); with 132 SMs
    (an H200's count) the boundary moves and the same batches need other variants."""
    keys = {}
    for sms in ("148", "132"):
        result = run(
            tmp_path / sms, "--kernel", "decode", "--cuda-graph", "off", "--batch-sizes", "9,10,12,14", "--num-sms", sms
        )
        keys[sms] = sorted(
            {
                (v["key"]["reducer_max_splits"], v["key"]["is_workspace_size_zero"])
                for v in decode(result.report)["variants"]
                if not v["precompiled"]
            }
        )
        assert result.report["scenario"]["sm_count"].startswith(sms)
    assert keys["148"] == [(8, False)] and keys["132"] != keys["148"]


def test_vllm_with_tokenspeed_prefill_compiles_nothing_on_the_serving_path_and_warms_two_dead_variants(tmp_path):
    """vLLM 0.34.0's TOKENSPEED_MLA prefill backend warms prefill for bf16 and fp8; with query quantization off (its
    default) prefill q is bf16, so the fp8 variants are dead; its start-up dummy prefill compiles (bf16, causal, no
    LSE) as warm-up."""
    result = run(tmp_path, "--profile", "vllm", "--prefill-backend", "tokenspeed_mla")
    assert result.code == 0, result.stdout
    assert findings(result.report, "MLA001", "tokenspeed_mla.prefill") == []
    dead = findings(result.report, "MLA002", "tokenspeed_mla.prefill")
    assert sorted((f["key"]["q_dtype"], f["key"]["is_causal"]) for f in dead) == [
        ("float8_e4m3fn", False),
        ("float8_e4m3fn", True),
    ]
    assert all(f["key"]["enable_pdl"] is False for f in dead)
    assert (
        findings(result.report, "MLA003", "tokenspeed_mla.prefill") == []
    )  # the q_dtype contract is SGLang's and TokenSpeed's


def test_vllm_enforce_eager_still_compiles_causal_without_lse_in_its_autotune_dummy_run(tmp_path):
    """--enforce-eager turns off graphs and the JIT warm-up (config/vllm.py:1697-1715), not the FlashInfer autotune
    dummy run (kernel_warmup.py:385-393), whose no-context prefill reaches TOKENSPEED_MLA causal without the LSE: that
    variant is warmed, not compiled on the first request."""
    result = run(
        tmp_path,
        "--profile",
        "vllm",
        "--prefill-backend",
        "tokenspeed_mla",
        "--kernel",
        "prefill",
        "--cuda-graph",
        "off",
    )
    assert result.code == 0, result.stdout
    assert findings(result.report, "MLA001", "tokenspeed_mla.prefill") == []
    [family] = result.report["families"]
    [no_lse] = [v for v in family["variants"] if not v["key"]["return_lse"]]
    assert (no_lse["key"]["q_dtype"], no_lse["key"]["is_causal"]) == ("bfloat16", True)
    assert no_lse["compile_phase"] == "warmup"
    assert result.report["scenario"]["prefill_calls"] == 3  # one chunk of vLLM's 64 Ki-row workspace, not 4096's


def test_vllm_at_tp8_decodes_small_mixed_batches_with_variants_its_capture_never_built(tmp_path):
    """16 heads per rank take the M64 tile: small eager batches beside a prefill need reducer_d_tiles=2, which the
    FULL capture at max_model_len never built (v1/worker/gpu/model_states/default.py:194-198)."""
    result = run(tmp_path, "--profile", "vllm", "--kernel", "decode", "--tp", "8")
    assert result.code == 1
    serving = findings(result.report, "MLA001")
    assert serving and all(f["diff"].get("reducer_d_tiles") == [1, 2] for f in serving)
    assert all(f["key"]["num_heads"] == 16 and f["key"]["use_pdl"] is False for f in serving)


@pytest.mark.compile
def test_real_decode_compiles_are_timed_and_the_stall_reported(tmp_path):
    result = run_cli(
        "run",
        "--kernel",
        "decode",
        "--profile",
        "sglang@0.5.13",
        "--cuda-graph-max-bs",
        "2",
        "--batch-sizes",
        "1,16",
        tmp_path=tmp_path,
    )
    assert result.code == 1, result.stdout + result.stderr
    [finding] = findings(result.report, "MLA001")
    [variant] = [v for v in decode(result.report)["variants"] if v["key"] == finding["key"]]
    assert variant["serving_path_compile_s"] > 0.5
    assert all(v["compile_s"] > 0.5 for v in decode(result.report)["variants"] if v["precompiled"])
    assert "s stall" in finding["message"]
