"""Real tokenspeed_mla, cross-compiled for sm_100a on the CPU: the cases the SGLang bug class is made of."""

import pytest

from tests.integration.cli import run_cli

pytestmark = pytest.mark.compile

FP8 = "float8_e4m3fn"


def findings(report, code):
    return [f for f in report["findings"] if f["code"] == code]


def test_default_run_is_clean(tmp_path):
    result = run_cli("run", tmp_path=tmp_path)
    assert result.code == 0, result.stdout + result.stderr
    report = result.report
    assert (report["verdict"], report["mode"], report["target_arch"], report["compile_policy"]) == ("pass", "dry", "sm_100a", "real")
    assert report["findings"] == []
    [family] = report["families"]
    variants = {(v["key"]["is_causal"], v["key"]["return_lse"]): v for v in family["variants"]}
    assert set(variants) == {(True, True), (False, True)}
    for variant in variants.values():
        assert variant["precompiled"] and variant["dispatches"] > 0 and variant["compile_s"] > 0.5
        assert variant["key"]["q_dtype"] == FP8 and variant["key"]["enable_pdl"] is True
        assert variant["compiled_by"].startswith("tokenspeed_mla/mla_prefill.py:")
    assert "PASS" in result.stdout


def test_sglang_profile_compiles_causal_without_lse_on_the_serving_path(tmp_path):
    result = run_cli("run", "--profile", "sglang", tmp_path=tmp_path)
    assert result.code == 1, result.stdout + result.stderr
    report = result.report
    assert [f["code"] for f in report["findings"]] == ["MLA001"]
    [serving] = report["findings"]
    assert (serving["key"]["is_causal"], serving["key"]["return_lse"]) == (True, False)
    assert serving["nearest"]["return_lse"] is True and serving["diff"] == {"return_lse": [True, False]}
    [variant] = [v for v in report["families"][0]["variants"] if v["key"] == serving["key"]]
    assert variant["serving_path_compile_s"] > 0.5 and not variant["precompiled"]
    assert "MLA001 serving-path-compile" in result.stdout


def test_sglang_bf16_warmup_is_all_dead_and_every_fp8_variant_compiles_on_the_serving_path(tmp_path):
    result = run_cli("run", "--profile", "sglang", "--warmup", "tests/fixtures/sglang_warmup.py:bf16_warmup", tmp_path=tmp_path)
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
    result = run_cli("run", "--profile", "sglang", "--warmup", "tests/fixtures/sglang_warmup.py:fp8_warmup", tmp_path=tmp_path)
    assert result.code == 0, result.stdout + result.stderr
    assert result.report["findings"] == []
    assert {v["compiled_by"].split(":")[0] for v in result.report["families"][0]["variants"]} == {"tests/fixtures/sglang_warmup.py"}
