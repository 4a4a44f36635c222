"""Real tokenspeed_mla, cross-compiled for sm_100a on the CPU: the cases the SGLang bug class is made of."""

import pytest

from tests.integration.cli import run_cli

pytestmark = pytest.mark.compile

FP8 = "float8_e4m3fn"


def findings(report, code):
    return [f for f in report["findings"] if f["code"] == code]


def family(report, name):
    [found] = [f for f in report["families"] if f["name"] == name]
    return found


def test_default_run_is_clean(tmp_path):
    result = run_cli("run", tmp_path=tmp_path)
    assert result.code == 0, result.stdout + result.stderr
    report = result.report
    assert (report["verdict"], report["mode"], report["target_arch"], report["compile_policy"]) == (
        "pass",
        "dry",
        "sm_100a",
        "real",
    )
    assert report["findings"] == []
    assert sorted(f["name"] for f in report["families"]) == ["tokenspeed_mla.decode", "tokenspeed_mla.prefill"]
    prefill = family(report, "tokenspeed_mla.prefill")
    variants = {(v["key"]["is_causal"], v["key"]["return_lse"]): v for v in prefill["variants"]}
    assert set(variants) == {(True, True), (False, True)}
    for variant in variants.values():
        assert variant["precompiled"] and variant["dispatches"] > 0 and variant["compile_s"] > 0.5
        assert variant["key"]["q_dtype"] == FP8 and variant["key"]["enable_pdl"] is True
        assert variant["compiled_by"] == (  # the engine warm-up that called the library, as the scenario models it
            "tokenspeed/runtime/layers/attention/backends/paged/tokenspeed_mla.py:259 CuteDSLMLABackend.__init__ "
            "(modelled on tokenspeed 0.1.1)"
        )
    decode = family(report, "tokenspeed_mla.decode")["variants"]
    assert decode and {v["status"] for v in decode} == {"captured"}
    assert all(v["compile_s"] > 0.5 and v["key"]["torch_dtype"] == FP8 for v in decode)
    assert "PASS" in result.stdout


def test_the_library_warmup_under_the_sglang_profile_compiles_causal_without_lse_on_the_serving_path(tmp_path):
    # warmup_compile_prefill compiles return_lse=True only; SGLang's extend path dispatches (causal, no LSE).
    result = run_cli(
        "run", "--kernel", "prefill", "--profile", "sglang@0.5.13", "--warmup", "library", tmp_path=tmp_path
    )
    assert result.code == 1, result.stdout + result.stderr
    report = result.report
    assert [f["code"] for f in report["findings"]] == ["MLA001"]
    [serving] = report["findings"]
    assert (serving["key"]["is_causal"], serving["key"]["return_lse"]) == (True, False)
    assert serving["nearest"]["return_lse"] is True and serving["diff"] == {"return_lse": [True, False]}
    [variant] = [v for v in family(report, "tokenspeed_mla.prefill")["variants"] if v["key"] == serving["key"]]
    assert variant["serving_path_compile_s"] > 0.5 and not variant["precompiled"]
    assert "MLA001 tokenspeed_mla.prefill (is_causal=True, return_lse=False): " in result.stdout


def test_sglang_bf16_warmup_is_all_dead_and_every_fp8_variant_compiles_on_the_serving_path(tmp_path):
    result = run_cli(
        "run",
        "--kernel",
        "prefill",
        "--profile",
        "sglang@0.5.13",
        "--warmup",
        "tests/fixtures/sglang_warmup.py:bf16_warmup",
        tmp_path=tmp_path,
    )
    assert result.code == 1, result.stdout + result.stderr
    report = result.report
    serving = findings(report, "MLA001")
    assert len(serving) == 3
    for finding in serving:
        assert finding["key"]["q_dtype"] == FP8
        assert finding["diff"] == {"q_dtype": ["bfloat16", FP8]}
    dead = findings(report, "MLA002")
    assert len(dead) == 3 and all(f["key"]["q_dtype"] == "bfloat16" for f in dead)
    assert all("sglang_warmup.py" in f["message"] for f in dead)
    contract = findings(report, "MLA003")
    assert len(contract) == 3 and all("q_dtype is bfloat16" in f["message"] for f in contract)
    assert len(report["findings"]) == 9


def test_sglang_fp8_warmup_is_clean_under_sglang_profile(tmp_path):
    result = run_cli(
        "run",
        "--kernel",
        "prefill",
        "--profile",
        "sglang@0.5.13",
        "--warmup",
        "tests/fixtures/sglang_warmup.py:fp8_warmup",
        tmp_path=tmp_path,
    )
    assert result.code == 0, result.stdout + result.stderr
    assert result.report["findings"] == []
    variants = family(result.report, "tokenspeed_mla.prefill")["variants"]
    assert {v["compiled_by"].split(":")[0] for v in variants} == {"tests/fixtures/sglang_warmup.py"}


def test_sglang_as_published_warms_the_three_variants_its_extend_path_dispatches(tmp_path):
    # TokenspeedMLABackend.__init__ after sgl-project/sglang#26170: FP8, (causal, LSE), (causal, no LSE), (non-causal, LSE).
    result = run_cli("run", "--kernel", "prefill", "--profile", "sglang@0.5.13", tmp_path=tmp_path)
    assert result.code == 0, result.stdout + result.stderr
    variants = family(result.report, "tokenspeed_mla.prefill")["variants"]
    assert {(v["key"]["is_causal"], v["key"]["return_lse"]) for v in variants} == {
        (True, True),
        (True, False),
        (False, True),
    }
    assert all(v["precompiled"] and v["dispatches"] > 0 for v in variants)
