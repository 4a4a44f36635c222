"""The net under every CuTe DSL compile, on real `cute.compile` calls (sm_100a cross-compiled on the CPU): a kernel no
rule file watches is listed; compiled after serving starts, it is MLA007 with the earlier compile it differs from."""

import sys

from tests.integration.cli import ROOT, run_cli

PROGRAM = str(ROOT / "tests" / "fixtures" / "programs" / "cute_kernel.py")
ENV = {"CUTE_DSL_ARCH": "sm_100a"}


def test_an_unwatched_kernel_compiled_while_serving_fails_the_run_and_names_the_difference(tmp_path):
    result = run_cli(
        "run", "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM, "4", tmp_path=tmp_path, env_extra=ENV
    )
    assert result.code == 1, result.stdout + result.stderr
    assert "cute program done" in result.stdout
    [finding] = [f for f in result.report["findings"] if f["code"] == "MLA007"]
    assert finding["family"] == "unwatched:__main__.scaled" and finding["severity"] == "error"
    assert finding["diff"] == {"arg2": [2, 4]} and finding["key"] == {"arg1": 3, "arg2": 4}
    assert finding["site"].endswith("cute_kernel.py:20")
    phases = sorted(c["phase"] for c in result.report["unwatched_compiles"])
    assert phases == ["serving", "warmup"]  # the start-up compile came before the serving mark


def test_an_unwatched_kernel_compiled_in_start_up_only_is_listed_not_failed(tmp_path):
    result = run_cli(
        "run", "--run-dir", str(tmp_path / "run"), "--", sys.executable, PROGRAM, tmp_path=tmp_path, env_extra=ENV
    )
    assert result.code == 2, result.stdout + result.stderr  # no watched family was loaded: nothing was compared
    assert [f for f in result.report["findings"] if f["code"] == "MLA007"] == []
    [compiled] = result.report["unwatched_compiles"]
    assert (compiled["kernel"], compiled["phase"], compiled["net"]) == ("__main__.scaled", "warmup", "CuTe DSL")
    assert "unwatched compile: __main__.scaled (CuTe DSL), 1 in warmup" in result.stdout
