"""FlashInfer's nvcc JIT modules, SGLang's JIT modules and TileLang's kernels (issue 28 item 4), built through the
published libraries' own code on the CPU (marker `network`: flashinfer-python 0.7.2, sglang 0.5.23 and tilelang 0.1.15
come from PyPI), nvcc's work done by a stand-in ninja (TileLang: a stand-in lowering): a build on the serving path is
MLA007 naming the module and its seconds; one in the warm-up is listed, not failed; a module the warm-up built is not
built again."""

import os
import shutil
import sys

import pytest

from mlacheck.rulefiles import BUNDLED
from tests.integration.cli import ROOT, run_cli
from tests.integration.published import first_on_path, installed

pytestmark = pytest.mark.network

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "jit_builds.py")
TILELANG_PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "tilelang_kernels.py")
# tilelang 0.1.15 with what it imports (its own pins: apache-tvm-ffi <0.1.13, z3-solver <4.15.5), first on the path
TILELANG = ("tilelang==0.1.15", "apache-tvm-ffi==0.1.12", "z3-solver==4.15.4.0", "ml-dtypes", "cloudpickle", "psutil",
            "tqdm", "typing-extensions")  # fmt: skip
STAND_IN_BIN = str(ROOT / "tests" / "fixtures" / "stand_in_bin")
FLASHINFER = ("flashinfer-python==0.7.2", "nvidia-ml-py", "tabulate", "tqdm", "requests", "certifi", "idna", "urllib3",
              "charset-normalizer", "filelock")  # fmt: skip
# sglang 0.5.23's import chain to kernels/jit (srt/utils/common.py and srt/environ.py), pure Python where it matters
SGLANG = ("sglang==0.5.23", "orjson", "psutil", "pybase64", "pillow", "starlette", "anyio", "msgspec", "pyzmq",
          "ipython", "traitlets", "aiohttp", "multidict", "yarl", "propcache", "aiohappyeyeballs", "aiosignal",
          "frozenlist", "sniffio", "idna", "typing-extensions", "requests", "certifi", "urllib3",
          "charset-normalizer", "tqdm")  # fmt: skip


@pytest.fixture(scope="module")
def flashinfer(tmp_path_factory):
    return installed(tmp_path_factory.mktemp("flashinfer"), *FLASHINFER)


@pytest.fixture(scope="module")
def sglang(tmp_path_factory):
    return installed(tmp_path_factory.mktemp("sglang"), *SGLANG)


@pytest.fixture(scope="module")
def tilelang(tmp_path_factory):
    return installed(tmp_path_factory.mktemp("tilelang"), *TILELANG)


def run(tmp_path, site, library, warm, serve, program=PROGRAM):
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in [*BUNDLED.glob("*.toml"), ROOT / "tests" / "fixtures" / "jit_builds.toml"]:
        shutil.copy(path, rules)
    env = {
        **first_on_path(site),
        "PATH": os.pathsep.join([STAND_IN_BIN, os.environ.get("PATH", "")]),
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "flashinfer"),
        "SGLANG_CACHE_DIR": str(tmp_path / "sglang"),
        "HOME": str(tmp_path),
    }
    arguments = (library,) if library else ()
    result = run_cli(
        "run", "--dry", "--rules", str(rules), "--run-dir", str(tmp_path / "run"), "--", sys.executable, program,
        *arguments, ",".join(warm), ",".join(serve), tmp_path=tmp_path, env_extra=env,
    )  # fmt: skip
    assert " done" in result.stdout, result.stdout + result.stderr
    return result


def builds(result):
    return sorted((c["net"], c["kernel"], c["phase"]) for c in result.report["unwatched_compiles"])


def test_a_flashinfer_module_built_while_serving_is_mla007_naming_it(tmp_path, flashinfer):
    result = run(tmp_path, flashinfer, "flashinfer", ["norm"], ["norm", "act"])
    assert result.code == 1, result.stdout
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA007"]
    assert finding["family"] == "unwatched:silu_and_mul"  # the module's name (its URI)
    assert finding["site"].endswith("jit_builds.py:30")  # the getter's call, not FlashInfer's own frames
    assert "FlashInfer JIT (nvcc)" in finding["message"] and "0.0 s" not in finding["summary"]
    assert builds(result) == [
        ("FlashInfer JIT (nvcc)", "norm", "warmup"),
        ("FlashInfer JIT (nvcc)", "silu_and_mul", "serving"),
    ]


def test_flashinfer_modules_built_in_the_warmup_only_are_listed_not_failed(tmp_path, flashinfer):
    result = run(tmp_path, flashinfer, "flashinfer", ["norm", "act"], ["norm", "act"])
    assert [f for f in result.report["findings"] if f["code"] == "MLA007"] == []
    assert [phase for _, _, phase in builds(result)] == ["warmup", "warmup"]  # the getters' cache served the rest


def test_an_sglang_jit_module_built_while_serving_is_mla007_naming_it(tmp_path, sglang):
    result = run(tmp_path, sglang, "sglang", ["128"], ["128", "256"])
    assert result.code == 1, result.stdout
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA007"]
    assert "nvfp4_store_kv_index_256" in finding["family"] and "SGLang JIT" in finding["message"]
    assert [(kernel.rsplit("_", 2)[-2], phase) for _, kernel, phase in builds(result)] == [
        ("128", "warmup"),
        ("256", "serving"),
    ]


def test_sglang_jit_modules_built_before_serving_start_are_listed_not_failed(tmp_path, sglang):
    result = run(tmp_path, sglang, "sglang", ["64", "128"], ["64", "128"])
    assert [f for f in result.report["findings"] if f["code"] == "MLA007"] == []
    assert [phase for _, _, phase in builds(result)] == ["warmup", "warmup"]


def test_a_tilelang_kernel_compiled_while_serving_is_mla007_with_the_argument_that_differs(tmp_path, tilelang):
    result = run(tmp_path, tilelang, "", ["1024"], ["1024", "4096"], program=TILELANG_PROGRAM)
    assert result.code == 1, result.stdout
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA007"]
    assert finding["family"] == "unwatched:__main__.add_one" and "TileLang" in finding["message"]
    assert finding["diff"] == {"arg1": [1024, 4096]}  # the kernel's N: TileLang's _kernel_cache missed on it
    assert [phase for _, _, phase in builds(result)] == ["serving", "warmup"]
