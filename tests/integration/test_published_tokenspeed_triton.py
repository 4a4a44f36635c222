"""TokenSpeed 0.1.1 as published, in program mode under `--dry` on this CPU (marker `network`: tokenspeed 0.1.1 and
tokenspeed-kernel 0.1.4 come from PyPI, kept in the wheel cache; tokenspeed-mla 2.0.4 and tokenspeed-triton are
installed). tokenspeed-mla's Triton kernel `_mla_kv_pack_quantize_fp8_kernel` compiles through TokenSpeed's Triton
fork, `tokenspeed_triton`; TokenSpeed's start-up never runs the prefix-chunk path that launches it, so its first chunk
of each token bucket compiles on the serving path (jit-libraries research, section 3: three warm-ups, 3, 2 and 0
serving-path compiles; mlacheck did not watch the fork). The program is tests/fixtures/programs/
tokenspeed_prefix_chunks.py: the published tokenspeed-kernel wrapper, compile monitor and chunking, driven by
DeepSeek-V3's prefix-chunk loop."""

import sys

import pytest

from tests.conftest import checked_triton
from tests.integration.cli import ROOT, run_cli
from tests.integration.published import cached_wheel, extracted_from, first_on_path

pytestmark = pytest.mark.network

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "tokenspeed_prefix_chunks.py")
KERNEL = "tokenspeed_triton:tokenspeed_mla.mla_kv_pack_quantize_fp8._mla_kv_pack_quantize_fp8_kernel"
MODULES = ("_triton.py", "compile_monitor.py", "platform.py", "registry.py", "signature.py", "ops/__init__.py")
KERNEL_FILES = tuple(f"tokenspeed_kernel/{name}" for name in MODULES) + (
    "tokenspeed_kernel/ops/attention/mla/tokenspeed_mla.py",
    "tokenspeed_kernel/ops/attention/gdn/_triton/",
)
# package __init__ files the program does not need (they import FlashInfer, DeepGEMM and every other op)
STUBS = tuple(f"tokenspeed_kernel/{path}__init__.py" for path in ("", "ops/attention/", "ops/attention/mla/"))
STUBS += ("tokenspeed_kernel/ops/attention/gdn/__init__.py",)
BUCKETS = {  # the serving chunks' block size and launch options (256, 1024 and 4608 tokens)
    "constexpr 1": "num_warps=1, num_stages=2, launch_pdl=True",
    "constexpr 4": "num_warps=2, num_stages=3, launch_pdl=True",
    "constexpr 16": "num_warps=4, num_stages=3, launch_pdl=True",
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """tokenspeed-kernel 0.1.4's modules the program imports, and tokenspeed 0.1.1's chunk.py, first on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("tokenspeed")
    extracted_from(folder / "kernel", cached_wheel("tokenspeed-kernel==0.1.4"), KERNEL_FILES, STUBS)
    extracted_from(
        folder / "engine",
        cached_wheel("tokenspeed==0.1.1"),
        ("tokenspeed/runtime/layers/attention/chunk.py",),
        ("tokenspeed/__init__.py",),
    )
    return {
        **first_on_path(folder / "kernel", folder / "engine", ROOT),
        "TRITON_CACHE_DIR": str(folder / "triton-cache"),
    }


def run(tmp_path, published, warmup, **env):
    return run_cli(
        "run", "--dry", "--compile", "skip", "--arch", "sm_100a", "--", sys.executable, PROGRAM, warmup,
        tmp_path=tmp_path, env_extra={**published, **env},
    )  # fmt: skip


@checked_triton("tokenspeed_triton")
@pytest.mark.parametrize(
    ("warmup", "warmed"),
    [("published", None), ("one-chunk", "constexpr 16"), ("every-bucket", "every")],
)
def test_each_prefix_chunk_bucket_the_start_up_never_packed_is_a_serving_path_compile_through_the_fork(
    tmp_path, published, warmup, warmed
):
    result = run(tmp_path, published, warmup)
    report = result.report
    assert report is not None and report["program"]["exit_code"] == 0, result.stdout + result.stderr
    assert report["internal_errors"] == [] and report["incomplete"] == [], report["incomplete"]
    [family] = [family for family in report["families"] if family["name"] == KERNEL]
    assert family["version"] == "3.9.10.post20261028" and len(family["variants"]) == 3  # one per bucket
    served = [f for f in report["findings"] if f["code"] == "MLA001"]
    assert all(f["family"] == KERNEL for f in served)
    assert all(f["site"].startswith("tokenspeed_mla/mla_kv_pack_quantize_fp8.py:") for f in served)
    expected = [block for block in BUCKETS if warmed not in (block, "every")]
    assert sorted(f["key"]["BLOCK_S"] for f in served) == sorted(expected)
    for finding in served:
        block = finding["key"]["BLOCK_S"]
        assert finding["key"]["options"] == BUCKETS[block]
        assert finding["key"]["ENABLE_PDL"] == "constexpr True"  # _with_pdl_default: pdl_enabled() on a B200
        if warmed is None:
            assert finding["diff"] == {}  # nothing of the kernel was precompiled
        else:
            assert finding["diff"] == {"BLOCK_S": [warmed, block], "options": [BUCKETS[warmed], BUCKETS[block]]}
    assert [f["code"] for f in report["findings"] if f["code"] != "MLA001"] == []
    assert (report["verdict"], result.code) == (("fail", 1) if expected else ("pass", 0))


def test_under_triton_s_interpreter_tokenspeed_s_kernels_are_named_never_an_internal_error(tmp_path, published):
    """TRITON_INTERPRET=1: the pack kernel and tokenspeed-kernel's autotuned GDN kernels, imported through the fork,
    are interpreted functions and autotuners over them: no internal error; the report says the fork ran interpreted."""
    result = run(tmp_path, published, "imports", TRITON_INTERPRET="1")
    report = result.report
    assert report is not None and report["program"]["exit_code"] == 0, result.stdout + result.stderr
    assert report["internal_errors"] == []
    assert [line.partition(":")[0] for line in report["not_checked"] if "interpreted" in line] == ["tokenspeed_triton"]
    assert not [family for family in report["families"] if family["name"].startswith("tokenspeed_triton:")]


def test_without_the_interpreter_the_same_imports_name_nothing_and_make_no_family(tmp_path, published):
    """The control of the test above: the same imports, compiled Triton, name no interpreted Triton; the fork's kernels
    and autotuners are watched, and those never launched make no family."""
    result = run(tmp_path, published, "imports")
    report = result.report
    assert report is not None and report["internal_errors"] == [], result.stdout + result.stderr
    assert not [line for line in report["not_checked"] if "interpreted" in line]
    assert not [family for family in report["families"] if family["name"].startswith("tokenspeed_triton:")]
