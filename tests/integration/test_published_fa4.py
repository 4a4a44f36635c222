"""The FA4 layouts engines ship, each watched only by its own rule (marker `network`: the releases come from PyPI):
the tokenspeed-fa4 fork (TokenSpeed 0.1.1's pin), installed under the same import name as flash-attn-4, and vLLM
0.34.0's vendored copy, each running its own dispatch under FakeTensorMode on the CPU; and a fork no loaded rule
describes: one line, not watched, and incomplete only where it was dispatched."""

import shutil
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli
from tests.integration.published import extracted, first_on_path, installed

pytestmark = pytest.mark.network
pytest.importorskip("flash_attn.cute", reason="FlashAttention-4 is the optional fa4 extra")

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "fa4_engine.py")
TOKENSPEED_FA4 = ("tokenspeed-fa4==4.0.0.post20260923", "tokenspeed-quack==0.6.4.post20260923")


@pytest.fixture(scope="module")
def tokenspeed_fa4(tmp_path_factory):
    return installed(tmp_path_factory.mktemp("tokenspeed_fa4"), *TOKENSPEED_FA4)


@pytest.fixture(scope="module")
def vllm_copy(tmp_path_factory):
    """vLLM 0.34.0's vendored FA4 (vllm/vllm_flash_attn/cute), with the two package __init__ files it does not need
    (they import vLLM's CUDA extensions) left empty."""
    return extracted(
        tmp_path_factory.mktemp("vllm_fa4"),
        "vllm==0.34.0",
        ("vllm/vllm_flash_attn/cute/",),
        ("vllm/__init__.py", "vllm/vllm_flash_attn/__init__.py"),
    )


def families(report):
    return {family["name"]: family for family in report["families"]}


def observe(tmp_path, env, *options):
    return run_cli(
        "run",
        "--compile",
        "skip",
        *options,
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        PROGRAM,
        tmp_path=tmp_path,
        env_extra=env,
    )


def test_the_tokenspeed_fork_is_watched_by_its_own_rule(tmp_path, tokenspeed_fa4):
    result = observe(tmp_path, first_on_path(tokenspeed_fa4))
    assert result.code == 1, result.stdout + result.stderr
    fwd = families(result.report)["tokenspeed_fa4.fwd"]
    assert fwd["version"] == "4.0.0.post20260923" and len(fwd["key_fields"]) == 57
    assert "flash_attn_4.fwd" not in families(result.report)  # flash-attn-4's rule does not describe the fork
    [finding] = result.report["findings"]
    assert finding["code"] == "MLA001" and finding["family"] == "tokenspeed_fa4.fwd"
    assert finding["diff"] == {"head_dim": [128, 64], "head_dim_v": [128, 64]}
    assert result.report["incomplete"] == []


def test_vllms_vendored_copy_is_watched_by_its_own_rule(tmp_path, vllm_copy):
    env = {**first_on_path(vllm_copy), "FA4_INTERFACE": "vllm.vllm_flash_attn.cute"}
    result = observe(tmp_path, env)
    assert result.code == 1, result.stdout + result.stderr
    fwd = families(result.report)["vllm_fa4.fwd"]
    assert fwd["version"] == "0.34.0" and len(fwd["key_fields"]) == 64
    [finding] = result.report["findings"]
    assert finding["code"] == "MLA001" and finding["family"] == "vllm_fa4.fwd"
    assert finding["diff"] == {"head_dim": [128, 64], "head_dim_v": [128, 64]}


def test_a_fork_no_loaded_rule_describes_is_one_line_and_incomplete_where_dispatched(tmp_path, tokenspeed_fa4):
    upstream_only = tmp_path / "rules"
    upstream_only.mkdir()
    for path in BUNDLED.glob("flash_attn_4*.toml"):
        shutil.copy(path, upstream_only)
    result = observe(tmp_path, first_on_path(tokenspeed_fa4), "--rules", str(upstream_only))
    assert result.code == 2, result.stdout + result.stderr  # could not compare: never a FAIL of the program, never PASS
    assert result.report["findings"] == [] and result.report["families"] == []
    [line] = [line for line in result.report["not_checked"] if "_flash_attn_fwd.compile_cache.cache" in line]
    assert "installed tokenspeed-fa4 4.0.0.post20260923, and no loaded rule describes it" in line
    assert "mlacheck rules --template flash_attn.cute.interface" in line
    assert any("_flash_attn_fwd was called" in reason for reason in result.report["incomplete"])


IMPORTED_ONLY = """
import flash_attn.cute.interface  # the fork, loaded and never dispatched
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
k.dispatch(1, "fp8", True)
"""


def test_a_fork_no_rule_describes_that_is_never_dispatched_does_not_stop_a_pass(tmp_path, tokenspeed_fa4):
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in [*BUNDLED.glob("flash_attn_4*.toml"), ROOT / "tests" / "fixtures" / "synthetic.toml"]:
        shutil.copy(path, rules)
    program = tmp_path / "imports_fork.py"
    program.write_text(IMPORTED_ONLY)
    env = first_on_path(tokenspeed_fa4, ROOT)
    result = run_cli(
        "run",
        "--rules",
        str(rules),
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        str(program),
        tmp_path=tmp_path,
        env_extra=env,
    )
    assert result.code == 0, result.stdout + result.stderr
    assert result.report["verdict"] == "pass"
    assert any("installed tokenspeed-fa4" in line for line in result.report["not_checked"])
