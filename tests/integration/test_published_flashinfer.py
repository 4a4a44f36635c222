"""FlashInfer's CuTe DSL MLA decode as SGLang 0.5.23 reaches it (trtllm_batch_decode_with_kv_cache_mla with
backend="cute-dsl"), its own dispatch code on the CPU under --dry (marker `network`: flashinfer-python 0.7.2, SGLang's
pin, comes from PyPI): capture at the longest context builds other split variants than eager decode at the batch's own
max_seq_len, and the diff says what those fields follow."""

import shutil
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli
from tests.integration.published import first_on_path, installed

pytestmark = pytest.mark.network

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "flashinfer_engine.py")
FLASHINFER = (
    "flashinfer-python==0.7.2",
    "requests",
    "tqdm",
    "nvidia-ml-py",
    "certifi",
    "idna",
    "urllib3",
    "charset-normalizer",
    "tabulate",
)
DECODE = "flashinfer.cute_dsl_mla_decode"
SPLIT_FIELDS = {"reducer_max_splits", "reducer_d_tiles", "is_workspace_size_zero"}


@pytest.fixture(scope="module")
def flashinfer(tmp_path_factory):
    return installed(tmp_path_factory.mktemp("flashinfer"), *FLASHINFER)


def test_eager_decode_at_real_lengths_compiles_split_variants_the_capture_never_built(tmp_path, flashinfer):
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in [*BUNDLED.glob("*.toml"), ROOT / "tests" / "fixtures" / "flashinfer_engine.toml"]:
        shutil.copy(path, rules)
    result = run_cli(
        "run",
        "--dry",
        "--compile",
        "skip",
        "--rules",
        str(rules),
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        PROGRAM,
        tmp_path=tmp_path,
        env_extra=first_on_path(flashinfer, ROOT),
    )
    assert result.code == 1, result.stdout + result.stderr
    assert "flashinfer engine done" in result.stdout
    [family] = [f for f in result.report["families"] if f["name"] == DECODE]
    assert family["version"] == "0.7.2" and family["dispatch_calls"] == 6
    captured = [v for v in family["variants"] if v["captured"]]
    # at max_seq_len = max_context_len: batches 1 and 2 split as far as 48 ways, batch 8 as 16
    assert sorted(v["key"]["reducer_max_splits"] for v in captured) == [16, 48]
    serving = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert len(serving) == 2  # batch 1 at 300 tokens, batch 2 at 5000 (batch 8 at 20000 hits a captured variant)
    for finding in serving:
        assert finding["family"] == DECODE and set(finding["diff"]) <= SPLIT_FIELDS
        assert finding["drivers"]["reducer_max_splits"] == ["batch size", "max_seq_len", "SM count"]
    assert {f["key"]["reducer_max_splits"] for f in serving} == {4, 32}
    assert result.report["incomplete"] == []


def test_sglang_as_published_replays_every_serving_batch_on_a_graph_captured_at_the_longest_context(
    tmp_path, flashinfer
):
    """--profile sglang (0.5.23): the default traffic (batches up to 160) replays the ladder's graphs up to 512."""
    result = run_cli(
        "run", "--profile", "sglang", "--compile", "skip", tmp_path=tmp_path, env_extra=first_on_path(flashinfer)
    )
    assert result.code == 0, result.stdout + result.stderr
    report = result.report
    assert report["findings"] == [] and report["incomplete"] == []
    assert report["scenario"]["kernels"] == ["decode"] and report["scenario"]["warmup"] is None
    [family] = report["families"]
    assert family["name"] == DECODE and family["dispatch_calls"] == 52 * 3  # 52 sizes: 2 eager forwards + 1 captured
    assert all(v["captured"] for v in family["variants"])
    assert report["scenario"]["replays"] == len(report["scenario"]["batch_sizes"])


def test_sglang_as_published_eager_decode_above_the_graphs_compiles_on_the_serving_path(tmp_path, flashinfer):
    """Above --cuda-graph-max-bs, SGLang 0.5.23 decodes eagerly at the batch's own seq_lens_cpu.max()
    (trtllm_mla_backend.py:833-834); the capture ran at max_context_len (:587)."""
    result = run_cli(
        "run",
        "--profile",
        "sglang",
        "--compile",
        "skip",
        "--cuda-graph-max-bs",
        "8",
        "--batch-sizes",
        "4,16",
        tmp_path=tmp_path,
        env_extra=first_on_path(flashinfer),
    )
    assert result.code == 1, result.stdout + result.stderr
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA001"]
    assert finding["family"] == DECODE and finding["diff"] == {"reducer_max_splits": [16, 4]}
    assert result.report["scenario"]["eager_batch_sizes"] == [16]


def test_sglang_as_published_has_no_jit_prefill_to_check(tmp_path, flashinfer):
    result = run_cli("run", "--profile", "sglang", "--kernel", "prefill", env_extra=first_on_path(flashinfer))
    assert result.code == 2 and result.stderr.count("\n") == 1
    assert "precompiled kernels" in result.stderr and "Traceback" not in result.stderr
